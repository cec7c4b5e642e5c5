"""robfilt verify: check run folders against the hashes recorded when they were written."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ._common import JsonOpt, console, console_err, distinct_paths, print_json


def verify_cmd(
    runs: Annotated[list[Path], typer.Argument(help="Run folders to verify.")],
    json_out: JsonOpt = False,
) -> None:
    """Verify run folders: every recorded part, rows.parquet and summary.json must match its sha256 (exit 2 if not)."""
    from robustbench_filters.core.errors import RobfiltError
    from robustbench_filters.runs.folder import verify_run

    results = []
    for path in distinct_paths(runs, "run folder"):
        try:
            manifest = verify_run(path)
        except RobfiltError as exc:
            results.append({"run": str(path), "ok": False, "error": str(exc)})
            continue
        results.append({"run": str(path), "ok": True, "kind": manifest["kind"], "fingerprint": manifest["fingerprint"],
                        "parts": len(manifest.get("parts") or {})})  # fmt: skip
    if json_out:
        print_json({"runs": results, "ok": all(r["ok"] for r in results)})
    else:
        for r in results:
            if r["ok"]:
                console().print(
                    f"ok  {r['run']}  ({r['kind']} run {r['fingerprint']}, {r['parts']} parts)", markup=False
                )
            else:
                console_err(f"error: {r['error']}")
    if not all(r["ok"] for r in results):
        raise typer.Exit(2)


def register(app: typer.Typer) -> None:
    app.command("verify")(verify_cmd)
