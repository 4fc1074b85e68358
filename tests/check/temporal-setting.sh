#!/bin/sh
# temporal=feature-bank through meshes of 1 to 4 workers: every frame
# of a moving sequence equals ppdiffuse-tool img2img's run of the same
# sequence in one process (--frames with an in-%02d.png pattern, the same
# bank settings), so each worker's banks for its steps advance exactly as
# the tool's, a warm-up pass left out; and the bank changes the frames
# (against temporal=off).  Usage: temporal-setting.sh PPDIFFUSE_TOOL
# $PP_TEST_FRAMES, when set, is the length of the sequence (default 5),
# $PP_TEST_BANK_FRAMES the banks' size in frames (default 2).
# $PP_TEST_EXPECT_LOG, when set, is one extended regular expression a
# line, each of which the log of every bank run (its workers' included:
# PPDIFFUSE_DEBUG=3) must match as many times as the mesh has workers.
set -eu
TOOL=$1
LIMIT_S=180
KILL_AFTER_S=10
FRAMES=${PP_TEST_FRAMES:-5}
BANK_FRAMES=${PP_TEST_BANK_FRAMES:-2}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$TOOL" make-tiny --kind turbo --out "$work/model" --seed 4 >/dev/null
embeds="$work/model/prompt_embeds.npy"
timeout "$LIMIT_S" gst-launch-1.0 -q videotestsrc num-buffers="$FRAMES" \
  pattern=ball ! video/x-raw,format=RGB,width=48,height=40 \
  ! pngenc ! multifilesink location="$work/in-%02d.png"

element() {  # OUT_PREFIX RANKS STEPS SETTINGS...
  prefix=$1 ranks=$2 steps=$3
  shift 3
  timeout --kill-after="$KILL_AFTER_S" "$LIMIT_S" gst-launch-1.0 -q \
    multifilesrc location="$work/in-%02d.png" index=0 \
    stop-index=$((FRAMES - 1)) caps=image/png,framerate=25/1 \
    ! pngdec ! videoconvert ! video/x-raw,format=RGB \
    ! ppdiffuse ranks="$ranks" steps="$steps" seed=5 strength=0.8 \
      model="$work/model" prompt-embeds="$embeds" "$@" \
    ! videoconvert ! video/x-raw,format=RGB ! multifilesink \
      location="$prefix-%02d.rgb"
}

expect_log() {  # LOG RANKS
  [ -n "${PP_TEST_EXPECT_LOG:-}" ] || return 0
  printf '%s\n' "$PP_TEST_EXPECT_LOG" > "$work/expect"
  while IFS= read -r pattern; do
    found=$(grep -Ec "$pattern" "$1" || true)
    if [ "$found" -ne "$2" ]; then
      echo "$2 workers: their log matches '$pattern' $found times" >&2
      cat "$1" >&2
      exit 1
    fi
  done < "$work/expect"
}

to_rgb() {
  timeout "$LIMIT_S" gst-launch-1.0 -q filesrc location="$1" ! pngdec \
    ! videoconvert ! video/x-raw,format=RGB ! filesink location="$2"
}

# The 4-worker mesh sends a warm-up pass first, which no bank may take.
# Under a sanitizer's setup (PP_TEST_SANITIZED) that mesh alone: the
# 2-worker one runs the same code.  $PP_TEST_MESHES names others
# (RANKS:STEPS:WARM_UP ...), for a slow backend.
meshes="1:2:false 2:2:false 3:3:false 4:4:true"
[ -z "${PP_TEST_SANITIZED:-}" ] || meshes="4:4:true"
meshes=${PP_TEST_MESHES:-$meshes}
for mesh in $meshes; do
  ranks=${mesh%%:*} rest=${mesh#*:}
  steps=${rest%%:*} warm_up=${rest#*:}
  element "$work/bank" "$ranks" "$steps" temporal=feature-bank \
    bank-frames="$BANK_FRAMES" fusion-threshold=0.9 warm-up="$warm_up" \
    2>"$work/bank.log" \
    || { cat "$work/bank.log" >&2; exit 1; }
  expect_log "$work/bank.log" "$ranks"
  element "$work/off" "$ranks" "$steps"
  "$TOOL" img2img --model "$work/model" --in "$work/in-%02d.png" \
    --out "$work/tool-%02d.png" --frames "$FRAMES" --steps "$steps" \
    --seed 5 --strength 0.8 --prompt-embeds "$embeds" \
    --temporal feature-bank --bank-frames "$BANK_FRAMES" \
    --fusion-threshold 0.9 \
    >/dev/null
  differ=0
  i=0
  while [ $i -lt "$FRAMES" ]; do
    f=$(printf %02d $i)
    to_rgb "$work/tool-$f.png" "$work/tool-$f.rgb"
    if ! cmp "$work/bank-$f.rgb" "$work/tool-$f.rgb"; then
      echo "$ranks workers: frame $f differs from the tool's" >&2
      exit 1
    fi
    cmp -s "$work/bank-$f.rgb" "$work/off-$f.rgb" || differ=$((differ + 1))
    i=$((i + 1))
  done
  # The first frame has an empty bank; the others attend to it.
  if [ "$differ" -lt $((FRAMES - 1)) ]; then
    echo "$ranks workers: the bank changed $differ of $FRAMES frames" >&2
    exit 1
  fi
  echo "$ranks workers, $steps steps: the feature bank's $FRAMES frames" \
    "equal the tool's; $differ differ from temporal=off"
done

# The built-in models have no self-attention: the setting is refused there.
status=0
timeout --kill-after="$KILL_AFTER_S" "$LIMIT_S" gst-launch-1.0 -q \
  videotestsrc num-buffers=1 ! video/x-raw,format=RGB,width=32,height=24 \
  ! ppdiffuse temporal=feature-bank ! fakesink > "$work/err.txt" 2>&1 \
  || status=$?
if [ "$status" = 0 ] \
    || ! grep -q "temporal=feature-bank: built-in models have no" "$work/err.txt"; then
  echo "expected temporal=feature-bank refused on a built-in model" >&2
  cat "$work/err.txt" >&2
  exit 1
fi
echo "refused on a built-in model"
