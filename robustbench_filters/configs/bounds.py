"""Configs of bound runs: Lipschitz estimation and randomized-smoothing certification (the verified runs of
``robfilt certify --method crown`` are in :mod:`.verified`)."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, ClassVar

from ..core.counts import UpTo
from ..core.errors import RobfiltError
from ..core.family import Family
from ..core.names import BOUND_REFRESH, SMOOTHING, parse_method
from ..core.surface import flag, given, switched
from ..summaries.kinds import CERTIFY, LIPSCHITZ
from .base import (
    ImageDataConfig,
    _positive,
    _unique,
    check_data_options,
)
from .options import Bool, Int, Many, Number, api_only, internal, option
from .verified import CertifyMethod


def _check_examples(value: Any, name: str) -> None:
    """``inputs`` / ``input_labels``: a batch (a tensor, an array or a list of examples), not a scalar, text or a
    mapping. What each example must be, and that there is at least one, is checked when the run reads them, in the
    words ``evaluate`` uses for its data (lipschitz/data.py: given_inputs)."""
    if value is None:
        return
    batch = not isinstance(value, str | bytes | dict) and getattr(value, "ndim", 1) != 0
    try:
        len(value)
    except TypeError:
        batch = False
    if not batch:
        what = f"shape {tuple(value.shape)}" if hasattr(value, "shape") else type(value).__name__
        raise RobfiltError(f"{name} must be a tensor or array of examples (N, ...), got {what}.")


@dataclass(frozen=True, kw_only=True)
class LipschitzConfig(ImageDataConfig):
    """Lower and certified upper Lipschitz bounds per example (see :mod:`..lipschitz.run`); image models read their
    data with the image-data options, language models with ``text_column`` and ``seq_len``."""

    FAMILY: ClassVar[Family | None] = None
    DESCRIPTION: ClassVar[str] = "Lipschitz"
    KIND: ClassVar[str] = LIPSCHITZ
    SYNTHETIC: ClassVar[bool] = True

    data: Any = None
    method: str = option(
        "exact", help="Lower bound: exact (dense Jacobian), power (power iteration) or ratio (pair ascent).",
        panel="Lipschitz",
    )  # fmt: skip
    bounds: bool = option(
        True, help="Certified global and local upper bounds.", value=Bool(), negatable=True, panel="Lipschitz"
    )
    per_layer: bool = option(False, help="Per-block gains next to certified bounds.", value=Bool(), panel="Lipschitz")
    gap: bool = option(
        False, help="Show where certified bounds lose: empirical vs layerwise vs certified (slow).", value=Bool(),
        panel="Lipschitz",
    )  # fmt: skip
    gap_rhos: tuple[float, ...] = option(
        (1e-3,), help="Ball radii of the --gap rows.", value=Many(Number()), flag="--gap-rho", panel="Lipschitz"
    )
    gap_taylor: bool = option(
        True, help="--gap: add the second-order (Taylor) bound rows.", value=Bool(), negatable=True, panel="Lipschitz"
    )
    gap_crown: bool = option(
        False, help="--gap: add the certified local constant of linear bound propagation (CROWN) to the DeiTs' model "
        "rows (with refresh all about 100,000 model passes, 11 min on one core, per example and radius on the micro "
        "zoo).", value=Bool(), panel="Lipschitz",
    )  # fmt: skip
    gap_crown_refresh: str = option(
        "all", help="--gap-crown: how far intermediate bounds are re-tightened (certify's --refresh values): all is "
        "the tightest (0.4-0.8 decades above the exact norm on the normally trained zoo DeiTs); deep costs about a "
        "sixth (2-3.5 decades above).", panel="Lipschitz",
    )  # fmt: skip
    rho: float = option(
        0.1, help="l2 radius of the ball of local bounds and of the pair-ratio ascent.", value=Number(),
        panel="Lipschitz",
    )  # fmt: skip
    power_iters: int = option(50, help="Power iterations (--method power).", value=Int(), panel="Lipschitz")
    tol: float = option(1e-5, help="Power iteration: stop at this relative change.", value=Number(), panel="Lipschitz")
    ratio_steps: int = option(20, help="Ascent steps of --method ratio.", value=Int(), panel="Lipschitz")
    seq_len: int = option(64, help="Tokens per example (language models).", value=Int(), panel="Data")
    text_column: str | None = None
    dtype: str | None = option(
        None, help="float32 or float64 (default: float64 on CPU, float32 with TF32 off on GPU).", panel="Lipschitz"
    )
    inputs: Any = api_only(
        help="Your own inputs instead of data: [0, 1] images, token ids or embeddings (a tensor).",
        why="a tensor has no text form; on the command line use data",
    )
    input_labels: Any = api_only(help="Labels of ``inputs`` (optional).", why="labels of tensors given in Python")
    n_examples: int | None = UpTo(16)
    batch_size: int = 16

    def __post_init__(self) -> None:
        super().__post_init__()
        self._set("method", parse_method(self.method).value)
        _positive(self.power_iters, "power_iters")
        _positive(self.seq_len, "seq_len")
        if isinstance(self.ratio_steps, bool) or int(self.ratio_steps) < 0:
            raise RobfiltError(f"{flag('ratio_steps')} must be >= 0, got {self.ratio_steps}.")
        if not (math.isfinite(self.rho) and self.rho > 0):
            raise RobfiltError(
                f"{flag('rho')} must be a positive finite l2 radius, got {self.rho}; pass e.g. {given('rho', '0.1')}."
            )
        if not (math.isfinite(self.tol) and self.tol >= 0):
            raise RobfiltError(f"{flag('tol')} must be >= 0, got {self.tol}.")
        if self.dtype not in (None, "float32", "float64"):
            raise RobfiltError(f"{flag('dtype')} must be float32 or float64 (never half precision for certificates).")
        if self.gap_crown_refresh not in BOUND_REFRESH:
            raise RobfiltError(
                f"{flag('gap_crown_refresh')} must be one of {', '.join(BOUND_REFRESH)}, got {self.gap_crown_refresh!r}."
            )
        self._set("gap_rhos", _unique(map(float, self.gap_rhos), "gap_rhos"))
        if any(not (r > 0 and math.isfinite(r)) for r in self.gap_rhos):
            raise RobfiltError(f"{flag('gap_rhos')} must be positive finite radii, got {list(self.gap_rhos)}.")
        self._check_unread()
        for name in ("inputs", "input_labels"):  # Python objects: refused by kind before anything reads them
            _check_examples(getattr(self, name), name)
            if type(getattr(self, name)).__module__.split(".")[0] == "numpy":  # a numpy batch is a tensor here
                import torch

                self._set(name, torch.as_tensor(getattr(self, name)))
        short = self.inputs is not None and self.n_examples is not None and len(self.inputs) < self.n_examples
        if short and not isinstance(self.n_examples, UpTo):
            raise RobfiltError(
                f"inputs hold {len(self.inputs)} examples but {flag('n_examples')} is {self.n_examples}."
            )

    def _check_unread(self) -> None:
        """Settings that nothing in this run reads are refused (set away from their defaults): a method's own knobs
        under another method, the gap's without ``gap``, language-model settings for image models and image-data
        settings for language models."""
        defaults = {f.name: f.default for f in dataclasses.fields(self)}
        method = parse_method(self.method).value
        families = set(self.families)
        read = {
            "ratio_steps": method == "ratio",
            "power_iters": method != "exact" or self.per_layer or self.gap,
            "tol": method != "exact" or self.per_layer or self.gap,
            "rho": method == "ratio" or self.bounds,
            "gap_rhos": self.gap,
            "gap_taylor": self.gap,
            "gap_crown": self.gap and Family.IMAGE in families,
            "gap_crown_refresh": self.gap and self.gap_crown and Family.IMAGE in families,
            "seq_len": Family.LM in families,
        }
        for name in ("img_size", "data_root", "image_column", "label_column", "class_map", "num_workers"):
            read[name] = Family.IMAGE in families
        for name, used in read.items():
            if not used and getattr(self, name) != defaults[name]:
                raise RobfiltError(f"{flag(name)} is not read by this run ({_unread_reason(name)}); drop it.")
        check_data_options(self, {"text_column": ("hf-disk",)})


def _unread_reason(name: str) -> str:
    """Why ``name`` is not read, with every option named as the current surface spells it."""
    exact = f"{given('method', 'exact')} computes the whole Jacobian"
    return {
        "ratio_steps": f"it sets {given('method', 'ratio')}'s ascent",
        "power_iters": exact,
        "tol": exact,
        "rho": f"it is the radius of the certified local bounds and of {given('method', 'ratio')}; add "
        f"{switched('bounds')} or use ratio",
        "gap_rhos": f"it sets the radii of {flag('gap')}",
        "gap_taylor": f"it shapes {flag('gap')}'s rows",
        "gap_crown": f"it adds CROWN to {flag('gap')}'s rows of image models",
        "gap_crown_refresh": f"it shapes the CROWN bound of {flag('gap_crown')} on {flag('gap')}'s rows of image models",
        "seq_len": "it sets the tokens of language-model examples; these models are image models",
    }.get(name, "it reads image data; these models are language models")


@dataclass(frozen=True, kw_only=True)
class CertifyConfig(CertifyMethod):
    """Randomized-smoothing certificates (Cohen et al. 2019) of image models (see :mod:`..smoothing.run`).

    The default checkpoint is the noise-trained zoo (``zoo:sigma0.25``): a smoothed classifier is only as good as
    its base model is at classifying noisy inputs. Every run also attacks the smoothed classifier (SmoothAdv PGD)
    on its first ``attack_examples`` examples to check that no certificate claims more than an attack can refute.
    """

    FAMILY: ClassVar[Family | None] = Family.IMAGE
    DESCRIPTION: ClassVar[str] = "certify"
    KIND: ClassVar[str] = CERTIFY

    sigmas: tuple[float, ...] = option(
        (0.25,), help="Gaussian noise levels on the [0, 1] scale, e.g. 0.12,0.25,0.5.", value=Many(Number()),
        flag="--sigma", panel="Certify",
    )  # fmt: skip
    n0: int = option(100, help="Noise samples that pick the top class.", value=Int(), panel="Certify")
    n: int = option(1000, help="Noise samples that bound its probability.", value=Int(), panel="Certify")
    alpha: float = option(0.001, help="Failure probability of each certificate.", value=Number(), panel="Certify")
    radii: tuple[float, ...] = option(
        (0.0, 0.25, 0.5, 0.75, 1.0), help="L2 radii of the certified-accuracy table.", value=Many(Number()),
        panel="Certify",
    )  # fmt: skip
    attack_examples: int = option(
        8, help="Examples the SmoothAdv soundness check attacks (0: none).", value=Int(), panel="Certify"
    )
    attack_radii: tuple[float, ...] = option(
        (0.25, 0.5), help="L2 radii of that attack.", value=Many(Number()), panel="Certify"
    )
    attack_steps: int = option(20, help="PGD steps of that attack.", value=Int(), panel="Certify")
    attack_draws: int = option(
        16, help="Noise draws per step of that attack (its expectation over noise).", value=Int(), panel="Certify"
    )
    noise_batch: int = option(
        128, help="Noise samples per forward pass: draws of several examples share a pass (on a GPU pass "
        "thousands). Batching never changes a certificate.", value=Int(), panel="Certify",
    )  # fmt: skip
    checkpoint: str | None = "zoo:sigma0.25"
    n_examples: int | None = UpTo(64)
    batch_size: int = 16
    example_ids: tuple[int, ...] | None = internal(
        None,
        reason="the zoo cards certify a stratified prefix of the test split (smoothing.zoo); users select by "
        "--n-examples and --seed",
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        self._check_method((SMOOTHING,))
        sigmas = _unique(map(float, self.sigmas), "sigmas")
        if not sigmas or any(not (s > 0 and math.isfinite(s)) for s in sigmas):
            raise RobfiltError(
                f"{flag('sigmas')} needs positive noise levels, got {list(sigmas)}; e.g. "
                f"{given('sigmas', '0.12,0.25,0.5')}."
            )
        self._set("sigmas", tuple(sorted(sigmas)))
        _positive(self.n0, "n0")
        _positive(self.n, "n")
        if not (0.0 < self.alpha < 0.5):
            raise RobfiltError(
                f"{flag('alpha')} must be in (0, 0.5), got {self.alpha}; it is the failure probability of a "
                "certificate."
            )
        for name, values in (("radii", self.radii), ("attack_radii", self.attack_radii)):
            if any(not (r >= 0 and math.isfinite(r)) for r in values):
                raise RobfiltError(f"{flag(name)} must be L2 radii >= 0, got {list(values)}.")
        self._set("radii", tuple(sorted(_unique(map(float, self.radii), "radii"))))
        self._set("attack_radii", tuple(sorted(_unique(map(float, self.attack_radii), "attack_radii"))))
        if isinstance(self.attack_examples, bool) or int(self.attack_examples) < 0:
            raise RobfiltError(f"{flag('attack_examples')} must be 0 or more, got {self.attack_examples}.")
        _positive(self.attack_steps, "attack_steps")
        _positive(self.attack_draws, "attack_draws")
        _positive(self.noise_batch, "noise_batch")
