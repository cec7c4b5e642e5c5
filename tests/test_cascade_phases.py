"""The cascade's order: a checked attack runs its grid descending, an unchecked one ascending.

A checked attack (the default and its check) searches an example fully, the check included, at the largest eps it
survives; at a smaller eps the example is covered by that search of a larger ball and costs nothing. An attack
without a check runs ascending, each eps on the survivors of the smaller one, its breaks counting upward. What has
to hold: deferring changes nothing at one eps, the multi-eps run is never weaker than each eps run alone on these
models, and the passes go down.
"""

from __future__ import annotations

import pytest
import torch

from robustbench_filters.attacks.cascade import Batch, CascadeSettings, cascade
from robustbench_filters.attacks.catalogue import AttackParams, Norm
from robustbench_filters.attacks.targeted import RankedAPGDT, TargetPlan
from robustbench_filters.data import load_images
from tests.test_default_attack import trained_net

GRID = (0.01, 0.02, 0.03)


@pytest.fixture(scope="module")
def net() -> torch.nn.Module:
    model = trained_net(1)
    for p in model.parameters():
        p.requires_grad_(False)
    return model


@pytest.fixture(scope="module")
def batch(net) -> Batch:
    data = load_images("fashion-mnist", split="test")
    x, y = data.x[:48], data.y[:48]
    with torch.no_grad():
        clean = net(x)
    return Batch(x, y, torch.arange(48), clean.argmax(1) == y, clean)


def _run(net, batch: Batch, grid: tuple[float, ...]):
    template = AttackParams(0.0, Norm.LINF, None, None, 0, 10)
    return cascade(net, "m", batch, CascadeSettings("apgd-adaptive", grid, template, convergence=1.0))


def test_a_deferred_escalation_gives_what_an_undeferred_one_gives(net, batch) -> None:
    # a one-step sweep at 0.05 leaves near misses that the long runs (random starts) break
    kwargs = {"plan": TargetPlan(sweep_steps=1), "steps": 1, "n_classes": 10, "seed": 3, "norm": "Linf", "eps": 0.05}
    whole, parts = RankedAPGDT(net, **kwargs), RankedAPGDT(net, **kwargs)
    acc, adv = whole.perturb(batch.x, batch.y)
    parts.defer = True
    swept, _ = parts.perturb(batch.x, batch.y)
    torch.rand(100)  # whatever runs between the two phases does not change the escalation's random starts
    acc2, adv2 = parts.escalate(torch.ones(len(batch.y), dtype=torch.bool))
    assert torch.equal(acc, acc2) and torch.equal(adv, adv2)
    assert bool((swept & ~acc2).any())  # the escalation broke something the sweep left: the test has teeth
    with pytest.raises(RuntimeError):
        parts.escalate(torch.ones(len(batch.y), dtype=torch.bool))


def test_the_escalation_leaves_out_what_the_caller_does_not_keep(net, batch) -> None:
    kwargs = {"plan": TargetPlan(), "steps": 4, "n_classes": 10, "seed": 3, "norm": "Linf", "eps": 0.02}
    atk = RankedAPGDT(net, **kwargs)
    atk.defer = True
    swept, adv = atk.perturb(batch.x, batch.y)
    keep = torch.zeros(len(batch.y), dtype=torch.bool)
    acc, adv2 = atk.escalate(keep)
    assert torch.equal(acc, swept) and torch.equal(adv, adv2) and not atk.escalated.any()
    assert int(atk.ledger.fwd.sum()) == 0


@pytest.fixture
def one_thread():
    """One torch thread, as every robfilt process computes: a pytest process's default pool may change its
    floats with the machine's load (the BLAS library picks its thread count), and these near ties with it."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_multi_eps_is_as_strong_as_each_eps_alone(net, batch, one_thread) -> None:
    """Strength is measured, not proven: the grid's escalation at a smaller eps runs on fewer examples, so its
    random starts differ, and an example can fall to one and not the other (on deit-at at 0.1, n 128, the grid left
    one more). The allowance is the check's: one example."""
    rows = _run(net, batch, GRID)
    for eps in GRID:
        alone = _run(net, batch, (eps,)).set_index("example_id")
        here = rows[rows.eps == eps].set_index("example_id")
        assert int(here.correct.sum()) <= int(alone.correct.sum()) + 1
        # what the grid covered at this eps, the full attack at this eps alone did not break either (but one)
        covered = here.index[here.convergence == "covered"]
        assert int((~alone.loc[covered, "correct"]).sum()) <= 1
    # robust accuracy is non-increasing in eps, and every survivor was checked at the largest eps it survived
    robust = [set(rows[(rows.eps == e) & rows.correct].example_id) for e in GRID]
    assert robust[0] >= robust[1] >= robust[2]
    assert (rows.convergence == "covered").sum() > 0
    for k, eps in enumerate(GRID):
        here = rows[rows.eps == eps]
        top = robust[k + 1] if k + 1 < len(GRID) else set()
        held_above = set(rows[(rows.eps > eps) & (rows.convergence == "held")].example_id)
        assert set(here.example_id[here.convergence == "covered"]) == robust[k] & held_above
        assert set(here.example_id[here.convergence == "covered"]) <= top


def test_the_grid_spends_fewer_passes_than_its_eps_one_by_one(net, batch) -> None:
    rows = _run(net, batch, GRID)
    alone = sum(float((r.fwd + r.bwd + r.conv_fwd + r.conv_bwd).sum()) for r in (_run(net, batch, (e,)) for e in GRID))
    covered = rows.convergence == "covered"
    assert covered.any() and float((rows.fwd + rows.bwd + rows.conv_fwd + rows.conv_bwd)[covered].sum()) == 0.0
    assert float((rows.fwd + rows.bwd + rows.conv_fwd + rows.conv_bwd).sum()) < alone


@pytest.mark.parametrize("attack", ["fgsm", "pgd"])
def test_an_unchecked_attack_runs_ascending_and_its_breaks_count_upward(net, batch, attack) -> None:
    """Holding an attack without a check at a larger eps is no evidence at a smaller one (one FGSM step can
    overshoot there), so nothing is covered: each eps attacks the survivors of the smaller one, and an example
    broken at a smaller eps is broken, at no cost, at every larger one."""
    template = AttackParams(0.0, Norm.LINF, None, None, 0, 10)
    rows = cascade(net, "m", batch, CascadeSettings(attack, GRID, template, convergence=None))
    assert not (rows.convergence == "covered").any()
    for small, large in zip(GRID, GRID[1:], strict=False):
        lo = rows[rows.eps == small].set_index("example_id")
        hi = rows[rows.eps == large].set_index("example_id")
        broken = lo.index[lo.clean_correct & ~lo.correct]
        assert len(broken) and not hi.loc[broken, "correct"].any() and (hi.loc[broken, "fwd"] == 0).all()
    first = rows[rows.eps == GRID[0]]
    assert (first.fwd[first.clean_correct] > 0).all()  # the smallest eps attacks every clean-correct example
