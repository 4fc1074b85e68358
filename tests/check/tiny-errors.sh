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
  # Not -q: the element's progress messages show whether it spawned.
  timeout --kill-after="$KILL_AFTER_S" "$LIMIT_S" gst-launch-1.0 \
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

# The last error's output also contains NEEDLE.
expect_also() {
  if ! grep -qF "$1" "$work/out.txt"; then
    echo "the error does not also mention '$1':" >&2
    cat "$work/out.txt" >&2
    exit 1
  fi
}

# The last error came before any worker was spawned.
expect_no_spawn() {
  if grep -q "starting [0-9]* workers" "$work/out.txt"; then
    echo "workers were spawned before the error ($1):" >&2
    cat "$work/out.txt" >&2
    exit 1
  fi
}

embeds="prompt-embeds=$work/model/prompt_embeds.npy"
expect_error "$work/model" "needs a prompt: set prompt or prompt-embeds"
expect_also "(this model has $work/model/prompt_embeds.npy: $embeds)"
expect_no_spawn "no prompt"
expect_error "$work/nowhere" "'$work/nowhere' does not exist"
expect_also "builtin:stamp, builtin:anisotropic, a diffusers pipeline directory (model_index.json, unet/, vae/, scheduler/) or a single-file checkpoint"
expect_no_spawn "missing model"
mkdir "$work/empty"
expect_error "$work/empty" "has no model_index.json and no unet/"
expect_error builtin:anisotropic "built-in models take no prompt" \
    "prompt=a cat"
expect_no_spawn "prompt on a built-in model"
expect_error builtin:stamp \
    "prompt-embeds '$work/model/prompt_embeds.npy': built-in models take no prompt" \
    "$embeds"
expect_no_spawn "prompt-embeds on a built-in model"
expect_error "$work/model" "steps" "$embeds" "t-index-list=1,2,3"

# A unet/ of another class is named, before its keys fail one by one.
cp -r "$work/model" "$work/uncond"
sed -i 's/"UNet2DConditionModel"/"UNet2DModel"/' "$work/uncond/unet/config.json"
expect_error "$work/uncond" "holds a UNet2DModel (its config.json's _class_name); ppdiffuse runs UNet2DConditionModel" "$embeds"
expect_no_spawn "a unet/ of another class"

# A vae/ of a class ppdiffuse does not run is named with the classes that
# run, before its keys fail one by one.
cp -r "$work/model" "$work/kl"
printf '{"_class_name": "AsymmetricAutoencoderKL", "latent_channels": 4}\n' \
    > "$work/kl/vae/config.json"
expect_error "$work/kl" "the VAE class is AsymmetricAutoencoderKL" \
    "prompt-embeds=$work/kl/prompt_embeds.npy"
expect_also "runs AutoencoderTiny (TAESD) and AutoencoderKL"

# A default run says nothing about CUDA on stderr, whether or not the
# build has it and the machine a GPU.
env -u GST_DEBUG -u PPDIFFUSE_DEBUG -u G_MESSAGES_DEBUG \
    timeout --kill-after="$KILL_AFTER_S" "$LIMIT_S" gst-launch-1.0 -q \
    videotestsrc num-buffers=1 ! video/x-raw,format=RGB,width=32,height=24 \
    ! ppdiffuse ranks=1 steps=1 model=builtin:stamp ! fakesink \
    > /dev/null 2> "$work/err.txt"
gst-launch-1.0 -q videotestsrc num-buffers=1 \
    ! video/x-raw,format=RGB,width=32,height=24 ! pngenc \
    ! filesink location="$work/in.png"
env -u GST_DEBUG -u PPDIFFUSE_DEBUG -u G_MESSAGES_DEBUG \
    "$TOOL" img2img --model "$work/model" \
    --prompt-embeds "$work/model/prompt_embeds.npy" --in "$work/in.png" \
    --out "$work/out.png" --strength 0.5 --seed 1 --steps 1 \
    > /dev/null 2>> "$work/err.txt"
if grep -Ei "cuda|no GPU" "$work/err.txt"; then
  echo "a default run talks about CUDA on stderr" >&2
  exit 1
fi

# Chunk lanes with slots too small for a chunk head: the start fails,
# naming the variable, before anything is spawned.
export PPDIFFUSE_LANE_SLOT_BYTES=1000
expect_error "$work/model" \
    "PPDIFFUSE_LANE_SLOT_BYTES=1000: expected a number of bytes" "$embeds"
unset PPDIFFUSE_LANE_SLOT_BYTES

# Truncated UNet weights: the workers refuse the plan, naming the file.
unet="$work/model/unet/diffusion_pytorch_model.safetensors"
head -c 4000 "$unet" > "$work/cut" && mv "$work/cut" "$unet"
expect_error "$work/model" "diffusion_pytorch_model.safetensors" "$embeds"

echo "broken models give clear errors"
