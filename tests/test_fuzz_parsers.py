"""Property-based fuzzing of option parsers: no input may produce a traceback."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from robustbench_filters.cli import run
from robustbench_filters.core.errors import RobfiltError
from robustbench_filters.core.parsing import parse_names, parse_number, parse_numbers

TEXT = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=30)
NUMBERISH = st.one_of(
    TEXT,
    st.from_regex(r"-?[0-9]{0,4}(\.[0-9]{0,3})?(/[0-9]{0,4})?(e-?[0-9]{1,3})?", fullmatch=True),
    st.lists(st.from_regex(r"[0-9./ne-]{0,6}", fullmatch=True), max_size=4).map(",".join),
)


@given(NUMBERISH)
@settings(max_examples=300, deadline=None)
def test_parse_number_returns_a_finite_float_or_a_one_line_error(text):
    try:
        value = parse_number(text, "eps")
    except RobfiltError as exc:
        assert "\n" not in str(exc) and str(exc)
    else:
        assert isinstance(value, float) and math.isfinite(value)


@given(NUMBERISH)
@settings(max_examples=300, deadline=None)
def test_parse_numbers_respects_bounds(text):
    try:
        values = parse_numbers(text, "rate", lo=0.0, hi=1.0)
    except RobfiltError as exc:
        assert "\n" not in str(exc)
    else:
        assert values and all(0.0 <= v <= 1.0 for v in values)


@given(TEXT)
@settings(max_examples=200, deadline=None)
def test_parse_names_never_crashes(text):
    try:
        names = parse_names(text, "model", ["deit", "deit-bsa", "lm"])
    except RobfiltError as exc:
        assert "\n" not in str(exc)
    else:
        assert set(names) <= {"deit", "deit-bsa", "lm"}


@given(
    option=st.sampled_from(["--eps", "--rate", "--model", "--attack", "--step-size", "--norm", "--data"]),
    value=NUMBERISH,
)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_attack_cli_never_shows_a_traceback(capfd, option, value):
    # --n-examples 0 makes every otherwise-valid command stop at validation, so nothing heavy runs
    args = [
        "attack",
        "--model",
        "deit",
        "--checkpoint",
        "none",
        "--n-examples",
        "0",
        "-q",
        "--out",
        "/nonexistent-robfilt/x",
    ]
    if value.startswith("-"):
        args += [f"{option}={value}"]
    else:
        args += [option, value]
    code = run(args)
    err = capfd.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), err


@pytest.mark.parametrize(
    "extra",
    [
        [
            "--model",
            "~0",
        ],  # a ~user this machine does not know: Path.expanduser raised RuntimeError (found by the fuzzer)
        ["--data", "imagefolder:~robfilt-no-such-user/x"],
        ["--checkpoint", "~robfilt-no-such-user/w.safetensors"],
    ],
)
def test_an_unknown_home_folder_is_a_path_like_any_other(capfd, extra):
    args = ["attack", "--model", "deit", "-n", "1", "-q", "--out", "/nonexistent-robfilt/x"]
    code = run([*args, *extra])
    err = capfd.readouterr().err
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error:"), err
