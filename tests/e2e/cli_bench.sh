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
   grep -q '^  dense .* Dense ' <<<"$out" && grep -q '^by class:$' <<<"$out" &&
   grep -q '^lanes: 1$' <<<"$out" && ! grep -q '^lanes_helped' <<<"$out"; then
  pass "bench --stats prints each layer's time and the time per class (batch 1: no lanes)"
else
  fail "bench --stats output: $out"
fi
# A batch that runs in lanes is profiled in lanes too (lane 0's times):
# the schedule the unprofiled run takes.
out=$("$KERASC" bench "$M" --batch 4 --threads 2 --iters 3 --warmup 1 --stats 2>&1)
if [[ $? -eq 0 ]] && grep -q '^lanes: 2$' <<<"$out" &&
   grep -q "^  in 2 batch lanes: lane 0's times, its 2 image(s) on one thread" <<<"$out" &&
   grep -q '^  dense .* Dense ' <<<"$out" && grep -q '^lanes_helped_per_run: [0-9.]*$' <<<"$out"; then
  pass "bench --batch 4 --threads 2 --stats profiles lane 0 of 2, and says how much the lanes helped"
else
  fail "bench --stats in lanes: $out"
fi
# A BatchNormalization after a SeparableConv2D folds into its pointwise
# kernel, and the ReLU after it becomes the layer's activation (fuse.c):
# the profile of Xception (tests/apps) shows neither as a layer of its own.
X="$(dirname "$0")/../apps/xception/model.keras"
out=$("$KERASC" bench "$X" --batch 1 --iters 2 --warmup 1 --stats 2>&1)
if [[ $? -eq 0 ]] && grep -q '^  block2_sepconv1 .* SeparableConv2D ' <<<"$out" &&
   ! grep -q 'BatchNormalization' <<<"$out" && ! grep -q '^  block2_sepconv2_act ' <<<"$out"; then
  pass "bench --stats: Xception's BatchNormalization and ReLU layers run inside its separable ones"
else
  fail "Xception's separable layers unfused: $out"
fi
# --slices: `ready` after the warm-up, then a slice of --iters runs per
# line on standard input, `slice_median_ms` after each; the report covers
# every slice's runs (tools/bench/bench.py alternates two runners so).
out=$(printf '\n\n\n' | "$KERASC" bench "$M" --iters 2 --warmup 1 --slices 3 2>&1)
if [[ $? -eq 0 && "$(head -1 <<<"$out")" == ready ]] &&
   [[ $(grep -c '^slice_median_ms: [0-9.]*$' <<<"$out") -eq 3 ]] &&
   grep -q '^iters: 6$' <<<"$out" && grep -q '^slices: 3$' <<<"$out" &&
   grep -q '^median_ms_per_image: [0-9.]*$' <<<"$out"; then
  pass "bench --slices 3: ready, three slices on three lines, the report over all six runs"
else
  fail "bench --slices output: $out"
fi
err=$(printf '\n' | "$KERASC" bench "$M" --iters 2 --slices 3 2>&1 >/dev/null); rc=$?
[[ $rc -eq 1 && "$err" == "kerasc bench: standard input ended after 1 of 3 slices" ]] &&
  pass "bench --slices: input ending early is a one-line error, exit 1" ||
  fail "bench --slices early end: rc $rc: $err"
# OpenMP binding asked for: the command re-executes itself (cli/main.c's
# policy) after libgomp bound this thread to the first place; the new
# process must still see every place, not that one alone (it ran both
# threads on CPU 0).
if [[ $(nproc) -ge 2 ]]; then
  out=$(env -u OMP_WAIT_POLICY OMP_PROC_BIND=spread OMP_PLACES='{0},{1}' OMP_DISPLAY_ENV=true \
        "$KERASC" bench "$M" --iters 2 --warmup 1 --threads 2 2>&1)
  places=$(grep "OMP_PLACES = " <<<"$out" | tail -1)
  [[ $(grep -c "OMP_PLACES = " <<<"$out") -eq 2 && "$places" == *"'{0},{1}'"* ]] &&
    pass "bench re-executed under OMP_PROC_BIND keeps both places: $places" ||
    fail "bench under OMP_PROC_BIND: the re-executed process saw ${places:-no places} ($(grep -c "OMP_PLACES = " <<<"$out") displays)"
fi
"$KERASC" bench "$M" --slices 0 >/dev/null 2>&1; rc=$?
[[ $rc -eq 2 ]] && pass "bench --slices 0 is a usage error" || fail "bench --slices 0 exit $rc"
"$KERASC" bench "$M" --iters 0 >/dev/null 2>&1; rc=$?
[[ $rc -eq 2 ]] && pass "bench --iters 0 is a usage error" || fail "bench --iters 0 exit $rc"
"$KERASC" bench /nonexistent.keras >/dev/null 2>&1; rc=$?
[[ $rc -eq 1 ]] && pass "bench on a missing file fails" || fail "bench missing file exit $rc"
finish
