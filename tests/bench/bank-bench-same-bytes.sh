#!/bin/sh
# bank-bench's small layers on 1 and on 4 of the CPU backend's threads
# (the bank's products, choices, norms and means are split among them
# there: 256 rows, 512 compared), and, given the CUDA module, on the cuda
# backend (its kernels, emulated on the CPU where there is no device):
# each layer's digest of its outputs and extended keys and values must be
# the same every way.  The runs on 4 threads and on cuda add --profile,
# whose profiled frame comes after the digests and names its ops.
# Usage: bank-bench-same-bytes.sh BANK_BENCH [CUDA_MODULE]
set -eu
BENCH=$1
MODULE=${2:-}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# run NAME VAR=VALUE… -- BENCH_ARGS…
run() {
  name=$1
  shift
  vars=
  while [ "$1" != -- ]; do
    vars="$vars $1"
    shift
  done
  shift
  # shellcheck disable=SC2086 # the assignments, one word each
  env $vars "$BENCH" --small "$@" >"$work/$name"
  cat "$work/$name"
  # Each layer's line ends with its digest: 8 hexadecimal digits.
  grep -E ' [0-9a-f]{8}$' "$work/$name" | awk '{ print $NF }' >"$work/$name.d"
  if [ ! -s "$work/$name.d" ]; then
    echo "bank-bench ($name) printed no layer's digest" >&2
    exit 1
  fi
}
run t1 PPDIFFUSE_CPU_THREADS=1 --
run t4 PPDIFFUSE_CPU_THREADS=4 -- --profile
if ! cmp -s "$work/t1.d" "$work/t4.d"; then
  echo "the bank's bytes on 4 threads are not those on 1" >&2
  exit 1
fi
# --profile's extra frame comes after the digest, and names its ops.
if ! grep -q "one frame's ops (host time, .*bank_merge" "$work/t4"; then
  echo "bank-bench --profile printed no op of a frame" >&2
  exit 1
fi
echo "the bank's bytes are the same on 1 and 4 threads ($(wc -l <"$work/t1.d") layers)"
[ -n "$MODULE" ] || exit 0
run cuda PPDIFFUSE_CUDA_MODULE="$MODULE" PPDIFFUSE_CUDA_TF32=0 -- --backend cuda \
  --profile
if ! grep -q "one frame's ops (device time, .*bank_fuse" "$work/cuda"; then
  echo "bank-bench --profile on cuda printed no device time" >&2
  exit 1
fi
if ! cmp -s "$work/t1.d" "$work/cuda.d"; then
  echo "the bank's bytes on the cuda backend are not the CPU backend's" >&2
  exit 1
fi
echo "the bank's bytes are the same on the cuda backend"
