#!/bin/sh
# The convolution after a nearest ×2 upsampling bound as its four output
# phases (pp_bind_conv_up2, the default) against the upsampling and the
# 3×3 convolution apart ($PPDIFFUSE_UPSAMPLE_CONV=upsample): the UNets',
# TAESD's and the AutoencoderKL's decoders on the fixtures, in float32 on
# the CPU.  The outputs must agree to float32's rounding of the summed
# taps (an NMSE of at most 1e-11; a tap summed into the wrong phase gives
# 1e-3 and more) and must not be the same bytes (which would say the
# phases never ran).  An unknown value is refused, naming the choices.
# Usage: upsample-conv.sh PPDIFFUSE_TOOL NPY_COMPARE DATA_DIR
set -eu
TOOL=$1 COMPARE=$2 DATA=$3
LIMIT_S=240
NMSE=1e-11
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Usage: both NAME RUN (RUN OUT: a function that writes the output)
both() {
  name=$1 run=$2
  for way in phases upsample; do
    if ! PPDIFFUSE_UPSAMPLE_CONV=$way "$run" "$work/$name-$way.npy" \
        >"$work/log" 2>&1; then
      cat "$work/log" >&2
      echo "$name ($way) failed" >&2
      exit 1
    fi
  done
  if ! "$COMPARE" --nmse "$NMSE" "$work/$name-phases.npy" \
      "$work/$name-upsample.npy"; then
    echo "$name: the phases differ from the upsampled convolution" >&2
    exit 1
  fi
  if cmp -s "$work/$name-phases.npy" "$work/$name-upsample.npy"; then
    echo "$name: the same bytes both ways: did the phases run?" >&2
    exit 1
  fi
  echo "$name: phases within NMSE $NMSE of the upsampled convolution"
}

for kind in turbo sd15; do
  unet() {
    m=$DATA/unet-$kind-tiny
    timeout "$LIMIT_S" "$TOOL" unet --backend cpu --model "$m" \
      --sample "$m/sample.npy" --timestep "$(cat "$m/timestep.txt")" \
      --encoder-hidden-states "$m/encoder_hidden_states.npy" --out "$1"
  }
  both "unet-$kind" unet
done
for vae in taesd-tiny vae-kl-tiny; do
  decode() {
    timeout "$LIMIT_S" "$TOOL" vae-decode --backend cpu \
      --model "$DATA/$vae" --latents "$DATA/$vae/latents.npy" --out "$1"
  }
  both "$vae-decode" decode
done

if PPDIFFUSE_UPSAMPLE_CONV=nearest timeout "$LIMIT_S" "$TOOL" vae-decode \
    --backend cpu --model "$DATA/taesd-tiny" \
    --latents "$DATA/taesd-tiny/latents.npy" --out "$work/bad.npy" \
    >"$work/log" 2>&1; then
  echo "PPDIFFUSE_UPSAMPLE_CONV=nearest was taken" >&2
  exit 1
fi
if ! grep -q 'PPDIFFUSE_UPSAMPLE_CONV=nearest: expected phases' "$work/log"
then
  cat "$work/log" >&2
  echo "PPDIFFUSE_UPSAMPLE_CONV=nearest was refused without naming the choices" >&2
  exit 1
fi
echo "PPDIFFUSE_UPSAMPLE_CONV=nearest refused, naming the choices"
