"""``import robustbench_filters`` registers the BSA/GRC DeiTs with timm, without importing timm itself.

timm costs seconds to import, and the command line (a subpackage of this package) must answer ``--help`` in a
fraction of one. So the registration waits for timm: if timm is already imported, it happens now; otherwise an
import hook runs it right after the first ``import timm``, wherever that import comes from (a user's script or
robfilt's own models). Either way, ``timm.create_model("deit_tiny_bsa_grc_patch16_224")`` works after
``import robustbench_filters``, in whichever order the two were imported.

Registering needs only names and input configs (:mod:`..core.names`); each entry point imports robfilt's builder when
it is called, so the registration never imports robfilt's model modules (which may be half-imported at that
moment: they import timm themselves).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
from types import ModuleType
from typing import Any

from ..core.names import TIMM_REGISTERED, timm_pretrained_cfg

#: timm reads a registering module's ``default_cfgs``; filled by :func:`register`
default_cfgs: dict[str, Any] = {}


def _entrypoint(arch: str, name: str, size: str) -> Any:
    def create(pretrained: bool = False, **kwargs: Any) -> Any:
        from .timm_registry import build_registered

        return build_registered(arch, name, size, pretrained, kwargs)

    create.__name__ = create.__qualname__ = arch
    create.__module__ = __name__
    create.__doc__ = f"robfilt {name} ({size}) as a timm model: takes normalised images, see pretrained_cfg."
    return create


def register() -> list[str]:
    """Register every variant with timm (idempotent); returns the names. Needs timm imported."""
    import timm
    from timm.models import generate_default_cfgs, register_model

    module = sys.modules[__name__]
    if not default_cfgs:
        default_cfgs.update(generate_default_cfgs({arch: timm_pretrained_cfg(arch) for arch in TIMM_REGISTERED}))
    for arch, (name, size) in TIMM_REGISTERED.items():
        if not hasattr(module, arch):
            setattr(module, arch, _entrypoint(arch, name, size))
        if not timm.models.is_model(arch):
            register_model(getattr(module, arch))
    return list(TIMM_REGISTERED)


class _AfterTimm(importlib.abc.Loader):
    """Runs timm's own loader, then registers robfilt's variants."""

    def __init__(self, loader: importlib.abc.Loader) -> None:
        self.loader = loader

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self.loader.exec_module(module)
        module.__loader__ = self.loader  # timm's own loader again, for tools that read resources through it
        if module.__spec__ is not None:
            module.__spec__.loader = self.loader
        register()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.loader, name)


class _TimmFinder(importlib.abc.MetaPathFinder):
    """Finds timm with the other finders and wraps its loader (once)."""

    def find_spec(
        self, name: str, path: Any, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if name != "timm":
            return None
        uninstall()
        spec = importlib.util.find_spec("timm")
        if spec is not None and spec.loader is not None:
            spec.loader = _AfterTimm(spec.loader)
        return spec


_FINDER = _TimmFinder()


def uninstall() -> None:
    if _FINDER in sys.meta_path:
        sys.meta_path.remove(_FINDER)


def install() -> None:
    """Register now if timm is loaded, else once it is."""
    if "timm" in sys.modules:
        register()
    elif _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)
