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

formats="RGBA RGBx BGRx RGB"
# Under a sanitizer (PP_TEST_SANITIZED): a 3-byte format with padded rows
# and a 4-byte one with its channels swapped; RGBA and RGBx take the same
# paths with other offsets, and every mesh there takes about 15 s.
[ -z "${PP_TEST_SANITIZED:-}" ] || formats="RGB BGRx"
for format in $formats; do
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

# The worker may use every core this test may (Open MPI binds one or two
# spawned processes to a core each unless told not to, and the CPU
# kernels' team, the narrowing of weights and their digest then share one
# core): what the worker says of its CPUs in the handshake, which rank 0
# logs.  Without the oversubscription setting, as a user runs it.
env -u OMPI_MCA_rmaps_base_oversubscribe GST_DEBUG=ppdiffuse:4 GST_DEBUG_NO_COLOR=1 timeout --kill-after="$KILL_AFTER_S" \
  "$LIMIT_S" gst-launch-1.0 -q videotestsrc num-buffers=2 \
  ! video/x-raw,format=RGB,width=16,height=16 \
  ! ppdiffuse ranks=1 steps=2 model=builtin:stamp ! fakesink \
  >"$work/cores.log" 2>&1
want=$(nproc)
for rank in 1; do
  line=$(grep -o "worker rank $rank is pid .*" "$work/cores.log" | head -n 1)
  threads=$(echo "$line" | sed -n 's/.*(cpu: .*, \([0-9]*\)\( of [0-9]*\)\{0,1\} threads.*/\1/p')
  if [ -z "$threads" ] || [ "$threads" != "$want" ]; then
    echo "worker rank $rank may use ${threads:-?} CPUs, this test $want: $line" >&2
    exit 1
  fi
done
echo "the workers may use all $want CPUs"
