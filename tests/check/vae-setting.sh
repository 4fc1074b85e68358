#!/bin/sh
# A pipeline as released, its vae/ an AutoencoderKL (the full SD VAE's
# layout, small), runs as it is: through a 2-worker mesh its frames equal
# ppdiffuse-tool img2img's, frame for frame.  With a TAESD kept elsewhere,
# named by the element's vae setting (ppdiffuse-tool --vae), its frames
# equal those of the same pipeline with that TAESD in its vae/, through
# the mesh and through the tool.  ppdiffuse-tool info says which
# components run.  A VAE of another class is refused naming it and the
# classes that run; a vae that is not there is named.
# Usage: vae-setting.sh PPDIFFUSE_TOOL
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
"$TOOL" make-tiny --kind vae-kl --out "$work/released/vae" --seed 6 >/dev/null
embeds="$work/model/prompt_embeds.npy"

# info says what runs.
"$TOOL" info "$work/released" > "$work/info.txt"
grep -q "runs: *yes: the workers' denoising steps" "$work/info.txt"
grep -q "runs: *yes: rank 0's text prompts" "$work/info.txt"
grep -q "class: *AutoencoderKL" "$work/info.txt"
grep -q "runs: *yes: rank 0's encode and decode (the full VAE" "$work/info.txt"
grep -q "dtypes: *F32 (" "$work/info.txt"
"$TOOL" info "$work/taesd&x=1" | grep -q "runs: *yes: rank 0's encode and decode (TAESD"
echo "info: what runs"

# The AutoencoderKL pipeline as it is: the element's frames are the tool's.
timeout "$LIMIT_S" gst-launch-1.0 -q videotestsrc num-buffers="$FRAMES" \
  pattern=ball ! video/x-raw,format=RGB,width=48,height=40 \
  ! pngenc ! multifilesink location="$work/in-%02d.png"
timeout --kill-after="$KILL_AFTER_S" "$LIMIT_S" gst-launch-1.0 -q \
  multifilesrc location="$work/in-%02d.png" index=0 \
  stop-index=$((FRAMES - 1)) caps=image/png,framerate=25/1 \
  ! pngdec ! videoconvert ! video/x-raw,format=RGB \
  ! ppdiffuse ranks=2 steps=2 strength=0.8 seed=5 prompt-embeds="$embeds" \
    model="$work/released" \
  ! videoconvert ! video/x-raw,format=RGB ! multifilesink \
    location="$work/kl-element-%02d.rgb"
i=0
while [ $i -lt "$FRAMES" ]; do
  f=$(printf %02d $i)
  "$TOOL" img2img --model "$work/released" --in "$work/in-$f.png" \
    --out "$work/kl-tool-$f.png" --prompt-embeds "$embeds" --steps 2 \
    --strength 0.8 --seed 5 >/dev/null
  timeout "$LIMIT_S" gst-launch-1.0 -q filesrc location="$work/kl-tool-$f.png" \
    ! pngdec ! videoconvert ! video/x-raw,format=RGB \
    ! filesink location="$work/kl-tool-$f.rgb"
  cmp "$work/kl-element-$f.rgb" "$work/kl-tool-$f.rgb"
  i=$((i + 1))
done
echo "element: an AutoencoderKL vae/ gives ppdiffuse-tool's frames ($FRAMES)"

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
cp -r "$work/released" "$work/vq"
sed -i 's/"AutoencoderKL"/"VQModel"/' "$work/vq/vae/config.json"
expect_error "the VAE class is VQModel" model="$work/vq"
expect_error "runs AutoencoderTiny (TAESD) and AutoencoderKL" model="$work/vq"
expect_error "vae '$work/nowhere' does not exist" model="$work/released" \
  vae="$work/nowhere"
echo "errors name the class, the classes that run and a missing folder"
