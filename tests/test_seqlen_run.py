"""The sequence-length studies are runs: written by the runner, verified like any run folder, resumable."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from robustbench_filters.core.errors import RobfiltError
from robustbench_filters.lipschitz import sequence_length_study
from robustbench_filters.lipschitz.seqlen_run import SeqlenConfig, sequence_length_run
from robustbench_filters.report.runs import load_runs
from robustbench_filters.runs.folder import load_run, verify_run

SMALL = SeqlenConfig(ns=(8, 16), dim=16, heads=2, trials=2, seed=3)


def test_the_layer_study_run_holds_the_studys_rows_and_verifies(tmp_path: Path) -> None:
    result = sequence_length_run(tmp_path / "seq", SMALL)
    direct = sequence_length_study((8, 16), dim=16, heads=2, trials=2, seed=3)
    pd.testing.assert_frame_equal(result.rows.reset_index(drop=True), direct)
    manifest = verify_run(tmp_path / "seq")
    assert manifest["kind"] == "seqlen" and manifest["config"]["ns"] == [8, 16]
    assert set(manifest["config"]["weights"]) == {"attention-layer"}  # the synthetic layers' weights are recorded
    assert load_run(tmp_path / "seq").summary.n_values == [8, 16]
    assert "seqlen" in load_runs([tmp_path / "seq"]).families


def test_the_seed_draws_other_layers_so_it_is_another_run(tmp_path: Path) -> None:
    a = sequence_length_run(tmp_path / "a", SMALL)
    b = sequence_length_run(tmp_path / "b", SeqlenConfig(ns=(8, 16), dim=16, heads=2, trials=2, seed=4))
    fa, fb = (verify_run(tmp_path / n)["fingerprint"] for n in "ab")
    assert fa != fb and not a.rows.equals(b.rows)


def test_resume_keeps_the_finished_folder_and_other_settings_are_refused(tmp_path: Path) -> None:
    out = tmp_path / "seq"
    sequence_length_run(out, SMALL)
    before = (out / "rows.parquet").read_bytes()
    sequence_length_run(out, SMALL, resume=True)
    assert (out / "rows.parquet").read_bytes() == before
    with pytest.raises(RobfiltError):
        sequence_length_run(out, SeqlenConfig(ns=(8, 32), dim=16, heads=2, trials=2, seed=3), resume=True)


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (SeqlenConfig(ns=()), "ns must be distinct positive sequence lengths"),
        (SeqlenConfig(ns=(8, 8)), "ns must be distinct positive sequence lengths"),
        (SeqlenConfig(dim=10, heads=4), "dim 10 must split evenly into 4 heads"),
        (SeqlenConfig(noise=float("nan")), "noise must be a positive number"),
        (SeqlenConfig(trials=0), "trials must be at least 1"),
    ],
)
def test_bad_settings_are_one_line(config: SeqlenConfig, message: str, tmp_path: Path) -> None:
    with pytest.raises(RobfiltError, match=message) as err:
        sequence_length_run(tmp_path / "x", config)
    assert "\n" not in str(err.value) and not (tmp_path / "x").exists()
