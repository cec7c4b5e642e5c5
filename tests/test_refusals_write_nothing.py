"""A refused command writes nothing (issue 41): whatever it refuses, and however late it finds the problem (a bad
baseline or run folder for the gate, unreadable data or starting weights for a training), no --out is left behind,
not even an empty one, nor the parent folders it would have created. Every command, from the CLI and the API."""

from __future__ import annotations

from pathlib import Path

import pytest

from robustbench_filters.cli import run
from robustbench_filters.core.errors import RobfiltError
from robustbench_filters.core.io import no_empty_folder_on_failure

ROOT = Path(__file__).resolve().parents[1]
BASELINE = str(ROOT / "baselines" / "zoo.json")  # a good one: the gate must then find the bad run


@pytest.fixture
def inputs(tmp_path: Path) -> dict[str, Path]:
    (tmp_path / "not-a-run").mkdir()
    (tmp_path / "not-a-run" / "notes.txt").write_text("mine")
    (tmp_path / "bad.json").write_text("{nope")
    return {"not_a_run": tmp_path / "not-a-run", "bad_json": tmp_path / "bad.json", "missing": tmp_path / "missing"}


CASES = {
    "check: a baseline that is not JSON": [
        "check",
        "--spec",
        str(ROOT / "robustness.toml"),
        "--baseline",
        "{bad_json}",
    ],
    "check: a run that is not a run": ["check", "--run", "{not_a_run}", "--baseline", BASELINE],
    "check: a run folder that is missing": ["check", "--run", "{missing}", "--baseline", BASELINE],
    "train: text data that is missing": ["train", "--model", "lm", "--steps", "1", "--data", "text:{missing}"],
    "train: image data that is missing": ["train", "--model", "deit", "--data", "imagefolder:{missing}"],
    "train: starting weights that are missing": ["train", "--model", "deit", "--init", "{missing}"],
    "attack: a model that is unknown": ["attack", "--model", "nomodel"],
    "attack: data that is missing": ["attack", "--model", "lm", "--attack", "wordswap", "--data", "text:{missing}"],
    "certify: data that is missing": ["certify", "--model", "deit", "--data", "imagefolder:{missing}"],
    "lipschitz: data that is missing": ["lipschitz", "--model", "deit", "--data", "imagefolder:{missing}"],
    "report: a folder that is not a run": ["report", "{not_a_run}"],
}


#: the one gate case that runs in robfilt check's supervised child, as a user's does; the others evaluate the gate in
#: this process (the supervisor writes nothing under --out; each child pays its imports again)
IN_A_CHILD = "check: a run that is not a run"


@pytest.mark.parametrize("case", list(CASES))
def test_a_refused_command_leaves_no_out(
    case: str, inputs: dict[str, Path], tmp_path: Path, capfd, request: pytest.FixtureRequest
) -> None:
    if case.startswith("check:") and case != IN_A_CHILD:
        request.getfixturevalue("gate_in_process")
    out = tmp_path / "new" / "deeper" / "out"
    argv = [a.format(**{k: str(v) for k, v in inputs.items()}) for a in CASES[case]]
    assert run([*argv, "--out", str(out), "-q"]) == 2
    err = capfd.readouterr().err.strip()  # robfilt check gates in a child process
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert not (tmp_path / "new").exists(), f"{case}: left {sorted(p.name for p in (tmp_path / 'new').rglob('*'))}"


def test_the_api_refuses_without_writing(inputs: dict[str, Path], tmp_path: Path) -> None:
    from robustbench_filters.gate.run import run_gate
    from robustbench_filters.train.loop import train

    out = tmp_path / "new" / "out"
    with pytest.raises(RobfiltError, match="not valid JSON"):
        run_gate(spec=ROOT / "robustness.toml", baseline=inputs["bad_json"], out=out)
    with pytest.raises(RobfiltError, match="not a robfilt run folder"):
        run_gate(runs=[inputs["not_a_run"]], baseline=BASELINE, out=out)
    with pytest.raises(RobfiltError, match="does not exist"):
        train("lm", data=f"text:{inputs['missing']}", out=out)
    assert not (tmp_path / "new").exists()


def test_only_empty_folders_the_block_created_are_removed(tmp_path: Path) -> None:
    kept = tmp_path / "existing"
    kept.mkdir()
    with pytest.raises(KeyError), no_empty_folder_on_failure(kept / "a" / "b"):
        (kept / "a" / "b").mkdir(parents=True)
        raise KeyError
    assert kept.is_dir() and not (kept / "a").exists()  # what it made is gone, what was there stays
    with pytest.raises(KeyError), no_empty_folder_on_failure(kept / "a" / "b"):
        (kept / "a" / "b").mkdir(parents=True)
        (kept / "a" / "note.txt").write_text("someone's")
        raise KeyError
    assert (kept / "a" / "note.txt").is_file() and not (kept / "a" / "b").exists()
    with no_empty_folder_on_failure(kept / "c"):
        (kept / "c").mkdir()
    assert (kept / "c").is_dir()  # on success nothing is removed
