"""What every run config shares: the model list, data, seed and device rules, defaults and option names."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from ..core.errors import RobfiltError
from ..core.family import Family
from ..core.names import CORRUPTION, DATA_PREFIXES, TORCHVISION_SETS, WORDSWAP, Norm, check_data_spec
from ..core.seeds import check_seed
from ..core.surface import Surface, flag, given
from .options import Bool, Data, Declared, Int, Models, Pairs, Text, derived, internal, is_module, option

if TYPE_CHECKING:
    pass

#: a model reference (``deit-grc``, ``timm:resnet18``, ``file.py:build``) or, in Python, a torch module
ModelLike = Any

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
DEVICES = ("cpu", "cuda")
#: a side of 4096 pixels is 200 MB per float image; larger sizes are typos that would exhaust memory
MAX_IMG_SIZE = 4096
#: decoding processes: more than this is a typo that would fork the machine to a halt
MAX_WORKERS = 256


def default_eps(data: str, norm: Norm) -> tuple[float, ...]:
    """The default eps grid of a dataset spec under ``norm``."""
    key = data.split(":", 1)[0].replace("-full", "")
    if key == "imagefolder":
        key = "imagenet"
    if key not in DEFAULT_EPS:
        raise RobfiltError(
            f"no default eps grid for data {data!r}; pass {flag('eps')}, e.g. {given('eps', '1/255,2/255,4/255')}."
        )
    return DEFAULT_EPS[key][norm]


def model_label(model: ModelLike, index: int, model_args: dict[str, Any] | None = None) -> str:
    """The name a model has in rows and tables: its display name or reference (with ``model_args`` merged in, as the
    model is loaded), its registry name, or ``model<i>``."""
    if not is_module(model):  # a reference: as text, or parsed (a ModelRef)
        from ..models.ref import apply_model_args

        return apply_model_args(model, model_args).label
    from ..models.built import built_of

    built = built_of(model)
    return built.spec.name if built is not None else f"model{index}"


def model_family(model: ModelLike, base_dir: str | None = None) -> Family:
    """A reference's or module's family, checked without loading anything (factory files relative to ``base_dir``
    too, a spec's folder)."""
    if not is_module(model):  # a reference: as text, or parsed (a ModelRef)
        from ..models.ref import model_kind

        return Family.LM if model_kind(model, base_dir) == "lm" else Family.IMAGE
    from ..models.built import built_of

    built = built_of(model)
    if built is not None:
        return built.spec.family
    from ..models.hf import is_hf_model

    if is_hf_model(model):
        from ..models.hf.load import is_causal_config

        return Family.LM if is_causal_config(model.config) else Family.IMAGE
    return Family.LM if hasattr(model, "forward_embeddings") else Family.IMAGE


def _check_model_object(model: Any, index: int) -> None:
    """Only modules and references are models: a function, a class or anything else is refused by the API
    parameter that holds it (``models[i]``), since only the Python API can pass one."""
    if isinstance(model, str) or is_module(model):
        return
    if isinstance(model, type):
        what = f"a class ({model.__name__}); pass an instance, e.g. {model.__name__}(...)"
    elif callable(model):
        what = f"a {type(model).__name__}; wrap it in an nn.Module whose forward calls it"
    else:
        what = f"a {type(model).__name__}"
    raise RobfiltError(
        f"models[{index}] is {what}: a model must be an nn.Module returning logits, or a model reference "
        "such as 'deit-grc' or 'models.py:build'."
    )


def _unique(values: Iterable[Any], name: str) -> tuple[Any, ...]:
    """``values`` as a tuple; a repeated value is refused (it would count examples twice and narrow intervals)."""
    seen: list[Any] = []
    for v in values:
        if v in seen:
            shown = f"{v:g}" if isinstance(v, float) else repr(v) if isinstance(v, str) else str(v)
            raise RobfiltError(f"{flag(name)} lists {shown} twice; list each value once.")
        seen.append(v)
    return tuple(seen)


def _positive(value: int | None, name: str) -> None:
    if value is not None and (isinstance(value, bool) or int(value) != value or int(value) <= 0):
        raise RobfiltError(f"{flag(name)} must be positive (a whole number), got {value}.")


def _check_device(device: str) -> None:
    if device not in DEVICES and not (device.startswith("cuda:") and device[5:].isdigit()):
        raise RobfiltError(f"unknown {flag('device')} {device!r}; use cpu or cuda.")
    if device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            raise RobfiltError(
                f"{given('device', 'cuda')} was requested but no CUDA device is available; use {given('device', 'cpu')}."
            )


MODEL_HELP = (
    "Comma list of model references: registry names (deit-grc, lm), timm:<arch>[?key=value&...], hf:DIR (a Hugging "
    "Face causal LM folder or cached hub id), file.py:factory or pkg.mod:factory; name=ref sets the display name. In "
    "Python, torch modules too."
)


@dataclass(frozen=True, kw_only=True)
class RunConfig(Declared):
    """What every kind of run shares: the models, the data, the seed and where the models come from."""

    FAMILY: ClassVar[Family | None] = None
    DESCRIPTION: ClassVar[str] = ""
    #: the kind of run it configures, as manifests record it (summaries/kinds.py)
    KIND: ClassVar[str] = ""
    #: random inputs of the model's shape are data too (Lipschitz runs)
    SYNTHETIC: ClassVar[bool] = False

    models: tuple[ModelLike, ...] = option(help=MODEL_HELP, value=Models(), flag="--model", short="-m", panel="Model")
    data: Any = option(
        None,
        help="Data: bundled fashion-mnist or austen, cifar10, mnist, imagefolder:DIR, hf-disk:DIR, text:FILE.",
        value=Data(),
        panel="Data",
    )
    n_examples: int | None = option(
        None,
        help="Examples: a seeded subset shared by every model (default: at most the kind's default count; "
        "in Python, None: every example).",
        value=Int(),
        short="-n",
        panel="Data",
        none_is_value=True,
    )
    batch_size: int | None = option(None, help="Examples per batch (and per resumable unit).", value=Int())
    seed: int = option(0, help="Random seed; same seed, same numbers.", value=Int())
    size: str = option("micro", help="Model size for registry names: micro, tiny, small, base.", panel="Model")
    checkpoint: str | None = option(
        "zoo", help="Weights of registry models: zoo, a checkpoint folder, or none (untrained).", value=Text(path=True),
        panel="Model",
    )  # fmt: skip
    device: str = option(
        "cpu",
        help="cpu or cuda (under torchrun: each rank's GPU).",
        not_on={Surface.SPEC: "a spec sets the device once, at its top level (device = ...)"},
    )
    allow_pickle: bool = option(
        False, help="Accept a torch .pt state dict (read with weights_only=True).", value=Bool(), panel="Model"
    )
    model_args: tuple[str, ...] = option(
        (),
        help="key=value for every model's constructor, e.g. num_classes=10 (repeatable).",
        value=Pairs(),
        flag="--model-arg",
        panel="Model",
    )
    base_dir: str | None = internal(
        None, reason="a spec sets it to its own folder, so relative factory files resolve from there"
    )
    #: the models as parsed once, when the config is made: a ModelRef per reference (``--model-arg`` merged in, as
    #: the model is loaded), the module itself for a module; with the name and the family of each
    refs: tuple[Any, ...] = derived()
    labels: tuple[str, ...] = derived()
    families: tuple[Family, ...] = derived()

    def __post_init__(self) -> None:
        models = (self.models,) if isinstance(self.models, str) or is_module(self.models) else tuple(self.models)
        if not models:
            raise RobfiltError(f"no model given; pass {given('models', 'NAME[,NAME...]')}.")
        for i, m in enumerate(models):
            _check_model_object(m, i)
        self._set("models", models)
        self._set("model_args", tuple(self.model_args))
        self._set("refs", _parsed(models, self.parsed_model_args))  # also validates --model-arg's key=value syntax
        self._set("labels", tuple(model_label(m, i) for i, m in enumerate(self.refs)))
        _unique(self.labels, "models")
        modules = [i for i, m in enumerate(models) if is_module(m)]
        twice = next((i for k, i in enumerate(modules) if any(models[j] is models[i] for j in modules[:k])), None)
        if twice is not None:  # distinct labels (model0, model1), one module: a comparison of a model with itself
            raise RobfiltError(f"the same model object is given twice (as {self.labels[twice]}); give each model once.")
        # checks every reference's name and factory file
        self._set("families", tuple(model_family(m, self.base_dir) for m in self.refs))
        if self.FAMILY is not None:
            for label, fam in zip(self.labels, self.families, strict=True):
                if fam is not self.FAMILY:
                    raise RobfiltError(
                        f"model {label!r} is a {fam.value} model; {self.DESCRIPTION} runs need "
                        f"{self.FAMILY.value} models (run the two families separately)."
                    )
        if isinstance(self.data, str):
            check_data_spec(
                self.data, set(self.families) if self.FAMILY is None else {self.FAMILY}, synthetic=self.SYNTHETIC
            )
        _positive(self.n_examples, "n_examples")
        _positive(self.batch_size, "batch_size")
        self._set("seed", check_seed(self.seed))
        _check_device(str(self.device))
        _check_model_options(self, self.refs)

    @property
    def parsed_model_args(self) -> dict[str, Any]:
        """``model_args`` (``key=value`` pairs) as typed values (they apply to every model given by reference)."""
        from ..models.ref import parse_model_args

        return parse_model_args(self.model_args)

    def _set(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)

    @classmethod
    def options(cls) -> tuple[str, ...]:
        """The fields a config is made from (not those it derives itself)."""
        return tuple(f.name for f in dataclasses.fields(cls) if f.init)


def _parsed(models: Sequence[ModelLike], model_args: dict[str, Any]) -> tuple[Any, ...]:
    """Each reference parsed, with ``model_args`` merged in (they win, as when the model is loaded); modules as
    they are."""
    if all(is_module(m) for m in models):
        return tuple(models)
    from ..models.ref import apply_model_args

    return tuple(m if is_module(m) else apply_model_args(m, model_args) for m in models)


def _reference_kinds(refs: Sequence[Any]) -> set[str]:
    """What kinds of model a run holds: ``registry`` names (zoo models included), ``timm``, ``hf``, ``factory``
    references, and ``module`` for torch modules given in Python."""
    return {"module" if is_module(m) else m.kind.value for m in refs}


def _check_model_options(config: Any, models: Sequence[ModelLike]) -> None:
    """The model options that mean something only for some kinds of model are refused when no model of the run is
    of such a kind: otherwise they would be accepted, recorded and ignored (``--size tiny`` on ``timm:resnet18``)."""
    kinds = _reference_kinds(models)
    if config.size != "micro" and "registry" not in kinds:
        raise RobfiltError(
            f"{flag('size')} applies to registry models (deit-grc, lm); these models take their size from their "
            "reference or code; drop it."
        )
    if kinds == {"module"}:  # checkpoint "none" (no weights to load) is true of a module too
        for name in ("checkpoint", "model_args"):
            if getattr(config, name) not in (None, (), "none", _default(type(config), name)):
                raise RobfiltError(
                    f"{flag(name)} applies to model references (names, timm:, hf:, file.py:factory); a torch module "
                    "given in Python is used as it is; drop it."
                )
    builtin = config.checkpoint is None or str(config.checkpoint).split(":")[0] in ("zoo", "none")
    if config.allow_pickle and (builtin or kinds <= {"module", "hf"}):
        raise RobfiltError(
            f"{flag('allow_pickle')} lets {flag('checkpoint')} read a torch .pt state dict; without a checkpoint "
            "file to read it changes nothing; drop it."
        )


def _default(cls: type, name: str) -> Any:
    return next(f.default for f in dataclasses.fields(cls) if f.name == name)


def _data_kind(data: Any) -> str:
    """Where a run's data comes from: a prefix's kind (``imagefolder``, ``hf-disk``, ``text``), ``named`` (bundled
    and torchvision sets), or ``python`` (tensors and datasets given in Python)."""
    if not isinstance(data, str):
        return "python"
    for prefix in DATA_PREFIXES:
        if data.strip().startswith(prefix):
            return prefix.rstrip(":")
    return "named"


_DATA_KINDS = {"named": "bundled and torchvision datasets", "python": "datasets given in Python"}


def check_data_options(config: Any, applies: dict[str, tuple[str, ...]]) -> None:
    """Refuse a data option given for data it cannot apply to (``--image-column`` on the bundled images): each name
    in ``applies`` with the data kinds (:func:`_data_kind`) it means something for."""
    kind = _data_kind(config.data)
    for name, kinds in applies.items():
        if getattr(config, name) is not None and kind not in kinds:
            where = " or ".join(_DATA_KINDS.get(k, f"{k}: data") for k in kinds)
            raise RobfiltError(f"{flag(name)} applies to {where}, not to {data_label(config.data)}; drop it.")


def _empty(values: Any) -> bool:
    """An array, tensor or sequence of length 0 (shapes are checked where the data is read)."""
    try:
        return len(values) == 0
    except TypeError:
        return False


def _check_image_data(config: Any) -> None:
    """Image data options: a positive image size and worker count (0 workers decodes in this process), and a
    class map only for image folders, read now so a bad map is refused before any model is built."""
    if isinstance(config.data, tuple | list) and len(config.data) == 2 and _empty(config.data[0]):
        raise RobfiltError(f"{flag('data')} holds no images; give at least one (image, label) pair.")
    _positive(config.img_size, "img_size")
    if config.img_size is not None and config.img_size > MAX_IMG_SIZE:
        raise RobfiltError(f"{flag('img_size')} must be at most {MAX_IMG_SIZE} pixels, got {config.img_size}.")
    if config.num_workers is not None and (
        isinstance(config.num_workers, bool) or not 0 <= int(config.num_workers) <= MAX_WORKERS
    ):
        raise RobfiltError(f"{flag('num_workers')} must be from 0 to {MAX_WORKERS}, got {config.num_workers}.")
    # 0 decoding processes (decode in this process) is true of every data, so only more is refused
    workers = {"num_workers": ("imagefolder", "hf-disk", "python")} if config.num_workers else {}
    check_data_options(config, {"image_column": ("hf-disk",), "label_column": ("hf-disk",), **workers})
    torchvision = isinstance(config.data, str) and config.data.strip().lower() in TORCHVISION_SETS
    if config.data_root is not None and not torchvision:
        raise RobfiltError(
            f"{flag('data_root')} is where torchvision datasets (cifar10, mnist, ...) live; {data_label(config.data)} "
            "does not read it; drop it."
        )  # fmt: skip
    if config.class_map is not None:
        if not (isinstance(config.data, str) and config.data.strip().startswith("imagefolder:")):
            raise RobfiltError(
                f"{flag('class_map')} applies to imagefolder: data (it maps class folder names to class indices); "
                f"{data_label(config.data)} carries its labels already."
            )
        from ..data.class_map import read_class_map

        read_class_map(config.class_map)


@dataclass(frozen=True, kw_only=True)
class ImageDataConfig(RunConfig):
    """The image-data options every image run takes (attacks, corruptions, certify, Lipschitz): where the images
    come from and how they are decoded, checked in one place."""

    data: Any = "fashion-mnist"
    data_root: str | None = option(
        None, help="Root folder of torchvision datasets (cifar10, mnist, ...).", value=Text(path=True), panel="Data"
    )
    img_size: int | None = option(
        None, help="Resize and crop images to this size (default: the model's own).", value=Int(), panel="Data"
    )
    num_workers: int | None = option(
        None, help="Image decoding processes (default min(4, CPUs); 0: none).", value=Int(), panel="Data"
    )
    image_column: str | None = option(None, help="hf-disk data: the image column.", panel="Data")
    label_column: str | None = option(None, help="hf-disk data: the label column.", panel="Data")
    class_map: str | None = option(
        None,
        help="imagefolder data: class folder name -> class index, a .json object or .csv/.tsv rows (default: "
        "folder positions; ImageNet wnid folders get ImageNet-1k indices for 1000-class models).",
        value=Text(path=True),
        panel="Data",
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_image_data(self)


def data_label(data: Any) -> str:
    """How a run's data is named in records: its spec string, or the kind of in-memory data."""
    return data if isinstance(data, str) else f"<{type(data).__name__}>"


def _names(values: str | Sequence[str]) -> list[str]:
    return [values] if isinstance(values, str) else [str(v) for v in values]
