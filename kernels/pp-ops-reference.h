/* ppdiffuse — float64 references of the ops, from their definitions in
 * pp-ops-list.h (and PyTorch's for the activations and norms), written
 * plainly for checking backends: ppdiffuse-tool test-ops and the CPU op
 * tests compare against them.  Host memory in and out. */
#pragma once

#include <glib.h>
#include <stddef.h>

G_BEGIN_DECLS

double pp_ref_silu (double x);
double pp_ref_relu (double x);
/* The erf form, as torch's default GELU. */
double pp_ref_gelu (double x);
/* Mean and 1/√(biased variance + eps) of @count values, as torch's
 * group_norm and layer_norm. */
void   pp_ref_moments (const float *x, size_t count, double eps,
                       double *mean, double *rstd);
/* pp_conv2d's arguments; zero padding; @y [n, cout, ho, wo]. */
void   pp_ref_conv2d (const float *x, int n, int cin, int h, int w,
                      const float *weight, const float *bias, int cout,
                      int kh, int kw, int stride, int pad, double *y);
/* softmax(q kᵀ / √head_dim) v per sample and head into @out (pp_attention's
 * layout); returns the largest |score|. */
double pp_ref_attention (const float *q, const float *k, const float *v,
                         int n, int lq, int lk, int heads, int head_dim,
                         double *out);
/* The same with lq = lk = @l and query i seeing keys 0…i only
 * (pp_attention_causal). */
double pp_ref_attention_causal (const float *q, const float *k,
                                const float *v, int n, int l, int heads,
                                int head_dim, double *out);
/* x·sigmoid(1.702·x). */
double pp_ref_quick_gelu (double x);

G_END_DECLS
