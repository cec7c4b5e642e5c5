"""BSA and GRC conversions of Hugging Face models: parity at lambda = 0, state-dict round trips, refusals, fine-tuning.

Parity (DESIGN.md §1): GRC with lambda = 0 is the stock block bit for bit (GPT-2 and Llama). BSA with a zero
position kernel (the untied kernel with zero projections: b = 0 exactly) is softmax attention without additive
positions, so it equals the stock GPT-2 whose position table is zero, to fp32 tolerance (fused vs manual paths).
"""

from __future__ import annotations

import copy
import json

import pytest
import torch
from _hf_models import gpt2, llama, save, train_tokenizer

from robustbench_filters.cli import run
from robustbench_filters.core.errors import RobfiltError
from robustbench_filters.data import load_text
from robustbench_filters.models.hf.convert import conversion_settings, convert
from robustbench_filters.models.hf.load import load_hf


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer(load_text("austen", split="train")[:100_000], vocab_size=300)


@pytest.fixture(scope="module")
def ids(tokenizer) -> torch.Tensor:
    text = load_text("austen", split="test")
    return torch.tensor([tokenizer.encode(text[:200])[:40], tokenizer.encode(text[500:700])[:40]])


def _converted(model, **args):
    return convert(copy.deepcopy(model), conversion_settings(args)).eval()


@pytest.mark.parametrize("sublayers", ["all", "attn"])
def test_grc_at_lambda_zero_is_the_stock_block_bit_for_bit(tokenizer, ids, sublayers: str) -> None:
    for build in (gpt2, llama):
        stock = build(tokenizer)
        grc = _converted(stock, variant="grc", grc_lambda=0.0, grc_sublayers=sublayers)
        assert torch.equal(grc(ids).logits, stock(ids).logits), build.__name__
        boosted = _converted(stock, variant="grc", grc_lambda=0.3, grc_sublayers=sublayers)
        assert not torch.allclose(boosted(ids).logits, stock(ids).logits), build.__name__


def test_bsa_with_a_zero_kernel_is_attention_without_positions(tokenizer, ids) -> None:
    stock = gpt2(tokenizer)
    no_positions = copy.deepcopy(stock)
    torch.nn.init.zeros_(no_positions.transformer.wpe.weight)
    for variant in ("bsa", "bsa-grc"):
        model = _converted(stock, variant=variant, grc_lambda=0.0, pos_kernel="untied")
        for block in model.transformer.h:
            torch.nn.init.zeros_(block.attn.pos_q.weight)
        for impl in ("sdpa", "eager"):
            model.config._attn_implementation = impl
            torch.testing.assert_close(model(ids).logits, no_positions(ids).logits, rtol=1e-5, atol=1e-5)
    gaussian = _converted(stock, variant="bsa")  # the default kernel: a real position bias, no additive positions
    assert not torch.allclose(gaussian(ids).logits, no_positions(ids).logits, atol=1e-3)
    sigmas = [b.attn.sigma.detach() for b in gaussian.transformer.h]
    assert all(torch.allclose(s, torch.tensor([2.0, 64.0])) for s in sigmas)  # spread over bsa_sigma (2, 64)


def test_untied_kernel_starts_from_the_pretrained_position_term(tokenizer) -> None:
    """U_Q, U_K start as the layer's query/key projections: the first bias is p_i W_Q . p_j W_K / sqrt(d)."""
    stock = gpt2(tokenizer)
    model = _converted(stock, variant="bsa", pos_kernel="untied")
    attn, c = model.transformer.h[0].attn, stock.config.n_embd
    p = stock.transformer.wpe.weight[:5]
    q = (p @ stock.transformer.h[0].attn.c_attn.weight[:, :c]).view(5, 2, 16).transpose(0, 1)
    k = (p @ stock.transformer.h[0].attn.c_attn.weight[:, c : 2 * c]).view(5, 2, 16).transpose(0, 1)
    expected = (q @ k.transpose(-2, -1)) / 4.0
    got = attn.position_bias(torch.arange(5)[None], torch.arange(5), torch.float32)[0]
    torch.testing.assert_close(got, expected)


@pytest.mark.parametrize(
    "args",
    [
        {"variant": "grc"},
        {"variant": "grc", "grc_learnable": True, "grc_lambda": 0.2},
        {"variant": "bsa"},
        {"variant": "bsa-grc", "pos_kernel": "untied", "grc_sublayers": "attn"},
    ],
    ids=lambda a: "-".join(str(v) for v in a.values()),
)
def test_converted_folders_load_back_as_the_same_model(tokenizer, ids, tmp_path, args) -> None:
    model = _converted(gpt2(tokenizer), **args)
    with torch.no_grad():  # move the new parameters off their initial values, so the round trip is not trivial
        for name, p in model.named_parameters():
            if "sigma_theta" in name or "grc_logit" in name or "pos_q" in name:
                p.add_(0.05)
    save(model, tokenizer, tmp_path / "m")
    record = json.loads((tmp_path / "m" / "config.json").read_text())["robfilt"]
    assert record["variant"] == args["variant"] and record["format"] == 1
    back = load_hf(str(tmp_path / "m"))
    assert back.variant == args["variant"]
    ours, theirs = model.state_dict(), back.hf.state_dict()
    assert ours.keys() == theirs.keys()
    assert all(torch.equal(ours[k], theirs[k]) for k in ours)
    assert torch.equal(back.hf(ids).logits, model(ids).logits)


def test_llama_grc_round_trips_and_bsa_is_refused_with_the_reason(tokenizer, ids, tmp_path) -> None:
    model = _converted(llama(tokenizer), variant="grc", grc_lambda=0.25)
    save(model, tokenizer, tmp_path / "llama-grc")
    back = load_hf(str(tmp_path / "llama-grc"))
    assert back.variant == "grc" and torch.equal(back.hf(ids).logits, model(ids).logits)
    with pytest.raises(RobfiltError, match="rotary positions, which have no such terms"):
        _converted(llama(tokenizer), variant="bsa")
    with pytest.raises(RobfiltError, match="already a robfilt grc model"):
        convert(model, conversion_settings({"variant": "grc"}))


@pytest.mark.parametrize(
    ("args", "match"),
    [
        ({"variant": "bsaa"}, "Did you mean"),
        ({"grc_lambda": 0.1}, "need variant="),
        ({"variant": "grc", "grc_lambda": 1.5}, "grc_lambda must be in"),
        ({"variant": "grc", "lr": 0.1}, "only conversion arguments"),
        ({"variant": "bsa", "pos_kernel": "rope"}, "unknown pos_kernel"),
    ],
)
def test_bad_conversion_settings_are_one_line(args: dict, match: str) -> None:
    with pytest.raises(RobfiltError, match=match) as err:
        conversion_settings(args)
    assert "\n" not in str(err.value)


def test_a_converted_folder_with_a_missing_tensor_is_refused(tokenizer, tmp_path) -> None:
    from safetensors.torch import load_file, save_file

    folder = save(_converted(gpt2(tokenizer), variant="grc"), tokenizer, tmp_path / "m")
    state = load_file(str(folder / "model.safetensors"))
    del state["transformer.h.1.grc_lambda"]
    save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(RobfiltError, match="lacks transformer.h.1.grc_lambda"):
        load_hf(str(folder))


@pytest.mark.parametrize(
    "variant",
    ["bsa-grc", pytest.param("bsa", marks=pytest.mark.slow), pytest.param("grc", marks=pytest.mark.slow)],
)
def test_train_converts_fine_tunes_and_reloads(hf_models, tmp_path, capsys, variant: str) -> None:
    """robfilt train --model hf:DIR --variant V: a few steps, then --model hf:OUT is the same variant."""
    out = tmp_path / "out"
    argv = ["train", "--model", f"hf:{hf_models.gpt2}", "--variant", variant, "--data", f"text:{hf_models.text}",
            "--steps", "4", "--batch-size", "2", "--max-length", "32", "--ckpt-every", "2", "--out", str(out),
            "--json", "-q"]  # fmt: skip
    assert run(argv) == 0
    info = json.loads(capsys.readouterr().out)
    assert {"test_word_perplexity", "test_byte_perplexity", "test_bits_per_byte"} <= set(info["metrics"])
    card = json.loads((out / "card.json").read_text())
    assert card["variant"] == variant and card["recipe"]["steps"] == 4 and not (out / "train_state").exists()
    lm = load_hf(str(out))
    assert lm.variant == variant
    start = load_hf(str(hf_models.gpt2), conversion={"variant": variant})
    moved = [k for k, v in lm.hf.state_dict().items() if not torch.equal(v, start.hf.state_dict()[k])]
    assert moved  # fine-tuning changed weights
    assert run([*argv[:-2], "--resume", "-q"]) == 0  # a finished folder: nothing left to do
    assert run(["attack", "--model", f"hf:{out}", "--attack", "fgsm", "--eps", "0.05", "--n-examples", "2",
                "--max-length", "32", "--out", str(tmp_path / "run"), "-q"]) == 0  # fmt: skip


def test_a_killed_fine_tuning_resumes_to_the_same_weights(hf_models, tmp_path, monkeypatch) -> None:
    """State is saved every --ckpt-every steps; batches and dropout masks depend on (seed, step) only."""
    from robustbench_filters.train import hf as T
    from robustbench_filters.train.recipe import Recipe

    recipe = Recipe(steps=4, batch_size=2, lr=1e-3, ckpt_every=2, augment=False)
    options = dict(data=f"text:{hf_models.text}", recipe=recipe, seed=3, max_length=16)
    T.train_hf(str(hf_models.gpt2), "bsa-grc", out=tmp_path / "whole", **options)

    batch = T.HFTask.batch

    def dies_at_step_3(self, step: int):  # noqa: ANN001, ANN202
        if step == 3:
            raise RuntimeError("killed")
        return batch(self, step)

    monkeypatch.setattr(T.HFTask, "batch", dies_at_step_3)
    with pytest.raises(RuntimeError, match="killed"):
        T.train_hf(str(hf_models.gpt2), "bsa-grc", out=tmp_path / "killed", **options)
    assert (tmp_path / "killed" / "train_state").exists() and not (tmp_path / "killed" / "card.json").exists()
    monkeypatch.setattr(T.HFTask, "batch", batch)
    T.train_hf(str(hf_models.gpt2), "bsa-grc", out=tmp_path / "killed", resume=True, **options)
    whole, resumed = load_hf(str(tmp_path / "whole")).hf.state_dict(), load_hf(str(tmp_path / "killed")).hf.state_dict()
    assert all(torch.equal(whole[k], resumed[k]) for k in whole)
