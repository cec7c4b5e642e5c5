"""What every run config shares: the model list, data, seed and device rules, defaults and option names."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from torch import nn

from ..attacks.catalogue import Norm
from ..errors import RobfiltError
from ..family import Family

ModelLike = str | nn.Module

WORDSWAP = "wordswap"
CORRUPTION = "corruption"
#: Contaminations are not optimised attacks: they have no eps ball, only a rate or a severity.
CONTAMINATIONS: dict[str, Family] = {WORDSWAP: Family.LM, CORRUPTION: Family.IMAGE}

# eps grids on the [0, 1] scale. Each grid's top value drives an undefended model close to 0% under PGD.
DEFAULT_EPS: dict[str, dict[Norm, tuple[float, ...]]] = {
    "fashion-mnist": {Norm.LINF: (0.005, 0.01, 0.02, 0.05, 0.1), Norm.L2: (0.1, 0.25, 0.5, 1.0, 2.0)},
    "mnist": {Norm.LINF: (0.05, 0.1, 0.2, 0.3), Norm.L2: (0.5, 1.0, 2.0, 3.0)},
    "cifar10": {Norm.LINF: (1 / 255, 2 / 255, 4 / 255, 8 / 255, 16 / 255), Norm.L2: (0.125, 0.25, 0.5, 1.0)},
    "cifar100": {Norm.LINF: (1 / 255, 2 / 255, 4 / 255, 8 / 255, 16 / 255), Norm.L2: (0.125, 0.25, 0.5, 1.0)},
    "imagenet": {Norm.LINF: (0.5 / 255, 1 / 255, 2 / 255, 4 / 255), Norm.L2: (0.25, 0.5, 1.0, 2.0)},
}
#: Relative eps grid for LM embedding attacks (a fraction of a typical token embedding; see attacks.embedding).
DEFAULT_LM_EPS: tuple[float, ...] = (0.01, 0.02, 0.05, 0.1)
DEFAULT_LM_SEQUENCES = 64
AMP_DTYPES: tuple[str, ...] = ("bf16",)
DEVICES = ("cpu", "cuda")


def default_eps(data: str, norm: Norm) -> tuple[float, ...]:
    """The default eps grid of a dataset spec under ``norm``."""
    key = data.split(":", 1)[0].replace("-full", "")
    if key == "imagefolder":
        key = "imagenet"
    if key not in DEFAULT_EPS:
        raise RobfiltError(f"no default eps grid for data {data!r}; pass --eps, e.g. --eps 1/255,2/255,4/255.")
    return DEFAULT_EPS[key][norm]


def model_label(model: ModelLike, index: int) -> str:
    """The name a model has in rows and tables: its display name or reference, its registry name, or ``model<i>``."""
    if isinstance(model, str):
        from ..models.ref import parse_model_ref

        return parse_model_ref(model).label
    return getattr(getattr(model, "robfilt_spec", None), "name", f"model{index}")


def model_family(model: ModelLike) -> Family:
    """A reference's or module's family, checked without loading anything."""
    if isinstance(model, str):
        from ..models.resolve import validate_model_ref

        return Family.LM if validate_model_ref(model) == "lm" else Family.IMAGE
    spec = getattr(model, "robfilt_spec", None)
    if spec is not None:
        return spec.family
    return Family.LM if hasattr(model, "forward_embeddings") else Family.IMAGE


def _unique(values: Iterable[Any], what: str) -> tuple[Any, ...]:
    seen: list[Any] = []
    for v in values:
        if v in seen:
            shown = f"{v:g}" if isinstance(v, float) else str(v)
            raise RobfiltError(f"{what} lists {shown} twice; list each value once.")
        seen.append(v)
    return tuple(seen)


def _positive(value: int | None, what: str) -> None:
    if value is not None and (isinstance(value, bool) or int(value) != value or int(value) <= 0):
        raise RobfiltError(f"{what} must be positive (a whole number), got {value}.")


def _check_device(device: str) -> None:
    if device not in DEVICES and not (device.startswith("cuda:") and device[5:].isdigit()):
        raise RobfiltError(f"unknown --device {device!r}; use cpu or cuda.")
    if device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            raise RobfiltError("--device cuda was requested but no CUDA device is available; use --device cpu.")


@dataclass(frozen=True, kw_only=True)
class RunConfig:
    """What every kind of run shares: the models, the data, the seed and where the models come from."""

    KIND: ClassVar[str] = ""
    FAMILY: ClassVar[Family | None] = None
    DESCRIPTION: ClassVar[str] = ""

    models: tuple[ModelLike, ...]
    data: str | None = None
    n_examples: int | None = None
    batch_size: int | None = None
    seed: int = 0
    size: str = "micro"
    checkpoint: str | None = "zoo"
    device: str = "cpu"
    allow_pickle: bool = False
    model_args: tuple[str, ...] = ()
    base_dir: str | None = None

    def __post_init__(self) -> None:
        models = (self.models,) if isinstance(self.models, str | nn.Module) else tuple(self.models)
        if not models:
            raise RobfiltError("no model given; pass --model NAME[,NAME...].")
        self._set("models", models)
        _unique(self.labels, "--model")
        modules = [i for i, m in enumerate(models) if isinstance(m, nn.Module)]
        twice = next((i for k, i in enumerate(modules) if any(models[j] is models[i] for j in modules[:k])), None)
        if twice is not None:  # distinct labels (model0, model1), one module: a comparison of a model with itself
            raise RobfiltError(f"the same model object is given twice (as {self.labels[twice]}); give each model once.")
        families = [model_family(m) for m in models]  # also checks every reference's syntax and registry name
        if self.FAMILY is not None:
            for m, fam in zip(models, families, strict=True):
                if fam is not self.FAMILY:
                    raise RobfiltError(
                        f"model {model_label(m, 0)!r} is a {fam.value} model; {self.DESCRIPTION} runs need "
                        f"{self.FAMILY.value} models (run the two families separately)."
                    )
        _positive(self.n_examples, "--n-examples")
        _positive(self.batch_size, "--batch-size")
        self._set("model_args", tuple(self.model_args))
        self.parsed_model_args  # noqa: B018 - validates key=value syntax before any model is built
        if isinstance(self.seed, bool) or int(self.seed) != self.seed:
            raise RobfiltError(f"--seed must be an integer, got {self.seed}.")
        _check_device(str(self.device))

    @property
    def parsed_model_args(self) -> dict[str, Any]:
        """``--model-arg key=value`` pairs as typed values (they apply to every model given by reference)."""
        from ..models.ref import parse_model_args

        return parse_model_args(self.model_args)

    def _set(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)

    @property
    def labels(self) -> list[str]:
        return [model_label(m, i) for i, m in enumerate(self.models)]

    @classmethod
    def options(cls) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(cls))


def _check_image_data(config: Any) -> None:
    """Image data options: a positive image size and worker count (0 workers decodes in this process)."""
    _positive(config.img_size, "--img-size")
    if config.num_workers is not None and (isinstance(config.num_workers, bool) or int(config.num_workers) < 0):
        raise RobfiltError(f"--num-workers must be 0 or more, got {config.num_workers}.")


@dataclass(frozen=True, kw_only=True)
class ImageDataConfig(RunConfig):
    """The image-data options every image run takes (attacks, corruptions, certify): where the images come from
    and how they are decoded, checked in one place."""

    data: Any = "fashion-mnist"
    data_root: str | None = None
    img_size: int | None = None
    num_workers: int | None = None
    image_column: str | None = None
    label_column: str | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_image_data(self)


def data_label(data: Any) -> str:
    """How a run's data is named in records: its spec string, or the kind of in-memory data."""
    return data if isinstance(data, str) else f"<{type(data).__name__}>"


def _names(values: str | Sequence[str]) -> list[str]:
    return [values] if isinstance(values, str) else [str(v) for v in values]


#: How an option is spelt on the command line, where that differs from the field name.
FLAGS: dict[str, str] = {
    "rates": "--rate",
    "models": "--model",
    "attacks": "--attack",
    "input_labels": "labels",
    "model_args": "--model-arg",
    "severities": "--severity",
    "sigmas": "--sigma",
}


def flag(name: str) -> str:
    return FLAGS.get(name, "--" + name.replace("_", "-"))
