/* ppdiffuse — GPU model benchmark: one SD-Turbo UNet step at 512×512 (a
 * 64×64 latent, 77×1024 text) and a TAESD encode + decode at 512×512 on a
 * device backend, in the weights' storage dtype (f16 by default on CUDA),
 * each reported as milliseconds, achieved TFLOP/s and the share of the
 * device's dense peak, next to the physical floor (FLOPs / peak).
 *
 * FLOPs are counted by the op layer (convolutions, linears, attention
 * matmuls), as in model-bench.  Inputs and outputs stay on the device;
 * every timed run ends with a synchronize, so the figure is the device's
 * time, not the launch queue's.  Weights are seeded (pp_weights_new_seeded),
 * not trained: speed does not depend on their values.
 *
 * Without the device the backend names (no CUDA device, no CUDA in the
 * build) it exits 77, the harnesses' "skipped". */
#include "pp-backend.h"
#include "pp-bench-configs.h"
#include "gpu-bench-norms.h"
#include "gpu-bench-trace.h"
#include "pp-kernel-names.h"
#include "pp-error.h"
#include "pp-ops.h"
#include "pp-taesd.h"
#include "pp-unet.h"
#include "pp-weights.h"

#include <glib/gstdio.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXIT_SKIP 77
#define DEFAULT_REPEATS 10
#define WARM_UP_RUNS 2
#define TEXT_TOKENS 77
#define TIMESTEP 999.0
/* A stream batch of 4 steps on one worker: 4 frames a pass, at these
 * timesteps. */
#define BATCH 4
/* Kernels of the launch floor's graph. */
#define FLOOR_KERNELS 512
static const gdouble batch_timesteps[BATCH] = { 999.0, 749.0, 499.0, 249.0 };
/* A frame batch at one step (frame-batch): up to BATCH frames a pass, all
 * at TIMESTEP. */
static const gdouble frame_timesteps[BATCH] = { TIMESTEP, TIMESTEP,
  TIMESTEP, TIMESTEP
};
#define WEIGHT_SEED 1
#define INPUT_SEED 2

/* --small: every path of the program at a size the CUDA emulation runs in
 * the test suite (gpu-bench-emulated), before a GPU's time is spent on it.
 * SD-Turbo's blocks with few channels (multiples of 8, as the 16-bit
 * channels-last paths want), heads of 8 values: the same ops as the
 * released UNet, small enough for the emulation; TAESD's with 16 channels
 * a layer. */
static const gchar small_config[] =
    "{\"_class_name\":\"UNet2DConditionModel\",\"in_channels\":4,"
    "\"out_channels\":4,\"block_out_channels\":[16,32,32,32],"
    "\"layers_per_block\":2,\"down_block_types\":[\"CrossAttnDownBlock2D\","
    "\"CrossAttnDownBlock2D\",\"CrossAttnDownBlock2D\",\"DownBlock2D\"],"
    "\"up_block_types\":[\"UpBlock2D\",\"CrossAttnUpBlock2D\","
    "\"CrossAttnUpBlock2D\",\"CrossAttnUpBlock2D\"],"
    "\"mid_block_type\":\"UNetMidBlock2DCrossAttn\",\"cross_attention_dim\":"
    "16,\"attention_head_dim\":[2,4,4,4],\"norm_num_groups\":8,"
    "\"norm_eps\":1e-5,\"use_linear_projection\":true,\"flip_sin_to_cos\":"
    "true,\"freq_shift\":0,\"act_fn\":\"silu\",\"sample_size\":8}";

static const gchar small_taesd_config[] =
    "{\"_class_name\":\"AutoencoderTiny\",\"in_channels\":3,"
    "\"out_channels\":3,\"latent_channels\":4,"
    "\"encoder_block_out_channels\":[16,16,16,16],"
    "\"decoder_block_out_channels\":[16,16,16,16],"
    "\"num_encoder_blocks\":[1,3,3,3],\"num_decoder_blocks\":[3,3,3,1],"
    "\"upsampling_scaling_factor\":2,\"act_fn\":\"relu\","
    "\"scaling_factor\":1.0}";

/* What is timed: the released sizes, or --small's. */
typedef struct
{
  const gchar *unet_name;
  const gchar *unet_config, *taesd_config;
  gint64 latent_side, image_side, text_dim;
} Sizes;

static const Sizes released_sizes = { "SD-Turbo", turbo_config,
  taesd_config, 64, 512, 1024
};
static const Sizes small_sizes = { "small", small_config, small_taesd_config,
  8, 64, 16
};

/* A device's peaks, from the vendors' data sheets: dense 16-bit
 * tensor-core TFLOP/s with float32 accumulation, and memory bandwidth,
 * GB/s (the larger of a family's memory sizes). */
typedef struct
{
  gdouble f16_tflops;
  gdouble gbps;
} Peaks;

/* Matched against the device description; the first match wins, so the
 * more specific names come first. */
static const struct
{
  const gchar *name;
  Peaks peaks;
} known_peaks[] = {
  { "H200", { 989.0, 4800.0 } },
  { "H100 PCIe", { 756.0, 2000.0 } },
  { "H100", { 989.0, 3350.0 } },
  { "A100", { 312.0, 2039.0 } },
  { "L40S", { 362.0, 864.0 } },
  { "RTX 4090", { 165.0, 1008.0 } },
  { "A10", { 125.0, 600.0 } },
};

typedef struct
{
  gdouble seconds;
  gdouble gflop;
  /* A graph's nodes and kernels (0: not a graph, or not known). */
  guint nodes, kernels;
  /* The first of the untimed runs: plans made, choices timed or taken. */
  gdouble first_seconds;
} Timing;

typedef struct
{
  PpBackend *be;
  PpUnet *unet;
  PpTaesd *taesd;
  PpTensor *sample, *text, *image;
  /* The graphs' fixed outputs. */
  PpTensor *eps, *latents, *decoded;
  /* A stream batch's pass: BATCH frames, each at its own step. */
  PpTensor *batch, *batch_eps;
  /* A frame batch's pass: n frames at one step (made for each n). */
  PpTensor *frames, *frames_eps;
  gpointer graph;               /* the one best_of_graph times */
  gpointer tiny;                /* one float: the launch floor's */
  /* --kernel-order's: the kernels to list in the order they ran (a part
   * of their short names; "" all of them), or NULL. */
  const gchar *order;
} Bench;

/* @device's peaks; zeros when it is not known. */
static Peaks
peaks_for (const gchar * device)
{
  for (guint i = 0; i < G_N_ELEMENTS (known_peaks); i++)
    if (strstr (device, known_peaks[i].name) != NULL)
      return known_peaks[i].peaks;
  return (Peaks) { 0, 0 };
}

/* A device tensor of seeded unit-variance values. */
static PpTensor *
device_input (PpBackend * be, const gchar * name, guint ndim,
    const gint64 * shape)
{
  g_autoptr (GError) error = NULL;
  g_autoptr (PpTensor) host = pp_tensor_new (name, PP_DTYPE_F32, ndim, shape,
      NULL);
  PpTensor *dev = pp_tensor_new_on (be, name, PP_DTYPE_F32, ndim, shape,
      &error);

  pp_seeded_fill_input (INPUT_SEED, name, pp_tensor_numel (host), host->data);
  if (dev == NULL || !pp_tensor_upload (dev, host, &error))
    g_error ("%s: %s", name, error->message);
  return dev;
}

static void
unet_run (Bench * b)
{
  PpTensor *out = NULL;
  GError *error = NULL;

  if (!pp_unet_forward (b->unet, b->sample, TIMESTEP, b->text, &out, NULL,
          NULL, &error))
    g_error ("%s", error->message);
  pp_tensor_free (out);
}

static void
taesd_run (Bench * b)
{
  PpTensor *z = NULL, *x = NULL;
  GError *error = NULL;

  if (!pp_taesd_encode (b->taesd, b->image, &z, NULL, NULL, &error)
      || !pp_taesd_decode (b->taesd, z, &x, NULL, NULL, &error))
    g_error ("%s", error->message);
  pp_tensor_free (z);
  pp_tensor_free (x);
}

/* Best of @repeats synchronized runs after WARM_UP_RUNS untimed ones
 * (cuDNN's algorithm search, pools and handles happen there). */
static Timing
best_of (void (*run) (Bench *), Bench * b, guint repeats)
{
  Timing best = { G_MAXDOUBLE, 0 };

  for (guint r = 0; r < WARM_UP_RUNS; r++) {
    const gint64 t = g_get_monotonic_time ();

    run (b);
    pp_backend_synchronize (b->be);
    if (r == 0)
      best.first_seconds = (g_get_monotonic_time () - t) / 1e6;
  }
  for (guint r = 0; r < repeats; r++) {
    gint64 t = g_get_monotonic_time ();

    pp_ops_reset_flop_count ();
    run (b);
    pp_backend_synchronize (b->be);
    best.seconds = MIN (best.seconds, (g_get_monotonic_time () - t) / 1e6);
    best.gflop = pp_ops_flop_count () / 1e9;
  }
  return best;
}

static void
report (const gchar * what, Timing t, gdouble peak)
{
  const gdouble tflops = t.gflop / 1e3 / t.seconds;

  printf ("%-52s %9.3f ms  %8.1f GFLOP  %7.1f TFLOP/s", what,
      t.seconds * 1e3, t.gflop, tflops);
  if (peak > 0)
    printf ("  %5.1f %% of %.0f  (floor %.3f ms)", 100 * tflops / peak, peak,
        t.gflop / 1e3 / peak * 1e3);
  printf ("\n");
}

/* The work as the element's ranks run it, each step a graph by default
 * on a GPU: into fixed outputs, the text's cross-attention K/V kept from
 * the first run (pp_unet_forward_into). */
static gboolean
unet_into (gpointer data, GError ** error)
{
  Bench *b = data;

  return pp_unet_forward_into (b->unet, b->sample, TIMESTEP, b->text,
      b->eps, error);
}

static gboolean
batch_into (gpointer data, GError ** error)
{
  Bench *b = data;

  return pp_unet_forward_batch_into (b->unet, b->batch, batch_timesteps,
      b->text, b->batch_eps, error);
}

static gboolean
frames_into (gpointer data, GError ** error)
{
  Bench *b = data;

  return pp_unet_forward_batch_into (b->unet, b->frames, frame_timesteps,
      b->text, b->frames_eps, error);
}

/* The stream batch's pass as is, for its profile. */
static void
batch_run (Bench * b)
{
  GError *error = NULL;

  if (!batch_into (b, &error))
    g_error ("%s", error->message);
}

static gboolean
taesd_into (gpointer data, GError ** error)
{
  Bench *b = data;

  return pp_taesd_encode_into (b->taesd, b->image, b->latents, error)
      && pp_taesd_decode_into (b->taesd, b->latents, b->decoded, error);
}

static void
graph_launch (Bench * b)
{
  GError *error = NULL;

  if (!pp_backend_graph_launch (b->be, b->graph, &error))
    g_error ("%s", error->message);
}

/* @func's work captured as one graph into b->graph after two runs as is
 * (pools, plans and the K/V cache are made there, as a worker's first
 * chunk makes them), the second counting its GFLOP into *@gflop.  FALSE
 * with the reason when the backend has no graphs or the capture fails. */
static gboolean
capture_graph (PpGraphFunc func, Bench * b, gdouble * gflop, GError ** error)
{
  if (!pp_backend_has_graphs (b->be)) {
    g_set_error (error, PP_ERROR, PP_ERROR_CONFIG, "%s has no graphs",
        pp_backend_name (b->be));
    return FALSE;
  }
  if (!func (b, error))
    return FALSE;
  pp_ops_reset_flop_count ();
  if (!func (b, error))
    return FALSE;
  *gflop = pp_ops_flop_count () / 1e9;
  pp_backend_synchronize (b->be);
  b->graph = pp_backend_graph_capture (b->be, func, b, error);
  return b->graph != NULL;
}

/* Best of @repeats synchronized launches (best_of's) of @func captured as
 * one graph (capture_graph, whose FALSE it returns). */
static gboolean
best_of_graph (PpGraphFunc func, Bench * b, guint repeats, Timing * best,
    GError ** error)
{
  gdouble gflop;

  if (!capture_graph (func, b, &gflop, error))
    return FALSE;
  *best = best_of (graph_launch, b, repeats);
  best->gflop = gflop;
  (void) pp_backend_graph_nodes (b->be, b->graph, &best->nodes,
      &best->kernels);
  pp_backend_graph_free (b->be, g_steal_pointer (&b->graph));
  return TRUE;
}

/* The launch floor: a graph of FLOOR_KERNELS one-block kernels (a fill
 * of one value each) in a chain, each waiting for the one before it as a
 * step's kernels do: what a kernel costs the device where its work is
 * next to nothing. */
static gboolean
chain_into (gpointer data, GError ** error)
{
  Bench *b = data;

  (void) error;
  for (guint i = 0; i < FLOOR_KERNELS; i++)
    pp_backend_fill (b->be, b->tiny, (float) i, 1);
  return TRUE;
}

static void
launch_floor (Bench * b, guint repeats)
{
  g_autoptr (GError) error = NULL;
  Timing t;

  b->tiny = pp_backend_alloc (b->be, sizeof (float), &error);
  if (b->tiny == NULL || !best_of_graph (chain_into, b, repeats, &t,
          &error)) {
    printf ("launch floor: not measured: %s\n", error->message);
  } else {
    printf ("launch floor: a graph of %u one-block kernels in a chain, "
        "%.2f µs a kernel (%u kernel nodes; %s)\n", FLOOR_KERNELS,
        t.seconds * 1e6 / FLOOR_KERNELS, t.kernels,
        strstr (pp_backend_ways (b->be), "pdl=on") != NULL
        ? "programmatic dependent launches" : "plain launches");
  }
  if (b->tiny != NULL)
    pp_backend_free (b->be, g_steal_pointer (&b->tiny));
}

/* Kernel traces (--kernels): each graph's kernels as the device ran
 * them, from a trace of one warm launch (pp_backend_trace). */

/* The table's rows: the costliest kernel names, the rest summed. */
#define TRACE_ROWS 24
/* The longest idle stretches named. */
#define TRACE_GAPS 3

static gint
by_ns_desc (gconstpointer a, gconstpointer b)
{
  const PpTraceRow *x = a, *y = b;

  return x->ns < y->ns ? 1 : x->ns > y->ns ? -1 : g_strcmp0 (x->name,
      y->name);
}

static gint
by_gap_desc (gconstpointer a, gconstpointer b)
{
  const guint64 x = *(const guint64 *) a, y = *(const guint64 *) b;

  return x < y ? 1 : x > y ? -1 : 0;
}

/* With @order (a part of a short name; "" all), the kernels of @spans
 * whose short names hold it, in the order they ran: each one's place
 * among all, its time, its name; what maps a library's kernels onto the
 * ops of a graph, whose kernels run in the ops' order. */
static void
print_order (const gchar * what, GArray * spans, const gchar * order)
{
  printf ("kernels of %s in the order they ran%s%s%s:\n", what,
      *order != '\0' ? ", those whose names hold \"" : "", order,
      *order != '\0' ? "\"" : "");
  for (guint i = 0; i < spans->len; i++) {
    const PpKernelSpan *k = &g_array_index (spans, PpKernelSpan, i);
    g_autofree gchar *name = pp_kernel_short_name (k->name);

    if (strstr (name, order) != NULL)
      printf ("  %4u %9.1f µs  %s\n", i, (k->end_ns - k->start_ns) / 1e3,
          name);
  }
}

/* The trace of @what's launch: its kernels from the first's start to the
 * last's end, the time a kernel ran (overlapping kernels counted once:
 * programmatic dependent launches overlap) and the device's idle
 * stretches between them, then the time by kernel name. */
static void
print_trace (const gchar * what, GArray * spans, guint kernel_nodes)
{
  g_autoptr (GArray) rows = NULL;
  g_autoptr (GArray) gaps = g_array_new (FALSE, FALSE, sizeof (guint64));
  guint64 first, last = 0, running = 0, run_start, run_end;
  guint other_calls = 0;
  guint64 other_ns = 0, span_ns;

  if (spans->len == 0) {
    printf ("kernels of %s: none traced\n", what);
    return;
  }
  first = g_array_index (spans, PpKernelSpan, 0).start_ns;
  run_start = first;
  run_end = first;
  for (guint i = 0; i < spans->len; i++) {
    const PpKernelSpan *k = &g_array_index (spans, PpKernelSpan, i);

    /* Spans by start: a run of overlapping ones ends where the next
     * starts after it. */
    if (k->start_ns > run_end) {
      const guint64 gap = k->start_ns - run_end;

      running += run_end - run_start;
      g_array_append_val (gaps, gap);
      run_start = k->start_ns;
    }
    run_end = MAX (run_end, k->end_ns);
    last = MAX (last, k->end_ns);
  }
  running += run_end - run_start;
  span_ns = last - first;
  g_array_sort (gaps, by_gap_desc);
  printf ("kernels of %s: %u kernels (its graph: %u kernel nodes) in "
      "%.3f ms, the first's start to the last's end: a kernel running "
      "%.3f ms (%.1f %%), the device idle between them %.3f ms", what,
      spans->len, kernel_nodes, span_ns / 1e6, running / 1e6,
      span_ns > 0 ? 100.0 * running / span_ns : 100.0,
      (span_ns - running) / 1e6);
  if (gaps->len > 0) {
    printf ("; its longest idle stretches");
    for (guint i = 0; i < MIN (gaps->len, TRACE_GAPS); i++)
      printf ("%s %.1f", i == 0 ? "" : ",",
          g_array_index (gaps, guint64, i) / 1e3);
    printf (" µs");
  }
  printf ("\n");
  rows = pp_trace_rows (spans);
  g_array_sort (rows, by_ns_desc);
  printf ("  %-*s %6s %9s %7s %10s\n", PP_KERNEL_NAME_WIDTH, "kernel", "calls",
      "ms", "share", "µs a call");
  for (guint i = 0; i < rows->len; i++) {
    const PpTraceRow *r = &g_array_index (rows, PpTraceRow, i);

    if (i >= TRACE_ROWS) {
      other_calls += r->calls;
      other_ns += r->ns;
      continue;
    }
    printf ("  %-*s %6u %9.3f %6.1f %% %10.1f\n", PP_KERNEL_NAME_WIDTH, r->name,
        r->calls, r->ns / 1e6, span_ns > 0 ? 100.0 * r->ns / span_ns : 0.0,
        r->ns / 1e3 / r->calls);
  }
  if (other_calls > 0) {
    g_autofree gchar *others = g_strdup_printf ("(%u other kernels)",
        rows->len - TRACE_ROWS);

    printf ("  %-*s %6u %9.3f %6.1f %% %10.1f\n", PP_KERNEL_NAME_WIDTH, others,
        other_calls, other_ns / 1e6, span_ns > 0 ? 100.0 * other_ns
        / span_ns : 0.0, other_ns / 1e3 / other_calls);
  }
}

static gboolean
launch_into (gpointer data, GError ** error)
{
  Bench *b = data;

  return pp_backend_graph_launch (b->be, b->graph, error);
}

/* @func's work captured as a graph (capture_graph), launched once, then
 * traced launching once more. */
static void
trace_graph (const gchar * what, PpGraphFunc func, Bench * b)
{
  g_autoptr (GError) error = NULL;
  g_autoptr (GArray) spans = NULL;
  guint nodes = 0, kernels = 0;
  gdouble gflop;

  if (capture_graph (func, b, &gflop, &error) && launch_into (b, &error))
    spans = pp_backend_trace (b->be, launch_into, b, &error);
  if (spans != NULL) {
    (void) pp_backend_graph_nodes (b->be, b->graph, &nodes, &kernels);
    print_trace (what, spans, kernels);
    if (b->order != NULL)
      print_order (what, spans, b->order);
  } else {
    printf ("kernels of %s: not traced: %s\n", what, error->message);
  }
  if (b->graph != NULL)
    pp_backend_graph_free (b->be, g_steal_pointer (&b->graph));
}

/* The line of a graph's figure, or why there is none. */
static gboolean
report_graph (const gchar * what, PpGraphFunc func, Bench * b,
    guint repeats, gdouble peak, Timing * t)
{
  g_autoptr (GError) error = NULL;

  if (best_of_graph (func, b, repeats, t, &error)) {
    report (what, *t, peak);
    /* What each launch runs: against the launch floor (below), how much
     * of the graph's time the gaps between its kernels could be. */
    if (t->nodes > 0)
      printf ("graph nodes of %s: %u, %u of them kernels, %.2f µs a "
          "kernel\n", what, t->nodes, t->kernels, t->kernels
          ? t->seconds * 1e6 / t->kernels : 0.0);
    return TRUE;
  }
  printf ("%s: not measured: %s\n", what, error->message);
  return FALSE;
}

/* The op families of the profile; an op left out is "other". */
static const gchar *const op_family[PP_OP_COUNT] = {
  [PP_OP_ATTENTION] = "attention", [PP_OP_ATTENTION_CAUSAL] = "attention",
  [PP_OP_CONV2D] = "convolution",
  [PP_OP_LINEAR] = "linear", [PP_OP_LINEAR_ADD] = "linear",
  [PP_OP_MATMUL] = "linear",
  [PP_OP_GROUP_NORM] = "norm", [PP_OP_LAYER_NORM] = "norm",
  [PP_OP_SILU] = "element-wise", [PP_OP_RELU] = "element-wise",
  [PP_OP_TANH] = "element-wise", [PP_OP_GELU] = "element-wise",
  [PP_OP_QUICK_GELU] = "element-wise", [PP_OP_GEGLU] = "element-wise",
  [PP_OP_ADD] = "element-wise", [PP_OP_SCALE] = "element-wise",
  [PP_OP_AFFINE] = "element-wise", [PP_OP_AXPBY] = "element-wise",
  [PP_OP_LCM_STEP] = "element-wise", [PP_OP_ADD_CHANNEL] = "element-wise",
  [PP_OP_TIMESTEP_EMBEDDING] = "element-wise",
  [PP_OP_NCHW_TO_NLC] = "layout and copies",
  [PP_OP_NLC_TO_NCHW] = "layout and copies",
  [PP_OP_UPSAMPLE_NEAREST] = "layout and copies",
  [PP_OP_INTERLEAVE_PHASES] = "layout and copies",
  [PP_OP_RESIZE_BILINEAR] = "layout and copies",
  [PP_OP_CONCAT_CHANNELS] = "layout and copies",
  [PP_OP_BYTES_TO_FLOATS] = "layout and copies",
  [PP_OP_FLOATS_TO_BYTES] = "layout and copies",
  [PP_OP_FOR_ROWS] = "row-wise regions",
  [PP_OP_ROW_NORMS] = "feature bank", [PP_OP_BANK_FUSE] = "feature bank",
  [PP_OP_BANK_MERGE_DEST] = "feature bank",
  [PP_OP_BANK_MERGE] = "feature bank",
};

static const gchar *const family_order[] = {
  "attention", "convolution", "linear", "norm", "element-wise",
  "layout and copies", "row-wise regions", "feature bank", "other",
};

/* What the profile reads of an op: device time where the device was
 * timed, host time elsewhere. */
static gboolean profile_on_device;

static gdouble
profile_seconds (const PpOpProfile * p)
{
  return profile_on_device ? p->device_seconds : p->seconds;
}

static gint
by_time_desc (gconstpointer a, gconstpointer b)
{
  const gdouble tx = profile_seconds (a), ty = profile_seconds (b);

  return (tx < ty) - (tx > ty);
}

/* A profile on a device: windows of this many op calls, each queued
 * behind a hold of the stream this long (pp_ops_set_profile_window). */
#define PROFILE_WINDOW_CALLS 100
#define PROFILE_HOLD_S 0.05
/* The ops the profile lists one by one, the most expensive first. */
#define PROFILE_TOP_OPS 12
/* The call shapes it lists one by one (pp_ops_get_shapes). */
#define PROFILE_TOP_SHAPES 16

/* The least time @p's calls could take on a device of @peaks: its bytes
 * at the memory's bandwidth or its FLOPs at the tensor cores' peak,
 * whichever is longer; 0 when the peaks are not known. */
static gdouble
floor_seconds (const PpOpProfile * p, Peaks peaks)
{
  if (peaks.gbps <= 0 || peaks.f16_tflops <= 0)
    return 0;
  return MAX (p->bytes / (peaks.gbps * 1e9),
      p->flops / (peaks.f16_tflops * 1e12));
}

/* "  12.3×": how many times its floor @s took; blank without a floor. */
static void
print_times_floor (gdouble s, gdouble floor_s)
{
  if (floor_s > 0)
    printf (" %8.1f×", s / floor_s);
  else
    printf (" %9s", "");
}

/* The costliest call shapes of the profile (an op's calls of the same
 * FLOPs and bytes: one convolution, product or norm of the model), per
 * call: which of an op's shapes are far from the device's floor.  Shares
 * are of @total. */
static void
print_shapes (gdouble total, Peaks peaks)
{
  g_autoptr (GArray) shapes = pp_ops_get_shapes ();
  g_autofree PpOpProfile *all = g_new0 (PpOpProfile, shapes->len);
  guint n = 0;

  /* Each shape as the profile of its calls (their FLOPs and bytes in
   * all), sorted as the ops are; its region on a device is its ops'. */
  for (guint i = 0; i < shapes->len; i++) {
    const PpOpShape *sh = &g_array_index (shapes, PpOpShape, i);

    if (sh->op == PP_OP_FOR_ROWS && profile_on_device)
      continue;
    all[n++] = (PpOpProfile) { .name = sh->name, .calls = sh->calls,
      .seconds = sh->seconds, .device_seconds = sh->device_seconds,
      .flops = sh->flops * sh->calls, .bytes = sh->bytes * sh->calls };
  }
  qsort (all, n, sizeof all[0], by_time_desc);
  printf ("  %-22s %9s %7s %7s %9s %9s %9s %9s %9s\n", "shape (per call)",
      "ms", "share", "calls", "µs", "GFLOP", "MB", "GB/s", "× floor");
  for (guint i = 0; i < n && i < PROFILE_TOP_SHAPES; i++) {
    const PpOpProfile *p = &all[i];
    const gdouble s = profile_seconds (p);

    if (s <= 0)
      break;
    printf ("  %-22s %9.3f %6.1f %% %7" G_GUINT64_FORMAT " %9.1f %9.3f "
        "%9.2f %9.0f", p->name, s * 1e3, 100 * s / total, p->calls,
        s / p->calls * 1e6, p->flops / 1e9 / p->calls,
        p->bytes / 1e6 / p->calls, p->bytes / 1e9 / s);
    /* The calls' time over their floor: each call's, as they are alike. */
    print_times_floor (s, floor_seconds (p, peaks));
    printf ("\n");
  }
}

/* One more run of @run with the op layer's profile on: where the time of a
 * step goes, by op family and by op, in device time (marks on the stream)
 * on a GPU, host time elsewhere.  On a GPU the step is run once per
 * window of PROFILE_WINDOW_CALLS op calls, each window queued behind a
 * hold of the stream, so that the device runs the window's ops back to
 * back, as from a graph: an op's device time is then its own, not the
 * host's between its launches.  (One hold for the whole step does not
 * do: its ~2,700 launches and marks fill CUDA's queue of pending work,
 * and the host waits there until the hold ends.)  The shares are then of
 * the ops' sum; the graph's line above gives the step's own time.  On a
 * CPU backend what no op accounts for (copies, allocations) is the
 * step's wall time less the ops' sum.  Each family and op also gets its
 * floor on a device whose peaks are known (@peaks): its bytes at the
 * memory's bandwidth or its FLOPs at the tensor cores', the longer, and
 * how many times that it took; an op's line gives the bytes its views
 * hold (PpOpProfile.bytes) and the rate it moved them at. */
static void
profile (const gchar * what, void (*run) (Bench *), Bench * b, Peaks peaks)
{
  PpOpProfile ops[PP_OP_COUNT];
  gdouble family_s[G_N_ELEMENTS (family_order)] = { 0 };
  gdouble family_floor_s[G_N_ELEMENTS (family_order)] = { 0 };
  gdouble sum = 0, wall = 0, queued = 0;
  gboolean device = FALSE, windowed;
  guint64 launches = 0;
  guint windows = 0;
  gint64 t;

  pp_backend_synchronize (b->be);
  pp_ops_reset_flop_count ();
  /* A device backend (one with a stream) takes marks and holds. */
  windowed = pp_backend_stream (b->be) != NULL;
  pp_ops_set_profiling (TRUE);
  if (windowed) {
    for (guint64 first = 0;; first += PROFILE_WINDOW_CALLS) {
      pp_ops_set_profile_window (first, PROFILE_WINDOW_CALLS,
          PROFILE_HOLD_S);
      run (b);
      pp_backend_synchronize (b->be);
      windows++;
      if (pp_ops_profile_calls_numbered () <= first + PROFILE_WINDOW_CALLS)
        break;
    }
    pp_ops_set_profile_window (0, 0, 0);
    queued = pp_ops_profile_window_queued ();
  } else {
    t = g_get_monotonic_time ();
    run (b);
    pp_backend_synchronize (b->be);
    wall = (g_get_monotonic_time () - t) / 1e6;
  }
  pp_ops_set_profiling (FALSE);
  for (guint op = 0; op < PP_OP_COUNT; op++) {
    pp_ops_get_profile (op, &ops[op]);
    device |= ops[op].device_seconds > 0;
  }
  profile_on_device = device;
  for (guint op = 0; op < PP_OP_COUNT; op++) {
    const gchar *family = op_family[op] != NULL ? op_family[op] : "other";
    const gdouble s = profile_seconds (&ops[op]);

    if (op == PP_OP_FOR_ROWS && device)
      continue;                 /* its ops are timed themselves */
    launches += ops[op].calls;
    sum += s;
    for (guint f = 0; f < G_N_ELEMENTS (family_order); f++)
      if (g_str_equal (family, family_order[f])) {
        family_s[f] += s;
        family_floor_s[f] += floor_seconds (&ops[op], peaks);
      }
  }
  if (windowed) {
    wall = sum;
    printf ("profile of one %s (device time: %u runs of windows of %d op "
        "calls, each queued behind a %.0f ms hold, the longest queued by the "
        "host in %.3f ms%s; the ops' sum %.3f ms, %" G_GUINT64_FORMAT
        " op calls)\n", what, windows, PROFILE_WINDOW_CALLS,
        PROFILE_HOLD_S * 1e3, queued * 1e3, queued < PROFILE_HOLD_S ? ""
        : ", past its hold: that window's later ops include the host's time",
        sum * 1e3, launches);
  } else
    printf ("profile of one %s (%s time, profiled: %.3f ms wall, %"
        G_GUINT64_FORMAT " op calls)\n", what, device ? "device" : "host",
        wall * 1e3, launches);
  if (peaks.gbps > 0 && peaks.f16_tflops > 0)
    printf ("  floor: each op's bytes at %.0f GB/s or its FLOPs at %.0f "
        "TFLOP/s, the longer; × floor: its time over that\n", peaks.gbps,
        peaks.f16_tflops);
  printf ("  %-22s %9s %7s %9s %9s\n", "family", "ms", "share", "floor ms",
      "× floor");
  for (guint f = 0; f < G_N_ELEMENTS (family_order); f++)
    if (family_s[f] > 0) {
      printf ("  %-22s %9.3f %6.1f %%", family_order[f], family_s[f] * 1e3,
          100 * family_s[f] / wall);
      if (family_floor_s[f] > 0)
        printf (" %9.3f", family_floor_s[f] * 1e3);
      else
        printf (" %9s", "");
      print_times_floor (family_s[f], family_floor_s[f]);
      printf ("\n");
    }
  if (!windowed)
    printf ("  %-22s %9.3f %6.1f %%\n", "outside ops",
        MAX (wall - sum, 0) * 1e3, 100 * MAX (wall - sum, 0) / wall);
  /* Where channels-last activations still went through a copy for a
   * channels-first kernel (PPDIFFUSE_ACT_LAYOUT=nhwc): what a kernel of
   * the layout's own would save. */
  {
    g_autoptr (GString) copies = g_string_new (NULL);

    for (guint op = 0; op < PP_OP_COUNT; op++)
      if (ops[op].layout_copies > 0)     /* counted in every run: per step */
        g_string_append_printf (copies, "%s%s %" G_GUINT64_FORMAT,
            copies->len ? ", " : "", ops[op].name,
            ops[op].layout_copies / MAX (windows, 1));
    if (copies->len > 0)
      printf ("  channels-last views copied channels first: %s\n",
          copies->str);
  }
  qsort (ops, PP_OP_COUNT, sizeof ops[0], by_time_desc);
  printf ("  %-22s %9s %7s %7s %9s %9s %9s\n", "op", "ms", "share", "calls",
      "MB", "GB/s", "× floor");
  for (guint i = 0; i < PROFILE_TOP_OPS && i < PP_OP_COUNT; i++) {
    const gdouble s = profile_seconds (&ops[i]);

    if (s <= 0)
      break;
    printf ("  %-22s %9.3f %6.1f %% %7" G_GUINT64_FORMAT " %9.1f %9.0f",
        ops[i].name, s * 1e3, 100 * s / wall, ops[i].calls,
        ops[i].bytes / 1e6, ops[i].bytes / 1e9 / s);
    print_times_floor (s, floor_seconds (&ops[i], peaks));
    printf ("\n");
  }
  print_shapes (wall, peaks);
}

static gchar *
write_config (const gchar * dir, const gchar * name, const gchar * text)
{
  gchar *path = g_build_filename (dir, name, NULL);

  if (!g_file_set_contents (path, text, -1, NULL))
    g_error ("cannot write %s", path);
  return path;
}

int
main (int argc, char **argv)
{
  g_autofree gchar *backend = NULL, *dtype_name = NULL, *dir = NULL,
      *unet_path = NULL, *taesd_path = NULL;
  gint repeats = DEFAULT_REPEATS;
  gboolean small = FALSE, kernels = FALSE, norms = FALSE;
  gint norm_shape = -1;
  g_autofree gchar *order = NULL;
  gdouble peak = 0, gbps = 0;
  Peaks known;
  const Sizes *z;
  const GOptionEntry entries[] = {
    {"backend", 0, 0, G_OPTION_ARG_STRING, &backend,
        "device backend (default cuda)", "B"},
    {"dtype", 0, 0, G_OPTION_ARG_STRING, &dtype_name,
        "weights' storage dtype: f32, f16, bf16 (default: the backend's)",
        "D"},
    {"repeats", 0, 0, G_OPTION_ARG_INT, &repeats,
        "timed runs per figure, the best reported (default 10)", "N"},
    {"peak-tflops", 0, 0, G_OPTION_ARG_DOUBLE, &peak,
        "the device's dense 16-bit peak, TFLOP/s (default: from its name)",
        "T"},
    {"peak-gbps", 0, 0, G_OPTION_ARG_DOUBLE, &gbps,
        "the device's memory bandwidth, GB/s (default: from its name)", "G"},
    {"small", 0, 0, G_OPTION_ARG_NONE, &small,
        "a small UNet of SD-Turbo's blocks, an 8x8 latent, TAESD at 64x64: "
          "the program's every path, quickly (the CUDA emulation)", NULL},
    {"kernels", 0, 0, G_OPTION_ARG_NONE, &kernels,
          "instead of the timed figures, each graph's kernels as the device "
          "ran them in one launch: a kernel trace (CUPTI on cuda), which "
          "costs the device some time of its own", NULL},
    {"norms", 0, 0, G_OPTION_ARG_NONE, &norms,
          "instead of the timed figures, each norm shape of a UNet step "
          "alone as a graph, in the ways the environment chose "
          "(PPDIFFUSE_CUDA_GROUP_NORM, PPDIFFUSE_CUDA_LAYER_NORM); with "
          "--kernels, each shape's kernels traced too", NULL},
    {"kernel-order", 0, 0, G_OPTION_ARG_STRING, &order,
          "with --kernels, also each kernel whose short name holds this "
          "(\"\": every kernel) in the order it ran, with its place and "
          "time: a library's kernels mapped onto the graph's ops", "PART"},
    {"norm-shape", 0, 0, G_OPTION_ARG_INT, &norm_shape,
          "with --norms, only the norm shape of this index (from 0, in the "
          "table's order): one shape under a profiler", "N"},
    {NULL}
  };
  g_autoptr (GOptionContext) ctx = g_option_context_new ("");
  g_autoptr (GError) error = NULL;
  PpWeights *uw, *tw;
  PpDType dtype = 0;
  Bench b = { 0 };
  Timing u, v, ug, vg, bg;
  gboolean graphs;
  g_autofree gchar *unet_what = NULL, *taesd_what = NULL;

  g_option_context_set_summary (ctx, "Times an SD-Turbo UNet step and a "
      "TAESD encode + decode at 512x512 on a GPU backend.");
  g_option_context_add_main_entries (ctx, entries, NULL);
  if (!g_option_context_parse (ctx, &argc, &argv, &error)
      || (dtype_name != NULL && !pp_dtype_parse_weights (dtype_name, &dtype,
              &error))) {
    fprintf (stderr, "gpu-bench: %s\n", error->message);
    return 2;
  }
  /* The order is a trace's: without one it would list nothing. */
  if (order != NULL && (!kernels || norms)) {
    fprintf (stderr, "gpu-bench: --kernel-order lists a trace's kernels: "
        "give it with --kernels (and without --norms)\n");
    return 2;
  }
  z = small ? &small_sizes : &released_sizes;
  b.order = order;
  b.be = pp_backend_get (backend ? backend : PP_BACKEND_CUDA, &error);
  if (b.be == NULL) {
    fprintf (stderr, "gpu-bench: skipped: %s\n", error->message);
    return g_error_matches (error, PP_ERROR, PP_ERROR_DEVICE) ? EXIT_SKIP : 1;
  }
  /* Recording from here on, the graphs' capture included; not with the
   * timed figures, which it would slow. */
  if (kernels && !pp_backend_trace_enable (b.be, &error)) {
    printf ("kernel trace: not available: %s\n", error->message);
    return EXIT_SKIP;
  }
  if (dtype == 0)
    dtype = b.be->default_weight_dtype;
  known = peaks_for (pp_backend_device (b.be));
  if (peak <= 0)
    peak = known.f16_tflops;
  if (gbps <= 0)
    gbps = known.gbps;
  /* The norms alone need no model. */
  if (norms) {
    printf ("%s on %s, activations %s\n", pp_backend_name (b.be),
        pp_backend_device (b.be), pp_dtype_name (dtype));
    printf ("kernel ways: %s\n", pp_backend_ways (b.be));
    return pp_bench_norms (b.be, dtype, (guint) repeats, gbps, small,
        kernels, norm_shape) ? 0 : 1;
  }
  /* Made once there is a device to time them on. */
  uw = pp_weights_new_seeded (WEIGHT_SEED);
  tw = pp_weights_new_seeded (WEIGHT_SEED);
  pp_weights_set_storage_dtype (uw, dtype);
  pp_weights_set_storage_dtype (tw, dtype);
  dir = g_dir_make_tmp ("ppdiffuse-gpu-bench-XXXXXX", NULL);
  unet_path = write_config (dir, "unet.json", z->unet_config);
  taesd_path = write_config (dir, "taesd.json", z->taesd_config);
  b.unet = pp_unet_new (unet_path, uw, b.be, &error);
  b.taesd = b.unet ? pp_taesd_new (taesd_path, tw, b.be, &error) : NULL;
  if (b.taesd == NULL) {
    fprintf (stderr, "gpu-bench: %s\n", error->message);
    return 1;
  }
  {
    const gint64 sample_shape[4] = { 1, 4, z->latent_side, z->latent_side };
    const gint64 text_shape[3] = { 1, TEXT_TOKENS, z->text_dim };
    const gint64 image_shape[4] = { 1, 3, z->image_side, z->image_side };
    const gint64 batch_shape[4] = { BATCH, 4, z->latent_side,
      z->latent_side
    };

    b.sample = device_input (b.be, "sample", 4, sample_shape);
    b.text = device_input (b.be, "encoder_hidden_states", 3, text_shape);
    b.image = device_input (b.be, "image", 4, image_shape);
    b.eps = device_input (b.be, "eps", 4, sample_shape);
    b.latents = device_input (b.be, "latents", 4, sample_shape);
    b.decoded = device_input (b.be, "decoded", 4, image_shape);
    b.batch = device_input (b.be, "batch", 4, batch_shape);
    b.batch_eps = device_input (b.be, "batch_eps", 4, batch_shape);
  }
  unet_what = g_strdup_printf ("%s UNet step %" G_GINT64_FORMAT "x%"
      G_GINT64_FORMAT, z->unet_name, z->latent_side, z->latent_side);
  taesd_what = g_strdup_printf ("TAESD enc+dec %" G_GINT64_FORMAT "x%"
      G_GINT64_FORMAT, z->image_side, z->image_side);

  if (kernels)
    printf ("%s on %s, weights %s, kernel traces\n", pp_backend_name (b.be),
        pp_backend_device (b.be), pp_dtype_weights_name (dtype));
  else
    printf ("%s on %s, weights %s, best of %d synchronized runs\n",
        pp_backend_name (b.be), pp_backend_device (b.be),
        pp_dtype_weights_name (dtype), repeats);
  printf ("kernel ways: %s\n", pp_backend_ways (b.be));
  if (kernels) {
    g_autofree gchar *uw_what = g_strconcat (unet_what, ", graph", NULL);
    g_autofree gchar *tw_what = g_strconcat (taesd_what, ", graph", NULL);
    g_autofree gchar *bw_what = g_strdup_printf ("%s UNet pass of a "
        "4-frame stream batch, graph", z->unet_name);

    trace_graph (uw_what, unet_into, &b);
    trace_graph (tw_what, taesd_into, &b);
    trace_graph (bw_what, batch_into, &b);
    goto done;
  }
  if (peak <= 0)
    printf ("device peak unknown: pass --peak-tflops for the share of it\n");
  u = best_of (unet_run, &b, (guint) repeats);
  v = best_of (taesd_run, &b, (guint) repeats);
  report (unet_what, u, peak);
  report (taesd_what, v, peak);
  /* What a start pays before its first frame: cuDNN's and cuBLASLt's
   * plans (kernels cuDNN compiles among them), the timed ways' trials or
   * their kept choices, the pools. */
  printf ("first run, its plans made: %s %.1f ms, %s %.1f ms\n", unet_what,
      u.first_seconds * 1e3, taesd_what, v.first_seconds * 1e3);
  /* The same as graphs, the way the element runs a worker's steps. */
  {
    g_autofree gchar *uw_what = g_strconcat (unet_what, ", graph", NULL);
    g_autofree gchar *tw_what = g_strconcat (taesd_what, ", graph", NULL);

    graphs = report_graph (uw_what, unet_into, &b, (guint) repeats, peak,
        &ug);
    graphs &= report_graph (tw_what, taesd_into, &b, (guint) repeats, peak,
        &vg);
  }
  if (graphs)
    launch_floor (&b, (guint) repeats);
  printf ("frames/s one GPU could sustain at 1 step: %.1f (UNet + TAESD)",
      1.0 / (u.seconds + v.seconds));
  if (graphs)
    printf (", %.1f as graphs", 1.0 / (ug.seconds + vg.seconds));
  printf ("\n");
  /* A stream batch's pass hands on one frame: at 4 steps on one GPU, a
   * frame costs a pass of 4 and a TAESD encode + decode. */
  if (graphs) {
    g_autofree gchar *what = g_strdup_printf ("%s UNet pass of a 4-frame "
        "stream batch, graph", z->unet_name);

    if (report_graph (what, batch_into, &b, (guint) repeats, peak, &bg))
      printf ("frames/s one GPU could sustain at 4 steps with stream-batch: "
          "%.1f (a pass of 4 + TAESD, as graphs)\n",
          1.0 / (bg.seconds + vg.seconds));
  }
  /* At one step a frame batch of n is a pass of n latents at one
   * timestep, each frame with its own TAESD encode + decode on rank 0. */
  for (guint n = 2; graphs && n <= BATCH; n *= 2) {
    const gint64 shape[4] = { n, 4, z->latent_side, z->latent_side };
    g_autofree gchar *what = g_strdup_printf ("%s UNet pass of a "
        "%u-frame batch at one step, graph", z->unet_name, n);
    Timing fg;

    b.frames = device_input (b.be, "frames", 4, shape);
    b.frames_eps = device_input (b.be, "frames_eps", 4, shape);
    if (report_graph (what, frames_into, &b, (guint) repeats, peak, &fg))
      printf ("frames/s one GPU could sustain at 1 step with frame-batch "
          "%u: %.1f (a pass of %u + %u TAESD, as graphs)\n", n,
          n / (fg.seconds + n * vg.seconds), n, n);
    g_clear_pointer (&b.frames, pp_tensor_free);
    g_clear_pointer (&b.frames_eps, pp_tensor_free);
  }
  {
    PpPoolBytes unet = { 0 }, taesd = { 0 };

    pp_unet_pools (b.unet, &unet);
    pp_taesd_pools (b.taesd, &taesd);
    printf ("activation pools: UNet %.1f MiB, TAESD %.1f MiB (at most "
        "%.1f and %.1f MiB in use at once)\n", unet.held / 1048576.0,
        taesd.held / 1048576.0, unet.peak / 1048576.0,
        taesd.peak / 1048576.0);
  }
  profile ("UNet step", unet_run, &b, (Peaks) { peak, gbps });
  profile ("TAESD encode + decode", taesd_run, &b, (Peaks) { peak, gbps });
  /* Where a 4-step stream batch's pass (the 60 fps target's) spends its
   * time, beside the single step's. */
  profile ("UNet pass of a 4-frame stream batch", batch_run, &b,
      (Peaks) { peak, gbps });

done:
  pp_tensor_free (b.sample);
  pp_tensor_free (b.text);
  pp_tensor_free (b.image);
  pp_tensor_free (b.eps);
  pp_tensor_free (b.latents);
  pp_tensor_free (b.decoded);
  pp_tensor_free (b.batch);
  pp_tensor_free (b.batch_eps);
  pp_unet_free (b.unet);
  pp_taesd_free (b.taesd);
  pp_weights_free (uw);
  pp_weights_free (tw);
  g_unlink (unet_path);
  g_unlink (taesd_path);
  g_rmdir (dir);
  return 0;
}
