"""Every training option means the same on every kind of model, and a resume compares the whole recipe.

An option that one kind of model cannot honour (``--adversarial`` for hf: fine-tuning, ``--init`` for an LM,
``--train-steps`` without ``--adversarial``) must be refused in one line, not trained around while the card and its
rebuild command record it. ``--resume`` on a finished training must not answer a changed recipe with the old
weights and metrics.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from robustbench_filters.cli import run
from robustbench_filters.configs.options import declaration
from robustbench_filters.core.errors import RobfiltError
from robustbench_filters.core.family import Family
from robustbench_filters.train.loop import train
from robustbench_filters.train.recipe import (
    DEFAULT_RECIPES,
    FINETUNE_FIELDS,
    HF_RECIPE,
    Recipe,
    Trainee,
    applies,
)

TINY_IMAGE = ["--steps", "1", "--batch-size", "4", "--eval-max", "4"]
TINY_LM = ["--steps", "1", "--batch-size", "2", "--eval-max", "1"]


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def _refused(argv: list[str], needle: str, tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """Exit 2, one line naming the option, and nothing written into (or next to) the user's folder."""
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    (out / "keep.txt").write_text("earlier work")
    before = _snapshot(out)
    code = run([*argv, "--out", str(out / "run"), "-q"])
    err = capfd.readouterr().err.strip()
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2, f"exit {code}: {err}"
    assert len(lines) == 1 and lines[0].startswith("error:") and "Traceback" not in err, err
    assert needle in lines[0], lines[0]
    assert _snapshot(out) == before


HF_CASES = [
    ("adversarial", ["--adversarial", "pgd", "--train-eps", "0.05"], "--adversarial does not apply to hf: fine-tuning"),
    ("init zoo", ["--init", "zoo"], "--init does not apply to hf: fine-tuning"),
    ("train steps", ["--train-steps", "5"], "--train-steps does not apply to hf: fine-tuning"),
    ("noise", ["--noise-sigma", "0.1"], "--noise-sigma does not apply to hf: fine-tuning"),
    ("no augment", ["--no-augment"], "--augment does not apply to hf: fine-tuning"),
    ("label smoothing", ["--label-smoothing", "0.1"], "--label-smoothing does not apply"),
    ("bpe vocab", ["--bpe-vocab", "300"], "--bpe-vocab does not apply to hf: fine-tuning"),
]


@pytest.mark.parametrize(("case", "args", "needle"), HF_CASES, ids=[c[0] for c in HF_CASES])
def test_hf_fine_tuning_refuses_what_it_cannot_honour(hf_models, tmp_path, capfd, case, args, needle) -> None:
    argv = ["train", "--model", f"hf:{hf_models.gpt2}", "--variant", "none", "--steps", "1", *args]
    _refused(argv, needle, tmp_path, capfd)


REGISTRY_CASES = [
    ("train steps alone", "deit", ["--train-steps", "5"], "--train-steps is a setting of --adversarial pgd"),
    ("train norm alone", "deit", ["--train-norm", "l2"], "--train-norm is a setting of --adversarial pgd"),
    ("train steps at default", "deit", ["--train-steps", "10"], "--train-steps is a setting of --adversarial pgd"),
    ("variant", "deit", ["--variant", "grc"], "--variant does not apply to image models"),
    ("max length", "deit", ["--max-length", "16"], "--max-length does not apply to image models"),
    ("tokenizer", "deit", ["--tokenizer", "bpe"], "--tokenizer does not apply to image models"),
    ("lm epochs", "lm", ["--epochs", "2"], "--epochs does not apply to language models trained from scratch"),
    ("lm init", "lm", ["--init", "zoo"], "--init does not apply to language models trained from scratch"),
    ("lm augment", "lm", ["--no-augment"], "--augment does not apply to language models"),
    ("lm bpe vocab, char", "lm", ["--bpe-vocab", "300"], "--bpe-vocab sizes a BPE tokenizer"),
]


@pytest.mark.parametrize(("case", "model", "args", "needle"), REGISTRY_CASES, ids=[c[0] for c in REGISTRY_CASES])
def test_registry_training_refuses_what_it_cannot_honour(tmp_path, capfd, case, model, args, needle) -> None:
    _refused(["train", "--model", model, "--steps", "1", *args], needle, tmp_path, capfd)


def test_every_recipe_option_declares_the_trainees_it_means_something_for() -> None:
    """The declaration is the one table: what fine-tuning records is what applies to it, and every option that
    applies to a single kind says so (a new image-only option left undeclared would be trained around silently)."""
    for f in dataclasses.fields(Recipe):
        assert declaration(Recipe, f.name) is not None, f.name
    hf = {f.name for f in dataclasses.fields(Recipe) if applies(f.name, Trainee.HF)}
    assert hf == {*FINETUNE_FIELDS, "tokenizer", "variant", "max_length"}
    image_only = {"epochs", "label_smoothing", "augment", "noise_sigma", "init", "adversarial", "train_eps",
                  "train_steps", "train_norm"}  # fmt: skip
    for name in image_only:
        assert applies(name, Trainee.IMAGE) and not applies(name, Trainee.LM) and not applies(name, Trainee.HF)


@pytest.mark.parametrize("trainee", list(Trainee))
def test_the_api_refuses_a_changed_option_the_kind_cannot_honour(trainee: Trainee) -> None:
    """The library checks values (a caller passes a whole recipe): any option away from its defaults that does not
    apply to the kind is refused, naming it as Python spells it."""
    base = HF_RECIPE if trainee is Trainee.HF else DEFAULT_RECIPES[Family(trainee.value)]
    changed = {"epochs": 3, "label_smoothing": 0.1, "augment": False, "noise_sigma": 0.1, "init": "zoo",
               "adversarial": "pgd", "tokenizer": "bpe", "bpe_vocab": 300, "variant": "grc",
               "max_length": 16}  # fmt: skip
    for name, value in changed.items():
        recipe = dataclasses.replace(base, **{name: value})
        if applies(name, trainee) or value == getattr(base, name):
            continue
        with pytest.raises(RobfiltError, match=f"{name} does not apply to {trainee.description}"):
            recipe.check_fits(trainee)


def test_library_train_refuses_an_lm_init(tmp_path) -> None:
    with pytest.raises(RobfiltError, match="init does not apply"):
        train("lm", recipe=Recipe(steps=1, batch_size=2, init="zoo"), out=tmp_path / "lm")
    assert not (tmp_path / "lm").exists()


# ---------------------------------------------------------------------------------------------------- resume
def test_resume_of_a_finished_training_with_another_recipe_is_refused(tmp_path, capfd) -> None:
    out = tmp_path / "at"
    argv = ["train", "--model", "deit", *TINY_IMAGE, "--adversarial", "pgd", "--train-steps", "1", "-q",
            "--out", str(out)]  # fmt: skip
    assert run([*argv, "--train-eps", "0.05"]) == 0
    card = (out / "card.json").read_bytes()
    capfd.readouterr()
    assert run([*argv, "--train-eps", "0.1", "--resume"]) == 2
    err = capfd.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "finished training made with other settings" in err, err
    assert "train_eps 0.05 there, 0.1 here" in err and "--overwrite" in err, err
    assert (out / "card.json").read_bytes() == card  # nothing of the finished training is touched
    assert run([*argv, "--train-eps", "0.05", "--resume"]) == 0  # the same training: nothing to do
    assert (out / "card.json").read_bytes() == card


def test_resume_of_a_finished_training_with_another_seed_or_data_is_refused(tmp_path, capfd) -> None:
    out = tmp_path / "plain"
    argv = ["train", "--model", "deit", *TINY_IMAGE, "-q", "--out", str(out)]
    assert run(argv) == 0
    capfd.readouterr()
    assert run([*argv, "--seed", "1", "--resume"]) == 2
    assert "seed 0 there, 1 here" in capfd.readouterr().err
    assert run([*argv, "--lr", "0.01", "--resume"]) == 2
    assert "lr 0.002 there, 0.01 here" in capfd.readouterr().err


def test_resume_of_a_finished_fine_tuning_with_another_recipe_is_refused(hf_models, tmp_path, capfd) -> None:
    out = tmp_path / "ft"
    argv = ["train", "--model", f"hf:{hf_models.gpt2}", "--variant", "none", "--steps", "1", "--batch-size", "1",
            "--eval-max", "1", "-q", "--out", str(out)]  # fmt: skip
    assert run(argv) == 0
    card = json.loads((out / "card.json").read_text())
    capfd.readouterr()
    assert run([*argv, "--lr", "0.001", "--resume"]) == 2
    err = capfd.readouterr().err
    assert "finished training made with other settings" in err and "lr 0.0003 there, 0.001 here" in err, err
    assert run([*argv, "--resume"]) == 0
    assert json.loads((out / "card.json").read_text()) == card


# ---------------------------------------------------------------------------------------------------- runs
RUN_CASES = [
    ("size on timm", ["attack", "--model", "timm:resnet18", "--checkpoint", "none", "--size", "tiny"],
     "--size applies to registry models"),
    ("image column, bundled data", ["attack", "--model", "deit", "--image-column", "img"],
     "--image-column applies to hf-disk: data, not to fashion-mnist"),
    ("label column, bundled data", ["attack", "--model", "deit", "--label-column", "lab"],
     "--label-column applies to hf-disk: data"),
    ("workers, bundled tensors", ["attack", "--model", "deit", "--num-workers", "4"],
     "--num-workers applies to imagefolder: data or hf-disk: data"),
    ("data root, bundled data", ["attack", "--model", "deit", "--data-root", "."], "--data-root is where torchvision"),
    ("pickle without a file", ["attack", "--model", "deit", "--allow-pickle"], "--allow-pickle lets --checkpoint"),
    ("lm steps, wordswap only", ["attack", "--model", "lm", "--attack", "wordswap", "--steps", "3"],
     "--steps is a setting of pgd"),
    ("lm step size, fgsm only", ["attack", "--model", "lm", "--attack", "fgsm", "--step-size", "0.1"],
     "--step-size sets the fixed step of embedding pgd"),
    ("lm replacement, pgd only", ["attack", "--model", "lm", "--attack", "pgd", "--replacement", "BBB"],
     "--replacement is a setting of wordswap"),
    ("lm norm, wordswap only", ["attack", "--model", "lm", "--attack", "wordswap", "--norm", "linf"],
     "--norm is a setting of fgsm and pgd"),
    ("lm text column, bundled text", ["attack", "--model", "lm", "--text-column", "body"],
     "--text-column applies to hf-disk: data"),
    ("lipschitz seq len, images", ["lipschitz", "--model", "deit", "--seq-len", "8", "--no-bounds"],
     "--seq-len is not read by this run"),
    ("lipschitz image size, lm", ["lipschitz", "--model", "lm", "--img-size", "32", "--no-bounds"],
     "--img-size is not read by this run"),
    ("power iterations, exact", ["lipschitz", "--model", "deit", "--power-iters", "5", "--no-bounds"],
     "--power-iters is not read by this run"),
    ("ratio steps, power", ["lipschitz", "--model", "deit", "--method", "power", "--ratio-steps", "5", "--no-bounds"],
     "--ratio-steps is not read by this run"),
    ("gap radii without gap", ["lipschitz", "--model", "deit", "--gap-rho", "0.01", "--no-bounds"],
     "--gap-rho is not read by this run"),
    ("rho without bounds", ["lipschitz", "--model", "deit", "--rho", "0.5", "--no-bounds"],
     "--rho is not read by this run"),
    ("crown gap rows without gap", ["lipschitz", "--model", "deit", "--gap-crown"], "--gap-crown is not read by this run"),
    ("crown gap rows, lm", ["lipschitz", "--model", "lm", "--gap", "--gap-crown"], "--gap-crown is not read by this run"),
    ("crown refresh without crown", ["lipschitz", "--model", "deit", "--gap", "--gap-crown-refresh", "deep"],
     "--gap-crown-refresh is not read by this run"),
    ("crown refresh, lm", ["lipschitz", "--model", "lm", "--gap", "--gap-crown-refresh", "deep"],
     "--gap-crown-refresh is not read by this run"),
    ("crown refresh unknown", ["lipschitz", "--model", "deit", "--gap", "--gap-crown", "--gap-crown-refresh", "most"],
     "--gap-crown-refresh must be one of all, full, deep, inner, residual, none, got 'most'"),
    ("gap rows of a model the certified bounds do not cover",
     ["lipschitz", "--model", "timm:resnet10t?num_classes=10&in_chans=1", "--checkpoint", "none", "--no-bounds",
      "--gap"], "without --per-layer or --gap for the empirical lower bounds only"),
]  # fmt: skip


@pytest.mark.parametrize(("case", "argv", "needle"), RUN_CASES, ids=[c[0] for c in RUN_CASES])
def test_a_run_option_no_model_or_data_of_the_run_reads_is_refused(tmp_path, capfd, case, argv, needle) -> None:
    _refused([*argv, "-n", "1"], needle, tmp_path, capfd)


API_UNREAD = [
    ({"models": "deit", "seq_len": 8, "bounds": False}, "seq_len is not read by this run"),
    ({"models": "lm", "img_size": 32, "bounds": False}, "img_size is not read by this run"),
    ({"models": "deit", "power_iters": 5, "bounds": False}, "method=exact computes the whole Jacobian"),
    ({"models": "deit", "method": "power", "ratio_steps": 5, "bounds": False}, "it sets method=ratio's ascent"),
    ({"models": "deit", "gap_rhos": [0.01], "bounds": False}, "it sets the radii of gap"),
    ({"models": "deit", "rho": 0.5, "bounds": False}, "add bounds=True or use ratio"),
    ({"models": "deit", "gap_crown": True}, "it adds CROWN to gap's rows"),
    ({"models": "deit", "gap": True, "gap_crown_refresh": "deep"}, "it shapes the CROWN bound of gap_crown"),
    ({"models": "timm:resnet10t?num_classes=10&in_chans=1", "checkpoint": "none", "bounds": False, "gap": True},
     "pass bounds=False, per_layer=False and gap=False for the empirical lower bounds only"),
]  # fmt: skip


@pytest.mark.parametrize(("options", "needle"), API_UNREAD, ids=[n.split()[0] for _, n in API_UNREAD])
def test_the_api_refuses_a_setting_nothing_reads_in_its_own_words(tmp_path, monkeypatch, options, needle) -> None:
    """The reason and the fix name Python keywords (``method=exact``, ``bounds=True``), never a command-line flag."""
    import robustbench_filters as rf

    monkeypatch.chdir(tmp_path)
    with pytest.raises(rf.RobfiltError) as refused:
        rf.estimate_lipschitz(n_examples=1, num_workers=0, **options)
    message = str(refused.value)
    assert needle in message and "--" not in message, message


def test_the_api_refuses_model_options_for_a_module_it_uses_as_it_is() -> None:
    import torch
    from torch import nn

    import robustbench_filters as rf

    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(784, 10))
    for options in ({"checkpoint": "weights.safetensors"}, {"model_args": {"num_classes": 10}}, {"size": "tiny"}):
        with pytest.raises(rf.RobfiltError, match="drop it"):
            rf.evaluate(model, attacks="fgsm", eps=0.01, n_examples=2, **options)


@pytest.mark.parametrize(
    ("model", "needle"),
    [
        ("generic", "gap_crown: Sequential is not an image model"),
        ("tanh", "gap_crown: crown bounds do not cover Tanh at 1;"),
    ],
)
def test_the_crown_gap_column_is_refused_for_a_model_crown_cannot_bound(tmp_path, model, needle) -> None:
    """``gap_crown`` on a model the CROWN graph does not cover (or that has no pixel box) is refused in one line
    before any unit runs, instead of a NaN column at the end; the same model runs the gap without it."""
    import torch
    from torch import nn

    import robustbench_filters as rf

    torch.manual_seed(0)
    net = (
        nn.Sequential(nn.Flatten(), nn.Linear(784, 10))
        if model == "generic"
        else nn.Sequential(nn.Conv2d(1, 2, 3), nn.Tanh(), nn.Flatten(), nn.Linear(2 * 26 * 26, 10))
    )
    x = torch.rand(2, 1, 28, 28)
    out = tmp_path / "run"
    with pytest.raises(rf.RobfiltError, match=needle) as err:
        rf.estimate_lipschitz(net, inputs=x, gap=True, gap_crown=True, n_examples=2, out=out)
    assert "\n" not in str(err.value) and not out.exists()
    rows = rf.estimate_lipschitz(net, inputs=x, gap=True, n_examples=2).rows
    assert rows[rows["layer"].str.startswith("gap")]["local_crown"].isna().all()
