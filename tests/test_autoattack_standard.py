"""autoattack-standard: the reference settings reach torchattacks' components (steps, targets, queries set
explicitly, never left at torchattacks' defaults), in AutoAttack's order."""

from __future__ import annotations

import pytest
import torch
import torchattacks
from torch import nn

from robustbench_filters.attacks import standard
from robustbench_filters.attacks.apgd import EarlyAPGD, EarlyAPGDT
from robustbench_filters.attacks.catalogue import ATTACKS, AttackParams, Norm


def _components(norm: Norm = Norm.LINF, **kwargs) -> dict:
    model = nn.Sequential(nn.Flatten(), nn.Linear(784, 10))
    params = AttackParams(eps=0.1, norm=norm, steps=None, step_size=None, seed=3, n_classes=10, **kwargs)
    return dict(ATTACKS["autoattack-standard"].build(model, params))


@pytest.mark.parametrize("norm", [Norm.LINF, Norm.L2])
def test_reference_settings_reach_the_components(norm: Norm) -> None:
    c = _components(norm)
    assert list(c) == ["apgd-ce", "apgd-t", "fab-t", "square"]  # AutoAttack's order
    ce, apgd_t, fab, square = c["apgd-ce"], c["apgd-t"], c["fab-t"].attack, c["square"]
    wanted = "Linf" if norm is Norm.LINF else "L2"
    assert isinstance(ce, EarlyAPGD) and (ce.steps, ce.n_restarts, ce.loss, ce.norm) == (100, 1, "ce", wanted)
    assert isinstance(apgd_t, EarlyAPGDT)
    assert (apgd_t.steps, apgd_t.n_target_classes, apgd_t.n_restarts, apgd_t.norm) == (100, 9, 1, wanted)
    assert isinstance(fab, torchattacks.FAB)
    assert (fab.steps, fab.n_target_classes, fab.n_restarts, fab.multi_targeted, fab.norm) == (100, 9, 1, True, wanted)
    assert isinstance(square, torchattacks.Square)
    assert (square.n_queries, square.n_restarts, square.p_init, square.loss, square.rescale_schedule) == (
        5000, 1, 0.8, "margin", False)  # fmt: skip
    assert all(a.eps == 0.1 for a in (ce, apgd_t, fab, square))
    assert len({ce.seed, apgd_t.seed, fab.seed, square.seed}) == 4  # each component its own seed


def test_the_constants_are_the_references() -> None:
    assert (standard.APGD_STEPS, standard.N_TARGETS, standard.FAB_STEPS, standard.SQUARE_QUERIES) == (100, 9, 100, 5000)
    assert ATTACKS["autoattack-standard"].strength == "strong" and not ATTACKS["autoattack-standard"].converges


def test_fewer_classes_fewer_targets_and_probe_budgets() -> None:
    model = nn.Sequential(nn.Flatten(), nn.Linear(784, 5))
    p = AttackParams(eps=0.0, norm=Norm.LINF, steps=1, step_size=None, seed=0, n_classes=5, probe=True)
    c = dict(ATTACKS["autoattack-standard"].build(model, p))
    assert c["apgd-t"].n_target_classes == 4 and c["fab-t"].attack.n_target_classes == 4
    assert c["square"].n_queries == 2 and c["apgd-ce"].steps == 1


def test_it_runs_and_leaves_x_at_eps_zero() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(784, 10)).eval()
    x, y = torch.rand(4, 1, 28, 28), torch.arange(4)
    p = AttackParams(eps=0.0, norm=Norm.LINF, steps=1, step_size=None, seed=0, n_classes=10, probe=True)
    for _, fn in ATTACKS["autoattack-standard"].build(model, p):
        assert torch.equal(fn(x, y), x)
