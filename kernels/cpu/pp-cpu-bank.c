/* ppdiffuse — the temporal feature bank's ops on the CPU (pp-ops-list.h:
 * row_norms, bank_fuse, bank_merge_dest, bank_merge): row by row on the
 * thread team, each row's work whole on one thread, so that the bytes do
 * not depend on how the rows are split. */
#include "pp-cpu-ops.h"
#include "pp-cpu-parallel.h"
#include "pp-cpu-tuning.h"

#include <math.h>

/* Rows of @c values a range is worth. */
static size_t
grain (gint64 c)
{
  return PP_CPU_GRAIN_MATH / MAX (c, 1) + 1;
}

typedef struct
{
  const float *x;
  int c;
  float *norms;
} Norms;

static void
norms_range (size_t begin, size_t end, gpointer data)
{
  const Norms *r = data;

  for (size_t i = begin; i < end; i++) {
    const float *row = r->x + i * r->c;
    double s = 0.0;

    for (int j = 0; j < r->c; j++)
      s += (double) row[j] * row[j];
    r->norms[i] = (float) sqrt (s);
  }
}

void
pp_cpu_row_norms (const float *x, int rows, int c, float *norms)
{
  Norms r = { x, c, norms };

  pp_cpu_parallel_for (rows, grain (c), norms_range, &r);
}

/* The first of @count candidates, candidate k being row
 * j = pp_math_bank_kept (k, @r) (every row when @r is 0), with the largest
 * @sim[k] · j's inverse norm, if it beats -FLT_MAX: its row; else -1. */
static int
most_similar (const float *sim, const float *norms, int count, int r)
{
  float best = -FLT_MAX;
  int at = -1;

  for (int k = 0; k < count; k++) {
    const int j = pp_math_bank_kept (k, r);
    const float score = sim[k] * pp_math_inverse_norm (norms[j]);

    if (score > best) {
      best = score;
      at = j;
    }
  }
  return at;
}

typedef struct
{
  const float *sim, *y_norms, *bank_norms, *bank;
  int m, c;
  double threshold, strength;
  float *y, *fused;
} Fuse;

static void
fuse_range (size_t begin, size_t end, gpointer data)
{
  const Fuse *f = data;

  for (size_t i = begin; i < end; i++) {
    const float *sim = f->sim + i * f->m;
    const int found = most_similar (sim, f->bank_norms, f->m, 0);
    const int at = found < 0 ? 0 : found;
    float *yi = f->y + i * f->c;
    const float *banked = f->bank + (size_t) at * f->c;

    if (pp_math_cosine (sim[at], f->y_norms[i], f->bank_norms[at])
        < f->threshold)
      continue;
    for (int j = 0; j < f->c; j++)
      yi[j] = pp_math_blend (yi[j], banked[j], f->strength);
    f->fused[i] += 1.0f;
  }
}

void
pp_cpu_bank_fuse (const float *sim, int rows, int m, int c,
    const float *y_norms, const float *bank_norms, const float *bank,
    double threshold, double strength, float *y, float *fused)
{
  Fuse f = { sim, y_norms, bank_norms, bank, m, c, threshold, strength, y,
    fused
  };

  pp_cpu_parallel_for (rows, grain (m), fuse_range, &f);
}

typedef struct
{
  const float *sim, *norms;
  int first, n, r;
  float *dest;
} Dest;

static void
dest_range (size_t begin, size_t end, gpointer data)
{
  const Dest *d = data;

  for (size_t q = begin; q < end; q++) {
    const int at = most_similar (d->sim + q * (d->n - d->r), d->norms,
        d->n - d->r, d->r);

    d->dest[q] = (float) (at < 0 ? d->first + 2 * (int) q : at);
  }
}

void
pp_cpu_bank_merge_dest (const float *sim, int sources, int first, int n,
    int r, const float *norms, float *dest)
{
  Dest d = { sim, norms, first, n, r, dest };

  pp_cpu_parallel_for (sources, grain (n), dest_range, &d);
}

/* No row: a list's end. */
#define NONE (-1)
/* Channels summed at once, in double on the stack. */
#define MEAN_CHUNK 64

typedef struct
{
  const float *x;
  int r, c;
  const int *head, *link;
  float *y;
} Merge;

static void
merge_range (size_t begin, size_t end, gpointer data)
{
  const Merge *mg = data;
  const int c = mg->c;

  for (size_t s = begin; s < end; s++) {
    const int t = pp_math_bank_kept ((int) s, mg->r);
    const float *own = mg->x + (size_t) t * c;

    for (int j0 = 0; j0 < c; j0 += MEAN_CHUNK) {
      const int w = MIN (MEAN_CHUNK, c - j0);
      double acc[MEAN_CHUNK] = { 0.0 };
      int src = mg->head[s], count = 0;
      gboolean own_added = FALSE;

      /* the sources in row order, the row's own in its place */
      while (src != NONE || !own_added) {
        const float *x;

        if (!own_added && (src == NONE || src > t)) {
          x = own;
          own_added = TRUE;
        } else {
          x = mg->x + (size_t) src * c;
          src = mg->link[src / 2];
        }
        for (int j = 0; j < w; j++)
          acc[j] += x[j0 + j];
        count++;
      }
      for (int j = 0; j < w; j++)
        mg->y[s * c + j0 + j] = (float) (acc[j] / count);
    }
  }
}

/* The kept row @t's index among the kept rows. */
static int
kept_index (int t, int r)
{
  return t < 2 * r ? (t - 1) / 2 : t - r;
}

void
pp_cpu_bank_merge (const float *x, int n, int r, int c, const float *dest,
    float *y)
{
  const int keep = n - r;
  int *head = (int *) pp_cpu_scratch (PP_CPU_SCRATCH_BANK_LISTS,
      (size_t) keep + r);
  int *link = head + keep;
  Merge mg = { x, r, c, head, link, y };

  G_STATIC_ASSERT (sizeof (int) == sizeof (float));

  /* Each kept row's sources, a list in row order from head[]: link[q] is
   * the source after source 2q. */
  for (int s = 0; s < keep; s++)
    head[s] = NONE;
  for (int q = r - 1; q >= 0; q--) {
    const int t = (int) dest[q];

    g_assert (t >= 0 && t < n && t == pp_math_bank_kept (kept_index (t, r),
            r));
    link[q] = head[kept_index (t, r)];
    head[kept_index (t, r)] = 2 * q;
  }
  pp_cpu_parallel_for (keep, grain (c), merge_range, &mg);
}
