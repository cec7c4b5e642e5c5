"""The gate's TOML spec (``robustness.toml``): how to make the fresh runs, and what they must reach.

Layout (every key optional unless marked)::

    version = 1
    name = "zoo robustness"
    out = "runs/check"            # fresh runs, junit.xml and summary.md (relative to this file)
    baseline = "baselines/zoo.json"  # optional: compare with a committed baseline too (or a [baseline] table)
    tolerance = 0.0               # extra slack for baseline comparisons (accuracy units; relative for ppl/bounds)
    sanity = "warn"               # failed sanity checks of a run: "fail", "warn" or "ignore"
    allow_code = false            # true lets models name code (file.py:factory, pkg.mod:factory): it will run

    [baseline]                    # instead of baseline = "...": the file and how to compare with it
    path = "baselines/zoo.json"   # optional here (--baseline FILE gives it on the command line)
    mode = "paired"               # paired (default) | interval | point
    alpha = 0.05                  # one-sided level of the paired tests, for the whole family (see correction)
    correction = "holm"           # holm (default): family-wise alpha across paired checks | none
    interval_fallback = true      # a baseline without per-example outcomes (v1, summary.json): interval rule
    discordance = 0.20            # planning only: share of examples assumed to change outcome (the printed MDE)
    tolerance = 0.0               # as the top-level key (set it in one place)

    [image]                       # one fresh attack run; keys mirror `robfilt attack` (the run config's fields)
    models = ["deit", "deit-grc"] # required
    attacks = ["pgd"]
    eps = [0.01, "8/255"]
    n_examples = 128
    steps = 10
    seed = 0

    [[image.require]]
    models = ["deit", "deit-grc"] # default: all models of the section
    attack = "pgd"                # default: "clean"
    eps = [0.01, 0.02]            # required for attacks other than clean
    min_acc = 0.30
    mode = "interval"             # interval (default: fail when the whole 95% CI misses) | point (the value)

    [lm] / [[lm.require]]         # max_ppl, min_token_acc; hf: models also max_word_perplexity,
                                  # max_byte_perplexity, max_bits_per_byte (lm-eval's metrics)
    [lipschitz] / [[lipschitz.require]]  # max_lipschitz_upper, max_lipschitz_local_upper, max_lipschitz_lower, min_radius

    [certify]                     # randomized-smoothing certification; keys mirror `robfilt certify`
    models = ["deit"]             # required
    sigmas = [0.12, 0.25]
    n = 1000                      # noise draws per certificate (n0 pick the class)
    radii = [0.0, 0.25, 0.5]      # the radii certified accuracy is measured at

    [[certify.require]]
    models = ["deit"]             # default: all models of the section
    sigma = 0.25                  # which smoothed classifier(s); required when the section runs several sigmas
    radius = [0.25, 0.5]          # required; each one of the section's radii and certifiable at its n and alpha
    min_certified_acc = 0.40      # certified accuracy: true class certified within the radius (abstaining = not)
    mode = "interval"             # interval (Wilson over examples) | point; against a baseline, paired = McNemar

    [verified]                    # verified robustness by bound propagation; keys mirror `robfilt certify --method crown`
    models = ["deit-at"]          # required
    method = "crown"              # the default here: ibp | crown-ibp | crown
    eps = [0.0003, 0.001]         # Linf eps on the [0, 1] scale
    refresh = "deep"
    n_examples = 16

    [[verified.require]]
    models = ["deit-at"]          # default: all models of the section
    eps = [0.0003]                # required; each one of the section's eps
    min_verified_acc = 0.50       # verified accuracy: every wrong class's margin lower bound over the box is positive
    mode = "interval"             # interval (Wilson over examples) | point; against a baseline, paired = McNemar

Certified accuracy at radius r is the share of examples whose true class the smoothed classifier certifies within r
(metric ``certified_acc``, condition ``certified:sigma0.25@0.5``); a radius no certificate can reach at the section's
n and alpha is refused, and a certified accuracy with nothing behind it (every example abstained) warns instead of
passing. A failed soundness check of the run (certified above the SmoothAdv attack's accuracy) follows ``sanity``.

Verified accuracy at eps is the share of examples the bound proves robust in the whole Linf box (metric
``verified_acc``, condition ``verified@0.0003``); a misclassified example, or one the bound leaves unknown, is not
verified. Its soundness check (a verified example the default attack breaks: a wrong bound) follows ``sanity`` too.
A bound costs seconds to minutes per example on a CPU (docs/certify.md), so the section's n_examples defaults to 16.

Unknown keys and wrong types are usage errors (exit 2) with close-match suggestions. Paths (``out``, ``baseline``,
``checkpoint``, ``data_root``, the path in ``data = "imagefolder:..."``/``"text:..."``/``"hf-disk:..."``, factory
files and ``hf:`` model folders) are relative to the spec file and, after resolving symlinks, must stay inside the project folder (the
nearest ancestor of the spec holding pyproject.toml or .git); a path outside it must be given on the command line.
A spec naming code runs that code, so it must say ``allow_code = true``.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import configs as CF
from ..core.errors import RobfiltError
from ..core.io import expand_user
from ..core.names import BOUND_METHODS
from ..core.surface import Surface, surface
from ..core.textfiles import read_text
from ..gating.modes import BaselinePolicy, Correction, Mode
from ..gating.outcome import Requirement
from ..models.checkpoint import is_zoo_ref
from ..summaries import CERTIFY, IMAGE, LIPSCHITZ, LM, VERIFIED
from .require import check_keys, read_number, read_requirements, spec_error

SECTIONS: tuple[str, ...] = (IMAGE, LM, LIPSCHITZ, CERTIFY, VERIFIED)
TOP_KEYS = frozenset({"version", "name", "out", "baseline", "tolerance", "sanity", "device", "allow_code", *SECTIONS})
#: Data specs that carry a path; in a spec the path is relative to the spec's folder and must stay in the project.
DATA_PATH_PREFIXES = ("imagefolder:", "text:", "hf-disk:")
SANITY = ("fail", "warn", "ignore")


def _run_keys(*classes: type[CF.RunConfig]) -> frozenset[str]:
    """A section's keys are its run configs' spec options (declared once, see configs.options) plus ``require``."""
    return frozenset({name for c in classes for name, _ in CF.declared_fields(c, Surface.SPEC)} | {"require"})


#: [image] runs image attacks or, with ``attacks = ["corruption"]``, corruptions.
SECTION_CONFIGS: dict[str, tuple[type[CF.RunConfig], ...]] = {
    IMAGE: (CF.ImageAttackConfig, CF.CorruptionConfig),
    LM: (CF.LMAttackConfig,),
    LIPSCHITZ: (CF.LipschitzConfig,),
    CERTIFY: (CF.CertifyConfig,),
    VERIFIED: (CF.VerifiedConfig,),
}
RUN_KEYS: dict[str, frozenset[str]] = {fam: _run_keys(*classes) for fam, classes in SECTION_CONFIGS.items()}
BASELINE_KEYS = frozenset({"path", "mode", "alpha", "correction", "interval_fallback", "discordance", "tolerance"})


@dataclass
class Section:
    family: str
    settings: dict[str, Any]
    config: CF.RunConfig
    requirements: list[Requirement] = field(default_factory=list)


@dataclass
class Spec:
    path: Path
    root: Path
    name: str
    out: Path
    baseline: Path | None
    policy: BaselinePolicy
    sanity: str
    device: str
    sections: dict[str, Section]

    @property
    def tolerance(self) -> float:
        return self.policy.tolerance


def project_root(start: Path) -> Path:
    """The nearest ancestor holding pyproject.toml or .git (else the spec's own folder)."""
    for folder in (start, *start.parents):
        if (folder / "pyproject.toml").exists() or (folder / ".git").exists():
            return folder
    return start


def resolve_path(spec_path: Path, root: Path, value: Any, key: str) -> Path:
    """A spec path, relative to the spec file; refused when it leaves the project folder."""
    if not isinstance(value, str) or not value:
        raise spec_error(spec_path, f"{key} must be a path string, got {value!r}.")
    path = (spec_path.parent / value).resolve()
    if not path.is_relative_to(root):
        raise spec_error(
            spec_path,
            f"{key} = {value!r} points outside the project folder {root}; give it on the command line "
            f"(--{key}) instead.",
        )
    return path


def _models(spec: Path, root: Path, fam: str, refs: list[str], allow_code: bool) -> list[str]:
    """Model references of a section: code (factories) only with ``allow_code = true``, files inside the project."""
    from ..models.ref import ModelKind, is_file_module, parse_model_ref

    for ref in refs:
        try:
            parsed = parse_model_ref(ref)
        except RobfiltError as exc:
            raise spec_error(spec, f"[{fam}] models: {exc}") from None
        if parsed.kind is ModelKind.HF:  # a folder must stay inside the project; a cached hub id is no path
            target = parsed.target
            if expand_user(spec.parent / target).exists() or target.startswith((".", "/", "~")):
                resolve_path(spec, root, target, f"[{fam}] model folder")
            continue
        if parsed.kind is not ModelKind.FACTORY:
            continue
        if not allow_code:
            raise spec_error(
                spec,
                f"[{fam}] model {ref!r} is code (a factory) and a spec that names code runs it; add "
                "allow_code = true at the top of the spec if you trust it.",
            )
        module, _ = parsed.factory_parts
        if is_file_module(module):
            resolve_path(spec, root, module, f"[{fam}] model file")
    return refs


def _data(spec: Path, root: Path, fam: str, value: str) -> str:
    """A data spec; a path inside it is resolved from the spec's folder and must stay inside the project."""
    for prefix in DATA_PATH_PREFIXES:
        if value.startswith(prefix):
            return prefix + str(resolve_path(spec, root, value[len(prefix) :], f"[{fam}] data"))
    return value


def _settings(spec: Path, root: Path, fam: str, table: Mapping[str, Any], allow_code: bool) -> dict[str, Any]:
    """A section's options, read as TOML values by their declarations; paths resolved from the spec's folder."""
    if "models" not in table:
        raise spec_error(spec, f'[{fam}] needs models = [...], e.g. models = ["deit", "deit-grc"].')
    try:
        s = CF.read({k: v for k, v in table.items() if k != "require"}, Surface.SPEC)
    except RobfiltError as exc:
        raise spec_error(spec, f"[{fam}] {exc}") from None
    s["models"] = _models(spec, root, fam, list(s["models"]), allow_code)
    s["base_dir"] = str(spec.parent)  # relative factory modules are found from the spec's folder
    for key, value in list(s.items()):
        declared = CF.REGISTRY.get(key)
        if declared is None or not declared.value.path:
            continue
        if not isinstance(value, str):
            raise spec_error(spec, f"[{fam}] {key} must be a string, got {value!r}.")
        if key == "data":
            s[key] = _data(spec, root, fam, value)
        elif key == "checkpoint":
            zoo = value == "none" or is_zoo_ref(value)
            s[key] = value if zoo else str(resolve_path(spec, root, value, "checkpoint"))
        else:
            s[key] = str(resolve_path(spec, root, value, key))
    return s


def _baseline(spec: Path, root: Path, data: Mapping[str, Any]) -> tuple[Path | None, BaselinePolicy]:
    """``baseline = "file"`` or a ``[baseline]`` table; the top-level tolerance applies to either."""
    value = data.get("baseline")
    table: Mapping[str, Any] = {"path": value} if isinstance(value, str) else (value or {})
    if not isinstance(table, Mapping):
        raise spec_error(spec, f"baseline must be a path string or a [baseline] table, got {value!r}.")
    check_keys(spec, table, BASELINE_KEYS, "[baseline]")
    if "tolerance" in table and "tolerance" in data:
        raise spec_error(spec, "tolerance is set twice (top level and [baseline]); keep one.")
    tolerance = read_number(spec, table.get("tolerance", data.get("tolerance", 0.0)), "tolerance")
    mode = table.get("mode", str(Mode.PAIRED))
    if mode not in [str(m) for m in Mode]:
        raise spec_error(spec, f"[baseline] mode must be 'paired', 'interval' or 'point', got {mode!r}.")
    alpha = read_number(spec, table.get("alpha", 0.05), "[baseline] alpha")
    discordance = read_number(spec, table.get("discordance", 0.20), "[baseline] discordance")
    correction = table.get("correction", str(Correction.HOLM))
    fallback = table.get("interval_fallback", True)
    checks = (
        (tolerance >= 0, f"tolerance must be >= 0, got {tolerance:g}."),
        (0 < alpha <= 0.5, f"[baseline] alpha must be in (0, 0.5] (a one-sided level such as 0.05), got {alpha:g}."),
        (0 < discordance <= 1, f"[baseline] discordance must be in (0, 1] (a share of examples), got {discordance:g}."),
        (correction in [str(c) for c in Correction], f"[baseline] correction must be 'holm' or 'none', got {correction!r}."),
        (isinstance(fallback, bool), f"[baseline] interval_fallback must be true or false, got {fallback!r}."),
    )  # fmt: skip
    for ok, message in checks:
        if not ok:
            raise spec_error(spec, message)
    path = resolve_path(spec, root, table["path"], "baseline") if "path" in table else None
    policy = BaselinePolicy(Mode(mode), alpha, tolerance, fallback, discordance, Correction(correction))
    return path, policy


def _config(spec: Path, fam: str, settings: dict[str, Any], device: Any) -> CF.RunConfig:
    """The section's run config; its own validation names the spec file and the section on failure."""
    options = dict(settings)
    if isinstance(device, str):
        options["device"] = device
    try:
        with surface(Surface.SPEC):
            if fam == IMAGE:
                cls = CF.attack_config_class(options["models"], options.get("attacks", ()), options.get("base_dir"))
            elif fam == CERTIFY and options.get("method") in BOUND_METHODS:
                raise RobfiltError(
                    f"method = {options['method']!r} verifies the model itself by bound propagation: that is the "
                    "[verified] section (its keys mirror robfilt certify --method crown); move the method and its eps "
                    "there."
                )
            else:
                if fam == VERIFIED:
                    options.setdefault("method", "crown")
                cls = SECTION_CONFIGS[fam][0]
            return CF.build(cls, options)
    except RobfiltError as exc:
        raise spec_error(spec, f"[{fam}] {exc}") from None


def load_spec(path: str | Path) -> Spec:
    """Parse and validate a spec; every problem is a one-line :class:`RobfiltError` (exit code 2)."""
    path = Path(path)
    if not path.is_file():
        raise RobfiltError(f"spec {path} does not exist; pass a TOML file such as robustness.toml.")
    path = path.resolve()
    try:
        data = tomllib.loads(read_text(path))
    except tomllib.TOMLDecodeError as exc:
        raise spec_error(path, f"not valid TOML ({exc}).") from None
    except UnicodeDecodeError:
        raise spec_error(path, "is not UTF-8 text.") from None
    root = project_root(path.parent)
    check_keys(path, data, TOP_KEYS, "the top level")
    if data.get("version", 1) != 1:
        raise spec_error(path, f"version {data.get('version')!r} is not supported; this robfilt reads version = 1.")
    allow_code = data.get("allow_code", False)
    if not isinstance(allow_code, bool):
        raise spec_error(path, f"allow_code must be true or false, got {allow_code!r}.")
    sanity = data.get("sanity", "warn")
    if sanity not in SANITY:
        raise spec_error(path, f"sanity must be one of {', '.join(SANITY)}, got {sanity!r}.")
    baseline, policy = _baseline(path, root, data)
    sections: dict[str, Section] = {}
    for fam in SECTIONS:
        if fam not in data:
            continue
        table = data[fam]
        if not isinstance(table, dict):
            raise spec_error(path, f"{fam} must be a table ([{fam}]).")
        check_keys(path, table, RUN_KEYS[fam], f"[{fam}]")
        settings = _settings(path, root, fam, table, allow_code)
        config = _config(path, fam, settings, data.get("device", "cpu"))
        # requirements name models as the run will label them (references with model_args merged in)
        reqs = read_requirements(path, fam, config.labels, table.get("require", []), config)
        sections[fam] = Section(fam, settings, config, reqs)
    if not sections:
        raise spec_error(path, f"defines no [{'], ['.join(SECTIONS)}] section; nothing to check.")
    name = data.get("name", path.stem)
    if not isinstance(name, str):
        raise spec_error(path, f"name must be a string, got {name!r}.")
    device = data.get("device", "cpu")
    if not isinstance(device, str):
        raise spec_error(path, f"device must be a string, got {device!r}.")
    return Spec(
        path=path,
        root=root,
        name=name,
        out=resolve_path(path, root, data.get("out", "runs/check"), "out"),
        baseline=baseline,
        policy=policy,
        sanity=sanity,
        device=device,
        sections=sections,
    )
