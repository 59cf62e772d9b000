#!/usr/bin/env bash
# Installs the peers of `make bench` (see bench/README.md), only what is
# missing; safe to run again.
#   Debian: python3-torch python3-torchvision python3-onnx (torch peer and the
#           ONNX export), gnuplot-nox (the chart), libopenblas-dev (sgemm peak)
#   npm (bench/node_modules, pinned by bench/package-lock.json, scripts never
#        run): onnxruntime-node 1.30.x (its npm tarball ships the Linux x64 CPU
#        library, bin/napi-v6/linux/x64/), @tensorflow/tfjs-backend-wasm and
#        @tensorflow/tfjs at the version tools/ uses.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD

DEB_PACKAGES=(python3-torch python3-torchvision python3-onnx gnuplot-nox libopenblas-dev)
missing=()
for pkg in "${DEB_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
  echo "install_peers: Debian packages: ${missing[*]}"
  SUDO=""
  [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# tfjs in bench/ must be the version tools/ uses (one tfjs-core for the
# layers API and the wasm backend; the same tfjs as the repo's oracle).
want=$(node -e 'const l=require(process.argv[1]);console.log(l.packages["node_modules/@tensorflow/tfjs"].version)' \
  "$root/tools/package-lock.json")
have=$(node -e 'console.log(require(process.argv[1]).dependencies["@tensorflow/tfjs"])' "$root/bench/package.json")
if [[ "$want" != "$have" ]]; then
  echo "install_peers: bench/package.json pins @tensorflow/tfjs $have but tools/ uses $want:" \
       "update bench/package.json (tfjs and tfjs-backend-wasm) and rerun" >&2
  exit 1
fi

ok() {
  [[ -f bench/node_modules/onnxruntime-node/bin/napi-v6/linux/x64/onnxruntime_binding.node ]] &&
  [[ -f bench/node_modules/@tensorflow/tfjs-backend-wasm/package.json ]] &&
  [[ -f bench/node_modules/@tensorflow/tfjs/package.json ]]
}
if ! ok; then
  echo "install_peers: npm packages into bench/node_modules"
  cd bench
  if [[ -f package-lock.json ]]; then
    npm ci --ignore-scripts --no-audit --no-fund --loglevel=error
  else
    npm install --ignore-scripts --no-audit --no-fund --loglevel=error
  fi
  cd "$root"
fi

# onnxruntime-node's postinstall (script/install) only fetches the CUDA /
# TensorRT providers; the CPU build is in the tarball. Prove that the native
# library loads and parses without that step: an empty model must be refused
# by ORT's own protobuf reader.
node -e '
  const root = process.argv[1];
  const ort = require(root + "/bench/node_modules/onnxruntime-node");
  const v = require(root + "/bench/node_modules/onnxruntime-node/package.json").version;
  ort.InferenceSession.create(new Uint8Array([8, 7])).then(
    () => { console.error("install_peers: onnxruntime-node accepted an empty model?"); process.exit(1); },
    (e) => {
      if (!/graph|protobuf|model/i.test(String(e && e.message))) { console.error("install_peers: onnxruntime-node: " + e); process.exit(1); }
      console.log("install_peers: onnxruntime-node " + v + ": native CPU library loads (" + e.message + ")");
    });
' "$root"
/usr/bin/python3 -c 'import torch, torchvision, onnx; print("install_peers: torch", torch.__version__, "torchvision", torchvision.__version__, "onnx", onnx.__version__)'
command -v gnuplot >/dev/null && echo "install_peers: $(gnuplot --version)"
