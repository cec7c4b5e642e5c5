"""Image folders decoded on demand: mixed sizes and modes, corrupt files named, identity without decoding."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from robustbench_filters.core.errors import RobfiltError
from robustbench_filters.data import (
    FolderSource,
    ImageSource,
    InputSpec,
    load_images,
    open_image_source,
)
from robustbench_filters.models.loading import load_model


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """cat/ and dog/ with RGB, grey, RGBA, palette and 16-bit images of different sizes, one corrupt, one truncated."""
    rng = np.random.default_rng(0)
    root = tmp_path / "pets"
    for cls in ("cat", "dog"):
        (root / cls / "sub").mkdir(parents=True)
    Image.fromarray(rng.integers(0, 256, (40, 60, 3), dtype=np.uint8)).save(root / "cat" / "a_rgb.png")
    Image.fromarray(rng.integers(0, 256, (31, 17), dtype=np.uint8)).save(root / "cat" / "b_grey.png")
    rgba = np.zeros((20, 20, 4), dtype=np.uint8)
    rgba[..., 0], rgba[..., 3] = 255, 128  # pure red, half transparent
    Image.fromarray(rgba, mode="RGBA").save(root / "cat" / "c_rgba.png")
    Image.fromarray(rng.integers(0, 256, (50, 50, 3), dtype=np.uint8)).save(root / "cat" / "sub" / "d.jpg", quality=90)
    Image.fromarray(rng.integers(0, 256, (12, 12), dtype=np.uint8)).convert("P").save(root / "dog" / "e_palette.png")
    Image.fromarray(np.full((16, 16), 65535, dtype=np.uint16)).save(root / "dog" / "f_16bit.png")
    (root / "dog" / "g_corrupt.png").write_bytes(b"\x89PNG\r\n\x1a\n this is not an image")
    good = root / "dog" / "h_truncated.jpg"
    Image.fromarray(rng.integers(0, 256, (64, 64, 3), dtype=np.uint8)).save(good, quality=95)
    good.write_bytes(good.read_bytes()[:600])
    Image.fromarray(rng.integers(0, 256, (30, 30, 3), dtype=np.uint8)).save(root / "dog" / "sub" / "i.bmp")
    (root / "dog" / "notes.txt").write_text("not an image")
    (root / ".hidden").mkdir()
    return root


FILES = ["cat/a_rgb.png", "cat/b_grey.png", "cat/c_rgba.png", "cat/sub/d.jpg", "dog/e_palette.png",
         "dog/f_16bit.png", "dog/g_corrupt.png", "dog/h_truncated.jpg", "dog/sub/i.bmp"]  # fmt: skip
GOOD = [0, 1, 2, 3, 4, 5, 8]


def _grey28(workers: int = 0) -> InputSpec:
    return InputSpec(in_chans=1, size=(28, 28), interpolation="bilinear", crop_pct=1.0)


def test_index_lists_files_only_and_implements_the_protocol(folder: Path) -> None:
    src = open_image_source(f"imagefolder:{folder}", img_size=28, in_chans=1, num_workers=0)
    assert isinstance(src, FolderSource) and isinstance(src, ImageSource)
    assert src.files == FILES and src.classes == ["cat", "dog"]
    assert src.y.tolist() == [0, 0, 0, 0, 1, 1, 1, 1, 1] and len(src) == 9
    assert src.image_shape == (1, 28, 28)


@pytest.mark.parametrize("in_chans", [1, 3])
def test_every_mode_and_size_becomes_the_models_shape(folder: Path, in_chans: int) -> None:
    src = open_image_source(f"imagefolder:{folder}", img_size=24, in_chans=in_chans, num_workers=0)
    x, y = src.take(torch.tensor(GOOD))
    assert x.shape == (7, in_chans, 24, 24) and x.dtype == torch.float32 and y.tolist() == [0, 0, 0, 0, 1, 1, 1]
    assert float(x.min()) >= 0.0 and float(x.max()) <= 1.0
    assert torch.allclose(x[5], torch.ones_like(x[5]))  # 16-bit white stays white, not clipped noise
    if in_chans == 3:
        assert torch.allclose(x[2, 0], torch.ones(24, 24)) and float(x[2, 1:].abs().max()) == 0.0  # RGBA red
        assert torch.equal(x[1, 0], x[1, 1]) and torch.equal(x[1, 1], x[1, 2])  # grey -> 3 equal channels
    else:
        assert torch.allclose(x[2, 0], torch.full((24, 24), 76 / 255), atol=1 / 255)  # red -> luma 0.299


def test_only_the_selected_files_are_decoded_and_bad_ones_are_named(folder: Path) -> None:
    src = open_image_source(f"imagefolder:{folder}", preprocess=_grey28(), num_workers=0)
    src.take([0, 8])  # the corrupt and truncated files are never opened
    with pytest.raises(RobfiltError, match=r"cannot read image .*dog/g_corrupt.png \(UnidentifiedImageError") as e:
        src.take([5, 6])
    assert "\n" not in str(e.value)
    with pytest.raises(RobfiltError, match=r"cannot read image .*dog/h_truncated.jpg \(OSError: (?i:.*truncated)"):
        src.take([7])
    with pytest.raises(RobfiltError, match=r"g_corrupt.png"):
        list(src.batches(torch.arange(9), 4))


def test_workers_give_the_same_tensors_and_batches_match_take(folder: Path) -> None:
    one = open_image_source(f"imagefolder:{folder}", preprocess=_grey28(), num_workers=0)
    two = open_image_source(f"imagefolder:{folder}", preprocess=_grey28(), num_workers=2)
    ids = torch.tensor([8, 0, 3, 1, 4])
    x0, y0 = one.take(ids)
    x2, y2 = two.take(ids)
    assert torch.equal(x0, x2) and torch.equal(y0, y2)
    got = list(two.batches(ids, 2))
    assert [b[0].tolist() for b in got] == [[8, 0], [3, 1], [4]]
    assert torch.equal(torch.cat([b[1] for b in got]), x0) and torch.equal(torch.cat([b[2] for b in got]), y0)


def test_digest_and_checksum_without_decoding(folder: Path) -> None:
    src = open_image_source(f"imagefolder:{folder}", preprocess=_grey28(), num_workers=0)
    d = src.digest([6, 7])  # corrupt files hash fine: nothing is decoded
    assert d == src.digest(torch.tensor([6, 7])) and d != src.digest([7, 6]) and d != src.digest([0, 1])
    other = open_image_source(f"imagefolder:{folder}", img_size=32, in_chans=1, num_workers=0)
    assert other.digest([6, 7]) != d and other.checksum != src.checksum  # preprocessing is part of identity
    checksum = src.checksum
    assert open_image_source(f"imagefolder:{folder}", preprocess=_grey28()).checksum == checksum
    before = src.digest([0])
    Image.fromarray(np.zeros((40, 60, 3), dtype=np.uint8)).save(folder / "cat" / "a_rgb.png")
    assert open_image_source(f"imagefolder:{folder}", preprocess=_grey28()).digest([0]) != before
    shutil.copy(folder / "cat" / "b_grey.png", folder / "cat" / "z_copy.png")
    assert open_image_source(f"imagefolder:{folder}", preprocess=_grey28()).checksum != checksum


def test_preprocessing_follows_the_model(folder: Path) -> None:
    deit = load_model("deit-grc")  # 28x28 grey
    assert open_image_source(f"imagefolder:{folder}", preprocess=deit).image_shape == (1, 28, 28)
    r18 = load_model("timm:resnet18?num_classes=2&img_size=32", checkpoint="none")
    src = open_image_source(f"imagefolder:{folder}", preprocess=r18, num_workers=0)
    assert src.image_shape == (3, 32, 32) and src.spec.crop_pct == 0.95  # resnet18 pretrained_cfg
    x, _ = src.take([0, 3])
    with torch.no_grad():
        assert r18.module(x).shape == (2, 2)
    assert open_image_source(f"imagefolder:{folder}", preprocess=r18, img_size=48).image_shape == (3, 48, 48)
    assert open_image_source(f"imagefolder:{folder}").image_shape == (3, 224, 224)  # nothing said: DeiT-tiny's


def test_bad_folders_are_one_line(tmp_path: Path, folder: Path) -> None:
    (folder / "empty_class").mkdir()
    with pytest.raises(RobfiltError, match=r"class folder .*empty_class has no image files"):
        open_image_source(f"imagefolder:{folder}")
    loose = tmp_path / "loose"
    loose.mkdir()
    Image.new("RGB", (4, 4)).save(loose / "x.png")
    with pytest.raises(RobfiltError, match="holds images but no class sub-folders"):
        open_image_source(f"imagefolder:{loose}")
    with pytest.raises(RobfiltError, match="does not exist"):
        open_image_source(f"imagefolder:{tmp_path / 'nope'}")
    shutil.rmtree(folder / "empty_class")
    with pytest.raises(RobfiltError, match="outside"):
        open_image_source(f"imagefolder:{folder}").take([9])
    with pytest.raises(RobfiltError, match="num_workers"):
        open_image_source(f"imagefolder:{folder}", num_workers=-1)


def test_load_images_still_materialises_a_small_prefix(folder: Path) -> None:
    (folder / "dog" / "g_corrupt.png").unlink()
    (folder / "dog" / "h_truncated.jpg").unlink()
    data = load_images(f"imagefolder:{folder}", n_max=4, img_size=16, in_chans=1)
    assert data.x.shape == (4, 1, 16, 16) and torch.bincount(data.y).tolist() == [2, 2]
    assert data.digest(torch.arange(4)) == data.checksum
