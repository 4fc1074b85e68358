/* ppdiffuse — causal self-attention (a text encoder's): one (sample, head,
 * query) row at a time, query i scoring keys 0…i, a stable softmax, then
 * p·v accumulated key by key into the output row.  The sequences are
 * short (77 tokens), so rows split across threads are enough; the GEMM
 * path of pp-cpu-attention.c would spend more on packing than it saves. */
#include "pp-cpu-vectorize.h"
#include "pp-cpu-ops.h"
#include "pp-cpu-parallel.h"
#include "pp-ops-math.h"

typedef struct
{
  const float *q, *k, *v;
  float *out;
  int l, heads, head_dim;
  float scale;
} Causal;

PP_CPU_VECTOR_CLONES static void
causal_row (const Causal * c, float *scores, int b, int h, int i)
{
  const size_t ld = (size_t) c->heads * c->head_dim;
  const size_t base = (size_t) b * c->l * ld + (size_t) h * c->head_dim;
  const float *qi = c->q + base + (size_t) i * ld;
  float *oi = c->out + base + (size_t) i * ld;
  float max = -INFINITY, sum = 0.0f, inv;

  for (int j = 0; j <= i; j++) {
    const float *kj = c->k + base + (size_t) j * ld;
    float dot = 0.0f;

    for (int d = 0; d < c->head_dim; d++)
      dot += qi[d] * kj[d];
    scores[j] = dot * c->scale;
    max = MAX (max, scores[j]);
  }
  for (int j = 0; j <= i; j++) {
    scores[j] = pp_math_exp (scores[j] - max);
    sum += scores[j];
  }
  for (int d = 0; d < c->head_dim; d++)
    oi[d] = 0.0f;
  for (int j = 0; j <= i; j++) {
    const float *vj = c->v + base + (size_t) j * ld;
    const float p = scores[j];

    for (int d = 0; d < c->head_dim; d++)
      oi[d] += p * vj[d];
  }
  inv = 1.0f / sum;
  for (int d = 0; d < c->head_dim; d++)
    oi[d] *= inv;
}

/* Items are (sample, head, query) in that order, the query fastest. */
static void
causal_range (size_t begin, size_t end, gpointer data)
{
  const Causal *c = data;
  float *scores = pp_cpu_scratch (PP_CPU_SCRATCH_SOFTMAX, c->l);

  for (size_t item = begin; item < end; item++) {
    const int i = (int) (item % c->l);
    const size_t sh = item / c->l;

    causal_row (c, scores, (int) (sh / c->heads), (int) (sh % c->heads), i);
  }
}

void
pp_cpu_attention_causal (const float *q, const float *k, const float *v,
    int n, int l, int heads, int head_dim, PpDType dtype, float *out)
{
  Causal c = { q, k, v, out, l, heads, head_dim,
    1.0f / sqrtf ((float) head_dim)
  };

  g_return_if_fail (n > 0 && l > 0 && heads > 0 && head_dim > 0);

  pp_cpu_parallel_for ((size_t) n * heads * l, PP_CPU_CAUSAL_GRAIN_ROWS,
      causal_range, &c);
}
