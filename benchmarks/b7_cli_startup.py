"""B7 CLI start-up: wall time of fresh ``robfilt`` processes that should answer at once, next to ``import torch``.

Question: do ``robfilt --help``, ``robfilt attack --help``, ``robfilt --version`` and ``robfilt models list`` start
fast, i.e. without importing torch, timm, torchattacks, pandas or matplotlib (which cost seconds)? Every side is a
new process (the installed ``robfilt`` script, else ``python -m robustbench_filters.cli``), timed from spawn to
exit, interleaved with the others; ``python -c "import torch"`` is the reference cost of the import the commands
avoid, and ``python -c pass`` the floor (interpreter start). A probe run of each command lists the heavy
libraries it imported, which says *why* a command is slow when it is.
Targets: median wall time < 1 s for each of the four commands.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pandas as pd

from benchmarks import _common as B

NAME = "b7_cli_startup"
FULL = {"reps": 10, "warmup": 1}
SMOKE = {"reps": 1, "warmup": 0}
LIMIT_S = 1.0
HEAVY = ("torch", "timm", "torchattacks", "pandas", "matplotlib")
COMMANDS: dict[str, list[str]] = {
    "robfilt --help": ["--help"],
    "robfilt attack --help": ["attack", "--help"],
    "robfilt --version": ["--version"],
    "robfilt models list": ["models", "list"],
}
REFERENCES: dict[str, list[str]] = {
    'python -c "import torch"': [sys.executable, "-c", "import torch"],
    "python -c pass": [sys.executable, "-c", "pass"],
}
# Runs the CLI in-process, then prints which heavy libraries it imported (the probe, not a timed side).
PROBE = f"""
import json, sys
from robustbench_filters.cli import run
code = run(sys.argv[1:])
sys.stdout.flush()
sys.stderr.write("\\n@@" + json.dumps([m for m in {HEAVY!r} if m in sys.modules]) + "\\n")
sys.exit(code)
"""


def robfilt_command() -> list[str]:
    """The installed console script next to this interpreter (what users run), else ``python -m``."""
    script = Path(sys.executable).with_name("robfilt")
    return [str(script)] if script.is_file() else [sys.executable, "-m", "robustbench_filters.cli"]


def _relative(part: str) -> str:
    """A path inside the repository as the repository shows it (reports name no home folders)."""
    repo = Path(__file__).resolve().parent.parent
    path = Path(part)
    return str(path.relative_to(repo)) if path.is_absolute() and path.is_relative_to(repo) else path.name


def _spawn(cmd: list[str]) -> None:
    done = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=300)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} exited {done.returncode}: {done.stderr.strip()[-500:]}")


def heavy_imports(argv: list[str]) -> list[str]:
    """The heavy libraries ``robfilt ARGV`` imports (one probe run in a fresh interpreter)."""
    done = subprocess.run([sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, timeout=300)
    line = next((x for x in done.stderr.splitlines() if x.startswith("@@")), None)
    if done.returncode != 0 or line is None:
        raise SystemExit(f"probe of robfilt {' '.join(argv)} failed: {done.stderr.strip()[-500:]}")
    return json.loads(line[2:])


def run(
    smoke: bool = False, out: Path | None = None, reps: int | None = None, seed: int = 0, device: str = "cpu"
) -> dict[str, Any]:
    cfg = B.settings(FULL, SMOKE, smoke, reps)
    B.resolve_device(device)  # start-up uses no device; asking for a missing one is still an error
    base = robfilt_command()
    shown = " ".join(_relative(part) for part in base)
    cmds = {label: [*base, *argv] for label, argv in COMMANDS.items()} | REFERENCES
    fns = {label: (lambda cmd=cmd: _spawn(cmd)) for label, cmd in cmds.items()}
    times, _ = B.interleaved(fns, cfg["reps"], B.resolve_device("cpu"), cfg["warmup"])
    med = {label: B.median(t) for label, t in times.items()}
    torch_s = med['python -c "import torch"']
    heavy = {label: heavy_imports(argv) for label, argv in COMMANDS.items()}
    table = pd.DataFrame(
        {
            "process": list(cmds),
            "median_s": [round(med[k], 3) for k in cmds],
            "x_import_torch": [round(med[k] / torch_s, 2) for k in cmds],
            "heavy_imports": [", ".join(heavy[k]) or "none" if k in heavy else "-" for k in cmds],
            "reps_s": [", ".join(f"{t:.2f}" for t in times[k]) for k in cmds],
        }
    )
    notes = [
        f"robfilt runs as `{shown}`; each rep spawns a fresh process (stdout to /dev/null) and waits for it; "
        f"sides interleaved, median of {cfg['reps']} reps after {cfg['warmup']} warm-up round(s) (warm file cache).",
        "heavy_imports: which of torch, timm, torchattacks, pandas, matplotlib one probe run of the command left "
        "in sys.modules (none is the design: the commands import the library only when they compute).",
        f"python -c pass (interpreter start) took {med['python -c pass']:.3f} s: the floor of any command.",
    ]
    result = {
        "benchmark": NAME,
        "title": "B7 CLI start-up: robfilt --help / --version / models list vs import torch",
        "question": "Wall time of fresh processes for the commands that should answer at once, next to "
        "`python -c 'import torch'`.",
        "mode": "smoke" if smoke else "full",
        "settings": {**cfg, "robfilt": shown, "seed": seed},
        "machine": B.machine(),
        "targets": {f"{label} median (s)": B.target(med[label], LIMIT_S) for label in COMMANDS},
        "notes": notes,
    }
    return B.finish(NAME, result, {"start-up wall time": table}, out)


if __name__ == "__main__":
    B.cli(run)
