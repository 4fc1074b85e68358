/* ppdiffuse — gpu-bench --norms: the norms of an SD-Turbo UNet step at
 * 512×512, each shape alone.
 *
 * A step's 61 group norms and 48 layer norms took a quarter of its time on
 * an H200 (docs/perf.md), far from what their bytes take.  This times each
 * shape the step has (its count beside it) on 16-bit channels-last
 * activations, the way the backend was told to run norms
 * (PPDIFFUSE_CUDA_GROUP_NORM, PPDIFFUSE_CUDA_LAYER_NORM), as a graph of
 * NORM_CALLS calls of the op, the best of the repeats: µs a call, the rate
 * its bytes moved at and how far that is from the device's bandwidth, and
 * a step's norms in all.  Run once per way, it says which way is faster
 * for which shape. */
#include "gpu-bench-norms.h"

#include "gpu-bench-trace.h"
#include "pp-error.h"
#include "pp-ops.h"

#include <stdio.h>

/* Calls of the op in one graph. */
#define NORM_CALLS 20
#define GROUPS 32
#define EPS 1e-5f

/* A step's norm of one shape: a group norm of @c channels over @side² pixels
 * (with SiLU: a ResNet's, a transformer's without), or a layer norm of
 * @side² rows of @c values; @count of them in a step. */
typedef struct
{
  gboolean layer;
  gint c, side;
  gboolean silu;
  guint count;
} NormShape;

/* SD-Turbo's (SD 2.1's) UNet at a 64×64 latent: the down blocks' ResNets
 * and transformers at 64², 32², 16² and 8², the mid block's, the up
 * blocks' (their ResNets' first norms over the skip's channels too), and
 * conv_norm_out; each transformer's three layer norms. */
static const NormShape step_norms[] = {
  {FALSE, 320, 64, TRUE, 8}, {FALSE, 320, 64, FALSE, 5},
  {FALSE, 640, 64, TRUE, 2}, {FALSE, 960, 64, TRUE, 1},
  {FALSE, 320, 32, TRUE, 1}, {FALSE, 640, 32, TRUE, 6},
  {FALSE, 640, 32, FALSE, 5}, {FALSE, 960, 32, TRUE, 1},
  {FALSE, 1280, 32, TRUE, 1}, {FALSE, 1920, 32, TRUE, 1},
  {FALSE, 640, 16, TRUE, 1}, {FALSE, 1280, 16, TRUE, 6},
  {FALSE, 1280, 16, FALSE, 5}, {FALSE, 1920, 16, TRUE, 1},
  {FALSE, 2560, 16, TRUE, 2}, {FALSE, 1280, 8, TRUE, 11},
  {FALSE, 1280, 8, FALSE, 1}, {FALSE, 2560, 8, TRUE, 3},
  {TRUE, 320, 64, FALSE, 15}, {TRUE, 640, 32, FALSE, 15},
  {TRUE, 1280, 16, FALSE, 15}, {TRUE, 1280, 8, FALSE, 3},
};

/* The same ops at a few small shapes: the program's paths, quickly. */
static const NormShape small_norms[] = {
  {FALSE, 64, 8, TRUE, 2}, {FALSE, 64, 8, FALSE, 1},
  {TRUE, 64, 8, FALSE, 3},
};

typedef struct
{
  PpBackend *be;
  const NormShape *shape;
  PpView x, gamma, beta;
  PpOut y;
} NormRun;

static gboolean
norm_calls (gpointer data, GError ** error)
{
  const NormRun *r = data;
  const NormShape *s = r->shape;
  const gint hw = s->side * s->side;

  (void) error;
  for (guint i = 0; i < NORM_CALLS; i++) {
    if (s->layer)
      pp_layer_norm (r->be, r->x, hw, s->c, EPS, r->gamma, r->beta, r->y);
    else
      pp_group_norm (r->be, r->x, pp_view_none (), 1, s->c, hw, GROUPS, EPS,
          r->gamma, r->beta, s->silu, r->y);
  }
  return TRUE;
}

/* @n values in [-2, 2) on @be as @dtype; *@owned to free. */
static PpView
random_values (PpBackend * be, GRand * rand, gsize n, PpDType dtype,
    gpointer * owned)
{
  g_autofree gfloat *host = g_new (gfloat, n);
  g_autoptr (GError) error = NULL;
  PpView v;

  for (gsize i = 0; i < n; i++)
    host[i] = (gfloat) g_rand_double_range (rand, -2.0, 2.0);
  v = pp_backend_upload_weights (be, host, n, dtype, owned, &error);
  if (v.data == NULL)
    g_error ("gpu-bench: %s", error->message);
  return v;
}

typedef struct
{
  PpBackend *be;
  gpointer graph;
} GraphLaunch;

static gboolean
launch_graph (gpointer data, GError ** error)
{
  const GraphLaunch *l = data;

  return pp_backend_graph_launch (l->be, l->graph, error);
}

/* One launch of @graph traced, into @out: each kernel name's µs a call
 * of the op (NORM_CALLS of them), in the order the first call ran them. */
static void
trace_kernels (PpBackend * be, gpointer graph, GString * out)
{
  GraphLaunch l = { be, graph };
  g_autoptr (GError) error = NULL;
  g_autoptr (GArray) spans = pp_backend_trace (be, launch_graph, &l, &error);
  g_autoptr (GArray) rows = NULL;

  if (spans == NULL) {
    g_string_append_printf (out, "    kernels: not traced: %s\n",
        error->message);
    return;
  }
  rows = pp_trace_rows (spans);
  g_string_append (out, "    kernels (µs a call, device time):");
  for (guint j = 0; j < rows->len; j++) {
    const PpTraceRow *r = &g_array_index (rows, PpTraceRow, j);

    g_string_append_printf (out, "%s %s %.2f", j == 0 ? "" : ",", r->name,
        r->ns / 1e3 / NORM_CALLS);
  }
  g_string_append (out, "\n");
}

/* Seconds a call of @s's op takes in a graph of NORM_CALLS, the best of
 * @repeats launches (then, where @trace is not NULL, one more launch
 * traced into it); < 0 with @error where the backend has no graphs or the
 * capture failed. */
static gdouble
time_shape (PpBackend * be, const NormShape * s, PpDType dtype,
    guint repeats, GString * trace, GError ** error)
{
  const gsize n = (gsize) s->c * s->side * s->side;
  g_autoptr (GRand) rand = g_rand_new_with_seed (5);
  gpointer x_owned, gamma_owned, beta_owned, y;
  NormRun r = { be, s };
  gpointer graph = NULL;
  gdouble best = -1;

  r.x = pp_view_laid (random_values (be, rand, n, dtype, &x_owned),
      s->layer ? PP_LAYOUT_NCHW : PP_LAYOUT_NHWC);
  r.gamma = random_values (be, rand, s->c, dtype, &gamma_owned);
  r.beta = random_values (be, rand, s->c, dtype, &beta_owned);
  y = pp_backend_alloc (be, n * pp_dtype_size (dtype), error);
  if (y != NULL) {
    r.y = pp_out_laid (pp_out (y, dtype, n), r.x.layout);
    /* Plans and scratch made, as a step's first run makes them. */
    norm_calls (&r, NULL);
    pp_backend_synchronize (be);
    graph = pp_backend_graph_capture (be, norm_calls, &r, error);
  }
  /* The first launch uploads the graph: not timed.  A failed launch
   * measures nothing. */
  for (guint i = 0; graph != NULL && i < repeats + 1; i++) {
    const gint64 t = g_get_monotonic_time ();
    gdouble s_call;

    if (!pp_backend_graph_launch (be, graph, error)) {
      best = -1;
      break;
    }
    pp_backend_synchronize (be);
    s_call = (g_get_monotonic_time () - t) / 1e6 / NORM_CALLS;
    if (i > 0 && (best < 0 || s_call < best))
      best = s_call;
  }
  if (graph != NULL && best >= 0 && trace != NULL)
    trace_kernels (be, graph, trace);
  if (graph != NULL)
    pp_backend_graph_free (be, graph);
  if (y != NULL)
    pp_backend_free (be, y);
  for (gpointer *p = (gpointer[]) { x_owned, gamma_owned, beta_owned,
          NULL }; *p; p++)
    pp_backend_free (be, *p);
  return best;
}

gboolean
pp_bench_norms (PpBackend * be, PpDType dtype, guint repeats, gdouble gbps,
    gboolean small, gboolean kernels, gint only)
{
  const NormShape *shapes = small ? small_norms : step_norms;
  const gsize n_shapes = small ? G_N_ELEMENTS (small_norms)
      : G_N_ELEMENTS (step_norms);
  gdouble step_s[2] = { 0, 0 };
  guint step_calls[2] = { 0, 0 };

  if (only >= (gint) n_shapes) {
    printf ("norms: no shape %d: there are %" G_GSIZE_FORMAT " (0 to %"
        G_GSIZE_FORMAT ")\n", only, n_shapes, n_shapes - 1);
    return FALSE;
  }
  if (!pp_backend_has_graphs (be)) {
    printf ("norms: not measured: %s has no graphs\n", pp_backend_name (be));
    return FALSE;
  }
  printf ("norms of a%s UNet step, each shape alone (%s activations, "
      "channels last for the group norms; a graph of %d calls, the best of "
      "%u)\n", small ? " small" : "n SD-Turbo", pp_dtype_name (dtype),
      NORM_CALLS, repeats);
  printf ("  %-34s %6s %9s %9s %9s %9s\n", "norm", "calls", "µs", "MB",
      "GB/s", "× floor");
  for (gsize i = 0; i < n_shapes; i++) {
    const NormShape *s = &shapes[i];
    /* Read, written once: what the op must move at least. */
    const gdouble bytes = 2.0 * s->c * s->side * s->side
        * pp_dtype_size (dtype);
    g_autoptr (GError) error = NULL;
    g_autofree gchar *what = s->layer
        ? g_strdup_printf ("layer norm %d rows of %d", s->side * s->side,
        s->c) : g_strdup_printf ("group norm %dx%d, %d channels%s", s->side,
        s->side, s->c, s->silu ? ", SiLU" : "");
    g_autoptr (GString) trace = kernels ? g_string_new (NULL) : NULL;
    gdouble t;

    if (only >= 0 && i != (gsize) only)
      continue;
    t = time_shape (be, s, dtype, repeats, trace, &error);
    if (t < 0) {
      printf ("norms: not measured: %s: %s\n", what, error ? error->message
          : "no graph");
      return FALSE;
    }
    step_s[s->layer] += t * s->count;
    step_calls[s->layer] += s->count;
    printf ("  %-34s %6u %9.2f %9.3f %9.0f", what, s->count, t * 1e6,
        bytes / 1e6, bytes / 1e9 / t);
    if (gbps > 0)
      printf (" %8.1f×", t / (bytes / (gbps * 1e9)));
    printf ("\n%s", trace != NULL ? trace->str : "");
  }
  printf ("  a step's norms: group %.3f ms (%u), layer %.3f ms (%u)\n",
      step_s[0] * 1e3, step_calls[0], step_s[1] * 1e3, step_calls[1]);
  return TRUE;
}
