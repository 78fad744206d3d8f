# Sourced by the tests/*.sh scripts that run the `chameleon` command: they
# set $bin (the binary), call check once per case, and end with checks_done.
fails=0

check() {  # check NAME EXPECTED_STATUS PATTERN -- ARGS...
  local name=$1 want=$2 pattern=$3; shift 4
  local out status
  out=$("$bin" "$@" 2>&1); status=$?
  if [ "$status" -ne "$want" ] || ! grep -qE -- "$pattern" <<<"$out"; then
    echo "FAIL $name: status $status (want $want), output:"; echo "$out" | head -40
    fails=$((fails + 1))
  else
    echo "ok   $name"
  fi
}

check_not() {  # check_not NAME EXPECTED_STATUS PATTERN ANTI_PATTERN -- ARGS...: also
  local name=$1 want=$2 pattern=$3 anti=$4; shift 5  # ANTI_PATTERN must not occur
  local out status
  out=$("$bin" "$@" 2>&1); status=$?
  if [ "$status" -ne "$want" ] || ! grep -qE -- "$pattern" <<<"$out" ||
     grep -qE -- "$anti" <<<"$out"; then
    echo "FAIL $name: status $status (want $want), output:"; echo "$out" | head -40
    fails=$((fails + 1))
  else
    echo "ok   $name"
  fi
}

checks_done() {  # checks_done LABEL: the summary; exit 1 if a check failed
  if [ "$fails" -eq 0 ]; then
    echo "$1: all checks passed"
  else
    echo "$1: $fails checks failed"; exit 1
  fi
}
