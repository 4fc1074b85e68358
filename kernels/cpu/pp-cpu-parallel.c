/* ppdiffuse — the one place where the CPU ops run in parallel: a
 * process-wide team of helper threads for loops (softmax, element-wise,
 * norms, convolutions) and for GEMMs, which pp_cpu_gemm splits into
 * single-threaded OpenBLAS calls.
 *
 * Why not OpenBLAS's threads plus a pool of our own: two teams on the same
 * cores each keep a thread hot for their next call, and OpenBLAS's split of
 * the small GEMMs of a small UNet costs more in hand-offs than it gains
 * (measured: 1.3× on 2 cores, against 1.8× for whole GEMMs per thread).
 * So the team takes OpenBLAS's thread count (OPENBLAS_NUM_THREADS and
 * friends still steer it), or PPDIFFUSE_CPU_THREADS when that is set, and
 * then sets OpenBLAS to one thread.  PPDIFFUSE_CPU_THREADS is not held to
 * the number of cores: the tests run 4 threads on 2 cores to take the
 * paths that split 4 ways.
 *
 * A loop is split into chunks that the caller and the helpers claim from a
 * shared ticket until none is left, so a helper that starts late (or a
 * core busy elsewhere) costs nothing but its share.  The ticket packs the
 * loop's generation, its chunk count and the next chunk into one atomic
 * word: a helper can only claim a chunk of the loop it woke for, and the
 * loop's fields stay untouched until every claimed chunk is done.
 * Between loops the helpers spin for up to PP_CPU_SPIN_US (the next op of
 * a forward pass follows within microseconds; a sleeping thread takes tens
 * of them to wake), then sleep on a condition variable.
 *
 * One loop runs at a time: a call from another thread while one runs, a
 * call from inside a chunk, and a call in a child process forked after the
 * team started all run serially on their caller. */
#include "pp-cpu-parallel.h"
#include "pp-cpu-ops.h"

#include <cblas.h>
#include <stdatomic.h>
#include <stdint.h>
#include <unistd.h>

/* How long an idle helper waits for the next loop before it sleeps, and
 * how many pause-spins it does before it starts yielding its core. */
#define PP_CPU_SPIN_US 200
#define PAUSE_SPINS 256
/* Ticket fields: generation (32 bits) | chunk count | next chunk. */
#define TICKET_FIELD_BITS 16
#define TICKET_FIELD_MASK ((1u << TICKET_FIELD_BITS) - 1)
#define MAX_CHUNKS TICKET_FIELD_MASK
/* The team size asked for through the environment, and its upper bound. */
#define PP_CPU_THREADS_ENV "PPDIFFUSE_CPU_THREADS"
#define PP_CPU_THREADS_MAX 256

typedef struct
{
  /* The loop: written by the caller before it publishes the ticket, read
   * by a helper only after it claimed a chunk of that loop. */
  PpCpuRangeFunc func;
  gpointer data;
  size_t n, chunk;

  _Atomic uint64_t ticket;
  atomic_uint done;             /* chunks finished of the current loop */
  guint32 generation;           /* under dispatch */
  GMutex dispatch;              /* held by the caller of the running loop */

  GMutex sleep_lock;
  GCond wake;
  atomic_int sleepers;
} Team;

static Team team;
static guint n_threads = 1;
static gboolean team_started;
static pid_t team_pid;
static __thread gboolean in_chunk;

static inline void
cpu_relax (void)
{
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause ();
#endif
}

static inline guint32
ticket_generation (uint64_t t)
{
  return (guint32) (t >> (2 * TICKET_FIELD_BITS));
}

/* Takes the next chunk of loop @generation; FALSE when that loop has no
 * chunk left or is no longer the current one. */
static gboolean
claim (guint32 generation, size_t *chunk)
{
  uint64_t t = atomic_load_explicit (&team.ticket, memory_order_acquire);

  for (;;) {
    const guint next = (guint) (t & TICKET_FIELD_MASK);
    const guint count = (guint) ((t >> TICKET_FIELD_BITS) & TICKET_FIELD_MASK);

    if (ticket_generation (t) != generation || next >= count)
      return FALSE;
    if (atomic_compare_exchange_weak_explicit (&team.ticket, &t, t + 1,
            memory_order_acq_rel, memory_order_acquire)) {
      *chunk = next;
      return TRUE;
    }
  }
}

static void
run_chunks (guint32 generation)
{
  size_t c;

  in_chunk = TRUE;
  while (claim (generation, &c)) {
    const size_t begin = c * team.chunk;

    team.func (begin, MIN (team.n, begin + team.chunk), team.data);
    atomic_fetch_add_explicit (&team.done, 1, memory_order_release);
  }
  in_chunk = FALSE;
}

/* Waits for a loop newer than @seen: spins, then yields, then sleeps. */
static guint32
helper_wait (guint32 seen)
{
  const gint64 spin_end = g_get_monotonic_time () + PP_CPU_SPIN_US;
  guint32 g;

  for (guint i = 0;; i++) {
    g = ticket_generation (atomic_load_explicit (&team.ticket,
            memory_order_acquire));
    if (g != seen)
      return g;
    if (i < PAUSE_SPINS)
      cpu_relax ();
    else if (g_get_monotonic_time () < spin_end)
      g_thread_yield ();
    else
      break;
  }
  g_mutex_lock (&team.sleep_lock);
  atomic_fetch_add (&team.sleepers, 1);
  while ((g = ticket_generation (atomic_load (&team.ticket))) == seen)
    g_cond_wait (&team.wake, &team.sleep_lock);
  atomic_fetch_sub (&team.sleepers, 1);
  g_mutex_unlock (&team.sleep_lock);
  return g;
}

static gpointer
helper_main (gpointer unused)
{
  guint32 seen = 0;

  for (;;) {
    seen = helper_wait (seen);
    /* Between loops a helper holds no scratch: it may grow it all now
     * rather than while a warm frame runs. */
    pp_cpu_scratch_follow ();
    run_chunks (seen);
  }
  return NULL;
}

static void
team_init (void)
{
  static gsize once = 0;

  if (g_once_init_enter (&once)) {
    const int blas_threads = openblas_get_num_threads ();
    const gchar *asked = g_getenv (PP_CPU_THREADS_ENV);
    guint started = 0;

    n_threads = (guint) CLAMP (blas_threads, 1, (int) g_get_num_processors ());
    if (asked != NULL && *asked != '\0') {
      guint64 v = 0;

      if (g_ascii_string_to_unsigned (asked, 10, 1, PP_CPU_THREADS_MAX, &v,
              NULL))
        n_threads = (guint) v;
      else
        g_warning ("%s=%s is not a thread count from 1 to %d: using %u",
            PP_CPU_THREADS_ENV, asked, PP_CPU_THREADS_MAX, n_threads);
    }
    g_mutex_init (&team.dispatch);
    g_mutex_init (&team.sleep_lock);
    g_cond_init (&team.wake);
    for (guint i = 1; i < n_threads; i++) {
      GError *error = NULL;
      GThread *t = g_thread_try_new ("pp-cpu", helper_main, NULL, &error);

      if (t == NULL) {
        /* Still correct, only slower. */
        g_warning ("CPU ops run on %u threads instead of %u: %s",
            started + 1, n_threads, error->message);
        g_clear_error (&error);
        break;
      }
      g_thread_unref (t);
      started++;
    }
    n_threads = started + 1;
    team_started = n_threads > 1;
    openblas_set_num_threads (1);
    team_pid = getpid ();
    g_once_init_leave (&once, 1);
  }
}

guint
pp_cpu_parallel_threads (void)
{
  team_init ();
  return n_threads;
}

/* The caller's share is done: wait for the chunks helpers still run. */
static void
wait_done (guint n_chunks)
{
  for (guint i = 0;
      atomic_load_explicit (&team.done, memory_order_acquire) < n_chunks;
      i++) {
    if (i < PAUSE_SPINS)
      cpu_relax ();
    else
      g_thread_yield ();
  }
}

void
pp_cpu_parallel_for (size_t n, size_t min_chunk, PpCpuRangeFunc func,
    gpointer data)
{
  pp_cpu_parallel_for_aligned (n, min_chunk, 1, func, data);
}

void
pp_cpu_parallel_for_aligned (size_t n, size_t min_chunk, size_t align,
    PpCpuRangeFunc func, gpointer data)
{
  size_t n_chunks, chunk;
  guint32 generation;

  if (n == 0)
    return;
  team_init ();
  min_chunk = MAX (min_chunk, 1);
  if (!team_started || n < 2 * min_chunk || in_chunk
      || getpid () != team_pid || !g_mutex_trylock (&team.dispatch)) {
    func (0, n, data);
    return;
  }

  pp_cpu_path_add (PP_CPU_PATH_LOOP_SPLIT, 1);
  n_chunks = MIN ((size_t) n_threads * PP_CPU_CHUNKS_PER_THREAD,
      n / min_chunk);
  /* Only a team of over 16k threads would reach it. */
  n_chunks = MIN (n_chunks, (size_t) MAX_CHUNKS);
  chunk = (n + n_chunks - 1) / n_chunks;
  align = MAX (align, 1);
  chunk = (chunk + align - 1) / align * align;
  n_chunks = (n + chunk - 1) / chunk;

  team.func = func;
  team.data = data;
  team.n = n;
  team.chunk = chunk;
  atomic_store_explicit (&team.done, 0, memory_order_relaxed);
  generation = ++team.generation;
  /* Sequentially consistent, like the helpers' count of sleepers: either
   * a helper going to sleep sees this loop, or this sees it asleep. */
  atomic_store (&team.ticket,
      ((uint64_t) generation << (2 * TICKET_FIELD_BITS))
      | ((uint64_t) n_chunks << TICKET_FIELD_BITS));
  if (atomic_load (&team.sleepers) > 0) {
    g_mutex_lock (&team.sleep_lock);
    g_cond_broadcast (&team.wake);
    g_mutex_unlock (&team.sleep_lock);
  }
  run_chunks (generation);
  wait_done ((guint) n_chunks);
  g_mutex_unlock (&team.dispatch);
}

typedef struct
{
  PpRowsFunc func;
  gpointer data;
  int rows, range;
} Rows;

/* Items are ranges of r->range rows (the last one shorter). */
static void
rows_chunk (size_t begin, size_t end, gpointer data)
{
  const Rows *r = data;

  for (size_t i = begin; i < end; i++) {
    const int lo = (int) i * r->range;

    r->func (lo, MIN (r->rows, lo + r->range), r->data);
  }
}

/* The op table's for_rows: a parallel loop over ranges of rows.  The
 * ranges depend on @rows and @min_rows alone, never on the team size, so
 * the ops inside a range see the same shapes, and give the same bytes, on
 * any number of threads.  Ops called from a range on a helper run serially
 * on its thread (see in_chunk); when the loop does not split, the ranges
 * run one after the other on the caller and their ops use the team. */
void
pp_cpu_for_rows (int rows, int min_rows, PpRowsFunc func, gpointer data)
{
  Rows r = { func, data, rows, 0 };
  int n_ranges;

  g_return_if_fail (rows >= 0 && min_rows > 0);
  if (rows == 0)
    return;
  n_ranges = MAX (rows / min_rows, 1);
  r.range = (rows + n_ranges - 1) / n_ranges;
  n_ranges = (rows + r.range - 1) / r.range;
  pp_cpu_parallel_for ((size_t) n_ranges, 1, rows_chunk, &r);
}
