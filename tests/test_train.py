"""robfilt train: loss goes down, resume is exact, cards are complete, bad input is refused."""

from __future__ import annotations

import json

import numpy as np
import pytest
import safetensors.torch
import torch
import torch.nn.functional as F
from PIL import Image

from robustbench_filters.cli import run
from robustbench_filters.core.errors import RobfiltError
from robustbench_filters.models import load_checkpoint
from robustbench_filters.models.built import built_of
from robustbench_filters.models.registry import build_from_spec
from robustbench_filters.train.loop import DEFAULT_RECIPES, Recipe, _Task, lr_at, train

SMALL = {
    "deit-grc": Recipe(steps=12, batch_size=32, lr=2e-3, ckpt_every=4, eval_max=200),
    "lm-bsa": Recipe(steps=12, batch_size=8, lr=3e-3, ckpt_every=4, eval_max=20, augment=False),
}


@pytest.mark.parametrize("name", ["deit-grc", "lm-bsa"])
def test_a_few_steps_lower_the_loss(tmp_path, name):
    recipe = SMALL[name]
    result = train(name, recipe=recipe, seed=0, out=tmp_path / name)
    trained = load_checkpoint(tmp_path / name, name=name)
    spec = built_of(trained).spec
    torch.manual_seed(0)
    initial = build_from_spec(spec).eval()
    task = _Task(trained, spec, "fashion-mnist" if name.startswith("deit") else "austen", recipe, 0, tmp_path / "tok")
    x, y = task.batch(0)
    with torch.no_grad():
        before = F.cross_entropy(initial(x).flatten(0, -2), y.flatten())
        after = F.cross_entropy(trained(x).flatten(0, -2), y.flatten())
    assert after < before - 0.05, (before, after)
    card = json.loads((tmp_path / name / "card.json").read_text())
    for key in ("command", "data_checksum", "wall_time_s", "total_steps", "seed"):
        assert key in card["recipe"]
    assert card["recipe"]["torch_threads"] == [torch.get_num_threads()]
    assert card["metrics"] == pytest.approx(result.metrics)
    assert not (tmp_path / name / "train_state").exists()


class _Stop(Exception):
    pass


def test_resume_reaches_the_same_weights_as_an_uninterrupted_run(tmp_path):
    recipe = SMALL["deit-grc"]
    train("deit-grc", recipe=recipe, seed=3, out=tmp_path / "full")

    def stop_at_6(task, done, total, info=""):
        if done == 6:
            raise _Stop

    with pytest.raises(_Stop):
        train("deit-grc", recipe=recipe, seed=3, out=tmp_path / "killed", progress=stop_at_6)
    state = json.loads((tmp_path / "killed" / "train_state" / "state.json").read_text())
    assert state["step"] == 4  # last saved state before the kill
    train("deit-grc", recipe=recipe, seed=3, out=tmp_path / "killed", resume=True)
    a = safetensors.torch.load_file(str(tmp_path / "full" / "model.safetensors"))
    b = safetensors.torch.load_file(str(tmp_path / "killed" / "model.safetensors"))
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key


def test_the_card_names_every_thread_count_a_resumed_training_ran_with(tmp_path):
    """Another thread count adds floats in another order (other weights for one seed): the card must say."""
    recipe, before = SMALL["deit-grc"], torch.get_num_threads()

    def stop_at_6(task, done, total, info=""):
        if done == 6:
            raise _Stop

    try:
        torch.set_num_threads(1)
        with pytest.raises(_Stop):
            train("deit-grc", recipe=recipe, seed=3, out=tmp_path / "m", progress=stop_at_6)
        assert json.loads((tmp_path / "m" / "train_state" / "state.json").read_text())["torch_threads"] == [1]
        torch.set_num_threads(2)
        train("deit-grc", recipe=recipe, seed=3, out=tmp_path / "m", resume=True)
    finally:
        torch.set_num_threads(before)
    assert json.loads((tmp_path / "m" / "card.json").read_text())["recipe"]["torch_threads"] == [1, 2]


def test_schedule_warms_up_then_decays():
    recipe = Recipe(steps=100, lr=1.0, warmup_frac=0.1, min_lr_frac=0.0)
    lrs = [lr_at(s, 100, recipe) for s in range(100)]
    assert lrs[0] == pytest.approx(0.1) and lrs[9] == pytest.approx(1.0)
    assert all(a >= b for a, b in zip(lrs[10:], lrs[11:], strict=False))
    assert lrs[-1] < 0.01


def test_default_recipes_are_valid():
    for recipe in DEFAULT_RECIPES.values():
        recipe.validate()


def _rgb_folder(root):
    for cls in ("a", "b"):
        (root / cls).mkdir(parents=True)
        for i in range(3):
            Image.fromarray(np.full((28, 28, 3), 40 * i, np.uint8)).save(root / cls / f"{i}.png")
    return root


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--steps", "0"], "--steps must be positive"),
        (["--epochs", "-1"], "--epochs must be positive"),
        (["--data", "text:/does/not/exist"], "does not exist"),
        (["--tokenizer", "wordpiece"], "unknown --tokenizer"),
    ],
)
def test_bad_input_exit_2(tmp_path, capsys, args, needle):
    model = "lm" if "text:" in " ".join(args) or "--tokenizer" in args else "deit"
    out = tmp_path / "out"
    code = run(["train", "--model", model, "-q", "--out", str(out), *args])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.startswith("error:") and len(err.splitlines()) == 1 and needle in err, err


def test_dataset_that_does_not_fit_the_model_is_refused(tmp_path, capsys):
    folder = _rgb_folder(tmp_path / "imgs")
    code = run(
        [
            "train",
            "--model",
            "deit",
            "--steps",
            "1",
            "-q",
            "--data",
            f"imagefolder:{folder}",
            "--out",
            str(tmp_path / "o"),
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and "expects" in err, err


def test_out_folder_with_a_run_is_refused_unless_resume_or_overwrite(tmp_path, capsys):
    out = tmp_path / "out"
    args = ["train", "--model", "deit", "--steps", "2", "--batch-size", "16", "-q", "--out", str(out)]
    assert run(args) == 0
    card = (out / "card.json").read_bytes()
    assert run(args) == 2
    assert "already holds a run" in capsys.readouterr().err
    assert (out / "card.json").read_bytes() == card
    assert run(args + ["--overwrite"]) == 0


def test_lm_training_needs_steps():
    with pytest.raises(RobfiltError, match="--steps"):
        train("lm", recipe=Recipe(epochs=1), out="/tmp/never-created-robfilt")
