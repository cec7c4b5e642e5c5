"""Data: bundled real data (Fashion-MNIST subset, Jane Austen), external image/text sets, tokenizers.

Images are float32 in [0, 1] (N, C, H, W); text is a list of documents per split (:mod:`.documents`) or one str; LM data are int64 token tensors. Nothing
is downloaded unless a caller passes ``download=True``. Bundled files are verified against checksums.
"""

from __future__ import annotations

from typing import Any

from .adapters import DatasetSource, TensorSource
from .assets import ASSETS_DIR, asset_path, load_checksums, sha256_file, verify_assets
from .documents import DEFAULT_SPLIT, SPLIT_CHOICES, TEXT_DATASETS, Documents, load_documents, normalise_split
from .folder import FolderSource
from .hf import HFImageSource, load_hf_documents, load_hf_text
from .images import (
    IMAGE_DATASETS,
    IMAGE_SPLITS,
    ImageData,
    default_data_root,
    image_transform,
    load_images,
    stratified_prefix,
    tensor_checksum,
)
from .lm_data import encode_corpus, eval_windows, get_batch
from .preprocess import InputSpec, input_spec_of, resolve_input_spec
from .source import ImageSource
from .sources import open_image_source
from .splits import contiguous_split
from .stopwords import load_stopwords
from .text import TEXT_SPLITS, load_text
from .tokenizers import TOKENIZER_KINDS, BPETokenizer, CharTokenizer, Tokenizer, load_tokenizer, train_tokenizer

__all__ = [
    "ASSETS_DIR",
    "DEFAULT_SPLIT",
    "SPLIT_CHOICES",
    "IMAGE_DATASETS",
    "IMAGE_SPLITS",
    "STOPWORDS",
    "TEXT_DATASETS",
    "TEXT_SPLITS",
    "TOKENIZER_KINDS",
    "BPETokenizer",
    "CharTokenizer",
    "DatasetSource",
    "Documents",
    "FolderSource",
    "HFImageSource",
    "ImageData",
    "ImageSource",
    "InputSpec",
    "TensorSource",
    "Tokenizer",
    "asset_path",
    "contiguous_split",
    "default_data_root",
    "encode_corpus",
    "eval_windows",
    "get_batch",
    "image_transform",
    "input_spec_of",
    "load_checksums",
    "load_documents",
    "load_hf_documents",
    "load_hf_text",
    "load_images",
    "load_stopwords",
    "load_text",
    "load_tokenizer",
    "normalise_split",
    "open_image_source",
    "resolve_input_spec",
    "sha256_file",
    "stratified_prefix",
    "tensor_checksum",
    "train_tokenizer",
    "verify_assets",
]


def __getattr__(name: str) -> Any:
    # STOPWORDS is read from its asset on first use, not at import (PEP 562).
    if name == "STOPWORDS":
        return load_stopwords()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
