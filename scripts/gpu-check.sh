#!/usr/bin/env bash
# One command for a machine with an NVIDIA GPU (under 8 minutes):
#   1. builds kerasc and the CUDA plugin (libkerasc_cuda.so),
#   2. runs the plugin's own tests and the fidelity zoo on /GPU:0 against the
#      oracle (the same 230 checks the CPU passes),
#   3. replays whole runs as CUDA graphs against the layer-by-layer path,
#      then runs the Keras applications of tests/apps with variables streamed
#      from host memory at tight budgets (pinned, then staged) against
#      their references, then a ResNet50-class model fully resident and
#      streamed under several budgets, printing achieved/bound and the
#      overlap read from its traces,
#   4. times ResNet50's convolution shapes on cuDNN in NHWC and NCHW
#      (build/cudnn_layouts) and compares throughput with PyTorch + cuDNN
#      on the same machine when PyTorch with CUDA is installed.
# Usage: scripts/gpu-check.sh [BUILD_DIR]   (default build-gpu)
#   KC_GPU_CHECK_PREBUILT=1: BUILD_DIR already holds kerasc, the plugin and
#   the test binaries (built elsewhere, e.g. on a machine with the Debian
#   packages when the GPU machine has none): no cmake step.
#   KC_GPU_CHECK_LOGS=DIR: where the full logs and the traces are kept.
#   KC_GPU_CHECK_SANITIZER=1: also runs the plugin's tests under
#   compute-sanitizer (memcheck) where it is installed.
# Prints a summary; exits nonzero if a build or a fidelity check fails.
set -u -o pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build-gpu}
# Full logs and traces go here (KC_GPU_CHECK_LOGS, default a temp folder).
LOGS=${KC_GPU_CHECK_LOGS:-$(mktemp -d)}
mkdir -p "$LOGS"
START=$(date +%s)
FAILED=0
step() { printf '\n== %s (t+%ss)\n' "$*" "$(( $(date +%s) - START ))"; }
bad() { echo "FAIL: $*"; FAILED=$((FAILED + 1)); }

step "machine"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 || bad "nvidia-smi"
nvcc --version 2>/dev/null | tail -1
nproc

step "build"
if ! command -v nvcc >/dev/null; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
if [[ ${KC_GPU_CHECK_PREBUILT:-0} == 1 ]]; then
  echo "prebuilt: $BUILD"
else
  cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >/dev/null && \
    cmake --build "$BUILD" -j "$(nproc)" 2>&1 | grep -E "error|warning|Built target kerasc" || true
fi
[[ -x $BUILD/kerasc ]] || { bad "kerasc did not build"; exit 1; }
[[ -f $BUILD/libkerasc_cuda.so ]] || { bad "the CUDA plugin did not build (nvcc/cuDNN missing?)"; exit 1; }
K=$BUILD/kerasc
# The test binaries live in $BUILD/tests, away from the plugin.
export KC_BACKEND_PATH=$BUILD KC_CUDA_PLUGIN=$BUILD/libkerasc_cuda.so
# The Python with NumPy + h5py (model generation) and, where there is one,
# PyTorch with CUDA: the GPU machine's own python3 first.
PY=/usr/bin/python3
for cand in python3 /usr/bin/python3; do
  if command -v "$cand" >/dev/null && "$cand" -c "import numpy, h5py" 2>/dev/null; then
    PY=$cand
    break
  fi
done

step "plugin tests on the GPU"
out=$(timeout 300 "$BUILD/tests/test_cuda_plugin" 2>&1)
rc=$?
printf '%s\n' "$out" > "$LOGS/plugin.log"
if [[ $rc -eq 0 ]]; then
  grep -E "PASSED|SKIPPED|FAILED|^\[  (ERROR|FAILED)" <<<"$out" | tail -20
  grep -q "SKIPPED" <<<"$out" && bad "plugin tests skipped (no GPU seen?)"
else
  grep -vE "^\[ RUN|^\[       OK" <<<"$out" | tail -40
  bad "plugin tests"
fi

# The golden zoo on /GPU:0 with extra environment (VAR=VALUE words after
# the log's name and the failure's label).
zoo_on_gpu() {
  local log=$1 what=$2
  shift 2
  if out=$(env KC_ZOO_DEVICE=/GPU:0 "$@" timeout 240 "$BUILD/tests/test_zoo" 2>&1); then
    grep -E "^golden:" <<<"$out"
  else
    grep -E "^FAIL|^golden:|error" <<<"$out" | head -20
    bad "$what"
  fi
  printf '%s\n' "$out" > "$LOGS/$log"
}
step "fidelity zoo on /GPU:0 (oracle tolerance 1e-4 * max(1, max|ref|))"
zoo_on_gpu zoo-gpu.log "fidelity zoo on the GPU"
step "fidelity zoo on /GPU:0 with variables streamed from host memory"
zoo_on_gpu zoo-gpu-streamed.log "fidelity zoo, streamed" KC_ZOO_VARIABLES=/CPU:0
step "fidelity zoo on /GPU:0 with every eligible 3x3 convolution on NCHW (KC_CUDA_NCHW=1)"
zoo_on_gpu zoo-gpu-nchw.log "fidelity zoo on the GPU, NCHW" KC_CUDA_NCHW=1

step "whole runs replayed as CUDA graphs (KC_GRAPH_TEST_GPU=1 test_streaming)"
out=$(KC_GRAPH_TEST_GPU=1 timeout 180 "$BUILD/tests/test_streaming" 2>&1)
rc=$?
printf '%s\n' "$out" > "$LOGS/graph.log"
grep -E "test_gpu_graph_replay|PASSED|FAILED|ERROR" <<<"$out" | tail -12
[[ $rc -eq 0 ]] || bad "graph replay on the GPU"

step "Keras applications streamed from host memory at tight budgets (pinned), against the references"
timeout 300 "$PY" tools/bench/gpu_fidelity.py "$K" /GPU:0 tests/apps/*/ || bad "streamed fidelity"
KC_PIN=0 timeout 300 "$PY" tools/bench/gpu_fidelity.py "$K" /GPU:0 tests/apps/*/ | grep -v "^ok " ||
  bad "streamed fidelity, staged (KC_PIN=0)"
KC_CUDA_NCHW=1 timeout 300 "$PY" tools/bench/gpu_fidelity.py "$K" /GPU:0 tests/apps/*/ | grep -v "^ok " ||
  bad "streamed fidelity, 3x3 convolutions on NCHW (KC_CUDA_NCHW=1)"

step "ResNet50-class model: resident and streamed"
MODEL=bench/models/resnet50.keras
if [[ ! -f $MODEL ]]; then
  timeout 120 "$PY" tools/bench/make_keras_models.py --out bench/models resnet50 2>&1 | tail -2
fi
[[ -f $MODEL ]] || MODEL=tests/apps/resnet50/model.keras
echo "model: $MODEL"
WEIGHT_BYTES=$(stat -c %s "$MODEL")
SHOW="^median_ms_per_image|^graph:|^device_peak|^bound|^device |^host:|^streamed weights|^total:|below the minimum|error"
# bench_run LABEL ARGS...: one kerasc bench, its summary lines, a failure
# counted when it fails.
bench_run() {
  local label=$1
  shift
  echo "-- $label"
  timeout 120 $K bench "$MODEL" --device /GPU:0 --strict-placement --stats "$@" \
    > "$LOGS/bench.out" 2>&1
  local rc=$?
  grep -E "$SHOW" "$LOGS/bench.out"
  [[ $rc -eq 0 ]] || bad "bench $label (rc $rc)"
}
for batch in 1 32; do
  iters=$(( batch == 1 ? 40 : 10 ))
  bench_run "batch $batch, fully resident, cuDNN's heuristic algorithms" --batch $batch --iters $iters
  KC_CUDA_GRAPH=0 bench_run "batch $batch, fully resident, layer by layer (KC_CUDA_GRAPH=0)" \
    --batch $batch --iters $iters
  # --stats times every layer with events, which costs up to 15% at batch
  # 1: the speed a user gets is the unprofiled run's.
  echo "-- batch $batch, fully resident, unprofiled (no --stats: layers untimed)"
  timeout 120 $K bench "$MODEL" --device /GPU:0 --strict-placement --batch $batch \
    --iters $(( iters * 3 )) 2>&1 | grep -E "^median_ms_per_image" || bad "unprofiled bench b$batch"
  KC_CUDA_CONV_ALGO=find bench_run "batch $batch, fully resident, algorithms timed (KC_CUDA_CONV_ALGO=find)" \
    --batch $batch --iters $iters
  KC_CUDA_GEMM_1X1=0 bench_run "batch $batch, fully resident, 1x1 layers on cuDNN (KC_CUDA_GEMM_1X1=0)" \
    --batch $batch --iters $iters
  KC_CUDA_NCHW=0 bench_run "batch $batch, fully resident, 3x3 layers on NHWC (KC_CUDA_NCHW=0)" \
    --batch $batch --iters $iters
  # The budget leaves the activations and workspace whole and a fraction
  # of the weights: batch 32 needs about 450 MiB of activations + workspace.
  fixed=$(( batch == 1 ? 64 : 512 ))
  for frac in 2 4 8; do
    budget=$(( WEIGHT_BYTES / frac + fixed * 1024 * 1024 ))
    trace=$LOGS/trace-b$batch-w$frac.json
    bench_run "batch $batch, variables on /CPU:0, --device-memory $budget (weights/$frac + $fixed MiB)" \
      --variables /CPU:0 --device-memory "$budget" --batch $batch --iters $iters --trace "$trace"
    [[ -f $trace ]] && "$PY" tools/bench/trace_overlap.py "$trace"
  done
  budget=$(( WEIGHT_BYTES / 4 + fixed * 1024 * 1024 ))
  KC_PIN=0 bench_run "batch $batch, weights/4 streamed, staged (KC_PIN=0)" \
    --variables /CPU:0 --device-memory "$budget" --batch $batch --iters $iters \
    --trace "$LOGS/trace-b$batch-w4-staged.json"
  "$PY" tools/bench/trace_overlap.py "$LOGS/trace-b$batch-w4-staged.json"
done
echo "-- where the host's time goes at batch 1 (KC_CUDA_VERBOSE=1)"
KC_CUDA_VERBOSE=1 timeout 120 $K bench "$MODEL" --device /GPU:0 --strict-placement --iters 20 \
  > "$LOGS/verbose.out" 2>&1
grep -E "cudnnConvolutionForward calls|^median_ms_per_image" "$LOGS/verbose.out"
grep -E "cuDNN algorithm" "$LOGS/verbose.out" | awk '{print $4, $5}' | sort | uniq -c

step "ResNet50's convolution shapes on cuDNN, NHWC against NCHW (cudnn_layouts)"
if [[ -x $BUILD/cudnn_layouts ]]; then
  LAYOUTS_ALL=1 timeout 240 "$BUILD/cudnn_layouts" 32 1 > "$LOGS/layouts.txt" 2>&1 ||
    bad "cudnn_layouts"
  grep -vE "^    " "$LOGS/layouts.txt"
else
  echo "no $BUILD/cudnn_layouts: skipped"
fi

step "PyTorch + cuDNN on the same machine"
if "$PY" -c "import torch, torchvision; assert torch.cuda.is_available()" 2>/dev/null; then
  timeout 180 "$PY" - <<'PY'
import time, torch, torchvision
torch.backends.cudnn.benchmark = True
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
m = torchvision.models.resnet50().cuda().eval()
for batch in (1, 32):
    x = torch.randn(batch, 3, 224, 224, device="cuda")
    with torch.no_grad():
        for _ in range(5):
            m(x)
        torch.cuda.synchronize()
        times = []
        for _ in range(20):
            t = time.perf_counter(); m(x); torch.cuda.synchronize()
            times.append(time.perf_counter() - t)
    times.sort()
    print(f"torch resnet50 batch {batch}: median_ms_per_image {times[10] * 1e3 / batch:.3f}")
PY
else
  echo "PyTorch with CUDA is not installed here: no comparison"
fi

if [[ ${KC_GPU_CHECK_SANITIZER:-0} == 1 ]] && command -v compute-sanitizer >/dev/null; then
  step "plugin tests under compute-sanitizer (memcheck)"
  timeout 300 compute-sanitizer --tool memcheck --error-exitcode 9 \
    "$BUILD/tests/test_cuda_plugin" > "$LOGS/sanitizer.log" 2>&1
  rc=$?
  grep -E "ERROR SUMMARY|Invalid|PASSED|FAILED" "$LOGS/sanitizer.log" | tail -15
  [[ $rc -eq 0 ]] || bad "compute-sanitizer (rc $rc)"
fi

step "done"
echo "gpu-check: $FAILED failure(s), $(( $(date +%s) - START )) s"
[[ $FAILED -eq 0 ]]
