/* ppdiffuse — scaled dot-product attention, one (sample, head, block of
 * queries) at a time: scores = q kᵀ·scale by GEMM into a
 * [block × lk] buffer, a numerically stable softmax per row (rows split
 * across threads), then scores · v by GEMM straight into the output.  The
 * heads are strided column ranges of q, k, v and out (leading dimensions
 * ld_q, ld_kv and heads·head_dim), so nothing is copied or transposed; a
 * fused QKV's column ranges are read as they are.  The softmax's 1/Σ
 * is applied to the head_dim outputs rather than the lk probabilities.
 *
 * Heads of at most PP_CPU_FUSED_MAX_HEAD_DIM (the small UNets' 8-32) take a
 * fused path instead when the CPU has AVX-512: with K = head_dim, a GEMM is
 * mostly packing and thread hand-offs, and the softmax between the two
 * GEMMs is a serial step of its own.  The fused path copies k and v once
 * to [head, head_dim, lk] (keys contiguous), then one parallel loop over
 * (head, query) rows does q·kᵀ, the softmax and p·v for a row while its
 * scores are in L1.  Heads of 16 or 32 do p·v key by key into whole
 * vectors of outputs instead, from v as it is (no copy of v).  Heads of 8
 * track each row's maximum while the scores are computed, then do the exp
 * and p·v in one pass, the probabilities going from the exp straight into
 * the FMAs (no stored probability row read once per output). */
#include "pp-cpu-vectorize.h"
#include "pp-cpu-ops.h"
#include "pp-cpu-parallel.h"
#include "pp-ops-math.h"

/* Block sizes, grains and the fused path's limits: pp-cpu-tuning.h. */

/* The fused path's scores are in base 2 (scale · log2 e, for fused_exp2);
 * below FUSED_EXP2_MIN, 2^x is under half the smallest denormal: 0. */
#define FUSED_LOG2E 1.44269504088896341f
#define FUSED_EXP2_MIN -150.0f

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

  /* Float lanes over PP_CPU_SUM_BLOCK values at a time, then double: a float
   * running sum of thousands of terms would drift. */
  for (j = 0; j < len;) {
    const int end = MIN (len, j + PP_CPU_SUM_BLOCK);

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

#ifdef PP_CPU_AVX512_KERNELS
#include <immintrin.h>

typedef struct
{
  const float *q;               /* one sample [lq, ld_q] */
  const float *kt, *vt;         /* [heads, head_dim, lk_pad], zero padded */
  const float *v;               /* one sample [lk, ld_kv] */
  float *out;                   /* one sample [lq, heads·head_dim] */
  int lq, lk, lk_pad, heads, head_dim, ld_q, ld_kv;
  float scale;                  /* 1/√head_dim · log2 e: base-2 scores */
} Fused;

typedef struct
{
  const float *k, *v;           /* one sample [lk, ld] */
  float *kt, *vt;
  int lk, lk_pad, heads, head_dim, ld;
} Pack;

/* Items are heads: the head's [lk, head_dim] column block of k and of v
 * → [head_dim, lk_pad]; v only when vt is set (fused_values_keys reads v
 * as it is). */
static void
fused_pack_range (size_t begin, size_t end, gpointer data)
{
  const Pack *p = data;
  const int ld = p->ld;

  for (size_t hd = begin; hd < end; hd++)
    for (int d = 0; d < p->head_dim; d++) {
      const size_t at = (hd * p->head_dim + d) * p->lk_pad;
      const size_t col = hd * p->head_dim + d;
      int j;

      for (j = 0; j < p->lk; j++)
        p->kt[at + j] = p->k[(size_t) j * ld + col];
      for (; j < p->lk_pad; j++)
        p->kt[at + j] = 0.0f;
      if (p->vt == NULL)
        continue;
      for (j = 0; j < p->lk; j++)
        p->vt[at + j] = p->v[(size_t) j * ld + col];
      for (; j < p->lk_pad; j++)
        p->vt[at + j] = 0.0f;
    }
}

/* Lanes of keys [j, j + PP_CPU_FUSED_LANES) that are real keys (below lk). */
static inline __attribute__ ((always_inline)) __mmask16
fused_key_mask (int j, int lk)
{
  return j + PP_CPU_FUSED_LANES <= lk ? (__mmask16) 0xffff
      : j < lk ? (__mmask16) ((1u << (lk - j)) - 1) : 0;
}

/* For @nr query rows (q at stride ld, scores at stride lk_pad):
 * s[j] = scale · q · k_j for j < lk_pad, PP_CPU_FUSED_KEY_VECS vectors of keys
 * at a time, then single vectors for the rest; each loaded key vector serves
 * all the rows.  When @vmax is set, it gets each row's lane-wise maximum
 * over the real keys (not the padding), taken while the scores are in
 * registers.  The loops over rows and key vectors must unroll fully
 * (nr is a constant at each call) so that the accumulators stay in
 * registers: rolled, gcc keeps them on the stack, a store-to-load
 * round trip per FMA. */
static inline __attribute__ ((always_inline, target ("avx512f,fma"))) void
fused_scores (const float *q, int ld, int nr, const float *kt, int head_dim,
    int lk, int lk_pad, float scale, float *s, __m512 * vmax)
{
  const __m512 vscale = _mm512_set1_ps (scale);
  int j;

  for (j = 0; j + PP_CPU_FUSED_KEY_VECS * PP_CPU_FUSED_LANES <= lk_pad;
      j += PP_CPU_FUSED_KEY_VECS * PP_CPU_FUSED_LANES) {
    __m512 acc[PP_CPU_FUSED_ROWS][PP_CPU_FUSED_KEY_VECS];

#pragma GCC unroll 4
    for (int r = 0; r < nr; r++)
#pragma GCC unroll 4
      for (int u = 0; u < PP_CPU_FUSED_KEY_VECS; u++)
        acc[r][u] = _mm512_setzero_ps ();
    for (int d = 0; d < head_dim; d++) {
      const float *kd = kt + (size_t) d * lk_pad + j;
      __m512 kv[PP_CPU_FUSED_KEY_VECS];

#pragma GCC unroll 4
      for (int u = 0; u < PP_CPU_FUSED_KEY_VECS; u++)
        kv[u] = _mm512_loadu_ps (kd + u * PP_CPU_FUSED_LANES);
#pragma GCC unroll 4
      for (int r = 0; r < nr; r++) {
        const __m512 qd = _mm512_set1_ps (q[(size_t) r * ld + d]);

#pragma GCC unroll 4
        for (int u = 0; u < PP_CPU_FUSED_KEY_VECS; u++)
          acc[r][u] = _mm512_fmadd_ps (qd, kv[u], acc[r][u]);
      }
    }
#pragma GCC unroll 4
    for (int u = 0; u < PP_CPU_FUSED_KEY_VECS; u++) {
      const __mmask16 m = fused_key_mask (j + u * PP_CPU_FUSED_LANES, lk);

#pragma GCC unroll 4
      for (int r = 0; r < nr; r++) {
        const __m512 t = _mm512_mul_ps (acc[r][u], vscale);

        _mm512_storeu_ps (s + (size_t) r * lk_pad + j
            + u * PP_CPU_FUSED_LANES, t);
        if (vmax != NULL)
          vmax[r] = _mm512_mask_max_ps (vmax[r], m, vmax[r], t);
      }
    }
  }
  for (; j < lk_pad; j += PP_CPU_FUSED_LANES) {
    __m512 acc[PP_CPU_FUSED_ROWS];

#pragma GCC unroll 4
    for (int r = 0; r < nr; r++)
      acc[r] = _mm512_setzero_ps ();
    for (int d = 0; d < head_dim; d++) {
      const __m512 kv = _mm512_loadu_ps (kt + (size_t) d * lk_pad + j);

#pragma GCC unroll 4
      for (int r = 0; r < nr; r++)
        acc[r] = _mm512_fmadd_ps (_mm512_set1_ps (q[(size_t) r * ld + d]),
            kv, acc[r]);
    }
#pragma GCC unroll 4
    for (int r = 0; r < nr; r++) {
      const __m512 t = _mm512_mul_ps (acc[r], vscale);

      _mm512_storeu_ps (s + (size_t) r * lk_pad + j, t);
      if (vmax != NULL)
        vmax[r] = _mm512_mask_max_ps (vmax[r], fused_key_mask (j, lk),
            vmax[r], t);
    }
  }
}

/* For @nr rows: o[d] = inv_sum · Σ_j p[j] v_j[d]; p is zero past lk, so
 * the padded keys add nothing.  One dot product of length lk_pad per
 * output, reduced across lanes at the end: right for head_dim 8, whose
 * outputs are only half a vector (fused_values_keys takes the rest). */
static inline __attribute__ ((always_inline, target ("avx512f,fma"))) void
fused_values (const float *p, int nr, const float *vt, int head_dim,
    int lk_pad, const float *inv_sum, float *o, int ld)
{
  for (int d = 0; d < head_dim; d++) {
    const float *vd = vt + (size_t) d * lk_pad;
    __m512 acc[PP_CPU_FUSED_ROWS];

#pragma GCC unroll 4
    for (int r = 0; r < nr; r++)
      acc[r] = _mm512_setzero_ps ();
    for (int j = 0; j < lk_pad; j += PP_CPU_FUSED_LANES) {
      const __m512 vv = _mm512_loadu_ps (vd + j);

#pragma GCC unroll 4
      for (int r = 0; r < nr; r++)
        acc[r] = _mm512_fmadd_ps (_mm512_loadu_ps (p + (size_t) r * lk_pad
                + j), vv, acc[r]);
    }
#pragma GCC unroll 4
    for (int r = 0; r < nr; r++)
      o[(size_t) r * ld + d] = _mm512_reduce_add_ps (acc[r]) * inv_sum[r];
  }
}

/* fused_values for head_dim a multiple of PP_CPU_FUSED_LANES, key by key: the
 * outputs of a row are whole vectors, o += p[j] · v_j, with v as stored
 * ([lk, ld_v], a key's head_dim values contiguous; o at stride ld) and no
 * reduction across lanes. */
static inline __attribute__ ((always_inline, target ("avx512f,fma"))) void
fused_values_keys (const float *p, int nr, const float *v, int ld_v,
    int head_dim, int lk, int lk_pad, const float *inv_sum, float *o, int ld)
{
  for (int d = 0; d < head_dim; d += PP_CPU_FUSED_LANES) {
    __m512 acc[PP_CPU_FUSED_ROWS];

#pragma GCC unroll 4
    for (int r = 0; r < nr; r++)
      acc[r] = _mm512_setzero_ps ();
    for (int j = 0; j < lk; j++) {
      const __m512 vv = _mm512_loadu_ps (v + (size_t) j * ld_v + d);

#pragma GCC unroll 4
      for (int r = 0; r < nr; r++)
        acc[r] = _mm512_fmadd_ps (_mm512_set1_ps (p[(size_t) r * lk_pad
                    + j]), vv, acc[r]);
    }
#pragma GCC unroll 4
    for (int r = 0; r < nr; r++)
      _mm512_storeu_ps (o + (size_t) r * ld + d, _mm512_mul_ps (acc[r],
              _mm512_set1_ps (inv_sum[r])));
  }
}

/* 2^x for 16 floats x ≤ 0 (scores in base 2, less their row's maximum):
 * n = round(x), r = x - n exact in [-1/2, 1/2], a degree-5 fit of 2^r
 * (relative error ~1e-7, as pp_math_exp), then 2^n by scalef.  Base 2
 * because the fused path folds log2(e) into the score scale: the range
 * reduction is one subtraction, not a multiply and a two-part ln 2.  The
 * clamp only guards -inf (NaN from -inf - -inf); scalef gives 0 below it.
 * Lanes off @mask come out 0. */
static inline __attribute__ ((always_inline, target ("avx512f,fma"))) __m512
fused_exp2 (__mmask16 mask, __m512 x)
{
  __m512 n, r, q;

  x = _mm512_max_ps (x, _mm512_set1_ps (FUSED_EXP2_MIN));
  n = _mm512_roundscale_ps (x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  r = _mm512_sub_ps (x, n);
  q = _mm512_set1_ps (1.3264708687e-3f);
  q = _mm512_fmadd_ps (q, r, _mm512_set1_ps (9.6715148538e-3f));
  q = _mm512_fmadd_ps (q, r, _mm512_set1_ps (5.5507339537e-2f));
  q = _mm512_fmadd_ps (q, r, _mm512_set1_ps (2.4022242427e-1f));
  q = _mm512_fmadd_ps (q, r, _mm512_set1_ps (6.9314700365e-1f));
  q = _mm512_fmadd_ps (q, r, _mm512_set1_ps (1.0f));
  return _mm512_maskz_scalef_ps (mask, q, n);
}

/* The lane sums of PP_CPU_FUSED_SMALL_HEAD_DIM (8) vectors, as 8 floats: halves
 * and quarters of pairs of vectors are added together (12 shuffles, 9 adds)
 * rather than each vector reduced on its own (~64 operations). */
static inline __attribute__ ((always_inline, target ("avx512f,fma"))) __m256
fused_reduce8 (const __m512 * v)
{
  /* per 128-bit quarter of t[i]: two partial quarters of v[2i], then two
   * of v[2i + 1] */
  const __m512 t0 = _mm512_add_ps (_mm512_shuffle_f32x4 (v[0], v[1], 0x44),
      _mm512_shuffle_f32x4 (v[0], v[1], 0xee));
  const __m512 t1 = _mm512_add_ps (_mm512_shuffle_f32x4 (v[2], v[3], 0x44),
      _mm512_shuffle_f32x4 (v[2], v[3], 0xee));
  const __m512 t2 = _mm512_add_ps (_mm512_shuffle_f32x4 (v[4], v[5], 0x44),
      _mm512_shuffle_f32x4 (v[4], v[5], 0xee));
  const __m512 t3 = _mm512_add_ps (_mm512_shuffle_f32x4 (v[6], v[7], 0x44),
      _mm512_shuffle_f32x4 (v[6], v[7], 0xee));
  /* quarter q of u0: 4 partial sums of v[q]; of u1: of v[4 + q] */
  const __m512 u0 = _mm512_add_ps (_mm512_shuffle_f32x4 (t0, t1, 0x88),
      _mm512_shuffle_f32x4 (t0, t1, 0xdd));
  const __m512 u1 = _mm512_add_ps (_mm512_shuffle_f32x4 (t2, t3, 0x88),
      _mm512_shuffle_f32x4 (t2, t3, 0xdd));
  /* lane 4q: Σ v[q], lane 4q + 1: Σ v[4 + q] */
  const __m512 c = _mm512_add_ps (_mm512_unpacklo_ps (u0, u1),
      _mm512_unpackhi_ps (u0, u1));
  const __m512 e = _mm512_add_ps (c, _mm512_permute_ps (c,
          _MM_SHUFFLE (1, 0, 3, 2)));
  const __m512i order = _mm512_setr_epi32 (0, 4, 8, 12, 1, 5, 9, 13,
      0, 0, 0, 0, 0, 0, 0, 0);

  return _mm512_castps512_ps256 (_mm512_permutexvar_ps (order, e));
}

/* For head_dim PP_CPU_FUSED_SMALL_HEAD_DIM, @nr ≤ PP_CPU_FUSED_PAIR rows whose
 * scores (stride lk_pad) and lane-wise maxima @vmax fused_scores left:
 * o = Σ_j 2^(s_j - max) v_j / Σ_j 2^(s_j - max) in one pass over the keys.
 * Each probability vector goes from the exp straight into the FMAs with
 * the head_dim rows of vt, so it is never stored and reloaded per output;
 * the accumulators (nr · head_dim vectors) are reduced across lanes once
 * at the end.  Sums go from float lanes to double every PP_CPU_SUM_BLOCK keys,
 * as in softmax_row. */
static inline __attribute__ ((always_inline, target ("avx512f,fma"))) void
fused_exp_values_small (const float *s, int nr, const float *vt, int lk,
    int lk_pad, const __m512 * vmax, float *o, int ld)
{
  __m512 acc[PP_CPU_FUSED_PAIR][PP_CPU_FUSED_SMALL_HEAD_DIM],
      vsum[PP_CPU_FUSED_PAIR], m[PP_CPU_FUSED_PAIR];
  double sum[PP_CPU_FUSED_PAIR] = { 0.0 };

#pragma GCC unroll 2
  for (int r = 0; r < nr; r++) {
    m[r] = _mm512_set1_ps (_mm512_reduce_max_ps (vmax[r]));
#pragma GCC unroll 8
    for (int d = 0; d < PP_CPU_FUSED_SMALL_HEAD_DIM; d++)
      acc[r][d] = _mm512_setzero_ps ();
  }
  for (int j = 0; j < lk_pad;) {
    const int end = MIN (lk_pad, j + PP_CPU_SUM_BLOCK);

#pragma GCC unroll 2
    for (int r = 0; r < nr; r++)
      vsum[r] = _mm512_setzero_ps ();
    for (; j < end; j += PP_CPU_FUSED_LANES) {
      const __mmask16 mask = fused_key_mask (j, lk);
      __m512 e[PP_CPU_FUSED_PAIR];

#pragma GCC unroll 2
      for (int r = 0; r < nr; r++) {
        e[r] = fused_exp2 (mask, _mm512_sub_ps (_mm512_loadu_ps (s
                    + (size_t) r * lk_pad + j), m[r]));
        vsum[r] = _mm512_add_ps (vsum[r], e[r]);
      }
#pragma GCC unroll 8
      for (int d = 0; d < PP_CPU_FUSED_SMALL_HEAD_DIM; d++) {
        const __m512 vv = _mm512_loadu_ps (vt + (size_t) d * lk_pad + j);

#pragma GCC unroll 2
        for (int r = 0; r < nr; r++)
          acc[r][d] = _mm512_fmadd_ps (e[r], vv, acc[r][d]);
      }
    }
#pragma GCC unroll 2
    for (int r = 0; r < nr; r++)
      sum[r] += _mm512_reduce_add_ps (vsum[r]);
  }
#pragma GCC unroll 2
  for (int r = 0; r < nr; r++)
    _mm256_storeu_ps (o + (size_t) r * ld, _mm256_mul_ps (fused_reduce8
            (acc[r]), _mm256_set1_ps ((float) (1.0 / sum[r]))));
}

/* softmax_row for a base-2 score row of lk values padded to lk_pad: turns
 * it into 2^(s - max s), zero past lk (so that p·v may run over lk_pad), and
 * returns 1/Σ.  Sums go from float lanes to double every PP_CPU_SUM_BLOCK
 * values, as in softmax_row. */
static inline __attribute__ ((always_inline, target ("avx512f,fma"))) float
fused_softmax (float *s, int lk, int lk_pad)
{
  const int full = lk / PP_CPU_FUSED_LANES * PP_CPU_FUSED_LANES;
  const __mmask16 tail = (__mmask16) ((1u << (lk - full)) - 1);
  __m512 vmax = _mm512_set1_ps (s[0]), vmax_s;
  double sum = 0.0;
  int j;

  for (j = 0; j < full; j += PP_CPU_FUSED_LANES)
    vmax = _mm512_max_ps (vmax, _mm512_loadu_ps (s + j));
  if (tail)
    vmax = _mm512_mask_max_ps (vmax, tail, vmax, _mm512_loadu_ps (s + j));
  vmax_s = _mm512_set1_ps (_mm512_reduce_max_ps (vmax));

  for (j = 0; j < lk_pad;) {
    const int end = MIN (lk_pad, j + PP_CPU_SUM_BLOCK);
    __m512 acc = _mm512_setzero_ps ();

    for (; j < end; j += PP_CPU_FUSED_LANES) {
      const __mmask16 m = j + PP_CPU_FUSED_LANES <= lk ? (__mmask16) 0xffff
          : j < lk ? tail : 0;
      const __m512 e = fused_exp2 (m, _mm512_sub_ps (_mm512_loadu_ps (s + j),
              vmax_s));

      _mm512_storeu_ps (s + j, e);
      acc = _mm512_add_ps (acc, e);
    }
    sum += _mm512_reduce_add_ps (acc);
  }
  return (float) (1.0 / sum);
}

static inline size_t
fused_groups_per_head (int lq)
{
  return ((size_t) lq + PP_CPU_FUSED_ROWS - 1) / PP_CPU_FUSED_ROWS;
}

/* Rows [row, row + nr) of head @hd, nr ≤ PP_CPU_FUSED_ROWS; @s holds nr score
 * rows. */
static inline __attribute__ ((always_inline, target ("avx512f,fma"))) void
fused_rows (const Fused * f, size_t hd, size_t row, int nr, float *s)
{
  const int ld = f->heads * f->head_dim;
  const size_t head_floats = (size_t) f->head_dim * f->lk_pad;
  const size_t col = hd * f->head_dim;
  const float *q = f->q + row * f->ld_q + col;
  float *out = f->out + row * ld + col;
  float inv_sum[PP_CPU_FUSED_ROWS];

  if (f->head_dim == PP_CPU_FUSED_SMALL_HEAD_DIM) {
    __m512 vmax[PP_CPU_FUSED_ROWS];

#pragma GCC unroll 4
    for (int r = 0; r < nr; r++)
      vmax[r] = _mm512_set1_ps (-INFINITY);
    fused_scores (q, f->ld_q, nr, f->kt + hd * head_floats,
        PP_CPU_FUSED_SMALL_HEAD_DIM, f->lk, f->lk_pad, f->scale, s, vmax);
    for (int r = 0; r < nr; r += PP_CPU_FUSED_PAIR) {
      const float *vt = f->vt + hd * head_floats;
      float *o = out + (size_t) r * ld;

      if (nr - r >= PP_CPU_FUSED_PAIR)
        fused_exp_values_small (s + (size_t) r * f->lk_pad, PP_CPU_FUSED_PAIR,
            vt, f->lk, f->lk_pad, vmax + r, o, ld);
      else
        fused_exp_values_small (s + (size_t) r * f->lk_pad, 1, vt, f->lk,
            f->lk_pad, vmax + r, o, ld);
    }
    return;
  }
  fused_scores (q, f->ld_q, nr, f->kt + hd * head_floats, f->head_dim,
      f->lk, f->lk_pad, f->scale, s, NULL);
  for (int r = 0; r < nr; r++)
    inv_sum[r] = fused_softmax (s + (size_t) r * f->lk_pad, f->lk,
        f->lk_pad);
  if (f->head_dim % PP_CPU_FUSED_LANES == 0)
    fused_values_keys (s, nr, f->v + col, f->ld_kv, f->head_dim, f->lk,
        f->lk_pad, inv_sum, out, ld);
  else
    fused_values (s, nr, f->vt + hd * head_floats, f->head_dim, f->lk_pad,
        inv_sum, out, ld);
}

/* Items are groups of PP_CPU_FUSED_ROWS query rows of one head, head-major
 * so that a chunk's rows share their head's keys and values in cache; each
 * key and value vector loaded serves the whole group.  The groups are fixed
 * by the row index, not by where a chunk begins, so a row takes the same
 * path (a group, or a single row at a head's ragged end) on any number of
 * threads, and gives the same bytes. */
static __attribute__ ((target ("avx512f,fma"))) void
fused_range (size_t begin, size_t end, gpointer data)
{
  const Fused *f = data;
  const size_t groups = fused_groups_per_head (f->lq);
  float *s = pp_cpu_scratch (PP_CPU_SCRATCH_ATTENTION_SCORES,
      (size_t) PP_CPU_FUSED_ROWS * f->lk_pad);

  for (size_t item = begin; item < end; item++) {
    const size_t hd = item / groups;
    const size_t row = item % groups * PP_CPU_FUSED_ROWS;
    const size_t nr = MIN ((size_t) PP_CPU_FUSED_ROWS, f->lq - row);

    if (nr == PP_CPU_FUSED_ROWS)
      fused_rows (f, hd, row, PP_CPU_FUSED_ROWS, s);
    else
      for (size_t r = row; r < row + nr; r++)
        fused_rows (f, hd, r, 1, s);
  }
}

static gboolean
fused_applies (int head_dim)
{
  return head_dim <= PP_CPU_FUSED_MAX_HEAD_DIM && pp_cpu_avx512_kernels ();
}

static void
attention_fused (const float *q, const float *k, const float *v, int n,
    int lq, int lk, int heads, int head_dim, int ld_q, int ld_kv, float *out)
{
  const int ld = heads * head_dim;
  const int lk_pad = (lk + PP_CPU_FUSED_LANES - 1) / PP_CPU_FUSED_LANES
      * PP_CPU_FUSED_LANES;
  const size_t packed = (size_t) heads * head_dim * lk_pad;
  const gboolean pack_v = head_dim % PP_CPU_FUSED_LANES != 0;
  float *kt = pp_cpu_scratch (PP_CPU_SCRATCH_ATTENTION_PACK,
      (pack_v ? 2 : 1) * packed);

  for (int b = 0; b < n; b++) {
    Pack pk = { k + (size_t) b * lk * ld_kv, v + (size_t) b * lk * ld_kv,
      kt, pack_v ? kt + packed : NULL, lk, lk_pad, heads, head_dim, ld_kv
    };
    Fused f = { q + (size_t) b * lq * ld_q, kt, pk.vt,
      v + (size_t) b * lk * ld_kv, out + (size_t) b * lq * ld, lq, lk,
      lk_pad, heads, head_dim, ld_q, ld_kv,
      FUSED_LOG2E / sqrtf ((float) head_dim)
    };

    pp_cpu_parallel_for (heads, 1, fused_pack_range, &pk);
    pp_cpu_parallel_for ((size_t) heads * fused_groups_per_head (lq),
        PP_CPU_FUSED_GRAIN_ROWS / PP_CPU_FUSED_ROWS, fused_range, &f);
  }
}
#endif

void
pp_cpu_attention (const float *q, const float *k, const float *v, int n,
    int lq, int lk, int heads, int head_dim, int ld_q, int ld_kv,
    PpDType dtype, float *out)
{
  const int ld = heads * head_dim;
  const float scale = 1.0f / sqrtf ((float) head_dim);
  const int block = MIN (lq, PP_ATTENTION_QUERY_BLOCK);
  Softmax sm;

  g_return_if_fail (n > 0 && lq > 0 && lk > 0 && heads > 0 && head_dim > 0
      && ld_q >= ld && ld_kv >= ld);
#ifdef PP_CPU_AVX512_KERNELS
  if (fused_applies (head_dim)) {
    pp_cpu_path_add (PP_CPU_PATH_ATTENTION_FUSED, 1);
    attention_fused (q, k, v, n, lq, lk, heads, head_dim, ld_q, ld_kv, out);
    return;
  }
#endif

  sm.scores = pp_cpu_scratch (PP_CPU_SCRATCH_SOFTMAX,
      (size_t) block * lk + block);
  sm.inv_sum = sm.scores + (size_t) block * lk;
  sm.lk = lk;

  for (int b = 0; b < n; b++) {
    for (int hd = 0; hd < heads; hd++) {
      const size_t col = (size_t) hd * head_dim;
      const float *qh = q + (size_t) b * lq * ld_q + col;
      const float *kh = k + (size_t) b * lk * ld_kv + col;
      const float *vh = v + (size_t) b * lk * ld_kv + col;
      float *oh = out + (size_t) b * lq * ld + col;

      for (int q0 = 0; q0 < lq; q0 += block) {
        const int rows = MIN (block, lq - q0);
        float *ob = oh + (size_t) q0 * ld;

        pp_cpu_path_add (PP_CPU_PATH_ATTENTION_BLOCK, 1);
        pp_cpu_gemm (FALSE, TRUE, rows, lk, head_dim, scale,
            qh + (size_t) q0 * ld_q, ld_q, kh, ld_kv, 0.0f, sm.scores, lk);
        pp_cpu_parallel_for (rows, PP_CPU_SOFTMAX_GRAIN_SCORES / lk + 1,
            softmax_range, &sm);
        pp_cpu_gemm (FALSE, FALSE, rows, head_dim, lk, 1.0f, sm.scores, lk,
            vh, ld_kv, 0.0f, ob, ld);
        for (int r = 0; r < rows; r++) {
          float *o = ob + (size_t) r * ld;

          for (int j = 0; j < head_dim; j++)
            o[j] *= sm.inv_sum[r];
        }
      }
    }
  }
}
