"""Which verdicts changed since the previous write-up, and why the evidence moved.

A study is re-run when what it measures with changes: a retrained zoo, or a new default attack (issue 32 replaced
``autoattack-fast`` by ``apgd-adaptive``, which judges the vision robustness claims). A reader of the new README
must see which verdicts moved, not rediscover it: the write-up reads the ``results.json`` it is about to replace
and lists every claim whose verdict changed, with the evidence before and after when that changed too.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .claims import ClaimResult


def previous_claims(path: Path) -> list[dict[str, Any]] | None:
    """The claims of the write-up in ``path`` (a ``results.json``), None when there is none or it is unreadable."""
    try:
        claims = json.loads(path.read_text()).get("claims")
    except (OSError, ValueError, AttributeError):
        return None
    return claims if isinstance(claims, list) else None


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
