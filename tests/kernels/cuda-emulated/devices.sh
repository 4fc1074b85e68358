#!/bin/sh
# devices.sh PPDIFFUSE_TOOL DRIVER_DIR: `ppdiffuse-tool devices` over the
# emulated GPUs (PPDIFFUSE_CUDA_MODULE from the test's environment), with
# DRIVER_DIR (a library of the NVIDIA driver's name) on the library path
# or not: each GPU the process sees is listed as usable or with why not,
# and what backend=auto picks, with why it passed CUDA over.
set -u
TOOL=$1 DRIVER=$2
# The library path without the driver's folder, and with it first.
without=$(printf '%s' "${LD_LIBRARY_PATH:-}" | tr ':' '\n' \
  | grep -vxF "$DRIVER" | paste -sd: -)
with=$DRIVER${without:+:$without}

run() {
  _path=$1
  shift
  out=$(env LD_LIBRARY_PATH="$_path" "$@" 2>&1)
  status=$?
  printf '%s\n' "== $*" "$out"
  [ "$status" = 0 ] || { echo "devices.sh: exited with $status" >&2; exit 1; }
}
expect() {
  printf '%s\n' "$out" | grep -Eq -- "$1" \
    || { echo "devices.sh: no line matches '$1'" >&2; exit 1; }
}

# Two GPUs that run the build's code: each listed, auto takes the first.
run "$with" PP_CUDA_EMU_DEVICES=2 "$TOOL" devices
expect '^cpu: CPU'
expect '^cuda:0: cuda:0 CUDA emulation on the CPU, sm_90.*: runs this build.s kernels$'
expect '^cuda:1: cuda:1 CUDA emulation on the CPU, sm_90.*: runs this build.s kernels$'
expect '^auto: cuda \(cuda:0 CUDA emulation on the CPU'
# Of compute capability 7.5, which the build has no code for: each with
# why and what to build, auto the CPU with the same reason.
run "$with" PP_CUDA_EMU_DEVICES=2 PP_CUDA_EMU_SM=75 "$TOOL" devices
expect '^cuda:0: cannot be used: cuda:0 .*sm_75.* cannot run this build.s kernels: .*-Dcuda-archs=75'
expect '^cuda:1: cannot be used: cuda:1 .*sm_75'
expect '^auto: cpu \(CPU.*\), CUDA passed over: cuda:0 .*cannot run this build.s kernels'
# No driver's library: why there is no GPU, auto the CPU.
run "$without" PP_CUDA_EMU_DEVICES=2 "$TOOL" devices
expect '^cuda: .*no NVIDIA driver is installed'
expect '^auto: cpu \(CPU.*\), CUDA passed over: .*no NVIDIA driver is installed'
# No GPU, no surprise: nothing said by default.
if printf '%s\n' "$out" | grep -q 'Message: '; then
  echo "devices.sh: a message where the process sees no GPU" >&2
  exit 1
fi
