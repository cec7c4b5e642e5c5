"""Benchmarks for the "Scale and speed" targets; run ``python -m benchmarks.<name> [--smoke]`` from the repo root.

Each benchmark measures robfilt and its reference side by side in one process (interleaved, median of several
repetitions), prints the ratios, checks them against the targets, and writes JSON + Markdown to reports/bench/.
Targets live here only, never in timed unit tests: a loaded CI machine must not fail the test suite.
"""
