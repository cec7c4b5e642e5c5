"""Adversarial examples on request: ``--save-adversarial`` in the run folder, ``result.adversarial()``, and
``robustbench_filters.attack(model, x, y)``.

The stored points are the ones the rows measured (the model's prediction on each one is the row's ``correct``),
lie in their eps-ball, are hashed like every part, survive --resume byte for byte, and equal what ``attack()``
returns for the same examples and seed. Every bad input to ``attack()`` is one line.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
import safetensors.torch
import torch
from torch import nn

import robustbench_filters as rf
from robustbench_filters.api.evaluate import evaluate
from robustbench_filters.cli import run
from robustbench_filters.core.errors import RobfiltError, RunStateError
from robustbench_filters.runs.folder import load_adversarial, verify_run

N, CLASSES, BATCH = 12, 4, 5
EPS = [0.02, 0.1]
COMMON = {"n_examples": None, "batch_size": BATCH, "steps": 3}


def _net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Flatten(), nn.Linear(3 * 8 * 8, 16), nn.ReLU(), nn.Linear(16, CLASSES))


@pytest.fixture(scope="module")
def net_data() -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    """A tiny net and images it labels itself (clean accuracy 100%), so the attacks have something to break."""
    net = _net().eval()
    x = torch.rand(N, 3, 8, 8, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        net[-1].bias -= net(x).mean(0)
        y = net(x).argmax(1)
    return net, x, y


@pytest.fixture(scope="module")
def saved(net_data, tmp_path_factory) -> Path:
    """A finished run with --save-adversarial: fgsm and pgd at two eps, 12 examples in 3 batches (read only)."""
    net, x, y = net_data
    out = tmp_path_factory.mktemp("adv") / "run"
    evaluate(net, ["fgsm", "pgd"], EPS, data=(x, y), out=out, save_adversarial=True, **COMMON)
    return out


def _files(folder: Path) -> dict[str, bytes]:
    """Every file whose bytes must not depend on how the run went (not the manifest: it has timestamps)."""
    names = sorted(p for p in folder.rglob("*") if p.is_file() and p.name not in ("manifest.json", ".lock"))
    return {str(p.relative_to(folder)): p.read_bytes() for p in names}


def test_saved_points_are_the_ones_the_rows_measured(saved: Path, net_data) -> None:
    net, x, y = net_data
    manifest = verify_run(saved)
    attack_units = [k for k in manifest["units"] if "-clean-" not in k]
    assert sorted(manifest["adversarial"]) == sorted(attack_units) and len(attack_units) == 6
    assert sorted(p.stem for p in (saved / "adversarial").iterdir()) == sorted(attack_units)
    rows = pd.read_parquet(saved / "rows.parquet")
    for key in attack_units:
        sidecar = json.loads((saved / "parts" / f"{key}.json").read_text())
        assert sidecar["adversarial_sha256"] == manifest["adversarial"][key]
        with safetensors.safe_open(str(saved / "adversarial" / f"{key}.safetensors"), "pt") as f:
            meta = json.loads(f.metadata()["robfilt"])
        t = safetensors.torch.load_file(str(saved / "adversarial" / f"{key}.safetensors"))
        assert meta["model"] == "model0" and meta["attack"] == key.split("-")[1] and meta["norm"] == "linf"
        assert t["eps"].tolist() == EPS and t["index"].shape == (2, len(t["example_id"]))
        ids = t["example_id"]
        for k, eps in enumerate(EPS):
            x_adv = t["x_adv"][t["index"][k]]
            assert (x_adv - x[ids]).abs().amax() <= eps + 1e-6 and x_adv.min() >= 0 and x_adv.max() <= 1
            sub = rows[(rows.attack == meta["attack"]) & (rows.eps == eps)].set_index("example_id").loc[ids.numpy()]
            with torch.no_grad():
                correct = (net(x_adv).argmax(1) == y[ids]).numpy()
            assert (correct == sub.correct.to_numpy()).all(), (key, eps)
        # an example broken at the smaller eps keeps that point (one stored copy) at the larger one
        broken = torch.as_tensor(~rows[(rows.attack == meta["attack"]) & (rows.eps == EPS[0])]
                                 .set_index("example_id").loc[ids.numpy()].correct.to_numpy())  # fmt: skip
        assert torch.equal(t["index"][1][broken], t["index"][0][broken])
        assert len(t["x_adv"]) == len(ids) + int((~broken).sum())


def test_saving_changes_no_row_but_the_fingerprint(saved: Path, net_data, tmp_path: Path) -> None:
    net, x, y = net_data
    plain = tmp_path / "plain"
    evaluate(net, ["fgsm", "pgd"], EPS, data=(x, y), out=plain, **COMMON)
    assert (plain / "rows.parquet").read_bytes() == (saved / "rows.parquet").read_bytes()
    assert not (plain / "adversarial").exists() and "adversarial" not in verify_run(plain)
    assert verify_run(plain)["fingerprint"] != verify_run(saved)["fingerprint"]
    # --resume with the other setting is a different run: refused in one line, nothing touched
    before = _files(plain)
    with pytest.raises(RunStateError, match="save_adversarial") as err:
        evaluate(net, ["fgsm", "pgd"], EPS, data=(x, y), out=plain, resume=True, save_adversarial=True, **COMMON)
    assert "\n" not in str(err.value) and _files(plain) == before


def test_resume_recomputes_missing_files_byte_for_byte(saved: Path, net_data, tmp_path: Path) -> None:
    net, x, y = net_data
    out = tmp_path / "run"
    shutil.copytree(saved, out)
    adv = sorted((out / "adversarial").iterdir())
    adv[0].unlink()  # its part alone stays: the unit must be recomputed, not trusted
    stem = adv[1].stem
    (out / "parts" / f"{stem}.parquet").unlink()
    (out / "parts" / f"{stem}.json").unlink()
    (out / "parts" / f"{adv[2].stem}.json").unlink()  # killed after the tensors, before the hash record
    (out / "summary.json").unlink()
    kept = adv[3].stat().st_mtime_ns
    evaluate(net, ["fgsm", "pgd"], EPS, data=(x, y), out=out, resume=True, save_adversarial=True, **COMMON)
    assert _files(out) == _files(saved)
    assert adv[3].stat().st_mtime_ns == kept  # a finished unit is not recomputed
    verify_run(out)


def test_edited_or_foreign_adversarial_files_are_refused(saved: Path, net_data, tmp_path: Path, capfd) -> None:
    net, x, y = net_data
    out = tmp_path / "run"
    shutil.copytree(saved, out)
    victim = sorted((out / "adversarial").iterdir())[0]
    blob = bytearray(victim.read_bytes())
    blob[-1] ^= 1
    victim.write_bytes(bytes(blob))
    with pytest.raises(RunStateError, match=victim.name):
        verify_run(out)
    assert run(["verify", str(out)]) == 2
    err = capfd.readouterr().err.strip()
    assert err.startswith("error:") and victim.name in err and len(err.splitlines()) == 1
    before = _files(out)
    with pytest.raises(RunStateError, match="does not match its recorded sha256"):
        evaluate(net, ["fgsm", "pgd"], EPS, data=(x, y), out=out, resume=True, save_adversarial=True, **COMMON)
    assert _files(out) == before
    out2 = tmp_path / "run2"
    shutil.copytree(saved, out2)
    shutil.copy(victim, out2 / "adversarial" / "m0-clean-b0000.safetensors")  # a clean unit stores nothing
    with pytest.raises(RunStateError, match="m0-clean-b0000.safetensors"):
        verify_run(out2)
    with pytest.raises(RunStateError, match="recorded by no unit"):
        evaluate(net, ["fgsm", "pgd"], EPS, data=(x, y), out=out2, resume=True, save_adversarial=True, **COMMON)


def test_result_returns_them_from_a_folder_or_from_memory(saved: Path, net_data, tmp_path: Path) -> None:
    net, x, y = net_data
    ids, x_adv = load_adversarial(saved, attack="pgd", eps=0.1)
    assert ids.tolist() == list(range(N)) and x_adv.shape == x.shape and x_adv.dtype == torch.float32
    temp = evaluate(net, ["fgsm", "pgd"], EPS, data=(x, y), save_adversarial=True, **COMMON)
    assert temp.out is None  # the temporary folder is gone: the tensors were read before it went
    for attack in ("fgsm", "pgd"):
        for eps in EPS:
            a, b = temp.adversarial(attack=attack, eps=eps), load_adversarial(saved, attack=attack, eps=eps)
            assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    with pytest.raises(RobfiltError, match="pass attack= one of fgsm, pgd"):
        temp.adversarial(eps=0.1)
    with pytest.raises(RobfiltError, match="pass eps= one of 0.02, 0.1"):
        temp.adversarial(attack="pgd")
    with pytest.raises(RobfiltError, match="eps 0.05 is not in this run's eps grid"):
        temp.adversarial(attack="pgd", eps=0.05)
    with pytest.raises(RobfiltError, match="no adversarial examples of model 'other'"):
        temp.adversarial(model="other", attack="pgd", eps=0.1)
    # a run folder is read lazily, and each file is checked when it is read
    out = tmp_path / "run"
    kept = evaluate(net, ["fgsm", "pgd"], EPS, data=(x, y), out=out, save_adversarial=True, **COMMON)
    (out / "adversarial" / "m0-pgd-b0000.safetensors").write_bytes(b"garbage")
    assert torch.equal(kept.adversarial(attack="fgsm", eps=0.1)[1], load_adversarial(saved, attack="fgsm", eps=0.1)[1])
    with pytest.raises(RunStateError, match="m0-pgd-b0000"):
        kept.adversarial(attack="pgd", eps=0.1)
    plain = evaluate(net, "fgsm", [0.1], data=(x, y), **{**COMMON, "steps": None})  # fgsm alone takes no --steps
    with pytest.raises(RobfiltError, match="save_adversarial=True"):
        plain.adversarial()


def test_benchmark_returns_them_when_asked(net_data) -> None:
    net, x, y = net_data
    res = rf.benchmark(net, data=(x, y), eps=0.1, attack="pgd", steps=3, save_adversarial=True)
    ids, x_adv = res.adversarial()
    assert ids.tolist() == list(range(N)) and (x_adv - x).abs().amax() <= 0.1 + 1e-6
    with torch.no_grad():
        robust = (net(x_adv).argmax(1) == y).float().mean().item()
    assert robust == pytest.approx(res.robust.acc)


def test_attack_equals_what_a_run_saves(net_data) -> None:
    net, x, y = net_data
    x0, y0 = x.clone(), y.clone()
    mode = net.training
    for attack in ("apgd-adaptive", "pgd"):
        adv = rf.attack(net, x, y, attack=attack, eps=0.1, steps=3, batch_size=BATCH, seed=2)
        ran = evaluate(net, attack, [0.1], data=(x, y), seed=2, save_adversarial=True, **COMMON)
        ids, saved = ran.adversarial()
        assert ids.tolist() == list(range(N)) and torch.equal(adv, saved), attack
        assert adv.shape == x.shape and (adv - x).abs().amax() <= 0.1 + 1e-6 and 0 <= adv.min() <= adv.max() <= 1
        with torch.no_grad():
            robust = (net(adv).argmax(1) == y).float().mean().item()
        assert robust == pytest.approx(ran.summary.models["model0"].robust[0].acc)
    rng = torch.get_rng_state()
    assert torch.equal(rf.attack(net, x, y, attack="pgd", eps=0.1, steps=3, batch_size=BATCH, seed=2), adv)
    assert torch.equal(rf.attack(net, x, y, eps=0), x)
    assert torch.equal(x, x0) and torch.equal(y, y0)  # the caller's tensors, mode and random state are untouched
    assert net.training == mode and torch.equal(torch.get_rng_state(), rng)
    assert all(p.requires_grad for p in net.parameters())


class NoisyNet(nn.Module):
    """Different outputs for the same input: the determinism check fails."""

    def __init__(self) -> None:
        super().__init__()
        self.net = _net()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x) + 0.5 * torch.randn(len(x), CLASSES)


def test_a_failed_check_raises_unless_checks_are_off(net_data) -> None:
    _, x, y = net_data
    with pytest.raises(RobfiltError, match="sanity check failed for model0: eval mode, deterministic") as err:
        rf.attack(NoisyNet(), x, y, attack="pgd", eps=0.1, steps=2)
    assert "check=False" in str(err.value) and "\n" not in str(err.value)
    softmax = nn.Sequential(_net(), nn.Softmax(-1))
    with pytest.raises(RobfiltError, match="outputs are logits"):
        rf.attack(softmax, x, y, attack="pgd", eps=0.1, steps=2)
    assert rf.attack(NoisyNet(), x, y, attack="pgd", eps=0.1, steps=2, check=False).shape == x.shape


BAD = [
    ({"model": "deit"}, "model must be a torch nn.Module"),
    ({"model": nn.Linear}, "the class Linear; pass an instance"),
    ({"x": [[0.5]]}, "images x must be (N, C, H, W)"),
    ({"x": object()}, "images x cannot be read as an array"),
    ({"x": torch.zeros(N, 3, 8, 8, dtype=torch.int32)}, "images x have dtype torch.int32"),
    ({"x": torch.full((N, 3, 8, 8), 2.0)}, "not [0, 1]"),
    ({"x": torch.full((N, 3, 8, 8), 255.0)}, "0-255 floats? divide by 255"),
    ({"x": torch.full((N, 3, 8, 8), float("nan"))}, "NaN or inf"),
    ({"x": torch.zeros(0, 3, 8, 8)}, "images x hold no images"),
    ({"x": torch.zeros(N, 5, 8, 8)}, "images x has 5 channels"),
    ({"x": torch.zeros(N, 3, 8, 8, device="meta")}, "images x are on the meta device"),
    ({"y": "abc"}, "labels y"),
    ({"y": torch.zeros(N) + 0.5}, "labels y contain 0.5, which is not a whole number"),
    ({"y": torch.zeros(N - 1, dtype=torch.long)}, f"labels y must be a 1-D sequence of {N} class indices"),
    ({"y": torch.full((N,), CLASSES)}, f"include {CLASSES}, but model model0 returns {CLASSES} classes"),
    ({"eps": None}, "has no default eps grid"),
    ({"eps": -0.1}, "eps -0.1 is negative"),
    ({"eps": [0.1, 0.2]}, "attack takes one eps, got 2"),
    ({"eps": 8}, "did you mean 8/255"),
    ({"attack": "pgdd"}, "unknown attack 'pgdd'"),
    ({"attack": ["pgd", "fgsm"]}, "attack takes one attack name"),
    ({"attack": "fgsm", "norm": "l2"}, "does not support norm"),
    ({"steps": 0}, "steps must be positive"),
    ({"batch_size": 0}, "batch_size must be positive"),
    ({"seed": 1.5}, "seed must be an integer"),
    ({"n_examples": 3}, "attack() sets n_examples itself"),
]


@pytest.mark.parametrize(("kwargs", "match"), BAD, ids=[m for _, m in BAD])
def test_attack_refuses_bad_inputs_in_one_line(net_data, kwargs: dict, match: str) -> None:
    net, x, y = net_data
    args = {"model": net, "x": x, "y": y, "eps": 0.1, **kwargs}
    with pytest.raises(RobfiltError) as err:
        rf.attack(**args)
    assert match in str(err.value) and "\n" not in str(err.value), str(err.value)


def test_the_cli_flag_saves_them_and_verify_checks_them(tmp_path: Path, capfd) -> None:
    import finished

    out = tmp_path / "run"
    assert run([*finished.ARGS, "--save-adversarial", "--out", str(out)]) == 0
    assert run(["verify", str(out)]) == 0
    ids, x_adv = load_adversarial(out)  # one model, one attack, one eps: nothing to choose
    assert len(ids) == 12 and x_adv.shape[1:] == (1, 28, 28)
    assert len(list((out / "adversarial").iterdir())) == 4  # one file per fgsm unit (batches of 3)


def test_importing_the_package_does_not_import_torch() -> None:
    import subprocess
    import sys

    code = "import sys, robustbench_filters as rf; assert 'torch' not in sys.modules; print('attack' in dir(rf))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "True", done.stderr
