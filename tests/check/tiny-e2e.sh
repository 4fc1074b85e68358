#!/bin/sh
# A make-tiny pipeline model through a real 2-worker mesh must give, for
# every frame, exactly what ppdiffuse-tool img2img gives for the same image
# and settings.  Usage: tiny-e2e.sh PPDIFFUSE_TOOL KIND STEPS WxH FRAMES
# [EXTRA element/tool settings as NAME=VALUE ...]
# $PP_TEST_TIMEOUT_MS, when set, is the element's timeout-ms (the sanitizer
# setups set it: a step there takes many times as long).
# $PP_TEST_EXPECT_LOG, when set, is an extended regular expression the
# element run's log (its workers' included) must match.
set -eu
TOOL=$1 KIND=$2 STEPS=$3 SIZE=$4 FRAMES=$5
shift 5
WIDTH=${SIZE%x*} HEIGHT=${SIZE#*x}
LIMIT_S=240
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$TOOL" make-tiny --kind "$KIND" --out "$work/model" --seed 3 >/dev/null
# A moving pattern: every frame differs from the others.
timeout "$LIMIT_S" gst-launch-1.0 -q videotestsrc num-buffers="$FRAMES" \
  pattern=ball ! video/x-raw,format=RGB,width="$WIDTH",height="$HEIGHT" \
  ! pngenc ! multifilesink location="$work/in-%02d.png"

element_args=${PP_TEST_TIMEOUT_MS:+timeout-ms=$PP_TEST_TIMEOUT_MS} tool_args=""
for setting in "$@"; do
  name=${setting%%=*} value=${setting#*=}
  element_args="$element_args $name=$value"
  tool_args="$tool_args --$name $value"
done

# shellcheck disable=SC2086  # the settings are lists of words
timeout "$LIMIT_S" gst-launch-1.0 -q multifilesrc \
  location="$work/in-%02d.png" index=0 stop-index=$((FRAMES - 1)) \
  caps=image/png,framerate=25/1 \
  ! pngdec ! videoconvert ! video/x-raw,format=RGB \
  ! ppdiffuse ranks=2 steps="$STEPS" model="$work/model" \
      prompt-embeds="$work/model/prompt_embeds.npy" $element_args \
  ! videoconvert ! video/x-raw,format=RGB ! pngenc \
  ! multifilesink location="$work/element-%02d.png" 2> "$work/element.log" \
  || { cat "$work/element.log" >&2; exit 1; }
cat "$work/element.log" >&2
if [ -n "${PP_TEST_EXPECT_LOG:-}" ] \
    && ! grep -Eq "$PP_TEST_EXPECT_LOG" "$work/element.log"; then
  echo "the element's log does not match '$PP_TEST_EXPECT_LOG'" >&2
  exit 1
fi

raw() {  # PNG -> packed RGB bytes
  timeout "$LIMIT_S" gst-launch-1.0 -q filesrc location="$1" \
    ! pngdec ! videoconvert ! video/x-raw,format=RGB ! filesink location="$2"
}

i=0
while [ $i -lt "$FRAMES" ]; do
  f=$(printf %02d $i)
  [ -f "$work/element-$f.png" ] || { echo "frame $f did not come out" >&2; exit 1; }
  # shellcheck disable=SC2086
  timeout "$LIMIT_S" "$TOOL" img2img --model "$work/model" \
    --in "$work/in-$f.png" --out "$work/tool-$f.png" \
    --prompt-embeds "$work/model/prompt_embeds.npy" --steps "$STEPS" $tool_args
  for k in in element tool; do
    raw "$work/$k-$f.png" "$work/$k-$f.rgb"
  done
  if cmp -s "$work/in-$f.rgb" "$work/element-$f.rgb"; then
    echo "the element returned frame $f unchanged" >&2
    exit 1
  fi
  if ! cmp "$work/element-$f.rgb" "$work/tool-$f.rgb"; then
    echo "element and ppdiffuse-tool img2img differ on frame $f ($KIND)" >&2
    exit 1
  fi
  i=$((i + 1))
done
[ -f "$work/element-$(printf %02d "$FRAMES").png" ] \
  && { echo "more frames came out than went in" >&2; exit 1; }
echo "element output equals ppdiffuse-tool img2img ($KIND, $STEPS steps," \
  "$FRAMES frames of $SIZE)"
