#!/usr/bin/env bash
# Run this folder's robustness gate exactly as CI does (robustness.yml calls this script).
#   ROBFILT   the robfilt executable (default: robfilt on PATH)
#   GATE_OUT  folder for the fresh runs, robustness-junit.xml and robustness.md (default: runs/robustness here)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="${GATE_OUT:-$here/runs/robustness}"
"${ROBFILT:-robfilt}" check --spec "$here/robustness.toml" --out "$out" \
    --junit "$out/robustness-junit.xml" --summary "$out/robustness.md"
