#!/bin/sh
# Convolutions with their channels padded with zeros
# (PPDIFFUSE_CUDA_CONV_LAYOUT=padded: a model's first and last, an image's
# 3 channels and a latent's 4, channels-last on tensor cores) give the
# bytes of the nhwc way, which runs them channels first: the zeros add
# nothing to a sum.  Both with the bias added by a pass of the backend's
# own (PPDIFFUSE_CUDA_CONV_EPILOGUE=pass): a padded convolution whose
# output channels are padded adds it so, where cuDNN's fused epilogue
# would round the channels-first one's sum once.  The UNet, TAESD and
# AutoencoderKL fixtures, and a tiny pipeline's frames through CUDA graphs
# (captured after the first frame, as a worker's), in both 16-bit dtypes,
# on the CUDA emulation ($PPDIFFUSE_CUDA_MODULE); each padded run must
# have padded (its launches of the padding kernel, counted at exit).
# Usage: conv-padded.sh PPDIFFUSE_TOOL DATA_DIR
set -eu
TOOL=$1 DATA=$2
LIMIT_S=240
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Usage: same NAME EXT RUN (RUN OUT DTYPE: a function that writes the
# output, a file of extension EXT, with weights of DTYPE)
same() {
  name=$1 ext=$2 run=$3
  for dtype in f16 bf16; do
    for way in nhwc padded; do
      if ! PPDIFFUSE_CUDA_CONV_LAYOUT=$way PPDIFFUSE_CUDA_CONV_EPILOGUE=pass \
          PP_CUDA_EMU_LAUNCHES=pad_channels_kernel \
          "$run" "$work/$name-$dtype-$way.$ext" "$dtype" >"$work/log" 2>&1
      then
        cat "$work/log" >&2
        echo "$name ($dtype, $way) failed" >&2
        exit 1
      fi
      launches=$(sed -n 's/^emulated launches of pad_channels_kernel: //p' \
        "$work/log")
      if [ "$way" = padded ] && [ "${launches:-0}" -eq 0 ]; then
        echo "$name ($dtype): no convolution was padded" >&2
        exit 1
      fi
    done
    if ! cmp -s "$work/$name-$dtype-nhwc.$ext" \
        "$work/$name-$dtype-padded.$ext"; then
      echo "$name ($dtype): padded convolutions changed the output" >&2
      exit 1
    fi
    echo "$name ($dtype): the same bytes padded ($launches padding launches)"
  done
}

unet() {
  timeout "$LIMIT_S" "$TOOL" unet --model "$DATA/unet-turbo-tiny" \
    --sample "$DATA/unet-turbo-tiny/sample.npy" \
    --timestep "$(cat "$DATA/unet-turbo-tiny/timestep.txt")" \
    --encoder-hidden-states "$DATA/unet-turbo-tiny/encoder_hidden_states.npy" \
    --out "$1" --dtype "$2"
}
same unet-turbo npy unet
for vae in taesd-tiny vae-kl-tiny; do
  encode() {
    timeout "$LIMIT_S" "$TOOL" vae-encode --model "$DATA/$vae" \
      --image "$DATA/$vae/image.npy" --out "$1" --dtype "$2"
  }
  decode() {
    timeout "$LIMIT_S" "$TOOL" vae-decode --model "$DATA/$vae" \
      --latents "$DATA/$vae/latents.npy" --out "$1" --dtype "$2"
  }
  same "$vae-encode" npy encode
  same "$vae-decode" npy decode
done

"$TOOL" make-tiny --kind turbo --out "$work/turbo" --seed 3 >/dev/null
timeout "$LIMIT_S" gst-launch-1.0 -q videotestsrc num-buffers=1 pattern=ball \
  ! video/x-raw,format=RGB,width=44,height=28 ! pngenc \
  ! filesink location="$work/in.png"
frames() {
  timeout "$LIMIT_S" "$TOOL" img2img --model "$work/turbo" \
    --in "$work/in.png" --out "$1" \
    --prompt-embeds "$work/turbo/prompt_embeds.npy" --strength 0.7 --seed 9 \
    --steps 2 --frames 3 --cuda-graphs 1 --dtype "$2"
}
same img2img-graphs png frames
