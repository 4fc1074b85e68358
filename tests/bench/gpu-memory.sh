#!/bin/sh
# The device memory of the released SD-Turbo pipeline's processes, as the
# CUDA emulation counts it ($PP_CUDA_EMU_MEMORY: the most each process
# held at once, its CUDA context and the libraries' kernels aside), with
# the work skipped ($PP_CUDA_EMU_SHAPES_ONLY): make-tiny --kind sd-turbo
# (SD-Turbo's UNet and TAESD shapes, f16) through the element at 512x512,
# one worker, in the settings that change it.  A table, worker and rank 0
# (docs/perf.md, "Device memory of the released SD-Turbo pipeline").
# Usage: gpu-memory.sh PPDIFFUSE_TOOL (with $PPDIFFUSE_CUDA_MODULE the
# emulation's module)
set -u
tool=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export PP_CUDA_EMU_SHAPES_ONLY=1 PP_CUDA_EMU_MEMORY=1

"$tool" make-tiny --kind sd-turbo --out "$work/model" --seed 1 \
  >"$work/make.log" 2>&1 || { cat "$work/make.log"; exit 1; }
printf '%-70s %12s %12s\n' "run" "worker MiB" "rank 0 MiB"
failed=0
# run NAME ENV STEPS PROPERTY...: the peaks of the two processes (the
# larger is the worker's: the UNet's).
run() {
  name=$1 vars=$2 steps=$3
  shift 3
  # shellcheck disable=SC2086  # $vars is a list of assignments
  if ! env $vars timeout -k 10 600 gst-launch-1.0 videotestsrc num-buffers=16 \
      ! video/x-raw,format=RGB,width=512,height=512 ! ppdiffuse ranks=1 \
      steps="$steps" backend=cuda model="$work/model" \
      prompt-embeds="$work/model/prompt_embeds.npy" "$@" ! fakesink \
      >"$work/run.log" 2>&1; then
    echo "FAILED: $name" >&2
    tail -n 20 "$work/run.log" >&2
    failed=1
    return
  fi
  sed -n 's/^emulated device memory: peak \([0-9.]*\) MiB.*/\1/p' \
    "$work/run.log" | sort -n | awk -v name="$name" '
      { peak[NR] = $1 }
      END {
        if (NR != 2) { print "FAILED: " name ": " NR " memory reports"; exit 1 }
        printf "%-70s %12.0f %12.0f\n", name, peak[2], peak[1]
      }' || failed=1
}
run "1 step, the defaults" "X=1" 1
run "1 step, PPDIFFUSE_CUDA_FILTERS=copy" "PPDIFFUSE_CUDA_FILTERS=copy" 1
run "1 step, PPDIFFUSE_CUDA_CONV_LAYOUT=nchw" \
  "PPDIFFUSE_CUDA_CONV_LAYOUT=nchw" 1
run "1 step, frame-batch=4" "X=1" 1 frame-batch=4
run "1 step, temporal=feature-bank" "X=1" 1 temporal=feature-bank
run "4 steps, stream-batch=true frame-batch=2 max-in-flight=16" "X=1" 4 \
  stream-batch=true frame-batch=2 max-in-flight=16
exit "$failed"
