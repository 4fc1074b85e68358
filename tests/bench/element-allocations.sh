#!/bin/sh
# Heap bytes a frame allocates in the element's process (rank 0: capture,
# encode, decode, GStreamer) and in each worker (steps, chunk traffic),
# after warm-up: a 2-worker mesh runs a make-tiny SD-Turbo pipeline at
# 512x512 for FEW and then MANY frames with the allocation counter
# (alloc-count.c) preloaded into every process; each process reports its
# totals at exit, and the difference over MANY - FEW frames is what a warm
# frame costs.  Reports only.
# Usage: element-allocations.sh PPDIFFUSE_TOOL ALLOC_COUNT_SO [FEW MANY]
set -eu
TOOL=$1 COUNTER=$2 FEW=${3:-4} MANY=${4:-12}
LIMIT_S=300
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$TOOL" make-tiny --kind turbo --out "$work/model" --seed 4 >/dev/null
run() {  # FRAMES -> per-process totals in $work/totals-FRAMES
  PP_ALLOC_COUNT_REPORT=1 LD_PRELOAD=$COUNTER timeout "$LIMIT_S" \
    gst-launch-1.0 -q videotestsrc num-buffers="$1" pattern=ball \
    ! video/x-raw,format=RGB,width=512,height=512,framerate=25/1 \
    ! ppdiffuse ranks=2 steps=2 model="$work/model" \
      prompt-embeds="$work/model/prompt_embeds.npy" \
    ! fakesink 2> "$work/log-$1" || { cat "$work/log-$1" >&2; exit 1; }
  grep '^alloc-count ' "$work/log-$1" > "$work/totals-$1" || true
}
run "$FEW"
run "$MANY"
for exe in gst-launch-1.0 ppdiffuse-worker; do
  # Sum over the processes of that name (the two workers together).
  few=$(awk -v e="$exe" '$2 == e { s += $5 } END { print s + 0 }' \
    "$work/totals-$FEW")
  many=$(awk -v e="$exe" '$2 == e { s += $5 } END { print s + 0 }' \
    "$work/totals-$MANY")
  blas_few=$(awk -v e="$exe" '$2 == e { s += $10 } END { print s + 0 }' \
    "$work/totals-$FEW")
  blas_many=$(awk -v e="$exe" '$2 == e { s += $10 } END { print s + 0 }' \
    "$work/totals-$MANY")
  echo "$exe: $(( (many - few) / (MANY - FEW) )) heap bytes a frame" \
    "($(( (blas_many - blas_few) / (MANY - FEW) )) of them by OpenBLAS;" \
    "$(grep -c " $exe " "$work/totals-$MANY") processes)"
done
