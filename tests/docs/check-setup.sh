#!/bin/sh
# setup.sh's test job, its shell logic alone, under /bin/sh (dash on
# Debian): the functions up to its command dispatch, with meson, the
# builds and the Python summaries replaced by stand-ins, run once with
# every suite passing (status 0, every step's time a number), then with
# either sanitizer run failing, and with the logs' summary counting a
# failure (status 1 each).  A mistake there ends the
# real job only after twenty minutes of tests.
set -eu
top=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/build/meson-logs" "$work/build-asan/meson-logs" \
  "$work/build-tsan/meson-logs"
sed '/^case "${1:-}"/,$d' "$top/setup.sh" > "$work/harness.sh"
cat >> "$work/harness.sh" <<'HARNESS'
TOP=$WORK
meson() {
  [ -z "$FAIL_RUN" ] || case "$*" in *build-$FAIL_RUN*) return 1 ;; esac
}
python3() {
  case "$1" in *summary.py) [ -z "$FAIL_SUMMARY" ] ;; esac
}
build_sanitized_idle() { :; }
run_tests
HARNESS
# The sanitizer builds run as setup.sh's entry sanitizer-builds in a
# session of their own: a stand-in for it, failing when $FAIL_BUILDS is
# set.
cat > "$work/setup.sh" <<'ENTRY'
#!/bin/sh
[ "$*" = sanitizer-builds ] || { echo "setup.sh called with '$*'" >&2; exit 2; }
[ -z "$FAIL_BUILDS" ]
ENTRY
chmod +x "$work/setup.sh"
sed -n '/^case "${1:-}"/,$p' "$top/setup.sh" \
  | grep -q '^  sanitizer-builds)$' \
  || { echo "FAIL: setup.sh has no entry sanitizer-builds"; exit 1; }

# $1: the sanitizer run whose meson fails ("" for none); $2: set for a
# summary of the logs that counts a failure; $3: set for sanitizer builds
# that fail.
run() {
  FAIL_RUN=$1 FAIL_SUMMARY=${2:-} FAIL_BUILDS=${3:-} WORK=$work \
    /bin/sh "$work/harness.sh" > "$work/out" 2>&1
}

fail() {
  echo "FAIL: $*"
  sed 's/^/  /' "$work/out"
  exit 1
}

run "" || fail "setup.sh's test job failed with every suite passing"
grep -qv '^== .*: [0-9]* s$' "$work/out" \
  && fail "a line that is not a step's time in seconds"
for step in "test suite" "build-asan suites" "build-tsan suites" \
    "side by side"; do
  grep -q "^== .*$step.*: [0-9]* s$" "$work/out" \
    || fail "no time for '$step'"
done
if run tsan; then
  fail "setup.sh's test job passed with the ThreadSanitizer run failing"
fi
if run asan; then
  fail "setup.sh's test job passed with the AddressSanitizer run failing"
fi
if run "" summary; then
  fail "setup.sh's test job passed with the logs' summary counting a failure"
fi
if run "" "" builds; then
  fail "setup.sh's test job passed with the sanitizer builds failing"
fi
grep -q "the sanitizer builds failed" "$work/out" \
  || fail "the sanitizer builds' failure was not said"
echo "ok: setup.sh's test job under /bin/sh, passing and failing"
