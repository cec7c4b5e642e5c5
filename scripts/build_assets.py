"""Regenerate the bundled data assets in ``robustbench_filters/assets/`` from their raw Debian sources.

Why: the default runs, the tests and CI must use real data with no network. The assets are small subsets
of public, permissively licensed data, rebuilt byte for byte by this script (fixed seed, fixed gzip/zip
timestamps), and ``checksums.json`` lets the loaders detect a corrupted or edited file.

Raw sources (both install offline from Debian):

* Fashion-MNIST, Debian ``dataset-fashion-mnist`` (MIT, Zalando SE)::

      apt-get install -y dataset-fashion-mnist        # -> /usr/share/datasets/fashion-mnist/*.gz

* Jane Austen's six novels, Debian ``r-cran-janeaustenr`` (MIT; the novels are public domain). Do not
  ``apt-get install`` it (it pulls R); extract the .deb instead::

      cd /tmp && mkdir -p austen && cd austen && apt-get download r-cran-janeaustenr \\
          && dpkg-deb -x r-cran-janeaustenr_*.deb x

Usage (from the repository root)::

    .venv/bin/python scripts/build_assets.py                       # default source paths above
    .venv/bin/python scripts/build_assets.py --fmnist DIR --austen DIR/usr/lib/R/site-library/janeaustenr
    .venv/bin/python scripts/build_assets.py --check               # rebuild in a temp dir, compare checksums

What it writes (total budget ``--budget-mb``, default 10 MB):

* ``fashion_mnist/{train,test}.npz``: a stratified subset: 2000 train images per class if everything fits the
  budget, else 1500; 200 test images per class. Images uint8 (N, 28, 28), labels int64, class names.
  Within each class the images are drawn with ``numpy.random.default_rng([SEED, split])`` and the subset is
  then shuffled with the same generator. Plus ``LICENSE`` and ``README.md``.
* ``austen/{train,valid,test}.txt.gz``: per novel, contiguous 90/5/5 character ranges cut at the next
  paragraph break (``robustbench_filters/data/splits.py``); the six parts of each split are joined in
  publication order. Plus ``LICENSE`` and ``README.md``.
* ``stopwords.txt``: the English stopword list below, one word per line.
* ``checksums.json``: sha256 of every other file under ``assets/``.

After a rebuild, commit the assets together with ``checksums.json``.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import importlib.util
import io
import json
import logging
import shutil
import struct
import sys
import tempfile
import zipfile
import zlib
from pathlib import Path

import numpy as np

from robustbench_filters.data.images import FASHION_MNIST_CLASSES

log = logging.getLogger("build_assets")

REPO = Path(__file__).resolve().parent.parent
ASSETS = REPO / "robustbench_filters" / "assets"
FMNIST_DIR = Path("/usr/share/datasets/fashion-mnist")
AUSTEN_DIR = Path("/tmp/austen/x/usr/lib/R/site-library/janeaustenr")

SEED = 20250612
SPLIT_IDS = {"train": 0, "test": 1}
PER_CLASS_TRAIN = (2000, 1500)  # first that fits the budget wins
PER_CLASS_TEST = 200
FMNIST_CLASSES = FASHION_MNIST_CLASSES  # one list, shared with the loader
# Publication order (as janeaustenr's austen_books()).
NOVELS = {
    "sensesensibility": "Sense and Sensibility (1811)",
    "prideprejudice": "Pride and Prejudice (1813)",
    "mansfieldpark": "Mansfield Park (1814)",
    "emma": "Emma (1815)",
    "northangerabbey": "Northanger Abbey (1817)",
    "persuasion": "Persuasion (1817)",
}
NOVEL_SEPARATOR = "\n\n\n\n"
FIXED_TIME = (1980, 1, 1, 0, 0, 0)

# Function words that carry little content: the usual English list (articles, pronouns, auxiliaries,
# prepositions, conjunctions, common adverbs and contracted forms), written for this project.
STOPWORDS = """
a about above after again against ain all am an and any are aren aren't as at be because been before being
below between both but by can couldn couldn't d did didn didn't do does doesn doesn't doing don don't down
during each few for from further had hadn hadn't has hasn hasn't have haven haven't having he her here hers
herself him himself his how i if in into is isn isn't it it's its itself just ll m ma me mightn mightn't more
most mustn mustn't my myself needn needn't no nor not now o of off on once only or other our ours ourselves
out over own re s same shan shan't she she's should should've shouldn shouldn't so some such t than that
that'll the their theirs them themselves then there these they this those through to too under until up ve
very was wasn wasn't we were weren weren't what when where which while who whom why will with won won't
wouldn wouldn't y you you'd you'll you're you've your yours yourself yourselves
"""


# ----------------------------------------------------------------------------------------------- helpers
def sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_npz(path: Path, **arrays: np.ndarray) -> None:
    """``np.savez_compressed`` with fixed zip timestamps, so rebuilding gives the same bytes (and sha256)."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as zf:
        for name, arr in arrays.items():
            buf = io.BytesIO()
            np.lib.format.write_array(buf, np.ascontiguousarray(arr), allow_pickle=False)
            info = zipfile.ZipInfo(f"{name}.npy", date_time=FIXED_TIME)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            zf.writestr(info, buf.getvalue(), compresslevel=9)


def write_gzip_text(path: Path, text: str) -> None:
    """UTF-8 text, gzip level 9, mtime 0 and no file name in the header (reproducible bytes)."""
    with open(path, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=9, mtime=0) as gz:
        gz.write(text.encode("utf-8"))


def load_splits_module():
    """Load data/splits.py by path: the split rule has one definition, and this avoids importing torch."""
    path = REPO / "robustbench_filters" / "data" / "splits.py"
    spec = importlib.util.spec_from_file_location("_robfilt_splits", path)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# ----------------------------------------------------------------------------------------- Fashion-MNIST
def read_idx(path: Path, offset: int) -> np.ndarray:
    with gzip.open(path) as f:
        return np.frombuffer(f.read(), np.uint8, offset=offset)


def read_fmnist(src: Path, split: str) -> tuple[np.ndarray, np.ndarray]:
    prefix = "train" if split == "train" else "t10k"
    x = read_idx(src / f"{prefix}-images-idx3-ubyte.gz", 16).reshape(-1, 28, 28)
    y = read_idx(src / f"{prefix}-labels-idx1-ubyte.gz", 8).astype(np.int64)
    if len(x) != len(y):
        raise SystemExit(f"{src}: {len(x)} images but {len(y)} labels")
    return x, y


def stratified_subset(x: np.ndarray, y: np.ndarray, per_class: int, split: str) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng([SEED, SPLIT_IDS[split]])
    picks = []
    for c in range(len(FMNIST_CLASSES)):
        members = np.flatnonzero(y == c)
        if len(members) < per_class:
            raise SystemExit(f"class {c} has {len(members)} {split} images, need {per_class}")
        picks.append(rng.permutation(members)[:per_class])
    idx = np.concatenate(picks)
    idx = idx[rng.permutation(len(idx))]
    return np.ascontiguousarray(x[idx]), y[idx].astype(np.int64)


def build_fmnist(src: Path, out: Path, per_class_train: int) -> dict[str, int]:
    out.mkdir(parents=True, exist_ok=True)
    counts = {}
    for split, per_class in (("train", per_class_train), ("test", PER_CLASS_TEST)):
        x, y = stratified_subset(*read_fmnist(src, split), per_class, split)
        write_npz(out / f"{split}.npz", x=x, y=y, classes=np.array(FMNIST_CLASSES))
        counts[split] = len(y)
        log.info("fashion_mnist/%s.npz: %d images (%d per class)", split, len(y), per_class)
    return counts


def fmnist_docs(out: Path, copyright_file: Path, counts: dict[str, int]) -> None:
    text = copyright_file.read_text(encoding="utf-8") if copyright_file.exists() else ""
    if "Zalando" not in text:
        raise SystemExit(f"{copyright_file}: Fashion-MNIST copyright text not found; install dataset-fashion-mnist")
    (out / "LICENSE").write_text(
        "Fashion-MNIST subset bundled with robustbench_filters.\n"
        "Copyright (c) 2017 Zalando SE, https://tech.zalando.com -- MIT (Expat) license.\n"
        "Copied from the Debian package dataset-fashion-mnist (/usr/share/doc/dataset-fashion-mnist/copyright):\n\n"
        + text,
        encoding="utf-8",
    )
    per_train, per_test = counts["train"] // 10, counts["test"] // 10
    (out / "README.md").write_text(
        f"""# Fashion-MNIST subset

Source: Fashion-MNIST (Xiao, Rasul, Vollgraf 2017, https://github.com/zalandoresearch/fashion-mnist),
from the Debian package `dataset-fashion-mnist` (original gzipped IDX files). License: MIT, Zalando SE (see LICENSE).

| file | images | per class | taken from |
|---|---|---|---|
| `train.npz` | {counts["train"]} | {per_train} | the 60,000 official training images |
| `test.npz` | {counts["test"]} | {per_test} | the 10,000 official test images |

Subset rule: for each class c = 0..9, `numpy.random.default_rng([{SEED}, s])` (s = 0 for train, 1 for test)
permutes the indices of class c and keeps the first {per_train} (train) or {per_test} (test); the kept images
are then shuffled with the same generator. Train and test come from the official splits, so they are disjoint.

Arrays (load with `numpy.load(path, allow_pickle=False)`): `x` uint8 (N, 28, 28), 0 = background;
`y` int64 (N,); `classes` the 10 class names in label order: {", ".join(FMNIST_CLASSES)}.

Regenerate with `python scripts/build_assets.py` (byte-identical output).
""",
        encoding="utf-8",
    )


# ------------------------------------------------------------------------------------------------ Austen
class _RReader:
    """Minimal reader for R's XDR serialisation: enough for janeaustenr's lazy-load data (notes/data.md)."""

    def __init__(self, b: bytes) -> None:
        self.b, self.i, self.refs = b, 0, []

    def int(self) -> int:
        v = struct.unpack(">i", self.b[self.i : self.i + 4])[0]
        self.i += 4
        return v

    def read(self):
        if self.b[:2] != b"X\n":
            raise SystemExit("not an R XDR serialisation")
        self.i = 2
        version = self.int()
        self.int()
        self.int()
        if version == 3:  # the v3 header carries an encoding name
            n = self.int()
            self.i += n
        return self.item()

    def item(self):
        fl = self.int()
        t, attr, tag = fl & 0xFF, fl & 512, fl & 1024
        if t == 254:  # NULL
            return None
        if t == 9:  # CHARSXP
            n = self.int()
            if n < 0:
                return None
            v = self.b[self.i : self.i + n].decode("utf-8")
            self.i += n
            return v
        if t == 1:  # symbol
            v = self.item()
            self.refs.append(v)
            return v
        if t == 255:  # reference
            k = fl >> 8
            return self.refs[(k or self.int()) - 1]
        if t == 2:  # pairlist (attributes)
            if attr:
                self.item()
            k = self.item() if tag else None
            car = self.item()
            return [(k, car)] + (self.item() or [])
        if t in (16, 19):  # character vector / list
            out = [self.item() for _ in range(self.int())]
        elif t == 14:
            n = self.int()
            out = list(struct.unpack(f">{n}d", self.b[self.i : self.i + 8 * n]))
            self.i += 8 * n
        elif t in (10, 13):
            n = self.int()
            out = list(struct.unpack(f">{n}i", self.b[self.i : self.i + 4 * n]))
            self.i += 4 * n
        else:
            raise SystemExit(f"unsupported R type {t}")
        if attr:
            a = dict(self.item())
            if "names" in a:
                return dict(zip(a["names"], out, strict=True))
        return out


def read_austen(pkg_dir: Path) -> dict[str, str]:
    idx = _RReader(gzip.decompress((pkg_dir / "data" / "Rdata.rdx").read_bytes())).read()
    rdb = (pkg_dir / "data" / "Rdata.rdb").read_bytes()
    out = {}
    for name, (off, ln) in idx["variables"].items():
        blob = rdb[int(off) : int(off) + int(ln)]  # 4-byte length + zlib stream
        out[name] = "\n".join(x or "" for x in _RReader(zlib.decompress(blob[4:])).read())
    missing = set(NOVELS) - set(out)
    if missing:
        raise SystemExit(f"{pkg_dir}: novels missing from the R data: {sorted(missing)}")
    return out


def build_austen(pkg_dir: Path, out: Path) -> dict[str, dict[str, int]]:
    splits = load_splits_module()
    novels = read_austen(pkg_dir)
    parts: dict[str, list[str]] = {s: [] for s in splits.SPLITS}
    stats: dict[str, dict[str, int]] = {}
    for name in NOVELS:
        pieces = splits.contiguous_split(novels[name].strip("\n"), splits.FRACTIONS)
        stats[name] = {s: len(p) for s, p in zip(splits.SPLITS, pieces, strict=True)}
        for s, p in zip(splits.SPLITS, pieces, strict=True):
            if not p:
                raise SystemExit(f"{name}: empty {s} part")
            parts[s].append(p)
    out.mkdir(parents=True, exist_ok=True)
    for s in splits.SPLITS:
        text = NOVEL_SEPARATOR.join(parts[s]) + "\n"
        write_gzip_text(out / f"{s}.txt.gz", text)
        log.info("austen/%s.txt.gz: %d characters", s, len(text))
    return stats


def austen_docs(out: Path, copyright_file: Path, stats: dict[str, dict[str, int]]) -> None:
    text = copyright_file.read_text(encoding="utf-8") if copyright_file.exists() else ""
    if "Julia Silge" not in text:
        raise SystemExit(f"{copyright_file}: janeaustenr copyright text not found; extract r-cran-janeaustenr")
    (out / "LICENSE").write_text(
        "Jane Austen's novels are in the public domain.\n"
        "The text was taken from the R package janeaustenr (Copyright 2016-2017 Julia Silge, MIT license),\n"
        "via the Debian package r-cran-janeaustenr. Its copyright file follows:\n\n" + text,
        encoding="utf-8",
    )
    rows = "\n".join(
        f"| {title} | {stats[name]['train']:,} | {stats[name]['valid']:,} | {stats[name]['test']:,} |"
        for name, title in NOVELS.items()
    )
    (out / "README.md").write_text(
        f"""# Jane Austen corpus

Source: the six novels in the R package janeaustenr (Julia Silge, MIT; the novels are public domain),
from the Debian package `r-cran-janeaustenr` (R lazy-load data, read with a small XDR reader). Lines of each
novel are joined with `\\n`, so the original line breaks and blank-line paragraphs are kept.

Split rule (deterministic, no randomness): each novel is cut into three contiguous character ranges of about
90% / 5% / 5% (train / valid / test). Each cut moves forward to the next paragraph break (blank line);
see `robustbench_filters/data/splits.py`. The parts of one split are joined in publication order, separated
by three blank lines. Files are UTF-8, gzip-compressed; each ends with a newline.

| novel | train chars | valid chars | test chars |
|---|---|---|---|
{rows}

Regenerate with `python scripts/build_assets.py` (byte-identical output).
""",
        encoding="utf-8",
    )


# ------------------------------------------------------------------------------------------------ driver
def write_stopwords(path: Path) -> int:
    words = sorted(set(STOPWORDS.split()))
    if any(w != w.lower() for w in words):
        raise SystemExit("stopwords must be lowercase")
    path.write_text("\n".join(words) + "\n", encoding="utf-8")
    log.info("stopwords.txt: %d words", len(words))
    return len(words)


def write_checksums(root: Path, exclude: set[str] = frozenset()) -> dict[str, str]:
    """checksums.json: every file this script wrote (``exclude``: the user's files it must not claim)."""
    files = sorted(
        p for p in root.rglob("*")
        if p.is_file() and p.name != "checksums.json" and p.relative_to(root).as_posix() not in exclude
    )  # fmt: skip
    sums = {p.relative_to(root).as_posix(): sha256_file(p) for p in files}
    doc = {"format": "robfilt-assets", "schema": 1, "algorithm": "sha256", "files": sums}
    (root / "checksums.json").write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    return sums


def total_size(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


OWNED = ("austen", "fashion_mnist", "stopwords.txt", "checksums.json")  # what this script writes under --out


def prepare_out(out: Path, overwrite: bool = False) -> set[str]:
    """Check --out before anything is removed (the rule of robustbench_filters/runs/outfolder.py), and return the
    files a user put there, which the new checksums must not claim.

    ``checksums.json`` lists every file an earlier build wrote. A file it does not list is refused unless
    ``overwrite`` (it is then kept); one inside what this script replaces (austen/, fashion_mnist/, ...) is
    refused always, since replacing those folders would destroy it.
    """
    from robustbench_filters.runs.outfolder import all_entries

    if not out.is_dir():
        return set()
    try:
        doc = json.loads((out / "checksums.json").read_text())
        listed = set(doc["files"]) if doc.get("format") == "robfilt-assets" else set()
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        listed = set()
    foreign = [f for f in all_entries(out) if f not in listed and f != "checksums.json"]
    blocking = [f for f in foreign if f.split("/")[0] in OWNED]
    if blocking:
        raise SystemExit(f"--out {out} holds {blocking[0]!r}, which this script did not write and would replace; "
                         "move it away or pick another --out (nothing was changed).")  # fmt: skip
    if foreign and not overwrite:
        raise SystemExit(f"--out {out} holds {foreign[0]!r}, which this script did not write; move it away, pick "
                         "another --out, or pass --overwrite to build beside it (it is kept).")  # fmt: skip
    return set(foreign)


def build(out: Path, fmnist: Path, austen: Path, budget: int, overwrite: bool = False) -> None:
    for need, hint in (
        (fmnist / "train-images-idx3-ubyte.gz", "apt-get install dataset-fashion-mnist or pass --fmnist"),
        (austen / "data" / "Rdata.rdb", "extract r-cran-janeaustenr (see this script's docstring) or pass --austen"),
    ):
        if not need.exists():
            raise SystemExit(f"missing raw source {need}: {hint}")
    keep = prepare_out(out, overwrite)  # austen/ and fashion_mnist/ now hold nothing but this script's files
    out.mkdir(parents=True, exist_ok=True)
    for old in ("austen", "fashion_mnist"):  # only what this script owns; other assets stay
        shutil.rmtree(out / old, ignore_errors=True)
    stats = build_austen(austen, out / "austen")
    # <x>/usr/lib/R/site-library/janeaustenr -> <x>/usr/share/doc/r-cran-janeaustenr/copyright
    austen_docs(out / "austen", austen.resolve().parents[3] / "share/doc/r-cran-janeaustenr/copyright", stats)
    write_stopwords(out / "stopwords.txt")
    for per_class in PER_CLASS_TRAIN:
        shutil.rmtree(out / "fashion_mnist", ignore_errors=True)
        counts = build_fmnist(fmnist, out / "fashion_mnist", per_class)
        # /usr/share/datasets/fashion-mnist -> /usr/share/doc/dataset-fashion-mnist/copyright
        fmnist_docs(out / "fashion_mnist", fmnist.resolve().parents[1] / "doc/dataset-fashion-mnist/copyright", counts)
        size = total_size(out)
        if size <= budget:
            break
        log.info("total %d bytes > budget %d with %d train images per class; trying fewer", size, budget, per_class)
    else:
        raise SystemExit(f"assets are {size} bytes, over the {budget}-byte budget even with the smallest subset")
    sums = write_checksums(out, keep)
    log.info("wrote %d files, %d bytes in total, to %s", len(sums) + 1, total_size(out), out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--fmnist", type=Path, default=FMNIST_DIR, help="folder with the Fashion-MNIST *.gz IDX files")
    ap.add_argument("--austen", type=Path, default=AUSTEN_DIR, help="the extracted janeaustenr package folder")
    ap.add_argument(
        "--out",
        type=Path,
        default=ASSETS,
        help="output folder (its austen/ and fashion_mnist/, as checksums.json lists them, are replaced)",
    )
    ap.add_argument("--budget-mb", type=float, default=10.0, help="size budget for all assets, in MB (10^6 bytes)")
    ap.add_argument("--check", action="store_true", help="rebuild in a temp dir and compare with --out's checksums")
    ap.add_argument("--overwrite", action="store_true", help="build into an --out holding other files (kept)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    budget = int(args.budget_mb * 1e6)
    if not args.check:
        build(args.out, args.fmnist, args.austen, budget, overwrite=args.overwrite)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        build(Path(tmp) / "assets", args.fmnist, args.austen, budget)
        fresh = json.loads((Path(tmp) / "assets" / "checksums.json").read_text())
    current = json.loads((args.out / "checksums.json").read_text())
    if fresh != current:
        diff = sorted(set(fresh["files"].items()) ^ set(current["files"].items()))
        log.error("assets differ from a fresh build: %s", sorted({k for k, _ in diff}))
        return 1
    log.info("assets match a fresh build")
    return 0


if __name__ == "__main__":
    sys.exit(main())
