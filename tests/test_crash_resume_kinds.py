"""kill -9 and Ctrl-C in every kind of run, then --resume: rows, parts and summary equal an uninterrupted run.

Each kind (LM attack with an embedding attack and word swap, image corruptions, Lipschitz, randomized-smoothing
certification, image attack) runs as ``robfilt`` in a child process with small batches, so it has many units. Right
after it recorded a seeded number of parts, while it waits at that point (tests/crash_kill.py), it gets SIGKILL
(the lock file stays, but the kernel dropped the lock) or SIGINT (exit 130, the one line "interrupted; continue
with --resume", lock file removed). In between, readers refuse the folder as unfinished. The same command with
``--resume`` (in the test's process, like the reference, to save a start-up) then finishes a folder that
``robfilt verify`` accepts and whose parts, rows and summary equal the reference run's: the parts the killed
process wrote are bit-identical to those computed in another process.
The image attack under kill -9 is in tests/test_crash_safety.py. One case runs by default, the rest are slow.
"""

from __future__ import annotations

import random
import signal
from dataclasses import dataclass
from pathlib import Path

import pytest
from crash_kill import INTERRUPTED, assert_same_run, finish_here, parts, paused_at

from robustbench_filters.cli import run
from robustbench_filters.core.errors import RunStateError
from robustbench_filters.runs.folder import load_run
from robustbench_filters.runs.lock import is_locked


@dataclass(frozen=True)
class Kind:
    args: list[str]
    units: int  # planned units, so the stop point is well before the end
    stop_by: int  # the stop point is a seeded draw from 1..stop_by finished parts


KINDS = {
    "lm": Kind(
        ["attack", "--model", "lm", "--attack", "pgd,wordswap", "--eps", "0.5", "--rate", "0,0.1", "--steps", "2",
         "--n-examples", "8", "--batch-size", "2", "-q"],
        units=12, stop_by=4,
    ),  # 4 batches x (pgd, wordswap, clean)
    "corruption": Kind(
        ["attack", "--model", "deit", "--attack", "corruption:gaussian_noise,corruption:jpeg", "--severity", "1,3",
         "--n-examples", "24", "--batch-size", "4", "-q"],
        units=18, stop_by=6,
    ),  # 6 batches x (2 corruptions, clean)
    "lipschitz": Kind(
        ["lipschitz", "--model", "deit,deit-grc", "--checkpoint", "none", "--n-examples", "12", "--batch-size", "2",
         "--method", "power", "-q"],
        units=12, stop_by=6,
    ),  # 2 models x 6 batches
    "certify": Kind(
        ["certify", "--model", "deit", "--n0", "20", "--n", "60", "--n-examples", "12", "--batch-size", "2",
         "--attack-examples", "2", "-q"],
        units=7, stop_by=3,
    ),  # zoo:sigma0.25 deit: 6 certify batches + 1 attack batch
    "image": Kind(
        ["attack", "--model", "deit", "--attack", "fgsm,pgd", "--steps", "3", "--eps", "0.01,0.05",
         "--checkpoint", "none", "--n-examples", "24", "--batch-size", "4", "-q"],
        units=18, stop_by=6,
    ),  # 6 batches x (fgsm, pgd, clean)
}  # fmt: skip

DEFAULT = {("lm", signal.SIGKILL)}  # the one case in the default run (~20 s); image kill -9 is in test_crash_safety
CASES = [
    pytest.param(kind, sig, id=f"{kind}-{sig.name}", marks=() if (kind, sig) in DEFAULT else pytest.mark.slow)
    for kind in KINDS
    for sig in (signal.SIGKILL, signal.SIGINT)
    if (kind, sig) != ("image", signal.SIGKILL)
]


@pytest.fixture(scope="module")
def references(tmp_path_factory):
    """The uninterrupted run of each kind, made once per module (in this process: no child start-up)."""
    made: dict[str, Path] = {}

    def get(kind: str) -> Path:
        if kind not in made:
            out = tmp_path_factory.mktemp(f"reference-{kind}") / "run"
            finish_here([*KINDS[kind].args, "--out", str(out)])
            made[kind] = out
        return made[kind]

    return get


@pytest.mark.parametrize(("kind", "sig"), CASES)
def test_stopped_run_resumes_to_identical_rows_and_summary(references, tmp_path, kind: str, sig: signal.Signals):
    spec = KINDS[kind]
    reference = references(kind)
    assert len(load_run(reference).manifest["units"]) == spec.units
    out = tmp_path / "stopped"
    stop_after = random.Random(f"{kind}/{sig.name}").randint(1, spec.stop_by)
    with paused_at([*spec.args, "--out", str(out)], out, "parts/*.json", stop_after) as child:
        code, err = child.stop(sig)  # right after the child recorded its stop_after-th unit, while it waits there
    if sig is signal.SIGKILL:
        assert code == -signal.SIGKILL, err
        assert (out / ".lock").exists()  # the dead process's lock file stays behind ...
    else:
        assert code == 130, err
        assert err.strip().splitlines() == [INTERRUPTED]
        assert not (out / ".lock").exists()  # Ctrl-C releases the lock on the way out
    assert not is_locked(out)  # ... but nobody holds it
    assert parts(out) == stop_after < spec.units
    with pytest.raises(RunStateError, match="unfinished"):
        load_run(out)
    finish_here([*spec.args, "--out", str(out), "--resume"])  # not the killed process: parts must match across them
    assert run(["verify", str(out)]) == 0
    assert not (out / ".lock").exists() and not list(out.rglob("*.tmp"))
    assert_same_run(reference, out)
