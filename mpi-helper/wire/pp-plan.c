/* ppdiffuse — the plan. */
#include "pp-plan.h"
#include "pp-error.h"

#include <zlib.h>

static guint32
plan_crc (GVariant * v)
{
  return (guint32) crc32 (0L, g_variant_get_data (v), g_variant_get_size (v));
}

PpPlan *
pp_plan_new (guint n_workers, guint n_steps, const gchar * model,
    guint timeout_ms, GError ** error)
{
  return pp_plan_new_on (n_workers, n_steps, model, PP_PLAN_DEFAULT_BACKEND,
      timeout_ms, error);
}

PpPlan *
pp_plan_new_on (guint n_workers, guint n_steps, const gchar * model,
    const gchar * backend, guint timeout_ms, GError ** error)
{
  return pp_plan_new_full (n_workers, n_steps, model, backend,
      PP_DATA_PLANE_MPI, timeout_ms, error);
}

gboolean
pp_plan_data_plane_known (const gchar * data_plane)
{
  return g_strcmp0 (data_plane, PP_DATA_PLANE_MPI) == 0
      || g_strcmp0 (data_plane, PP_DATA_PLANE_NCCL) == 0
      || g_strcmp0 (data_plane, PP_DATA_PLANE_NCCL_EMULATED) == 0;
}

gboolean
pp_plan_uses_nccl (const PpPlan * plan)
{
  return g_strcmp0 (plan->data_plane, PP_DATA_PLANE_MPI) != 0;
}

PpPlan *
pp_plan_new_full (guint n_workers, guint n_steps, const gchar * model,
    const gchar * backend, const gchar * data_plane, guint timeout_ms,
    GError ** error)
{
  PpPlan *plan;
  guint base, extra, step = 0;
  g_autoptr (GVariant) v = NULL;

  if (n_workers == 0 || n_steps == 0) {
    g_set_error (error, PP_ERROR, PP_ERROR_CONFIG,
        "need at least one worker and one step (ranks=%u, steps=%u)",
        n_workers, n_steps);
    return NULL;
  }
  if (!pp_plan_data_plane_known (data_plane)) {
    g_set_error (error, PP_ERROR, PP_ERROR_CONFIG, "unknown data plane "
        "'%s': known are %s, %s and %s", data_plane, PP_DATA_PLANE_MPI,
        PP_DATA_PLANE_NCCL, PP_DATA_PLANE_NCCL_EMULATED);
    return NULL;
  }
  if (n_workers > n_steps) {
    g_set_error (error, PP_ERROR, PP_ERROR_CONFIG,
        "ranks=%u is more than steps=%u: every worker must run at least one "
        "step; lower ranks or raise steps", n_workers, n_steps);
    return NULL;
  }
  plan = g_new0 (PpPlan, 1);
  plan->n_workers = n_workers;
  plan->n_steps = n_steps;
  plan->model = g_strdup (model);
  plan->backend = g_strdup (backend);
  plan->data_plane = g_strdup (data_plane);
  plan->timeout_ms = timeout_ms;
  plan->slices = g_new0 (PpSlice, n_workers);
  base = n_steps / n_workers;
  extra = n_steps % n_workers;
  for (guint i = 0; i < n_workers; i++) {
    plan->slices[i].first = step;
    step += base + (i < extra ? 1 : 0);
    plan->slices[i].end = step;
  }
  g_assert (step == n_steps);
  plan->plan_id = 0;
  v = g_variant_ref_sink (pp_plan_to_variant (plan));
  plan->plan_id = plan_crc (v);
  return plan;
}

void
pp_plan_free (PpPlan * plan)
{
  if (plan == NULL)
    return;
  g_free (plan->model);
  g_free (plan->backend);
  g_free (plan->data_plane);
  g_free (plan->slices);
  g_free (plan);
}

GVariant *
pp_plan_to_variant (const PpPlan * plan)
{
  GVariantBuilder slices;

  g_variant_builder_init (&slices, G_VARIANT_TYPE ("a(uu)"));
  for (guint i = 0; i < plan->n_workers; i++)
    g_variant_builder_add (&slices, "(uu)", plan->slices[i].first,
        plan->slices[i].end);
  return g_variant_new (PP_PLAN_VARIANT_TYPE, plan->n_workers, plan->n_steps,
      plan->model, plan->backend, plan->data_plane, plan->timeout_ms,
      &slices);
}

PpPlan *
pp_plan_from_variant (GVariant * variant, guint32 expected_plan_id,
    GError ** error)
{
  g_autoptr (PpPlan) plan = NULL;
  g_autoptr (GVariant) slices = NULL;
  guint n_workers, n_steps, timeout_ms;
  const gchar *model, *backend, *data_plane;

  if (!g_variant_is_of_type (variant, G_VARIANT_TYPE (PP_PLAN_VARIANT_TYPE))) {
    g_set_error (error, PP_ERROR, PP_ERROR_PROTOCOL,
        "plan field type: expected %s, received %s", PP_PLAN_VARIANT_TYPE,
        g_variant_get_type_string (variant));
    return NULL;
  }
  g_variant_get (variant, "(uu&s&s&su@a(uu))", &n_workers, &n_steps, &model,
      &backend, &data_plane, &timeout_ms, &slices);
  plan = pp_plan_new_full (n_workers, n_steps, model, backend, data_plane,
      timeout_ms, error);
  if (plan == NULL)
    return NULL;
  if (g_variant_n_children (slices) != n_workers) {
    g_set_error (error, PP_ERROR, PP_ERROR_PROTOCOL,
        "plan field slices: expected %u entries, received %" G_GSIZE_FORMAT,
        n_workers, g_variant_n_children (slices));
    return NULL;
  }
  for (guint i = 0; i < n_workers; i++) {
    guint first, end;
    g_variant_get_child (slices, i, "(uu)", &first, &end);
    if (first != plan->slices[i].first || end != plan->slices[i].end) {
      g_set_error (error, PP_ERROR, PP_ERROR_PROTOCOL,
          "plan field slices[%u]: expected [%u,%u), received [%u,%u)", i,
          plan->slices[i].first, plan->slices[i].end, first, end);
      return NULL;
    }
  }
  if (plan->plan_id != expected_plan_id) {
    g_set_error (error, PP_ERROR, PP_ERROR_PROTOCOL,
        "plan field plan_id: expected 0x%08x, received 0x%08x",
        plan->plan_id, expected_plan_id);
    return NULL;
  }
  return g_steal_pointer (&plan);
}

gchar *
pp_plan_describe (const PpPlan * plan)
{
  GString *s = g_string_new (NULL);

  g_string_append_printf (s, "plan 0x%08x: %u steps over %u workers, model "
      "%s on %s, data plane %s:", plan->plan_id, plan->n_steps,
      plan->n_workers, plan->model, plan->backend, plan->data_plane);
  for (guint i = 0; i < plan->n_workers; i++)
    g_string_append_printf (s, " rank %u steps [%u,%u)", i + 1,
        plan->slices[i].first, plan->slices[i].end);
  return g_string_free (s, FALSE);
}
