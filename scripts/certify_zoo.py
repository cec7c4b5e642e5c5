"""Certify the noise-trained zoo checkpoints and record the certificates in their cards.

Why a script: the certified accuracies in the noise-trained zoo cards (``robfilt models list``) must be
reproducible by one command after ``make zoo`` retrains them. For each name it loads
``robustbench_filters/zoo/<name>-micro-sigma<S>``, runs CERTIFY (Cohen et al. 2019) at the training sigma on a
stratified prefix of the bundled test split, and writes a ``certification`` block and ``certified_acc_r*``
metrics into the card.

    OMP_NUM_THREADS=1 .venv/bin/python scripts/certify_zoo.py --model deit,deit-bsa,deit-grc,deit-bsa-grc
    .venv/bin/python scripts/certify_zoo.py --model deit --n-examples 100 --dry-run   # print, do not write
"""

from __future__ import annotations

import logging
from typing import Annotated

import typer

from robustbench_filters.core.errors import RobfiltError
from robustbench_filters.models.checkpoint import CARD
from robustbench_filters.smoothing.zoo import (
    CARD_BATCH_SIZE,
    CARD_N_EXAMPLES,
    CARD_RADII,
    CARD_SAMPLING,
    certify_checkpoint,
    zoo_noise_folder,
)


def main(
    model: Annotated[
        str, typer.Option("--model", help="Comma-separated DeiT names.")
    ] = "deit,deit-bsa,deit-grc,deit-bsa-grc",
    noise_sigma: Annotated[float, typer.Option("--noise-sigma", help="Which noise-trained zoo.")] = 0.25,
    n_examples: Annotated[int, typer.Option("--n-examples")] = CARD_N_EXAMPLES,
    n0: Annotated[int, typer.Option("--n0")] = CARD_SAMPLING.n0,
    n: Annotated[int, typer.Option("--n")] = CARD_SAMPLING.n,
    alpha: Annotated[float, typer.Option("--alpha")] = CARD_SAMPLING.alpha,
    batch_size: Annotated[int, typer.Option("--batch-size", help="Examples per unit of the run.")] = CARD_BATCH_SIZE,
    noise_batch: Annotated[
        int, typer.Option("--noise-batch", help="Noise samples per forward pass.")
    ] = CARD_SAMPLING.batch,
    seed: Annotated[int, typer.Option("--seed")] = CARD_SAMPLING.seed,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the block, do not write the cards.")] = False,
) -> None:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    for name in [m.strip() for m in model.split(",") if m.strip()]:
        folder = zoo_noise_folder(name, noise_sigma)
        if not (folder / CARD).exists():
            raise typer.BadParameter(f"{folder} has no {CARD}; train it first (see docs/models.md, The zoo).")
        try:
            block = certify_checkpoint(
                folder, n_examples=n_examples, batch_size=batch_size,
                sampling=CARD_SAMPLING.replace(n0=n0, n=n, alpha=alpha, batch=noise_batch, seed=seed),
                radii=CARD_RADII, write=not dry_run,
            )  # fmt: skip
        except RobfiltError as exc:
            raise typer.BadParameter(str(exc)) from None
        accs = ", ".join(
            f"r={r:g}: {100 * a:.1f}%" for r, a in zip(block["radii"], block["certified_acc"], strict=True)
        )
        typer.echo(f"{name} sigma {block['sigma']:g}: {accs} (abstain {100 * block['abstain_rate']:.1f}%, "
                   f"{block['n_examples']} examples, {block['wall_time_s']:.0f}s)")  # fmt: skip


if __name__ == "__main__":
    typer.run(main)
