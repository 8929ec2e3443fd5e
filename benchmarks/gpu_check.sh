#!/usr/bin/env bash
# The cuda device's check on a GPU machine, in one command from the repository root:
#   bash benchmarks/gpu_check.sh          (SKIP_NVCC=1: without the nvcc CI tests, which need no GPU)
# Installs the wheels in .whl/ (egglog, if the machine lacks it) into /tmp/site, prints the GPU and versions, runs
# the gpu tests, the nvcc CI tests and the GPU benchmark, and writes every log into "$OUT" (default ./gpu_out).
# Each part has its own time limit (150 + 100 + 120 s) and a failing part does not stop the next; about 5 minutes in all.
set -x
export PYTHONUNBUFFERED=1
OUT="${OUT:-$PWD/gpu_out}"
mkdir -p "$OUT"
export CACHEDIR="${CACHEDIR:-/tmp/uopc-gpu-cache}"  # an empty kernel cache: the first compiles are cold
PY="${PYTHON:-python3}"

if ls .whl/*.whl >/dev/null 2>&1; then
  $PY -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
  export PYTHONPATH="/tmp/site:$PWD"
else
  export PYTHONPATH="$PWD"
fi
command -v nvcc >/dev/null || export PATH="$PATH:${CUDA_HOME:-/usr/local/cuda}/bin"

{
  date -u
  nvidia-smi
  nvcc --version
  $PY - <<'EOF'
import importlib, sys
print("python", sys.version)
for m in ("numpy", "pytest", "hypothesis", "torch", "egglog", "cuda.bindings"):
    try:
        mod = importlib.import_module(m)
        print(m, getattr(mod, "__version__", "?"))
    except Exception as e:
        print(m, "MISSING:", type(e).__name__, e)
try:
    import torch
    print("torch cuda", torch.version.cuda, torch.cuda.is_available(), torch.cuda.get_device_name(0))
except Exception as e:
    print("torch cuda: no", e)
from devices.cuda import DEVICE
print("cuda device available:", DEVICE.available())
print("target:", DEVICE.default_target())
EOF
} > "$OUT/env.txt" 2>&1
echo "env: rc=$?"

XDIST=""
$PY -c "import xdist" 2>/dev/null && XDIST="-n 8"
timeout -k 10 150 $PY -m pytest -q -rs $XDIST -m gpu -p no:cacheprovider tests/devices/test_cuda.py \
  --junitxml="$OUT/test_cuda.xml" > "$OUT/test_cuda.log" 2>&1
echo "gpu tests: rc=$?" | tee -a "$OUT/summary.txt"

if [ "${SKIP_NVCC:-0}" = 1 ]; then
  echo "nvcc CI tests: skipped (SKIP_NVCC=1)" | tee -a "$OUT/summary.txt" "$OUT/test_nvcc.log"
else
  timeout -k 10 100 $PY -m pytest -q -rs $XDIST -p no:cacheprovider tests/devices/test_cuda_compile.py \
    tests/devices/test_cuda_memory.py tests/devices/test_target.py > "$OUT/test_nvcc.log" 2>&1
  echo "nvcc CI tests: rc=$?" | tee -a "$OUT/summary.txt"
fi

timeout -k 10 120 $PY -m benchmarks gpu --json "$OUT/bench-gpu.json" > "$OUT/bench-gpu.log" 2>&1
echo "benchmark: rc=$?" | tee -a "$OUT/summary.txt"

set +x
for f in env.txt summary.txt; do echo "=== $f"; cat "$OUT/$f"; done
echo "=== test_cuda.log (tail)"; tail -n 60 "$OUT/test_cuda.log"
echo "=== test_nvcc.log (tail)"; tail -n 15 "$OUT/test_nvcc.log"
echo "=== bench-gpu.log"; tail -n 60 "$OUT/bench-gpu.log"
