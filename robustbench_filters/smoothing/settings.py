"""The settings a smoothed classifier is sampled and certified with, as one record the engine functions take.

The sampler, CERTIFY, PREDICT, the SmoothAdv attack and the soundness checks all need the same few numbers (draws,
failure probability, seed, noise samples per forward pass, ...). They take them as one :class:`Sampling`, built
from a certify run's config (:meth:`Sampling.of`), so each number has one name and one default: its config
field's (:class:`robustbench_filters.configs.CertifyConfig`, where it is validated too).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Self

from ..configs import CertifyConfig


@dataclass(frozen=True)
class Sampling:
    """How a Gaussian-smoothed classifier is sampled (see :mod:`.sampler`, :mod:`.certify`, :mod:`.attack`).

    ``batch`` is the config's ``noise_batch``: noise samples per forward pass (batching never changes a count).
    ``num_classes`` is the base classifier's class count (None: read from its first outputs), and
    ``noise_device`` where the noise is drawn (None: the model's device, faster on a GPU but then the noise
    differs between CPU and GPU runs; ``"cpu"``: the same noise on every machine).
    """

    n0: int
    n: int
    alpha: float
    seed: int
    batch: int
    attack_steps: int
    attack_draws: int
    num_classes: int | None = None
    noise_device: str | None = "cpu"

    @classmethod
    def of(cls, config: CertifyConfig, num_classes: int | None = None) -> Self:
        """The settings of a certify run (for a model of ``num_classes`` classes)."""
        return cls(
            n0=config.n0, n=config.n, alpha=config.alpha, seed=int(config.seed), batch=config.noise_batch,
            attack_steps=config.attack_steps, attack_draws=config.attack_draws, num_classes=num_classes,
        )  # fmt: skip

    @classmethod
    def defaults(cls, **changes: Any) -> Self:
        """A certify run's default settings (its config fields' defaults), with ``changes``."""
        default = {f.name: f.default for f in dataclasses.fields(CertifyConfig)}
        base = {name: default[name] for name in ("n0", "n", "alpha", "seed", "attack_steps", "attack_draws")}
        return cls(**{**base, "batch": default["noise_batch"], **changes})

    def replace(self, **changes: Any) -> Self:
        return dataclasses.replace(self, **changes)


__all__ = ["Sampling"]
