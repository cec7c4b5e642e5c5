"""robfilt's early-exit PGD/APGD against torchattacks' own attacks, and the compute ledger's counts.

Without early exit each subclass must compute torchattacks' adversarials bit for bit (same seed). With it, the set
of fooled examples must be the one torchattacks' run fooled at some iterate (APGD returns exactly those; PGD
returns its last iterate, so the reference set is read off every forward pass it made), and the ledger must
count exactly the rows the model saw.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torchattacks
from torch import nn

from robustbench_filters.attacks.apgd import EarlyAPGD, EarlyAPGDT
from robustbench_filters.attacks.early import EarlyPGD, EarlyPGDL2
from robustbench_filters.attacks.ledger import CountingModel

N = 48


class Recorder(nn.Module):
    """The model, remembering which rows of each full-batch forward pass were misclassified."""

    def __init__(self, model: nn.Module, y: torch.Tensor) -> None:
        super().__init__()
        self.model, self.y, self.fooled = model, y, torch.zeros(len(y), dtype=torch.bool)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.model(x)
        if len(x) == len(self.y):
            self.fooled |= out.detach().argmax(1) != self.y
        return out


@pytest.fixture(scope="module")
def setup() -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    """A small random conv net and inputs labelled by its own predictions (every example starts correct)."""
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 64, 32), nn.ReLU(), nn.Linear(32, 10)
    ).eval()
    for p in model.parameters():
        p.requires_grad_(False)
    x = torch.rand(N, 1, 8, 8)
    with torch.no_grad():
        y = model(x).argmax(1)
    return model, x, y


def _run(attack: Callable, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    torch.manual_seed(7)
    return attack(x, y)


def _fooled(model: nn.Module, x_adv: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(x_adv).argmax(1) != y


PGD_CASES = [
    (torchattacks.PGD, EarlyPGD, 0.06, 0.015),
    (torchattacks.PGDL2, EarlyPGDL2, 0.5, 0.12),
]


@pytest.mark.parametrize(("ref_cls", "cls", "eps", "alpha"), PGD_CASES)
def test_pgd_matches_torchattacks(setup, ref_cls, cls, eps, alpha) -> None:
    model, x, y = setup
    ref = _run(ref_cls(model, eps=eps, alpha=alpha, steps=8), x, y)
    off = _run(cls(model, eps, alpha, 8, early_stop=False), x, y)
    assert torch.equal(ref, off)  # bit for bit, same seed

    recorder = Recorder(model, y)
    final = _run(ref_cls(recorder, eps=eps, alpha=alpha, steps=8), x, y)
    ever = recorder.fooled | _fooled(model, final, y)  # any iterate torchattacks visited fooled the model
    on_attack = cls(model, eps, alpha, 8, early_stop=True)
    on = _run(on_attack, x, y)
    assert 0 < int(ever.sum()) < N  # the comparison means something
    assert torch.equal(_fooled(model, on, y), ever)
    # early exit spends fewer passes, and none on an example after the step that fooled it
    assert on_attack.ledger.fwd.sum() < 8 * N and (on_attack.ledger.fwd <= 8).all()


@pytest.mark.parametrize("norm", ["Linf", "L2"])
@pytest.mark.parametrize("loss", ["ce", "dlr"])
def test_apgd_matches_torchattacks(setup, norm, loss) -> None:
    model, x, y = setup
    eps = 0.06 if norm == "Linf" else 0.5
    kw = {"norm": norm, "eps": eps, "steps": 12, "n_restarts": 2, "loss": loss, "seed": 3}
    ref = _run(torchattacks.APGD(model, **kw), x, y)
    assert torch.equal(ref, _run(EarlyAPGD(model, early_stop=False, **kw), x, y))
    on = _run(EarlyAPGD(model, early_stop=True, **kw), x, y)
    fooled = _fooled(model, ref, y)
    assert 0 < int(fooled.sum()) < N
    assert torch.equal(_fooled(model, on, y), fooled)


@pytest.mark.parametrize("norm", ["Linf", "L2"])
def test_apgdt_matches_torchattacks(setup, norm) -> None:
    model, x, y = setup
    eps = 0.04 if norm == "Linf" else 0.3
    kw = {"norm": norm, "eps": eps, "steps": 10, "n_restarts": 1, "seed": 3, "n_classes": 10}
    ref = _run(torchattacks.APGDT(model, **kw), x, y)
    assert torch.equal(ref, _run(EarlyAPGDT(model, early_stop=False, **kw), x, y))
    if norm == "Linf":  # under L2 torchattacks' APGD-T couples examples through the first one's step size
        on = _run(EarlyAPGDT(model, early_stop=True, **kw), x, y)
        fooled = _fooled(model, ref, y)
        assert 0 < int(fooled.sum()) < N
        assert torch.equal(_fooled(model, on, y), fooled)


def test_apgdt_takes_the_closest_targets(setup) -> None:
    """``n_targets`` runs the classes with the highest clean logits after the top one, in that order."""
    model, x, y = setup
    seen: list[int] = []
    atk = EarlyAPGDT(model, norm="Linf", eps=0.0, steps=2, n_classes=10, n_targets=3, seed=0)
    original = atk.get_logits

    def spy(inputs: torch.Tensor) -> torch.Tensor:
        seen.append(atk.target_class)
        return original(inputs)

    atk.get_logits = spy  # type: ignore[method-assign]
    atk(x, y)
    assert sorted(set(seen) - {None}) == [2, 3, 4]  # torchattacks' indices of the 2nd-4th largest logits


@pytest.mark.parametrize(
    "build",
    [
        lambda m: EarlyPGD(m, 0.06, 0.015, 8, restarts=2),
        lambda m: EarlyPGD(m, 0.06, 0.015, 8, loss="margin"),
        lambda m: EarlyAPGD(m, norm="Linf", eps=0.06, steps=12, n_restarts=2, seed=1),
        lambda m: EarlyAPGDT(m, norm="Linf", eps=0.04, steps=10, n_classes=10, n_targets=3, seed=1),
        lambda m: EarlyAPGD(m, norm="Linf", eps=0.06, steps=12, seed=1, early_stop=False),
    ],
)
def test_ledger_counts_every_row_the_model_saw(setup, build) -> None:
    model, x, y = setup
    counter = CountingModel(model)
    atk = build(counter)
    x_adv = _run(atk, x, y)
    assert int(atk.ledger.fwd.sum()) == sum(counter.fwd_rows)
    assert int(atk.ledger.bwd.sum()) == sum(counter.bwd_rows)
    assert (atk.ledger.fwd >= atk.ledger.bwd).all() and (atk.ledger.bwd > 0).all()
    assert (x_adv - x).abs().amax() <= 0.06 + 1e-6  # every returned point stays in its ball


@pytest.mark.parametrize(
    "build",
    [
        lambda m, early: EarlyAPGD(m, norm="Linf", eps=0.04, steps=8, n_restarts=2, seed=1, parallel=True,
                                   early_stop=early),
        lambda m, early: EarlyAPGDT(m, norm="Linf", eps=0.03, steps=8, n_restarts=2, n_classes=10, n_targets=3,
                                    seed=1, parallel=True, early_stop=early),
    ],
)  # fmt: skip
def test_parallel_runs_leave_together_and_count_exactly(setup, build) -> None:
    """Runs as copies in one batch: early exit (all copies of an example leave once one fools the model) changes
    the cost, not which examples are fooled; the ledger counts every copy's passes for its example."""
    model, x, y = setup
    counter = CountingModel(model)
    on, off = build(counter, True), build(model, False)
    fooled_on, fooled_off = _fooled(model, _run(on, x, y), y), _fooled(model, _run(off, x, y), y)
    assert 0 < int(fooled_off.sum()) < N and torch.equal(fooled_on, fooled_off)
    assert int(on.ledger.fwd.sum()) == sum(counter.fwd_rows) < int(off.ledger.fwd.sum())


def test_restarts_find_at_least_what_one_run_finds(setup) -> None:
    model, x, y = setup
    one = _fooled(model, _run(EarlyPGD(model, 0.04, 0.01, 6), x, y), y)
    two = _fooled(model, _run(EarlyPGD(model, 0.04, 0.01, 6, restarts=2), x, y), y)
    assert (two | ~one).all()  # the second restart only adds broken examples (the first one is the same run)


def test_counting_model_attributes_full_batch_calls_exactly(setup) -> None:
    model, x, y = setup
    counter = CountingModel(model)
    torchattacks.FGSM(counter, eps=0.03)(x, y)
    fwd, bwd, exact = counter.per_example(N, x.device)
    assert exact and fwd.tolist() == [1.0] * N and bwd.tolist() == [1.0] * N
    counter.reset()
    counter(x[:5])  # a call on a subset the counter cannot attribute: the total is spread and flagged
    fwd, _, exact = counter.per_example(N, x.device)
    assert not exact and fwd.sum().item() == pytest.approx(5.0)
