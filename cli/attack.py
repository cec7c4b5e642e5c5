"""robfilt attack: image attacks, language-model attacks and corruptions, on the same examples for every model."""

from __future__ import annotations

from typing import Any

import typer

from robustbench_filters.configs import CorruptionConfig, ImageAttackConfig, LMAttackConfig

from ._options import config_options
from ._render import render_summary
from ._run import RunCommand, run_options


def _config(given: dict[str, Any]) -> Any:
    from robustbench_filters.configs import attack_config_class, build

    return build(attack_config_class(given["models"], given.get("attacks", ())), given)


def _evaluate() -> Any:
    from robustbench_filters.api.evaluate import evaluate

    return evaluate


ATTACK = RunCommand("attack", _config, _evaluate, lambda summary, config: render_summary(summary))


@config_options(ImageAttackConfig, LMAttackConfig, CorruptionConfig, cli_defaults={"models": "deit-grc"})
@run_options("Run folder (default: runs/attack-<time>).")
def attack_cmd(**options: Any) -> None:
    """Attack one or more models on the same examples and print a checked comparison table.

    Image models: catalogue attacks over an eps grid, or corruptions. Language models: fgsm, pgd, wordswap.
    """
    ATTACK(options)


def register(app: typer.Typer) -> None:
    app.command("attack")(attack_cmd)
