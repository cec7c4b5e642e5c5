"""Which verdicts changed since the previous write-up, and why the evidence moved.

A study is re-run when what it measures with changes: a retrained zoo, or a new default attack (issue 32 replaced
``autoattack-fast`` by ``apgd-adaptive``, which judges the vision robustness claims). A reader of the new README
must see which verdicts moved, not rediscover it: the write-up reads the ``results.json`` it is about to replace
and lists every claim whose verdict changed, with the evidence before and after when that changed too.

The list is stored in ``results.json`` as well, because a redraw (``robfilt study --write-up``, ``make reports``)
replaces a write-up by one with the very same claims: compared with itself it would say "none changed" and erase
the record of what the measurement that made it changed. When the claims are identical, the stored list is kept.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .claims import ClaimResult


def _previous(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def previous_claims(path: Path) -> list[dict[str, Any]] | None:
    """The claims of the write-up in ``path`` (a ``results.json``), None when there is none or it is unreadable."""
    claims = _previous(path).get("claims")
    return claims if isinstance(claims, list) else None


def changes_since(path: Path, claims: list[ClaimResult], as_stored: list[dict[str, Any]]) -> list[str]:
    """The README's section on changed verdicts, for a write-up about to replace the one in ``path``.

    ``as_stored``: the claims exactly as the new ``results.json`` will hold them (JSON values). A redraw of the same
    claims keeps the list the previous write-up stored (its ``verdict_changes``), so the measurement's record of what
    changed survives any number of redraws; other claims are compared afresh."""
    previous = _previous(path)
    stored = previous.get("verdict_changes")
    same = previous.get("claims") == as_stored
    if same and isinstance(stored, list) and all(isinstance(line, str) for line in stored):
        return stored
    return verdict_changes(previous_claims(path), claims)


def _key(claim: dict[str, Any]) -> tuple[str, str, bool]:
    return str(claim.get("id")), str(claim.get("scope")), bool(claim.get("primary"))


def verdict_changes(previous: list[dict[str, Any]] | None, claims: list[ClaimResult]) -> list[str]:
    """Markdown lines for the README: every claim whose verdict differs from the previous write-up's."""
    if previous is None:
        return []
    before = {_key(c): c for c in previous if isinstance(c, dict)}
    lines = []
    for claim in (c.to_dict() for c in claims):
        old = before.get(_key(claim))
        if old is None or old.get("verdict") == claim["verdict"]:
            continue
        kind = "primary" if claim["primary"] else "secondary"
        line = (
            f"- ({claim['id']}) {claim['claim']} [{claim['scope']}, {kind}]: {old.get('verdict')} -> {claim['verdict']}"
        )
        if old.get("evidence") != claim["evidence"]:
            line += f" (evidence was: {old.get('evidence')}; now: {claim['evidence']})"
        lines.append(line)
    head = "## Verdicts that changed since the previous write-up"
    if not lines:
        return [head, "", f"None: all {len(claims)} verdicts are as the previous write-up gave them.", ""]
    return [head, "", f"{len(lines)} of {len(claims)} verdicts changed:", "", *lines, ""]
