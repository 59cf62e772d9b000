#!/usr/bin/env bash
# Placement on the command line: summary --placement, run with a budget,
# streamed weights, a trace and stats; bad device strings, budgets and
# rules give one-line errors.
source "$(dirname "$0")/lib.bash"
D="$(dirname "$0")/../apps/resnet50"
M="$D/model.keras"
T=${KC_TEST_TMP:-/tmp}/placement_e2e
mkdir -p "$T"

# KC_FAKE_GPUS=1: the CPU backend poses as /GPU:0 (a budgeted device)
out=$(KC_FAKE_GPUS=1 "$KERASC" summary "$M" --placement --place 'conv1_pad..conv3_block1_out=/GPU:0' \
      --device-memory 16MiB 2>&1)
if [[ $? -eq 0 ]] && grep -q '^conv1_conv .*/GPU:0 *resident' <<<"$out" &&
   grep -q '^predictions .*/CPU:0 *host' <<<"$out" && grep -q 'device boundaries' <<<"$out" &&
   grep -Eq '/GPU:0 -> /CPU:0: [0-9]+' <<<"$out" && grep -Eq '/CPU:0 -> /GPU:0: [0-9]+' <<<"$out"; then
  pass "summary --placement shows devices, variables and boundary bytes"
else
  fail "summary --placement: $out"
fi

out=$("$KERASC" summary "$M" --placement --variables /CPU:0 --device-memory 400KiB 2>&1)
grep -q 'streamed' <<<"$out" && pass "summary --placement plans streamed layers under a budget" ||
  fail "summary streamed: $out"

"$KERASC" run "$M" --input "$D/input_0.npy" --output "$T/plain.npy" || fail "plain run"
# the host CPU named as the device places nothing: the host loop, its bits
"$KERASC" run "$M" --input "$D/input_0.npy" --output "$T/cpu0.npy" --device /CPU:0 &&
  "$KERASC" run "$M" --input "$D/input_0.npy" --output "$T/cpu0v.npy" --device /device:CPU:0 \
    --variables /CPU:0 && cmp -s "$T/plain.npy" "$T/cpu0.npy" && cmp -s "$T/plain.npy" "$T/cpu0v.npy" &&
  [[ "$("$KERASC" summary "$M" --placement --device /CPU:0 2>&1 | tail -1)" == "every layer on /CPU:0 (host), variables in host memory" ]] &&
  pass "--device /CPU:0 (and --variables /CPU:0) runs the host loop: the bits of no placement" ||
  fail "--device /CPU:0 differs from no placement"
out=$("$KERASC" run "$M" --input "$D/input_0.npy" --output "$T/streamed.npy" --variables /CPU:0 \
      --device-memory 400KiB --trace "$T/trace.json" --stats 2>&1)
if [[ $? -eq 0 ]] && grep -q '^bound: max(compute' <<<"$out" && grep -q 'achieved/bound' <<<"$out" &&
   grep -q '"cat":"copy"' "$T/trace.json" && grep -q '"cat":"compute"' "$T/trace.json" &&
   grep -q '"name":"copy"' "$T/trace.json"; then
  pass "run --variables /CPU:0 --device-memory streams, traces and prints stats"
else
  fail "streamed run: $out"
fi
# the host's side: its enqueue time per device layer (stats and a trace
# lane), the pinned share of the streamed weights, and the overlap tool
if grep -Eq '^host: enqueueing [0-9]+ device layers took' <<<"$out" &&
   grep -Eq '^streamed weights /CPU:0\[budget\]: [0-9.]+ of [0-9.]+ MiB pinned in host memory' <<<"$out" &&
   grep -q '"cat":"enqueue"' "$T/trace.json" && grep -q '"name":"host enqueue"' "$T/trace.json"; then
  pass "stats and trace show the host's enqueue time and the pinned weights"
else
  fail "enqueue/pinned lines: $out"
fi
ov=$(/usr/bin/python3 "$(dirname "$0")/../../tools/bench/trace_overlap.py" "$T/trace.json" 2>&1)
grep -Eq 'uploads [1-9][0-9]*, early [0-9]+; copy_ms [0-9.]+, overlapped_ms .*enqueue_ms [0-9.]+' <<<"$ov" &&
  pass "trace_overlap.py reads the trace: $ov" || fail "trace_overlap.py: $ov"
out=$(KC_PIN=0 "$KERASC" run "$M" --input "$D/input_0.npy" --output "$T/staged.npy" \
      --variables /CPU:0 --device-memory 400KiB --stats 2>&1)
grep -q '^streamed weights /CPU:0\[budget\]: staged, not pinned (KC_PIN=0)' <<<"$out" &&
  cmp -s "$T/staged.npy" "$T/streamed.npy" &&
  pass "KC_PIN=0 stages every upload, same bits" || fail "KC_PIN=0: $out"
if /usr/bin/python3 - "$T/plain.npy" "$T/streamed.npy" <<'PY'
import sys, numpy as np
a, b = np.load(sys.argv[1]), np.load(sys.argv[2])
sys.exit(0 if a.shape == b.shape and np.abs(a - b).max() <= 1e-4 * max(1, np.abs(a).max()) else 1)
PY
then pass "streamed output equals the plain run"; else fail "streamed output differs"; fi

# the disk tier: weights stay in a spill file, paged in per layer
out=$("$KERASC" run "$M" --input "$D/input_0.npy" --output "$T/disk.npy" --host-memory 128KiB \
      --spill-dir "$T" --variables /CPU:0 --device-memory 400KiB 2>&1)
if [[ $? -eq 0 ]] && /usr/bin/python3 -c "
import sys, numpy as np
a, b = np.load('$T/plain.npy'), np.load('$T/disk.npy')
sys.exit(0 if np.abs(a - b).max() <= 1e-4 * max(1, np.abs(a).max()) else 1)"; then
  pass "run --host-memory (disk tier) streams from the spill file, same output"
else
  fail "disk tier run: $out"
fi
ls "$T"/kerasc-spill-* >/dev/null 2>&1 && fail "a spill file was left behind" || pass "no spill file left behind"

# expect_run_error REGEX ARGS...: rc 1 or 2, one line on stderr, no output file
expect_run_error() {
  local regex=$1; shift
  rm -f "$T/err.npy"
  local err rc
  err=$("$KERASC" run "$M" --input "$D/input_0.npy" --output "$T/err.npy" "$@" 2>&1 >/dev/null); rc=$?
  local lines; lines=$(printf '%s\n' "$err" | grep -c .)
  if [[ ($rc -eq 1 || $rc -eq 2) && $lines -eq 1 && ! -e "$T/err.npy" ]] && grep -Eq "$regex" <<<"$err"; then
    pass "refused ($*): $err"
  else
    fail "($*): rc=$rc lines=$lines err='$err' (want /$regex/)"
  fi
}
expect_run_error "device '/TPU:0'.*unknown device type" --device /TPU:0
expect_run_error "no layer 'nope'" --place 'nope..=/CPU:0'
expect_run_error "below the minimum .*largest layer" --variables /CPU:0 --device-memory 64KiB
expect_run_error "device-memory takes a size" --device-memory lots
expect_run_error "/GPU:3 is not available.*strict" --device /GPU:3 --strict-placement
expect_run_error "cluster" --place 'predictions=/job:worker/task:1/GPU:0'
expect_run_error "microbatch takes a number" --microbatch 0
expect_run_error "host memory budget .* below the minimum .*conv5_block1_2_conv" --host-memory 10KiB
expect_run_error "host-memory takes a size" --host-memory -5
expect_run_error "winograd-memory takes a size above 0" --winograd-memory 0

# --winograd-memory 1 (one byte): no layer can pay for Winograd's
# transformed kernel, so even with KC_WINOGRAD=1 every one runs direct,
# bit-identical to --exact; without the bound Winograd changes the bits.
KC_WINOGRAD=1 "$KERASC" run "$M" --input "$D/input_0.npy" --output "$T/w1.npy" --winograd-memory 1 2>/dev/null &&
  KC_WINOGRAD=1 "$KERASC" run "$M" --input "$D/input_0.npy" --output "$T/wany.npy" 2>/dev/null &&
  "$KERASC" run "$M" --input "$D/input_0.npy" --output "$T/exact.npy" --exact 2>/dev/null
# (KC_WINOGRAD=1 forces oneDNN's Winograd, which oneDNN 2.6 has only with
# AVX-512: on an AVX2 CPU no layer of this model takes it either way)
if cmp -s "$T/w1.npy" "$T/exact.npy" && ! cmp -s "$T/wany.npy" "$T/exact.npy"; then
  pass "--winograd-memory 1 keeps every convolution direct (bit-identical to --exact)"
elif cmp -s "$T/w1.npy" "$T/exact.npy" && ! grep -qw avx512f /proc/cpuinfo; then
  pass "--winograd-memory 1 bit-identical to --exact (no oneDNN Winograd without AVX-512)"
else
  fail "--winograd-memory 1 against --exact"
fi

# soft placement: one warning, then the run completes
err=$("$KERASC" run "$M" --input "$D/input_0.npy" --output "$T/soft.npy" --device /GPU:3 2>&1 >/dev/null); rc=$?
if [[ $rc -eq 0 && $(grep -c 'warning: /GPU:3 is not available' <<<"$err") -eq 1 && -s "$T/soft.npy" ]]; then
  pass "a missing GPU falls back to /CPU:0 with one warning"
else
  fail "soft placement: rc=$rc err=$err"
fi
finish
