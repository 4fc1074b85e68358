#!/bin/sh
# ppdiffuse-tool on the reference fixtures: unet, vae-encode and vae-decode
# must match the PyTorch reference; info must describe a model; bad input
# must be a clear error, not a crash.
# Usage: tool-fixtures.sh PPDIFFUSE_TOOL NPY_COMPARE DATA_DIR
set -eu
TOOL=$1 COMPARE=$2 DATA=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

for family in sd15 turbo; do
  dir="$DATA/unet-$family-tiny"
  "$TOOL" unet --model "$dir" --sample "$dir/sample.npy" \
    --timestep "$(cat "$dir/timestep.txt")" \
    --encoder-hidden-states "$dir/encoder_hidden_states.npy" \
    --out "$work/$family.npy"
  "$COMPARE" "$work/$family.npy" "$dir/out.npy"
done

vae="$DATA/taesd-tiny"
"$TOOL" vae-encode --model "$vae" --image "$vae/image.npy" --out "$work/z.npy"
"$COMPARE" "$work/z.npy" "$vae/latents.npy"
"$TOOL" vae-decode --model "$vae" --latents "$vae/latents.npy" \
  --out "$work/x.npy"
"$COMPARE" "$work/x.npy" "$vae/decoded.npy"

"$TOOL" info "$DATA/unet-sd15-tiny" > "$work/info.txt"
grep -q "UNet2DConditionModel" "$work/info.txt"
grep -q "tensors: *208" "$work/info.txt"
grep -Eq "sha256: *[0-9a-f]{64}" "$work/info.txt"

# A truncated weights file: an error naming the file, exit status 1.
mkdir "$work/broken"
cp "$vae/config.json" "$work/broken/"
head -c 1000 "$vae/diffusion_pytorch_model.safetensors" \
  > "$work/broken/diffusion_pytorch_model.safetensors"
if "$TOOL" vae-encode --model "$work/broken" --image "$vae/image.npy" \
    --out "$work/never.npy" 2> "$work/err.txt"; then
  echo "a truncated model was accepted" >&2
  exit 1
fi
grep -q "diffusion_pytorch_model.safetensors" "$work/err.txt"
cat "$work/err.txt"
echo "ppdiffuse-tool matches the reference fixtures"
