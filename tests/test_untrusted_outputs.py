"""A user's model outputs are checked by every measurement kind, at the start and mid-run.

At the start (the probe before any folder is written), anything but a finite (batch, classes) tensor of logits
((batch, seq, vocab) for an LM) is refused in one line: ``RobfiltError`` from the API, exit 2 and one ``error:``
line from the CLI, one JSON object under ``--json``. Mid-run (adversarial inputs, corrupted inputs, noise draws,
later batches), bad outputs are never counted as a prediction and fail a sanity check (exit 3): an all-NaN logit
row must not become class 0.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from _untrusted_models import build, level_data, write_level_folder, write_models

from robustbench_filters.api.benchmark import benchmark
from robustbench_filters.api.evaluate import certify, estimate_lipschitz, evaluate
from robustbench_filters.checks.logits import guard_logits, predictions
from robustbench_filters.cli import run
from robustbench_filters.configs import CertifyConfig
from robustbench_filters.core.errors import RobfiltError
from robustbench_filters.smoothing import Sampling
from robustbench_filters.smoothing.sampler import sample_counts

LABELS = [0, 1, 2, 3, 0, 1, 2, 3]
FAST = dict(eps=[0.03], n_examples=8, steps=1, checkpoint="none")
BAD_AT_START = {
    "tuple": "returns a tuple",
    "dict": "returns a dict",
    "list": "returns a list",
    "numpy": "returns a ndarray",
    "float": "returns a float",
    "rank1": r"shape \(2,\)",
    "rank3": r"shape \(2, 1, 10\)",
    "batch": "1 rows? for a batch of 2",
    "nans": "non-finite",
    "infs": "non-finite",
}


def _failed(summary: Any) -> dict[str, str]:
    """The failed checks of a run's summary (typed, or the JSON a command printed): name -> detail."""
    checks = [c.to_dict() for c in summary.checks] if hasattr(summary, "checks") else summary["checks"]
    return {c["name"]: c["detail"] for c in checks if c["status"] == "fail"}


# --- the shared guard ---------------------------------------------------------------------------------------------


def test_guard_turns_bad_rows_into_nan_and_never_into_class_zero() -> None:
    z = torch.tensor([[1.0, 2.0], [float("nan"), 0.0], [0.0, float("inf")], [3.0, -1.0]])
    guarded = guard_logits(z, 4, 2)
    assert torch.isnan(guarded[1:3]).all() and torch.equal(guarded[[0, 3]], z[[0, 3]])
    assert predictions(guarded).tolist() == [1, -1, -1, 0]
    for bad in ((z, z), {"logits": z}, z[:, None], z[:2], z[:, :1], np.zeros((4, 2))):
        out = guard_logits(bad, 4, 2)
        assert out.shape == (4, 2) and torch.isnan(out).all() and predictions(out).tolist() == [-1] * 4


# --- at the start: one line -----------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", sorted(BAD_AT_START))
def test_image_attack_refuses_bad_outputs_at_the_start(bad: str) -> None:
    x, y = level_data(LABELS)
    with pytest.raises(RobfiltError, match=BAD_AT_START[bad]) as err:
        evaluate(build(bad=bad), ["fgsm"], data=(x, y), **FAST)
    assert "\n" not in str(err.value) and "model0" in str(err.value)


@pytest.mark.parametrize("json_mode", [False, True])
@pytest.mark.parametrize("bad", ["tuple", "dict", "nans"])
def test_cli_refuses_bad_outputs_in_one_line(tmp_path: Path, capfd, bad: str, json_mode: bool) -> None:
    models = write_models(tmp_path)
    argv = ["attack", "--model", f"{models}:build?bad={bad}", "--checkpoint", "none", "--attack", "fgsm",
            "--eps", "0.03", "--n-examples", "4", "--out", str(tmp_path / "run"), "-q"]  # fmt: skip
    code = run(argv + (["--json"] if json_mode else []))
    cap = capfd.readouterr()
    lines = [ln for ln in cap.err.splitlines() if ln.strip()]
    assert code == 2, cap.err
    assert len(lines) == 1 and lines[0].startswith("error:") and "Traceback" not in cap.err, cap.err
    assert BAD_AT_START[bad].split(" ")[-1] in lines[0]
    if json_mode:  # exactly one JSON object on stdout
        assert json.loads(cap.out)["exit_code"] == 2
    assert not (tmp_path / "run").exists()


COMMANDS = {
    "attack": ["attack", "--attack", "fgsm", "--eps", "0.03", "--n-examples", "4"],
    "corruption": ["attack", "--attack", "corruption:contrast", "--severity", "1", "--n-examples", "4"],
    "certify": ["certify", "--n0", "4", "--n", "8", "--attack-examples", "0", "--n-examples", "4"],
    "lipschitz": ["lipschitz", "--data", "fashion-mnist", "--no-bounds", "-n", "2"],
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_refuses_a_tuple_model_in_one_json_line(tmp_path: Path, capfd, command: str) -> None:
    models = write_models(tmp_path)
    argv = [*COMMANDS[command], "--model", f"{models}:build?bad=tuple", "--checkpoint", "none",
            "--out", str(tmp_path / "run"), "-q", "--json"]  # fmt: skip
    code = run(argv)
    cap = capfd.readouterr()
    lines = [ln for ln in cap.err.splitlines() if ln.strip()]
    assert code == 2 and len(lines) == 1 and "returns a tuple" in lines[0], cap.err
    assert json.loads(cap.out)["exit_code"] == 2 and not (tmp_path / "run").exists()


def test_cli_certify_exit_3_when_some_noise_draws_are_nan(tmp_path: Path, capfd) -> None:
    models = write_models(tmp_path)  # fashion-mnist's first pixel is background: NaN on ~16% of the draws
    argv = ["certify", "--model", f"{models}:build?bad=nans&when=bright", "--checkpoint", "none", "--sigma", "0.5",
            "--n0", "10", "--n", "30", "--attack-examples", "0", "--n-examples", "4", "--out", str(tmp_path / "run"),
            "-q", "--json"]  # fmt: skip
    assert run(argv) == 3
    summary = json.loads(capfd.readouterr().out)
    failed = [c["name"] for c in summary["checks"] if c["status"] == "fail"]
    assert failed == ["model outputs finite on every noise draw"]
    assert all(v["0.5"]["abstain_rate"] == 1.0 for v in summary["models"].values())


def test_corruptions_refuse_a_tuple_model() -> None:
    x, y = level_data(LABELS)
    with pytest.raises(RobfiltError, match="returns a tuple"):
        evaluate(build(bad="tuple"), ["corruption:gaussian_noise"], data=(x, y), n_examples=8, checkpoint="none",
                 severities=[1])  # fmt: skip


def test_certify_refuses_an_all_nan_model_instead_of_certifying_it() -> None:
    x, y = level_data(LABELS)
    config = CertifyConfig(models=(build(bad="nans"),), sigmas=(0.25,), data=(x, y), n_examples=8, n0=4, n=8,
                           checkpoint="none", attack_examples=0)  # fmt: skip
    with pytest.raises(RobfiltError, match="non-finite"):
        certify(config=config)


@pytest.mark.parametrize("bad", ["tuple", "nans", "rank3"])
def test_lipschitz_refuses_bad_outputs(bad: str) -> None:
    x, y = level_data(LABELS)
    with pytest.raises(RobfiltError, match=BAD_AT_START[bad]):
        estimate_lipschitz([build(bad=bad)], n_examples=2, bounds=False, inputs=x, input_labels=y, checkpoint=None)


def test_benchmark_refuses_a_tuple_model_naming_the_parameter() -> None:
    x, y = level_data(LABELS)
    with pytest.raises(RobfiltError, match="returns a tuple"):
        benchmark(build(bad="tuple"), data=(x, y), eps=0.03, attack="fgsm", steps=1)


def _plain_function(x: torch.Tensor) -> torch.Tensor:
    return x.flatten(1)[:, :10]


def test_a_plain_function_is_refused_by_every_api_naming_its_parameter() -> None:
    x, y = level_data(LABELS)
    with pytest.raises(RobfiltError, match=r"^model must be .*nn\.Module.*got function"):
        benchmark(_plain_function, data=(x, y), eps=0.03)
    with pytest.raises(RobfiltError, match=r"models\[0\] is a function.*nn\.Module"):
        evaluate(_plain_function, ["fgsm"], data=(x, y), **FAST)
    with pytest.raises(RobfiltError, match=r"models\[1\] is a function"):
        evaluate([build(), _plain_function], ["fgsm"], data=(x, y), **FAST)
    with pytest.raises(RobfiltError, match=r"models\[0\] is a function"):
        certify([_plain_function], data=(x, y), n_examples=8, checkpoint="none")
    with pytest.raises(RobfiltError, match=r"models\[0\] is a function"):
        estimate_lipschitz([_plain_function], n_examples=2, inputs=x)
    with pytest.raises(RobfiltError, match=r"models\[0\] is a class.*instance"):
        evaluate(torch.nn.Linear, ["fgsm"], data=(x, y), **FAST)
    with pytest.raises(RobfiltError, match=r"^model must be .*got the class Linear; pass an instance"):
        benchmark(torch.nn.Linear, data=(x, y), eps=0.03)


def test_lm_refuses_a_tuple_from_forward_embeddings() -> None:
    model = _tiny_lm()
    inner = model.forward_embeddings
    model.forward_embeddings = lambda emb: (inner(emb), emb)
    with pytest.raises(RobfiltError, match="returns a tuple"):
        evaluate([model], ["wordswap"], data="austen", n_examples=2, rates=[0.1], checkpoint="none")


# --- mid-run: never a prediction, a failed check -----------------------------------------------------------------


@pytest.mark.parametrize("attack", ["fgsm", "pgd"])  # pgd's random start: the bad outputs come inside torchattacks
@pytest.mark.parametrize("bad", ["nans", "tuple", "rank3"])
def test_bad_outputs_on_adversarial_inputs_fail_a_check_and_count_as_no_prediction(bad: str, attack: str) -> None:
    x, y = level_data(LABELS)
    res = evaluate(build(bad=bad, when="offgrid"), [attack], data=(x, y), **FAST)
    clean = res.rows[res.rows.attack == "clean"]
    adv = res.rows[res.rows.attack == attack]
    assert clean.correct.all()  # the model is perfect on the clean (on-grid) images
    assert not adv.correct.any() and adv.margin.isna().all()  # labels 0 included: NaN never becomes class 0
    assert "model outputs finite" in _failed(res.summary) and not res.summary.checks_summary.passed


def test_corrupted_inputs_with_nan_outputs_fail_a_check() -> None:
    x, y = level_data(LABELS)
    res = evaluate(build(bad="nans", when="offgrid"), ["corruption:gaussian_noise"], data=(x, y), n_examples=8,
                   checkpoint="none", severities=[1])  # fmt: skip
    cor = res.rows[res.rows["kind"] == "contamination"]
    assert not cor.correct.any() and "model outputs finite" in _failed(res.summary)


def test_cli_exit_3_when_adversarial_outputs_are_nan(tmp_path: Path, capfd) -> None:
    models = write_models(tmp_path)
    folder = write_level_folder(tmp_path / "images", [str(k) for k in range(4)])
    argv = ["attack", "--model", f"{models}:build?bad=nans&when=offgrid", "--checkpoint", "none", "--attack",
            "fgsm", "--eps", "0.03", "--data", f"imagefolder:{folder}", "--img-size", "8", "--n-examples", "8",
            "--out", str(tmp_path / "run"), "-q", "--json"]  # fmt: skip
    assert run(argv) == 3
    summary = json.loads(capfd.readouterr().out)  # exactly one JSON object on stdout
    assert not summary["checks_summary"]["passed"] and summary["models"]


def test_smoothing_never_counts_a_nan_draw_as_a_vote() -> None:
    x, y = level_data([0, 1])
    model = build(bad="nans", when="bright")
    counts = sample_counts(model, x, [0, 1], 0.25, 200, "estimate", Sampling.defaults())
    invalid = 200 - counts.sum(1)
    assert (invalid > 0).all() and (counts >= 0).all()  # NaN draws are no one's votes
    config = CertifyConfig(models=(model,), sigmas=(0.25,), data=(x, y), n_examples=2, n0=20, n=50,
                           checkpoint="none", attack_examples=0)  # fmt: skip
    res = certify(config=config)
    certs = res.rows[res.rows["kind"] == "certificate"]
    assert certs.abstain.all() and (certs.nonfinite_draws > 0).all()
    assert "model outputs finite on every noise draw" in _failed(res.summary)


@pytest.mark.filterwarnings("ignore:All-NaN slice")  # the perplexity interval of all-NaN rows
def test_lm_nan_logits_mid_run_fail_a_check() -> None:
    model = _tiny_lm()
    inner, calls = model.forward_embeddings, []

    def later_nan(emb: torch.Tensor) -> torch.Tensor:
        calls.append(1)
        out = inner(emb)
        return out if len(calls) == 1 else out * float("nan")

    model.forward_embeddings = later_nan
    res = evaluate([model], ["wordswap"], data="austen", n_examples=2, rates=[0.1], checkpoint="none")
    assert (res.rows.correct_tokens == 0).all() and res.rows.nll_sum.isna().all()
    assert "model outputs finite" in _failed(res.summary)


def test_lipschitz_nan_outputs_mid_run_are_no_prediction() -> None:
    x, y = level_data([0, 1, 2, 3])
    x[2:] += 0.5 / 255  # off the grid: NaN outputs for the last two examples only
    res = estimate_lipschitz([build(bad="nans", when="offgrid")], n_examples=4, bounds=False, inputs=x, input_labels=y,
                             checkpoint=None, batch_size=2)  # fmt: skip
    assert res.examples.pred.tolist()[2:] == [-1, -1] and res.examples.margin.iloc[2:].isna().all()
    assert "model outputs finite" in _failed(res.summary)


def _tiny_lm() -> torch.nn.Module:
    from robustbench_filters.data import CharTokenizer, load_text
    from robustbench_filters.models import create_model

    tok = CharTokenizer.train(load_text("austen", split="train"))
    torch.manual_seed(0)
    model = create_model(
        "lm", vocab_size=tok.vocab_size, n_layer=1, n_head=2, n_embd=16, block_size=32, checkpoint="none"
    ).eval()
    model.tokenizer = tok
    return model


def test_certify_on_tensors_checks_outputs_and_labels_too() -> None:
    x, y = level_data([0, 1])
    common = {"n_examples": None, "n0": 4, "n": 8, "attack_examples": 0}
    with pytest.raises(RobfiltError, match="returns a tuple"):
        certify(build(bad="tuple"), 0.25, data=(x, y), **common)
    with pytest.raises(RobfiltError, match=r"include 10.*returns 10 classes"):
        certify(build(), 0.25, data=(x, torch.tensor([0, 10])), **common)
    with pytest.raises(RobfiltError, match="text"):
        certify(build(), 0.25, data=(x, ["a", "b"]), **common)
    res = certify(build(bad="nans", when="bright"), 0.5, data=(x, y), **{**common, "n0": 10, "n": 30})
    certs = res.rows[res.rows["kind"] == "certificate"]
    assert certs.abstain.all()
    assert {c.name: c.status for c in res.summary.checks}["model outputs finite on every noise draw"] == "fail"


def test_the_guard_keeps_the_model_mode_and_its_numbers() -> None:
    from robustbench_filters.checks.logits import GuardedLogits

    model = build()
    x, _ = level_data([0, 1])
    guarded = GuardedLogits(model, 10)
    assert not guarded.training and torch.equal(guarded(x), model(x))
    guarded.train(guarded.training)  # what torchattacks does when it is done
    assert not model.training
