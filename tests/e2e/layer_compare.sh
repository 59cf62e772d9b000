#!/usr/bin/env bash
# tools/bench/layer_compare.py: kerasc's profile and ONNX Runtime's, grouped
# by kind and output height, from saved outputs (no ONNX Runtime needed:
# its profile here is written by hand, in the format peer_ort.js saves).
source "$(dirname "$0")/lib.bash"
HERE=$(cd "$(dirname "$0")" && pwd)
TOOL="$HERE/../../tools/bench/layer_compare.py"
M="$HERE/../zoo/conv2d_s1_valid/model.keras"   # conv2d -> (6, 6, 4), conv2d_1 -> (5, 4, 5)
T=$(mktemp -d "${KC_TEST_TMP:-/tmp}/layer_compare.XXXXXX")
trap 'rm -rf "$T"' EXIT
# The tool on saved outputs: SUMMARY STATS PROFILE [more arguments].
saved() {
  /usr/bin/python3 "$TOOL" --kerasc-summary "$1" --kerasc-stats "$2" --ort-profile "$3" "${@:4}"
}

"$KERASC" summary "$M" >"$T/summary.txt" 2>&1 || fail "kerasc summary failed"
# ORT: a conv node at height 6 (3 warm-ups of 9 ms, then 0.2, 0.3, 0.25 ms),
# a Gemm (warm-ups, then 0.1 ms), a 1-pixel reorder, a session event.
cat >"$T/ort.json" <<'JSON'
[{"cat": "Session", "name": "model_run", "dur": 99999},
 {"cat": "Node", "name": "c_kernel_time", "dur": 9000, "args": {"op_name": "Conv", "output_type_shape": [{"float": [1, 4, 6, 6]}], "input_type_shape": [{"float": [1, 3, 8, 8]}, {"float": [4, 3, 3, 3]}, {"float": [4]}]}},
 {"cat": "Node", "name": "c_kernel_time", "dur": 9000, "args": {"op_name": "Conv", "output_type_shape": [{"float": [1, 4, 6, 6]}]}},
 {"cat": "Node", "name": "c_kernel_time", "dur": 9000, "args": {"op_name": "Conv", "output_type_shape": [{"float": [1, 4, 6, 6]}]}},
 {"cat": "Node", "name": "c_kernel_time", "dur": 200, "args": {"op_name": "Conv", "output_type_shape": [{"float": [1, 4, 6, 6]}]}},
 {"cat": "Node", "name": "c_kernel_time", "dur": 300, "args": {"op_name": "Conv", "output_type_shape": [{"float": [1, 4, 6, 6]}]}},
 {"cat": "Node", "name": "c_kernel_time", "dur": 250, "args": {"op_name": "Conv", "output_type_shape": [{"float": [1, 4, 6, 6]}]}},
 {"cat": "Node", "name": "g_kernel_time", "dur": 5000, "args": {"op_name": "Gemm", "output_type_shape": [{"float": [1, 5]}]}},
 {"cat": "Node", "name": "g_kernel_time", "dur": 5000, "args": {"op_name": "Gemm", "output_type_shape": [{"float": [1, 5]}]}},
 {"cat": "Node", "name": "g_kernel_time", "dur": 5000, "args": {"op_name": "Gemm", "output_type_shape": [{"float": [1, 5]}]}},
 {"cat": "Node", "name": "g_kernel_time", "dur": 100, "args": {"op_name": "Gemm", "output_type_shape": [{"float": [1, 5]}]}},
 {"cat": "Node", "name": "r_kernel_time", "dur": 40, "args": {"op_name": "ReorderOutput", "output_type_shape": [{"float": [1, 5, 1, 1]}]}}]
JSON
cat >"$T/stats.txt" <<'TXT'
median_ms_per_image: 0.8
profile: mean ms per run over 20 run(s) on the host CPU (the first 2 runs on a plan are warm-ups, not counted)
  layer                                class                              ms      %
  conv2d                               Conv2D                         0.5000  66.67
  conv2d_1                             Conv2D                         0.2500  33.33
by class:
  Conv2D                        2 layer(s)     0.7500 ms 100.00%
TXT
out=$(saved "$T/summary.txt" "$T/stats.txt" "$T/ort.json" 2>&1)
rc=$?
if [[ $rc -eq 0 ]] && grep -qF '| conv | 6 | 0.500 | 0.250 | 2.00 | +0.250 |' <<<"$out" &&
   grep -qF '| conv | 5 | 0.250 | 0.000 | - | +0.250 |' <<<"$out" &&
   grep -qF '| dense | - | 0.000 | 0.100 | 0.00 | -0.100 |' <<<"$out" &&
   grep -qF '| other | - | 0.000 | 0.040 | 0.00 | -0.040 |' <<<"$out" &&
   grep -qF '| **all** | | 0.750 | 0.390 | 1.92 | +0.360 |' <<<"$out"; then
  pass "groups by kind and output height; ORT node medians after the warm-ups"
else
  fail "layer_compare table (rc $rc): $out"
fi

# --by-kernel: the convolutions by their taps, ONNX Runtime's from the
# weights' shape (4, 3, 3, 3), kerasc's from the summary's parameter counts
# (conv2d: 112 = 9 x 3 x 4 + 4; conv2d_1: 125 = 6 x 4 x 5 + 5, a 3x2 kernel).
out=$(saved "$T/summary.txt" "$T/stats.txt" "$T/ort.json" --by-kernel 2>&1)
rc=$?
if [[ $rc -eq 0 ]] && grep -qF '| conv 3x3 | 6 | 0.500 | 0.250 | 2.00 | +0.250 |' <<<"$out" &&
   grep -qF '| conv 6 taps | 5 | 0.250 | 0.000 | - | +0.250 |' <<<"$out" &&
   grep -qF '| dense | - | 0.000 | 0.100 | 0.00 | -0.100 |' <<<"$out" &&
   grep -qF '| **all** | | 0.750 | 0.390 | 1.92 | +0.360 |' <<<"$out" && ! grep -qF '| conv | ' <<<"$out"; then
  pass "--by-kernel: convolutions grouped by their taps on both sides"
else
  fail "layer_compare --by-kernel (rc $rc): $out"
fi
# A functional model (input channels from "Connected to": 76 = 9 x 2 x 4 + 4)
# and a depthwise one (a count that divides with a bias and without: 3x3
# taken, 160 = 9 x 16 + 16), and a depthwise node in ONNX Runtime's profile
# (weights (16, 1, 3, 3) on 16 input channels).
"$KERASC" summary "$HERE/../zoo/multi_output/model.keras" >"$T/fsum.txt" 2>&1 &&
  "$KERASC" summary "$HERE/../zoo/mobilenet_v1_chain/model.keras" >"$T/dsum.txt" 2>&1 &&
  "$KERASC" summary "$HERE/../zoo/depthwise_conv2d_dm2/model.keras" >"$T/nsum.txt" 2>&1 ||
  fail "kerasc summary (functional, depthwise) failed"
printf '%s\n' 'profile: mean ms per run' \
  '  conv2d                               Conv2D                         0.3000  75.00' \
  '  class_output                         Dense                          0.1000  25.00' \
  'by class:' >"$T/fstats.txt"
printf '%s\n' 'profile: mean ms per run' \
  '  conv2d                               Conv2D                         0.2000  50.00' \
  '  depthwise_conv2d                     DepthwiseConv2D                0.2000  50.00' \
  'by class:' >"$T/dstats.txt"
printf '%s\n' 'profile: mean ms per run' \
  '  depthwise_conv2d_1                   DepthwiseConv2D                0.1000 100.00' \
  'by class:' >"$T/nstats.txt"
cat >"$T/dw.json" <<'JSON'
[{"cat": "Node", "name": "d_kernel_time", "dur": 120, "args": {"op_name": "Conv", "output_type_shape": [{"float": [1, 16, 12, 12]}], "input_type_shape": [{"float": [1, 16, 12, 12]}, {"float": [16, 1, 3, 3]}]}}]
JSON
fout=$(saved "$T/fsum.txt" "$T/fstats.txt" "$T/dw.json" --by-kernel 2>&1)
dout=$(saved "$T/dsum.txt" "$T/dstats.txt" "$T/dw.json" --by-kernel 2>&1)
# depthwise_conv2d_1 has no bias: 54 = 9 x 6 (or 8 x 6 + 6)
nout=$(saved "$T/nsum.txt" "$T/nstats.txt" "$T/dw.json" --by-kernel 2>&1)
if grep -qF '| conv 3x3 | 4 | 0.300 | 0.000 |' <<<"$fout" &&
   grep -qF '| dwconv 3x3 | 3 | 0.100 | 0.000 |' <<<"$nout" &&
   grep -qF '| conv 1x1 | 12 | 0.200 | 0.000 |' <<<"$dout" &&
   grep -qF '| dwconv 3x3 | 12 | 0.200 | 0.120 | 1.67 | +0.080 |' <<<"$dout"; then
  pass "--by-kernel: functional inputs, depthwise layers and nodes"
else
  fail "layer_compare --by-kernel on functional/depthwise: $fout / $dout / $nout"
fi
err=$(saved "$T/summary.txt" "$T/stats.txt" "$T/ort.json" --rounds 2 2>&1 >/dev/null); rc=$?
[[ $rc -eq 2 && "$err" == *"--rounds runs the profiles"* ]] &&
  pass "--rounds with saved outputs is a usage error" || fail "--rounds saved: rc $rc: $err"

# A real `kerasc bench --stats` output parses.
"$KERASC" bench "$M" --iters 3 --warmup 1 --stats >"$T/real.txt" 2>&1
out=$(saved "$T/summary.txt" "$T/real.txt" "$T/ort.json" 2>&1)
if [[ $? -eq 0 ]] && grep -qE '^\| conv \| 6 \| [0-9.]+ \| 0\.250 \|' <<<"$out" &&
   grep -qE '^\| conv \| 5 \| [0-9.]+ \| 0\.000 \|' <<<"$out"; then
  pass "reads kerasc bench --stats as printed"
else
  fail "layer_compare on real stats: $out"
fi

# Bad input: one line on stderr, nonzero exit.
"$KERASC" bench "$M" --iters 3 --warmup 1 >"$T/nostats.txt" 2>&1
err=$(saved "$T/summary.txt" "$T/nostats.txt" "$T/ort.json" 2>&1 >/dev/null); rc=$?
[[ $rc -eq 1 && "$err" == "layer_compare: error: no per-layer profile"* && $(wc -l <<<"$err") -eq 1 ]] &&
  pass "stats without --stats: one-line error, exit 1" || fail "no-stats: rc $rc: $err"
echo '[1, "x", {"cat": "Node", "name": "a_kernel_time", "dur": "soon"}]' >"$T/bad.json"
err=$(saved "$T/summary.txt" "$T/stats.txt" "$T/bad.json" 2>&1 >/dev/null); rc=$?
[[ $rc -eq 1 && "$err" == "layer_compare: error: "* && $(wc -l <<<"$err") -eq 1 ]] &&
  pass "a profile that is not a trace: one-line error, exit 1" || fail "bad profile: rc $rc: $err"
echo '{"not": "a trace"}' >"$T/obj.json"
err=$(saved "$T/summary.txt" "$T/stats.txt" "$T/obj.json" 2>&1 >/dev/null); rc=$?
[[ $rc -eq 1 && "$err" == "layer_compare: error: the ONNX Runtime profile is not a list"* ]] &&
  pass "a JSON object for a profile: one-line error, exit 1" || fail "object profile: rc $rc: $err"
/usr/bin/python3 "$TOOL" --kerasc-stats "$T/stats.txt" >/dev/null 2>&1; rc=$?
[[ $rc -eq 2 ]] && pass "half the saved inputs is a usage error" || fail "partial inputs: rc $rc"
finish
