#!/bin/sh
# A pipeline as released, its vae/ the full AutoencoderKL, runs with a TAESD
# kept elsewhere, named by the element's vae setting (ppdiffuse-tool
# --vae): its frames equal those of the same pipeline with that TAESD in
# its vae/, through a 2-worker mesh and through ppdiffuse-tool img2img;
# ppdiffuse-tool info says which components run and the fix for the VAE.
# Without the setting the start fails naming the class and the setting; a
# vae that is not there is named.  Usage: vae-setting.sh PPDIFFUSE_TOOL
set -eu
TOOL=$1
LIMIT_S=120
KILL_AFTER_S=10
FRAMES=3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$TOOL" make-tiny --kind turbo --out "$work/model" --seed 4 >/dev/null
# The released layout: AutoencoderKL in vae/, the TAESD in a folder of its
# own (a path with '&' and '=' in it: the setting's value is escaped).
cp -r "$work/model" "$work/released"
mv "$work/released/vae" "$work/taesd&x=1"
mkdir "$work/released/vae"
printf '{"_class_name": "AutoencoderKL", "latent_channels": 4}\n' \
  > "$work/released/vae/config.json"
embeds="$work/model/prompt_embeds.npy"

# info says what runs and what does not, with the fix.
"$TOOL" info "$work/released" > "$work/info.txt"
grep -q "runs: *yes: the workers' denoising steps" "$work/info.txt"
grep -q "runs: *yes: rank 0's text prompts" "$work/info.txt"
grep -q "runs: *no: ppdiffuse runs TAESD (AutoencoderTiny) as its VAE, not AutoencoderKL; give the element vae=DIR" "$work/info.txt"
grep -q "dtypes: *F32 (" "$work/info.txt"
"$TOOL" info "$work/taesd&x=1" | grep -q "runs: *yes: rank 0's encode and decode"
echo "info: what runs, what does not and the fix"

run() {
  out=$1
  shift
  timeout --kill-after="$KILL_AFTER_S" "$LIMIT_S" gst-launch-1.0 -q \
    videotestsrc num-buffers="$FRAMES" pattern=ball \
    ! video/x-raw,format=RGB,width=48,height=40 \
    ! ppdiffuse ranks=2 steps=2 strength=0.8 seed=5 prompt-embeds="$embeds" \
      "$@" ! filesink location="$out"
}

run "$work/own.rgb" model="$work/model"
run "$work/set.rgb" model="$work/released" vae="$work/taesd&x=1"
cmp "$work/own.rgb" "$work/set.rgb"
[ -s "$work/own.rgb" ]
echo "element: vae= gives the frames of the pipeline's own TAESD"

timeout "$LIMIT_S" gst-launch-1.0 -q videotestsrc num-buffers=1 pattern=ball \
  ! video/x-raw,width=48,height=40 ! pngenc ! filesink location="$work/in.png"
"$TOOL" img2img --model "$work/model" --in "$work/in.png" \
  --out "$work/tool-own.png" --prompt-embeds "$embeds" --steps 2 \
  --strength 0.8 --seed 5 >/dev/null
"$TOOL" img2img --model "$work/released" --vae "$work/taesd&x=1" \
  --in "$work/in.png" --out "$work/tool-set.png" --prompt-embeds "$embeds" \
  --steps 2 --strength 0.8 --seed 5 >/dev/null
cmp "$work/tool-own.png" "$work/tool-set.png"
echo "ppdiffuse-tool: --vae gives the image of the pipeline's own TAESD"

expect_error() {
  needle=$1
  shift
  status=0
  run "$work/bad.rgb" "$@" > "$work/err.txt" 2>&1 || status=$?
  if [ "$status" = 0 ] || ! grep -qF "$needle" "$work/err.txt"; then
    echo "expected an error naming '$needle' (status $status):" >&2
    cat "$work/err.txt" >&2
    exit 1
  fi
}
expect_error "holds an AutoencoderKL" model="$work/released"
expect_error "point the element's vae setting" model="$work/released"
expect_error "vae '$work/nowhere' does not exist" model="$work/released" \
  vae="$work/nowhere"
echo "errors name the class, the setting and a missing folder"
