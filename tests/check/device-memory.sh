#!/bin/sh
# A process whose device runs out of memory in the middle of an op (the
# emulated cuda backend, its device made small for that process alone)
# fails the stream with the element's error saying which process, that
# its device is out of memory and what to change, in bounded time, and
# gst-launch, the application, fails instead of dying of a signal.
#   worker: the worker's device is 48 MiB: the model and cuBLAS's
#     workspace fit, cuDNN's workspace, grown by the first convolution,
#     does not; the worker fails as any failing worker does.
#   rank0: gst-launch's own device is 33 MiB: cuBLAS's 32 MiB workspace
#     and the VAE fit, not all of decoding's activations at 64x64; rank
#     0's backend halts rather than ending the process.
# Usage: device-memory.sh PPDIFFUSE_TOOL PPDIFFUSE_WORKER worker|rank0
set -eu
TOOL=$1 WORKER=$2 WHO=$3
LIMIT_S=60
KILL_AFTER_S=10
case $WHO in
  worker) worker_mb=48 rank0_mb='' side=256
    needles='worker rank 1 (|failed in its backend' ;;
  rank0) worker_mb='' rank0_mb=33 side=64
    needles=': rank 0 (pid ' ;;
  *) echo "usage: $0 TOOL WORKER worker|rank0" >&2; exit 2 ;;
esac
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$TOOL" make-tiny --kind turbo --out "$work/model" --seed 1 >/dev/null
cat > "$work/worker.sh" <<SCRIPT
#!/bin/sh
PP_CUDA_EMU_DEVICE_MB='$worker_mb'
export PP_CUDA_EMU_DEVICE_MB
exec '$WORKER' "\$@"
SCRIPT
chmod +x "$work/worker.sh"

status=0
PP_CUDA_EMU_DEVICE_MB=$rank0_mb timeout --kill-after="$KILL_AFTER_S" \
  "$LIMIT_S" gst-launch-1.0 \
    videotestsrc num-buffers=2 \
    ! video/x-raw,format=RGB,width=$side,height=$side \
    ! ppdiffuse ranks=1 steps=1 timeout-ms=5000 model="$work/model" \
        prompt-embeds="$work/model/prompt_embeds.npy" worker="$work/worker.sh" \
    ! fakesink > "$work/out.txt" 2>&1 || status=$?
case $status in
  0) echo "the element ran with a device too small for $WHO" >&2; exit 1 ;;
  124|137) echo "gst-launch hung instead of failing" >&2; exit 1 ;;
esac
if [ "$status" -gt 128 ]; then
  echo "gst-launch died of signal $((status - 128)) instead of failing" >&2
  cat "$work/out.txt" >&2
  exit 1
fi
error=$(grep -m1 "^ERROR: from element" "$work/out.txt" || true)
IFS='|'
for needle in $needles "out of device memory: " "MiB did not fit beside the" \
    "use a smaller frame, a smaller frame-batch"; do
  case $error in
    *"$needle"*) ;;
    *) echo "the element's error does not say '$needle':" >&2
       cat "$work/out.txt" >&2
       exit 1 ;;
  esac
done
echo "$error"
