#!/bin/sh
# ppdiffuse — one command per job on a fresh Debian 12 machine.
#
#   ./setup.sh demo   install dependencies, build, run the demo pipeline
#   ./setup.sh test   install dependencies, build, run the whole test suite,
#                     then the sanitizer builds' suites (see run_sanitized)
#
# Dependencies come from Debian's archive (apt-get, as root or through sudo).
# The build goes to ./build, the sanitizer builds to ./build-asan and
# ./build-tsan; the demo writes to ./out/demo.
set -eu

# iproute2 and util-linux build the test cluster (tests/cluster).
DEPS="meson ninja-build pkg-config gcc g++ libc6-dev python3 libglib2.0-dev
  zlib1g-dev libgstreamer1.0-dev libgstreamer-plugins-base1.0-dev
  gstreamer1.0-tools gstreamer1.0-plugins-base gstreamer1.0-plugins-good
  libopenmpi-dev libpmix-dev openmpi-bin libjson-glib-dev libopenblas-dev
  libpng-dev clang libclang-rt-14-dev libasan8 libubsan1 libtsan2
  python3-gi gir1.2-gstreamer-1.0
  iproute2 util-linux"
BUILD_DIR=build
# Where the CUDA toolkit is, the demo's build carries device code for these
# GPUs (meson_options.txt's cuda-archs).  The test suite runs no device
# code: its build takes the PTX alone (-Dcuda-archs=), which saved about a
# minute and a half of the build's two and a half here (nvcc's four passes
# over the norm kernels took 100 s, the PTX alone 17 s).  A GPU machine
# runs tests/gpu/run.sh, which builds its own tree.
DEMO_CUDA_ARCHS=80,89,90
# Sanitizer builds: name (build-NAME, meson test --setup NAME), -Db_sanitize
# value, and the suites that run there.  The test setups themselves
# (environment, suppressions, timeout multiplier) are in
# tests/sanitizers/meson.build.
ASAN_SUITES="unit kernels check faults"
TSAN_SUITES="unit check faults"
TOP=$(cd "$(dirname "$0")" && pwd)
# Tests run two at a time: a test spends most of its time waiting on
# worker start-up and on frames, so two keep two cores busy.  Those that
# measure time or allocations, and the full-size models, run alone
# (is_parallel : false where they are defined).
TEST_PROCESSES=2
# The faults suite's tests mostly wait (for a deadline, a dead worker's
# detection, a slow step): two at a time they left the cores idle two
# thirds of the time, so the suite runs on its own after the others, this
# many at a time (97 s down to 55 s here).  Not under the sanitizers:
# there every process of a mesh is instrumented, the suite keeps two cores
# busy two at a time, and four at a time saved 14 s (ASan) and 23 s (TSan)
# of about 3 minutes while starving the starts whose time the tests bound
# (a probe's failure took 10.7 s instead of 1.6).
WAIT_PROCESSES=4
# The ThreadSanitizer run's suites take $TEST_PROCESSES at a time too.
# Three at a time kept the cores busier there (85 % against two thirds,
# 138-144 s against 179 s: its tests wait more than they compute), but
# failed elements-live-settings once in a fresh root, at the end of its
# last case.

as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi
}

install_deps() {
  missing=""
  for p in $DEPS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" \
      || missing="$missing $p"
  done
  [ -z "$missing" ] && return 0
  echo "== installing:$missing"
  as_root apt-get update -q
  # shellcheck disable=SC2086  # $missing is a list of package names
  as_root env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -q --no-install-recommends $missing  # a list: split it
}

# Builds ./build with the meson options given, set again on a build that
# exists: each job's build is the one it needs, whichever ran before.
build() {
  cd "$TOP"
  if [ -f "$BUILD_DIR/build.ninja" ]; then
    meson configure "$BUILD_DIR" "$@" >/dev/null
  else
    meson setup "$BUILD_DIR" -Dtests=enabled "$@"
  fi
  ninja -C "$BUILD_DIR"
}

# Open MPI refuses to start as root unless told that it is meant, and
# looks up this machine's host name at start: unresolved, every start waits
# for DNS and deadlines in the tests can pass before the mesh is up.
mpi_env() {
  if ! getent hosts "$(hostname)" >/dev/null 2>&1; then
    echo "warning: host name '$(hostname)' does not resolve; add it to" \
      "/etc/hosts or Open MPI start-up will be slow" >&2
  fi
  if [ "$(id -u)" = 0 ]; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  fi
}

# Prints how long the step named $1 took since $2 (date +%s).  Shell
# variables are global: a caller's start time must not share a name with
# one the functions in between set (a name in $(( )) is read as a
# variable, and dash stops on a value that is not a number).
took() {
  echo "== $1: $(( $(date +%s) - $2 )) s"
}

# Builds ./build-$1 with -Db_sanitize=$2 (meson needs b_lundef off for a
# sanitized shared module) and the meson options that follow, its
# compiling as $BUILD_PRIORITY says (a command prefix; none by default).
build_sanitized() {
  cd "$TOP"
  name=$1 sanitize=$2
  shift 2
  [ -f "build-$name/build.ninja" ] || meson setup "build-$name" \
    -Dtests=enabled -Db_sanitize="$sanitize" -Db_lundef=false "$@"
  ${BUILD_PRIORITY:-} ninja -C "build-$name"
}

# Sets sanitize, suites and options for the sanitizer build $1.  The
# ThreadSanitizer build runs no kernels suite, where the CUDA adapters'
# host tests are: it leaves the toolkit out (no nvcc time) and builds none
# of that suite's tests (a third of its compiling).
sanitizer_build_config() {
  case $1 in
    asan) sanitize=address,undefined suites=$ASAN_SUITES
      options=-Dcuda-archs= ;;
    tsan) sanitize=thread suites=$TSAN_SUITES
      options="-Dcuda=disabled -Dkernels-tests=false" ;;
  esac
}

# Builds the sanitizer trees one after the other in the scheduler's idle
# class (chrt --idle; nice where that is refused): they compile on the
# cores the normal suite leaves idle while its tests wait on workers,
# spawns and frames (two fifths of the cores' time over a whole run here),
# and yield them whenever a test computes.
# Where the kernel groups each session's processes (autogroups,
# /proc/sys/kernel/sched_autogroup_enabled), a policy counts only within
# its session, and meson runs every test in a session of its own: the
# builds' session took its equal share of the cores from a computing test
# (a loop under chrt --idle took one core of two from
# tiny-e2e-turbo-slow-frame, 8 s to 14 s, and its heartbeats came late).
# So they run in a session of their own (setsid, the entry
# sanitizer-builds) whose group is niced to 19 (9 s with the loop there).
build_sanitized_idle() {
  BUILD_PRIORITY="nice -n 19"
  if chrt --idle 0 true 2>/dev/null; then
    BUILD_PRIORITY="chrt --idle 0"
  fi
  for name in asan tsan; do
    sanitizer_build_config "$name"
    t=$(date +%s)
    # shellcheck disable=SC2086  # $options is a list of options
    build_sanitized "$name" "$sanitize" $options || return 1
    took "build-$name build (in the idle class, beside the test suite)" "$t"
  done
}

# Runs meson test in build dir $1 under test setup $2 ("" for none) on the
# suites $3 (a list; "" for all) with the options that follow, twice: the
# suites but faults, $TEST_PROCESSES at a time, then the faults suite (when
# it is one of them), $WAIT_PROCESSES at a time ($TEST_PROCESSES under a
# sanitizer's setup), whose log joins the
# first's (one JSON object a line).  A test that failed only
# by a fault of Open MPI's own (a spawn that never returned, its daemon's
# crash) runs once more, a third time if it met one again
# (tests/ompi-retry.py), and the status is that of
# the results with the retries counted.  The logs of an earlier run are
# cleared first.
run_meson_tests() {
  dir=$1 setup=$2 suites=$3
  shift 3
  log="$dir/meson-logs/testlog${setup:+-$setup}.json"
  faults_log="$dir/meson-logs/testlog-faults${setup:+-$setup}.json"
  rm -f "$log" "$faults_log"
  select="--no-suite faults" faults=${suites:-faults}
  if [ -n "$suites" ]; then
    select=""
    for suite in $suites; do
      [ "$suite" = faults ] || select="$select --suite $suite"
    done
  fi
  status=0
  waits=$WAIT_PROCESSES
  [ -z "$setup" ] || waits=$TEST_PROCESSES
  # shellcheck disable=SC2086  # $select is a list of options
  meson test -C "$dir" ${setup:+--setup "$setup"} $select "$@" \
    --num-processes "$TEST_PROCESSES" || status=$?
  case " $faults " in
    *" faults "*)
      meson test -C "$dir" ${setup:+--setup "$setup"} --suite faults "$@" \
        --num-processes "$waits" --logbase testlog-faults \
        || status=$?
      [ -f "$faults_log" ] && cat "$faults_log" >> "$log" ;;
  esac
  python3 "$TOP/tests/ompi-retry.py" "$dir" $setup || true
  if [ "$status" -ne 0 ] && [ -f "$log" ] \
      && python3 "$TOP/tests/summary.py" "$log" >/dev/null; then
    status=0
  fi
  return "$status"
}

# Runs the suites $2... of ./build-$1 under its test setup, leaving out the
# suites sanitizer-skip and NAME-skip (tsan-skip: tests/meson.build); the
# reports of an earlier run are cleared first (tests/summary.py counts what
# is left).
run_sanitized() {
  name=$1
  shift
  rm -f "build-$name/meson-logs/sanitizers/"*
  run_meson_tests "build-$name" "$name" "$*" \
    --no-suite sanitizer-skip --no-suite "$name-skip" --print-errorlogs
}

run_tests() {
  cd "$TOP"
  mpi_env
  rc=0
  builds_log="$TOP/$BUILD_DIR/meson-logs/sanitizer-builds.log"
  if command -v setsid >/dev/null; then
    setsid -w "$TOP/setup.sh" sanitizer-builds >"$builds_log" 2>&1 &
  else
    build_sanitized_idle >"$builds_log" 2>&1 &
  fi
  builds=$!
  t=$(date +%s)
  run_meson_tests "$BUILD_DIR" "" "" --print-errorlogs || rc=$?
  took "test suite" "$t"
  t=$(date +%s)
  builds_rc=0
  wait "$builds" || builds_rc=$?
  cat "$builds_log"
  took "the sanitizer builds after the test suite" "$t"
  if [ "$builds_rc" -ne 0 ]; then
    echo "== the sanitizer builds failed (above)" >&2
    return 1
  fi
  # The two sanitizer runs side by side, each logging to its own file
  # (printed when both are done): the ThreadSanitizer run's tests mostly
  # wait (live pipelines' frame times, slow steps, deadlines; the cores
  # were two thirds idle through it), and the AddressSanitizer run's
  # faults suite half the time.  One after the other they took 418 s and
  # 203 s here, side by side 477 s, every test passing.
  t=$(date +%s) runs=""
  for name in asan tsan; do
    (
      sanitizer_build_config "$name"
      run_start=$(date +%s) run_rc=0
      # shellcheck disable=SC2086  # $suites is a list of suite names
      run_sanitized "$name" $suites || run_rc=$?
      took "build-$name suites ($suites)" "$run_start"
      exit "$run_rc"
    ) >"build-$name/meson-logs/sanitized-run.log" 2>&1 &
    runs="$runs $!"
  done
  for pid in $runs; do
    wait "$pid" || rc=1
  done
  cat build-asan/meson-logs/sanitized-run.log \
    build-tsan/meson-logs/sanitized-run.log
  took "the sanitizer builds' suites, side by side" "$t"
  python3 "$TOP/tests/summary.py" "$BUILD_DIR/meson-logs/testlog.json" \
    build-asan/meson-logs/testlog-asan.json \
    build-tsan/meson-logs/testlog-tsan.json || rc=1
  return $rc
}

run_demo() {
  cd "$TOP"
  mpi_env
  export GST_PLUGIN_PATH_1_0="$TOP/$BUILD_DIR/gst/ppdiffuse"
  export PPDIFFUSE_WORKER="$TOP/$BUILD_DIR/mpi-helper/ppdiffuse-worker"
  "$TOP/pipelines/demo.sh" "$TOP/out/demo"
}

case "${1:-}" in
  demo) install_deps; build -Dcuda-archs="$DEMO_CUDA_ARCHS"; run_demo ;;
  test)
    install_deps
    start=$(date +%s)
    build -Dcuda-archs=
    took "build" "$start"
    run_tests
    ;;
  # run_tests's, in a session of its own (build_sanitized_idle): its group
  # niced here, never the caller's session.
  sanitizer-builds)
    { echo 19 >/proc/self/autogroup; } 2>/dev/null || true
    build_sanitized_idle ;;
  *) echo "usage: $0 demo|test" >&2; exit 2 ;;
esac
