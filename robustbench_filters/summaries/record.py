"""Typed JSON records: a dataclass that reads one JSON object and writes it back key for key.

A run's ``summary.json`` is hashed into its manifest, so a typed summary must write the very bytes the writer
produced: :meth:`Record.to_dict` emits the fields in declaration order (the order the writers use) and leaves out
the optional ones that were absent (:data:`ABSENT`, not ``None``: ``"mce": null`` is a value). Values pass through
unchanged (an ``int`` stays an ``int``, a dict keeps its key order), so ``from_dict(d).to_dict() == d`` with the
same key order for every summary robfilt writes.

Reading is strict, because a free dict turns a renamed key into a silent ``None``: a key the record does not
declare and a required key that is missing are both refused in one line naming where in the document they are.
Nested records, lists and dicts of records are converted by the field's annotation; anything else (numbers,
strings, opaque tables such as a run's recorded attention maps) is kept as written.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from typing import Any, ClassVar, Self

from ..core.errors import RobfiltError


class _Absent:
    """The value of an optional field whose key the document does not have (written documents omit it)."""

    _instance: ClassVar[_Absent | None] = None

    def __new__(cls) -> _Absent:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __bool__(self) -> bool:
        return False

    def __repr__(self) -> str:
        return "ABSENT"


ABSENT: Any = _Absent()


def optional(key: str | None = None) -> Any:
    """A field whose key older (or other) writers leave out; :data:`ABSENT` when the document lacks it."""
    return dataclasses.field(default=ABSENT, metadata={"key": key} if key else {})


def renamed(key: str) -> Any:
    """A required field whose JSON key is not a Python name (``"pass"``)."""
    return dataclasses.field(metadata={"key": key})


def present(value: Any, default: Any = None) -> Any:
    """``value``, or ``default`` when the document did not have it."""
    return default if value is ABSENT else value


@dataclasses.dataclass(frozen=True)
class _Field:
    name: str
    key: str
    optional: bool
    hint: Any


class Record:
    """Base of the typed records; subclasses are ``@dataclass(kw_only=True)`` with fields in document order."""

    @classmethod
    @functools.cache
    def _fields(cls) -> tuple[_Field, ...]:
        hints = typing.get_type_hints(cls)
        return tuple(
            _Field(f.name, f.metadata.get("key") or f.name, f.default is ABSENT, hints[f.name])
            for f in dataclasses.fields(cls)  # type: ignore[arg-type]
        )

    @classmethod
    def from_dict(cls, data: Any, where: str, path: str = "") -> Self:
        """Read ``data`` (a JSON object). Errors name ``where`` (the document, e.g. ``summary.json of run folder
        runs/a``) and ``path`` (this object's place in it, e.g. ``models.deit.clean``)."""
        at = f"{where} at {path}" if path else where
        if not isinstance(data, dict):
            raise RobfiltError(f"{at} is not a JSON object; re-run the command that wrote it.")
        fields = cls._fields()
        known = {f.key for f in fields}
        unknown = [k for k in data if k not in known]
        if unknown:
            raise RobfiltError(
                f"{at} has key {unknown[0]!r}, unknown to this robfilt (written by a newer one?): upgrade robfilt "
                "or re-run it."
            )
        values: dict[str, Any] = {}
        for f in fields:
            if f.key in data:
                values[f.name] = _read(f.hint, data[f.key], where, f"{path}.{f.key}" if path else f.key)
            elif not f.optional:
                raise RobfiltError(f"{at} lacks {f.key!r} (written by another robfilt?); re-run it with this one.")
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        """The JSON object, key for key as it was read (or as the writer laid it out)."""
        out: dict[str, Any] = {}
        for f in self._fields():
            value = getattr(self, f.name)
            if value is not ABSENT:
                out[f.key] = _write(value)
        return out


def _read(hint: Any, value: Any, where: str, path: str) -> Any:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        members = [a for a in args if a is not type(None) and a is not _Absent]
        return _read(members[0], value, where, path) if len(members) == 1 else value
    if isinstance(hint, type) and issubclass(hint, Record):
        return hint.from_dict(value, where, path)
    if origin is list and args and _structured(args[0]):
        if not isinstance(value, list):
            raise RobfiltError(f"{where} at {path} is not a JSON list; re-run the command that wrote it.")
        return [_read(args[0], v, where, f"{path}[{i}]") for i, v in enumerate(value)]
    if origin is dict and len(args) == 2 and _structured(args[1]):
        if not isinstance(value, dict):
            raise RobfiltError(f"{where} at {path} is not a JSON object; re-run the command that wrote it.")
        return {k: _read(args[1], v, where, f"{path}.{k}") for k, v in value.items()}
    return value


def _structured(hint: Any) -> bool:
    """Does a value of this annotation hold records (so it must be converted, not kept as written)?"""
    if isinstance(hint, type) and issubclass(hint, Record):
        return True
    return any(_structured(a) for a in typing.get_args(hint))


def _write(value: Any) -> Any:
    if isinstance(value, Record):
        return value.to_dict()
    if isinstance(value, list):
        return [_write(v) for v in value]
    if isinstance(value, dict):
        return {k: _write(v) for k, v in value.items()}
    return value


__all__ = ["ABSENT", "Record", "optional", "present", "renamed"]
