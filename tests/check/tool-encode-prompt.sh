#!/bin/sh
# ppdiffuse-tool encode-prompt: on a pipeline whose text_encoder/ is a
# reference fixture (tests/data/clip-text) it must give the reference's
# last hidden state; on make-tiny's pipelines it writes [1, 77, D] with D the
# UNet's cross_attention_dim, and --prompt gives what --ids gives with the
# ids of ppdiffuse-tool tokenize; a text encoder of another width than the
# UNet's, an id outside the vocabulary and a missing tokenizer/ are clear
# errors.
# Usage: tool-encode-prompt.sh PPDIFFUSE_TOOL NPY_COMPARE DATA_DIR
set -eu
TOOL=$1 COMPARE=$2 DATA=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# fails CMD… : the command must fail; its stderr is left in $work/err.txt.
fails() {
  if "$@" 2> "$work/err.txt"; then
    echo "accepted: $*" >&2
    exit 1
  fi
  cat "$work/err.txt"
}

# A pipeline of a fixture's text encoder and a UNet config of width $2.
pipeline() {
  rm -rf "$work/p"
  mkdir -p "$work/p/unet"
  cp -r "$DATA/clip-text/$1" "$work/p/text_encoder"
  echo "{\"cross_attention_dim\": $2}" > "$work/p/unet/config.json"
}

for config in quick-gelu gelu; do
  width=$(sed -n 's/.*"hidden_size": \([0-9]*\).*/\1/p' \
    "$DATA/clip-text/$config/config.json")
  pipeline "$config" "$width"
  for seq in padded random; do
    "$TOOL" encode-prompt --model "$work/p" \
      --ids "$(cat "$DATA/clip-text/$config/ids-$seq.txt")" \
      --out "$work/e.npy"
    "$COMPARE" "$work/e.npy" \
      "$DATA/clip-text/$config/$seq/last_hidden_state.npy"
  done
done

# A text encoder of width 32 beside a UNet that attends to 16.
pipeline quick-gelu 16
fails "$TOOL" encode-prompt --model "$work/p" --ids "998 1 999" \
  --out "$work/e.npy"
grep -q "hidden_size is 32" "$work/err.txt"
grep -q "cross_attention_dim is 16" "$work/err.txt"
grep -q "text_encoder/config.json" "$work/err.txt"
grep -q "unet/config.json" "$work/err.txt"

for kind in sd15 turbo; do
  "$TOOL" make-tiny --kind "$kind" --out "$work/$kind" > /dev/null
  dim=$(sed -n 's/.*"cross_attention_dim" *: *\([0-9]*\).*/\1/p' \
    "$work/$kind/unet/config.json")
  "$TOOL" encode-prompt --model "$work/$kind" --ids "1022 17 1023" \
    --out "$work/$kind.npy"
  head -c 128 "$work/$kind.npy" | grep -q "'shape': (1, 77, $dim)"
done
grep -q '"quick_gelu"' "$work/sd15/text_encoder/config.json"
grep -q '"gelu"' "$work/turbo/text_encoder/config.json"

fails "$TOOL" encode-prompt --model "$work/sd15" --ids "1022 1024" \
  --out "$work/e.npy"
grep -q "outside the vocabulary of 1024" "$work/err.txt"
for kind in sd15 turbo; do
  ids=$("$TOOL" tokenize --tokenizer "$work/$kind/tokenizer" \
    --prompt "a photo of a cat")
  "$TOOL" encode-prompt --model "$work/$kind" --ids "$ids" \
    --out "$work/$kind-ids.npy"
  "$TOOL" encode-prompt --model "$work/$kind" --prompt "a photo of a cat" \
    --out "$work/$kind-prompt.npy"
  cmp "$work/$kind-ids.npy" "$work/$kind-prompt.npy"
done
rm -r "$work/sd15/tokenizer"
fails "$TOOL" encode-prompt --model "$work/sd15" --prompt "a cat" \
  --out "$work/e.npy"
grep -q "tokenizer" "$work/err.txt"
echo "encode-prompt matches the reference and refuses what it cannot encode"
