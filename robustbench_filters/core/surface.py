"""Which surface a user spoke through (command line, Python, spec), so every error names options their way.

``--n-examples`` on the command line is ``n_examples`` in Python and in a spec. Code that refuses a value calls
:func:`flag` (and :func:`given` for an example of the fix) instead of writing a flag into its message, so one
rule serves all three surfaces. The CLI and the spec reader set the surface; Python is the default.

The spellings come from the option declarations (:mod:`..configs.options` registers each declared field here);
this module stays at the bottom of the package, so any module may name an option without importing configs.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from enum import Enum


class Surface(str, Enum):
    """Where a user gave an option: the command line, the Python API or a spec file."""

    CLI = "cli"
    API = "api"
    SPEC = "spec"


@dataclass(frozen=True)
class Spelling:
    """How one option is written: its CLI flag and whether it holds a list."""

    cli_flag: str
    many: bool = False


_SURFACE: ContextVar[Surface] = ContextVar("robfilt_surface", default=Surface.API)
#: option name -> spelling, for every declared option (filled by configs.options)
SPELLINGS: dict[str, Spelling] = {}


@contextlib.contextmanager
def surface(where: Surface) -> Iterator[None]:
    """Name options as ``where`` spells them in every error raised inside this block."""
    token = _SURFACE.set(where)
    try:
        yield
    finally:
        _SURFACE.reset(token)


def current_surface() -> Surface:
    return _SURFACE.get()


def flag(name: str) -> str:
    """How the current surface spells option ``name``: ``--n-examples`` on the CLI, ``n_examples`` elsewhere."""
    if current_surface() is Surface.CLI:
        known = SPELLINGS.get(name)
        return known.cli_flag if known is not None else "--" + name.replace("_", "-")
    return name


def given(name: str, example: str) -> str:
    """An example of setting option ``name`` on the current surface: ``--eps 8/255`` / ``eps=[8/255]``.

    ``example`` is written as on the command line (comma lists); Python and specs get a list where the option
    holds one.
    """
    where = current_surface()
    if where is Surface.CLI:
        return f"{flag(name)} {example}"
    known = SPELLINGS.get(name)
    items = ", ".join(p.strip() for p in example.split(","))
    value = f"[{items}]" if known is not None and known.many else items
    return f"{name} = {value}" if where is Surface.SPEC else f"{name}={value}"


def switched(name: str, on: bool = True) -> str:
    """Setting boolean option ``name`` on the current surface: ``--gap`` / ``--no-gap``, ``gap=True``, ``gap = true``.

    ``on=False`` on the command line spells ``--no-<flag>``, which only negatable options have (``--no-bounds``);
    for the others a message says to leave the flag out instead (see ``lipschitz.constants.empirical_only``).
    """
    where = current_surface()
    if where is Surface.CLI:
        spelled = flag(name)
        return spelled if on else "--no-" + spelled.removeprefix("--")
    return f"{name} = {str(on).lower()}" if where is Surface.SPEC else f"{name}={on}"
