#!/bin/sh
# The GPU check: the one command a GPU owner runs, from the source tree:
#
#   tests/gpu/run.sh            (exit 0: passed, 1: failed, 77: no GPU)
#
# It builds ppdiffuse with CUDA, cuDNN and NCCL (meson features enabled,
# toolkit under $CUDA_ROOT, default /usr/local/cuda) in $PP_GPU_BUILD_DIR
# (default build-gpu), then checks, each step naming what it compares:
#  1. every op on the cuda backend against float64 references (test-ops);
#  2. the diffusers-made fixtures (tests/data: TAESD, an SD1.5-style and an
#     SD-Turbo-style UNet) on cuda in f32, f16 and bf16, by NMSE against
#     the float32 reference, each dtype against its own threshold;
#  3. a full 2-worker mesh sharing one GPU, frames against the CPU mesh,
#     without and with CUDA graphs;
#  4. with two GPUs or more, one worker per GPU (the node-local ranks pick
#     the devices), frames against the CPU mesh;
#  5. the fault suite's kill and hang cases with the workers on cuda: an
#     error in bounded time, no hang;
#  6. the benchmarks (reported, not judged): an SD-Turbo UNet step and
#     TAESD at 512x512 in f16, TFLOP/s against the device's peak; then the
#     element's throughput at 512x512 with an SD-Turbo-size pipeline
#     (make-tiny --kind sd-turbo: the released shapes, seeded weights) for
#     W = 1 ... #GPUs workers, #GPUs steps per frame.
# docs/gpu.md says what to expect.
set -eu
SKIP=77
LIMIT_S=900
src=$(cd "$(dirname "$0")/../.." && pwd)
build=${PP_GPU_BUILD_DIR:-$src/build-gpu}
cuda_root=${CUDA_ROOT:-/usr/local/cuda}
# NMSE thresholds against a float32 reference: f32 allows the reordering
# of sums (cuBLAS, cuDNN), the 16-bit dtypes their rounding of weights and
# of the activations their GEMMs read (f16: 11 significant bits, bf16: 8).
NMSE_F32=1e-9
NMSE_F16=1e-4
NMSE_BF16=2e-3
# 8-bit frames of the GPU mesh against the CPU mesh: at most this many
# levels apart (f32 on both, so only summation order differs).
FRAME_LEVELS=2

say() { printf '\n== %s\n' "$*"; }
fail() { echo "tests/gpu/run.sh: FAILED: $*" >&2; exit 1; }

if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1
then
  echo "tests/gpu/run.sh: skipped: no NVIDIA GPU here (nvidia-smi -L lists none)"
  exit "$SKIP"
fi
n_gpus=$(nvidia-smi -L | grep -c '^GPU ')
nvidia-smi -L

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_mpi_yield_when_idle=1
export PP_TEST_HAVE_GPU=1

say "build with CUDA, cuDNN and NCCL ($cuda_root) in $build"
if [ ! -f "$build/build.ninja" ]; then
  meson setup "$build" "$src" -Dcuda=enabled -Dcudnn=enabled -Dnccl=enabled \
    -Dcuda-root="$cuda_root"
fi
ninja -C "$build"
tool=$build/tools/ppdiffuse-tool
compare=$build/tests/check/npy-compare
export GST_PLUGIN_PATH_1_0=$build/gst/ppdiffuse
export PPDIFFUSE_WORKER=$build/mpi-helper/ppdiffuse-worker
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

say "1. every op on cuda against float64 references"
status=0
timeout "$LIMIT_S" "$tool" test-ops --backend cuda || status=$?
[ "$status" -eq "$SKIP" ] && { echo "the cuda backend sees no device: skipped"; exit "$SKIP"; }
[ "$status" -eq 0 ] || fail "test-ops --backend cuda (status $status)"

say "2. the diffusers fixtures on cuda, f32 / f16 / bf16"
data=$src/tests/data
for dtype in f32 f16 bf16; do
  case $dtype in
    f32) limit=$NMSE_F32 ;; f16) limit=$NMSE_F16 ;; bf16) limit=$NMSE_BF16 ;;
  esac
  for family in sd15 turbo; do
    dir=$data/unet-$family-tiny
    "$tool" unet --backend cuda --dtype "$dtype" --model "$dir" \
      --sample "$dir/sample.npy" --timestep "$(cat "$dir/timestep.txt")" \
      --encoder-hidden-states "$dir/encoder_hidden_states.npy" \
      --out "$work/unet-$family-$dtype.npy"
    "$compare" --nmse "$limit" "$work/unet-$family-$dtype.npy" "$dir/out.npy" \
      || fail "UNet $family in $dtype on cuda"
  done
  vae=$data/taesd-tiny
  "$tool" vae-encode --backend cuda --dtype "$dtype" --model "$vae" \
    --image "$vae/image.npy" --out "$work/z-$dtype.npy"
  "$compare" --nmse "$limit" "$work/z-$dtype.npy" "$vae/latents.npy" \
    || fail "TAESD encode in $dtype on cuda"
  "$tool" vae-decode --backend cuda --dtype "$dtype" --model "$vae" \
    --latents "$vae/latents.npy" --out "$work/x-$dtype.npy"
  "$compare" --nmse "$limit" "$work/x-$dtype.npy" "$vae/decoded.npy" \
    || fail "TAESD decode in $dtype on cuda"
done

# Runs 4 frames of a make-tiny pipeline through a mesh of RANKS workers on
# BACKEND into $work/OUT-NN.rgb (raw RGB), with the element settings that
# follow.
mesh_frames() {
  backend=$1 ranks=$2 out=$3
  shift 3
  timeout "$LIMIT_S" gst-launch-1.0 -q videotestsrc num-buffers=4 pattern=ball \
    ! video/x-raw,format=RGB,width=256,height=256 \
    ! ppdiffuse ranks="$ranks" steps=2 backend="$backend" dtype=f32 \
        model="$work/model" prompt-embeds="$work/model/prompt_embeds.npy" \
        strength=1.0 seed=3 "$@" \
    ! multifilesink location="$work/$out-%02d.rgb"
}

# The frames OUT-NN.rgb against cpu-NN.rgb, within FRAME_LEVELS.
compare_frames() {
  for f in "$work"/cpu-*.rgb; do
    g=$work/$1-${f##*/cpu-}
    python3 - "$f" "$g" "$FRAME_LEVELS" <<'EOF' || fail "frames of $1 differ from the CPU mesh ($f)"
import sys
a = open(sys.argv[1], 'rb').read(); b = open(sys.argv[2], 'rb').read()
worst = max(abs(x - y) for x, y in zip(a, b)) if len(a) == len(b) else 999
print(f"{sys.argv[2]}: max level difference {worst}")
sys.exit(0 if worst <= int(sys.argv[3]) else 1)
EOF
  done
}

say "3. a 2-worker mesh sharing one GPU against the CPU mesh"
"$tool" make-tiny --kind turbo --out "$work/model" --seed 5 >/dev/null
mesh_frames cpu 2 cpu
CUDA_VISIBLE_DEVICES=0 mesh_frames cuda 2 shared
compare_frames shared
# The same with each worker's steps replayed as a CUDA graph from the
# second frame on.
CUDA_VISIBLE_DEVICES=0 mesh_frames cuda 2 graphs cuda-graphs=true
compare_frames graphs

if [ "$n_gpus" -ge 2 ]; then
  say "4. one worker per GPU ($n_gpus GPUs) against the CPU mesh"
  mesh_frames cuda "$n_gpus" spread
  mesh_frames cpu "$n_gpus" cpu
  compare_frames spread
else
  say "4. one worker per GPU: skipped, one GPU"
fi

say "5. kill and hang faults with the workers on cuda"
PPDIFFUSE_BACKEND=cuda meson test -C "$build" --suite faults \
  --num-processes 1 --print-errorlogs || fail "the fault suite on cuda"

say "6. benchmarks (reported, not judged)"
"$build/tests/bench/gpu-bench" --dtype f16
"$tool" make-tiny --kind sd-turbo --out "$work/sd-turbo" --seed 1 >/dev/null
# Seconds of a run of N frames through W workers; the steady rate is the
# difference of two runs, which leaves start-up (spawn, weights) out.
run_frames() {
  start=$(date +%s.%N)
  timeout "$LIMIT_S" gst-launch-1.0 -q videotestsrc num-buffers="$2" \
    ! video/x-raw,format=RGB,width=512,height=512 \
    ! ppdiffuse ranks="$1" steps="$n_gpus" backend=cuda \
        model="$work/sd-turbo" prompt-embeds="$work/sd-turbo/prompt_embeds.npy" \
        strength=1.0 ! fakesink
  awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { print b - a }'
}
w=1
while [ "$w" -le "$n_gpus" ]; do
  short=$(run_frames "$w" 16)
  long=$(run_frames "$w" 80)
  awk -v w="$w" -v s="$short" -v l="$long" -v n="$n_gpus" 'BEGIN {
    printf "W=%d: %.1f frames/s at 512x512, %d steps per frame\n", w,
      64 / (l - s), n }'
  w=$((w + 1))
done

echo
echo "tests/gpu/run.sh: passed on $n_gpus GPU(s)"
