#!/bin/sh
# Passes rank 0's probe, then exits at once when spawned: a worker that
# dies before MPI_Init, on purpose.
if [ "${1:-}" = "--ppdiffuse-probe" ]; then
  echo "ppdiffuse-worker (a test script that dies at start)"
  exit 0
fi
echo "dies-at-start.sh: exiting with status ${DIES_AT_START_STATUS:-3}" >&2
exit "${DIES_AT_START_STATUS:-3}"
