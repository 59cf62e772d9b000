#!/usr/bin/env bash
# A model split across `kerasc serve` workers on loopback (and, where this
# machine allows network namespaces, across two namespaces joined by a
# veth pair): CURVE on, outputs bit-identical to the local run, micro-batch
# pipelining, an unauthorized client refused, a killed worker's replica
# taking over, and a clean error naming the task when none is left; stages
# on the client itself; the model streamed to a worker without a copy.
source "$(dirname "$0")/lib.bash"
KERASC=$(cd "$(dirname "$KERASC")" && pwd)/$(basename "$KERASC")
T=${KC_TEST_TMP:-/tmp}/cluster_e2e
rm -rf "$T"; mkdir -p "$T/models"
cp "$(dirname "$0")/../apps/resnet50/model.keras" "$T/models/resnet50.keras"
M="$T/models/resnet50.keras"
X="$(dirname "$0")/../apps/resnet50/input_0.npy"
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; done; wait 2>/dev/null; }
trap cleanup EXIT
BASE=$(( 24000 + ($$ % 2000) * 8 ))

( cd "$T" && "$KERASC" keygen worker >/dev/null && "$KERASC" keygen client >/dev/null &&
  "$KERASC" keygen intruder >/dev/null ) || fail "keygen"
cat "$T/worker.pub" "$T/client.pub" > "$T/authorized"
SEC=(--key "$T/worker.key" --authorized-keys "$T/authorized")
CL=(--key "$T/client.key" --worker-key "$T/worker.pub")

C="worker=127.0.0.1:$BASE,127.0.0.1:$((BASE + 1))|127.0.0.1:$((BASE + 2))"
# The workers' last lines, for a failure message: each carries its time
# and replica, so a worker that stalled shows as a gap.
# With gdb at hand (scripts/deps.sh installs it), the stacks of the three
# first workers too: what a worker that stopped answering was doing.
logs() {
  echo; echo "last lines of the workers' log:"; tail -12 "$T/serve.log"
  command -v gdb >/dev/null || return 0
  local names=("task 0" "task 1 replica 0" "task 1 replica 1") i
  for i in 0 1 2; do
    echo "stacks of ${names[$i]} (pid ${PIDS[$i]}):"
    timeout 60 gdb -q -batch -p "${PIDS[$i]}" -ex "thread apply all bt 16" 2>/dev/null |
      grep -E '^(Thread|#)' | head -60
  done
}
# No worker was stopped yet: a fail-over here means one stalled.
warned() { grep -h "warning" "$T/err" | sed 's/^/note: /'; :; }
serve() { "$KERASC" serve --cluster "$C" --job worker --model-dir "$T/models" "${SEC[@]}" --deadline-ms 3000 "$@" 2>>"$T/serve.log" & PIDS+=($!); }
serve --task 0
serve --task 1 --replica 0; R0=$!
serve --task 1 --replica 1; R1=$!
sleep 0.5

"$KERASC" run "$M" --input "$X" --output "$T/local.npy" || fail "local run"
split() { "$KERASC" run "$M" --input "$X" --output "$T/$1.npy" --cluster "$C" "${CL[@]}" \
          --split conv4_block6_out --place 0=/job:worker/task:0/GPU:0 \
          --place 1=/job:worker/task:1/GPU:0 --deadline-ms 3000 "${@:2}"; }

split split 2>"$T/err" && cmp -s "$T/local.npy" "$T/split.npy" &&
  pass "ResNet50 cut at conv4_block6_out over two CURVE workers: bit-identical" ||
  fail "split run: $(cat "$T/err")"
warned

# kernels may round differently at another batch size: compare with the
# local run in the same micro-batches
"$KERASC" run "$M" --input "$X" --output "$T/local_mb.npy" --microbatch 1 || fail "local micro-batched run"
split micro --microbatch 1 2>"$T/err" && cmp -s "$T/local_mb.npy" "$T/micro.npy" &&
  pass "micro-batches pipelined through the stages: bit-identical to local micro-batches" ||
  fail "micro-batched run: $(cat "$T/err")"
warned

"$KERASC" run "$M" --input "$X" --output "$T/three.npy" --cluster "$C" "${CL[@]}" \
  --split conv2_block3_out,conv4_block1_out --place 0=/job:worker/task:0 \
  --place 1=/job:worker/task:1 --place 2=/job:worker/task:0 2>"$T/err" &&
  cmp -s "$T/local.npy" "$T/three.npy" && pass "three stages (a task serving two): bit-identical" ||
  fail "three stages: $(cat "$T/err")"
warned

"$KERASC" run "$M" --input "$X" --output "$T/planned.npy" --cluster "$C" "${CL[@]}" --stages 3 \
  --place 0=/job:worker/task:0 --place 1=/job:worker/task:1 --place 2=/job:worker/task:0 2>"$T/err" &&
  cmp -s "$T/local.npy" "$T/planned.npy" && pass "--stages 3 plans the cuts against the workers and runs: bit-identical" ||
  fail "--stages 3: $(cat "$T/err")"
warned

out=$("$KERASC" plan "$M" --stages 3 --cluster "$C" "${CL[@]}" --place 0=/job:worker/task:0 \
      --place 1=/job:worker/task:1 --place 2=/job:worker/task:0 2>&1)
[[ $? -eq 0 ]] && grep -q '^cuts: ' <<<"$out" && grep -q 'predicted slowest stage' <<<"$out" &&
  pass "kerasc plan prints cuts, bytes and predicted stage times" || fail "plan: $out $(logs)"

out=$("$KERASC" status --cluster "$C" "${CL[@]}" 2>&1)
[[ $(grep -c ' up {' <<<"$out") -eq 3 ]] && grep -q '"served":' <<<"$out" &&
  pass "kerasc status lists every task and replica" || fail "status: $out $(logs)"

err=$("$KERASC" run "$M" --input "$X" --output "$T/intruder.npy" --cluster "$C" \
      --key "$T/intruder.key" --worker-key "$T/worker.pub" --split conv4_block6_out \
      --place 0=/job:worker/task:0 --place 1=/job:worker/task:1 --deadline-ms 1500 2>&1); rc=$?
[[ $rc -eq 1 && ! -e "$T/intruder.npy" ]] && grep -q "not accepting this client's key" <<<"$err" &&
  pass "a client whose key is not authorized is refused" || fail "intruder: rc=$rc $err"

err=$("$KERASC" run "$M" --input "$X" --output "$T/plain.npy" --cluster "worker=10.255.0.1:$BASE" \
      --insecure --split conv4_block6_out --place 0=/job:worker/task:0 --place 1=/job:worker/task:0 2>&1); rc=$?
[[ $rc -eq 1 ]] && grep -q "only allowed on loopback" <<<"$err" &&
  pass "plaintext to a remote address is refused" || fail "insecure remote: rc=$rc $err"

# Stages on the client itself: first, and between two workers.
split client_first --place 0=/CPU:0 2>"$T/err" && cmp -s "$T/local.npy" "$T/client_first.npy" &&
  pass "stage 0 on the client (/CPU:0), stage 1 on a worker: bit-identical" ||
  fail "client stage: $(cat "$T/err")"
"$KERASC" run "$M" --input "$X" --output "$T/middle.npy" --cluster "$C" "${CL[@]}" \
  --split conv2_block3_out,conv4_block1_out --place 0=/job:worker/task:0 --place 1=/CPU:0 \
  --place 2=/job:worker/task:1 --microbatch 1 2>"$T/err" && cmp -s "$T/local_mb.npy" "$T/middle.npy" &&
  pass "worker, then the client, then another worker, micro-batched: bit-identical" ||
  fail "client in the middle: $(cat "$T/err")"

# A worker without a copy of the model: the client streams it once.
S="worker=127.0.0.1:$((BASE + 3)),127.0.0.1:$((BASE + 4))"
mkdir -p "$T/empty"
"$KERASC" serve --cluster "$S" --job worker --task 0 --model-dir "$T/models" "${SEC[@]}" 2>>"$T/serve.log" & PIDS+=($!)
"$KERASC" serve --cluster "$S" --job worker --task 1 --cache-dir "$T/cache" "${SEC[@]}" 2>>"$T/stream.log" & PIDS+=($!); S1=$!
"$KERASC" serve --cluster "worker=127.0.0.1:$((BASE + 7))" --job worker --task 0 --model-dir "$T/empty" \
  --max-model-mb 0 "${SEC[@]}" 2>>"$T/serve.log" & PIDS+=($!); NOSTREAM=$!
sleep 0.5
streamed() { "$KERASC" run "$M" --input "$X" --output "$T/$1.npy" --cluster "$S" "${CL[@]}" \
             --split conv4_block6_out --deadline-ms 5000; }
streamed streamed 2>"$T/err" && cmp -s "$T/local.npy" "$T/streamed.npy" &&
  grep -q "no copy of the model: streaming it" "$T/err" && grep -q "verified" "$T/stream.log" &&
  pass "a worker without the file gets it streamed, SHA-256 verified: bit-identical" ||
  fail "streamed: $(cat "$T/err") $(tail -3 "$T/stream.log")"
streamed again 2>"$T/err" && cmp -s "$T/local.npy" "$T/again.npy" && ! grep -q streaming "$T/err" &&
  [[ $(stat -c %a "$T/cache") == 700 ]] &&
  "$KERASC" status --cluster "$S" "${CL[@]}" 2>&1 | grep -q '"received_models":1' &&
  pass "the second run reuses the received copy (nothing streamed again)" ||
  fail "streamed again: $(cat "$T/err")"
# A worker serving two of three stages, without the file: streamed once.
kill -9 "$S1"; wait "$S1" 2>/dev/null
"$KERASC" serve --cluster "$S" --job worker --task 1 --cache-dir "$T/cache2" "${SEC[@]}" 2>>"$T/stream2.log" & PIDS+=($!)
sleep 0.5
"$KERASC" run "$M" --input "$X" --output "$T/streamed3.npy" --cluster "$S" "${CL[@]}" \
  --split conv2_block3_out,conv4_block1_out --place 0=/job:worker/task:1 --place 1=/job:worker/task:0 \
  --place 2=/job:worker/task:1 2>"$T/err" && cmp -s "$T/local.npy" "$T/streamed3.npy" &&
  [[ $(grep -c "streaming it" "$T/err") -eq 1 && $(grep -c "received" "$T/stream2.log") -eq 1 ]] &&
  pass "a worker serving two stages without the file gets it streamed once: bit-identical" ||
  fail "streamed to a two-stage worker: $(cat "$T/err")"
err=$("$KERASC" run "$M" --input "$X" --output "$T/refused.npy" --cluster "worker=127.0.0.1:$((BASE + 7))" \
      "${CL[@]}" --split conv4_block6_out --place 0=/job:worker/task:0 --place 1=/CPU:0 2>&1); rc=$?
[[ $rc -eq 1 && ! -e "$T/refused.npy" ]] && grep -q "refuses streamed models" <<<"$err" &&
  pass "a worker with --max-model-mb 0 and no copy refuses: $err" || fail "no streaming: rc=$rc $err"

# Every client run is a new peer: with --max-clients 1, a worker serves run
# after run as long as each new peer comes once the last went quiet.
kill -9 "$NOSTREAM"; wait "$NOSTREAM" 2>/dev/null
"$KERASC" serve --cluster "worker=127.0.0.1:$((BASE + 7))" --job worker --task 0 --model-dir "$T/models" \
  --max-clients 1 "${SEC[@]}" 2>>"$T/serve.log" & PIDS+=($!); MC=$!
sleep 0.5
served=0
for i in 1 2 3; do
  "$KERASC" run "$M" --input "$X" --output "$T/mc$i.npy" --cluster "worker=127.0.0.1:$((BASE + 7))" \
    "${CL[@]}" --split conv4_block6_out --place 0=/job:worker/task:0 --place 1=/CPU:0 2>"$T/err" &&
    cmp -s "$T/local.npy" "$T/mc$i.npy" && served=$((served + 1))
  sleep 2.2
done
[[ $served -eq 3 ]] && pass "--max-clients 1: three clients one after another, all served" ||
  fail "--max-clients 1: $served of 3 runs served: $(cat "$T/err")"
kill -9 "$MC"; wait "$MC" 2>/dev/null

kill -9 "$R0"; sleep 0.2
split failover 2>"$T/err" && cmp -s "$T/local.npy" "$T/failover.npy" &&
  grep -q "failing over to its next replica" "$T/err" &&
  pass "worker killed: its replica takes over, same output" || fail "failover: $(cat "$T/err")"

# The planner asks each task's replicas in order: a dead replica 0 is
# passed over, as a split run does.
out=$("$KERASC" plan "$M" --stages 2 --cluster "$C" "${CL[@]}" --place 0=/job:worker/task:0 \
      --place 1=/job:worker/task:1 2>&1)
[[ $? -eq 0 ]] && grep -q '^cuts: ' <<<"$out" && grep -q "asking the task's next replica" <<<"$out" &&
  pass "kerasc plan with replica 0 dead asks replica 1" || fail "plan, replica 0 dead: $out"

kill -9 "$R1"; sleep 0.2
start=$(date +%s)
split dead 2>"$T/err"; rc=$?
took=$(( $(date +%s) - start ))
[[ $rc -eq 1 && ! -e "$T/dead.npy" && $took -le 20 ]] && grep -q "/job:worker/task:1" "$T/err" &&
  pass "every replica dead: a clean error naming the task in ${took}s" ||
  fail "dead task: rc=$rc took=${took}s $(cat "$T/err")"

serve --task 1 --replica 0; sleep 0.5
split rejoin 2>"$T/err" && cmp -s "$T/local.npy" "$T/rejoin.npy" &&
  pass "a restarted worker rejoins and serves" || fail "rejoin: $(cat "$T/err")"

# Separate hosts: two network namespaces joined by a veth pair (needs root
# and a kernel with netns; skipped, and said so, elsewhere).
NS=kc$$
if ip netns add "${NS}a" 2>/dev/null && ip netns add "${NS}b" 2>/dev/null &&
   ip link add "${NS}x" type veth peer name "${NS}y" 2>/dev/null; then
  ip link set "${NS}x" netns "${NS}a"; ip link set "${NS}y" netns "${NS}b"
  ip -n "${NS}a" addr add 10.213.0.1/24 dev "${NS}x"; ip -n "${NS}a" link set "${NS}x" up
  ip -n "${NS}b" addr add 10.213.0.2/24 dev "${NS}y"; ip -n "${NS}b" link set "${NS}y" up
  ip -n "${NS}a" link set lo up; ip -n "${NS}b" link set lo up
  NC="worker=10.213.0.1:$((BASE + 5)),10.213.0.2:$((BASE + 6))"
  ip netns exec "${NS}a" "$KERASC" serve --cluster "$NC" --job worker --task 0 --model-dir "$T/models" "${SEC[@]}" 2>>"$T/ns.log" & PIDS+=($!)
  ip netns exec "${NS}b" "$KERASC" serve --cluster "$NC" --job worker --task 1 --model-dir "$T/models" "${SEC[@]}" 2>>"$T/ns.log" & PIDS+=($!)
  sleep 0.7
  ip netns exec "${NS}a" "$KERASC" run "$M" --input "$X" --output "$T/ns.npy" --cluster "$NC" "${CL[@]}" \
    --split conv4_block6_out --place 0=/job:worker/task:0/GPU:0 --place 1=/job:worker/task:1/GPU:0 \
    --deadline-ms 5000 2>"$T/err" && cmp -s "$T/local.npy" "$T/ns.npy" &&
    pass "two workers in separate network namespaces over CURVE: bit-identical" ||
    fail "namespaces: $(cat "$T/err") $(tail -3 "$T/ns.log")"
  ip netns del "${NS}a"; ip netns del "${NS}b"
else
  ip netns del "${NS}a" 2>/dev/null
  echo "skip network namespaces: not permitted here"
fi
finish
