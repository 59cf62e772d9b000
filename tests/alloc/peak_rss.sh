#!/usr/bin/env bash
# Peak RSS within the issue's bound, float32 weight bytes + planned
# activation arena + 64 MiB, on the real nsfwjs InceptionV3 (whose
# Winograd kernels copy and enlarge every 3x3, 5x5, (1, 7) and (7, 1)
# kernel): at batch 1 the weight arrays freed after packing had stayed
# resident as heap holes the larger copies could not reuse, 184 MB against
# a bound of 169 (kc_mem_free_pages). Whole process, as kerasc bench
# reports it; not under the sanitizers (their shadow memory). Batch 8
# runs as two lanes with an image-major head (runtime/head.c), whose
# smaller arena lowers the bound as much as the RSS.
source "$(dirname "$0")/../e2e/lib.bash"
N=${KC_NSFWJS_DIR:-}
M="$N/inception_v3/model.min.js"
if [[ ! -f "$M" ]]; then echo "no $M; skipping"; echo "0 passed, 0 failed"; exit 0; fi
for batch in 1 2 8; do
  out=$("$KERASC" bench "$M" --batch $batch --iters 2 --warmup 1 --threads 2 2>&1)
  peak=$(sed -n 's/^peak_rss_kb: //p' <<<"$out")
  weights=$(sed -n 's/^weight_f32_bytes: //p' <<<"$out")
  arena=$(sed -n 's/^arena_bytes: //p' <<<"$out")
  if [[ -z "$peak" || -z "$weights" || -z "$arena" ]]; then
    fail "batch $batch: no peak_rss_kb / weight_f32_bytes / arena_bytes: $out"
    continue
  fi
  bound=$(( weights + arena + (64 << 20) ))
  if (( peak * 1024 <= bound )); then
    pass "batch $batch: peak RSS $(( peak * 1024 )) B within weights + arena + 64 MiB ($bound B)"
  else
    fail "batch $batch: peak RSS $(( peak * 1024 )) B over weights + arena + 64 MiB ($bound B)"
  fi
done
finish
