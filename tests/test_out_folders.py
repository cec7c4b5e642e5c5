"""Outputs never destroy what robfilt did not write: every ``--out`` against a folder of a user's own files.

The rule (runs/outfolder.py): a folder that is not a robfilt output of that kind, or that holds files no earlier
output listed, is refused in one line unless ``--overwrite``; even then only files robfilt wrote are removed, and
a user's file robfilt would have to replace is refused. Each case snapshots the user's files and checks every
byte survives.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from report_synthetic import image_rows, write_run
from run_summaries import image_summary
from small_study import TWO_SEEDS

from robustbench_filters.cli import run
from robustbench_filters.core.errors import RobfiltError
from robustbench_filters.gate.run import run_gate
from robustbench_filters.report import build_report
from robustbench_filters.runs.folder import RunWriter
from robustbench_filters.runs.outfolder import LEDGER, OutputFolder
from robustbench_filters.study import write_up
from robustbench_filters.study.folder import open_study_folder
from robustbench_filters.train.loop import Recipe, train

USER_FILES = {
    "notes.md": "my notes",
    "figures/fig1.pdf": "%PDF my figure",
    "figures/robust_accuracy_vs_eps.svg": "<svg>mine, never written by robfilt here</svg>",
    "tables/t1.tex": "\\begin{tabular}",
    "draft/main.tex": "\\documentclass{article}",
}


def _paper(folder: Path, files: dict[str, str] = USER_FILES) -> dict[str, bytes]:
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    return {name: (folder / name).read_bytes() for name in files}


def _intact(folder: Path, snapshot: dict[str, bytes]) -> None:
    for name, blob in snapshot.items():
        assert (folder / name).read_bytes() == blob, f"{name} was changed or removed"


def _one_line(capsys, needle: str) -> None:
    cap = capsys.readouterr()
    lines = cap.err.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], cap.err


@pytest.fixture(scope="module")
def image_run(tmp_path_factory) -> Path:
    """A small finished image attack run (synthetic rows in the engine's schema: no model needed)."""
    root = tmp_path_factory.mktemp("runs")
    rows = image_rows(np.random.default_rng(0))
    rows = rows[~rows["attack"].str.startswith("corruption:")]
    config = {"data": "fashion-mnist", "data_checksum": "sum-a", "example_ids_sha256": "ids-a", "n_examples": 24,
              "seed": 0}  # fmt: skip
    return write_run(root / "img", "attack", rows, config, family="image")


# --- robfilt report --------------------------------------------------------------------------------------------


def test_report_into_a_paper_folder_is_refused_in_one_line_even_quiet(image_run, tmp_path, capsys) -> None:
    paper = tmp_path / "paper"
    snap = _paper(paper)
    assert run(["report", str(image_run), "--out", str(paper), "-q"]) == 2
    _one_line(capsys, "which robfilt did not write")
    _intact(paper, snap)
    assert not (paper / "index.md").exists() and not (paper / LEDGER).exists()


def test_report_with_overwrite_keeps_every_user_file(image_run, tmp_path, capsys) -> None:
    paper = tmp_path / "paper"
    snap = _paper(paper, {k: v for k, v in USER_FILES.items() if not k.endswith(".svg")})
    assert run(["report", str(image_run), "--out", str(paper), "--overwrite", "-q", "--figures", "png,pdf"]) == 0
    _intact(paper, snap)
    assert (paper / "tables" / "robust_accuracy.csv").exists() and (paper / "figures" / "robust_accuracy_vs_eps.png")
    ledger = json.loads((paper / LEDGER).read_text())
    assert "tables/robust_accuracy.csv" in ledger["files"] and "notes.md" not in ledger["files"]
    # fewer formats the second time: robfilt removes its own stale files, and nothing of the user's
    assert run(["report", str(image_run), "--out", str(paper), "--overwrite", "-q", "--figures", "none",
                "--format", "csv"]) == 0  # fmt: skip
    _intact(paper, snap)
    assert not (paper / "figures" / "robust_accuracy_vs_eps.png").exists()
    assert not (paper / "tables" / "robust_accuracy.md").exists() and (paper / "tables" / "robust_accuracy.csv")
    # the same folder without --overwrite: still refused, since the user's files are there
    assert run(["report", str(image_run), "--out", str(paper), "-q"]) == 2
    _one_line(capsys, "'draft/main.tex'")


def test_report_never_replaces_a_user_file_of_the_same_name(image_run, tmp_path, capsys) -> None:
    paper = tmp_path / "paper"
    snap = _paper(paper)  # holds figures/robust_accuracy_vs_eps.svg, a name the report would write
    assert run(["report", str(image_run), "--out", str(paper), "--overwrite", "--figures", "svg", "-q"]) == 2
    _one_line(capsys, "would replace")
    _intact(paper, snap)
    with pytest.raises(RobfiltError, match="index.md"):
        (paper / "index.md").write_text("# my own index")
        build_report([image_run], paper, figures=(), overwrite=True)
    assert (paper / "index.md").read_text() == "# my own index"


def test_report_rewrites_its_own_report_without_overwrite(image_run, tmp_path) -> None:
    out = tmp_path / "report"
    first = build_report([image_run], out, figures=("png",), html=True)
    assert first.html is not None and (out / "index.html").exists()
    build_report([image_run], out, figures=(), html=False)  # fewer outputs: the stale ones go
    assert not (out / "index.html").exists() and not list(out.rglob("*.png"))
    (out / "mine.txt").write_text("x")
    with pytest.raises(RobfiltError, match="mine.txt"):
        build_report([image_run], out, figures=())


def test_a_report_written_before_ledgers_is_recognised_by_its_index(image_run, tmp_path) -> None:
    out = tmp_path / "old"
    build_report([image_run], out, figures=("png",))
    (out / LEDGER).unlink()  # as an earlier robfilt left it: index.md lists the files
    build_report([image_run], out, figures=())
    assert not list(out.rglob("*.png"))
    (out / LEDGER).unlink()
    (out / "tables" / "mine.csv").write_text("a,b")
    with pytest.raises(RobfiltError, match="tables/mine.csv"):
        build_report([image_run], out, figures=())
    assert (out / "tables" / "mine.csv").read_text() == "a,b"


def test_report_refuses_a_run_folder_and_another_kind_of_output(image_run, tmp_path) -> None:
    with pytest.raises(RobfiltError, match="robfilt run output"):
        build_report([image_run], image_run, figures=(), overwrite=True)
    other = tmp_path / "other"
    OutputFolder(other, "check").open().finish()
    with pytest.raises(RobfiltError, match="robfilt check output"):
        build_report([image_run], other, figures=(), overwrite=True)


# --- run folders (attack, lipschitz, certify) --------------------------------------------------------------------


def _run_into(out: Path, *, resume: bool = False, overwrite: bool = False) -> None:
    rows = pd.DataFrame({"model": ["m"], "example_id": [0], "attack": ["clean"], "eps": [0.0], "correct": [True]})
    with RunWriter(out, "attack", {"n": 1}, seed=0, resume=resume, overwrite=overwrite, units=["all"],
                   extra={"family": "image"}) as w:  # fmt: skip
        w.write_part("all", rows)
        w.finish(rows, image_summary(rows))


def test_run_folder_overwrite_removes_only_the_runs_files(tmp_path) -> None:
    out = tmp_path / "run"
    _run_into(out)
    snap = _paper(out, {"notes.md": "mine", "plots/mine.png": "png"})
    with pytest.raises(RobfiltError, match="notes.md|plots/mine.png"):
        _run_into(out, resume=True)  # files the run did not write: only --overwrite writes beside them
    _run_into(out, overwrite=True)
    _intact(out, snap)
    (out / "parts" / "mine.txt").write_text("mine")
    with pytest.raises(RobfiltError, match="parts/mine.txt") as err:  # the true reason: --overwrite empties parts/
        _run_into(out, overwrite=True)
    assert "inside parts/, which the run empties or replaces, and robfilt never removes a file" in str(err.value)
    assert "would replace" not in str(err.value)
    assert (out / "parts" / "mine.txt").read_text() == "mine"


def test_run_folder_into_a_user_folder_is_refused_even_with_overwrite_of_its_files(tmp_path) -> None:
    out = tmp_path / "mine"
    snap = _paper(out, {"manifest.txt": "mine", "rows.parquet": "not robfilt's"})
    with pytest.raises(RobfiltError, match="not a robfilt run folder"):
        _run_into(out)
    with pytest.raises(RobfiltError, match="rows.parquet.*and the run writes a file of that name"):
        _run_into(out, overwrite=True)
    _intact(out, snap)
    snap = _paper(out, {"manifest.json": '{"name": "my web app"}'})  # a manifest.json that is not robfilt's
    with pytest.raises(RobfiltError, match="not a robfilt run manifest"):
        _run_into(out, overwrite=True)
    _intact(out, snap)


# --- robfilt study (--overwrite and --write-up) -----------------------------------------------------------------


@pytest.fixture(params=["ledger", "before ledgers"])
def study_copy(small_study, tmp_path, request) -> Path:
    """A finished study (no checkpoints or parts) as a user's clone holds it (tests/small_study.py); also as a study
    written before output ledgers existed (recognised by its study.json)."""
    copy = tmp_path / "study"
    shutil.copytree(small_study, copy)
    if request.param == "before ledgers":
        for ledger in copy.rglob(LEDGER):
            ledger.unlink()
    return copy


def test_study_write_up_refuses_a_user_file_and_overwrite_removes_only_the_studys_files(study_copy, capsys) -> None:
    snap = _paper(study_copy, {"notes.md": "mine", "figures/my_plot.png": "png", "runs/s0/vision-attack/mine.txt":
                               "mine", "report/tables/mine.csv": "a", "checkpoints/mine/weights.bin": "w"})  # fmt: skip
    readme = (study_copy / "README.md").read_bytes()
    with pytest.raises(RobfiltError, match="which robfilt did not write"):
        write_up(TWO_SEEDS, study_copy, report=False)
    assert (study_copy / "README.md").read_bytes() == readme
    open_study_folder(study_copy, resume=False, overwrite=True)  # what --overwrite does before training again
    _intact(study_copy, snap)
    left = sorted(p.relative_to(study_copy).as_posix() for p in study_copy.rglob("*") if p.is_file())
    assert left == sorted(snap), left  # every file of the study went; every file of the user stayed


def test_study_write_up_of_an_old_study_records_what_it_wrote(study_copy) -> None:
    write_up(TWO_SEEDS, study_copy, report=False)
    ledger = json.loads((study_copy / LEDGER).read_text())
    assert {"README.md", "results.json", "scores.csv", "study.json"} <= set(ledger["files"])
    (study_copy / "figures").mkdir(exist_ok=True)
    (study_copy / "figures" / "mine.png").write_text("mine")
    with pytest.raises(RobfiltError, match="figures/mine.png"):
        write_up(TWO_SEEDS, study_copy, report=False)


# --- robfilt check --out -----------------------------------------------------------------------------------------


def test_check_out_with_user_files_is_refused_and_overwrite_keeps_them(image_run, tmp_path) -> None:
    ci = tmp_path / "ci"
    snap = _paper(ci, {"notes.md": "mine", "image/mine.txt": "mine"})
    with pytest.raises(RobfiltError, match="which robfilt did not write"):
        run_gate(runs=[image_run], write_baseline=tmp_path / "b.json", out=ci)
    assert not (ci / "junit.xml").exists() and not (tmp_path / "b.json").exists()
    result = run_gate(runs=[image_run], write_baseline=tmp_path / "b.json", out=ci, overwrite=True)
    _intact(ci, snap)
    assert result.junit == ci / "junit.xml" and (ci / "summary.md").exists()
    run_gate(runs=[image_run], baseline=tmp_path / "b.json", out=tmp_path / "ci2")  # a gate's own out: rewritten
    run_gate(runs=[image_run], baseline=tmp_path / "b.json", out=tmp_path / "ci2")
    mine = tmp_path / "ci3"
    _paper(mine, {"junit.xml": "<my own junit/>"})
    with pytest.raises(RobfiltError, match="junit.xml"):
        run_gate(runs=[image_run], baseline=tmp_path / "b.json", out=mine, overwrite=True)
    assert (mine / "junit.xml").read_text() == "<my own junit/>"


# --- robfilt train --out -----------------------------------------------------------------------------------------


def test_train_never_removes_a_users_weights_or_notes(tmp_path) -> None:
    recipe = Recipe(steps=1, batch_size=8, eval_max=10)
    out = tmp_path / "mine"
    snap = _paper(out, {"model.safetensors": "my own weights", "notes.md": "mine"})
    with pytest.raises(RobfiltError, match="not a robfilt training folder"):
        train("deit", recipe=recipe, out=out)
    with pytest.raises(RobfiltError, match="model.safetensors"):
        train("deit", recipe=recipe, out=out, overwrite=True)
    _intact(out, snap)
    other = tmp_path / "other"
    snap = _paper(other, {"notes.md": "mine", "figs/a.png": "png"})
    train("deit", recipe=recipe, out=other, overwrite=True)
    train("deit", recipe=recipe, out=other, overwrite=True, seed=1)  # replaces only its own files
    _intact(other, snap)
    assert json.loads((other / "card.json").read_text())["recipe"]["seed"] == 1
    with pytest.raises(RobfiltError, match="which robfilt did not write"):
        train("deit", recipe=recipe, out=other, resume=True)


# --- scripts and benchmarks --------------------------------------------------------------------------------------


def _script(name: str):
    path = Path(__file__).resolve().parents[1] / "scripts" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"_script_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_build_assets_replaces_only_the_asset_files_it_listed(tmp_path) -> None:
    assets = _script("build_assets")
    out = tmp_path / "assets"
    _paper(out, {"austen/train.txt.gz": "x", "stopwords.txt": "a"})
    (out / "checksums.json").write_text(json.dumps({"format": "robfilt-assets", "files": {
        "austen/train.txt.gz": "0", "stopwords.txt": "0"}}))  # fmt: skip
    assert assets.prepare_out(out) == set()
    snap = _paper(out, {"austen/mine.txt": "my notes"})
    with pytest.raises(SystemExit, match="austen/mine.txt"):
        assets.prepare_out(out, overwrite=True)  # inside a folder the build replaces: refused always
    (out / "austen" / "mine.txt").unlink()
    snap = _paper(out, {"README-mine.md": "mine"})
    with pytest.raises(SystemExit, match="README-mine.md"):
        assets.prepare_out(out)
    assert assets.prepare_out(out, overwrite=True) == {"README-mine.md"}  # kept, and never claimed as an asset
    _intact(out, snap)


def test_benchmark_results_never_replace_a_users_file(tmp_path, monkeypatch) -> None:
    import benchmarks._common as B

    out = tmp_path / "bench"
    snap = _paper(out, {"b2_engine_overhead.md": "my own notes", "smoke/anything.txt": "x"})
    with pytest.raises(RobfiltError, match="b2_engine_overhead.md"):
        B.result_folder(out, "smoke")
    monkeypatch.setitem(B._options, "overwrite", True)
    table = pd.DataFrame({"a": [1]})
    with pytest.raises(RobfiltError, match="would replace"):
        B.write("b2_engine_overhead", {"mode": "smoke", "title": "t", "question": "q", "machine": _MACHINE}, {"t": table},
                out)  # fmt: skip
    _intact(out, snap)
    B.write("b1_eps_sweep", {"mode": "smoke", "title": "t", "question": "q", "machine": _MACHINE}, {"t": table}, out)
    monkeypatch.setitem(B._options, "overwrite", False)
    B.write("b1_eps_sweep", {"mode": "smoke", "title": "t", "question": "q", "machine": _MACHINE}, {"t": table},
            out / "again")  # fmt: skip
    _intact(out, snap)


_MACHINE = {"cpu_cores": 2, "torch_threads": 1, "cuda": None, "load_avg_1min": 0.0, "contended": False,
            "torch": "x", "when": "now"}  # fmt: skip
