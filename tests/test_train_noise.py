"""robfilt train --noise-sigma: Gaussian data augmentation for randomized smoothing."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from robustbench_filters.cli import run
from robustbench_filters.core.errors import RobfiltError
from robustbench_filters.core.family import Family
from robustbench_filters.models.registry import resolve_spec
from robustbench_filters.study.checkpoints import card_mismatch
from robustbench_filters.study.plan import digest, quick_plan, recipe_tag
from robustbench_filters.train.loop import DEFAULT_RECIPES, Recipe, _Task, recipe_identity, train
from robustbench_filters.train.recipe import LATER_FIELDS

TINY = Recipe(steps=3, batch_size=16, lr=2e-3, eval_max=50, augment=False)


def test_noise_is_added_to_training_batches_only_and_is_seeded(tmp_path) -> None:
    spec = resolve_spec("deit", "micro")
    model = torch.nn.Identity()
    clean = _Task(model, spec, "fashion-mnist", TINY, 0, tmp_path)
    noisy = _Task(model, spec, "fashion-mnist", dataclasses.replace(TINY, noise_sigma=0.25), 0, tmp_path)
    (x0, y0), (x1, y1) = clean.batch(5), noisy.batch(5)
    assert torch.equal(y0, y1)
    delta = x1 - x0
    assert delta.std().item() == pytest.approx(0.25, rel=0.05) and abs(delta.mean().item()) < 0.01
    assert torch.equal(noisy.batch(5)[0], x1)  # a pure function of (seed, step)
    assert not torch.equal(noisy.batch(6)[0] - clean.batch(6)[0], delta)


def test_noise_sigma_is_recorded_in_the_card_and_the_rebuild_command(tmp_path) -> None:
    out = tmp_path / "noisy"
    result = train("deit", recipe=dataclasses.replace(TINY, noise_sigma=0.5), seed=0, out=out)
    card = json.loads((out / "card.json").read_text())
    assert card["recipe"]["noise_sigma"] == 0.5
    assert "--noise-sigma 0.5" in card["recipe"]["rebuild_command"]
    assert 0 <= result.metrics["test_acc_noisy"] <= 1 and "test_acc_noisy" in card["metrics"]


def test_cli_flag_reaches_the_recipe(tmp_path) -> None:
    out = tmp_path / "cli"
    code = run(["train", "--model", "deit", "--steps", "2", "--batch-size", "8", "--noise-sigma", "0.1",
                "-q", "--out", str(out)])  # fmt: skip
    assert code == 0
    assert json.loads((out / "card.json").read_text())["recipe"]["noise_sigma"] == 0.1


@pytest.mark.parametrize(
    ("model", "value", "needle"),
    [
        ("deit", "-0.5", "--noise-sigma must be a finite number >= 0"),
        ("deit", "nan", "--noise-sigma 'nan' is not finite; give a finite number"),
        ("lm", "0.25", "--noise-sigma does not apply to language models"),
    ],
)
def test_bad_noise_sigma_is_one_line_exit_2(tmp_path, capsys, model: str, value: str, needle: str) -> None:
    code = run(["train", "--model", model, "--steps", "2", "--noise-sigma", value, "-q", "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and needle in err, err


def test_library_refuses_noise_for_lm(tmp_path) -> None:
    with pytest.raises(RobfiltError, match="image models"):
        train("lm", recipe=Recipe(steps=2, batch_size=2, noise_sigma=0.1), out=tmp_path / "lm")


def test_recipes_without_noise_keep_their_identity() -> None:
    """Checkpoints trained before noise_sigma existed keep their study folder names and still match their cards."""
    image = DEFAULT_RECIPES[Family.IMAGE]
    assert "noise_sigma" not in recipe_identity(image)
    assert recipe_identity(dataclasses.replace(image, noise_sigma=0.25))["noise_sigma"] == 0.25
    plan = quick_plan()
    recipe = plan.recipe("deit")
    old_card_recipe = {k: v for k, v in dataclasses.asdict(recipe).items() if k not in LATER_FIELDS}
    # the tag the study computed before the later fields existed: a digest of the recipe without them
    assert recipe_tag(plan, "deit") == digest(
        {"recipe": old_card_recipe, "data": plan.data("deit"), "size": plan.size}, 8
    )
    old_card_recipe.update(seed=0, data="fashion-mnist", data_checksum="c")
    card = {"name": "deit", "size": plan.size, "recipe": json.loads(json.dumps(old_card_recipe))}
    assert card_mismatch(card, "deit", plan.size, "fashion-mnist", "c", 0, recipe) is None
    noisy = dataclasses.replace(recipe, noise_sigma=0.25)
    assert "noise_sigma" in card_mismatch(card, "deit", plan.size, "fashion-mnist", "c", 0, noisy)
