/* Tests of the CPU ops' parallel runtime: the loop covers every item once
 * whoever runs it (helpers awake, asleep, several callers at once, a loop
 * inside a loop, a forked child), runs on the team exactly when it has two
 * minimum chunks, and the split GEMM matches a float64 reference for every
 * transpose, split direction, stride and ragged edge, on both sides of its
 * FLOP grain and block alignment (pp-cpu-tuning.h).  meson runs this file
 * at 1, 2 and 4 threads. */
#include "cpu-paths.h"

#include <float.h>
#include <math.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#define SEED 4242
/* Loops back to back: enough for helpers to meet every state of the
 * ticket (claiming, late, stale) many times. */
#define STRESS_LOOPS 20000
#define CALLER_THREADS 3
/* Longer than the helpers spin before they sleep (PP_CPU_SPIN_US). */
#define SLEEP_US (20 * 1000)
/* How long a forked child may take for one loop (it takes microseconds). */
#define FORK_DEADLINE_US (10 * G_USEC_PER_SEC)
#define FORK_POLL_US 1000
/* GEMM error bound in FLT_EPSILONs of sqrt(k) · max |ref|, as the op tests
 * bound dot products (test-ops.c: TOL_DOT).  Measured ≤ 0.42. */
#define TOL_DOT 8.0

typedef struct
{
  gint *hits;
  size_t n;
} Cover;

static void
cover_range (size_t begin, size_t end, gpointer data)
{
  Cover *c = data;

  g_assert_cmpuint (begin, <, end);
  g_assert_cmpuint (end, <=, c->n);
  for (size_t i = begin; i < end; i++)
    g_atomic_int_inc (&c->hits[i]);
}

/* Runs one loop of @n items and checks that each ran exactly once. */
static void
check_cover (size_t n, size_t min_chunk)
{
  g_autofree gint *hits = g_new0 (gint, MAX (n, 1));
  Cover c = { hits, n };

  pp_cpu_parallel_for (n, min_chunk, cover_range, &c);
  for (size_t i = 0; i < n; i++)
    if (hits[i] != 1)
      g_error ("n %zu min_chunk %zu: item %zu ran %d times", n, min_chunk,
          i, hits[i]);
}

/* check_cover, and the loop ran on the team or not as @split says. */
static void
check_cover_split (size_t n, size_t min_chunk, gboolean split)
{
  const Paths before = paths_now ();

  check_cover (n, min_chunk);
  if (paths_since (&before, PP_CPU_PATH_LOOP_SPLIT) != (guint64) split)
    g_error ("n %zu min_chunk %zu: %s on the team with %u threads", n,
        min_chunk, split ? "did not run" : "ran",
        pp_cpu_parallel_threads ());
}

static void
test_cover (void)
{
  const size_t sizes[] = { 0, 1, 2, 3, 7, 8, 9, 63, 64, 65, 1000, 4097 };
  const size_t chunks[] = { 0, 1, 2, 3, 16, 1000 };

  g_test_message ("threads: %u", pp_cpu_parallel_threads ());
  for (guint i = 0; i < G_N_ELEMENTS (sizes); i++)
    for (guint j = 0; j < G_N_ELEMENTS (chunks); j++)
      check_cover_split (sizes[i], chunks[j], loop_splits (sizes[i],
              chunks[j]));
  /* Either side of two minimum chunks, for chunk counts that do not
   * divide the items. */
  for (size_t min_chunk = 1; min_chunk <= 1000; min_chunk *= 10) {
    check_cover_split (2 * min_chunk - 1, min_chunk,
        loop_splits (2 * min_chunk - 1, min_chunk));
    check_cover_split (2 * min_chunk, min_chunk, loop_splits (2 * min_chunk,
            min_chunk));
    check_cover_split (7 * min_chunk + 3, min_chunk,
        loop_splits (7 * min_chunk + 3, min_chunk));
  }
}

static void
test_stress (void)
{
  for (guint i = 0; i < STRESS_LOOPS; i++)
    check_cover (1 + i % 97, 1);
}

/* Helpers that went to sleep wake for the next loop, and each loop still
 * covers its items. */
static void
test_after_sleep (void)
{
  for (guint i = 0; i < 3; i++) {
    g_usleep (SLEEP_US);
    check_cover (1000, 1);
  }
}

static gpointer
caller_main (gpointer data)
{
  for (guint i = 0; i < STRESS_LOOPS / 10; i++)
    check_cover (64 + i % 31, 1);
  return NULL;
}

static void
test_concurrent_callers (void)
{
  GThread *threads[CALLER_THREADS];

  for (guint i = 0; i < CALLER_THREADS; i++)
    threads[i] = g_thread_new ("caller", caller_main, NULL);
  for (guint i = 0; i < CALLER_THREADS; i++)
    g_thread_join (threads[i]);
}

static void
nested_range (size_t begin, size_t end, gpointer data)
{
  Cover *outer = data;

  for (size_t i = begin; i < end; i++) {
    check_cover (100, 1);
    g_atomic_int_inc (&outer->hits[i]);
  }
}

static void
test_nested (void)
{
  g_autofree gint *hits = g_new0 (gint, 16);
  Cover c = { hits, 16 };
  const Paths before = paths_now ();

  pp_cpu_parallel_for (16, 1, nested_range, &c);
  for (guint i = 0; i < 16; i++)
    g_assert_cmpint (hits[i], ==, 1);
  /* The inner loops ran serially on their chunk's thread, only the outer
   * one on the team. */
  g_assert_cmpuint (paths_since (&before, PP_CPU_PATH_LOOP_SPLIT), ==,
      loop_splits (16, 1));
}

/* A child forked while the team runs has no helpers: its loops run on it
 * alone, and finish. */
static void
test_fork (void)
{
  const gint64 deadline = g_get_monotonic_time () + FORK_DEADLINE_US;
  int status = 0;
  pid_t pid;

  check_cover (1000, 1);
  pid = fork ();
  g_assert_cmpint (pid, >=, 0);
  if (pid == 0) {
    check_cover_split (1000, 1, FALSE);
    _exit (0);
  }
  while (waitpid (pid, &status, WNOHANG) == 0) {
    if (g_get_monotonic_time () > deadline) {
      kill (pid, SIGKILL);
      waitpid (pid, &status, 0);
      g_error ("the forked child's loop did not finish in %d s",
          (int) (FORK_DEADLINE_US / G_USEC_PER_SEC));
    }
    g_usleep (FORK_POLL_US);
  }
  g_assert_true (WIFEXITED (status));
  g_assert_cmpint (WEXITSTATUS (status), ==, 0);
  /* The parent's team still works. */
  check_cover_split (1000, 1, loop_splits (1000, 1));
}

/* GEMM */

static float
elem (const float *p, int ld, gboolean trans, int row, int col)
{
  return trans ? p[(size_t) col * ld + row] : p[(size_t) row * ld + col];
}

/* C = alpha op(A) op(B) + beta C with op(A) [m,k], op(B) [k,n], every
 * matrix stored with PAD extra floats per row. */
static void
run_gemm (GRand * rng, gboolean ta, gboolean tb, int m, int n, int k,
    float alpha, float beta)
{
  const int pad = 3;
  const int a_rows = ta ? k : m, a_cols = ta ? m : k;
  const int b_rows = tb ? n : k, b_cols = tb ? k : n;
  const int lda = a_cols + pad, ldb = b_cols + pad, ldc = n + pad;
  g_autofree float *a = g_new (float, (size_t) a_rows * lda);
  g_autofree float *b = g_new (float, (size_t) b_rows * ldb);
  g_autofree float *c = g_new (float, (size_t) m * ldc);
  g_autofree float *c0 = NULL;
  g_autofree gchar *what = g_strdup_printf ("gemm %c%c %dx%dx%d",
      ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k);
  double err = 0.0, mag = 0.0, bound;
  Paths before;

  for (size_t i = 0; i < (size_t) a_rows * lda; i++)
    a[i] = (float) g_rand_double_range (rng, -1, 1);
  for (size_t i = 0; i < (size_t) b_rows * ldb; i++)
    b[i] = (float) g_rand_double_range (rng, -1, 1);
  for (size_t i = 0; i < (size_t) m * ldc; i++)
    c[i] = (float) g_rand_double_range (rng, -1, 1);
  c0 = g_memdup2 (c, (size_t) m * ldc * sizeof (float));

  before = paths_now ();
  pp_cpu_gemm (ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  check_gemm_path (what, &before, m, n, k);

  for (int i = 0; i < m; i++) {
    for (int j = 0; j < n; j++) {
      double acc = 0.0, ref;

      for (int p = 0; p < k; p++)
        acc += (double) elem (a, lda, ta, i, p) * elem (b, ldb, tb, p, j);
      ref = alpha * acc + beta * c0[(size_t) i * ldc + j];
      err = MAX (err, fabs (c[(size_t) i * ldc + j] - ref));
      mag = MAX (mag, fabs (ref));
    }
    /* The padding between rows is not C: untouched. */
    for (int j = n; j < ldc; j++)
      g_assert_cmpfloat (c[(size_t) i * ldc + j], ==,
          c0[(size_t) i * ldc + j]);
  }
  bound = TOL_DOT * FLT_EPSILON * sqrt (k) * mag;
  g_test_message ("%s: max error %.3g eps of scale (bound %g), max abs "
      "error %.3g (max |ref| %.3g)", what, err / (bound / TOL_DOT), TOL_DOT,
      err, mag);
  if (err > bound)
    g_error ("%s: error %.3g exceeds %.3g", what, err, bound);
}

static void
test_gemm (void)
{
  /* split by rows (m ≥ n), by columns, ragged blocks, too small to split */
  const int shapes[][3] = {
    {1024, 64, 64}, {77, 128, 1024}, {64, 1000, 37}, {333, 17, 200},
    {1, 256, 256}, {5, 3, 2}, {257, 255, 129},
  };
  GRand *rng = g_rand_new_with_seed (SEED);

  for (guint s = 0; s < G_N_ELEMENTS (shapes); s++)
    for (int t = 0; t < 4; t++)
      run_gemm (rng, t & 1, t >> 1, shapes[s][0], shapes[s][1],
          shapes[s][2], s % 2 ? 0.5f : 1.0f, s % 3 ? 1.0f : 0.0f);
  g_rand_free (rng);
}

/* k for which an m×n×k product is one FLOP grain short of two blocks, or
 * just reaches them. */
#define GEMM_K_BELOW(m, n) (PP_CPU_GEMM_GRAIN_FLOPS / ((m) * (n)) - 1)
#define GEMM_K_AT(m, n) (PP_CPU_GEMM_GRAIN_FLOPS / ((m) * (n)) + 1)

/* Both sides of 2·GEMM_GRAIN_FLOPS and of SPLIT_ALIGN, each split
 * direction, every transpose. */
static void
test_gemm_thresholds (void)
{
  const int a = PP_CPU_GEMM_SPLIT_ALIGN;
  const int wide = 4 * a;
  /* Enough FLOPs for any team, on a short side. */
  const int deep = PP_CPU_GEMM_GRAIN_FLOPS / a;
  const int shapes[][3] = {
    {2 * wide, wide, GEMM_K_BELOW (2 * wide, wide)},
    {2 * wide, wide, GEMM_K_AT (2 * wide, wide)},
    {wide, 2 * wide, GEMM_K_BELOW (wide, 2 * wide)},
    {wide, 2 * wide, GEMM_K_AT (wide, 2 * wide)},
    {a, 3, deep}, {a + 1, 3, deep}, {3, a, deep}, {3, a + 1, deep},
  };
  GRand *rng = g_rand_new_with_seed (SEED + 1);

  for (guint s = 0; s < G_N_ELEMENTS (shapes); s++)
    for (int t = 0; t < 4; t++)
      run_gemm (rng, t & 1, t >> 1, shapes[s][0], shapes[s][1],
          shapes[s][2], 1.0f, t % 2 ? 1.0f : 0.0f);
  g_rand_free (rng);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/kernels/parallel/cover", test_cover);
  g_test_add_func ("/kernels/parallel/stress", test_stress);
  g_test_add_func ("/kernels/parallel/after-sleep", test_after_sleep);
  g_test_add_func ("/kernels/parallel/concurrent-callers",
      test_concurrent_callers);
  g_test_add_func ("/kernels/parallel/nested", test_nested);
  g_test_add_func ("/kernels/parallel/fork", test_fork);
  g_test_add_func ("/kernels/parallel/gemm", test_gemm);
  g_test_add_func ("/kernels/parallel/gemm-thresholds",
      test_gemm_thresholds);
  return g_test_run ();
}
