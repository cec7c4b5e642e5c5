"""The long runs' midpoint rule: which rows give up, what that saves, and what it must not touch.

The rule (:mod:`robustbench_filters.attacks.abandon`) stops a long APGD run's row at the midpoint when its best
loss, extrapolated by twice its recent gain, still ends short of the boundary. What has to hold: flat far rows
stop and climbing or near rows do not; short runs and runs without early exit (the path tested bit for bit against
torchattacks) never abandon; on a real model it saves passes on the rows it stops, and those are rows the full run
did not break.
(On this small normally trained net every break comes early, so a rule far more eager would pass that last
assertion too: the rule's strength on adversarially trained models is B9's to judge, docs/attacks.md.)
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from robustbench_filters.attacks.abandon import Abandon
from robustbench_filters.attacks.targeted import RankedAPGDT, TargetPlan
from robustbench_filters.data import load_images
from tests.test_default_attack import trained_net


def test_the_midpoint_and_its_window_scale_with_the_run() -> None:
    rule = Abandon()
    assert rule.steps_at(100) == (39, 49)
    assert rule.steps_at(200) == (79, 99)
    assert rule.applies(100) and not rule.applies(25) and not rule.applies(8)


def test_flat_far_rows_stop_and_climbing_or_near_rows_do_not() -> None:
    rule = Abandon()
    earlier = torch.tensor([-0.45, -0.45, -0.30, -0.05, -0.20])
    now = torch.tensor([-0.45, -0.14, -0.29, -0.05, -0.16])
    # flat and far: stops; climbing fast (the deit-grc-at row of the module docstring): kept; slow and far:
    # stops (-0.29 + 2 * 0.01 * 5 = -0.19); near the boundary: kept; -0.16 + 2 * 0.04 * 5 = +0.24: kept
    assert rule.stops(100, earlier, now).tolist() == [True, False, True, False, False]


@pytest.fixture(scope="module")
def setting() -> tuple[torch.nn.Module, torch.Tensor, torch.Tensor]:
    net = trained_net(1)
    for p in net.parameters():
        p.requires_grad_(False)
    data = load_images("fashion-mnist", split="test")
    return net, data.x[:64], data.y[:64]


def _escalated(net: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, plan: TargetPlan, early: bool = True):
    atk = RankedAPGDT(net, plan=plan, steps=plan.sweep_steps, n_classes=10, seed=3, norm="Linf", eps=0.03,
                      early_stop=early)  # fmt: skip
    acc, _ = atk.perturb(x, y)
    return acc, atk.ledger


def test_on_a_trained_model_it_saves_passes_and_keeps_what_the_long_runs_break(setting) -> None:
    net, x, y = setting
    plan = replace(TargetPlan(), near=2.0, second=0.0, retry=0.0)  # every survivor of the sweep gets a long run
    full_acc, full = _escalated(net, x, y, replace(plan, abandon=None))
    cut_acc, cut = _escalated(net, x, y, plan)
    full_passes, cut_passes = full.fwd + full.bwd, cut.fwd + cut.bwd
    stopped = cut_passes < full_passes  # the rows the rule gave up on, and only those, cost less
    assert bool(stopped.any()), "the rule stopped nothing: the test has no teeth"
    assert float(cut_passes.sum()) < 0.9 * float(full_passes.sum())
    assert not bool((full_acc[stopped] == 0).any()), "a row the full long run breaks was abandoned"
    # away from the rows it stopped, the runs are the same runs: the same examples fall
    assert torch.equal(full_acc[~stopped], cut_acc[~stopped])


def test_without_early_exit_nothing_is_abandoned(setting) -> None:
    net, x, y = setting
    plan = replace(TargetPlan(), near=2.0, second=0.0, retry=0.0, escalate_steps=60)
    a_acc, a = _escalated(net, x[:16], y[:16], plan, early=False)
    b_acc, b = _escalated(net, x[:16], y[:16], replace(plan, abandon=None), early=False)
    assert torch.equal(a_acc, b_acc) and torch.equal(a.fwd + a.bwd, b.fwd + b.bwd)
