"""robfilt train --adversarial pgd: PGD points replace the batches, seeded by (seed, step); resumable; in the card."""

from __future__ import annotations

import dataclasses
import json

import pytest
import safetensors.torch
import torch

from robustbench_filters.cli import run
from robustbench_filters.models.registry import resolve_spec
from robustbench_filters.train.adversarial import PGDTraining
from robustbench_filters.train.loop import DEFAULT_RECIPES, Recipe, _Task, recipe_identity, train
from robustbench_filters.train.recipe import LATER_FIELDS

TINY = Recipe(steps=4, batch_size=8, lr=2e-3, eval_max=16, augment=False, ckpt_every=2, adversarial="pgd",
              train_eps=0.05, train_steps=2)  # fmt: skip
SMALL_NET = {"depth": 1, "embed_dim": 16, "num_heads": 2}


class _Stop(Exception):
    pass


def _weights(folder) -> dict[str, torch.Tensor]:
    return safetensors.torch.load_file(str(folder / "model.safetensors"))


def test_batches_are_pgd_points_inside_the_ball_drawn_from_seed_and_step(tmp_path) -> None:
    spec = resolve_spec("deit", "micro", **SMALL_NET)
    torch.manual_seed(0)
    from robustbench_filters.models.registry import build_from_spec

    model = build_from_spec(spec).train()
    clean = _Task(
        model, spec, "fashion-mnist", dataclasses.replace(TINY, adversarial=None, train_eps=None), 0, tmp_path
    )
    adv = _Task(model, spec, "fashion-mnist", TINY, 0, tmp_path)
    (x0, y0), (x1, y1) = clean.batch(3), adv.batch(3)
    assert torch.equal(y0, y1) and not torch.equal(x0, x1)
    assert (x1 - x0).abs().max() <= 0.05 + 1e-6 and x1.min() >= 0 and x1.max() <= 1
    assert torch.equal(adv.batch(3)[0], x1)  # a pure function of (seed, step) and the weights
    assert model.training and all(p.requires_grad for p in model.parameters())  # mode and flags come back
    rng = torch.random.get_rng_state()
    adv.batch(4)
    assert torch.equal(torch.random.get_rng_state(), rng)  # the training's own random state is untouched


def test_adversarial_training_is_deterministic_resumable_and_in_the_card(tmp_path) -> None:
    train("deit", recipe=TINY, seed=1, out=tmp_path / "a", **SMALL_NET)
    train("deit", recipe=TINY, seed=1, out=tmp_path / "b", **SMALL_NET)

    def stop_at_3(task, done, total, info=""):
        if done == 3:
            raise _Stop

    with pytest.raises(_Stop):
        train("deit", recipe=TINY, seed=1, out=tmp_path / "killed", progress=stop_at_3, **SMALL_NET)
    assert json.loads((tmp_path / "killed" / "train_state" / "state.json").read_text())["step"] == 2
    train("deit", recipe=TINY, seed=1, out=tmp_path / "killed", resume=True, **SMALL_NET)
    a, b, c = _weights(tmp_path / "a"), _weights(tmp_path / "b"), _weights(tmp_path / "killed")
    for key in a:
        assert torch.equal(a[key], b[key]) and torch.equal(a[key], c[key]), key
    card = json.loads((tmp_path / "a" / "card.json").read_text())
    recipe = card["recipe"]
    assert (recipe["adversarial"], recipe["train_eps"], recipe["train_steps"], recipe["train_norm"]) == (
        "pgd", 0.05, 2, "linf")  # fmt: skip
    assert "--adversarial pgd --train-eps 0.05 --train-steps 2" in recipe["rebuild_command"]
    assert 0 <= card["metrics"]["test_acc_pgd20"] <= card["metrics"]["test_acc"]


def test_fine_tuning_starts_from_the_zoo_weights(tmp_path) -> None:
    recipe = dataclasses.replace(TINY, steps=1, lr=1e-12, init="zoo", eval_max=8)  # a step that changes nothing
    train("deit", recipe=recipe, seed=0, out=tmp_path / "ft")
    from robustbench_filters.models.checkpoint import zoo_path

    zoo = _weights(zoo_path("deit", "micro"))
    tuned = _weights(tmp_path / "ft")
    assert all(torch.allclose(zoo[k], tuned[k], atol=1e-6) for k in zoo)
    assert "--init zoo" in json.loads((tmp_path / "ft" / "card.json").read_text())["recipe"]["rebuild_command"]


def test_the_settings_reach_the_attack() -> None:
    pgd = PGDTraining.from_recipe(dataclasses.replace(TINY, train_eps=0.1, train_steps=5, train_norm="l2"))
    assert pgd is not None and (pgd.eps, pgd.steps, pgd.norm.value) == (0.1, 5, "l2")
    assert pgd.step_size == pytest.approx(2.5 * 0.1 / 5)
    assert PGDTraining.from_recipe(DEFAULT_RECIPES[resolve_spec("deit").family]) is None


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--adversarial", "pgd"], "--adversarial pgd needs --train-eps"),
        (["--adversarial", "fgsm", "--train-eps", "0.1"], "unknown --adversarial 'fgsm'"),
        (["--train-eps", "0.1"], "--train-eps sets the budget of --adversarial pgd"),
        (["--adversarial", "pgd", "--train-eps", "0.1", "--train-norm", "l1"], "unknown --train-norm 'l1'"),
        (["--adversarial", "pgd", "--train-eps", "2"], "--adversarial pgd needs --train-eps"),
    ],
)
def test_bad_adversarial_options_are_one_line_exit_2(tmp_path, capsys, args, needle) -> None:
    code = run(["train", "--model", "deit", "--steps", "1", *args, "-q", "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and needle in err, err


def test_lm_training_refuses_adversarial_and_init(tmp_path, capsys) -> None:
    code = run(["train", "--model", "lm", "--steps", "1", "--adversarial", "pgd", "--train-eps", "0.1", "-q",
                "--out", str(tmp_path / "o")])  # fmt: skip
    assert (
        code == 2
        and "--adversarial does not apply to language models trained from scratch (only to image models)"
        in capsys.readouterr().err
    )


def test_recipes_without_adversarial_training_keep_their_identity() -> None:
    image = DEFAULT_RECIPES[resolve_spec("deit").family]
    identity = recipe_identity(image)
    assert not {"init", "adversarial", "train_eps", "train_steps", "train_norm"} & set(identity)
    assert {"init", "adversarial", "train_eps", "train_steps", "train_norm"} <= set(LATER_FIELDS)
    assert recipe_identity(dataclasses.replace(image, adversarial="pgd", train_eps=0.05))["adversarial"] == "pgd"
