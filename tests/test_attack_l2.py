"""L2 attacks at eps = 0 and the sanity checks of L2 PGD on the zoo models.

torchattacks' PGDL2 projects with eps / ||delta||, which is 0 / 0 at eps = 0: every example came back NaN and the
"eps = 0 equals clean" check failed for every L2 run. CW ignores eps altogether. These tests pin the fix in the
catalogue: every attack under every norm it supports returns the clean input at eps = 0.
"""

from __future__ import annotations

import pytest
import torch

from robustbench_filters.api.evaluate import evaluate
from robustbench_filters.attacks.catalogue import ATTACKS, AttackParams, Norm
from robustbench_filters.data import load_images
from robustbench_filters.models import create_model

ZOO_DEITS = ["deit", "deit-bsa", "deit-grc", "deit-bsa-grc"]
FAST = ["fgsm", "pgd", "pgd-l2", "cw", "fab"]


@pytest.fixture(scope="module")
def batch() -> tuple[torch.nn.Module, torch.Tensor, torch.Tensor]:
    data = load_images(n_max=8)
    return create_model("deit-bsa", checkpoint="zoo"), data.x, data.y


def _cases(names: list[str]) -> list[tuple[str, Norm]]:
    return [(n, norm) for n in names for norm in ATTACKS[n].norms]


@pytest.mark.parametrize(("name", "norm"), _cases(FAST))
def test_attack_at_eps0_returns_the_clean_input(batch, name: str, norm: Norm) -> None:
    model, x, y = batch
    torch.manual_seed(0)
    for _, fn in ATTACKS[name].build(model, AttackParams(0.0, norm, 3, 0.0, 0, 10)):
        x_adv = fn(x, y)
        assert torch.isfinite(x_adv).all(), f"{name}/{norm.value} returned NaN at eps=0"
        assert torch.equal(x_adv, x), f"{name}/{norm.value} moved inputs at eps=0"


@pytest.mark.slow
@pytest.mark.parametrize(("name", "norm"), _cases([n for n in ATTACKS if ATTACKS[n].build and n not in FAST]))
def test_slow_attacks_at_eps0_return_the_clean_input(batch, name: str, norm: Norm) -> None:
    model, x, y = batch
    torch.manual_seed(0)
    for _, fn in ATTACKS[name].build(model, AttackParams(0.0, norm, 3, 0.0, 0, 10)):
        assert torch.equal(fn(x, y), x)


def test_pgd_l2_still_attacks_for_positive_eps(batch) -> None:
    model, x, y = batch
    torch.manual_seed(0)
    (_, fn), *_ = ATTACKS["pgd-l2"].build(model, AttackParams(1.0, Norm.L2, 10, None, 0, 10))
    x_adv = fn(x, y)
    norms = (x_adv - x).flatten(1).norm(dim=1)
    assert torch.isfinite(x_adv).all() and (norms > 0).all() and (norms <= 1.0 + 1e-4).all()
    with torch.no_grad():
        assert (model(x_adv).argmax(1) != y).sum() > (model(x).argmax(1) != y).sum()


def test_cw_counts_only_inside_the_ball(batch) -> None:
    model, x, y = batch
    (_, fn), *_ = ATTACKS["cw"].build(model, AttackParams(0.05, Norm.L2, 50, None, 0, 10))
    moved = (fn(x, y) - x).flatten(1).norm(dim=1)
    assert (moved <= 0.05 * (1 + 1e-5) + 1e-6).all()


@pytest.mark.parametrize(("attack", "norm"), [("pgd-l2", "l2"), ("pgd", "l2")])
def test_l2_pgd_passes_every_sanity_check_on_the_zoo(attack: str, norm: str) -> None:
    result = evaluate(ZOO_DEITS, [attack], eps=[0.0, 0.5, 1.0], norm=norm, n_examples=16, seed=0)
    checks = [c.to_dict() for c in result.summary.checks]
    assert {c["model"] for c in checks} == set(ZOO_DEITS)
    failing = [(c["model"], c["name"], c["status"], c["detail"]) for c in checks if c["status"] != "pass"]
    assert not failing, failing
    rows = result.rows[result.rows.attack != "clean"]
    assert rows.pert_norm.notna().all() and (rows[rows.eps == 0].pert_norm == 0).all()
