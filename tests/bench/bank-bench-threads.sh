#!/bin/sh
# bank-bench's small layers on 1 and on 4 of the CPU backend's threads:
# the bank's products, choices, norms and means are split among them
# there (256 rows, 512 compared), and each layer's digest of its outputs
# and extended keys and values must be the same both ways.
# Usage: bank-bench-threads.sh BANK_BENCH
set -eu
BENCH=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for t in 1 4; do
  PPDIFFUSE_CPU_THREADS=$t "$BENCH" --small >"$work/t$t"
  cat "$work/t$t"
  # Each layer's line ends with its digest: 8 hexadecimal digits.
  grep -E ' [0-9a-f]{8}$' "$work/t$t" | awk '{ print $NF }' >"$work/d$t"
done
if [ ! -s "$work/d1" ]; then
  echo "bank-bench printed no layer's digest" >&2
  exit 1
fi
if ! cmp -s "$work/d1" "$work/d4"; then
  echo "the bank's bytes on 4 threads are not those on 1" >&2
  exit 1
fi
echo "the bank's bytes are the same on 1 and 4 threads ($(wc -l <"$work/d1") layers)"
