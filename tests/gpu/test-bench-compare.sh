#!/bin/sh
# bench-compare.awk on a bench summary as bench-row.awk writes it: each f16
# way's change from the "defaults, f16" row (the bf16 defaults and a
# missing figure left out), and the ways faster by more than 2 % named
# with the figures that are; a summary without the default row compared
# to nothing.  Run with mawk where it is installed (the GPU machines'
# awk), else awk.
# Usage: test-bench-compare.sh BENCH_COMPARE_AWK
set -eu
AWK_FILE=$1
awk_cmd="awk"
command -v mawk >/dev/null 2>&1 && awk_cmd=mawk
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

row() { printf '%9s %9s %9s %8s %8s %8s  %s\n' "$@"; }
{
  row 6.250 2.800 16.500 97.1 100.0 110.0 "defaults, f16"
  row 6.100 2.900 16.400 98 - - "defaults, bf16"
  row 5.900 2.810 16.000 99 - - "f16, PPDIFFUSE_CUDA_GROUP_NORM=single"
  row 6.300 2.600 - 97 - - "f16, PPDIFFUSE_CUDA_CONV_LAYOUT=padded"
  row 6.260 2.790 16.490 97 - - "f16, PPDIFFUSE_CUDA_GEMM_ALGO=timed"
} >"$work/summary"
"$awk_cmd" -f "$AWK_FILE" "$work/summary" >"$work/out"
cat "$work/out"
cat >"$work/want" <<'WANT'
change from the defaults (f16), negative faster:
     UNet     TAESD    batch4  way
    -5.6%     +0.4%     -3.0%  f16, PPDIFFUSE_CUDA_GROUP_NORM=single
    +0.8%     -7.1%         -  f16, PPDIFFUSE_CUDA_CONV_LAYOUT=padded
    +0.2%     -0.4%     -0.1%  f16, PPDIFFUSE_CUDA_GEMM_ALGO=timed
faster than the defaults by more than 2 %:
  f16, PPDIFFUSE_CUDA_GROUP_NORM=single: UNet -5.6% batch4 -3.0%
  f16, PPDIFFUSE_CUDA_CONV_LAYOUT=padded: TAESD -7.1%
WANT
if ! diff "$work/want" "$work/out" >&2; then
  echo "bench-compare.awk's comparison is not the expected one" >&2
  exit 1
fi
row 6.250 2.800 16.500 97.1 100.0 110.0 "defaults, bf16" >"$work/no-default"
if [ "$("$awk_cmd" -f "$AWK_FILE" "$work/no-default")" != \
    'no "defaults, f16" row: nothing to compare' ]; then
  echo "a summary without the f16 defaults was compared" >&2
  exit 1
fi
echo "bench-compare.awk ($awk_cmd): changes and candidates as expected"
