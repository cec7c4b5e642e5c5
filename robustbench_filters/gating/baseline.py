"""Baseline documents, version 2: aggregate metrics plus every example's outcome, so a committed baseline can
be compared *paired* with a fresh run.

Version 2 (``robfilt check --write-baseline``)::

    {"format": "robfilt-baseline", "version": 2, "source": "attack@1a2b...", "created": "2026-12-01T10:00:00+00:00",
     "metrics": [{"model": "deit", "condition": "pgd@0.01", "metric": "acc", "value": 0.648, "lo": 0.56,
                  "hi": 0.73, "n": 128, "family": "image"}, ...],             # exactly the v1 entries (+ family)
     "examples": {"image": {"identity": {"data": "fashion-mnist", "data_checksum": "...",
                                         "example_ids_sha256": "..."},
                            "ids": [3, 17, 40, ...]},                         # sorted example ids
                  "lm": {...}},
     "outcomes": [{"examples": "image", "model": "deit", "condition": "pgd@0.01", "correct": "0110..."},
                  {"examples": "lm", "model": "lm", "condition": "clean",
                   "nll_sum": [412.3, ...], "n_tokens": [255, ...], "correct_tokens": [101, ...]}]}

Certify runs store ``{"examples": "certify", "condition": "certified:sigma0.25@0.5", "correct": "0110..."}``:
``1`` where the example's true class is certified within the radius; verified runs ``{"examples": "verified",
"condition": "verified@0.0003", "correct": "0110..."}``, ``1`` where the example was verified at that Linf eps. Each outcome is aligned with its example
set's ``ids`` (or carries its own ``"ids"`` when it covers other examples). ``correct`` is a string of 0/1
characters, one per example: compact, and a diff shows which examples flipped. Floats are written with ``repr`` precision, so a baseline written from a run and read back
pairs bit-for-bit with the run it came from. About 1 KB per 1,000 image outcomes and 40 KB per 1,000 LM ones.

Read also: version 1 documents, a run's ``summary.json`` (aggregates only: paired mode is unavailable, and
:attr:`Baseline.unpaired_reason` says so in one line) and run folders (everything, like version 2).
"""

from __future__ import annotations

import datetime as _dt
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..core.errors import RobfiltError, suggest
from ..core.io import atomic_write_json
from ..core.textfiles import read_text
from ..runs.folder import Run, load_run
from ..stats.paired import PairedBinary, PairedRatio
from .metrics import (
    BASELINE_FORMAT,
    LM_EVAL,
    Metric,
    load_baseline,
    metric_entries,
    metrics_from_run,
    parse_condition,
)
from .series import (
    BinarySeries,
    RatioSeries,
    Series,
    SeriesKey,
    check_same_examples,
    example_identity,
    find_series,
    pair_series,
    pair_token_accuracy,
    series_of_run,
)

VERSION = 2
#: identity keys that pin down *which* examples a run measured (the data name alone does not)
EXAMPLE_KEYS = ("data_checksum", "example_ids_sha256", "examples_digest")
TOP_KEYS = frozenset({"format", "version", "source", "created", "metrics", "examples", "outcomes", "tolerance"})
METRIC_KEYS = frozenset({"model", "condition", "metric", "value", "lo", "hi", "n", "family"})
OUTCOME_KEYS = frozenset({"examples", "model", "condition", "ids", "correct", "nll_sum", "n_tokens", "correct_tokens"})


@dataclass
class Baseline:
    """What a gate compares with: metrics, and per-example outcomes when the source stored them."""

    source: str
    kind: str  # "v2 baseline", "v1 baseline", "summary.json", "run folder"
    metrics: list[Metric]
    series: dict[str, dict[SeriesKey, Series]] = field(default_factory=dict)  # family -> series
    identity: dict[str, dict[str, str]] = field(default_factory=dict)  # family -> example identity

    @property
    def unpaired_reason(self) -> str:
        """'' when per-example outcomes are stored, else why paired mode cannot run (for one-line messages)."""
        if self.series:
            return ""
        return f"baseline {self.source} is a {self.kind} holding aggregate metrics only"

    def series_for(self, family: str, model: str, cond: str) -> Series | None:
        return find_series(self.series.get(family, {}), model, cond)

    def check_data(self, fresh: Run) -> None:
        """Refuse (one line) a comparison of runs on different data, in any mode: the baseline recorded the
        checksum of its data set and the fresh run another one (their accuracies measure different things)."""
        base = self.identity.get(fresh.family, {}).get("data_checksum")
        new = example_identity(fresh.manifest).get("data_checksum")
        if base and new and base != new:
            raise RobfiltError(
                f"baseline {self.source} and the run {fresh.path} measured different examples: other data (data "
                f"checksum {base:.16} vs {new:.16}); compare runs on the same data set, or write a new baseline."
            )

    def paired(self, fresh: Run, model: str, cond: str, metric: str) -> tuple[PairedBinary | PairedRatio | None, str]:
        """Pair this baseline's outcomes of (model, cond) with a fresh run's; (None, reason) when impossible.

        Refuses (one line) when the two measured different examples: identity keys or example ids differ.
        """
        if self.unpaired_reason:
            return None, self.unpaired_reason
        if metric in LM_EVAL:
            return None, f"{metric} has no paired test (lm-eval's metrics are compared by their intervals)"
        family = fresh.family
        base = self.series_for(family, model, cond)
        if base is None:
            return None, f"baseline {self.source} stores no per-example outcomes for {model} {cond}"
        new = find_series(series_of_run(fresh), model, cond)
        if new is None:
            return None, f"the fresh run {fresh.run_id} has no per-example rows for {model} {cond}"
        base_ident, fresh_ident = self.identity.get(family, {}), example_identity(fresh.manifest)
        check_same_examples(base_ident, fresh_ident, f"baseline {self.source}")
        if not any(k in base_ident and k in fresh_ident for k in EXAMPLE_KEYS):
            return None, (
                f"baseline {self.source} and the run {fresh.run_id} record no common identity of their examples "
                "(data checksum, example ids or contents), so pairing them by example id could pair different examples"
            )
        label = f"{model} {cond} {metric}"
        if metric == "token_acc" and isinstance(base, RatioSeries) and isinstance(new, RatioSeries):
            return pair_token_accuracy(base, new, label), ""
        return pair_series(base, new, label), ""


# --- writing ---


def _outcome(family: str, model: str, cond: str, s: Series, set_ids: np.ndarray) -> dict[str, Any]:
    entry: dict[str, Any] = {"examples": family, "model": model, "condition": cond}
    if not np.array_equal(s.ids, set_ids):
        entry["ids"] = [int(i) for i in s.ids]
    if isinstance(s, BinarySeries):
        entry["correct"] = "".join("1" if c else "0" for c in s.correct)
    else:
        entry["nll_sum"] = [float(v) for v in s.nll_sum]
        entry["n_tokens"] = [int(v) for v in s.n_tokens]
        if s.correct_tokens is not None:
            entry["correct_tokens"] = [int(v) for v in s.correct_tokens]
    return entry


def _metric_entry(m: Metric, family: str) -> dict[str, Any]:
    d = m.to_dict()
    d["family"] = family
    return d


def baseline_document(runs: Sequence[Run]) -> dict[str, Any]:
    """A version 2 baseline of finished runs: their metrics and every per-example outcome."""
    if not runs:
        raise RobfiltError("no run to write a baseline from; pass --run RUN_DIR or a spec that makes runs.")
    examples: dict[str, dict[str, Any]] = {}
    metrics: list[dict[str, Any]] = []
    collected: list[tuple[str, SeriesKey, Series]] = []
    for run in runs:
        family = run.family
        metrics += [_metric_entry(m, family) for m in metrics_from_run(run)]
        series = series_of_run(run)
        if not series:
            continue
        ident = example_identity(run.manifest)
        if family in examples and examples[family]["identity"] != ident:
            raise RobfiltError(
                f"runs of one family ({family}) in a baseline must share their examples; {run.path} measured "
                "others; write one baseline per example set."
            )
        ids = np.unique(np.concatenate([s.ids for s in series.values()]))
        if family in examples:
            ids = np.union1d(ids, np.asarray(examples[family]["ids"], dtype=np.int64))
        examples[family] = {"identity": ident, "ids": [int(i) for i in ids]}
        collected += [(family, key, s) for key, s in series.items()]
    set_ids = {fam: np.asarray(e["ids"], dtype=np.int64) for fam, e in examples.items()}
    return {
        "format": BASELINE_FORMAT,
        "version": VERSION,
        "source": ", ".join(r.run_id for r in runs),
        "created": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "metrics": metrics,
        "examples": examples,
        "outcomes": [_outcome(fam, m, c, s, set_ids[fam]) for fam, (m, c), s in collected],
    }


def write_baseline(path: str | Path, runs: Sequence[Run]) -> Path:
    """Write a version 2 baseline atomically (the file a project commits)."""
    return atomic_write_json(path, baseline_document(runs))


# --- reading ---


def _unknown(source: str, where: str, key: str, allowed: frozenset[str]) -> RobfiltError:
    return RobfiltError(f"{source}: {where} has unknown key {key!r}.{suggest(key, allowed)}")


def _array(entry: Mapping[str, Any], key: str, n: int, where: str, source: str) -> np.ndarray:
    values = entry.get(key)
    if not isinstance(values, list) or len(values) != n:
        raise RobfiltError(f"{source}: {where}.{key} must be a list of {n} numbers (one per example).")
    try:
        arr = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        raise RobfiltError(f"{source}: {where}.{key} must hold numbers only.") from None
    if not np.isfinite(arr).all():
        raise RobfiltError(f"{source}: {where}.{key} holds a non-finite number.")
    return arr


def _series_entry(entry: Any, i: int, examples: Mapping[str, np.ndarray], source: str) -> tuple[str, SeriesKey, Series]:
    where = f"outcomes[{i}]"
    if not isinstance(entry, dict):
        raise RobfiltError(f"{source}: {where} is not an object.")
    for key in entry:
        if key not in OUTCOME_KEYS:
            raise _unknown(source, where, key, OUTCOME_KEYS)
    fam = entry.get("examples")
    if fam not in examples:
        raise RobfiltError(f"{source}: {where}.examples {fam!r} names no entry of 'examples' ({', '.join(examples)}).")
    if not isinstance(entry.get("model"), str) or not isinstance(entry.get("condition"), str):
        raise RobfiltError(f"{source}: {where} needs model and condition strings.")
    parse_condition(entry["condition"])
    if "ids" in entry and not isinstance(entry["ids"], list):
        raise RobfiltError(f"{source}: {where}.ids must be a list of example ids.")
    ids = examples[fam] if "ids" not in entry else _array(entry, "ids", len(entry["ids"]), where, source)
    ids = np.asarray(ids, dtype=np.int64)
    if "correct" in entry:
        text = entry["correct"]
        if not isinstance(text, str) or len(text) != len(ids) or set(text) - {"0", "1"}:
            raise RobfiltError(f"{source}: {where}.correct must be a string of {len(ids)} '0'/'1' characters.")
        s: Series = BinarySeries(ids, np.frombuffer(text.encode(), dtype=np.uint8) == ord("1"))
    elif "nll_sum" in entry:
        correct = _array(entry, "correct_tokens", len(ids), where, source) if "correct_tokens" in entry else None
        s = RatioSeries(ids, _array(entry, "nll_sum", len(ids), where, source),
                        _array(entry, "n_tokens", len(ids), where, source), correct)  # fmt: skip
    else:
        raise RobfiltError(f"{source}: {where} needs 'correct' (classifiers) or 'nll_sum' and 'n_tokens' (LMs).")
    return fam, (entry["model"], entry["condition"]), s


def _examples(data: Any, source: str) -> tuple[dict[str, np.ndarray], dict[str, dict[str, str]]]:
    if not isinstance(data, dict):
        raise RobfiltError(f"{source}: 'examples' must map a family to {{identity, ids}}.")
    ids, idents = {}, {}
    for fam, e in data.items():
        if not isinstance(e, dict) or not isinstance(e.get("ids"), list) or not isinstance(e.get("identity", {}), dict):
            raise RobfiltError(f"{source}: examples.{fam} needs 'ids' (a list) and 'identity' (an object).")
        arr = np.asarray(e["ids"], dtype=np.int64) if e["ids"] else np.zeros(0, dtype=np.int64)
        ids[fam], idents[fam] = arr, {str(k): str(v) for k, v in e.get("identity", {}).items()}
    return ids, idents


def _from_v2(data: dict[str, Any], source: str) -> Baseline:
    for key in data:
        if key not in TOP_KEYS:
            raise _unknown(source, "the top level", key, TOP_KEYS)
    ids, idents = _examples(data.get("examples", {}), source)
    outcomes = data.get("outcomes", [])
    if not isinstance(outcomes, list):
        raise RobfiltError(f"{source}: 'outcomes' must be a list.")
    series: dict[str, dict[SeriesKey, Series]] = {}
    for i, entry in enumerate(outcomes):
        fam, key, s = _series_entry(entry, i, ids, source)
        series.setdefault(fam, {})[key] = s
    return Baseline(source, "v2 baseline", metric_entries(data.get("metrics"), source, METRIC_KEYS), series, idents)


def _read_json(path: Path) -> Any:
    try:
        return json.loads(read_text(path))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise RobfiltError(f"baseline {path} is not valid JSON ({exc}).") from None


def read_baseline(path: str | Path) -> Baseline:
    """A run folder, a run's summary.json, or a robfilt-baseline document (version 1 or 2)."""
    path = Path(path)
    source = str(path)
    if path.is_dir():
        run = load_run(path)
        fam = run.family
        series = series_of_run(run)
        return Baseline(source, "run folder", metrics_from_run(run), {fam: series} if series else {},
                        {fam: example_identity(run.manifest)})  # fmt: skip
    if not path.exists():
        raise RobfiltError(f"baseline {path} does not exist; pass a summary.json, a run folder or a baseline JSON.")
    data = _read_json(path)
    if isinstance(data, dict) and data.get("format") == BASELINE_FORMAT:
        version = data.get("version", 1)
        if version == VERSION:
            return _from_v2(data, source)
        if version != 1:
            raise RobfiltError(f"baseline {path} has version {version!r}; this robfilt reads versions 1 and 2.")
        return Baseline(source, "v1 baseline", load_baseline(path))
    return Baseline(source, "summary.json", load_baseline(path))  # refuses anything else with one line


__all__ = ["VERSION", "Baseline", "baseline_document", "read_baseline", "write_baseline"]
