/* ppdiffuse — the plan: which worker runs which denoising steps.
 *
 * Computed once on rank 0, sent to every worker in the init handshake,
 * checked there and identified by plan_id (a CRC-32 of its serialised
 * form). */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

#define PP_PLAN_VARIANT_TYPE "(uusssua(uu))"
/* The backend of plans made without one (tests, tools). */
#define PP_PLAN_DEFAULT_BACKEND "cpu"

/* The data plane: how chunk payloads travel between ranks (the control
 * plane is MPI whatever it is).  Chosen by rank 0 (pp-nccl-links.h). */
#define PP_DATA_PLANE_MPI "mpi"         /* MPI point-to-point, host buffers */
#define PP_DATA_PLANE_NCCL "nccl"       /* NCCL, device buffers (cuda) */
/* Test and simulation mode: the NCCL data path (per-link planes, device
 * chunk pools, model steps from device tensors) over a table that carries
 * NCCL's sends and receives by MPI on the cpu backend's memory
 * (tests/support/pp-nccl-emulated.h: test builds only). */
#define PP_DATA_PLANE_NCCL_EMULATED "nccl-emulated"

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
  gchar *data_plane;            /* PP_DATA_PLANE_* */
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
/* The same, chunk payloads travelling on @data_plane (PP_DATA_PLANE_*;
 * the others say PP_DATA_PLANE_MPI). */
PpPlan   *pp_plan_new_full     (guint n_workers, guint n_steps,
                                const gchar * model, const gchar * backend,
                                const gchar * data_plane, guint timeout_ms,
                                GError ** error);
/* TRUE when @data_plane is one of PP_DATA_PLANE_*. */
gboolean  pp_plan_data_plane_known (const gchar * data_plane);
/* TRUE when @plan's payloads travel over (real or emulated) NCCL. */
gboolean  pp_plan_uses_nccl    (const PpPlan * plan);
void      pp_plan_free         (PpPlan * plan);
GVariant *pp_plan_to_variant   (const PpPlan * plan);
/* Parses and re-derives the plan; any disagreement (slices, plan_id) is an
 * error naming the field. */
PpPlan   *pp_plan_from_variant (GVariant * variant, guint32 expected_plan_id,
                                GError ** error);
gchar    *pp_plan_describe     (const PpPlan * plan);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (PpPlan, pp_plan_free)

G_END_DECLS
