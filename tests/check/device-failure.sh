#!/bin/sh
# A process whose device fails in the middle of a stream (the emulated
# cuda backend, the failure made for that process alone) fails the stream
# with the element's error saying which process and what failed, in
# bounded time, and gst-launch, the application, fails instead of dying
# of a signal.
#   worker: the worker's device is 48 MiB: the model and cuBLAS's
#     workspace fit, cuDNN's workspace, grown by the first convolution,
#     does not; the worker fails as any failing worker does, and the
#     error says what to change.
#   rank0: gst-launch's own device is 33 MiB: cuBLAS's 32 MiB workspace
#     and the VAE fit, not the activations of encoding 96x96 frames;
#     rank 0's backend halts rather than ending the process.
#   worker-fault: a kernel of the worker's first step (its timestep
#     embedding) faults on the device (an illegal address): the worker's
#     context is lost, which the error says with CUDA's status.
#   rank0-fault: the kernel that makes rank 0's first frame's bytes
#     faults: rank 0's backend is lost, the element's error says so.
#   worker-no-code, rank0-no-code: that process's GPU is of compute
#     capability 7.5, which nothing of the test build's device code (PTX
#     for compute_90) runs on: its backend is refused when it is made,
#     and the element's error names the process and the build option
#     that would run there.
# Usage: device-failure.sh PPDIFFUSE_TOOL PPDIFFUSE_WORKER
#          worker|rank0|worker-fault|rank0-fault|worker-no-code|rank0-no-code
set -eu
TOOL=$1 WORKER=$2 WHO=$3
LIMIT_S=60
KILL_AFTER_S=10
worker_mb='' rank0_mb='' worker_fault='' rank0_fault='' side=64
worker_sm='' rank0_sm=''
oom_needles="out of device memory: |MiB did not fit beside the|use a smaller frame, a smaller frame-batch"
lost_needles="the device's context is lost|restart the application|cudaErrorIllegalAddress"
code_needles="sm_75|cannot run this build's kernels|compute capability 7.5|-Dcuda-archs=75"
case $WHO in
  worker) worker_mb=48 side=256
    needles="worker rank 1 (|failed in its backend|$oom_needles" ;;
  rank0) rank0_mb=33 side=96
    needles=": rank 0 (pid |$oom_needles" ;;
  worker-fault) worker_fault=timestep_embedding
    needles="worker rank 1 (|failed in its backend|$lost_needles" ;;
  rank0-fault) rank0_fault=floats_to_bytes
    needles=": rank 0 (pid |$lost_needles" ;;
  worker-no-code) worker_sm=75
    needles="worker rank 1 (|$code_needles" ;;
  rank0-no-code) rank0_sm=75
    needles="$code_needles" ;;
  *) echo "usage: $0 TOOL WORKER worker|rank0|worker-fault|rank0-fault|worker-no-code|rank0-no-code" >&2
     exit 2 ;;
esac
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$TOOL" make-tiny --kind turbo --out "$work/model" --seed 1 >/dev/null
cat > "$work/worker.sh" <<SCRIPT
#!/bin/sh
PP_CUDA_EMU_DEVICE_MB='$worker_mb'
PP_CUDA_EMU_FAULT_KERNEL='$worker_fault'
export PP_CUDA_EMU_DEVICE_MB PP_CUDA_EMU_FAULT_KERNEL
if [ -n '$worker_sm' ]; then
  PP_CUDA_EMU_SM='$worker_sm'
  export PP_CUDA_EMU_SM
fi
exec '$WORKER' "\$@"
SCRIPT
chmod +x "$work/worker.sh"

status=0
[ -n "$rank0_sm" ] && export PP_CUDA_EMU_SM="$rank0_sm"
PP_CUDA_EMU_DEVICE_MB=$rank0_mb PP_CUDA_EMU_FAULT_KERNEL=$rank0_fault timeout --kill-after="$KILL_AFTER_S" \
  "$LIMIT_S" gst-launch-1.0 \
    videotestsrc num-buffers=2 \
    ! video/x-raw,format=RGB,width=$side,height=$side \
    ! ppdiffuse ranks=1 steps=1 timeout-ms=5000 model="$work/model" \
        prompt-embeds="$work/model/prompt_embeds.npy" worker="$work/worker.sh" \
    ! fakesink > "$work/out.txt" 2>&1 || status=$?
case $status in
  0) echo "the element ran with a device failing for $WHO" >&2; exit 1 ;;
  124|137) echo "gst-launch hung instead of failing" >&2; exit 1 ;;
esac
# 255 is gst-launch's own -1, a pipeline that would not start (a backend
# refused at start); 129 to 192 a signal.
if [ "$status" -gt 128 ] && [ "$status" -ne 255 ]; then
  echo "gst-launch died of signal $((status - 128)) instead of failing" >&2
  cat "$work/out.txt" >&2
  exit 1
fi
error=$(grep -m1 "^ERROR: from element" "$work/out.txt" || true)
IFS='|'
for needle in $needles; do
  case $error in
    *"$needle"*) ;;
    *) echo "the element's error does not say '$needle':" >&2
       cat "$work/out.txt" >&2
       exit 1 ;;
  esac
done
echo "$error"
