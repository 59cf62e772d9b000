#!/usr/bin/env bash
# kerasc against ONNX Runtime, PyTorch and tfjs-wasm, side by side
# (bench/README.md). What `make bench` runs.
#
#   tools/bench/run_bench.sh [--threads 2] [--rounds 3] [--batches 1,8] [--models a,b] ...
#   tools/bench/run_bench.sh --quick [--threads 1]     # CI smoke: ratio vs bench/baseline.txt
#
# 1. installs the peers if missing (tools/bench/install_peers.sh);
# 2. builds kerasc if build/kerasc is missing (make build);
# 3. generates what bench/models/ lacks: the Keras-definition models
#    (tools/bench/make_keras_models.py) and their torchvision ONNX exports
#    (tools/bench/export_onnx.py);
# 4. runs tools/bench/bench.py with the arguments given (see its --help).
# Environment: KERASC=path (default build/kerasc), BENCH_SKIP_INSTALL=1.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cd "$root"
PY=/usr/bin/python3

quick=0
for arg in "$@"; do [[ "$arg" == --quick ]] && quick=1; done

if [[ "${BENCH_SKIP_INSTALL:-0}" != 1 ]]; then
  bash "$here/install_peers.sh"
fi
kerasc=${KERASC:-build/kerasc}
if [[ ! -x "$kerasc" ]]; then
  make build
fi

if ((quick)); then
  $PY "$here/make_keras_models.py" mobilenet_v2
  $PY "$here/export_onnx.py" mobilenet_v2 2> >(grep -v -i warning >&2)
else
  $PY "$here/make_keras_models.py"
  $PY "$here/export_onnx.py" 2> >(grep -v -i warning >&2)
fi

exec $PY "$here/bench.py" --kerasc "$kerasc" "$@"
