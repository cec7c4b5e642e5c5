"""Shared plumbing for the benchmarks: interleaved timing, model choice, and the JSON + Markdown result files.

Why interleaved: the benchmark machines (CI runners, the shared dev box) are noisy. Timing A five times and then
B five times lets a load spike land on one side only; alternating A, B, A, B and taking each side's median puts
both sides under the same conditions, so the *ratio* is meaningful even when absolute times are not.
"""

from __future__ import annotations

import datetime as _dt
import gc
import os
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import torch
from rich.console import Console
from rich.markup import escape

from robustbench_filters.core.io import atomic_write_json, atomic_write_text
from robustbench_filters.models.checkpoint import CARD, zoo_path
from robustbench_filters.models.loading import load_model
from robustbench_filters.report.render import markdown
from robustbench_filters.runs.outfolder import OutputFolder

SMOKE_CAVEAT = " (smoke sizes: indicative only)"
REPORT_DIR = Path(__file__).resolve().parent.parent / "reports" / "bench"
console = Console(highlight=False, soft_wrap=True)


def pick_checkpoint(name: str, size: str = "micro") -> str:
    """``zoo`` when the trained checkpoint exists, else ``none`` (untrained weights), said out loud."""
    if (zoo_path(name, size) / CARD).exists():
        return "zoo"
    console.print(f"[yellow]no zoo checkpoint for {name}-{size}: using untrained weights (--checkpoint none)[/]")
    return "none"


def settings(full: dict[str, Any], smoke_cfg: dict[str, Any], smoke: bool, reps: int | None) -> dict[str, Any]:
    """The full or smoke sizes of a benchmark, with ``--reps`` applied."""
    return {**(smoke_cfg if smoke else full), **({"reps": reps} if reps else {})}


def eval_model(name: str, checkpoint: str, device: torch.device, seed: int = 0) -> torch.nn.Module:
    """A micro model (``checkpoint`` from :func:`pick_checkpoint`) in eval mode on ``device``."""
    return load_model(name, checkpoint=checkpoint, seed=seed).module.to(device).eval()


def resolve_device(device: str) -> torch.device:
    """The benchmark's device; asking for CUDA on a machine without it is a clear error, not a driver trace."""
    if str(device).startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit(f"--device {device}: no CUDA device on this machine; use --device cpu.")
    return torch.device(device)


def sync(device: torch.device) -> None:
    """Wait for queued GPU work, so wall times measure the work and not the launch."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn: Callable[[], Any], device: torch.device) -> tuple[float, Any]:
    gc.collect()
    sync(device)
    start = time.perf_counter()
    value = fn()
    sync(device)
    return time.perf_counter() - start, value


def interleaved(
    fns: dict[str, Callable[[], Any]], reps: int, device: torch.device, warmup: int = 1
) -> tuple[dict[str, list[float]], dict[str, Any]]:
    """Run every function ``warmup + reps`` times, alternating between them; returns the timed reps and last values."""
    times: dict[str, list[float]] = {k: [] for k in fns}
    values: dict[str, Any] = {}
    for i in range(warmup + reps):
        for name, fn in fns.items():
            seconds, values[name] = timed(fn, device)
            if i >= warmup:
                times[name].append(seconds)
    return times, values


def median(values: list[float]) -> float:
    return float(statistics.median(values))


def machine() -> dict[str, Any]:
    """Where the numbers come from; ``contended`` flags a loaded machine (1-min load above the core count)."""
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    cores = os.cpu_count() or 1
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cpu_cores": cores,
        "torch_threads": torch.get_num_threads(),
        "cuda": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
        "load_avg_1min": round(load, 2),
        "contended": bool(load > cores),
        "when": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
    }


def target(value: float, limit: float, op: str = "<=") -> dict[str, Any]:
    met = value <= limit if op == "<=" else value >= limit
    return {"value": round(float(value), 4), "target": f"{op} {limit}", "met": bool(met)}


_options = {"overwrite": False}  # set by the command line (--overwrite)


def legacy_results(folder: Path) -> set[str] | None:
    """The result files of benchmarks written before output ledgers: ``<name>.json`` with a machine record, and
    its ``<name>.md``."""
    import json

    found = set()
    for path in folder.glob("*.json"):
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(doc, dict) and "machine" in doc and "mode" in doc:
            found |= {path.name, path.with_suffix(".md").name}
    return found or None


def result_folder(out: Path | None, mode: str) -> OutputFolder:
    """The result folder, checked like every robfilt output: other files there are refused unless --overwrite,
    and a file of the user's is never replaced (benchmarks share the folder, so nothing is ever removed)."""
    folder = Path(out) if out is not None else REPORT_DIR / "smoke" if mode == "smoke" else REPORT_DIR
    return OutputFolder(folder, "bench", overwrite=_options["overwrite"], legacy=legacy_results, top_only=True).open()


def write(name: str, result: dict[str, Any], tables: dict[str, pd.DataFrame], out: Path | None) -> Path:
    """``<out>/<name>.json`` (everything) and ``<out>/<name>.md`` (the tables), both written atomically."""
    folder = result_folder(out, result["mode"])
    json_path, md_path = folder.paths([f"{name}.json", f"{name}.md"])
    atomic_write_json(json_path, {**result, "tables": {k: t.to_dict("records") for k, t in tables.items()}})
    lines = [f"# {result['title']} ({result['mode']})", "", result["question"], ""]
    m = result["machine"]
    lines += [
        f"Machine: {m['cpu_cores']} CPU cores, {m['torch_threads']} torch threads, GPU {m['cuda'] or 'none'}, "
        f"1-min load {m['load_avg_1min']}{' (contended: absolute times are noisy, ratios less so)' if m['contended'] else ''}; "
        f"torch {m['torch']}; {m['when']}.",
        "",
    ]
    for title, table in tables.items():
        lines += [f"## {title}", "", markdown(table), ""]
    if result.get("targets"):
        rows = [{"target": k, "value": v["value"], "bar": v["target"], "met": "yes" if v["met"] else "NO"}
                for k, v in result["targets"].items()]  # fmt: skip
        caveat = ["Smoke sizes: the verdicts below say nothing about the targets; run without --smoke.", ""]
        lines += ["## Targets", "", *(caveat if result["mode"] == "smoke" else []), markdown(pd.DataFrame(rows)), ""]
    lines += [f"- {note}" for note in result.get("notes", [])]
    atomic_write_text(md_path, "\n".join(lines).rstrip() + "\n")
    return json_path


def show(result: dict[str, Any], tables: dict[str, pd.DataFrame]) -> None:
    """Print the tables and the targets (the benchmark's human-readable output)."""
    console.print(f"[bold]{result['title']}[/] ({result['mode']}): {result['question']}")
    for title, table in tables.items():
        console.print(f"\n[bold]{title}[/]")
        console.print(table.to_string(index=False))
    smoke = result["mode"] == "smoke"
    for key, t in result.get("targets", {}).items():
        style = "dim" if smoke else "green" if t["met"] else "bold red"
        verdict = "met" if t["met"] else "MISSED"
        console.print(
            f"[{style}]{key}: {t['value']} (target {t['target']}) {verdict}{SMOKE_CAVEAT if smoke else ''}[/]"
        )
    for note in result.get("notes", []):  # escaped: a note's brackets ([image]) are text, not rich markup
        console.print(f"[dim]note: {escape(note)}[/]")


def exit_code(result: dict[str, Any], strict: bool) -> int:
    """``--strict``: exit 1 when a full run misses a target (for CI jobs that gate on performance)."""
    missed = [k for k, t in result.get("targets", {}).items() if not t["met"]]
    return 1 if strict and missed and result["mode"] == "full" else 0


def finish(name: str, result: dict[str, Any], tables: dict[str, pd.DataFrame], out: Path | None) -> dict[str, Any]:
    """Write the JSON + Markdown results, print them, and return the result (every benchmark ends here)."""
    write(name, result, tables, out)
    show(result, tables)
    return result


def cli(run: Callable[..., dict[str, Any]]) -> None:
    """The shared command line of every benchmark: --smoke, --out, --reps, --device, --strict."""
    import typer

    def main(
        smoke: bool = typer.Option(False, "--smoke", help="Tiny sizes: checks that it runs, in seconds."),
        out: Path | None = typer.Option(None, "--out", help="Result folder (default reports/bench)."),
        reps: int | None = typer.Option(None, "--reps", help="Timed repetitions per side."),
        device: str = typer.Option("cpu", "--device", help="cpu or cuda."),
        strict: bool = typer.Option(False, "--strict", help="Exit 1 when a full run misses a target."),
        overwrite: bool = typer.Option(
            False, "--overwrite", help="Write into an --out holding other files (kept: only results are written)."
        ),
    ) -> None:
        _options["overwrite"] = overwrite
        result_folder(out, "smoke" if smoke else "full")  # refuse a folder of other files before measuring
        raise typer.Exit(exit_code(run(smoke, out, reps, device=device), strict))

    typer.run(main)
