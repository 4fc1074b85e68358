#!/bin/sh
# ppdiffuse demo: noisy colour bars, input | output side by side.
#
#   pipelines/demo.sh OUTDIR
#
# Writes OUTDIR/demo.ogv (3 s of 640x240 Theora) and OUTDIR/frame-NN.png
# (two frames a second).  Left half: the input, SMPTE bars drifting right
# with 20 % television snow blended in.  Right half: the same frame after
# 8 Perona-Malik steps (builtin:anisotropic, kappa 40), 4 on each of 2
# workers.  The snow is smoothed away; the bar edges stay sharp.
#
# Needs the plugin and the worker: ./setup.sh demo sets GST_PLUGIN_PATH_1_0
# and PPDIFFUSE_WORKER for the build tree (and OMPI_ALLOW_RUN_AS_ROOT*
# when run as root).
set -eu

if [ $# -ne 1 ]; then
  echo "usage: $0 OUTDIR" >&2
  exit 2
fi
mkdir -p "$1"
OUT=$(cd "$1" && pwd)

RANKS=2
STEPS=8
MODEL="builtin:anisotropic?kappa=40"
FRAMES=90                 # 3 s at 30 fps
NOISE=0.2                 # alpha of the snow layer
LIMIT_S=120               # a hang becomes a failure

if ! gst-inspect-1.0 ppdiffuse >/dev/null 2>&1; then
  echo "demo: GStreamer cannot find the ppdiffuse element;" \
    "set GST_PLUGIN_PATH_1_0 to the build's gst/ppdiffuse folder" >&2
  exit 1
fi

rm -f "$OUT/demo.ogv" "$OUT"/frame-*.png

# noisy: bars + snow → tee t; t feeds the left half directly and the right
# half through ppdiffuse; mix puts them side by side and tee o writes both
# the video and the PNG frames.
timeout --kill-after=10 "$LIMIT_S" gst-launch-1.0 -q \
  compositor name=noisy sink_1::alpha="$NOISE" \
    ! video/x-raw,format=RGBA,width=320,height=240,framerate=30/1 \
    ! tee name=t \
  videotestsrc num-buffers="$FRAMES" pattern=smpte horizontal-speed=2 \
    ! video/x-raw,width=320,height=240,framerate=30/1 ! noisy.sink_0 \
  videotestsrc num-buffers="$FRAMES" pattern=snow \
    ! video/x-raw,width=320,height=240,framerate=30/1 ! noisy.sink_1 \
  compositor name=mix sink_1::xpos=320 \
    ! video/x-raw,width=640,height=240,framerate=30/1 ! tee name=o \
  t. ! queue ! mix.sink_0 \
  t. ! queue ! ppdiffuse ranks="$RANKS" steps="$STEPS" model="$MODEL" \
    ! mix.sink_1 \
  o. ! queue ! videoconvert ! theoraenc ! oggmux \
    ! filesink location="$OUT/demo.ogv" \
  o. ! queue ! videorate ! video/x-raw,framerate=2/1 ! videoconvert ! pngenc \
    ! multifilesink location="$OUT/frame-%02d.png"

PNGS=$(find "$OUT" -maxdepth 1 -name 'frame-*.png' | wc -l)
if [ ! -s "$OUT/demo.ogv" ] || [ "$PNGS" -eq 0 ]; then
  echo "demo: the pipeline ended but wrote no output to $OUT" >&2
  exit 1
fi

echo "ppdiffuse demo (left: input, right: ppdiffuse ranks=$RANKS" \
  "steps=$STEPS model=$MODEL):"
echo "  video:  $OUT/demo.ogv"
echo "  frames: $OUT/frame-00.png … frame-$(printf %02d $((PNGS - 1))).png"
