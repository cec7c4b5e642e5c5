"""The documentation is generated or checked against the program, so it cannot drift."""

from __future__ import annotations

from pathlib import Path

from robustbench_filters.cli._reference import render

ROOT = Path(__file__).resolve().parents[1]


def test_the_cli_reference_is_current() -> None:
    committed = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    assert committed == render(), "docs/cli.md is stale: run python -m robustbench_filters.cli._reference"


def test_the_cli_reference_lists_every_command_and_option() -> None:
    text = render()
    for command in ("train", "attack", "lipschitz", "certify", "report", "check", "study", "verify", "models list"):
        assert f"## robfilt {command}\n" in text
    for flag in ("`--n-examples`", "`--image-column`", "`--model-arg`", "`--sigma`", "`--gap-rho`", "`--variant`"):
        assert flag in text
