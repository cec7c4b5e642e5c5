"""benchmark() takes RobustBench's keywords with RobustBench's meanings, and refuses the rest in one line."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from torch import nn

from robustbench_filters.api.benchmark import benchmark
from robustbench_filters.core.errors import RobfiltError

WNIDS = ("n01440764", "n02102040", "n02979186")


class _Net(nn.Module):
    """Labels 3 grey classes by mean brightness; 3 logits."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        m = x.mean(dim=(1, 2, 3))
        return torch.stack([-(m - c).abs() * 20 for c in (0.2, 0.5, 0.8)], dim=1)


def _imagenet_val(root: Path) -> None:
    for k, wnid in enumerate(WNIDS):
        folder = root / "val" / wnid
        folder.mkdir(parents=True)
        for i in range(2):
            value = int(255 * (0.2 + 0.3 * k)) + i
            Image.fromarray(np.full((8, 8, 3), value, dtype=np.uint8)).save(folder / f"{i}.png")


def test_dataset_data_dir_to_disk_and_model_name_work_as_in_robustbench(tmp_path: Path, monkeypatch) -> None:
    _imagenet_val(tmp_path / "data")
    monkeypatch.chdir(tmp_path)
    res = benchmark(
        _Net(), dataset="imagenet", data_dir=tmp_path / "data", threat_model="Linf", eps=1 / 255, n_examples=6,
        batch_size=3, device=torch.device("cpu"), to_disk=True, model_name="bright", attack="fgsm",
        img_size=8, num_workers=0,
    )  # fmt: skip
    assert res.model == "bright" and res.clean.n == 6 and res.clean.acc == 1.0
    assert res.run_dir == Path("runs/benchmark/bright") and (tmp_path / res.run_dir / "manifest.json").is_file()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"log_path": "x.log"}, "does not take RobustBench's log_path=; robfilt logs"),
        ({"preprocessing": "Res256Crop224"}, "attach_normalizer"),
        ({"aa_state_path": "s.json"}, "resume=True"),
        ({"dataset": "svhn"}, "unknown dataset 'svhn'"),
        ({"dataset": "cifar10", "data": "fashion-mnist"}, "either dataset= (RobustBench's name) or data="),
        ({"threat_model": "corruptions", "corruptions": ["fog"]}, "robfilt has no corruption 'fog'"),
        ({"corruptions": ["contrast"]}, "corruptions= applies to threat_model='corruptions'"),
    ],
)
def test_keywords_without_a_robfilt_meaning_are_refused_in_one_line(kwargs: dict, message: str) -> None:
    with pytest.raises(RobfiltError) as err:
        benchmark(_Net(), **kwargs)
    assert message in str(err.value) and "\n" not in str(err.value)
