/* ppdiffuse — rank 0's account of a failure: it records the mesh's first
 * failure (later ones are its consequences), turns what liveness sees
 * (heartbeats, reports, a worker gone from /proc) into that failure, and
 * names the worker to blame when a wait on the mesh gives up. */
#include "pp-liveness-room.h"
#include "pp-daemon-loss.h"
#include "pp-error.h"
#include "pp-handshake.h"
#include "pp-log.h"
#include "pp-proc.h"
#include "pp-recorder.h"

/* A worker whose last heartbeat is older than this many heartbeat periods
 * is overdue: frozen, or its host unreachable. */
#define PP_MESH_OVERDUE_PERIODS 2

gchar *
pp_mesh_worker_name (PpMesh * mesh, guint i)
{
  const PpWorkerInfo *info = &mesh->workers[i];

  return g_strdup_printf ("worker rank %u (pid %" G_GINT64_FORMAT " on %s, "
      "steps [%u,%u))", i + 1, info->pid, info->host,
      mesh->plan->slices[i].first, mesh->plan->slices[i].end);
}

/* Records the mesh's first failure (later ones are consequences) and
 * dumps rank 0's flight recorder with it. */
void
pp_mesh_fail (PpMesh * mesh, const GError * error)
{
  gboolean first;

  g_mutex_lock (&mesh->lock);
  first = mesh->fault == NULL;
  if (first)
    mesh->fault = g_error_copy (error);
  g_mutex_unlock (&mesh->lock);
  g_atomic_int_set (&mesh->failed, TRUE);
  /* Nothing may wait on NCCL for a mesh that failed: every plane is
   * aborted, and waits under way end with this cause. */
  if (first)
    pp_nccl_links_abort (mesh->planes, error);
  if (first) {
    g_autofree gchar *path = pp_recorder_dump (mesh->dump_dir, 0,
        error->message);

    if (path != NULL)
      PP_ERROR_LOG ("flight recorder of rank 0 written to %s", path);
  }
}

/* The recorded failure, if any, into @error. */
gboolean
pp_mesh_fault (PpMesh * mesh, GError ** error)
{
  gboolean found;

  g_mutex_lock (&mesh->lock);
  found = mesh->fault != NULL;
  if (found)
    g_propagate_error (error, g_error_copy (mesh->fault));
  g_mutex_unlock (&mesh->lock);
  return found;
}

gboolean
pp_mesh_has_failed (PpMesh * mesh, GError ** error)
{
  if (!g_atomic_int_get (&mesh->failed))
    return FALSE;
  if (!pp_mesh_fault (mesh, error))
    g_set_error (error, PP_ERROR, PP_ERROR_PROTOCOL,
        "the worker mesh has already failed");
  return TRUE;
}

/* "rank 1: computing chunk 3 for 120 ms, …; rank 2: …" from the heartbeats. */
static gchar *
describe_workers (PpMesh * mesh)
{
  GString *s = g_string_new (NULL);

  for (guint i = 0; mesh->liveness != NULL && i < mesh->plan->n_workers; i++) {
    g_autofree gchar *d = pp_liveness_describe_peer (mesh->liveness, i);

    g_string_append_printf (s, "%srank %u: %s", i ? "; " : "", i + 1, d);
  }
  return g_string_free (s, FALSE);
}

/* ---- what liveness finds ----------------------------------------------- */

/* A worker's report as the mesh's error: it leads with the rank it
 * blames when that is another worker (a receiver names the sender of a
 * broken chunk), followed by the report and what the blamed rank's last
 * heartbeat said. */
static gchar *
report_lead (PpMesh * mesh, gint source, gint blamed, const gchar * text)
{
  g_autofree gchar *name = NULL;
  g_autofree gchar *state = NULL;

  if (blamed < 1 || blamed > (gint) mesh->plan->n_workers || blamed == source)
    return g_strdup (text);
  name = pp_mesh_worker_name (mesh, (guint) blamed - 1);
  state = pp_liveness_describe_peer (mesh->liveness, (guint) blamed - 1);
  return g_strdup_printf ("%s, blamed in a report: %s; rank %d was %s", name,
      text, blamed, state);
}

/* Takes every report that has arrived (liveness's drain). */
static void
drain_reports (gpointer data)
{
  PpMesh *mesh = data;
  GError *error = NULL;
  GBytes *bytes;
  gint source;

  while ((bytes = pp_transport_try_recv_bytes (mesh->world, PP_TAG_REPORT,
              PP_REPORT_MAX, &source, &error)) != NULL) {
    gint rank, blamed;
    g_autofree gchar *text = pp_report_decode (bytes, &rank, &blamed,
        &error);

    g_bytes_unref (bytes);
    pp_recorder_note (PP_REC_REPORT, PP_RECORDER_NO_CHUNK, source, 0,
        PP_REC_DONE);
    if (text != NULL) {
      g_autofree gchar *lead = report_lead (mesh, source, blamed, text);
      GError *report = g_error_new_literal (PP_ERROR, PP_ERROR_RESOURCE,
          lead);

      PP_ERROR_LOG ("report from rank %d: %s", source, text);
      pp_mesh_fail (mesh, report);
      g_error_free (report);
    }
    if (error != NULL)
      break;
  }
  if (error != NULL) {
    g_prefix_error (&error, "rank 0 monitoring the workers: ");
    pp_mesh_fail (mesh, error);
    g_error_free (error);
  }
}

static gboolean
watching (gpointer data)
{
  PpMesh *mesh = data;

  return !g_atomic_int_get (&mesh->failed);
}

/* "computing chunk 7 for 31000 ms (3.2× what it was expected to take),
 * expected 9800 ms (measured compute), allowed 29900 ms: …: it is stuck
 * …; if the work is only this slow, …": a compute past its allowance,
 * with what to change. */
static gchar *
describe_overrun (PpMesh * mesh, guint i, const PpHeartbeat * hb,
    gint64 ran_us)
{
  const gchar *source;
  const gint64 expected = pp_mesh_expected_slice_us (mesh, i, hb, &source);
  g_autofree gchar *allowed = pp_mesh_describe_allowance (mesh, expected,
      source);

  return g_strdup_printf ("computing chunk %" G_GUINT64_FORMAT " for %"
      G_GINT64_FORMAT " ms (%.1f× what it was expected to take), %s: it is "
      "stuck (a step that does not return) or far slower than measured; if "
      "the work is only this slow, raise timeout-ms or %s", hb->chunk_id,
      ran_us / 1000, (gdouble) ran_us / MAX (expected, 1), allowed,
      pp_allowance_advice (mesh->plan->n_workers, mesh->plan->n_steps));
}

/* The watchdog's verdict on a worker, as the mesh's failure. */
static void
worker_dead (gpointer data, guint i, PpPeerVerdict verdict,
    const PpHeartbeat * hb, gint64 silent_us)
{
  PpMesh *mesh = data;
  g_autofree gchar *name = pp_mesh_worker_name (mesh, i);
  GError *error;

  if (verdict == PP_PEER_SILENT) {
    g_autofree gchar *state = pp_heartbeat_describe (hb, silent_us);

    error = g_error_new (PP_ERROR, PP_ERROR_TIMEOUT, "%s: no heartbeat for "
        "%" G_GINT64_FORMAT " ms (timeout-ms %u): it hangs or its host is "
        "unreachable; it was %s", name, silent_us / 1000, mesh->timeout_ms,
        state);
  } else {
    g_autofree gchar *overrun = describe_overrun (mesh, i, hb,
        (gint64) hb->state_us);

    error = g_error_new (PP_ERROR, PP_ERROR_TIMEOUT, "%s: %s", name,
        overrun);
  }
  pp_mesh_fail (mesh, error);
  g_error_free (error);
}

/* The watchdog's allowance for worker @i's compute (liveness's
 * allowance): what its slice is expected to take, by pp-allowance.h. */
static gint64
worker_allowance (gpointer data, guint i, const PpHeartbeat * hb)
{
  return pp_mesh_slice_allowance_us (data, i, hb);
}

static void
heartbeats_broken (gpointer data, const GError * error)
{
  PpMesh *mesh = data;
  GError *e = g_error_copy (error);

  g_prefix_error (&e, "rank 0 monitoring the workers: ");
  pp_mesh_fail (mesh, e);
  g_error_free (e);
}

PpLiveness *
pp_mesh_liveness_new (PpMesh * mesh)
{
  static const PpLivenessCallbacks callbacks = {
    drain_reports, watching, worker_dead, heartbeats_broken,
    worker_allowance
  };
  const guint n = mesh->plan->n_workers;
  g_autofree gint *ranks = g_new (gint, n);

  for (guint i = 0; i < n; i++)
    ranks[i] = (gint) i + 1;
  return pp_liveness_new (mesh->world, 0, ranks, n, mesh->timeout_ms,
      mesh->watchdog, &callbacks, mesh);
}

/* Between polls of a wait on the mesh: the monitor's verdict, and a worker
 * on this host that has exited is reported at once instead of at the
 * deadline (after any report it sent before it went). */
gboolean
pp_mesh_workers_alive (gpointer data, GError ** error)
{
  PpMesh *mesh = data;

  if (pp_mesh_fault (mesh, error))
    return FALSE;
  for (guint i = 0; i < mesh->plan->n_workers; i++) {
    const PpWorkerInfo *info = &mesh->workers[i];
    if (info->pid > 0 && pp_proc_is_local (info->host)
        && !pp_proc_is_running (info->pid)) {
      g_autofree gchar *name = pp_mesh_worker_name (mesh, i);
      g_autofree gchar *state = NULL;
      g_autofree gchar *gone = NULL;
      GError *exited;

      pp_liveness_drain (mesh->liveness);
      if (pp_mesh_fault (mesh, error))
        return FALSE;
      state = pp_liveness_describe_peer (mesh->liveness, i);
      /* A worker goes with Open MPI's daemon (its PMIx server), which
       * died first: that is the cause, not the worker. */
      gone = pp_daemon_gone ();
      exited = gone != NULL ? g_error_new (PP_ERROR, PP_ERROR_RESOURCE,
          "%s has exited: %s, and the workers of this host with it; "
          PP_DAEMON_GONE_ADVICE "; it was %s", name, gone, state)
          : g_error_new (PP_ERROR, PP_ERROR_RESOURCE, "%s has exited "
          "(its stderr says why); it was %s", name, state);
      pp_mesh_fail (mesh, exited);
      g_propagate_error (error, exited);
      return FALSE;
    }
  }
  return TRUE;
}

/* ---- blame for a wait that gave up ------------------------------------- */

/* What rank 0 knows of a worker at one instant, from its heartbeats. */
typedef struct
{
  PpHeartbeat beat;
  gint64 silent_us;             /* since its last heartbeat */
  gint64 stalled_us;            /* in one compute, or silent, for so long */
  gint64 limit_us;              /* how long either may be: the compute's
                                 * allowance, or timeout-ms of silence */
} WorkerView;

static void
view_worker (PpMesh * mesh, guint i, WorkerView * v)
{
  pp_liveness_peer (mesh->liveness, i, &v->beat, &v->silent_us);
  /* A compute goes on between heartbeats; a wait does not stall. */
  v->stalled_us = v->beat.state == PP_WORK_COMPUTING
      ? (gint64) v->beat.state_us + v->silent_us : v->silent_us;
  v->limit_us = v->beat.state == PP_WORK_COMPUTING
      ? pp_mesh_slice_allowance_us (mesh, i, &v->beat)
      : (gint64) mesh->timeout_ms * 1000;
}

/* "worker rank 2 (…): computing chunk 3 for 2010 ms, longer than
 * timeout-ms 2000", or "…: no heartbeat for 1900 ms (one is due every
 * 500 ms) while rank 0 waited …: it hangs …; it was …", in the words of
 * the watchdog (worker_dead). */
static gchar *
stalled_lead (PpMesh * mesh, guint i, const WorkerView * v,
    guint64 awaited)
{
  const gint64 limit = (gint64) mesh->timeout_ms * 1000;
  const guint period_ms = pp_heartbeat_period_ms (mesh->timeout_ms);
  g_autofree gchar *name = pp_mesh_worker_name (mesh, i);
  g_autofree gchar *state = pp_heartbeat_describe (&v->beat, v->silent_us);
  g_autofree gchar *waited = g_strdup_printf ("while rank 0 waited for "
      "chunk %" G_GUINT64_FORMAT, awaited);

  if (v->silent_us > PP_MESH_OVERDUE_PERIODS * (gint64) period_ms * 1000) {
    g_autofree gchar *bound = v->silent_us >= limit
        ? g_strdup_printf ("(timeout-ms %u)", mesh->timeout_ms)
        : g_strdup_printf ("(one is due every %u ms) %s", period_ms, waited);

    return g_strdup_printf ("%s: no heartbeat for %" G_GINT64_FORMAT " ms "
        "%s: it hangs or its host is unreachable; it was %s", name,
        v->silent_us / 1000, bound, state);
  }
  if (v->stalled_us >= v->limit_us) {
    g_autofree gchar *overrun = describe_overrun (mesh, i, &v->beat,
        v->stalled_us);

    return g_strdup_printf ("%s: %s", name, overrun);
  }
  return g_strdup_printf ("%s: computing chunk %" G_GUINT64_FORMAT " for %"
      G_GINT64_FORMAT " ms %s", name, v->beat.chunk_id, v->stalled_us / 1000,
      waited);
}

/* The lead of a timed-out wait for @awaited: the worker to blame and why,
 * from the heartbeats.  A worker that only waits behind a slower one is
 * not to blame, so: the earliest stage computing one chunk past its
 * allowance or silent past timeout-ms; else the one stalled longest, if longer than heartbeats
 * allow; else the first stage that has not passed @awaited on. */
static gchar *
blame_stalled (PpMesh * mesh, guint64 awaited)
{
  const guint n = mesh->plan->n_workers;
  const gint64 overdue = PP_MESH_OVERDUE_PERIODS
      * (gint64) pp_heartbeat_period_ms (mesh->timeout_ms) * 1000;
  g_autofree WorkerView *views = g_new0 (WorkerView, n);
  guint longest = 0;

  if (mesh->liveness == NULL)
    return NULL;
  for (guint i = 0; i < n; i++)
    view_worker (mesh, i, &views[i]);
  for (guint i = 0; i < n; i++)
    if (views[i].stalled_us >= views[i].limit_us)
      return stalled_lead (mesh, i, &views[i], awaited);
  for (guint i = 1; i < n; i++)
    if (views[i].stalled_us > views[longest].stalled_us)
      longest = i;
  if (views[longest].stalled_us > overdue)
    return stalled_lead (mesh, longest, &views[longest], awaited);
  for (guint i = 0; i < n; i++) {
    const PpHeartbeat *hb = &views[i].beat;
    const gboolean passed = hb->sent != PP_HEARTBEAT_NONE
        && hb->sent >= awaited;

    if (!passed || i == n - 1) {
      g_autofree gchar *name = pp_mesh_worker_name (mesh, i);
      g_autofree gchar *state = pp_heartbeat_describe (hb,
          views[i].silent_us);

      return g_strdup_printf ("%s: %s chunk %" G_GUINT64_FORMAT "%s within "
          "rank 0's deadline; it was %s", name, passed ? "sent" :
          "has not passed", awaited, passed ? ", which rank 0 did not receive"
          : " on", state);
    }
  }
  return NULL;
}

/* After a failed wait of rank 0 on worker @peer for chunk @awaited
 * (@symptom says which wait): the mesh's first failure is the one to
 * report (a worker's report, the watchdog's verdict), not this symptom of
 * it.  Otherwise the error leads with the worker to blame: for a timeout,
 * the one the heartbeats show stalled, with the symptom and what each
 * worker was doing after it; for a broken transfer, @peer. */
void
pp_mesh_wait_failed (PpMesh * mesh, guint peer, guint64 awaited,
    const gchar * symptom, GError ** error)
{
  GError *fault = NULL;
  GError *lead;

  if (pp_mesh_fault (mesh, &fault)) {
    g_clear_error (error);
    g_propagate_error (error, fault);
    return;
  }
  if (g_error_matches (*error, PP_ERROR, PP_ERROR_TIMEOUT)) {
    g_autofree gchar *culprit = blame_stalled (mesh, awaited);
    g_autofree gchar *states = describe_workers (mesh);

    lead = g_error_new (PP_ERROR, PP_ERROR_TIMEOUT, "%s%s%s: %s; workers: %s",
        culprit ? culprit : "", culprit ? "; " : "", symptom,
        (*error)->message, states);
  } else {
    g_autofree gchar *name = pp_mesh_worker_name (mesh, peer);
    g_autofree gchar *state = pp_liveness_describe_peer (mesh->liveness,
        peer);

    lead = g_error_new ((*error)->domain, (*error)->code, "%s: %s; it was "
        "%s; %s", name, (*error)->message, state, symptom);
  }
  g_clear_error (error);
  g_propagate_error (error, lead);
  pp_mesh_fail (mesh, *error);
}
