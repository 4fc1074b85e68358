#!/bin/sh
# The checker itself: with one op's outputs made wrong (--inject-error),
# ppdiffuse-tool test-ops must exit 1, fail every case of that op and no
# case of any other op.  Usage: test-ops-detects.sh PPDIFFUSE_TOOL OP
set -u
TOOL=$1 OP=$2
out=$(mktemp)
trap 'rm -f "$out"' EXIT

timeout 120 "$TOOL" test-ops --backend cpu --inject-error "$OP" > "$out" 2>&1
rc=$?
cat "$out"
if [ "$rc" -ne 1 ]; then
  echo "expected exit status 1 with a wrong $OP, got $rc" >&2
  exit 1
fi
failed=$(grep -c "^  $OP .*FAIL" "$out")
passed=$(grep "^  $OP " "$out" | grep -vc "FAIL")
others=$(grep -v "^  $OP " "$out" | grep -c "FAIL")
if [ "$failed" -lt 1 ] || [ "$passed" -ne 0 ] || [ "$others" -ne 0 ]; then
  echo "with a wrong $OP: $failed of its cases failed, $passed passed," \
    "$others cases of other ops failed" >&2
  exit 1
fi
echo "a wrong $OP fails all its $failed cases and nothing else"
