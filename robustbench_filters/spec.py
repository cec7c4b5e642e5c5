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

Certified accuracy at radius r is the share of examples whose true class the smoothed classifier certifies within r
(metric ``certified_acc``, condition ``certified:sigma0.25@0.5``); a radius no certificate can reach at the section's
n and alpha is refused, and a certified accuracy with nothing behind it (every example abstained) warns instead of
passing. A failed soundness check of the run (certified above the SmoothAdv attack's accuracy) follows ``sanity``.

Unknown keys and wrong types are usage errors (exit 2) with close-match suggestions. Paths (``out``, ``baseline``,
``checkpoint``, ``data_root``, the path in ``data = "imagefolder:..."``/``"text:..."``/``"hf-disk:..."``, factory
files and ``hf:`` model folders) are relative to the spec file and, after resolving symlinks, must stay inside the project folder (the
nearest ancestor of the spec holding pyproject.toml or .git); a path outside it must be given on the command line.
A spec naming code runs that code, so it must say ``allow_code = true``.
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import configs as CF
from .errors import RobfiltError, suggest
from .gating.metrics import certified_attack, same_eps
from .gating.modes import THRESHOLD_MODES, BaselinePolicy, Correction, Mode
from .gating.outcome import Requirement
from .models.checkpoint import is_zoo_ref
from .parsing import parse_number
from .stats import max_certifiable_radius
from .summaries import CERTIFY, IMAGE, LIPSCHITZ, LM
from .surface import Surface, surface

SECTIONS: tuple[str, ...] = (IMAGE, LM, LIPSCHITZ, CERTIFY)
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
}
RUN_KEYS: dict[str, frozenset[str]] = {fam: _run_keys(*classes) for fam, classes in SECTION_CONFIGS.items()}
# threshold key -> metric; "min_" keys are lower limits, "max_" keys upper limits
THRESHOLDS: dict[str, dict[str, str]] = {
    IMAGE: {"min_acc": "acc"},
    LM: {
        "max_ppl": "ppl",
        "min_token_acc": "token_acc",
        "max_word_perplexity": "word_perplexity",
        "max_byte_perplexity": "byte_perplexity",
        "max_bits_per_byte": "bits_per_byte",
    },
    LIPSCHITZ: {
        "max_lipschitz_upper": "lipschitz_upper",
        "max_lipschitz_local_upper": "lipschitz_local_upper",
        "max_lipschitz_lower": "lipschitz_lower",
        "min_radius": "radius",
    },
    CERTIFY: {"min_certified_acc": "certified_acc"},
}
#: what selects a requirement's conditions: attack and eps, or for certify the smoothed classifier and the radius
CONDITION_KEYS: dict[str, frozenset[str]] = {CERTIFY: frozenset({"sigma", "radius"})}
REQUIRE_KEYS: dict[str, frozenset[str]] = {
    fam: frozenset({"model", "models", "mode"} | CONDITION_KEYS.get(fam, {"attack", "eps"}) | set(t))
    for fam, t in THRESHOLDS.items()
}
Cond = tuple[str, float | None]  # (attack, eps) of one requirement; certify: ("certified:sigma<s>", radius)
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


def _err(spec: Path, message: str) -> RobfiltError:
    return RobfiltError(f"{spec.name}: {message}")


def _check_keys(spec: Path, table: Mapping[str, Any], allowed: Iterable[str], where: str) -> None:
    allowed = sorted(allowed)
    for key in table:
        if key not in allowed:
            raise _err(
                spec,
                f"unknown key {key!r} in {where}.{suggest(key, allowed) or ' Allowed: ' + ', '.join(allowed) + '.'}",
            )


def _int(spec: Path, value: Any, what: str, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise _err(spec, f"{what} must be an integer >= {minimum}, got {value!r}.")
    return value


def _num(spec: Path, value: Any, what: str) -> float:
    if isinstance(value, bool):
        raise _err(spec, f"{what} must be a number, got {value!r}.")
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        return parse_number(value, f"{spec.name}: {what}")
    raise _err(spec, f"{what} must be a number (or a fraction string like '8/255'), got {value!r}.")


def _strings(spec: Path, value: Any, what: str) -> list[str]:
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not items or not all(isinstance(v, str) and v for v in items):
        raise _err(spec, f"{what} must be a name or a non-empty list of names, got {value!r}.")
    return list(items)


def _numbers(spec: Path, value: Any, what: str) -> list[float]:
    items = value if isinstance(value, list) else [value]
    if not items:
        raise _err(spec, f"{what} is empty.")
    return [_num(spec, v, what) for v in items]


def _distinct(spec: Path, items: list[Any], what: str) -> list[Any]:
    """Every list in a spec refuses repeats (one rule everywhere): a repeated model or eps would be judged twice.
    Numbers repeat when they are the same budget (``8/255`` and ``0.0313725...``)."""
    for i, item in enumerate(items):
        for earlier in items[:i]:
            same = same_eps(item, earlier) if isinstance(item, float) else item == earlier
            if same:
                shown = f"{item:g}" if isinstance(item, float) else repr(item)
                raise _err(spec, f"{what} lists {shown} twice; list each value once.")
    return items


def resolve_path(spec_path: Path, root: Path, value: Any, key: str) -> Path:
    """A spec path, relative to the spec file; refused when it leaves the project folder."""
    if not isinstance(value, str) or not value:
        raise _err(spec_path, f"{key} must be a path string, got {value!r}.")
    path = (spec_path.parent / value).resolve()
    if not path.is_relative_to(root):
        raise _err(
            spec_path,
            f"{key} = {value!r} points outside the project folder {root}; give it on the command line "
            f"(--{key}) instead.",
        )
    return path


def _models(spec: Path, root: Path, fam: str, refs: list[str], allow_code: bool) -> list[str]:
    """Model references of a section: code (factories) only with ``allow_code = true``, files inside the project."""
    from .models.ref import ModelKind, is_file_module, parse_model_ref

    for ref in refs:
        try:
            parsed = parse_model_ref(ref)
        except RobfiltError as exc:
            raise _err(spec, f"[{fam}] models: {exc}") from None
        if parsed.kind is ModelKind.HF:  # a folder must stay inside the project; a cached hub id is no path
            target = parsed.target
            if (spec.parent / target).expanduser().exists() or target.startswith((".", "/", "~")):
                resolve_path(spec, root, target, f"[{fam}] model folder")
            continue
        if parsed.kind is not ModelKind.FACTORY:
            continue
        if not allow_code:
            raise _err(
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
        raise _err(spec, f'[{fam}] needs models = [...], e.g. models = ["deit", "deit-grc"].')
    try:
        s = CF.read({k: v for k, v in table.items() if k != "require"}, Surface.SPEC)
    except RobfiltError as exc:
        raise _err(spec, f"[{fam}] {exc}") from None
    s["models"] = _models(spec, root, fam, list(s["models"]), allow_code)
    s["base_dir"] = str(spec.parent)  # relative factory modules are found from the spec's folder
    for key, value in list(s.items()):
        declared = CF.REGISTRY.get(key)
        if declared is None or not declared.value.path:
            continue
        if not isinstance(value, str):
            raise _err(spec, f"[{fam}] {key} must be a string, got {value!r}.")
        if key == "data":
            s[key] = _data(spec, root, fam, value)
        elif key == "checkpoint":
            zoo = value == "none" or is_zoo_ref(value)
            s[key] = value if zoo else str(resolve_path(spec, root, value, "checkpoint"))
        else:
            s[key] = str(resolve_path(spec, root, value, key))
    return s


def _conditions(spec: Path, fam: str, entry: Mapping[str, Any], config: CF.RunConfig, where: str) -> list[Cond]:
    """The (attack, eps) pairs one requirement checks: ``-`` for Lipschitz, clean or an attack's eps list for
    accuracies and perplexities, and for certify every (sigma, radius) it names."""
    if fam == CERTIFY:
        assert isinstance(config, CF.CertifyConfig)
        return _certified(spec, entry, config, where)
    if fam == LIPSCHITZ:
        if "attack" in entry or "eps" in entry:
            raise _err(spec, f"{where}: Lipschitz requirements take no attack or eps.")
        return [("-", None)]
    attack = entry.get("attack", "clean")
    if not isinstance(attack, str) or not attack:
        raise _err(spec, f"{where} attack must be a name, got {attack!r}.")
    if attack == "clean":
        if "eps" in entry:
            raise _err(spec, f"{where}: clean accuracy takes no eps.")
        return [("clean", 0.0)]
    if "eps" not in entry:
        raise _err(spec, f"{where}: attack {attack!r} needs eps = [...].")
    return [(attack, e) for e in _distinct(spec, _numbers(spec, entry["eps"], f"{where} eps"), f"{where} eps")]


def _one_of(spec: Path, value: float, allowed: tuple[float, ...], what: str, section: str) -> float:
    """``value`` as the section spells it (so conditions match the run's), or a one-line refusal."""
    for a in allowed:
        if same_eps(value, a):
            return a
    shown = ", ".join(f"{a:g}" for a in allowed)
    raise _err(spec, f"{what} {value:g} is not in {section} = [{shown}]; add it there or require one of those.")


def _certified(spec: Path, entry: Mapping[str, Any], config: CF.CertifyConfig, where: str) -> list[Cond]:
    """A ``[[certify.require]]``'s (sigma, radius) pairs: each radius one of the section's radii, each sigma one of its
    sigmas (named whenever the section runs several: a limit for one noise level is no limit for another), each
    radius certifiable at the section's n and alpha (past that, certified accuracy is 0 by construction)."""
    if "radius" not in entry:
        shown = ", ".join(f"{r:g}" for r in config.radii)
        raise _err(spec, f"{where} needs radius = [...]: the L2 radii its certified accuracy is checked at (one of "
                         f"[certify] radii = [{shown}]).")  # fmt: skip
    radii = _distinct(spec, _numbers(spec, entry["radius"], f"{where} radius"), f"{where} radius")
    radii = [_one_of(spec, r, config.radii, f"{where} radius", "[certify] radii") for r in radii]
    if "sigma" in entry:
        sigmas = _distinct(spec, _numbers(spec, entry["sigma"], f"{where} sigma"), f"{where} sigma")
        sigmas = [_one_of(spec, s, config.sigmas, f"{where} sigma", "[certify] sigmas") for s in sigmas]
    elif len(config.sigmas) == 1:
        sigmas = list(config.sigmas)
    else:
        shown = ", ".join(f"{s:g}" for s in config.sigmas)
        raise _err(spec, f"{where} names no sigma, but [certify] runs sigmas = [{shown}]; add sigma = "
                         f"{config.sigmas[0]:g} (or a list) to say which smoothed classifier it checks.")  # fmt: skip
    for sigma in sigmas:
        top = max_certifiable_radius(sigma, config.n, config.alpha)
        for r in radii:
            if r > top * (1 + 1e-9):
                raise _err(spec, f"{where} radius {r:g} cannot be certified at sigma {sigma:g}: with n = {config.n} "
                                 f"noise draws and alpha = {config.alpha:g} no radius past {top:.3g} can be; raise n in "
                                 "[certify] or require a smaller radius.")  # fmt: skip
    return [(certified_attack(sigma), r) for sigma in sigmas for r in radii]


def _requirements(spec: Path, fam: str, models: list[str], entries: Any, config: CF.RunConfig) -> list[Requirement]:
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise _err(spec, f"{fam}.require must be an array of tables ([[{fam}.require]]).")
    out = []
    for i, entry in enumerate(entries, 1):
        where = f"[[{fam}.require]] #{i}"
        _check_keys(spec, entry, REQUIRE_KEYS[fam], where)
        if "model" in entry and "models" in entry:
            raise _err(spec, f"{where} has both model and models; use one.")
        names = _distinct(spec, _strings(spec, entry.get("models", entry.get("model", models)), f"{where} models"),
                          f"{where} models")  # fmt: skip
        for name in names:
            if name not in models:
                raise _err(spec, f"{where} names model {name!r}, which [{fam}] does not run.{suggest(name, models)}")
        mode = _threshold_mode(spec, entry.get("mode", "interval"), where)
        limits = {k: v for k, v in entry.items() if k in THRESHOLDS[fam]}
        if not limits:
            raise _err(spec, f"{where} sets no threshold; add one of {', '.join(sorted(THRESHOLDS[fam]))}.")
        conditions = _conditions(spec, fam, entry, config, where)
        for key, value in limits.items():
            threshold = _num(spec, value, f"{where} {key}")
            metric = THRESHOLDS[fam][key]
            bound = "min" if key.startswith("min_") else "max"
            if metric == "certified_acc" and not 0 <= threshold <= 1:
                raise _err(spec, f"{where} {key} must be a share of examples in [0, 1], got {threshold:g}.")
            for name in names:
                for attack, eps in conditions:
                    req = Requirement(fam, name, attack, eps, metric, bound, threshold, where, mode)
                    twice = next((r for r in out if _same_check(r, req)), None)
                    if twice is not None:
                        cond = attack if eps is None or attack == "clean" else f"{attack} eps {eps:g}"
                        cond = req.condition if fam == CERTIFY else cond
                        raise _err(spec, f"{where} requires {key} of {name} under {cond} again ({twice.where} already "
                                         "does); state each requirement once.")  # fmt: skip
                    out.append(req)
    return out


def _same_check(a: Requirement, b: Requirement) -> bool:
    """Two requirements are one check stated twice: the same model, attack, eps, metric, direction, limit and mode
    (a hard point limit next to a softer interval limit of one metric are two checks)."""
    same = a.eps == b.eps if a.eps is None or b.eps is None else same_eps(a.eps, b.eps)
    key = (a.model, a.attack, a.metric, a.bound, a.threshold, a.mode)
    return key == (b.model, b.attack, b.metric, b.bound, b.threshold, b.mode) and same


def _threshold_mode(spec: Path, value: Any, where: str) -> Mode:
    choices = ", ".join(repr(str(m)) for m in THRESHOLD_MODES)
    if value == str(Mode.PAIRED):
        raise _err(spec, f"{where}: mode = 'paired' needs a baseline to pair with; a threshold takes {choices} "
                         "(set [baseline] mode = 'paired' for baseline checks).")  # fmt: skip
    if value not in [str(m) for m in THRESHOLD_MODES]:
        raise _err(spec, f"{where}: mode must be {choices}, got {value!r}.")
    return Mode(value)


def _baseline(spec: Path, root: Path, data: Mapping[str, Any]) -> tuple[Path | None, BaselinePolicy]:
    """``baseline = "file"`` or a ``[baseline]`` table; the top-level tolerance applies to either."""
    value = data.get("baseline")
    table: Mapping[str, Any] = {"path": value} if isinstance(value, str) else (value or {})
    if not isinstance(table, Mapping):
        raise _err(spec, f"baseline must be a path string or a [baseline] table, got {value!r}.")
    _check_keys(spec, table, BASELINE_KEYS, "[baseline]")
    if "tolerance" in table and "tolerance" in data:
        raise _err(spec, "tolerance is set twice (top level and [baseline]); keep one.")
    tolerance = _num(spec, table.get("tolerance", data.get("tolerance", 0.0)), "tolerance")
    mode = table.get("mode", str(Mode.PAIRED))
    if mode not in [str(m) for m in Mode]:
        raise _err(spec, f"[baseline] mode must be 'paired', 'interval' or 'point', got {mode!r}.")
    alpha = _num(spec, table.get("alpha", 0.05), "[baseline] alpha")
    discordance = _num(spec, table.get("discordance", 0.20), "[baseline] discordance")
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
            raise _err(spec, message)
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
            else:
                cls = SECTION_CONFIGS[fam][0]
            return CF.build(cls, options)
    except RobfiltError as exc:
        raise _err(spec, f"[{fam}] {exc}") from None


def load_spec(path: str | Path) -> Spec:
    """Parse and validate a spec; every problem is a one-line :class:`RobfiltError` (exit code 2)."""
    path = Path(path)
    if not path.is_file():
        raise RobfiltError(f"spec {path} does not exist; pass a TOML file such as robustness.toml.")
    path = path.resolve()
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise _err(path, f"not valid TOML ({exc}).") from None
    except UnicodeDecodeError:
        raise _err(path, "is not UTF-8 text.") from None
    root = project_root(path.parent)
    _check_keys(path, data, TOP_KEYS, "the top level")
    if data.get("version", 1) != 1:
        raise _err(path, f"version {data.get('version')!r} is not supported; this robfilt reads version = 1.")
    allow_code = data.get("allow_code", False)
    if not isinstance(allow_code, bool):
        raise _err(path, f"allow_code must be true or false, got {allow_code!r}.")
    sanity = data.get("sanity", "warn")
    if sanity not in SANITY:
        raise _err(path, f"sanity must be one of {', '.join(SANITY)}, got {sanity!r}.")
    baseline, policy = _baseline(path, root, data)
    sections: dict[str, Section] = {}
    for fam in SECTIONS:
        if fam not in data:
            continue
        table = data[fam]
        if not isinstance(table, dict):
            raise _err(path, f"{fam} must be a table ([{fam}]).")
        _check_keys(path, table, RUN_KEYS[fam], f"[{fam}]")
        settings = _settings(path, root, fam, table, allow_code)
        config = _config(path, fam, settings, data.get("device", "cpu"))
        # requirements name models as the run will label them (references with model_args merged in)
        reqs = _requirements(path, fam, config.labels, table.get("require", []), config)
        sections[fam] = Section(fam, settings, config, reqs)
    if not sections:
        raise _err(path, f"defines no [{'], ['.join(SECTIONS)}] section; nothing to check.")
    name = data.get("name", path.stem)
    if not isinstance(name, str):
        raise _err(path, f"name must be a string, got {name!r}.")
    device = data.get("device", "cpu")
    if not isinstance(device, str):
        raise _err(path, f"device must be a string, got {device!r}.")
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
