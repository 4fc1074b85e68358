#!/bin/sh
# Once warm, an img2img frame allocates nothing: ppdiffuse-tool img2img
# --frames runs encode, steps (the sample kept on the device) and decode as
# the element and its workers do, and reports the device bytes and, with the
# allocation counter preloaded, the heap bytes each frame allocated (and
# how many of them OpenBLAS's small-matrix sgemm kernels allocated inside
# the library, per call, which no caller can avoid).  Every frame after the
# first must report 0 device bytes and no heap bytes but OpenBLAS's, on cpu
# and on cpu-strict, at a 512x512 frame (64x64 latents) and at a ragged
# frame the VAE resizes; with the temporal feature bank, every frame once
# the bank is full.
# Usage: frame-allocations.sh PPDIFFUSE_TOOL ALLOC_COUNT_SO
set -eu
TOOL=$1 COUNTER=$2
LIMIT_S=240
FRAMES=3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# check SIZE BACKEND FRAMES WARM [img2img options]: frames from WARM on
# allocate nothing.
check() {
  size=$1 backend=$2 frames=$3 warm=$4
  shift 4
  LD_PRELOAD=$COUNTER timeout "$LIMIT_S" "$TOOL" img2img \
    --model "$work/model" --prompt-embeds "$work/model/prompt_embeds.npy" \
    --in "$work/in-$size.png" --out "$work/out.png" --steps 2 \
    --frames "$frames" --backend "$backend" "$@" 2> "$work/log"
  cat "$work/log"
  n=$(grep -c '^frame [0-9]*: [0-9]* device bytes allocated, [0-9]* host bytes (' \
    "$work/log" || true)
  if [ "$n" -ne "$frames" ]; then
    echo "expected $frames frame reports with host bytes ($size, $backend $*)" >&2
    exit 1
  fi
  if grep '^frame [0-9]*:' "$work/log" \
      | awk -v warm="$warm" '{ n = $2; sub(":", "", n) } n + 0 >= warm' | grep -Ev \
      ': 0 device bytes allocated, ([0-9]+) host bytes \(\1 of them by OpenBLAS\)$' >&2
  then
    echo "a warm frame allocated memory ($size, $backend $*)" >&2
    exit 1
  fi
}

"$TOOL" make-tiny --kind turbo --out "$work/model" --seed 4 >/dev/null
for size in 512x512 200x120; do
  timeout "$LIMIT_S" gst-launch-1.0 -q videotestsrc num-buffers=1 \
    pattern=ball ! video/x-raw,format=RGB,width="${size%x*}",height="${size#*x}" \
    ! pngenc ! filesink location="$work/in-$size.png"
  for backend in cpu cpu-strict; do
    check "$size" "$backend" "$FRAMES" 1
  done
done
# With the temporal feature bank of 2 frames: the third frame is the
# first the bank merges, and the frames after it allocate nothing either.
for backend in cpu cpu-strict; do
  check 200x120 "$backend" 5 3 --temporal feature-bank --bank-frames 2
done
echo "warm img2img frames allocate nothing (cpu, cpu-strict; 512x512, 200x120;"\
  "200x120 with a feature bank)"
