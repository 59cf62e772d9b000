#!/usr/bin/env bash
# One command for a machine with an NVIDIA GPU (under 8 minutes):
#   1. builds kerasc and the CUDA plugin (libkerasc_cuda.so),
#   2. runs the plugin's own tests and the fidelity zoo on /GPU:0 against the
#      oracle (the same 230 checks the CPU passes),
#   3. runs a ResNet50-class model fully resident and with variables in host
#      memory streamed under several budgets, printing achieved/bound,
#   4. compares throughput with PyTorch + cuDNN on the same machine when
#      PyTorch with CUDA is installed.
# Usage: scripts/gpu-check.sh [BUILD_DIR]   (default build-gpu)
# Prints a summary; exits nonzero if a build or a fidelity check fails.
set -u
cd "$(dirname "$0")/.."
BUILD=${1:-build-gpu}
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
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >/dev/null && \
  cmake --build "$BUILD" -j "$(nproc)" 2>&1 | grep -E "error|warning|Built target kerasc" || true
[[ -x $BUILD/kerasc ]] || { bad "kerasc did not build"; exit 1; }
[[ -f $BUILD/libkerasc_cuda.so ]] || { bad "the CUDA plugin did not build (nvcc/cuDNN missing?)"; exit 1; }
K=$BUILD/kerasc

step "plugin tests on the GPU"
(cd "$BUILD" && ctest -R cuda --output-on-failure 2>&1 | tail -5) || bad "plugin tests"

step "fidelity zoo on /GPU:0 (oracle tolerance 1e-4 * max(1, max|ref|))"
if out=$(cd "$BUILD" && KC_ZOO_DEVICE=/GPU:0 timeout 240 ./tests/test_zoo 2>&1); then
  grep -E "^golden:" <<<"$out"
else
  grep -E "^FAIL|^golden:|error" <<<"$out" | head -20
  bad "fidelity zoo on the GPU"
fi
step "fidelity zoo on /GPU:0 with variables streamed from host memory"
if out=$(cd "$BUILD" && KC_ZOO_DEVICE=/GPU:0 KC_ZOO_VARIABLES=/CPU:0 timeout 240 ./tests/test_zoo 2>&1); then
  grep -E "^golden:" <<<"$out"
else
  grep -E "^FAIL|^golden:|error" <<<"$out" | head -20
  bad "fidelity zoo, streamed"
fi

step "ResNet50-class model: resident and streamed"
MODEL=bench/models/resnet50.keras
if [[ ! -f $MODEL ]] && /usr/bin/python3 -c "import numpy, h5py" 2>/dev/null; then
  /usr/bin/python3 tools/bench/make_keras_models.py --out bench/models resnet50 >/dev/null 2>&1 || true
fi
[[ -f $MODEL ]] || MODEL=tests/apps/resnet50/model.keras
echo "model: $MODEL"
WEIGHT_BYTES=$(stat -c %s "$MODEL")
for batch in 1 32; do
  echo "-- batch $batch, fully resident"
  $K bench "$MODEL" --device /GPU:0 --strict-placement --batch $batch --iters 20 --stats 2>&1 |
    grep -E "^median_ms_per_image|^device_peak|^bound|^device " || bad "resident bench"
  for frac in 2 4 8; do
    budget=$(( WEIGHT_BYTES / frac + 64 * 1024 * 1024 ))
    echo "-- batch $batch, variables on /CPU:0, --device-memory $budget (weights/$frac + 64 MiB)"
    $K bench "$MODEL" --device /GPU:0 --strict-placement --variables /CPU:0 \
      --device-memory "$budget" --batch $batch --iters 10 --stats 2>&1 |
      grep -E "^median_ms_per_image|^device_peak|^bound|^device |below the minimum" || bad "streamed bench"
  done
done

step "PyTorch + cuDNN on the same machine"
if /usr/bin/python3 -c "import torch, torchvision; assert torch.cuda.is_available()" 2>/dev/null; then
  /usr/bin/python3 - <<'PY'
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

step "done"
echo "gpu-check: $FAILED failure(s), $(( $(date +%s) - START )) s"
[[ $FAILED -eq 0 ]]
