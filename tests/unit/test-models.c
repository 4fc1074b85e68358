/* Unit tests for model URIs, the built-in models and image conversion. */
#include "pp-model.h"
#include "pp-error.h"

#include <math.h>
#include <string.h>

static PpModel *
model_new (const gchar * uri)
{
  g_autoptr (GError) error = NULL;
  PpModel *m = pp_model_new (uri, 4, PP_MODEL_ROLE_ALL, NULL, &error);

  g_assert_no_error (error);
  g_assert_nonnull (m);
  return m;
}

static PpTensor *
tensor_new (guint c, guint h, guint w)
{
  const gint64 shape[4] = { 1, c, h, w };
  g_autoptr (GError) error = NULL;
  PpTensor *t = pp_tensor_new ("sample", PP_DTYPE_F32, 4, shape, &error);

  g_assert_no_error (error);
  return t;
}

static gfloat *
px (PpTensor * t, guint c, guint y, guint x)
{
  return (gfloat *) t->data + ((gsize) c * t->shape[2] + y) * t->shape[3] + x;
}

static void
run_steps (PpModel * m, const guint * steps, guint n, guint n_steps,
    PpTensor * t)
{
  for (guint i = 0; i < n; i++) {
    g_autoptr (GError) error = NULL;
    g_assert_true (pp_model_step (m, steps[i], n_steps, t, &error));
    g_assert_no_error (error);
  }
}

/* URIs */

static void
test_uri_valid (void)
{
  PpModel *m = model_new ("builtin:stamp");

  g_assert_true (m->klass == &pp_model_stamp_class);
  g_assert_cmpstr (m->uri, ==, "builtin:stamp");
  g_assert_cmpfloat (m->step_ms, ==, 0.0);
  pp_model_free (m);

  m = model_new ("builtin:anisotropic?kappa=10&lambda=0.2");
  g_assert_true (m->klass == &pp_model_anisotropic_class);
  g_assert_cmpstr (m->uri, ==, "builtin:anisotropic?kappa=10&lambda=0.2");
  pp_model_free (m);

  m = model_new ("builtin:stamp?step-ms=1.5");
  g_assert_true (m->klass == &pp_model_stamp_class);
  g_assert_cmpfloat (m->step_ms, ==, 1.5);
  pp_model_free (m);

  m = model_new ("builtin:anisotropic?step-ms=0&lambda=0.25");
  g_assert_cmpfloat (m->step_ms, ==, 0.0);
  pp_model_free (m);

  m = model_new (PP_MODEL_DEFAULT_URI);
  g_assert_true (m->klass == &pp_model_anisotropic_class);
  pp_model_free (m);
}

static void
assert_model_error (const gchar * uri, const gchar * part)
{
  g_autoptr (GError) error = NULL;
  PpModel *m = pp_model_new (uri, 4, PP_MODEL_ROLE_ALL, NULL, &error);

  g_assert_null (m);
  g_assert_error (error, PP_ERROR, PP_ERROR_MODEL);
  if (part != NULL && strstr (error->message, part) == NULL)
    g_error ("%s: expected '%s' in: %s", uri, part, error->message);
}

static void
test_uri_invalid (void)
{
  assert_model_error ("builtin:nosuch", "nosuch");
  assert_model_error ("builtin:", NULL);
  assert_model_error ("onnx:model.onnx", "onnx:model.onnx");
  assert_model_error (NULL, NULL);
  assert_model_error ("builtin:stamp?bogus=1", "bogus");
  /* kappa belongs to anisotropic, not stamp. */
  assert_model_error ("builtin:stamp?kappa=1", "kappa");
  assert_model_error ("builtin:stamp?x", "'x'");
  assert_model_error ("builtin:stamp?=1", "'=1'");
  assert_model_error ("builtin:stamp?step-ms=", "step-ms=");
  assert_model_error ("builtin:stamp?step-ms=1&&", NULL);
  assert_model_error ("builtin:anisotropic?lambda=0.5", "lambda");
  assert_model_error ("builtin:anisotropic?lambda=0.5", "0.5");
  assert_model_error ("builtin:anisotropic?lambda=-0.1", "lambda");
  assert_model_error ("builtin:anisotropic?kappa=0", "kappa");
  assert_model_error ("builtin:anisotropic?kappa=abc", "abc");
  assert_model_error ("builtin:stamp?step-ms=-1", "step-ms");
  assert_model_error ("builtin:stamp?step-ms=1.5ms", "1.5ms");
  assert_model_error ("builtin:stamp?step-ms=nan", "step-ms");
  assert_model_error ("builtin:stamp?step-ms=inf", "step-ms");
}

/* builtin:stamp */

/* The map documented in pp-stamp.h, written out again here so that the
 * test does not share the implementation. */
static guint
ref_stamp (guint k, guint c, guint v)
{
  guint a = 2 * (k % 128) + 3;
  guint b = (37 * k + 101 * c + 11) % 256;

  return (a * v + b) % 256;
}

/* [1, 3, 16, 16]: every channel holds every value 0..255 once. */
static PpTensor *
all_values (void)
{
  PpTensor *t = tensor_new (3, 16, 16);

  for (guint c = 0; c < 3; c++)
    for (guint i = 0; i < 256; i++)
      *px (t, c, i / 16, i % 16) = (gfloat) ((i + 85 * c) % 256);
  return t;
}

static void
test_stamp_schedule (void)
{
  g_autoptr (PpModel) m = model_new ("builtin:stamp");
  g_autoptr (PpTensor) in = all_values ();
  g_autoptr (PpTensor) out = all_values ();
  /* 130 steps so that a(k) wraps at k = 128. */
  const guint n_steps = 130;
  g_autofree guint *order = g_new (guint, n_steps);

  for (guint k = 0; k < n_steps; k++)
    order[k] = k;
  run_steps (m, order, n_steps, n_steps, out);
  for (guint c = 0; c < 3; c++) {
    for (guint i = 0; i < 256; i++) {
      guint v = (guint) *px (in, c, i / 16, i % 16);
      for (guint k = 0; k < n_steps; k++)
        v = ref_stamp (k, c, v);
      g_assert_cmpfloat (*px (out, c, i / 16, i % 16), ==, (gfloat) v);
    }
  }
}

static gboolean
tensors_equal (const PpTensor * a, const PpTensor * b)
{
  return a->nbytes == b->nbytes && memcmp (a->data, b->data, a->nbytes) == 0;
}

/* One step of @m on all_values: the value at channel 0, position 0. */
static gfloat
first_value_after_step (PpModel * m)
{
  g_autoptr (PpTensor) t = all_values ();
  const guint step0[] = { 0 };

  run_steps (m, step0, 1, 4, t);
  return *px (t, 0, 0, 0);
}

/* Live settings: a check changes nothing, an update changes the map; a
 * parameter left out goes back to its default; start-only parameters,
 * another model and unknown or out-of-range values are refused, leaving
 * the model as it was. */
/* Live settings that change only the model URI's own parameters. */
static const PpSettings *
settings_of (const gchar * uri)
{
  static PpSettings s;

  pp_settings_init (&s);
  s.model = (gchar *) uri;
  return &s;
}

static void
test_update (void)
{
  g_autoptr (PpModel) m = model_new ("builtin:stamp?mark=5");
  const gfloat v0 = (gfloat) ((ref_stamp (0, 0, 0) + 5) % 256);
  const struct
  {
    const gchar *uri;
    const gchar *needle;
  } bad[] = {
    {"builtin:stamp?mark=256", "mark"},
    {"builtin:stamp?mark=1.5", "whole number"},
    {"builtin:stamp?bogus=1", "no live parameter 'bogus'"},
    {"builtin:stamp?cuda-graphs=1", "cannot change while the model runs"},
    {"builtin:stamp?frame-batch=2", "frame-batch=2 cannot change while"},
    {"builtin:anisotropic", "needs a new one"},
    {"builtin:stamp?mark", "key=value"},
  };

  g_assert_cmpfloat (first_value_after_step (m), ==, v0);
  for (guint i = 0; i < G_N_ELEMENTS (bad); i++) {
    g_autoptr (GError) error = NULL;

    g_assert_false (pp_model_check_update (m, settings_of (bad[i].uri), NULL, &error));
    g_assert_nonnull (strstr (error->message, bad[i].needle));
    g_clear_error (&error);
    g_assert_false (pp_model_update (m, settings_of (bad[i].uri), NULL, &error));
    g_assert_nonnull (error);
    g_assert_cmpfloat (first_value_after_step (m), ==, v0);
  }
  {
    g_autoptr (GError) error = NULL;

    g_assert_true (pp_model_check_update (m, settings_of ("builtin:stamp?mark=9"), NULL, &error));
    g_assert_cmpfloat (first_value_after_step (m), ==, v0);
    g_assert_true (pp_model_update (m, settings_of ("builtin:stamp?mark=9&step-ms=1"), NULL, &error));
    g_assert_no_error (error);
    g_assert_cmpfloat (m->step_ms, ==, 1.0);
    g_assert_cmpfloat (first_value_after_step (m), ==,
        (gfloat) ((ref_stamp (0, 0, 0) + 9) % 256));
    g_assert_true (pp_model_update (m, settings_of ("builtin:stamp"), NULL, &error));
    g_assert_cmpfloat (m->step_ms, ==, 0.0);
    g_assert_cmpfloat (first_value_after_step (m), ==,
        (gfloat) ref_stamp (0, 0, 0));
  }
}

/* The anisotropic model's kappa and lambda are live: an update gives what
 * a model started with them gives. */
static void
test_update_anisotropic (void)
{
  g_autoptr (PpModel) m = model_new ("builtin:anisotropic");
  g_autoptr (PpModel) fresh = model_new ("builtin:anisotropic?kappa=3&"
      "lambda=0.1");
  g_autoptr (GError) error = NULL;
  g_autoptr (PpTensor) a = all_values ();
  g_autoptr (PpTensor) b = all_values ();
  g_autoptr (PpTensor) c = all_values ();
  const guint step0[] = { 0 };

  run_steps (m, step0, 1, 4, a);
  g_assert_false (pp_model_update (m, settings_of ("builtin:anisotropic?lambda=0.3"), NULL, &error));
  g_clear_error (&error);
  g_assert_true (pp_model_update (m, settings_of ("builtin:anisotropic?kappa=3&"
          "lambda=0.1"), NULL, &error));
  run_steps (m, step0, 1, 4, b);
  run_steps (fresh, step0, 1, 4, c);
  g_assert_false (tensors_equal (a, b));
  g_assert_true (tensors_equal (b, c));
}

static void
test_stamp_order (void)
{
  g_autoptr (PpModel) m = model_new ("builtin:stamp");
  g_autoptr (PpTensor) good = all_values ();
  g_autoptr (PpTensor) swapped = all_values ();
  g_autoptr (PpTensor) skipped = all_values ();
  g_autoptr (PpTensor) twice = all_values ();
  static const guint in_order[] = { 0, 1, 2, 3, 4, 5 };
  static const guint swap[] = { 0, 1, 3, 2, 4, 5 };
  static const guint skip[] = { 0, 1, 2, 4, 5 };
  static const guint dup[] = { 0, 1, 2, 2, 4, 5 };

  run_steps (m, in_order, G_N_ELEMENTS (in_order), 6, good);
  run_steps (m, swap, G_N_ELEMENTS (swap), 6, swapped);
  run_steps (m, skip, G_N_ELEMENTS (skip), 6, skipped);
  run_steps (m, dup, G_N_ELEMENTS (dup), 6, twice);
  g_assert_false (tensors_equal (good, swapped));
  g_assert_false (tensors_equal (good, skipped));
  g_assert_false (tensors_equal (good, twice));
}

/* Every step is a bijection on 0..255: no information is lost. */
static void
test_stamp_bijection (void)
{
  g_autoptr (PpModel) m = model_new ("builtin:stamp");
  g_autoptr (PpTensor) t = all_values ();

  for (guint k = 0; k < 4; k++) {
    g_assert_true (pp_model_step (m, k, 4, t, NULL));
    for (guint c = 0; c < 3; c++) {
      guint seen[256] = { 0 };
      for (guint i = 0; i < 256; i++) {
        gfloat v = *px (t, c, i / 16, i % 16);
        g_assert_cmpfloat (v, >=, 0);
        g_assert_cmpfloat (v, <=, 255);
        seen[(guint) v]++;
      }
      for (guint v = 0; v < 256; v++)
        g_assert_cmpuint (seen[v], ==, 1);
    }
  }
}

static void
test_step_errors (void)
{
  g_autoptr (PpModel) m = model_new ("builtin:stamp");
  g_autoptr (PpModel) a = model_new ("builtin:anisotropic");
  g_autoptr (PpTensor) t = all_values ();
  const gint64 shape[2] = { 16, 16 };
  g_autoptr (PpTensor) flat = pp_tensor_new ("sample", PP_DTYPE_F32, 2, shape,
      NULL);
  g_autoptr (PpTensor) bytes = NULL;
  const gint64 shape4[4] = { 1, 3, 4, 4 };
  g_autoptr (GError) error = NULL;

  g_assert_false (pp_model_step (m, 4, 4, t, &error));
  g_assert_error (error, PP_ERROR, PP_ERROR_CONFIG);
  g_clear_error (&error);
  g_assert_false (pp_model_step (m, 0, 4, flat, &error));
  g_assert_error (error, PP_ERROR, PP_ERROR_SHAPE);
  g_clear_error (&error);
  g_assert_false (pp_model_step (a, 0, 4, flat, &error));
  g_assert_error (error, PP_ERROR, PP_ERROR_SHAPE);
  g_clear_error (&error);
  bytes = pp_tensor_new ("sample", PP_DTYPE_U8, 4, shape4, NULL);
  g_assert_false (pp_model_step (a, 0, 4, bytes, &error));
  g_assert_error (error, PP_ERROR, PP_ERROR_SHAPE);
}

/* Three samples at @steps in one batched pass of @m: each gets what its
 * step gives it alone.  The samples are left in @out (three of them). */
static void
assert_batch_as_alone (PpModel * m, const guint steps[3], PpTensor ** out)
{
  g_autoptr (GError) error = NULL;

  for (guint i = 0; i < 3; i++)
    out[i] = all_values ();
  g_assert_true (pp_model_steps_batch (m, 3, out, steps, 4, &error));
  g_assert_no_error (error);
  for (guint i = 0; i < 3; i++) {
    g_autoptr (PpTensor) alone = all_values ();

    g_assert_true (pp_model_step (m, steps[i], 4, alone, NULL));
    g_assert_true (tensors_equal (out[i], alone));
  }
}

/* A stream batch: each sample gets what its step gives it alone; a step
 * outside the schedule is an error that steps nothing; stream-batch is a
 * parameter of every model, which the load options add to built-in ones
 * too. */
static void
test_steps_batch (void)
{
  g_autoptr (PpModel) m = model_new ("builtin:stamp?stream-batch=1");
  PpTensor *samples[3];
  const guint steps[3] = { 2, 1, 0 };
  const guint outside[3] = { 2, 4, 0 };
  const PpModelLoad load = { .stream_batch = TRUE };
  g_autofree gchar *uri = pp_model_uri_for_load ("builtin:stamp", &load);
  g_autoptr (PpTensor) before = NULL;
  g_autoptr (GError) error = NULL;

  g_assert_true (m->stream_batch);
  g_assert_cmpstr (uri, ==, "builtin:stamp?stream-batch=1");
  assert_batch_as_alone (m, steps, samples);
  g_assert_false (tensors_equal (samples[0], samples[1]));

  /* What samples[0] holds: its step alone. */
  before = all_values ();
  g_assert_true (pp_model_step (m, steps[0], 4, before, NULL));
  g_assert_false (pp_model_steps_batch (m, 3, samples, outside, 4, &error));
  g_assert_error (error, PP_ERROR, PP_ERROR_CONFIG);
  g_assert_true (tensors_equal (samples[0], before));
  for (guint i = 0; i < 3; i++)
    pp_tensor_free (samples[i]);
}

/* frame-batch: several samples at one step give each the bytes of its
 * step alone, up to frame-batch at each step of the schedule
 * (pp_model_batch_max); the load options write it only above 1; a value
 * outside 1–8 or not whole is refused, naming it. */
static void
test_frame_batch (void)
{
  g_autoptr (PpModel) m = model_new ("builtin:stamp?frame-batch=2");
  g_autoptr (PpModel) one = model_new ("builtin:stamp");
  PpTensor *samples[3];
  const guint steps[3] = { 1, 1, 0 };
  const PpModelLoad load = { .stream_batch = TRUE, .frame_batch = 3 };
  const PpModelLoad single = { .frame_batch = 1 };
  g_autofree gchar *uri = pp_model_uri_for_load ("builtin:stamp", &load);
  g_autofree gchar *plain = pp_model_uri_for_load ("builtin:stamp",
      &single);
  static const gchar *const bad[] = {
    "builtin:stamp?frame-batch=0", "builtin:stamp?frame-batch=9",
    "builtin:stamp?frame-batch=1.5", "builtin:stamp?frame-batch=two",
  };

  g_assert_cmpuint (m->frame_batch, ==, 2);
  g_assert_cmpuint (pp_model_batch_max (m), ==, 8);
  g_assert_cmpuint (one->frame_batch, ==, 1);
  g_assert_cmpuint (pp_model_batch_max (one), ==, 4);
  g_assert_cmpstr (uri, ==, "builtin:stamp?stream-batch=1&frame-batch=3");
  g_assert_cmpstr (plain, ==, "builtin:stamp");
  assert_batch_as_alone (m, steps, samples);
  g_assert_true (tensors_equal (samples[0], samples[1]));
  for (guint i = 0; i < 3; i++)
    pp_tensor_free (samples[i]);
  for (guint i = 0; i < G_N_ELEMENTS (bad); i++) {
    g_autoptr (GError) refused = NULL;
    g_autoptr (PpModel) none = pp_model_new (bad[i], 4, PP_MODEL_ROLE_ALL,
        NULL, &refused);

    g_assert_null (none);
    g_assert_error (refused, PP_ERROR, PP_ERROR_MODEL);
    g_assert_nonnull (strstr (refused->message, "frame-batch"));
  }
}

/* cuda-graphs: without the parameter the backend decides, on for a
 * backend named cuda alone (a copy of the CPU backend under that name
 * stands in for it here); given, it decides; the load options write it
 * only when set. */
static void
test_graphs_default (void)
{
  g_autoptr (GError) error = NULL;
  PpBackend *cpu = pp_backend_get (PP_BACKEND_CPU, &error);
  PpBackend named_cuda;
  const struct
  {
    const gchar *uri;
    gboolean on_cpu, on_cuda;
  } cases[] = {
    {"builtin:stamp", FALSE, TRUE},
    {"builtin:stamp?cuda-graphs=1", TRUE, TRUE},
    {"builtin:stamp?cuda-graphs=0", FALSE, FALSE},
  };
  const PpModelLoad unset = { NULL, NULL, -1 };
  const PpModelLoad off = { NULL, NULL, 0 };
  const PpModelLoad on = { NULL, NULL, 1 };
  g_autofree gchar *u_unset = pp_model_uri_for_load ("/m", &unset);
  g_autofree gchar *u_off = pp_model_uri_for_load ("/m", &off);
  g_autofree gchar *u_on = pp_model_uri_for_load ("/m", &on);

  g_assert_no_error (error);
  named_cuda = *cpu;
  named_cuda.name = PP_BACKEND_CUDA;
  for (guint i = 0; i < G_N_ELEMENTS (cases); i++)
    for (guint b = 0; b < 2; b++) {
      g_autoptr (PpModel) m = pp_model_new (cases[i].uri, 4,
          PP_MODEL_ROLE_ALL, b ? &named_cuda : cpu, &error);

      g_assert_no_error (error);
      g_assert_cmpint (m->graphs, ==, b ? cases[i].on_cuda
          : cases[i].on_cpu);
    }
  g_assert_cmpstr (u_unset, ==, "/m");
  g_assert_cmpstr (u_off, ==, "/m?cuda-graphs=0");
  g_assert_cmpstr (u_on, ==, "/m?cuda-graphs=1");
}

static void
test_step_ms (void)
{
  g_autoptr (PpModel) m = model_new ("builtin:stamp?step-ms=20");
  g_autoptr (PpTensor) t = all_values ();
  gint64 start = g_get_monotonic_time ();

  g_assert_true (pp_model_step (m, 0, 1, t, NULL));
  g_assert_cmpint (g_get_monotonic_time () - start, >=, 18000);
}

/* builtin:anisotropic */

static gdouble
variance (PpTensor * t, guint c, guint x0, guint x1)
{
  gdouble sum = 0, sum2 = 0;
  guint n = 0;

  for (guint y = 0; y < t->shape[2]; y++)
    for (guint x = x0; x < x1; x++) {
      gdouble v = *px (t, c, y, x);
      sum += v;
      sum2 += v * v;
      n++;
    }
  return sum2 / n - (sum / n) * (sum / n);
}

static void
run4 (PpModel * m, PpTensor * t)
{
  static const guint steps[] = { 0, 1, 2, 3 };

  run_steps (m, steps, 4, 4, t);
}

static void
test_aniso_constant (void)
{
  g_autoptr (PpModel) m = model_new ("builtin:anisotropic");
  g_autoptr (PpTensor) t = tensor_new (3, 9, 13);

  for (guint c = 0; c < 3; c++)
    for (guint y = 0; y < 9; y++)
      for (guint x = 0; x < 13; x++)
        *px (t, c, y, x) = 40.f + 50.f * c;
  run4 (m, t);
  /* Borders reflect: nothing flows in or out, not even at the edges. */
  for (guint c = 0; c < 3; c++)
    for (guint y = 0; y < 9; y++)
      for (guint x = 0; x < 13; x++)
        g_assert_cmpfloat (*px (t, c, y, x), ==, 40.f + 50.f * c);
}

static void
test_aniso_noise (void)
{
  g_autoptr (PpModel) m = model_new ("builtin:anisotropic");
  g_autoptr (PpTensor) t = tensor_new (3, 24, 24);
  g_autoptr (GRand) rand = g_rand_new_with_seed (4242);
  gdouble before[3], sum_before = 0, sum_after = 0;

  for (guint c = 0; c < 3; c++)
    for (guint y = 0; y < 24; y++)
      for (guint x = 0; x < 24; x++)
        *px (t, c, y, x) = (gfloat) g_rand_double_range (rand, 0, 255);
  for (guint c = 0; c < 3; c++)
    before[c] = variance (t, c, 0, 24);
  for (gsize i = 0; i < t->nbytes / 4; i++)
    sum_before += ((gfloat *) t->data)[i];
  run4 (m, t);
  for (guint c = 0; c < 3; c++) {
    gdouble after = variance (t, c, 0, 24);
    g_test_message ("channel %u variance %.1f -> %.1f", c, before[c], after);
    g_assert_cmpfloat (after, <, 0.9 * before[c]);
  }
  /* Diffusion with reflecting borders conserves the mean. */
  for (gsize i = 0; i < t->nbytes / 4; i++)
    sum_after += ((gfloat *) t->data)[i];
  g_assert_cmpfloat (fabs (sum_after - sum_before) / (t->nbytes / 4), <, 0.01);
}

/* Left half 0, right half 200, each with ±5 noise when @rand is set. */
static PpTensor *
edge_image (GRand * rand)
{
  PpTensor *t = tensor_new (3, 12, 16);

  for (guint c = 0; c < 3; c++)
    for (guint y = 0; y < 12; y++)
      for (guint x = 0; x < 16; x++)
        *px (t, c, y, x) = (x < 8 ? 0.f : 200.f)
            + (rand ? (gfloat) g_rand_double_range (rand, -5, 5) : 0.f);
  return t;
}

static gdouble
edge_contrast (PpTensor * t, guint c)
{
  gdouble min = G_MAXDOUBLE;

  for (guint y = 0; y < t->shape[2]; y++)
    min = MIN (min, *px (t, c, y, 8) - *px (t, c, y, 7));
  return min;
}

static void
test_aniso_edge (void)
{
  g_autoptr (PpModel) m = model_new ("builtin:anisotropic");
  g_autoptr (PpTensor) clean = edge_image (NULL);
  g_autoptr (GRand) rand = g_rand_new_with_seed (7);
  g_autoptr (PpTensor) noisy = edge_image (rand);
  gdouble flat_before[3][2];

  for (guint c = 0; c < 3; c++) {
    /* Columns away from the edge: what the edge itself bleeds does not
     * count as noise. */
    flat_before[c][0] = variance (noisy, c, 0, 5);
    flat_before[c][1] = variance (noisy, c, 11, 16);
  }
  run4 (m, clean);
  run4 (m, noisy);
  for (guint c = 0; c < 3; c++) {
    gdouble left = variance (noisy, c, 0, 5);
    gdouble right = variance (noisy, c, 11, 16);

    g_test_message ("channel %u edge %.1f (noisy %.1f), flat variance "
        "%.2f -> %.2f, %.2f -> %.2f", c, edge_contrast (clean, c),
        edge_contrast (noisy, c), flat_before[c][0], left, flat_before[c][1],
        right);
    g_assert_cmpfloat (edge_contrast (clean, c), >, 150);
    g_assert_cmpfloat (edge_contrast (noisy, c), >, 150);
    g_assert_cmpfloat (left, <, 0.5 * flat_before[c][0]);
    g_assert_cmpfloat (right, <, 0.5 * flat_before[c][1]);
  }
}

/* One step on a two-pixel image, against the formula in the comment of
 * pp-anisotropic.c: I += λ Σ g(∇I) ∇I, g(x) = 1 / (1 + (x/κ)²). */
static void
test_aniso_params (void)
{
  struct
  {
    const gchar *uri;
    gdouble kappa, lambda;
  } cases[] = {
    {"builtin:anisotropic", 24.0, 0.25},
    {"builtin:anisotropic?kappa=10&lambda=0.2", 10.0, 0.2},
    {"builtin:anisotropic?lambda=0.1", 24.0, 0.1},
    {"builtin:anisotropic?lambda=0", 24.0, 0.0},
  };

  for (guint i = 0; i < G_N_ELEMENTS (cases); i++) {
    g_autoptr (PpModel) m = model_new (cases[i].uri);
    g_autoptr (PpTensor) t = tensor_new (1, 1, 2);
    gdouble d = 10.0, k = cases[i].kappa;
    gdouble flow = cases[i].lambda * d / (1 + (d / k) * (d / k));

    *px (t, 0, 0, 0) = 0.f;
    *px (t, 0, 0, 1) = 10.f;
    g_assert_true (pp_model_step (m, 0, 1, t, NULL));
    g_assert_cmpfloat_with_epsilon (*px (t, 0, 0, 0), flow, 1e-4);
    g_assert_cmpfloat_with_epsilon (*px (t, 0, 0, 1), 10.0 - flow, 1e-4);
  }
}

/* Image ↔ tensor */

#define W 5
#define H 3
#define ROW (W * 4 + 7)         /* padded rows */

/* BGRx: R at byte 2, G at 1, B at 0, byte 3 unused. */
static void
bgrx_image (PpImage * img, guint8 * data)
{
  img->data = data;
  img->width = W;
  img->height = H;
  img->row_stride = ROW;
  img->pixel_stride = 4;
  img->offset[0] = 2;
  img->offset[1] = 1;
  img->offset[2] = 0;
}

static gboolean
is_rgb_byte (gsize i)
{
  gsize x = i % ROW;

  return x < W * 4 && x % 4 != 3;
}

static void
test_image_round_trip (void)
{
  guint8 src[H * ROW], dst[H * ROW];
  PpImage a, b;
  g_autoptr (PpTensor) t = NULL;
  g_autoptr (GError) error = NULL;

  for (gsize i = 0; i < sizeof src; i++)
    src[i] = (guint8) (i * 37 + 5);
  bgrx_image (&a, src);
  t = pp_image_to_tensor (&a, "sample", &error);
  g_assert_no_error (error);
  g_assert_true (pp_image_check_tensor (t, W, H, NULL));
  g_assert_cmpstr (t->name, ==, "sample");
  /* Planar R, G, B with the image's values. */
  for (guint y = 0; y < H; y++)
    for (guint x = 0; x < W; x++) {
      const guint8 *p = src + y * ROW + x * 4;
      g_assert_cmpfloat (*px (t, 0, y, x), ==, p[2]);
      g_assert_cmpfloat (*px (t, 1, y, x), ==, p[1]);
      g_assert_cmpfloat (*px (t, 2, y, x), ==, p[0]);
    }

  memset (dst, 0xaa, sizeof dst);
  bgrx_image (&b, dst);
  g_assert_true (pp_image_from_tensor (&b, t, &error));
  g_assert_no_error (error);
  for (gsize i = 0; i < sizeof dst; i++) {
    if (is_rgb_byte (i))
      g_assert_cmpuint (dst[i], ==, src[i]);
    else
      g_assert_cmpuint (dst[i], ==, 0xaa);     /* alpha and padding */
  }
}

static void
test_image_encode_decode (void)
{
  g_autoptr (PpModel) m = model_new ("builtin:stamp");
  guint8 src[H * ROW], dst[H * ROW];
  PpImage a, b;
  g_autoptr (PpTensor) t = NULL;

  for (gsize i = 0; i < sizeof src; i++)
    src[i] = (guint8) (i * 11);
  memcpy (dst, src, sizeof dst);
  bgrx_image (&a, src);
  bgrx_image (&b, dst);
  t = pp_model_encode (m, &a, NULL);
  g_assert_nonnull (t);
  g_assert_cmpstr (t->name, ==, PP_MODEL_SAMPLE_NAME);
  *px (t, 0, 1, 2) = 7.f;
  g_assert_true (pp_model_decode (m, t, &b, NULL));
  for (gsize i = 0; i < sizeof dst; i++)
    if (i != 1 * ROW + 2 * 4 + 2)
      g_assert_cmpuint (dst[i], ==, src[i]);
  g_assert_cmpuint (dst[1 * ROW + 2 * 4 + 2], ==, 7);
}

static void
test_image_check (void)
{
  g_autoptr (PpTensor) t = tensor_new (3, H, W);
  g_autoptr (PpTensor) gray = tensor_new (1, H, W);
  const gint64 shape[4] = { 1, 3, H, W };
  g_autoptr (PpTensor) bytes = pp_tensor_new ("u8", PP_DTYPE_U8, 4, shape,
      NULL);
  g_autoptr (GError) error = NULL;
  guint8 buf[H * ROW];
  PpImage img;

  g_assert_true (pp_image_check_tensor (t, W, H, &error));
  g_assert_no_error (error);
  g_assert_false (pp_image_check_tensor (t, W + 1, H, &error));
  g_assert_error (error, PP_ERROR, PP_ERROR_SHAPE);
  g_clear_error (&error);
  /* Width and height swapped. */
  g_assert_false (pp_image_check_tensor (t, H, W, &error));
  g_assert_error (error, PP_ERROR, PP_ERROR_SHAPE);
  g_clear_error (&error);
  g_assert_false (pp_image_check_tensor (gray, W, H, &error));
  g_assert_error (error, PP_ERROR, PP_ERROR_SHAPE);
  g_clear_error (&error);
  g_assert_false (pp_image_check_tensor (bytes, W, H, &error));
  g_assert_error (error, PP_ERROR, PP_ERROR_SHAPE);
  g_clear_error (&error);

  /* from_tensor refuses a wrong shape without touching the image. */
  memset (buf, 0x55, sizeof buf);
  bgrx_image (&img, buf);
  img.width = W - 1;
  g_assert_false (pp_image_from_tensor (&img, t, &error));
  g_assert_error (error, PP_ERROR, PP_ERROR_SHAPE);
  for (gsize i = 0; i < sizeof buf; i++)
    g_assert_cmpuint (buf[i], ==, 0x55);
}

static void
test_image_clamp_round (void)
{
  static const gfloat values[] = { -5.f, 300.f, 1.6f, 2.4f, 254.6f, -0.4f,
    255.4f, 128.f
  };
  static const guint8 expect[] = { 0, 255, 2, 2, 255, 0, 255, 128 };
#define N_CLAMP 8
  const guint n = N_CLAMP;
  g_autoptr (PpTensor) t = tensor_new (3, 1, n);
  guint8 buf[N_CLAMP * 4];
  /* RGBx, no row padding. */
  PpImage img = { buf, N_CLAMP, 1, N_CLAMP * 4, 4, {0, 1, 2} };

  G_STATIC_ASSERT (G_N_ELEMENTS (values) == N_CLAMP);

  for (guint c = 0; c < 3; c++)
    for (guint x = 0; x < n; x++)
      *px (t, c, 0, x) = values[x];
  memset (buf, 0x11, sizeof buf);
  g_assert_true (pp_image_from_tensor (&img, t, NULL));
  for (guint x = 0; x < n; x++) {
    for (guint c = 0; c < 3; c++)
      g_assert_cmpuint (buf[x * 4 + c], ==, expect[x]);
    g_assert_cmpuint (buf[x * 4 + 3], ==, 0x11);
  }
}

/* What pp_image_from_tensor must write for @v: rintf's nearest integer
 * (ties to even), clamped to 0..255, NaN to 0. */
static guint8
byte_reference (gfloat v)
{
  gfloat r = rintf (v);

  return (guint8) (r > 255.f ? 255.f : (r >= 0.f ? r : 0.f));
}

/* Every kind of float (ties, NaN, infinities, −0, the largest, the
 * subnormal) and a sweep of bit patterns, through RGB, BGRx, xRGB and
 * 5-byte pixels of widths on both sides of the row span the conversion
 * works in, against the formula; the bytes between pixels untouched;
 * those bytes back to floats, each the byte at its offset; and the same
 * through byte planes. */
static void
test_image_bytes_reference (void)
{
  static const gfloat special[] = { 0.5f, 1.5f, 2.5f, 254.5f, 255.5f,
    253.5f, -0.5f, -0.0f, 0.49999997f, 0.50000006f, 127.49999f, 255.49998f,
    256.f, -1.f, 1e-45f, -1e-45f, 3.4e38f, -3.4e38f, 8388607.5f, 16777216.f
  };
  static const struct
  {
    gint width, pixel_stride;
    gint offset[3];
  } layouts[] = {
    {1, 3, {0, 1, 2}}, {511, 4, {2, 1, 0}}, {512, 3, {2, 1, 0}},
    {513, 4, {0, 1, 2}}, {1100, 4, {1, 2, 3}}, {600, 5, {4, 0, 2}},
  };
  const gint height = 3;

  for (guint l = 0; l < G_N_ELEMENTS (layouts); l++) {
    const gint width = layouts[l].width, ps = layouts[l].pixel_stride;
    const gint row_stride = width * ps + 5;
    const gsize plane = (gsize) width * height;
    g_autoptr (PpTensor) t = tensor_new (3, height, width);
    g_autofree guint8 *buf = g_malloc (row_stride * height);
    PpImage img = { buf, width, height, row_stride, ps,
      {layouts[l].offset[0], layouts[l].offset[1], layouts[l].offset[2]}
    };
    gfloat *v = (gfloat *) t->data;
    guint32 bits = 0x3f000000u + l;

    for (gsize i = 0; i < 3 * plane; i++) {
      if (i < G_N_ELEMENTS (special))
        v[i] = special[i];
      else if (i == G_N_ELEMENTS (special))
        v[i] = NAN;
      else if (i == G_N_ELEMENTS (special) + 1)
        v[i] = INFINITY;
      else if (i == G_N_ELEMENTS (special) + 2)
        v[i] = -INFINITY;
      else if (i % 2 == 0)
        v[i] = (gfloat) ((i * 2654435761u) % 6000) / 20.f - 20.f;
      else {
        /* Bit patterns across every exponent, both signs. */
        bits = bits * 1664525u + 1013904223u;
        memcpy (&v[i], &bits, sizeof v[i]);
      }
    }
    memset (buf, 0x5a, row_stride * height);
    g_assert_true (pp_image_from_tensor (&img, t, NULL));
    for (gint y = 0; y < height; y++)
      for (gint x = 0; x < row_stride; x++) {
        const guint8 got = buf[y * row_stride + x];
        gint c = -1;

        for (gint k = 0; k < 3 && x < width * ps; k++)
          if (x % ps == layouts[l].offset[k])
            c = k;
        if (c < 0) {
          g_assert_cmpuint (got, ==, 0x5a);
          continue;
        }
        {
          const gfloat f = v[c * plane + (gsize) y * width + x / ps];

          if (got != byte_reference (f))
            g_error ("width %d, pixel (%d,%d) channel %d: %a gave %u, not "
                "%u", width, x / ps, y, c, f, got, byte_reference (f));
        }
      }
    pp_image_to_tensor_into (&img, t);
    for (gint c = 0; c < 3; c++)
      for (gint y = 0; y < height; y++)
        for (gint x = 0; x < width; x++)
          g_assert_cmpfloat (v[c * plane + (gsize) y * width + x], ==,
              buf[y * row_stride + x * ps + layouts[l].offset[c]]);
    /* The same bytes as planes, and back into an image whose other bytes
     * stay as they were. */
    {
      g_autofree guint8 *planes = g_malloc (3 * plane);
      g_autofree guint8 *again = g_malloc (row_stride * height);
      PpImage other = img;

      pp_image_to_planes (&img, planes);
      for (gint c = 0; c < 3; c++)
        for (gint y = 0; y < height; y++)
          for (gint x = 0; x < width; x++)
            g_assert_cmpuint (planes[c * plane + (gsize) y * width + x], ==,
                buf[y * row_stride + x * ps + layouts[l].offset[c]]);
      memset (again, 0x5a, row_stride * height);
      other.data = again;
      pp_image_from_planes (&other, planes);
      g_assert_cmpmem (again, row_stride * height, buf, row_stride * height);
    }
  }
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/models/uri/valid", test_uri_valid);
  g_test_add_func ("/models/uri/invalid", test_uri_invalid);
  g_test_add_func ("/models/stamp/schedule", test_stamp_schedule);
  g_test_add_func ("/models/stamp/order", test_stamp_order);
  g_test_add_func ("/models/stamp/bijection", test_stamp_bijection);
  g_test_add_func ("/models/step/errors", test_step_errors);
  g_test_add_func ("/models/update/stamp", test_update);
  g_test_add_func ("/models/update/anisotropic", test_update_anisotropic);
  g_test_add_func ("/models/step/step-ms", test_step_ms);
  g_test_add_func ("/models/step/batch", test_steps_batch);
  g_test_add_func ("/models/step/frame-batch", test_frame_batch);
  g_test_add_func ("/models/graphs/default", test_graphs_default);
  g_test_add_func ("/models/anisotropic/constant", test_aniso_constant);
  g_test_add_func ("/models/anisotropic/noise", test_aniso_noise);
  g_test_add_func ("/models/anisotropic/edge", test_aniso_edge);
  g_test_add_func ("/models/anisotropic/params", test_aniso_params);
  g_test_add_func ("/models/image/round-trip", test_image_round_trip);
  g_test_add_func ("/models/image/encode-decode", test_image_encode_decode);
  g_test_add_func ("/models/image/check", test_image_check);
  g_test_add_func ("/models/image/clamp-round", test_image_clamp_round);
  g_test_add_func ("/models/image/bytes-reference",
      test_image_bytes_reference);
  return g_test_run ();
}
