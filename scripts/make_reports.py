"""Regenerate ``reports/`` from the bundled zoo: vision robustness, LM contamination and Lipschitz studies.

Why a script: the reports in the repository must be reproducible by one command (``make reports``) from the
committed zoo weights, with the exact settings recorded in each run's manifest. Every number in a report is
recomputed from the run folders written here under ``runs/``.

    .venv/bin/python scripts/make_reports.py                 # everything available
    .venv/bin/python scripts/make_reports.py --only vision --n-examples 256   # a quicker vision report

What it does:

1. vision: ``robfilt attack`` equivalent on the four DeiT zoo models (deit, deit-bsa, deit-grc, deit-bsa-grc):
   the default attack (apgd-adaptive) with PGD and FGSM as weaker secondary lines (``--steps``: every
   attack's steps; default each one's own) over the default Fashion-MNIST eps grid, on ``--n-examples`` shared test
   examples -> ``runs/vision-attack``; the five corruptions at severities 1-5 on the same examples ->
   ``runs/vision-corruption``; verified robust accuracy by linear bound propagation (``certify --method crown``,
   refresh deep) of the adversarially trained zoo (deit-at, deit-grc-at) at small Linf eps on the first
   ``--verify-examples`` test images, beside the default attack on the same images -> ``runs/vision-verified``; all
   three -> ``reports/vision`` (accuracy with Wilson CIs, paired McNemar tests vs deit, corruption accuracy and
   mCE, verified <= robust <= clean, accuracy-vs-eps figure, softmax-vs-BSA attention maps).
2. lm: word-swap contamination sweep on the LM zoo models, if their zoo weights exist
   -> ``runs/lm-contamination`` -> ``reports/lm``.
3. lipschitz: per-example lower/certified upper bounds with the per-block profile on the DeiT zoo models, the
   gap rows (empirical vs layerwise estimate vs certified local and global, per block, at rho 1e-3 and 0.1) and
   the sequence-length study of one attention layer -> ``runs/lipschitz``, ``runs/lipschitz-gap``,
   ``runs/seqlen`` -> ``reports/lipschitz``.
4. certified: randomized-smoothing certificates of the noise-trained zoo (sigma 0.25) and L2 PGD on the same
   weights and examples -> ``runs/certify``, ``runs/certify-l2-pgd`` -> ``reports/certified``.

Every report also gets a self-contained ``index.html``. The figures are drawn in paper mode (``robfilt report
--paper``): one- or two-column widths and no setting or source line inside them, so a paper can include them as
they are; ``index.md``/``index.html`` state each figure's setting and sources under it, and
``figures/provenance.json`` names its runs and their hashes. ``--no-paper`` puts both lines back into the figures.

Models without zoo weights are left out (and listed in the log); a part with no model left is skipped.
Runs are made from scratch unless ``--reuse`` is given (a cached run would not notice retrained weights).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated

import typer

from robustbench_filters.core.cores import usable_cores
from robustbench_filters.core.errors import RobfiltError
from robustbench_filters.models import zoo_path
from robustbench_filters.report import build_report
from robustbench_filters.runs.folder import load_run

log = logging.getLogger("robustbench_filters.make_reports")

DEIT = ["deit", "deit-bsa", "deit-grc", "deit-bsa-grc"]
DEIT_AT = ["deit-at", "deit-grc-at"]  # PGD-trained (Makefile: zoo): the models verification says most about
VERIFIED_EPS = (3e-4, 1e-3)  # B12: the largest eps where >= 10% of deit-at's images verify is 1e-3
LM = ["lm", "lm-bsa", "lm-grc", "lm-bsa-grc"]
PARTS = ("vision", "lm", "lipschitz", "certified")


def zoo_models(names: list[str], size: str = "micro") -> list[str]:
    """The names with trained zoo weights (a finished checkpoint has its card)."""
    have = [n for n in names if (zoo_path(n, size) / "card.json").exists()]
    missing = sorted(set(names) - set(have))
    if missing:
        log.warning("no zoo weights for %s; left out of the reports", ", ".join(missing))
    return have


def _finished(folder: Path) -> bool:
    try:
        load_run(folder)
    except RobfiltError:
        return False
    return True


def vision(
    runs: Path,
    reports: Path,
    n_examples: int,
    steps: int | None,
    device: str,
    reuse: bool,
    paper: bool,
    verify_examples: int,
    workers: int,
) -> Path | None:
    from robustbench_filters.api.evaluate import certify, evaluate
    from robustbench_filters.core.names import DEFAULT_IMAGE_ATTACK

    models = zoo_models(DEIT)
    if not models:
        log.warning("vision: no DeiT zoo models; skipped")
        return None
    out = runs / "vision-attack"
    if not (reuse and _finished(out)):
        evaluate(models, [DEFAULT_IMAGE_ATTACK, "pgd", "fgsm"], None, n_examples=n_examples, steps=steps,
                 device=device, out=out, overwrite=True, workers=workers)  # fmt: skip
    corr = runs / "vision-corruption"  # same n_examples and seed: the same examples, so paired tests apply
    if not (reuse and _finished(corr)):
        evaluate(models, ["corruption"], None, n_examples=n_examples, device=device, out=corr, overwrite=True,
                 workers=workers)  # fmt: skip
    folders = [out, corr]
    trained = zoo_models(DEIT_AT)
    if trained and verify_examples > 0:
        verified = runs / "vision-verified"  # its own models and examples: its section pairs nothing with the others
        if not (reuse and _finished(verified)):
            certify(trained, method="crown", eps=list(VERIFIED_EPS), n_examples=verify_examples, batch_size=1,
                    device=device, out=verified, overwrite=True, workers=workers)  # fmt: skip
        folders.append(verified)
    return build_report(folders, reports / "vision", html=True, paper=paper, allow_mixed=len(folders) > 2).index


def lm(runs: Path, reports: Path, n_examples: int, device: str, reuse: bool, paper: bool) -> Path | None:
    from robustbench_filters.api.evaluate import evaluate

    models = zoo_models(LM)
    if not models:
        log.warning("lm: no LM zoo models; skipped")
        return None
    out = runs / "lm-contamination"
    if not (reuse and _finished(out)):
        evaluate(models, ["wordswap"], None, n_examples=n_examples, out=out, overwrite=True, device=device,
                 rates=[0.05, 0.1, 0.2, 0.3])  # fmt: skip
    return build_report([out], reports / "lm", html=True, paper=paper).index


def lipschitz(runs: Path, reports: Path, n_examples: int, device: str, reuse: bool, paper: bool) -> Path | None:
    from robustbench_filters.api.evaluate import estimate_lipschitz
    from robustbench_filters.lipschitz.seqlen_run import SeqlenConfig, sequence_length_run

    folders = []
    models = zoo_models(DEIT)
    if models:
        out = runs / "lipschitz"
        if not (reuse and _finished(out)):
            estimate_lipschitz(models, n_examples=n_examples, method="power", per_layer=True, out=out, overwrite=True,
                               device=device)  # fmt: skip
        folders.append(out)
        gap = runs / "lipschitz-gap"  # where the certified bounds lose: a few examples, at two ball radii
        if not (reuse and _finished(gap)):
            from robustbench_filters.configs import LipschitzConfig

            config = LipschitzConfig(models=tuple(models), n_examples=4, batch_size=1, method="exact", gap=True,
                                     gap_rhos=(1e-3, 0.1), device=device)  # fmt: skip
            estimate_lipschitz(config=config, out=gap, overwrite=True)
        folders.append(gap)
    seq = runs / "seqlen"
    if not (reuse and _finished(seq)):
        sequence_length_run(seq, SeqlenConfig(dim=64, heads=4, noise=1e-3, trials=8, seed=0), overwrite=True)
    folders.append(seq)
    # The gap run measures 4 of the examples (exact Jacobians at two radii): the Lipschitz report pairs nothing across
    # runs, so runs on different example sets are fine here, and each table states its own n.
    return build_report(folders, reports / "lipschitz", html=True, allow_mixed=True, paper=paper).index


def certified(runs: Path, reports: Path, n_examples: int, device: str, reuse: bool, paper: bool) -> Path | None:
    """Randomized smoothing of the noise-trained zoo, beside L2 PGD on the same weights and examples."""
    from robustbench_filters.api.evaluate import certify, evaluate

    models = [m for m in zoo_models(DEIT) if zoo_path(m, "micro").with_name(f"{m}-micro-sigma0.25").exists()]
    if not models:
        log.warning("certified: no noise-trained zoo models; skipped")
        return None
    cert, l2 = runs / "certify", runs / "certify-l2-pgd"
    if not (reuse and _finished(cert)):
        certify(models, [0.25], n_examples=n_examples, out=cert, overwrite=True, device=device)
    if not (reuse and _finished(l2)):
        evaluate(models, ["pgd-l2"], [0.25, 0.5, 0.75, 1.0], n_examples=n_examples, checkpoint="zoo:sigma0.25",
                 out=l2, overwrite=True, device=device)  # fmt: skip
    return build_report([cert, l2], reports / "certified", html=True, paper=paper).index


def main(
    runs: Annotated[Path, typer.Option("--runs", help="Folder for the run folders.")] = Path("runs"),
    reports: Annotated[Path, typer.Option("--reports", help="Folder for the reports.")] = Path("reports"),
    only: Annotated[str, typer.Option("--only", help="Comma list of: " + ", ".join(PARTS))] = ",".join(PARTS),
    certify_examples: Annotated[int, typer.Option("--certify-examples", help="Images to certify.")] = 200,
    verify_examples: Annotated[
        int, typer.Option("--verify-examples", help="Images the vision report verifies per model (0: none).")
    ] = 16,
    workers: Annotated[
        int, typer.Option("--workers", help="Worker processes of each run (default: the usable cores).")
    ] = usable_cores(),
    n_examples: Annotated[int, typer.Option("--n-examples", help="Test examples for the vision attacks.")] = 1000,
    steps: Annotated[
        int | None, typer.Option("--steps", help="Steps of every vision attack (default: each attack's own).")
    ] = None,
    lm_examples: Annotated[int, typer.Option("--lm-examples", help="Test documents for the LM sweep.")] = 200,
    lipschitz_examples: Annotated[int, typer.Option("--lipschitz-examples", help="Examples per model.")] = 32,
    device: Annotated[str, typer.Option("--device", help="cpu or cuda.")] = "cpu",
    reuse: Annotated[bool, typer.Option("--reuse", help="Reuse finished run folders instead of re-running.")] = False,
    paper: Annotated[
        bool, typer.Option("--paper/--no-paper", help="Paper figures (no setting or source line inside them).")
    ] = True,
) -> None:
    """Run the zoo evaluations into --runs and write the reports into --reports."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    parts = [p.strip() for p in only.split(",") if p.strip()]
    for p in parts:
        if p not in PARTS:
            raise typer.BadParameter(f"unknown part {p!r}; choose from {', '.join(PARTS)}", param_hint="--only")
    written = {}
    try:
        if "vision" in parts:
            written["vision"] = vision(runs, reports, n_examples, steps, device, reuse, paper, verify_examples, workers)
        if "lm" in parts:
            written["lm"] = lm(runs, reports, lm_examples, device, reuse, paper)
        if "lipschitz" in parts:
            written["lipschitz"] = lipschitz(runs, reports, lipschitz_examples, device, reuse, paper)
        if "certified" in parts:
            written["certified"] = certified(runs, reports, certify_examples, device, reuse, paper)
    except RobfiltError as exc:
        log.error("%s", exc)
        raise typer.Exit(exc.exit_code) from None
    for part, index in written.items():
        log.info("%s: %s", part, index if index else "skipped")


if __name__ == "__main__":
    typer.run(main)
