/* ppdiffuse — builtin:stamp. */
#include "pp-stamp.h"
#include "pp-model.h"
#include "pp-error.h"

#include <math.h>

typedef struct
{
  guint mark;
} Stamp;

static gboolean
stamp_params (GHashTable * params, guint * mark, GError ** error)
{
  *mark = 0;
  return pp_model_param_uint (params, "mark", 0, PP_STAMP_MARK_MAX, mark,
      error);
}

static gboolean
stamp_init (PpModel * model, GHashTable * params, GError ** error)
{
  Stamp *s = g_new0 (Stamp, 1);

  model->priv = s;
  return stamp_params (params, &s->mark, error);
}

static gboolean
stamp_update (PpModel * model, GHashTable * params,
    const PpSettings * settings, GPtrArray * inputs, gboolean commit,
    GError ** error)
{
  Stamp *s = model->priv;
  guint mark;

  if (!stamp_params (params, &mark, error))
    return FALSE;
  if (commit)
    s->mark = mark;
  return TRUE;
}

static void
stamp_finalize (PpModel * model)
{
  g_free (model->priv);
}

static gboolean
stamp_step (PpModel * model, guint step, guint n_steps, PpTensor * sample,
    GError ** error)
{
  const guint mark = ((Stamp *) model->priv)->mark;
  gint64 plane;

  if (sample->dtype != PP_DTYPE_F32 || sample->ndim != 4) {
    g_autofree gchar *got = pp_tensor_describe (sample);
    g_set_error (error, PP_ERROR, PP_ERROR_SHAPE,
        "builtin:stamp needs an F32[N,C,H,W] sample, got %s", got);
    return FALSE;
  }
  plane = sample->shape[2] * sample->shape[3];
  for (gint64 n = 0; n < sample->shape[0]; n++) {
    for (gint64 c = 0; c < sample->shape[1]; c++) {
      gfloat *p = (gfloat *) sample->data + (n * sample->shape[1] + c) * plane;
      for (gint64 i = 0; i < plane; i++) {
        gfloat r = rintf (p[i]);
        guint v = r > 255.f ? 255u : (r >= 0.f ? (guint) r : 0u);   /* NaN → 0 */
        p[i] = (gfloat) pp_stamp_apply (step, (guint) c, v, mark);
      }
    }
  }
  return TRUE;
}

const PpModelClass pp_model_stamp_class = {
  .name = "stamp",
  .init = stamp_init,
  .update = stamp_update,
  .step = stamp_step,
  .finalize = stamp_finalize,
};
