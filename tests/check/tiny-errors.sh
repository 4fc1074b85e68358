#!/bin/sh
# A broken pipeline model must stop the element with an error that names
# the file and the reason, in bounded time.
# Usage: tiny-errors.sh PPDIFFUSE_TOOL
set -eu
TOOL=$1
LIMIT_S=60
KILL_AFTER_S=10
# Highest signal number on Linux (SIGRTMAX).
SIGNAL_MAX=64
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$TOOL" make-tiny --kind turbo --out "$work/model" --seed 1 >/dev/null

# Runs the element on MODEL with EXTRA settings; expects failure and an
# error containing NEEDLE.
expect_error() {
  model=$1 needle=$2
  shift 2
  # The status of the timed command itself: 0 accepted, 124 or 137 hung
  # (timeout's TERM, then KILL), 128 + N killed by signal N; gst-launch
  # itself fails with 1 or 255.
  status=0
  timeout --kill-after="$KILL_AFTER_S" "$LIMIT_S" gst-launch-1.0 -q \
      videotestsrc num-buffers=2 ! video/x-raw,format=RGB,width=32,height=24 \
      ! ppdiffuse ranks=2 steps=2 timeout-ms=5000 model="$model" "$@" \
      ! fakesink > "$work/out.txt" 2>&1 || status=$?
  case $status in
    0)
      echo "the element accepted a broken model ($needle)" >&2
      exit 1 ;;
    124|137)
      echo "gst-launch hung instead of failing ($needle)" >&2
      exit 1 ;;
  esac
  if [ "$status" -gt 128 ] && [ "$status" -le $((128 + SIGNAL_MAX)) ]; then
    echo "gst-launch died of signal $((status - 128)) instead of failing" \
      "($needle)" >&2
    exit 1
  fi
  if ! grep -q "$needle" "$work/out.txt"; then
    echo "the error does not mention '$needle':" >&2
    cat "$work/out.txt" >&2
    exit 1
  fi
  grep -m1 "ERROR" "$work/out.txt" || true
}

embeds="prompt-embeds=$work/model/prompt_embeds.npy"
expect_error "$work/model" "needs prompt-embeds"
expect_error "$work/nowhere" "neither builtin"
expect_error "$work/model" "steps" "$embeds" "t-index-list=1,2,3"

# Truncated UNet weights: the workers refuse the plan, naming the file.
unet="$work/model/unet/diffusion_pytorch_model.safetensors"
head -c 4000 "$unet" > "$work/cut" && mv "$work/cut" "$unet"
expect_error "$work/model" "diffusion_pytorch_model.safetensors" "$embeds"

echo "broken models give clear errors"
