/* ppdiffuse — the init handshake: its messages, the parity check, and
 * rank 0's exchange with every worker. */
#define _GNU_SOURCE             /* sched_getaffinity */
#include "pp-handshake.h"
#include "pp-build-id.h"
#include "pp-envelope.h"
#include "pp-error.h"
#include "pp-heartbeat.h"
#include "pp-log.h"
#include "pp-model.h"
#include "pp-transport.h"

#include <mpi.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* The keys pp_parity_check compares, and which of them rank 0 holds. */
static const gchar *const checked_keys[] = {
  PP_PARITY_PROTOCOL, PP_PARITY_ENVELOPE, PP_PARITY_BUILD, PP_PARITY_BACKEND,
  PP_PARITY_DTYPE, PP_PARITY_ACTIVATIONS, PP_PARITY_UPSAMPLE_CONV,
  PP_PARITY_KERNEL_WAYS, PP_PARITY_MPI,
  PP_PARITY_MODEL_DIGEST, PP_PARITY_PLAN, PP_PARITY_DATA_PLANE, NULL
};

/* The first field of both messages, readable whatever the rest holds. */
static gboolean
check_version (GBytes * bytes, const gchar * what, GError ** error)
{
  gsize len;
  const guint8 *data = g_bytes_get_data (bytes, &len);
  guint32 version;

  if (len < sizeof version) {
    g_set_error (error, PP_ERROR, PP_ERROR_PROTOCOL,
        "%s: %" G_GSIZE_FORMAT " bytes, too short to hold a protocol version",
        what, len);
    return FALSE;
  }
  /* GVariant lays a leading u32 out first, in host order. */
  memcpy (&version, data, sizeof version);
  if (version == PP_PROTOCOL_VERSION)
    return TRUE;
  g_set_error (error, PP_ERROR, PP_ERROR_PROTOCOL,
      "%s field protocol version: expected %d, received %u; install the same "
      "ppdiffuse version for the element and ppdiffuse-worker", what,
      PP_PROTOCOL_VERSION, version);
  return FALSE;
}

static GVariant *
variant_from_bytes (GBytes * bytes, const gchar * type, const gchar * what,
    GError ** error)
{
  GVariant *v;

  if (!check_version (bytes, what, error))
    return NULL;
  v = g_variant_ref_sink (g_variant_new_from_bytes (G_VARIANT_TYPE (type),
          bytes, FALSE));
  if (!g_variant_is_normal_form (v)) {
    g_set_error (error, PP_ERROR, PP_ERROR_PROTOCOL,
        "%s: not a well-formed %s message (%" G_GSIZE_FORMAT " bytes); "
        "are rank 0 and the worker from the same ppdiffuse build?", what,
        type, g_bytes_get_size (bytes));
    g_variant_unref (v);
    return NULL;
  }
  return v;
}

GBytes *
pp_handshake_hello_new (const PpPlan * plan, const PpHelloOptions * options)
{
  GVariantBuilder opts;
  g_autoptr (GVariant) v = NULL;

  g_variant_builder_init (&opts, G_VARIANT_TYPE ("a{sv}"));
  if (options != NULL && options->dump_dir != NULL)
    g_variant_builder_add (&opts, "{sv}", PP_OPTION_DUMP_DIR,
        g_variant_new_string (options->dump_dir));
  if (options != NULL && options->bells != NULL)
    g_variant_builder_add (&opts, "{sv}", PP_OPTION_BELLS,
        g_variant_new_string (options->bells));
  v = g_variant_ref_sink (g_variant_new (PP_HELLO_TYPE,
          (guint32) PP_PROTOCOL_VERSION, (gint64) getpid (),
          g_get_host_name (), pp_plan_to_variant (plan), plan->plan_id,
          &opts));
  return g_variant_get_data_as_bytes (v);
}

PpPlan *
pp_handshake_hello_parse (GBytes * bytes, gint64 * rank0_pid,
    gchar ** rank0_host, PpHelloOptions * options, GError ** error)
{
  g_autoptr (GVariant) v = variant_from_bytes (bytes, PP_HELLO_TYPE,
      "handshake hello", error);
  g_autoptr (GVariant) plan_v = NULL;
  g_autoptr (GVariant) opts = NULL;
  guint32 version, plan_id;
  const gchar *host;
  PpPlan *plan;

  memset (options, 0, sizeof *options);
  if (v == NULL)
    return NULL;
  g_variant_get (v, "(ux&svu@a{sv})", &version, rank0_pid, &host, &plan_v,
      &plan_id, &opts);
  plan = pp_plan_from_variant (plan_v, plan_id, error);
  if (plan == NULL)
    return NULL;
  *rank0_host = g_strdup (host);
  g_variant_lookup (opts, PP_OPTION_DUMP_DIR, "s", &options->dump_dir);
  g_variant_lookup (opts, PP_OPTION_BELLS, "s", &options->bells);
  return plan;
}

void
pp_hello_options_clear (PpHelloOptions * options)
{
  g_clear_pointer (&options->dump_dir, g_free);
  g_clear_pointer (&options->bells, g_free);
}

GBytes *
pp_handshake_reply_new (guint32 plan_id, gint rank, const gchar * error_text,
    GHashTable * parity)
{
  GVariantBuilder dict;
  g_autoptr (GVariant) v = NULL;

  g_variant_builder_init (&dict, G_VARIANT_TYPE ("a{ss}"));
  if (parity != NULL) {
    GHashTableIter it;
    gpointer key, value;

    g_hash_table_iter_init (&it, parity);
    while (g_hash_table_iter_next (&it, &key, &value))
      g_variant_builder_add (&dict, "{ss}", key, value);
  }
  v = g_variant_ref_sink (g_variant_new (PP_REPLY_TYPE,
          (guint32) PP_PROTOCOL_VERSION, plan_id, (guint32) rank,
          (gint64) getpid (), g_get_host_name (),
          error_text ? error_text : "", &dict));
  return g_variant_get_data_as_bytes (v);
}

gboolean
pp_handshake_reply_parse (GBytes * bytes, PpWorkerInfo * info,
    GError ** error)
{
  g_autoptr (GVariant) v = g_variant_ref_sink (g_variant_new_from_bytes
      (G_VARIANT_TYPE (PP_REPLY_TYPE), bytes, FALSE));
  g_autoptr (GVariantIter) iter = NULL;
  guint32 version, rank;
  const gchar *host, *text, *key, *value;

  if (!g_variant_is_normal_form (v)) {
    /* another version's layout, or garbage: say which */
    if (check_version (bytes, "handshake reply", error))
      g_set_error (error, PP_ERROR, PP_ERROR_PROTOCOL,
          "handshake reply: not a well-formed %s message (%" G_GSIZE_FORMAT
          " bytes); are rank 0 and the worker from the same ppdiffuse "
          "build?", PP_REPLY_TYPE, g_bytes_get_size (bytes));
    return FALSE;
  }
  g_variant_get (v, "(uuux&s&sa{ss})", &version, &info->plan_id, &rank,
      &info->pid, &host, &text, &iter);
  /* Who answered is kept even when the answer is refused: rank 0 uses it
   * to stop that process. */
  info->host = g_strdup (host);
  if (!check_version (bytes, "handshake reply", error))
    return FALSE;
  info->rank = (gint) rank;
  info->error = *text ? g_strdup (text) : NULL;
  info->parity = g_hash_table_new_full (g_str_hash, g_str_equal, g_free,
      g_free);
  while (g_variant_iter_next (iter, "{&s&s}", &key, &value))
    g_hash_table_insert (info->parity, g_strdup (key), g_strdup (value));
  return TRUE;
}

void
pp_worker_info_clear (PpWorkerInfo * info)
{
  g_clear_pointer (&info->host, g_free);
  g_clear_pointer (&info->error, g_free);
  g_clear_pointer (&info->parity, g_hash_table_unref);
}

static gchar *
mpi_library_version (void)
{
  char text[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  const gchar *end;

  if (MPI_Get_library_version (text, &len) != MPI_SUCCESS || len <= 0)
    return g_strdup ("unknown");
  /* The first line names the library and its version; the rest is build
   * detail (dates, repository revisions). */
  end = memchr (text, '\n', (gsize) len);
  return g_strstrip (g_strndup (text, end ? (gsize) (end - text) : (gsize) len));
}

/* The CPUs this process may run on, and whether that is fewer than the
 * host has online (a CPU binding): "16 threads", or "1 of 16 threads
 * (bound)". */
static gchar *
usable_cpus_text (void)
{
  const long online = sysconf (_SC_NPROCESSORS_ONLN);
  cpu_set_t set;
  int usable = (int) online;

  CPU_ZERO (&set);
  if (sched_getaffinity (0, sizeof set, &set) == 0)
    usable = CPU_COUNT (&set);
  if (online > 0 && usable < online)
    return g_strdup_printf ("%d of %ld threads (bound)", usable, online);
  return g_strdup_printf ("%ld threads", online);
}

static gchar *
cpu_device (void)
{
  g_autofree gchar *cpuinfo = NULL;
  g_autofree gchar *model = NULL;
  g_autofree gchar *usable = usable_cpus_text ();

  if (g_file_get_contents ("/proc/cpuinfo", &cpuinfo, NULL, NULL)) {
    const gchar *line = strstr (cpuinfo, "model name");
    const gchar *colon = line ? strchr (line, ':') : NULL;
    const gchar *eol = colon ? strchr (colon, '\n') : NULL;

    if (colon && eol)
      model = g_strstrip (g_strndup (colon + 1, eol - colon - 1));
  }
  return g_strdup_printf ("cpu: %s, %s", model ? model : "unknown", usable);
}

GHashTable *
pp_parity_local (const gchar * model_digest, const guint32 * plan_id,
    PpBackend * be, const gchar * model_uri)
{
  g_autofree gchar *cpu = cpu_device ();
  GHashTable *p = g_hash_table_new_full (g_str_hash, g_str_equal, g_free,
      g_free);
  const gchar *weights = pp_model_uri_weights_dtype (model_uri, be);
  PpDType dtype = PP_DTYPE_F32, act;

  g_hash_table_insert (p, g_strdup (PP_PARITY_PROTOCOL),
      g_strdup_printf ("%d", PP_PROTOCOL_VERSION));
  g_hash_table_insert (p, g_strdup (PP_PARITY_ENVELOPE),
      g_strdup_printf ("%d.%d", PP_ENVELOPE_MAJOR, PP_ENVELOPE_MINOR));
  g_hash_table_insert (p, g_strdup (PP_PARITY_BUILD), g_strdup (PP_BUILD_ID));
  g_hash_table_insert (p, g_strdup (PP_PARITY_BACKEND),
      g_strdup (pp_backend_name (be)));
  g_hash_table_insert (p, g_strdup (PP_PARITY_DTYPE), g_strdup (weights));
  /* An unknown name is the model's error to report, at its load. */
  (void) pp_dtype_parse_weights (weights, &dtype, NULL);
  act = pp_backend_act_dtype (be, dtype);
  g_hash_table_insert (p, g_strdup (PP_PARITY_ACTIVATIONS),
      g_strdup_printf ("%s, %s", pp_dtype_weights_name (act),
          pp_layout_name (pp_backend_act_layout (be, act))));
  g_hash_table_insert (p, g_strdup (PP_PARITY_UPSAMPLE_CONV),
      g_strdup (pp_model_upsample_conv ()));
  g_hash_table_insert (p, g_strdup (PP_PARITY_KERNEL_WAYS),
      g_strdup (pp_backend_ways (be)));
  g_hash_table_insert (p, g_strdup (PP_PARITY_MPI), mpi_library_version ());
  g_hash_table_insert (p, g_strdup (PP_PARITY_DEVICE),
      g_strdup_printf ("%s: %s (%s)", pp_backend_name (be),
          pp_backend_device (be), cpu));
  if (model_digest != NULL)
    g_hash_table_insert (p, g_strdup (PP_PARITY_MODEL_DIGEST),
        g_strdup (model_digest));
  if (plan_id != NULL)
    g_hash_table_insert (p, g_strdup (PP_PARITY_PLAN),
        g_strdup_printf ("0x%08x", *plan_id));
  return p;
}

gboolean
pp_parity_check (GHashTable * rank0, const PpWorkerInfo * workers,
    guint n_workers, GError ** error)
{
  g_autoptr (GString) diff = g_string_new (NULL);
  gboolean builds_differ = FALSE, environments_differ = FALSE;

  for (guint w = 0; w < n_workers; w++) {
    for (guint k = 0; checked_keys[k] != NULL; k++) {
      const gchar *key = checked_keys[k];
      const gchar *mine = g_hash_table_lookup (workers[w].parity, key);
      const gchar *ref = g_hash_table_lookup (rank0, key);
      guint ref_rank = 0;

      if (ref == NULL) {
        ref = g_hash_table_lookup (workers[0].parity, key);
        ref_rank = 1;
      }
      if (g_strcmp0 (mine, ref) == 0)
        continue;
      builds_differ |= g_str_equal (key, PP_PARITY_BUILD);
      environments_differ |= g_str_equal (key, PP_PARITY_ACTIVATIONS)
          || g_str_equal (key, PP_PARITY_UPSAMPLE_CONV)
          || g_str_equal (key, PP_PARITY_KERNEL_WAYS);
      g_string_append_printf (diff, "%srank %u: %s = %s (rank %u: %s)",
          diff->len ? "; " : "", w + 1, key, mine ? mine : "(absent)",
          ref_rank, ref ? ref : "(absent)");
    }
  }
  if (diff->len == 0)
    return TRUE;
  g_set_error (error, PP_ERROR, PP_ERROR_CONFIG,
      "parity check failed, every rank must run the same build, libraries "
      "and model: %s%s%s", diff->str, builds_differ ? " (the worker and "
      "rank 0 come from different builds: rebuild both, e.g. ninja -C "
      "BUILDDIR after a change, or set the worker property to the worker "
      "of rank 0's build)" : "", environments_differ ? " (the ranks' "
      "environments choose other ways of computing: give every host the "
      "same PPDIFFUSE_* variables, docs/gpu.md)" : "");
  return FALSE;
}

/* ---- rank 0's side of the exchange ---- */

/* The workers' load progress reports, read while a reply is awaited. */
typedef struct
{
  MPI_Comm world;
  guint n_workers;
  guint timeout_ms;
  gint64 hello_deadline_us;
  gint64 *last_report_us;       /* per rank, 1..n; 0: none yet */
  guint64 *loaded;              /* per rank: bytes reported */
  PpWait *wait;                 /* the reply being awaited */
  PpHandshakeProgressFunc progress;
  gpointer progress_data;
  /* A worker that has replied starts to expect rank 0's heartbeats,
   * which rank 0's liveness sends once every reply is in: until then,
   * these (rank 0 idle, nothing sent or received) stand in, so that no
   * worker takes rank 0 for dead while another one loads.  Every worker
   * gets them (rank 0 cannot tell which have replied before it reads
   * their replies in rank order); one still loading reads them later. */
  gint64 next_beat_us;
  guint64 beat_seq;
} LoadWatch;

/* A heartbeat to every worker, once a period. */
static gboolean
load_watch_beat (LoadWatch * lw, GError ** error)
{
  const gint64 now = g_get_monotonic_time ();
  PpHeartbeat hb = { 0, PP_WORK_IDLE, PP_HEARTBEAT_NONE, 0,
    PP_HEARTBEAT_NONE, PP_HEARTBEAT_NONE, 0, 0, 0
  };
  guint8 out[PP_HEARTBEAT_SIZE];

  if (now < lw->next_beat_us)
    return TRUE;
  lw->next_beat_us = now + (gint64) pp_heartbeat_period_ms (lw->timeout_ms)
      * 1000;
  hb.seq = lw->beat_seq++;
  pp_heartbeat_write (&hb, out);
  for (gint r = 1; r <= (gint) lw->n_workers; r++) {
    g_autoptr (GBytes) msg = g_bytes_new (out, sizeof out);
    PpWait w = { lw->world, r, pp_deadline_in_ms (lw->timeout_ms), NULL,
      NULL
    };

    if (!pp_transport_send_bytes (&w, PP_TAG_HEARTBEAT, msg, "heartbeat",
            error))
      return FALSE;
  }
  return TRUE;
}

/* Reads every report that has arrived. */
static gboolean
load_watch_drain (LoadWatch * lw, GError ** error)
{
  for (;;) {
    GError *local = NULL;
    gint source = -1;
    g_autoptr (GBytes) msg = pp_transport_try_recv_bytes (lw->world,
        PP_TAG_LOAD_PROGRESS, PP_LOAD_PROGRESS_BYTES, &source, &local);
    guint64 le;

    if (local != NULL) {
      g_propagate_prefixed_error (error, local, "load progress: ");
      return FALSE;
    }
    if (msg == NULL)
      return TRUE;
    if (g_bytes_get_size (msg) != PP_LOAD_PROGRESS_BYTES || source < 1
        || (guint) source > lw->n_workers) {
      g_set_error (error, PP_ERROR, PP_ERROR_PROTOCOL, "a load progress "
          "report of %" G_GSIZE_FORMAT " bytes from rank %d (expected %d "
          "bytes from a worker)", g_bytes_get_size (msg), source,
          PP_LOAD_PROGRESS_BYTES);
      return FALSE;
    }
    memcpy (&le, g_bytes_get_data (msg, NULL), sizeof le);
    lw->loaded[source] = GUINT64_FROM_LE (le);
    lw->last_report_us[source] = g_get_monotonic_time ();
    if (lw->progress != NULL)
      lw->progress ((guint) source, PP_HANDSHAKE_LOADING, lw->loaded[source],
          lw->progress_data);
  }
}

/* The awaited reply's deadline: timeout-ms after the hello or after its
 * worker's last report. */
static void
load_watch_deadline (LoadWatch * lw)
{
  const gint64 since = lw->last_report_us[lw->wait->peer];

  lw->wait->deadline_us = since == 0 ? lw->hello_deadline_us
      : MAX (lw->hello_deadline_us, since + (gint64) lw->timeout_ms * 1000);
}

/* A PpAliveFunc for the reply's wait. */
static gboolean
load_watch_poll (gpointer data, GError ** error)
{
  LoadWatch *lw = data;

  if (!load_watch_drain (lw, error) || !load_watch_beat (lw, error))
    return FALSE;
  load_watch_deadline (lw);
  return TRUE;
}

gboolean
pp_handshake_run (MPI_Comm world, const PpPlan * plan,
    const PpHelloOptions * options, PpWorkerInfo * workers, guint timeout_ms,
    PpHandshakeProgressFunc progress, gpointer progress_data, GError ** error)
{
  g_autoptr (GBytes) hello = pp_handshake_hello_new (plan, options);
  g_autoptr (GHashTable) parity = NULL;
  PpBackend *backend;
  gint64 deadline = pp_deadline_in_ms (timeout_ms);
  guint n = plan->n_workers;
  int world_size = 0;
  g_autofree gint64 *last_report_us = g_new0 (gint64, n + 1);
  g_autofree guint64 *loaded = g_new0 (guint64, n + 1);
  LoadWatch lw = { world, n, timeout_ms, deadline, last_report_us, loaded,
    NULL, progress, progress_data, 0, 0
  };

  MPI_Comm_size (world, &world_size);
  if (world_size != (int) n + 1) {
    g_set_error (error, PP_ERROR, PP_ERROR_SPAWN,
        "the merged communicator has %d ranks, expected %u", world_size, n + 1);
    return FALSE;
  }
  for (guint r = 1; r <= n; r++) {
    PpWait w = { world, (gint) r, deadline, NULL, NULL };
    if (!pp_transport_send_bytes (&w, PP_TAG_HANDSHAKE, hello,
            "handshake hello", error))
      return FALSE;
  }
  for (guint r = 1; r <= n; r++) {
    PpWait w = { world, (gint) r, deadline, load_watch_poll, &lw };
    PpWorkerInfo *info = &workers[r - 1];
    g_autoptr (GBytes) reply = NULL;

    if (progress != NULL)
      progress (r, PP_HANDSHAKE_WAITING, 0, progress_data);
    lw.wait = &w;
    load_watch_deadline (&lw);
    reply = pp_transport_recv_bytes (&w, PP_TAG_HANDSHAKE_REPLY,
        PP_HANDSHAKE_MAX, "handshake reply", error);
    if (reply == NULL && loaded[r] > 0)
      g_prefix_error (error, "worker rank %u stopped reporting progress "
          "loading its model after %.1f MB: ", r, loaded[r] / 1e6);
    if (reply == NULL || !pp_handshake_reply_parse (reply, info, error))
      return FALSE;
    if (info->error != NULL) {
      g_set_error (error, PP_ERROR, PP_ERROR_CONFIG,
          "worker rank %u (pid %" G_GINT64_FORMAT " on %s) rejected the "
          "plan: %s", r, info->pid, info->host, info->error);
      return FALSE;
    }
    if (info->rank != (gint) r || info->plan_id != plan->plan_id) {
      g_set_error (error, PP_ERROR, PP_ERROR_PROTOCOL,
          "handshake reply of rank %u: expected rank %u plan 0x%08x, "
          "received rank %d plan 0x%08x", r, r, plan->plan_id,
          info->rank, info->plan_id);
      return FALSE;
    }
    PP_INFO ("worker rank %u is pid %" G_GINT64_FORMAT " on %s, steps [%u,%u)"
        ", %s, data plane %s, activations %s", r, info->pid, info->host,
        plan->slices[r - 1].first, plan->slices[r - 1].end, (const gchar *)
        g_hash_table_lookup (info->parity, PP_PARITY_DEVICE), (const gchar *)
        g_hash_table_lookup (info->parity, PP_PARITY_DATA_PLANE),
        (const gchar *) g_hash_table_lookup (info->parity,
            PP_PARITY_ACTIVATIONS));
    if (progress != NULL)
      progress (r, PP_HANDSHAKE_READY, 0, progress_data);
  }
  /* Reports sent before a reply may arrive after it: none is left for a
   * later start to read. */
  lw.wait = NULL;
  if (!load_watch_drain (&lw, error))
    return FALSE;
  /* Rank 0 computes on the plan's backend (it resolved the name). */
  backend = pp_backend_get (plan->backend, error);
  if (backend == NULL)
    return FALSE;
  parity = pp_parity_local (NULL, &plan->plan_id, backend, plan->model);
  g_hash_table_insert (parity, g_strdup (PP_PARITY_DATA_PLANE),
      g_strdup (plan->data_plane));
  return pp_parity_check (parity, workers, n, error);
}

gboolean
pp_worker_answer_probe (int argc, char **argv)
{
  if (argc < 2 || !g_str_equal (argv[1], PP_WORKER_PROBE_ARG))
    return FALSE;
  printf ("%sprotocol %d build %s\n", PP_WORKER_PROBE_REPLY,
      PP_PROTOCOL_VERSION, PP_BUILD_ID);
  fflush (stdout);
  return TRUE;
}

guint
pp_worker_start_timeout_arg (int argc, char **argv, guint fallback)
{
  const gsize len = strlen (PP_WORKER_START_ARG);

  for (int i = 1; i < argc; i++) {
    guint64 ms;

    if (strncmp (argv[i], PP_WORKER_START_ARG, len) == 0
        && argv[i][len] == '='
        && g_ascii_string_to_unsigned (argv[i] + len + 1, 10, 1, G_MAXUINT,
            &ms, NULL))
      return (guint) ms;
  }
  return fallback;
}
