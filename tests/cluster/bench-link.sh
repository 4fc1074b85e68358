#!/bin/bash
# Transport cost per hop on the test cluster: tests/bench/ppdiffuse-bench
# with one chunk in flight (max-in-flight=1, so a frame's time is one round
# trip and nothing queues), W = 1 and 2 workers, once with the workers on
# rank 0's host and once on the cluster's hosts (ppcl-n1, ppcl-n2: every
# hop crosses a veth link).  Going from W = 1 to W = 2 adds one hop and one
# stage; the difference of the round trips is what one hop costs, set
# against a memcpy of the same payload.
#
#   tests/cluster/bench-link.sh BUILD_DIR
#
# Payloads (builtin:stamp's sample is F32 with 3 planes, 12 bytes a pixel):
#   85x64    65,280 bytes: a 512x512 SD latent (1x4x64x64 F32, 65,536 bytes)
#   640x480  3,686,400 bytes: exactly a raw 720p RGBA frame
# Runs as root (cluster.sh); prints a table, fails only when a run fails.
set -eu
BUILD=$(cd "${1:?usage: $0 BUILD_DIR}" && pwd)
HERE=$(cd "$(dirname "$0")" && pwd)
FRAMES=${PP_BENCH_FRAMES:-200}
export GST_PLUGIN_PATH_1_0=$BUILD/gst/ppdiffuse
export PPDIFFUSE_WORKER=$BUILD/mpi-helper/ppdiffuse-worker
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_mpi_yield_when_idle=1
export GST_REGISTRY=${TMPDIR:-/tmp}/ppdiffuse-bench-link-registry.bin

if [ -z "${PP_CLUSTER_HOSTS:-}" ]; then
  exec "$HERE/cluster.sh" -n 2 "$0" "$@"
fi
read -r -a HOSTS <<<"$PP_CLUSTER_HOSTS"

run() {  # SIZE PLACEMENT [--hosts H]: one line of the table
  local size=$1 placement=$2 out
  shift 2
  out=$("$BUILD/tests/bench/ppdiffuse-bench" --steps 2 --step-ms 1 \
    --max-ranks 2 --max-in-flight 1 --frames "$FRAMES" \
    --width "${size%x*}" --height "${size#*x}" "$@")
  echo "$out" | awk -v size="$size" -v where="$placement" '
    /^chunk payload:/ { bytes = $3; memcpy = $8 }
    $1 == "1" && NF == 8 { rt1 = 1000 / $2 }
    $1 == "2" && NF == 8 { rt2 = 1000 / $2 }
    END {
      printf "%-8s %10d %-18s %9.3f %9.3f %10.3f %10.4f %8.0fx\n", size,
        bytes, where, rt1, rt2, rt2 - rt1, memcpy / 1000,
        (rt2 - rt1) / (memcpy / 1000)
    }'
}

printf "%-8s %10s %-18s %9s %9s %10s %10s %9s\n" payload bytes workers \
  "rt W=1" "rt W=2" "hop ms" "memcpy ms" "hop/copy"
for size in 85x64 640x480; do
  run "$size" "rank 0's host"
  run "$size" "${HOSTS[0]},${HOSTS[1]}" --hosts "${HOSTS[0]},${HOSTS[1]}"
done
