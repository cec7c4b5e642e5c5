"""Summaries for the run folders tests write directly (their rows through ``RunWriter``).

``RunWriter.finish`` writes a summary only through its typed summary (robustbench_filters.summaries), so a test's
folder must carry what a measurement of its kind writes. Where the library's summariser works on the test's rows
(image attacks, Lipschitz, certify) the aggregates are computed from them; a language-model summary has none
(its summariser needs every column an attack writes). Reports and gates recompute their numbers from the rows
either way; what they read from a summary is its sanity checks.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import pandas as pd

from robustbench_filters.lipschitz.summary import summarize as lipschitz_summarize
from robustbench_filters.smoothing.rows import accuracy_curve
from robustbench_filters.smoothing.rows import summarize as certify_summarize
from robustbench_filters.smoothing.run import _by_model, _records
from robustbench_filters.stats.aggregates import attack_accuracies
from robustbench_filters.stats.intervals import max_certifiable_radius
from robustbench_filters.summaries import (
    CertifySummary,
    ImageAttackSummary,
    LipschitzSummary,
    LMAttackSummary,
    Summary,
)
from robustbench_filters.summaries.base import VERSION


def typed(cls: type[Summary], doc: dict[str, Any]) -> Summary:
    """The typed summary of ``doc`` laid out as a measurement writes it (every key but the two the writer adds)."""
    return cls.from_dict({"format_version": VERSION, "fingerprint": "", **doc}, f"the {cls.__name__}")


def checks_part(checks: Iterable[dict[str, str]] = ()) -> dict[str, Any]:
    """``checks`` and ``checks_summary`` as every measurement writes them."""
    checks = list(checks)
    counts = {s: sum(c["status"] == s for c in checks) for s in ("pass", "warn", "fail")}
    return {"checks": checks, "checks_summary": {"passed": counts["fail"] == 0, **counts}}


def image_summary(rows: pd.DataFrame, checks: Iterable[dict[str, str]] = ()) -> ImageAttackSummary:
    return typed(ImageAttackSummary, image_summary_doc(rows, checks))


def image_summary_doc(rows: pd.DataFrame, checks: Iterable[dict[str, str]] = ()) -> dict[str, Any]:
    """The image attack summary as a document (what ``summary.json`` holds, less the writer's two keys)."""
    attacked = rows[rows["attack"] != "clean"]
    return {
        "kind": "attack",
        "family": "image",
        "data": "fashion-mnist",
        "n_examples": int(rows["example_id"].nunique()),
        "seed": 0,
        "attacks": list(dict.fromkeys(attacked["attack"])),
        "eps": sorted({float(e) for e in attacked["eps"]}),
        "norm": "linf",
        "steps": None,
        "step_size": None,
        "models": {label: res.to_dict() for label, res in attack_accuracies(rows).items()},
        **checks_part(checks),
    }


def lm_summary(checks: Iterable[dict[str, str]] = ()) -> LMAttackSummary:
    return typed(
        LMAttackSummary,
        {
            "kind": "attack",
            "family": "lm",
            "data": "austen",
            "n_examples": 0,
            "seed": 0,
            "attacks": [],
            "eps": [],
            "rates": [],
            "norm": "l2",
            "eps_mode": "relative",
            "eps_scale": {},
            "eps_scale_definition": "",
            "steps": 20,
            "step_size": None,
            "seq_chars": 0,
            "replacement": "",
            "models": {},
            **checks_part(checks),
        },
    )


def lipschitz_summary(rows: pd.DataFrame, checks: Iterable[dict[str, str]] = ()) -> LipschitzSummary:
    return typed(LipschitzSummary, {**lipschitz_summarize(rows).to_dict(), **checks_part(checks)})


def certify_summary(
    rows: pd.DataFrame, radii: Sequence[float] = (), checks: Iterable[dict[str, str]] = ()
) -> CertifySummary:
    """Certified accuracy at ``radii`` when the rows carry the draws' settings (n0, n, alpha), else none."""
    certs = rows[rows["kind"] == "certificate"]
    sigmas = sorted({float(s) for s in certs["sigma"]})
    full = {"n0", "n", "alpha"} <= set(certs.columns)
    n0, n, alpha = (int(certs["n0"].iloc[0]), int(certs["n"].iloc[0]), float(certs["alpha"].iloc[0])) if full else (
        100, 1000, 0.001)  # fmt: skip
    return typed(
        CertifySummary,
        {
            "kind": "certify",
            "family": "image",
            "data": "fashion-mnist",
            "n_examples": int(certs["example_id"].nunique()),
            "seed": 0,
            "sigmas": sigmas,
            "n0": n0,
            "n": n,
            "alpha": alpha,
            "max_certifiable_radius": {f"{s:g}": max_certifiable_radius(s, n, alpha) for s in sigmas},
            "models": {
                m: {k: v.to_dict() for k, v in by.items()}
                for m, by in _by_model(certify_summarize(certs, radii)).items()
            }
            if full
            else {},
            "curve": _records(accuracy_curve(certs)) if full else [],
            "empirical_l2": [],
            **checks_part(checks),
        },
    )


def summary_for(kind: str, family: str | None, rows: pd.DataFrame, checks: Iterable[dict[str, str]] = ()) -> Summary:
    """The summary of an attack (image or lm), Lipschitz or certify run of ``rows``."""
    if kind == "lipschitz":
        return lipschitz_summary(rows, checks)
    if kind == "certify":
        return certify_summary(rows, (), checks)
    return image_summary(rows, checks) if family == "image" else lm_summary(checks)
