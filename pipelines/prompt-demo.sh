#!/bin/sh
# ppdiffuse from a text prompt: a tiny random-weight diffusers pipeline
# (ppdiffuse-tool make-tiny: tokenizer, text encoder, UNet, TAESD,
# scheduler) restyles a moving ball from a prompt, by default a weighted
# blend of two (pipelines/live-control.py turns knobs while playing).
#
#   pipelines/prompt-demo.sh OUTDIR ["PROMPT"]
#
# Writes OUTDIR/model (the tiny pipeline) and OUTDIR/frame-NN.png.  The
# weights are random, so the pictures are noise-like: what the demo shows
# is the whole path from text to frames — rank 0 tokenizes and encodes the
# prompt, the states go to the workers with the first chunk, every worker
# runs its steps — as it runs with a real pipeline directory in place of
# the tiny one.
#
# Needs ppdiffuse-tool on PATH or in $PPDIFFUSE_TOOL, and the plugin and
# the worker as for pipelines/demo.sh.
set -eu

if [ $# -lt 1 ] || [ $# -gt 2 ]; then
  echo "usage: $0 OUTDIR [\"PROMPT\"]" >&2
  exit 2
fi
mkdir -p "$1"
OUT=$(cd "$1" && pwd)
PROMPT=${2:-"a watercolor city:0.7|neon night:0.3"}
TOOL=${PPDIFFUSE_TOOL:-ppdiffuse-tool}
FRAMES=10
LIMIT_S=120               # a hang becomes a failure

"$TOOL" make-tiny --kind turbo --out "$OUT/model" --seed 1 >/dev/null
rm -f "$OUT"/frame-*.png
timeout "$LIMIT_S" gst-launch-1.0 -q videotestsrc num-buffers="$FRAMES" \
  pattern=ball ! video/x-raw,format=RGB,width=128,height=96 \
  ! ppdiffuse ranks=2 steps=2 model="$OUT/model" prompt="$PROMPT" \
      strength=0.6 \
  ! videoconvert ! pngenc ! multifilesink location="$OUT/frame-%02d.png"
echo "prompt-demo: $FRAMES frames from \"$PROMPT\" in $OUT"
