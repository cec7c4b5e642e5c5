#!/usr/bin/env bash
# One prepared GPU session: CUDA smoke test of the CLI, a 1-rank NCCL torchrun that must match the plain run, a
# count of host-device synchronisations in the engine, and benchmarks B1-B3 on the GPU. Benchmark results land in
# $OUT/bench (default OUT=runs/device), run folders in $RUNS (default /tmp/robfilt-device-runs); copy $OUT/bench
# to reports/bench/gpu/.
#
# Meant for a bare GPU machine whose python3 already has torch, torchvision and the common packages; pure-Python
# wheels that may be missing there (timm, torchattacks) can be put in .whl/ beforehand:
#   pip download --no-deps -d .whl timm==1.0.31 torchattacks==3.5.1
# Usage: bash benchmarks/device_check.sh            (from the repository root)
set -uo pipefail
OUT=${OUT:-runs/device}
RUNS=${RUNS:-/tmp/robfilt-device-runs}
rm -rf "$RUNS"; mkdir -p "$OUT" "$RUNS"
OUT=$(cd "$OUT" && pwd)
PY=${PYTHON:-python3}
DEVICE=${DEVICE:-cuda}  # DEVICE=cpu SMOKE=1: rehearse the script without a GPU
N=${SMOKE:+32}; N=${N:-500}; BENCH_FLAGS=${SMOKE:+--smoke}
export PYTHONUNBUFFERED=1
site=/tmp/robfilt-site
$PY -m pip install -q --no-index --no-deps --no-build-isolation --no-compile --target "$site" . .whl/*.whl \
    || { echo "install failed"; exit 1; }
export PYTHONPATH="$site"
cd /tmp  # import the installed copy, not the source tree
repo=$OLDPWD
step() { echo; echo "=== $* ($(date +%T))"; }

step environment
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
$PY -c "import torch, timm, torchattacks; print('torch', torch.__version__, 'timm', timm.__version__,
'torchattacks', torchattacks.__version__, 'cuda', torch.cuda.is_available())"

step "CUDA smoke: robfilt attack on the GPU (fp32), then clean eval under --amp bf16"
common=(--model deit-grc --attack fgsm,pgd --n-examples "$N" --seed 0)
$PY -m robustbench_filters.cli attack "${common[@]}" --device "$DEVICE" --out "$RUNS/cuda"
echo "rc=$?"; cp "$RUNS/cuda/summary.json" "$OUT/cuda_summary.json"
$PY -m robustbench_filters.cli attack "${common[@]}" --device "$DEVICE" --amp bf16 --out "$RUNS/cuda-bf16" --quiet
echo "rc=$?"

step "torchrun, 1 rank on NCCL: rows must equal the plain GPU run"
$PY -m torch.distributed.run --standalone --nproc_per_node 1 -m robustbench_filters.cli attack "${common[@]}" --device "$DEVICE" \
    --out "$RUNS/cuda-torchrun" --quiet
echo "rc=$?"
$PY - "$RUNS" <<'EOF'
import sys, pandas as pd
root = sys.argv[1]
a = pd.read_parquet(f"{root}/cuda/rows.parquet"); b = pd.read_parquet(f"{root}/cuda-torchrun/rows.parquet")
print("torchrun rows == plain rows:", a.equals(b), f"({len(a)} rows)")
c = pd.read_parquet(f"{root}/cuda-bf16/rows.parquet")
clean = lambda r: r[r.attack == "clean"].correct.mean() * 100
outcome = lambda r: r.loc[r.attack != "clean", ["example_id", "attack", "eps", "correct"]].reset_index(drop=True)
print(f"clean accuracy fp32 {clean(a):.2f}%, bf16 autocast {clean(c):.2f}%; "
      f"attack outcomes equal (attacks stay fp32): {outcome(a).equals(outcome(c))}")
EOF

step "host-device synchronisations inside one engine unit"
(cd "$repo" && $PY -m benchmarks.sync_check --device "$DEVICE") || echo "sync_check rc=$?"

step "benchmarks B1-B3 on the GPU"
for b in b1_eps_sweep b2_engine_overhead b3_attention_cost; do
    (cd "$repo" && $PY -m benchmarks.$b --device "$DEVICE" --out "$OUT/bench" $BENCH_FLAGS) || echo "$b failed rc=$?"
done
step done
