#!/usr/bin/env bash
# The cuda device's check on a GPU machine, in one command from the repository root:
#   bash benchmarks/gpu_check.sh              the GPU tests, cold compile, the benchmark (under 8 minutes)
#   BEAM=2 bash benchmarks/gpu_check.sh       also the benchmark's BEAM_CASES under BEAM=2 (the compile CI tests
#                                             are skipped then, to stay in the budget)
#   DRY_RUN=1 bash benchmarks/gpu_check.sh    no GPU needed: prints the plan (steps, limits, the files each writes),
#                                             checks the script's syntax (and shellcheck where installed), that every
#                                             module a step runs imports and parses its arguments, and that the
#                                             benchmark's cases cover the issue's targets; runs nothing long
#   SKIP_NVCC=1                               without the compile CI tests (nvcc/NVRTC for sm_80/sm_90; CI runs them);
#                                             in their time the reduction cases again with WARP_REDUCE=0 (the
#                                             shared-memory tree instead of warp shuffles), figures in bench.log only
#   HOST_CPU=1 bash benchmarks/gpu_check.sh   instead of the GPU steps, the cpu `kernels` suite on this machine's host
#                                             CPU (its detected Target, then CPU_TARGET=x86-64-v3): the figures of
#                                             issue 9 for a host other than the development VM (an AVX-512 Xeon, where
#                                             the GPU machines have one); writes bench-host-cpu{,-v3}.json
# Installs the wheels in .whl/ (egglog; nvidia-cuda-nvrtc + nvidia-cuda-runtime for NVRTC; tinygrad for its cold
# compile figures) into /tmp/site if there are any: `pip download -d .whl --no-deps nvidia-cuda-nvrtc
# nvidia-cuda-runtime tinygrad==0.14.0` beforehand. Writes at most 8 files into "$OUT" (default ./gpu_out):
#   env.txt summary.txt tests.log tests.xml bench.log bench-gpu-compile.json bench-gpu.json and
#   bench-gpu-variants.json (the WGMMA variants; under BEAM, the BEAM step's figures)
# Without BEAM the fp16/bf16 matmul 4096 cases run again with WGMMA=1 (Hopper's wgmma, lower/tc_wgmma.py: on an
# sm_90 GPU only; opt-in until this measures it) and with WGMMA=1 TMA=1 (its tiles copied by the tensor memory
# accelerator, lower/tc_tma.py), their table in bench.log.
# Figures for the issue's targets: bench-gpu.json (matmul 4096 fp16/bf16 vs torch, elementwise vs the measured
# copy bandwidth, softmax/layernorm/attention vs torch eager), bench-gpu-compile.json (cold compile per kernel,
# ours vs tinygrad's CUDA backend). Each step has its own time limit and a failing step does not stop the next.
set -u
export PYTHONUNBUFFERED=1
OUT="${OUT:-$PWD/gpu_out}"
PY="${PYTHON:-python3}"
BEAM_N="${BEAM:-0}"
unset BEAM  # only the BEAM step searches
BEAM_CASES="${BEAM_CASES:-matmul_4096_fp16,softmax_4096}"
WGMMA_CASES="matmul_4096_fp16,matmul_4096_bf16"
WARP_CASES="sum_16M,softmax_4096,layernorm,attention"
DRY="${DRY_RUN:-0}"
export CACHEDIR="${CACHEDIR:-/tmp/uopc-gpu-cache}"  # an empty kernel cache: the first compiles are cold
KILL=5  # seconds between a step's TERM and KILL

# name  limit(s)  command (run from the repository root; stdout and stderr appended to the log named by the step)
STEPS=()
STEPS+=("env|30|env.txt|env_report")
if [ "${HOST_CPU:-0}" = 1 ]; then
  HOST_CASES="KERNEL_CASES=add_16M,sum_16M,softmax_4096,matmul_1024,conv"
  STEPS+=("host cpu kernels|200|bench.log|env $HOST_CASES $PY -m benchmarks kernels --json $OUT/bench-host-cpu.json")
  STEPS+=("host cpu kernels, x86-64-v3|200|bench.log|env $HOST_CASES CPU_TARGET=x86-64-v3 $PY -m benchmarks kernels --json $OUT/bench-host-cpu-v3.json")
else
STEPS+=("gpu tests|110|tests.log|$PY -m pytest -q -rs -m gpu -p no:cacheprovider tests/devices/test_cuda.py tests/devices/test_cuda_beam.py tests/devices/test_cuda_async.py tests/devices/test_cuda_wgmma.py tests/devices/test_cuda_tma.py --junitxml=$OUT/tests.xml")
if [ "${SKIP_NVCC:-0}" != 1 ] && [ "$BEAM_N" = 0 ]; then
  STEPS+=("compile CI tests|45|tests.log|$PY -m pytest -q -rs -p no:cacheprovider tests/devices/test_cuda_compile.py tests/devices/test_cuda_async.py tests/devices/test_cuda_wgmma.py tests/devices/test_cuda_tma.py tests/devices/test_target.py")
fi
STEPS+=("cold compile per kernel|60|bench.log|$PY -m benchmarks.gpu_compile --sm SM --json $OUT/bench-gpu-compile.json")
STEPS+=("benchmark|170|bench.log|$PY -m benchmarks gpu --json $OUT/bench-gpu.json")
if [ "${SKIP_NVCC:-0}" = 1 ] && [ "$BEAM_N" = 0 ]; then  # the block reductions without warp shuffles (lower/gpu.py)
  STEPS+=("WARP_REDUCE=0 reductions|40|bench.log|$PY -m benchmarks gpu --cases $WARP_CASES --variants WARP_REDUCE=0 --json /dev/null")
fi
if [ "$BEAM_N" = 0 ]; then  # Hopper's warpgroup MMA (lower/tc_wgmma.py, opt-in: not yet run on a GPU before this),
  # its tiles copied by cp.async, then by the TMA (lower/tc_tma.py)
  STEPS+=("WGMMA=1 [TMA=1] matmuls|35|bench.log|$PY -m benchmarks gpu --cases $WGMMA_CASES --variants WGMMA=1;WGMMA=1,TMA=1 --json $OUT/bench-gpu-variants.json")
fi
if [ "$BEAM_N" != 0 ]; then
  STEPS+=("benchmark under BEAM=$BEAM_N|80|bench.log|env BEAM=$BEAM_N $PY -m benchmarks gpu --cases $BEAM_CASES --json $OUT/bench-gpu-variants.json")
fi
fi

env_report() {
  date -u
  grep -m1 "model name" /proc/cpuinfo; echo "cores: $(nproc)"; grep -q avx512f /proc/cpuinfo && echo "avx512f: yes" || echo "avx512f: no"
  nvidia-smi || echo "nvidia-smi: none"
  nvcc --version || echo "nvcc: none"
  "$PY" - <<'EOF'
import importlib, sys
print("python", sys.version)
for m in ("numpy", "pytest", "hypothesis", "xdist", "torch", "egglog", "tinygrad", "cuda.bindings", "nvidia"):
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
if DEVICE.available()[0]:
    print("target:", DEVICE.default_target())
EOF
}

export PY
export -f env_report
total=0
for s in "${STEPS[@]}"; do total=$((total + $(echo "$s" | cut -d'|' -f2) + KILL)); done

if [ "$DRY" = 1 ]; then
  echo "plan (OUT=$OUT, BEAM=$BEAM_N, budget ${total} s of 480):"
  for s in "${STEPS[@]}"; do
    IFS='|' read -r name limit log cmd <<<"$s"
    printf '  %-32s %4s s  -> %-10s %s\n' "$name" "$limit" "$log" "$cmd"
  done
  bash -n "$0" && echo "syntax: ok"
  if command -v shellcheck >/dev/null; then shellcheck -S warning "$0" && echo "shellcheck: ok"; else echo "shellcheck: not installed"; fi
  [ "$total" -le 480 ] || { echo "over budget: ${total} s"; exit 1; }
  PYTHONPATH="$PWD" "$PY" - <<'EOF' || exit 1
import contextlib, importlib, io
for m in ("benchmarks.gpu", "benchmarks.gpu_compile", "benchmarks.gpu_compile_tinygrad", "benchmarks.__main__",
          "devices.cuda", "lower.search_gpu"):
    importlib.import_module(m)
from benchmarks import gpu, gpu_compile, gpu_compile_tinygrad
for main in (gpu.main, gpu_compile.main, gpu_compile_tinygrad.main):
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            main(["--help"])
    except SystemExit as e:
        assert e.code == 0, e
keys = {c.key: d for c, d in gpu.gpu_cases(False)}
need = {"matmul_4096_fp16": "float16", "matmul_4096_bf16": "bfloat16", "add_16M": "float32",
        "chain_16M": "float32", "softmax_4096": "float32", "layernorm": "float32", "attention": "float32"}
missing = {k: d for k, d in need.items() if keys.get(k) != d}
assert not missing, f"the benchmark lacks the targets' cases: {missing}"
assert gpu.parse_variants("WGMMA=1;WGMMA=1,TMA=1") == [{"WGMMA": "1"}, {"WGMMA": "1", "TMA": "1"}]
print("modules, arguments and the targets' cases: ok")
EOF
  exit 0
fi

mkdir -p "$OUT"
if ls .whl/*.whl >/dev/null 2>&1; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
  export PYTHONPATH="/tmp/site:$PWD"
else
  export PYTHONPATH="$PWD"
fi
command -v nvcc >/dev/null || export PATH="$PATH:${CUDA_HOME:-/usr/local/cuda}/bin"
SM=$("$PY" -c "from devices.cuda import DEVICE; print(DEVICE.default_target().isa)" 2>/dev/null || echo sm_90)
XDIST=""
"$PY" -c "import xdist" 2>/dev/null && XDIST="-n 8"

for s in "${STEPS[@]}"; do
  IFS='|' read -r name limit log cmd <<<"$s"
  start=$SECONDS
  {
    echo "=== $name (limit $limit s)"
    if [ "$cmd" = env_report ]; then
      timeout -k "$KILL" "$limit" bash -c env_report
    else
      cmd="${cmd//--sm SM/--sm $SM}"
      case "$cmd" in *pytest*) cmd="$cmd $XDIST";; esac
      echo "+ $cmd"
      # shellcheck disable=SC2086  # the command is split into words on purpose
      timeout -k "$KILL" "$limit" $cmd
    fi
  } >>"$OUT/$log" 2>&1
  rc=$?
  echo "$name: rc=$rc in $((SECONDS - start)) s" | tee -a "$OUT/summary.txt"
done

for f in env.txt summary.txt; do echo "=== $f"; cat "$OUT/$f"; done
echo "=== tests.log (tail)"; tail -n 60 "$OUT/tests.log"
echo "=== bench.log (tail)"; tail -n 80 "$OUT/bench.log"
