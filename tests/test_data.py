"""Bundled data, loaders, tokenizers and LM batching (no network, a few seconds)."""

from __future__ import annotations

import gzip
import json
import shutil
import socket
import struct
from pathlib import Path

import numpy as np
import pytest
import torch

from robustbench_filters.core.errors import ChecksumError, RobfiltError
from robustbench_filters.data import (
    BPETokenizer,
    CharTokenizer,
    ImageData,
    asset_path,
    contiguous_split,
    encode_corpus,
    eval_windows,
    get_batch,
    load_checksums,
    load_images,
    load_stopwords,
    load_text,
    load_tokenizer,
    stratified_prefix,
    train_tokenizer,
)
from robustbench_filters.data import assets as assets_mod

FMNIST_CLASSES = [
    "T-shirt/top",
    "Trouser",
    "Pullover",
    "Dress",
    "Coat",
    "Sandal",
    "Shirt",
    "Sneaker",
    "Bag",
    "Ankle boot",
]
SMALL_TEXT = "It is a truth universally acknowledged, that a single man in possession\nof a good fortune.\n\n" * 20


def _one_line(e: pytest.ExceptionInfo[BaseException]) -> str:
    msg = str(e.value)
    assert "\n" not in msg
    return msg


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise OSError("network disabled in tests")

    monkeypatch.setattr(socket.socket, "connect", refuse)


@pytest.fixture
def asset_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private copy of the bundled assets that the loaders use instead of the installed ones."""
    root = tmp_path / "assets"
    shutil.copytree(assets_mod.ASSETS_DIR, root)
    monkeypatch.setattr(assets_mod, "ASSETS_DIR", root)
    return root


# ------------------------------------------------------------------------------------------ bundled images
@pytest.mark.parametrize("split", ["train", "test"])
def test_bundled_images_documented_shape_range_and_strata(split: str, no_network: None) -> None:
    d = load_images("fashion-mnist", split)
    per_class = {"train": (1500, 2000), "test": (200,)}[split]
    assert isinstance(d, ImageData)
    assert d.x.dtype == torch.float32 and d.y.dtype == torch.int64
    assert d.x.shape[1:] == (1, 28, 28) and d.image_shape == (1, 28, 28)
    assert float(d.x.min()) == 0.0 and float(d.x.max()) == 1.0
    assert d.classes == FMNIST_CLASSES and d.num_classes == 10
    counts = torch.bincount(d.y, minlength=10)
    assert len(set(counts.tolist())) == 1 and int(counts[0]) in per_class
    assert len(d) == 10 * int(counts[0])
    assert d.name == "fashion-mnist" and d.split == split
    assert len(d.checksum) == 64


def test_bundled_train_and_test_are_disjoint() -> None:
    train, test = load_images(split="train"), load_images(split="test")
    seen = {row.numpy().tobytes() for row in (train.x * 255).round().to(torch.uint8)}
    assert not any(row.numpy().tobytes() in seen for row in (test.x * 255).round().to(torch.uint8))


def test_checksum_identifies_examples_and_n_max_keeps_strata() -> None:
    a, b = load_images(), load_images()
    assert a.checksum == b.checksum
    sub = load_images(n_max=50)
    assert len(sub) == 50 and sub.checksum != a.checksum
    assert torch.bincount(sub.y, minlength=10).tolist() == [5] * 10
    # the subset is a prefix-in-order selection of the full split
    assert torch.equal(sub.x[0], a.x[int(stratified_prefix(a.y, 50)[0])])


def test_stratified_prefix_balances_and_keeps_order() -> None:
    y = np.array([0, 0, 0, 1, 0, 2, 1, 2])
    idx = stratified_prefix(y, 4)
    assert idx.tolist() == [0, 1, 3, 5]
    assert stratified_prefix(y, None).tolist() == list(range(8))
    assert stratified_prefix(y, 100).tolist() == list(range(8))


# ------------------------------------------------------------------------------------------- bundled text
def test_bundled_text_splits_non_empty_and_disjoint() -> None:
    texts = {s: load_text("austen", s) for s in ("train", "valid", "test")}
    assert len(texts["train"]) > 3_000_000
    assert all(len(t) > 100_000 for t in texts.values())
    assert load_text("austen", "val") == texts["valid"]

    def paragraphs(t: str) -> set[str]:
        return {p.strip() for p in t.split("\n\n") if len(p.strip()) > 200}

    train_p = paragraphs(texts["train"])
    assert not train_p & paragraphs(texts["valid"])
    assert not train_p & paragraphs(texts["test"])
    assert not paragraphs(texts["valid"]) & paragraphs(texts["test"])


def test_checksums_cover_every_asset_file() -> None:
    sums = load_checksums()
    root = assets_mod.ASSETS_DIR
    on_disk = {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file() and p.name != "checksums.json"}
    assert set(sums) == on_disk
    assert sum((root / n).stat().st_size for n in on_disk) < 10_000_000
    for name in ("fashion_mnist/LICENSE", "fashion_mnist/README.md", "austen/LICENSE", "austen/README.md"):
        assert name in sums


# ------------------------------------------------------------------------------------------------- checksums
def _corrupt(path: Path) -> None:
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    path.write_bytes(bytes(raw))


def test_corrupted_image_asset_raises_checksum_error(asset_copy: Path) -> None:
    _corrupt(asset_copy / "fashion_mnist" / "test.npz")
    with pytest.raises(ChecksumError) as e:
        load_images("fashion-mnist", "test")
    msg = _one_line(e)
    assert "fashion_mnist/test.npz" in msg and "reinstall" in msg
    assert isinstance(e.value, RobfiltError)


def test_corrupted_text_asset_raises_checksum_error(asset_copy: Path) -> None:
    _corrupt(asset_copy / "austen" / "test.txt.gz")
    with pytest.raises(ChecksumError) as e:
        load_text("austen", "test")
    assert "austen/test.txt.gz" in _one_line(e)


def test_intact_copy_loads_and_missing_asset_is_reported(asset_copy: Path) -> None:
    assert load_text("austen", "valid")
    (asset_copy / "austen" / "valid.txt.gz").unlink()
    with pytest.raises(RobfiltError, match="missing"):
        asset_path("austen/valid.txt.gz")
    (asset_copy / "checksums.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(ChecksumError, match="checksums.json"):
        asset_path("austen/test.txt.gz")


# ---------------------------------------------------------------------------------------------- tokenizers
def test_char_tokenizer_round_trip_and_unk(tmp_path: Path) -> None:
    tok = CharTokenizer.train(SMALL_TEXT)
    ids = tok.encode(SMALL_TEXT)
    assert tok.decode(ids) == SMALL_TEXT
    assert tok.vocab_size == len(set(SMALL_TEXT)) + 1 and tok.unk_id == 0
    assert tok.encode("z") == [0] and tok.decode([0]) == "\ufffd"
    path = tok.save(tmp_path / "tokenizer.json")
    assert json.loads(path.read_text(encoding="utf-8"))["type"] == "char"
    again = load_tokenizer(path)
    assert isinstance(again, CharTokenizer) and again.encode(SMALL_TEXT) == ids
    assert CharTokenizer.load(path).vocab_size == tok.vocab_size


def test_bpe_tokenizer_round_trip_and_save(tmp_path: Path) -> None:
    tok = BPETokenizer.train(SMALL_TEXT, vocab_size=300)
    assert 257 < tok.vocab_size <= 300 and tok.unk_id == 0
    odd = "naïve £5 — tabs\tand  spaces\n\n😀 unseen"
    for text in (SMALL_TEXT, odd):
        assert tok.decode(tok.encode(text)) == text
    ids = tok.encode(SMALL_TEXT)
    assert len(ids) < len(SMALL_TEXT.encode())  # merges were learnt
    path = tok.save(tmp_path / "tokenizer.json")
    again = load_tokenizer(path)
    assert isinstance(again, BPETokenizer) and again.encode(SMALL_TEXT) == ids
    with pytest.raises(RobfiltError, match="bpe"):
        CharTokenizer.load(path)


def test_train_tokenizer_dispatch_and_bad_files(tmp_path: Path) -> None:
    assert isinstance(train_tokenizer("char", SMALL_TEXT), CharTokenizer)
    with pytest.raises(RobfiltError, match="Did you mean 'bpe'"):
        train_tokenizer("bpf", SMALL_TEXT)
    with pytest.raises(RobfiltError, match="does not exist"):
        load_tokenizer(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{", encoding="utf-8")
    with pytest.raises(RobfiltError, match="corrupted"):
        load_tokenizer(bad)
    bad.write_text(json.dumps({"type": "wordpiece"}), encoding="utf-8")
    with pytest.raises(RobfiltError, match="unknown type"):
        load_tokenizer(bad)
    bad.write_text(json.dumps({"type": "char", "vocab": ["a"]}), encoding="utf-8")
    with pytest.raises(RobfiltError, match="corrupted"):
        load_tokenizer(bad)


# ------------------------------------------------------------------------------------------------- LM data
def test_encode_corpus_and_get_batch_is_seeded_and_shifted() -> None:
    tok = CharTokenizer.train(SMALL_TEXT)
    data = encode_corpus(SMALL_TEXT, tok)
    assert data.dtype == torch.long and data.ndim == 1 and data.numel() == len(SMALL_TEXT)
    x1, y1 = get_batch(data, 16, 8, torch.Generator().manual_seed(0))
    x2, y2 = get_batch(data, 16, 8, torch.Generator().manual_seed(0))
    x3, _ = get_batch(data, 16, 8, torch.Generator().manual_seed(1))
    assert x1.shape == y1.shape == (8, 16) and x1.dtype == torch.long
    assert torch.equal(x1, x2) and torch.equal(y1, y2) and not torch.equal(x1, x3)
    assert torch.equal(x1[:, 1:], y1[:, :-1])
    ramp = torch.arange(20)
    x, y = get_batch(ramp, 5, 64, torch.Generator().manual_seed(0))
    assert torch.equal(y, x + 1) and int(y.max()) <= 19
    with pytest.raises(RobfiltError, match="block size"):
        get_batch(ramp, 20, 1)


def test_eval_windows_cover_the_split_once() -> None:
    data = torch.arange(103)
    x, y = eval_windows(data, 10)
    assert x.shape == (10, 10) and torch.equal(y, x + 1)
    assert torch.equal(x.flatten(), torch.arange(100))
    xs, _ = eval_windows(data, 10, n_max=3)
    assert xs.shape == (3, 10) and xs[0, 0] == 0 and xs[-1, 0] >= 60  # spread over the split
    assert torch.equal(eval_windows(data, 10, n_max=50)[0], x)


# ------------------------------------------------------------------------------------------------ stopwords
def test_stopwords_sanity() -> None:
    from robustbench_filters.data import STOPWORDS

    assert STOPWORDS is load_stopwords()
    assert 150 <= len(STOPWORDS) <= 200
    assert {"the", "and", "of", "she", "not", "don't"} <= STOPWORDS
    assert not {"elizabeth", "fortune", "truth"} & STOPWORDS
    assert all(w == w.lower() and w.strip() == w and w for w in STOPWORDS)


# ---------------------------------------------------------------------------------------------- bad inputs
def test_unknown_specs_suggest_close_matches(tmp_path: Path) -> None:
    with pytest.raises(RobfiltError) as e:
        load_images("fashion_mnst")
    assert "Did you mean 'fashion-mnist'" in _one_line(e)
    with pytest.raises(RobfiltError, match="Did you mean 'austen'"):
        load_text("austin")
    with pytest.raises(RobfiltError, match="imagefolder:"):
        load_images(str(tmp_path))
    with pytest.raises(RobfiltError, match="text:"):
        load_text(str(tmp_path))


def test_bad_splits_and_n_max() -> None:
    with pytest.raises(RobfiltError, match="train, test"):
        load_images("fashion-mnist", "valid")
    with pytest.raises(RobfiltError) as e:
        load_text("austen", "tset")
    assert "Did you mean 'test'" in _one_line(e)
    with pytest.raises(RobfiltError, match="n_max"):
        load_images(n_max=0)


def test_missing_paths(tmp_path: Path, no_network: None) -> None:
    with pytest.raises(RobfiltError, match="does not exist"):
        load_text(f"text:{tmp_path / 'nope.txt'}")
    with pytest.raises(RobfiltError, match="does not exist"):
        load_images(f"imagefolder:{tmp_path / 'nope'}")
    with pytest.raises(RobfiltError, match="does not exist"):
        load_images("cifar10", root=tmp_path / "nope")
    with pytest.raises(RobfiltError) as e:  # an empty root: no files, and no download without download=True
        load_images("cifar10", root=tmp_path)
    assert "download=True" in _one_line(e)


def test_empty_file_and_folder(tmp_path: Path) -> None:
    (tmp_path / "empty.txt").write_text("\n\n", encoding="utf-8")
    with pytest.raises(RobfiltError, match="empty"):
        load_text(f"text:{tmp_path / 'empty.txt'}")
    (tmp_path / "imgs").mkdir()
    with pytest.raises(RobfiltError, match="no images"):
        load_images(f"imagefolder:{tmp_path / 'imgs'}")
    folder = tmp_path / "wiki"
    folder.mkdir()
    (folder / "test.txt").write_text("", encoding="utf-8")
    with pytest.raises(RobfiltError, match="empty"):
        load_text(f"text:{folder}", "test")
    with pytest.raises(RobfiltError, match="wiki.train.tokens"):
        load_text(f"text:{folder}", "train")
    (tmp_path / "latin1.txt").write_bytes("caf\xe9 au lait\n".encode("latin-1"))
    with pytest.raises(RobfiltError, match="not UTF-8"):
        load_text(f"text:{tmp_path / 'latin1.txt'}", "train")


# ----------------------------------------------------------------------------------------- user text & data
def test_text_folder_layouts_and_single_file(tmp_path: Path) -> None:
    wiki = tmp_path / "wikitext"
    wiki.mkdir()
    for s in ("train", "valid", "test"):
        (wiki / f"wiki.{s}.tokens").write_text(f" = {s} = \n text of {s} \n", encoding="utf-8")
    assert load_text(f"text:{wiki}", "valid") == "= valid = \n text of valid"  # one article, a document
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "train.txt").write_text("train text", encoding="utf-8")
    assert load_text(f"text:{plain}", "train") == "train text"

    book = tmp_path / "book.txt"
    paras = [f"Paragraph {i} " + "word " * 20 for i in range(100)]
    book.write_text("\n\n".join(paras), encoding="utf-8")
    parts = [load_text(f"text:{book}", s) for s in ("train", "valid", "test")]
    assert all(p in [q.strip() for q in paras] for part in parts for p in part.split("\n\n"))  # none cut
    assert parts[1].startswith("Paragraph 9") and parts[2].startswith("Paragraph 9")
    assert [len(p) for p in parts] == pytest.approx([len(p) for p in contiguous_split(book.read_text())], rel=0.02)
    assert "\n\n".join(parts) == "\n\n".join(p.strip() for p in paras)


def test_contiguous_split_rule() -> None:
    text = "\n\n".join(f"p{i:03d}" for i in range(200))
    train, valid, test = contiguous_split(text)
    assert abs(len(train) / len(text) - 0.9) < 0.01
    assert "\n\n".join([train, valid, test]) == text
    assert contiguous_split("no breaks at all") == ("no breaks at a", "l", "l")  # no newline: cut mid-text


def _write_idx(path: Path, arr: np.ndarray, magic: int) -> None:
    header = struct.pack(">I", magic) + b"".join(struct.pack(">I", d) for d in arr.shape)
    with gzip.open(path, "wb") as f:
        f.write(header + arr.astype(np.uint8).tobytes())


def test_mnist_from_local_idx_files(tmp_path: Path, no_network: None) -> None:
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, (30, 28, 28), dtype=np.uint8)
    y = np.arange(30) % 10
    _write_idx(tmp_path / "t10k-images-idx3-ubyte.gz", x, 2051)
    _write_idx(tmp_path / "t10k-labels-idx1-ubyte.gz", y, 2049)
    d = load_images("mnist", "test", root=tmp_path, n_max=20)
    assert d.x.shape == (20, 1, 28, 28) and torch.bincount(d.y).tolist() == [2] * 10
    assert torch.equal((d.x[0, 0] * 255).round().to(torch.uint8), torch.from_numpy(x[0]))
    _write_idx(tmp_path / "t10k-labels-idx1-ubyte.gz", y[:5], 2049)
    with pytest.raises(RobfiltError, match="labels"):
        load_images("mnist", "test", root=tmp_path)


def test_imagefolder_with_timm_preprocessing(tmp_path: Path) -> None:
    from PIL import Image

    rng = np.random.default_rng(0)
    for split in ("train", "val"):
        for cls in ("cat", "dog"):
            (tmp_path / split / cls).mkdir(parents=True)
            for i in range(3):
                arr = rng.integers(0, 256, (40, 48, 3), dtype=np.uint8)
                Image.fromarray(arr).save(tmp_path / split / cls / f"{i}.png")
    cfg = {
        "input_size": (3, 32, 32),
        "interpolation": "bilinear",
        "crop_pct": 1.0,
        "mean": (0.5,) * 3,
        "std": (0.5,) * 3,
    }
    d = load_images(f"imagefolder:{tmp_path}", "val", preprocess=cfg, n_max=4)
    assert d.x.shape == (4, 3, 32, 32) and d.x.dtype == torch.float32
    assert float(d.x.min()) >= 0.0 and float(d.x.max()) <= 1.0  # not normalised
    assert d.classes == ["cat", "dog"] and torch.bincount(d.y).tolist() == [2, 2]
    with pytest.raises(RobfiltError, match="train, val"):
        load_images(f"imagefolder:{tmp_path}", "test", preprocess=cfg)
    (tmp_path / "val" / "dog" / "9.png").write_bytes(b"not a png")
    with pytest.raises(RobfiltError, match="9.png"):
        load_images(f"imagefolder:{tmp_path}", "val", preprocess=cfg)
    with pytest.raises(RobfiltError, match="timm model"):
        load_images(f"imagefolder:{tmp_path}", "train", preprocess="deit_tiny_patch16_2244")


def test_torchvision_sets_are_converted_to_nchw_unit_range(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import torchvision.datasets as tvd

    created: list[dict[str, object]] = []

    class FakeCIFAR10:  # stands in for files on disk: only the conversion path is under test
        classes = [f"c{i}" for i in range(10)]

        def __init__(self, root: str, train: bool, download: bool) -> None:
            created.append({"root": root, "train": train, "download": download})
            self.data = np.full((40, 32, 32, 3), 255, dtype=np.uint8)
            self.data[:, :, :, 0] = 0
            self.targets = [i % 10 for i in range(40)]

    monkeypatch.setattr(tvd, "CIFAR10", FakeCIFAR10)
    d = load_images("cifar10", "train", root=tmp_path, n_max=20)
    assert created == [{"root": str(tmp_path), "train": True, "download": False}]
    assert d.x.shape == (20, 3, 32, 32) and d.classes[0] == "c0"
    assert float(d.x[:, 0].max()) == 0.0 and float(d.x[:, 1:].min()) == 1.0
    assert torch.bincount(d.y).tolist() == [2] * 10
