/* mpi-spawn-rss — what one MPI_Comm_spawn costs the parent, without
 * ppdiffuse.
 *
 *   mpi-spawn-rss [CYCLES [WARM_UP]]
 *
 * The parent spawns two copies of itself (as ppdiffuse spawns its workers:
 * "map_by :OVERSUBSCRIBE"), which only connect and disconnect, then
 * disconnects from them; CYCLES times.  It prints the growth of its VmRSS
 * per cycle after WARM_UP cycles, and the time per cycle.  What restart-rss
 * measures for ppdiffuse with keep-workers off (a spawn per start) is this
 * growth: Open MPI keeps per-job state in the parent for every job it ever
 * spawned, and only MPI_Finalize frees it.  It runs with the PMIx store
 * ppdiffuse sets (PP_PMIX_GDS, pp-mpi-start.c) unless PMIX_MCA_gds is set:
 * PMIX_MCA_gds=ds21 measures Open MPI's default.
 *
 * Exit status: 0 whatever the growth (it is a benchmark), non-zero when MPI
 * fails or a cycle does not finish within SPAWN_DEADLINE_S: Open MPI's
 * intermittent spawn hang (tests/ompi-retry.py) ends in an error that
 * names it, not in the test's timeout. */
#include <mpi.h>

#include <glib.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pp-bench-rss.h"
#include "pp-protocol.h"

#define DEFAULT_CYCLES 60
#define DEFAULT_WARM_UP 10
#define CHILDREN 2
#define CHILD_ARG "--child"
/* A cycle takes well under a second here; one that takes this long is
 * stuck in MPI_Comm_spawn. */
#define SPAWN_DEADLINE_S 30
#define SPAWN_HANG_MESSAGE "a cycle of spawning the children " \
    "(MPI_Comm_spawn) did not finish within " G_STRINGIFY (SPAWN_DEADLINE_S) \
    " s\n"

static void
on_spawn_deadline (int sig)
{
  (void) sig;
  if (write (STDERR_FILENO, SPAWN_HANG_MESSAGE,
          sizeof SPAWN_HANG_MESSAGE - 1) < 0) {
    /* nothing more to say */
  }
  _exit (1);
}

static int
child (void)
{
  MPI_Comm parent;

  MPI_Init (NULL, NULL);
  MPI_Comm_get_parent (&parent);
  if (parent != MPI_COMM_NULL)
    MPI_Comm_disconnect (&parent);
  MPI_Finalize ();
  return 0;
}

int
main (int argc, char **argv)
{
  const guint cycles = argc > 1 && strcmp (argv[1], CHILD_ARG) != 0
      ? (guint) atoi (argv[1]) : DEFAULT_CYCLES;
  const guint warm_up = argc > 2 ? (guint) atoi (argv[2]) : DEFAULT_WARM_UP;
  gchar *child_argv[] = { (gchar *) CHILD_ARG, NULL };
  guint64 rss_start = 0;
  gint64 t_start = 0;
  gchar *self_path;
  MPI_Info info;
  int provided;

  if (argc > 1 && strcmp (argv[1], CHILD_ARG) == 0)
    return child ();
  if (cycles <= warm_up) {
    fprintf (stderr, "usage: %s [CYCLES [WARM_UP]], CYCLES > WARM_UP\n",
        argv[0]);
    return 2;
  }
  /* The spawn runs the path in Open MPI's launcher, not here. */
  self_path = g_file_read_link ("/proc/self/exe", NULL);
  if (self_path == NULL) {
    fprintf (stderr, "cannot read /proc/self/exe\n");
    return 1;
  }
  g_setenv (PP_PMIX_GDS_ENV, PP_PMIX_GDS, FALSE);
  MPI_Init_thread (NULL, NULL, MPI_THREAD_MULTIPLE, &provided);
  MPI_Info_create (&info);
  MPI_Info_set (info, "map_by", ":OVERSUBSCRIBE");
  signal (SIGALRM, on_spawn_deadline);
  for (guint i = 0; i < cycles; i++) {
    MPI_Comm inter;
    int errs[CHILDREN];

    if (i == warm_up) {
      rss_start = pp_bench_rss_kb ();
      t_start = g_get_monotonic_time ();
    }
    alarm (SPAWN_DEADLINE_S);
    if (MPI_Comm_spawn (self_path, child_argv, CHILDREN, info, 0,
            MPI_COMM_SELF, &inter, errs) != MPI_SUCCESS) {
      fprintf (stderr, "MPI_Comm_spawn failed at cycle %u\n", i);
      return 1;
    }
    MPI_Comm_disconnect (&inter);
    alarm (0);
  }
  printf ("MPI_Comm_spawn of %d processes + disconnect, %u cycles after %u "
      "warm-up: VmRSS %+.1f kB per cycle, %.1f ms per cycle\n", CHILDREN,
      cycles - warm_up, warm_up,
      ((gdouble) pp_bench_rss_kb () - (gdouble) rss_start)
      / (cycles - warm_up),
      (g_get_monotonic_time () - t_start) / 1000.0 / (cycles - warm_up));
  MPI_Info_free (&info);
  MPI_Finalize ();
  g_free (self_path);
  return 0;
}
