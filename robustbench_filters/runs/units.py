"""Units of work and example selection: the two things that make a run resumable, shardable and repeatable.

A run is a list of :class:`Unit` (model x part x batch). Each unit is a deterministic function of the run's config
and its own identity (every random draw inside it is seeded from :func:`unit_seed`), so it can be computed by any
process, in any order, skipped on ``--resume``, and the merged rows are the same bytes.
"""

from __future__ import annotations

import hashlib
import re
import zlib
from dataclasses import dataclass

import numpy as np
import torch

from ..core.counts import example_count


@dataclass(frozen=True, order=True)
class Unit:
    """One unit of work; ordering is the merge order of its rows: model, then part, then batch."""

    model: int
    part: str
    batch: int

    @property
    def key(self) -> str:
        """The part-file name: ``m<model>-<part>-b<batch>``."""
        return f"m{self.model}-{self.part}-b{self.batch:04d}"

    @classmethod
    def from_key(cls, key: str) -> Unit | None:
        """The unit a part-file name stands for (None when ``key`` is not one)."""
        found = _KEY.match(key)
        return cls(int(found[1]), found[2], int(found[3])) if found else None


_KEY = re.compile(r"^m(\d+)-(.+)-b(\d{4,})$")


def unit_seed(*parts: object) -> int:
    """A stable 31-bit seed from a unit's identity (independent of Python's hash randomisation)."""
    return zlib.crc32("|".join(map(str, parts)).encode()) & 0x7FFFFFFF


def batch_slices(n: int, batch_size: int) -> list[slice]:
    """Consecutive batches of ``batch_size`` (the last one may be shorter)."""
    return [slice(i, min(i + batch_size, n)) for i in range(0, n, batch_size)]


def select_examples(total: int, n: int | None, seed: int, *, ordered: bool = True) -> torch.Tensor:
    """``n`` of ``total`` examples by a seeded permutation; sorted when ``ordered`` (the attack runs' convention).

    Every model of a run, and every run with the same seed and pool, sees the same examples, which is what
    makes paired comparisons possible. ``n`` follows :func:`example_count` (None: all; :class:`..core.counts.UpTo`: a cap).
    """
    n = example_count(total, n)
    perm = torch.randperm(total, generator=torch.Generator().manual_seed(seed))[:n]
    return perm.sort().values if ordered else perm


def ids_digest(ids: torch.Tensor) -> str:
    """A short hash of a selection of example ids (recorded in every run's config)."""
    return hashlib.sha256(ids.numpy().astype(np.int64).tobytes()).hexdigest()[:16]
