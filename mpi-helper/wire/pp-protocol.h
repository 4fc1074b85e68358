/* ppdiffuse — the mesh's wire protocol: what rank 0 and the workers must
 * agree on, and nothing else.  Both sides include this header; neither
 * includes the other's.
 *
 * The message formats themselves are described where they are encoded:
 * the handshake in pp-handshake.h, chunk envelopes in pp-envelope.h,
 * heartbeats and reports in pp-heartbeat.h. */
#pragma once

#include <glib.h>

#include "pp-log.h"

G_BEGIN_DECLS

/* The handshake's protocol version: a peer of another version is refused.
 * 5: heartbeats carry the worker's cumulative busy time; the first chunk
 * of a cache epoch with new settings carries them (PP_SETTINGS_TENSOR).
 * 6: a worker loading its model reports progress (PP_TAG_LOAD_PROGRESS)
 * until its handshake reply.
 * 7: the settings are a serialised PpSettings (pp-settings.h), sent with
 * the first chunk of every mesh too: the plan names only what to load. */
/* 8: heartbeats carry the bytes of the worker's per-stream state (the
 * temporal feature bank); the settings carry temporal, bank-frames and
 * fusion-threshold.
 * 9: a worker's clean end sends rank 0 a farewell, an empty message on
 * the heartbeat tag, after its last heartbeat (pp-liveness.h).
 * 10: heartbeats carry the worker's pace (PpPace, pp-heartbeat.h): its
 * measure of the frames' current size.
 * 11: heartbeats carry the sender's process CPU time. */
#define PP_PROTOCOL_VERSION 11

/* MPI tags on the world communicator (rank 0 = 0, workers = 1..W). */
enum
{
  PP_TAG_HANDSHAKE = 101,       /* rank 0 → worker: hello */
  PP_TAG_HANDSHAKE_REPLY = 102, /* worker → rank 0: reply */
  PP_TAG_HEAD = 103,            /* a chunk's envelope head */
  PP_TAG_PAYLOAD = 104,         /* one tensor of a chunk */
  PP_TAG_HEARTBEAT = 105,       /* both ways */
  PP_TAG_REPORT = 106,          /* worker → rank 0: why it fails */
  PP_TAG_NCCL_ID = 107,         /* an NCCL communicator's unique id, from
                                 * its lowest rank to the others */
  /* The emulated NCCL table (tests/support/pp-nccl-emulated.h): its
   * communicators' set-up, and their payloads. */
  PP_TAG_NCCL_EMULATED_BOOT = 108,
  PP_TAG_NCCL_EMULATED = 109,
  /* worker → rank 0, between the hello and the reply: the bytes of its
   * model read so far (PP_LOAD_PROGRESS_BYTES, little-endian u64), sent
   * whenever it grew; each keeps rank 0 from giving up on the load. */
  PP_TAG_LOAD_PROGRESS = 110,
};

#define PP_LOAD_PROGRESS_BYTES 8
/* How often a loading worker reports: a quarter of the plan's timeout-ms,
 * within these bounds. */
#define PP_LOAD_PROGRESS_MIN_MS 10
#define PP_LOAD_PROGRESS_MAX_MS 500

/* Largest message of each kind a receiver accepts. */
#define PP_HANDSHAKE_MAX (64 * 1024)
/* A heartbeat is fourteen numbers: anything larger is not one. */
#define PP_HEARTBEAT_MAX 256
#define PP_REPORT_MAX (16 * 1024)
/* Magic, rank count, up to 64 ranks and the 128-byte id. */
#define PP_NCCL_ID_MAX 512

/* Heartbeats go every timeout-ms / PP_HEARTBEAT_DIVISOR, at most every
 * PP_HEARTBEAT_MIN_PERIOD_MS; a peer silent for timeout-ms is dead. */
#define PP_HEARTBEAT_DIVISOR 4
#define PP_HEARTBEAT_MIN_PERIOD_MS 10

/* The shutdown marker carries each worker's busy time back to rank 0 in
 * this F64 [W] tensor; worker rank R writes element R - 1. */
#define PP_BUSY_TENSOR "busy_s"

/* The first chunk of a mesh, and the first chunk of a cache epoch whose
 * settings differ from the last epoch's, carries the settings (a PpSettings
 * as pp_settings_serialize writes it: strength, seed, prompt, the model's
 * own live parameters) in this U8 [n] tensor.  Each worker applies it just before it
 * computes that chunk, so every step of a frame runs with the settings of
 * one epoch. */
#define PP_SETTINGS_TENSOR "settings"
/* The tensor of a stream chunk whose shape its work depends on: the
 * model's sample (pp-model.h: PP_MODEL_SAMPLE_NAME).  A chunk whose sample
 * has another shape than the one before is other work (PpPace). */
#define PP_WORK_TENSOR "sample"
/* Settings longer than this are none of ours. */
#define PP_SETTINGS_MAX (64 * 1024)

/* Deadlines a worker keeps on its own, before and after it has a plan
 * (whose timeout-ms bounds everything in between). */
/* MPI start-up and the handshake: the hello follows the spawn at once,
 * so this only bounds a broken parent.  Rank 0 passes its own start
 * budget as PP_WORKER_START_ARG=MS, which replaces it: a worker of a start
 * rank 0 gave up ends by itself soon after rank 0 stopped waiting. */
#define PP_WORKER_HELLO_TIMEOUT_MS 60000
#define PP_WORKER_START_ARG "--start-timeout-ms"
/* Rank 0's answer when a spawn completes after it gave up on it: a hello
 * of zero bytes tells the worker to exit at once, quietly. */
#define PP_HELLO_CANCEL_BYTES 0
/* What such a worker logs as it leaves. */
#define PP_WORKER_CANCELLED_TEXT "rank 0 gave up on this start before this " \
  "worker came up"
/* Run as "ppdiffuse-worker --ppdiffuse-probe", a worker prints one line
 * starting with PP_WORKER_PROBE_REPLY and exits 0 without touching MPI:
 * rank 0 checks so that the executable it is about to spawn is a worker
 * that runs on this host (not another program, not one missing a
 * library). */
#define PP_WORKER_PROBE_ARG "--ppdiffuse-probe"
#define PP_WORKER_PROBE_REPLY "ppdiffuse-worker "
/* MPI teardown after a clean shutdown, before the worker just exits. */
/* (Sanitizer builds set a longer one: the exit includes the leak check.) */
#ifndef PP_WORKER_EXIT_GRACE_MS
#define PP_WORKER_EXIT_GRACE_MS 5000
#endif
/* How long rank 0 gives workers to exit on their own after a clean
 * shutdown before it kills them (the longer of the two: the worker exits
 * first).  (Sanitizer builds set a longer one too.) */
#ifndef PP_MESH_EXIT_GRACE_MS
#define PP_MESH_EXIT_GRACE_MS 3000
#endif
/* A failing worker waits at most this long for rank 0 to take its report. */
#define PP_WORKER_REPORT_MS 1000

/* Environment. */
/* Open MPI's recovery switch, which rank 0 turns on before it initialises
 * MPI unless the application set it (pp-mpi-start.c). */
#define PP_OMPI_RECOVERY_ENV "OMPI_MCA_orte_enable_recovery"
/* PMIx's store of job data, which rank 0 sets to its hash table before it
 * initialises MPI unless the application chose one (pp-mpi-start.c). */
#define PP_PMIX_GDS_ENV "PMIX_MCA_gds"
#define PP_PMIX_GDS "hash"
/* The lowest port Open MPI's TCP transport listens on (IPv4, IPv6), which
 * rank 0 of a mesh on its own host sets to 0, a port the kernel picks,
 * unless the application or an Open MPI parameter file chose it or the
 * range (pp-mpi-start.c). */
#define PP_OMPI_TCP_PORT_MIN_V4 "btl_tcp_port_min_v4"
#define PP_OMPI_TCP_PORT_MIN_V6 "btl_tcp_port_min_v6"
#define PP_OMPI_TCP_PORT_RANGE_V4 "btl_tcp_port_range_v4"
#define PP_OMPI_TCP_PORT_RANGE_V6 "btl_tcp_port_range_v6"
/* The worker executable, for uninstalled builds (the element's worker
 * property wins). */
#define PP_WORKER_ENV "PPDIFFUSE_WORKER"
/* The data plane rank 0 puts in the plan: unset or "auto" (nccl when the
 * backend is cuda and this build has NCCL, else mpi), "mpi", "nccl", or
 * the test and simulation mode "nccl-emulated" (cpu backend only). */
#define PP_DATA_PLANE_ENV "PPDIFFUSE_DATA_PLANE"
/* Set to 1 in rank 0's environment: the mesh has no doorbells
 * (pp-bells.h), every wait polls. */
#define PP_NO_BELLS_ENV "PPDIFFUSE_NO_BELLS"
/* Set to 0 in rank 0's environment: the bells come without chunk lanes
 * (pp-lanes.h), and chunks between the ranks on rank 0's host travel over
 * MPI instead of in shared memory (docs/architecture.md, "Transport"). */
#define PP_LANES_ENV "PPDIFFUSE_LANES"
/* In rank 0's environment: the bytes of a lane's slot (pp-lanes.h). */
#define PP_LANE_SLOT_BYTES_ENV "PPDIFFUSE_LANE_SLOT_BYTES"
/* Test-only: set to 1, rank 0 neither declares silent workers dead nor
 * puts deadlines on waits for chunks, and workers put none on theirs:
 * what the hang test would do without its watchdog. */
#define PP_NO_WATCHDOG_ENV "PPDIFFUSE_TEST_NO_WATCHDOG"
/* Test-only, builds with fault injection: rank:R,chunk:N,kind:K makes a
 * worker misbehave (tests/support/pp-fault.h). */
#define PP_FAULT_ENV "PPDIFFUSE_FAULT"
/* Test-only, builds with fault injection: the start-up floor in ms instead
 * of PP_MESH_START_FLOOR_MS, and a delay in ms before rank 0's
 * MPI_Init_thread (a slow MPI start-up). */
#define PP_TEST_START_FLOOR_ENV "PPDIFFUSE_TEST_START_FLOOR_MS"
#define PP_TEST_INIT_DELAY_ENV "PPDIFFUSE_TEST_MPI_INIT_DELAY_MS"

/* Any rank, at start: a build without fault injection warns when
 * PPDIFFUSE_FAULT is set anyway, naming the option, so that a test run
 * against a release build says why nothing fails. */
static inline void
pp_fault_injection_check (void)
{
#ifndef PP_FAULT_INJECTION
  if (g_getenv (PP_FAULT_ENV) != NULL)
    PP_WARN ("%s is set, but this build of ppdiffuse has no fault "
        "injection (meson option fault-injection is off): no fault will be "
        "injected", PP_FAULT_ENV);
#endif
}

G_END_DECLS
