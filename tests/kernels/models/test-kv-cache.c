/* kernels/models: the UNet's cross-attention K/V cache.  The same forwards
 * (the timesteps of a few steps, on two prompts in the order A, A, B, B, A)
 * run on a model with the cache and on one built with
 * PPDIFFUSE_NO_KV_CACHE=1 give the same bytes, the cached model builds
 * once per change of prompt, and pp_unet_context_changed makes it see a
 * prompt rewritten in place.
 *
 * And the batched forward a stream batch runs: samples at different
 * timesteps on one prompt, each output the bytes of the sample's forward
 * alone (the CPU backends run a batch's samples apart), or within
 * BATCH_WHOLE_REL of them when the batch runs as one (as on a GPU), with
 * the cache built once for both.
 *
 * Usage: test-kernels-kv-cache DATA_DIR [g_test options] */
#include "pp-npy.h"
#include "pp-unet.h"

#include <math.h>
#include <string.h>

#define NO_KV_CACHE_ENV "PPDIFFUSE_NO_KV_CACHE"
/* B's prompt: A's scaled, so that every projection of it differs. */
#define CONTEXT_B_SCALE (-0.5f)

typedef struct
{
  const gchar *path;
  const gchar *model;
  const gchar *inputs;
} KvCase;

/* Batch 2 at 32×32: the transformer's rows split over the thread team. */
static const KvCase kv_cases[] = {
  { "/models/unet/sd15-tiny/kv-cache", "unet-sd15-tiny",
      "shapes/unet-sd15-tiny/32x32-b2" },
  { "/models/unet/turbo-tiny/kv-cache", "unet-turbo-tiny",
      "shapes/unet-turbo-tiny/32x32-b2" },
};

/* The prompts of successive forwards, and the timestep of each: the
 * steps of an epoch on A, then B, then A again. */
static const gchar forward_contexts[] = { 'A', 'A', 'B', 'B', 'A' };
static const gdouble forward_timesteps[] = { 999, 749, 999, 499, 249 };
/* A, B, A. */
#define EXPECTED_BUILDS 3

static const gchar *data_dir;

static PpTensor *
load_npy (const gchar * dir, const gchar * file)
{
  g_autofree gchar *path = g_build_filename (data_dir, dir, file, NULL);
  g_autoptr (GError) error = NULL;
  PpTensor *t = pp_npy_load (path, &error);

  g_assert_no_error (error);
  return t;
}

static PpUnet *
load_unet (const gchar * model, gboolean cache)
{
  g_autofree gchar *dir = g_build_filename (data_dir, model, NULL);
  g_autoptr (GError) error = NULL;
  PpUnet *unet;

  /* The switch is read when the model is built. */
  if (!cache)
    g_setenv (NO_KV_CACHE_ENV, "1", TRUE);
  unet = pp_unet_load (dir, pp_backend_default (), 0, &error);
  g_unsetenv (NO_KV_CACHE_ENV);
  g_assert_no_error (error);
  return unet;
}

static PpTensor *
on_device (const PpTensor * host)
{
  g_autoptr (GError) error = NULL;
  PpTensor *t = pp_tensor_new_on (pp_backend_default (), host->name,
      host->dtype, host->ndim, host->shape, &error);

  g_assert_no_error (error);
  g_assert_true (pp_tensor_upload (t, host, &error));
  g_assert_no_error (error);
  return t;
}

/* One forward of @unet into a host copy. */
static PpTensor *
forward (PpUnet * unet, const PpTensor * sample, gdouble timestep,
    const PpTensor * context)
{
  g_autoptr (GError) error = NULL;
  g_autoptr (PpTensor) out = pp_tensor_new_on (pp_backend_default (), "out",
      PP_DTYPE_F32, sample->ndim, sample->shape, &error);
  PpTensor *host;

  g_assert_no_error (error);
  g_assert_true (pp_unet_forward_into (unet, sample, timestep, context, out,
          &error));
  g_assert_no_error (error);
  host = pp_tensor_new ("out", PP_DTYPE_F32, sample->ndim, sample->shape,
      &error);
  g_assert_no_error (error);
  g_assert_true (pp_tensor_download (host, out, &error));
  g_assert_no_error (error);
  return host;
}

static void
assert_same_bytes (const PpTensor * a, const PpTensor * b)
{
  g_assert_cmpmem (a->data, a->nbytes, b->data, b->nbytes);
}

static void
test_kv_cache (gconstpointer data)
{
  const KvCase *c = data;
  g_autoptr (PpUnet) cached = load_unet (c->model, TRUE);
  g_autoptr (PpUnet) plain = load_unet (c->model, FALSE);
  g_autoptr (PpTensor) host_sample = load_npy (c->inputs, "sample.npy");
  g_autoptr (PpTensor) host_a = load_npy (c->inputs,
      "encoder_hidden_states.npy");
  g_autoptr (PpTensor) host_b = load_npy (c->inputs,
      "encoder_hidden_states.npy");
  g_autoptr (PpTensor) sample = NULL, context_a = NULL, context_b = NULL;
  g_autoptr (GError) error = NULL;
  gfloat *b = host_b->data;

  for (gint64 i = 0; i < pp_tensor_numel (host_b); i++)
    b[i] *= CONTEXT_B_SCALE;
  sample = on_device (host_sample);
  context_a = on_device (host_a);
  context_b = on_device (host_b);
  g_assert_cmpuint (pp_unet_kv_cache_builds (cached), ==, 0);

  for (guint i = 0; i < G_N_ELEMENTS (forward_contexts); i++) {
    const PpTensor *context = forward_contexts[i] == 'A' ? context_a
        : context_b;
    g_autoptr (PpTensor) with = forward (cached, sample,
        forward_timesteps[i], context);
    g_autoptr (PpTensor) without = forward (plain, sample,
        forward_timesteps[i], context);

    assert_same_bytes (with, without);
  }
  g_assert_cmpuint (pp_unet_kv_cache_builds (cached), ==, EXPECTED_BUILDS);
  g_assert_cmpuint (pp_unet_kv_cache_builds (plain), ==, 0);

  /* A's tensor rewritten with B's prompt: after pp_unet_context_changed
   * the cached model computes B's output, building once more. */
  g_assert_true (pp_tensor_upload (context_a, host_b, &error));
  g_assert_no_error (error);
  pp_unet_context_changed (cached);
  {
    g_autoptr (PpTensor) with = forward (cached, sample, 999, context_a);
    g_autoptr (PpTensor) without = forward (plain, sample, 999, context_b);

    assert_same_bytes (with, without);
  }
  g_assert_cmpuint (pp_unet_kv_cache_builds (cached), ==,
      EXPECTED_BUILDS + 1);
}

/* Sample @i of @batch as a tensor [1, C, H, W] on the device. */
static PpTensor *
sample_of (const PpTensor * batch, gint64 i)
{
  const gint64 shape[4] = { 1, batch->shape[1], batch->shape[2],
    batch->shape[3]
  };
  const gsize bytes = batch->nbytes / batch->shape[0];
  g_autoptr (GError) error = NULL;
  g_autoptr (PpTensor) host = pp_tensor_new ("sample", PP_DTYPE_F32, 4,
      shape, &error);

  g_assert_no_error (error);
  memcpy (host->data, (const guint8 *) batch->data + i * bytes, bytes);
  return on_device (host);
}

/* Four samples of distinct content at four timesteps: at 32×32 the batch
 * crosses the 3×3 convolution's repacking threshold (4096 output pixels
 * a call) that one sample stays under. */
#define BATCH 4
static const gdouble batch_timesteps[BATCH] = { 999, 749, 499, 249 };
static const gfloat batch_scales[BATCH] = { 1.0f, -1.0f, 0.5f, -2.0f };

/* The batch runs: the K/V cache's fixtures, and an odd size whose token
 * rows (1196 a sample) the backend cuts into ranges of another length
 * for a batch than for one sample; then a batch run as one
 * (pp_backend_set_samples_apart FALSE, what a GPU does). */
typedef struct
{
  KvCase c;
  gboolean whole;
} BatchCase;

static const BatchCase batch_cases[] = {
  {{"/models/unet/sd15-tiny/batch", "unet-sd15-tiny",
          "shapes/unet-sd15-tiny/32x32-b2"}, FALSE},
  {{"/models/unet/turbo-tiny/batch", "unet-turbo-tiny",
          "shapes/unet-turbo-tiny/32x32-b2"}, FALSE},
  {{"/models/unet/turbo-tiny/batch-26x46", "unet-turbo-tiny",
          "shapes/unet-turbo-tiny/26x46"}, FALSE},
  {{"/models/unet/turbo-tiny/batch-whole", "unet-turbo-tiny",
          "shapes/unet-turbo-tiny/32x32-b2"}, TRUE},
};

/* A batch run as one against its samples alone: max |diff| at most this
 * times max |alone| (float32 sums in another order; 1e-5 measured). */
#define BATCH_WHOLE_REL 1e-4

/* max |a - b| ≤ BATCH_WHOLE_REL · max |b| over @n floats. */
static void
assert_close (const gfloat * a, const gfloat * b, gsize n)
{
  gdouble diff = 0, ref = 0;

  for (gsize k = 0; k < n; k++) {
    diff = MAX (diff, fabs ((gdouble) a[k] - b[k]));
    ref = MAX (ref, fabs ((gdouble) b[k]));
  }
  g_assert_cmpfloat (diff, <=, BATCH_WHOLE_REL * ref);
}

/* A batched forward (pp_unet_forward_batch_into: BATCH samples, each at
 * its own timestep, one prompt for all) gives each sample the bytes of
 * its forward alone. */
static void
test_batch (gconstpointer data)
{
  const BatchCase *bc = data;
  const KvCase *c = &bc->c;
  PpBackend *be = pp_backend_default ();
  const gboolean apart = pp_backend_samples_apart (be);
  g_autoptr (PpUnet) unet = load_unet (c->model, TRUE);
  g_autoptr (PpTensor) fixture = load_npy (c->inputs, "sample.npy");
  g_autoptr (PpTensor) contexts = load_npy (c->inputs,
      "encoder_hidden_states.npy");
  const gint64 shape[4] = { BATCH, fixture->shape[1], fixture->shape[2],
    fixture->shape[3]
  };
  const gint64 ctx_shape[3] = { 1, contexts->shape[1], contexts->shape[2] };
  const gsize floats = pp_tensor_numel (fixture) / fixture->shape[0];
  const gsize bytes = floats * sizeof (gfloat);
  g_autoptr (GError) error = NULL;
  g_autoptr (PpTensor) host_batch = pp_tensor_new ("sample", PP_DTYPE_F32,
      4, shape, &error);
  g_autoptr (PpTensor) host_ctx = pp_tensor_new ("context", PP_DTYPE_F32, 3,
      ctx_shape, &error);
  g_autoptr (PpTensor) batch = NULL, context = NULL, out = NULL;
  g_autoptr (PpTensor) host_out = NULL;

  g_assert_no_error (error);
  /* Sample i: the fixture's sample i (mod its batch) times a scale. */
  for (gint64 i = 0; i < BATCH; i++) {
    const gfloat *from = (const gfloat *) fixture->data
        + (i % fixture->shape[0]) * floats;
    gfloat *to = (gfloat *) host_batch->data + i * floats;

    for (gsize k = 0; k < floats; k++)
      to[k] = batch_scales[i] * from[k];
  }
  memcpy (host_ctx->data, contexts->data, host_ctx->nbytes);
  batch = on_device (host_batch);
  context = on_device (host_ctx);
  out = pp_tensor_new_on (pp_backend_default (), "out", PP_DTYPE_F32, 4,
      shape, &error);
  g_assert_no_error (error);
  /* The CPU backends run samples apart; whole, as a GPU does. */
  g_assert_true (apart);
  pp_backend_set_samples_apart (be, !bc->whole);
  g_assert_true (pp_unet_forward_batch_into (unet, batch, batch_timesteps,
          context, out, &error));
  pp_backend_set_samples_apart (be, apart);
  g_assert_no_error (error);
  host_out = pp_tensor_new ("out", PP_DTYPE_F32, 4, shape, &error);
  g_assert_no_error (error);
  g_assert_true (pp_tensor_download (host_out, out, &error));
  g_assert_no_error (error);

  for (gint64 i = 0; i < BATCH; i++) {
    g_autoptr (PpTensor) one = sample_of (host_batch, i);
    g_autoptr (PpTensor) alone = forward (unet, one, batch_timesteps[i],
        context);

    if (bc->whole)
      assert_close ((const gfloat *) ((const guint8 *) host_out->data
              + i * bytes), alone->data, floats);
    else
      g_assert_cmpmem ((const guint8 *) host_out->data + i * bytes, bytes,
          alone->data, alone->nbytes);
  }
  /* One prompt: the batch built the cache, the single forwards used it. */
  g_assert_cmpuint (pp_unet_kv_cache_builds (unet), ==, 1);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  if (argc < 2) {
    g_printerr ("usage: %s DATA_DIR\n", argv[0]);
    return 2;
  }
  data_dir = argv[1];
  for (guint i = 0; i < G_N_ELEMENTS (kv_cases); i++)
    g_test_add_data_func (kv_cases[i].path, &kv_cases[i], test_kv_cache);
  for (guint i = 0; i < G_N_ELEMENTS (batch_cases); i++)
    g_test_add_data_func (batch_cases[i].c.path, &batch_cases[i],
        test_batch);
  return g_test_run ();
}
