/* ppdiffuse — element-wise ops.  The formulas live in pp-ops-math.h so that
 * a CUDA backend computes exactly the same thing; here they run as
 * vectorised loops, split across threads when the tensor is large. */
#include "pp-cpu-vectorize.h"
#include "pp-cpu-ops.h"
#include "pp-cpu-parallel.h"
#include "pp-ops-math.h"

/* Grains: pp-cpu-tuning.h. */

typedef struct
{
  float *x;
  const float *src;
  float s, t;
  int d;
} Map;

#define DEFINE_UNARY(op, formula, grain)                                    \
  PP_CPU_VECTOR_CLONES static void                                          \
  op##_range (size_t begin, size_t end, gpointer data)                      \
  {                                                                         \
    float *x = ((Map *) data)->x;                                           \
                                                                            \
    for (size_t i = begin; i < end; i++)                                    \
      x[i] = formula (x[i]);                                                \
  }                                                                         \
                                                                            \
  void                                                                      \
  pp_cpu_##op (float *x, size_t n)                                          \
  {                                                                         \
    Map m = { .x = x };                                                     \
                                                                            \
    pp_cpu_parallel_for_aligned (n, grain, PP_CPU_ELEMENT_ALIGN,            \
        op##_range, &m);                                                    \
  }

DEFINE_UNARY (silu, pp_math_silu, PP_CPU_GRAIN_MATH)
DEFINE_UNARY (relu, pp_math_relu, PP_CPU_GRAIN_MEMORY)
DEFINE_UNARY (tanh, pp_math_tanh, PP_CPU_GRAIN_MATH)
DEFINE_UNARY (gelu, pp_math_gelu_erf, PP_CPU_GRAIN_MATH)
DEFINE_UNARY (quick_gelu, pp_math_quick_gelu, PP_CPU_GRAIN_MATH)

PP_CPU_VECTOR_CLONES static void
geglu_range (size_t begin, size_t end, gpointer data)
{
  const Map *m = data;
  const int d = m->d;

  for (size_t r = begin; r < end; r++) {
    const float *value = m->src + r * 2 * d;
    const float *gate = value + d;
    float *dst = m->x + r * d;

    for (int i = 0; i < d; i++)
      dst[i] = pp_math_geglu (value[i], gate[i]);
  }
}

void
pp_cpu_geglu (const float *x, int rows, int d, float *y)
{
  Map m = { .x = y, .src = x, .d = d };

  g_return_if_fail (rows > 0 && d > 0);

  pp_cpu_parallel_for (rows, PP_CPU_GRAIN_MATH / d + 1, geglu_range, &m);
}

static void
add_range (size_t begin, size_t end, gpointer data)
{
  const Map *m = data;

  for (size_t i = begin; i < end; i++)
    m->x[i] += m->src[i];
}

void
pp_cpu_add (float *y, const float *x, size_t n)
{
  Map m = { .x = y, .src = x };

  pp_cpu_parallel_for_aligned (n, PP_CPU_GRAIN_MEMORY, PP_CPU_ELEMENT_ALIGN,
      add_range, &m);
}

static void
scale_range (size_t begin, size_t end, gpointer data)
{
  const Map *m = data;

  for (size_t i = begin; i < end; i++)
    m->x[i] *= m->s;
}

void
pp_cpu_scale (float *x, size_t n, float s)
{
  Map m = { .x = x, .s = s };

  pp_cpu_parallel_for_aligned (n, PP_CPU_GRAIN_MEMORY, PP_CPU_ELEMENT_ALIGN,
      scale_range, &m);
}

static void
affine_range (size_t begin, size_t end, gpointer data)
{
  const Map *m = data;

  for (size_t i = begin; i < end; i++)
    m->x[i] = m->x[i] * m->s + m->t;
}

void
pp_cpu_affine (float *x, size_t n, float mul, float add)
{
  Map m = { .x = x, .s = mul, .t = add };

  pp_cpu_parallel_for_aligned (n, PP_CPU_GRAIN_MEMORY, PP_CPU_ELEMENT_ALIGN,
      affine_range, &m);
}

static void
axpby_range (size_t begin, size_t end, gpointer data)
{
  const Map *m = data;

  if (m->t == 0.0f) {
    for (size_t i = begin; i < end; i++)
      m->x[i] = m->s * m->src[i];
    return;
  }
  for (size_t i = begin; i < end; i++)
    m->x[i] = m->s * m->src[i] + m->t * m->x[i];
}

void
pp_cpu_axpby (float *y, float a, const float *x, float b, size_t n)
{
  Map m = { .x = y, .src = x, .s = a, .t = b };

  pp_cpu_parallel_for_aligned (n, PP_CPU_GRAIN_MEMORY, PP_CPU_ELEMENT_ALIGN,
      axpby_range, &m);
}

typedef struct
{
  float *x;
  const float *eps, *noise;
  const PpLcmCoeffs *c;
} LcmMap;

static void
lcm_range (size_t begin, size_t end, gpointer data)
{
  const LcmMap *m = data;

  for (size_t i = begin; i < end; i++)
    m->x[i] = pp_math_lcm_step (m->c, m->x[i], m->eps[i],
        m->c->last ? 0.0f : m->noise[i]);
}

void
pp_cpu_lcm_step (float *x, const float *eps, const float *noise, size_t n,
    const PpLcmCoeffs * coeffs)
{
  LcmMap m = { x, eps, noise, coeffs };

  g_return_if_fail (coeffs->last || noise != NULL);

  pp_cpu_parallel_for_aligned (n, PP_CPU_GRAIN_MEMORY, PP_CPU_ELEMENT_ALIGN,
      lcm_range, &m);
}

/* Items are planes (sample, channel); src holds one value per plane. */
static void
add_channel_range (size_t begin, size_t end, gpointer data)
{
  const Map *m = data;
  const int hw = m->d;

  for (size_t plane = begin; plane < end; plane++) {
    float *p = m->x + plane * hw;
    const float add = m->src[plane];

    for (int i = 0; i < hw; i++)
      p[i] += add;
  }
}

void
pp_cpu_add_channel (float *x, int n, int c, int hw, const float *v)
{
  Map m = { .x = x, .src = v, .d = hw };

  g_return_if_fail (n > 0 && c > 0 && hw > 0);

  pp_cpu_parallel_for ((size_t) n * c, PP_CPU_GRAIN_MEMORY / hw + 1,
      add_channel_range, &m);
}

void
pp_cpu_timestep_embedding (float t, int dim, gboolean flip_sin_to_cos,
    float freq_shift, float *y)
{
  const int half = dim / 2;
  /* [sin | cos], or [cos | sin] when flipped. */
  float *sin_part = flip_sin_to_cos ? y + half : y;
  float *cos_part = flip_sin_to_cos ? y : y + half;

  g_return_if_fail (dim > 0);
  g_return_if_fail (half == 0 || (float) half != freq_shift);

  for (int k = 0; k < half; k++) {
    /* The argument is rounded to float first, as the float32 reference
     * does; sin and cos of it are then taken accurately. */
    const float arg = t * pp_math_timestep_freq (k, half, freq_shift);

    sin_part[k] = (float) sin ((double) arg);
    cos_part[k] = (float) cos ((double) arg);
  }
  if (dim % 2)
    y[dim - 1] = 0.0f;
}

/* Bytes ↔ floats (a frame's pixels). */

typedef struct
{
  const guint8 *bytes_in;
  const float *floats_in;
  float *floats_out;
  guint8 *bytes_out;
} Convert;

PP_CPU_VECTOR_CLONES static void
bytes_to_floats_range (size_t begin, size_t end, gpointer data)
{
  const Convert *c = data;

  for (size_t i = begin; i < end; i++)
    c->floats_out[i] = c->bytes_in[i];
}

void
pp_cpu_bytes_to_floats (const guint8 * x, size_t n, float *y)
{
  Convert c = { .bytes_in = x, .floats_out = y };

  pp_cpu_parallel_for_aligned (n, PP_CPU_GRAIN_MEMORY, PP_CPU_ELEMENT_ALIGN,
      bytes_to_floats_range, &c);
}

PP_CPU_VECTOR_CLONES static void
floats_to_bytes_range (size_t begin, size_t end, gpointer data)
{
  const Convert *c = data;

  for (size_t i = begin; i < end; i++)
    c->bytes_out[i] = pp_math_to_byte (c->floats_in[i]);
}

void
pp_cpu_floats_to_bytes (const float *x, size_t n, guint8 * y)
{
  Convert c = { .floats_in = x, .bytes_out = y };

  pp_cpu_parallel_for_aligned (n, PP_CPU_GRAIN_MEMORY, PP_CPU_ELEMENT_ALIGN,
      floats_to_bytes_range, &c);
}
