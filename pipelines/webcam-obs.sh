#!/bin/sh
# Webcam → ppdiffuse → virtual camera for OBS (or any V4L2 reader).
#
#   pipelines/webcam-obs.sh [CAMERA] [LOOPBACK]    (default /dev/video0 /dev/video10)
#   SIMILARITY=0.98                                 (similarity-threshold; 0 = off)
#
# With a diffusion model and the temporal feature bank (a steadier picture
# from frame to frame; docs/models.md, "Temporal feature bank"):
#
#   MODEL=/models/sd-turbo VAE=/models/taesd PROMPT="a watercolor painting" \
#   TEMPORAL=feature-bank pipelines/webcam-obs.sh
#
# The feature bank runs on the CPU backends for now: on a machine with a
# GPU, add BACKEND=cpu (the workers refuse temporal=feature-bank on cuda,
# saying so).  BACKEND sets the element's backend (default auto).
#
# On a GPU, the stream batch runs each worker's two steps for two frames
# in one UNet pass (docs/architecture.md, "Stream batch"); it needs frames
# in flight to batch:
#
#   MODEL=/models/sd-turbo VAE=/models/taesd PROMPT="a watercolor painting" \
#   STREAM_BATCH=true MAX_IN_FLIGHT=6 pipelines/webcam-obs.sh
#
# One-time set-up of the virtual camera (Debian: apt-get install
# v4l2loopback-dkms, then as root):
#
#   modprobe v4l2loopback devices=1 video_nr=10 card_label=ppdiffuse exclusive_caps=1
#
#   video_nr=10        creates /dev/video10, the LOOPBACK argument below
#   card_label         the name OBS lists under "Video Capture Device"
#   exclusive_caps=1   the device reports itself as a capture device once a
#                      writer is attached; OBS and browsers list only those
#
# In OBS: Sources → + → Video Capture Device → "ppdiffuse".  Stop with
# Ctrl-C: -e turns it into EOS, which drains the frames still in the mesh.
#
# Uninstalled builds need GST_PLUGIN_PATH_1_0 and PPDIFFUSE_WORKER (README).
set -eu

CAMERA=${1:-/dev/video0}
LOOPBACK=${2:-/dev/video10}
SIMILARITY=${SIMILARITY:-0.98}
MODEL=${MODEL:-builtin:anisotropic}
TEMPORAL=${TEMPORAL:-off}
BACKEND=${BACKEND:-auto}
STREAM_BATCH=${STREAM_BATCH:-false}
MAX_IN_FLIGHT=${MAX_IN_FLIGHT:-0}

# The live defaults: v4l2src is a live source, so ppdiffuse drops a frame
# that finds max-in-flight frames in the mesh rather than block the camera
# (its driver would run out of buffers and the delay would grow); each drop
# is counted (stats dropped-leaky) and announced with a QoS message.  qos,
# on by default, also drops frames that downstream says would be late.
# Neither is set here: leaky=false would force blocking.  The queue in front
# decouples the camera's thread.
#
# similarity-threshold (StreamDiffusion's similarity filter): while the
# picture hardly changes, frames are skipped and the last output repeated,
# which spares the mesh; SIMILARITY=0 turns it off.  pipelines/live-control.py
# runs this pipeline and turns knobs while it plays.
#
# YUY2 in and out: what webcams send, and a format v4l2loopback and OBS
# both take; the element converts it itself.  videoconvert in front only
# acts for a camera that sends another format.
exec gst-launch-1.0 -e \
  v4l2src device="$CAMERA" \
  ! videoconvert ! videoscale ! video/x-raw,format=YUY2,width=640,height=480 \
  ! queue max-size-buffers=2 max-size-bytes=0 max-size-time=0 \
  ! ppdiffuse ranks=2 steps=4 model="$MODEL" backend="$BACKEND" \
    ${VAE:+vae="$VAE"} ${PROMPT:+prompt="$PROMPT"} temporal="$TEMPORAL" \
    similarity-threshold="$SIMILARITY" stream-batch="$STREAM_BATCH" \
    max-in-flight="$MAX_IN_FLIGHT" \
  ! v4l2sink device="$LOOPBACK" sync=false
