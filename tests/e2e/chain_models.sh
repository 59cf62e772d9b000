#!/usr/bin/env bash
# tools/bench/make_chain_models.py: the chains of bottleneck blocks it writes
# load and run, with the layers its flags name (Keras only: the ONNX export
# needs torch, which the bench installs, not the tests).
source "$(dirname "$0")/lib.bash"
HERE=$(cd "$(dirname "$0")" && pwd)
TOOL="$HERE/../../tools/bench/make_chain_models.py"
T=$(mktemp -d "${KC_TEST_TMP:-/tmp}/chain_models.XXXXXX")
trap 'rm -rf "$T"' EXIT

# layers NAME: the layer names of a chain's `kerasc summary`, one line
layers() { "$KERASC" summary "$T/$1.keras" 2>&1 | sed -n 's/^ \(b[0-9]*_[a-z0-9]*\) (.*/\1/p' | tr '\n' ' '; }

if /usr/bin/python3 "$TOOL" --name full --size 5 --channels 32 --mid 16 --blocks 2 --out "$T" --no-onnx \
     >"$T/full.log" 2>&1; then
  got=$(layers full)
  want="b0_1 b0_2 b0_3 b0_add b0_out b1_1 b1_2 b1_3 b1_add b1_out "
  [[ "$got" == "$want" ]] && pass "two blocks: $got" || fail "two blocks: got '$got', want '$want'"
  stats=$("$KERASC" bench "$T/full.keras" --batch 2 --iters 3 --warmup 1 --stats 2>&1)
  grep -Eq '^  b1_3 +Conv2D' <<<"$stats" && grep -q '^median_ms_per_image:' <<<"$stats" &&
    pass "it runs, its layers profiled by name" || fail "bench --stats: $stats"
else
  fail "make_chain_models failed: $(tail -3 "$T/full.log")"
fi

if /usr/bin/python3 "$TOOL" --name bare --size 4 --channels 16 --mid 8 --blocks 1 --no-3x3 --no-residual \
     --out "$T" --no-onnx >"$T/bare.log" 2>&1; then
  got=$(layers bare)
  [[ "$got" == "b0_1 b0_3 " ]] && pass "--no-3x3 --no-residual: $got" || fail "bare: got '$got'"
else
  fail "make_chain_models --no-3x3 --no-residual failed: $(tail -3 "$T/bare.log")"
fi

/usr/bin/python3 "$TOOL" --name zero --size 4 --channels 16 --mid 8 --blocks 0 --out "$T" --no-onnx \
  >"$T/zero.log" 2>&1; rc=$?
[[ $rc -ne 0 && ! -e "$T/zero.keras" ]] && grep -q "error: argument --blocks" "$T/zero.log" &&
  pass "--blocks 0: refused (exit $rc)" || fail "--blocks 0: rc $rc: $(cat "$T/zero.log")"
finish
