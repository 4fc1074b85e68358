/* ppdiffuse — noise schedules. */
#include "pp-schedule.h"
#include "pp-error.h"

#include <math.h>

#define BETA_START 0.00085
#define BETA_END 0.012
#define LCM_TIMESTEP_SCALING 10.0
#define LCM_SIGMA_DATA 0.5
#define STREAM_T_STRIDE 20      /* StreamDiffusion: t = 999 − 20·idx */

const gchar *
pp_schedule_kind_name (PpScheduleKind kind)
{
  return kind == PP_SCHEDULE_EULER ? "euler" : "lcm";
}

static gdouble *
make_alphas_cumprod (void)
{
  gdouble *ac = g_new (gdouble, PP_SCHEDULE_TRAIN_STEPS);
  gdouble a = sqrt (BETA_START), b = sqrt (BETA_END), prod = 1.0;

  for (guint i = 0; i < PP_SCHEDULE_TRAIN_STEPS; i++) {
    gdouble r = a + (b - a) * i / (PP_SCHEDULE_TRAIN_STEPS - 1);
    prod *= 1.0 - r * r;
    ac[i] = prod;
  }
  return ac;
}

/* The N timesteps of a full schedule, first (noisiest) first. */
static guint *
full_timesteps (PpScheduleKind kind, guint n)
{
  guint *t = g_new (guint, n);

  if (kind == PP_SCHEDULE_EULER) {
    gdouble ratio = (gdouble) PP_SCHEDULE_TRAIN_STEPS / n;
    for (guint j = 0; j < n; j++)
      t[j] = (guint) round (PP_SCHEDULE_TRAIN_STEPS - j * ratio) - 1;
  } else {
    guint step = PP_SCHEDULE_TRAIN_STEPS / PP_SCHEDULE_LCM_ORIGINAL_STEPS;
    guint skip = PP_SCHEDULE_LCM_ORIGINAL_STEPS / n;
    for (guint j = 0; j < n; j++)
      t[j] = PP_SCHEDULE_TRAIN_STEPS - 1 - j * skip * step;
  }
  return t;
}

PpSchedule *
pp_schedule_new (PpScheduleKind kind, guint n_steps, gdouble strength,
    const GArray * t_index_list, GError ** error)
{
  g_autoptr (PpSchedule) s = g_new0 (PpSchedule, 1);

  s->kind = kind;
  s->n_steps = n_steps;
  if (n_steps == 0 || !(strength > 0.0 && strength <= 1.0)) {
    g_set_error (error, PP_ERROR, PP_ERROR_CONFIG,
        "schedule needs steps ≥ 1 and strength in (0, 1] (steps=%u, "
        "strength=%g)", n_steps, strength);
    return NULL;
  }
  s->alphas_cumprod = make_alphas_cumprod ();
  s->timesteps = g_new (guint, n_steps);
  if (t_index_list != NULL) {
    if (kind != PP_SCHEDULE_LCM || t_index_list->len != n_steps) {
      g_set_error (error, PP_ERROR, PP_ERROR_CONFIG,
          "t-index-list has %u entries and needs an LCM schedule of as many "
          "steps (steps=%u, scheduler %s)", t_index_list->len, n_steps,
          pp_schedule_kind_name (kind));
      return NULL;
    }
    for (guint k = 0; k < n_steps; k++) {
      guint idx = g_array_index (t_index_list, guint, k);
      guint t = PP_SCHEDULE_TRAIN_STEPS - 1 - STREAM_T_STRIDE * idx;
      if (idx * STREAM_T_STRIDE >= PP_SCHEDULE_TRAIN_STEPS
          || (k > 0 && t >= s->timesteps[k - 1])) {
        g_set_error (error, PP_ERROR, PP_ERROR_CONFIG,
            "t-index-list entry %u (%u) must be below %u and larger than the "
            "one before it", k, idx,
            PP_SCHEDULE_TRAIN_STEPS / STREAM_T_STRIDE);
        return NULL;
      }
      s->timesteps[k] = t;
    }
  } else {
    guint n = (guint) round (n_steps / strength);
    guint max_n = kind == PP_SCHEDULE_LCM ? PP_SCHEDULE_LCM_ORIGINAL_STEPS
        : PP_SCHEDULE_TRAIN_STEPS;
    g_autofree guint *full = NULL;

    n = CLAMP (n, n_steps, max_n);
    if (n_steps > max_n) {
      g_set_error (error, PP_ERROR, PP_ERROR_CONFIG,
          "steps=%u is more than the %s schedule has (%u)", n_steps,
          pp_schedule_kind_name (kind), max_n);
      return NULL;
    }
    full = full_timesteps (kind, n);
    for (guint k = 0; k < n_steps; k++)
      s->timesteps[k] = full[n - n_steps + k];
  }
  s->sigmas = g_new (gdouble, n_steps + 1);
  for (guint k = 0; k < n_steps; k++) {
    gdouble ac = s->alphas_cumprod[s->timesteps[k]];
    s->sigmas[k] = sqrt ((1.0 - ac) / ac);
  }
  s->sigmas[n_steps] = 0.0;
  return g_steal_pointer (&s);
}

void
pp_schedule_free (PpSchedule * s)
{
  if (s == NULL)
    return;
  g_free (s->timesteps);
  g_free (s->sigmas);
  g_free (s->alphas_cumprod);
  g_free (s);
}

gchar *
pp_schedule_describe (const PpSchedule * s)
{
  GString *str = g_string_new (pp_schedule_kind_name (s->kind));

  g_string_append (str, " timesteps [");
  for (guint k = 0; k < s->n_steps; k++)
    g_string_append_printf (str, "%s%u", k ? ", " : "", s->timesteps[k]);
  g_string_append (str, "]");
  return g_string_free (str, FALSE);
}

void
pp_schedule_add_noise (const PpSchedule * s, PpBackend * be, gfloat * z,
    const gfloat * noise, gsize n)
{
  if (s->kind == PP_SCHEDULE_EULER) {
    /* z + σ_0·ε */
    pp_axpby (be, pp_out_f32 (z, n), (gfloat) s->sigmas[0],
        pp_view_f32 (noise, n), 1.0f, n);
  } else {
    /* √ᾱ·z + √(1−ᾱ)·ε */
    gdouble ac = s->alphas_cumprod[s->timesteps[0]];

    pp_axpby (be, pp_out_f32 (z, n), (gfloat) sqrt (1.0 - ac),
        pp_view_f32 (noise, n), (gfloat) sqrt (ac), n);
  }
}

void
pp_schedule_scale_input (const PpSchedule * s, PpBackend * be, guint k,
    const gfloat * x, gfloat * out, gsize n)
{
  gfloat scale = s->kind == PP_SCHEDULE_EULER
      ? (gfloat) (1.0 / sqrt (s->sigmas[k] * s->sigmas[k] + 1.0)) : 1.0f;

  pp_axpby (be, pp_out_f32 (out, n), scale, pp_view_f32 (x, n), 0.0f, n);
}

gboolean
pp_schedule_step_needs_noise (const PpSchedule * s, guint k)
{
  return s->kind == PP_SCHEDULE_LCM && k + 1 < s->n_steps;
}

void
pp_schedule_step (const PpSchedule * s, PpBackend * be, guint k, gfloat * x,
    const gfloat * eps, const gfloat * noise, gsize n)
{
  if (s->kind == PP_SCHEDULE_EULER) {
    /* x + (σ_{k+1} − σ_k)·ε̂ */
    pp_axpby (be, pp_out_f32 (x, n),
        (gfloat) (s->sigmas[k + 1] - s->sigmas[k]), pp_view_f32 (eps, n),
        1.0f, n);
    return;
  }
  {
    gdouble t = s->timesteps[k], ac = s->alphas_cumprod[s->timesteps[k]];
    gdouble st = LCM_TIMESTEP_SCALING * t, sd2 = LCM_SIGMA_DATA * LCM_SIGMA_DATA;
    PpLcmCoeffs c = {
      .sa = (gfloat) sqrt (ac),
      .sb = (gfloat) sqrt (1.0 - ac),
      .c_out = (gfloat) (st / sqrt (st * st + sd2)),
      .c_skip = (gfloat) (sd2 / (st * st + sd2)),
      .last = k + 1 == s->n_steps,
    };

    if (!c.last) {
      gdouble next = s->alphas_cumprod[s->timesteps[k + 1]];
      c.na = (gfloat) sqrt (next);
      c.nb = (gfloat) sqrt (1.0 - next);
    }
    /* A NULL @noise is absent too (pp_view_f32). */
    pp_lcm_step (be, pp_out_f32 (x, n), pp_view_f32 (eps, n),
        c.last ? pp_view_none () : pp_view_f32 (noise, n), n, &c);
  }
}
