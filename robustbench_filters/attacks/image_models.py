"""What every measurement over image models shares: loading the models, opening the test images the way the
first model expects them, selecting the seeded examples and refusing a model that does not fit the data.

The image attack, corruption and randomized-smoothing measurements all start here, so a model, a data set or a
selection is checked and fingerprinted the same way whichever command measures it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import torch
from torch import nn

from ..checks.logits import require_logits
from ..checks.model import model_device, require_input_dependence, require_model_device
from ..configs import ImageAttackConfig, data_label
from ..configs.options import is_module
from ..core.errors import RobfiltError
from ..core.surface import flag
from ..data.labels import check_labels_fit, pool_labels
from ..models.loading import LoadedModel, Loading, load_model
from ..runs.measurement import Measurement, PrepareContext
from ..runs.units import Unit, batch_slices, ids_digest


def load_image_models(config: Any) -> list[LoadedModel]:
    """The config's models, loaded for evaluation (registry names, ``timm:``, factories, or modules as given)."""
    how = Loading.of(config)
    return [
        LoadedModel.given(m, label) if is_module(m) else load_model(m, how)
        for m, label in zip(config.refs, config.labels, strict=True)
    ]


def open_images(config: Any, models: list[LoadedModel]) -> Any:
    """The config's test images, prepared the way the first model expects (resize, crop, channels)."""
    from ..data.sources import open_image_source

    columns = {k: v for k, v in (("image_column", config.image_column), ("label_column", config.label_column)) if v}
    return open_image_source(
        config.data, "test", config.data_root, img_size=config.img_size, preprocess=models[0],
        num_workers=config.num_workers, class_map=config.class_map, **columns,
    )  # fmt: skip


def check_fits(lm: LoadedModel, x: torch.Tensor, data: str, device: torch.device | str = "cpu") -> int:
    """Refuse, before any folder is written, a model that is on another device than the run's, cannot take this
    data or does not return finite (batch, classes) logits; return its class count (the logits' last dimension)."""
    require_model_device(lm.module, lm.label, device)
    x = x.to(model_device(lm.module) or "cpu")
    try:
        with torch.no_grad(), frozen([lm.module]):
            out = lm.module.eval()(x)
    except Exception as exc:  # noqa: BLE001 - any failure here means the model does not fit the data
        first = str(exc).strip().splitlines()[0][:160] if str(exc).strip() else type(exc).__name__
        raise RobfiltError(
            f"model {lm.label} cannot take {data} images of shape {tuple(x.shape[1:])} ({first}); "
            f"pick matching {flag('data')}/{flag('size')} or a model built for this input."
        ) from None
    return require_logits(out, len(x), model=lm.label, where=f"{data}'s first selected examples")


def check_labels(
    source: Any, ids: torch.Tensor, models: list[LoadedModel], classes: list[int], data: str
) -> dict[str, str] | None:
    """The data's labels must be class indices of every model: in [0, classes). A folder's labels are settled
    here, once the class counts are known (positions, a class map, or ImageNet-1k indices for wnid folders);
    returns the record of the class map used (None: none)."""
    from ..data.class_map import settle_folder_labels
    from ..data.folder import FolderSource

    if isinstance(source, FolderSource):
        return settle_folder_labels(source, classes, [lm.label for lm in models], data)
    labels = pool_labels(source, ids)
    for lm, k in zip(models, classes, strict=True):
        check_labels_fit(labels, k, model=lm.label, data=data)
    return None


@contextlib.contextmanager
def frozen(modules: list[nn.Module]) -> Iterator[None]:
    """Freeze the weights while attacking: attacks need input gradients only.

    Autograd then keeps no weight-gradient state, and SDPA can stay on a fused kernel for a learnable attention
    bias (BSA's), since no fused CPU kernel returns a mask gradient. The caller's flags are restored afterwards.
    """
    flags = [(p, p.requires_grad) for m in modules for p in m.parameters()]
    for p, _ in flags:
        p.requires_grad_(False)
    try:
        yield
    finally:
        for p, flag in flags:
            p.requires_grad_(flag)


def units_then_clean(n_models: int, parts: list[str] | tuple[str, ...], n_batches: int) -> list[Unit]:
    """(model, part, batch) units of every part first, then one clean unit per (model, batch): round-robin
    sharding then mixes cheap and expensive units."""
    units = [Unit(mi, part, bi) for mi in range(n_models) for part in parts for bi in range(n_batches)]
    return units + [Unit(mi, "clean", bi) for mi in range(n_models) for bi in range(n_batches)]


class ImageModelsMeasurement(Measurement):
    """Base of the measurements over image models: ``open_examples`` sets ``loaded``, ``source``, ``ids``,
    ``batches`` and ``classes`` (each model's class count, from its logits) and records the selection's digest
    (images and labels) in the run's fingerprint, with the class map that gave a folder its labels."""

    loaded: list[LoadedModel]
    classes: list[int]

    def open_examples(self, ctx: PrepareContext) -> None:
        c = self.config
        self.device = ctx.device
        self.loaded = load_image_models(c)
        self.source = open_images(c, self.loaded)
        fixed = getattr(c, "example_ids", None)
        self.ids = ctx.select(len(self.source), c.n_examples) if fixed is None else ctx.use(len(self.source), fixed)
        probe, _ = self.source.take(self.ids[:2])
        data = data_label(c.data)
        self.classes = [check_fits(lm, probe, data, ctx.device) for lm in self.loaded]
        if isinstance(c, ImageAttackConfig):  # gradient attacks: the logits must depend on the input, by gradient
            for lm in self.loaded:
                with frozen([lm.module]):
                    require_input_dependence(lm.module, lm.label, probe.to(model_device(lm.module) or "cpu"))
        self.class_map = check_labels(self.source, self.ids, self.loaded, self.classes, data)
        ctx.record_data("examples", self.source.digest(self.ids))  # after the labels are settled
        if self.class_map is not None:
            ctx.examples["examples"]["labels"] = self.class_map
        self.batches = batch_slices(len(self.ids), c.batch_size)

    def described_examples(self) -> dict[str, Any]:
        """What every image run's description records of its examples and models' origin (the fingerprint hashes
        the description with sorted keys, so where these keys stand does not matter)."""
        c = self.config
        return {"data": data_label(c.data), "data_checksum": self.source.checksum, "n_examples": c.n_examples,
                "example_ids_sha256": ids_digest(self.ids), "batch_size": c.batch_size, "size": c.size,
                "checkpoint": c.checkpoint}  # fmt: skip

    def summary_head(self) -> dict[str, Any]:
        """The keys every image run's summary starts with: kind, family, data, example count and seed."""
        c = self.config
        return {"kind": self.kind, "family": "image", "data": data_label(c.data), "n_examples": c.n_examples,
                "seed": c.seed}  # fmt: skip

    @property
    def labels(self) -> list[str]:
        return [lm.label for lm in self.loaded]

    def modules(self) -> list[nn.Module]:
        return [lm.module for lm in self.loaded]


class GridMeasurement(ImageModelsMeasurement):
    """An image measurement that runs each part (an attack, a corruption) over a grid (eps values, severities) per
    (model, batch) unit with the weights frozen, then one clean unit per (model, batch): the image attacks and
    the corruptions plan, count and hold their units this one way."""

    def parts(self) -> Sequence[str]:
        """The names of the non-clean units' parts, in plan order."""
        raise NotImplementedError

    def grid(self) -> Sequence[float]:
        """The grid one part's unit runs over (one progress step per point)."""
        raise NotImplementedError

    def plan(self) -> list[Unit]:
        return units_then_clean(len(self.loaded), self.parts(), len(self.batches))

    def work(self, unit: Unit) -> int:
        return 1 if unit.part == "clean" else len(self.grid())

    @contextlib.contextmanager
    def session(self) -> Iterator[None]:
        with frozen(self.modules()):
            yield
