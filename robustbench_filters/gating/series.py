"""Per-example outcomes of one (model, condition), and pairing two runs' outcomes by example id.

Certify runs give one binary series per (model, sigma, radius): is each example's true class certified within the
radius (:func:`certified_series`)? Verified runs one per (model, eps): was each example verified there
(:func:`verified_series`)? Both pair like accuracies.

A paired test is only valid when both runs measured the very same examples. Two checks guard that:

1. the recorded identity of the examples must agree on every key both runs recorded: the data set, its
   checksum and the hash of the selected ids (image, LM and corruption configs), and ``examples_digest``, one
   digest of every selection the runner recorded in the manifest (``config["examples"]``: per selection the
   hash of its ids and a digest of the selected examples' contents), so two runs pair only when they saw the
   same inputs;
2. each (model, condition) series must hold the same set of example ids in both runs.

Either mismatch is refused with one line (:class:`~robustbench_filters.core.errors.RobfiltError`): comparing
different examples "paired" would report differences between examples as differences between models.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from ..core.errors import RobfiltError
from ..runs.folder import Run
from ..stats.paired import PairedBinary, PairedRatio
from ..summaries import CERTIFY, VERIFIED
from .conditions import VERIFIED_CONDITION, certified_condition, condition, parse_condition, same_eps
from .metrics import certificate_rows, certified_outcomes, run_radii, verified_outcomes

# manifest keys (top level or under "config") that identify the examples a run measured
IDENTITY_KEYS: tuple[str, ...] = ("data", "data_checksum", "example_ids_sha256", "examples_digest")
SeriesKey = tuple[str, str]  # (model, condition), condition as in Metric: "clean", "pgd@0.01", ...


@dataclass(frozen=True)
class BinarySeries:
    """Classifier outcomes: ``correct[i]`` for example ``ids[i]`` (ids sorted ascending)."""

    ids: np.ndarray
    correct: np.ndarray

    @property
    def n(self) -> int:
        return len(self.ids)


@dataclass(frozen=True)
class RatioSeries:
    """Language-model outcomes per sequence: summed nll, token count and correct next-token predictions."""

    ids: np.ndarray
    nll_sum: np.ndarray
    n_tokens: np.ndarray
    correct_tokens: np.ndarray | None = None

    @property
    def n(self) -> int:
        return len(self.ids)


Series = BinarySeries | RatioSeries


def _series(group: pd.DataFrame) -> Series:
    group = group.sort_values("example_id", kind="stable")
    ids = group["example_id"].to_numpy(np.int64)
    if "nll_sum" in group.columns:
        correct = group["correct_tokens"].to_numpy(np.float64) if "correct_tokens" in group.columns else None
        return RatioSeries(ids, group["nll_sum"].to_numpy(np.float64), group["n_tokens"].to_numpy(np.float64), correct)
    return BinarySeries(ids, group["correct"].to_numpy(bool))


def series_from_rows(rows: pd.DataFrame) -> dict[SeriesKey, Series]:
    """Every (model, condition) of an image or LM run's rows, keyed like :class:`~.metrics.Metric`.

    A measurement that appears twice (the clean rows of an attack run and of a corruption run) counts once,
    the first one kept, as in the reports. Rows without example ids (Lipschitz, sequence-length) give nothing.
    """
    if rows.empty or not {"model", "example_id", "attack", "eps"} <= set(rows.columns):
        return {}
    if "correct" not in rows.columns and "nll_sum" not in rows.columns:
        return {}
    rows = rows.drop_duplicates(["model", "attack", "eps", "example_id"], keep="first")
    out: dict[SeriesKey, Series] = {}
    for (model, attack, eps), group in rows.groupby(["model", "attack", "eps"], sort=True):
        out[(str(model), condition(str(attack), float(eps)))] = _series(group)
    return out


def certified_series(rows: pd.DataFrame, radii: Sequence[float]) -> dict[SeriesKey, Series]:
    """A certify run's outcomes: per (model, sigma, radius), is each example's true class certified within the
    radius (keyed ``certified:sigma<s>@<r>``, like the metric)? Paired tests on these are McNemar's, as for
    accuracy: the same examples, certified in one run and not in the other."""
    certs = certificate_rows(rows)
    if certs.empty or not {"model", "example_id", "sigma", "certified_correct_radius"} <= set(certs.columns):
        return {}
    out: dict[SeriesKey, Series] = {}
    for (model, sigma), group in certs.groupby(["model", "sigma"], sort=True):
        group = group.sort_values("example_id", kind="stable")
        ids = group["example_id"].to_numpy(np.int64)
        for r in radii:
            correct = certified_outcomes(group, float(r)).to_numpy(bool)
            out[(str(model), certified_condition(float(sigma), float(r)))] = BinarySeries(ids, correct)
    return out


def verified_series(rows: pd.DataFrame) -> dict[SeriesKey, Series]:
    """A verified run's outcomes: per (model, eps), was each example verified (keyed ``verified@<eps>``, like the
    metric)? Paired tests on these are McNemar's, as for accuracy."""
    return {
        (model, condition(VERIFIED_CONDITION, eps)): BinarySeries(
            g["example_id"].to_numpy(np.int64), g["verified"].to_numpy(bool)
        )
        for (model, eps), g in verified_outcomes(rows).items()
    }


def series_of_run(run: Run) -> dict[SeriesKey, Series]:
    """Every per-example series of a run: certified outcomes at its radii for certify runs, verified outcomes per
    eps for verified runs, else its rows'."""
    if run.family == CERTIFY:
        return certified_series(run.rows, run_radii(run))
    if run.family == VERIFIED:
        return verified_series(run.rows)
    return series_from_rows(run.rows)


def find_series(series: Mapping[SeriesKey, Series], model: str, cond: str) -> Series | None:
    """The series of ``model`` under ``cond``, matching eps numerically (8/255 == 0.0313725...)."""
    attack, eps = parse_condition(cond)
    for (m, c), s in series.items():
        if m != model:
            continue
        a, e = parse_condition(c)
        if a == attack and same_eps(e, eps):
            return s
    return None


def examples_digest(selections: Mapping[str, Any]) -> str:
    """One digest of the runner's record of every example selection (``{name: {"ids": ..., "data": ...}}``)."""
    text = json.dumps(selections, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def example_identity(manifest: Mapping[str, Any]) -> dict[str, str]:
    """What identifies a run's examples, from its manifest: the :data:`IDENTITY_KEYS` it recorded.

    ``examples_digest`` comes from the runner's selection record (``config["examples"]``) when there is one,
    else from an ``examples_digest`` value written by older tools.
    """
    config = manifest.get("config", {}) or {}
    out = {}
    for key in IDENTITY_KEYS:
        value = config.get(key, manifest.get(key))
        if value not in (None, ""):
            out[key] = str(value)
    selections = config.get("examples")
    if isinstance(selections, Mapping) and selections:
        out["examples_digest"] = examples_digest(selections)
    return out


def check_same_examples(base: Mapping[str, str], fresh: Mapping[str, str], what: str = "the baseline") -> None:
    """Refuse (one line) when ``what`` and the fresh run recorded different example identities."""
    for key in IDENTITY_KEYS:
        if key in base and key in fresh and base[key] != fresh[key]:
            raise RobfiltError(
                f"{what} and the fresh run measured different examples ({key.replace('_', ' ')} "
                f"{base[key]:.16} vs {fresh[key]:.16}); a paired test needs the same examples: rerun with the "
                "baseline's data, n_examples and seed, write a new baseline (--write-baseline), or set mode = 'interval'."
            )


def _same_ids(base: Series, fresh: Series, label: str) -> None:
    if len(base.ids) == len(fresh.ids) and np.array_equal(base.ids, fresh.ids):
        return
    only_base = len(np.setdiff1d(base.ids, fresh.ids))
    only_fresh = len(np.setdiff1d(fresh.ids, base.ids))
    dup = len(base.ids) != len(np.unique(base.ids)) or len(fresh.ids) != len(np.unique(fresh.ids))
    why = "repeated example ids" if dup and not (only_base or only_fresh) else (
        f"{only_base} ids only in the baseline, {only_fresh} only in the fresh run"
    )  # fmt: skip
    raise RobfiltError(
        f"{label}: the baseline and the fresh run measured different examples ({why}); a paired test needs the "
        "same examples: rerun with the baseline's data, n_examples and seed, or set mode = 'interval'."
    )


def pair_series(base: Series, fresh: Series, label: str) -> PairedBinary | PairedRatio:
    """Align two runs' outcomes of one (model, condition) by example id; refuse different examples."""
    if type(base) is not type(fresh):
        raise RobfiltError(f"{label}: the baseline holds {type(base).__name__}, the fresh run {type(fresh).__name__}.")
    _same_ids(base, fresh, label)
    if isinstance(base, BinarySeries):
        assert isinstance(fresh, BinarySeries)
        return PairedBinary(base.ids, base.correct.astype(bool), fresh.correct.astype(bool))
    assert isinstance(fresh, RatioSeries)
    return PairedRatio(base.ids, base.nll_sum, base.n_tokens, fresh.nll_sum, fresh.n_tokens)


def pair_token_accuracy(base: RatioSeries, fresh: RatioSeries, label: str) -> PairedRatio:
    """Like :func:`pair_series` for token accuracy (correct tokens / tokens) instead of perplexity."""
    _same_ids(base, fresh, label)
    if base.correct_tokens is None or fresh.correct_tokens is None:
        raise RobfiltError(f"{label}: token accuracy needs correct_tokens in both runs' rows.")
    return PairedRatio(base.ids, base.correct_tokens, base.n_tokens, fresh.correct_tokens, fresh.n_tokens)


__all__ = [
    "IDENTITY_KEYS",
    "BinarySeries",
    "RatioSeries",
    "Series",
    "SeriesKey",
    "certified_series",
    "check_same_examples",
    "example_identity",
    "examples_digest",
    "find_series",
    "pair_series",
    "pair_token_accuracy",
    "series_from_rows",
    "series_of_run",
    "verified_series",
]
