/* ppdiffuse — a parallel for-loop for the CPU ops that are not GEMMs
 * (softmax, element-wise, norms, im2col), so that they scale with the cores
 * the way OpenBLAS does.
 *
 * One process-wide GThreadPool of (threads - 1) workers, threads being
 * OpenBLAS's own thread count (OPENBLAS_NUM_THREADS and friends steer
 * both).  A call splits [0, n) into chunks that the caller and the workers
 * take from a shared counter until none is left, so a worker that starts
 * late (or a core busy elsewhere) costs nothing.  Calls from several
 * threads at once are independent; a call from inside a worker runs
 * serially rather than wait on its own pool, and so does a call in a child
 * process forked after the pool started (the child has no workers). */
#include "pp-cpu-parallel.h"

#include <cblas.h>
#include <unistd.h>

/* Chunks per participating thread: enough to even out uneven progress. */
#define CHUNKS_PER_THREAD 4

typedef struct
{
  PpCpuRangeFunc func;
  gpointer data;
  size_t n, chunk, n_chunks;
  gint next;                    /* atomic: next chunk to take */
  gint active;                  /* workers still running, under lock */
  GMutex lock;
  GCond done;
} Job;

static GThreadPool *pool;
static guint n_threads = 1;
static pid_t pool_pid;
static GPrivate in_worker;

static void
run_chunks (Job * job)
{
  for (;;) {
    const size_t c = (size_t) g_atomic_int_add (&job->next, 1);
    size_t begin, end;

    if (c >= job->n_chunks)
      return;
    begin = c * job->chunk;
    end = MIN (job->n, begin + job->chunk);
    job->func (begin, end, job->data);
  }
}

static void
worker (gpointer task, gpointer user_data)
{
  Job *job = task;

  g_private_set (&in_worker, GINT_TO_POINTER (1));
  run_chunks (job);
  g_mutex_lock (&job->lock);
  if (--job->active == 0)
    g_cond_signal (&job->done);
  g_mutex_unlock (&job->lock);
}

static void
pool_init (void)
{
  static gsize once = 0;

  if (g_once_init_enter (&once)) {
    const int blas_threads = openblas_get_num_threads ();

    n_threads = (guint) CLAMP (blas_threads, 1, (int) g_get_num_processors ());
    if (n_threads > 1) {
      GError *error = NULL;

      /* Exclusive: the threads start now and stay, no start-up per call. */
      pool = g_thread_pool_new (worker, NULL, (gint) n_threads - 1, TRUE,
          &error);
      if (error) {
        /* Still correct, only slower: every loop runs on its caller. */
        g_warning ("CPU ops run single-threaded: could not start %u "
            "threads: %s", n_threads - 1, error->message);
        g_clear_error (&error);
        if (pool)
          g_thread_pool_free (pool, TRUE, FALSE);
        pool = NULL;
        n_threads = 1;
      }
    }
    pool_pid = getpid ();
    g_once_init_leave (&once, 1);
  }
}

guint
pp_cpu_parallel_threads (void)
{
  pool_init ();
  return n_threads;
}

void
pp_cpu_parallel_for (size_t n, size_t min_chunk, PpCpuRangeFunc func,
    gpointer data)
{
  Job job;
  size_t n_chunks;
  guint helpers;

  if (n == 0)
    return;
  pool_init ();
  min_chunk = MAX (min_chunk, 1);
  if (!pool || n < 2 * min_chunk || g_private_get (&in_worker)
      || getpid () != pool_pid) {
    func (0, n, data);
    return;
  }

  n_chunks = MIN ((size_t) n_threads * CHUNKS_PER_THREAD, n / min_chunk);
  job.func = func;
  job.data = data;
  job.n = n;
  job.chunk = (n + n_chunks - 1) / n_chunks;
  job.n_chunks = (n + job.chunk - 1) / job.chunk;
  job.next = 0;
  helpers = (guint) MIN ((size_t) n_threads - 1, job.n_chunks - 1);
  job.active = (gint) helpers;
  g_mutex_init (&job.lock);
  g_cond_init (&job.done);

  for (guint i = 0; i < helpers; i++)
    g_thread_pool_push (pool, &job, NULL);
  run_chunks (&job);

  g_mutex_lock (&job.lock);
  while (job.active > 0)
    g_cond_wait (&job.done, &job.lock);
  g_mutex_unlock (&job.lock);
  g_mutex_clear (&job.lock);
  g_cond_clear (&job.done);
}
