"""Every user option, declared once: on the config field that holds it.

A field's declaration (:func:`option`) carries its flag, its help text and how its values are read; the run kinds it
applies to are the config classes that have the field. From that one declaration come the typer options of
``robfilt attack/certify/lipschitz/train`` (:mod:`robustbench_filters.cli._options`), the keyword arguments of
:func:`~robustbench_filters.api.evaluate.evaluate`, :func:`~robustbench_filters.api.evaluate.certify`,
:func:`~robustbench_filters.api.benchmark.benchmark` and ``estimate_lipschitz``, and the keys of a spec section.
So an option cannot exist on one surface and be missing on another, and its name cannot drift.

Values arrive in three forms, one reader each (:class:`Value`): text on the command line (``--eps 0.01,8/255``),
TOML values in a spec (``eps = [0.01, "8/255"]``) and Python values in the API (``eps=[0.01, 8/255]``). Readers
only convert; the rules (ranges, repeats, what fits what) live once, in the config's ``__post_init__``.

Error messages name an option the way the caller spelt it: ``--n-examples`` on the command line, ``n_examples`` in
Python and in specs (:mod:`robustbench_filters.core.surface`).
"""

from __future__ import annotations

import dataclasses
import math
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ..core.errors import RobfiltError
from ..core.parsing import parse_list, parse_number
from ..core.surface import SPELLINGS, Spelling, Surface, flag, surface


def is_module(obj: Any) -> bool:
    """True for a torch ``nn.Module``, without importing torch (no module exists before torch is imported)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(obj, torch.nn.Module)


# ---------------------------------------------------------------------------------------------------- values
class Value:
    """How one option's values are read from each surface (conversion only; the config checks the rules)."""

    #: the typer type of the CLI option (lists and fractions arrive as text and are read by ``from_text``)
    cli_type: type = str
    #: a spec value that names a file or folder (resolved from the spec's folder, kept inside the project)
    path: bool = False
    many: bool = False

    def from_text(self, text: Any, name: str) -> Any:
        return text

    def from_toml(self, value: Any, name: str) -> Any:
        return self.from_python(value, name)

    def from_python(self, value: Any, name: str) -> Any:
        return value

    def item_from_text(self, text: str, name: str) -> Any:
        """One comma-separated item of a list option, as text."""
        return self.from_python(text, name)


def _bad(name: str, wanted: str, got: Any) -> RobfiltError:
    return RobfiltError(f"{flag(name)} must be {wanted}, got {got!r}.")


def plain(value: Any) -> Any:
    """A numpy or torch scalar (``np.float32(0.02)``, a 0-d array or tensor) as the Python value it holds, and a
    numpy array or torch tensor of values as a list: Python callers hold their numbers in these as often as in
    floats, and every reader below then judges the value itself, not its container.

    A value of a narrower float type is read as the shortest decimal that rounds to it in that type
    (``np.float32(0.01)`` is 0.01, not 0.009999999776): the caller wrote 0.01, and ``eps=np.float32(0.01)`` must be
    the same run as ``eps=0.01``."""
    if isinstance(value, str | bytes | bool | int | float) or value is None:
        return value
    module = type(value).__module__.split(".")[0]
    if module not in ("numpy", "torch") or not hasattr(value, "tolist"):
        return value
    import numpy as np

    array = np.asarray(value.detach().cpu() if module == "torch" else value)
    if array.dtype.kind == "f" and array.dtype.itemsize < 8:
        shortest = [float(np.format_float_scientific(v, unique=True)) for v in array.reshape(-1)]
        return shortest[0] if array.ndim == 0 else np.asarray(shortest).reshape(array.shape).tolist()
    return array.tolist()


class Text(Value):
    def __init__(self, path: bool = False) -> None:
        self.path = path

    def from_python(self, value: Any, name: str) -> Any:
        if self.path and isinstance(value, os.PathLike):
            return os.fspath(value)
        if not isinstance(value, str):
            raise _bad(name, "a string", value)
        return value


class Int(Value):
    cli_type = int

    def from_text(self, text: Any, name: str) -> Any:
        return text  # typer has already read an int

    def item_from_text(self, text: str, name: str) -> Any:
        return _int_text(text, name)

    def from_python(self, value: Any, name: str) -> Any:
        value = plain(value)
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer():
                return int(value)
            raise _bad(name, "an integer", value)
        return value


class Number(Value):
    """A number; text and specs may write fractions (``8/255``), so an eps is never on the wrong scale."""

    def from_text(self, text: Any, name: str) -> Any:
        return parse_number(text, flag(name))

    def from_python(self, value: Any, name: str) -> Any:
        value = plain(value)
        if isinstance(value, str):
            return parse_number(value, flag(name))
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise _bad(name, "a number", value)
        if not math.isfinite(value):
            raise _bad(name, "a finite number", value)
        return float(value)


class Bool(Value):
    cli_type = bool

    def from_python(self, value: Any, name: str) -> Any:
        value = plain(value)
        if not isinstance(value, bool):
            raise _bad(name, "true or false", value)
        return value


class Many(Value):
    """A list: comma-separated on the command line, a TOML array (or one value) in specs, any sequence in Python."""

    many = True

    def __init__(self, item: Value, split: Callable[[str], list[str]] | None = None) -> None:
        self.item, self.split = item, split

    def from_text(self, text: Any, name: str) -> Any:
        parts = self.split(str(text)) if self.split else parse_list(str(text), str, flag(name))
        return tuple(self.item.item_from_text(p, name) for p in parts)

    def from_python(self, value: Any, name: str) -> Any:
        value = plain(value)
        if isinstance(value, str | int | float) and not isinstance(value, bool):
            value = [value]
        if isinstance(value, Mapping) or not isinstance(value, Sequence | set | frozenset | tuple):
            try:
                value = list(value)
            except TypeError:
                raise _bad(name, "a list", value) from None
        return tuple(self.item.from_python(v, name) for v in value)


def _int_text(text: str, name: str) -> int:
    value = parse_number(text, flag(name))
    if value != int(value):
        raise RobfiltError(f"{flag(name)} {value:g} is not a whole number; give integers like 1,3,5.")
    return int(value)


class Pairs(Value):
    """``key=value`` pairs: a repeatable CLI option, a TOML table or array of strings, a dict or list in Python."""

    cli_type = list
    many = True

    def from_text(self, text: Any, name: str) -> Any:
        return tuple(str(t) for t in text)

    def from_python(self, value: Any, name: str) -> Any:
        if isinstance(value, Mapping):
            from ..models.ref import format_value

            return tuple(f"{k}={format_value(v)}" for k, v in value.items())
        if isinstance(value, str):
            return (value,)
        if not isinstance(value, Sequence) or not all(isinstance(v, str) for v in value):
            raise _bad(name, "key=value strings or a dict", value)
        return tuple(value)


class Paths(Value):
    """Files or folders, one per use of a repeatable option (``--run A --run B``), or a list in Python."""

    cli_type = list
    many = True
    path = True

    def from_text(self, text: Any, name: str) -> Any:
        return tuple(str(t) for t in text)

    def from_python(self, value: Any, name: str) -> Any:
        items = [value] if isinstance(value, str | os.PathLike) else value
        if not isinstance(items, Sequence) or not all(isinstance(v, str | os.PathLike) for v in items):
            raise _bad(name, "paths", value)
        return tuple(os.fspath(v) for v in items)


class Models(Value):
    """Model references (and, in Python, modules): commas inside brackets or quotes belong to one reference."""

    many = True

    def from_text(self, text: Any, name: str) -> Any:
        from ..models.ref import split_model_list

        return tuple(split_model_list(str(text)))

    def from_toml(self, value: Any, name: str) -> Any:
        items = [value] if isinstance(value, str) else value
        if not isinstance(items, list) or not items or not all(isinstance(v, str) and v for v in items):
            raise _bad(name, "a name or a non-empty list of names", value)
        return tuple(items)

    def from_python(self, value: Any, name: str) -> Any:
        """One model or a list of them; anything that is not a module or a reference is refused by the config,
        which names its position (``models[1] is a function ...``)."""
        if isinstance(value, list | tuple):
            return tuple(value)
        return (value,)


class Data(Text):
    """A data spec (``fashion-mnist``, ``imagefolder:DIR``, ...); in Python also in-memory data (an ``(x, y)`` pair,
    a torch Dataset), which the run config checks."""

    def __init__(self) -> None:
        super().__init__(path=True)

    def from_toml(self, value: Any, name: str) -> Any:
        return Text.from_python(self, value, name)

    def from_python(self, value: Any, name: str) -> Any:
        return value


class Tokenizer(Text):
    """A tokenizer: a name (``char``, ``bpe``) or a tokenizer folder as text; in Python, a tokenizer object too."""

    def __init__(self) -> None:
        super().__init__(path=True)

    def from_python(self, value: Any, name: str) -> Any:
        return value


class Anything(Value):
    """A Python object (a tensor, a tokenizer): the API only, it has no text form."""


# ---------------------------------------------------------------------------------------------------- options
@dataclass(frozen=True)
class Option:
    """How a config field is offered to users. ``name`` is the field's name (filled in when the class is made)."""

    help: str
    value: Value
    flag: str | None = None
    short: str | None = None
    #: the CLI spelling of a boolean that defaults to true: ``--bounds/--no-bounds``
    negatable: bool = False
    #: surfaces that do not offer the option, each with the reason (the parity test reads these)
    not_on: Mapping[Surface, str] = field(default_factory=dict)
    panel: str = "Run"
    #: in Python, None is a value (``n_examples=None``: every example) rather than "use the default"
    none_is_value: bool = False
    #: the kinds of model the option means something for (empty: every kind the config serves); an option given for
    #: another kind is refused by its owner, never silently ignored (training: :class:`~..train.recipe.Trainee`)
    kinds: tuple[str, ...] = ()
    name: str = ""

    @property
    def cli_flag(self) -> str:
        return self.flag or "--" + self.name.replace("_", "-")

    def on(self, where: Surface) -> bool:
        return where not in self.not_on


#: name -> declaration, for every declared field of every config class (one name, one meaning)
REGISTRY: dict[str, Option] = {}
METADATA_KEY = "robfilt_option"


def option(
    default: Any = dataclasses.MISSING, *, help: str, value: Value | None = None, compare: bool = True, **kwargs: Any
) -> Any:
    """A dataclass field with its user-facing declaration (see :class:`Option` for ``kwargs``)."""
    declared = Option(help=help, value=value or Text(), **kwargs)
    if isinstance(default, list | dict | set):
        raise TypeError("use a tuple or a frozen mapping as an option default")
    return field(default=default, compare=compare, metadata={METADATA_KEY: declared})


def internal(default: Any = dataclasses.MISSING, *, reason: str, compare: bool = True) -> Any:
    """A config field no user sets directly, and why (the parity test reads the reason)."""
    return field(default=default, compare=compare, metadata={"robfilt_internal": reason})


def derived(reason: str = "computed from the options when the config is made") -> Any:
    """A config field the config sets itself from its options, once, in ``__post_init__`` (never passed in)."""
    return field(default=(), init=False, compare=False, repr=False, metadata={"robfilt_internal": reason})


def cli_only(default: Any, *, help: str, why: str, value: Value | None = None, **kwargs: Any) -> Any:
    """An option of a command's own call (``robfilt check``, ``study``, ``report``): on the command line only;
    Python has the function itself and a spec cannot name one (``why`` says which)."""
    return option(default, help=help, value=value, not_on={Surface.SPEC: why, Surface.API: why}, **kwargs)


def api_only(default: Any = None, *, help: str, why: str, value: Value | None = None) -> Any:
    """A field only Python callers can give (an object with no text form), e.g. tensors or a tokenizer object."""
    declared = Option(help=help, value=value or Anything(), not_on={Surface.CLI: why, Surface.SPEC: why})
    return field(default=default, compare=False, metadata={METADATA_KEY: declared})


class Declared:
    """Mixin of every config class: collects the declarations of its fields when the class is made.

    A field's declaration is the nearest one in the class's MRO; a field a class repeats only to change its default
    keeps the declaration of the class that declared it, and a field of the same name declared by an unrelated
    class (``text_column`` of LM attacks and of Lipschitz runs) shares that declaration. Two classes may declare
    the same name with their own help (``steps`` of an attack and of a training recipe) but never with another flag
    or value kind: one name, one spelling, everywhere.
    """

    _declared: ClassVar[dict[str, Option]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        own: dict[str, Option] = {}
        for name, value in list(vars(cls).items()):
            declared = (
                getattr(value, "metadata", {}).get(METADATA_KEY) if isinstance(value, dataclasses.Field) else None
            )
            if declared is None:
                continue
            declared = dataclasses.replace(declared, name=name)
            known = REGISTRY.get(name)
            if known is not None and (known.cli_flag, type(known.value)) != (declared.cli_flag, type(declared.value)):
                raise TypeError(f"option {name!r} is declared twice with different flags or value kinds")
            REGISTRY.setdefault(name, declared)
            SPELLINGS.setdefault(name, Spelling(declared.cli_flag, declared.value.many))
            own[name] = declared
        cls._declared = own


def declaration(cls: type, name: str) -> Option | None:
    """The declaration of ``cls``'s field ``name`` (None when the field is not a user option)."""
    if not any(f.name == name for f in dataclasses.fields(cls)) or internal_reason(cls, name) is not None:
        return None
    for klass in cls.__mro__:
        declared = vars(klass).get("_declared", {}).get(name)
        if declared is not None:
            return declared
    return REGISTRY.get(name)


def internal_reason(cls: type, name: str) -> str | None:
    for f in dataclasses.fields(cls):
        if f.name == name:
            return f.metadata.get("robfilt_internal")
    return None


def declared_fields(cls: type, where: Surface) -> list[tuple[str, Option]]:
    """``cls``'s options offered on ``where``, in declaration order."""
    out = []
    for f in dataclasses.fields(cls):
        declared = declaration(cls, f.name)
        if declared is not None and declared.on(where):
            out.append((f.name, declared))
    return out


def read(values: Mapping[str, Any], where: Surface) -> dict[str, Any]:
    """Convert user values from ``where`` (text, TOML or Python) to config values.

    None means "not given" (the kind's default applies), except for options whose None is a value of its own in
    Python (``n_examples=None``: every example).
    """
    out: dict[str, Any] = {}
    with surface(where):
        for name, raw in values.items():
            declared = REGISTRY.get(name)
            if raw is None:
                if where is Surface.API and declared is not None and declared.none_is_value:
                    out[name] = None
                continue
            if declared is None:
                out[name] = raw
                continue
            reader = {
                Surface.CLI: declared.value.from_text,
                Surface.SPEC: declared.value.from_toml,
                Surface.API: declared.value.from_python,
            }[where]
            out[name] = reader(raw, name)
    return out


def api_signature(fn: Callable[..., Any], *classes: type, skip: Sequence[str] = ()) -> Callable[..., Any]:
    """Give ``fn(explicit..., **options)`` a signature that lists the options of ``classes`` as keywords (with the
    first class's default), so ``help()``, IDEs and the parity test see every keyword the API accepts."""
    import inspect

    signature = inspect.signature(fn)
    explicit = [p for p in signature.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
    taken = {p.name for p in explicit} | set(skip)
    extra: dict[str, inspect.Parameter] = {}
    for cls in classes:
        for f in dataclasses.fields(cls):
            declared = REGISTRY.get(f.name)
            if f.name in taken or f.name in extra or declared is None or not declared.on(Surface.API):
                continue
            default = None if f.default is dataclasses.MISSING else f.default
            extra[f.name] = inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=default)
    fn.__signature__ = signature.replace(parameters=[*explicit, *extra.values()])  # type: ignore[attr-defined]
    return fn
