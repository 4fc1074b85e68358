/* ppdiffuse — the CUDA backend's staging arithmetic and conversions, on
 * the host (see pp-cuda-staging.h). */
#include "pp-cuda-staging.h"
#include "pp-dtype-math.h"
#include "pp-error.h"

#include <string.h>

/* A chunk is converted on several threads from this many elements on
 * (about 100 µs of narrowing on one core), in parts of at least this
 * size. */
#define STAGING_PARALLEL_MIN ((gsize) 1 << 18)
/* Threads the conversions may use, the caller's included. */
#define STAGING_MAX_THREADS 32

/* pp-tensor.c is not part of the CUDA module. */
static const gchar *
element_name (PpDType dtype)
{
  switch (dtype) {
    case PP_DTYPE_F64:
      return "f64";
    case PP_DTYPE_F32:
      return "f32";
    case PP_DTYPE_F16:
      return "f16";
    case PP_DTYPE_BF16:
      return "bf16";
    case PP_DTYPE_U8:
      return "u8";
  }
  return "an unknown dtype";
}

static gboolean
pair_supported (PpDType src, PpDType dst)
{
  if (pp_cuda_dtype_size (src) == 0 || pp_cuda_dtype_size (dst) == 0)
    return FALSE;
  return src == dst || (src == PP_DTYPE_F32 && (dst == PP_DTYPE_F16
          || dst == PP_DTYPE_BF16));
}

gboolean
pp_staging_plan_init (PpStagingPlan * plan, gsize count, PpDType src_dtype,
    PpDType dst_dtype, gsize staging_bytes, GError ** error)
{
  memset (plan, 0, sizeof *plan);
  if (!pair_supported (src_dtype, dst_dtype)) {
    g_set_error (error, PP_ERROR, PP_ERROR_SHAPE, "an upload cannot turn "
        "%s on the host into %s on the device (a copy, or f32 narrowed to "
        "f16 or bf16)", element_name (src_dtype), element_name (dst_dtype));
    return FALSE;
  }
  plan->count = count;
  plan->src_dtype = src_dtype;
  plan->dst_dtype = dst_dtype;
  plan->src_size = pp_cuda_dtype_size (src_dtype);
  plan->dst_size = pp_cuda_dtype_size (dst_dtype);
  /* The staging buffer holds the converted chunk: what crosses the bus. */
  plan->per_chunk = staging_bytes / plan->dst_size;
  if (plan->per_chunk == 0) {
    g_set_error (error, PP_ERROR, PP_ERROR_SHAPE, "a staging buffer of %"
        G_GSIZE_FORMAT " bytes holds no %s element", staging_bytes,
        element_name (dst_dtype));
    return FALSE;
  }
  return TRUE;
}

gsize
pp_staging_n_chunks (const PpStagingPlan * plan)
{
  return plan->count / plan->per_chunk
      + (plan->count % plan->per_chunk != 0);
}

PpStagingChunk
pp_staging_chunk (const PpStagingPlan * plan, gsize index)
{
  PpStagingChunk c;

  c.first = index * plan->per_chunk;
  g_assert (c.first < plan->count);
  c.n = MIN (plan->per_chunk, plan->count - c.first);
  c.src_offset = c.first * plan->src_size;
  c.dst_offset = c.first * plan->dst_size;
  c.dst_bytes = c.n * plan->dst_size;
  return c;
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_F16C_PATH 1

/* f32 to f16 eight at a time with the CPU's own conversion (F16C, in
 * every x86-64 CPU since 2012): round to nearest even, infinities kept,
 * a NaN made quiet with its payload's top bits, f16 subnormals made
 * exactly: pp_f32_to_f16's bits in every case (test-cuda-staging.c holds
 * them over every exponent and the rounding boundaries).  100 M values
 * on one core of an AMD EPYC: 0.03-0.05 s, against 1.5-2.2 s one at a
 * time, which made the narrowing of an SD-Turbo UNet's 865 M weights at
 * its upload some 15 s of a core. */
__attribute__((target ("avx,f16c")))
static void
narrow_f16_f16c (guint16 * d, const float *s, gsize n)
{
  gsize i = 0;

  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128 ((__m128i *) (d + i),
        _mm256_cvtps_ph (_mm256_loadu_ps (s + i), _MM_FROUND_TO_NEAREST_INT));
  for (; i < n; i++)
    d[i] = pp_f32_to_f16 (s[i]);
}

static gboolean
have_f16c (void)
{
  return __builtin_cpu_supports ("avx") && __builtin_cpu_supports ("f16c");
}
#endif

void
pp_staging_convert (gpointer dst, PpDType dst_dtype, gconstpointer src,
    PpDType src_dtype, gsize n)
{
  const float *s = src;
  guint16 *d = dst;

  g_return_if_fail (pair_supported (src_dtype, dst_dtype));
  if (src_dtype == dst_dtype) {
    memcpy (dst, src, n * pp_cuda_dtype_size (dst_dtype));
  } else if (dst_dtype == PP_DTYPE_F16) {
#ifdef HAVE_F16C_PATH
    if (have_f16c ()) {
      narrow_f16_f16c (d, s, n);
      return;
    }
#endif
    for (gsize i = 0; i < n; i++)
      d[i] = pp_f32_to_f16 (s[i]);
  } else {
    for (gsize i = 0; i < n; i++)
      d[i] = pp_f32_to_bf16 (s[i]);
  }
}

/* ---- converting one chunk on several threads --------------------------- */

typedef struct
{
  const PpStagingPlan *plan;
  guint8 *dst;
  const guint8 *src;            /* the chunk's first element */
  gsize first, n;               /* of this part, within the chunk */
  /* the parts' shared countdown */
  GMutex *lock;
  GCond *done;
  guint *left;
} Part;

static void
convert_part (const Part * p)
{
  pp_staging_convert (p->dst + p->first * p->plan->dst_size,
      p->plan->dst_dtype, p->src + p->first * p->plan->src_size,
      p->plan->src_dtype, p->n);
}

static void
run_part (gpointer data, gpointer user_data)
{
  Part *p = data;

  convert_part (p);
  g_mutex_lock (p->lock);
  if (--*p->left == 0)
    g_cond_signal (p->done);
  g_mutex_unlock (p->lock);
}

/* The process's conversion threads (never freed: a backend lives as long
 * as the process). */
static GThreadPool *
conversion_pool (guint * threads)
{
  static GThreadPool *pool;
  static guint n;

  if (g_once_init_enter (&pool)) {
    GThreadPool *p;

    n = CLAMP (g_get_num_processors (), 1, STAGING_MAX_THREADS);
    p = n > 1 ? g_thread_pool_new (run_part, NULL, (gint) n - 1, FALSE,
        NULL) : NULL;
    g_once_init_leave (&pool, p != NULL ? p : GSIZE_TO_POINTER (1));
  }
  *threads = n;
  return pool == GSIZE_TO_POINTER (1) ? NULL : pool;
}

void
pp_staging_fill (const PpStagingPlan * plan, const PpStagingChunk * chunk,
    gpointer dst, gconstpointer src)
{
  const guint8 *from = (const guint8 *) src + chunk->src_offset;
  Part parts[STAGING_MAX_THREADS];
  GMutex lock;
  GCond done;
  GThreadPool *pool;
  guint threads, n_parts, left;
  gsize per_part;

  pool = conversion_pool (&threads);
  n_parts = (guint) MIN ((gsize) threads, chunk->n / STAGING_PARALLEL_MIN);
  if (pool == NULL || n_parts < 2 || plan->src_dtype == plan->dst_dtype) {
    /* A copy is memory-bound: one thread saturates it. */
    pp_staging_convert (dst, plan->dst_dtype, from, plan->src_dtype,
        chunk->n);
    return;
  }
  g_mutex_init (&lock);
  g_cond_init (&done);
  left = n_parts - 1;
  per_part = (chunk->n + n_parts - 1) / n_parts;
  for (guint i = 0; i < n_parts; i++) {
    Part *p = &parts[i];

    p->plan = plan;
    p->dst = dst;
    p->src = from;
    p->first = i * per_part;
    p->n = MIN (per_part, chunk->n - MIN (p->first, chunk->n));
    p->lock = &lock;
    p->done = &done;
    p->left = &left;
    if (i > 0)
      g_thread_pool_push (pool, p, NULL);
  }
  convert_part (&parts[0]);
  g_mutex_lock (&lock);
  while (left > 0)
    g_cond_wait (&done, &lock);
  g_mutex_unlock (&lock);
  g_cond_clear (&done);
  g_mutex_clear (&lock);
}
