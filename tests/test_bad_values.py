"""Every option, on every surface, with random values of its type: exit 2 or a ``RobfiltError``, one line, never a
traceback (issue 30, item 5).

The cases are generated from the declarations, so a new option is covered without touching this file: the CLI
side walks each computing command's click parameters (declared config options and the command's own, such as
``--threads``) and draws values by the option's value kind (:mod:`robustbench_filters.configs.options`) or, for a
command's own options, by click's type; the API side draws keywords of ``evaluate``, ``certify``,
``estimate_lipschitz`` and ``benchmark`` from the same declarations. Values are what a careless or hostile user
types: out-of-range and huge integers, NaN and infinities, fractions by zero, empty strings, odd unicode (right-to-
left marks, emoji, combining characters, a non-UTF-8 byte as Python keeps it), lists of those.

Nothing heavy runs: a value that passes validation reaches the runner, whose stand-in prepares the run (models
loaded, data opened, examples selected and probed: everything a run checks before it writes a file) and stops
there. Every command runs in-process through the CLI's own entry point (no subprocesses).
"""

from __future__ import annotations

import sys

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import robustbench_filters as rf
from robustbench_filters.cli import app, run
from robustbench_filters.configs.options import REGISTRY, Bool, Int, Many, Models, Number, Pairs, Text
from robustbench_filters.core.errors import RobfiltError
from robustbench_filters.core.surface import Surface
from robustbench_filters.runs import runner
from robustbench_filters.runs.measurement import PrepareContext

#: command -> arguments that make a valid run cheap (the fuzzed option comes last, and so wins)
COMMANDS: dict[str, list[str]] = {
    "attack": ["--model", "deit", "--attack", "fgsm", "--eps", "0.01", "-n", "2", "--num-workers", "0"],
    "certify": ["--model", "deit", "-n", "1", "--n", "10", "--n0", "5", "--num-workers", "0"],
    "lipschitz": ["--model", "deit", "-n", "1", "--no-bounds", "--method", "power", "--power-iters", "1",
                  "--num-workers", "0"],
    "train": ["--model", "deit", "--steps", "1"],
}  # fmt: skip
#: flags whose values are not checked by robfilt but name where to write (tested with their own rules elsewhere)
SKIP = {"--out", "--help"}

ODD = [
    "", " ", "\u202eevil", "\u00df", "\U0001f600", "e\u0301", "\ufeff1", "\udcff", "\u0660", "\uff11",
    ",", ",,", "a,b", "=", "k=", "=v", "../..", "-", "--", "0x10", "1_000", "1e400", "-1e400", "1/0", "0/0",
    "nan", "NaN", "inf", "-inf", "Infinity", "8/255", "-0", "0", "-1", "1.5", "true", "none", "None",
]  # fmt: skip
HUGE = [2**31, 2**63 - 1, 2**63, 2**64, -(2**63) - 1, 10**30, -(10**30)]
INTS = st.one_of(st.integers(-3, 3), st.integers(-(2**80), 2**80), st.sampled_from(HUGE))
FLOATS = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([1e308, -1e-320, 0.0, -0.0]))
TEXT = st.one_of(st.sampled_from(ODD), st.text(max_size=8))


def _text_for(value: object) -> st.SearchStrategy[str]:
    """Command-line text for a value kind."""
    if isinstance(value, Int):
        return st.one_of(INTS.map(str), TEXT)
    if isinstance(value, Number):
        return st.one_of(FLOATS.map(repr), INTS.map(str), TEXT)
    if isinstance(value, Many):
        item = _text_for(value.item)
        return st.one_of(st.lists(item, max_size=4).map(",".join), item)
    return TEXT


def _python_for(value: object) -> st.SearchStrategy[object]:
    """Python values for a value kind (and values of the wrong kind, which must be refused just as clearly)."""
    wrong = st.one_of(st.none(), st.booleans(), st.just(b"bytes"), st.just({"a": 1}), st.just([[1]]), st.just(object()))
    if isinstance(value, Int):
        return st.one_of(INTS, FLOATS, TEXT, wrong)
    if isinstance(value, Number):
        return st.one_of(FLOATS, INTS, TEXT, wrong)
    if isinstance(value, Bool):
        return st.one_of(st.booleans(), INTS, TEXT, wrong)
    if isinstance(value, Many):
        item = _python_for(value.item)
        return st.one_of(st.lists(item, max_size=3), st.tuples(item), item, st.just(set()), wrong)
    if isinstance(value, Pairs):
        return st.one_of(st.dictionaries(TEXT, st.one_of(INTS, FLOATS, TEXT), max_size=2), st.lists(TEXT, max_size=2),
                         wrong)  # fmt: skip
    if isinstance(value, Models):
        return st.one_of(TEXT, st.lists(TEXT, max_size=2), wrong)
    return st.one_of(TEXT, INTS, wrong)


class Reached(RobfiltError):
    """The stand-in runner's way out: the options passed every check a run makes before it writes."""

    exit_code = 0


def _prepare_only(measurement, **_kwargs):  # noqa: ANN001, ANN202
    measurement.prepare(PrepareContext(device=torch.device("cpu"), seed=int(measurement.config.seed)))
    raise Reached("reached the runner")


def _train_only(*_args, recipe, **_kwargs):  # noqa: ANN001, ANN202
    recipe.validate()
    raise Reached("reached training")


@pytest.fixture(scope="module")
def stand_ins():  # noqa: ANN201
    """The runner (wherever a module imported it) and training stop once a run is prepared."""
    patch, original = pytest.MonkeyPatch(), runner.run
    for module in list(sys.modules.values()):
        if getattr(module, "run", None) is original:
            patch.setattr(module, "run", _prepare_only)
    import robustbench_filters.train.hf as train_hf
    import robustbench_filters.train.loop as train_loop

    patch.setattr(train_loop, "train", _train_only)
    patch.setattr(train_hf, "train_hf", _train_only)
    yield
    patch.undo()


def _cli_options(command: str) -> list[tuple[str, st.SearchStrategy[str]]]:
    import typer

    cmd = typer.main.get_command(app).get_command(None, command)  # type: ignore[arg-type]
    out = []
    for param in cmd.params:
        flag = max(param.opts, key=len)
        if getattr(param, "is_flag", False) or flag in SKIP:
            continue
        declared = REGISTRY.get(param.name or "")
        integer = getattr(getattr(param, "type_descriptor", None), "annotation", None) is int or (
            getattr(getattr(param, "type", None), "name", "") == "integer"
        )
        value = declared.value if declared is not None else (Int() if integer else Text())
        out.append((flag, _text_for(value)))
    return out


CLI_CASES = [(command, flag, values) for command in COMMANDS for flag, values in _cli_options(command)]


def test_every_computing_command_is_covered_with_its_declared_options() -> None:
    flags = {(c, f) for c, f, _ in CLI_CASES}
    for command in ("attack", "certify", "lipschitz", "train"):
        assert (command, "--seed") in flags and (command, "--threads") in flags, command
    assert ("attack", "--eps") in flags and ("certify", "--sigma") in flags and ("train", "--lr") in flags


@given(case=st.sampled_from(CLI_CASES), data=st.data())
@settings(max_examples=120, deadline=None, database=None, suppress_health_check=list(HealthCheck))
def test_the_cli_answers_any_value_with_exit_2_and_one_line(stand_ins, tmp_path, capfd, case, data) -> None:  # noqa: ANN001
    command, flag, values = case
    value = data.draw(values, label=flag)
    argv = [command, *COMMANDS[command], "-q", f"{flag}={value}"]
    code = run(argv)
    err = capfd.readouterr().err
    assert "Traceback" not in err, err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    if code == 0:  # valid: it reached the runner's stand-in
        assert errors == ["error: reached the runner"] or errors == ["error: reached training"], err
    else:
        assert code == 2 and len(errors) == 1, (argv, code, err)


API = {
    "evaluate": (rf.evaluate, {"models": "deit", "attacks": "fgsm", "eps": 0.01, "n_examples": 2, "num_workers": 0}),
    "certify": (rf.certify, {"models": "deit", "n_examples": 1, "n": 10, "n0": 5, "num_workers": 0}),
    "estimate_lipschitz": (rf.estimate_lipschitz, {"models": "deit", "n_examples": 1, "bounds": False,
                                                    "method": "power", "power_iters": 1, "num_workers": 0}),
    "benchmark": (rf.benchmark, {"model": "deit", "attack": "fgsm", "eps": 0.01, "n_examples": 2, "num_workers": 0}),
}  # fmt: skip


def _api_keywords(fn) -> list[str]:  # noqa: ANN001
    import inspect

    return [p for p in inspect.signature(fn).parameters if p in REGISTRY and REGISTRY[p].on(Surface.API)]


API_CASES = [(name, kw) for name, (fn, _) in API.items() for kw in _api_keywords(fn)]


@given(case=st.sampled_from(API_CASES), data=st.data())
@settings(max_examples=120, deadline=None, database=None, suppress_health_check=list(HealthCheck))
def test_the_api_answers_any_value_with_one_line_robfilt_errors(stand_ins, tmp_path, monkeypatch, case, data) -> None:  # noqa: ANN001
    monkeypatch.chdir(tmp_path)
    name, keyword = case
    fn, base = API[name]
    value = data.draw(_python_for(REGISTRY[keyword].value), label=keyword)
    try:
        fn(**{**base, keyword: value})
    except Reached:
        return
    except RobfiltError as exc:
        message = str(exc)
        assert message and "\n" not in message, message
        assert f"--{keyword.replace('_', '-')} " not in message, message  # the API names its own keyword
