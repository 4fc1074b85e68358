#!/bin/sh
# gst-launch pipelines through ppdiffuse, one per caps format the element
# accepts: random raw frames (alpha, padding and row padding included) go
# through builtin:stamp on a 2-worker mesh; the output must be exactly the
# input stamped by every step, once and in order, in R, G and B, with
# every other byte as it came in.
set -eu
# Bounded: a hang becomes a failure.
LIMIT_S=120
KILL_AFTER_S=10
# An odd width: RGB rows then end in padding bytes.
WIDTH=29
HEIGHT=17
FRAMES=6
STEPS=3
SEED=7
CHECKER="$(dirname "$0")/stamp-raw.py"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

for format in RGBA RGBx BGRx RGB; do
  python3 "$CHECKER" make "$format" "$WIDTH" "$HEIGHT" "$FRAMES" "$SEED" \
    "$work/in.raw"
  lower=$(echo "$format" | tr '[:upper:]' '[:lower:]')
  timeout --kill-after="$KILL_AFTER_S" "$LIMIT_S" gst-launch-1.0 -q \
    filesrc location="$work/in.raw" \
    ! rawvideoparse format="$lower" width="$WIDTH" height="$HEIGHT" \
      framerate=25/1 \
    ! ppdiffuse ranks=2 steps="$STEPS" model=builtin:stamp \
    ! filesink location="$work/out.raw"
  python3 "$CHECKER" check "$format" "$WIDTH" "$HEIGHT" "$FRAMES" "$STEPS" \
    "$work/in.raw" "$work/out.raw"
done
