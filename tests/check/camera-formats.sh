#!/bin/sh
# Camera and decoder formats through ppdiffuse: YUY2, UYVY, NV12 and I420
# frames go through builtin:stamp on a 2-worker mesh and come out in their
# own format, equal (within 1 level) to the same frames taken to RGB and
# back by GStreamer's videoconvert around the element; and they were
# stamped (they differ from the input).  YUY2 and NV12 come as a webcam
# sends them: a live source at 30 fps, 320x240.
set -eu
LIMIT_S=120
KILL_AFTER_S=10
FRAMES=6
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

run() {
  timeout --kill-after="$KILL_AFTER_S" "$LIMIT_S" gst-launch-1.0 -q "$@"
}

cases="YUY2:320:240:true UYVY:64:48:false NV12:320:240:true I420:62:46:false"
# Under a sanitizer: a packed and a semi-planar format, small.
[ -n "${PP_TEST_SANITIZED:-}" ] && cases="YUY2:64:48:true NV12:62:46:false"
for case in $cases; do
  IFS=: read -r format width height live <<EOF2
$case
EOF2
  caps="video/x-raw,format=$format,width=$width,height=$height,framerate=30/1"
  src="videotestsrc num-buffers=$FRAMES pattern=ball is-live=$live"
  # shellcheck disable=SC2086  # $src is a list of words
  run $src ! "$caps" ! filesink location="$work/in.yuv"
  # The outputs are compared frame for frame: leaky=false, since with a
  # live source upstream the element would drop a frame that comes while
  # max-in-flight frames are in the mesh (on a loaded machine).
  # shellcheck disable=SC2086
  run $src ! "$caps" ! ppdiffuse ranks=2 steps=2 model=builtin:stamp \
    leaky=false ! "$caps" ! filesink location="$work/element.yuv"
  # The reference, GStreamer's conversions around the element's RGB path,
  # is the plain run's: under a sanitizer it would only run that path
  # again (gst-launch.sh runs it there), so the output is compared with
  # the input alone.
  if [ -z "${PP_TEST_SANITIZED:-}" ]; then
    # shellcheck disable=SC2086
    run $src ! "$caps" ! videoconvert ! video/x-raw,format=RGB \
      ! ppdiffuse ranks=2 steps=2 model=builtin:stamp leaky=false \
      ! videoconvert \
      ! "$caps" ! filesink location="$work/videoconvert.yuv"
  fi
  python3 - "$format" "$work/in.yuv" "$work/element.yuv" \
    "$work/videoconvert.yuv" <<'PY'
import os, sys
fmt, src_path, got_path, want_path = sys.argv[1:]
src, got = (open(p, 'rb').read() for p in (src_path, got_path))
# No reference under a sanitizer: the output stands for it (worst 0).
want = open(want_path, 'rb').read() if os.path.exists(want_path) else got
if not got or len(got) != len(want) or len(got) != len(src):
    sys.exit(f'{fmt}: {len(got)} bytes out of the element, {len(want)} '
             f'through videoconvert, {len(src)} in')
worst = max(abs(a - b) for a, b in zip(got, want))
stamped = sum(a != b for a, b in zip(got, src))
ref = (f'at most {worst} levels from videoconvert'
       if os.path.exists(want_path) else 'no videoconvert reference')
print(f'{fmt}: {len(got)} bytes, {ref}, {stamped} bytes stamped')
if worst > 1:
    sys.exit(f'{fmt}: {worst} levels from videoconvert\'s conversion (bound 1)')
if stamped == 0:
    sys.exit(f'{fmt}: the output is the input: nothing was stamped')
PY
done
