#!/bin/sh
# The weights' dtype is honoured, and a backend that is not here is a skip:
#  - img2img with the default dtype equals --dtype f32 on the CPU; f16 and
#    bf16 (weights rounded to that precision) each give other bytes;
#  - on cpu-strict, f32 gives cpu's bytes and f16 other ones: its models
#    keep 16-bit activations beside 16-bit weights, cpu's float32;
#  - an unknown dtype is an error naming the valid ones;
#  - test-ops --backend cuda without a GPU exits 77 saying why.
# Usage: tool-dtype.sh PPDIFFUSE_TOOL
set -eu
TOOL=$1
LIMIT_S=120
SKIP=77
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$TOOL" make-tiny --kind turbo --out "$work/model" --seed 4 >/dev/null
timeout "$LIMIT_S" gst-launch-1.0 -q videotestsrc num-buffers=1 \
  pattern=ball ! video/x-raw,format=RGB,width=40,height=32 ! pngenc \
  ! filesink location="$work/in.png"

run() {  # DTYPE OUT [BACKEND]: img2img with --dtype DTYPE ("" for the
         # default) on BACKEND (default cpu)
  timeout "$LIMIT_S" "$TOOL" img2img --model "$work/model" --in "$work/in.png" \
    --out "$2" --prompt-embeds "$work/model/prompt_embeds.npy" --seed 2 \
    --strength 1.0 --steps 2 --backend "${3:-cpu}" ${1:+--dtype "$1"}
}
run "" "$work/default.png"
for d in f32 f16 bf16; do
  run "$d" "$work/$d.png"
done
cmp -s "$work/default.png" "$work/f32.png" \
  || { echo "the default dtype on the CPU is not f32" >&2; exit 1; }
for d in f16 bf16; do
  if cmp -s "$work/f32.png" "$work/$d.png"; then
    echo "--dtype $d gave the f32 image: the dtype was ignored" >&2
    exit 1
  fi
done
cmp -s "$work/f16.png" "$work/bf16.png" \
  && { echo "f16 and bf16 gave the same image" >&2; exit 1; }
for d in f32 f16; do
  run "$d" "$work/strict-$d.png" cpu-strict
done
cmp -s "$work/f32.png" "$work/strict-f32.png" \
  || { echo "cpu-strict's f32 image is not cpu's" >&2; exit 1; }
cmp -s "$work/f16.png" "$work/strict-f16.png" \
  && { echo "cpu-strict's f16 image is cpu's: its activations were not" \
         "16-bit" >&2; exit 1; }

status=0
run fp8 "$work/fp8.png" 2>"$work/fp8.txt" || status=$?
[ "$status" -eq 1 ] && grep -q "f32, f16, bf16" "$work/fp8.txt" \
  || { echo "--dtype fp8: status $status, $(cat "$work/fp8.txt")" >&2; exit 1; }

status=0
timeout "$LIMIT_S" "$TOOL" test-ops --backend cuda >"$work/cuda.txt" 2>&1 \
  || status=$?
# With a GPU (PP_TEST_HAVE_GPU set) every op must pass on it; without
# one the tool must say why it skipped.
if [ -n "${PP_TEST_HAVE_GPU:-}" ]; then
  [ "$status" -eq 0 ] \
    || { echo "test-ops --backend cuda on a GPU: status $status," \
           "$(cat "$work/cuda.txt")" >&2; exit 1; }
else
  [ "$status" -eq "$SKIP" ] && grep -q "skipped" "$work/cuda.txt" \
    && grep -qi "cuda" "$work/cuda.txt" \
    || { echo "test-ops --backend cuda without a GPU: status $status," \
           "$(cat "$work/cuda.txt")" >&2; exit 1; }
fi
# A CUDA build loads its module on first use: a missing module is named,
# with the variable that points at it.
if grep -q cudaGetDeviceCount "$work/cuda.txt"; then
  status=0
  PPDIFFUSE_CUDA_MODULE=$work/no-such-module.so timeout "$LIMIT_S" "$TOOL" \
    test-ops --backend cuda >"$work/module.txt" 2>&1 || status=$?
  [ "$status" -eq "$SKIP" ] && grep -q "PPDIFFUSE_CUDA_MODULE" "$work/module.txt" \
    && grep -q "no-such-module.so" "$work/module.txt" \
    || { echo "a missing CUDA module: status $status," \
           "$(cat "$work/module.txt")" >&2; exit 1; }
fi
# On the CPU nothing maps the CUDA libraries, in the tool, rank 0 or the
# workers: the CUDA module is loaded only when CUDA is asked for.
LD_DEBUG=files run "" "$work/ld.png" 2>"$work/ld-tool.txt" >/dev/null
LD_DEBUG=files timeout "$LIMIT_S" gst-launch-1.0 -q videotestsrc \
  num-buffers=2 ! video/x-raw,format=RGB,width=32,height=24 \
  ! ppdiffuse ranks=2 steps=2 backend=cpu ! fakesink 2>"$work/ld-mesh.txt"
for f in ld-tool ld-mesh; do
  grep -q "file=libglib" "$work/$f.txt" \
    || { echo "LD_DEBUG=files printed nothing in $f" >&2; exit 1; }
  if grep -Eq "file=lib(cudart|cublas|cudnn|nccl|ppdiffuse-cuda)" "$work/$f.txt"
  then
    echo "a CPU run loaded CUDA libraries ($f):" >&2
    grep -E "file=lib(cudart|cublas|cudnn|nccl|ppdiffuse-cuda)" "$work/$f.txt" \
      | head -5 >&2
    exit 1
  fi
done
echo "dtype honoured; test-ops on cuda: status $status"
