#!/bin/sh
# ppdiffuse with its workers on other machines.
#
#   pipelines/multi-node.sh HOSTS [WORKER]
#   pipelines/multi-node.sh --hostfile FILE [WORKER]
#
#   HOSTS   comma-separated host names (Open MPI's --host syntax), e.g.
#           gpu1,gpu2; passed to MPI_Comm_spawn as the "host" info key
#   FILE    an Open MPI hostfile ("gpu1 slots=2" per line); passed as the
#           "hostfile" info key
#   WORKER  path of ppdiffuse-worker (default $PPDIFFUSE_WORKER, else the
#           installed one)
#
# Writes $OUT (default multi-node.ogv in the current folder): 10 s of
# 640x480 Theora.  A run that fails removes it and exits non-zero.
#
# This process is rank 0: it runs the pipeline and the image phases; the
# workers run the denoising steps.  What must hold before it can work:
#
#   - ppdiffuse-worker is installed at the SAME absolute path on every host
#     (meson install with the same prefix, or a shared file system).  Rank 0
#     hands that one path to MPI_Comm_spawn; each host executes it as is.
#   - Open MPI (the same version) is installed on every host, and this
#     machine reaches each host over ssh without a password (or runs in a
#     Slurm allocation); Open MPI starts its daemons there that way.
#   - The hosts reach each other and this machine over TCP: Open MPI picks
#     the ports unless they are pinned (docs/multi-node.md, "Firewall and
#     ports").
#   - The host names resolve the same way on every machine.
#
# Heartbeats travel over MPI between rank 0 and every worker, on whatever
# host: a worker that dies, freezes or is cut off becomes an element error
# after timeout-ms, and workers leave on their own when rank 0 goes silent.
# Killing workers by pid after a fault reaches rank 0's own host only;
# remote workers end by their watchdog or by Open MPI tearing the job down.
# docs/multi-node.md: what to install, ports, Slurm, troubleshooting.
set -eu

usage() {
  echo "usage: $0 HOSTS [WORKER] | $0 --hostfile FILE [WORKER]" >&2
  exit 2
}

[ $# -ge 1 ] || usage
if [ "$1" = "--hostfile" ]; then
  [ $# -ge 2 ] || usage
  PLACEMENT="hostfile=$2"
  shift 2
else
  PLACEMENT="hosts=$1"
  shift
fi
WORKER=${1:-${PPDIFFUSE_WORKER:-}}

# With ranks=4 and steps=8, each worker runs two steps.  timeout-ms covers
# ssh start-up of the remote daemons as well as every later wait.
set -- ppdiffuse ranks=4 steps=8 model=builtin:anisotropic timeout-ms=60000 \
  "$PLACEMENT"
if [ -n "$WORKER" ]; then
  set -- "$@" worker="$WORKER"
fi

OUT=${OUT:-multi-node.ogv}

if timeout --kill-after=10 600 gst-launch-1.0 -q \
  videotestsrc num-buffers=300 \
  ! video/x-raw,format=RGBA,width=640,height=480,framerate=30/1 \
  ! "$@" \
  ! videoconvert ! theoraenc ! oggmux ! filesink location="$OUT"; then
  echo "multi-node: wrote $OUT"
else
  status=$?
  rm -f "$OUT"
  echo "multi-node: the pipeline failed (exit status $status); see above" >&2
  exit "$status"
fi
