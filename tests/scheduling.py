"""How ``make test``'s pytest workers share the suite (pytest-xdist, ``--dist loadfile``): heaviest files first, and
the files that read one session folder in one worker.

With xdist's own order (files with the most tests first) the heavy files, which have few tests, came last: the
suite ended with one worker running a study fixture while the other idled. And two files that read the two-seed
smoke study (``small_study``) landed on different workers, so one of them waited about 50 s on the other's lock.
Here a worker always takes the heaviest file left (longest processing time first, the classic greedy for
scheduling on identical machines), and the files that share a session folder form one unit of work.

The weights are seconds measured on 2 idle cores; they only order the work, so a stale one costs time, never a
result. Files not listed weigh :data:`PER_TEST` seconds per test.
"""

from __future__ import annotations

from pathlib import PurePosixPath

from xdist.scheduler import LoadFileScheduling

#: files that read one folder made once per session: one unit of work, so that folder is made without a wait
TOGETHER = {"test_cross_run.py": "small-study", "test_out_folders.py": "small-study",
            "test_workers.py": "every-kind-alone", "test_distributed.py": "every-kind-alone"}  # fmt: skip
#: seconds per file (setup, call and teardown of all its tests, with its fixtures), 2 idle cores, 2026-12-07
SECONDS: dict[str, float] = {
    "test_crown_models.py": 88, "test_study.py": 80, "test_out_folders.py": 64, "test_workers.py": 57,
    "test_distributed.py": 57, "test_exit_codes.py": 46, "test_docs_own_models.py": 45, "test_bench_smoke.py": 43,
    "test_crown_run.py": 42, "test_lipschitz.py": 39, "test_cross_run.py": 38, "test_attack_engine.py": 37,
    "test_lipschitz_images.py": 35, "test_hf_bad_inputs.py": 33, "test_install.py": 31, "test_boundaries.py": 31,
    "test_crash_safety.py": 27, "test_bench_b7.py": 24, "test_timm_registry.py": 24, "test_crown_exact.py": 23,
    "test_integrity.py": 23, "test_option_combinations.py": 18, "test_crash_resume_kinds.py": 17,
    "test_train.py": 16, "test_lm_attacks.py": 16, "test_certify_run.py": 14, "test_paper_mode.py": 14,
    "test_report.py": 14, "test_bench_b6.py": 13, "test_study_figures.py": 13, "test_cascade_phases.py": 13,
    "test_gate_check.py": 13, "test_cli_startup.py": 13, "test_report_lipschitz_gap.py": 12,
    "test_option_kinds.py": 12, "test_refusals_write_nothing.py": 12, "test_report_figures.py": 12,
    "test_default_attack.py": 11, "test_bench_b8.py": 11, "test_smoothing_zoo.py": 10, "test_attack_l2.py": 10,
    "test_crown_lipschitz.py": 10,
}  # fmt: skip
#: the weight of a test in a file not in :data:`SECONDS`
PER_TEST = 0.3


def unit_of(nodeid: str) -> str:
    """The unit of work a test belongs to: its file, or the name of the files it shares a session folder with."""
    file = nodeid.split("::", 1)[0]
    return TOGETHER.get(PurePosixPath(file).name, file)


def weight(unit: str, tests: int) -> float:
    """Expected seconds of a unit of work with ``tests`` tests."""
    names = [f for f, u in TOGETHER.items() if u == unit] or [PurePosixPath(unit).name]
    known = [SECONDS[n] for n in names if n in SECONDS]
    return sum(known) if known else PER_TEST * tests


class HeavyFirst(LoadFileScheduling):
    """``--dist loadfile`` with :func:`unit_of`'s units, the heaviest unit left given to each worker that asks."""

    def _split_scope(self, nodeid: str) -> str:
        return unit_of(nodeid)

    def _assign_work_unit(self, node) -> None:  # noqa: ANN001 (xdist's WorkerController)
        heaviest = max(self.workqueue, key=lambda unit: weight(unit, len(self.workqueue[unit])))
        self.workqueue.move_to_end(heaviest, last=False)  # xdist's own method pops the first unit
        super()._assign_work_unit(node)
