#!/usr/bin/env bash
# tools/bench/bench.py's side-by-side runs (run_sliced): two runners load
# and warm up one after the other, then take turns a slice at a time; a
# runner that dies or goes silent fails alone (its partner is reported as
# stopped beside it, to be rerun alone), with its own error. kerasc plays
# both runners here (no ONNX Runtime needed); speed is never asserted.
source "$(dirname "$0")/lib.bash"
HERE=$(cd "$(dirname "$0")" && pwd)
M="$HERE/../zoo/dense_relu/model.keras"
T=$(mktemp -d "${KC_TEST_TMP:-/tmp}/bench_sliced.XXXXXX")
trap 'rm -rf "$T"' EXIT
run() {
  KERASC="$KERASC" M="$M" T="$T" /usr/bin/python3 - "$HERE/../../tools/bench" "$@" <<'PY' 2>&1
import os, sys
sys.path.insert(0, sys.argv[1])
sys.dont_write_bytecode = True
import bench as B
k = [os.environ["KERASC"], "bench", os.environ["M"], "--iters", "3", "--warmup", "1", "--slices", "4"]
other = {"kerasc": k,
         "dies": ["sh", "-c", "echo ready; read x; echo 'peer: error: broke'; exit 3"],
         "silent": ["sh", "-c", "echo ready; sleep 30"],
         "never": ["sh", "-c", "echo 'peer: error: no model' >&2; exit 1"]}[sys.argv[2]]
T = os.environ["T"]
raw = {"a": f"{T}/a.txt", "b": f"{T}/b.txt"}
got = B.run_sliced({"a": k, "b": other}, dict(os.environ), int(sys.argv[3]), raw, 4)
for r in ("a", "b"):
    out, err = got[r]
    print(r, "err=" + str(err), "slices=" + str(len(out["slices_ms"]) if out else None),
          "iters=" + str(out.get("iters") if out else None))
PY
}
out=$(run kerasc 60)
if grep -qx 'a err=None slices=4 iters=12' <<<"$out" && grep -qx 'b err=None slices=4 iters=12' <<<"$out" &&
   [[ $(grep -c '^slice_median_ms:' "$T/a.txt") -eq 4 ]] && grep -q 'side by side with b, 4 slices' "$T/a.txt"; then
  pass "two runners, four slices each, turn by turn; raw outputs kept"
else
  fail "side by side: $out"
fi
out=$(run dies 60)
grep -qx 'a err=stopped: b failed beside it slices=None iters=None' <<<"$out" &&
  grep -qx 'b err=exit 3 slices=None iters=None' <<<"$out" &&
  pass "a runner dying mid-run fails alone; its partner is stopped, not failed" ||
  fail "dying runner: $out"
out=$(run silent 3)
grep -qx 'b err=timed out after 3s slices=None iters=None' <<<"$out" &&
  grep -qx 'a err=stopped: b failed beside it slices=None iters=None' <<<"$out" &&
  pass "a silent runner times out" || fail "silent runner: $out"
out=$(run never 60)
grep -qx 'b err=peer: error: no model slices=None iters=None' <<<"$out" &&
  pass "a runner that never starts: its own last stderr line" || fail "never ready: $out"
# The <= 0.8 verdict (bench.py's summarize + target_met), on made-up
# rounds: ORT in its slow mode in two rounds of three must not make a win.
verdicts() {
  /usr/bin/python3 - "$HERE/../../tools/bench" <<'PY' 2>&1
import sys
sys.path.insert(0, sys.argv[1])
sys.dont_write_bytecode = True
import bench as B
row = {"key": "m", "title": "M"}
def outs(ms):
    return [{"median_ms_per_image": x, "round": k} for k, x in enumerate(ms)]
for name, k, o, probes in (("steady", [3.0, 3.0, 3.0], [4.0, 4.1, 3.9], [4.0]),
                           ("ort slow in two rounds", [3.0, 3.4, 3.4], [3.8, 6.4, 6.5], []),
                           ("ort slow in every round", [3.1, 3.1, 3.1], [4.9, 4.8, 4.9], [4.8, 3.72]),
                           ("one noisy round", [3.0, 3.5, 3.0], [4.0, 4.0, 4.0], []),
                           ("median against slow rounds", [3.5, 3.5, 3.5], [3.9, 6.4, 6.4], []),
                           ("behind", [3.6, 3.6, 3.6], [4.0, 4.0, 4.0], [])):
    got = {"kerasc": outs(k), "ort": outs(o), "ort_probe": outs(probes)}
    t = B.summarize([row], [1], ["kerasc", "ort"], {("m", 1): got}, {}, {})
    e = t[0]
    print(name + ": " + B.target_met(e["kerasc_over_ort"], e["kerasc_over_ort_rounds"],
                                     e.get("kerasc_over_ort_best")))
PY
}
out=$(verdicts)
if grep -qx 'steady: yes' <<<"$out" &&
   grep -qx "ort slow in two rounds: no (ORT's fastest run: 0.89)" <<<"$out" &&
   grep -qx "ort slow in every round: no (ORT's fastest run: 0.83)" <<<"$out" &&
   grep -qx 'one noisy round: median only' <<<"$out" && grep -qx 'behind: no' <<<"$out" &&
   grep -qx "median against slow rounds: no (ORT's fastest run: 0.90)" <<<"$out"; then
  pass "the 0.8 verdict: every round, and kerasc against ORT's fastest run (rounds and probes)"
else
  fail "verdicts: $out"
fi
finish
