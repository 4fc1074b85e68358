#!/bin/sh
# The CPU ops split their work by thread count, but never a sum, and never
# so that a value takes another kernel path: every output value is computed
# by one thread in one order (docs/architecture.md, "Threads of the CPU
# ops").  So every model gives the same bytes on 1 to 4 threads, and the same
# bytes run after run.  Checked at the shapes users run: 64x64 latents with
# 77 text tokens (4096 token rows at the first level, far past every
# row-range and GEMM split) and 512x512 frames, and at a ragged size whose
# splits all end mid-block (26x46 latents, 1196 and 299 token rows; 200x360
# frames), for both UNet families, TAESD and whole img2img frames, and a
# sequence through the temporal feature bank.  The
# cpu-strict backend (the same kernels on buffers the host cannot touch)
# must give the same bytes too.
# Usage: thread-invariance.sh PPDIFFUSE_TOOL
set -eu
TOOL=$1
LIMIT_S=240
THREAD_COUNTS="1 2 3 4"
LATENT=64
TOKENS=77
FRAME=512
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# N(0,1)-like float32 .npy from a seeded generator (the values only need to
# be reproducible, not good noise).  Usage: noise_npy FILE SEED DIM...
noise_npy() {
  python3 - "$@" <<'EOF'
import random, struct, sys
path, seed, dims = sys.argv[1], int(sys.argv[2]), [int(d) for d in sys.argv[3:]]
n = 1
for d in dims:
    n *= d
rng = random.Random(seed)
header = "{'descr': '<f4', 'fortran_order': False, 'shape': (%s), }" % (
    "".join("%d, " % d for d in dims))
header += " " * ((-(10 + len(header) + 1)) % 64) + "\n"
with open(path, "wb") as f:
    f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)))
    f.write(header.encode("latin1"))
    f.write(struct.pack("<%df" % n, *(rng.gauss(0, 1) for _ in range(n))))
EOF
}

# Runs "$@" once per thread count (and the 2-thread run twice, then once on
# cpu-strict), output file named by the placeholder OUT; every output must
# equal the first.
# Usage: same_bytes NAME EXT COMMAND... (OUT in COMMAND is replaced)
same_bytes() {
  name=$1 ext=$2
  shift 2
  first="" run=0
  for t in $THREAD_COUNTS 2 strict; do
    run=$((run + 1))
    backend=cpu
    if [ "$t" = strict ]; then
      backend=cpu-strict t=2
    fi
    out="$work/$name-run$run-t$t.$ext"
    args=""
    for a in "$@"; do
      [ "$a" = OUT ] && a=$out
      args="$args $a"
    done
    # shellcheck disable=SC2086  # a list of words without spaces
    if ! PPDIFFUSE_BACKEND=$backend PPDIFFUSE_CPU_THREADS=$t \
        timeout "$LIMIT_S" $args >/dev/null; then
      echo "$name failed on $t threads ($backend)" >&2
      exit 1
    fi
    if [ -z "$first" ]; then
      first=$out
    elif ! cmp -s "$first" "$out"; then
      echo "$name: output on $t threads ($backend) differs from the output" \
        "on 1 thread (cpu)" >&2
      exit 1
    fi
  done
  echo "$name: identical on $THREAD_COUNTS threads, run to run and on" \
    "cpu-strict"
}

for kind in turbo sd15; do
  "$TOOL" make-tiny --kind "$kind" --out "$work/$kind" --seed 11 >/dev/null
done
"$TOOL" make-tiny --kind taesd --out "$work/taesd" --seed 12 >/dev/null

noise_npy "$work/sample.npy" 1 1 4 $LATENT $LATENT
noise_npy "$work/sample-ragged.npy" 5 1 4 26 46
noise_npy "$work/image.npy" 2 1 3 $FRAME $FRAME
noise_npy "$work/image-ragged.npy" 6 1 3 200 360
noise_npy "$work/text-turbo.npy" 3 1 $TOKENS "$(python3 -c "
import json; print(json.load(open('$work/turbo/unet/config.json'))['cross_attention_dim'])")"
noise_npy "$work/text-sd15.npy" 4 1 $TOKENS "$(python3 -c "
import json; print(json.load(open('$work/sd15/unet/config.json'))['cross_attention_dim'])")"

for shape in "" -ragged; do
  for kind in turbo sd15; do
    same_bytes "unet-$kind$shape" npy "$TOOL" unet --model "$work/$kind/unet" \
      --sample "$work/sample$shape.npy" --timestep 500 \
      --encoder-hidden-states "$work/text-$kind.npy" --out OUT
  done
  same_bytes "vae-encode$shape" npy "$TOOL" vae-encode \
    --model "$work/taesd" --image "$work/image$shape.npy" --out OUT
  same_bytes "vae-decode$shape" npy "$TOOL" vae-decode \
    --model "$work/taesd" --latents "$work/sample$shape.npy" --out OUT
done

for size in ${FRAME}x$FRAME 360x200; do
  timeout "$LIMIT_S" gst-launch-1.0 -q videotestsrc num-buffers=1 \
    pattern=smpte ! "video/x-raw,format=RGB,width=${size%x*},height=${size#*x}" \
    ! pngenc ! filesink location="$work/frame-$size.png"
  same_bytes "img2img-turbo-$size" png "$TOOL" img2img --model "$work/turbo" \
    --in "$work/frame-$size.png" --out OUT \
    --prompt-embeds "$work/turbo/prompt_embeds.npy" --steps 2 --strength 1.0
done

# The temporal feature bank over a sequence (a repeated frame, 4 frames,
# 2 banked: merging from the third), fusing at a low threshold: the last
# frame carries every frame's bank, its similarities (OpenBLAS) and merges.
timeout "$LIMIT_S" gst-launch-1.0 -q videotestsrc num-buffers=1 \
  pattern=smpte ! "video/x-raw,format=RGB,width=200,height=120" \
  ! pngenc ! filesink location="$work/frame-200x120.png"
same_bytes "img2img-turbo-bank-200x120" png "$TOOL" img2img \
  --model "$work/turbo" --in "$work/frame-200x120.png" --out OUT \
  --prompt-embeds "$work/turbo/prompt_embeds.npy" --steps 2 --strength 0.8 \
  --frames 4 --temporal feature-bank --bank-frames 2 --fusion-threshold 0.5
