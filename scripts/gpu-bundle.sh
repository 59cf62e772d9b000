#!/usr/bin/env bash
# Carry a build made here to a GPU machine that lacks this project's Debian
# packages (HDF5, oneDNN, ZeroMQ, ...) and run scripts/gpu-check.sh there.
#
#   scripts/gpu-bundle.sh pack [BUILD_DIR] [OUT]   (here; default build, .gpu/bundle.tar.xz)
#       kerasc, the CUDA plugin and the test binaries gpu-check runs, with
#       every shared library they load except glibc's and CUDA's own
#       (the GPU machine's CUDA, cuDNN and cuBLAS are used), xz-packed.
#   scripts/gpu-bundle.sh check [BUNDLE]            (there, in a copy of this tree)
#       unpacks it into build/, finds CUDA's libraries, and runs
#       KC_GPU_CHECK_PREBUILT=1 scripts/gpu-check.sh build. The test
#       binaries name this tree by the absolute path they were built in
#       (KC_TEST_DATA): when the copy lies elsewhere, that path is made a
#       link to it.
#   GPU_CHECK_LOGS=DIR: where gpu-check keeps its logs (default a temp dir).
set -euo pipefail
cd "$(dirname "$0")/.."
MODE=${1:-}
BINS="kerasc libkerasc_cuda.so cudnn_layouts tests/test_cuda_plugin tests/test_zoo tests/test_streaming"

pack() {
  local build=${1:-build} out=${2:-.gpu/bundle.tar.xz} tmp lib
  tmp=$(mktemp -d)
  mkdir -p "$tmp/bin" "$tmp/lib" "$(dirname "$out")"
  for b in $BINS; do
    [[ -f $build/$b ]] || { echo "gpu-bundle: $build/$b is missing (build with nvcc first)" >&2; exit 1; }
    cp "$build/$b" "$tmp/bin/"
  done
  # The tree the binaries were built for (gpu-check's tests read it there).
  sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$build/CMakeCache.txt" > "$tmp/source_dir"
  for lib in $(cd "$build" && ldd $BINS | awk '/=>/ {print $3}' | sort -u); do
    case $(basename "$lib") in
      libc.so* | libm.so* | libpthread* | libdl.so* | librt.so* | libresolv* | ld-linux*) ;;
      libcud* | libcublas* | libcuda*) ;; # the GPU machine's own
      *) cp -L "$lib" "$tmp/lib/" ;;
    esac
  done
  tar -C "$tmp" -cf - . | xz -T0 -6 > "$out"
  rm -rf "$tmp"
  echo "gpu-bundle: $out ($(du -h "$out" | cut -f1))"
}

check() {
  local bundle=${1:-.gpu/bundle.tar.xz} unpacked src path n lp
  unpacked=$(mktemp -d)
  tar -xJf "$bundle" -C "$unpacked"
  src=$(cat "$unpacked/source_dir")
  if [[ -n $src && $src != "$PWD" ]]; then
    if [[ -e $src && ! -L $src ]]; then
      echo "gpu-bundle: $src exists and is not this tree: the tests would read it" >&2
      exit 1
    fi
    mkdir -p "$(dirname "$src")"
    ln -sfn "$PWD" "$src"
  fi
  mkdir -p build/tests build/tmp
  for b in $BINS; do cp "$unpacked/bin/$(basename "$b")" "build/$b"; done
  lp=$unpacked/lib
  for n in libcudnn.so.9 libcublas.so.13 libcublasLt.so.13 libcudart.so.13; do
    path=$(find /usr/local/cuda*/ /opt /usr/lib -name "$n" 2>/dev/null | head -1 || true)
    [[ -n $path ]] && lp=$lp:$(dirname "$path")
  done
  export LD_LIBRARY_PATH=$lp${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  if ldd build/kerasc build/libkerasc_cuda.so | grep "not found"; then
    echo "gpu-bundle: libraries missing on this machine (above)" >&2
    exit 1
  fi
  KC_GPU_CHECK_PREBUILT=1 KC_GPU_CHECK_LOGS=${GPU_CHECK_LOGS:-} bash scripts/gpu-check.sh build
}

case $MODE in
  pack) shift; pack "$@" ;;
  check) shift; check "$@" ;;
  *) echo "usage: scripts/gpu-bundle.sh pack [BUILD_DIR] [OUT] | check [BUNDLE]" >&2; exit 2 ;;
esac
