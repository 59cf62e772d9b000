#!/usr/bin/env bash
# make bench-cluster: pipeline throughput of a split run in a testbed of
# network namespaces (one per worker, joined by a bridge to the client in
# the root namespace) with every link capped by a tbf qdisc, for K = 2 and
# 3 stages and M micro-batches, against the bound: the slowest stage's
# compute, or the largest activation crossing a link over the link rate.
# Needs root (ip netns); only these namespaces and loopback are targets.
# Usage: tools/bench/cluster_bench.sh [BUILD_DIR] [RATE_MBIT] [BATCH] [MICROBATCH]
set -u
cd "$(dirname "$0")/../.."
BUILD=${1:-build}
RATE=${2:-100}          # Mbit/s per link
BATCH=${3:-512}
MB=${4:-8}
K=$(pwd)/$BUILD/kerasc
T=$(mktemp -d /tmp/kc-cluster-bench.XXXXXX)
NS=kcb$$
BR=${NS}br
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done; wait 2>/dev/null
  for i in 0 1 2; do ip netns del "${NS}$i" 2>/dev/null; done
  ip link del "$BR" 2>/dev/null; rm -rf "$T"
}
trap cleanup EXIT
if ! ip netns add "${NS}0" 2>/dev/null; then
  echo "bench-cluster: cannot create network namespaces here (needs root); skipped"; exit 0
fi
ip link add "$BR" type bridge && ip addr add 10.215.0.1/24 dev "$BR" && ip link set "$BR" up
for i in 0 1 2; do
  [[ $i -gt 0 ]] && ip netns add "${NS}$i"
  ip link add "${NS}h$i" type veth peer name "${NS}n$i"
  ip link set "${NS}h$i" master "$BR" up
  ip link set "${NS}n$i" netns "${NS}$i"
  ip -n "${NS}$i" addr add "10.215.0.$((i + 2))/24" dev "${NS}n$i"
  ip -n "${NS}$i" link set "${NS}n$i" up; ip -n "${NS}$i" link set lo up
  # cap both directions of the worker's link
  tc qdisc add dev "${NS}h$i" root tbf rate "${RATE}mbit" burst 64kb latency 100ms
  ip netns exec "${NS}$i" tc qdisc add dev "${NS}n$i" root tbf rate "${RATE}mbit" burst 64kb latency 100ms
done

mkdir -p "$T/models"
cp tests/apps/resnet50/model.keras "$T/models/resnet50.keras"
/usr/bin/python3 - "$T/x.npy" "$BATCH" <<'PY'
import sys, numpy as np
rng = np.random.default_rng(0)
np.save(sys.argv[1], rng.standard_normal((int(sys.argv[2]), 64, 64, 3)).astype(np.float32))
PY
(cd "$T" && "$K" keygen worker >/dev/null && "$K" keygen client >/dev/null)
cat "$T/worker.pub" "$T/client.pub" > "$T/auth"
C="worker=10.215.0.2:2222,10.215.0.3:2222,10.215.0.4:2222"
for i in 0 1 2; do
  OMP_NUM_THREADS=1 ip netns exec "${NS}$i" "$K" serve --cluster "$C" --job worker --task $i \
    --model-dir "$T/models" --key "$T/worker.key" --authorized-keys "$T/auth" --threads 1 \
    2>"$T/w$i.log" & PIDS+=($!)
done
sleep 1
rate_bps=$(( RATE * 1000000 / 8 ))
# raw_transfer BYTES: ms per transfer of BYTES over plain TCP, client to
# worker 1 through the same capped links (20 back-to-back transfers, like
# micro-batches): what the link itself costs, without kerasc.
raw_transfer() {
  ip netns exec "${NS}1" /usr/bin/python3 -c "
import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(('10.215.0.3', 2299)); s.listen(1); c, _ = s.accept()
while c.recv(1 << 20): pass
c.close()" & local srv=$!
  sleep 0.3
  /usr/bin/python3 -c "
import socket, time, sys
n = int(sys.argv[1]); buf = b'x' * n
s = socket.create_connection(('10.215.0.3', 2299)); s.sendall(buf)  # warm the window
t = time.perf_counter()
for _ in range(20): s.sendall(buf)
s.shutdown(socket.SHUT_WR); s.recv(1)
print(f'{(time.perf_counter() - t) * 1e3 / 20:.3f}')" "$1"
  wait "$srv" 2>/dev/null
}
echo "## bench-cluster: $BATCH samples in micro-batches of $MB, links capped at $RATE Mbit/s (tbf), CURVE on"
echo
echo "| stages | cuts | slowest compute ms | largest crossing B | link ms (nominal rate) | bound ms/mb | achieved ms/mb | achieved/bound | raw TCP transfer ms | overhead vs raw ms | achieved/bound at the raw-TCP rate |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
for stages in 2 3; do
  places=(); for ((s = 0; s < stages; s++)); do places+=(--place "$s=/job:worker/task:$s"); done
  run() { "$K" run "$T/models/resnet50.keras" --input "$T/x.npy" --output "$T/y.npy" --cluster "$C" \
          --key "$T/client.key" --worker-key "$T/worker.pub" --stages "$stages" "${places[@]}" \
          --microbatch "$MB" --deadline-ms 60000 --stats 2>&1; }
  run >/dev/null   # warm-up: stages loaded, kernels built
  out=$(run)
  cuts=$(sed -n 's/^cuts: //p' <<<"$out")
  compute=$(sed -n 's/^stage [0-9]*: compute \([0-9.]*\) ms.*/\1/p' <<<"$out" | sort -g | tail -1)
  # every link is capped, the client's into stage 0 included
  bytes=$(sed -n 's/^stage [0-9]*: compute [0-9.]* ms per micro-batch; \([0-9]*\) bytes.*/\1/p' <<<"$out" | sort -g | tail -1)
  achieved=$(sed -n 's/.*achieved \([0-9.]*\) ms per micro-batch.*/\1/p' <<<"$out")
  if [[ -z "$achieved" ]]; then echo "| $stages | run failed: $(tail -1 <<<"$out") |"; continue; fi
  raw=$(raw_transfer "${bytes:-0}")
  /usr/bin/python3 - "$stages" "$cuts" "$compute" "${bytes:-0}" "$rate_bps" "$achieved" "$raw" <<'PY'
import sys
stages, cuts = sys.argv[1], sys.argv[2]
compute, nbytes, rate, achieved, raw = (float(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5]),
                                        float(sys.argv[6]), float(sys.argv[7]))
link = nbytes / rate * 1e3
bound = max(compute, link)
raw_bound = max(compute, raw)
print(f"| {stages} | {cuts} | {compute:.3f} | {nbytes} | {link:.3f} | {bound:.3f} | {achieved:.3f} | {100 * bound / achieved:.1f}% | {raw:.3f} | {achieved - raw:.3f} | {100 * raw_bound / achieved:.1f}% |")
PY
done
echo
echo "bound = max(slowest stage's compute, largest activation crossing a link / link rate) per"
echo "micro-batch, at the nominal link rate. achieved = wall time / micro-batches, the pipeline"
echo "fill included (so at most M/(M+K-1) of the bound; M = $((BATCH / MB)) here). raw TCP transfer ="
echo "the largest crossing sent over plain TCP through the same capped links, back to back (no"
echo "kerasc, no CURVE); overhead vs raw = achieved - raw: what kerasc's hop adds per micro-batch."
echo "The last column reads the bound with the link at the rate plain TCP reaches through it"
echo "(headers and tbf make that ~8% below nominal). Every namespace shares this machine's cores:"
echo "workers and client compete for them, which the bound (one machine per stage) ignores."
