"""Property: any combination of options, on any kind of model, ends in a run (exit 0, or 3 with failed checks shown)
or in one line naming what to fix (exit 2), with no traceback, and a refusal writes nothing.

Options are drawn from each command's own declarations (the typer command robfilt runs), with values that are
valid for some kinds and invalid for others: an option that means nothing for one kind of model must be refused
there, never run around. Each draw also starts from small settings so that a run that goes through stays quick.
``ROBFILT_FUZZ_EXAMPLES`` raises the number of draws per (command, kind) for a longer search.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
import typer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from robustbench_filters.cli import app, run
from robustbench_filters.configs.options import REGISTRY, Bool, Int, Many, Number

EXAMPLES = int(os.environ.get("ROBFILT_FUZZ_EXAMPLES", "6"))
#: options that choose where and how output goes, or the model itself: set by the test, not drawn
NOT_DRAWN = {"models", "model", "out", "resume", "overwrite", "json_out", "quiet", "data_root", "class_map"}
#: what each named option is drawn from: values valid for some kinds and commands, and some valid for none
TEXT_VALUES: dict[str, list[str]] = {
    "data": ["fashion-mnist", "austen", "bogus:thing"],
    "size": ["micro", "tiny", "huge"],
    "checkpoint": ["zoo", "none", "/nonexistent/ckpt"],
    "device": ["cpu", "cuda", "tpu"],
    "attacks": ["pgd", "fgsm", "apgd-adaptive", "wordswap", "corruption", "square", "nope"],
    "norm": ["linf", "l2", "l1"],
    "amp": ["bf16", "fp8"],
    "eps_mode": ["relative", "absolute", "both"],
    "replacement": ["AAA", ""],
    "tokenizer": ["char", "bpe", "gpt9"],
    "text_column": ["text", "missing"],
    "image_column": ["image", "missing"],
    "label_column": ["label", "missing"],
    "split": ["test", "train", "all", "nine"],
    "precision": ["fp32", "bf16", "fp8"],
    "baseline": ["deit", "lm", "other"],
    "method": ["exact", "power", "ratio", "guess"],
    "dtype": ["float32", "float64", "float16"],
    "variant": ["bsa", "grc", "none", "bsb"],
    "init": ["zoo", "/nonexistent/init"],
    "adversarial": ["pgd", "fgsm"],
    "train_norm": ["linf", "l2", "l1"],
    "model_args": ["grc_lambda=0.2", "bogus=1"],
    "threads": ["1", "0", "x"],
}
INTS = ["0", "1", "2", "-1", "3"]
NUMBERS = ["0", "0.01", "-0.5", "1", "nan", "8/255", "1e9"]
NUMBER_LISTS = ["0.01", "0.01,0.02", "0,0.01", "-1", "0.02,0.02", "x"]
INT_LISTS = ["1", "1,3", "0", "9", "1,1"]

#: per command, settings that keep a run that goes through small (a drawn option given later wins)
BASE: dict[str, list[str]] = {
    "attack": ["--n-examples", "2", "--eps", "0.01", "--steps", "1"],
    "lipschitz": ["--n-examples", "1", "--power-iters", "2", "--ratio-steps", "1", "--no-bounds"],
    "certify": ["--n-examples", "2", "--n", "16", "--n0", "4", "--attack-examples", "1", "--attack-steps", "1"],
    "train": ["--steps", "1", "--batch-size", "2", "--eval-max", "2"],
}
KINDS = {
    "attack": ("deit", "lm", "hf"),
    "lipschitz": ("deit", "lm"),
    "certify": ("deit",),
    "train": ("deit", "lm", "hf"),
}


def _params(command: str) -> list[typer.core.TyperOption]:
    cmd = typer.main.get_command(app).commands[command]
    return [p for p in cmd.params if p.name not in NOT_DRAWN and p.opts]


def _values(param: typer.core.TyperOption) -> list[list[str]]:
    """The argv pieces that set ``param``: a flag on or off, or the option with each candidate value."""
    flag = param.opts[0]
    if param.is_flag:
        return [[flag], *[[s] for s in param.secondary_opts]]
    declared = REGISTRY.get(param.name)
    kind = declared.value if declared is not None else None
    if param.name in TEXT_VALUES:
        pool = TEXT_VALUES[param.name]
    elif isinstance(kind, Many) and isinstance(kind.item, Int):
        pool = INT_LISTS
    elif isinstance(kind, Many):
        pool = NUMBER_LISTS if isinstance(kind.item, Number) else ["x", "x,y"]
    elif isinstance(kind, Number):
        pool = NUMBERS
    elif isinstance(kind, Int) or param.name in ("seed",):
        pool = INTS
    elif isinstance(kind, Bool):
        return [[flag]]
    else:
        pool = ["x", "1"]
    return [[flag, v] for v in pool]


def _choices(command: str) -> st.SearchStrategy[list[str]]:
    pieces = [v for p in _params(command) for v in _values(p)]
    return st.lists(st.sampled_from(pieces), min_size=1, max_size=3).map(lambda xs: [a for x in xs for a in x])


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def _check(argv: list[str], capfd: pytest.CaptureFixture[str]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        (home / "keep.txt").write_text("the user's own file")
        before = _snapshot(home)
        cwd = os.getcwd()
        os.chdir(home)  # a command that wrote next to the user's files by default would show here
        try:
            code = run([*argv, "--out", str(home / "run"), "-q"])
        finally:
            os.chdir(cwd)
        err = capfd.readouterr().err
        assert code in (0, 2, 3), f"exit {code} for {argv}: {err}"
        assert "Traceback" not in err, f"{argv}: {err}"
        if code == 2:
            lines = [ln for ln in err.splitlines() if ln.strip()]
            assert len(lines) == 1 and lines[0].startswith("error:"), f"{argv}: {err}"
            assert _snapshot(home) == before, f"{argv} wrote files although it was refused: {err}"


def _model(kind: str, hf_models) -> str:
    return f"hf:{hf_models.gpt2}" if kind == "hf" else kind


CASES = [(command, kind) for command, kinds in KINDS.items() for kind in kinds]


@pytest.mark.parametrize(("command", "kind"), CASES, ids=[f"{c}-{k}" for c, k in CASES])
def test_any_option_combination_runs_or_is_refused_in_one_line(hf_models, capfd, command: str, kind: str) -> None:
    @given(options=_choices(command))
    @settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
              suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])  # fmt: skip
    def prop(options: list[str]) -> None:
        model = ["--model", _model(kind, hf_models)]
        if command == "train" and kind == "hf":
            model += ["--variant", "none"]
        _check([command, *model, *BASE[command], *options], capfd)

    prop()
