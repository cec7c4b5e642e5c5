"""Cross-run integrity: run folders combined into one report, gate or study must be what they claim to be.

Each folder verifies on its own (:func:`.folder.verify_run`: hashes, and a manifest whose recorded inputs hash to
its fingerprint). Combined, they must also agree with each other. The runner records what identifies a run
(``manifest["config"]``): a digest of every model's weights (``weights``, per label) and of the examples it
selected (``examples``: per selection the hash of the ids and of the examples' contents). The checks here read
those records:

- no two folders hold the same run (one fingerprint and the same rows; in a study byte-identical rows alone): a
  copy counts one measurement twice;
- one model name means one model: runs compared on the same examples give a label one weights digest;
- two names compared with each other are two models: distinct labels with one weights digest compare a model with
  itself (a paired difference of exactly zero that claims to be a comparison).

Each refusal is one line naming the folder (:class:`~robustbench_filters.core.errors.RunStateError`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..core.errors import RunStateError
from ..summaries import SEQLEN
from .folder import Run


def weights_of(run: Run) -> dict[str, str]:
    """label -> weights digest, as the runner recorded it (empty for runs without models, e.g. a layer study)."""
    weights = (run.manifest.get("config") or {}).get("weights") or {}
    return {str(k): str(v) for k, v in weights.items()} if isinstance(weights, Mapping) else {}


def selections_of(run: Run) -> frozenset[tuple[str, str]]:
    """The distinct (ids digest, data digest) pairs of every example selection the runner recorded."""
    selections = (run.manifest.get("config") or {}).get("examples") or {}
    if not isinstance(selections, Mapping):
        return frozenset()
    out = set()
    for value in selections.values():
        if isinstance(value, Mapping):
            out.add((str(value.get("ids")), str(value.get("data"))))
        else:
            out.add((json.dumps(value, sort_keys=True, default=str), ""))
    return frozenset(out)


KEY_FIELDS = ("data", "data_checksum", "example_ids_sha256")
FALLBACK_KEY_FIELDS = ("data", "n_examples", "seed", "seq_len")


def example_key(run: Run) -> tuple[Any, ...] | None:
    """What identifies the examples a run measured; None when it measured no dataset examples (a layer study).

    The runner's record of the selected examples (the hash of their ids and of their contents) decides when the
    run has one, so two runs of one data name, n and seed on different data are never paired; else the data
    checksum and ids hash, else (data, n_examples, seed, seq_len)."""
    if run.kind == SEQLEN:
        return None
    config = run.manifest.get("config", {})
    selections = selections_of(run)
    if selections:
        return (config.get("data"), config.get("data_checksum"), tuple(sorted(selections)))
    if config.get("data_checksum") or config.get("example_ids_sha256"):
        return tuple(config.get(k) for k in KEY_FIELDS)
    seed = config.get("seed", run.manifest.get("seed"))
    return tuple(config.get(k) if k != "seed" else seed for k in FALLBACK_KEY_FIELDS)


def refuse_copies(runs: Sequence[Run], *, rows: bool = False) -> None:
    """Two folders holding one run (the same fingerprint and the same rows: a copy) are refused; with ``rows``
    the same rows alone suffice, which also catches a copy whose manifest was re-signed. Use ``rows`` where runs
    must be independent measurements (a study's seeds)."""
    seen: dict[tuple[str, ...], Run] = {}
    for run in runs:
        fp, rows_sha = run.manifest.get("fingerprint"), run.manifest.get("rows_sha256")
        keys = [("run", str(fp), str(rows_sha))] + ([("rows", str(rows_sha))] if rows and rows_sha else [])
        for key in keys:
            if key in seen:
                first = seen[key]
                what = f"fingerprint {fp}" if key[0] == "run" else f"rows sha256 {str(rows_sha)[:16]}"
                raise RunStateError(
                    f"run folder {run.path} holds the same run as {first.path} (a copy: {what}); combined, every "
                    "measurement would count twice: pass each run once."
                )
            seen[key] = run


def refuse_label_conflicts(runs: Iterable[Run], what: str = "runs compared on the same examples") -> None:
    """In ``runs`` (compared with each other), one label has one weights digest and one digest one label."""
    owner: dict[str, tuple[str, Run]] = {}  # label -> (digest, first run)
    by_digest: dict[str, tuple[str, Run]] = {}  # digest -> (label, first run)
    for run in runs:
        for label, digest in weights_of(run).items():
            if label in owner and owner[label][0] != digest:
                first = owner[label][1]
                raise RunStateError(
                    f"model {label!r} has other weights in {run.path} than in {first.path} ({what}); one name must "
                    "mean one model: rename one of them (name=ref) or compare runs of the same checkpoint."
                )
            owner.setdefault(label, (digest, run))
            if digest in by_digest and by_digest[digest][0] != label:
                other, first = by_digest[digest]
                where = str(run.path) if first is run else f"{first.path} and {run.path}"
                raise RunStateError(
                    f"models {other!r} and {label!r} have identical weights (digest {digest}) in {where}; a "
                    "comparison of a model with itself measures nothing: check which checkpoint each name loads."
                )
            by_digest.setdefault(digest, (label, run))


__all__ = [
    "FALLBACK_KEY_FIELDS",
    "KEY_FIELDS",
    "example_key",
    "refuse_copies",
    "refuse_label_conflicts",
    "selections_of",
    "weights_of",
]
