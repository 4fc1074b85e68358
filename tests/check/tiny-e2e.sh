#!/bin/sh
# A make-tiny pipeline model through a real 2-worker mesh must give, for a
# frame, exactly what ppdiffuse-tool img2img gives for the same image and
# settings.  Usage: tiny-e2e.sh PPDIFFUSE_TOOL KIND STEPS [EXTRA element/tool
# settings as NAME=VALUE ...]
set -eu
TOOL=$1 KIND=$2 STEPS=$3
shift 3
LIMIT_S=120
# One BLAS thread on both sides: the same summation order, bit-equal results.
export OPENBLAS_NUM_THREADS=1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$TOOL" make-tiny --kind "$KIND" --out "$work/model" --seed 3 >/dev/null
timeout "$LIMIT_S" gst-launch-1.0 -q videotestsrc num-buffers=1 pattern=smpte \
  ! video/x-raw,format=RGB,width=44,height=28 ! pngenc \
  ! filesink location="$work/in.png"

element_args="" tool_args=""
for setting in "$@"; do
  name=${setting%%=*} value=${setting#*=}
  element_args="$element_args $name=$value"
  tool_args="$tool_args --$name $value"
done

# shellcheck disable=SC2086  # the settings are lists of words
timeout "$LIMIT_S" gst-launch-1.0 -q filesrc location="$work/in.png" \
  ! pngdec ! videoconvert ! video/x-raw,format=RGB \
  ! ppdiffuse ranks=2 steps="$STEPS" model="$work/model" \
      prompt-embeds="$work/model/prompt_embeds.npy" $element_args \
  ! videoconvert ! video/x-raw,format=RGB ! pngenc \
  ! filesink location="$work/element.png"
# shellcheck disable=SC2086
timeout "$LIMIT_S" "$TOOL" img2img --model "$work/model" --in "$work/in.png" \
  --out "$work/tool.png" --prompt-embeds "$work/model/prompt_embeds.npy" \
  --steps "$STEPS" $tool_args

for f in in element tool; do
  timeout "$LIMIT_S" gst-launch-1.0 -q filesrc location="$work/$f.png" \
    ! pngdec ! videoconvert ! video/x-raw,format=RGB \
    ! filesink location="$work/$f.rgb"
done
if cmp -s "$work/in.rgb" "$work/element.rgb"; then
  echo "the element returned its input unchanged" >&2
  exit 1
fi
if ! cmp "$work/element.rgb" "$work/tool.rgb"; then
  echo "element and ppdiffuse-tool img2img differ for $KIND" >&2
  exit 1
fi
echo "element output equals ppdiffuse-tool img2img ($KIND, $STEPS steps)"
