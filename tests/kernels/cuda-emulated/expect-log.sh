#!/bin/sh
# expect-log.sh PATTERN COMMAND [ARG...]: runs COMMAND; fails when it fails
# or when its output (stdout and stderr) has no line matching PATTERN
# (grep -E): a fallback the test is about must have been taken, not only
# survived.  $EXPECT_LOG_ABSENT, when set, is a pattern no line may match
# (a way that fell back where it should not have).  $EXPECT_LOG_FAILS, when
# set, turns the status around: the command must fail (a fault that ends
# the process, said by PATTERN).
set -u
pattern=$1
shift
out=$("$@" 2>&1)
rc=$?
printf '%s\n' "$out"
if [ -n "${EXPECT_LOG_FAILS:-}" ]; then
  if [ "$rc" = 0 ]; then
    echo "expect-log.sh: $1 passed where it must fail" >&2
    exit 1
  fi
elif [ "$rc" != 0 ]; then
  echo "expect-log.sh: $1 exited with $rc" >&2
  exit 1
fi
if ! printf '%s\n' "$out" | grep -Eq "$pattern"; then
  echo "expect-log.sh: no line of its output matches '$pattern'" >&2
  exit 1
fi
if [ -n "${EXPECT_LOG_ABSENT:-}" ] \
    && printf '%s\n' "$out" | grep -Eq "$EXPECT_LOG_ABSENT"; then
  echo "expect-log.sh: a line of its output matches '$EXPECT_LOG_ABSENT'" >&2
  exit 1
fi
