"""Cross-run integrity: wherever run folders are combined (study write-up, report, gate, paired comparisons) they
must be what they claim. Each folder here verifies on its own; the set does not.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from report_synthetic import image_rows
from run_summaries import image_summary
from small_study import TWO_SEEDS

from robustbench_filters.core.errors import RobfiltError, RunStateError
from robustbench_filters.core.io import sha256_file
from robustbench_filters.gate.run import run_gate
from robustbench_filters.report import build_report
from robustbench_filters.runs.fingerprint import manifest_fingerprint
from robustbench_filters.runs.folder import RunWriter, load_run, verify_run
from robustbench_filters.study import full_plan, write_up
from robustbench_filters.study import plan as P
from robustbench_filters.study.integrity import check_piece, check_study
from robustbench_filters.study.measure import checkpoint_tag

COMMITTED_STUDY = Path(__file__).resolve().parents[1] / "reports" / "study"
EXAMPLES = {"examples": {"ids": "ids-a", "data": "content-a"}}


def _image_run(out: Path, weights: dict[str, str], *, examples: dict = EXAMPLES, seed: int = 0, flip: int = 0,
               steps: int = 10) -> Path:  # fmt: skip
    """A finished image attack run in the engine's schema, recording weights and example digests like the runner."""
    rows = image_rows(np.random.default_rng(seed + flip))
    rows = rows[~rows["attack"].str.startswith("corruption:")]
    rows = rows[rows["model"].isin(list(weights))].reset_index(drop=True)
    config = {"data": "fashion-mnist", "data_checksum": "sum-a", "example_ids_sha256": examples["examples"]["ids"],
              "n_examples": 24, "steps": steps, "weights": weights, "examples": examples}  # fmt: skip
    with RunWriter(out, "attack", config, seed=seed, extra={"family": "image"}) as w:
        w.write_part("all", rows)
        w.finish(rows, image_summary(rows))
    return out


def _resign(folder: Path, edit) -> None:
    """Edit a run's manifest and re-sign it as a forger would (fingerprint, summary fingerprint, summary hash)."""
    manifest = json.loads((folder / "manifest.json").read_text())
    edit(manifest)
    manifest["fingerprint"] = manifest_fingerprint(manifest)
    summary = json.loads((folder / "summary.json").read_text())
    summary["fingerprint"] = manifest["fingerprint"]
    (folder / "summary.json").write_text(json.dumps(summary))
    manifest["summary_sha256"] = sha256_file(folder / "summary.json")
    (folder / "manifest.json").write_text(json.dumps(manifest))
    verify_run(folder)  # alone, the forged folder verifies


# --- one folder: its manifest must hash to its fingerprint ------------------------------------------------------------


def test_an_edited_seed_or_weights_digest_in_a_manifest_is_refused(tmp_path) -> None:
    run = _image_run(tmp_path / "a", {"deit": "w1"})
    original = (run / "manifest.json").read_text()
    for edit in (lambda m: m.update(seed=7), lambda m: m["config"]["weights"].update(deit="w2"),
                 lambda m: m["config"]["examples"]["examples"].update(data="other")):  # fmt: skip
        manifest = json.loads(original)
        edit(manifest)
        (run / "manifest.json").write_text(json.dumps(manifest))
        with pytest.raises(RunStateError, match="was edited"):
            load_run(run)


# --- robfilt report --------------------------------------------------------------------------------------------------


def test_report_refuses_a_copied_run(tmp_path) -> None:
    a = _image_run(tmp_path / "a", {"deit": "w1", "deit-grc": "w2"})
    shutil.copytree(a, tmp_path / "b")
    with pytest.raises(RunStateError, match=f"{tmp_path / 'b'} holds the same run as"):
        build_report([a, tmp_path / "b"], tmp_path / "rep", figures=())
    assert not (tmp_path / "rep").exists()


def test_report_refuses_one_name_for_two_models_on_the_same_examples(tmp_path) -> None:
    a = _image_run(tmp_path / "a", {"deit": "w1", "deit-grc": "w2"})
    b = _image_run(tmp_path / "b", {"deit": "w9", "deit-bsa": "w3"}, flip=1)  # "deit" is another checkpoint here
    with pytest.raises(RunStateError, match="'deit' has other weights"):
        build_report([a, b], tmp_path / "rep", figures=())


def test_report_refuses_two_names_for_one_model(tmp_path) -> None:
    a = _image_run(tmp_path / "a", {"deit": "w1", "deit-grc": "w1"})
    with pytest.raises(RunStateError, match="'deit' and 'deit-grc' have identical weights"):
        build_report([a], tmp_path / "rep", figures=())


def test_report_never_pairs_runs_whose_examples_differ_in_content(tmp_path) -> None:
    """Same data name, n, seed and ids, but the runner recorded other example contents: not one example set."""
    a = _image_run(tmp_path / "a", {"deit": "w1"})
    other = {"examples": {"ids": "ids-a", "data": "content-b"}}
    b = _image_run(tmp_path / "b", {"deit-grc": "w2"}, examples=other, flip=1)
    with pytest.raises(RobfiltError, match="different examples"):
        build_report([a, b], tmp_path / "rep", figures=())
    result = build_report([a, b], tmp_path / "rep", figures=(), allow_mixed=True)
    paired = pd.read_csv(tmp_path / "rep" / "tables" / "robust_accuracy.csv")
    assert set(paired["model"]) == {"deit", "deit-grc"} and "paired_vs_baseline" not in result.tables


# --- robfilt check ---------------------------------------------------------------------------------------------------


def test_gate_refuses_copies_duplicates_and_itself_as_baseline(tmp_path) -> None:
    a = _image_run(tmp_path / "a", {"deit": "w1"})
    shutil.copytree(a, tmp_path / "copy")
    with pytest.raises(RunStateError, match="holds the same run"):
        run_gate(runs=[a, tmp_path / "copy"], write_baseline=tmp_path / "b.json", out=tmp_path / "ci")
    with pytest.raises(RobfiltError, match="given twice"):
        run_gate(runs=[a, a], write_baseline=tmp_path / "b.json", out=tmp_path / "ci")
    with pytest.raises(RobfiltError, match="compared with itself"):
        run_gate(runs=[a], baseline=a, out=tmp_path / "ci")


def test_gate_refuses_runs_of_one_family_on_other_examples_or_models(tmp_path) -> None:
    a = _image_run(tmp_path / "a", {"deit": "w1"})
    b = _image_run(tmp_path / "b", {"deit": "w2"}, flip=1)
    with pytest.raises(RunStateError, match="'deit' has other weights"):
        run_gate(runs=[a, b], write_baseline=tmp_path / "b.json", out=tmp_path / "ci")
    c = _image_run(tmp_path / "c", {"deit-grc": "w3"}, examples={"examples": {"ids": "ids-c", "data": "c"}})
    with pytest.raises(RunStateError, match="measured other examples"):
        run_gate(runs=[a, c], write_baseline=tmp_path / "b.json", out=tmp_path / "ci")


def test_gate_refuses_a_run_the_spec_does_not_describe(tmp_path) -> None:
    root = tmp_path / "proj"
    root.mkdir()
    (root / "pyproject.toml").write_text("")
    spec = root / "robustness.toml"
    spec.write_text('version = 1\n[image]\nmodels = ["deit"]\nattacks = ["pgd"]\nn_examples = 24\nseed = 3\n'
                    '[[image.require]]\nmin_acc = 0.1\n')  # fmt: skip
    run = _image_run(tmp_path / "a", {"deit": "w1"})
    with pytest.raises(RunStateError, match="seed 0, but robustness.toml"):
        run_gate(spec=spec, runs=[run], out=tmp_path / "ci")


def test_gate_refuses_a_baseline_on_other_data_in_every_mode(tmp_path) -> None:
    base = _image_run(tmp_path / "base", {"deit": "w1"})
    run_gate(runs=[base], write_baseline=tmp_path / "b.json", out=tmp_path / "ci")
    doc = json.loads((tmp_path / "b.json").read_text())
    doc["examples"]["image"]["identity"]["data_checksum"] = "another-data-set"
    (tmp_path / "b.json").write_text(json.dumps(doc))
    fresh = _image_run(tmp_path / "fresh", {"deit": "w1"}, flip=1)
    for mode in ("paired", "interval", "point"):
        with pytest.raises(RobfiltError, match="other data"):
            run_gate(runs=[fresh], baseline=tmp_path / "b.json", mode=mode, out=tmp_path / "ci")


def test_paired_mode_needs_a_shared_identity_of_the_examples(tmp_path) -> None:
    """A baseline that records nothing about its examples is not paired by example id (the ids could index other
    data): the interval rule is used, and the gate says why."""
    base = _image_run(tmp_path / "base", {"deit": "w1"})
    run_gate(runs=[base], write_baseline=tmp_path / "b.json", out=tmp_path / "ci")
    doc = json.loads((tmp_path / "b.json").read_text())
    doc["examples"]["image"]["identity"] = {}
    (tmp_path / "b.json").write_text(json.dumps(doc))
    fresh = _image_run(tmp_path / "fresh", {"deit": "w1"}, flip=1)
    result = run_gate(runs=[fresh], baseline=tmp_path / "b.json", mode="paired", out=tmp_path / "ci")
    checks = [o for o in result.outcomes if o.kind == "baseline"]
    assert checks and all(o.mode == "interval" and "no common identity" in o.detail for o in checks)


# --- robfilt study --write-up ----------------------------------------------------------------------------------------


@pytest.fixture
def study_copy(small_study, tmp_path) -> Path:
    """A finished two-seed study as a clone holds it (tests/small_study.py)."""
    copy = tmp_path / "study"
    shutil.copytree(small_study, copy)
    return copy


def test_write_up_refuses_seeds_whose_runs_are_copies_of_another_seed(study_copy) -> None:
    """The example of issue 25: a seed's run folders are byte copies of another's; each verifies alone."""
    for kind in ("vision-attack", "lm-attack"):
        target = study_copy / f"runs/s1/{kind}"
        shutil.rmtree(target)
        shutil.copytree(study_copy / f"runs/s0/{kind}", target)
        verify_run(target)
    readme = (study_copy / "README.md").read_bytes()
    with pytest.raises(RunStateError, match="runs/s1/vision-attack"):
        write_up(TWO_SEEDS, study_copy, report=False)
    assert (study_copy / "README.md").read_bytes() == readme


def test_the_committed_study_writes_up_under_the_current_plan(tmp_path) -> None:
    copy = tmp_path / "study"
    shutil.copytree(COMMITTED_STUDY, copy)
    write_up(full_plan(3), copy, report=False)


def test_write_up_refuses_a_copy_re_signed_with_the_seeds_checkpoint_tag(study_copy) -> None:
    pieces = json.loads((study_copy / "study.json").read_text())["pieces"]
    plan = TWO_SEEDS
    tag = checkpoint_tag({m: pieces[f"train/{m}/s1"]["weights_sha256"] for m in plan.vision_models})
    target = study_copy / "runs/s1/vision-attack"
    shutil.rmtree(target)
    shutil.copytree(study_copy / "runs/s0/vision-attack", target)
    _resign(target, lambda m: m["config"].update(checkpoint=tag))
    with pytest.raises(RunStateError, match="same run as|same weights"):
        write_up(plan, study_copy, report=False)


def _committed() -> tuple[dict, dict]:
    pieces = json.loads((COMMITTED_STUDY / "study.json").read_text())["pieces"]
    runs = {p: load_run(COMMITTED_STUDY / p.folder) for p in P.pieces(full_plan(3)) if p.kind != P.TRAIN}
    return pieces, runs


def test_a_run_made_with_other_settings_than_the_plan_is_refused() -> None:
    pieces, runs = _committed()
    piece = P.Piece(P.VISION_ATTACK, 0)
    run = runs[piece]
    check_piece(full_plan(3), pieces, piece, run)
    config = {**run.manifest["config"], "steps": 5}
    edited = dataclasses.replace(run, manifest={**run.manifest, "config": config})
    with pytest.raises(RunStateError, match="steps = 5"):
        check_piece(full_plan(3), pieces, piece, edited)
    wrong_seed = dataclasses.replace(run, manifest={**run.manifest, "seed": 4})
    with pytest.raises(RunStateError, match="seed 4"):
        check_piece(full_plan(3), pieces, piece, wrong_seed)
    with pytest.raises(RunStateError, match="not the plan's"):
        check_piece(full_plan(3), pieces, P.Piece(P.LIPSCHITZ_VISION, 0), run)


def test_the_same_weights_under_two_seeds_and_one_checkpoint_twice_are_refused() -> None:
    pieces, runs = _committed()
    check_study(full_plan(3), pieces, runs)  # the committed study is consistent
    s0, s1 = runs[P.Piece(P.VISION_ATTACK, 0)], runs[P.Piece(P.VISION_ATTACK, 1)]
    config = {**s1.manifest["config"], "weights": s0.manifest["config"]["weights"]}
    runs[P.Piece(P.VISION_ATTACK, 1)] = dataclasses.replace(s1, manifest={**s1.manifest, "config": config})
    with pytest.raises(RunStateError, match="same weights"):
        check_study(full_plan(3), pieces, runs)
    _, runs = _committed()
    twice = {**pieces, "train/deit/s2": {**pieces["train/deit/s2"], "weights_sha256": pieces["train/deit/s0"][
        "weights_sha256"]}}  # fmt: skip
    with pytest.raises(RunStateError, match="one checkpoint file"):
        check_study(full_plan(3), twice, runs)
