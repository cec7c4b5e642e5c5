"""Trustworthy run folders: every class of tampering, foreign input or user-code failure gives either the numbers of
an untouched run or a one-line refusal (exit 2) that changes nothing on disk."""

from __future__ import annotations

import json
import shutil
import signal
from pathlib import Path

import finished
import pandas as pd
import pytest
from crash_kill import paused_at
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from robustbench_filters.cli import run
from robustbench_filters.runs.folder import load_run, verify_run
from robustbench_filters.runs.lock import RunLock

BASE = finished.ARGS  # the session's finished run (tests/finished.py): 8 units, 4 fgsm + 4 clean


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _refused(capfd, argv: list[str], needle: str, folder: Path | None = None) -> None:
    """exit 2, one 'error:' line containing ``needle``, and nothing under ``folder`` changed."""
    before = _snapshot(folder) if folder is not None and folder.exists() else None
    code = run(argv)
    err = capfd.readouterr().err.strip()
    assert code == 2, err
    assert err.startswith("error:") and len(err.splitlines()) == 1 and needle in err, err
    if before is not None:
        assert _snapshot(folder) == before


@pytest.fixture
def reference(finished_run: Path) -> Path:
    """The session's finished run of BASE (read only: tests tamper with copies)."""
    return finished_run


def _copy(reference: Path, tmp_path: Path) -> Path:
    out = tmp_path / "run"
    shutil.copytree(reference, out)
    return out


def _same(a: Path, b: Path) -> None:
    ra, rb = load_run(a), load_run(b)
    pd.testing.assert_frame_equal(ra.rows, rb.rows)
    assert ra.summary == rb.summary


# --- tamper-evident parts, rows and summaries --------------------------------------------------------------------


def test_manifest_records_planned_units_and_every_hash(reference: Path) -> None:
    manifest = json.loads((reference / "manifest.json").read_text())
    assert manifest["format_version"] == 3 and len(manifest["units"]) == 8  # 3 since issue 42 (2 still reads)
    assert set(manifest["parts"]) == set(manifest["units"])
    assert manifest["rows_sha256"] and manifest["summary_sha256"]
    assert set(manifest["config"]["weights"]) == {"deit"} and manifest["config"]["examples"]
    verify_run(reference)


def test_edited_part_is_refused_on_resume_and_by_readers(reference, tmp_path, capfd) -> None:
    out = _copy(reference, tmp_path)
    part = sorted((out / "parts").glob("*.parquet"))[0]
    rows = pd.read_parquet(part)
    rows.loc[0, "correct"] = not rows.loc[0, "correct"]
    rows.to_parquet(part, index=False)
    _refused(capfd, [*BASE, "--out", str(out), "--resume"], part.name, out)
    _refused(capfd, ["verify", str(out)], part.name)
    _refused(capfd, ["report", str(out), "--out", str(tmp_path / "rep")], part.name)
    assert not (tmp_path / "rep").exists()


@pytest.mark.usefixtures("gate_in_process")  # `check` evaluated here, not in a child
def test_edited_rows_or_summary_is_refused_by_report_check_and_verify(reference, tmp_path, capfd) -> None:
    out = _copy(reference, tmp_path)
    rows = pd.read_parquet(out / "rows.parquet")
    rows.loc[rows.attack == "fgsm", "correct"] = True  # a "more robust" model
    rows.to_parquet(out / "rows.parquet", index=False)
    _refused(capfd, ["report", str(out), "--out", str(tmp_path / "rep")], "rows.parquet")
    _refused(capfd, ["verify", str(out)], "rows.parquet")
    out2 = _copy(reference, tmp_path / "b")
    summary = json.loads((out2 / "summary.json").read_text())
    summary["checks_summary"]["passed"] = True
    (out2 / "summary.json").write_text(json.dumps(summary))
    _refused(capfd, ["check", "--run", str(out2), "--write-baseline", str(tmp_path / "b.json")], "summary.json")


def test_foreign_and_other_run_parts_are_refused(reference, tmp_path, capfd) -> None:
    out = _copy(reference, tmp_path)
    (out / "parts" / "m7-pgd-b0000.parquet").write_bytes((out / "rows.parquet").read_bytes())
    _refused(capfd, [*BASE, "--out", str(out), "--resume"], "no planned unit", out)
    other = tmp_path / "other"
    assert run([*BASE, "--seed", "5", "--out", str(other)]) == 0
    out2 = _copy(reference, tmp_path / "c")
    for suffix in (".parquet", ".json"):
        name = "m0-fgsm-b0000" + suffix
        shutil.copy(other / "parts" / name, out2 / "parts" / name)
    _refused(capfd, [*BASE, "--out", str(out2), "--resume"], "another run", out2)


def test_deleted_parts_are_recomputed_to_the_same_numbers(reference, tmp_path) -> None:
    out = _copy(reference, tmp_path)
    for part in sorted((out / "parts").glob("*.parquet"))[::3]:
        part.unlink()
    assert run([*BASE, "--out", str(out), "--resume"]) == 0
    _same(reference, out)


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    ops=st.lists(
        st.tuples(st.sampled_from(["delete", "add", "truncate", "edit", "drop-hash"]), st.integers(0, 7)),
        min_size=1,
        max_size=4,
    )
)
@example(ops=[("truncate", 0), ("edit", 0)])  # an edit after a truncation once broke the test itself
def test_resume_after_random_damage_reproduces_or_refuses(reference, tmp_path_factory, ops) -> None:
    """Property: --resume either gives the untouched run exactly, or refuses with exit 2 and changes nothing."""
    out = tmp_path_factory.mktemp("damage") / "run"
    shutil.copytree(reference, out)
    parts = sorted((out / "parts").glob("*.parquet"))
    for op, i in ops:
        part = parts[i]
        if not part.exists():
            continue
        if op == "delete":
            part.unlink()
        elif op == "add":
            (out / "parts" / f"m3-fgsm-b{i:04d}.parquet").write_bytes(part.read_bytes())
        elif op == "truncate":
            part.write_bytes(part.read_bytes()[: len(part.read_bytes()) // 2])
        elif op == "edit":
            if part.read_bytes()[-4:] != b"PAR1":
                continue  # truncated by an earlier op: no longer a table to edit (and already damaged)
            rows = pd.read_parquet(part)
            rows.loc[0, "margin"] = rows.loc[0, "margin"] + 1.0
            rows.to_parquet(part, index=False)
        else:  # a part whose hash record is missing: an interrupted write, recomputed
            part.with_suffix(".json").unlink(missing_ok=True)
    before = _snapshot(out)
    code = run([*BASE, "--out", str(out), "--resume"])
    if code == 0:
        _same(reference, out)
    else:
        assert code == 2 and _snapshot(out) == before


# --- fingerprints of what was measured ---------------------------------------------------------------------------


def test_resume_with_other_weights_at_the_same_path_is_refused(tmp_path, capfd) -> None:
    from robustbench_filters import create_model, save_checkpoint

    ckpt = tmp_path / "ckpt"
    save_checkpoint(create_model("deit", checkpoint="none"), ckpt)
    args = [a if a != "none" else str(ckpt) for a in BASE]
    out = tmp_path / "run"
    assert run([*args, "--out", str(out)]) == 0
    shutil.rmtree(ckpt)
    save_checkpoint(create_model("deit", checkpoint="none"), ckpt)  # retrained: new weights, same path
    _refused(capfd, [*args, "--out", str(out), "--resume"], "weights of deit changed", out)


def test_resume_with_other_data_is_refused(tmp_path, capfd) -> None:
    from PIL import Image

    folder = tmp_path / "images"
    for c in range(2):
        (folder / f"c{c}").mkdir(parents=True)
        for i in range(6):
            Image.new("L", (28, 28), color=20 * i + 100 * c).save(folder / f"c{c}" / f"{i}.png")
    args = ["attack", "--model", "deit", "--attack", "fgsm", "--eps", "0.02", "--checkpoint", "none",
            "--n-examples", "4", "--data", f"imagefolder:{folder}", "--model-arg", "num_classes=2", "-q"]  # fmt: skip
    out = tmp_path / "run"
    if run([*args, "--out", str(out)]) != 0:
        pytest.skip("registry models take no num_classes argument in this build")
    for p in folder.rglob("*.png"):
        Image.new("L", (28, 28), color=7).save(p)
    _refused(capfd, [*args, "--out", str(out), "--resume"], "data changed", out)


# --- repeated values, foreign folders -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "change",
    [
        ["--eps", "0.01,0.01"],
        ["--model", "deit,deit"],
        ["--attack", "fgsm,fgsm"],
        ["--model", "lm", "--attack", "wordswap", "--rate", "0.1,0.1"],
        ["--attack", "corruption", "--severity", "2,2"],
    ],
)
def test_repeated_values_are_refused(tmp_path, capfd, change: list[str]) -> None:
    argv = list(BASE)
    for flag, value in zip(change[::2], change[1::2], strict=True):
        if flag in argv:
            argv[argv.index(flag) + 1] = value
        else:
            argv += [flag, value]
    if "--rate" in change or "--severity" in change:
        argv = [a for i, a in enumerate(argv) if not (a == "--eps" or (i and argv[i - 1] == "--eps"))]
    _refused(capfd, [*argv, "--out", str(tmp_path / "run")], "twice")
    assert not (tmp_path / "run").exists()


def test_resume_into_a_foreign_folder_touches_nothing(reference, tmp_path, capfd) -> None:
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("my thesis")
    _refused(capfd, [*BASE, "--out", str(mine), "--resume"], "not a robfilt run folder", mine)
    lip = tmp_path / "lip"
    args = ["lipschitz", "--model", "deit", "--checkpoint", "none", "--data", "synthetic", "-n", "1", "--method",
            "power", "--no-bounds", "-q", "--out", str(lip)]  # fmt: skip
    assert run(args) == 0
    _refused(capfd, [*BASE, "--out", str(lip), "--resume"], "'lipschitz' run", lip)


# --- model references are code -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ("def build():\n    return 3\n", "not a torch nn.Module"),
        ("def build():\n    raise ValueError('bad config')\n", "bad config"),
        ("import sys\ndef build():\n    sys.exit(0)\n", "sys.exit(0)"),
    ],
)
def test_factory_failures_are_one_line(tmp_path, capfd, monkeypatch, body: str, needle: str) -> None:
    (tmp_path / "net.py").write_text(body)
    monkeypatch.chdir(tmp_path)
    argv = [*BASE[:2], "net.py:build", *BASE[3:], "--out", str(tmp_path / "run")]
    _refused(capfd, argv, needle)
    assert not (tmp_path / "run").exists()


def test_errors_inside_a_users_model_are_one_line_and_resumable(tmp_path, capfd, monkeypatch) -> None:
    (tmp_path / "net.py").write_text(
        "import os, torch\n"
        "from robustbench_filters import create_model\n"
        "class Flaky(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        torch.manual_seed(0)\n"
        "        self.inner = create_model('deit', checkpoint='none')\n"
        "    def forward(self, x):\n"
        "        if os.environ.get('FLAKY') and x.shape[0] == 3 and not torch.is_grad_enabled():\n"
        "            raise OSError(5, 'sensor unplugged')\n"
        "        return self.inner(x)\n"
        "def build():\n"
        "    return Flaky()\n"
    )
    monkeypatch.chdir(tmp_path)
    argv = [*BASE[:2], "net.py:build", *BASE[3:], "--checkpoint", "zoo", "--out", str(tmp_path / "run")]
    monkeypatch.setenv("FLAKY", "1")
    code = run(argv)
    err = capfd.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert "net.py:build" in err and "OSError" in err and "sensor unplugged" in err and "disk" not in err
    assert (tmp_path / "run" / "manifest.json").exists()
    monkeypatch.delenv("FLAKY")
    assert run([*argv, "--resume"]) == 0


@pytest.mark.usefixtures("gate_in_process")  # `check` evaluated here, not in a child
def test_spec_naming_code_needs_allow_code_and_paths_stay_inside(tmp_path, capfd) -> None:
    project = tmp_path / "project"
    (project / "ci").mkdir(parents=True)
    (project / "pyproject.toml").write_text("")
    (project / "ci" / "net.py").write_text("from robustbench_filters import create_model\ndef build():\n"
                                           "    return create_model('deit', checkpoint='none')\n")  # fmt: skip
    outside = tmp_path / "outside"
    outside.mkdir()
    (project / "ci" / "link").symlink_to(outside)
    spec = project / "ci" / "robustness.toml"
    section = '[image]\nmodels = ["net.py:build"]\nattacks = ["fgsm"]\neps = [0.02]\nn_examples = 4\n'
    require = "[[image.require]]\nmin_acc = 0.0\n"
    spec.write_text(section + require)
    _refused(capfd, ["check", "--spec", str(spec)], "allow_code = true")
    spec.write_text(
        "allow_code = true\n"
        + section.replace("n_examples", 'data = "imagefolder:../../outside"\nn_examples')
        + require
    )
    _refused(capfd, ["check", "--spec", str(spec)], "outside the project")
    spec.write_text(
        "allow_code = true\n" + section.replace("n_examples", 'data = "imagefolder:link"\nn_examples') + require
    )
    _refused(capfd, ["check", "--spec", str(spec)], "outside the project")
    spec.write_text(
        section.replace('"net.py:build"', '"../../outside/x.py:build"').replace("[image]", "allow_code = true\n[image]")
        + require
    )
    _refused(capfd, ["check", "--spec", str(spec)], "outside the project")


# --- locks and Ctrl-C --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("content", ["", "garbage \x00\xff", "pid=1 host=elsewhere\n", "pid=999999 host=here\n"])
def test_a_left_over_lock_file_never_blocks(tmp_path, content: str) -> None:
    out = tmp_path / "run"
    out.mkdir()
    (out / ".lock").write_text(content, errors="ignore")
    assert run([*BASE, "--out", str(out)]) == 0
    assert not (out / ".lock").exists()


def test_two_holders_cannot_share_a_lock(tmp_path) -> None:
    from robustbench_filters.core.errors import RunStateError

    first = RunLock(tmp_path)
    first.acquire()
    with pytest.raises(RunStateError, match="another robfilt process"):
        RunLock(tmp_path).acquire()
    first.release()
    second = RunLock(tmp_path)
    second.acquire()  # free again once released
    second.release()


def test_ctrl_c_ends_with_one_line_130_and_resumes_identically(reference, tmp_path) -> None:
    out = tmp_path / "run"
    # Ctrl-C while the child waits right after its 2nd of 8 units was recorded (a point it reports, not a race)
    with paused_at([*BASE, "--out", str(out)], out, "parts/*.json", 2) as child:
        code, err = child.stop(signal.SIGINT)
    assert code == 130, err
    assert err.strip().splitlines() == ["interrupted; continue with --resume"]
    assert not (out / ".lock").exists()
    assert len(list((out / "parts").glob("*.json"))) == 2
    assert run([*BASE, "--out", str(out), "--resume"]) == 0
    _same(reference, out)
