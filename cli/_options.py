"""Typer options generated from the config declarations, so a command offers exactly its configs' options.

A command is written with its own parameters (``--out``, ``--json``, ...) and ``**options``;
:func:`config_options` gives it one typer option per declared field of its config classes (flag, short flag,
help, help panel and per-kind defaults all from :mod:`robustbench_filters.configs.options`). Every generated option
defaults to None, meaning "not given": the config's own default applies, so a CLI default can never override a
kind's default. The command reads what was given with :func:`robustbench_filters.configs.read` and builds its
config with :func:`robustbench_filters.configs.build`, exactly as the API and specs do.

Only the declarations are imported here (no torch), so ``robfilt <command> --help`` stays fast.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Collection, Mapping
from typing import Annotated, Any

import typer

from robustbench_filters.configs.options import (
    Bool,
    Int,
    Many,
    Models,
    Number,
    Pairs,
    Paths,
    declaration,
    declared_fields,
)
from robustbench_filters.core.counts import UpTo
from robustbench_filters.core.surface import Surface

#: The own options of the commands (not config fields), in their help panel.
OUTPUT_PANEL = "Output"


def _show(value: Any) -> str:
    if isinstance(value, UpTo):
        return f"up to {int(value)}"
    if isinstance(value, tuple):
        return ",".join(_show(v) for v in value) if value else "none"
    if isinstance(value, float):
        return f"{value:g}"
    return str(getattr(value, "value", value))


def _defaults(name: str, owners: list[type]) -> str:
    """'[default: 256]' or, when kinds differ, '[default: up to 256 (image attack), up to 64 (language-model ...)]'."""
    shown: dict[str, list[str]] = {}
    for cls in owners:
        f = next(f for f in dataclasses.fields(cls) if f.name == name)
        if f.default is dataclasses.MISSING or f.default in (None, False, ()):
            continue
        shown.setdefault(_show(f.default), []).append(cls.DESCRIPTION)
    if not shown:
        return ""
    if len(shown) == 1 and len(next(iter(shown.values()))) == len(owners):
        return f" (default: {next(iter(shown))})"
    return " (default: " + "; ".join(f"{v} for {', '.join(k)}" for v, k in shown.items()) + ")"


def _metavar(value: Any) -> str | None:
    """What the help shows in place of a value: N, X, NAME[,NAME...], KEY=VALUE, REF[,REF...]."""
    if isinstance(value, Bool):
        return None
    if isinstance(value, Pairs):
        return "KEY=VALUE"
    if isinstance(value, Paths):
        return "PATH"
    if isinstance(value, Models):
        return "REF[,REF...]"
    if isinstance(value, Many):
        return f"{_metavar(value.item)}[,...]"
    if isinstance(value, Int):
        return "N"
    if isinstance(value, Number):
        return "X"
    return "PATH" if getattr(value, "path", False) else "TEXT"


def _annotation(name: str, owners: list[type], cli_default: str | None, shown: str | None) -> Any:
    declared = declaration(owners[0], name)
    assert declared is not None
    flag = declared.cli_flag
    if isinstance(declared.value, Bool):
        decls = [f"{flag}/--no-{flag[2:]}" if declared.negatable else flag]
        kind: Any = bool | None
    else:
        decls = [flag]
        kind = (
            int | None
            if isinstance(declared.value, Int)
            else list[str] | None
            if isinstance(declared.value, Pairs | Paths)
            else str | None
        )
    if declared.short:
        decls.append(declared.short)
    default = cli_default or shown
    help_text = declared.help + (f" (default: {default})" if default else _defaults(name, owners))
    info = typer.Option(
        *decls, help=help_text, rich_help_panel=declared.panel, show_default=False, metavar=_metavar(declared.value)
    )
    return Annotated[kind, info]


def option_parameters(
    classes: Collection[type], *, skip: Collection[str] = (), only: Collection[str] | None = None,
    cli_defaults: Mapping[str, str] | None = None, shown_defaults: Mapping[str, str] | None = None,
    required: Collection[str] = (),
) -> list[inspect.Parameter]:  # fmt: skip
    """One keyword parameter per declared CLI option of ``classes`` (the union, in declaration order)."""
    owners: dict[str, list[type]] = {}
    for cls in classes:
        for name, _ in declared_fields(cls, Surface.CLI):
            if name not in skip and (only is None or name in only):
                owners.setdefault(name, []).append(cls)
    cli_defaults, shown_defaults = cli_defaults or {}, shown_defaults or {}
    params = []
    for name, classes_with in owners.items():
        default = cli_defaults.get(name, ... if name in required else None)
        params.append(
            inspect.Parameter(
                name,
                inspect.Parameter.KEYWORD_ONLY,
                default=default,
                annotation=_annotation(name, classes_with, cli_defaults.get(name), shown_defaults.get(name)),
            )
        )
    return params


def config_options(
    *classes: type, skip: Collection[str] = (), only: Collection[str] | None = None,
    cli_defaults: Mapping[str, str] | None = None, shown_defaults: Mapping[str, str] | None = None,
    required: Collection[str] = (),
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:  # fmt: skip
    """Decorate a command ``fn(own options..., **options)``: its signature gains the config classes' options.

    ``cli_defaults`` are command defaults given as CLI text (e.g. ``--model deit-grc`` for ``attack``);
    ``shown_defaults`` only describe a default in the help (the value stays None: the library applies it);
    ``required`` options have none; ``only`` picks some of the classes' options.
    """

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        signature = inspect.signature(fn, eval_str=True)
        own = [
            p.replace(kind=inspect.Parameter.KEYWORD_ONLY)
            for p in signature.parameters.values()
            if p.kind is not inspect.Parameter.VAR_KEYWORD
        ]
        generated = option_parameters(
            classes, skip=skip, only=only, cli_defaults=cli_defaults, shown_defaults=shown_defaults, required=required
        )
        fn.__signature__ = signature.replace(parameters=[*generated, *own])  # type: ignore[attr-defined]
        return fn

    return decorate
