"""Progress: the runner reports every work step to the hook, and the CLI turns it into a bar with counts and an ETA.

The hook contract (:class:`robustbench_filters.core.progress.ProgressHook`): one task per run, ``completed`` starts at
0 and rises by the steps of each unit (one per eps, rate or severity) to exactly ``total``.
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console
from rich.progress import Progress

from robustbench_filters.api.evaluate import evaluate
from robustbench_filters.cli import _common, run
from robustbench_filters.runs.runner import run as run_measurement


class Recorder:
    """A fake hook: keeps every call."""

    def __init__(self, stop_at: int | None = None) -> None:
        self.calls: list[tuple[str, int, int, str]] = []
        self.stop_at = stop_at

    def __call__(self, task: str, completed: int, total: int, info: str = "") -> None:
        self.calls.append((task, completed, total, info))
        if self.stop_at is not None and completed >= self.stop_at:
            raise KeyboardInterrupt


def _assert_counts_rise_to_the_total(rec: Recorder, total: int) -> None:
    tasks = {c[0] for c in rec.calls}
    assert len(tasks) == 1, tasks
    assert {c[2] for c in rec.calls} == {total}
    counts = [c[1] for c in rec.calls]
    assert counts[0] == 0 and counts[-1] == total
    assert all(b > a for a, b in zip(counts, counts[1:], strict=False)), counts  # one call per step, never stalls


def _lm_window_steps(n_docs: int) -> int:
    """What the LM case must count: (2 fgsm eps + clean) per window of the 4 selected documents + 2 rates x 4
    documents (the micro LM's 128-character windows; the untrained model's character tokenizer)."""
    from robustbench_filters.data import load_documents
    from robustbench_filters.runs.units import select_examples

    docs = load_documents("austen", "test").texts
    ids = select_examples(len(docs), n_docs, 0).tolist()
    windows = sum(-(-len(docs[i]) // 128) for i in ids)  # every character predicted once, 128 per window
    return windows * (2 + 1) + 2 * n_docs


@pytest.mark.parametrize(
    ("kwargs", "total"),
    [
        # image: 2 batches x (2 attacks x 3 eps + clean)
        (dict(models=["deit"], attacks=["fgsm", "pgd"], eps=[0.01, 0.02, 0.03], steps=2), 2 * (2 * 3 + 1)),
        # corruptions: 2 batches x (1 corruption x 2 severities + clean)
        (dict(models=["deit"], attacks=["corruption:contrast"], severities=[1, 2]), 2 * (2 + 1)),
        # LM: window-steps: (fgsm x 2 eps + clean) x the documents' windows, + wordswap x 2 rates x 4 documents
        (
            dict(models=["lm"], attacks=["fgsm", "wordswap"], eps=[0.05, 0.1], rates=[0.0, 0.1], checkpoint="none"),
            "lm",
        ),
    ],
    ids=["image", "corruption", "lm"],
)
def test_runs_report_every_step_up_to_the_total(kwargs: dict, total: int | str) -> None:
    rec = Recorder()
    n = 8 if kwargs["models"] == ["deit"] else 4
    total = _lm_window_steps(n) if total == "lm" else total
    evaluate(n_examples=n, batch_size=n // 2, progress=rec, **kwargs)
    _assert_counts_rise_to_the_total(rec, total)
    assert all(c[3] for c in rec.calls[1:])  # every step names the model and part


def test_each_step_s_detail_replaces_the_last_instead_of_piling_up() -> None:
    """An embedding PGD reports every step (``eps 0.05 (1/2) step 3/3``): the bar shows the unit and that step
    alone (a run of 2 eps x 3 steps once grew one line of every step so far)."""
    rec = Recorder()
    evaluate(models=["lm"], attacks=["pgd"], eps=[0.05, 0.1], steps=3, n_examples=1, checkpoint="none", progress=rec)
    details = [c[3] for c in rec.calls[1:]]
    stepped = [d for d in details if " step " in d]
    assert stepped and all(d.count(" step ") == 1 and d.count("eps") == 1 for d in stepped), stepped
    assert all(d.startswith("lm pgd") for d in stepped), stepped
    assert "eps 0.1 (2/2) step 3/3" in stepped[-1]


def test_a_resumed_run_counts_its_finished_units_then_goes_on(tmp_path: Path) -> None:
    from robustbench_filters.api.evaluate import measurement_for
    from robustbench_filters.configs import ImageAttackConfig

    config = ImageAttackConfig(models=("deit",), attacks=("fgsm",), eps=(0.01, 0.02), n_examples=12, batch_size=4)
    with pytest.raises(KeyboardInterrupt):
        run_measurement(measurement_for(config), out=tmp_path / "run", progress=Recorder(stop_at=4))
    rec = Recorder()
    run_measurement(measurement_for(config), out=tmp_path / "run", resume=True, progress=rec)
    _assert_counts_rise_to_the_total(rec, 3 * (2 + 1))


# --- the CLI's bar --------------------------------------------------------------------------------------------


def test_pace_times_the_steps_done_since_the_start() -> None:
    pace = _common.Pace(0, now=100.0)
    assert pace.remaining_s(0, 10, now=101.0) is None  # nothing timed yet
    pace.update(2, now=104.0)
    assert pace.remaining_s(2, 10, now=104.0) == pytest.approx(8 * 4 / 2)
    assert pace.remaining_s(2, 10, now=106.0) == pytest.approx(8 * 6 / 2)  # a slow step makes the ETA grow
    assert pace.remaining_s(10, 10, now=120.0) == 0.0


def test_pace_ignores_the_burst_of_finished_units_a_resumed_run_skips() -> None:
    pace = _common.Pace(0, now=100.0)
    pace.handled(100.001)
    for k, t in enumerate((100.0012, 100.0014, 100.0016), start=1):  # finished units, microseconds apart
        pace.update(k * 3, now=t)
        pace.handled(t + 1e-4)
    pace.update(10, now=102.0)  # the first step of real work: one step in 2 s
    assert pace.remaining_s(10, 20, now=102.0) == pytest.approx(10 * 2.0, rel=0.01)
    fresh = _common.Pace(0, now=100.0)
    fresh.update(10, now=102.0)  # without the burst rule: 10 steps in 2 s would promise 2 s
    assert fresh.remaining_s(10, 20, now=102.0) == pytest.approx(2.0)


def test_hook_draws_counts_and_eta_on_the_bar() -> None:
    clock = iter([0.0, 0.0, 1.0, 1.0, 2.0, 2.0])
    buf = io.StringIO()
    bar = Progress(*_common.progress_columns(), console=Console(file=buf, width=120), auto_refresh=False)
    hook = _common.make_hook(bar, clock=lambda: next(clock))
    hook("attack", 0, 4, "")
    hook("attack", 1, 4, "deit pgd")
    hook("attack", 2, 4, "deit pgd")
    (task,) = bar.tasks
    assert (task.completed, task.total, task.fields["info"]) == (2, 4, "deit pgd")
    assert task.fields["pace"].remaining_s(2, 4, now=2.0) == pytest.approx(2.0)
    eta = _common.EtaColumn(clock=lambda: 2.0).render(task)
    assert eta.plain == "eta 0:00:02"


def _terminal(monkeypatch: pytest.MonkeyPatch) -> io.StringIO:
    buf = io.StringIO()
    monkeypatch.setattr(_common, "_stderr", Console(file=buf, force_terminal=True, width=150))
    return buf


ATTACK = ["attack", "--model", "deit", "--attack", "fgsm", "--eps", "0.01,0.02", "--n-examples", "8",
          "--batch-size", "4"]  # fmt: skip


def test_attack_shows_the_bar_on_a_terminal(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    buf = _terminal(monkeypatch)
    assert run([*ATTACK, "--out", str(tmp_path / "a")]) == 0
    text = buf.getvalue()
    assert "6/6" in text and "eta " in text and "deit fgsm" in text


@pytest.mark.parametrize("flag", ["--quiet", "--json"])
def test_quiet_and_json_silence_the_bar(flag: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    buf = _terminal(monkeypatch)
    assert run([*ATTACK, "--out", str(tmp_path / "a"), flag]) == 0
    assert "eta " not in buf.getvalue() and "/6" not in buf.getvalue()


def test_without_a_terminal_progress_is_log_lines() -> None:
    from robustbench_filters.core.progress import LogProgress

    assert not _common._stderr.is_terminal  # pytest captures stderr
    with _common.progress_bar(quiet=False) as hook:
        assert isinstance(hook, LogProgress)
    with _common.progress_bar(quiet=True) as hook:
        assert hook is None


def test_log_lines_come_at_least_once_a_minute_with_an_eta(caplog: pytest.LogCaptureFixture) -> None:
    """Fast steps are folded into a line every half minute; a step that takes minutes still gets a line every half
    minute from the heartbeat. The clock is injected: no sleeps."""
    import logging

    from robustbench_filters.core.progress import LogProgress

    now = [0.0]
    hook = LogProgress(clock=lambda: now[0])
    with caplog.at_level(logging.INFO, logger="robustbench_filters.core.progress"):
        hook("attack", 0, 100, "")
        for k in range(1, 51):  # 50 steps of 7 s
            now[0] += 7.0
            hook("attack", k, 100, f"lm pgd eps 0.1 (1/2) step {k}/100")
        for _ in range(10):  # then one step of 300 s: only the heartbeat speaks
            now[0] += 30.0
            hook.beat()
        now[0] += 1.0
        hook("attack", 100, 100, "lm pgd eps 0.1 (2/2) step 100/100")
    lines = [r.getMessage() for r in caplog.records]
    assert lines[0].startswith("attack 0/100 (0%)") and lines[-1].startswith("attack 100/100 (100%)")
    assert (
        "0:00:35 elapsed, eta 0:11:05" in lines[1] and "lm pgd eps 0.1 (1/2) step 5/100" in lines[1]
    )  # 5 steps in 35 s: 95 left at 7 s
    assert sum("attack 50/100" in ln for ln in lines) == 1 + 10  # the 50th step's line, then one per 30 s
    assert len(lines) == 1 + 350 // 35 + 10 + 1  # a line per 35 s of fast steps (>= 30 s apart), never a gap > 60 s


def test_the_heartbeat_thread_stops_with_the_block() -> None:
    import threading

    from robustbench_filters.core.progress import LogProgress

    with LogProgress(interval=3600.0).heartbeat():
        assert any(t.name == "robfilt-progress" for t in threading.enumerate())
    assert not any(t.name == "robfilt-progress" for t in threading.enumerate())
