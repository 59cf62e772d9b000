# Helpers for e2e CLI tests: each check prints "ok"/"FAIL" and the script
# ends with the "N passed, N failed" line ctest logs and CI reads.
KERASC=${1:?usage: $0 path/to/kerasc}
PASSED=0
FAILED=0

pass() { PASSED=$((PASSED + 1)); echo "ok   $*"; }
fail() { FAILED=$((FAILED + 1)); echo "FAIL $*"; }

# expect_totals FILE TOTAL TRAINABLE [extra kerasc args...]
expect_totals() {
  local file=$1 total=$2 trainable=$3; shift 3
  local out
  if ! out=$("$KERASC" summary "$file" --json "$@" 2>&1); then
    fail "$(basename "$file"): load failed: $out"; return
  fi
  local got_total got_trainable
  got_total=$(printf '%s' "$out" | sed -n 's/^[[:space:]]*"total_params":[[:space:]]*\([0-9]*\).*/\1/p')
  got_trainable=$(printf '%s' "$out" | sed -n 's/^[[:space:]]*"trainable_params":[[:space:]]*\([0-9]*\).*/\1/p' | tail -1)
  if [[ "$got_total" == "$total" && "$got_trainable" == "$trainable" ]]; then
    pass "$(basename "$file"): $total params, $trainable trainable"
  else
    fail "$(basename "$file"): got $got_total/$got_trainable, want $total/$trainable"
  fi
}

# expect_error FILE STATUS_REGEX MESSAGE_REGEX [extra args...]: a one-line
# error on stderr matching the regex, nothing on stdout, a nonzero exit.
expect_error() {
  local file=$1 regex=$2; shift 2
  local out err rc
  err=$("$KERASC" summary "$file" "$@" 2>&1 >/dev/null); rc=$?
  out=$("$KERASC" summary "$file" "$@" 2>/dev/null)
  local lines
  lines=$(printf '%s\n' "$err" | grep -c .)
  if [[ $rc -ne 0 && $rc -lt 128 && -z "$out" && $lines -eq 1 ]] && printf '%s' "$err" | grep -Eq "$regex"; then
    pass "$(basename "$file"): refused: $err"
  else
    fail "$(basename "$file"): rc=$rc lines=$lines stderr='$err' (want /$regex/)"
  fi
}

finish() {
  echo "$PASSED passed, $FAILED failed"
  [[ $FAILED -eq 0 ]]
}
