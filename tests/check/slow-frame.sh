#!/bin/sh
# Slow is not dead, on any machine: tiny-e2e.sh on a frame sized so that
# one UNet step of the tiny turbo model takes about $TARGET_MS here, longer
# than the element's timeout-ms ($PP_TEST_TIMEOUT_MS), so that the
# heartbeats go on beside a step that computes.  A fixed size does not
# hold across machines: 1024x576 took 0.75 s a step on one and 0.35 s on
# another, under timeout-ms there, which no longer tested what this is
# for.  So the tool first times the model's steps at 1024x576 (one step
# and three: their difference is two steps, without the start, the model's
# load and the VAE), and the frame is scaled to the target from that
# step's time.  A step's time grows about as the square of the frame's
# area (the tiny model attends over every latent pixel: 62, 338 and
# 1263 ms a step at 724x408, 1024x576 and 1448x816 on one machine), so
# each side by the fourth root of the target over that time.
# Usage: slow-frame.sh PPDIFFUSE_TOOL TINY_E2E STEPS FRAMES [SETTINGS ...],
# the settings as tiny-e2e.sh takes them.
set -eu
TOOL=$1 TINY_E2E=$2 STEPS=$3 FRAMES=$4
shift 4
# 1.5× timeout-ms alone: loaded twice as slow (the sanitizer builds
# compile beside the suite), a step still stays under the 3.1 s the
# warm-up pass's first, unmeasured step is allowed.
TARGET_MS=$(( ${PP_TEST_TIMEOUT_MS:-500} * 3 / 2 ))
LIMIT_S=120
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$TOOL" make-tiny --kind turbo --out "$work/model" --seed 3 >/dev/null
timeout "$LIMIT_S" gst-launch-1.0 -q videotestsrc num-buffers=1 \
  pattern=ball ! video/x-raw,format=RGB,width=1024,height=576 \
  ! pngenc ! filesink location="$work/in.png"

# Milliseconds the tool takes for $1 steps at full strength.
tool_ms() {
  start=$(date +%s%N)
  timeout "$LIMIT_S" "$TOOL" img2img --model "$work/model" \
    --in "$work/in.png" --out "$work/out.png" \
    --prompt-embeds "$work/model/prompt_embeds.npy" --steps "$1" \
    --strength 1.0 >/dev/null
  echo $(( ($(date +%s%N) - start) / 1000000 ))
}

one=$(tool_ms 1)
three=$(tool_ms 3)
step_ms=$(( (three - one) / 2 ))
if [ "$step_ms" -lt 10 ]; then
  echo "slow-frame: a step took ${step_ms} ms at 1024x576 (1 step" \
    "${one} ms, 3 steps ${three} ms): not a time to scale by" >&2
  exit 1
fi
# Each side by the fourth root of the target over the step's time, in
# multiples of 64 pixels, between 512x288 and 2048x1152 (16:9 kept).
size=$(python3 -c "
k = ($TARGET_MS / $step_ms) ** 0.25
w = min(2048, max(512, round(1024 * k / 64) * 64))
print('%dx%d' % (w, w * 9 // 16 // 16 * 16))")
echo "slow-frame: a step took ${step_ms} ms at 1024x576 here; the frame" \
  "is $size, for about ${TARGET_MS} ms a step"
exec "$TINY_E2E" "$TOOL" turbo "$STEPS" "$size" "$FRAMES" "$@"
