/* ppdiffuse — schedules and the seeded noise generator. */
#include "pp-error.h"
#include "pp-rng.h"
#include "pp-schedule.h"

#include <math.h>

/* Reference values of ᾱ and σ for the SD scaled-linear betas. */
static void
test_alphas_golden (void)
{
  g_autoptr (PpSchedule) s = pp_schedule_new (PP_SCHEDULE_EULER, 1, 1.0,
      NULL, NULL);

  g_assert_nonnull (s);
  g_assert_cmpfloat_with_epsilon (s->alphas_cumprod[999], 0.004660, 2e-6);
  g_assert_cmpfloat_with_epsilon (s->alphas_cumprod[499], 0.277670, 2e-6);
  g_assert_cmpfloat_with_epsilon (s->alphas_cumprod[359], 0.491500, 2e-6);
  g_assert_cmpfloat_with_epsilon (s->alphas_cumprod[99], 0.895463, 2e-6);
  g_assert_cmpuint (s->timesteps[0], ==, 999);
  g_assert_cmpfloat_with_epsilon (s->sigmas[0], 14.6146, 1e-3);
  g_assert_cmpfloat (s->sigmas[1], ==, 0.0);
}

/* Trailing spacing: 4 steps → 999, 749, 499, 249; strength picks the tail. */
static void
test_euler_trailing (void)
{
  static const guint four[] = { 999, 749, 499, 249 };
  g_autoptr (PpSchedule) full = pp_schedule_new (PP_SCHEDULE_EULER, 4, 1.0,
      NULL, NULL);
  g_autoptr (PpSchedule) half = pp_schedule_new (PP_SCHEDULE_EULER, 1, 0.5,
      NULL, NULL);

  for (guint k = 0; k < 4; k++)
    g_assert_cmpuint (full->timesteps[k], ==, four[k]);
  /* SD-Turbo img2img: 2 steps at strength 0.5 run one step at t = 499. */
  g_assert_cmpuint (half->timesteps[0], ==, 499);
}

static void
test_lcm_index_list (void)
{
  g_autoptr (GArray) list = g_array_new (FALSE, FALSE, sizeof (guint));
  guint idx[] = { 32, 45 };
  g_autoptr (PpSchedule) s = NULL;
  g_autoptr (GError) error = NULL;

  g_array_append_vals (list, idx, 2);
  s = pp_schedule_new (PP_SCHEDULE_LCM, 2, 1.0, list, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (s->timesteps[0], ==, 359);
  g_assert_cmpuint (s->timesteps[1], ==, 99);
  g_assert_true (pp_schedule_step_needs_noise (s, 0));
  g_assert_false (pp_schedule_step_needs_noise (s, 1));
  /* Length must match the steps, and only LCM takes a list. */
  g_assert_null (pp_schedule_new (PP_SCHEDULE_LCM, 3, 1.0, list, &error));
  g_assert_error (error, PP_ERROR, PP_ERROR_CONFIG);
  g_clear_error (&error);
  g_assert_null (pp_schedule_new (PP_SCHEDULE_EULER, 2, 1.0, list, &error));
  g_assert_error (error, PP_ERROR, PP_ERROR_CONFIG);
}

/* @n floats of @host on the backend under test ($PPDIFFUSE_BACKEND): the
 * schedule's updates are ops on device memory. */
static gfloat *
device_copy (const gfloat * host, gsize n)
{
  PpBackend *be = pp_backend_default ();
  gfloat *dev = pp_backend_alloc (be, n * sizeof (gfloat), NULL);

  pp_backend_upload (be, dev, host, n * sizeof (gfloat));
  return dev;
}

static void
device_take (gfloat * host, gfloat * dev, gsize n)
{
  PpBackend *be = pp_backend_default ();

  pp_backend_download (be, host, dev, n * sizeof (gfloat));
  pp_backend_free (be, dev);
}

/* LCM with a perfect noise prediction recovers the clean latents on the last
 * step (c_skip ≈ 0, c_out ≈ 1 at these timesteps). */
static void
test_lcm_recovers_clean (void)
{
  g_autoptr (PpSchedule) s = pp_schedule_new (PP_SCHEDULE_LCM, 1, 0.5, NULL,
      NULL);
  gfloat z[4] = { 0.5f, -1.0f, 2.0f, 0.0f }, x[4], eps[4] = { 1, -1, 0.5f, 2 };
  gfloat *dx = device_copy (z, 4), *deps = device_copy (eps, 4);

  pp_schedule_add_noise (s, pp_backend_default (), dx, deps, 4);
  pp_schedule_step (s, pp_backend_default (), 0, dx, deps, NULL, 4);
  device_take (x, dx, 4);
  pp_backend_free (pp_backend_default (), deps);
  for (guint i = 0; i < 4; i++)
    g_assert_cmpfloat_with_epsilon (x[i], z[i], 1e-3);
}

/* Euler with the true noise walks the sample back to the clean latents. */
static void
test_euler_recovers_clean (void)
{
  g_autoptr (PpSchedule) s = pp_schedule_new (PP_SCHEDULE_EULER, 2, 1.0,
      NULL, NULL);
  gfloat z[3] = { 0.25f, -0.5f, 1.0f }, x[3], eps[3] = { 0.3f, -2.0f, 1.0f };
  gfloat *dx = device_copy (z, 3), *deps = device_copy (eps, 3);
  gfloat noised;

  pp_schedule_add_noise (s, pp_backend_default (), dx, deps, 3);
  pp_backend_download (pp_backend_default (), &noised, dx, sizeof noised);
  g_assert_cmpfloat (fabsf (noised - z[0]), >, 1.0f);
  for (guint k = 0; k < 2; k++)
    pp_schedule_step (s, pp_backend_default (), k, dx, deps, NULL, 3);
  device_take (x, dx, 3);
  pp_backend_free (pp_backend_default (), deps);
  for (guint i = 0; i < 3; i++)
    g_assert_cmpfloat_with_epsilon (x[i], z[i], 1e-4);
}

static void
test_bad_strength (void)
{
  g_autoptr (GError) error = NULL;

  g_assert_null (pp_schedule_new (PP_SCHEDULE_EULER, 2, 0.0, NULL, &error));
  g_assert_error (error, PP_ERROR, PP_ERROR_CONFIG);
}

/* The generator is a fixed function of (seed, stream), with normal moments. */
static void
test_rng (void)
{
  PpRng a, b, c;
  enum { N = 20000 };
  g_autofree gfloat *x = g_new (gfloat, N), *y = g_new (gfloat, N);
  gdouble mean = 0, var = 0;

  pp_rng_init (&a, 42, 0);
  pp_rng_init (&b, 42, 0);
  pp_rng_init (&c, 42, 1);
  pp_rng_fill_normal (&a, x, N);
  pp_rng_fill_normal (&b, y, N);
  g_assert_cmpmem (x, N * sizeof (gfloat), y, N * sizeof (gfloat));
  pp_rng_fill_normal (&c, y, N);
  g_assert_cmpfloat (x[0], !=, y[0]);
  for (guint i = 0; i < N; i++)
    mean += x[i];
  mean /= N;
  for (guint i = 0; i < N; i++)
    var += (x[i] - mean) * (x[i] - mean);
  var /= N;
  g_assert_cmpfloat (fabs (mean), <, 0.03);
  g_assert_cmpfloat (fabs (var - 1.0), <, 0.05);
  /* PCG32 reference: seed 42, stream 54 starts 0xa15c02b7 (O'Neill's demo). */
  pp_rng_init (&a, 42, 54);
  g_assert_cmphex (pp_rng_next_u32 (&a), ==, 0xa15c02b7);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/schedule/alphas-golden", test_alphas_golden);
  g_test_add_func ("/schedule/euler-trailing", test_euler_trailing);
  g_test_add_func ("/schedule/lcm-index-list", test_lcm_index_list);
  g_test_add_func ("/schedule/lcm-recovers-clean", test_lcm_recovers_clean);
  g_test_add_func ("/schedule/euler-recovers-clean", test_euler_recovers_clean);
  g_test_add_func ("/schedule/bad-strength", test_bad_strength);
  g_test_add_func ("/rng/pcg32", test_rng);
  return g_test_run ();
}
