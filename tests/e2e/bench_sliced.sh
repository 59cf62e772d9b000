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
          "iters=" + str(out.get("iters") if out else None),
          *(["quiet=" + str(len(out["quiet_ms"]))] if out else []))
PY
}
out=$(run kerasc 60)
if grep -qx 'a err=None slices=4 iters=12 quiet=5' <<<"$out" &&
   grep -qx 'b err=None slices=4 iters=12 quiet=5' <<<"$out" &&
   [[ $(grep -c '^slice_median_ms:' "$T/a.txt") -eq 4 ]] && grep -q 'side by side with b, 4 slices' "$T/a.txt" &&
   grep -Eq '^# waited for it to go quiet \(ms\): [0-9]+( [0-9]+){4}$' "$T/a.txt"; then
  pass "two runners, four slices each, turn by turn, each after the other went quiet; raw outputs kept"
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
# wait_quiet: the harness's wait for a runner's spinning threads to stop
# before the other's slice (bounds loose and windows of 20 ms, not the
# bench's 5: under ctest -j a spinner can lose its CPU for a few ms).
quiet() {
  /usr/bin/python3 - "$HERE/../../tools/bench" <<'PY' 2>&1
import subprocess, sys, time
sys.path.insert(0, sys.argv[1])
sys.dont_write_bytecode = True
import bench as B
B.QUIET_MAX_S = 1.5
B.QUIET_WINDOW_S = 0.02
spin = "import time\nt = time.time()\nwhile time.time() - t < {}: pass\ntime.sleep(30)"
for name, secs in (("idle", 0), ("spins", 0.4), ("forever", 60)):
    p = subprocess.Popen([sys.executable, "-c", spin.format(secs)])
    time.sleep(0.05)  # started, spinning
    print(name, round(B.wait_quiet(p.pid), 2))
    p.kill()
    p.wait()
print("gone", round(B.wait_quiet(p.pid), 2), B.cpu_ns(p.pid))
PY
}
out=$(quiet)
if awk '$1 == "idle" && $2 < 0.3 {ok++} $1 == "spins" && $2 >= 0.1 && $2 < 1.4 {ok++}
        $1 == "forever" && $2 >= 1.4 && $2 < 3 {ok++} $1 == "gone" && $2 < 0.1 && $3 == "None" {ok++}
        END {exit ok != 4}' <<<"$out"; then
  pass "wait_quiet: an idle process at once, a spinning one once it stops, one that never does after QUIET_MAX_S, a gone one at once"
else
  fail "wait_quiet: $out"
fi
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
