#!/bin/sh
# Heap bytes a warm frame allocates, per process and per library, in the
# element's process (rank 0: capture, encode, decode, GStreamer) and in each
# worker (steps, chunk traffic): a 2-worker mesh runs a make-tiny SD-Turbo
# pipeline in gst-launch-1.0 from a live source, with the allocation
# counter (alloc-count.c) preloaded into every process.  Once WARM frames
# have reached the sink, the counter's window opens in rank 0 and in each
# worker (SIGUSR2); it closes FRAMES frames later, TAIL frames before the
# stream ends.  What each library allocated in the window, divided by
# FRAMES, is what a warm frame costs it; start-up, warm-up and teardown
# stay out.
#
# The sink tells the script of each frame (fakesink silent=false,
# gst-launch -v), which costs GStreamer some bytes a frame of its own: a
# second run with identity in place of ppdiffuse measures that alone.
#
# Reports only, unless --check: then it fails when ours (the plugin, the
# worker) allocated anything in the window, in any process, and names where
# (and skips the second run).
# Usage: element-allocations.sh [--check] PPDIFFUSE_TOOL ALLOC_COUNT_SO
#        [SIZE [WARM [FRAMES]]]
set -eu
check=0
if [ "${1:-}" = --check ]; then
  check=1
  shift
fi
TOOL=$1 COUNTER=$2 SIZE=${3:-512} WARM=${4:-30} FRAMES=${5:-60}
TAIL=30
RATE=30                         # frames a second from the live source
WORKERS=2
# The handshake's deadline too: with every allocation counted, a worker's
# start-up took over 4 s on a busy 2-core machine.
TIMEOUT_MS=10000
LIMIT_S=300
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

timeout "$LIMIT_S" "$TOOL" make-tiny --kind turbo --out "$work/model" \
  --seed 4 >/dev/null
# The registry is brought up to date outside the measurement.
timeout "$LIMIT_S" gst-inspect-1.0 ppdiffuse >/dev/null

# gst-launch-1.0 and the workers below process $1 (ps cuts names to 15
# characters).
measured_pids() {
  for child in $(ps -o pid= --ppid "$1"); do
    case $(ps -o comm= -p "$child") in
      gst-launch-1.0 | ppdiffuse-worke) echo "$child" ;;
    esac
    measured_pids "$child"
  done
}

# Opens or closes the window in the $1 + 1 processes below $launcher.
toggle_window() {
  pids=$(measured_pids "$launcher")
  if [ "$(echo "$pids" | wc -w)" -ne $(($1 + 1)) ]; then
    echo "expected rank 0 and $1 workers below pid $launcher, found:" \
      "$pids" >&2
    kill "$launcher"
    exit 1
  fi
  kill -USR2 $pids
}

# measure NAME N_WORKERS ELEMENT [PROPERTY...]: runs the pipeline with
# ELEMENT between the source and the sink; "PROCESS RANK ours B gstreamer B
# ..." per measured process in $work/NAME/windows, the counter's reports
# in $work/NAME/report.
measure() {
  name=$1 n_workers=$2
  shift 2
  dir="$work/$name"
  mkdir -p "$dir/out"
  mkfifo "$dir/sink"
  PP_ALLOC_COUNT_REPORT=1 PP_ALLOC_COUNT_BY_LIBRARY=1 \
    PP_ALLOC_COUNT_WINDOW=1 PP_ALLOC_COUNT_SITES=1000 \
    PP_ALLOC_COUNT_OUT="$dir/out" G_SLICE=always-malloc LD_PRELOAD=$COUNTER \
    timeout "$LIMIT_S" gst-launch-1.0 -v videotestsrc is-live=true \
    num-buffers=$((WARM + FRAMES + TAIL)) pattern=ball \
    ! video/x-raw,format=RGB,width="$SIZE",height="$SIZE",framerate=$RATE/1 \
    ! "$@" ! fakesink silent=false > "$dir/sink" 2> "$dir/log" &
  launcher=$!
  frames=0
  while IFS= read -r line; do
    case $line in
      *"last-message = chain"*)
        frames=$((frames + 1))
        if [ "$frames" -eq "$WARM" ] \
            || [ "$frames" -eq $((WARM + FRAMES)) ]; then
          toggle_window "$n_workers"
        fi ;;
    esac
  done < "$dir/sink"
  if ! wait "$launcher"; then
    cat "$dir/log" >&2
    echo "the pipeline with $1 failed" >&2
    exit 1
  fi
  cat "$dir/out"/* > "$dir/report"
  # Rank 0 and the spawned workers (an MPI rank); the worker rank 0 runs
  # once as a probe before the spawn has none.
  awk '$1 == "alloc-count-window" && ($2 == "gst-launch-1.0" \
      || ($2 == "ppdiffuse-worker" && $6 != "-:")) {
    sub (/:$/, "", $6); $1 = $3 = $4 = $5 = ""; print
  }' "$dir/report" | sort -k2 > "$dir/windows"
  if [ "$(wc -l < "$dir/windows")" -ne $((n_workers + 1)) ] \
      || grep -q -E ' (open|unopened)$' "$dir/windows"; then
    echo "expected a closed window in rank 0 and $n_workers workers, got:" >&2
    cat "$dir/windows" >&2
    exit 1
  fi
}

# The sites of library $4 in the window of process $2 $3 of run $1:
# "  BYTES bytes in CALLS calls < charged frame < caller < theirs", named
# by the object's exports, or by addr2line for ours.
window_sites() {
  report="$work/$1/report"
  pid=$(awk -v e="$2" -v r="$3:" '$1 == "alloc-count-window" && $2 == e \
      && $6 == r { print $4 }' "$report")
  awk -v p="$pid:" -v l="$4:" '$1 == "alloc-count-window-site" \
      && $4 == p && $10 == l' "$report" \
    | while IFS= read -r line; do
      out=$(echo "$line" | sed 's/^[^:]*: //; s/, [a-z]*: .*//')
      for frame in $(echo "$line" | sed 's/^.*, [a-z]*: //; s/ < / /g'); do
        name=${frame##*/}
        case $frame in
          *"("*) ;;             # an exported function: named already
          */libgstppdiffuse*+0x* | */ppdiffuse-*+0x*)
            if command -v addr2line >/dev/null; then
              name=$(addr2line -f -s -e "${frame%+0x*}" "${frame##*+}" \
                | paste -sd@ -)
            fi ;;
        esac
        out="$out < $name"
      done
      echo "  $out"
    done
}

# "WHO: B heap bytes a frame: ours B gstreamer B ..." for each process of
# run $1; with --check, the sites of ours when it allocated.
report() {
  status=0
  while read -r name rank libraries; do
    if [ "$rank" = - ]; then who="rank 0 ($name)"
    else who="worker rank $((rank + 1)) ($name)"; fi
    echo "$libraries" | awk -v who="$who" -v n="$FRAMES" '{
      total = 0; for (i = 2; i <= NF; i += 2) total += $i
      line = who ": " int (total / n) " heap bytes a frame:"
      for (i = 1; i < NF; i += 2) line = line " " $i " " int ($(i + 1) / n)
      print line
    }'
    ours=$(echo "$libraries" | awk '{ print $2 }')
    if [ "$ours" -ne 0 ]; then
      echo "$who: ours allocated $ours heap bytes in $FRAMES warm frames:" >&2
      window_sites "$1" "$name" "$rank" ours >&2
      status=1
    fi
    if [ "$check" -eq 0 ]; then
      for library in gstreamer openmpi other; do
        window_sites "$1" "$name" "$rank" $library | head -8 \
          | sed "s/^/  $library:/"
      done
    fi
  done < "$work/$1/windows"
  return "$status"
}

# timeout-ms: heartbeats (every quarter of it) fall in the window too.
measure ppdiffuse $WORKERS ppdiffuse ranks=$WORKERS steps=2 \
  timeout-ms=$TIMEOUT_MS model="$work/model" \
  prompt-embeds="$work/model/prompt_embeds.npy"
status=0
report ppdiffuse || status=$?
echo "($FRAMES frames of ${SIZE}x$SIZE in the window, after $WARM)"
if [ "$check" -eq 1 ]; then
  [ "$status" -eq 0 ] && echo "warm frames allocate nothing of ours on" \
    "rank 0 and the $WORKERS workers"
  exit "$status"
fi
echo "The measurement alone, identity in place of ppdiffuse:"
measure identity 0 identity
report identity
