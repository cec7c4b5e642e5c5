"""What a measurement needs from an image data set: its size, its classes, and the examples it selects.

Measurements never hold a whole data set. They ask for the ``n`` examples the run selected, a batch at a
time (:meth:`ImageSource.take`), so memory grows with the batch, not with the folder. A fully materialised
:class:`~robustbench_filters.data.images.ImageData` is one implementation; streaming folders and user
datasets are others.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import torch


@runtime_checkable
class ImageSource(Protocol):
    """A labelled image pool in [0, 1]; examples are addressed by their index in the pool."""

    name: str
    classes: list[str]

    def __len__(self) -> int:
        """Number of examples in the pool (the run selects its examples among them)."""

    @property
    def checksum(self) -> str:
        """A digest of the whole pool's identity (files, labels and preprocessing, or tensors)."""

    @property
    def image_shape(self) -> tuple[int, int, int]:
        """(C, H, W) of every example after preprocessing."""

    def take(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The examples ``ids`` as float32 (len(ids), C, H, W) images in [0, 1] and int64 labels."""

    def digest(self, ids: torch.Tensor) -> str:
        """sha256 of exactly the examples ``ids`` (what a run measured); equal iff those examples are equal."""
