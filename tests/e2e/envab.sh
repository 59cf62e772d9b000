#!/usr/bin/env bash
# build/envab (tools/bench/envab.c): two settings of the environment
# switches in one process, each session built and run under its own, and
# usage errors. (Speed itself is never asserted here.)
source "$(dirname "$0")/lib.bash"
ENVAB="$(dirname "$KERASC")/envab"
M="$(dirname "$0")/../zoo/batchnorm_conv/model.keras"
[[ -x "$ENVAB" ]] || { fail "no $ENVAB beside the CLI"; finish; exit 1; }
# KC_FUSE=0 on B only: B's profile shows the BatchNormalization and the
# Activation that A's folds into the convolution; A's has them at zero.
out=$("$ENVAB" "$M" "" "KC_FUSE=0" --iters 3 --stats 2>&1)
if [[ $? -eq 0 ]] && grep -q '^omp: OMP_WAIT_POLICY=passive ' <<<"$out" &&
   grep -q '^A made first .* B/A pairs: median [0-9.]* (quartiles [0-9.]* [0-9.]*), B faster in [0-9]* of 3$' <<<"$out" &&
   grep -q '^B made first ' <<<"$out" && grep -q '^both .* of 6$' <<<"$out" &&
   grep -Eq '^layer conv2d +[0-9.]+ +[0-9.]+ ' <<<"$out" &&
   grep -Eq '^layer batch_normalization +0\.0000 +0\.[0-9]*[1-9]' <<<"$out" &&
   grep -Eq '^layer activation +0\.0000 +0\.[0-9]*[1-9]' <<<"$out"; then
  pass "envab: both orders and both together; B's switch reached B's session only"
else
  fail "envab output: $out"
fi
out=$("$ENVAB" "$M" "" "KC_FUSE" 2>&1 >/dev/null); rc=$?
if [[ $rc -eq 2 && $(wc -l <<<"$out") -eq 1 ]] && grep -q "bad switch 'KC_FUSE'" <<<"$out"; then
  pass "envab: a switch without a value is a one-line usage error"
else
  fail "envab bad switch: rc $rc: $out"
fi
out=$("$ENVAB" "$M" "" 2>&1 >/dev/null); rc=$?
if [[ $rc -eq 2 ]] && grep -q '^usage: envab MODEL' <<<"$out"; then
  pass "envab: one setting only is a usage error"
else
  fail "envab usage: rc $rc: $out"
fi
out=$("$ENVAB" /nonexistent.keras "" "" 2>&1 >/dev/null); rc=$?
if [[ $rc -eq 1 && $(wc -l <<<"$out") -eq 1 ]] && grep -q 'nonexistent.keras' <<<"$out"; then
  pass "envab: a missing model is a one-line error naming it"
else
  fail "envab missing model: rc $rc: $out"
fi
finish
