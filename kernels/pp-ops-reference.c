/* ppdiffuse — float64 references of the ops. */
#include "pp-ops-reference.h"
#include "pp-ops.h"

#include <math.h>

double
pp_ref_silu (double x)
{
  return x / (1.0 + exp (-x));
}

double
pp_ref_relu (double x)
{
  return x > 0.0 ? x : 0.0;
}

double
pp_ref_gelu (double x)
{
  return 0.5 * x * (1.0 + erf (x / sqrt (2.0)));
}

void
pp_ref_moments (const float *x, size_t count, double eps, double *mean,
    double *rstd)
{
  double s = 0.0, v = 0.0;

  for (size_t i = 0; i < count; i++)
    s += x[i];
  *mean = s / count;
  for (size_t i = 0; i < count; i++)
    v += (x[i] - *mean) * (x[i] - *mean);
  *rstd = 1.0 / sqrt (v / count + eps);
}

void
pp_ref_conv2d (const float *x, int n, int cin, int h, int w,
    const float *weight, const float *bias, int cout, int kh, int kw,
    int stride, int pad, double *y)
{
  const int ho = pp_conv2d_out_size (h, kh, stride, pad);
  const int wo = pp_conv2d_out_size (w, kw, stride, pad);

  for (int b = 0; b < n; b++)
    for (int co = 0; co < cout; co++)
      for (int oy = 0; oy < ho; oy++)
        for (int ox = 0; ox < wo; ox++) {
          double acc = bias ? bias[co] : 0.0;

          for (int ci = 0; ci < cin; ci++)
            for (int ky = 0; ky < kh; ky++)
              for (int kx = 0; kx < kw; kx++) {
                const int iy = oy * stride - pad + ky;
                const int ix = ox * stride - pad + kx;

                if (iy >= 0 && iy < h && ix >= 0 && ix < w)
                  acc += (double) x[(((size_t) b * cin + ci) * h + iy) * w
                      + ix] * weight[(((size_t) co * cin + ci) * kh + ky)
                      * kw + kx];
              }
          y[(((size_t) b * cout + co) * ho + oy) * wo + ox] = acc;
        }
}

double
pp_ref_quick_gelu (double x)
{
  return x / (1.0 + exp (-(double) PP_MATH_QUICK_GELU_SCALE * x));
}

/* Query i sees keys [0, lk) or, when @causal, [0, i]. */
static double
attention (const float *q, const float *k, const float *v, int n, int lq,
    int lk, int heads, int hd, gboolean causal, double *out)
{
  const size_t ld = (size_t) heads * hd;
  const double scale = 1.0 / sqrt (hd);
  g_autofree double *s = g_new (double, lk);
  double max_score = 0.0;

  for (int b = 0; b < n; b++)
    for (int h = 0; h < heads; h++)
      for (int i = 0; i < lq; i++) {
        const float *qi = q + ((size_t) b * lq + i) * ld + (size_t) h * hd;
        const int keys = causal ? MIN (i + 1, lk) : lk;
        double max = -INFINITY, sum = 0.0;

        for (int j = 0; j < keys; j++) {
          const float *kj = k + ((size_t) b * lk + j) * ld + (size_t) h * hd;
          double dot = 0.0;

          for (int d = 0; d < hd; d++)
            dot += (double) qi[d] * kj[d];
          s[j] = dot * scale;
          max = MAX (max, s[j]);
          max_score = MAX (max_score, fabs (s[j]));
        }
        for (int j = 0; j < keys; j++) {
          s[j] = exp (s[j] - max);
          sum += s[j];
        }
        for (int d = 0; d < hd; d++) {
          double acc = 0.0;

          for (int j = 0; j < keys; j++)
            acc += s[j] * v[((size_t) b * lk + j) * ld + (size_t) h * hd + d];
          out[((size_t) b * lq + i) * ld + (size_t) h * hd + d] = acc / sum;
        }
      }
  return max_score;
}

double
pp_ref_attention (const float *q, const float *k, const float *v, int n,
    int lq, int lk, int heads, int hd, double *out)
{
  return attention (q, k, v, n, lq, lk, heads, hd, FALSE, out);
}

double
pp_ref_attention_causal (const float *q, const float *k, const float *v,
    int n, int l, int heads, int hd, double *out)
{
  return attention (q, k, v, n, l, l, heads, hd, TRUE, out);
}
