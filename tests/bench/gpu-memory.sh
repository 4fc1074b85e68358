#!/bin/sh
# The device memory of the released SD-Turbo pipeline's processes, as the
# CUDA emulation counts it ($PP_CUDA_EMU_MEMORY: the most each process
# held at once, its CUDA context and the libraries' kernels aside), with
# the work skipped ($PP_CUDA_EMU_SHAPES_ONLY): make-tiny --kind sd-turbo
# (SD-Turbo's UNet and TAESD shapes, f16) through the element at 512x512
# and 1920x1080, one worker, in the settings that change it.  A table: the
# worker's and rank 0's peaks, and what the worker's activation pool held
# and had in use at most at once (docs/perf.md, "Device memory of the
# released SD-Turbo pipeline").
# Usage: gpu-memory.sh PPDIFFUSE_TOOL (with $PPDIFFUSE_CUDA_MODULE the
# emulation's module)
set -u
tool=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export PP_CUDA_EMU_SHAPES_ONLY=1 PP_CUDA_EMU_MEMORY=1

"$tool" make-tiny --kind sd-turbo --out "$work/model" --seed 1 \
  >"$work/make.log" 2>&1 || { cat "$work/make.log"; exit 1; }
# The workers' log at INFO: their activation pools at shutdown.
export PPDIFFUSE_DEBUG=3
printf '%-78s %11s %11s %17s\n' "run" "worker MiB" "rank 0 MiB" \
  "worker pool MiB"
failed=0
# run NAME ENV STEPS WIDTH HEIGHT PROPERTY...: the peaks of the two
# processes (each report names its program), and what the worker's
# activation pool held and had in use at most.  A worker's last lines
# reach the log through Open MPI's forwarding, which can lose them when
# rank 0 is gone first: a run without the worker's report runs once more.
run() {
  run_once "$@" || run_once "$@" || failed=1
}
run_once() {
  name=$1 vars=$2 steps=$3 width=$4 height=$5
  shift 5
  # shellcheck disable=SC2086  # $vars is a list of assignments
  if ! env $vars timeout -k 10 600 gst-launch-1.0 videotestsrc num-buffers=16 \
      ! video/x-raw,format=RGB,width="$width",height="$height" ! ppdiffuse \
      ranks=1 steps="$steps" backend=cuda model="$work/model" \
      prompt-embeds="$work/model/prompt_embeds.npy" timeout-ms=120000 \
      "$@" ! fakesink >"$work/run.log" 2>&1; then
    echo "FAILED: $name" >&2
    tail -n 20 "$work/run.log" >&2
    failed=1
    return 0
  fi
  awk -v name="$name" '
    # (anywhere in a line: the processes write to one stream)
    match($0, /emulated device memory \(ppdiffuse-worker\): peak [0-9.]+/) {
      k = split(substr($0, RSTART, RLENGTH), f, " "); worker = f[k] + 0; n++ }
    match($0, /emulated device memory \(gst-launch-1.0\): peak [0-9.]+/) {
      k = split(substr($0, RSTART, RLENGTH), f, " "); rank0 = f[k] + 0; n++ }
    /ppdiffuse-worker|rank [1-9].*INFO/ && /activation pools on/ {
      for (i = 1; i <= NF; i++) {
        if ($i == "held,") held = $(i - 2)
        if ($i == "most") used = $(i + 1)
      }
    }
    END {
      if (n != 2) {
        print name ": " n " memory reports" > "/dev/stderr"; exit 1 }
      if (held == "") {
        print name ": no pool report" > "/dev/stderr"; exit 1 }
      printf "%-78s %11.0f %11.0f %8.0f / %6.0f\n", name, worker, rank0,
        held, used
    }' "$work/run.log"
}
run "1 step, the defaults" "X=1" 1 512 512
run "1 step, PPDIFFUSE_CUDA_FILTERS=copy" "PPDIFFUSE_CUDA_FILTERS=copy" 1 \
  512 512
run "1 step, PPDIFFUSE_CUDA_CONV_LAYOUT=nchw" \
  "PPDIFFUSE_CUDA_CONV_LAYOUT=nchw" 1 512 512
run "1 step, frame-batch=4" "X=1" 1 512 512 frame-batch=4
run "1 step, temporal=feature-bank" "X=1" 1 512 512 temporal=feature-bank
run "4 steps, stream-batch=true frame-batch=2 max-in-flight=16" "X=1" 4 \
  512 512 stream-batch=true frame-batch=2 max-in-flight=16
run "1 step, 1920x1080" "X=1" 1 1920 1080
run "4 steps, stream-batch=true frame-batch=2 max-in-flight=16, 1920x1080" \
  "X=1" 4 1920 1080 stream-batch=true frame-batch=2 max-in-flight=16
exit "$failed"
