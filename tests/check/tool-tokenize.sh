#!/bin/sh
# ppdiffuse-tool tokenize: the fixture prompts give the reference's ids in
# both pad conventions; an over-long prompt is truncated with a warning that
# counts its tokens; invalid UTF-8 fails naming the line and byte offset;
# make-tiny's tokenizer/ merges the test sentences into words and pads as
# its kind does.
# Usage: tool-tokenize.sh PPDIFFUSE_TOOL FIXTURE_DIR (tests/data/tokenizer)
set -eu
TOOL=$1
DATA=$2
MAX_LENGTH=77
# Ids below this are single bytes (with or without </w>).
FIRST_MERGE=512
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

for kind in sd15 sd2; do
  "$TOOL" tokenize --tokenizer "$DATA/$kind" \
      --prompts-file "$DATA/prompts.txt" > "$work/out-$kind.txt" \
      2> "$work/err-$kind.txt"
  cmp "$work/out-$kind.txt" "$DATA/expected-$kind.txt" \
    || fail "$kind: ids differ from expected-$kind.txt"
  grep -q "prompts.txt:140 has 182 tokens" "$work/err-$kind.txt" \
    || fail "$kind: no truncation warning for prompts.txt:140"
  echo "ok: $kind fixture, $(wc -l < "$work/out-$kind.txt") prompts"
done

# Over-long --prompt: 80 digits (a token each), 82 tokens with BOS and EOS.
long=$(printf '7 %.0s' $(seq 80))
"$TOOL" tokenize --tokenizer "$DATA/sd15" --prompt "$long" \
    > "$work/long.txt" 2> "$work/long-err.txt"
grep -q "warning: the prompt has 82 tokens" "$work/long-err.txt" \
  || fail "no warning naming 82 tokens: $(cat "$work/long-err.txt")"
[ "$(wc -w < "$work/long.txt")" -eq "$MAX_LENGTH" ] \
  || fail "the long prompt did not give $MAX_LENGTH ids"
echo "ok: long prompt truncated with a warning"

# Invalid UTF-8 on line 2, byte 4 (0xff).
printf 'fine\nbad \377 byte\n' > "$work/bad.txt"
status=0
"$TOOL" tokenize --tokenizer "$DATA/sd15" --prompts-file "$work/bad.txt" \
    > /dev/null 2> "$work/bad-err.txt" || status=$?
[ "$status" -eq 1 ] || fail "invalid UTF-8: exit status $status, expected 1"
grep -q "bad.txt:2: .*0xff at byte offset 4" "$work/bad-err.txt" \
  || fail "invalid UTF-8 error names no line and offset: $(cat "$work/bad-err.txt")"
echo "ok: invalid UTF-8 named"

# A missing tokenizer folder.
status=0
"$TOOL" tokenize --tokenizer "$work/none" --prompt x > /dev/null \
    2> "$work/none-err.txt" || status=$?
[ "$status" -eq 1 ] && grep -q "$work/none/vocab.json" "$work/none-err.txt" \
  || fail "missing tokenizer: status $status, $(cat "$work/none-err.txt")"
echo "ok: missing tokenizer named"

# make-tiny: every test sentence's words are merged tokens, and the pad is
# EOS (sd15) or "!" (turbo: id 0).
for kind in sd15 turbo; do
  "$TOOL" make-tiny --kind "$kind" --out "$work/$kind" > /dev/null
  ids=$("$TOOL" tokenize --tokenizer "$work/$kind/tokenizer" \
      --prompt "a photo of a cat sitting on the table")
  set -- $ids
  bos=$1 eos=${11} pad=${12}
  shift
  # photo of cat sitting on the table: 7 merged words ("a" is one byte).
  merged=0
  for i in 1 2 3 4 5 6 7 8 9; do
    [ "$1" -ge "$FIRST_MERGE" ] && merged=$((merged + 1))
    shift
  done
  [ "$merged" -eq 7 ] || fail "$kind: $merged merged words of 7: $ids"
  case $kind in
    sd15) [ "$pad" -eq "$eos" ] || fail "sd15 pads with $pad, not EOS $eos" ;;
    turbo) [ "$pad" -eq 0 ] || fail "turbo pads with $pad, not '!' (0)" ;;
  esac
  [ "$bos" -ne "$eos" ] || fail "$kind: BOS equals EOS"
  echo "ok: make-tiny $kind tokenizer"
done
