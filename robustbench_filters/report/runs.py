"""Reading run folders for reports: what each run measured, on which examples, as one row table per family.

A run's family (image | lm | lipschitz | seqlen | certify) is what its manifest records (``Run.family``, from the
run's kind and, for attack runs, its family). Reports compare models row by row (paired tests), so two runs may
only share a table when they were made on the same examples, and they must be what they claim
(:mod:`..runs.crosscheck`): no run twice, one model per name, no model compared with itself under two names. Each
run gets an *example key* (:func:`..runs.crosscheck.example_key`). Runs of one family with different keys are
refused unless the caller allows mixing; then rows keep an ``example_set`` column so paired statistics only ever
pair rows of the same set.

The sequence-length study (:func:`robustbench_filters.lipschitz.seqlen_run.sequence_length_run`) is not a
per-example measurement; the runner writes it as a run folder of kind ``seqlen`` like any other run, and this module
only reads it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from ..core.errors import RobfiltError
from ..runs.crosscheck import KEY_FIELDS, example_key, refuse_copies, refuse_label_conflicts, selections_of
from ..runs.folder import Run, load_run

log = logging.getLogger(__name__)


def _describe_difference(a: Run, b: Run) -> str:
    ca, cb = a.manifest.get("config", {}), b.manifest.get("config", {})
    for name in (*KEY_FIELDS, "n_examples", "seed", "seq_len"):
        va = ca.get(name, a.manifest.get(name) if name == "seed" else None)
        vb = cb.get(name, b.manifest.get(name) if name == "seed" else None)
        if va != vb:
            return f"{name.replace('_', ' ')} {va!s:.16} vs {vb!s:.16}"
    if selections_of(a) != selections_of(b):
        return "the selected examples' ids or contents differ"
    return "different example sets"


@dataclass
class RunSet:
    """Loaded runs grouped by family, with merged rows per family (``run`` and ``example_set`` columns added)."""

    runs: list[Run]
    families: dict[str, list[Run]] = field(default_factory=dict)
    rows: dict[str, pd.DataFrame] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    mixed: bool = False

    def ids(self, family: str | None = None) -> list[str]:
        runs = self.runs if family is None else self.families.get(family, [])
        return [r.run_id for r in runs]


def load_runs(run_dirs: Sequence[str | Path], allow_mixed: bool = False) -> RunSet:
    """Load and group runs; refuse runs of one family made on different examples unless ``allow_mixed``."""
    if not run_dirs:
        raise RobfiltError("no run folder given; pass one or more folders written by robfilt attack/lipschitz.")
    seen: set[Path] = set()
    runs: list[Run] = []
    for d in run_dirs:
        path = Path(d).resolve()
        if path in seen:
            raise RobfiltError(f"run folder {d} is listed twice; list each once.")
        seen.add(path)
        runs.append(load_run(d))
    refuse_copies(runs)
    out = RunSet(runs=runs)
    for run in runs:
        out.families.setdefault(run.family, []).append(run)
    for fam, group in out.families.items():
        keys = [example_key(r) for r in group]
        for key in dict.fromkeys(keys):  # runs on the same examples are compared model by model
            refuse_label_conflicts([r for r, k in zip(group, keys, strict=True) if k == key], f"{fam} runs")
        if len(set(keys)) > 1:
            first = group[0]
            other = next(r for r, k in zip(group, keys, strict=True) if k != keys[0])
            what = _describe_difference(first, other)
            if not allow_mixed:
                raise RobfiltError(
                    f"runs {first.path} and {other.path} were made on different examples ({what}); "
                    "re-run them on the same data and seed, or pass --allow-mixed (no paired tests across them)."
                )
            out.mixed = True
            out.notes.append(
                f"{fam} runs were made on different examples ({what}); paired tests only compare models of the "
                "same example set."
            )
        out.rows[fam] = _merge(group, keys, out.notes)
    return out


def _merge(group: list[Run], keys: list[tuple | None], notes: list[str]) -> pd.DataFrame:
    """Concatenate rows of one family; the same model in two example sets is renamed 'model [run]'."""
    set_ids = {k: i for i, k in enumerate(dict.fromkeys(keys))}
    owner: dict[str, tuple[Any, str]] = {}  # model -> (example key, run name)
    frames = []
    for run, key in zip(group, keys, strict=True):
        rows = run.rows.copy()
        rows["run"] = run.run_id
        rows["example_set"] = set_ids[key]
        if "model" in rows.columns:
            rename = {}
            for model in pd.unique(rows["model"]):
                if model in owner and owner[model][0] != key:
                    rename[model] = f"{model} [{run.path.name}]"
                else:
                    owner.setdefault(model, (key, run.path.name))
            if rename:
                rows["model"] = rows["model"].replace(rename)
        frames.append(rows)
    merged = pd.concat(frames, ignore_index=True)
    # "kind" is not part of a measurement's identity: the clean rows of an attack run ("adversarial"/"clean") and
    # of a corruption run ("clean") on the same examples are the same measurement and must count once.
    if "example_id" in merged.columns:
        ident = [
            c
            for c in ("model", "example_id", "attack", "eps", "layer", "rho", "sigma", "radius")
            if c in merged.columns
        ]
    else:  # the sequence-length study: one row per (n, kind)
        ident = [c for c in ("n", "kind") if c in merged.columns]
    if ident:
        dup = merged.duplicated(ident, keep="first")
        if dup.any():
            clash = merged[dup]
            measured = clash[clash["attack"] != "clean"] if "attack" in clash.columns else clash
            if len(measured):
                first = measured.iloc[0]
                notes.append(
                    f"{len(measured)} measurements (e.g. {first.get('model')} {first.get('attack', '')}) appear in "
                    "more than one run; the first run's rows are used."
                )
            merged = merged[~dup].reset_index(drop=True)
    return merged
