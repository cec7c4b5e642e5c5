"""Certificates for the noise-trained zoo: certify a checkpoint and record the numbers in its card.

The noise-trained zoo (``robustbench_filters/zoo/<name>-micro-sigma0.25``, loaded with
``create_model(name, checkpoint="zoo:sigma0.25")``) holds base classifiers trained with Gaussian data
augmentation. Their cards carry a ``certification`` block: certified accuracy of the smoothed classifier at
:data:`CARD_RADII` on a stated, stratified prefix of the bundled test split, with n0/n/alpha, intervals and wall
time, so ``robfilt models list`` can show them and anyone can rerun the exact measurement.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

import torch

from ..configs import CertifyConfig
from ..core.errors import CheckpointError
from ..core.io import atomic_write_text
from ..data.images import load_images, stratified_prefix
from ..models.checkpoint import CARD, ZOO_NOISE_SIGMAS, load_checkpoint, zoo_path
from ..runs.runner import run
from .run import CERTIFICATE, Certify
from .settings import Sampling

log = logging.getLogger(__name__)

CARD_RADII = (0.0, 0.25, 0.5)
CARD_N_EXAMPLES = 500  # +-4.4 points (95% CI half-width) at worst; 550k forward passes per model


def metric_key(radius: float) -> str:
    """``certified_acc_r0.25``: the card metric for certified accuracy at ``radius``."""
    return f"certified_acc_r{radius:g}"


#: how the cards were certified: CERTIFY's draws, failure probability and seed as a certify run's defaults, noise
#: samples per forward pass 1024, examples per unit of the run 128
CARD_SAMPLING = Sampling.defaults(batch=1024)
CARD_BATCH_SIZE = 128


def rebuild_command(name: str, sigma: float, n_examples: int, s: Sampling) -> str:
    """The command that remeasures a card's certification block (``scripts/certify_zoo.py``)."""
    return (
        f"python scripts/certify_zoo.py --model {name} --noise-sigma {sigma:g} --n-examples {n_examples} "
        f"--n0 {s.n0} --n {s.n} --alpha {s.alpha:g} --seed {s.seed}"
    )


def certify_checkpoint(
    folder: str | Path,
    *,
    n_examples: int = CARD_N_EXAMPLES,
    sampling: Sampling = CARD_SAMPLING,
    batch_size: int = CARD_BATCH_SIZE,
    radii: tuple[float, ...] = CARD_RADII,
    write: bool = True,
    out: str | Path | None = None,
) -> dict[str, Any]:
    """Certify a noise-trained image checkpoint at its training sigma and (``write``) store the block in its card.

    The certificates are a ``certify`` run like any other (:func:`robustbench_filters.runs.runner.run`, the same
    measurement as ``robfilt certify``), kept in ``out`` when given (resumable) and in a temporary folder otherwise;
    only the examples differ: the card's stratified prefix instead of a seeded selection.

    ``sampling`` gives CERTIFY's draws, failure probability, seed and noise samples per forward pass
    (:data:`CARD_SAMPLING`), ``batch_size`` the examples of a unit of the run.

    The examples are the stratified prefix of ``n_examples`` images of the test split of the checkpoint's
    training data; the noise of example i is seeded by (seed, sigma, i, phase), so the numbers are reproducible.
    """
    folder = Path(folder)
    load_checkpoint(folder)  # verifies the weights against the card before anything is measured
    card = json.loads((folder / CARD).read_text())
    recipe = card.get("recipe") or {}
    sigma = float(recipe.get("noise_sigma") or 0.0)
    if sigma <= 0:
        raise CheckpointError(
            f"{folder} was not trained with noise (no recipe.noise_sigma); retrain it with robfilt train --noise-sigma SIGMA."
        )
    data = load_images(recipe.get("data", "fashion-mnist"), split="test")
    ids = stratified_prefix(data.y, n_examples)
    config = CertifyConfig(
        models=(str(card["name"]),), checkpoint=str(folder), size=str(card.get("size", "micro")), data=data.name,
        sigmas=(sigma,), n0=sampling.n0, n=sampling.n, alpha=sampling.alpha, radii=tuple(radii), attack_examples=0,
        batch_size=batch_size, noise_batch=sampling.batch, seed=sampling.seed, example_ids=tuple(int(i) for i in ids), n_examples=len(ids),
    )  # fmt: skip
    t0 = time.perf_counter()
    result = run(Certify(config), out=out, resume=out is not None, overwrite=False)
    wall = time.perf_counter() - t0
    summary = result.summary
    table = summary.models[str(card["name"])][f"{sigma:g}"].certified
    certs = result.rows[result.rows["kind"] == CERTIFICATE]
    block = {
        "method": "randomized smoothing, CERTIFY of Cohen, Rosenfeld & Kolter (2019); L2 radii on [0, 1] inputs",
        "sigma": sigma,
        "n0": sampling.n0,
        "n": sampling.n,
        "alpha": sampling.alpha,
        "seed": sampling.seed,
        "data": data.name,
        "split": "test",
        "n_examples": len(ids),
        "examples": "stratified prefix of the test split (robustbench_filters.data.images.stratified_prefix)",
        "examples_digest": data.digest(torch.as_tensor(ids)),
        "radii": list(radii),
        "certified_acc": [float(r.certified_acc) for r in table],
        "ci95": [[float(r.ci_low), float(r.ci_high)] for r in table],
        "abstain_rate": float(certs.abstain.mean()),
        "max_certifiable_radius": summary.max_certifiable_radius[f"{sigma:g}"],
        "checks": [c.to_dict() for c in summary.checks],
        "wall_time_s": round(wall, 1),
        "samples_per_s": round(len(ids) * (sampling.n0 + sampling.n) / wall, 1) if wall > 0 else None,
        "torch_threads": torch.get_num_threads(),
        "rebuild_command": rebuild_command(card["name"], sigma, n_examples, sampling),
    }
    log.info("certified %s at sigma %g in %.0fs: %s", folder, sigma, wall, block["certified_acc"])
    if write:
        card["certification"] = block
        card.setdefault("metrics", {}).update(
            {metric_key(r): acc for r, acc in zip(radii, block["certified_acc"], strict=True)}
        )
        atomic_write_text(folder / CARD, json.dumps(card, indent=2, sort_keys=False) + "\n")
    return block


def zoo_noise_folder(name: str, noise_sigma: float, size: str = "micro") -> Path:
    """The folder of a noise-trained zoo checkpoint (see :func:`robustbench_filters.models.checkpoint.zoo_path`)."""
    return zoo_path(name, size, noise_sigma)


__all__ = ["CARD_N_EXAMPLES", "CARD_RADII", "ZOO_NOISE_SIGMAS", "certify_checkpoint", "metric_key", "zoo_noise_folder"]
