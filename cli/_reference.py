"""The command-line reference (docs/cli.md), generated from the commands themselves.

Every option's flag, value, default and help come from the same click objects that ``robfilt <command> --help``
prints, so the reference cannot drift from the program: ``python -m robustbench_filters.cli._reference`` rewrites
it, and ``tests/test_docs.py`` fails when the committed file is stale.
"""

from __future__ import annotations

import inspect
import sys
from pathlib import Path
from typing import Any

import typer

HEADER = """# Command-line reference

Generated from the commands' own help by `python -m robustbench_filters.cli._reference` (a test fails when this
file is stale). Every command also prints this with `robfilt <command> --help`. Options of run commands are the run
configs' options: the same names are keywords of the Python API (`--n-examples` is `n_examples=`) and keys of
spec sections.
"""


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _value(param: Any, ctx: Any) -> str:
    if getattr(param, "is_flag", False):
        return ""
    shown = getattr(param, "display_type", "")  # what --help prints, e.g. <path>; a method in typer >= 0.25
    shown = shown(ctx) if callable(shown) else shown
    metavar = param.metavar or str(shown or "").strip("<>").upper()
    if metavar.startswith("LIST[") and metavar.endswith("]"):  # a repeatable value: PATH...
        metavar = f"{metavar[5:-1]}..."
    return f"`{metavar}`" if metavar else ""


def _flags(param: Any) -> str:
    names = [*param.opts, *param.secondary_opts]
    return " / ".join(f"`{n}`" for n in names)


def _command(name: str, command: Any) -> list[str]:
    lines = [f"## robfilt {name}", ""]
    doc = inspect.cleandoc(command.help or "")
    if doc:
        lines += [doc, ""]
    ctx = typer.Context(command)
    panels: dict[str, list[Any]] = {}
    for param in command.params:
        if param.name == "help" or not getattr(param, "opts", None):
            continue
        panel = getattr(param, "rich_help_panel", None) or "Options"
        panels.setdefault(panel, []).append(param)
    for panel, params in panels.items():
        lines += [f"**{panel}**", "", "| option | value | what |", "|---|---|---|"]
        for p in params:
            required = " (required)" if p.required else ""
            lines.append(f"| {_flags(p)} | {_value(p, ctx)} | {_cell(p.help or '')}{required} |")
        lines.append("")
    return lines


def render() -> str:
    """The whole reference, as Markdown."""
    from . import app

    group = typer.main.get_command(app)
    lines = [HEADER]
    for name in group.list_commands(None):  # type: ignore[arg-type]
        command = group.get_command(None, name)  # type: ignore[arg-type]
        subcommands = getattr(command, "commands", None)
        if subcommands:
            for sub in subcommands:
                lines += _command(f"{name} {sub}", subcommands[sub])
        else:
            lines += _command(name, command)
    return "\n".join(lines).rstrip() + "\n"


def main() -> None:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[1] / "docs" / "cli.md"
    out.write_text(render(), encoding="utf-8")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
