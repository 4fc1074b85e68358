#!/bin/sh
# A pipeline assembled by settings alone: model= (a tiny SD1.5 pipeline),
# vae= (an AutoencoderKL kept elsewhere) and lora= (two LoRA files at two
# scales, tests/data/lora): through a 2-worker mesh the element's frames
# equal ppdiffuse-tool img2img's with --vae and --lora, frame for frame,
# and differ from the frames without the LoRA.  A LoRA file that is not
# there, or whose pairs do not fit the UNet's weights, is named before any
# worker starts.
# Usage: lora-setting.sh PPDIFFUSE_TOOL LORA_DATA_DIR
set -eu
TOOL=$1 LORA=$2
LIMIT_S=120
KILL_AFTER_S=10
FRAMES=2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$TOOL" make-tiny --kind sd15 --out "$work/model" --seed 4 >/dev/null
"$TOOL" make-tiny --kind turbo --out "$work/turbo" --seed 4 >/dev/null
"$TOOL" make-tiny --kind vae-kl --out "$work/kl" --seed 6 >/dev/null
embeds="$work/model/prompt_embeds.npy"
lora="$LORA/lora-kohya.safetensors:0.8,$LORA/lora-peft.safetensors:0.5"

# info describes a LoRA file.
"$TOOL" info "$LORA/lora-kohya.safetensors" > "$work/info.txt"
grep -q "unet 7 pairs, text_encoder 3 pairs, rank 4, kohya layout" \
  "$work/info.txt"
grep -q "runs: *yes: lora=" "$work/info.txt"
"$TOOL" info "$LORA/lora-peft.safetensors" \
  | grep -q "unet 4 pairs, text_encoder 1 pair, ranks 2–3, diffusers layout"

timeout "$LIMIT_S" gst-launch-1.0 -q videotestsrc num-buffers="$FRAMES" \
  pattern=ball ! video/x-raw,format=RGB,width=48,height=40 \
  ! pngenc ! multifilesink location="$work/in-%02d.png"

element() {  # OUT_PREFIX SETTINGS...
  prefix=$1
  shift
  timeout --kill-after="$KILL_AFTER_S" "$LIMIT_S" gst-launch-1.0 -q \
    multifilesrc location="$work/in-%02d.png" index=0 \
    stop-index=$((FRAMES - 1)) caps=image/png,framerate=25/1 \
    ! pngdec ! videoconvert ! video/x-raw,format=RGB \
    ! ppdiffuse ranks=2 steps=2 seed=5 prompt-embeds="$embeds" "$@" \
    ! videoconvert ! video/x-raw,format=RGB ! multifilesink \
      location="$prefix-%02d.rgb"
}

element "$work/element" model="$work/model" vae="$work/kl" lora="$lora"
element "$work/plain" model="$work/model" vae="$work/kl"
same_as_plain=0
i=0
while [ $i -lt "$FRAMES" ]; do
  f=$(printf %02d $i)
  "$TOOL" img2img --model "$work/model" --vae "$work/kl" --lora "$lora" \
    --in "$work/in-$f.png" --out "$work/tool-$f.png" \
    --prompt-embeds "$embeds" --steps 2 --seed 5 >/dev/null
  timeout "$LIMIT_S" gst-launch-1.0 -q filesrc location="$work/tool-$f.png" \
    ! pngdec ! videoconvert ! video/x-raw,format=RGB \
    ! filesink location="$work/tool-$f.rgb"
  cmp "$work/element-$f.rgb" "$work/tool-$f.rgb"
  if cmp -s "$work/element-$f.rgb" "$work/plain-$f.rgb"; then
    same_as_plain=$((same_as_plain + 1))
  fi
  i=$((i + 1))
done
if [ "$same_as_plain" = "$FRAMES" ]; then
  echo "the LoRA changed no frame" >&2
  exit 1
fi
echo "element: model=, vae= and lora= give ppdiffuse-tool's frames ($FRAMES)"

expect_error() {
  needle=$1
  shift
  status=0
  element "$work/bad" "$@" > "$work/err.txt" 2>&1 || status=$?
  if [ "$status" = 0 ] || ! grep -qF "$needle" "$work/err.txt"; then
    echo "expected an error naming '$needle' (status $status):" >&2
    cat "$work/err.txt" >&2
    exit 1
  fi
}
no_worker() {
  if grep -q "ppdiffuse rank [1-9]\|worker rank [1-9]" "$work/err.txt"; then
    echo "a worker started for $1" >&2
    cat "$work/err.txt" >&2
    exit 1
  fi
}
expect_error "lora: " model="$work/model" lora="$work/nowhere.safetensors:0.5"
expect_error "nowhere.safetensors" model="$work/model" \
  lora="$work/nowhere.safetensors:0.5"
no_worker "a LoRA file that is not there"
expect_error "lora-kohya.safetensors" model="$work/turbo" \
  prompt-embeds="$work/turbo/prompt_embeds.npy" \
  lora="$LORA/lora-kohya.safetensors"
expect_error "does not fit weight" model="$work/turbo" \
  prompt-embeds="$work/turbo/prompt_embeds.npy" \
  lora="$LORA/lora-kohya.safetensors"
no_worker "a LoRA that does not fit the UNet"
echo "errors name a missing LoRA file and one that fits no UNet weight," \
  "before any worker starts"
