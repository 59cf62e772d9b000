#!/usr/bin/env bash
# kerasc bench: the report lines the benchmark scripts parse, and usage
# errors. (Speed itself is measured by benchmarks, never asserted here.)
source "$(dirname "$0")/lib.bash"
M="$(dirname "$0")/../zoo/dense_relu/model.keras"
out=$("$KERASC" bench "$M" --batch 4 --iters 3 --warmup 1 2>&1)
if [[ $? -eq 0 ]] && grep -q '^median_ms_per_image: [0-9.]*$' <<<"$out" &&
   grep -q '^load_ms: [0-9.]*$' <<<"$out" && grep -q '^peak_rss_kb: [0-9]*$' <<<"$out" &&
   grep -q '^batch: 4$' <<<"$out"; then
  pass "bench reports median_ms_per_image, load_ms, peak_rss_kb"
else
  fail "bench output: $out"
fi
out=$("$KERASC" bench "$M" --iters 3 --warmup 1 --stats 2>&1)
if [[ $? -eq 0 ]] && grep -q '^profile: mean ms per run over 2 run(s)' <<<"$out" &&
   grep -q '^  dense .* Dense ' <<<"$out" && grep -q '^by class:$' <<<"$out"; then
  pass "bench --stats prints each layer's time and the time per class"
else
  fail "bench --stats output: $out"
fi
"$KERASC" bench "$M" --iters 0 >/dev/null 2>&1; rc=$?
[[ $rc -eq 2 ]] && pass "bench --iters 0 is a usage error" || fail "bench --iters 0 exit $rc"
"$KERASC" bench /nonexistent.keras >/dev/null 2>&1; rc=$?
[[ $rc -eq 1 ]] && pass "bench on a missing file fails" || fail "bench missing file exit $rc"
finish
