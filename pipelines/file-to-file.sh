#!/bin/sh
# A video file through ppdiffuse into a new file (Theora in Ogg).
#
#   pipelines/file-to-file.sh INPUT OUTPUT.ogv [STEPS]
#
# decodebin reads whatever the installed GStreamer plugins can decode
# (H.264 needs gstreamer1.0-libav).  Only the video is kept.  Every frame
# goes through: a file source is not live, so ppdiffuse slows the reader
# down instead of dropping frames.
#
# Uninstalled builds need GST_PLUGIN_PATH_1_0 and PPDIFFUSE_WORKER (README).
set -eu

if [ $# -lt 2 ]; then
  echo "usage: $0 INPUT OUTPUT.ogv [STEPS]" >&2
  exit 2
fi
IN=$1
OUT=$2
STEPS=${3:-4}

exec gst-launch-1.0 -q \
  filesrc location="$IN" ! decodebin \
  ! videoconvert ! video/x-raw,format=RGBx \
  ! ppdiffuse ranks=2 steps="$STEPS" model=builtin:anisotropic \
  ! videoconvert ! theoraenc ! oggmux ! filesink location="$OUT"
