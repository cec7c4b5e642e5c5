"""Every option is declared once and offered on every surface of its kind: CLI flag, API keyword and spec key.

The test walks every field of every config class. A field is either internal (with a reason), or a declared option
that the kind's command, API function and spec section all accept, unless its declaration says why a surface does
not offer it. A new field without a declaration, or a surface that forgets an option, fails here.
"""

from __future__ import annotations

import dataclasses
import inspect

import pytest
import typer

from robustbench_filters.api import benchmark as benchmarking
from robustbench_filters.api import evaluate as api
from robustbench_filters.cli import app
from robustbench_filters.configs import (
    CertifyConfig,
    CorruptionConfig,
    ImageAttackConfig,
    LipschitzConfig,
    LMAttackConfig,
    VerifiedConfig,
    declared_fields,
    internal_reason,
)
from robustbench_filters.configs.options import declaration
from robustbench_filters.core.surface import Surface
from robustbench_filters.gate import spec
from robustbench_filters.train.recipe import Recipe

# kind -> (CLI command, API functions, spec section)
KINDS = {
    ImageAttackConfig: ("attack", [api.evaluate], "image"),
    CorruptionConfig: ("attack", [api.evaluate], "image"),
    LMAttackConfig: ("attack", [api.evaluate], "lm"),
    LipschitzConfig: ("lipschitz", [api.estimate_lipschitz], "lipschitz"),
    CertifyConfig: ("certify", [api.certify], "certify"),
    VerifiedConfig: ("certify", [api.certify], None),
    Recipe: ("train", [Recipe], None),
}
#: benchmark() is RobustBench's one call: one model, one attack, one eps, the norm from threat_model
BENCHMARK_OWN = {
    "models": "benchmark takes one model as its first argument",
    "attacks": "benchmark takes one attack (attack=)",
    "eps": "benchmark takes one eps",
    "norm": "the norm follows threat_model",
    "severities": "threat_model='corruptions' runs every severity",
    "baseline": "one model: no mCE baseline",
}


def _cli_flags(command: str) -> set[str]:
    group = typer.main.get_command(app)
    cmd = group.get_command(None, command)  # type: ignore[arg-type]
    return {opt for p in cmd.params for opt in (*p.opts, *p.secondary_opts)}


def _fields(cls: type) -> list[dataclasses.Field]:
    return list(dataclasses.fields(cls))


@pytest.mark.parametrize("cls", list(KINDS), ids=lambda c: c.__name__)
def test_every_field_is_declared_or_internal_with_a_reason(cls: type) -> None:
    for f in _fields(cls):
        reason = internal_reason(cls, f.name)
        if reason is not None:
            assert reason.strip(), f"{cls.__name__}.{f.name} is internal without a reason"
            continue
        declared = declaration(cls, f.name)
        assert declared is not None, f"{cls.__name__}.{f.name} has no option declaration"
        assert declared.help.strip(), f"{cls.__name__}.{f.name} has no help text"
        for where, why in declared.not_on.items():
            assert why.strip(), f"{cls.__name__}.{f.name} is not offered on {where.value} without a reason"


@pytest.mark.parametrize("cls", list(KINDS), ids=lambda c: c.__name__)
def test_cli_command_offers_every_option_of_its_kinds(cls: type) -> None:
    command, _, _ = KINDS[cls]
    flags = _cli_flags(command)
    for name, declared in declared_fields(cls, Surface.CLI):
        assert declared.cli_flag in flags, f"robfilt {command} lacks {declared.cli_flag} ({cls.__name__}.{name})"


@pytest.mark.parametrize("cls", list(KINDS), ids=lambda c: c.__name__)
def test_api_functions_take_every_option_as_a_keyword(cls: type) -> None:
    _, functions, _ = KINDS[cls]
    for fn in functions:
        params = inspect.signature(fn).parameters
        for name, _ in declared_fields(cls, Surface.API):
            assert name in params, f"{fn.__qualname__} lacks the keyword {name} ({cls.__name__})"


@pytest.mark.parametrize("cls", [ImageAttackConfig, CorruptionConfig], ids=lambda c: c.__name__)
def test_benchmark_takes_the_image_options_it_does_not_fix_itself(cls: type) -> None:
    params = inspect.signature(benchmarking.benchmark).parameters
    for name, _ in declared_fields(cls, Surface.API):
        assert name in params or name in BENCHMARK_OWN, f"benchmark lacks the keyword {name}"


@pytest.mark.parametrize("cls", [c for c, (_, _, section) in KINDS.items() if section], ids=lambda c: c.__name__)
def test_spec_sections_take_every_option_as_a_key(cls: type) -> None:
    section = KINDS[cls][2]
    for name, _ in declared_fields(cls, Surface.SPEC):
        assert name in spec.RUN_KEYS[section], f"[{section}] lacks the key {name} ({cls.__name__})"


def test_a_name_has_one_spelling_everywhere() -> None:
    """Two classes may share an option's name only with the same flag and value kind (checked when declared)."""
    seen: dict[str, str] = {}
    for cls in KINDS:
        for name, declared in declared_fields(cls, Surface.CLI):
            assert seen.setdefault(name, declared.cli_flag) == declared.cli_flag, name


def test_errors_name_options_as_each_surface_spells_them() -> None:
    """The same bad value: a flag on the command line, a keyword in Python, a key in a spec."""
    from robustbench_filters.configs import build, read
    from robustbench_filters.core.errors import RobfiltError
    from robustbench_filters.core.surface import surface

    messages = {}
    given = {Surface.CLI: ("deit", 0), Surface.API: (["deit"], 0), Surface.SPEC: (["deit"], 0)}
    for where, (models, n) in given.items():
        with surface(where), pytest.raises(RobfiltError) as err:
            build(ImageAttackConfig, read({"models": models, "n_examples": n}, where))
        messages[where] = str(err.value)
    assert messages[Surface.CLI].startswith("--n-examples must be positive")
    assert messages[Surface.API].startswith("n_examples must be positive")
    assert messages[Surface.SPEC].startswith("n_examples must be positive")


def test_model_loading_defaults_are_the_run_configs() -> None:
    """load_model's record of model options (models/loading.py sits below configs/) defaults as a run config does."""
    import dataclasses

    from robustbench_filters.configs import RunConfig
    from robustbench_filters.models.loading import Loading

    config = {f.name: f.default for f in dataclasses.fields(RunConfig)}
    loading = Loading()
    for name in ("size", "checkpoint", "seed", "allow_pickle", "base_dir"):
        assert getattr(loading, name) == config[name], name
    assert Loading.of(ImageAttackConfig(models=("deit",), model_args=("depth=2",))).model_args == {"depth": 2}
