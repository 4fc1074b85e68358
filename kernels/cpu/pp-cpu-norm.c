/* ppdiffuse — group and layer normalisation.
 *
 * Mean and variance are accumulated in double: a UNet group holds up to
 * ~10⁵ values, too many for a float running sum.  To keep the loops fast
 * the inner sums run in PP_CPU_LANES float lanes over PP_CPU_NORM_BLOCK values
 * (short enough that float loses nothing measurable) and each block is then
 * added in double.  The variance is taken around the first-pass mean, with
 * the usual correction, so it never cancels catastrophically. */
#include "pp-cpu-vectorize.h"
#include "pp-cpu-ops.h"
#include "pp-cpu-parallel.h"

#include <math.h>

/* Σ (p[i] - shift) and Σ (p[i] - shift)² over @count values. */
static inline void
shifted_sums (const float *p, size_t count, float shift, double *sum,
    double *sum_sq)
{
  double s = 0.0, s2 = 0.0;
  size_t i = 0;

  while (i < count) {
    const size_t end = MIN (count, i + PP_CPU_NORM_BLOCK);
    float acc[PP_CPU_LANES] = { 0 }, acc2[PP_CPU_LANES] = { 0 };

    for (; i + PP_CPU_LANES <= end; i += PP_CPU_LANES) {
      for (int j = 0; j < PP_CPU_LANES; j++) {
        const float d = p[i + j] - shift;

        acc[j] += d;
        acc2[j] += d * d;
      }
    }
    for (; i < end; i++) {
      const float d = p[i] - shift;

      acc[0] += d;
      acc2[0] += d * d;
    }
    for (int j = 0; j < PP_CPU_LANES; j++) {
      s += acc[j];
      s2 += acc2[j];
    }
  }
  *sum = s;
  *sum_sq = s2;
}

/* Mean and biased variance (as PyTorch's norms use) of @count values. */
static inline void
moments (const float *p, size_t count, double *mean, double *var)
{
  double sum, sum_sq, m, d;

  shifted_sums (p, count, 0.0f, &sum, &sum_sq);
  m = sum / (double) count;
  /* Second pass around the float-rounded mean: the residual mean d is tiny
   * and exact enough to correct for. */
  shifted_sums (p, count, (float) m, &sum, &sum_sq);
  d = sum / (double) count;
  *mean = (double) (float) m + d;
  *var = MAX (0.0, sum_sq / (double) count - d * d);
}

/* The mean as a float and the float of what that leaves out: x - hi is
 * exact for x near the mean, so (x - hi) - lo loses nothing to a large
 * common offset (x·a + (b - mean·a) would cancel). */
typedef struct
{
  float hi, lo;
} SplitMean;

static SplitMean
split_mean (double mean)
{
  SplitMean m;

  m.hi = (float) mean;
  m.lo = (float) (mean - m.hi);
  return m;
}

typedef struct
{
  const float *x;
  float *y;
  const float *gamma, *beta;
  int c, hw, per_group, groups, dim;
  float eps;
} Norm;

/* Items are (sample, group) pairs. */
PP_CPU_VECTOR_CLONES static void
group_norm_range (size_t begin, size_t end, gpointer data)
{
  const Norm *p = data;

  for (size_t item = begin; item < end; item++) {
    const size_t b = item / p->groups;
    const int g = (int) (item % p->groups);
    const size_t first = (b * p->c + (size_t) g * p->per_group) * p->hw;
    double mean, var, rstd;
    SplitMean m;

    moments (p->x + first, (size_t) p->per_group * p->hw, &mean, &var);
    rstd = 1.0 / sqrt (var + p->eps);
    m = split_mean (mean);
    for (int ch = g * p->per_group; ch < (g + 1) * p->per_group; ch++) {
      const size_t off = (b * p->c + ch) * p->hw;
      const float fa = (float) (p->gamma ? p->gamma[ch] * rstd : rstd);
      const float fb = p->beta ? p->beta[ch] : 0.0f;
      const float *src = p->x + off;
      float *dst = p->y + off;

      for (int i = 0; i < p->hw; i++)
        dst[i] = ((src[i] - m.hi) - m.lo) * fa + fb;
    }
  }
}

void
pp_cpu_group_norm (const float *x, int n, int c, int hw, int groups,
    float eps, const float *gamma, const float *beta, float *y)
{
  Norm p = { .x = x, .y = y, .gamma = gamma, .beta = beta, .c = c, .hw = hw,
    .groups = groups, .eps = eps
  };

  g_return_if_fail (n > 0 && c > 0 && hw > 0 && groups > 0);
  g_return_if_fail (c % groups == 0);

  p.per_group = c / groups;
  pp_cpu_parallel_for ((size_t) n * groups,
      PP_CPU_NORM_GRAIN_VALUES / ((size_t) p.per_group * hw) + 1,
      group_norm_range, &p);
}

PP_CPU_VECTOR_CLONES static void
layer_norm_range (size_t begin, size_t end, gpointer data)
{
  const Norm *p = data;
  const int dim = p->dim;

  for (size_t r = begin; r < end; r++) {
    const float *src = p->x + r * dim;
    float *dst = p->y + r * dim;
    double mean, var;
    SplitMean m;
    float frstd;

    moments (src, (size_t) dim, &mean, &var);
    m = split_mean (mean);
    frstd = (float) (1.0 / sqrt (var + p->eps));
    if (p->gamma && p->beta) {
      for (int i = 0; i < dim; i++)
        dst[i] = ((src[i] - m.hi) - m.lo) * frstd * p->gamma[i] + p->beta[i];
    } else {
      for (int i = 0; i < dim; i++) {
        const float v = ((src[i] - m.hi) - m.lo) * frstd;

        dst[i] = (p->gamma ? v * p->gamma[i] : v)
            + (p->beta ? p->beta[i] : 0.0f);
      }
    }
  }
}

void
pp_cpu_layer_norm (const float *x, int rows, int dim, float eps,
    const float *gamma, const float *beta, float *y)
{
  Norm p = { .x = x, .y = y, .gamma = gamma, .beta = beta, .dim = dim,
    .eps = eps
  };

  g_return_if_fail (rows > 0 && dim > 0);

  pp_cpu_parallel_for (rows, PP_CPU_NORM_GRAIN_VALUES / dim + 1,
      layer_norm_range, &p);
}
