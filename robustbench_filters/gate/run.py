"""``robfilt check``: the CI gate. It plans, makes the spec's runs (or takes given run folders), then has them judged.

The judging itself (thresholds, baselines, sanity checks) lives in :mod:`..gating` and only reads finished,
verified run folders; this module orchestrates: load the spec and the baseline, refuse requirements its runs
cannot answer, report what each check can detect at the spec's n (before any work, so users can size n), make
fresh runs through the shared runner, judge, and write the JUnit XML, the Markdown summary and, on request, a
version 2 baseline of the runs.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from ..api.evaluate import run_config
from ..core.errors import RobfiltError, RunStateError
from ..core.io import no_empty_folder_on_failure
from ..core.progress import ProgressHook
from ..core.surface import Surface, surface
from ..core.workers import pool, resolve
from ..gating.baseline import Baseline, read_baseline
from ..gating.baseline import write_baseline as write_baseline_file
from ..gating.judge import Judged, judge_baseline, judge_requirements, paired_family, sanity_outcomes
from ..gating.junit import run_wall_seconds
from ..gating.metrics import metrics_from_run, same_eps
from ..gating.modes import BaselinePolicy, Mode
from ..gating.outcome import FAIL, PASS, WARN, GateResult, Outcome, PlannedCheck
from ..gating.output import write_junit, write_markdown
from ..gating.plan import plan_baseline, plan_thresholds
from ..runs.crosscheck import example_key, refuse_copies, refuse_label_conflicts
from ..runs.folder import Run, load_run
from ..runs.outfolder import OutputFolder
from ..summaries import CERTIFY, VERIFIED
from .spec import Spec, load_spec

log = logging.getLogger(__name__)
PlanHook = Callable[[list[PlannedCheck]], None]


JUNIT, SUMMARY = "junit.xml", "summary.md"


def legacy_files(out: Path) -> set[str]:
    """The gate's own files in an ``out`` written before ledgers (its run folders list their own files)."""
    return {name for name in (JUNIT, SUMMARY) if (out / name).is_file() and "robfilt" in _head(out / name)}


def _head(path: Path) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read(4096)
    except OSError:
        return ""


def _claim(folder: OutputFolder | None, name: str) -> Path:
    assert folder is not None  # opened whenever a default output path is used
    return folder.path(name)


def check_runnable(spec: Spec) -> None:
    """Every requirement must name an attack and eps its section actually runs (caught before a long run).

    Certify and verified requirements were checked against their section when the spec was loaded (their sigma and
    radius must be among its sigmas and radii, and certifiable at its n and alpha; their eps among its eps)."""
    for fam, section in spec.sections.items():
        if fam in (CERTIFY, VERIFIED):
            continue
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


#: section settings a given run must match when the spec sets them (the run is then the one the spec describes);
#: n, n0 and alpha are certify's: they decide how strong each certificate is (and the largest certifiable radius);
#: method, refresh and min_margin are verified's: they decide how tight each bound is
SPEC_MATCHED = ("seed", "n_examples", "n", "n0", "alpha")
SPEC_MATCHED_BY_FAMILY: dict[str, tuple[str, ...]] = {VERIFIED: ("method", "refresh", "min_margin")}


def check_given_runs(runs: Sequence[Run], spec: Spec | None, baseline: Path | None) -> None:
    """Given run folders must be what the gate judges them as (one line naming the folder otherwise):

    - no folder twice, no copy of another (a copy would answer a requirement twice);
    - per family one example set and one model per name, no model under two names (the requirements of a family
      are looked up across its runs, so the runs must measure the same models on the same examples);
    - the settings the spec's section sets (seed, n_examples; certify's n, n0 and alpha; verified's method,
      refresh and min_margin) are the run's: the spec's thresholds were sized for those;
    - the baseline, when it is a run folder, is not one of the runs judged against it.
    """
    paths = [r.path.resolve() for r in runs]
    for i, p in enumerate(paths):
        if p in paths[:i]:
            raise RobfiltError(f"--run {runs[i].path} is given twice; pass each run once.")
    if baseline is not None and baseline.is_dir() and baseline.resolve() in paths:
        raise RobfiltError(
            f"--baseline {baseline} is one of the --run folders; a run compared with itself always passes: give "
            "the baseline an earlier run or a baseline file."
        )
    refuse_copies(runs)
    by_family: dict[str, list[Run]] = {}
    for r in runs:
        by_family.setdefault(r.family, []).append(r)
    for fam, group in by_family.items():
        keys = [example_key(r) for r in group]
        other = next((r for r, k in zip(group, keys, strict=True) if k != keys[0]), None)
        if other is not None:
            raise RunStateError(
                f"--run {other.path} measured other examples than {group[0].path} ({fam} runs); the gate judges a "
                "family's requirements across its runs: give runs made on the same data, n_examples and seed."
            )
        refuse_label_conflicts(group, f"{fam} runs given to the gate")
        section = spec.sections.get(fam) if spec is not None else None
        if section is None:
            continue
        for key in (*SPEC_MATCHED, *SPEC_MATCHED_BY_FAMILY.get(fam, ())):
            if key not in section.settings:
                continue
            want = section.settings[key]
            for r in group:
                have = r.manifest.get("seed") if key == "seed" else (r.manifest.get("config") or {}).get(key)
                if have is not None and have != want:
                    raise RunStateError(
                        f"--run {r.path} was made with {key} {have}, but {spec.path.name} [{fam}] sets {key} = {want}; "
                        "judge runs made as the spec says (or drop --run to make them)."
                    )


def produce_runs(spec: Spec, out: Path, progress: ProgressHook | None = None) -> list[Run]:
    """Make the spec's fresh runs, always from scratch (a cached run could hide changed weights)."""
    runs = []
    for fam, section in spec.sections.items():
        folder = out / fam
        log.info("check: making the fresh %s run in %s", fam, folder)
        with surface(Surface.SPEC):  # a problem found while running names the spec's key, not a command-line flag
            run_config(section.config, out=folder, overwrite=True, progress=progress)
        runs.append(load_run(folder))
    return runs


def _policy(spec: Spec | None, tolerance: float | None, mode: str | None) -> BaselinePolicy:
    """The spec's baseline policy (defaults without a spec), with the command line's overrides."""
    policy = spec.policy if spec is not None else BaselinePolicy()
    if tolerance is not None:
        if not (math.isfinite(tolerance) and tolerance >= 0):
            raise RobfiltError(f"--tolerance must be a number >= 0, got {tolerance}.")
        policy = replace(policy, tolerance=tolerance)
    if mode is not None:
        policy = replace(policy, mode=Mode.parse(mode))
    return policy


def _measured_n(runs: Sequence[Run]) -> dict[str, int | None]:
    """Examples per family in given runs (what their checks' effects depend on, rather than the spec's n)."""
    out: dict[str, int | None] = {}
    for r in runs:
        ns = [m.n for m in metrics_from_run(r) if m.n]
        out[r.family] = max(ns) if ns else None
    return out


def _rewrites_baseline(baseline: Path | None, write_to: str | Path | None) -> bool:
    """True when the gate is asked to write the very baseline it names: the first one, or a replacement after an
    intentional change (other attacks, eps or models). Either way it is not judged against: the old file would
    hold the new runs to conditions they no longer measure."""
    if baseline is None or write_to is None:
        return False
    return Path(write_to).resolve() == baseline.resolve()


def plan_gate(
    spec: Spec | None, baseline: Baseline | None, policy: BaselinePolicy, runs: Sequence[Run] = ()
) -> list[PlannedCheck]:
    """What every check can detect (80% power), before any run (see :mod:`..gating.plan`).

    n is the spec's ``n_examples`` per section, or what the given runs measured when the gate checks given runs.
    """
    n_by_family: Mapping[str, int | None] = {}
    plan: list[PlannedCheck] = []
    if spec is not None:
        n_by_family = {fam: getattr(s.config, "n_examples", None) for fam, s in spec.sections.items()}
    if runs:
        n_by_family = {**n_by_family, **_measured_n(runs)}
    if spec is not None:
        requirements = [r for s in spec.sections.values() for r in s.requirements]
        plan += plan_thresholds(requirements, n_by_family, baseline.metrics if baseline else ())
    if baseline is not None:
        plan += plan_baseline(baseline, policy, n_by_family)
    return plan


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
    mode: str | None = None,
    on_plan: PlanHook | None = None,
    overwrite: bool = False,
    workers: int = 1,
) -> GateResult:
    """Run the gate and write its JUnit XML and Markdown summary; see :mod:`..gating` for the rules.

    Args:
        spec: a TOML spec (thresholds, baseline policy, and how to make fresh runs when ``runs`` is empty).
        runs: run folders to check instead of making fresh ones (verified before they are read).
        baseline: overrides the spec's baseline (paths given here may lie anywhere).
        tolerance / mode: override the spec's baseline tolerance and mode (paired, interval, point).
        out: folder for fresh runs and default outputs (default: the spec's ``out``, else ``runs/check``).
        junit / summary: output paths (default ``<out>/junit.xml`` and ``<out>/summary.md``).
        write_baseline: also write the checked runs as a version 2 baseline (metrics + per-example outcomes).
        on_plan: called with the planned checks (their minimum detectable effects) before fresh runs start.
        overwrite: write into an ``out`` that holds files the gate did not write (they are kept; see
            :mod:`..runs.outfolder`); without it such a folder is refused before any work.
        workers: processes that make the fresh runs (``robfilt check --workers``; default 1: this one); the
            worker processes start once, at the first run on a CPU, and serve every run of the gate.
    """
    gate = _Gate.open(spec, runs, baseline, tolerance, mode, out, write_baseline=write_baseline)
    given = _given_runs(gate, runs)  # read and checked, like the spec and the baseline, before anything is written
    with no_empty_folder_on_failure(gate.out):  # a fresh run refused half-way leaves no empty --out either
        if not runs or junit is None or summary is None:
            gate.folder = OutputFolder(gate.out, "check", overwrite=overwrite, legacy=legacy_files).open()
        if runs:
            run_objs, plan = given, plan_gate(gate.spec, gate.base, gate.policy, given)
        else:
            with pool(resolve(workers)):
                run_objs, plan = _fresh_runs(gate, on_plan, progress)
        return _finish(gate, run_objs, plan, junit, summary, write_baseline)


def _finish(
    gate: _Gate, run_objs: list[Run], plan: list[PlannedCheck], junit: str | Path | None,
    summary: str | Path | None, write_baseline: str | Path | None,
) -> GateResult:  # fmt: skip
    """Judge the runs and write the gate's outputs (and, when asked, a baseline of the runs)."""
    metrics = {r.run_id: metrics_from_run(r) for r in run_objs}
    outcomes, judged = _judge(gate, run_objs, metrics)
    result = GateResult(
        name=gate.spec.name if gate.spec else "robfilt check",
        outcomes=outcomes,
        runs=[r.run_id for r in run_objs],
        out=gate.out,
        baseline=str(gate.baseline_path) if gate.baseline_path else None,
        policy=gate.policy,
        paired_checks=paired_family(judged),
        plan=plan,
        run_seconds={r.run_id: run_wall_seconds(r.manifest) for r in run_objs},
    )
    result.notes += _notes(gate, judged)
    if write_baseline is not None:
        write_baseline_file(write_baseline, run_objs)
        result.notes.append(f"wrote a version 2 baseline (metrics and per-example outcomes) to {write_baseline}")
    result.junit = write_junit(result, Path(junit) if junit else _claim(gate.folder, JUNIT))
    result.summary = write_markdown(result, Path(summary) if summary else _claim(gate.folder, SUMMARY))
    if gate.folder is not None:
        gate.folder.finish()
    log.info("check: %d pass, %d warn, %d fail", result.count(PASS), result.count(WARN), result.count(FAIL))
    return result


@dataclass
class _Gate:
    """What a gate call checks against, settled before any run: the spec, the baseline (None when the call
    rewrites it), the policy, and where outputs go (``folder`` None when every output path is given)."""

    spec: Spec | None
    baseline_path: Path | None
    base: Baseline | None
    rewrite: bool
    policy: BaselinePolicy
    out: Path
    folder: OutputFolder | None = None  # claimed by run_gate once the call is known to be judgeable

    @classmethod
    def open(
        cls, spec: str | Path | None, runs: Sequence[str | Path], baseline: str | Path | None,
        tolerance: float | None, mode: str | None, out: str | Path | None, *, write_baseline: str | Path | None,
    ) -> _Gate:  # fmt: skip
        """Read the spec and the baseline, refusing a call that cannot be judged (the output folder is claimed
        later, once the given runs are checked too: a refused call writes nothing)."""
        loaded = load_spec(spec) if spec is not None else None
        if loaded is None and not runs:
            raise RobfiltError("nothing to check; pass --spec FILE, or --run RUN_DIR with --baseline FILE.")
        baseline_path = Path(baseline) if baseline is not None else (loaded.baseline if loaded else None)
        if loaded is None and baseline_path is None and write_baseline is None:
            raise RobfiltError("--run needs something to compare with; pass --baseline FILE or --spec FILE.")
        policy = _policy(loaded, tolerance, mode)
        out_dir = Path(out) if out is not None else (loaded.out if loaded else Path("runs") / "check")
        rewrite = _rewrites_baseline(baseline_path, write_baseline)
        base = read_baseline(baseline_path) if baseline_path is not None and not rewrite else None  # fail fast
        return cls(loaded, baseline_path, base, rewrite, policy, out_dir)


def _given_runs(gate: _Gate, runs: Sequence[str | Path]) -> list[Run]:
    """The given run folders, verified and checked against the spec and the baseline; for fresh runs (none given),
    the spec's requirements checked against what its sections run."""
    if runs:
        given = [load_run(r) for r in runs]
        check_given_runs(given, gate.spec, gate.baseline_path)
        return given
    assert gate.spec is not None
    check_runnable(gate.spec)
    return []


def _fresh_runs(
    gate: _Gate, on_plan: PlanHook | None, progress: ProgressHook | None
) -> tuple[list[Run], list[PlannedCheck]]:
    """The spec's fresh runs and the plan of checks (shown before the runs start)."""
    assert gate.spec is not None
    plan = plan_gate(gate.spec, gate.base, gate.policy)
    if on_plan is not None:
        on_plan(plan)
    return produce_runs(gate.spec, gate.out, progress), plan


def _judge(gate: _Gate, runs: list[Run], metrics: Mapping[str, list]) -> tuple[list[Outcome], list[Judged]]:
    """The outcomes: the spec's thresholds, the baseline checks (with their judgements) and the sanity checks."""
    outcomes: list[Outcome] = []
    if gate.spec is not None:
        requirements = {fam: s.requirements for fam, s in gate.spec.sections.items()}
        outcomes += judge_requirements(requirements, runs, metrics, gate.spec.path.name)
    judged: list[Judged] = []
    if gate.base is not None:
        p = gate.policy
        judged = judge_baseline(gate.base, runs, mode=p.mode, tolerance=p.tolerance, alpha=p.alpha,
                                fallback=p.interval_fallback, discordance=p.discordance, correction=p.correction,
                                metrics=metrics)  # fmt: skip
        outcomes += [j.outcome() for j in judged]
    outcomes += sanity_outcomes(runs, gate.spec.sanity if gate.spec else "warn")
    return outcomes, judged


def _notes(gate: _Gate, judged: list[Judged]) -> list[str]:
    """What a reader of the result must know besides the outcomes: a baseline being replaced, interval fallbacks."""
    notes = []
    if gate.rewrite and gate.baseline_path is not None:
        replaced = "is replaced" if gate.baseline_path.exists() else "does not exist yet"
        notes.append(f"baseline {gate.baseline_path} {replaced}: no baseline checks this time")
    fallen = sum(j.decision.detail.startswith("paired unavailable") for j in judged)
    if fallen:
        notes.append(f"{fallen} baseline check(s) had no per-example outcomes to pair and used the interval rule")
    return notes


__all__ = ["check_runnable", "plan_gate", "produce_runs", "run_gate"]
