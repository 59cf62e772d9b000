#!/usr/bin/env bash
# Run every libFuzzer target for a while on its seed corpus.
# usage: scripts/run-fuzz.sh BUILD_DIR SECONDS
set -euo pipefail
build=$1
seconds=$2
root=$(cd "$(dirname "$0")/.." && pwd)
status=0
for target in "$build"/fuzz/fuzz_*; do
  [[ -x "$target" ]] || continue
  name=$(basename "$target")
  corpus_seed="$root/fuzz/corpus/${name#fuzz_}"
  work="$build/fuzz/corpus-${name#fuzz_}"
  mkdir -p "$work"
  echo "fuzz: $name for ${seconds}s"
  if ! "$target" -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 \
       -artifact_prefix="$build/fuzz/${name}-" "$work" "$corpus_seed" 2>"$build/fuzz/$name.log"; then
    echo "fuzz: $name FAILED, see $build/fuzz/$name.log"; tail -30 "$build/fuzz/$name.log"
    status=1
  else
    grep -E "^(Done|#[0-9]+ +DONE)" "$build/fuzz/$name.log" | tail -1 || true
  fi
done
exit $status
