"""RobustBench's keywords for :func:`~robustbench_filters.api.benchmark.benchmark`, with RobustBench's meanings.

Code written for ``robustbench.eval.benchmark(model, n_examples=..., dataset=..., threat_model=..., to_disk=...,
model_name=..., data_dir=..., device=..., batch_size=..., eps=...)`` runs here unchanged where a keyword has a
meaning in robfilt; the rest are refused in one line that says what to use instead (never silently ignored):

- ``dataset``: ``"cifar10"``, ``"cifar100"`` (torchvision, under ``data_dir``) or ``"imagenet"`` (the ImageNet
  validation folder ``<data_dir>/val``, read as ``imagefolder:``; robfilt draws its own seeded subset, not
  RobustBench's fixed 5,000 images); RobustBench's enum works too.
- ``data_dir``: where those datasets are (robfilt's ``data_root``).
- ``to_disk``: keep the run folder (``runs/benchmark/<model_name>``, or ``out``), as RobustBench keeps its
  results file.
- ``model_name``: the model's name in rows, tables and the folder name.
- ``device``: a string or a ``torch.device``.
- ``corruptions``: a subset of robfilt's corruptions (RobustBench's CIFAR-10-C names that robfilt lacks are
  refused by name).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..core.errors import RobfiltError
from ..core.names import CORRUPTIONS

#: RobustBench's dataset names -> robfilt data specs (``{root}`` is ``data_dir``)
DATASETS: dict[str, str] = {"cifar10": "cifar10", "cifar100": "cifar100", "imagenet": "imagefolder:{root}/val"}
#: keywords RobustBench takes that have no robfilt meaning, with what to use instead
REFUSED: dict[str, str] = {
    "log_path": "robfilt logs through Python's logging; pass out= to keep the run folder with every row",
    "preprocessing": "robfilt takes [0, 1] images and keeps normalisation inside the model; wrap it with "
    "robustbench_filters.models.attach_normalizer, and pass img_size= to resize",
    "aa_state_path": "pass out= and resume=True to continue an interrupted run",
}


def _name(value: Any) -> str:
    return str(getattr(value, "value", value))  # RobustBench's enums carry their name in .value


def robustbench_options(options: dict[str, Any], data: Any) -> tuple[dict[str, Any], Any, Path | None]:
    """Translate RobustBench's keywords in ``options``: returns (robfilt options, data, out folder or None)."""
    options = dict(options)
    for key, instead in REFUSED.items():
        if options.pop(key, None) is not None:
            raise RobfiltError(f"benchmark does not take RobustBench's {key}=; {instead}.")
    dataset, data_dir = options.pop("dataset", None), options.pop("data_dir", None)
    if dataset is not None:
        if data is not None:
            raise RobfiltError("pass either dataset= (RobustBench's name) or data=, not both.")
        name = _name(dataset).lower().replace("-", "").replace("_", "")
        if name not in DATASETS:
            raise RobfiltError(
                f"unknown dataset {_name(dataset)!r}; RobustBench's datasets here are {', '.join(DATASETS)} (or "
                "pass data= with any robfilt data spec)."
            )
        root = str(data_dir if data_dir is not None else "./data")
        data = DATASETS[name].format(root=root.rstrip("/"))
        if not data.startswith("imagefolder:"):
            options.setdefault("data_root", root)
    elif data_dir is not None:
        options.setdefault("data_root", str(data_dir))
    if "device" in options and options["device"] is not None:
        options["device"] = str(options["device"])  # a torch.device works as in RobustBench
    model_name = options.pop("model_name", None)
    if model_name is not None and not isinstance(model_name, str):
        raise RobfiltError(f"model_name must be a string, got {model_name!r}.")
    corruptions = options.pop("corruptions", None)
    if corruptions is not None:
        names = [corruptions] if isinstance(corruptions, str) else list(corruptions)
        missing = [n for n in names if n not in CORRUPTIONS]
        if missing:
            raise RobfiltError(
                f"robfilt has no corruption {missing[0]!r}; its corruptions are {', '.join(CORRUPTIONS)} (computed on "
                "the fly, not CIFAR-10-C's files)."
            )
        options["attacks"] = tuple(f"corruption:{n}" for n in names)
    to_disk = options.pop("to_disk", False)
    out = Path("runs") / "benchmark" / (model_name or "model") if to_disk else None
    if model_name is not None:
        options["model_name"] = model_name
    return options, data, out
