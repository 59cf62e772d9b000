#!/usr/bin/env bash
# Heap allocations per inference in the steady state, counted by kerasc
# bench under an LD_PRELOAD shim (kc_alloc_shim.c) over runs 2..N, every
# allocation of the process included (kerasc, oneDNN, OpenBLAS, libc):
#  - models that need no oneDNN primitive (merges, global pooling): 0;
#  - models whose every layer kerasc's own kernels take: 0 too. Dense
#    (dense.c) with AVX2 and FMA or AVX-512; with AVX-512, MobileNetV2 at
#    batch 1 (and 4, two lanes), reduced and nsfwjs's real one: its RGB
#    stem (stem.c), its blocks (irb.c), its last 1x1 (pw.c, alone in a
#    lane too), a pooling window the whole image (nsfwjs's), Dense;
#    ResNet50's stem (stem.c's wide loop: its 7x7 conv1); InceptionV3's
#    Mixed_6a 288-channel 3x3 stride 2 (pw.c, dnnl_order.c);
#  - models with oneDNN primitives (the reduced application models:
#    convolutions, residual sums, pooling, concatenation, at batch 1, 3
#    and 4 (two batch lanes)): 0 allocations of 64 KiB or more.
#    What remains there is oneDNN's own: dnnl_primitive_execute builds a
#    std::unordered_map of its arguments on every call (7-8 small
#    operator-new blocks per primitive; gdb backtraces on ResNet50 show
#    nothing else), which its API offers no way to avoid.
source "$(dirname "$0")/../e2e/lib.bash"
SHIM=${2:?usage: $0 kerasc libkc_alloc_shim.so}
HERE="$(dirname "$0")/.."
bench() { LD_PRELOAD="$SHIM" "$KERASC" bench "$@" --iters 3 --warmup 1 --threads 2 2>&1; }
for m in merge_ops global_pooling; do
  for batch in 2 3; do # two lanes of one image; one batch
    out=$(bench "$HERE/zoo/$m/model.keras" --batch $batch)
    got=$(sed -n 's/^allocs_per_inference: //p' <<<"$out")
    [[ "$got" == "0.00" ]] && pass "$m batch $batch: 0 heap allocations per inference" ||
      fail "$m batch $batch: allocs_per_inference '$got': $out"
  done
done
zero=()
if grep -qw avx2 /proc/cpuinfo && grep -qw fma /proc/cpuinfo; then
  zero+=("zoo/dense_relu/model.keras 1" "zoo/dense_relu/model.keras 4"
         "zoo/batchnorm_dense/model.keras 3")
else
  echo "skip the Dense models: no AVX2 and FMA here, Dense on oneDNN or plain"
fi
# MobileNetV2's blocks take kerasc's kernels where oneDNN runs AVX-512
# (on AVX2 its depthwise and 1x1 layers stay on oneDNN: 660 a run)
if grep -qw avx512f /proc/cpuinfo && [[ -z "${ONEDNN_MAX_CPU_ISA:-}${KC_ISA:-}" ]]; then
  # batch 4: two lanes of two images, its last 1x1 on pw.c alone
  zero+=("apps/mobilenet_v2/model.keras 1" "apps/mobilenet_v2/model.keras 4")
  # ResNet50's stem (7x7 stride-2 conv1, pool1) on stem.c's wide loop: on
  # oneDNN it made 16 allocations an inference (ResNet50's last ones)
  zero+=("data/fusion/resnet_stem.keras 1" "data/fusion/resnet_stem.keras 4")
  # InceptionV3's Mixed_6a 3x3 stride 2 over 288 channels onto 17x17 on
  # pw.c in oneDNN's runs of channels (dnnl_order.c): on oneDNN it made
  # 16 allocations an inference (InceptionV3's last ones)
  zero+=("data/fusion/mixed6a_alloc.keras 1" "data/fusion/mixed6a_alloc.keras 4")
  nsfw="${KC_NSFWJS_DIR:-$HERE/../tools/node_modules/nsfwjs/dist/models}/mobilenet_v2/model.min.js"
  [[ -f "$nsfw" ]] && zero+=("$nsfw 1") || echo "skip $nsfw (not installed)"
else
  echo "skip MobileNetV2's zero: no AVX-512 here (or an ISA cap)"
fi
for item in "${zero[@]}"; do
  model=${item% *} batch=${item##* }
  [[ "$model" == /* ]] || model="$HERE/$model"
  out=$(bench "$model" --batch "$batch")
  got=$(sed -n 's/^allocs_per_inference: //p' <<<"$out")
  [[ "$got" == "0.00" ]] && pass "$model batch $batch: 0 heap allocations per inference" ||
    fail "$model batch $batch: allocs_per_inference '$got': $out"
done
# batch 3 on 2 threads runs as one batch, cut layer by layer; batch 4 as
# two lanes of 2 images side by side (lanes: 2)
for model in zoo/dense_relu zoo/batchnorm_dense apps/resnet50 apps/mobilenet_v2 apps/inception_v3; do
  for batch in 1 3 4; do
    app=$model
    out=$(bench "$HERE/$model/model.keras" --batch $batch)
    got=$(sed -n 's/^large_allocs_per_inference: //p' <<<"$out")
    lanes=$(sed -n 's/^lanes: //p' <<<"$out")
    want=1
    [[ $batch == 4 ]] && want=2
    [[ "$got" == "0.00" && "$lanes" == "$want" ]] &&
      pass "$app batch $batch, lanes $lanes: 0 allocations >= 64 KiB per inference" ||
      fail "$app batch $batch: large_allocs_per_inference '$got', lanes '$lanes' (want $want): $out"
  done
done
# Kernels that keep a buffer of their own for a run (kernels/inner_conv.c:
# a transposed convolution's product, an upsampled 3x3 convolution's 2x2
# one) make it once per lane, in the first run: a 32x32 64 -> 32 3x3
# stride-2 transposed convolution (its 1.2 MB product was allocated on
# every run before), and the real denoising autoencoder's two UpSampling2D
# + 3x3 pairs, at batch 1 and in two lanes.
for batch in 1 2; do
  out=$(bench "$HERE/data/fusion/transpose_alloc.keras" --batch $batch)
  got=$(sed -n 's/^large_allocs_per_inference: //p' <<<"$out")
  [[ "$got" == "0.00" ]] && pass "transpose_alloc batch $batch: 0 allocations >= 64 KiB per inference" ||
    fail "transpose_alloc batch $batch: large_allocs_per_inference '$got': $out"
  den="${KC_SHARED_MODELS:-}/denoise_ae_upsample_k380.keras"
  [[ -f "$den" ]] || continue
  out=$(bench "$den" --batch $batch)
  got=$(sed -n 's/^large_allocs_per_inference: //p' <<<"$out")
  [[ "$got" == "0.00" ]] && pass "denoiser batch $batch: 0 allocations >= 64 KiB per inference" ||
    fail "denoiser batch $batch: large_allocs_per_inference '$got': $out"
done
# With an image-major head (runtime/head.c: each lane runs the first 40
# nodes one image at a time on its own small arena, then copies what
# crosses into the lane's arena): nothing more, on every run after the
# first.
for model in apps/resnet50 apps/mobilenet_v2 apps/inception_v3; do
  out=$(KC_HEAD=40 bench "$HERE/$model/model.keras" --batch 4)
  got=$(sed -n 's/^large_allocs_per_inference: //p' <<<"$out")
  [[ "$got" == "0.00" ]] && pass "$model batch 4, head of 40 nodes: 0 allocations >= 64 KiB" ||
    fail "$model batch 4, head of 40 nodes: large_allocs_per_inference '$got': $out"
done
# Branch lanes (runtime/branches.c: at batch 1 on 2 threads InceptionV3's
# towers run side by side, each on the thread that built its kernels in
# the first run): nothing more either. The reduced model's regions are
# small; KC_BRANCH_MIN_FLOPS=0 lets every one run so.
out=$(KC_BRANCH_MIN_FLOPS=0 bench "$HERE/apps/inception_v3/model.keras" --batch 1)
got=$(sed -n 's/^large_allocs_per_inference: //p' <<<"$out")
regions=$(sed -n 's/^branch_regions: //p' <<<"$out")
[[ "$got" == "0.00" && "${regions:-0}" -ge 3 ]] &&
  pass "inception_v3 batch 1, $regions branch regions: 0 allocations >= 64 KiB per inference" ||
  fail "inception_v3 batch 1, branch lanes: large_allocs_per_inference '$got', regions '$regions': $out"
# ... and no allocation of any size that only a later run makes: each
# lane builds its branches' kernels on its own thread in the first run
# (taken from a shared counter, a lane's thread met some branches first
# in run 2 or later: 972 allocations a run over runs 2-3, 913 over 2-6).
# The deal kept (KC_BRANCH_REBALANCE=0), counted from run 2.
a3=$(KC_BRANCH_REBALANCE=0 KC_BRANCH_MIN_FLOPS=0 LD_PRELOAD="$SHIM" "$KERASC" bench \
       "$HERE/apps/inception_v3/model.keras" --batch 1 --iters 3 --warmup 1 --threads 2 2>&1 |
       sed -n 's/^allocs_per_inference: //p')
a6=$(KC_BRANCH_REBALANCE=0 KC_BRANCH_MIN_FLOPS=0 LD_PRELOAD="$SHIM" "$KERASC" bench \
       "$HERE/apps/inception_v3/model.keras" --batch 1 --iters 6 --warmup 1 --threads 2 2>&1 |
       sed -n 's/^allocs_per_inference: //p')
[[ -n "$a3" && "$a3" == "$a6" ]] &&
  pass "inception_v3 batch 1, branch lanes: $a3 allocations a run over runs 2-3 and 2-6" ||
  fail "inception_v3 batch 1, branch lanes: $a3 allocations a run over runs 2-3, $a6 over 2-6"
# Dealt again from measured times (branches.c: settled by run 7, a moved
# branch's thread making its per-lane oneDNN buffers once): nothing more
# after the warm-up of 8 runs, over 3 runs and over 6.
w3=$(KC_BRANCH_MIN_FLOPS=0 LD_PRELOAD="$SHIM" "$KERASC" bench "$HERE/apps/inception_v3/model.keras" \
       --batch 1 --iters 3 --warmup 8 --threads 2 2>&1 | sed -n 's/^allocs_per_inference: //p')
w6=$(KC_BRANCH_MIN_FLOPS=0 LD_PRELOAD="$SHIM" "$KERASC" bench "$HERE/apps/inception_v3/model.keras" \
       --batch 1 --iters 6 --warmup 8 --threads 2 2>&1 | sed -n 's/^allocs_per_inference: //p')
[[ -n "$w3" && "$w3" == "$w6" && "$w3" == "$a3" ]] &&
  pass "inception_v3 batch 1, branches dealt again: $w3 allocations a run after the warm-up, over 3 runs and 6" ||
  fail "inception_v3 batch 1, branches dealt again: $w3 allocations a run over 3 runs, $w6 over 6 (kept deal: $a3)"
# The shim really counts: the first run (planning, primitives, packed
# weights) allocates, and is outside the window; a window that would
# contain nothing but it is reported as unmeasured.
out=$(LD_PRELOAD="$SHIM" "$KERASC" bench "$HERE/zoo/dense_relu/model.keras" --iters 1 --warmup 0 2>&1)
grep -q '^allocs_per_inference: unmeasured' <<<"$out" && pass "a single run is not counted" ||
  fail "single run: $out"
out=$("$KERASC" bench "$HERE/zoo/dense_relu/model.keras" --iters 2 --warmup 1 2>&1)
grep -q '^allocs_per_inference: unmeasured' <<<"$out" && pass "without the shim: unmeasured" ||
  fail "no shim: $out"
finish
