/* ppdiffuse tests — a worker that breaks the contract on purpose.
 *
 * Built once per misbehaviour (FAKE_MODE):
 *   FAKE_BAD_VERSION  answers the hello with protocol version 99
 *   FAKE_SILENT       joins the mesh and never answers
 *   FAKE_SKIP_CHUNK   answers properly, then returns chunk ids with a gap
 *   FAKE_NOT_MPI      exits at once without touching MPI */
#include "pp-handshake.h"
#include "pp-model.h"
#include "pp-transport.h"

#include <stdio.h>
#include <unistd.h>

#define FAKE_BAD_VERSION 1
#define FAKE_SILENT 2
#define FAKE_SKIP_CHUNK 3
#define FAKE_NOT_MPI 4
/* How long a fake lingers before leaving on its own. */
#define FAKE_LINGER_MS 30000
#define FAKE_WAIT_MS 30000

static GBytes *
reply_with_version (guint32 version, guint32 plan_id, gint rank)
{
  g_autoptr (GVariant) v = g_variant_ref_sink (g_variant_new (PP_REPLY_TYPE,
          version, plan_id, (guint32) rank, (gint64) getpid (),
          g_get_host_name (), "", NULL));

  return g_variant_get_data_as_bytes (v);
}

int
main (int argc, char **argv)
{
  MPI_Comm parent, world;
  int provided, rank;
  gint64 rank0_pid;
  g_autofree gchar *rank0_host = NULL;
  g_autoptr (GBytes) hello = NULL;
  g_autoptr (GBytes) reply = NULL;
  g_autoptr (PpPlan) plan = NULL;
  g_autoptr (GHashTable) parity = NULL;
  g_autoptr (PpModel) model = NULL;
  g_autofree gchar *digest = NULL;
  PpHelloOptions options;
  PpWait wait;

  /* Each fake passes rank 0's probe: what it breaks comes later. */
  if (pp_worker_answer_probe (argc, argv))
    return 0;
  if (FAKE_MODE == FAKE_NOT_MPI)
    return 1;
  MPI_Init_thread (&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_get_parent (&parent);
  MPI_Intercomm_merge (parent, 1, &world);
  MPI_Comm_rank (world, &rank);
  if (FAKE_MODE == FAKE_SILENT) {
    g_usleep ((gulong) FAKE_LINGER_MS * 1000);
    return 0;
  }
  wait = (PpWait) { world, 0, pp_deadline_in_ms (FAKE_WAIT_MS), NULL, NULL };
  hello = pp_transport_recv_bytes (&wait, PP_TAG_HANDSHAKE, PP_HANDSHAKE_MAX,
      "hello", NULL);
  plan = hello ? pp_handshake_hello_parse (hello, &rank0_pid, &rank0_host,
      &options, NULL) : NULL;
  if (plan == NULL)
    return 1;
  pp_hello_options_clear (&options);
  /* What a real worker would report, so that only the misbehaviour under
   * test differs. */
  model = pp_model_new (plan->model, plan->n_steps, PP_MODEL_ROLE_STEPS,
      pp_backend_get (plan->backend, NULL), NULL);
  digest = model ? pp_model_digest (model) : NULL;
  parity = pp_parity_local (digest, &plan->plan_id, model ? model->backend
      : pp_backend_cpu (), plan->model);
  g_hash_table_insert (parity, g_strdup (PP_PARITY_DATA_PLANE),
      g_strdup (plan->data_plane));
  reply = FAKE_MODE == FAKE_BAD_VERSION
      ? reply_with_version (99, plan->plan_id, rank)
      : pp_handshake_reply_new (plan->plan_id, rank, NULL, parity);
  pp_transport_send_bytes (&wait, PP_TAG_HANDSHAKE_REPLY, reply, "reply", NULL);
  if (FAKE_MODE == FAKE_SKIP_CHUNK) {
    /* A single-worker mesh: take chunk 0, run no step, return it as 1. */
    PpChunkLink *in = pp_chunk_link_new (1), *out = pp_chunk_link_new (0);
    PpChunk *chunk;
    wait.deadline_us = pp_deadline_in_ms (FAKE_WAIT_MS);
    chunk = pp_transport_recv_chunk (&wait, in, FAKE_WAIT_MS, NULL);
    if (chunk != NULL) {
      chunk->chunk_id += 1;
      chunk->next_step = plan->n_steps;
      wait.deadline_us = pp_deadline_in_ms (FAKE_WAIT_MS);
      pp_transport_send_chunk (&wait, out, chunk, NULL);
    }
    pp_chunk_link_free (in);
    pp_chunk_link_free (out);
  }
  g_usleep ((gulong) FAKE_LINGER_MS * 1000);
  return 0;
}
