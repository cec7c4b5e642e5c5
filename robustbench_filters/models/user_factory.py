"""Factories: ``path/to/file.py:build`` or ``pkg.module:build``, a callable that returns the user's ``nn.Module``.

Both forms resolve against ``base_dir``: the working directory on the command line, the spec's folder for a spec,
so ``robfilt attack --model models.py:build`` works from the folder that holds ``models.py`` and a spec can name
a file beside it, without PYTHONPATH. A file is imported by its path (its own folder is importable while it
runs, as with ``python file.py``); a dotted module is imported with ``base_dir`` first on the search path.
Neither leaves ``sys.path`` changed. The factory receives the reference's arguments as keyword arguments and must
return an ``nn.Module`` that takes [0, 1] images (normalisation is the model's job).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import logging
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from torch import nn

from ..core.errors import RobfiltError
from ..core.io import expand_user
from .ref import ModelKind, ModelRef, is_file_module
from .user_code import describe_exception, search_path, user_code

log = logging.getLogger(__name__)

# (resolved file, mtime_ns, size) -> module: a file is executed once per process unless it changes
_FILE_MODULES: dict[tuple[str, int, int], ModuleType] = {}


def _import_file(path: Path, label: str) -> ModuleType:
    stat = path.stat()
    key = (str(path), stat.st_mtime_ns, stat.st_size)
    if key in _FILE_MODULES:
        return _FILE_MODULES[key]
    stem = re.sub(r"\W", "_", path.stem)
    name = f"robfilt_factory_{stem}_{hashlib.sha1(str(path).encode()).hexdigest()[:10]}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise RobfiltError(f"model {label}: cannot import {path} as Python; give a .py file.")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pickling look classes up by module name
    try:
        with search_path([path.parent]), user_code(label, f"importing {path.name}"):
            spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    _FILE_MODULES[key] = module
    return module


def _import_dotted(name: str, base: Path, label: str) -> ModuleType:
    with search_path([base]):
        try:
            return importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name and (name == exc.name or name.startswith(exc.name + ".")):
                raise RobfiltError(
                    f"model {label}: no module {name!r} in {base} or on sys.path; run from the folder that holds it, "
                    "or name the file: path/to/module.py:factory."
                ) from None
            raise RobfiltError(f"model {label}: importing {name} failed with {describe_exception(exc)}.") from None
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # noqa: BLE001 - the module's own code raised
            raise RobfiltError(f"model {label}: importing {name} failed with {describe_exception(exc)}.") from None


def factory_file(ref: ModelRef, base_dir: str | Path | None = None) -> Path | None:
    """The file a ``file.py:factory`` reference names, resolved against ``base_dir``; None for a dotted module."""
    module_part, _ = ref.factory_parts
    if not is_file_module(module_part):
        return None
    path = expand_user(module_part)
    return (path if path.is_absolute() else _base(base_dir) / path).resolve()


def _base(base_dir: str | Path | None) -> Path:
    return expand_user(base_dir if base_dir is not None else Path.cwd()).resolve()


def import_factory(ref: ModelRef, base_dir: str | Path | None = None) -> Any:
    """The callable a factory reference names, imported relative to ``base_dir`` (default: the working directory)."""
    if ref.kind is not ModelKind.FACTORY:
        raise ValueError(f"{ref} is not a factory reference")
    base = _base(base_dir)
    module_part, attr = ref.factory_parts
    path = factory_file(ref, base)
    if path is not None:
        if not path.is_file():
            raise RobfiltError(
                f"model {ref.label}: factory file {path} does not exist (relative paths start at {base})."
            )
        module = _import_file(path, ref.label)
        where = str(path)
    else:
        module = _import_dotted(module_part, base, ref.label)
        where = module_part
    obj: Any = module
    for part in attr.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            break
    if not callable(obj):
        names = sorted(n for n, v in vars(module).items() if callable(v) and not n.startswith("_"))[:8]
        raise RobfiltError(
            f"model {ref.label}: {where} has no callable {attr!r}"
            + (f"; it has: {', '.join(names)}." if names else ".")
        )
    return obj


def _check_signature(factory: Any, args: dict[str, Any], label: str, attr: str) -> None:
    """Refuse arguments the factory does not take, before running it (one line instead of a TypeError deep inside)."""
    try:
        sig = inspect.signature(factory)
    except (TypeError, ValueError):  # builtins and some C types have no signature: let the call decide
        return
    try:
        sig.bind(**args)
    except TypeError as exc:
        takes = ", ".join(p for p in sig.parameters if p not in ("args", "kwargs")) or "no arguments"
        raise RobfiltError(f"model {label}: {attr}() cannot take {sorted(args)} ({exc}); it takes: {takes}.") from None


def build_factory(ref: ModelRef, base_dir: str | Path | None = None) -> nn.Module:
    """Import and call a factory with the reference's arguments; the result must be an ``nn.Module``."""
    factory = import_factory(ref, base_dir)
    _, attr = ref.factory_parts
    _check_signature(factory, dict(ref.args), ref.label, attr)
    path = factory_file(ref, base_dir)
    with search_path([path.parent] if path is not None else []), user_code(ref.label, f"factory {attr}()"):
        model = factory(**ref.args)
    if not isinstance(model, nn.Module):
        raise RobfiltError(
            f"model {ref.label}: factory {attr}() returned {type(model).__name__}, not a torch nn.Module; "
            "return the model itself."
        )
    log.info("built %s with %s(%s)", ref.label, attr, ", ".join(f"{k}={v!r}" for k, v in ref.args.items()))
    return model
