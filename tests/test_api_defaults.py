"""The API's defaults are the CLI's: a zoo name loads the zoo weights wherever a name is accepted, and untrained
weights come only on the explicit request ``checkpoint="none"`` (issue 30, item 3).

The evidence is the weights themselves: every run records a digest of each model's weights in its manifest, so the
CLI's run, the API's runs and ``create_model`` / ``load_model`` must all hold the zoo checkpoint's weights.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import safetensors.torch
import torch

import robustbench_filters as rf
from robustbench_filters.cli import run
from robustbench_filters.core.errors import RobfiltError
from robustbench_filters.models.built import built_of
from robustbench_filters.models.checkpoint import zoo_path
from robustbench_filters.models.loading import load_model
from robustbench_filters.runs.runner import weights_digest

TINY = dict(n_examples=2, batch_size=2, seed=0)


def _zoo_state(name: str) -> dict[str, torch.Tensor]:
    return safetensors.torch.load_file(str(zoo_path(name, "micro") / "model.safetensors"))


def _recorded(folder: Path, label: str) -> str:
    return json.loads((folder / "manifest.json").read_text())["config"]["weights"][label]


def _holds_zoo_weights(model: torch.nn.Module, name: str) -> bool:
    state = model.state_dict()
    return all(torch.equal(state[k], v) for k, v in _zoo_state(name).items())


@pytest.mark.parametrize("checkpoint", ["default", None, "zoo"])
def test_create_and_load_model_default_to_the_zoo_weights(checkpoint) -> None:  # noqa: ANN001
    kw = {} if checkpoint == "default" else {"checkpoint": checkpoint}
    assert _holds_zoo_weights(rf.create_model("deit-grc", **kw), "deit-grc")
    assert _holds_zoo_weights(load_model("deit-grc", **kw).module, "deit-grc")


def test_untrained_weights_only_on_request_and_overrides_need_them() -> None:
    torch.manual_seed(0)
    untrained = rf.create_model("deit-grc", checkpoint="none")
    assert not _holds_zoo_weights(untrained, "deit-grc")
    assert load_model("deit-grc", checkpoint="none").source == "untrained"
    assert built_of(rf.create_model("deit-grc", checkpoint="none", grc_lambda=0.0)).spec.config.grc_lambda == 0.0
    with pytest.raises(RobfiltError, match=r"grc_lambda would change the architecture .* checkpoint=none") as info:
        rf.create_model("deit-grc", grc_lambda=0.0)
    assert "\n" not in str(info.value)
    with pytest.raises(RobfiltError, match=r"no zoo weights for deit \(tiny\).*checkpoint=none for untrained"):
        rf.create_model("deit", size="tiny")
    with pytest.raises(RobfiltError, match="unknown model 'dit'"):
        rf.create_model("dit")


def test_the_cli_and_every_api_entry_point_attack_the_same_zoo_weights(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    zoo = weights_digest(rf.create_model("deit"))
    assert run(["attack", "--model", "deit", "--attack", "fgsm", "--eps", "0.01", "-n", "2", "-q",
                "--out", str(tmp_path / "cli")]) == 0  # fmt: skip
    assert _recorded(tmp_path / "cli", "deit") == zoo
    rf.evaluate("deit", "fgsm", [0.01], out=tmp_path / "evaluate", **TINY)
    assert _recorded(tmp_path / "evaluate", "deit") == zoo
    bench = rf.benchmark("deit", eps=0.01, attack="fgsm", out=tmp_path / "benchmark", **TINY)
    assert _recorded(bench.run_dir, "deit") == zoo
    lip = rf.estimate_lipschitz("deit", method="power", power_iters=2, bounds=False, out=tmp_path / "lip", **TINY)
    assert _recorded(lip.path, "deit") == zoo
