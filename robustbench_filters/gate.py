"""``robfilt check``: the CI gate. It makes the spec's runs (or takes given run folders), then has them judged.

The judging itself (thresholds, baselines, sanity checks) lives in :mod:`.report.judge` and only reads finished,
verified run folders; this module orchestrates: load the spec, refuse requirements its runs cannot answer before
any work, make fresh runs through the shared runner, judge, and write the JUnit XML and Markdown summary.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from pathlib import Path

from .api import measurement_for
from .errors import RobfiltError
from .io import atomic_write_json
from .progress import ProgressHook
from .report.gate_output import write_junit, write_markdown
from .report.judge import FAIL, PASS, WARN, GateResult, check_baseline, check_requirements, sanity_outcomes
from .report.metrics import baseline_document, load_baseline, metrics_from_run, same_eps
from .runs.folder import Run, load_run
from .runs.runner import run
from .spec import Spec, load_spec

log = logging.getLogger(__name__)


def check_runnable(spec: Spec) -> None:
    """Every requirement must name an attack and eps its section actually runs (caught before a long run)."""
    for fam, section in spec.sections.items():
        config = section.config
        attacks = list(getattr(config, "attacks", ()) or ())
        grid = list(getattr(config, "eps", None) or ()) + list(getattr(config, "rates", None) or ())
        for req in section.requirements:
            if req.attack in ("clean", "-"):
                continue
            if req.attack not in attacks:
                raise RobfiltError(
                    f"{spec.path.name}: {req.where} checks attack {req.attack!r}, which [{fam}] attacks = {attacks} "
                    "does not run."
                )
            if not any(same_eps(req.eps, e) for e in grid):
                raise RobfiltError(
                    f"{spec.path.name}: {req.where} checks eps {req.eps:g}, which is not in [{fam}] eps = "
                    f"{[float(f'{e:.6g}') for e in grid]}."
                )


def produce_runs(spec: Spec, out: Path, progress: ProgressHook | None = None) -> list[Run]:
    """Make the spec's fresh runs, always from scratch (a cached run could hide changed weights)."""
    runs = []
    for fam, section in spec.sections.items():
        folder = out / fam
        log.info("check: making the fresh %s run in %s", fam, folder)
        run(measurement_for(section.config), out=folder, overwrite=True, progress=progress)
        runs.append(load_run(folder))
    return runs


def run_gate(
    spec: str | Path | None = None,
    runs: Sequence[str | Path] = (),
    baseline: str | Path | None = None,
    tolerance: float | None = None,
    out: str | Path | None = None,
    junit: str | Path | None = None,
    summary: str | Path | None = None,
    write_baseline: str | Path | None = None,
    progress: ProgressHook | None = None,
) -> GateResult:
    """Run the gate and write its JUnit XML and Markdown summary; see :mod:`.report.judge` for the rules.

    Args:
        spec: a TOML spec (thresholds, and how to make fresh runs when ``runs`` is empty).
        runs: run folders to check instead of making fresh ones (verified before they are read).
        baseline: overrides the spec's baseline (paths given here may lie anywhere).
        tolerance: overrides the spec's tolerance for baseline comparisons (default 0).
        out: folder for fresh runs and default outputs (default: the spec's ``out``, else ``runs/check``).
        junit / summary: output paths (default ``<out>/junit.xml`` and ``<out>/summary.md``).
        write_baseline: also write the checked runs' metrics as a robfilt-baseline JSON (to update a baseline).
    """
    loaded_spec = load_spec(spec) if spec is not None else None
    if loaded_spec is None and not runs:
        raise RobfiltError("nothing to check; pass --spec FILE, or --run RUN_DIR with --baseline FILE.")
    baseline_path = Path(baseline) if baseline is not None else (loaded_spec.baseline if loaded_spec else None)
    if loaded_spec is None and baseline_path is None and write_baseline is None:
        raise RobfiltError("--run needs something to compare with; pass --baseline FILE or --spec FILE.")
    tol = tolerance if tolerance is not None else (loaded_spec.tolerance if loaded_spec else 0.0)
    if not (math.isfinite(tol) and tol >= 0):
        raise RobfiltError(f"--tolerance must be a number >= 0, got {tol}.")
    out_dir = Path(out) if out is not None else (loaded_spec.out if loaded_spec else Path("runs") / "check")
    base_metrics = load_baseline(baseline_path) if baseline_path is not None else None  # fail fast on bad files

    if runs:
        run_objs = [load_run(r) for r in runs]
    else:
        assert loaded_spec is not None
        check_runnable(loaded_spec)
        run_objs = produce_runs(loaded_spec, out_dir, progress)
    metrics = {r.run_id: metrics_from_run(r) for r in run_objs}
    pool = [m for ms in metrics.values() for m in ms]

    outcomes = []
    if loaded_spec is not None:
        requirements = {fam: s.requirements for fam, s in loaded_spec.sections.items()}
        outcomes += check_requirements(requirements, run_objs, metrics, loaded_spec.path.name)
    if base_metrics is not None:
        outcomes += check_baseline(base_metrics, pool, tol, str(baseline_path))
    outcomes += sanity_outcomes(run_objs, loaded_spec.sanity if loaded_spec else "warn")

    result = GateResult(
        name=loaded_spec.name if loaded_spec else "robfilt check",
        outcomes=outcomes,
        runs=[r.run_id for r in run_objs],
        out=out_dir,
        baseline=str(baseline_path) if baseline_path else None,
        tolerance=tol,
    )
    if write_baseline is not None:
        doc = baseline_document(pool, ", ".join(result.runs))
        atomic_write_json(write_baseline, doc)
        result.notes.append(f"wrote {len(pool)} metrics as a baseline to {write_baseline}")
    result.junit = write_junit(result, Path(junit) if junit else out_dir / "junit.xml")
    result.summary = write_markdown(result, Path(summary) if summary else out_dir / "summary.md")
    log.info("check: %d pass, %d warn, %d fail", result.count(PASS), result.count(WARN), result.count(FAIL))
    return result


__all__ = ["check_runnable", "produce_runs", "run_gate"]
