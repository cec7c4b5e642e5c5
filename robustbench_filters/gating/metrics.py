"""Named metrics with intervals, as the gate compares them: from run rows, summaries and baseline files.

A metric is identified by ``model/condition/name``:

- ``deit/clean/acc``, ``deit-grc/pgd@0.02/acc``, ``deit/corruption:noise@3/acc`` (image classifiers);
- ``lm/clean/ppl``, ``lm/wordswap@0.1/ppl``, ``lm/clean/token_acc`` (language models), and for models scored as
  lm-eval scores documents ``hf:gpt2/clean/word_perplexity`` (also ``byte_perplexity``, ``bits_per_byte``);
- ``deit-grc/-/lipschitz_upper`` (and ``lipschitz_local_upper``, ``lipschitz_lower``, ``radius``);
- ``deit/certified:sigma0.25@0.5/certified_acc`` (randomized smoothing: the share of examples whose true class the
  smoothed classifier at noise sigma 0.25 certifies within L2 radius 0.5; one per sigma and radius of the run);
- ``deit-at/verified@0.0003/verified_acc`` (bound propagation, ``robfilt certify --method crown``: the share of
  examples verified at Linf eps 0.0003, every wrong class's margin lower bound over the box positive).

Each carries its point value and a 95% interval: Wilson for accuracies (certified and verified ones too: over
examples, with abstentions, wrong predictions and examples not verified counted as not certified), an example
bootstrap for perplexity and token accuracy, and none (``lo == hi == value``) for deterministic quantities such as certified Lipschitz bounds
(:data:`INTERVALS` names them, for the tables that show them). A certified accuracy no certificate could reach is
flagged ``vacuous``: every example abstained at that sigma, or the radius lies past the largest one the run's n
noise draws can certify at its alpha (:func:`~robustbench_filters.stats.intervals.max_certifiable_radius`).

The small baseline file (``robfilt check --write-baseline``) is JSON::

    {"format": "robfilt-baseline", "version": 1, "source": "...",
     "metrics": [{"model": "deit", "condition": "pgd@0.02", "metric": "acc",
                  "value": 0.41, "lo": 0.33, "hi": 0.50, "n": 128}, ...]}

where ``lo``, ``hi`` and ``n`` are optional (without them the baseline is a bare number).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from ..core.errors import RobfiltError, suggest
from ..core.textfiles import read_text
from ..runs.folder import Run, load_run
from ..stats import aggregates as A
from ..stats.intervals import max_certifiable_radius, wilson_interval
from ..summaries import CERTIFY, IMAGE, LIPSCHITZ, LM, VERIFIED, Summary, kind_of, read_summary
from ..summaries.certify import CertifySummary, SigmaCertificates
from ..summaries.corruption import CorruptionSummary
from ..summaries.image import ImageAttackSummary
from ..summaries.lipschitz import LipschitzSummary
from ..summaries.lm import LM_EVAL, LMAttackSummary
from ..summaries.record import present
from ..summaries.verified import VerifiedSummary

# the condition names lived here until 2026-12-07; importing them from this module keeps working
from .conditions import CERTIFIED as CERTIFIED
from .conditions import (
    LIPSCHITZ_CONDITION,
    VERIFIED_CONDITION,
    certified_condition,
    condition,
    parse_condition,
    same_eps,
)
from .conditions import certified_attack as certified_attack

BASELINE_FORMAT = "robfilt-baseline"
# metric name -> True when higher is better
DIRECTION: dict[str, bool] = {
    "acc": True,
    "token_acc": True,
    "ppl": False,
    "word_perplexity": False,
    "byte_perplexity": False,
    "bits_per_byte": False,
    "lipschitz_upper": False,
    "lipschitz_local_upper": False,
    "lipschitz_lower": False,
    "radius": True,
    "certified_acc": True,
    "verified_acc": True,
}
#: shares of examples with a binomial count behind them (Wilson intervals, McNemar's test against a baseline, the
#: accuracy power formulas): the one list every part of the gate reads
ACCURACIES: frozenset[str] = frozenset({"acc", "certified_acc", "verified_acc"})
# metrics whose tolerance is relative (ratios of positive quantities); accuracies use absolute tolerance
RELATIVE: frozenset[str] = frozenset({"ppl", *LM_EVAL, "lipschitz_upper", "lipschitz_local_upper", "lipschitz_lower"})
# Lipschitz summary/table column -> gate metric, and the flag that says the certified ones are vacuous
LIPSCHITZ_METRICS: dict[str, str] = {
    "global_upper": "lipschitz_upper",
    "local_upper_median": "lipschitz_local_upper",
    "lower_max": "lipschitz_lower",
    "radius_mean": "radius",
}
VACUOUS_FLAG: dict[str, str] = {
    "lipschitz_upper": "global_upper_vacuous",
    "lipschitz_local_upper": "local_upper_vacuous",
    "radius": "radius_vacuous",
}

#: which 95% interval each metric carries (a footnote of every table that shows them)
INTERVALS: dict[str, str] = {
    "acc": "Wilson score interval over examples",
    "token_acc": "percentile bootstrap over documents (LM examples)",
    "ppl": "percentile bootstrap over documents (LM examples)",
    "lipschitz_upper": "none (a certified bound)",
    "lipschitz_local_upper": "none (median of certified bounds)",
    "lipschitz_lower": "none (the max of per-example lower bounds)",
    "radius": "none (mean of certified radii)",
    "word_perplexity": "percentile bootstrap over documents",
    "byte_perplexity": "percentile bootstrap over documents",
    "bits_per_byte": "percentile bootstrap over documents",
    "certified_acc": "Wilson score interval over examples (abstentions count as not certified)",
    "verified_acc": "Wilson score interval over examples (an example not verified counts as not verified)",
}
CERTIFICATE_KIND = "certificate"  # the certificate rows of a certify run (its attack rows check soundness)


def interval_note(metrics: Iterable[str]) -> str:
    """'95% CI: acc: Wilson score interval over examples; ppl: ...' for the metrics a table shows."""
    names = [m for m in dict.fromkeys(metrics) if m in INTERVALS]
    return "95% CI: " + "; ".join(f"{m}: {INTERVALS[m]}" for m in names) if names else ""


@dataclass(frozen=True)
class Metric:
    model: str
    condition: str  # "clean", "<attack>@<eps>", "certified:sigma<s>@<radius>", "verified@<eps>" or "-" (Lipschitz)
    metric: str
    value: float
    lo: float
    hi: float
    n: int | None = None
    family: str = ""
    source: str = ""
    vacuous: bool | None = (
        None  # a certified number that certifies nothing (Lipschitz: robustbench_filters.stats.vacuity)
    )

    @property
    def key(self) -> str:
        return f"{self.model}/{self.condition}/{self.metric}"

    @property
    def has_interval(self) -> bool:
        return math.isfinite(self.lo) and math.isfinite(self.hi) and (self.lo != self.hi or self.n is not None)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("source")
        d.pop("family")
        d.pop("vacuous")  # recomputed from the fresh rows; a baseline file holds values only
        return {k: v for k, v in d.items() if v is not None and not (isinstance(v, float) and math.isnan(v))}


def _flag(v: Any) -> bool | None:
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else bool(v)


def _nan(v: Any) -> float:
    return float(v) if v is not None and not (isinstance(v, float) and math.isnan(v)) else math.nan


def certificate_rows(rows: pd.DataFrame) -> pd.DataFrame:
    """The certificate rows of a certify run (not its soundness-attack rows)."""
    return rows[rows["kind"] == CERTIFICATE_KIND] if "kind" in rows.columns else rows


def certified_outcomes(certs: pd.DataFrame, radius: float) -> pd.Series:
    """Per certificate row: is the true class certified within ``radius``? Wrong predictions and abstentions have
    no certified-correct radius (NaN), so they count as not certified."""
    return certs["certified_correct_radius"].astype(float) >= radius


def _certified_metrics(rows: pd.DataFrame, radii: Sequence[float], source: str) -> list[Metric]:
    """Certified accuracy per (model, sigma, radius) with a Wilson interval over examples; vacuous when no example
    could be certified there (all abstained, or the radius is past what n draws at alpha can certify)."""
    certs = certificate_rows(rows)
    out = []
    if certs.empty:
        return out
    for (model, sigma), g in certs.groupby(["model", "sigma"], sort=False):
        n = len(g)
        top = max_certifiable_radius(float(sigma), int(g["n"].iloc[0]), float(g["alpha"].iloc[0]))
        abstained = bool(g["abstain"].astype(bool).all())
        for r in radii:
            k = int(certified_outcomes(g, float(r)).sum())
            lo, hi = wilson_interval(k, n)
            vacuous = abstained or float(r) > top * (1 + 1e-9)
            cond = certified_condition(float(sigma), float(r))
            out.append(Metric(str(model), cond, "certified_acc", k / n, lo, hi, n, CERTIFY, source, vacuous))
    return out


def verified_outcomes(rows: pd.DataFrame) -> dict[tuple[str, float], pd.DataFrame]:
    """A verified run's rows per (model, eps), sorted by example id: ``verified`` says whether the example's margins
    were bounded above zero there (a misclassified example, or one not bounded at a larger eps, is not verified)."""
    if rows.empty or not {"model", "example_id", "eps", "verified"} <= set(rows.columns):
        return {}
    return {
        (str(model), float(eps)): g.sort_values("example_id", kind="stable")
        for (model, eps), g in rows.groupby(["model", "eps"], sort=True)
    }


def _verified_metrics(rows: pd.DataFrame, source: str) -> list[Metric]:
    """Verified accuracy per (model, eps), with a Wilson interval over examples."""
    out = []
    for (model, eps), g in verified_outcomes(rows).items():
        n, k = len(g), int(g["verified"].astype(bool).sum())
        lo, hi = wilson_interval(k, n)
        out.append(
            Metric(model, condition(VERIFIED_CONDITION, eps), "verified_acc", k / n, lo, hi, n, VERIFIED, source)
        )
    return out


def run_radii(run: Run) -> tuple[float, ...]:
    """The radii a certify run reports certified accuracy at (its ``radii`` option, recorded in the manifest)."""
    radii = (run.manifest.get("config") or {}).get("radii")
    if not isinstance(radii, list) or not radii or not all(isinstance(r, int | float) for r in radii):
        raise RobfiltError(f"certify run {run.path} records no radii in its manifest; rerun it with this robfilt.")
    return tuple(float(r) for r in radii)


def metrics_from_rows(rows: pd.DataFrame, family: str, source: str = "", radii: Sequence[float] = ()) -> list[Metric]:
    """Every metric a gate can check, recomputed from the per-example rows of one family (``radii``: the radii of
    certified accuracies, for certify rows)."""
    out: list[Metric] = []
    if family == IMAGE:
        for r in A.accuracy_table(rows).itertuples():
            out.append(Metric(r.model, condition(r.attack, r.eps), "acc", r.acc, r.lo, r.hi, int(r.n), family, source))
        corr = A.corruption_table(rows)
        for r in corr.itertuples() if not corr.empty else ():
            if r.corruption != "clean":
                cond = condition(f"{A.CORRUPTION_PREFIX}{r.corruption}", r.severity)
                out.append(Metric(r.model, cond, "acc", r.acc, r.lo, r.hi, int(r.n), family, source))
    elif family == LM:
        ppl = A.perplexity_table(rows)
        corr = A.corruption_table(rows)
        if not corr.empty:
            corr = corr[corr["corruption"] != "clean"].assign(
                attack=lambda d: A.CORRUPTION_PREFIX + d["corruption"], eps=lambda d: d["severity"]
            )
            ppl = pd.concat([ppl, corr], ignore_index=True)
        for r in ppl.itertuples():
            cond = condition(r.attack, r.eps)
            out.append(Metric(r.model, cond, "ppl", r.ppl, _nan(r.ppl_lo), _nan(r.ppl_hi), int(r.n), family, source))
            if "token_acc" in ppl.columns and math.isfinite(_nan(r.token_acc)):
                v = float(r.token_acc)
                lo, hi = _nan(getattr(r, "token_acc_lo", None)), _nan(getattr(r, "token_acc_hi", None))
                lo, hi = (lo, hi) if math.isfinite(lo) and math.isfinite(hi) else (v, v)
                # n stays None: the interval is a bootstrap over sequences, not a binomial one over n examples
                out.append(Metric(r.model, cond, "token_acc", v, lo, hi, None, family, source))
            for name in LM_EVAL:
                v = _nan(getattr(r, name, None))
                if math.isfinite(v):
                    lo, hi = _nan(getattr(r, f"{name}_lo")), _nan(getattr(r, f"{name}_hi"))
                    out.append(Metric(r.model, cond, name, v, lo, hi, int(r.n), family, source))
    elif family == LIPSCHITZ:
        table = A.lipschitz_table(rows)
        for r in table.to_dict("records"):
            for col, name in LIPSCHITZ_METRICS.items():
                v = _nan(r[col])
                if math.isfinite(v):
                    vac = _flag(r.get(VACUOUS_FLAG.get(name, "")))
                    out.append(Metric(r["model"], LIPSCHITZ_CONDITION, name, v, v, v, None, family, source, vac))
    elif family == CERTIFY:
        out += _certified_metrics(rows, radii, source)
    elif family == VERIFIED:
        out += _verified_metrics(rows, source)
    return out


def metrics_from_run(run: Run) -> list[Metric]:
    family = run.family
    radii = run_radii(run) if family == CERTIFY else ()
    return metrics_from_rows(run.rows, family, run.run_id, radii)


def _certified_from_summary(
    model: str, by_sigma: dict[str, SigmaCertificates], tops: dict[str, float], source: str
) -> list[Metric]:
    """A certify summary's certified accuracies (counts per radius), with the Wilson interval the gate uses."""
    out = []
    try:
        for key, entry in by_sigma.items():
            sigma, top = float(key), float(tops.get(key, math.inf))
            abstained = float(entry.abstain_rate) >= 1.0
            for c in entry.certified:
                k, n, r = int(c.certified), int(c.n_examples), float(c.radius)
                if not 0 <= k <= n or n <= 0:
                    raise ValueError(f"certified {k} of {n}")
                lo, hi = wilson_interval(k, n)
                vac = abstained or r > top * (1 + 1e-9)
                cond = certified_condition(sigma, r)
                out.append(Metric(model, cond, "certified_acc", k / n, lo, hi, n, CERTIFY, source, vac))
    except (TypeError, ValueError) as exc:
        raise RobfiltError(f"{source}: certify summary of {model} is malformed ({exc}); pass a summary.json written "
                           "by robfilt certify.") from None  # fmt: skip
    return out


def _verified_from_summary(model: str, entries: Sequence[Any], source: str) -> list[Metric]:
    """A verified summary's verified accuracies (counts per eps), with the Wilson interval the gate uses."""
    out = []
    for e in entries:
        k, n = int(e.verified), int(e.n_examples)
        if not 0 <= k <= n or n <= 0:
            raise RobfiltError(f"{source}: verified summary of {model} is malformed (verified {k} of {n}); pass a "
                               "summary.json written by robfilt certify --method crown.")  # fmt: skip
        lo, hi = wilson_interval(k, n)
        out.append(Metric(model, condition(VERIFIED_CONDITION, float(e.eps)), "verified_acc", k / n, lo, hi, n,
                          VERIFIED, source))  # fmt: skip
    return out


def _accuracy(model: str, cond: str, e: Any, source: str) -> Metric:
    """An accuracy entry of an image summary (clean, robust or one corruption severity) as a metric."""
    return Metric(model, cond, "acc", float(e.acc), _nan(e.lo), _nan(e.hi), e.n, IMAGE, source)


def _from_summary(summary: Summary, source: str) -> list[Metric]:
    """Metrics from a run's summary.json (for baselines kept as a committed summary file): the metrics
    :func:`metrics_from_rows` gives for the run's rows, from the aggregates the summary recorded."""
    out: list[Metric] = []
    if isinstance(summary, CertifySummary):
        for model, by_sigma in summary.models.items():
            out += _certified_from_summary(model, by_sigma, summary.max_certifiable_radius, source)
    elif isinstance(summary, VerifiedSummary):
        for model, entries in summary.models.items():
            out += _verified_from_summary(model, entries, source)
    elif isinstance(summary, LipschitzSummary):
        for model, m in summary.models.items():
            for col, name in LIPSCHITZ_METRICS.items():
                v = _nan(getattr(m, col))
                if math.isfinite(v):
                    vac = _flag(present(getattr(m, VACUOUS_FLAG[name]))) if name in VACUOUS_FLAG else None
                    out.append(Metric(model, LIPSCHITZ_CONDITION, name, v, v, v, None, LIPSCHITZ, source, vac))
    elif isinstance(summary, LMAttackSummary):
        for model, lm in summary.models.items():
            for attack, eps, e in [("clean", 0.0, lm.clean), *((r.attack, r.eps, r) for r in lm.results)]:
                cond = condition(attack, eps)
                out.append(Metric(model, cond, "ppl", float(e.ppl), _nan(e.ppl_lo), _nan(e.ppl_hi), None, LM, source))
                for name, (v, lo, hi) in e.lm_eval().items():
                    out.append(Metric(model, cond, name, float(v), _nan(lo), _nan(hi), None, LM, source))
    elif isinstance(summary, ImageAttackSummary):
        for model, im in summary.models.items():
            out.append(_accuracy(model, condition("clean", 0.0), im.clean, source))
            out += [_accuracy(model, condition(r.attack, r.eps), r, source) for r in im.robust]
    elif isinstance(summary, CorruptionSummary):
        for model, cm in summary.models.items():
            out.append(_accuracy(model, condition("clean", 0.0), cm.clean, source))
            for name, c in cm.corruptions.items():
                attack = f"{A.CORRUPTION_PREFIX}{name}"
                out += [_accuracy(model, condition(attack, s.severity), s, source) for s in c.by_severity]
    else:
        raise RobfiltError(f"{source} is the summary of a {kind_of(type(summary)).name} run, which holds no gate metrics; pass an "
                           "attack, corruption, lipschitz, certify or verified run.")  # fmt: skip
    return out


BASELINE_KEYS = frozenset({"model", "condition", "metric", "value", "lo", "hi", "n"})


def _from_baseline_file(data: dict[str, Any], source: str) -> list[Metric]:
    unknown_top = set(data) - {"format", "version", "source", "created", "metrics", "tolerance"}
    if unknown_top:
        key = sorted(unknown_top)[0]
        raise RobfiltError(f"{source}: unknown key {key!r}.{suggest(key, ['format', 'version', 'source', 'metrics'])}")
    return metric_entries(data.get("metrics"), source, BASELINE_KEYS)


def metric_entries(entries: Any, source: str, allowed: frozenset[str]) -> list[Metric]:
    """Checked ``metrics`` entries of a baseline document: every key known, the required ones present, numbers
    numeric, metric and condition parseable; anything else is refused in one line naming the entry."""
    if not isinstance(entries, list):
        raise RobfiltError(f"{source}: 'metrics' must be a list of {{model, condition, metric, value}} objects.")
    out = []
    for i, e in enumerate(entries):
        if not isinstance(e, dict):
            raise RobfiltError(f"{source}: metrics[{i}] is not an object.")
        for key in e:
            if key not in allowed:
                raise RobfiltError(f"{source}: metrics[{i}] has unknown key {key!r}.{suggest(key, allowed)}")
        for key in ("model", "condition", "metric", "value"):
            if key not in e:
                raise RobfiltError(f"{source}: metrics[{i}] lacks {key!r}.")
        if e["metric"] not in DIRECTION:
            raise RobfiltError(
                f"{source}: metrics[{i}] has unknown metric {e['metric']!r}.{suggest(e['metric'], DIRECTION)}"
            )
        parse_condition(str(e["condition"]))
        try:
            value = float(e["value"])
            lo, hi = float(e.get("lo", value)), float(e.get("hi", value))
        except (TypeError, ValueError):
            raise RobfiltError(f"{source}: metrics[{i}] value/lo/hi must be numbers.") from None
        fam = str(e.get("family", ""))
        out.append(Metric(str(e["model"]), str(e["condition"]), e["metric"], value, lo, hi, e.get("n"), fam, source))
    return out


def load_baseline(path: str | Path) -> list[Metric]:
    """Metrics from a run folder, a run's summary.json, or a small robfilt-baseline JSON."""
    path = Path(path)
    if path.is_dir():
        return metrics_from_run(load_run(path))
    if not path.exists():
        raise RobfiltError(f"baseline {path} does not exist; pass a summary.json, a run folder or a baseline JSON.")
    try:
        data = json.loads(read_text(path))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise RobfiltError(f"baseline {path} is not valid JSON ({exc}).") from None
    if not isinstance(data, dict):
        raise RobfiltError(f"baseline {path} must be a JSON object.")
    if data.get("format") == BASELINE_FORMAT:
        return _from_baseline_file(data, str(path))
    if "fingerprint" in data or "kind" in data:  # a run's summary.json
        if "kind" not in data:
            raise RobfiltError(f"baseline {path} is a summary.json that records no run kind (a Lipschitz run's); "
                               "pass its run folder instead.")  # fmt: skip
        where = f"baseline {path}"
        return _from_summary(read_summary(data, data["kind"], data.get("family"), where), str(path))
    raise RobfiltError(
        f"baseline {path} is neither a robfilt summary.json nor a robfilt-baseline file "
        f'(it needs "format": "{BASELINE_FORMAT}" and a "metrics" list).'
    )


def baseline_document(metrics: Iterable[Metric], source: str) -> dict[str, Any]:
    return {"format": BASELINE_FORMAT, "version": 1, "source": source, "metrics": [m.to_dict() for m in metrics]}


def find(metrics: Iterable[Metric], model: str, cond: str, name: str) -> Metric | None:
    attack, eps = parse_condition(cond)
    for m in metrics:
        if m.model != model or m.metric != name:
            continue
        a, e = parse_condition(m.condition)
        if a == attack and same_eps(e, eps):
            return m
    return None
