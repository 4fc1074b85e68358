#!/bin/sh
# Rank 0's device runs out of memory in the middle of an op (the emulated
# cuda backend, its device made 33 MiB for gst-launch alone: cuBLAS's
# 32 MiB workspace and the VAE fit, not all of decoding's activations;
# the worker's device is the emulation's full size): the element's error
# names rank 0, that its device is out of memory and what to change, in
# bounded time, and gst-launch, the application, fails instead of dying
# of a signal (its backend halts rather than ending the process).  Usage: rank0-device-memory.sh
# PPDIFFUSE_TOOL PPDIFFUSE_WORKER
set -eu
TOOL=$1 WORKER=$2
LIMIT_S=60
KILL_AFTER_S=10
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$TOOL" make-tiny --kind turbo --out "$work/model" --seed 1 >/dev/null
cat > "$work/worker.sh" <<SCRIPT
#!/bin/sh
unset PP_CUDA_EMU_DEVICE_MB
exec '$WORKER' "\$@"
SCRIPT
chmod +x "$work/worker.sh"

status=0
PP_CUDA_EMU_DEVICE_MB=33 timeout --kill-after="$KILL_AFTER_S" "$LIMIT_S" \
  gst-launch-1.0 \
    videotestsrc num-buffers=2 ! video/x-raw,format=RGB,width=64,height=64 \
    ! ppdiffuse ranks=1 steps=1 timeout-ms=5000 model="$work/model" \
        prompt-embeds="$work/model/prompt_embeds.npy" worker="$work/worker.sh" \
    ! fakesink > "$work/out.txt" 2>&1 || status=$?
case $status in
  0) echo "the element ran with a device too small for rank 0" >&2; exit 1 ;;
  124|137) echo "gst-launch hung instead of failing" >&2; exit 1 ;;
esac
if [ "$status" -gt 128 ]; then
  echo "gst-launch died of signal $((status - 128)) instead of failing" >&2
  cat "$work/out.txt" >&2
  exit 1
fi
error=$(grep -m1 "^ERROR: from element" "$work/out.txt" || true)
for needle in ": rank 0 (pid " \
    "out of device memory: " "MiB did not fit beside the" \
    "use a smaller frame, a smaller frame-batch"; do
  case $error in
    *"$needle"*) ;;
    *) echo "the element's error does not say '$needle':" >&2
       cat "$work/out.txt" >&2
       exit 1 ;;
  esac
done
echo "$error"
