"""Hugging Face causal LMs through every LM route: attack, contamination, lm-eval perplexity, report, gate, Lipschitz,
resume, torchrun and benchmark, from the CLI and from Python, on a tiny GPT-2 and a tiny Llama (tests/_hf_models.py).

The first test is the default-run end-to-end check; the heavier ones are marked slow.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch

from robustbench_filters.api.benchmark import benchmark
from robustbench_filters.api.evaluate import evaluate
from robustbench_filters.cli import run
from robustbench_filters.models.hf.load import load_hf

COMMON = ["--n-examples", "6", "--batch-size", "3", "--max-length", "32", "--steps", "10", "-q"]


def _attack(hf_models, out: Path, *extra: str) -> list[str]:
    models = f"gpt2=hf:{hf_models.gpt2},llama=hf:{hf_models.llama}"
    return ["attack", "--model", models, "--attack", "fgsm,pgd,wordswap", "--eps", "0,0.05,0.2", "--rate", "0,0.3",
            "--data", f"text:{hf_models.text}", *COMMON, "--out", str(out), *extra]  # fmt: skip


def test_cli_attack_contaminate_perplexity_and_report(hf_models, tmp_path, capsys) -> None:
    """robfilt attack --model hf:DIR --attack pgd,wordswap on a GPT-2 and a Llama folder, then robfilt report."""
    out = tmp_path / "run"
    assert run([*_attack(hf_models, out), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["checks_summary"]["fail"] == 0, summary["checks"]
    assert {c["name"] for c in summary["checks"]} >= {"eps=0 equals clean", "rate 0 equals clean",
                                                      "inside eps-ball, finite", "PGD at least as strong as FGSM"}  # fmt: skip
    for label in ("gpt2", "llama"):
        model = summary["models"][label]
        assert "lm-eval rolling windows (max_length 32, stride 32)" in summary["perplexity_metric"][label]
        assert model["clean"]["cost"]["fwd"] == model["clean"]["n_windows"]  # one pass per window
        for entry in [model["clean"], *model["results"]]:  # perplexity under every condition, lm-eval's too
            assert entry["word_perplexity"] > 1 and entry["byte_perplexity"] > 1 and entry["bits_per_byte"] > 0
        pgd = [r for r in model["results"] if r["attack"] == "pgd"]
        assert pgd[-1]["ppl"] > model["clean"]["ppl"]  # the attack moves the loss
        assert summary["eps_scale"][label] > 0
    rows = pd.read_parquet(out / "rows.parquet")
    assert (rows.n_bytes > 0).all() and (rows.n_words > 0).all()
    assert set(rows.kind) == {"clean", "adversarial", "contamination"}

    assert run(["report", str(out), "--out", str(tmp_path / "report"), "-q"]) == 0
    tables = tmp_path / "report" / "tables"
    assert "Token perplexity" in (tables / "perplexity.md").read_text()
    lm_eval = (tables / "lm_eval.md").read_text()
    assert "word_perplexity" in lm_eval and "gpt2" in lm_eval and "llama" in lm_eval
    assert " x1." in (tables / "perplexity.md").read_text()  # the ratio to clean, as the terminal shows it
    assert "passes" in (tables / "lm_compute_ledger.md").read_text()
    assert (tmp_path / "report" / "figures" / "perplexity_vs_budget.png").exists()
    assert run(["verify", str(out)]) == 0


@pytest.mark.slow
def test_python_api_takes_a_loaded_model_and_its_tokenizer(hf_models, tmp_path) -> None:
    """evaluate/benchmark with transformers objects give the rows of --model hf:DIR."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(str(hf_models.llama))
    tok = AutoTokenizer.from_pretrained(str(hf_models.llama))
    options = dict(eps=[0.05], rates=[0.0, 0.3], n_examples=4, batch_size=2, steps=10, max_length=32,
                   data=f"text:{hf_models.text}")  # fmt: skip
    by_object = evaluate(model, ["pgd", "wordswap"], tokenizer=tok, **options)
    by_ref = evaluate(f"hf:{hf_models.llama}", ["pgd", "wordswap"], **options)
    cols = ["example_id", "kind", "attack", "eps", "nll_sum", "n_tokens", "n_words", "n_bytes", "pert_norm"]
    pd.testing.assert_frame_equal(by_object.rows[cols], by_ref.rows[cols])

    result = benchmark(model, tokenizer=tok, data=f"text:{hf_models.text}", threat_model="Linf", eps=0.1,
                       n_examples=4, steps=10, max_length=32, out=tmp_path / "bench")  # fmt: skip
    assert result.attack == "pgd" and result.all_checks_passed
    clean, robust = result.perplexities
    assert robust > clean and result.robust.word_perplexity > result.clean.word_perplexity
    assert result.run_dir == tmp_path / "bench" and next(model.parameters()).dtype == torch.float32

    wrapped = load_hf(str(hf_models.gpt2), max_length=32)
    assert evaluate(wrapped, "fgsm", [0.1], n_examples=2, data=f"text:{hf_models.text}").summary.to_dict()["checks_summary"][
        "fail"] == 0  # fmt: skip


@pytest.mark.slow
def test_bf16_runs_and_is_recorded(hf_models, tmp_path, capsys) -> None:
    out = tmp_path / "bf16"
    argv = ["attack", "--model", f"hf:{hf_models.gpt2}", "--attack", "pgd", "--eps", "0.1", "--precision", "bf16",
            "--data", f"text:{hf_models.text}", *COMMON, "--out", str(out), "--json"]  # fmt: skip
    assert run(argv) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["precision"] == "bf16"
    assert json.loads((out / "manifest.json").read_text())["config"]["precision"] == "bf16"
    fp32 = evaluate(f"hf:{hf_models.gpt2}", "pgd", [0.1], n_examples=6, batch_size=3, steps=10, max_length=32,
                    data=f"text:{hf_models.text}")  # fmt: skip
    ppl16 = summary["models"][f"hf:{hf_models.gpt2}"]["clean"]["ppl"]  # the --json output
    ppl32 = fp32.summary.models[f"hf:{hf_models.gpt2}"].clean.ppl  # the typed summary
    assert ppl16 == pytest.approx(ppl32, rel=0.02)


def test_killed_run_resumes_to_the_same_rows(hf_models, tmp_path) -> None:
    """Parts lost (a killed rank) are recomputed on --resume; the finished parts are kept and the rows equal."""
    one, two = tmp_path / "one", tmp_path / "two"
    args = ["attack", "--model", f"hf:{hf_models.gpt2}", "--attack", "pgd,wordswap", "--eps", "0.1", "--rate", "0.3",
            "--data", f"text:{hf_models.text}", *COMMON]  # fmt: skip
    assert run([*args, "--out", str(one)]) == 0
    shutil.copytree(one, two)
    parts = sorted((two / "parts").glob("*.parquet"))
    for p in parts[1::2]:
        p.unlink()
    (two / "summary.json").unlink()
    manifest = json.loads((two / "manifest.json").read_text())
    manifest["status"] = "running"
    (two / "manifest.json").write_text(json.dumps(manifest))
    kept = {p.name: p.stat().st_mtime_ns for p in parts[0::2]}
    assert run([*args, "--out", str(two), "--resume"]) == 0
    assert {p.name: p.stat().st_mtime_ns for p in parts[0::2]} == kept
    pd.testing.assert_frame_equal(pd.read_parquet(one / "rows.parquet"), pd.read_parquet(two / "rows.parquet"))


@pytest.mark.slow
def test_two_ranks_equal_one_process(hf_models, tmp_path, monkeypatch) -> None:
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "GROUP_RANK"):
        monkeypatch.delenv(name, raising=False)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # like each rank: the same float reduction order
    try:
        assert run(_attack(hf_models, tmp_path / "one")) == 0
    finally:
        torch.set_num_threads(threads)
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env["OMP_NUM_THREADS"] = "1"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           "-m", "robustbench_filters.cli", *_attack(hf_models, tmp_path / "two")]  # fmt: skip
    done = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    a, b = tmp_path / "one", tmp_path / "two"
    pd.testing.assert_frame_equal(pd.read_parquet(a / "rows.parquet"), pd.read_parquet(b / "rows.parquet"))
    assert json.loads((a / "summary.json").read_text()) == json.loads((b / "summary.json").read_text())
    assert json.loads((b / "manifest.json").read_text())["world_size"] == 2


@pytest.mark.slow
def test_lipschitz_lower_bounds_in_embedding_space(hf_models, tmp_path, capsys) -> None:
    out = tmp_path / "lip"
    argv = ["lipschitz", "--model", f"hf:{hf_models.gpt2},hf:{hf_models.llama}", "--no-bounds", "--method", "power",
            "-n", "3", "--batch-size", "2", "--seq-len", "12", "--data", f"text:{hf_models.text}", "--out", str(out),
            "--json", "-q"]  # fmt: skip
    assert run(argv) == 0
    summary = json.loads(capsys.readouterr().out)
    for label in (f"hf:{hf_models.gpt2}", f"hf:{hf_models.llama}"):
        assert summary["models"][label]["lower_mean"] > 0
    rows = pd.read_parquet(out / "rows.parquet")
    assert len(rows) == 6 and rows.lower.notna().all()
    assert run([*argv[:-4], "--out", str(out), "--resume", "-q"]) == 0  # resumes (nothing left to do)
    capsys.readouterr()
    exact = ["lipschitz", "--model", f"hf:{hf_models.gpt2}", "--no-bounds", "--method", "exact", "-n", "1",
             "--seq-len", "6", "--out", str(tmp_path / "exact"), "--json", "-q"]  # fmt: skip
    assert run(exact) == 0
    assert json.loads(capsys.readouterr().out)["models"][f"hf:{hf_models.gpt2}"]["lower_max"] > 0


@pytest.mark.slow
def test_gate_thresholds_on_hf_models(hf_models, tmp_path) -> None:
    """A spec's [lm] section runs hf: folders given relative to the spec; lm-eval thresholds are checked."""
    project = tmp_path / "project"
    (project / "models").mkdir(parents=True)
    (project / "pyproject.toml").write_text("")
    shutil.copytree(hf_models.gpt2, project / "models" / "gpt2")
    shutil.copy(hf_models.text, project / "austen.txt")
    spec = """
[lm]
models = ["hf:models/gpt2"]
attacks = ["pgd", "wordswap"]
eps = [0.1]
rates = [0.0, 0.3]
data = "text:austen.txt"
n_examples = 4
steps = 10
max_length = 32

[[lm.require]]
max_ppl = {ppl}

[[lm.require]]
attack = "pgd"
eps = [0.1]
max_bits_per_byte = 20
max_word_perplexity = 1e12
"""
    (project / "ok.toml").write_text(spec.format(ppl=1000))
    assert run(["check", "--spec", str(project / "ok.toml"), "-q"]) == 0
    (project / "tight.toml").write_text(spec.format(ppl=10))  # a random 384-token model is near 384
    assert run(["check", "--spec", str(project / "tight.toml"), "--out", str(project / "runs2"), "-q"]) == 1


def test_hub_id_resolves_from_the_local_cache_only(hf_models, tmp_path, monkeypatch) -> None:
    """hf:<org>/<name> loads from the Hugging Face cache layout (refs/main -> snapshots/<commit>), offline."""
    import huggingface_hub.constants as hub

    commit = "0" * 40
    repo = tmp_path / "cache" / "models--tiny--gpt2"
    shutil.copytree(hf_models.gpt2, repo / "snapshots" / commit)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    monkeypatch.setattr(hub, "HF_HUB_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)  # "tiny/gpt2" is not a folder here
    lm = load_hf("tiny/gpt2", max_length=16)
    direct = load_hf(str(hf_models.gpt2), max_length=16)
    ids = torch.tensor([[1, 2, 3, 4]])
    assert torch.equal(lm(ids), direct(ids))
