#!/bin/sh
# A plain gst-launch pipeline through ppdiffuse must run to EOS and exit 0.
set -eu
# Bounded: a hang becomes a failure.
LIMIT_S=120
exec timeout --kill-after=10 "$LIMIT_S" gst-launch-1.0 -q \
  videotestsrc num-buffers=40 ! video/x-raw,format=BGRx,width=96,height=72 \
  ! ppdiffuse ranks=2 steps=4 ! fakesink
