#!/bin/sh
# The model tests print a digest of every model output ("digest CASE HEX");
# on 1, 2, 3 and 4 threads, and on the cpu-strict backend, they must be the
# same, case by case.
# Usage: same-digests.sh TEST_KERNELS_MODELS DATA_DIR
set -eu
EXE=$1 DATA=$2
LIMIT_S=240
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

for t in 1 2 3 4 strict; do
  if [ "$t" = strict ]; then
    backend=cpu-strict threads=2
  else
    backend=cpu threads=$t
  fi
  PPDIFFUSE_BACKEND=$backend PPDIFFUSE_CPU_THREADS=$threads \
    timeout "$LIMIT_S" "$EXE" "$DATA" \
    > "$work/out-$t.txt" 2>&1 || { cat "$work/out-$t.txt" >&2; exit 1; }
  grep -o 'digest .*' "$work/out-$t.txt" > "$work/digests-$t.txt"
done
n=$(wc -l < "$work/digests-1.txt")
if [ "$n" -lt 10 ]; then
  echo "only $n digests printed: the model tests no longer print them?" >&2
  exit 1
fi
for t in 2 3 4 strict; do
  if ! diff "$work/digests-1.txt" "$work/digests-$t.txt" >&2; then
    echo "model outputs on $t threads differ from those on 1 thread" >&2
    exit 1
  fi
done
echo "$n model outputs identical on 1, 2, 3 and 4 threads and on cpu-strict"
