#!/bin/sh
# A make-tiny pipeline model through a real 2-worker mesh must give, for
# every frame, exactly what ppdiffuse-tool img2img gives for the same image
# and settings.  Usage: tiny-e2e.sh PPDIFFUSE_TOOL KIND STEPS WxH FRAMES
# [EXTRA element/tool settings as NAME=VALUE ...]
# $PP_TEST_TIMEOUT_MS, when set, is the element's timeout-ms (the sanitizer
# setups set it: a step there takes many times as long).
# $PP_TEST_EXPECT_LOG, when set, is one extended regular expression a
# line, each of which the element run's log (its workers' included) must
# match.
# $PP_TEST_RANKS, when set, is the number of workers (default 2).
# $PP_TEST_ELEMENT_ARGS, when set, are settings (NAME=VALUE ...) for the
# element only, such as warm-up=true, which the tool has no use for.
# $PP_TEST_MODEL_QUERY, when set, is appended to the element's model URI
# only (such as ?step-ms=100: a worker slower than its source, so that
# chunks queue up behind one another whatever the machine's speed).
# $PP_TEST_SECOND_SIZE, when set (WxH), is the size of the second half of
# the frames: the stream changes caps in the middle, and each frame must
# still be the tool's at its own size.
# $PPDIFFUSE_DATA_PLANE=nccl-emulated runs the chunks' payloads through the
# NCCL data path over the emulated table (device-resident chunks on the cpu
# backend): the workers must say so, and must finalize (never abort) each
# of their two NCCL links at the end.
set -eu
TOOL=$1 KIND=$2 STEPS=$3 SIZE=$4 FRAMES=$5
shift 5
WIDTH=${SIZE%x*} HEIGHT=${SIZE#*x}
RANKS=${PP_TEST_RANKS:-2}
DATA_PLANE=${PPDIFFUSE_DATA_PLANE:-}
LIMIT_S=240
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$TOOL" make-tiny --kind "$KIND" --out "$work/model" --seed 3 >/dev/null
# A moving pattern: every frame differs from the others.
FIRST=$FRAMES
if [ -n "${PP_TEST_SECOND_SIZE:-}" ]; then
  FIRST=$((FRAMES / 2))
fi
timeout "$LIMIT_S" gst-launch-1.0 -q videotestsrc num-buffers="$FIRST" \
  pattern=ball ! video/x-raw,format=RGB,width="$WIDTH",height="$HEIGHT" \
  ! pngenc ! multifilesink location="$work/in-%02d.png"
if [ -n "${PP_TEST_SECOND_SIZE:-}" ]; then
  timeout "$LIMIT_S" gst-launch-1.0 -q videotestsrc \
    num-buffers=$((FRAMES - FIRST)) pattern=ball \
    ! "video/x-raw,format=RGB,width=${PP_TEST_SECOND_SIZE%x*},height=${PP_TEST_SECOND_SIZE#*x}" \
    ! pngenc ! multifilesink index="$FIRST" location="$work/in-%02d.png"
fi

element_args="${PP_TEST_TIMEOUT_MS:+timeout-ms=$PP_TEST_TIMEOUT_MS} ${PP_TEST_ELEMENT_ARGS:-}"
tool_args=""
# The tiny model's prompt-embeds file, unless a text prompt is given.
embeds_element="prompt-embeds=$work/model/prompt_embeds.npy"
embeds_tool="--prompt-embeds $work/model/prompt_embeds.npy"
for setting in "$@"; do
  name=${setting%%=*} value=${setting#*=}
  element_args="$element_args $name=$value"
  tool_args="$tool_args --$name $value"
  if [ "$name" = prompt ]; then
    embeds_element="" embeds_tool=""
  fi
done

# The workers' log and rank 0's (info level) show the data plane at work.
if [ "$DATA_PLANE" = nccl-emulated ]; then
  PPDIFFUSE_DEBUG=3 GST_DEBUG=ppdiffuse:4 GST_DEBUG_NO_COLOR=1
  export PPDIFFUSE_DEBUG GST_DEBUG GST_DEBUG_NO_COLOR
fi
# shellcheck disable=SC2086  # the settings are lists of words
timeout "$LIMIT_S" gst-launch-1.0 -q multifilesrc \
  location="$work/in-%02d.png" index=0 stop-index=$((FRAMES - 1)) \
  caps=image/png,framerate=25/1 \
  ! pngdec ! videoconvert ! video/x-raw,format=RGB \
  ! ppdiffuse ranks="$RANKS" steps="$STEPS" model="$work/model${PP_TEST_MODEL_QUERY:-}" \
      $embeds_element $element_args \
  ! videoconvert ! video/x-raw,format=RGB ! pngenc \
  ! multifilesink location="$work/element-%02d.png" 2>"$work/stderr" \
  || { cat "$work/stderr" >&2; exit 1; }
cat "$work/stderr" >&2
if [ -n "${PP_TEST_EXPECT_LOG:-}" ]; then
  printf '%s\n' "$PP_TEST_EXPECT_LOG" > "$work/expect"
  while IFS= read -r pattern; do
    if ! grep -Eq "$pattern" "$work/stderr"; then
      echo "the element's log does not match '$pattern'" >&2
      exit 1
    fi
  done < "$work/expect"
fi

if [ "$DATA_PLANE" = nccl-emulated ]; then
  # $1 (who) received every chunk on the link its log line $2 names; the
  # first into each pooled chunk (and the shutdown marker, whose tensors
  # differ) into new payload tensors, which waited on the device for the
  # fence behind their memory's earlier users.
  check_fresh() {
    line=$(grep "$2: [0-9]* chunks received" "$work/stderr" || true)
    n=$(printf '%s\n' "$line" | sed -n 's/.*: \([0-9]*\) chunks received, \([0-9]*\) into new.*/\1/p')
    m=$(printf '%s\n' "$line" | sed -n 's/.*: \([0-9]*\) chunks received, \([0-9]*\) into new.*/\2/p')
    if [ "$n" != $((FRAMES + 1)) ] || [ "${m:-0}" -lt 1 ] || [ "$m" -gt "$n" ]; then
      echo "$1: expected $((FRAMES + 1)) chunks received, some into new payload tensors behind a fence: '$line'" >&2
      exit 1
    fi
  }
  r=1
  while [ "$r" -le "$RANKS" ]; do
    log() { grep "^\[ppdiffuse rank $r pid" "$work/stderr" | grep -c "$1" || true; }
    if [ "$(log 'chunk payloads over NCCL (nccl-emulated), 2 links')" != 1 ]; then
      echo "worker rank $r did not run its links over the emulated NCCL" >&2
      exit 1
    fi
    if [ "$(log 'emulated NCCL communicator .* finalized')" != 2 ] \
      || [ "$(log 'emulated NCCL communicator .* destroyed')" != 2 ]; then
      echo "worker rank $r did not finalize and destroy its 2 NCCL links" >&2
      exit 1
    fi
    if [ "$(log 'aborted')" != 0 ]; then
      echo "worker rank $r aborted an NCCL link on a clean run" >&2
      exit 1
    fi
    # Each chunk's send waited on the device for the fence behind its
    # payloads (the frames' and the shutdown marker's), never for the
    # whole compute stream.
    fenced=$(grep "^\[ppdiffuse rank $r pid" "$work/stderr" | grep -cE \
      "NCCL link from rank $r to rank [0-9]+: ([0-9]+) chunks sent, \1 behind their payloads' fences, 0 behind" \
      || true)
    if [ "$fenced" != 1 ]; then
      echo "worker rank $r sent chunks that did not wait on their payloads' fences" >&2
      exit 1
    fi
    check_fresh "worker rank $r" "^\[ppdiffuse rank $r pid.*NCCL link from rank $((r - 1)) to rank $r"
    r=$((r + 1))
  done
  # Rank 0's frames likewise; its shutdown marker, made on the host, waits
  # for the stream.
  if ! grep -q "rank 0: NCCL link from rank 0 to rank 1: $((FRAMES + 1)) chunks sent, $FRAMES behind their payloads' fences, 1 behind the whole compute stream" "$work/stderr"; then
    echo "rank 0's frames did not wait on their payloads' fences" >&2
    exit 1
  fi
  check_fresh "rank 0" "rank 0: NCCL link from rank $RANKS to rank 0"
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
    $embeds_tool --steps "$STEPS" $tool_args
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
  "$FRAMES frames of $SIZE, $RANKS workers${DATA_PLANE:+, data plane $DATA_PLANE})"
