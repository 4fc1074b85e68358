/* ppdiffuse — the plan: which worker runs which denoising steps.
 *
 * Computed once on rank 0, sent to every worker in the init handshake,
 * checked there and identified by plan_id (a CRC-32 of its serialised
 * form). */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

#define PP_PLAN_VARIANT_TYPE "(uussua(uu))"
/* The backend of plans made without one (tests, tools). */
#define PP_PLAN_DEFAULT_BACKEND "cpu"

typedef struct
{
  guint first;                  /* first step this worker runs */
  guint end;                    /* one past its last step */
} PpSlice;

typedef struct
{
  guint n_workers;
  guint n_steps;
  gchar *model;
  gchar *backend;               /* the compute backend every worker uses */
  guint timeout_ms;
  PpSlice *slices;              /* n_workers entries, slices[i] for world rank i + 1 */
  guint32 plan_id;
} PpPlan;

/* Worker i of W with S steps runs a contiguous slice; the first S mod W
 * workers take one extra step so that no step is dropped.  W > S and W = 0
 * are errors naming both numbers. */
PpPlan   *pp_plan_new          (guint n_workers, guint n_steps,
                                const gchar * model, guint timeout_ms,
                                GError ** error);
/* The same, the workers computing on @backend (a pp_backend_get name). */
PpPlan   *pp_plan_new_on       (guint n_workers, guint n_steps,
                                const gchar * model, const gchar * backend,
                                guint timeout_ms, GError ** error);
void      pp_plan_free         (PpPlan * plan);
GVariant *pp_plan_to_variant   (const PpPlan * plan);
/* Parses and re-derives the plan; any disagreement (slices, plan_id) is an
 * error naming the field. */
PpPlan   *pp_plan_from_variant (GVariant * variant, guint32 expected_plan_id,
                                GError ** error);
gchar    *pp_plan_describe     (const PpPlan * plan);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (PpPlan, pp_plan_free)

G_END_DECLS
