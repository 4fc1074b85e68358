/* Unit tests for the plan: slices, plan_id and the variant round trip. */
#include "pp-plan.h"
#include "pp-error.h"

#include <string.h>

#define MODEL "builtin:stamp"

/* Slices must be contiguous, cover [0, S) exactly once and give the first
 * S mod W workers one extra step. */
static void
check_slices (guint w, guint s)
{
  g_autoptr (GError) error = NULL;
  g_autoptr (PpPlan) plan = pp_plan_new (w, s, MODEL, 1000, &error);
  g_autofree guint *hits = g_new0 (guint, s);
  guint expect = 0;

  g_assert_no_error (error);
  g_assert_nonnull (plan);
  g_assert_cmpuint (plan->n_workers, ==, w);
  g_assert_cmpuint (plan->n_steps, ==, s);
  g_assert_cmpstr (plan->model, ==, MODEL);
  for (guint i = 0; i < w; i++) {
    guint len = s / w + (i < s % w ? 1 : 0);

    g_assert_cmpuint (plan->slices[i].first, ==, expect);
    g_assert_cmpuint (plan->slices[i].end, ==, expect + len);
    g_assert_cmpuint (len, >=, 1);
    for (guint k = plan->slices[i].first; k < plan->slices[i].end; k++)
      hits[k]++;
    expect += len;
  }
  g_assert_cmpuint (expect, ==, s);
  for (guint k = 0; k < s; k++)
    g_assert_cmpuint (hits[k], ==, 1);
}

static void
test_slices_explicit (void)
{
  g_autoptr (PpPlan) plan = pp_plan_new (3, 4, MODEL, 1000, NULL);
  /* Written out by hand so the test does not share the formula above. */
  static const PpSlice w3s4[] = { {0, 2}, {2, 3}, {3, 4} };
  static const PpSlice w4s10[] = { {0, 3}, {3, 6}, {6, 8}, {8, 10} };

  g_assert_nonnull (plan);
  for (guint i = 0; i < 3; i++) {
    g_assert_cmpuint (plan->slices[i].first, ==, w3s4[i].first);
    g_assert_cmpuint (plan->slices[i].end, ==, w3s4[i].end);
  }
  g_clear_pointer (&plan, pp_plan_free);
  plan = pp_plan_new (4, 10, MODEL, 1000, NULL);
  g_assert_nonnull (plan);
  for (guint i = 0; i < 4; i++) {
    g_assert_cmpuint (plan->slices[i].first, ==, w4s10[i].first);
    g_assert_cmpuint (plan->slices[i].end, ==, w4s10[i].end);
  }
}

static void
test_slices_many (void)
{
  check_slices (3, 4);
  check_slices (4, 10);
  check_slices (1, 1);
  check_slices (1, 7);
  check_slices (5, 5);
  check_slices (16, 16);
  check_slices (7, 100);
  check_slices (2, 3);
  /* Exhaustive over small sizes: cheap and catches off-by-ones. */
  for (guint s = 1; s <= 24; s++)
    for (guint w = 1; w <= s; w++)
      check_slices (w, s);
}

static void
test_too_many_workers (void)
{
  g_autoptr (GError) error = NULL;
  PpPlan *plan = pp_plan_new (5, 3, MODEL, 1000, &error);

  g_assert_null (plan);
  g_assert_error (error, PP_ERROR, PP_ERROR_CONFIG);
  g_assert_nonnull (strstr (error->message, "5"));
  g_assert_nonnull (strstr (error->message, "3"));
  g_clear_error (&error);

  /* Two-digit numbers, so a match cannot be a coincidental digit. */
  plan = pp_plan_new (17, 12, MODEL, 1000, &error);
  g_assert_null (plan);
  g_assert_error (error, PP_ERROR, PP_ERROR_CONFIG);
  g_assert_nonnull (strstr (error->message, "17"));
  g_assert_nonnull (strstr (error->message, "12"));
  g_clear_error (&error);

  /* One worker too many: the boundary case. */
  plan = pp_plan_new (4, 3, MODEL, 1000, &error);
  g_assert_null (plan);
  g_assert_error (error, PP_ERROR, PP_ERROR_CONFIG);
  g_clear_error (&error);
  plan = pp_plan_new (2, 1, MODEL, 1000, &error);
  g_assert_null (plan);
  g_assert_error (error, PP_ERROR, PP_ERROR_CONFIG);
}

static void
test_zero (void)
{
  g_autoptr (GError) error = NULL;

  g_assert_null (pp_plan_new (0, 4, MODEL, 1000, &error));
  g_assert_error (error, PP_ERROR, PP_ERROR_CONFIG);
  g_clear_error (&error);
  g_assert_null (pp_plan_new (0, 0, MODEL, 1000, &error));
  g_assert_error (error, PP_ERROR, PP_ERROR_CONFIG);
  g_clear_error (&error);
  g_assert_null (pp_plan_new (2, 0, MODEL, 1000, &error));
  g_assert_error (error, PP_ERROR, PP_ERROR_CONFIG);
}

static guint32
id_of (guint w, guint s, const gchar * model, guint timeout)
{
  g_autoptr (PpPlan) plan = pp_plan_new (w, s, model, timeout, NULL);

  g_assert_nonnull (plan);
  return plan->plan_id;
}

static void
test_plan_id (void)
{
  guint32 base = id_of (3, 10, MODEL, 5000);

  /* Deterministic: rank 0 and every worker must derive the same id. */
  g_assert_cmpuint (id_of (3, 10, MODEL, 5000), ==, base);
  g_assert_cmpuint (id_of (3, 10, "builtin:anisotropic", 5000), !=, base);
  g_assert_cmpuint (id_of (3, 11, MODEL, 5000), !=, base);
  g_assert_cmpuint (id_of (2, 10, MODEL, 5000), !=, base);
  g_assert_cmpuint (id_of (3, 10, MODEL, 5001), !=, base);
}

static void
test_round_trip (void)
{
  g_autoptr (PpPlan) plan = pp_plan_new (4, 10, MODEL, 2500, NULL);
  g_autoptr (GVariant) v = g_variant_ref_sink (pp_plan_to_variant (plan));
  g_autoptr (GError) error = NULL;
  g_autoptr (PpPlan) back = NULL;

  g_assert_true (g_variant_is_of_type (v,
          G_VARIANT_TYPE (PP_PLAN_VARIANT_TYPE)));
  back = pp_plan_from_variant (v, plan->plan_id, &error);
  g_assert_no_error (error);
  g_assert_nonnull (back);
  g_assert_cmpuint (back->n_workers, ==, 4);
  g_assert_cmpuint (back->n_steps, ==, 10);
  g_assert_cmpstr (back->model, ==, MODEL);
  g_assert_cmpuint (back->timeout_ms, ==, 2500);
  g_assert_cmpuint (back->plan_id, ==, plan->plan_id);
  for (guint i = 0; i < 4; i++) {
    g_assert_cmpuint (back->slices[i].first, ==, plan->slices[i].first);
    g_assert_cmpuint (back->slices[i].end, ==, plan->slices[i].end);
  }
}

static void
test_wrong_plan_id (void)
{
  g_autoptr (PpPlan) plan = pp_plan_new (2, 6, MODEL, 1000, NULL);
  g_autoptr (GVariant) v = g_variant_ref_sink (pp_plan_to_variant (plan));
  g_autoptr (GError) error = NULL;

  g_assert_null (pp_plan_from_variant (v, plan->plan_id ^ 1, &error));
  g_assert_error (error, PP_ERROR, PP_ERROR_PROTOCOL);
  g_assert_nonnull (strstr (error->message, "plan_id"));
}

/* A sender whose slicing disagrees with ours (same W and S) is refused. */
static void
test_tampered_slices (void)
{
  g_autoptr (PpPlan) plan = pp_plan_new (3, 4, MODEL, 1000, NULL);
  g_autoptr (GVariant) v = NULL;
  g_autoptr (GError) error = NULL;
  GVariantBuilder b;

  g_variant_builder_init (&b, G_VARIANT_TYPE ("a(uu)"));
  /* The extra step given to the last worker instead of the first. */
  g_variant_builder_add (&b, "(uu)", 0u, 1u);
  g_variant_builder_add (&b, "(uu)", 1u, 2u);
  g_variant_builder_add (&b, "(uu)", 2u, 4u);
  v = g_variant_ref_sink (g_variant_new (PP_PLAN_VARIANT_TYPE, 3u, 4u, MODEL,
          PP_PLAN_DEFAULT_BACKEND, PP_DATA_PLANE_MPI, 1000u, &b));
  g_assert_null (pp_plan_from_variant (v, plan->plan_id, &error));
  g_assert_error (error, PP_ERROR, PP_ERROR_PROTOCOL);
  g_assert_nonnull (strstr (error->message, "slices"));
  g_clear_error (&error);
  g_clear_pointer (&v, g_variant_unref);

  /* Too few entries. */
  g_variant_builder_init (&b, G_VARIANT_TYPE ("a(uu)"));
  g_variant_builder_add (&b, "(uu)", 0u, 2u);
  g_variant_builder_add (&b, "(uu)", 2u, 3u);
  v = g_variant_ref_sink (g_variant_new (PP_PLAN_VARIANT_TYPE, 3u, 4u, MODEL,
          PP_PLAN_DEFAULT_BACKEND, PP_DATA_PLANE_MPI, 1000u, &b));
  g_assert_null (pp_plan_from_variant (v, plan->plan_id, &error));
  g_assert_error (error, PP_ERROR, PP_ERROR_PROTOCOL);
  g_assert_nonnull (strstr (error->message, "slices"));
}

static void
test_wrong_type (void)
{
  g_autoptr (GVariant) v = g_variant_ref_sink (g_variant_new ("(uus)", 1u,
          2u, MODEL));
  g_autoptr (GError) error = NULL;

  g_assert_null (pp_plan_from_variant (v, 0, &error));
  g_assert_error (error, PP_ERROR, PP_ERROR_PROTOCOL);
}

/* A variant whose W > S is refused with the configuration error. */
static void
test_invalid_from_variant (void)
{
  GVariantBuilder b;
  g_autoptr (GVariant) v = NULL;
  g_autoptr (GError) error = NULL;

  g_variant_builder_init (&b, G_VARIANT_TYPE ("a(uu)"));
  v = g_variant_ref_sink (g_variant_new (PP_PLAN_VARIANT_TYPE, 0u, 4u, MODEL,
          PP_PLAN_DEFAULT_BACKEND, PP_DATA_PLANE_MPI, 1000u, &b));
  g_assert_null (pp_plan_from_variant (v, 0, &error));
  g_assert_nonnull (error);
}

/* The backend travels in the plan and is part of its identity. */
static void
test_backend (void)
{
  g_autoptr (PpPlan) cpu = pp_plan_new (2, 4, MODEL, 1000, NULL);
  g_autoptr (PpPlan) strict = pp_plan_new_on (2, 4, MODEL, "cpu-strict",
      1000, NULL);
  g_autoptr (GVariant) v = g_variant_ref_sink (pp_plan_to_variant (strict));
  g_autoptr (GError) error = NULL;
  g_autoptr (PpPlan) back = pp_plan_from_variant (v, strict->plan_id,
      &error);
  g_autofree gchar *text = pp_plan_describe (strict);

  g_assert_no_error (error);
  g_assert_cmpstr (cpu->backend, ==, PP_PLAN_DEFAULT_BACKEND);
  g_assert_cmpstr (back->backend, ==, "cpu-strict");
  g_assert_cmpuint (cpu->plan_id, !=, strict->plan_id);
  g_assert_nonnull (strstr (text, "on cpu-strict"));
}

/* The data plane travels in the plan, is part of its identity, and an
 * unknown one is refused naming the known ones. */
static void
test_data_plane (void)
{
  g_autoptr (PpPlan) mpi = pp_plan_new (2, 4, MODEL, 1000, NULL);
  g_autoptr (PpPlan) nccl = pp_plan_new_full (2, 4, MODEL, "cpu",
      PP_DATA_PLANE_NCCL_EMULATED, 1000, NULL);
  g_autoptr (GVariant) v = g_variant_ref_sink (pp_plan_to_variant (nccl));
  g_autoptr (GError) error = NULL;
  g_autoptr (PpPlan) back = pp_plan_from_variant (v, nccl->plan_id, &error);
  g_autofree gchar *text = pp_plan_describe (nccl);

  g_assert_no_error (error);
  g_assert_cmpstr (mpi->data_plane, ==, PP_DATA_PLANE_MPI);
  g_assert_false (pp_plan_uses_nccl (mpi));
  g_assert_cmpstr (back->data_plane, ==, PP_DATA_PLANE_NCCL_EMULATED);
  g_assert_true (pp_plan_uses_nccl (back));
  g_assert_cmpuint (mpi->plan_id, !=, nccl->plan_id);
  g_assert_nonnull (strstr (text, "data plane nccl-emulated"));
  g_assert_null (pp_plan_new_full (2, 4, MODEL, "cpu", "carrier-pigeon",
          1000, &error));
  g_assert_error (error, PP_ERROR, PP_ERROR_CONFIG);
  g_assert_nonnull (strstr (error->message, "carrier-pigeon"));
}

static void
test_describe (void)
{
  g_autoptr (PpPlan) plan = pp_plan_new (3, 4, MODEL, 1000, NULL);
  g_autofree gchar *s = pp_plan_describe (plan);

  g_assert_nonnull (strstr (s, "rank 1 steps [0,2)"));
  g_assert_nonnull (strstr (s, "rank 2 steps [2,3)"));
  g_assert_nonnull (strstr (s, "rank 3 steps [3,4)"));
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/plan/slices/explicit", test_slices_explicit);
  g_test_add_func ("/plan/slices/many", test_slices_many);
  g_test_add_func ("/plan/error/too-many-workers", test_too_many_workers);
  g_test_add_func ("/plan/error/zero", test_zero);
  g_test_add_func ("/plan/plan-id", test_plan_id);
  g_test_add_func ("/plan/variant/round-trip", test_round_trip);
  g_test_add_func ("/plan/variant/backend", test_backend);
  g_test_add_func ("/plan/variant/data-plane", test_data_plane);
  g_test_add_func ("/plan/variant/wrong-plan-id", test_wrong_plan_id);
  g_test_add_func ("/plan/variant/tampered-slices", test_tampered_slices);
  g_test_add_func ("/plan/variant/wrong-type", test_wrong_type);
  g_test_add_func ("/plan/variant/invalid", test_invalid_from_variant);
  g_test_add_func ("/plan/describe", test_describe);
  return g_test_run ();
}
