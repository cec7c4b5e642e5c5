"""Synthetic finished run folders for the reporter's tests: every table and figure type, no engine, no model.

The rows follow the engines' schemas (what ``robfilt attack`` / ``robfilt lipschitz`` write) with made-up
numbers chosen to exercise the presentation: eps on the k/255 grid, perplexities spanning two decades, a
value that prints in e-notation, a model name with characters LaTeX must escape, and one failing sanity check.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from run_summaries import summary_for, typed

from robustbench_filters.core.names import DEFAULT_IMAGE_ATTACK
from robustbench_filters.runs.folder import RunWriter
from robustbench_filters.summaries import SeqlenSummary

DEIT = ["deit", "deit-bsa", "deit-grc", "deit-bsa-grc"]
LMS = ["lm", "lm-bsa", "lm-grc", "lm-bsa-grc"]
EPS_255 = [1 / 255, 2 / 255, 4 / 255, 8 / 255]
N_IMAGES = 24
N_SEQ = 10


def synthetic_seqlen_run(out: Path, study: pd.DataFrame) -> Path:
    """A finished ``seqlen`` run folder holding a made-up study frame (the runner writes real ones:
    :func:`robustbench_filters.lipschitz.seqlen_run.sequence_length_run`)."""
    ns = sorted(int(n) for n in study["n"].unique())
    with RunWriter(out, "seqlen", {"study": "sequence_length", "ns": ns}, seed=0, overwrite=True) as writer:
        writer.write_part("study", study)
        writer.finish(study, typed(SeqlenSummary, {"kind": "seqlen", "n_values": ns}))
    return Path(out)


def write_run(out: Path, kind: str, rows: pd.DataFrame, config: dict, checks: list[dict] | None = None,
              family: str | None = None) -> Path:  # fmt: skip
    extra = {"family": family} if family else None
    with RunWriter(out, kind, config, seed=config.get("seed", 0), extra=extra) as w:
        w.write_part("all", rows)
        w.finish(rows, summary_for(kind, family, rows, checks or []))
    return out


def _checks(models: list[str], failing: str | None = None) -> list[dict]:
    return [
        {"name": name, "model": m, "status": "fail" if (m == failing and name == "pgd >= fgsm") else "pass",
         "detail": "PGD weaker than FGSM at 8/255" if (m == failing and name == "pgd >= fgsm") else "ok"}
        for m in models
        for name in ("eval mode, deterministic", "pgd >= fgsm")
    ]  # fmt: skip


def image_rows(rng: np.random.Generator) -> pd.DataFrame:
    recs = []
    for k, model in enumerate(DEIT):
        for attack, grid in (("clean", [0.0]), ("fgsm", EPS_255), ("pgd", EPS_255)):
            for j, eps in enumerate(grid):
                p = 0.9 - 0.1 * j - (0.05 if attack == "pgd" else 0) + 0.02 * k
                for i in range(N_IMAGES):
                    recs.append({"model": model, "example_id": i, "kind": "clean" if attack == "clean" else
                                 "adversarial", "attack": attack, "eps": eps, "norm": "linf",
                                 "correct": bool(rng.random() < p), "clean_correct": True, "pert_norm": eps,
                                 "margin": 0.0, "loss": 0.0, "in_box": True, "fooled_by": ""})  # fmt: skip
        for sev in (1.0, 3.0):
            for i in range(N_IMAGES):
                recs.append({"model": model, "example_id": i, "kind": "contamination",
                             "attack": "corruption:gaussian_noise", "eps": sev, "norm": "",
                             "correct": bool(rng.random() < 0.8 - 0.1 * sev), "clean_correct": True,
                             "pert_norm": 0.0, "margin": 0.0, "loss": 0.0, "in_box": True, "fooled_by": ""})  # fmt: skip
    return pd.DataFrame(recs)


def lm_rows(rng: np.random.Generator) -> pd.DataFrame:
    recs = []
    grid = [("clean", "clean", 0.0)] + [("adversarial", a, e) for a in ("fgsm", "pgd") for e in (0.01, 0.05, 0.1)]
    grid += [("contamination", "wordswap", r) for r in (0.0, 0.1, 0.2)]
    for k, model in enumerate(LMS):
        robust = k % 2 == 1  # the BSA variants barely move; the others reach perplexities in the hundreds
        for kind, attack, eps in grid:
            growth = (
                (8 if attack == "pgd" else 4) * (0.2 if robust else 1.0) * (eps / 0.1) if kind == "adversarial" else eps
            )
            for i in range(N_SEQ):
                nll = 20 * (1.3 + growth + 0.05 * rng.standard_normal())
                recs.append({"model": model, "example_id": i, "kind": kind, "attack": attack, "eps": eps,
                             "norm": "l2" if kind == "adversarial" else "", "nll_sum": nll, "n_tokens": 20,
                             "correct_tokens": 5, "pert_norm": 0.0})  # fmt: skip
    return pd.DataFrame(recs)


def lipschitz_rows(models: list[str], n: int, blocks: int, scale: float) -> pd.DataFrame:
    recs = []
    for k, model in enumerate(models):
        for i in range(n):
            recs.append({"model": model, "example_id": i, "layer": "model", "method": "power",
                         "lower": scale * (1 + k + 0.1 * i), "local_upper": scale * 1e3 * (1 + k),
                         "global_upper": scale * 3.93e41, "radius": 1e-4, "iterations": 5})  # fmt: skip
            for b in range(blocks):
                recs.append({"model": model, "example_id": i, "layer": f"blocks.{b}", "method": "power",
                             "lower": (1 + k) * 10.0 ** (2 - b), "local_upper": 1e8 * (1 + k) * (b + 1),
                             "global_upper": 1e9 * (b + 1), "radius": np.nan, "iterations": 5})  # fmt: skip
    return pd.DataFrame(recs)


def synthetic_runs(root: Path, failing_check: bool = True) -> list[Path]:
    """Image attack + corruption, LM attack, two Lipschitz runs (DeiT, LM) and a sequence-length run."""
    rng = np.random.default_rng(0)
    img_cfg = {"data": "fashion-mnist", "data_checksum": "sum-a", "example_ids_sha256": "ids-a",
               "n_examples": N_IMAGES, "seed": 0, "steps": 10, "norm": "linf"}  # fmt: skip
    rows = image_rows(rng)
    corrupt = rows["attack"].str.startswith("corruption:")
    image = write_run(root / "img", "attack", rows[~corrupt], img_cfg,
                      _checks(DEIT, "deit-bsa" if failing_check else None), "image")  # fmt: skip
    corr = write_run(root / "corr", "attack", pd.concat([rows[rows["attack"] == "clean"], rows[corrupt]]),
                     img_cfg, _checks(DEIT), "image")  # fmt: skip
    lm_cfg = {"data": "austen", "data_checksum": "sum-t", "example_ids_sha256": "ids-t", "n_examples": N_SEQ,
              "seed": 0, "steps": 10, "eps_mode": "relative", "replacement": "AAA"}  # fmt: skip
    lm = write_run(root / "lm", "attack", lm_rows(rng), lm_cfg, _checks(LMS), "lm")
    lip_cfg = {"data": "fashion-mnist", "n_examples": 3, "seed": 0}
    lip_img = write_run(root / "lip-img", "lipschitz", lipschitz_rows(DEIT, 3, 4, 1.0), lip_cfg)
    lip_lm = write_run(root / "lip-lm", "lipschitz", lipschitz_rows(["lm", "lm-bsa_v2"], 2, 3, 3.0),
                       {**lip_cfg, "data": "austen", "n_examples": 2})  # fmt: skip
    study = pd.DataFrame(
        [{"n": n, "kind": kind, "mean_perturbation": 1e-4 * (n / 16) ** (-0.5 if kind != "bsa-gaussian" else 0.0),
          "std_perturbation": 1e-6, "noise": 1e-3, "trials": 4, "upper": 2.5e5}
         for kind in ("softmax+pos", "bsa-gaussian", "softmax") for n in (16, 64, 256)]
    )  # fmt: skip
    seq = synthetic_seqlen_run(root / "seq", study)
    return [image, corr, lm, lip_img, lip_lm, seq]


CERT_RADII = [0.11, 0.283, 0.283, 0.05, 0.19]  # certified radii of the correct examples (deit); the rest: none


def certify_runs(root: Path, smoothadv: bool = True, base: bool = True) -> list[Path]:
    """A certify run (deit, deit-grc at sigma 0.25; 8 examples) and, when ``base``, an L2 attack run on the same
    weights and examples. deit's certified radii are :data:`CERT_RADII` (largest 0.283, as in the issue), so the
    table's columns at r = 0.5, 0.75 and 1 lie beyond every certified radius."""
    n = 8
    weights = {"deit": "sha-d", "deit-grc": "sha-g"}
    cfg = {"data": "fashion-mnist", "data_checksum": "sum-a", "example_ids_sha256": "ids-c", "n_examples": n,
           "seed": 0, "n0": 100, "n": 1000, "alpha": 0.001, "weights": weights}  # fmt: skip
    recs = []
    for k, (model, radii) in enumerate((("deit", CERT_RADII), ("deit-grc", [r * 0.8 for r in CERT_RADII[:4]]))):
        for i in range(n):
            r = radii[i] if i < len(radii) else np.nan
            recs.append({"model": model, "example_id": i, "kind": "certificate", "sigma": 0.25,
                         "correct": bool(np.isfinite(r)), "abstain": i == n - 1, "certified_correct_radius": r,
                         "radius": np.nan, "robust": np.nan})  # fmt: skip
        if smoothadv:
            for radius in (0.25, 0.5):
                for i in range(n):
                    recs.append({"model": model, "example_id": i, "kind": "attack", "sigma": 0.25,
                                 "correct": True, "abstain": False, "certified_correct_radius": np.nan,
                                 "radius": radius, "robust": i < (6 if radius == 0.25 else 3) - k})  # fmt: skip
    runs = [write_run(root / "certify", "certify", pd.DataFrame(recs), cfg)]
    if base:
        l2 = []
        for k, model in enumerate(weights):
            for attack, eps in (("clean", 0.0), ("pgd-l2", 0.25), ("pgd-l2", 0.5), ("pgd-l2", 1.0)):
                for i in range(n):
                    l2.append({"model": model, "example_id": i, "kind": "clean" if eps == 0 else "adversarial",
                               "attack": attack, "eps": eps, "norm": "l2", "correct": i < 8 - (4 + k) * eps})  # fmt: skip
        l2_cfg = {**cfg, "norm": "l2", "steps": 10}
        runs.append(write_run(root / "l2", "attack", pd.DataFrame(l2), l2_cfg, _checks(list(weights)), "image"))
    return runs


def synthetic_scores(seeds: tuple[int, ...] = (0, 1, 2)) -> pd.DataFrame:
    """A study scores table (family, model, seed, metric, condition, value) covering every claim and curve.

    deit-grc is 5 points more robust under every attack in every seed (claim a supported); lm-bsa has a lower word-swap
    perplexity (claim d supported); BSA's growth exponent is higher in the layer study (claim e secondary not
    supported); everything else is noise around zero.
    """
    rng = np.random.default_rng(1)
    recs: list[dict] = []

    def add(family: str, model: str, seed: int, metric: str, cond: str, value: float) -> None:
        recs.append({"family": family, "model": model, "seed": seed, "metric": metric, "condition": cond,
                     "value": float(value)})  # fmt: skip

    for seed in seeds:
        for k, model in enumerate(DEIT):
            bonus = 0.05 if model == "deit-grc" else 0.0
            add("image", model, seed, "acc", "clean", 0.8 + 0.01 * rng.standard_normal())
            for attack in ("fgsm", "pgd", DEFAULT_IMAGE_ATTACK):
                accs = [max(0.0, 0.7 - 4 * e + bonus + 0.01 * rng.standard_normal()) for e in EPS_255]
                for e, a in zip(EPS_255, accs, strict=True):
                    add("image", model, seed, "acc", f"{attack}@{e:g}", a)
                add("image", model, seed, "acc_mean", attack, np.mean(accs))
            add("image", model, seed, "corruption_acc", "mean", 0.6 + 0.02 * rng.standard_normal())
            add("image", model, seed, "lip_log10_upper", "model", 9 + 0.2 * rng.standard_normal())
            add("image", model, seed, "lip_log10_layerwise", "model", 6 - 0.1 * bonus + 0.1 * rng.standard_normal())
            # no draw from rng: the values after it keep the stream they had before this metric existed
            add("image", model, seed, "lip_log10_crown", "rho=0.001", 2.2 - 0.1 * bonus + 0.05 * (seed % 2))
            add("image", model, seed, "certified_radius_mean", "sigma=0.12", 0.2 + bonus + 0.01 * rng.standard_normal())
            for b in range(4):
                add("image", model, seed, "lip_layer_lower_mean", f"blocks.{b}", (k + 1) * 10.0 ** (2 - b / 2))
                add("image", model, seed, "lip_layer_log10_upper", f"blocks.{b}", 8 + 0.5 * b)
        for k, model in enumerate(LMS):
            bsa = "bsa" in model
            clean = 1.3 + 0.01 * rng.standard_normal()
            add("lm", model, seed, "log_ppl", "clean", clean)
            for attack, grid in (("fgsm", (0.01, 0.1)), ("pgd", (0.01, 0.1)), ("wordswap", (0.0, 0.1, 0.2))):
                scale = 4 if attack == "wordswap" else 40  # embedding attacks span decades, word swap does not
                values = [clean + (0.5 if bsa else 1.0) * scale * e + 0.01 * rng.standard_normal() for e in grid]
                for e, v in zip(grid, values, strict=True):
                    add("lm", model, seed, "log_ppl", f"{attack}@{e:g}", v)
                rest = values[1:] if attack == "wordswap" else values
                add("lm", model, seed, "log_ppl_mean", attack, np.mean(rest))
                add("lm", model, seed, "log_ppl_increase", attack, np.mean(rest) - clean)
            add("lm", model, seed, "lip_log10_upper", "model", 10 + 0.2 * rng.standard_normal())
            add("lm", model, seed, "seqlen_slope", "last-token gain", 0.1 * rng.standard_normal())
            for b in range(3):
                add("lm", model, seed, "lip_layer_lower_mean", f"blocks.{b}", (k + 1) * 10.0 ** (1 - b / 2))
                add("lm", model, seed, "lip_layer_log10_upper", f"blocks.{b}", 10 - 0.3 * b)
            for n in (8, 16, 32):
                add("lm", model, seed, "seqlen_gain", f"N={n}", (5 if bsa else 20) * (1 + 0.05 * rng.standard_normal()))
        for kind, slope in (("softmax+pos", -0.5), ("bsa-gaussian", 0.0), ("softmax", -0.45)):
            for n in (16, 64, 256):
                add("layer", kind, seed, "seqlen_perturbation", f"N={n}", 1e-4 * (n / 16) ** slope)
            add("layer", kind, seed, "seqlen_slope", "attention layer", slope + 0.01 * rng.standard_normal())
    return pd.DataFrame(recs)
