/* ppdiffuse — the NCCL data plane's logic through a fake table of NCCL
 * and CUDA calls: set-up, transfers, every fault path and the clean close,
 * on any machine (no GPU, no nccl.h). */
#include "pp-error.h"
#include "pp-nccl-plane.h"

#include <string.h>

/* Deadlines of the waits that are meant to run out, and the slack a loaded
 * machine gets on top of them. */
#define SHORT_DEADLINE_MS 200
#define SLACK_MS 1500
/* Waits that are meant to end early. */
#define LONG_DEADLINE_MS 10000

/* ---- the fake ----------------------------------------------------------- */

typedef struct
{
  /* What the fake does: polls in progress after init, a group's end and
   * finalize (-1: forever); event queries not ready (-1: forever); the
   * asynchronous state once set (0: none); init's own result. */
  gint init_polls, launch_polls, finalize_polls, event_polls;
  gint async_state;
  gint init_result;
  /* What it saw. */
  gint calls, get_ids, inits, group_starts, group_ends, sends, recvs,
      asyncs, aborts, finalizes, destroys, records, queries;
  gint last_count, last_type, last_peer;
  /* Internal. */
  gint pending, queries_since_record;
  gchar order[64];
} Fake;

static Fake fake;
static gint fake_comm_storage, fake_event_storage;

static void
fake_reset (void)
{
  memset (&fake, 0, sizeof fake);
}

static void
note (gint * counter)
{
  g_atomic_int_inc (&fake.calls);
  g_atomic_int_inc (counter);
}

static int
fake_get_unique_id (PpNcclUniqueId * id)
{
  note (&fake.get_ids);
  memset (id->internal, 7, sizeof id->internal);
  return PP_NCCL_SUCCESS;
}

static int
fake_init (PpNcclComm * comm, int n_ranks, const PpNcclUniqueId * id,
    int rank)
{
  note (&fake.inits);
  *comm = (PpNcclComm) & fake_comm_storage;
  if (fake.init_result != PP_NCCL_SUCCESS)
    return fake.init_result;
  fake.pending = fake.init_polls;
  return fake.init_polls ? PP_NCCL_IN_PROGRESS : PP_NCCL_SUCCESS;
}

static int
fake_group_start (void)
{
  note (&fake.group_starts);
  return PP_NCCL_SUCCESS;
}

static int
fake_group_end (void)
{
  note (&fake.group_ends);
  fake.pending = fake.launch_polls;
  return fake.launch_polls ? PP_NCCL_IN_PROGRESS : PP_NCCL_SUCCESS;
}

static int
fake_send (const void *buf, gsize count, PpNcclDataType type, int peer,
    PpNcclComm comm, PpCudaStream stream)
{
  note (&fake.sends);
  fake.last_count = (gint) count;
  fake.last_type = type;
  fake.last_peer = peer;
  return PP_NCCL_SUCCESS;
}

static int
fake_recv (void *buf, gsize count, PpNcclDataType type, int peer,
    PpNcclComm comm, PpCudaStream stream)
{
  note (&fake.recvs);
  fake.last_count = (gint) count;
  fake.last_type = type;
  fake.last_peer = peer;
  return PP_NCCL_SUCCESS;
}

static int
fake_async (PpNcclComm comm, int *state)
{
  note (&fake.asyncs);
  if (fake.async_state != PP_NCCL_SUCCESS) {
    *state = fake.async_state;
  } else if (fake.pending != 0) {
    if (fake.pending > 0)
      fake.pending--;
    *state = PP_NCCL_IN_PROGRESS;
  } else {
    *state = PP_NCCL_SUCCESS;
  }
  return PP_NCCL_SUCCESS;
}

static int
fake_abort (PpNcclComm comm)
{
  note (&fake.aborts);
  g_strlcat (fake.order, "abort,", sizeof fake.order);
  return PP_NCCL_SUCCESS;
}

static int
fake_finalize (PpNcclComm comm)
{
  note (&fake.finalizes);
  g_strlcat (fake.order, "finalize,", sizeof fake.order);
  fake.pending = fake.finalize_polls;
  return fake.finalize_polls ? PP_NCCL_IN_PROGRESS : PP_NCCL_SUCCESS;
}

static int
fake_destroy (PpNcclComm comm)
{
  note (&fake.destroys);
  g_strlcat (fake.order, "destroy,", sizeof fake.order);
  return PP_NCCL_SUCCESS;
}

static const gchar *
fake_error_string (int result)
{
  return result == PP_NCCL_REMOTE_ERROR ? "fake: the remote process exited"
      : "fake: some NCCL failure";
}

static int
fake_event_create (PpCudaEvent * event)
{
  *event = (PpCudaEvent) & fake_event_storage;
  return PP_CUDA_SUCCESS;
}

static int
fake_event_destroy (PpCudaEvent event)
{
  return PP_CUDA_SUCCESS;
}

static int
fake_event_record (PpCudaEvent event, PpCudaStream stream)
{
  note (&fake.records);
  fake.queries_since_record = 0;
  return PP_CUDA_SUCCESS;
}

static int
fake_event_query (PpCudaEvent event)
{
  note (&fake.queries);
  if (fake.event_polls < 0
      || fake.queries_since_record++ < fake.event_polls)
    return PP_CUDA_NOT_READY;
  return PP_CUDA_SUCCESS;
}

static const gchar *
fake_cuda_error_name (int error)
{
  return "cudaErrorFake";
}

static const PpNcclApi fake_api = {
  .get_unique_id = fake_get_unique_id,
  .comm_init_rank_config = fake_init,
  .group_start = fake_group_start,
  .group_end = fake_group_end,
  .send = fake_send,
  .recv = fake_recv,
  .comm_get_async_error = fake_async,
  .comm_abort = fake_abort,
  .comm_finalize = fake_finalize,
  .comm_destroy = fake_destroy,
  .error_string = fake_error_string,
  .event_create = fake_event_create,
  .event_destroy = fake_event_destroy,
  .event_record = fake_event_record,
  .event_query = fake_event_query,
  .cuda_error_name = fake_cuda_error_name,
};

/* ---- helpers ------------------------------------------------------------ */

/* This process is world rank 1 of a communicator over ranks 1 and 2. */
static const gint ranks[] = { 1, 2 };

#define ME 1
#define PEER 2

static PpWait
wait_for (gint peer, guint timeout_ms, PpAliveFunc alive, gpointer data)
{
  PpWait w = { MPI_COMM_NULL, peer, pp_deadline_in_ms (timeout_ms), alive,
    data
  };
  return w;
}

static PpNcclPlane *
open_plane_on (const PpNcclApi * api)
{
  PpNcclUniqueId id = { {0} };
  PpWait w = wait_for (-1, LONG_DEADLINE_MS, NULL, NULL);
  g_autoptr (GError) error = NULL;
  PpNcclPlane *plane = pp_nccl_plane_new_with_api (api, &id, ranks,
      G_N_ELEMENTS (ranks), ME, NULL, &w, &error);

  g_assert_no_error (error);
  g_assert_nonnull (plane);
  return plane;
}

static PpNcclPlane *
open_plane (void)
{
  return open_plane_on (&fake_api);
}

static PpChunk *
make_chunk (guint64 chunk_id)
{
  const gint64 latent[] = { 1, 4, 8, 8 };
  const gint64 ids[] = { 5 };
  PpChunk *chunk = pp_chunk_new ();
  g_autoptr (GError) error = NULL;

  chunk->chunk_id = chunk_id;
  pp_chunk_add_tensor (chunk, pp_tensor_new ("latent", PP_DTYPE_F32, 4,
          latent, &error));
  g_assert_no_error (error);
  pp_chunk_add_tensor (chunk, pp_tensor_new ("ids", PP_DTYPE_U8, 1, ids,
          &error));
  g_assert_no_error (error);
  return chunk;
}

static gint64
elapsed_ms (gint64 start_us)
{
  return (g_get_monotonic_time () - start_us) / 1000;
}

/* The peer's death, as the heartbeat watchdog would say it, on the
 * second question. */
static gboolean
peer_dies (gpointer data, GError ** error)
{
  gint *asked = data;

  if (++*asked < 2)
    return TRUE;
  g_set_error (error, PP_ERROR, PP_ERROR_RESOURCE, "worker rank 2 (pid 99) "
      "has exited");
  return FALSE;
}

/* The g_critical of a programming error, caught (g_test_expect_message
 * does not see structured logs). */
static gboolean catching;
static gchar *caught;

static GLogWriterOutput
catch_criticals (GLogLevelFlags level, const GLogField * fields,
    gsize n_fields, gpointer data)
{
  if (catching && (level & G_LOG_LEVEL_CRITICAL)) {
    for (gsize i = 0; i < n_fields; i++)
      if (g_strcmp0 (fields[i].key, "MESSAGE") == 0) {
        g_free (caught);
        caught = g_strdup (fields[i].value);
      }
    return G_LOG_WRITER_HANDLED;
  }
  return g_log_writer_default (level, fields, n_fields, data);
}

static void
expect_critical (void)
{
  g_clear_pointer (&caught, g_free);
  catching = TRUE;
  g_log_set_always_fatal (G_LOG_FATAL_MASK);
}

static const gchar *
end_expect_critical (void)
{
  catching = FALSE;
  g_log_set_always_fatal (G_LOG_FATAL_MASK | G_LOG_LEVEL_CRITICAL);
  return caught ? caught : "";
}

/* ---- set-up ------------------------------------------------------------- */

static void
test_init_completes (void)
{
  PpNcclPlane *plane;

  fake_reset ();
  fake.init_polls = 5;
  plane = open_plane ();
  g_assert_cmpint (fake.inits, ==, 1);
  g_assert_cmpint (fake.asyncs, ==, 6); /* 5 in progress, then success */
  g_assert_cmpint (fake.aborts, ==, 0);
  g_assert_false (pp_nccl_plane_aborted (plane, NULL));
  pp_nccl_plane_free (plane);   /* never closed: aborted on the way out */
  g_assert_cmpint (fake.aborts, ==, 1);
  g_assert_cmpint (fake.destroys, ==, 0);
}

static void
test_init_deadline (void)
{
  PpNcclUniqueId id = { {0} };
  PpWait w = wait_for (-1, SHORT_DEADLINE_MS, NULL, NULL);
  g_autoptr (GError) error = NULL;
  gint64 start = g_get_monotonic_time ();
  PpNcclPlane *plane;

  fake_reset ();
  fake.init_polls = -1;
  plane = pp_nccl_plane_new_with_api (&fake_api, &id, ranks,
      G_N_ELEMENTS (ranks), ME, NULL, &w, &error);
  g_assert_null (plane);
  g_assert_error (error, PP_ERROR, PP_ERROR_TIMEOUT);
  g_assert_nonnull (strstr (error->message, "init on rank 1"));
  g_assert_nonnull (strstr (error->message, "no progress before the "
          "deadline"));
  g_assert_nonnull (strstr (error->message, "communicator aborted"));
  g_assert_cmpint (elapsed_ms (start), <, SHORT_DEADLINE_MS + SLACK_MS);
  g_assert_cmpint (fake.aborts, ==, 1);
  g_assert_cmpint (fake.finalizes + fake.destroys, ==, 0);
}

static void
test_init_error (void)
{
  PpNcclUniqueId id = { {0} };
  PpWait w = wait_for (-1, LONG_DEADLINE_MS, NULL, NULL);
  g_autoptr (GError) error = NULL;

  fake_reset ();
  fake.init_result = PP_NCCL_SYSTEM_ERROR;
  g_assert_null (pp_nccl_plane_new_with_api (&fake_api, &id, ranks,
          G_N_ELEMENTS (ranks), ME, NULL, &w, &error));
  g_assert_error (error, PP_ERROR, PP_ERROR_DEVICE);
  g_assert_nonnull (strstr (error->message, "rank 1"));
  g_assert_nonnull (strstr (error->message, "ncclSystemError (fake: some "
          "NCCL failure)"));
  g_assert_cmpint (fake.aborts, ==, 1);
  g_assert_cmpint (fake.destroys, ==, 0);
}

static void
test_init_refuses_ranks (void)
{
  const gint unordered[] = { 2, 1 };
  PpNcclUniqueId id = { {0} };
  PpWait w = wait_for (-1, LONG_DEADLINE_MS, NULL, NULL);
  g_autoptr (GError) error = NULL;

  fake_reset ();
  g_assert_null (pp_nccl_plane_new_with_api (&fake_api, &id, ranks,
          G_N_ELEMENTS (ranks), 3, NULL, &w, &error));
  g_assert_error (error, PP_ERROR, PP_ERROR_CONFIG);
  g_clear_error (&error);
  g_assert_null (pp_nccl_plane_new_with_api (&fake_api, &id, unordered,
          G_N_ELEMENTS (unordered), ME, NULL, &w, &error));
  g_assert_error (error, PP_ERROR, PP_ERROR_CONFIG);
  g_assert_cmpint (fake.calls, ==, 0);
}

static void
test_id_message (void)
{
  const gint other[] = { 1, 3 };
  PpNcclUniqueId id, back;
  g_autoptr (GBytes) msg = NULL;
  g_autoptr (GError) error = NULL;

  for (guint i = 0; i < sizeof id.internal; i++)
    id.internal[i] = (gchar) i;
  msg = pp_nccl_id_message_encode (ranks, G_N_ELEMENTS (ranks), &id);
  g_assert_true (pp_nccl_id_message_decode (msg, ranks, G_N_ELEMENTS (ranks),
          &back, &error));
  g_assert_no_error (error);
  g_assert_cmpmem (id.internal, sizeof id.internal, back.internal,
      sizeof back.internal);
  g_assert_false (pp_nccl_id_message_decode (msg, other,
          G_N_ELEMENTS (other), &back, &error));
  g_assert_error (error, PP_ERROR, PP_ERROR_PROTOCOL);
  g_assert_nonnull (strstr (error->message, "it is for ranks 1,2, this "
          "rank sets up ranks 1,3"));
}

/* ---- transfers ---------------------------------------------------------- */

/* Groups issued from two threads at once on two planes (a rank's links
 * share its device): the deepest nesting of groups seen. */
static gint issuing, issuing_max;

static int
counting_group_start (void)
{
  const gint depth = g_atomic_int_add (&issuing, 1) + 1;
  gint seen = g_atomic_int_get (&issuing_max);

  while (depth > seen
      && !g_atomic_int_compare_and_exchange_full (&issuing_max, seen, depth,
          &seen));
  g_usleep (200);               /* a window for the other thread */
  return PP_NCCL_SUCCESS;
}

static int
counting_group_end (void)
{
  g_atomic_int_add (&issuing, -1);
  return PP_NCCL_SUCCESS;
}

static int
quiet_transfer (const void *buf, gsize count, PpNcclDataType type, int peer,
    PpNcclComm comm, PpCudaStream stream)
{
  return PP_NCCL_SUCCESS;
}

static int
quiet_recv (void *buf, gsize count, PpNcclDataType type, int peer,
    PpNcclComm comm, PpCudaStream stream)
{
  return PP_NCCL_SUCCESS;
}

static int
quiet_async (PpNcclComm comm, int *state)
{
  *state = PP_NCCL_SUCCESS;
  return PP_NCCL_SUCCESS;
}

static int
quiet_event (PpCudaEvent event)
{
  return PP_CUDA_SUCCESS;
}

static int
quiet_record (PpCudaEvent event, PpCudaStream stream)
{
  return PP_CUDA_SUCCESS;
}

static gpointer
send_many (gpointer data)
{
  PpNcclPlane *plane = data;
  g_autoptr (PpChunk) chunk = make_chunk (3);
  PpWait w = wait_for (PEER, LONG_DEADLINE_MS, NULL, NULL);

  for (gint i = 0; i < 50; i++) {
    g_autoptr (GError) error = NULL;

    g_assert_cmpint (pp_nccl_plane_send (plane, &w, chunk, &error), ==,
        PP_DATA_PLANE_DONE);
    g_assert_no_error (error);
  }
  return NULL;
}

static void
test_one_issuer (void)
{
  PpNcclApi api = fake_api;
  PpNcclPlane *planes[2];
  GThread *threads[2];

  fake_reset ();
  api.group_start = counting_group_start;
  api.group_end = counting_group_end;
  api.send = quiet_transfer;
  api.recv = quiet_recv;
  api.comm_get_async_error = quiet_async;
  api.event_query = quiet_event;
  api.event_record = quiet_record;
  issuing = issuing_max = 0;
  for (guint i = 0; i < 2; i++)
    planes[i] = open_plane_on (&api);
  for (guint i = 0; i < 2; i++)
    threads[i] = g_thread_new ("sender", send_many, planes[i]);
  for (guint i = 0; i < 2; i++)
    g_thread_join (threads[i]);
  g_assert_cmpint (issuing_max, ==, 1);
  for (guint i = 0; i < 2; i++)
    pp_nccl_plane_free (planes[i]);
}

static void
test_send_recv (void)
{
  PpNcclPlane *plane;
  g_autoptr (PpChunk) chunk = make_chunk (12);
  g_autoptr (GError) error = NULL;
  PpWait w = wait_for (PEER, LONG_DEADLINE_MS, NULL, NULL);

  fake_reset ();
  plane = open_plane ();
  fake.launch_polls = 2;
  fake.event_polls = 3;
  g_assert_cmpint (pp_nccl_plane_send (plane, &w, chunk, &error), ==,
      PP_DATA_PLANE_DONE);
  g_assert_no_error (error);
  /* One group, one send per tensor, to NCCL rank 1 (world rank 2); the
   * event recorded after the launch, polled until done. */
  g_assert_cmpint (fake.group_starts, ==, 1);
  g_assert_cmpint (fake.group_ends, ==, 1);
  g_assert_cmpint (fake.sends, ==, 2);
  g_assert_cmpint (fake.last_peer, ==, 1);
  g_assert_cmpint (fake.last_type, ==, PP_NCCL_UINT8);
  g_assert_cmpint (fake.last_count, ==, 5);
  g_assert_cmpint (fake.records, ==, 1);
  g_assert_cmpint (fake.queries, ==, 4);

  fake.event_polls = 0;
  g_assert_cmpint (pp_nccl_plane_recv (plane, &w, chunk, &error), ==,
      PP_DATA_PLANE_DONE);
  g_assert_no_error (error);
  g_assert_cmpint (fake.group_starts, ==, 2);
  g_assert_cmpint (fake.recvs, ==, 2);
  g_assert_cmpint (fake.aborts, ==, 0);
  g_assert_true (pp_nccl_plane_close (plane, &w, &error));
  g_assert_no_error (error);
  pp_nccl_plane_free (plane);
}

static void
test_float_counts_and_empty (void)
{
  PpNcclPlane *plane;
  g_autoptr (PpChunk) chunk = make_chunk (3);
  g_autoptr (PpChunk) empty = pp_chunk_new ();
  g_autoptr (GError) error = NULL;
  PpWait w = wait_for (PEER, LONG_DEADLINE_MS, NULL, NULL);
  PpTensor *nothing = g_new0 (PpTensor, 1);

  fake_reset ();
  plane = open_plane ();
  pp_chunk_truncate (chunk, 1); /* the float32 latent alone */
  g_strlcpy (nothing->name, "nothing", sizeof nothing->name);
  nothing->dtype = PP_DTYPE_F32;
  pp_chunk_add_tensor (chunk, nothing);
  g_assert_cmpint (pp_nccl_plane_send (plane, &w, chunk, &error), ==,
      PP_DATA_PLANE_DONE);
  g_assert_no_error (error);
  /* float32 travels as elements; the zero-byte payload is skipped. */
  g_assert_cmpint (fake.sends, ==, 1);
  g_assert_cmpint (fake.last_type, ==, PP_NCCL_FLOAT32);
  g_assert_cmpint (fake.last_count, ==, 4 * 8 * 8);
  /* No payload at all: no group. */
  g_assert_cmpint (pp_nccl_plane_send (plane, &w, empty, &error), ==,
      PP_DATA_PLANE_DONE);
  g_assert_cmpint (fake.group_starts, ==, 1);
  g_assert_true (pp_nccl_plane_close (plane, &w, &error));
  pp_nccl_plane_free (plane);
}

static void
test_sizing_rejected (void)
{
  PpNcclPlane *plane;
  g_autoptr (PpChunk) chunk = make_chunk (4);
  g_autoptr (GError) error = NULL;
  PpWait w = wait_for (PEER, LONG_DEADLINE_MS, NULL, NULL);
  PpTensor *latent = g_ptr_array_index (chunk->tensors, 0);
  gint calls;

  fake_reset ();
  plane = open_plane ();
  calls = fake.calls;
  latent->nbytes -= 4;          /* one element short of its shape */
  g_assert_cmpint (pp_nccl_plane_recv (plane, &w, chunk, &error), ==,
      PP_DATA_PLANE_FAILED);
  g_assert_error (error, PP_ERROR, PP_ERROR_PROTOCOL);
  g_assert_nonnull (strstr (error->message, "payload 'latent': the manifest "
          "says 1024 bytes"));
  g_clear_error (&error);
  /* The same check is the data plane's preflight, before any head. */
  g_assert_false (pp_data_plane_preflight (pp_nccl_plane_data_plane
          (plane), &w, chunk, &error));
  g_assert_error (error, PP_ERROR, PP_ERROR_PROTOCOL);
  g_clear_error (&error);
  /* A peer outside the communicator. */
  latent->nbytes += 4;
  w.peer = 5;
  g_assert_cmpint (pp_nccl_plane_send (plane, &w, chunk, &error), ==,
      PP_DATA_PLANE_FAILED);
  g_assert_error (error, PP_ERROR, PP_ERROR_CONFIG);
  g_assert_cmpint (fake.calls, ==, calls);      /* nothing was posted */
  g_assert_false (pp_nccl_plane_aborted (plane, NULL));
  g_assert_true (pp_nccl_plane_close (plane, &w, &error));
  pp_nccl_plane_free (plane);
}

/* ---- faults ------------------------------------------------------------- */

static void
test_peer_dies (void)
{
  PpNcclPlane *plane;
  g_autoptr (PpChunk) chunk = make_chunk (12);
  g_autoptr (GError) error = NULL;
  gint asked = 0;
  PpWait w = wait_for (PEER, LONG_DEADLINE_MS, peer_dies, &asked);
  gint64 start;
  gint calls;

  fake_reset ();
  plane = open_plane ();
  fake.event_polls = -1;        /* the peer is gone: never completes */
  start = g_get_monotonic_time ();
  g_assert_cmpint (pp_nccl_plane_recv (plane, &w, chunk, &error), ==,
      PP_DATA_PLANE_ABANDONED);
  g_assert_cmpint (elapsed_ms (start), <, SLACK_MS);
  g_assert_error (error, PP_ERROR, PP_ERROR_RESOURCE);
  g_assert_cmpstr (error->message, ==, "receive of chunk 12 payloads from "
      "rank 2 over NCCL: worker rank 2 (pid 99) has exited; communicator "
      "aborted");
  g_assert_cmpint (fake.aborts, ==, 1);
  g_assert_true (pp_nccl_plane_aborted (plane, NULL));
  g_clear_error (&error);

  /* Every later call fails at once with that cause, without NCCL. */
  calls = fake.calls;
  g_assert_cmpint (pp_nccl_plane_send (plane, &w, chunk, &error), ==,
      PP_DATA_PLANE_FAILED);
  g_assert_nonnull (strstr (error->message, "aborted earlier: receive of "
          "chunk 12 payloads from rank 2 over NCCL: worker rank 2 (pid 99) "
          "has exited"));
  g_clear_error (&error);
  g_assert_cmpint (pp_nccl_plane_recv (plane, &w, chunk, &error), ==,
      PP_DATA_PLANE_FAILED);
  g_clear_error (&error);
  g_assert_false (pp_nccl_plane_close (plane, &w, &error));
  g_assert_nonnull (strstr (error->message, "has exited"));
  g_assert_cmpint (fake.calls, ==, calls);
  pp_nccl_plane_free (plane);
  g_assert_cmpint (fake.aborts, ==, 1);
  g_assert_cmpint (fake.finalizes + fake.destroys, ==, 0);
}

static void
test_peer_stalls (void)
{
  PpNcclPlane *plane;
  g_autoptr (PpChunk) chunk = make_chunk (7);
  g_autoptr (GError) error = NULL;
  PpWait w;
  gint64 start;

  fake_reset ();
  plane = open_plane ();
  fake.event_polls = -1;        /* alive and silent */
  w = wait_for (PEER, SHORT_DEADLINE_MS, NULL, NULL);
  start = g_get_monotonic_time ();
  g_assert_cmpint (pp_nccl_plane_send (plane, &w, chunk, &error), ==,
      PP_DATA_PLANE_ABANDONED);
  g_assert_cmpint (elapsed_ms (start), >=, SHORT_DEADLINE_MS - 1);
  g_assert_cmpint (elapsed_ms (start), <, SHORT_DEADLINE_MS + SLACK_MS);
  g_assert_error (error, PP_ERROR, PP_ERROR_TIMEOUT);
  g_assert_cmpstr (error->message, ==, "send of chunk 7 payloads to rank 2 "
      "over NCCL: no progress before the deadline (timeout-ms); "
      "communicator aborted");
  g_assert_cmpint (fake.aborts, ==, 1);
  g_clear_error (&error);
  g_assert_false (pp_nccl_plane_close (plane, &w, &error));
  pp_nccl_plane_free (plane);
  g_assert_cmpint (fake.aborts, ==, 1);
  g_assert_cmpint (fake.finalizes + fake.destroys, ==, 0);
}

static void
test_async_error (void)
{
  PpNcclPlane *plane;
  g_autoptr (PpChunk) chunk = make_chunk (9);
  g_autoptr (GError) error = NULL;
  PpWait w = wait_for (PEER, LONG_DEADLINE_MS, NULL, NULL);

  fake_reset ();
  plane = open_plane ();
  fake.event_polls = -1;
  fake.async_state = PP_NCCL_REMOTE_ERROR;
  g_assert_cmpint (pp_nccl_plane_recv (plane, &w, chunk, &error), ==,
      PP_DATA_PLANE_ABANDONED);
  g_assert_error (error, PP_ERROR, PP_ERROR_DEVICE);
  g_assert_nonnull (strstr (error->message, "receive of chunk 9 payloads "
          "from rank 2 over NCCL: NCCL says ncclRemoteError (fake: the "
          "remote process exited); communicator aborted"));
  g_assert_cmpint (fake.aborts, ==, 1);
  pp_nccl_plane_free (plane);
  g_assert_cmpint (fake.aborts, ==, 1);
  g_assert_cmpint (fake.finalizes + fake.destroys, ==, 0);
}

/* ncclCommAbort as a device makes it when another communicator's kernel
 * still runs: it returns only once every plane's abort has begun (the
 * other kernels stopped), or gives up after LONG_DEADLINE_MS. */
static struct
{
  GMutex lock;
  GCond cond;
  gint expected, started;
  gboolean gave_up;
} meeting;

static int
meeting_abort (PpNcclComm comm)
{
  const gint64 end = g_get_monotonic_time ()
      + LONG_DEADLINE_MS * G_TIME_SPAN_MILLISECOND;

  note (&fake.aborts);
  g_mutex_lock (&meeting.lock);
  meeting.started++;
  g_cond_broadcast (&meeting.cond);
  while (meeting.started < meeting.expected)
    if (!g_cond_wait_until (&meeting.cond, &meeting.lock, end)) {
      meeting.gave_up = TRUE;
      break;
    }
  g_mutex_unlock (&meeting.lock);
  return PP_NCCL_SUCCESS;
}

/* A rank's planes are aborted at once, not one after the other: each
 * abort returns only when the others have begun. */
/* A worker found gone while a send's launch is still in progress (a first
 * send waits so until the peer receives): the liveness check fails the
 * mesh, which aborts every plane of the process at once, each but the
 * last on a thread of its own (pp_nccl_planes_abort), the plane being
 * launched among them.  The send ends with the worker's exit, at once,
 * never waiting for its own plane's abort. */
typedef struct
{
  PpNcclPlane *planes[2];
  gint asked;
  /* The send's thread. */
  PpChunk *chunk;
  GError *error;
  PpDataPlaneResult result;
  gint done;
} Launching;

static gboolean
mesh_fails (gpointer data, GError ** error)
{
  Launching *l = data;
  g_autoptr (GError) reason = NULL;

  if (++l->asked < 2)
    return TRUE;
  reason = g_error_new_literal (PP_ERROR, PP_ERROR_RESOURCE,
      "worker rank 2 (pid 99) has exited");
  pp_nccl_planes_abort (l->planes, G_N_ELEMENTS (l->planes), reason);
  g_propagate_error (error, g_error_copy (reason));
  return FALSE;
}

static gpointer
launching_send (gpointer data)
{
  Launching *l = data;
  PpWait w = wait_for (PEER, LONG_DEADLINE_MS, mesh_fails, l);

  l->result = pp_nccl_plane_send (l->planes[0], &w, l->chunk, &l->error);
  g_atomic_int_set (&l->done, 1);
  return NULL;
}

static void
test_dies_while_launching (void)
{
  Launching l = { {NULL} };
  gint64 start;
  GThread *thread;

  fake_reset ();
  l.planes[0] = open_plane ();
  l.planes[1] = open_plane ();
  l.chunk = make_chunk (3);
  fake.launch_polls = -1;       /* the peer never takes the send */
  start = g_get_monotonic_time ();
  thread = g_thread_new ("send", launching_send, &l);
  while (!g_atomic_int_get (&l.done)) {
    if (elapsed_ms (start) > LONG_DEADLINE_MS / 2)
      g_error ("the send and the planes' abort wait for each other: still "
          "waiting after %d ms", LONG_DEADLINE_MS / 2);
    g_usleep (1000);
  }
  g_thread_join (thread);
  g_assert_cmpint (l.result, ==, PP_DATA_PLANE_ABANDONED);
  g_assert_cmpint (elapsed_ms (start), <, SLACK_MS);
  g_assert_error (l.error, PP_ERROR, PP_ERROR_RESOURCE);
  g_assert_nonnull (strstr (l.error->message, "has exited"));
  g_assert_cmpint (fake.aborts, ==, 2);
  for (guint i = 0; i < G_N_ELEMENTS (l.planes); i++) {
    g_assert_true (pp_nccl_plane_aborted (l.planes[i], NULL));
    pp_nccl_plane_free (l.planes[i]);
  }
  g_assert_cmpint (fake.aborts, ==, 2);
  g_clear_error (&l.error);
  pp_chunk_free (l.chunk);
}

/* An abort from another thread while a receive waits for its event: NCCL
 * ends the kernels behind it, and the event completes with part of the
 * payload moved.  The receive is abandoned, never done. */
static PpNcclPlane *aborted_under;
static gint cut_queries;

static int
cut_short_query (PpCudaEvent event)
{
  g_autoptr (GError) reason = NULL;

  note (&fake.queries);
  if (++cut_queries < 2)
    return PP_CUDA_NOT_READY;
  reason = g_error_new_literal (PP_ERROR, PP_ERROR_RESOURCE,
      "worker rank 2 (pid 99) has exited");
  pp_nccl_plane_abort (aborted_under, reason);
  return PP_CUDA_SUCCESS;
}

static void
test_aborted_in_flight (void)
{
  PpNcclApi api = fake_api;
  g_autoptr (PpChunk) chunk = make_chunk (4);
  g_autoptr (GError) error = NULL;
  PpWait w = wait_for (PEER, LONG_DEADLINE_MS, NULL, NULL);

  fake_reset ();
  api.event_query = cut_short_query;
  cut_queries = 0;
  aborted_under = open_plane_on (&api);
  g_assert_cmpint (pp_nccl_plane_recv (aborted_under, &w, chunk, &error), ==,
      PP_DATA_PLANE_ABANDONED);
  g_assert_error (error, PP_ERROR, PP_ERROR_RESOURCE);
  g_assert_nonnull (strstr (error->message, "has exited"));
  g_assert_cmpint (fake.aborts, ==, 1);
  pp_nccl_plane_free (aborted_under);
  aborted_under = NULL;
}

static void
test_abort_together (void)
{
  PpNcclApi api = fake_api;
  PpNcclPlane *planes[3];
  g_autoptr (GError) reason = g_error_new_literal (PP_ERROR,
      PP_ERROR_RESOURCE, "worker rank 2 (pid 99) has exited");

  fake_reset ();
  api.comm_abort = meeting_abort;
  meeting.expected = G_N_ELEMENTS (planes);
  meeting.started = 0;
  meeting.gave_up = FALSE;
  for (guint i = 0; i < G_N_ELEMENTS (planes); i++)
    planes[i] = open_plane_on (&api);
  pp_nccl_planes_abort (planes, G_N_ELEMENTS (planes), reason);
  g_assert_false (meeting.gave_up);
  g_assert_cmpint (fake.aborts, ==, G_N_ELEMENTS (planes));
  for (guint i = 0; i < G_N_ELEMENTS (planes); i++) {
    g_autoptr (GError) cause = NULL;

    g_assert_true (pp_nccl_plane_aborted (planes[i], &cause));
    g_assert_nonnull (strstr (cause->message, "has exited"));
    /* Once: a second abort asks nothing of NCCL. */
    pp_nccl_plane_abort (planes[i], reason);
    pp_nccl_plane_free (planes[i]);
  }
  g_assert_cmpint (fake.aborts, ==, G_N_ELEMENTS (planes));
}

static void
test_clean_close (void)
{
  PpNcclPlane *plane;
  g_autoptr (GError) error = NULL;
  PpWait w = wait_for (-1, LONG_DEADLINE_MS, NULL, NULL);

  fake_reset ();
  plane = open_plane ();
  fake.finalize_polls = 3;
  g_assert_true (pp_nccl_plane_close (plane, &w, &error));
  g_assert_no_error (error);
  g_assert_cmpstr (fake.order, ==, "finalize,destroy,");
  g_assert_true (pp_nccl_plane_close (plane, &w, &error));      /* idempotent */
  pp_nccl_plane_free (plane);
  g_assert_cmpstr (fake.order, ==, "finalize,destroy,");
  g_assert_cmpint (fake.aborts, ==, 0);
}

static void
test_close_deadline (void)
{
  PpNcclPlane *plane;
  g_autoptr (GError) error = NULL;
  PpWait w = wait_for (-1, SHORT_DEADLINE_MS, NULL, NULL);
  gint64 start;

  fake_reset ();
  plane = open_plane ();
  fake.finalize_polls = -1;     /* a peer that never finalizes */
  start = g_get_monotonic_time ();
  g_assert_false (pp_nccl_plane_close (plane, &w, &error));
  g_assert_cmpint (elapsed_ms (start), <, SHORT_DEADLINE_MS + SLACK_MS);
  g_assert_error (error, PP_ERROR, PP_ERROR_TIMEOUT);
  /* Aborted, never destroyed. */
  g_assert_cmpstr (fake.order, ==, "finalize,abort,");
  pp_nccl_plane_free (plane);
  g_assert_cmpstr (fake.order, ==, "finalize,abort,");
}

typedef struct
{
  PpNcclPlane *plane;
  PpChunk *chunk;
  PpDataPlaneResult result;
  GError *error;
} Transfer;

static gpointer
send_thread (gpointer data)
{
  Transfer *t = data;
  PpWait w = wait_for (PEER, LONG_DEADLINE_MS, NULL, NULL);

  t->result = pp_nccl_plane_send (t->plane, &w, t->chunk, &t->error);
  return NULL;
}

static void
test_one_group_per_peer (void)
{
  Transfer first = { 0 };
  g_autoptr (PpChunk) second = make_chunk (2);
  g_autoptr (GError) error = NULL;
  g_autoptr (GError) reason = NULL;
  PpWait w = wait_for (PEER, LONG_DEADLINE_MS, NULL, NULL);
  gint64 until = pp_deadline_in_ms (LONG_DEADLINE_MS);
  GThread *thread;

  fake_reset ();
  first.plane = open_plane ();
  first.chunk = make_chunk (1);
  fake.event_polls = -1;        /* the first send stays in flight */
  thread = g_thread_new ("first-send", send_thread, &first);
  while (g_atomic_int_get (&fake.records) == 0
      && g_get_monotonic_time () < until)
    g_usleep (1000);
  g_assert_cmpint (g_atomic_int_get (&fake.records), ==, 1);

  expect_critical ();
  g_assert_cmpint (pp_nccl_plane_send (first.plane, &w, second, &error), ==,
      PP_DATA_PLANE_FAILED);
  g_assert_nonnull (strstr (end_expect_critical (), "send of chunk 2 "
          "payloads to rank 2 over NCCL while another send with rank 2 is in "
          "flight"));
  g_assert_error (error, PP_ERROR, PP_ERROR_CONFIG);
  g_assert_cmpint (g_atomic_int_get (&fake.group_starts), ==, 1);

  /* The mesh's first failure, from another thread, ends the first. */
  reason = g_error_new (PP_ERROR, PP_ERROR_RESOURCE, "the mesh failed");
  pp_nccl_plane_abort (first.plane, reason);
  g_thread_join (thread);
  g_assert_cmpint (first.result, ==, PP_DATA_PLANE_ABANDONED);
  g_assert_nonnull (strstr (first.error->message, "the mesh failed"));
  g_assert_cmpint (fake.aborts, ==, 1);
  g_clear_error (&first.error);
  pp_chunk_free (first.chunk);
  pp_nccl_plane_free (first.plane);
  g_assert_cmpint (fake.aborts, ==, 1);
}

static void
test_as_data_plane (void)
{
  PpNcclPlane *plane;
  PpDataPlane *payload;
  g_autoptr (PpChunk) chunk = make_chunk (5);
  g_autoptr (GError) error = NULL;
  PpWait w = wait_for (PEER, LONG_DEADLINE_MS, NULL, NULL);

  fake_reset ();
  plane = open_plane ();
  payload = pp_nccl_plane_data_plane (plane);
  g_assert_cmpstr (pp_data_plane_name (payload), ==, "NCCL");
  g_assert_true (pp_data_plane_preflight (payload, &w, chunk, &error));
  g_assert_cmpint (pp_data_plane_send (payload, &w, chunk,
          PP_SEND_INTACT, &error), ==, PP_DATA_PLANE_DONE);
  g_assert_cmpint (pp_data_plane_recv (payload, &w, chunk, &error), ==,
      PP_DATA_PLANE_DONE);
  g_assert_no_error (error);
  /* The MPI-only fault refused before anything is posted. */
  g_assert_cmpint (pp_data_plane_send (payload, &w, chunk,
          PP_SEND_BAD_SPEC, &error), ==, PP_DATA_PLANE_FAILED);
  g_assert_error (error, PP_ERROR, PP_ERROR_CONFIG);
  g_assert_cmpint (fake.group_starts, ==, 2);
  g_assert_cmpstr (pp_data_plane_name (pp_data_plane_mpi ()), ==,
      "MPI");
  g_assert_true (pp_nccl_plane_close (plane, &w, NULL));
  pp_nccl_plane_free (plane);
}

int
main (int argc, char **argv)
{
  g_log_set_writer_func (catch_criticals, NULL, NULL);
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/nccl-plane/init/completes", test_init_completes);
  g_test_add_func ("/nccl-plane/init/deadline", test_init_deadline);
  g_test_add_func ("/nccl-plane/init/error", test_init_error);
  g_test_add_func ("/nccl-plane/init/refuses-ranks", test_init_refuses_ranks);
  g_test_add_func ("/nccl-plane/init/id-message", test_id_message);
  g_test_add_func ("/nccl-plane/transfer/send-recv", test_send_recv);
  g_test_add_func ("/nccl-plane/transfer/counts-and-empty",
      test_float_counts_and_empty);
  g_test_add_func ("/nccl-plane/transfer/sizing", test_sizing_rejected);
  g_test_add_func ("/nccl-plane/transfer/one-issuer", test_one_issuer);
  g_test_add_func ("/nccl-plane/transfer/one-group-per-peer",
      test_one_group_per_peer);
  g_test_add_func ("/nccl-plane/transfer/data-plane",
      test_as_data_plane);
  g_test_add_func ("/nccl-plane/fault/peer-dies", test_peer_dies);
  g_test_add_func ("/nccl-plane/fault/peer-stalls", test_peer_stalls);
  g_test_add_func ("/nccl-plane/fault/async-error", test_async_error);
  g_test_add_func ("/nccl-plane/fault/abort-together", test_abort_together);
  g_test_add_func ("/nccl-plane/fault/dies-while-launching",
      test_dies_while_launching);
  g_test_add_func ("/nccl-plane/fault/aborted-in-flight",
      test_aborted_in_flight);
  g_test_add_func ("/nccl-plane/close/clean", test_clean_close);
  g_test_add_func ("/nccl-plane/close/deadline", test_close_deadline);
  return g_test_run ();
}
