#!/usr/bin/env bash
# The cuda device's check on a GPU machine, in one command from the repository root:
#   bash benchmarks/gpu_check.sh          (SKIP_NVCC=1: without the compile CI tests, which need no GPU)
# Installs the wheels in .whl/ (egglog, and nvidia-cuda-nvrtc + nvidia-cuda-runtime for NVRTC, if the machine
# lacks them: `pip download -d .whl nvidia-cuda-nvrtc nvidia-cuda-runtime` beforehand) into /tmp/site, prints the
# GPU, versions and the CUDA compiler in use (NVRTC where it loads, else nvcc), runs the gpu tests, the compile CI
# tests (nvcc and NVRTC, sm_80/sm_90), the cold compile time per kernel of both compilers, and the GPU benchmark
# (ours vs torch: elementwise, reductions, softmax, layernorm, matmul 1024/4096 in fp32, tf32, fp16, bf16, conv,
# attention), writing every log into "$OUT" (default ./gpu_out). Each part has its own time limit
# (120 + 90 + 45 + 210 s) and a failing part does not stop the next: under 8 minutes in all.
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
for m in ("numpy", "pytest", "hypothesis", "torch", "egglog", "cuda.bindings", "nvidia"):
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
from devices.cuda_compile import cuda_compiler, nvrtc_available
print("nvrtc:", nvrtc_available())
print("compiler in use:", cuda_compiler().name, cuda_compiler().version)
print("cuda device available:", DEVICE.available())
print("target:", DEVICE.default_target())
EOF
} > "$OUT/env.txt" 2>&1
echo "env: rc=$?"

XDIST=""
$PY -c "import xdist" 2>/dev/null && XDIST="-n 8"
timeout -k 10 120 $PY -m pytest -q -rs $XDIST -m gpu -p no:cacheprovider tests/devices/test_cuda.py \
  --junitxml="$OUT/test_cuda.xml" > "$OUT/test_cuda.log" 2>&1
echo "gpu tests: rc=$?" | tee -a "$OUT/summary.txt"

if [ "${SKIP_NVCC:-0}" = 1 ]; then
  echo "compile CI tests: skipped (SKIP_NVCC=1)" | tee -a "$OUT/summary.txt" "$OUT/test_nvcc.log"
else
  timeout -k 10 90 $PY -m pytest -q -rs $XDIST -p no:cacheprovider tests/devices/test_cuda_compile.py \
    tests/devices/test_cuda_memory.py tests/devices/test_target.py > "$OUT/test_nvcc.log" 2>&1
  echo "compile CI tests (nvcc and NVRTC): rc=$?" | tee -a "$OUT/summary.txt"
fi

SM=$($PY -c "from devices.cuda import DEVICE; print(DEVICE.default_target().isa)" 2>/dev/null || echo sm_90)
timeout -k 10 45 $PY -m benchmarks.gpu_compile --sm "$SM" --json "$OUT/bench-gpu-compile.json" \
  > "$OUT/bench-gpu-compile.log" 2>&1
echo "cold compile per kernel: rc=$?" | tee -a "$OUT/summary.txt"

timeout -k 10 210 $PY -m benchmarks gpu --json "$OUT/bench-gpu.json" > "$OUT/bench-gpu.log" 2>&1
echo "benchmark: rc=$?" | tee -a "$OUT/summary.txt"

set +x
for f in env.txt summary.txt; do echo "=== $f"; cat "$OUT/$f"; done
echo "=== test_cuda.log (tail)"; tail -n 60 "$OUT/test_cuda.log"
echo "=== test_nvcc.log (tail)"; tail -n 15 "$OUT/test_nvcc.log"
echo "=== bench-gpu-compile.log"; tail -n 5 "$OUT/bench-gpu-compile.log"
echo "=== bench-gpu.log"; tail -n 70 "$OUT/bench-gpu.log"
