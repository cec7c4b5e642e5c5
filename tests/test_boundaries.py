"""Bad values at the boundary, from the CLI and the API alike: one line, exit 2 (or ``RobfiltError``), nothing
written, and messages that name the real cause and fix (issue 30, items 5, 6 and 8).

Seeds outside [0, 2^63); file names that are not UTF-8 and hidden files in an image folder; an ``--out`` that is a
link to nothing or not UTF-8; tensors and models on the meta device or on another device than the run's; models
whose output does not depend on their input or that detach it; ``--threads``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from torch import nn

import robustbench_filters as rf
from robustbench_filters.cli import run
from robustbench_filters.core.errors import RobfiltError, UserCodeError
from robustbench_filters.core.seeds import derived_seed
from robustbench_filters.data.sources import open_image_source

FAST = ["--attack", "fgsm", "--eps", "0.01", "-n", "2", "--num-workers", "0", "-q"]


def _one_error(capfd) -> str:  # noqa: ANN001
    err = capfd.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error: ") and "Traceback" not in err, err
    return err


# --- seeds -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [-1, 2**63, 2**64, 10**30])
def test_a_seed_outside_0_to_2_63_is_refused_in_one_line(tmp_path: Path, capfd, seed: int) -> None:  # noqa: ANN001
    out = tmp_path / "run"
    for command in (["attack", *FAST], ["certify", "-n", "1"], ["lipschitz", "--model", "deit", "-n", "1"],
                    ["train", "--model", "deit", "--steps", "1"]):  # fmt: skip
        assert run([*command, f"--seed={seed}", "--out", str(out)]) == 2
        assert "--seed must be a whole number in [0, 2^63)" in _one_error(capfd)
    assert not out.exists()
    with pytest.raises(RobfiltError, match=r"^seed must be a whole number in \[0, 2\^63\)"):
        rf.evaluate("deit", "fgsm", [0.01], n_examples=2, seed=seed)
    with pytest.raises(RobfiltError, match=r"^seed must be"):
        rf.estimate_lipschitz("deit", n_examples=1, seed=seed)


def test_the_largest_seed_runs_and_derived_seeds_stay_in_range(tmp_path: Path) -> None:
    top = 2**63 - 1
    res = rf.evaluate(nn.Sequential(nn.Flatten(), nn.Linear(784, 10)), "fgsm", [0.01], n_examples=2, seed=top)
    assert res.summary.models["model0"].clean.n == 2
    lip = rf.estimate_lipschitz("deit", checkpoint="none", n_examples=1, seed=top, bounds=False, method="power",
                                power_iters=1)  # fmt: skip
    assert len(lip.examples) == 1
    assert derived_seed(top, 1_000_003, 2**32) < 2**63 and derived_seed(3, 1_000_003, 7) == 3 * 1_000_003 + 7


# --- file names, hidden files and --out ----------------------------------------------------------------------------


def _digits(root: Path, classes: int = 3) -> Path:
    for k in range(classes):
        (root / str(k)).mkdir(parents=True)
        for i in range(2):
            Image.fromarray(np.full((8, 8), 20 * k + 10, dtype=np.uint8)).save(root / str(k) / f"{i}.png")
    return root


def test_a_file_name_that_is_not_utf8_is_read_and_hashed_by_its_bytes(tmp_path: Path) -> None:
    folder = _digits(tmp_path / "digits")
    raw = os.path.join(os.fsencode(folder / "1"), b"\xff\xfe.png")
    os.rename(os.fsencode(folder / "1" / "0.png"), raw)
    src = open_image_source(f"imagefolder:{folder}", img_size=8, num_workers=0)
    assert len(src) == 6 and len(src.checksum) == 64 and len(src.digest(list(range(6)))) == 64
    model = nn.Sequential(nn.Flatten(), nn.Linear(64 * 3, 3))
    res = rf.evaluate(model, "fgsm", [0.01], data=f"imagefolder:{folder}", n_examples=None, img_size=8,
                      num_workers=0, checkpoint="none")  # fmt: skip
    assert res.summary.models["model0"].clean.n == 6


def test_a_non_utf8_name_in_a_message_shows_its_bytes(tmp_path: Path) -> None:
    name, other = os.fsdecode(b"x\xff.png"), os.fsdecode(b"y\xfe")
    err = RobfiltError(f"cannot read {name!r} or {other}")
    assert str(err) == "cannot read 'x\\xff.png' or y\\xfe"
    str(err).encode("utf-8")  # printable on any stream


def test_hidden_files_are_skipped_like_hidden_folders(tmp_path: Path) -> None:
    folder = _digits(tmp_path / "digits")
    (folder / "0" / "._0.png").write_bytes(b"\x00\x05\x16\x07 a macOS resource fork, not a PNG")
    (folder / ".thumbs").mkdir()
    (folder / ".thumbs" / "0.png").write_bytes(b"junk")
    src = open_image_source(f"imagefolder:{folder}", img_size=8, num_workers=0)
    assert len(src) == 6 and not any(Path(f).name.startswith(".") for f in src.files)
    assert src.take(list(range(6)))[0].shape == (6, 3, 8, 8)  # every file decodes (no resource fork read)


def test_an_out_link_to_a_missing_folder_says_so(tmp_path: Path, capfd) -> None:  # noqa: ANN001
    link = tmp_path / "out"
    link.symlink_to(tmp_path / "nowhere")
    assert run(["attack", *FAST, "--out", str(link)]) == 2
    err = _one_error(capfd)
    assert "is a link to" in err and "which does not exist" in err and "--resume" not in err and "EEXIST" not in err
    with pytest.raises(RobfiltError, match="is a link to .* which does not exist"):
        rf.evaluate("deit", "fgsm", [0.01], n_examples=2, out=link)
    assert link.is_symlink() and not (tmp_path / "nowhere").exists()


def test_an_out_path_that_is_not_utf8_is_refused_before_any_work(tmp_path: Path, capfd) -> None:  # noqa: ANN001
    out = os.fsdecode(os.path.join(os.fsencode(tmp_path), b"run\xff"))
    assert run(["attack", *FAST, "--out", out]) == 2
    assert "is not a UTF-8 path" in _one_error(capfd) and not os.path.lexists(out)


def test_a_checkpoint_under_a_non_utf8_path_is_refused_by_name(tmp_path: Path, capfd) -> None:  # noqa: ANN001
    import shutil

    from robustbench_filters.models.checkpoint import zoo_path

    folder = os.fsdecode(os.path.join(os.fsencode(tmp_path), b"ck\xff"))
    shutil.copytree(zoo_path("deit", "micro"), folder)
    assert run(["attack", "--model", "deit", "--checkpoint", folder, *FAST, "--out", str(tmp_path / "run")]) == 2
    assert "is not a UTF-8 path, which safetensors cannot open" in _one_error(capfd)
    with pytest.raises(RobfiltError, match=r"ck\\xff is not a UTF-8 path"):
        rf.create_model("deit", checkpoint=folder)


def test_io_errors_do_not_promise_a_resume_that_cannot_be() -> None:
    from robustbench_filters.core.errors import describe_os_error
    from robustbench_filters.core.surface import Surface, surface

    text = describe_os_error(OSError(17, "File exists", "/x"))
    assert "run the command again" in text and "a run that had started continues with resume=True" in text
    with surface(Surface.CLI):
        assert "a run that had started continues with --resume" in describe_os_error(OSError(17, "exists", "/x"))


# --- devices -------------------------------------------------------------------------------------------------------


def _linear() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 10))


X, Y = torch.rand(4, 1, 28, 28), torch.tensor([0, 1, 2, 3])


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: rf.evaluate(_linear(), "fgsm", [0.01], data=(X.to("meta"), Y), n_examples=None),
         "images (data[0]) are on the meta device"),
        (lambda: rf.evaluate(_linear(), "fgsm", [0.01], data=(X, Y.to("meta")), n_examples=None),
         "labels (data[1]) are on the meta device"),
        (lambda: rf.evaluate(_linear().to("meta"), "fgsm", [0.01], data=(X, Y), n_examples=None),
         "model model0 has weights on the meta device"),
        (lambda: rf.benchmark(_linear(), data=(X.to("meta"), Y), eps=0.01, attack="fgsm", n_examples=None),
         "are on the meta device"),
        (lambda: rf.certify(_linear().to("meta"), [0.25], data=(X, Y), n_examples=None, n=10, n0=5),
         "has weights on the meta device"),
        (lambda: rf.estimate_lipschitz(_linear(), inputs=X.to("meta"), n_examples=4, bounds=False),
         "inputs are on the meta device"),
        (lambda: rf.estimate_lipschitz(_linear().to("meta"), inputs=X, n_examples=4, bounds=False),
         "has weights on the meta device"),
    ],
)  # fmt: skip
def test_tensors_and_models_on_the_meta_device_are_refused_in_one_line(call, message: str) -> None:  # noqa: ANN001
    with pytest.raises(RobfiltError) as err:
        call()
    assert message in str(err.value) and "\n" not in str(err.value)


def test_a_model_on_another_device_than_the_runs_is_named() -> None:
    from robustbench_filters.checks.model import require_model_device

    class Split(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = nn.Linear(2, 2)
            self.b = nn.Linear(2, 2, device="meta")

    with pytest.raises(RobfiltError, match="on the meta device"):
        require_model_device(Split(), "m", "cpu")
    fake = nn.Linear(2, 2)
    fake.weight = nn.Parameter(torch.empty(2, 2, device="meta"))
    fake.bias = nn.Parameter(torch.empty(2))
    with pytest.raises(RobfiltError, match="on the meta device"):
        require_model_device(fake, "m", "cpu")
    require_model_device(nn.Linear(2, 2), "m", "cpu")  # a CPU model runs anywhere (it is moved)
    require_model_device(nn.ReLU(), "m", "cuda")  # no weights: nothing to move


# --- models no gradient attack can measure -----------------------------------------------------------------------

MODELS = """
import torch
from torch import nn


class Base(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.lin = nn.Linear(784, 10)


class Detach(Base):
    def forward(self, x):
        return self.lin(x.detach().flatten(1))


class Constant(Base):
    def forward(self, x):
        return self.lin.bias.expand(len(x), 10) + 0 * x.flatten(1).sum(1, keepdim=True)


class Argmax(Base):
    def forward(self, x):
        return 5 * nn.functional.one_hot(self.lin(x.flatten(1)).argmax(1), 10).float()


def build(kind):
    return {"detach": Detach, "constant": Constant, "argmax": Argmax}[kind]().eval()
"""
CANNOT = {
    "detach": "no gradient reaches model",
    "argmax": "no gradient reaches model",
    "constant": "output does not depend on its input",
}


@pytest.mark.parametrize("kind", sorted(CANNOT))
def test_a_model_no_gradient_attack_can_measure_is_named_with_the_right_advice(tmp_path, capfd, kind) -> None:  # noqa: ANN001
    (tmp_path / "models.py").write_text(MODELS)
    out = tmp_path / "run"
    assert run(["attack", "--model", f"{tmp_path / 'models.py'}:build?kind={kind}", *FAST, "--out", str(out)]) == 2
    err = _one_error(capfd)
    assert CANNOT[kind] in err and "the model must change (resuming cannot help)" in err, err
    assert "rerun with --resume" not in err and not out.exists()
    space: dict = {}
    exec(compile(MODELS, "<models>", "exec"), space)  # noqa: S102 - the test's own source
    with pytest.raises(RobfiltError) as exc:
        rf.evaluate(space["build"](kind), "fgsm", [0.01], n_examples=2)
    assert CANNOT[kind] in str(exc.value) and "resuming cannot help" in str(exc.value)


def test_corruptions_need_no_gradient_so_a_detaching_model_runs() -> None:
    space: dict = {}
    exec(compile(MODELS, "<models>", "exec"), space)  # noqa: S102 - the test's own source
    res = rf.evaluate(space["build"]("detach"), "corruption", severities=[1], n_examples=2)
    assert res.summary.models["model0"].clean.n == 2


def test_autograd_finding_no_path_anywhere_gets_the_same_advice() -> None:
    exc = RuntimeError("element 0 of tensors does not require grad and does not have a grad_fn")
    text = str(UserCodeError.wrap("m", "unit m-pgd-b0001", exc))
    assert "no gradient reaches model m's input" in text and "resuming cannot help" in text


# --- threads -------------------------------------------------------------------------------------------------------

PROBE = """
import os, json, sys
def build():
    import torch
    json.dump({"threads": torch.get_num_threads(), "policy": os.environ.get("OMP_WAIT_POLICY")},
              open(os.environ["PROBE_OUT"], "w"))
    raise RuntimeError("probe recorded")  # nothing more to see: the run stops here in one line (exit 2)
"""


SLOW = pytest.mark.slow  # a fresh process each; the default suite runs the one that checks both rules


@pytest.mark.parametrize(("flag", "env", "threads", "policy"), [
    (["--threads", "2"], {"OMP_NUM_THREADS": "1"}, 2, "PASSIVE"),  # --threads beats the environment; waiting sleeps
    pytest.param([], {}, 1, "PASSIVE", marks=SLOW),  # the default: one per process (any --workers, the same rows)
    pytest.param(["--threads", "1"], {}, 1, "PASSIVE", marks=SLOW),
    pytest.param([], {"OMP_NUM_THREADS": "1", "OMP_WAIT_POLICY": "ACTIVE"}, 1, "ACTIVE", marks=SLOW),  # the user's
])  # fmt: skip
def test_threads_are_set_before_torch_starts(tmp_path: Path, flag, env, threads, policy) -> None:  # noqa: ANN001
    """A fresh process, as users run robfilt: the settings reach the torch the model is built with."""
    (tmp_path / "probe.py").write_text(PROBE)
    record = tmp_path / "probe.json"
    base = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OMP_WAIT_POLICY")}
    done = subprocess.run(
        [sys.executable, "-m", "robustbench_filters.cli", "attack", "--model", f"{tmp_path / 'probe.py'}:build",
         *FAST, *flag, "--out", str(tmp_path / "run")],
        env={**base, **env, "PROBE_OUT": str(record)}, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 2 and "probe recorded" in done.stderr, done.stderr
    seen = json.loads(record.read_text())
    assert seen["policy"] == policy
    assert seen["threads"] == threads if threads is not None else seen["threads"] >= 1


SPY = """
import sys
import robustbench_filters.core.threads as threads
real = threads.configure_threads
def spy(*args, **kwargs):
    sys.stderr.write("@@torch loaded: %s\\n" % ("torch" in sys.modules))
    return real(*args, **kwargs)
threads.configure_threads = spy
from robustbench_filters.cli import run
sys.exit(run(sys.argv[1:]))
"""
STOPS = {  # arguments that pass the command line and stop at the run's own checks, right after the thread settings
    "attack": ["-n", "0"], "certify": ["-n", "0"], "lipschitz": ["--model", "deit", "-n", "0"],
    "train": ["--model", "deit", "--steps", "0"], "study": ["--seeds", "0"], "check": ["--spec", "missing.toml"],
}  # fmt: skip


COMPUTING = {"attack": "attack_cmd", "certify": "certify_cmd", "lipschitz": "lipschitz", "train": "train_cmd",
             "check": "check_cmd", "study": "study_cmd"}  # fmt: skip


@pytest.mark.parametrize(
    "command", [c if c in ("attack", "check") else pytest.param(c, marks=SLOW) for c in STOPS]
)  # the default suite starts two fresh processes; the static test below covers every command's first statement
def test_a_computing_command_sets_threads_before_torch_is_imported(tmp_path: Path, command: str) -> None:
    """The wait policy only counts if OpenMP reads it when torch loads: each command sets it first (a fresh process;
    the gate's child is run as the child, with its record variable set)."""
    env = {**os.environ, "ROBFILT_GATE_CHILD": f"0:{tmp_path / 'record.json'}"}
    done = subprocess.run([sys.executable, "-c", SPY, command, *STOPS[command]], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    assert done.returncode == 2 and "@@torch loaded: False" in done.stderr, (command, done.stderr[-800:])


def test_every_computing_command_takes_threads_and_sets_them_first() -> None:
    """--threads is the one declaration (cli/_common.py:ThreadsOpt) on every computing command, and each command's
    first statement (after its docstring) applies it, before anything it calls can import torch."""
    import ast
    import importlib
    import inspect
    import textwrap

    import typer

    from robustbench_filters.cli import app

    group = typer.main.get_command(app)
    for command, function in COMPUTING.items():
        params = group.get_command(None, command).params  # type: ignore[arg-type, union-attr]
        assert [p.opts for p in params if p.name == "threads"] == [["--threads"]], command
        module = importlib.import_module(f"robustbench_filters.cli.{command}")
        source = inspect.getsource(getattr(module, function))
        if "RunCommand" in inspect.getsource(module):  # a run command: its one call (cli/_run.py) applies them
            from cli._run import RunCommand

            source, expected = (
                textwrap.dedent(inspect.getsource(RunCommand.__call__)),
                "setup_threads(output['threads'])",
            )
        else:
            expected = "setup_threads(threads)"
        body = ast.parse(source).body[0].body  # type: ignore[attr-defined]
        statements = [
            ast.unparse(s) for s in body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))
        ]
        # the first statement that does anything (a run command first only sets its output options aside)
        first = next(c for c in statements if "options.pop(" not in c)
        assert first == expected, (command, first)
        assert "ThreadsOpt" in inspect.getsource(module) or "run_options" in inspect.getsource(module), command


@pytest.mark.parametrize("value", ["0", "-1", "1025", "99999999999999999999999"])
def test_a_thread_count_out_of_range_is_refused(capfd, value: str) -> None:  # noqa: ANN001
    for command in ("attack", "certify", "lipschitz", "train", "study"):  # check's child reads it the same way
        model = ["--model", "deit"] if command in ("lipschitz", "train") else []
        assert run([command, *model, f"--threads={value}"]) == 2
        assert "--threads must be a whole number from 1 to 1024" in _one_error(capfd)


def test_threads_in_process_set_torchs_count() -> None:
    from robustbench_filters.core.threads import configure_threads

    before = torch.get_num_threads()
    env: dict[str, str] = {"OMP_WAIT_POLICY": "active"}
    try:
        configure_threads(1, env)
        assert torch.get_num_threads() == 1 and env["OMP_NUM_THREADS"] == "1"
        assert env["OMP_WAIT_POLICY"] == "active"  # the user's policy stays
    finally:
        torch.set_num_threads(before)
    with pytest.raises(RobfiltError, match="^threads must be"):  # in Python, the keyword
        configure_threads(True, {})  # type: ignore[arg-type]


def test_a_command_run_in_process_leaves_the_callers_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    """``--threads 3`` in one in-process call must not set the count of the caller's later work (nor, through the
    environment, of the processes it starts)."""
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OMP_WAIT_POLICY"):
        monkeypatch.delenv(name, raising=False)
    before = torch.get_num_threads()
    target = 3 if before != 3 else 2
    assert run(["attack", "--threads", str(target), "-n", "0"]) == 2  # applied, then stopped by the run's checks
    assert torch.get_num_threads() == before
    assert not {"OMP_NUM_THREADS", "MKL_NUM_THREADS", "OMP_WAIT_POLICY"} & set(os.environ)
