"""The noise-trained zoo (zoo:sigma0.25): loading, cards with certificates, `models list`, and soundness on a real model."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from robustbench_filters import create_model
from robustbench_filters.checks import FAIL
from robustbench_filters.cli import run
from robustbench_filters.core.errors import CheckpointError
from robustbench_filters.data import load_images
from robustbench_filters.models.built import built_of
from robustbench_filters.models.checkpoint import ZOO_NOISE_SIGMAS, load_checkpoint, zoo_path
from robustbench_filters.models.zoo import MIN_CERTIFIED_ACC, noise_zoo_status
from robustbench_filters.smoothing import (
    Sampling,
    attack_rows,
    certificate_rows,
    check_certified_below_attack,
    summarize,
)
from robustbench_filters.smoothing.zoo import CARD_RADII, CARD_SAMPLING, certify_checkpoint, metric_key

DEITS = ["deit", "deit-bsa", "deit-grc", "deit-bsa-grc"]


@pytest.mark.parametrize("name", DEITS)
def test_noise_trained_zoo_loads_and_its_card_records_noise_and_certificates(name: str) -> None:
    model = create_model(name, "micro", checkpoint="zoo:sigma0.25")
    card = built_of(model).card
    assert card["name"] == name and card["recipe"]["noise_sigma"] == 0.25
    assert "--noise-sigma 0.25" in card["recipe"]["rebuild_command"] and card["recipe"]["wall_time_s"] > 0
    cert = card["certification"]
    assert cert["sigma"] == 0.25 and cert["radii"] == list(CARD_RADII)
    assert (cert["n0"], cert["n"], cert["alpha"]) == (100, 1000, 0.001) and cert["n_examples"] >= 100
    accs = cert["certified_acc"]
    assert accs == sorted(accs, reverse=True) and all(
        lo <= a <= hi for a, (lo, hi) in zip(accs, cert["ci95"], strict=True)
    )
    assert all(card["metrics"][metric_key(r)] == a for r, a in zip(cert["radii"], accs, strict=True))
    plain = create_model(name, "micro", checkpoint="zoo")
    assert not torch.equal(model.head.weight, plain.head.weight)


def test_zoo_references_that_do_not_exist_are_one_line_errors() -> None:
    with pytest.raises(CheckpointError, match="unknown zoo variant 'zoo:noisy'") as info:
        create_model("deit", checkpoint="zoo:noisy")
    assert "\n" not in str(info.value)
    with pytest.raises(CheckpointError, match="--noise-sigma 0.5"):
        create_model("deit", checkpoint="zoo:sigma0.5")
    assert (
        zoo_path("deit", "micro", 0.25).name == "deit-micro-sigma0.25"
        and zoo_path("deit", "micro").name == "deit-micro"
    )


def test_models_list_shows_the_noise_trained_zoo(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["models", "list", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    for name in DEITS:
        entry = rows[name]["zoo_noise"]["micro-sigma0.25"]
        assert entry["certification"]["certified_acc"] and "test_acc" in entry["metrics"]
    assert rows["lm"]["zoo_noise"] == {}
    assert run(["models", "list"]) == 0
    out = capsys.readouterr().out
    assert "noise-trained zoo" in out and "certified" in out


def test_zoo_bar_covers_the_noise_trained_models() -> None:
    rows = noise_zoo_status()
    assert len(rows) == 4 * len(ZOO_NOISE_SIGMAS)
    for r in rows:
        assert r["present"] and r["passed"], r
        assert r["value"] >= MIN_CERTIFIED_ACC


def test_certify_checkpoint_writes_a_card_block_that_keeps_the_checkpoint_loadable(tmp_path) -> None:
    folder = tmp_path / "deit-sigma"
    shutil.copytree(zoo_path("deit", "micro", 0.25), folder)
    block = certify_checkpoint(folder, n_examples=6, sampling=CARD_SAMPLING.replace(n0=10, n=50, alpha=0.01))
    card = json.loads((folder / "card.json").read_text())
    assert card["certification"] == block and block["n_examples"] == 6 and block["n"] == 50
    assert {c["name"] for c in block["checks"]} == {
        "model outputs finite on every noise draw",
        "abstention rate",
        "same seed, same certificates",
    }
    assert card["metrics"][metric_key(0.25)] == block["certified_acc"][1]
    load_checkpoint(folder)  # the weights' checksum in the card still matches


def test_certify_checkpoint_refuses_a_model_trained_without_noise(tmp_path) -> None:
    folder = tmp_path / "plain"
    shutil.copytree(zoo_path("deit", "micro"), folder)
    with pytest.raises(CheckpointError, match="not trained with noise"):
        certify_checkpoint(folder, n_examples=2, sampling=CARD_SAMPLING.replace(n0=5, n=5), write=False)


def test_certified_accuracy_is_below_smoothed_robust_accuracy_on_a_zoo_model() -> None:
    """Soundness on a real DeiT: nothing certified at r is confidently misclassified after SmoothAdv PGD at r."""
    model = create_model("deit", "micro", checkpoint="zoo:sigma0.25")
    data = load_images("fashion-mnist", split="test")
    ids = torch.arange(12)
    x, y = data.take(ids)
    s = Sampling.defaults(n0=50, n=300, alpha=0.001, batch=500, attack_steps=4, attack_draws=8)
    rows = certificate_rows(model, x, y, ids.tolist(), 0.25, s, "deit")
    attacks = attack_rows(model, x, y, rows, (0.25,), s)
    check = check_certified_below_attack(attacks, "deit")
    assert check.status != FAIL, check.detail
    assert attacks.certified.mean() <= attacks.robust.mean() + (attacks.certified & ~attacks.robust).mean()
    assert attacks.certified.any()  # there is something to contradict


def test_zoo_certification_is_a_certify_run_with_the_cards_numbers(tmp_path) -> None:
    """The card block comes from a run folder (the same measurement as robfilt certify), and its numbers are
    those of CERTIFY on the stratified prefix computed directly."""
    from robustbench_filters.data.images import stratified_prefix
    from robustbench_filters.runs.folder import verify_run

    folder = zoo_path("deit", "micro", 0.25)
    block = certify_checkpoint(
        folder, n_examples=6, sampling=CARD_SAMPLING.replace(n0=10, n=50, alpha=0.01), write=False, out=tmp_path / "run"
    )
    manifest = verify_run(tmp_path / "run")
    assert manifest["kind"] == "certify" and manifest["config"]["n_examples"] == 6
    data = load_images("fashion-mnist", split="test")
    ids = torch.as_tensor(stratified_prefix(data.y, 6))
    x, y = data.take(ids)
    rows = certificate_rows(load_checkpoint(folder), x, y, ids.tolist(), [0.25],
                            Sampling.defaults(n0=10, n=50, alpha=0.01), "deit")  # fmt: skip
    direct = summarize(rows, CARD_RADII)
    assert block["certified_acc"] == [float(v) for v in direct.certified_acc]
    assert block["ci95"] == [[float(a), float(b)] for a, b in zip(direct.ci_low, direct.ci_high, strict=True)]
    assert block["abstain_rate"] == float(rows.abstain.mean())
