#!/bin/bash
# ppdiffuse's multi-host path on the test cluster: run as
#
#   cluster.sh -n 2 cluster-cases.sh CASE
#
# so that this script is rank 0's host and ppcl-n1, ppcl-n2 are the worker
# hosts (see cluster.sh).  The cases:
#
#   hosts, hostfile   workers go where hosts= / hostfile= put them (the
#                     handshake's host for each rank, and the network
#                     namespace its pid runs in); builtin:stamp frames come
#                     back complete, in order, stamped by every step once,
#                     and equal to a run with every worker on rank 0's host
#   tiny              the same for a make-tiny pipeline ($PPDIFFUSE_TOOL)
#   worker-killed     SIGKILL of the worker on ppcl-n2 mid-stream
#   orted-killed      SIGKILL of Open MPI's daemon on ppcl-n2 mid-stream
#   link-cut          ppcl-n2's link taken down mid-stream
#   unreachable       hosts= naming an address no host holds on the link
#   unresolvable      a hostfile naming a host that does not resolve
#   rank0-killed      SIGKILL of rank 0 (gst-launch) mid-stream
#
# Each fault must end in an element error naming the host (and the rank,
# once ranks exist) within 2 x timeout-ms, gst-launch must leave on its own
# (status 1 or 255, not a signal), and nothing may be left running on any
# host within the bound each case states.  When rank 0 itself is killed,
# the workers on every host must be gone within its bound.
set -u

CASE=$1
HERE=$(cd "$(dirname "$0")" && pwd)
STAMP_CHECK=$HERE/../check/stamp-raw.py
# Start-up included: spawning across the cluster's hosts takes about a
# second on two idle cores, more when they are busy.
TIMEOUT_MS=3000
# The error comes within 2 x timeout-ms of the fault.
ERROR_BOUND_MS=$((2 * TIMEOUT_MS))
# gst-launch stops the element after the error: the mesh's fault path.
EXIT_BOUND_MS=5000
# Nothing of the mesh is left on any host this long after gst-launch left;
# the link-cut case waits for TCP to give up (cluster.sh's tcp_retries2).
CLEAN_BOUND_S=10
CLEAN_CUT_BOUND_S=40
# Every wait of this script gives up after this much.
RUN_LIMIT_S=120
POLL_S=0.05
WIDTH=32 HEIGHT=24 FORMAT=RGBA STEPS=4 SEED=11 FRAMES=12
# Each step costs this much, so that the workers live long enough to be
# looked at while the frames flow.
STEP_MS=40

read -r -a HOSTS <<<"$PP_CLUSTER_HOSTS"
H1=${HOSTS[0]} H2=${HOSTS[1]}
work=$PP_CLUSTER_DIR/case
mkdir -p "$work"
log=$work/log
gl_pid=""

fail() {
  echo "FAIL ($CASE): $*" >&2
  [ -f "$log" ] && { echo "--- rank 0's log" >&2; grep -v "DEBUG\|LOG " \
    "$log" | tail -n 40 >&2; }
  [ -n "$gl_pid" ] && kill -KILL "$gl_pid" 2>/dev/null
  exit 1
}

now_ms() { date +%s%3N; }

# Starts gst-launch in the background, its output in $log: a pipeline
# through ppdiffuse with the element settings given.
start_stream() {
  GST_DEBUG=ppdiffuse:4 timeout --kill-after=5 "$RUN_LIMIT_S" \
    gst-launch-1.0 videotestsrc is-live=true pattern=ball \
    ! video/x-raw,format=$FORMAT,width=$WIDTH,height=$HEIGHT,framerate=30/1 \
    ! ppdiffuse ranks=2 steps=$STEPS model=builtin:stamp \
      timeout-ms=$TIMEOUT_MS "$@" ! fakesink >"$log" 2>&1 &
  gl_pid=$!
}

# Waits until $log matches $1 (extended regex); fails after $2 s.
wait_log() {
  local deadline=$(($(now_ms) + $2 * 1000))
  until grep -Eq "$1" "$log"; do
    [ "$(now_ms)" -lt $deadline ] || fail "no '$1' in the log within $2 s"
    sleep $POLL_S
  done
}

# "PID HOST" of worker rank $1 as the handshake reported it.
worker_of() {
  sed -n "s/.*rank 0: worker rank $1 is pid \([0-9]*\) on \([^,]*\),.*/\1 \2/p" \
    "$log" | tail -n 1
}

# Worker rank $1 ran on host $2: the handshake says so, and its pid is in
# $2's network namespace (while it still runs).
check_worker_host() {
  local pid host ns
  read -r pid host <<<"$(worker_of "$1")"
  [ -n "$pid" ] || fail "no handshake line for worker rank $1"
  [ "$host" = "$2" ] || fail "worker rank $1 reported host '$host', not $2"
  ns=$(ip netns identify "$pid" 2>/dev/null)
  [ -n "$ns" ] || fail "worker rank $1 (pid $pid) is not running, or in no" \
    "cluster namespace, while the frames flow"
  [ "$ns" = "$2" ] || fail "worker rank $1 (pid $pid) runs in namespace" \
    "$ns, not $2"
  echo "worker rank $1: pid $pid on $host (namespace $ns)"
}

# What of the mesh still runs anywhere: every process in a worker host's
# namespace, and Open MPI's daemon or a worker in rank 0's.
leftovers() {
  local h p comm
  for h in "${HOSTS[@]}"; do
    for p in $(ip netns pids "$h" 2>/dev/null); do
      comm=$(cat "/proc/$p/comm" 2>/dev/null) && echo "$h:$p:$comm"
    done
  done
  for p in $(ip netns pids "$PP_CLUSTER_RANK0" 2>/dev/null); do
    comm=$(cat "/proc/$p/comm" 2>/dev/null) || continue
    case $comm in
      orted|ppdiffuse-worke|netns-agent) echo "$PP_CLUSTER_RANK0:$p:$comm" ;;
    esac
  done
}

# Nothing left within $1 s.
check_clean() {
  local deadline=$(($(now_ms) + $1 * 1000)) left since
  since=$(now_ms)
  while left=$(leftovers); [ -n "$left" ]; do
    [ "$(now_ms)" -lt $deadline ] || fail "left running after $1 s:" "$left"
    sleep $POLL_S
  done
  echo "nothing left on any host after $(($(now_ms) - since)) ms"
}

# Waits for gst-launch to leave, up to $1 ms; its status in $gl_status.
wait_exit() {
  local deadline=$(($(now_ms) + $1))
  while kill -0 "$gl_pid" 2>/dev/null; do
    [ "$(now_ms)" -lt $deadline ] || fail "gst-launch still runs $1 ms" \
      "after the error"
    sleep $POLL_S
  done
  wait "$gl_pid"
  gl_status=$?
  gl_pid=""
}

# The element error came within $ERROR_BOUND_MS of $1 (ms) and names every
# further argument; gst-launch then left on its own, with an error status.
expect_error() {
  local t0=$1 deadline t
  shift
  deadline=$((t0 + ERROR_BOUND_MS))
  until grep -q "^ERROR: from element" "$log"; do
    t=$(now_ms)
    [ "$t" -lt $deadline ] || fail "no element error within" \
      "$ERROR_BOUND_MS ms (2 x timeout-ms)"
    kill -0 "$gl_pid" 2>/dev/null || { grep -q "^ERROR: from element" \
      "$log" && break; fail "gst-launch left without an element error"; }
    sleep $POLL_S
  done
  echo "element error after $(($(now_ms) - t0)) ms:"
  grep "^ERROR: from element" "$log" | head -n 1
  for needle in "$@"; do
    grep "^ERROR: from element" "$log" | head -n 1 | grep -qF "$needle" \
      || fail "the element error does not name '$needle'"
  done
  wait_exit $EXIT_BOUND_MS
  case $gl_status in
    1|255) ;;
    *) fail "gst-launch ended with status $gl_status, not an error exit" \
      "(killed?)" ;;
  esac
}

# As expect_error, and the error leads with $2 (the culprit): its first
# "worker rank" clause starts with it, not only names it somewhere.
expect_culprit() {
  local culprit=$2 lead
  expect_error "$@"
  lead=$(grep "^ERROR: from element" "$log" | head -n 1 \
    | awk '{ i = index($0, "worker rank "); if (i) print substr($0, i) }')
  case $lead in
    "$culprit"*) ;;
    *) fail "the element error does not lead with '$culprit': '$lead'" ;;
  esac
}

# Stamp frames through a 2-worker mesh placed by "$@" (element settings);
# the raw output goes to $work/out-$1.raw.  The workers' hosts are checked
# while the frames flow: each "rank=HOST" in $PLACED.
run_stamp() {
  local name=$1
  shift
  python3 "$STAMP_CHECK" make $FORMAT $WIDTH $HEIGHT $FRAMES $SEED \
    "$work/in.raw"
  GST_DEBUG=ppdiffuse:4 timeout --kill-after=5 "$RUN_LIMIT_S" \
    gst-launch-1.0 -q filesrc location="$work/in.raw" \
    ! rawvideoparse format=rgba width=$WIDTH height=$HEIGHT framerate=25/1 \
    ! ppdiffuse steps=$STEPS model="builtin:stamp?step-ms=$STEP_MS" \
      timeout-ms=10000 "$@" \
    ! filesink location="$work/out-$name.raw" >"$log" 2>&1 &
  gl_pid=$!
  for placed in ${PLACED:-}; do
    wait_log "worker rank ${placed%%=*} is pid" 30
    check_worker_host "${placed%%=*}" "${placed#*=}"
  done
  wait_exit $((RUN_LIMIT_S * 1000))
  [ "$gl_status" = 0 ] || fail "the $name run failed (status $gl_status)"
  python3 "$STAMP_CHECK" check $FORMAT $WIDTH $HEIGHT $FRAMES $STEPS \
    "$work/in.raw" "$work/out-$name.raw" \
    || fail "the $name run's frames are not every frame stamped in order"
}

# The cut link's daemon leaves when TCP gives up: in seconds only with
# cluster.sh's tcp_retries2 (15, Linux's default, is about 15 minutes).
if [ "$CASE" = link-cut ] && [ "${PP_CLUSTER_TCP_RETRIES2:-}" != 5 ]; then
  echo "SKIP: net.ipv4.tcp_retries2 is ${PP_CLUSTER_TCP_RETRIES2:-unknown}" \
    "in the cluster's namespaces, not 5: /proc/sys is read-only here" >&2
  exit 77
fi

case $CASE in
  hosts)
    PLACED="1=$H1 2=$H2" run_stamp hosts ranks=2 hosts="$H1,$H2"
    run_stamp local ranks=2
    cmp "$work/out-hosts.raw" "$work/out-local.raw" \
      || fail "frames through $H1 and $H2 differ from a single-host run"
    check_clean $CLEAN_BOUND_S
    echo "hosts=$H1,$H2: $FRAMES frames equal to the single-host run"
    ;;
  hostfile)
    # Open MPI fills each host's slots in the file's order.
    printf '%s slots=1\n%s slots=2\n' "$H1" "$H2" >"$work/hostfile"
    PLACED="1=$H1 2=$H2 3=$H2" run_stamp hostfile ranks=3 \
      hostfile="$work/hostfile"
    run_stamp local ranks=3
    cmp "$work/out-hostfile.raw" "$work/out-local.raw" \
      || fail "frames through the hostfile's hosts differ from a" \
        "single-host run"
    check_clean $CLEAN_BOUND_S
    echo "hostfile ($H1 slots=1, $H2 slots=2): $FRAMES frames equal to" \
      "the single-host run"
    ;;
  tiny)
    tool=${PPDIFFUSE_TOOL:?the tiny case needs \$PPDIFFUSE_TOOL}
    "$tool" make-tiny --kind turbo --out "$work/model" --seed 3 >/dev/null \
      || fail "make-tiny failed"
    for placement in hosts local; do
      set -- ranks=2
      [ $placement = hosts ] && set -- "$@" hosts="$H1,$H2"
      GST_DEBUG=ppdiffuse:4 timeout --kill-after=5 "$RUN_LIMIT_S" \
        gst-launch-1.0 -q videotestsrc num-buffers=3 pattern=ball \
        ! video/x-raw,format=RGB,width=44,height=28,framerate=25/1 \
        ! ppdiffuse steps=2 model="$work/model" strength=1.0 seed=7 \
          prompt-embeds="$work/model/prompt_embeds.npy" timeout-ms=30000 \
          "$@" \
        ! video/x-raw,format=RGB ! filesink location="$work/tiny-$placement.raw" \
        >"$log" 2>&1 || fail "the tiny pipeline failed ($placement)"
      if [ $placement = hosts ]; then
        for r in 1 2; do
          read -r pid host <<<"$(worker_of $r)"
          [ "$host" = "${HOSTS[$((r - 1))]}" ] || fail "tiny: worker rank $r" \
            "reported host '$host', not ${HOSTS[$((r - 1))]}"
        done
      fi
    done
    timeout "$RUN_LIMIT_S" gst-launch-1.0 -q videotestsrc num-buffers=3 \
      pattern=ball \
      ! video/x-raw,format=RGB,width=44,height=28,framerate=25/1 \
      ! filesink location="$work/tiny-in.raw" || fail "tiny: no input frames"
    cmp -s "$work/tiny-in.raw" "$work/tiny-hosts.raw" \
      && fail "tiny: the frames came back unchanged"
    size=$(stat -c %s "$work/tiny-hosts.raw")
    [ "$size" = $((44 * 28 * 3 * 3)) ] || fail "tiny: $size bytes came out," \
      "not 3 frames of 44x28 RGB"
    cmp "$work/tiny-hosts.raw" "$work/tiny-local.raw" \
      || fail "tiny: frames through $H1 and $H2 differ from a single-host run"
    check_clean $CLEAN_BOUND_S
    echo "tiny turbo pipeline on $H1 and $H2 equals the single-host run"
    ;;
  worker-killed|link-cut|rank0-killed|orted-killed)
    start_stream hosts="$H1,$H2"
    wait_log "worker rank 2 is pid" 30
    check_worker_host 1 "$H1"
    check_worker_host 2 "$H2"
    # Frames have gone round before the fault.
    sleep 1
    read -r pid _ <<<"$(worker_of 2)"
    t0=$(now_ms)
    case $CASE in
      orted-killed)
        for p in $(ip netns pids "$H2"); do
          [ "$(cat /proc/$p/comm 2>/dev/null)" = orted ] && orted=$p
        done
        kill -KILL "$orted"
        expect_culprit "$t0" "worker rank 2 (pid $pid on $H2"
        check_clean $CLEAN_BOUND_S
        ;;
      worker-killed)
        kill -KILL "$pid"
        expect_culprit "$t0" "worker rank 2 (pid $pid on $H2"
        check_clean $CLEAN_BOUND_S
        ;;
      link-cut)
        ip link set "$H2-l" down
        expect_culprit "$t0" "worker rank 2 (pid $pid on $H2"
        # The worker cut off sees rank 0 go silent and leaves; the Open MPI
        # daemon there, holding data it cannot deliver, only when TCP gives
        # its connection up.
        deadline=$(($(now_ms) + ERROR_BOUND_MS + EXIT_BOUND_MS))
        while [ -d "/proc/$pid" ]; do
          [ "$(now_ms)" -lt $deadline ] || fail "worker rank 2 (pid $pid)" \
            "on the cut-off host still runs"
          sleep $POLL_S
        done
        echo "worker rank 2 on the cut-off host left after" \
          "$(($(now_ms) - t0)) ms"
        check_clean $CLEAN_CUT_BOUND_S
        ;;
      rank0-killed)
        read -r pid1 _ <<<"$(worker_of 1)"
        # $gl_pid is timeout(1); rank 0 is its child.
        read -r rank0 _ <"/proc/$gl_pid/task/$gl_pid/children"
        [ "$(cat "/proc/$rank0/comm")" = gst-launch-1.0 ] \
          || fail "rank 0 is not the child of $gl_pid"
        kill -KILL "$rank0"
        wait "$gl_pid" 2>/dev/null
        gl_pid=""
        deadline=$((t0 + ERROR_BOUND_MS))
        while [ -d "/proc/$pid" ] || [ -d "/proc/$pid1" ]; do
          [ "$(now_ms)" -lt $deadline ] || fail "workers still run" \
            "$ERROR_BOUND_MS ms after rank 0 was killed"
          sleep $POLL_S
        done
        echo "both workers left $(($(now_ms) - t0)) ms after rank 0 was killed"
        check_clean $CLEAN_BOUND_S
        ;;
    esac
    ;;
  unreachable|unresolvable)
    if [ "$CASE" = unreachable ]; then
      bad=$PP_CLUSTER_UNUSED
      set -- hosts="$H1,$bad"
    else
      bad=${PP_CLUSTER_RANK0%-*}-nowhere
      printf '%s slots=1\n%s slots=1\n' "$H1" "$bad" >"$work/hostfile"
      set -- hostfile="$work/hostfile"
    fi
    t0=$(now_ms)
    start_stream "$@"
    if [ "$CASE" = unreachable ]; then
      expect_error "$t0" "could not start" "$bad"
    else
      expect_error "$t0" "does not resolve" "$bad"
    fi
    check_clean $CLEAN_BOUND_S
    ;;
  *)
    echo "unknown case '$CASE'" >&2
    exit 2
    ;;
esac
