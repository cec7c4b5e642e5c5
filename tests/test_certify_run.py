"""robfilt certify through the runner: rows, summary, checks, resume and bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from robustbench_filters.cli import run
from robustbench_filters.runs.folder import load_run

ARGS = ["certify", "--model", "deit", "--checkpoint", "zoo:sigma0.25", "--n-examples", "6", "--batch-size", "3",
        "--n0", "20", "--n", "100", "--attack-examples", "2", "--attack-radii", "0.25", "-q"]  # fmt: skip


@pytest.fixture(scope="module")
def certified(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("certify") / "run"
    assert run([*ARGS, "--out", str(out)]) == 0
    return out


def test_certify_writes_rows_summary_and_checks(certified: Path) -> None:
    r = load_run(certified)
    certs = r.rows[r.rows["kind"] == "certificate"]
    attacks = r.rows[r.rows["kind"] == "attack"]
    assert len(certs) == 6 and len(attacks) == 2
    assert (certs.loc[~certs.abstain.astype(bool), "p_lower"] > 0.5).all()
    ok = certs.correct.astype(bool) & (certs.certified_radius > 0)
    assert (certs.loc[ok, "certified_correct_radius"] == certs.loc[ok, "certified_radius"]).all()
    s = r.summary
    entry = s.models["deit"]["0.25"]
    assert [c.radius for c in entry.certified] == [0.0, 0.25, 0.5, 0.75, 1.0]
    accs = [c.certified_acc for c in entry.certified]
    assert accs == sorted(accs, reverse=True)  # certified accuracy cannot grow with the radius
    names = {c.name for c in s.checks}
    assert {"abstention rate", "same seed, same certificates", "certified <= robust accuracy (SmoothAdv PGD)"} <= names
    assert s.checks_summary.fail == 0
    assert s.empirical_l2 and s.curve


def test_certify_resume_recomputes_identically(certified: Path, tmp_path: Path) -> None:
    import shutil

    out = tmp_path / "run"
    shutil.copytree(certified, out)
    for part in sorted((out / "parts").glob("*.parquet"))[::2]:
        part.unlink()
    assert run([*ARGS, "--out", str(out), "--resume"]) == 0
    a, b = load_run(certified), load_run(out)
    pd.testing.assert_frame_equal(a.rows, b.rows)
    assert a.summary == b.summary


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        (["--sigma", "0"], "--sigma"),
        (["--alpha", "0.7"], "--alpha"),
        (["--n", "0"], "--n must be positive"),
        (["--sigma", "0.25,0.25"], "twice"),
        (["--model", "lm"], "image models"),
    ],  # fmt: skip
)
def test_certify_bad_input_is_one_line(tmp_path, capfd, change, needle) -> None:
    argv = list(ARGS)
    if change[0] in argv:
        argv[argv.index(change[0]) + 1] = change[1]
    else:
        argv += change
    assert run([*argv, "--out", str(tmp_path / "run")]) == 2
    err = capfd.readouterr().err.strip()
    assert err.startswith("error:") and len(err.splitlines()) == 1 and needle in err, err
    assert not (tmp_path / "run").exists()


def test_certify_json(certified: Path, tmp_path: Path, capfd) -> None:
    assert run([*ARGS, "--out", str(tmp_path / "j"), "--json"]) == 0
    doc = json.loads(capfd.readouterr().out)
    assert doc["kind"] == "certify" and "deit" in doc["models"]


def test_report_draws_certified_next_to_empirical(certified: Path, tmp_path: Path) -> None:
    from robustbench_filters.report import build_report

    res = build_report([certified], tmp_path / "rep", figures=("png",))
    assert "certified_accuracy" in res.tables and "certified_accuracy_vs_radius" in res.figures
    table = pd.read_csv(tmp_path / "rep" / "tables" / "certified_accuracy.csv")
    assert set(table["model"]) == {"deit"} and table["acc"].is_monotonic_decreasing


def test_certify_summarises_a_model_that_certifies_nothing(tmp_path: Path) -> None:
    """An untrained model is never certified correct: the summary says 0% (it used to fail with a KeyError when
    every certified_correct_radius was NaN)."""
    out = tmp_path / "run"
    args = ["certify", "--model", "deit", "--checkpoint", "none", "--seed", "3", "--n0", "20", "--n", "50",
            "--n-examples", "4", "--batch-size", "2", "--attack-examples", "2", "--allow-failed-checks", "-q"]  # fmt: skip
    assert run([*args, "--out", str(out)]) == 0
    done = load_run(out)
    certs = done.rows[done.rows["kind"] == "certificate"]
    assert certs["certified_correct_radius"].isna().all()  # the case this test is about
    table = done.summary.models["deit"]["0.25"].certified
    assert [r.certified for r in table] == [0] * len(table)
