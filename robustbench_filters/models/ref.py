"""Model references: one string syntax for every kind of model, with typed arguments.

    [name=]target[?key=value&key=value...]

``target`` is a registry name (``deit-grc``), ``timm:<arch>`` (any timm model, e.g. ``timm:resnet18``), ``hf:<folder>``
(a Hugging Face causal LM saved with ``save_pretrained``, or a hub id already in the local Hugging Face cache), or a
factory: ``path/to/file.py:build`` or ``pkg.module:build``. Arguments go to the model's builder: registry config
fields (``grc_lambda=0``, ``size=tiny``), timm's ``create_model`` keywords (``num_classes=10&in_chans=1``) plus
robfilt's ``mean``/``std``/``crop_pct``/``interpolation``, BSA/GRC conversion settings for ``hf:`` models
(``variant=grc&grc_lambda=0.1``, see :mod:`robustbench_filters.models.hf.convert`), or the factory's keyword arguments. ``name=`` sets the
label shown in tables (``mynet=models.py:build``).

Values are typed: ``10`` is an int, ``0.5`` and ``8/255`` are floats, ``true``/``false`` bools, ``none`` None,
``[0.5,0.5,0.5]`` a tuple, ``"10"`` (quoted) or anything else a string. ``--model-arg key=value`` pairs use the
same value syntax (:func:`parse_model_args`) and override the reference's own arguments (:func:`apply_model_args`).
In a shell, quote a reference with arguments: ``--model 'timm:resnet18?num_classes=10&in_chans=1'``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

from ..core.errors import RobfiltError
from ..core.io import expand_user
from ..core.parsing import parse_number
from ..core.surface import flag

TIMM_PREFIX = "timm:"
HF_PREFIX = "hf:"
_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_LABEL = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]*$")
_INT = re.compile(r"^[+-]?\d+$")
_DOTTED = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")
_FRACTION = re.compile(r"^[+-]?\d+(\.\d*)?\s*/\s*\d+(\.\d*)?$")
SYNTAX = (
    "[name=]target[?key=value&...], target: a registry name, timm:<arch>, hf:<folder or cached hub id>, "
    "file.py:factory or pkg.mod:factory"
)


class ModelKind(str, Enum):
    REGISTRY = "registry"
    TIMM = "timm"
    HF = "hf"
    FACTORY = "factory"


@dataclass(frozen=True)
class ModelRef:
    """A parsed model reference: what to build (``kind``, ``target``), with which ``args``, shown as ``label``.

    ``target``: the registry name, the timm architecture (without ``timm:``), the Hugging Face folder or hub id
    (without ``hf:``), or ``module_or_file:callable``.
    ``args``: builder arguments with typed values, in the order given. ``str(ref)`` gives the reference back.
    """

    kind: ModelKind
    target: str
    args: Mapping[str, Any] = field(default_factory=dict)
    name: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", ModelKind(self.kind))
        object.__setattr__(self, "args", dict(self.args))
        for key in self.args:
            _check_key(key, str(self.target))
        if self.name is not None and not _LABEL.match(self.name):
            raise RobfiltError(f"model name {self.name!r} must be letters, digits, '_', '-' or '.'; e.g. mynet=...")

    def __hash__(self) -> int:
        return hash(str(self))

    def __str__(self) -> str:
        return (f"{self.name}=" if self.name else "") + self.spec

    @property
    def spec(self) -> str:
        """The reference without the display name (what identifies the model)."""
        prefix = {ModelKind.TIMM: TIMM_PREFIX, ModelKind.HF: HF_PREFIX}.get(self.kind, "")
        head = prefix + self.target
        if not self.args:
            return head
        return head + "?" + "&".join(f"{k}={format_value(v)}" for k, v in self.args.items())

    @property
    def label(self) -> str:
        """The name shown in rows and tables: the given name, else the reference itself."""
        return self.name or self.spec

    @property
    def factory_parts(self) -> tuple[str, str]:
        """(module name or file path, callable name) of a factory reference."""
        module, _, attr = self.target.rpartition(":")
        return module, attr

    def with_args(self, args: Mapping[str, Any] | None = None, **more: Any) -> ModelRef:
        """A copy whose args are these args updated with ``args`` and ``more`` (later values win)."""
        merged = {**self.args, **(args or {}), **more}
        return ModelRef(self.kind, self.target, merged, self.name)


def _check_key(key: str, where: str) -> None:
    if not isinstance(key, str) or not _KEY.match(key):
        raise RobfiltError(
            f"bad model argument name {key!r} for {where}; names are Python identifiers like num_classes."
        )


# ------------------------------------------------------------------------------------------------ values
def parse_value(text: str) -> Any:
    """Typed value of one argument: int, float (also ``8/255``), bool, None, tuple ``[a,b]`` or string."""
    s = text.strip()
    if len(s) >= 2 and s[0] == s[-1] and s[0] in "\"'":
        return s[1:-1]
    if s.startswith("[") or s.endswith("]"):
        if not (s.startswith("[") and s.endswith("]")):
            raise RobfiltError(f"unbalanced brackets in model argument value {text!r}; write lists as [a,b,c].")
        inner = s[1:-1].strip()
        if not inner:
            return ()
        items = _split_top(inner, ",")
        if any(not i.strip() for i in items):
            raise RobfiltError(f"empty item in model argument value {text!r}; write lists as [a,b,c].")
        return tuple(parse_value(i) for i in items)
    low = s.lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("none", "null"):
        return None
    if _INT.match(s):
        return int(s)
    if _FRACTION.match(s):
        return parse_number(s, "model argument")
    try:
        value = float(s)
    except ValueError:
        return s
    if low in ("nan", "inf", "-inf", "+inf", "infinity", "-infinity"):
        raise RobfiltError(f"model argument value {text!r} is not finite; give a finite number.")
    return value


def format_value(value: Any) -> str:
    """The reference syntax of a value (``parse_value(format_value(v)) == v``)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "none"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, tuple | list):
        return "[" + ",".join(format_value(v) for v in value) + "]"
    s = str(value)
    if parse_value(s) == s and not any(c in s for c in "&,=?[]\"' ") and s:
        return s
    return f"'{s}'" if '"' in s else f'"{s}"'


def _split_top(text: str, sep: str) -> list[str]:
    """Split on ``sep`` outside quotes and brackets."""
    parts, depth, quote, cur = [], 0, "", []
    for ch in text:
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "\"'":
            quote = ch
        elif ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        elif ch == sep and depth == 0:
            parts.append("".join(cur))
            cur = []
            continue
        cur.append(ch)
    if quote or depth:
        raise RobfiltError(f"unbalanced quotes or brackets in {text!r}.")
    parts.append("".join(cur))
    return parts


def _parse_pair(item: str, where: str) -> tuple[str, Any]:
    key, eq, value = item.partition("=")
    key = key.strip()
    if not eq or not key:
        raise RobfiltError(f"model argument {item!r} for {where} is not key=value; e.g. num_classes=10.")
    _check_key(key, where)
    if not value.strip():
        raise RobfiltError(f"model argument {key!r} for {where} has no value; e.g. {key}=10.")
    return key, parse_value(value)


def parse_model_args(items: Iterable[str]) -> dict[str, Any]:
    """``["num_classes=10", "mean=[0.5]"]`` (repeated ``--model-arg``) -> ``{"num_classes": 10, "mean": (0.5,)}``."""
    out: dict[str, Any] = {}
    for item in items:
        key, value = _parse_pair(str(item), "--model-arg")
        if key in out:
            raise RobfiltError(f"{flag('model_args')} {key} is given twice; give each argument once.")
        out[key] = value
    return out


# -------------------------------------------------------------------------------------------- references
def parse_model_ref(text: str | ModelRef) -> ModelRef:
    """Parse ``[name=]target[?key=value&...]`` into a :class:`ModelRef` (syntax only: nothing is imported)."""
    if isinstance(text, ModelRef):
        return text
    s = str(text).strip()
    if not s:
        raise RobfiltError(f"empty model reference; give {SYNTAX}.")
    name = None
    head = re.match(r"^([^=:?/\\]+)=(.+)$", s)
    if head and "?" not in head.group(1):
        name, s = head.group(1).strip(), head.group(2).strip()
    target, q, query = s.partition("?")
    target = target.strip()
    if q and not query.strip():
        raise RobfiltError(f"model reference {text!r} ends with '?' but has no arguments; e.g. ?num_classes=10.")
    args: dict[str, Any] = {}
    if query.strip():
        for item in _split_top(query, "&"):
            key, value = _parse_pair(item, target)
            if key in args:
                raise RobfiltError(f"model argument {key!r} is given twice in {text!r}; give it once.")
            args[key] = value
    if target.startswith(TIMM_PREFIX):
        arch = target[len(TIMM_PREFIX) :].strip()
        if not arch or not re.match(r"^[\w.\-]+$", arch):
            raise RobfiltError(f"bad timm model {arch!r} in {text!r}; write timm:<arch>, e.g. timm:resnet18.")
        return ModelRef(ModelKind.TIMM, arch, args, name)
    if target.startswith(HF_PREFIX):
        where = target[len(HF_PREFIX) :].strip()
        if not where:
            raise RobfiltError(f"hf: reference {text!r} has no folder; write hf:<folder> or hf:<org>/<name>.")
        return ModelRef(ModelKind.HF, where, args, name)
    if ":" in target:
        module, _, attr = target.rpartition(":")
        module, attr = module.strip(), attr.strip()
        if not module or not _DOTTED.match(attr):
            raise RobfiltError(f"bad factory {target!r}; write path/to/file.py:build or pkg.module:build.")
        if not is_file_module(module) and not _DOTTED.match(module):
            raise RobfiltError(
                f"bad factory module {module!r}; give a file (models.py:build) or a dotted module (pkg.mod:build)."
            )
        return ModelRef(ModelKind.FACTORY, f"{module}:{attr}", args, name)
    if not target:
        raise RobfiltError(f"model reference {text!r} has no target; give {SYNTAX}.")
    return ModelRef(ModelKind.REGISTRY, target, args, name)


def is_file_module(module: str) -> bool:
    """A factory module given as a file path (``models.py``, ``sub/dir/models.py``), not a dotted name."""
    return module.endswith(".py") or "/" in module or "\\" in module


def apply_model_args(ref: str | ModelRef, args: Mapping[str, Any] | None) -> ModelRef:
    """``ref`` with ``args`` (e.g. from :func:`parse_model_args`) merged in; ``args`` win over the reference's."""
    ref = parse_model_ref(ref)
    return ref.with_args(args) if args else ref


def split_model_list(text: str) -> list[str]:
    """``'deit,timm:resnet18?mean=[0.5,0.5,0.5]'`` -> the two references (commas inside ``[]`` or quotes stay)."""
    parts = [p.strip() for p in _split_top(str(text), ",")]
    if not str(text).strip() or any(not p for p in parts):
        raise RobfiltError(f"--model {text!r} has an empty item; give a comma-separated list like 'deit,deit-grc'.")
    return parts


def model_kind(ref: str | ModelRef, base_dir: str | Path | None = None) -> str:
    """Check a reference without importing anything heavy; returns ``image``, ``lm``, ``timm`` or ``custom``
    (``hf:`` references are ``lm``).

    Registry names are checked against the vocabulary (with suggestions) and a factory's ``.py`` file must exist,
    so run configs refuse a bad name or file before the heavy imports (a relative file from ``base_dir`` too: a spec's
    folder). A timm architecture needs timm itself
    (loading checks it: :func:`.timm_models.check_timm_arch`); a factory's callable is checked when the model is
    loaded (that runs the user's code).
    """
    from ..core.names import HF_INSTALL, architecture, parse_name

    mref = parse_model_ref(ref)
    if mref.kind is ModelKind.TIMM:
        return "timm"
    if mref.kind is ModelKind.FACTORY:
        module, _ = mref.factory_parts
        path = expand_user(module)
        if is_file_module(module) and not (
            path.is_file() or (base_dir is not None and (Path(base_dir) / path).is_file())
        ):
            raise RobfiltError(
                f"model file {module!r} does not exist; give a path to a .py file, e.g. models.py:build."
            )
        return "custom"
    if mref.kind is ModelKind.HF:
        import importlib.util

        if importlib.util.find_spec("transformers") is None:
            raise RobfiltError(f"hf: models need the Hugging Face extra (transformers); run {HF_INSTALL}.")
        return "lm"
    if (expand_user(mref.target) / "config.json").is_file():
        raise RobfiltError(f"{mref.target} is a Hugging Face model folder; write --model hf:{mref.target}.")
    family, _, _ = parse_name(architecture(mref.target))
    return family.value
