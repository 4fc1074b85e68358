/* Throughput of the CPU ops: cblas_sgemm (the ceiling every GEMM-based op
 * is measured against) and the ops at UNet-like shapes, each as the best of
 * several runs after a warm-up.  Prints time and GFLOP/s (GB/s for the
 * memory-bound ops); reports only, never fails on speed.
 *
 *   ops-bench [--runs N] [--large]
 *
 * --large adds SD1.5-sized shapes (64×64 latent, 320 channels). */
#include "pp-ops.h"
#include "pp-backend.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The CPU kernels, through their backend's table. */
static PpBackend *be;

#define DEFAULT_RUNS 10
#define GIGA 1e9

typedef void (*BenchFunc) (gpointer data);

/* Best wall time of @runs calls after one warm-up call, in seconds;
 * @reset (untimed, may be NULL) restores the input of an in-place op. */
static double
best_time_reset (BenchFunc reset, BenchFunc func, gpointer data, int runs)
{
  double best = G_MAXDOUBLE;

  if (reset)
    reset (data);
  func (data);
  for (int i = 0; i < runs; i++) {
    gint64 start;

    if (reset)
      reset (data);
    start = g_get_monotonic_time ();
    func (data);
    best = MIN (best,
        (g_get_monotonic_time () - start) / (double) G_USEC_PER_SEC);
  }
  return best;
}

static double
best_time (BenchFunc func, gpointer data, int runs)
{
  return best_time_reset (NULL, func, data, runs);
}

static float *
filled (size_t n, guint32 seed)
{
  GRand *rng = g_rand_new_with_seed (seed);
  float *p = g_new (float, n);

  for (size_t i = 0; i < n; i++)
    p[i] = (float) g_rand_double_range (rng, -1.0, 1.0);
  g_rand_free (rng);
  return p;
}

static void
report (const gchar * what, double seconds, double flops)
{
  printf ("%-52s %9.3f ms  %8.1f GFLOP/s\n", what, seconds * 1e3,
      flops / seconds / GIGA);
  fflush (stdout);
}

static void
report_bytes (const gchar * what, double seconds, double bytes)
{
  printf ("%-52s %9.3f ms  %8.1f GB/s\n", what, seconds * 1e3,
      bytes / seconds / GIGA);
  fflush (stdout);
}

/* sgemm */

typedef struct
{
  int m, n, k;
  float *a, *b, *c;
} Gemm;

static void
gemm_run (gpointer data)
{
  Gemm *g = data;

  cblas_sgemm (CblasRowMajor, CblasNoTrans, CblasNoTrans, g->m, g->n, g->k,
      1.0f, g->a, g->k, g->b, g->n, 0.0f, g->c, g->n);
}

static double
bench_gemm (int m, int n, int k, int runs)
{
  Gemm g = { m, n, k, filled ((size_t) m * k, 1), filled ((size_t) k * n, 2),
    g_new (float, (size_t) m * n)
  };
  const double t = best_time (gemm_run, &g, runs);
  const double flops = 2.0 * m * n * k;
  g_autofree gchar *what = g_strdup_printf ("sgemm %dx%dx%d", m, n, k);

  report (what, t, flops);
  g_free (g.a);
  g_free (g.b);
  g_free (g.c);
  return flops / t / GIGA;
}

/* conv2d */

typedef struct
{
  int n, cin, h, w, cout, k, stride, pad;
  float *x, *wt, *bias, *y;
} Conv;

static void
conv_run (gpointer data)
{
  Conv *c = data;
  const int ho = pp_conv2d_out_size (c->h, c->k, c->stride, c->pad);
  const int wo = pp_conv2d_out_size (c->w, c->k, c->stride, c->pad);

  pp_conv2d (be, pp_view_f32 (c->x, (size_t) c->n * c->cin * c->h * c->w),
      c->n, c->cin, c->h, c->w,
      pp_view_f32 (c->wt, (size_t) c->cout * c->cin * c->k * c->k),
      pp_view_f32 (c->bias, c->cout), c->cout, c->k, c->k, c->stride, c->pad,
      pp_view_none (), FALSE,
      pp_out_f32 (c->y, (size_t) c->n * c->cout * ho * wo));
}

static void
bench_conv (int n, int cin, int h, int w, int cout, int k, int stride,
    int pad, int runs)
{
  const int ho = pp_conv2d_out_size (h, k, stride, pad);
  const int wo = pp_conv2d_out_size (w, k, stride, pad);
  Conv c = { n, cin, h, w, cout, k, stride, pad,
    filled ((size_t) n * cin * h * w, 3),
    filled ((size_t) cout * cin * k * k, 4), filled (cout, 5),
    g_new (float, (size_t) n * cout * ho * wo)
  };
  const double t = best_time (conv_run, &c, runs);
  const double flops = 2.0 * n * cout * ho * wo * (double) cin * k * k;
  g_autofree gchar *what = g_strdup_printf ("conv2d %dx%dx%dx%d -> %d "
      "k%d s%d p%d", n, cin, h, w, cout, k, stride, pad);
  /* The GEMM the convolution amounts to, alone: what im2col costs. */
  Gemm g = { cout, ho * wo, cin * k * k,
    filled ((size_t) cout * cin * k * k, 1),
    filled ((size_t) cin * k * k * ho * wo, 2),
    g_new (float, (size_t) cout * ho * wo)
  };
  const double tg = best_time (gemm_run, &g, runs) * n;

  printf ("%-52s %9.3f ms  %8.1f GFLOP/s  (its sgemm alone: %.1f GFLOP/s, "
      "%.0f%%)\n", what, t * 1e3, flops / t / GIGA, flops / tg / GIGA,
      100.0 * tg / t);
  fflush (stdout);
  g_free (g.a);
  g_free (g.b);
  g_free (g.c);
  g_free (c.x);
  g_free (c.wt);
  g_free (c.bias);
  g_free (c.y);
}

/* linear */

typedef struct
{
  int rows, in, out;
  float *x, *w, *b, *y;
} Linear;

static void
linear_run (gpointer data)
{
  Linear *l = data;

  pp_linear (be, pp_view_f32 (l->x, (size_t) l->rows * l->in), l->rows,
      l->in, pp_view_f32 (l->w, (size_t) l->out * l->in),
      pp_view_f32 (l->b, l->out), l->out,
      pp_out_f32 (l->y, (size_t) l->rows * l->out));
}

static void
bench_linear (int rows, int in, int out, int runs)
{
  Linear l = { rows, in, out, filled ((size_t) rows * in, 6),
    filled ((size_t) out * in, 7), filled (out, 8),
    g_new (float, (size_t) rows * out)
  };
  const double t = best_time (linear_run, &l, runs);
  g_autofree gchar *what = g_strdup_printf ("linear %dx%d -> %d", rows, in,
      out);

  report (what, t, 2.0 * rows * in * (double) out);
  g_free (l.x);
  g_free (l.w);
  g_free (l.b);
  g_free (l.y);
}

/* attention */

typedef struct
{
  int n, lq, lk, heads, hd;
  float *q, *k, *v, *out;
} Attention;

static void
attention_run (gpointer data)
{
  Attention *a = data;
  const size_t nq = (size_t) a->n * a->lq * a->heads * a->hd;
  const size_t nk = (size_t) a->n * a->lk * a->heads * a->hd;

  pp_attention (be, pp_view_f32 (a->q, nq), pp_view_f32 (a->k, nk),
      pp_view_f32 (a->v, nk), a->n, a->lq, a->lk, a->heads, a->hd,
      a->heads * a->hd, a->heads * a->hd, PP_DTYPE_F32,
      pp_out_f32 (a->out, nq));
}

static void
bench_attention (int n, int lq, int lk, int heads, int hd, int runs)
{
  const size_t nq = (size_t) n * lq * heads * hd;
  const size_t nk = (size_t) n * lk * heads * hd;
  Attention a = { n, lq, lk, heads, hd, filled (nq, 9), filled (nk, 10),
    filled (nk, 11), g_new (float, nq)
  };
  const double t = best_time (attention_run, &a, runs);
  g_autofree gchar *what = g_strdup_printf ("attention n%d lq%d lk%d "
      "heads%d head_dim%d", n, lq, lk, heads, hd);

  /* Two GEMMs of 2·lq·lk·hd flops per head; the softmax is not counted. */
  report (what, t, 4.0 * n * heads * (double) lq * lk * hd);
  g_free (a.q);
  g_free (a.k);
  g_free (a.v);
  g_free (a.out);
}

/* memory-bound ops */

typedef struct
{
  int n, c, hw, groups;
  float *x, *y, *gamma, *beta;
} Norm;

/* Elements of x and of y. */
static size_t
norm_numel (const Norm * g)
{
  return (size_t) g->n * g->c * g->hw;
}

static void
group_norm_run (gpointer data)
{
  Norm *g = data;
  const size_t total = norm_numel (g);

  pp_group_norm (be, pp_view_f32 (g->x, total), pp_view_none (), g->n, g->c,
      g->hw, g->groups, 1e-5f, pp_view_f32 (g->gamma, g->c),
      pp_view_f32 (g->beta, g->c), FALSE, pp_out_f32 (g->y, total));
}

/* In-place ops start from the same values each run (repeated SiLU would
 * drift into denormals). */
static void
norm_reset (gpointer data)
{
  Norm *g = data;

  memcpy (g->y, g->x, norm_numel (g) * sizeof (float));
}

static void
silu_run (gpointer data)
{
  Norm *g = data;

  pp_silu (be, pp_out_f32 (g->y, norm_numel (g)), norm_numel (g));
}

static void
gelu_run (gpointer data)
{
  Norm *g = data;

  pp_gelu (be, pp_out_f32 (g->y, norm_numel (g)), norm_numel (g));
}

static void
bench_elementwise (int n, int c, int hw, int groups, int runs)
{
  const size_t total = (size_t) n * c * hw;
  Norm g = { n, c, hw, groups, filled (total, 12), g_new (float, total),
    filled (c, 13), filled (c, 14)
  };
  g_autofree gchar *gn = g_strdup_printf ("group_norm %dx%dx%d g%d", n, c, hw,
      groups);
  g_autofree gchar *silu = g_strdup_printf ("silu %zu", total);
  g_autofree gchar *gelu = g_strdup_printf ("gelu %zu", total);

  /* Read twice for the statistics, once to normalise, written once. */
  report_bytes (gn, best_time (group_norm_run, &g, runs),
      4.0 * total * sizeof (float));
  report_bytes (silu, best_time_reset (norm_reset, silu_run, &g, runs),
      2.0 * total * sizeof (float));
  report_bytes (gelu, best_time_reset (norm_reset, gelu_run, &g, runs),
      2.0 * total * sizeof (float));
  g_free (g.x);
  g_free (g.y);
  g_free (g.gamma);
  g_free (g.beta);
}

int
main (int argc, char **argv)
{
  be = pp_backend_cpu ();
  int runs = DEFAULT_RUNS;
  gboolean large = FALSE;
  double g512, g1024;

  for (int i = 1; i < argc; i++) {
    if (strcmp (argv[i], "--runs") == 0 && i + 1 < argc) {
      runs = atoi (argv[++i]);
      runs = MAX (1, runs);
    }
    else if (strcmp (argv[i], "--large") == 0)
      large = TRUE;
    else {
      fprintf (stderr, "usage: %s [--runs N] [--large]\n", argv[0]);
      return 2;
    }
  }

  printf ("OpenBLAS: %s, %d threads\n", openblas_get_config (),
      openblas_get_num_threads ());
  g512 = bench_gemm (512, 512, 512, runs * 2);
  g1024 = bench_gemm (1024, 1024, 1024, runs);
  bench_gemm (4096, 320, 2880, runs);   /* a 3×3 conv at 64×64, 320 ch */

  /* UNet-like: TAESD / small-UNet level and the 1×1 and strided variants. */
  bench_conv (1, 128, 32, 32, 128, 3, 1, 1, runs * 2);
  bench_conv (1, 128, 32, 32, 128, 3, 2, 1, runs * 2);
  bench_conv (1, 128, 32, 32, 128, 1, 1, 0, runs * 2);
  bench_conv (2, 64, 64, 64, 64, 3, 1, 1, runs);
  bench_linear (1024, 320, 1280, runs);
  bench_attention (1, 1024, 1024, 8, 40, runs);
  bench_attention (2, 1024, 77, 8, 40, runs);
  bench_elementwise (1, 320, 4096, 32, runs);
  if (large) {
    bench_conv (2, 320, 64, 64, 320, 3, 1, 1, runs);
    bench_conv (2, 640, 32, 32, 640, 3, 1, 1, runs);
    bench_linear (8192, 320, 2560, runs);
    bench_attention (2, 4096, 4096, 8, 40, MAX (1, runs / 2));
  }
  printf ("sgemm reference rate: %.1f GFLOP/s (512³), %.1f GFLOP/s (1024³)\n",
      g512, g1024);
  return 0;
}
