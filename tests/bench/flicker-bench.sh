#!/bin/sh
# Runs flicker-bench on a make-tiny turbo pipeline written for it.
# Usage: flicker-bench.sh PPDIFFUSE_TOOL FLICKER_BENCH [bench options]
set -eu
TOOL=$1 BENCH=$2
shift 2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$TOOL" make-tiny --kind turbo --out "$work/model" --seed 4 >/dev/null
"$BENCH" "$work/model" "$@"
