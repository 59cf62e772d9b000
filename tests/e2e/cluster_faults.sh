#!/usr/bin/env bash
# Faults on real links between separate hosts: two network namespaces
# joined by a veth pair, a worker in each, CURVE on. Every run either
# completes bit-identical to the local run or fails with one clean error
# naming the task, well before its deadline; never a wrong answer, never a
# hang:
#   - 5% packet loss in both directions (nftables `numgen random` drops),
#   - a worker killed -9 in the middle of a run (the link capped with tbf
#     so the run lasts seconds), then restarted and serving again,
#   - the link taken down in the middle of a run (ZMTP heartbeats notice),
#     then brought up again,
#   - 40 ms of latency each way (a delaying TCP proxy: this kernel has no
#     netem), micro-batches still pipelined.
# Needs root, network namespaces and nft; says "skip" and passes nothing
# where they are missing.
source "$(dirname "$0")/lib.bash"
KERASC=$(cd "$(dirname "$KERASC")" && pwd)/$(basename "$KERASC")
HERE=$(cd "$(dirname "$0")" && pwd)
T=${KC_TEST_TMP:-/tmp}/cluster_faults
rm -rf "$T"; mkdir -p "$T/models"
cp "$HERE/../apps/resnet50/model.keras" "$T/models/resnet50.keras"
M="$T/models/resnet50.keras"
NS=kf$$
A="${NS}a"; B="${NS}b"
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; done; wait 2>/dev/null
  ip netns del "$A" 2>/dev/null; ip netns del "$B" 2>/dev/null
}
trap cleanup EXIT

if ! command -v nft >/dev/null || ! ip netns add "$A" 2>/dev/null || ! ip netns add "$B" 2>/dev/null ||
   ! ip link add "${NS}x" type veth peer name "${NS}y" 2>/dev/null; then
  echo "skip: needs root, network namespaces and nft (scripts/deps.sh installs nftables)"
  finish
fi
ip link set "${NS}x" netns "$A"; ip link set "${NS}y" netns "$B"
ip -n "$A" addr add 10.214.0.1/24 dev "${NS}x"; ip -n "$A" link set "${NS}x" up
ip -n "$B" addr add 10.214.0.2/24 dev "${NS}y"; ip -n "$B" link set "${NS}y" up
ip -n "$A" link set lo up; ip -n "$B" link set lo up

# 64 different samples (the test image, shifted a little per row).
/usr/bin/python3 -c "
import numpy as np, sys
x = np.load('$HERE/../apps/resnet50/input_0.npy')
b = np.concatenate([x + np.float32(i) / 64 for i in range(64)]).astype(np.float32)
np.save('$T/x64.npy', b)" || fail "making the batch input"
X="$T/x64.npy"
"$KERASC" run "$M" --input "$X" --output "$T/local.npy" --microbatch 4 || fail "local run"

( cd "$T" && "$KERASC" keygen worker >/dev/null && "$KERASC" keygen client >/dev/null ) || fail "keygen"
cat "$T/worker.pub" "$T/client.pub" > "$T/authorized"
SEC=(--key "$T/worker.key" --authorized-keys "$T/authorized" --model-dir "$T/models")
CL=(--key "$T/client.key" --worker-key "$T/worker.pub")
P=$(( 30000 + ($$ % 500) * 4 ))
NC="worker=10.214.0.1:$P,10.214.0.2:$((P + 1))"
serve_b() { ip netns exec "$B" "$KERASC" serve --cluster "$NC" --job worker --task 1 "${SEC[@]}" 2>>"$T/b.log" & WB=$!; PIDS+=($WB); }
ip netns exec "$A" "$KERASC" serve --cluster "$NC" --job worker --task 0 "${SEC[@]}" 2>>"$T/a.log" & PIDS+=($!)
serve_b
sleep 0.7
# split NAME [cluster] [extra args]: the 64 samples in micro-batches of 4
split() {
  local name=$1 cluster=${2:-$NC}; shift 2
  ip netns exec "$A" "$KERASC" run "$M" --input "$X" --output "$T/$name.npy" --cluster "$cluster" \
    "${CL[@]}" --split conv4_block6_out --place 0=/job:worker/task:0 --place 1=/job:worker/task:1 \
    --microbatch 4 "$@"
}
seconds() { date +%s.%N; }
# mid_run: wait until worker B has answered a micro-batch of the run just
# started (so the fault hits the pipelining, not the stage loads, however
# slow this build is), at most 60 s.
mid_run() {
  local before=$1
  for _ in $(seq 600); do
    (( $(grep -c "stage 1: answered" "$T/b.log") > before )) && return 0
    sleep 0.1
  done
}
elapsed() { awk -v a="$1" -v b="$(seconds)" 'BEGIN { printf "%.1f", b - a }'; }

split clean "$NC" 2>"$T/err" && cmp -s "$T/local.npy" "$T/clean.npy" &&
  pass "baseline: 16 micro-batches across the namespaces, bit-identical" || fail "baseline: $(cat "$T/err")"

# --- 5% loss, both directions
for ns in "$A" "$B"; do
  ip netns exec "$ns" nft add table inet kcloss
  ip netns exec "$ns" nft add chain inet kcloss in '{ type filter hook input priority 0; }'
  ip netns exec "$ns" nft add rule inet kcloss in iifname "${NS}x" numgen random mod 100 '<' 5 drop
  ip netns exec "$ns" nft add rule inet kcloss in iifname "${NS}y" numgen random mod 100 '<' 5 drop
done
t0=$(seconds)
split loss "$NC" --deadline-ms 20000 2>"$T/err" && cmp -s "$T/local.npy" "$T/loss.npy" &&
  pass "5% packet loss both ways: completes bit-identical ($(elapsed "$t0") s)" ||
  fail "loss: $(cat "$T/err")"
for ns in "$A" "$B"; do ip netns exec "$ns" nft delete table inet kcloss; done

# --- a slow link (1 Mbit/s), so that a run lasts seconds
ip netns exec "$A" tc qdisc add dev "${NS}x" root tbf rate 1mbit burst 16kb latency 2s
ip netns exec "$B" tc qdisc add dev "${NS}y" root tbf rate 1mbit burst 16kb latency 2s

# --- kill -9 mid-run
t0=$(seconds)
n=$(grep -c "stage 1: answered" "$T/b.log")
split killed "$NC" --deadline-ms 30000 2>"$T/err" & RUN=$!
mid_run "$n"; t0=$(seconds); kill -9 "$WB"; wait "$WB" 2>/dev/null
wait "$RUN"; rc=$?; took=$(elapsed "$t0")
[[ $rc -eq 1 && ! -e "$T/killed.npy" && $(grep -c . "$T/err") -eq 1 ]] &&
  grep -q "/job:worker/task:1" "$T/err" && awk -v t="$took" 'BEGIN { exit !(t < 12) }' &&
  pass "worker killed mid-run: one clean error naming it ${took} s after the kill (deadline 30 s): $(cat "$T/err")" ||
  fail "killed mid-run: rc=$rc took=${took}s $(cat "$T/err")"
serve_b; sleep 0.7
split back "$NC" 2>"$T/err" && cmp -s "$T/local.npy" "$T/back.npy" &&
  pass "the restarted worker serves again: bit-identical" || fail "restart: $(cat "$T/err")"

# --- link down mid-run
t0=$(seconds)
n=$(grep -c "stage 1: answered" "$T/b.log")
split down "$NC" --deadline-ms 30000 2>"$T/err" & RUN=$!
mid_run "$n"; t0=$(seconds); ip -n "$B" link set "${NS}y" down
wait "$RUN"; rc=$?; took=$(elapsed "$t0")
[[ $rc -eq 1 && ! -e "$T/down.npy" && $(grep -c . "$T/err") -eq 1 ]] &&
  grep -q "/job:worker/task:1" "$T/err" && awk -v t="$took" 'BEGIN { exit !(t < 20) }' &&
  pass "link down mid-run: one clean error naming the task ${took} s after the link went down (deadline 30 s): $(cat "$T/err")" ||
  fail "link down: rc=$rc took=${took}s $(cat "$T/err")"
ip -n "$B" link set "${NS}y" up
ip netns exec "$A" tc qdisc del dev "${NS}x" root; ip netns exec "$B" tc qdisc del dev "${NS}y" root
# Wait (up to 10 s) until task 1's port takes a TCP connection from A again:
# the link and its neighbour entry come back asynchronously, and this
# check is about the workers, not the kernel's link recovery. A CI run
# under ASan on a loaded host once saw task 1 unreachable for 20 s here;
# the message now says which side it was.
tcp_up=no
for _ in $(seq 50); do
  ip netns exec "$A" timeout 1 bash -c "exec 3<>/dev/tcp/10.214.0.2/$((P + 1))" 2>/dev/null && { tcp_up=yes; break; }
  sleep 0.2
done
split up "$NC" --deadline-ms 10000 2>"$T/err" && cmp -s "$T/local.npy" "$T/up.npy" &&
  pass "link up again: the same workers serve, bit-identical" ||
  fail "link up (TCP from A to task 1's port: $tcp_up): $(cat "$T/err")"

# --- 40 ms each way between the stages and from the client
ip netns exec "$A" /usr/bin/python3 "$HERE/../../tools/net/delay_proxy.py" 10.214.0.1 $((P + 2)) 10.214.0.2 $((P + 1)) 40 >"$T/proxy.log" 2>&1 & PIDS+=($!)
ip netns exec "$A" /usr/bin/python3 "$HERE/../../tools/net/delay_proxy.py" 10.214.0.1 $((P + 3)) 10.214.0.1 $P 40 >>"$T/proxy.log" 2>&1 & PIDS+=($!)
sleep 0.7
LC="worker=10.214.0.1:$((P + 3)),10.214.0.1:$((P + 2))"
t0=$(seconds)
split delayed "$LC" --deadline-ms 10000 2>"$T/err" && cmp -s "$T/local.npy" "$T/delayed.npy" &&
  pass "40 ms latency each way on every hop: bit-identical ($(elapsed "$t0") s for 16 micro-batches)" ||
  fail "latency: $(cat "$T/err") $(cat "$T/proxy.log")"
finish
