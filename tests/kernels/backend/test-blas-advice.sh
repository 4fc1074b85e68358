#!/bin/sh
# The cpu backend's word on OpenBLAS's SSE3 fallback: a process whose
# OpenBLAS does not know the CPU (and was not told a core type) says once
# which OPENBLAS_CORETYPE the CPU allows; told one, Prescott included, it
# says nothing.  EXPECTED is what tests/blas-coretype.py printed for this
# machine when meson configured (empty where OpenBLAS knows the CPU), so
# the C rule and the tests' rule are held to the same answer.
# Usage: test-blas-advice.sh PPDIFFUSE_TOOL MODEL_DIR [EXPECTED]
set -u
TOOL=$1 MODEL=$2 EXPECTED=${3:-}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
fail=0

# One UNet forward on the cpu backend (its products run on OpenBLAS).
run() {
  timeout 120 env "$@" "$TOOL" unet --backend cpu --model "$MODEL" \
    --sample "$MODEL/sample.npy" --timestep 999 \
    --encoder-hidden-states "$MODEL/encoder_hidden_states.npy" \
    --out "$out.npy" > "$out" 2>&1
  rc=$?
  rm -f "$out.npy"
  if [ "$rc" -ne 0 ]; then
    cat "$out"
    echo "ppdiffuse-tool unet exited with $rc" >&2
    exit 1
  fi
}

said() {
  grep -c "OpenBLAS does not know this CPU" "$out"
}

run -u OPENBLAS_CORETYPE
n=$(said)
if [ -n "$EXPECTED" ]; then
  if [ "$n" -ne 1 ] || ! grep -q "OPENBLAS_CORETYPE=$EXPECTED in" "$out"; then
    cat "$out"
    echo "OpenBLAS falls back to Prescott here: expected one message" \
      "naming OPENBLAS_CORETYPE=$EXPECTED, got $n" >&2
    fail=1
  else
    echo "unset: $(grep "OpenBLAS does not know" "$out")"
  fi
elif [ "$n" -ne 0 ]; then
  cat "$out"
  echo "OpenBLAS chose this CPU's own kernels, yet the backend advised" \
    "another core type" >&2
  fail=1
else
  echo "unset: OpenBLAS chose a core of its own, and nothing was said"
fi

for core in PRESCOTT ${EXPECTED:+"$EXPECTED"}; do
  run OPENBLAS_CORETYPE="$core"
  if [ "$(said)" -ne 0 ]; then
    cat "$out"
    echo "OPENBLAS_CORETYPE=$core was set, yet the backend advised one" >&2
    fail=1
  else
    echo "OPENBLAS_CORETYPE=$core: nothing said"
  fi
done
exit $fail
