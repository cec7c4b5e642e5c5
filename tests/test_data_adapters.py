"""Data from Python (tensors, numpy, torch Datasets) and from Hugging Face ``save_to_disk`` folders."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from torch.utils.data import Dataset, IterableDataset

from robustbench_filters.core.errors import RobfiltError
from robustbench_filters.data import (
    DatasetSource,
    HFImageSource,
    ImageData,
    ImageSource,
    TensorSource,
    load_text,
    open_image_source,
)
from robustbench_filters.models.loading import load_model

RNG = np.random.default_rng(0)
X8 = RNG.integers(0, 256, (12, 16, 16, 3), dtype=np.uint8)  # numpy-style NHWC uint8
Y = np.arange(12) % 3


class Pairs(Dataset):
    """A user's Dataset: (CHW float tensor, int) pairs."""

    def __init__(self, x: np.ndarray, y: np.ndarray) -> None:
        self.x, self.y = torch.from_numpy(x).permute(0, 3, 1, 2).float() / 255, y

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int):
        return self.x[i], int(self.y[i])


class PilPairs(Pairs):
    def __getitem__(self, i: int):
        return Image.fromarray(X8[i]).resize((20 + i, 18)), torch.tensor(self.y[i])


# ------------------------------------------------------------------------------------------- tensors / numpy
def test_numpy_uint8_and_float_tensors_give_the_same_examples() -> None:
    a = open_image_source((X8, Y), classes=["a", "b", "c"])
    b = open_image_source((torch.from_numpy(X8).permute(0, 3, 1, 2).float() / 255, torch.from_numpy(Y)))
    assert isinstance(a, TensorSource) and isinstance(a, ImageSource)
    assert a.image_shape == (3, 16, 16) and a.classes == ["a", "b", "c"] and b.classes == ["0", "1", "2"]
    xa, ya = a.take([3, 1])
    assert xa.dtype == torch.float32 and ya.tolist() == [0, 1]
    assert torch.allclose(xa, b.take([3, 1])[0]) and a.digest([3, 1]) == b.digest([3, 1])
    assert a.checksum == b.checksum and a.digest([1, 3]) != a.digest([3, 1])
    grey = open_image_source((X8[..., 0], Y))  # (N, H, W)
    assert grey.image_shape == (1, 16, 16)


def test_channels_follow_the_model_and_size_only_when_asked() -> None:
    deit = load_model("deit")  # 1 x 28 x 28
    src = open_image_source((X8, Y), preprocess=deit)
    assert src.image_shape == (1, 16, 16)  # grey, size kept
    assert open_image_source((X8, Y), preprocess=deit, img_size=28).image_shape == (1, 28, 28)
    assert open_image_source((X8, Y), img_size=8).image_shape == (3, 8, 8)
    bundled = open_image_source("fashion-mnist", in_chans=3)
    assert bundled.image_shape == (3, 28, 28) and len(bundled) == 2000
    x, _ = bundled.take([0])
    assert torch.equal(x[0, 0], x[0, 2])
    assert isinstance(open_image_source("fashion-mnist", preprocess=deit), ImageData)  # nothing to change


@pytest.mark.parametrize(
    ("x", "y", "match"),
    [
        (np.random.default_rng(0).normal(size=(4, 3, 8, 8)).astype(np.float32), [0] * 4, r"normalised\?"),
        (np.full((4, 3, 8, 8), 255.0, dtype=np.float32), [0] * 4, r"0-255 floats\?"),
        (np.zeros((4, 3, 8, 8), dtype=np.int32), [0] * 4, "dtype torch.int32"),
        (np.full((4, 3, 8, 8), np.nan, dtype=np.float32), [0] * 4, "NaN"),
        (np.zeros((4, 5, 8, 7), dtype=np.uint8), [0] * 4, "5 channels"),
        (np.zeros((4, 8), dtype=np.uint8), [0] * 4, r"must be \(N, C, H, W\)"),
        (np.zeros((4, 3, 8, 8), dtype=np.uint8), [0.0, 1.5, 0.0, 1.0], "integer class indices"),
        (np.zeros((4, 3, 8, 8), dtype=np.uint8), [0, -1, 0, 1], "class indices start at 0"),
        (np.zeros((4, 3, 8, 8), dtype=np.uint8), [0, 1, 0], "1-D sequence of 4"),
    ],
)
def test_bad_arrays_are_one_line(x: np.ndarray, y: list, match: str) -> None:
    with pytest.raises(RobfiltError, match=match) as info:
        open_image_source((x, y))
    assert "\n" not in str(info.value)


def test_other_bad_inputs() -> None:
    with pytest.raises(RobfiltError, match="only 2 class names"):
        open_image_source((X8, Y), classes=["a", "b"])
    with pytest.raises(RobfiltError, match=r"give \(x, y\)"):
        open_image_source(X8)
    with pytest.raises(RobfiltError, match="cannot use dict"):
        open_image_source({"x": X8})


# ------------------------------------------------------------------------------------------------ Datasets
def test_a_torch_dataset_matches_the_same_tensors() -> None:
    src = open_image_source(Pairs(X8, Y), classes=["a", "b", "c"])
    assert isinstance(src, DatasetSource) and src.image_shape == (3, 16, 16) and len(src) == 12
    tensors = open_image_source((X8, Y))
    assert torch.equal(src.take([5, 2])[0], tensors.take([5, 2])[0]) and src.digest([5, 2]) == tensors.digest([5, 2])
    assert src.checksum == DatasetSource(Pairs(X8, Y)).checksum
    assert DatasetSource(Pairs(X8, Y)).classes == ["0", "1", "2"]  # from one pass over the labels
    workers = DatasetSource(Pairs(X8, Y), num_workers=2)
    assert torch.equal(workers.take(torch.arange(12))[0], tensors.take(torch.arange(12))[0])


def test_a_dataset_of_pil_images_goes_through_the_preprocessing() -> None:
    src = open_image_source(PilPairs(X8, Y), img_size=16)
    x, y = src.take([0, 7])
    assert x.shape == (2, 3, 16, 16) and y.tolist() == [0, 1]
    with pytest.raises(RobfiltError, match="returns PIL images; give img_size"):
        DatasetSource(PilPairs(X8, Y))


def test_bad_datasets_are_one_line() -> None:
    class Stream(IterableDataset):
        def __iter__(self):
            yield from ()

    class Broken(Pairs):
        def __getitem__(self, i: int):
            if i == 3:
                raise KeyError("missing file 3.png")
            return super().__getitem__(i)

    class Mixed(Pairs):
        def __getitem__(self, i: int):
            x, y = super().__getitem__(i)
            return (x[:, :8] if i else x), y

    with pytest.raises(RobfiltError, match="map-style Dataset"):
        open_image_source(Stream())
    src = open_image_source(Broken(X8, Y))
    with pytest.raises(RobfiltError, match=r"dataset\[3\] failed .*KeyError"):
        src.take([2, 3])
    with pytest.raises(RobfiltError, match="differ in shape"):
        open_image_source(Mixed(X8, Y)).take([0, 1])
    with pytest.raises(RobfiltError, match="empty"):
        open_image_source(Pairs(X8[:0], Y[:0]))


# ---------------------------------------------------------------------------------------- Hugging Face
@pytest.fixture
def hf_images(tmp_path: Path) -> Path:
    from datasets import ClassLabel, Dataset, DatasetDict, Features, Value
    from datasets import Image as HFImage

    def split(n: int, seed: int):
        rng = np.random.default_rng(seed)
        imgs = [Image.fromarray(rng.integers(0, 256, (10 + i, 12, 3), dtype=np.uint8)) for i in range(n)]
        feats = Features({"img": HFImage(), "fine": ClassLabel(names=["ant", "bee"]), "note": Value("string")})
        return Dataset.from_dict({"img": imgs, "fine": [i % 2 for i in range(n)], "note": ["x"] * n}, features=feats)

    DatasetDict({"train": split(6, 1), "validation": split(4, 2)}).save_to_disk(str(tmp_path / "hf"))
    return tmp_path / "hf"


def test_hf_disk_images_with_columns_and_classes(hf_images: Path) -> None:
    src = open_image_source(f"hf-disk:{hf_images}", "valid", image_column="img", label_column="fine", img_size=8)
    assert isinstance(src, HFImageSource) and isinstance(src, ImageSource)
    assert src.classes == ["ant", "bee"] and len(src) == 4 and src.split == "validation"
    x, y = src.take([3, 0])
    assert x.shape == (2, 3, 8, 8) and y.tolist() == [1, 0] and 0 <= float(x.min()) <= float(x.max()) <= 1
    assert src.digest([3, 0]) == src.digest([3, 0]) and src.digest([3, 0]) != src.digest([0, 3])
    assert (
        len(src.checksum) == 64
        and src.checksum
        != open_image_source(
            f"hf-disk:{hf_images}", "train", image_column="img", label_column="fine", img_size=8
        ).checksum
    )
    grey = open_image_source(f"hf-disk:{hf_images}", "train", image_column="img", label_column="fine",
                             img_size=8, in_chans=1, num_workers=2)  # fmt: skip
    assert grey.take(torch.arange(6))[0].shape == (6, 1, 8, 8)


def test_hf_disk_bad_inputs(hf_images: Path, tmp_path: Path) -> None:
    with pytest.raises(RobfiltError, match="no image column 'image'.*Its columns: img, fine, note"):
        open_image_source(f"hf-disk:{hf_images}", "train", label_column="fine")
    with pytest.raises(RobfiltError, match="no label column 'label'"):
        open_image_source(f"hf-disk:{hf_images}", "train", image_column="img")
    with pytest.raises(RobfiltError, match="has no split 'test'.*Its splits: train, validation"):
        open_image_source(f"hf-disk:{hf_images}", "test", image_column="img", label_column="fine")
    with pytest.raises(RobfiltError, match="must hold integers"):
        open_image_source(f"hf-disk:{hf_images}", "train", image_column="img", label_column="note")
    with pytest.raises(RobfiltError, match="not a dataset folder written by save_to_disk"):
        open_image_source(f"hf-disk:{tmp_path}")
    with pytest.raises(RobfiltError, match="does not exist"):
        open_image_source(f"hf-disk:{tmp_path / 'nope'}")


def test_hf_disk_array_images_in_one_dataset(tmp_path: Path) -> None:
    from datasets import Array3D, Dataset, Features, Value

    feats = Features({"image": Array3D((8, 8, 3), "uint8"), "label": Value("int64")})
    Dataset.from_dict({"image": list(X8[:5, :8, :8]), "label": Y[:5].tolist()}, features=feats).save_to_disk(
        str(tmp_path / "arr")
    )
    src = open_image_source(f"hf-disk:{tmp_path / 'arr'}", "test")  # one dataset serves any split
    x, y = src.take([0, 4])
    assert src.image_shape == (3, 8, 8) and y.tolist() == [0, 1]
    assert torch.equal(x, open_image_source((X8[:5, :8, :8], Y[:5])).take([0, 4])[0])


def test_hf_disk_text(tmp_path: Path) -> None:
    from datasets import Dataset, DatasetDict

    rows = {s: [f"{s} line {i}" for i in range(5)] for s in ("train", "validation", "test")}
    DatasetDict({s: Dataset.from_dict({"content": r}) for s, r in rows.items()}).save_to_disk(str(tmp_path / "t"))
    assert load_text(f"hf-disk:{tmp_path / 't'}", "test", text_column="content") == "\n\n".join(rows["test"])
    from robustbench_filters.data import load_documents

    docs = load_documents(f"hf-disk:{tmp_path / 't'}", "all", text_column="content")
    assert list(docs.texts) == [*rows["train"], *rows["validation"], *rows["test"]] and docs.unit == "row"
    assert load_text(f"hf-disk:{tmp_path / 't'}", "val", text_column="content").startswith("validation line 0")
    with pytest.raises(RobfiltError, match="no text column 'text'.*Its columns: content"):
        load_text(f"hf-disk:{tmp_path / 't'}", "test")
    paras = [f"Paragraph {i} " + "word " * 20 for i in range(100)]
    Dataset.from_dict({"text": paras}).save_to_disk(str(tmp_path / "one"))
    parts = [load_text(f"hf-disk:{tmp_path / 'one'}", s) for s in ("train", "valid", "test")]
    assert "\n\n".join(parts) == "\n\n".join(p.strip() for p in paras) and parts[2].startswith("Paragraph 9")
