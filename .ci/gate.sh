#!/usr/bin/env bash
# This project's robustness gate, as CI runs it: .github/workflows/robustness.yml and `make ci-gate` call this.
#   ROBFILT   the robfilt executable (default: robfilt on PATH; make ci-gate passes .venv/bin/robfilt)
#   GATE_OUT  folder for the fresh runs, robustness-junit.xml and robustness.md (default: runs/ci-gate)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
out="${GATE_OUT:-runs/ci-gate}"
"${ROBFILT:-robfilt}" check --spec robustness.toml --out "$out" \
    --junit "$out/robustness-junit.xml" --summary "$out/robustness.md"
