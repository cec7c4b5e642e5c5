"""Messages tell the truth (issue 30, item 6): each names the real cause and the fix that applies, from the CLI and
the API; and what docs/attacks.md says of the compute ledger is what the rows hold."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import robustbench_filters as rf
from robustbench_filters.attacks.ledger import CountingModel
from robustbench_filters.cli import run
from robustbench_filters.core.errors import RobfiltError

ROOT = Path(__file__).resolve().parents[1]


def _error(capfd) -> str:  # noqa: ANN001
    err = capfd.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error: "), err
    return err


@pytest.fixture
def own_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "austen.txt").write_text("It is a truth universally acknowledged.\n")
    (tmp_path / "shots").mkdir()
    return tmp_path


@pytest.mark.parametrize(
    ("model", "data", "says", "never"),
    [
        ("lm", "austen.txt", "use 'text:austen.txt' (plain text)", "hf-disk:austen.txt"),
        ("lm", "shots", "'hf-disk:shots'", "imagefolder:"),
        ("deit", "shots", "use 'imagefolder:shots' (one sub-folder of images per class) or 'hf-disk:shots'", "text:"),
        ("deit", "austen.txt", "it is a file, and these models read folders: 'imagefolder:<folder>'", "text:"),
    ],
)
def test_own_data_without_a_prefix_gets_the_prefix_that_reads_it(own_data, capfd, model, data, says, never) -> None:  # noqa: ANN001
    assert run(["attack", "--model", model, "--data", data, "-n", "1"]) == 2
    err = _error(capfd)
    assert says in err and never not in err, err
    with pytest.raises(RobfiltError, match="unknown data") as exc:
        rf.evaluate(model, data=data, n_examples=1)
    assert says in str(exc.value)


@pytest.mark.parametrize(("model", "attack", "listed"), [("lm", "autoattack-fast", "fgsm, pgd, wordswap"),
                                                         ("lm", "square", "fgsm, pgd, wordswap")])  # fmt: skip
def test_an_attack_of_the_other_family_lists_every_attack_that_fits(capfd, model, attack, listed) -> None:  # noqa: ANN001
    assert run(["attack", "--model", model, "--attack", attack, "-n", "1"]) == 2
    assert f"for lm use one of: {listed}." in _error(capfd)
    with pytest.raises(RobfiltError, match=f"use one of: {listed}"):
        rf.evaluate(model, attack, n_examples=1)


def test_the_ledger_is_exact_for_whole_batch_calls_and_says_so_for_subsets() -> None:
    """The rule docs/attacks.md states: a wrapped attack's per-example count is exact when every call took the whole
    batch (FAB on examples still standing), and spread evenly, marked inexact, when the attack picked subsets."""
    model = CountingModel(torch.nn.Flatten())
    model(torch.zeros(4, 2))
    model(torch.zeros(4, 2))
    fwd, _, exact = model.per_example(4, torch.device("cpu"))
    assert exact and fwd.tolist() == [2, 2, 2, 2]
    model.reset()
    model(torch.zeros(4, 2))
    model(torch.zeros(1, 2))  # a subset the attack chose: no per-example attribution
    fwd, _, exact = model.per_example(4, torch.device("cpu"))
    assert not exact and int(fwd.sum()) == 5


def test_fab_rows_are_exact_as_the_docs_say() -> None:
    rows = rf.evaluate("deit", "fab", [0.05], n_examples=4, batch_size=4, steps=2).rows
    fab = rows[rows.attack == "fab"]
    assert len(fab) == 4 and fab.cost_exact.all()
    text = " ".join((ROOT / "docs" / "attacks.md").read_text().split())
    assert "`cost_exact` is true: so it is for FAB's rows" in text
    assert "(torchattacks' FAB, Square) are counted by a wrapper" not in text
