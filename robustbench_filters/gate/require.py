"""The ``[[section.require]]`` tables of a gate spec: which metric each threshold key limits, which conditions
(attack and eps, for certify the smoothed classifier and the radius, for verified the eps) a requirement selects, and the readers of
spec values with one-line errors that name the spec file.

Apart from :mod:`.spec` (which reads the spec's sections, paths and baseline policy) because a requirement is its
own small language: keys per family, conditions checked against the section's run config, duplicate checks refused.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from .. import configs as CF
from ..core.errors import RobfiltError, suggest
from ..core.parsing import parse_number
from ..gating.conditions import VERIFIED_CONDITION, certified_attack, same_eps
from ..gating.modes import THRESHOLD_MODES, Mode
from ..gating.outcome import Requirement
from ..stats.intervals import max_certifiable_radius
from ..summaries import CERTIFY, IMAGE, LIPSCHITZ, LM, VERIFIED

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
    VERIFIED: {"min_verified_acc": "verified_acc"},
}
#: metric -> (lowest, highest) value it can take and how to say so: a limit outside would pass or fail whatever
#: was measured (min_acc = 1.5 always fails, max_ppl = 0.5 too; min_acc = -0.2 always passes)
DOMAINS: dict[str, tuple[float, float, str]] = {
    "acc": (0.0, 1.0, "a share of examples in [0, 1]"),
    "token_acc": (0.0, 1.0, "a share of tokens in [0, 1]"),
    "certified_acc": (0.0, 1.0, "a share of examples in [0, 1]"),
    "verified_acc": (0.0, 1.0, "a share of examples in [0, 1]"),
    "ppl": (1.0, math.inf, "a perplexity, at least 1"),
    "word_perplexity": (1.0, math.inf, "a perplexity, at least 1"),
    "byte_perplexity": (1.0, math.inf, "a perplexity, at least 1"),
    "bits_per_byte": (0.0, math.inf, "a number of bits, at least 0"),
    "lipschitz_upper": (0.0, math.inf, "a Lipschitz constant, at least 0"),
    "lipschitz_local_upper": (0.0, math.inf, "a Lipschitz constant, at least 0"),
    "lipschitz_lower": (0.0, math.inf, "a Lipschitz constant, at least 0"),
    "radius": (0.0, math.inf, "a radius, at least 0"),
}
#: what selects a requirement's conditions: attack and eps, for certify the smoothed classifier and the radius, for
#: verified the eps alone (the section's method is the one bound)
CONDITION_KEYS: dict[str, frozenset[str]] = {CERTIFY: frozenset({"sigma", "radius"}), VERIFIED: frozenset({"eps"})}
REQUIRE_KEYS: dict[str, frozenset[str]] = {
    fam: frozenset({"model", "models", "mode"} | CONDITION_KEYS.get(fam, {"attack", "eps"}) | set(t))
    for fam, t in THRESHOLDS.items()
}
Cond = tuple[str, float | None]  # (attack, eps) of one requirement; certify: ("certified:sigma<s>", radius);
# verified: ("verified", eps)


def spec_error(spec: Path, message: str) -> RobfiltError:
    return RobfiltError(f"{spec.name}: {message}")


def check_keys(spec: Path, table: Mapping[str, Any], allowed: Iterable[str], where: str) -> None:
    allowed = sorted(allowed)
    for key in table:
        if key not in allowed:
            raise spec_error(
                spec,
                f"unknown key {key!r} in {where}.{suggest(key, allowed) or ' Allowed: ' + ', '.join(allowed) + '.'}",
            )


def read_number(spec: Path, value: Any, what: str) -> float:
    """A finite number (TOML's ``nan`` and ``inf`` are refused: no limit or level is infinite or undefined)."""
    if isinstance(value, bool):
        raise spec_error(spec, f"{what} must be a number, got {value!r}.")
    if isinstance(value, int | float):
        if not math.isfinite(value):
            raise spec_error(spec, f"{what} must be a finite number, got {value!r}.")
        return float(value)
    if isinstance(value, str):
        return parse_number(value, f"{spec.name}: {what}")
    raise spec_error(spec, f"{what} must be a number (or a fraction string like '8/255'), got {value!r}.")


def _strings(spec: Path, value: Any, what: str) -> list[str]:
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not items or not all(isinstance(v, str) and v for v in items):
        raise spec_error(spec, f"{what} must be a name or a non-empty list of names, got {value!r}.")
    return list(items)


def _numbers(spec: Path, value: Any, what: str) -> list[float]:
    items = value if isinstance(value, list) else [value]
    if not items:
        raise spec_error(spec, f"{what} is empty.")
    return [read_number(spec, v, what) for v in items]


def _distinct(spec: Path, items: list[Any], what: str) -> list[Any]:
    """Every list in a spec refuses repeats (one rule everywhere): a repeated model or eps would be judged twice.
    Numbers repeat when they are the same budget (``8/255`` and ``0.0313725...``)."""
    for i, item in enumerate(items):
        for earlier in items[:i]:
            same = same_eps(item, earlier) if isinstance(item, float) else item == earlier
            if same:
                shown = f"{item:g}" if isinstance(item, float) else repr(item)
                raise spec_error(spec, f"{what} lists {shown} twice; list each value once.")
    return items


def _conditions(spec: Path, fam: str, entry: Mapping[str, Any], config: CF.RunConfig, where: str) -> list[Cond]:
    """The (attack, eps) pairs one requirement checks: ``-`` for Lipschitz, clean or an attack's eps list for
    accuracies and perplexities, for certify every (sigma, radius) it names and for verified every eps."""
    if fam == CERTIFY:
        assert isinstance(config, CF.CertifyConfig)
        return _certified(spec, entry, config, where)
    if fam == VERIFIED:
        assert isinstance(config, CF.VerifiedConfig)
        return _verified(spec, entry, config, where)
    if fam == LIPSCHITZ:
        if "attack" in entry or "eps" in entry:
            raise spec_error(spec, f"{where}: Lipschitz requirements take no attack or eps.")
        return [("-", None)]
    attack = entry.get("attack", "clean")
    if not isinstance(attack, str) or not attack:
        raise spec_error(spec, f"{where} attack must be a name, got {attack!r}.")
    if attack == "clean":
        if "eps" in entry:
            raise spec_error(spec, f"{where}: clean accuracy takes no eps.")
        return [("clean", 0.0)]
    if "eps" not in entry:
        raise spec_error(spec, f"{where}: attack {attack!r} needs eps = [...].")
    return [(attack, e) for e in _distinct(spec, _numbers(spec, entry["eps"], f"{where} eps"), f"{where} eps")]


def _one_of(spec: Path, value: float, allowed: tuple[float, ...], what: str, section: str) -> float:
    """``value`` as the section spells it (so conditions match the run's), or a one-line refusal."""
    for a in allowed:
        if same_eps(value, a):
            return a
    shown = ", ".join(f"{a:g}" for a in allowed)
    raise spec_error(spec, f"{what} {value:g} is not in {section} = [{shown}]; add it there or require one of those.")


def _certified(spec: Path, entry: Mapping[str, Any], config: CF.CertifyConfig, where: str) -> list[Cond]:
    """A ``[[certify.require]]``'s (sigma, radius) pairs: each radius one of the section's radii, each sigma one of its
    sigmas (named whenever the section runs several: a limit for one noise level is no limit for another), each
    radius certifiable at the section's n and alpha (past that, certified accuracy is 0 by construction)."""
    if "radius" not in entry:
        shown = ", ".join(f"{r:g}" for r in config.radii)
        raise spec_error(spec, f"{where} needs radius = [...]: the L2 radii its certified accuracy is checked at (one of "
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
        raise spec_error(spec, f"{where} names no sigma, but [certify] runs sigmas = [{shown}]; add sigma = "
                         f"{config.sigmas[0]:g} (or a list) to say which smoothed classifier it checks.")  # fmt: skip
    for sigma in sigmas:
        top = max_certifiable_radius(sigma, config.n, config.alpha)
        for r in radii:
            if r > top * (1 + 1e-9):
                raise spec_error(spec, f"{where} radius {r:g} cannot be certified at sigma {sigma:g}: with n = {config.n} "
                                 f"noise draws and alpha = {config.alpha:g} no radius past {top:.3g} can be; raise n in "
                                 "[certify] or require a smaller radius.")  # fmt: skip
    return [(certified_attack(sigma), r) for sigma in sigmas for r in radii]


def _verified(spec: Path, entry: Mapping[str, Any], config: CF.VerifiedConfig, where: str) -> list[Cond]:
    """A ``[[verified.require]]``'s eps: each one of the section's (a verified accuracy at an eps the run did not bound
    would be no measurement)."""
    grid = tuple(config.eps or ())
    if "eps" not in entry:
        shown = ", ".join(f"{e:g}" for e in grid)
        raise spec_error(spec, f"{where} needs eps = [...]: the Linf eps its verified accuracy is checked at (one of "
                         f"[verified] eps = [{shown}]).")  # fmt: skip
    eps = _distinct(spec, _numbers(spec, entry["eps"], f"{where} eps"), f"{where} eps")
    return [(VERIFIED_CONDITION, _one_of(spec, e, grid, f"{where} eps", "[verified] eps")) for e in eps]


def read_requirements(spec: Path, fam: str, models: list[str], entries: Any, config: CF.RunConfig) -> list[Requirement]:
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise spec_error(spec, f"{fam}.require must be an array of tables ([[{fam}.require]]).")
    out = []
    for i, entry in enumerate(entries, 1):
        where = f"[[{fam}.require]] #{i}"
        check_keys(spec, entry, REQUIRE_KEYS[fam], where)
        if "model" in entry and "models" in entry:
            raise spec_error(spec, f"{where} has both model and models; use one.")
        names = _distinct(spec, _strings(spec, entry.get("models", entry.get("model", list(models))), f"{where} models"),
                          f"{where} models")  # fmt: skip
        for name in names:
            if name not in models:
                raise spec_error(
                    spec, f"{where} names model {name!r}, which [{fam}] does not run.{suggest(name, models)}"
                )
        mode = _threshold_mode(spec, entry.get("mode", "interval"), where)
        limits = {k: v for k, v in entry.items() if k in THRESHOLDS[fam]}
        if not limits:
            raise spec_error(spec, f"{where} sets no threshold; add one of {', '.join(sorted(THRESHOLDS[fam]))}.")
        conditions = _conditions(spec, fam, entry, config, where)
        for key, value in limits.items():
            threshold = read_number(spec, value, f"{where} {key}")
            metric = THRESHOLDS[fam][key]
            bound = "min" if key.startswith("min_") else "max"
            lo, hi, domain = DOMAINS[metric]
            if not lo <= threshold <= hi:
                raise spec_error(spec, f"{where} {key} must be {domain}, got {threshold:g}.")
            for name in names:
                for attack, eps in conditions:
                    req = Requirement(fam, name, attack, eps, metric, bound, threshold, where, mode)
                    twice = next((r for r in out if _same_check(r, req)), None)
                    if twice is not None:
                        cond = attack if eps is None or attack == "clean" else f"{attack} eps {eps:g}"
                        cond = req.condition if fam == CERTIFY else cond
                        raise spec_error(spec, _twice(twice, req, key, f"{name} under {cond}"))
                    out.append(req)
    return out


def _same_check(a: Requirement, b: Requirement) -> bool:
    """Two requirements are one check, stated twice or with two limits: the same model, attack, eps, metric,
    direction and mode. (A hard point limit next to a softer interval limit of one metric are two checks.)"""
    same = a.eps == b.eps if a.eps is None or b.eps is None else same_eps(a.eps, b.eps)
    key = (a.model, a.attack, a.metric, a.bound, a.mode)
    return key == (b.model, b.attack, b.metric, b.bound, b.mode) and same


def _twice(first: Requirement, again: Requirement, key: str, what: str) -> str:
    """The refusal of a check stated twice: the same limit is a repeat, two limits a conflict (which would the
    gate hold? the stricter makes the other dead, and a reader cannot tell which the author meant)."""
    if first.threshold == again.threshold:
        return (
            f"{again.where} requires {key} of {what} again ({first.where} already does); state each requirement once."
        )
    return (
        f"{again.where} requires {key} = {again.threshold:g} of {what}, but {first.where} requires {key} = "
        f"{first.threshold:g} of the same ({first.mode} mode); a check has one limit: keep one of the two tables."
    )


def _threshold_mode(spec: Path, value: Any, where: str) -> Mode:
    choices = ", ".join(repr(str(m)) for m in THRESHOLD_MODES)
    if value == str(Mode.PAIRED):
        raise spec_error(spec, f"{where}: mode = 'paired' needs a baseline to pair with; a threshold takes {choices} "
                         "(set [baseline] mode = 'paired' for baseline checks).")  # fmt: skip
    if value not in [str(m) for m in THRESHOLD_MODES]:
        raise spec_error(spec, f"{where}: mode must be {choices}, got {value!r}.")
    return Mode(value)
