"""The study's README says which verdicts changed since the previous write-up (e.g. under a new default attack)."""

from __future__ import annotations

import json

from robustbench_filters.study.changes import changes_since, previous_claims, verdict_changes


class _Claim:
    def __init__(self, cid: str, verdict: str, evidence: str, primary: bool = True) -> None:
        self.d = {"id": cid, "claim": f"claim {cid}", "scope": "vision", "evidence": evidence, "primary": primary,
                  "verdict": verdict}  # fmt: skip

    def to_dict(self) -> dict:
        return self.d


def test_changed_verdicts_are_listed_with_the_evidence_that_moved(tmp_path) -> None:
    old = [_Claim("a", "supported", "under autoattack-fast").d, _Claim("b", "inconclusive", "under x").d]
    (tmp_path / "results.json").write_text(json.dumps({"claims": old}))
    new = [_Claim("a", "inconclusive at this scale", "under apgd-adaptive"), _Claim("b", "inconclusive", "under x")]
    lines = verdict_changes(previous_claims(tmp_path / "results.json"), new)
    text = "\n".join(lines)
    assert "1 of 2 verdicts changed" in text and "(a) claim a" in text
    assert "supported -> inconclusive at this scale" in text and "was: under autoattack-fast" in text
    assert "(b)" not in text


def test_no_previous_write_up_no_section_and_none_changed_says_so(tmp_path) -> None:
    assert verdict_changes(previous_claims(tmp_path / "missing.json"), [_Claim("a", "supported", "e")]) == []
    same = verdict_changes([_Claim("a", "supported", "e").d], [_Claim("a", "supported", "e")])
    assert any(line.startswith("None: all 1 verdicts") for line in same)


def test_a_redraw_of_the_same_claims_keeps_the_list_the_measurement_made(tmp_path) -> None:
    """`robfilt study --write-up` compares the claims with themselves; it must not erase what the run changed."""
    path = tmp_path / "results.json"
    old = [_Claim("a", "supported", "under autoattack-fast").d]
    path.write_text(json.dumps({"claims": old}))
    new = [_Claim("a", "inconclusive at this scale", "under apgd-adaptive")]
    stored = [c.to_dict() for c in new]
    lines = changes_since(path, new, stored)
    assert "1 of 1 verdicts changed:" in lines
    path.write_text(json.dumps({"claims": stored, "verdict_changes": lines}))  # what the write-up stores
    assert changes_since(path, new, stored) == lines  # a redraw: same claims, same list
    moved = [_Claim("a", "supported", "under apgd-adaptive")]  # a new measurement: compared afresh
    assert any("inconclusive at this scale -> supported" in line for line in changes_since(path, moved, []))
    path.write_text(json.dumps({"claims": stored}))  # a write-up from before the list was stored
    assert any(line.startswith("None: all 1 verdicts") for line in changes_since(path, new, stored))
