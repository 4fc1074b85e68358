#!/bin/sh
# gpu-bench at its full size (a released-size SD-Turbo UNet step at a
# 64x64 latent with its batches' passes, TAESD at 512x512) on the cuda
# backend over its emulation, every launch and library call checked but
# none computed ($PP_CUDA_EMU_SHAPES_ONLY): each kernel's grid, block and
# shared memory within a device's limits, each cuBLASLt and cuDNN call as
# the emulation's rules take it, none refused, at the sizes the GPU runs
# and the small emulated runs never reach.  At the defaults, then with
# the ways not yet the defaults (two sets of them), then in bf16: the
# ways a GPU run's bench step times, whose first device run is then no
# longer the first time their launches see these shapes.  And the device
# memory the filters laid out in place save ($PP_CUDA_EMU_MEMORY): the
# defaults' peak at least 1000 MiB under that of
# PPDIFFUSE_CUDA_FILTERS=copy (the UNet's channels-last copies, 1.05 GiB
# in f16).
# Usage: gpu-bench-shapes.sh GPU_BENCH
set -u
bench=$1
log=$(mktemp)
trap 'rm -f "$log"' EXIT
export PP_CUDA_EMU_SHAPES_ONLY=1 PP_CUDA_EMU_MEMORY=1 G_MESSAGES_DEBUG=all
failed=0
peak=

# check NAME DTYPE [VAR=VALUE ...]
check() {
  name=$1 dtype=$2
  shift 2
  env "$@" timeout -k 10 300 "$bench" --dtype "$dtype" --repeats 1 \
    >"$log" 2>&1
  st=$?
  why=
  if [ "$st" -ne 0 ]; then
    why="exited with status $st"
  elif ! grep -q '^SD-Turbo UNet pass of a 4-frame batch at one step, graph .* ms ' "$log"; then
    why="did not reach its last figure"
  elif grep -Eq 'invalid launch|unsupported|refused' "$log"; then
    why="a launch or a library call was refused"
  fi
  if [ -n "$why" ]; then
    echo "FAILED: $name: $why" >&2
    grep -E 'invalid launch|unsupported|refused|ERROR|CRITICAL' "$log" \
      | head -n 20 | sed 's/^/  | /' >&2
    tail -n 5 "$log" | sed 's/^/  | /' >&2
    failed=1
  else
    echo "ok: $name: $(grep -c 'graph nodes of' "$log") graphs checked"
  fi
  # The process's peak device memory, in MiB (its report at exit).
  peak=$(grep -o 'emulated device memory ([^)]*): peak [0-9]*' "$log" \
    | sed 's/.* //')
}

check "f16, the defaults" f16
in_place=$peak
check "f16, PPDIFFUSE_CUDA_FILTERS=copy" f16 PPDIFFUSE_CUDA_FILTERS=copy
echo "device memory at its peak: ${in_place:-?} MiB, ${peak:-?} MiB with the filters copied"
if [ -z "$in_place" ] || [ -z "$peak" ] \
    || [ $((peak - in_place)) -lt 1000 ]; then
  echo "FAILED: the filters laid out in place saved less than 1000 MiB" >&2
  failed=1
fi
check "f16, graphs, fused epilogues, padded, vector layer norms, PDL" \
  f16 PPDIFFUSE_CUDA_CONV_API=graph \
  PPDIFFUSE_CUDA_CONV_EPILOGUE=fused PPDIFFUSE_CUDA_CONV_LAYOUT=padded \
  PPDIFFUSE_CUDA_LAYER_NORM=vector PPDIFFUSE_CUDA_PDL=on
check "f16, vector group norms, fused legacy epilogues, timed algorithms" \
  f16 PPDIFFUSE_CUDA_GROUP_NORM=vector PPDIFFUSE_CUDA_CONV_EPILOGUE=fused \
  PPDIFFUSE_CUDA_CONV_ALGO=timed PPDIFFUSE_CUDA_GEMM_ALGO=timed
check "bf16, the defaults" bf16
exit "$failed"
