#!/bin/sh
# tests/gpu/run.sh with PP_GPU_END_S, as a dry run of its dtypes step (its
# full-size UNets take about 20 s each on cpu-strict): the command running
# at the end is cut short there and named, those after it are listed as
# not run, and the run ends with its summary (each step's seconds, the
# slowest commands) within a few seconds of the end, however long its
# commands would have taken.
# Usage: test-end-time.sh RUN_SH BUILD_DIR
set -u
run=$1 build=$2
END=12
log=$(mktemp)
trap 'rm -f "$log"' EXIT
fail() { echo "test-end-time: $*" >&2; sed 's/^/  | /' "$log" >&2; exit 1; }

t0=$(date +%s)
PP_GPU_DRY_RUN=1 PP_GPU_BUILD_DIR=$build PP_GPU_STEPS=dtypes PP_GPU_END_S=$END \
  timeout -k 5 120 sh "$run" >"$log" 2>&1
st=$?
took=$(($(date +%s) - t0))
# A command cut short is a failure of the run (status 1), named as such.
[ "$st" -eq 1 ] || fail "status $st, expected 1 (a command cut short)"
grep -q "FAILED: .*: cut short at PP_GPU_END_S=$END s" "$log" \
  || fail "no command named as cut short"
grep -q "skipped: .*: not run, past PP_GPU_END_S=$END s" "$log" \
  || fail "no command listed as not run"
grep -q '^seconds in commands, by step: dtypes [0-9]* s$' "$log" \
  || fail "no seconds by step in the summary"
grep -q '^the slowest commands:$' "$log" || fail "no slowest commands"
grep -q '^tests/gpu/run.sh: FAILED: ' "$log" || fail "no summary line"
# The end, the kill's grace and the summary's own seconds.
[ "$took" -le $((END + 20)) ] || fail "took $took s with PP_GPU_END_S=$END"
echo "PP_GPU_END_S=$END: ended in $took s, a command cut short, the rest not run"
