#!/usr/bin/env bash
# `kerasc keygen NAME [--force]`: writes NAME.key (0600) and NAME.pub
# (0644), prints only the public key, refuses to overwrite without
# --force, and gives usage errors exit status 2.
source "$(dirname "$0")/lib.bash"
T=${KC_TEST_TMP:-/tmp}/keygen.$$
mkdir -p "$T"
trap 'rm -rf "$T"' EXIT

Z85='^[]0-9a-zA-Z.:+=^!/*?&<>()[{}@%$#-]{40}$'
mode() { stat -c %a "$1"; }

out=$("$KERASC" keygen "$T/w0" 2>"$T/err"); rc=$?
if [[ $rc -eq 0 && $(printf '%s\n' "$out" | wc -l) -eq 1 ]] && printf '%s' "$out" | grep -Eq "$Z85"; then
  pass "keygen prints one Z85 public key"
else
  fail "keygen: rc=$rc stdout='$out' stderr='$(cat "$T/err")'"
fi
[[ -f "$T/w0.key" && $(mode "$T/w0.key") == 600 ]] && pass "w0.key has mode 600" || fail "w0.key mode $(mode "$T/w0.key" 2>&1)"
[[ -f "$T/w0.pub" && $(mode "$T/w0.pub") == 644 ]] && pass "w0.pub has mode 644" || fail "w0.pub mode $(mode "$T/w0.pub" 2>&1)"
[[ "$(cat "$T/w0.pub")" == "$out" ]] && pass ".pub holds the printed key" || fail ".pub differs from stdout"
if [[ "$(sed -n 1p "$T/w0.key")" == "public = $out" ]] && [[ $(grep -Ec '^secret = .{40}$' "$T/w0.key") -eq 1 ]]; then
  pass ".key holds public and secret lines"
else
  fail ".key content: $(sed 's/secret = .*/secret = (hidden)/' "$T/w0.key")"
fi
ls "$T" | grep -q tmp && fail "temporary files left: $(ls "$T")" || pass "no temporary files left"

# Refuses to overwrite; the old pair is untouched.
before=$(cat "$T/w0.key")
err=$("$KERASC" keygen "$T/w0" 2>&1 >/dev/null); rc=$?
if [[ $rc -eq 1 && $(printf '%s\n' "$err" | grep -c .) -eq 1 && "$err" == *"already exists"* && "$(cat "$T/w0.key")" == "$before" ]]; then
  pass "refuses to overwrite: $err"
else
  fail "overwrite: rc=$rc err='$err'"
fi
out2=$("$KERASC" keygen "$T/w0" --force 2>/dev/null); rc=$?
if [[ $rc -eq 0 && "$out2" != "$out" && "$(cat "$T/w0.pub")" == "$out2" && $(mode "$T/w0.key") == 600 ]]; then
  pass "--force replaces the pair"
else
  fail "--force: rc=$rc"
fi

# Usage errors: exit 2, one line.
for args in "" "--bogus x" "a b"; do
  # shellcheck disable=SC2086
  err=$("$KERASC" keygen $args 2>&1 >/dev/null); rc=$?
  if [[ $rc -eq 2 && $(printf '%s\n' "$err" | grep -c .) -eq 1 ]]; then
    pass "usage error for '$args': $err"
  else
    fail "'keygen $args': rc=$rc err='$err'"
  fi
done

# A directory that does not exist: exit 1, one line, nothing written.
err=$("$KERASC" keygen "$T/no/such/dir/k" 2>&1 >/dev/null); rc=$?
if [[ $rc -eq 1 && $(printf '%s\n' "$err" | grep -c .) -eq 1 && "$err" == *"No such file"* ]]; then
  pass "missing directory: $err"
else
  fail "missing directory: rc=$rc err='$err'"
fi
"$KERASC" help | grep -q "keygen NAME" && pass "help lists keygen" || fail "help does not list keygen"
finish
