"""robfilt study: verdicts follow the numbers, the pipeline runs end to end, and resume redoes nothing."""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest
import torch
from small_study import smoke_plan

from robustbench_filters.cli import run
from robustbench_filters.core.errors import RobfiltError, RunStateError
from robustbench_filters.core.threads import kept_threads
from robustbench_filters.study import (
    CLAIMS,
    StudyPlan,
    Verdict,
    evaluate_claims,
    judge,
    pieces,
    run_study,
    write_up,
)
from robustbench_filters.study.checkpoints import ensure_checkpoint, find_reusable
from robustbench_filters.study.plan import (
    LM_ATTACK_TEMPLATE,
    full_plan,
    quick_plan,
)
from robustbench_filters.train.loop import Recipe

# --- verdicts from constructed numbers ------------------------------------------------------------------------

SUPPORTED = [0.05, 0.06, 0.055]  # oriented differences: clearly in the claimed direction
OPPOSITE = [-0.05, -0.06, -0.055]  # clearly the other way
NOISY = [0.05, -0.04, 0.01]  # interval straddles 0 and includes the claimed effect


def _scores(spec, oriented: list[float]) -> pd.DataFrame:
    """Per-seed values for every model of ``spec`` such that each comparison's oriented difference is ``oriented``."""
    rows = []
    for c in spec.comparisons:
        for seed, d in enumerate(oriented):
            rows.append((c.family, c.baseline, seed, c.metric, c.condition, 1.0))
            rows.append((c.family, c.variant, seed, c.metric, c.condition, 1.0 + c.direction * d))
    frame = pd.DataFrame(rows, columns=["family", "model", "seed", "metric", "condition", "value"])
    return frame.drop_duplicates(["family", "model", "seed", "metric", "condition"])


@pytest.mark.parametrize("spec", CLAIMS, ids=lambda s: f"{s.id}-{s.scope.split(':')[0]}-{s.primary}")
@pytest.mark.parametrize(
    "oriented, expected",
    [(SUPPORTED, Verdict.SUPPORTED), (OPPOSITE, Verdict.NOT_SUPPORTED), (NOISY, Verdict.INCONCLUSIVE)],
    ids=["supported", "not-supported", "inconclusive"],
)
def test_each_claim_gets_the_verdict_its_numbers_imply(spec, oriented, expected):
    (result,) = evaluate_claims(_scores(spec, oriented), [spec])
    assert result.verdict is expected, (spec.id, result.reason)
    for r in result.results:
        assert sorted(r.diffs) == [0, 1, 2]
        raw = [spec.comparisons[0].direction * d for d in oriented]
        assert r.mean == pytest.approx(sum(raw) / 3)


def test_lower_is_better_claims_flip_the_sign():
    spec = next(s for s in CLAIMS if s.id == "c" and s.primary)  # boosting *lowers* the Lipschitz bound
    c = spec.comparisons[0]
    rows = [("image", c.baseline, s, c.metric, c.condition, 30.0) for s in range(3)]
    rows += [("image", c.variant, s, c.metric, c.condition, v) for s, v in enumerate((29.0, 28.8, 29.1))]
    frame = pd.DataFrame(rows, columns=["family", "model", "seed", "metric", "condition", "value"])
    (result,) = evaluate_claims(frame, [spec])
    assert result.verdict is Verdict.SUPPORTED
    assert result.results[0].mean == pytest.approx(-1.0333, abs=1e-3)  # raw difference stays variant - baseline


def test_judge_rule_edges():
    assert judge([0.02, 0.025, 0.03], delta=0.01)[0] is Verdict.SUPPORTED
    assert judge([0.02, 0.03], delta=0.01)[0] is Verdict.INCONCLUSIVE  # two seeds: t(1) makes the interval wide
    assert judge([0.02], delta=0.01)[0] is Verdict.INCONCLUSIVE  # one seed: no interval
    assert judge([], delta=0.01)[0] is Verdict.INCONCLUSIVE
    assert judge([0.02, float("nan"), 0.03], delta=0.01)[0] is Verdict.INCONCLUSIVE
    # the estimate goes the other way and the interval excludes the claimed effect size: not supported
    assert judge([-0.001, 0.0005, -0.002], delta=0.01)[0] is Verdict.NOT_SUPPORTED
    # same spread, but the claimed effect is tiny: still inside the interval, so inconclusive
    assert judge([-0.001, 0.0005, -0.002], delta=0.0001)[0] is Verdict.INCONCLUSIVE
    # a positive but noisy estimate is never "not supported"
    assert judge([0.001, -0.0005, 0.002], delta=0.01)[0] is Verdict.INCONCLUSIVE


def test_best_claim_needs_every_comparison():
    spec = next(s for s in CLAIMS if s.id == "f" and s.comparisons[0].family == "image")
    scores = _scores(spec, SUPPORTED)
    assert evaluate_claims(scores, [spec])[0].verdict is Verdict.SUPPORTED
    # the combination ties with one competitor (noisy difference): no longer "best" for sure
    rival = spec.comparisons[1].baseline
    mask = scores["model"] == rival
    noisy = scores.copy()
    noisy.loc[mask, "value"] = [1.0 + s - n for s, n in zip(SUPPORTED, NOISY, strict=True)]
    assert evaluate_claims(noisy, [spec])[0].verdict is Verdict.INCONCLUSIVE
    # and it clearly loses to one competitor: not supported, naming it
    worse = scores.copy()
    worse.loc[mask, "value"] = 1.2
    result = evaluate_claims(worse, [spec])[0]
    assert result.verdict is Verdict.NOT_SUPPORTED and rival in result.reason


def test_missing_measurements_are_inconclusive_not_errors():
    results = evaluate_claims(pd.DataFrame(columns=["family", "model", "seed", "metric", "condition", "value"]))
    assert {r.verdict for r in results} == {Verdict.INCONCLUSIVE}
    assert all("not measured" in r.reason for r in results)
    assert {s.id for s in CLAIMS if s.primary} == set("abcdef")


def test_plans():
    full = full_plan(3)
    assert full.seeds == (0, 1, 2) and full.vision_recipe.epochs == 6 and full.lm_recipe.steps == 800
    assert len(full.vision_models) == len(full.lm_models) == 4
    assert len([p for p in pieces(full) if p.kind == "train"]) == 24
    assert quick_plan().seeds == (0,)
    with pytest.raises(RobfiltError):
        full_plan(0)
    with pytest.raises(RobfiltError):
        StudyPlan(vision_models=("lm",)).validate()


# --- the pipeline on a tiny plan ------------------------------------------------------------------------------


class _Stop(Exception):
    pass


def _parts(folder: Path) -> dict[str, float]:
    return {p.name: p.stat().st_mtime_ns for p in (folder / "parts").glob("*.parquet")}


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    """Run the smoke study, killed once inside the first Lipschitz piece and resumed; returns what each call did."""
    out = tmp_path_factory.mktemp("study") / "smoke"
    plan = smoke_plan()

    def stop_in_lipschitz(task, done, total, info=""):
        if task == "lipschitz":
            raise _Stop

    with pytest.raises(_Stop):
        run_study(plan, out, progress=stop_in_lipschitz)
    manifest = json.loads((out / "study.json").read_text())
    interrupted = out / "runs/s0/lipschitz-vision"
    before = _parts(interrupted)
    first = run_study(plan, out, resume=True)
    return {"out": out, "plan": plan, "manifest_after_kill": manifest, "parts_before": before, "first": first}


def test_smoke_study_writes_a_readme_with_every_claim(study):
    out = study["out"]
    readme = (out / "README.md").read_text()
    for spec in CLAIMS:
        assert f"({spec.id}) {spec.claim}" in readme
    assert "## Claims" in readme and "How a verdict is made" in readme
    assert "inconclusive at this scale" in readme  # one seed: nothing can be decided
    assert "McNemar" in readme and "log10 certified global upper bound" in readme
    assert "Trained LMs: growth exponent" in readme
    results = json.loads((out / "results.json").read_text())
    models = {r["model"] for r in results["scores"]}
    assert {"deit", "deit-grc", "lm", "lm-bsa", "softmax+pos", "bsa-gaussian"} <= models
    assert results["mcnemar"] and all(r["seed"] == 0 for r in results["mcnemar"])
    # the claims in the write-up are exactly the ones the scores imply
    scores = pd.read_csv(out / "scores.csv")
    again = [c.to_dict()["verdict"] for c in evaluate_claims(scores)]
    assert again == [c["verdict"] for c in results["claims"]]
    if (out / "report" / "index.md").exists():  # the reporter is optional; when present its figures are linked
        assert "report/figures/" in readme


def test_a_killed_study_resumes_inside_the_interrupted_piece(study):
    manifest, first = study["manifest_after_kill"], study["first"]
    pieces_ = manifest["pieces"]
    assert pieces_["vision-attack/s0"]["status"] == "done"
    assert pieces_["lipschitz-vision/s0"]["status"] == "running"
    # finished pieces of the killed call were not redone; the interrupted one continued
    assert "vision-attack/s0" in first.finished_before and "train/deit/s0" in first.finished_before
    assert "lipschitz-vision/s0" in first.executed and "train/lm/s0" in first.executed
    after = _parts(study["out"] / "runs/s0/lipschitz-vision")
    assert all(after[name] == t for name, t in study["parts_before"].items())


def test_second_invocation_redoes_nothing(study):
    out, plan = study["out"], study["plan"]
    stamps = {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file() and "parts" in p.parts}
    weights = {p: p.stat().st_mtime_ns for p in (out / "checkpoints").rglob("model.safetensors")}
    before = json.loads((out / "study.json").read_text())["pieces"]
    again = run_study(plan, out, resume=True, report=False)
    assert again.executed == []
    assert len(again.finished_before) == len(pieces(plan))
    after = json.loads((out / "study.json").read_text())["pieces"]
    assert {k: v.get("finished") for k, v in after.items()} == {k: v.get("finished") for k, v in before.items()}
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps
    assert {p: p.stat().st_mtime_ns for p in weights} == weights


def test_changed_settings_remeasure_only_the_affected_piece(study):
    out = study["out"]
    plan = smoke_plan(lm_attack=replace(LM_ATTACK_TEMPLATE, n_examples=4, rates=(0.0, 0.05), eps=(0.05,), steps=2))
    result = run_study(plan, out, resume=True, report=False)
    assert result.executed == ["lm-attack/s0"]


def test_checkpoints_are_reused_only_when_the_card_matches(study, tmp_path):
    ckpts = study["out"] / "checkpoints"
    plan = study["plan"]
    target = tmp_path / "nothing-here"
    assert find_reusable(plan, "deit", 0, target, [ckpts]) is not None
    assert find_reusable(plan, "deit", 1, target, [ckpts]) is None  # other seed
    other = smoke_plan(vision_recipe=Recipe(steps=4, batch_size=16, eval_max=50))
    assert find_reusable(other, "deit", 0, target, [ckpts]) is None  # other recipe


def test_a_partial_plan_reuses_checkpoints_and_marks_unmeasured_claims(study, tmp_path):
    """An LM-only study reuses matching checkpoints; claims it cannot measure are inconclusive, with the reason."""
    result = run_study(
        smoke_plan(vision_models=()), tmp_path / "lm-only", reuse=[study["out"] / "checkpoints"], report=False
    )
    assert not [p for p in result.executed if p.startswith("train/")]  # matching cards: reused, not retrained
    assert not [p for p in result.executed if p.startswith("vision")]
    a = next(c for c in result.claims if c.spec.id == "a" and c.spec.primary)  # a vision claim: no vision models
    assert a.verdict is Verdict.INCONCLUSIVE and "not measured" in a.reason
    # reused weights cost this study nothing, and it still says what they took to train (their cards)
    pieces = json.loads((tmp_path / "lm-only" / "study.json").read_text())["pieces"]
    reused = {k: v for k, v in pieces.items() if k.startswith("train/")}
    assert reused and all(not v["trained_by_study"] and v["wall_s"] == 0 for v in reused.values())
    for v in reused.values():
        card = json.loads((tmp_path / "lm-only" / v["path"] / "card.json").read_text())
        assert v["card_wall_s"] == round(card["recipe"]["wall_time_s"], 1)
    readme = (tmp_path / "lm-only" / "README.md").read_text()
    assert f"not in the total: training of the {len(reused)} reused checkpoints" in readme


def test_an_existing_study_needs_resume_or_overwrite(study, tmp_path):
    with pytest.raises(RunStateError):
        run_study(study["plan"], study["out"])
    (tmp_path / "other.txt").write_text("x")
    with pytest.raises(RunStateError):
        run_study(study["plan"], tmp_path, resume=True)


def _as_committed(study, tmp_path: Path) -> Path:
    """A copy of the smoke study as a clone of the repository holds it: no checkpoints, no part files."""
    copy = tmp_path / "committed"
    shutil.copytree(study["out"], copy)
    run_study(study["plan"], copy, resume=True, report=False)  # back to the smoke plan if another test changed it
    shutil.rmtree(copy / "checkpoints")
    for parts in copy.rglob("parts"):
        shutil.rmtree(parts)
    return copy


@pytest.mark.parametrize("made", ["trained", "found-in-place"])
def test_a_resumed_clone_retrains_only_the_checkpoints_a_changed_piece_needs(study, tmp_path, made):
    """A clone holds no checkpoints: when only the LM attack's settings change, the vision models are not retrained
    (their recorded hashes stand in, also when the study had found them in its own folder from an earlier call and
    recorded them as reused), the LM models are, and only the LM attack is measured again."""
    copy = _as_committed(study, tmp_path)
    if made == "found-in-place":
        manifest = json.loads((copy / "study.json").read_text())
        for m in ("deit", "deit-grc"):
            manifest["pieces"][f"train/{m}/s0"] |= {"trained_by_study": False, "wall_s": 0.0, "card_wall_s": 1.5}
        (copy / "study.json").write_text(json.dumps(manifest))
    before = json.loads((copy / "study.json").read_text())["pieces"]
    plan = smoke_plan(lm_attack=replace(LM_ATTACK_TEMPLATE, n_examples=4, rates=(0.0, 0.05), eps=(0.05,), steps=2))
    result = run_study(plan, copy, resume=True, report=False)
    assert result.executed == ["train/lm/s0", "train/lm-bsa/s0", "lm-attack/s0"]
    assert sorted(p.name for p in (copy / "checkpoints").iterdir()) == sorted(
        Path(before[f"train/{m}/s0"]["path"]).name for m in ("lm", "lm-bsa")
    )
    after = json.loads((copy / "study.json").read_text())["pieces"]
    for m in ("deit", "deit-grc", "lm", "lm-bsa"):  # the same weights (training is deterministic), records kept
        assert after[f"train/{m}/s0"]["weights_sha256"] == before[f"train/{m}/s0"]["weights_sha256"]
    assert after["train/deit/s0"] == before["train/deit/s0"]
    assert after["vision-attack/s0"] == before["vision-attack/s0"]


def test_trainings_share_the_worker_pool_and_give_one_process_weights(study, tmp_path, caplog):
    """With two processes the vision family's two trainings run one on each (the pool's queue), and each checkpoint
    is the file this process trains alone with one torch thread (the thread count every rank computes with)."""
    copy = _as_committed(study, tmp_path)
    plan = smoke_plan(vision_attack=replace(study["plan"].vision_attack, eps=(0.01, 0.03)))
    with caplog.at_level("INFO", logger="robustbench_filters.study"):
        result = run_study(plan, copy, resume=True, report=False, workers=2)
    assert "training 2 checkpoints on 2 processes" in caplog.text
    assert "train/deit-grc/s0: trained in" in caplog.text and "reusing deit" not in caplog.text  # not "reused"
    assert result.executed[:3] == ["train/deit/s0", "train/deit-grc/s0", "vision-attack/s0"]
    after = json.loads((copy / "study.json").read_text())["pieces"]
    with kept_threads():
        torch.set_num_threads(1)
        alone = {m: ensure_checkpoint(plan, m, 0, tmp_path / "alone").weights_sha256 for m in ("deit", "deit-grc")}
    for m in ("deit", "deit-grc"):
        assert after[f"train/{m}/s0"]["weights_sha256"] == alone[m]
        assert after[f"train/{m}/s0"]["trained_by_study"] and after[f"train/{m}/s0"]["wall_s"] > 0


def test_write_up_redraws_a_committed_study_without_training(study, tmp_path):
    copy = _as_committed(study, tmp_path)
    before = {name: (copy / name).read_text() for name in ("README.md", "results.json", "scores.csv")}
    result = write_up(study["plan"], copy, report=False)
    assert result.executed == [] and not (copy / "checkpoints").exists()  # nothing trained or measured
    assert (copy / "results.json").read_text() == before["results.json"]
    assert (copy / "scores.csv").read_text() == before["scores.csv"]

    def body(text: str) -> list[str]:
        return [line for line in text.splitlines() if not line.startswith("Generated ")]

    assert body((copy / "README.md").read_text()) == body(before["README.md"])
    assert [c.verdict for c in result.claims] == [c.verdict for c in evaluate_claims(pd.read_csv(copy / "scores.csv"))]


def test_write_up_refuses_another_plan_an_edited_run_and_a_missing_study(study, tmp_path):
    copy = _as_committed(study, tmp_path)
    with pytest.raises(RobfiltError, match="pass the same --quick/--seeds"):
        write_up(smoke_plan(seeds=(0, 1)), copy, report=False)
    with pytest.raises(RobfiltError, match="holds no study"):
        write_up(study["plan"], tmp_path / "nothing", report=False)
    rows = copy / "runs/s0/vision-attack/rows.parquet"
    rows.write_bytes(rows.read_bytes() + b"x")
    readme = (copy / "README.md").read_text()
    with pytest.raises(RunStateError, match="does not match the sha256"):
        write_up(study["plan"], copy, report=False)
    assert (copy / "README.md").read_text() == readme  # a refused write-up leaves the old one intact


def test_a_corrupt_study_manifest_is_refused_in_one_line(tmp_path, capsys):
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "study.json").write_text("{bad")
    assert run(["study", "--write-up", "--out", str(tmp_path / "bad")]) == 2
    err = capsys.readouterr().err
    assert "is not valid JSON" in err and len(err.strip().splitlines()) == 1
    (tmp_path / "bad" / "study.json").write_text('{"schema_version": 99}')
    with pytest.raises(RunStateError, match="study schema 99"):
        write_up(smoke_plan(), tmp_path / "bad")
    with pytest.raises(RunStateError, match="study schema 99"):
        run_study(smoke_plan(), tmp_path / "bad", resume=True)


def test_cli_write_up_errors_in_one_line(tmp_path, capsys):
    assert run(["study", "--write-up", "--out", str(tmp_path / "none")]) == 2
    err = capsys.readouterr().err
    assert "holds no study" in err and len(err.strip().splitlines()) == 1
    assert run(["study", "--write-up", "--overwrite", "--out", str(tmp_path / "none")]) == 2
    assert "--write-up only redraws" in capsys.readouterr().err


def test_cli_rejects_bad_input_in_one_line(capsys):
    assert run(["study", "--seeds", "0", "--out", "unused"]) == 2
    err = capsys.readouterr().err
    assert "--seeds" in err and len(err.strip().splitlines()) == 1


@pytest.mark.slow
def test_quick_study_end_to_end(tmp_path, capsys):
    out = tmp_path / "quick"
    assert run(["study", "--quick", "--out", str(out), "--quiet"]) == 0
    readme = (out / "README.md").read_text()
    assert "plan `quick`" in readme and "## Claims" in readme
    assert "study:" in capsys.readouterr().out
    assert run(["study", "--quick", "--out", str(out), "--resume", "--quiet", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["executed"] == [] and os.path.exists(info["readme"])
