"""Enables ``python -m robustbench_filters.cli`` (and torchrun)."""

from . import main

main()
