/* ppdiffuse — CPU model benchmark: one UNet forward of a mid-size config and
 * a full-size TAESD encode + decode, each reported in GFLOP/s next to the
 * OpenBLAS sgemm rate measured in the same run (target: UNet ≥ 50 % of
 * sgemm).  FLOPs are counted by the op layer (convolutions, linears,
 * attention matmuls), so the figure is what the kernels really did.
 *
 * UNet: block_out_channels (64,128,256), 1 layer per block, cross-attention
 * in the first two blocks, linear projections, 8 heads, 32 norm groups,
 * 1×4×32×32 latent, 77×1024 text — the configuration of the diffusers
 * baseline in the field notes (141–148 ms per forward, 2 threads, fp32).
 * TAESD: the released configuration (64 channels, 1/3/3/3 blocks) at
 * 256×256 (baseline: 263–284 ms for encode + decode).
 *
 * With --sd-turbo, also one full SD-Turbo UNet forward at 512×512 (a 64×64
 * latent, 77×1024 text; ≈804 GFLOP), with seeded weights
 * (pp_weights_new_seeded: ~3.5 GB, a few seconds to generate), against
 * the sgemm rate measured before each of its runs.
 *
 * With --vaes, the two VAE classes side by side at 512×512: the released
 * TAESD and the SD VAE (AutoencoderKL), encode and decode each, seeded
 * weights. */
#include "pp-bench-configs.h"
#include "pp-config.h"
#include "pp-ops.h"
#include "pp-taesd.h"
#include "pp-unet.h"
#include "pp-vae-kl.h"
#include "pp-weights.h"

#include <cblas.h>
#include <json-glib/json-glib.h>
#include <stdio.h>
#include <stdlib.h>
#include <glib/gstdio.h>

/* Runs per figure, the best one reported: this machine's speed varies by
 * ±5 % from run to run, more when anything else runs. */
#define REPEATS 10
#define GEMM_SIZE 1024
#define UNET_LATENT 32
#define TEXT_TOKENS 77
#define TEXT_DIM 1024
#define TAESD_SIDE 256
#define UNET_TIMESTEP 500.0
#define WEIGHT_SEED 1
/* The full SD-Turbo forward: 5-10 s a run on two cores, so fewer runs. */
#define TURBO_REPEATS 3
#define TURBO_LATENT 64
#define TURBO_TIMESTEP 999.0
#define TURBO_INPUT_SEED 2
/* The field notes' count for one forward at 512×512, to compare with the
 * count of the op layer. */
#define TURBO_GFLOP_NOTED 804
/* The VAEs at 512×512: the full VAE takes tens of seconds a pass here. */
#define VAE_REPEATS 2
#define VAE_SIDE 512
#define VAE_LATENT (VAE_SIDE / 8)

static const gchar unet_config[] =
    "{\"_class_name\":\"UNet2DConditionModel\",\"in_channels\":4,"
    "\"out_channels\":4,\"block_out_channels\":[64,128,256],"
    "\"layers_per_block\":1,\"down_block_types\":[\"CrossAttnDownBlock2D\","
    "\"CrossAttnDownBlock2D\",\"DownBlock2D\"],\"up_block_types\":"
    "[\"UpBlock2D\",\"CrossAttnUpBlock2D\",\"CrossAttnUpBlock2D\"],"
    "\"mid_block_type\":\"UNetMidBlock2DCrossAttn\",\"cross_attention_dim\":"
    "1024,\"attention_head_dim\":8,\"norm_num_groups\":32,\"norm_eps\":1e-5,"
    "\"use_linear_projection\":true,\"flip_sin_to_cos\":true,"
    "\"freq_shift\":0,\"act_fn\":\"silu\",\"sample_size\":32}";

static gdouble
now_s (void)
{
  return g_get_monotonic_time () / 1e6;
}

/* The reference: one 1024³ sgemm on OpenBLAS's own @threads; returns its
 * seconds.  The CPU ops keep OpenBLAS on one thread (they split GEMMs
 * themselves), so this sets @threads for the call and 1 again after it.
 * OpenBLAS's idle threads then spin for work for a while (2^28 cycles),
 * taking a little from the model run that follows: the ratio errs against
 * the model. */
static gdouble
sgemm_seconds (const gfloat * a, const gfloat * b, gfloat * c, int threads)
{
  const gsize n = GEMM_SIZE;
  gdouble t;

  openblas_set_num_threads (threads);
  t = now_s ();
  cblas_sgemm (CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a,
      n, b, n, 0.0f, c, n);
  t = now_s () - t;
  openblas_set_num_threads (1);
  return t;
}

static gchar *
write_config (const gchar * dir, const gchar * name, const gchar * text)
{
  gchar *path = g_build_filename (dir, name, NULL);

  if (!g_file_set_contents (path, text, -1, NULL))
    g_error ("cannot write %s", path);
  return path;
}

static PpTensor *
random_tensor (const gchar * name, guint ndim, const gint64 * shape)
{
  PpTensor *t = pp_tensor_new (name, PP_DTYPE_F32, ndim, shape, NULL);
  GRand *r = g_rand_new_with_seed (WEIGHT_SEED);

  for (gint64 i = 0; i < pp_tensor_numel (t); i++)
    ((gfloat *) t->data)[i] = (gfloat) g_rand_double_range (r, -1, 1);
  g_rand_free (r);
  return t;
}

typedef struct
{
  gdouble seconds;
  gdouble gflop;
} Timing;

/* Runs @func REPEATS more times with the op profile on and prints where
 * the time went, op by op, per run on average. */
static void
print_profile (const gchar * what, void (*func) (gpointer), gpointer data)
{
  gdouble total = 0.0, t;

  pp_ops_reset_flop_count ();
  pp_ops_set_profiling (TRUE);
  t = now_s ();
  for (guint r = 0; r < REPEATS; r++)
    func (data);
  t = (now_s () - t) / REPEATS;
  pp_ops_set_profiling (FALSE);
  printf ("\n%s with the op profile on: %.1f ms per run (mean of %d)\n",
      what, t * 1e3, REPEATS);
  printf ("  %-20s %6s %9s %7s %9s\n", "op", "calls", "ms", "share",
      "GFLOP/s");
  for (PpOp op = 0; op < PP_OP_COUNT; op++) {
    PpOpProfile p;
    gdouble s;

    pp_ops_get_profile (op, &p);
    if (p.calls == 0)
      continue;
    s = p.seconds / REPEATS;
    total += s;
    printf ("  %-20s %6" G_GUINT64_FORMAT " %9.2f %6.1f%%", p.name,
        p.calls / REPEATS, s * 1e3, 100 * s / t);
    if (p.flops > 0)
      printf (" %9.1f", p.flops / p.seconds / 1e9);
    printf ("\n");
  }
  printf ("  %-20s %6s %9.2f %6.1f%%\n", "(between ops)", "",
      (t - total) * 1e3, 100 * (t - total) / t);
}

static void
report (const gchar * what, Timing t, gdouble sgemm, const gchar * baseline)
{
  gdouble rate = t.gflop / t.seconds;

  printf ("%-22s %8.1f ms  %7.2f GFLOP  %7.1f GFLOP/s  %5.1f %% of sgemm"
      "   (%s)\n", what, t.seconds * 1e3, t.gflop, rate, 100 * rate / sgemm,
      baseline);
}

typedef struct
{
  PpUnet *unet;
  PpTaesd *taesd;
  PpTensor *sample, *text, *image;
  gdouble timestep;
} Models;

static void
unet_run (gpointer data)
{
  Models *m = data;
  PpTensor *out = NULL;
  GError *error = NULL;

  if (!pp_unet_forward (m->unet, m->sample, m->timestep, m->text, &out,
          NULL, NULL, &error))
    g_error ("%s", error->message);
  pp_tensor_free (out);
}

static void
taesd_run (gpointer data)
{
  Models *m = data;
  PpTensor *z = NULL, *x = NULL;
  GError *error = NULL;

  if (!pp_taesd_encode (m->taesd, m->image, &z, NULL, NULL, &error)
      || !pp_taesd_decode (m->taesd, z, &x, NULL, NULL, &error))
    g_error ("%s", error->message);
  pp_tensor_free (z);
  pp_tensor_free (x);
}

/* Best of @repeats runs of @func, with the FLOPs of one.  With @sgemm set,
 * a reference sgemm runs before each run, and *@sgemm gets the best rate
 * of those: both figures then come from the same moments of this machine,
 * whose speed drifts by several per cent within seconds. */
static Timing
best_of (void (*func) (gpointer), gpointer data, guint repeats,
    gdouble * sgemm, int blas_threads)
{
  const gsize n = GEMM_SIZE;
  g_autofree gfloat *a = NULL, *b = NULL, *c = NULL;
  Timing best = { G_MAXDOUBLE, 0 };
  gdouble sgemm_best = G_MAXDOUBLE;

  if (sgemm != NULL) {
    a = g_new (gfloat, n * n);
    b = g_new (gfloat, n * n);
    c = g_new (gfloat, n * n);
    for (gsize i = 0; i < n * n; i++)
      a[i] = b[i] = (gfloat) ((i % 17) * 0.01);
  }
  for (guint r = 0; r < repeats; r++) {
    gdouble t;

    if (sgemm != NULL)
      sgemm_best = MIN (sgemm_best, sgemm_seconds (a, b, c, blas_threads));
    t = now_s ();
    pp_ops_reset_flop_count ();
    func (data);
    best.seconds = MIN (best.seconds, now_s () - t);
    best.gflop = pp_ops_flop_count () / 1e9;
  }
  if (sgemm != NULL)
    *sgemm = 2.0 * n * n * n / sgemm_best / 1e9;
  return best;
}

/* A UNet step as the workers run it: pp_unet_forward_into on device
 * tensors, the same prompt every step. */
typedef struct
{
  PpUnet *unet;
  PpTensor *sample, *text, *out;
  gdouble timestep;
} Step;

static void
step_run (gpointer data)
{
  Step *s = data;
  GError *error = NULL;

  if (!pp_unet_forward_into (s->unet, s->sample, s->timestep, s->text,
          s->out, &error))
    g_error ("%s", error->message);
}

static PpTensor *
device_copy (const PpTensor * host)
{
  PpTensor *t = pp_tensor_new_on (pp_backend_default (), host->name,
      host->dtype, host->ndim, host->shape, NULL);

  if (t == NULL || !pp_tensor_upload (t, host, NULL))
    g_error ("model-bench: cannot upload %s", host->name);
  return t;
}

/* One step of the UNet of @config_path with and without the cross-attention
 * K/V cache (PPDIFFUSE_NO_KV_CACHE=1 when the model is built), best of
 * @repeats each, side by side. */
static void
bench_kv_cache (const gchar * label, const gchar * config_path,
    PpWeights * w, const PpTensor * sample, const PpTensor * text,
    gdouble timestep, guint repeats)
{
  Step s = { NULL, device_copy (sample), device_copy (text), NULL,
    timestep
  };
  Timing with, without;

  s.out = device_copy (sample);
  g_setenv ("PPDIFFUSE_NO_KV_CACHE", "1", TRUE);
  s.unet = pp_unet_new (config_path, w, pp_backend_default (), NULL);
  g_unsetenv ("PPDIFFUSE_NO_KV_CACHE");
  step_run (&s);
  without = best_of (step_run, &s, repeats, NULL, 0);
  pp_unet_free (s.unet);
  s.unet = pp_unet_new (config_path, w, pp_backend_default (), NULL);
  step_run (&s);                /* builds the cache */
  with = best_of (step_run, &s, repeats, NULL, 0);
  printf ("%s step, K/V cache: without %.1f ms (%.2f GFLOP), with %.1f ms "
      "(%.2f GFLOP): saves %.2f ms (%.1f %%) a step (best of %u)\n", label,
      without.seconds * 1e3, without.gflop, with.seconds * 1e3, with.gflop,
      (without.seconds - with.seconds) * 1e3,
      100 * (without.seconds - with.seconds) / without.seconds, repeats);
  pp_unet_free (s.unet);
  pp_tensor_free (s.sample);
  pp_tensor_free (s.text);
  pp_tensor_free (s.out);
}

static PpTensor *
seeded_input (const gchar * name, guint ndim, const gint64 * shape)
{
  PpTensor *t = pp_tensor_new (name, PP_DTYPE_F32, ndim, shape, NULL);

  pp_seeded_fill_input (TURBO_INPUT_SEED, name, pp_tensor_numel (t), t->data);
  return t;
}

/* One full SD-Turbo forward at 512×512, best of TURBO_REPEATS, each run
 * after an sgemm of its own.  Only this model is resident meanwhile. */
static void
bench_turbo (const gchar * dir, int blas_threads)
{
  const gint64 sample_shape[4] = { 1, 4, TURBO_LATENT, TURBO_LATENT };
  const gint64 text_shape[3] = { 1, TEXT_TOKENS, TEXT_DIM };
  g_autofree gchar *path = write_config (dir, "turbo.json", turbo_config);
  PpWeights *w = pp_weights_new_seeded (WEIGHT_SEED);
  GError *error = NULL;
  Models m = { 0 };
  Timing t;
  gdouble sgemm, build;
  gchar desc[64];

  build = now_s ();
  m.unet = pp_unet_new (path, w, pp_backend_default (), &error);
  if (m.unet == NULL)
    g_error ("%s", error->message);
  build = now_s () - build;
  m.sample = seeded_input ("sample", 4, sample_shape);
  m.text = seeded_input ("encoder_hidden_states", 3, text_shape);
  m.timestep = TURBO_TIMESTEP;
  t = best_of (unet_run, &m, TURBO_REPEATS, &sgemm, blas_threads);
  printf ("\nSD-Turbo UNet: %" G_GUINT64_FORMAT " parameters, seeded "
      "weights generated and bound in %.1f s\n", pp_weights_n_params (w),
      build);
  printf ("OpenBLAS sgemm %dx%dx%d: %.1f GFLOP/s (best of %d, %d threads, "
      "each before an SD-Turbo run)\n", GEMM_SIZE, GEMM_SIZE, GEMM_SIZE,
      sgemm, TURBO_REPEATS, blas_threads);
  g_snprintf (desc, sizeof desc, "best of %d; field notes: ~%d GFLOP",
      TURBO_REPEATS, TURBO_GFLOP_NOTED);
  report ("SD-Turbo UNet 64x64", t, sgemm, desc);
  {
    PpPoolBytes pools = { 0 };

    pp_unet_pools (m.unet, &pools);
    printf ("SD-Turbo activation pool: %.1f MiB (at most %.1f MiB in use "
        "at once)\n", pools.held / 1048576.0, pools.peak / 1048576.0);
  }
  pp_unet_free (m.unet);
  bench_kv_cache ("SD-Turbo 64x64", path, w, m.sample, m.text,
      TURBO_TIMESTEP, TURBO_REPEATS);
  pp_tensor_free (m.sample);
  pp_tensor_free (m.text);
  pp_weights_free (w);
  g_unlink (path);
}

typedef struct
{
  PpTaesd *taesd;
  PpVaeKl *kl;
  PpTensor *image, *latents;
  gboolean decode;
} Vaes;

static void
vae_run (gpointer data)
{
  Vaes *v = data;
  PpTensor *out = NULL;
  GError *error = NULL;
  gboolean ok;

  if (v->taesd != NULL)
    ok = v->decode
        ? pp_taesd_decode (v->taesd, v->latents, &out, NULL, NULL, &error)
        : pp_taesd_encode (v->taesd, v->image, &out, NULL, NULL, &error);
  else
    ok = v->decode
        ? pp_vae_kl_decode (v->kl, v->latents, &out, NULL, NULL, &error)
        : pp_vae_kl_encode (v->kl, v->image, &out, NULL, NULL, &error);
  if (!ok)
    g_error ("%s", error->message);
  pp_tensor_free (out);
}

/* TAESD and AutoencoderKL, encode and decode at 512×512, one model
 * resident at a time; each figure the best of VAE_REPEATS after a pass
 * that sizes the pools. */
static void
bench_vaes (const gchar * dir, int blas_threads)
{
  const gint64 image_shape[4] = { 1, 3, VAE_SIDE, VAE_SIDE };
  const gint64 latent_shape[4] = { 1, 4, VAE_LATENT, VAE_LATENT };
  g_autofree gchar *taesd_path = write_config (dir, "taesd512.json",
      taesd_config);
  g_autofree gchar *kl_path = write_config (dir, "vae-kl.json",
      vae_kl_config);
  Vaes v = { 0 };
  Timing t[2][2];
  gdouble sgemm[2][2];
  GError *error = NULL;

  v.image = seeded_input ("image", 4, image_shape);
  /* [-1, 1] as a frame is */
  for (gint64 i = 0; i < pp_tensor_numel (v.image); i++)
    ((gfloat *) v.image->data)[i] = CLAMP (((gfloat *) v.image->data)[i]
        / 2.0f, -1.0f, 1.0f);
  v.latents = seeded_input ("latents", 4, latent_shape);
  for (guint kl = 0; kl < 2; kl++) {
    PpWeights *w = pp_weights_new_seeded (WEIGHT_SEED);

    if (kl)
      v.kl = pp_vae_kl_new (kl_path, w, pp_backend_default (), &error);
    else
      v.taesd = pp_taesd_new (taesd_path, w, pp_backend_default (), &error);
    if (error != NULL)
      g_error ("%s", error->message);
    for (guint decode = 0; decode < 2; decode++) {
      v.decode = decode;
      vae_run (&v);
      t[kl][decode] = best_of (vae_run, &v, VAE_REPEATS, &sgemm[kl][decode],
          blas_threads);
    }
    g_clear_pointer (&v.taesd, pp_taesd_free);
    g_clear_pointer (&v.kl, pp_vae_kl_free);
    pp_weights_free (w);
  }
  printf ("\nVAEs at %dx%d (best of %d, OpenBLAS sgemm %.1f GFLOP/s on %d "
      "threads before each run):\n", VAE_SIDE, VAE_SIDE, VAE_REPEATS,
      MAX (MAX (sgemm[0][0], sgemm[0][1]), MAX (sgemm[1][0], sgemm[1][1])),
      blas_threads);
  report ("TAESD encode 512x512", t[0][0], sgemm[0][0], "madebyollin/taesd");
  report ("TAESD decode 512x512", t[0][1], sgemm[0][1], "madebyollin/taesd");
  report ("AutoencoderKL encode 512x512", t[1][0], sgemm[1][0], "SD VAE");
  report ("AutoencoderKL decode 512x512", t[1][1], sgemm[1][1], "SD VAE");
  printf ("AutoencoderKL / TAESD: encode %.1fx, decode %.1fx, both %.1fx "
      "the time\n", t[1][0].seconds / t[0][0].seconds,
      t[1][1].seconds / t[0][1].seconds,
      (t[1][0].seconds + t[1][1].seconds)
      / (t[0][0].seconds + t[0][1].seconds));
  pp_tensor_free (v.image);
  pp_tensor_free (v.latents);
  g_unlink (taesd_path);
  g_unlink (kl_path);
}

int
main (int argc, char **argv)
{
  gboolean profile = FALSE, turbo = FALSE, vaes = FALSE;
  const GOptionEntry entries[] = {
    {"profile", 0, 0, G_OPTION_ARG_NONE, &profile,
        "Also print where each model's time goes, op by op", NULL},
    {"sd-turbo", 0, 0, G_OPTION_ARG_NONE, &turbo,
          "Also time one full SD-Turbo UNet forward at 512x512 (~3.5 GB of "
          "weights, about a minute)", NULL},
    {"vaes", 0, 0, G_OPTION_ARG_NONE, &vaes,
          "Also time TAESD and the SD VAE (AutoencoderKL) encoding and "
          "decoding at 512x512 (a few minutes)", NULL},
    {NULL}
  };
  g_autoptr (GOptionContext) ctx = g_option_context_new ("");
  g_autofree gchar *dir = NULL, *unet_path = NULL, *taesd_path = NULL;
  const gint64 sample_shape[4] = { 1, 4, UNET_LATENT, UNET_LATENT };
  const gint64 text_shape[3] = { 1, TEXT_TOKENS, TEXT_DIM };
  const gint64 image_shape[4] = { 1, 3, TAESD_SIDE, TAESD_SIDE };
  GError *error = NULL;
  PpWeights *uw = pp_weights_new_random (WEIGHT_SEED);
  PpWeights *tw = pp_weights_new_random (WEIGHT_SEED);
  Models m = { 0 };
  Timing u, v;
  gdouble sgemm;
  int blas_threads;

  g_option_context_set_summary (ctx, "Times a UNet forward and a TAESD "
      "encode + decode on the CPU next to the OpenBLAS sgemm rate.");
  g_option_context_add_main_entries (ctx, entries, NULL);
  if (!g_option_context_parse (ctx, &argc, &argv, &error)) {
    fprintf (stderr, "model-bench: %s\n", error->message);
    return 2;
  }
  /* Before any op: the CPU ops set OpenBLAS to one thread when they start
   * their own team of threads. */
  blas_threads = openblas_get_num_threads ();
  dir = g_dir_make_tmp ("ppdiffuse-bench-XXXXXX", NULL);
  unet_path = write_config (dir, "unet.json", unet_config);
  taesd_path = write_config (dir, "taesd.json", taesd_config);
  m.sample = random_tensor ("sample", 4, sample_shape);
  m.text = random_tensor ("text", 3, text_shape);
  m.image = random_tensor ("image", 4, image_shape);
  m.timestep = UNET_TIMESTEP;
  m.unet = pp_unet_new (unet_path, uw, pp_backend_default (), &error);
  m.taesd = m.unet ? pp_taesd_new (taesd_path, tw, pp_backend_default (),
      &error) : NULL;
  if (m.taesd == NULL) {
    fprintf (stderr, "model-bench: %s\n", error->message);
    return 1;
  }
  /* a first forward starts the ops' threads (and sets OpenBLAS to one) */
  unet_run (&m);
  u = best_of (unet_run, &m, REPEATS, &sgemm, blas_threads);
  v = best_of (taesd_run, &m, REPEATS, NULL, blas_threads);
  printf ("OpenBLAS sgemm %dx%dx%d: %.1f GFLOP/s (best of %d, %d threads, "
      "each before a UNet run)\n", GEMM_SIZE, GEMM_SIZE, GEMM_SIZE, sgemm,
      REPEATS, blas_threads);
  report ("UNet forward 32x32", u, sgemm, "diffusers: 141-148 ms");
  report ("TAESD enc+dec 256x256", v, sgemm, "diffusers: 263-284 ms");
  printf ("UNet at %.0f %% of sgemm (target >= 50 %%)\n",
      100 * (u.gflop / u.seconds) / sgemm);
  {
    PpPoolBytes unet = { 0 }, taesd = { 0 };

    pp_unet_pools (m.unet, &unet);
    pp_taesd_pools (m.taesd, &taesd);
    printf ("activation pools: UNet %.1f MiB, TAESD %.1f MiB (device memory "
        "kept for the next forward; at most %.1f and %.1f MiB in use at "
        "once)\n", unet.held / 1048576.0, taesd.held / 1048576.0,
        unet.peak / 1048576.0, taesd.peak / 1048576.0);
  }
  bench_kv_cache ("UNet 32x32", unet_path, uw, m.sample, m.text,
      UNET_TIMESTEP, REPEATS);
  if (profile) {
    print_profile ("UNet forward 32x32", unet_run, &m);
    print_profile ("TAESD enc+dec 256x256", taesd_run, &m);
  }
  pp_unet_free (m.unet);
  pp_taesd_free (m.taesd);
  pp_tensor_free (m.sample);
  pp_tensor_free (m.text);
  pp_tensor_free (m.image);
  pp_weights_free (uw);
  pp_weights_free (tw);
  if (turbo)
    bench_turbo (dir, blas_threads);
  if (vaes)
    bench_vaes (dir, blas_threads);
  g_unlink (unet_path);
  g_unlink (taesd_path);
  g_rmdir (dir);
  return 0;
}
