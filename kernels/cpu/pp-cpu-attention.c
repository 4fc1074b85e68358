/* ppdiffuse — scaled dot-product attention, one (sample, head, block of
 * queries) at a time: scores = q kᵀ·scale by GEMM into a
 * [block × lk] buffer, a numerically stable softmax per row (rows split
 * across threads), then scores · v by GEMM straight into the output.  The
 * heads are strided column ranges of q, k, v and out (leading dimension
 * heads·head_dim), so nothing is copied or transposed; the softmax's 1/Σ
 * is applied to the head_dim outputs rather than the lk probabilities. */
#include "pp-cpu-vectorize.h"
#include "pp-cpu-ops.h"
#include "pp-cpu-parallel.h"
#include "pp-ops-math.h"

#include <cblas.h>

/* Score values per thread worth splitting for (~10 µs of exp). */
#define GRAIN_SCORES (16 * 1024)
/* Values summed in float lanes before the partial sums go to double. */
#define SUM_BLOCK 256

/* Turns a row of scores into exp(s - max s) in place; returns 1/Σ.  Three
 * simple loops (max, exp, sum) vectorise better than one fused loop, which
 * runs out of registers; the row is in L1/L2 for all three.  Cloned here,
 * not in its caller: gcc does not inline it. */
PP_CPU_VECTOR_CLONES static float
softmax_row (float *s, int len)
{
  float m[PP_CPU_LANES], acc[PP_CPU_LANES] = { 0 };
  float max;
  double sum = 0.0;
  int j;

  for (int l = 0; l < PP_CPU_LANES; l++)
    m[l] = s[0];
  for (j = 0; j + PP_CPU_LANES <= len; j += PP_CPU_LANES)
    for (int l = 0; l < PP_CPU_LANES; l++)
      m[l] = s[j + l] > m[l] ? s[j + l] : m[l];
  for (; j < len; j++)
    m[0] = s[j] > m[0] ? s[j] : m[0];
  max = m[0];
  for (int l = 1; l < PP_CPU_LANES; l++)
    max = m[l] > max ? m[l] : max;

  for (j = 0; j < len; j++)
    s[j] = pp_math_exp (s[j] - max);

  /* Float lanes over SUM_BLOCK values at a time, then double: a float
   * running sum of thousands of terms would drift. */
  for (j = 0; j < len;) {
    const int end = MIN (len, j + SUM_BLOCK);

    for (; j + PP_CPU_LANES <= end; j += PP_CPU_LANES)
      for (int l = 0; l < PP_CPU_LANES; l++)
        acc[l] += s[j + l];
    for (; j < end; j++)
      acc[0] += s[j];
    for (int l = 0; l < PP_CPU_LANES; l++) {
      sum += acc[l];
      acc[l] = 0.0f;
    }
  }
  return (float) (1.0 / sum);
}

typedef struct
{
  float *scores, *inv_sum;
  int lk;
} Softmax;

static void
softmax_range (size_t begin, size_t end, gpointer data)
{
  const Softmax *sm = data;

  for (size_t r = begin; r < end; r++)
    sm->inv_sum[r] = softmax_row (sm->scores + r * sm->lk, sm->lk);
}

void
pp_cpu_attention (const float *q, const float *k, const float *v, int n,
    int lq, int lk, int heads, int head_dim, float *out)
{
  const int ld = heads * head_dim;
  const float scale = 1.0f / sqrtf ((float) head_dim);
  const int block = MIN (lq, PP_ATTENTION_QUERY_BLOCK);
  Softmax sm;

  g_return_if_fail (n > 0 && lq > 0 && lk > 0 && heads > 0 && head_dim > 0);

  sm.scores = g_new (float, (size_t) block * lk + block);
  sm.inv_sum = sm.scores + (size_t) block * lk;
  sm.lk = lk;

  for (int b = 0; b < n; b++) {
    for (int hd = 0; hd < heads; hd++) {
      const size_t col = (size_t) hd * head_dim;
      const float *qh = q + (size_t) b * lq * ld + col;
      const float *kh = k + (size_t) b * lk * ld + col;
      const float *vh = v + (size_t) b * lk * ld + col;
      float *oh = out + (size_t) b * lq * ld + col;

      for (int q0 = 0; q0 < lq; q0 += block) {
        const int rows = MIN (block, lq - q0);
        float *ob = oh + (size_t) q0 * ld;

        cblas_sgemm (CblasRowMajor, CblasNoTrans, CblasTrans, rows, lk,
            head_dim, scale, qh + (size_t) q0 * ld, ld, kh, ld, 0.0f,
            sm.scores, lk);
        pp_cpu_parallel_for (rows, GRAIN_SCORES / lk + 1, softmax_range, &sm);
        cblas_sgemm (CblasRowMajor, CblasNoTrans, CblasNoTrans, rows,
            head_dim, lk, 1.0f, sm.scores, lk, vh, ld, 0.0f, ob, ld);
        for (int r = 0; r < rows; r++) {
          float *o = ob + (size_t) r * ld;

          for (int j = 0; j < head_dim; j++)
            o[j] *= sm.inv_sum[r];
        }
      }
    }
  }
  g_free (sm.scores);
}
