/* ppdiffuse — builtin:anisotropic: Perona–Malik anisotropic diffusion.
 *
 * One step is one explicit iteration of
 *   I ← I + λ Σ_{d ∈ N,S,E,W} g(∇_d I) ∇_d I,   g(x) = 1 / (1 + (x/κ)²)
 * per channel, with reflecting borders (∇ = 0 across the edge).  Small
 * gradients (texture, noise) diffuse, large ones (edges) are kept: an
 * edge-preserving smoothing that looks painterly after a few steps. */
#include "pp-model.h"
#include "pp-error.h"

#include <string.h>

#define PP_ANISO_DEFAULT_KAPPA 24.0
#define PP_ANISO_DEFAULT_LAMBDA 0.25
/* Explicit 4-neighbour schemes are stable for λ ≤ 1/4. */
#define PP_ANISO_MAX_LAMBDA 0.25

typedef struct
{
  gdouble kappa;
  gdouble lambda;
  gfloat *scratch;              /* one plane, grown once to the largest seen */
  gsize scratch_len;
} Aniso;

static gboolean
aniso_params (GHashTable * params, gdouble * kappa, gdouble * lambda,
    GError ** error)
{
  *kappa = PP_ANISO_DEFAULT_KAPPA;
  *lambda = PP_ANISO_DEFAULT_LAMBDA;
  return pp_model_param_double (params, "kappa", 1e-3, 1e6, kappa, error)
      && pp_model_param_double (params, "lambda", 0.0, PP_ANISO_MAX_LAMBDA,
      lambda, error);
}

static gboolean
aniso_init (PpModel * model, GHashTable * params, GError ** error)
{
  Aniso *a = g_new0 (Aniso, 1);

  model->priv = a;
  return aniso_params (params, &a->kappa, &a->lambda, error);
}

/* The scratch plane carries no content: nothing to start over. */
static gboolean
aniso_update (PpModel * model, GHashTable * params,
    const PpSettings * settings, GPtrArray * inputs, gboolean commit,
    GError ** error)
{
  Aniso *a = model->priv;
  gdouble kappa, lambda;

  if (!aniso_params (params, &kappa, &lambda, error))
    return FALSE;
  if (commit) {
    a->kappa = kappa;
    a->lambda = lambda;
  }
  return TRUE;
}

static inline gfloat
flux (gfloat d, gfloat inv_k2)
{
  return d / (1.f + d * d * inv_k2);
}

static gboolean
aniso_step (PpModel * model, guint step, guint n_steps, PpTensor * sample,
    GError ** error)
{
  Aniso *a = model->priv;
  const gfloat inv_k2 = (gfloat) (1.0 / (a->kappa * a->kappa));
  const gfloat lambda = (gfloat) a->lambda;
  gint64 h, w, plane;

  if (sample->dtype != PP_DTYPE_F32 || sample->ndim != 4) {
    g_autofree gchar *got = pp_tensor_describe (sample);
    g_set_error (error, PP_ERROR, PP_ERROR_SHAPE,
        "builtin:anisotropic needs an F32[N,C,H,W] sample, got %s", got);
    return FALSE;
  }
  h = sample->shape[2];
  w = sample->shape[3];
  plane = h * w;
  if (a->scratch_len < (gsize) plane) {
    g_free (a->scratch);
    a->scratch = g_new (gfloat, plane);
    a->scratch_len = plane;
  }
  for (gint64 p = 0; p < sample->shape[0] * sample->shape[1]; p++) {
    gfloat *img = (gfloat *) sample->data + p * plane;
    gfloat *src = a->scratch;

    memcpy (src, img, plane * sizeof (gfloat));
    for (gint64 y = 0; y < h; y++) {
      const gfloat *row = src + y * w;
      const gfloat *up = y > 0 ? row - w : row;
      const gfloat *down = y < h - 1 ? row + w : row;
      for (gint64 x = 0; x < w; x++) {
        gfloat c = row[x];
        gfloat dn = up[x] - c, ds = down[x] - c;
        gfloat de = (x < w - 1 ? row[x + 1] : c) - c;
        gfloat dw = (x > 0 ? row[x - 1] : c) - c;
        img[y * w + x] = c + lambda * (flux (dn, inv_k2) + flux (ds, inv_k2)
            + flux (de, inv_k2) + flux (dw, inv_k2));
      }
    }
  }
  return TRUE;
}

static void
aniso_finalize (PpModel * model)
{
  Aniso *a = model->priv;

  if (a != NULL)
    g_free (a->scratch);
  g_free (a);
}

const PpModelClass pp_model_anisotropic_class = {
  .name = "anisotropic",
  .init = aniso_init,
  .update = aniso_update,
  .step = aniso_step,
  .finalize = aniso_finalize,
};
