#!/bin/sh
# A single-file checkpoint in the original Stable Diffusion layout (tiny
# SD 1.x and SD 2.x ones, tests/data/single-file) runs as the model, its
# architecture named by config=DIR: through a 2-worker mesh the element's
# frames equal ppdiffuse-tool img2img's frame for frame, with prompt-embeds
# and with a text prompt (the checkpoint's text encoder, the config
# folder's tokenizer).  Without config= the family's released
# configurations apply, which the tiny checkpoint does not fit: the error
# names its keys.  Usage: checkpoint-setting.sh PPDIFFUSE_TOOL DATA_DIR
set -eu
TOOL=$1 DATA=$2/single-file
LIMIT_S=120
KILL_AFTER_S=10
FRAMES=2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$TOOL" info "$DATA/sd15-tiny.safetensors" \
  | grep -q "single-file checkpoint, original layout (SD 1.x"
"$TOOL" info "$DATA/turbo-tiny.safetensors" \
  | grep -q "single-file checkpoint, original layout (SD 2.x / SD-Turbo"

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
    ! ppdiffuse ranks=2 steps=2 seed=5 "$@" \
    ! videoconvert ! video/x-raw,format=RGB ! multifilesink \
      location="$prefix-%02d.rgb"
}

# FAMILY SCHEDULE_SETTING PROMPT: the element's frames against the tool's,
# with the family's prompt-embeds (PROMPT "") or a text prompt.
same_as_tool() {
  fam=$1 schedule=$2 prompt=$3
  model="$DATA/$fam-tiny.safetensors?config=$DATA/$fam-config"
  embeds="$DATA/$fam-config/prompt_embeds.npy"
  kind=${prompt:+prompt}
  if [ -n "$prompt" ]; then
    element "$work/$fam" model="$model" "$schedule" prompt="$prompt"
  else
    element "$work/$fam" model="$model" "$schedule" prompt-embeds="$embeds"
  fi
  i=0
  while [ $i -lt "$FRAMES" ]; do
    f=$(printf %02d $i)
    if [ -n "$prompt" ]; then
      set -- --prompt "$prompt"
    else
      set -- --prompt-embeds "$embeds"
    fi
    "$TOOL" img2img --model "$model" --in "$work/in-$f.png" \
      --out "$work/tool-$f.png" --steps 2 --seed 5 \
      "--${schedule%%=*}" "${schedule#*=}" "$@" >/dev/null
    timeout "$LIMIT_S" gst-launch-1.0 -q filesrc \
      location="$work/tool-$f.png" ! pngdec ! videoconvert \
      ! video/x-raw,format=RGB ! filesink location="$work/tool-$f.rgb"
    cmp "$work/$fam-$f.rgb" "$work/tool-$f.rgb"
    i=$((i + 1))
  done
  echo "element: $fam checkpoint with config= (${kind:-prompt-embeds})" \
    "gives ppdiffuse-tool's frames"
}

same_as_tool sd15 t-index-list=32,45 ""
same_as_tool turbo strength=0.8 ""
same_as_tool sd15 t-index-list=32,45 "a watercolor city"
same_as_tool turbo strength=0.8 "a watercolor city"

status=0
element "$work/bad" model="$DATA/sd15-tiny.safetensors" \
  prompt-embeds="$DATA/sd15-config/prompt_embeds.npy" t-index-list=32,45 \
  > "$work/err.txt" 2>&1 || status=$?
if [ "$status" = 0 ] || ! grep -q "sd15-tiny.safetensors: .*map to no diffusers weight\|the model expects" "$work/err.txt"; then
  echo "expected the released configurations to refuse the tiny checkpoint" >&2
  cat "$work/err.txt" >&2
  exit 1
fi
echo "without config=: the family's released configurations, named mismatch"
