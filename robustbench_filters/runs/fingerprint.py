"""A run's identity: the fingerprint of everything its rows depend on, and what differs between two runs.

Equal fingerprints compute equal rows, so a resumed run, a cross-run comparison and a verifier all decide "same run"
by this one hash, and say in words what changed when it differs (:func:`describe_change`)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from ..core import io as _io


def _jsonable(obj: Any) -> Any:
    try:
        return _io._json_default(obj)
    except TypeError:
        return str(obj)


def fingerprint(config: dict[str, Any]) -> str:
    """A stable hash of everything a run's rows depend on: equal fingerprints compute equal rows.

    The config is hashed as the manifest stores it (JSON), so a reader can recompute the fingerprint from a
    manifest and notice an edited seed, weights digest or example record (:func:`verify_run`)."""
    normal = json.loads(json.dumps(config, default=_jsonable))
    blob = json.dumps(normal, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def manifest_fingerprint(manifest: dict[str, Any]) -> str:
    """The fingerprint a manifest's recorded kind, seed and config hash to (what the writer recorded)."""
    return fingerprint({"kind": manifest.get("kind"), "seed": manifest.get("seed"), **(manifest.get("config") or {})})


def describe_change(old: dict[str, Any], new: dict[str, Any]) -> str:
    """What differs between two runs' recorded inputs, in words (weights and data by name)."""
    if old.get("kind") != new.get("kind"):
        return f"a {old.get('kind')!r} run, not {new.get('kind')!r}"
    if old.get("seed") != new.get("seed"):
        return f"seed {old.get('seed')} vs {new.get('seed')}"
    oc, nc = old.get("config", {}), new.get("config", {})
    ow, nw = oc.get("weights", {}) or {}, nc.get("weights", {}) or {}
    changed = [m for m in nw if m in ow and ow[m] != nw[m]]
    if changed:
        return f"the weights of {changed[0]} changed"
    if oc.get("examples") != nc.get("examples"):
        return "the selected data changed"
    for key in sorted(set(oc) | set(nc)):
        if key not in ("weights", "examples") and oc.get(key) != nc.get(key):
            return f"{key} {json.dumps(oc.get(key), default=str)[:40]} vs {json.dumps(nc.get(key), default=str)[:40]}"
    return "other settings"
