"""Bad inputs for Hugging Face models: each is one ``error:`` line, exit 2, and nothing is written.

Covers issue 24's list and issue 30's untrusted folders (a folder's own code never runs, a folder without a
tokenizer, config.json that is not JSON): the missing ``hf`` extra, a folder that is not a causal LM, a tokenizer that does not match
the model's vocabulary, a window longer than the model's positions, bf16 on a device without it, and a hub id that
is not in the local cache (plus pickle-only weights, options that do not apply, and bad references).
"""

from __future__ import annotations

import io
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from _hf_models import gpt2, save, train_tokenizer

from robustbench_filters.api.evaluate import evaluate
from robustbench_filters.cli import run
from robustbench_filters.core.errors import RobfiltError
from robustbench_filters.data import load_text


@pytest.fixture(scope="module")
def world(hf_models, tmp_path_factory) -> dict[str, Path]:
    """Folders the cases point at: a base GPT-2 without its LM head, a bigger tokenizer, pickle-only weights."""
    from transformers import AutoModelForCausalLM, AutoTokenizer, GPT2Model

    root = tmp_path_factory.mktemp("hf-bad")
    tok = AutoTokenizer.from_pretrained(str(hf_models.gpt2))
    base = GPT2Model(gpt2(tok).config)
    save(base, tok, root / "base-gpt2")
    save(gpt2(tok), train_tokenizer(load_text("austen", split="train")[:100_000], vocab_size=512), root / "big-tok")
    pickled = root / "pickled"
    pickled.mkdir()
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        (pickled / name).write_bytes((hf_models.gpt2 / name).read_bytes())
    (pickled / "pytorch_model.bin").write_bytes(b"not read")
    _custom_code_folders(root, hf_models.gpt2)
    model = AutoModelForCausalLM.from_pretrained(str(hf_models.gpt2))
    model.save_pretrained(root / "no-tok")  # weights and config, no tokenizer
    (root / "only-tok-config").mkdir()
    for name in ("config.json", "model.safetensors", "tokenizer_config.json"):
        (root / "only-tok-config" / name).write_bytes((hf_models.gpt2 / name).read_bytes())
    for name, text in (("bad-json", '{"model_type": "gpt2",\n  "n_embd": 32,\n'), ("json-list", "[1, 2]"),
                       ("unknown-type", '{"model_type": "nonesuch-lm"}')):  # fmt: skip
        (root / name).mkdir()
        (root / name / "config.json").write_text(text)
        (root / name / "model.safetensors").write_bytes((hf_models.gpt2 / "model.safetensors").read_bytes())
    return {"gpt2": hf_models.gpt2, "llama": hf_models.llama, "root": root}


MARKER = "ran-the-folders-code"


def _custom_code_folders(root: Path, gpt2_folder: Path) -> None:
    """Folders whose code would write a marker file next to them if anything ran it: a model with its own
    architecture (config.json's auto_map), and a GPT-2 whose tokenizer has its own class (tokenizer_config.json)."""
    code = f"import pathlib\npathlib.Path(__file__).with_name({MARKER!r}).write_text('ran')\n"
    custom = root / "custom-code"
    custom.mkdir()
    (custom / "config.json").write_text(json.dumps({
        "model_type": "evilgpt", "architectures": ["EvilForCausalLM"],
        "auto_map": {"AutoConfig": "configuration_evil.EvilConfig", "AutoModelForCausalLM": "modeling_evil.EvilLM"},
    }))  # fmt: skip
    for name in ("configuration_evil.py", "modeling_evil.py"):
        (custom / name).write_text(
            code + "from transformers import PretrainedConfig as EvilConfig, GPT2LMHeadModel as EvilLM\n"
        )
    (custom / "model.safetensors").write_bytes((gpt2_folder / "model.safetensors").read_bytes())
    tok = root / "custom-tokenizer"
    shutil.copytree(gpt2_folder, tok)
    config = json.loads((tok / "tokenizer_config.json").read_text())
    config["auto_map"] = {"AutoTokenizer": ["tokenization_evil.EvilTokenizer", None]}
    (tok / "tokenizer_config.json").write_text(json.dumps(config))
    (tok / "tokenization_evil.py").write_text(
        code + "from transformers import PreTrainedTokenizerFast as EvilTokenizer\n"
    )


ATTACK = ["attack", "--attack", "pgd", "--eps", "0.05", "--n-examples", "2", "--max-length", "32"]
CASES = [
    ("not a causal LM", [*ATTACK, "--model", "hf:{root}/base-gpt2"], "not a causal language model"),
    ("tokenizer too big", [*ATTACK, "--model", "hf:{root}/big-tok"], "the tokenizer has 512 tokens but the model"),
    ("other tokenizer", [*ATTACK, "--model", "hf:{gpt2}", "--tokenizer", "{root}/big-tok"], "has 512 tokens"),
    ("no tokenizer folder", [*ATTACK, "--model", "hf:{gpt2}", "--tokenizer", "{root}/nope"], "does not exist"),
    ("window > positions", [*ATTACK[:-1], "128", "--model", "hf:{gpt2}"], "longer than hf:"),
    ("window > positions (llama)", [*ATTACK[:-1], "65", "--model", "hf:{llama}"], "64 positions"),
    ("stride > window", [*ATTACK, "--stride", "40", "--model", "hf:{gpt2}"], "--stride 40 is longer"),
    ("window > block, own LM", [*ATTACK[:-1], "129", "--model", "lm", "--checkpoint", "none"], "block size 128"),
    ("stride > window, own LM", [*ATTACK, "--stride", "33", "--model", "lm", "--checkpoint", "none"], "--stride 33"),
    ("custom code", [*ATTACK, "--model", "hf:{root}/custom-code"], "auto_map AutoConfig: configuration_evil"),
    (
        "custom tokenizer",
        [*ATTACK, "--model", "hf:{root}/custom-tokenizer"],
        "auto_map AutoTokenizer: tokenization_evil",
    ),
    ("no tokenizer", [*ATTACK, "--model", "hf:{root}/no-tok"], "no tokenizer in"),
    (
        "no vocabulary",
        [*ATTACK, "--model", "hf:{root}/only-tok-config"],
        r"save one with `tokenizer\.save_pretrained\(",
    ),
    (
        "no tokenizer, train",
        ["train", "--model", "hf:{root}/no-tok", "--variant", "none", "--steps", "1"],
        "no tokenizer in",
    ),
    ("malformed config", [*ATTACK, "--model", "hf:{root}/bad-json"], "config.json in .* is not valid JSON"),
    ("config not an object", [*ATTACK, "--model", "hf:{root}/json-list"], "holds a JSON list, not an object"),
    ("unknown model_type", [*ATTACK, "--model", "hf:{root}/unknown-type"], "model_type 'nonesuch-lm'"),
    ("no folder", [*ATTACK, "--model", "hf:{root}/missing/dir"], "does not exist"),
    ("folder without hf:", [*ATTACK, "--model", "{gpt2}"], "is a Hugging Face model folder; write --model hf:"),
    (
        "hub id not cached",
        [*ATTACK, "--model", "hf:nobody/not-cached-model"],
        "nor a model in the local Hugging Face cache",
    ),
    ("a file", [*ATTACK, "--model", "hf:{gpt2}/config.json"], "is a file"),
    ("pickle weights", [*ATTACK, "--model", "hf:{root}/pickled"], "pickle files"),
    ("checkpoint", [*ATTACK, "--model", "hf:{gpt2}", "--checkpoint", "{root}/x"], "--checkpoint does not apply"),
    ("bad precision", [*ATTACK, "--model", "hf:{gpt2}", "--precision", "fp8"], "unknown --precision"),
    ("unknown ref arg", [*ATTACK, "--model", "hf:{gpt2}?lr=0.1"], "only conversion arguments"),
    ("rotary bsa", [*ATTACK, "--model", "hf:{llama}?variant=bsa"], "rotary positions"),
    ("image attack", ["attack", "--attack", "apgd-ce", "--model", "hf:{gpt2}"], "does not fit lm models"),
    ("certified bounds", ["lipschitz", "--model", "hf:{gpt2}", "-n", "1", "--seq-len", "8"], "run with --no-bounds"),
    ("train variant", ["train", "--model", "hf:{gpt2}", "--variant", "bsb", "--steps", "1"], "unknown variant"),
    ("train rotary", ["train", "--model", "hf:{llama}", "--variant", "bsa", "--steps", "1"], "rotary positions"),
    (
        "variant, registry",
        ["train", "--model", "lm", "--variant", "grc", "--steps", "1"],
        "--variant does not apply to language models trained from scratch",
    ),
    ("train epochs", ["train", "--model", "hf:{gpt2}", "--epochs", "1"], "step-based"),
]


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def _check_one_line(argv: list[str], needle: str, tmp_path: Path, capfd) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("earlier work")
    before = _snapshot(out)
    code = run([*argv, "--out", str(out / "run"), "-q"])
    err = capfd.readouterr().err.strip()
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2, f"exit {code}: {err}"
    assert len(lines) == 1 and lines[0].startswith("error:") and "Traceback" not in err, err
    assert needle.lower() in lines[0].lower() or re.search(needle, lines[0], re.I), lines[0]
    assert _snapshot(out) == before


@pytest.mark.parametrize(("case", "argv", "needle"), CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_one_line(world, tmp_path, capfd, case: str, argv: list[str], needle: str) -> None:
    args = [a.format(**{k: str(v) for k, v in world.items()}) for a in argv]
    _check_one_line(args, needle, tmp_path, capfd)


def test_missing_extra_names_the_install_command(world, tmp_path, capfd, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "transformers", None)  # `import transformers` now raises ImportError
    ref = f"hf:{world['gpt2']}"
    commands = ([*ATTACK, "--model", ref], ["train", "--model", ref, "--variant", "grc"],
                ["lipschitz", "--model", ref, "--no-bounds", "-n", "1"])  # fmt: skip
    for i, argv in enumerate(commands):
        (tmp_path / str(i)).mkdir()
        _check_one_line(argv, "run pip install robustbench-filters[hf]", tmp_path / str(i), capfd)


def test_bf16_on_a_device_without_it(world, tmp_path, capfd, monkeypatch) -> None:
    import robustbench_filters.models.hf.load as load

    monkeypatch.setattr(load, "bf16_supported", lambda device: False)
    _check_one_line([*ATTACK, "--model", f"hf:{world['gpt2']}", "--precision", "bf16"], "bfloat16 support and cpu has none",
                    tmp_path, capfd)  # fmt: skip


def test_python_api_errors_name_their_parameters(world) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(str(world["gpt2"]))
    with pytest.raises(RobfiltError, match="needs its tokenizer; pass tokenizer="):
        evaluate(model, "pgd", [0.05], n_examples=2, max_length=32)
    big = AutoTokenizer.from_pretrained(str(world["root"] / "big-tok"))
    with pytest.raises(RobfiltError, match="512 tokens but the model embeds only 384"):
        evaluate(model, "pgd", [0.05], tokenizer=big, n_examples=2, max_length=32)
    own = AutoTokenizer.from_pretrained(str(world["gpt2"]))
    with pytest.raises(
        RobfiltError, match="max_length 65 is longer than model0's 64 positions; pass max_length=64 or less"
    ):
        evaluate(model, "pgd", [0.05], tokenizer=own, n_examples=2, max_length=65)


@pytest.mark.parametrize("folder", ["custom-code", "custom-tokenizer"])
@pytest.mark.parametrize("command", ["attack", "train", "lipschitz"])
def test_a_folders_code_never_runs_even_when_stdin_says_yes(
    world, tmp_path, folder: str, command: str, capfd, monkeypatch
) -> None:
    """`yes | robfilt ... --model hf:DIR`: one line naming the auto_map entry, no prompt, and the marker the folder's
    code would write is never created. `attack` runs as a user's process does (the CLI, stdin a pipe of "y"); the
    other commands load through the same loader, in this process with stdin saying yes (each child pays ~10 s of
    imports)."""
    target = world["root"] / folder
    args = {"attack": [*ATTACK], "train": ["train", "--variant", "none", "--steps", "1"],
            "lipschitz": ["lipschitz", "--no-bounds", "-n", "1"]}[command]  # fmt: skip
    args = [*args, "--model", f"hf:{target}", "--out", str(tmp_path / "run")]
    if command == "attack":
        done = subprocess.run([sys.executable, "-m", "robustbench_filters.cli", *args], input="y\n" * 1000,
                              capture_output=True, text=True, timeout=300)  # fmt: skip
        code, out, err = done.returncode, done.stdout, done.stderr
    else:
        monkeypatch.setattr(sys, "stdin", io.StringIO("y\n" * 1000))
        code = run(args)
        out, err = capfd.readouterr()
    text = out + err
    assert code == 2, text
    assert "Do you wish to run the custom code" not in text and "trust_remote_code" not in text, text
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "auto_map" in lines[0] and "evil" in lines[0], text
    assert not (target / MARKER).exists()
    assert not (tmp_path / "run").exists()
