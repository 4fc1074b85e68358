/* hop-bench — what one hop of a chunk costs between two ranks on this
 * host, through the mesh's own transport (pp_transport_send_chunk and
 * pp_transport_recv_chunk), with and without the doorbells.
 *
 *   hop-bench [--iters N] [--sizes BYTES,BYTES,...]
 *
 * The parent spawns one copy of itself (as the element spawns a worker),
 * makes the bells (with lanes, and again without) as rank 0 does, and
 * sends a chunk of one payload tensor back and forth: a hop is half a
 * round trip.  Each way is a duplicate of the communicator with its own
 * bells or none, and each size is measured the three ways in alternating
 * rounds, so that they are side by side.  It prints the median and p95 of
 * a hop in µs, and a memcpy of the payload for scale.
 *
 * Exit status: 0 whatever the figures, non-zero when a transfer fails or
 * the run does not finish within DEADLINE_S. */
#include <mpi.h>
#include <glib.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pp-bells.h"
#include "pp-lanes.h"
#include "pp-queue.h"
#include "pp-transport.h"

#define CHILD_ARG "--child"
#define DEFAULT_ITERS 2000
#define DEFAULT_SIZES "32768,65536,1048576"
#define ROUNDS 3
#define WARM_UP 50
#define TRANSFER_TIMEOUT_MS 10000
#define DEADLINE_S 600
#define TAG_BELLS_NAME 120
#define DEADLINE_MESSAGE "hop-bench did not finish within " \
    G_STRINGIFY (DEADLINE_S) " s\n"

static void
on_deadline (int sig)
{
  (void) sig;
  if (write (STDERR_FILENO, DEADLINE_MESSAGE,
          sizeof DEADLINE_MESSAGE - 1) < 0) {
    /* nothing more to say */
  }
  _exit (1);
}

static void
die (const gchar * what, GError * error)
{
  fprintf (stderr, "hop-bench: %s: %s\n", what,
      error != NULL ? error->message : "failed");
  exit (1);
}

static PpChunk *
new_chunk (gsize bytes)
{
  const gint64 shape[1] = { (gint64) bytes };
  g_autoptr (GError) error = NULL;
  PpChunk *chunk = pp_chunk_new ();
  PpTensor *t = pp_tensor_new ("latent", PP_DTYPE_U8, 1, shape, &error);

  if (t == NULL)
    die ("a payload tensor", error);
  memset (t->data, 0x5a, bytes);
  pp_chunk_add_tensor (chunk, t);
  chunk->flags = PP_CHUNK_FLAG_DATA;
  return chunk;
}

static PpWait
wait_on (MPI_Comm comm, gint peer)
{
  PpWait w = { comm, peer, pp_deadline_in_ms (TRANSFER_TIMEOUT_MS), NULL,
    NULL
  };
  return w;
}

static void
send_or_die (MPI_Comm comm, gint peer, PpChunkLink * link, PpChunk * chunk)
{
  g_autoptr (GError) error = NULL;
  PpWait w = wait_on (comm, peer);

  if (!pp_transport_send_chunk (&w, link, chunk, &error))
    die ("send", error);
}

static PpChunk *
recv_or_die (MPI_Comm comm, gint peer, PpChunkLink * link)
{
  g_autoptr (GError) error = NULL;
  PpWait w = wait_on (comm, peer);
  PpChunk *chunk = pp_transport_recv_chunk (&w, link, TRANSFER_TIMEOUT_MS,
      &error);

  if (chunk == NULL)
    die ("receive", error);
  return chunk;
}

/* The child: echoes every chunk it receives, as many as the parent sends. */
static void
echo (MPI_Comm comm, guint n_chunks)
{
  PpChunkLink *in = pp_chunk_link_new (2);
  PpChunkLink *out = pp_chunk_link_new (0);

  for (guint i = 0; i < n_chunks; i++)
    send_or_die (comm, 0, out, recv_or_die (comm, 0, in));
  pp_chunk_link_free (in);
  pp_chunk_link_free (out);
}

static int
compare_doubles (gconstpointer a, gconstpointer b)
{
  const gdouble x = *(const gdouble *) a, y = *(const gdouble *) b;
  return x < y ? -1 : x > y;
}

/* @iters round trips of a chunk of @bytes, hops in µs appended to @hops. */
static void
ping (MPI_Comm comm, gsize bytes, guint iters, GArray * hops)
{
  PpChunkLink *in = pp_chunk_link_new (2);
  PpChunkLink *out = pp_chunk_link_new (0);
  PpChunk *chunk = new_chunk (bytes);

  for (guint i = 0; i < WARM_UP + iters; i++) {
    const gint64 t0 = g_get_monotonic_time ();
    gdouble hop;

    send_or_die (comm, 1, out, chunk);
    chunk = recv_or_die (comm, 1, in);
    hop = (g_get_monotonic_time () - t0) / 2.0;
    if (i >= WARM_UP)
      g_array_append_val (hops, hop);
  }
  pp_chunk_free (chunk);
  pp_chunk_link_free (in);
  pp_chunk_link_free (out);
}

static gdouble
quantile (GArray * sorted, gdouble q)
{
  return g_array_index (sorted, gdouble, (guint) (q * (sorted->len - 1)));
}

static gdouble
memcpy_us (gsize bytes)
{
  g_autofree guint8 *a = g_malloc (bytes), *b = g_malloc (bytes);
  const guint reps = 200;
  gint64 t0;

  memset (a, 1, bytes);
  memcpy (b, a, bytes);
  t0 = g_get_monotonic_time ();
  for (guint i = 0; i < reps; i++) {
    memcpy (b, a, bytes);
    a[i % bytes] = b[(i * 7) % bytes];
  }
  return (gdouble) (g_get_monotonic_time () - t0) / reps;
}

#define N_WAYS 3
static const gchar *const way_names[N_WAYS] = { "lanes", "MPI+bells", "MPI" };

static void
report (gsize bytes, GArray ** hops)
{
  printf ("%9" G_GSIZE_FORMAT, bytes);
  for (guint k = 0; k < N_WAYS; k++) {
    g_array_sort (hops[k], compare_doubles);
    printf (" %9.1f %7.1f", quantile (hops[k], 0.5),
        quantile (hops[k], 0.95));
  }
  printf (" %8.1f\n", memcpy_us (bytes));
}

/* Both ranks walk the same plan: sizes × rounds × ways. */
static void
run (MPI_Comm * ways, gint rank, gchar ** sizes, guint iters)
{
  if (rank == 0) {
    printf ("one hop of a chunk between two ranks on this host, µs "
        "(half a round trip; %u round trips × %d rounds each)\n%9s", iters,
        ROUNDS, "bytes");
    for (guint k = 0; k < N_WAYS; k++)
      printf (" %9s %7s", way_names[k], "p95");
    printf (" %8s\n", "memcpy");
  }
  for (guint s = 0; sizes[s] != NULL; s++) {
    const gsize bytes = g_ascii_strtoull (sizes[s], NULL, 10);
    GArray *hops[N_WAYS];

    for (guint k = 0; k < N_WAYS; k++)
      hops[k] = g_array_new (FALSE, FALSE, sizeof (gdouble));
    for (guint r = 0; r < ROUNDS; r++)
      for (guint k = 0; k < N_WAYS; k++) {
        if (rank == 0)
          ping (ways[k], bytes, iters, hops[k]);
        else
          echo (ways[k], WARM_UP + iters);
      }
    if (rank == 0)
      report (bytes, hops);
    for (guint k = 0; k < N_WAYS; k++)
      g_array_unref (hops[k]);
  }
}

/* Rank 0 makes the bells (with lanes when @lanes) and names them; rank 1
 * maps them; both hang them on @comm, and rank 0 opens the lanes. */
static void
share_bells (MPI_Comm comm, gint rank, gboolean lanes)
{
  g_autoptr (GError) error = NULL;
  gchar name[256] = "";
  PpBells *bells;

  if (rank == 0) {
    gchar *made = NULL;

    bells = pp_bells_create (2, lanes ? PP_LANE_SLOT_BYTES_DEFAULT : 0, &made,
        &error);
    if (bells == NULL)
      die ("bells", error);
    g_strlcpy (name, made, sizeof name);
    g_free (made);
    MPI_Send (name, sizeof name, MPI_CHAR, 1, TAG_BELLS_NAME, comm);
  } else {
    MPI_Recv (name, sizeof name, MPI_CHAR, 0, TAG_BELLS_NAME, comm,
        MPI_STATUS_IGNORE);
    bells = pp_bells_open (name, 2, &error);
    if (bells == NULL)
      die ("bells", error);
    if (pp_bells_lanes (bells) != NULL)
      pp_lanes_join (pp_bells_lanes (bells), 1);
  }
  if ((pp_bells_lanes (bells) != NULL) != lanes)
    die (lanes ? "no lanes in the bells" : "lanes in bells made without",
        NULL);
  MPI_Barrier (comm);
  if (rank == 0) {
    pp_bells_unlink (bells);
    if (lanes)
      pp_lanes_open (pp_bells_lanes (bells));
  }
  pp_bells_attach (comm, bells);
}

int
main (int argc, char **argv)
{
  gboolean is_child = FALSE;
  gint iters = DEFAULT_ITERS;
  g_autofree gchar *sizes_arg = NULL;
  GOptionEntry entries[] = {
    {"iters", 0, 0, G_OPTION_ARG_INT, &iters, "round trips per round", "N"},
    {"sizes", 0, 0, G_OPTION_ARG_STRING, &sizes_arg,
        "payload sizes in bytes (" DEFAULT_SIZES ")", "B,B,..."},
    {"child", 0, G_OPTION_FLAG_HIDDEN, G_OPTION_ARG_NONE, &is_child, NULL,
        NULL},
    {NULL}
  };
  g_autoptr (GOptionContext) ctx = g_option_context_new (NULL);
  g_autoptr (GError) error = NULL;
  g_auto (GStrv) sizes = NULL;
  MPI_Comm inter, comm, ways[N_WAYS];
  int provided, rank;

  g_option_context_add_main_entries (ctx, entries, NULL);
  if (!g_option_context_parse (ctx, &argc, &argv, &error) || iters < 1) {
    fprintf (stderr, "hop-bench: %s\n", error ? error->message
        : "--iters must be at least 1");
    return 2;
  }
  sizes = g_strsplit (sizes_arg ? sizes_arg : DEFAULT_SIZES, ",", -1);
  signal (SIGALRM, on_deadline);
  alarm (DEADLINE_S);
  g_setenv (PP_PMIX_GDS_ENV, PP_PMIX_GDS, FALSE);
  MPI_Init_thread (NULL, NULL, MPI_THREAD_MULTIPLE, &provided);
  if (is_child) {
    MPI_Comm_get_parent (&inter);
    if (inter == MPI_COMM_NULL)
      die ("the child has no parent", NULL);
  } else {
    g_autofree gchar *self = g_file_read_link ("/proc/self/exe", NULL);
    gchar *child_argv[] = { (gchar *) CHILD_ARG, NULL, NULL, NULL, NULL,
      NULL
    };
    g_autofree gchar *iters_s = g_strdup_printf ("--iters=%d", iters);
    g_autofree gchar *sizes_s = g_strdup_printf ("--sizes=%s",
        sizes_arg ? sizes_arg : DEFAULT_SIZES);
    MPI_Info info;
    int err = 0;

    child_argv[1] = iters_s;
    child_argv[2] = sizes_s;
    MPI_Info_create (&info);
    MPI_Info_set (info, "map_by", ":OVERSUBSCRIBE");
    if (self == NULL || MPI_Comm_spawn (self, child_argv, 1, info, 0,
            MPI_COMM_SELF, &inter, &err) != MPI_SUCCESS)
      die ("spawning the echoing rank (MPI_Comm_spawn)", NULL);
    MPI_Info_free (&info);
  }
  MPI_Intercomm_merge (inter, is_child, &comm);
  MPI_Comm_rank (comm, &rank);
  /* Each way on a duplicate: a bells attribute is not copied. */
  for (guint k = 0; k < N_WAYS; k++)
    MPI_Comm_dup (comm, &ways[k]);
  share_bells (ways[0], rank, TRUE);
  share_bells (ways[1], rank, FALSE);
  run (ways, rank, sizes, (guint) iters);
  MPI_Barrier (comm);
  for (guint k = 0; k < N_WAYS; k++)
    MPI_Comm_free (&ways[k]);
  MPI_Comm_free (&comm);
  MPI_Comm_disconnect (&inter);
  MPI_Finalize ();
  return 0;
}
