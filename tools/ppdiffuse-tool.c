/* ppdiffuse-tool — check a model before going live, and run its pieces on
 * files for numerical checks.  Tensors are .npy (float32, C order, NCHW).
 *
 *   ppdiffuse-tool info MODEL_DIR
 *   ppdiffuse-tool unet --model UNET_DIR --sample X.npy --timestep T
 *                       --encoder-hidden-states E.npy --out Y.npy
 *   ppdiffuse-tool vae-encode --model VAE_DIR --image X.npy --out Z.npy
 *   ppdiffuse-tool vae-decode --model VAE_DIR --latents Z.npy --out X.npy
 *   ppdiffuse-tool encode-prompt --model PIPELINE_DIR --ids "49406 …"
 *                  --out E.npy   (the text encoder's [1, 77, D] states)
 *   ppdiffuse-tool img2img --model PIPELINE_DIR --in IN.png --out OUT.png
 *                  --prompt-embeds E [--strength S] [--seed N] [--steps S]
 *                  [--t-index-list A,B] [--scheduler euler|lcm]
 *                  [--frames N] [--vae VAE_DIR] [--lora PATH[:SCALE],…]
 *
 * Every command that computes takes --backend B (auto, cpu, cpu-strict;
 * default: $PPDIFFUSE_BACKEND, else auto).
 *   ppdiffuse-tool make-tiny --kind sd15|turbo|taesd|vae-kl|lora --out DIR
 *                  [--seed N]
 *   ppdiffuse-tool tokenize --tokenizer DIR (--prompt TEXT | --prompts-file F)
 *                  (CLIP token ids, one line of model_max_length per prompt)
 *   ppdiffuse-tool test-ops [--backend B] [--op NAME] [--verbose]
 *                  (every op of the backend against float64 references;
 *                  exit status 1 when one fails, 2 on bad usage)
 *
 * img2img runs exactly the model code the element runs (encode on rank 0,
 * steps on the workers, decode on rank 0), in one process. */
#include "pp-clip-text.h"
#include "pp-clip-tokenizer.h"
#include "pp-prompt.h"
#include "pp-config.h"
#include "pp-error.h"
#include "pp-model.h"
#include "pp-npy.h"
#include "pp-png.h"
#include "pp-checkpoint.h"
#include "pp-lora.h"
#include "pp-vae.h"
#include "pp-test-ops.h"
#include "pp-tiny.h"
#include "pp-tokenize.h"
#include "pp-unet.h"
#include "pp-weights.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_STEPS 1

typedef gboolean (*CommandFunc) (int argc, char **argv, GError ** error);

static gboolean
parse (GOptionEntry * entries, const gchar * usage, int *argc, char ***argv,
    GError ** error)
{
  g_autoptr (GOptionContext) ctx = g_option_context_new (usage);

  g_option_context_add_main_entries (ctx, entries, NULL);
  return g_option_context_parse (ctx, argc, argv, error);
}

#define BACKEND_ENTRY(var) \
  {"backend", 0, 0, G_OPTION_ARG_STRING, &(var), \
      "compute backend: auto, cpu, cpu-strict, cuda or cuda:N (default " \
      "$PPDIFFUSE_BACKEND, else auto)", "B"}
#define DTYPE_ENTRY(var) \
  {"dtype", 0, 0, G_OPTION_ARG_STRING, &(var), \
      "weights stored as f32, f16 or bf16 (default: f16 on cuda, f32 on " \
      "the CPU backends, which round the weights to a 16-bit dtype's " \
      "precision)", "D"}

/* --dtype: 0 (the backend's default) when not given. */
static gboolean
parse_dtype (const gchar * name, PpDType * dtype, GError ** error)
{
  *dtype = 0;
  return name == NULL || pp_dtype_parse_weights (name, dtype, error);
}

static gboolean
require (const gchar * value, const gchar * option, GError ** error)
{
  if (value != NULL)
    return TRUE;
  g_set_error (error, PP_ERROR, PP_ERROR_CONFIG, "%s is required", option);
  return FALSE;
}

/* ---- info -------------------------------------------------------------- */

/* What ppdiffuse does with a component of class @klass in a pipeline's
 * directory @role (unet, vae, text_encoder; NULL: a lone component): the
 * line "runs:" of info, with the fix when it does not run it. */
static gchar *
info_runs (const gchar * role, const gchar * klass)
{
  static const struct
  {
    const gchar *role, *klass, *does;
  } runs[] = {
    { "unet", "UNet2DConditionModel", "the workers' denoising steps" },
    { "vae", "AutoencoderTiny", "rank 0's encode and decode (TAESD: fast)" },
    { "vae", "AutoencoderKL", "rank 0's encode and decode (the full VAE: "
        "slower than TAESD, for quality; vae=DIR with a TAESD folder, such "
        "as madebyollin/taesd, for speed)" },
    { "text_encoder", "CLIPTextModel", "rank 0's text prompts (prompt=)" },
  };

  for (guint i = 0; i < G_N_ELEMENTS (runs); i++)
    if (g_str_equal (klass, runs[i].klass)
        && (role == NULL || g_str_equal (role, runs[i].role)))
      return g_strdup_printf ("yes: %s", runs[i].does);
  if (g_strcmp0 (role, "vae") == 0)
    return g_strdup_printf ("no: ppdiffuse runs " PP_VAE_CLASSES " as its "
        "VAE, not %s; give the element vae=DIR (ppdiffuse-tool --vae DIR) "
        "with a folder of one, such as madebyollin/taesd", klass);
  return g_strdup_printf ("no: ppdiffuse runs UNet2DConditionModel (unet/), "
      PP_VAE_CLASSES " (vae/ or vae=) and CLIPTextModel (text_encoder/), "
      "not %s", klass);
}

/* "F16 (610), F32 (2)": the tensors' stored dtypes, most common first. */
static gchar *
info_dtypes (const gchar * weights_path, GError ** error)
{
  PpSafetensors *st = pp_safetensors_open (weights_path, error);
  g_autoptr (GString) text = g_string_new (NULL);
  guint counts[8] = { 0 };

  if (st == NULL)
    return NULL;
  for (guint i = 0; i < pp_safetensors_n_entries (st); i++) {
    const PpStEntry *e = pp_safetensors_entry (st, i);

    if ((guint) e->dtype < G_N_ELEMENTS (counts))
      counts[e->dtype]++;
  }
  pp_safetensors_free (st);
  for (;;) {
    guint best = 0;

    for (guint d = 1; d < G_N_ELEMENTS (counts); d++)
      if (counts[d] > counts[best])
        best = d;
    if (counts[best] == 0)
      break;
    g_string_append_printf (text, "%s%s (%u)", text->len ? ", " : "",
        pp_st_dtype_name (best), counts[best]);
    counts[best] = 0;
  }
  return g_string_free (g_steal_pointer (&text), FALSE);
}

static gboolean
info_component (const gchar * dir, const gchar * role, GError ** error)
{
  g_autofree gchar *config_path = g_build_filename (dir, "config.json", NULL);
  g_autofree gchar *weights_path = NULL;
  g_autofree gchar *class_name = NULL, *dtypes = NULL, *runs = NULL;
  PpConfig *cfg = pp_config_load (config_path, error);
  PpWeights *w;

  if (cfg == NULL)
    return FALSE;
  /* diffusers names the class; transformers lists its architectures. */
  pp_config_get_string (cfg, "_class_name", NULL, &class_name, NULL);
  if (class_name == NULL) {
    g_auto (GStrv) archs = NULL;

    if (pp_config_get_string_list (cfg, "architectures", &archs, NULL)
        && archs != NULL && archs[0] != NULL)
      class_name = g_strdup (archs[0]);
  }
  if (class_name == NULL)
    class_name = g_strdup ("(unnamed)");
  pp_config_free (cfg);
  /* A text encoder keeps transformers' file names. */
  for (guint i = 0; weights_path == NULL && i < 2; i++) {
    g_autofree gchar *p = g_build_filename (dir, i == 0 ? "model.safetensors"
        : "model.fp16.safetensors", NULL);

    if (g_file_test (p, G_FILE_TEST_IS_REGULAR))
      weights_path = g_steal_pointer (&p);
  }
  if (weights_path == NULL) {
    g_autoptr (GError) missing = NULL;

    weights_path = pp_model_dir_weights_path (dir, &missing);
    if (weights_path == NULL) {
      /* Said, and the other components still described. */
      runs = info_runs (role, class_name);
      printf ("%s\n  class:      %s\n  runs:       %s\n  config:     %s\n"
          "  weights:    none (%s)\n", dir, class_name, runs, config_path,
          missing->message);
      return TRUE;
    }
  }
  w = pp_weights_open (weights_path, error);
  if (w == NULL)
    return FALSE;
  dtypes = info_dtypes (weights_path, error);
  if (dtypes == NULL) {
    pp_weights_free (w);
    return FALSE;
  }
  runs = info_runs (role, class_name);
  printf ("%s\n  class:      %s\n  runs:       %s\n  config:     %s\n"
      "  weights:    %s\n  dtypes:     %s\n  tensors:    %u\n"
      "  parameters: %" G_GUINT64_FORMAT "\n  sha256:     %s\n", dir,
      class_name, runs, config_path, weights_path, dtypes,
      pp_weights_n_tensors (w), pp_weights_n_params (w),
      pp_weights_digest (w));
  pp_weights_free (w);
  return TRUE;
}

static gboolean
cmd_info (int argc, char **argv, GError ** error)
{
  static const gchar *const components[] = { "unet", "vae", "text_encoder" };
  GOptionEntry entries[] = { {NULL} };
  g_autofree gchar *config = NULL;
  gboolean any = FALSE;
  PpFamily family;

  if (!parse (entries, "MODEL_DIR", &argc, &argv, error))
    return FALSE;
  if (argc != 2) {
    g_set_error (error, PP_ERROR, PP_ERROR_CONFIG, "usage: info MODEL_DIR");
    return FALSE;
  }
  config = g_build_filename (argv[1], "config.json", NULL);
  if (g_file_test (config, G_FILE_TEST_EXISTS))
    return info_component (argv[1], NULL, error);
  /* A lone safetensors file: a single-file checkpoint, else a LoRA. */
  if (pp_checkpoint_is_file (argv[1])
      && pp_checkpoint_family (argv[1], &family, NULL)) {
    printf ("%s\n  class:      single-file checkpoint, original layout "
        "(%s: UNet, AutoencoderKL, text encoder)\n  runs:       yes: "
        "model=%s?config=DIR, DIR a diffusers folder of its architecture "
        "(with tokenizer/ for prompts); without config= the %s released "
        "configurations\n", argv[1], pp_family_name (family), argv[1],
        pp_family_name (family));
    return TRUE;
  }
  if (g_file_test (argv[1], G_FILE_TEST_IS_REGULAR)) {
    g_autoptr (PpLora) lora = pp_lora_open (argv[1], error);
    g_autofree gchar *text = NULL;

    if (lora == NULL)
      return FALSE;
    text = pp_lora_describe (lora);
    printf ("%s\n  class:      LoRA\n  runs:       yes: lora=%s[:SCALE] "
        "fuses it at load\n", text, argv[1]);
    return TRUE;
  }
  /* A pipeline directory: describe each component. */
  for (guint i = 0; i < G_N_ELEMENTS (components); i++) {
    g_autofree gchar *sub = g_build_filename (argv[1], components[i], NULL);
    if (!g_file_test (sub, G_FILE_TEST_IS_DIR))
      continue;
    if (!info_component (sub, components[i], error))
      return FALSE;
    any = TRUE;
  }
  if (!any)
    g_set_error (error, PP_ERROR, PP_ERROR_MODEL, "%s holds neither "
        "config.json nor unet/ or vae/ components", argv[1]);
  return any;
}

/* ---- unet / vae -------------------------------------------------------- */

static gboolean
cmd_unet (int argc, char **argv, GError ** error)
{
  g_autofree gchar *model = NULL, *sample = NULL, *context = NULL,
      *out = NULL, *backend = NULL, *dtype_name = NULL;
  gdouble timestep = -1;
  PpDType dtype;
  GOptionEntry entries[] = {
    {"model", 0, 0, G_OPTION_ARG_FILENAME, &model, "UNet component dir",
        "DIR"},
    {"sample", 0, 0, G_OPTION_ARG_FILENAME, &sample, "latents [N,C,H,W]",
        "X.npy"},
    {"timestep", 0, 0, G_OPTION_ARG_DOUBLE, &timestep, "timestep", "T"},
    {"encoder-hidden-states", 0, 0, G_OPTION_ARG_FILENAME, &context,
        "text embeddings [N,L,D]", "E.npy"},
    {"out", 0, 0, G_OPTION_ARG_FILENAME, &out, "output", "Y.npy"},
    BACKEND_ENTRY (backend),
    DTYPE_ENTRY (dtype_name),
    {NULL}
  };
  g_autoptr (PpTensor) x = NULL, e = NULL, y = NULL;
  PpBackend *be;
  PpUnet *unet;
  gboolean ok;

  if (!parse (entries, "- run one UNet forward", &argc, &argv, error)
      || !require (model, "--model", error)
      || !require (sample, "--sample", error)
      || !require (context, "--encoder-hidden-states", error)
      || !require (out, "--out", error))
    return FALSE;
  if (timestep < 0) {
    g_set_error (error, PP_ERROR, PP_ERROR_CONFIG, "--timestep is required");
    return FALSE;
  }
  if (!parse_dtype (dtype_name, &dtype, error)
      || (be = pp_backend_get (backend, error)) == NULL
      || (x = pp_npy_load (sample, error)) == NULL
      || (e = pp_npy_load (context, error)) == NULL
      || (unet = pp_unet_load (model, be, dtype, error)) == NULL)
    return FALSE;
  ok = pp_unet_forward (unet, x, timestep, e, &y, NULL, NULL, error)
      && pp_npy_save (out, y, error);
  pp_unet_free (unet);
  return ok;
}

static gboolean
cmd_vae (int argc, char **argv, gboolean encode, GError ** error)
{
  g_autofree gchar *model = NULL, *in = NULL, *out = NULL, *backend = NULL,
      *dtype_name = NULL;
  PpDType dtype;
  GOptionEntry entries[] = {
    {"model", 0, 0, G_OPTION_ARG_FILENAME, &model,
        "VAE component dir (AutoencoderTiny or AutoencoderKL)", "DIR"},
    {encode ? "image" : "latents", 0, 0, G_OPTION_ARG_FILENAME, &in,
        encode ? "image [N,3,H,W] in [-1,1]" : "latents [N,C,h,w]", "X.npy"},
    {"out", 0, 0, G_OPTION_ARG_FILENAME, &out, "output", "Y.npy"},
    BACKEND_ENTRY (backend),
    DTYPE_ENTRY (dtype_name),
    {NULL}
  };
  g_autoptr (PpTensor) x = NULL, y = NULL;
  PpBackend *be;
  PpVae *vae;
  gboolean ok;

  if (!parse (entries, encode ? "- VAE encode" : "- VAE decode", &argc,
          &argv, error)
      || !require (model, "--model", error)
      || !require (in, encode ? "--image" : "--latents", error)
      || !require (out, "--out", error))
    return FALSE;
  if (!parse_dtype (dtype_name, &dtype, error)
      || (be = pp_backend_get (backend, error)) == NULL
      || (x = pp_npy_load (in, error)) == NULL
      || (vae = pp_vae_load (model, be, dtype, error)) == NULL)
    return FALSE;
  ok = (encode ? pp_vae_encode (vae, x, &y, NULL, NULL, error)
      : pp_vae_decode (vae, x, &y, NULL, NULL, error))
      && pp_npy_save (out, y, error);
  pp_vae_free (vae);
  return ok;
}

static gboolean
cmd_vae_encode (int argc, char **argv, GError ** error)
{
  return cmd_vae (argc, argv, TRUE, error);
}

static gboolean
cmd_vae_decode (int argc, char **argv, GError ** error)
{
  return cmd_vae (argc, argv, FALSE, error);
}

/* ---- img2img ----------------------------------------------------------- */

/* Heap bytes allocated so far, all and by OpenBLAS itself, when tests/
 * bench's allocation counter is preloaded (LD_PRELOAD); NULL otherwise. */
extern unsigned long long pp_alloc_count_bytes (void) __attribute__ ((weak));
extern unsigned long long pp_alloc_count_openblas_bytes (void)
    __attribute__ ((weak));

/* One frame, as the element runs it: encode (rank 0), the steps with the
 * sample on the device between them (the workers), decode (rank 0).
 * *@sample is kept from frame to frame. */
static gboolean
run_frame (PpModel * m, PpImage * image, guint steps, PpTensor ** sample,
    GError ** error)
{
  if (*sample == NULL)
    *sample = pp_model_encode (m, image, error);
  else if (!pp_model_encode_into (m, image, *sample, error))
    return FALSE;
  if (*sample == NULL || !pp_model_steps_begin (m, *sample, error))
    return FALSE;
  if (!pp_model_steps_slice (m, 0, steps, steps, *sample, NULL, NULL,
          error)) {
    pp_model_steps_end (m, *sample, NULL);
    return FALSE;
  }
  return pp_model_steps_end (m, *sample, error)
      && pp_model_decode (m, *sample, image, error);
}

static gboolean
cmd_img2img (int argc, char **argv, GError ** error)
{
  g_autofree gchar *model = NULL, *in = NULL, *out = NULL, *embeds = NULL,
      *index_list = NULL, *scheduler = NULL, *uri = NULL, *backend = NULL,
      *dtype_name = NULL, *prompt = NULL, *prompt_ref = NULL, *vae = NULL,
      *lora = NULL, *temporal = NULL;
  gdouble strength = PP_SETTINGS_DEFAULT_STRENGTH;
  gdouble fusion_threshold = PP_SETTINGS_DEFAULT_FUSION_THRESHOLD;
  gint bank_frames = PP_SETTINGS_DEFAULT_BANK_FRAMES;
  gboolean sequence;
  PpSettings settings = { 0 };
  gint64 seed = 0;
  gint steps = DEFAULT_STEPS, frames = 1, cuda_graphs = 0;
  GOptionEntry entries[] = {
    {"model", 0, 0, G_OPTION_ARG_FILENAME, &model, "pipeline dir", "DIR"},
    {"in", 0, 0, G_OPTION_ARG_FILENAME, &in, "input image", "IN.png"},
    {"out", 0, 0, G_OPTION_ARG_FILENAME, &out, "output image", "OUT.png"},
    {"prompt-embeds", 0, 0, G_OPTION_ARG_FILENAME, &embeds,
        "encoder hidden states (.npy or .safetensors)", "E"},
    {"prompt", 0, 0, G_OPTION_ARG_STRING, &prompt,
        "prompt, or blend 'text:w|text:w', encoded with the pipeline's "
        "tokenizer/ and text_encoder/ (instead of --prompt-embeds)", "TEXT"},
    {"strength", 0, 0, G_OPTION_ARG_DOUBLE, &strength,
        "img2img strength (0,1], default 0.5", "S"},
    {"seed", 0, 0, G_OPTION_ARG_INT64, &seed, "noise seed, default 0", "N"},
    {"steps", 0, 0, G_OPTION_ARG_INT, &steps, "steps run, default 1", "S"},
    {"t-index-list", 0, 0, G_OPTION_ARG_STRING, &index_list,
        "LCM timestep indices, t = 999 - 20 idx", "A,B"},
    {"scheduler", 0, 0, G_OPTION_ARG_STRING, &scheduler,
        "euler or lcm (default: the pipeline's scheduler_config.json)", "K"},
    {"vae", 0, 0, G_OPTION_ARG_FILENAME, &vae,
        "a VAE folder (TAESD or AutoencoderKL) to use in the place of the "
        "pipeline's vae/, as the element's vae setting", "DIR"},
    {"lora", 0, 0, G_OPTION_ARG_STRING, &lora,
        "LoRA files fused into the UNet (and the text encoder) at load, "
        "as the element's lora setting", "PATH[:SCALE][,…]"},
    {"frames", 0, 0, G_OPTION_ARG_INT, &frames,
        "run this many frames: with a %d pattern in --in (in-%02d.png) "
        "frame f is that file, and a pattern in --out writes each frame; "
        "else each frame is the input again (for measurements; --out gets "
        "the last), default 1", "N"},
    {"temporal", 0, 0, G_OPTION_ARG_STRING, &temporal,
        "off or feature-bank, as the element's temporal setting: the "
        "frames of a sequence (--frames) share the bank", "MODE"},
    {"bank-frames", 0, 0, G_OPTION_ARG_INT, &bank_frames,
        "feature bank size in frames, default 1", "N"},
    {"fusion-threshold", 0, 0, G_OPTION_ARG_DOUBLE, &fusion_threshold,
        "cosine similarity from which outputs fuse, default 0.98", "T"},
    BACKEND_ENTRY (backend),
    DTYPE_ENTRY (dtype_name),
    {"cuda-graphs", 0, 0, G_OPTION_ARG_INT, &cuda_graphs,
        "1: capture the steps as a graph after the first frame, as a worker "
        "does (default 0)", "0|1"},
    {NULL}
  };
  g_autoptr (PpModel) m = NULL;
  g_autoptr (PpTensor) sample = NULL;
  g_autoptr (PpTensor) states = NULL;
  g_autoptr (GPtrArray) inputs = NULL;
  PpImage input = { 0 }, image = { 0 };
  PpBackend *be;
  gboolean ok = FALSE;

  if (!parse (entries, "- restyle one image as the element would", &argc,
          &argv, error)
      || !require (model, "--model", error) || !require (in, "--in", error)
      || !require (out, "--out", error))
    return FALSE;
  if ((embeds == NULL) == (prompt == NULL)) {
    g_set_error (error, PP_ERROR, PP_ERROR_CONFIG,
        "give either --prompt or --prompt-embeds");
    return FALSE;
  }
  if (steps < 1 || seed < 0 || frames < 1) {
    g_set_error (error, PP_ERROR, PP_ERROR_CONFIG,
        "--steps and --frames must be ≥ 1 and --seed ≥ 0");
    return FALSE;
  }
  if ((be = pp_backend_get (backend, error)) == NULL)
    return FALSE;
  if (prompt != NULL) {
    /* As the element does: the states go to the model with its settings. */
    /* MODEL or "CHECKPOINT?config=DIR" */
    g_autofree gchar *path = g_strndup (model, strcspn (model, "?"));
    g_autofree gchar *config = pp_model_uri_param (model, "config");
    g_autoptr (PpPromptEncoder) enc = pp_prompt_encoder_new (path, config,
        lora, be, error);
    gboolean truncated = FALSE;

    if (enc == NULL
        || (states = pp_prompt_encode (enc, prompt, &truncated, error))
        == NULL)
      return FALSE;
    if (truncated)
      g_printerr ("warning: a prompt is longer than the text encoder's "
          "positions: cut to fit\n");
    prompt_ref = pp_prompt_ref (states);
    inputs = g_ptr_array_new ();
    g_ptr_array_add (inputs, states);
  }
  {
    /* The tool is the reference: graphs only when asked for. */
    const PpModelLoad load = { scheduler, dtype_name, cuda_graphs != 0, vae,
      lora
    };

    uri = pp_model_uri_for_load (model, &load);
  }
  /* As the element does: the model loads, then takes the settings. */
  settings.model = uri;
  settings.prompt_embeds = prompt_ref ? prompt_ref : embeds;
  settings.strength = strength;
  settings.seed = (guint64) seed;
  settings.t_index_list = index_list;
  settings.temporal = temporal;
  settings.bank_frames = bank_frames < 0 ? 0 : (guint64) bank_frames;
  settings.fusion_threshold = fusion_threshold;
  m = pp_model_new (uri, (guint) steps, PP_MODEL_ROLE_ALL, be, error);
  if (m != NULL && !pp_model_update (m, &settings, inputs, error))
    goto out;
  /* A sequence: in-%02d.png, frame by frame. */
  sequence = strchr (in, '%') != NULL;
  if (m == NULL)
    goto out;
  if (!sequence && (!pp_png_load (in, &input, error)
          || !pp_png_load (in, &image, error)))
    goto out;
  for (gint f = 0; f < frames; f++) {
    guint64 device = pp_backend_allocated_bytes ();
    guint64 host = pp_alloc_count_bytes ? pp_alloc_count_bytes () : 0;
    guint64 blas = pp_alloc_count_bytes ? pp_alloc_count_openblas_bytes ()
        : 0;

    if (sequence) {
      g_autofree gchar *path = g_strdup_printf (in, f);

      pp_png_clear (&image);
      if (!pp_png_load (path, &image, error))
        goto out;
    } else if (f > 0)
      memcpy (image.data, input.data, (gsize) input.row_stride * input.height);
    if (!run_frame (m, &image, (guint) steps, &sample, error))
      goto out;
    if (strchr (out, '%') != NULL) {
      g_autofree gchar *path = g_strdup_printf (out, f);

      if (!pp_png_save (path, &image, error))
        goto out;
    }
    device = pp_backend_allocated_bytes () - device;
    if (pp_alloc_count_bytes) {
      host = pp_alloc_count_bytes () - host;
      blas = pp_alloc_count_openblas_bytes () - blas;
    }
    if (frames == 1)
      continue;
    if (pp_alloc_count_bytes)
      g_printerr ("frame %d: %" G_GUINT64_FORMAT " device bytes allocated, %"
          G_GUINT64_FORMAT " host bytes (%" G_GUINT64_FORMAT " of them by "
          "OpenBLAS)\n", f, device, host, blas);
    else
      g_printerr ("frame %d: %" G_GUINT64_FORMAT " device bytes allocated\n",
          f, device);
  }
  if (cuda_graphs) {
    guint64 captures, launches;

    pp_model_graph_counts (m, &captures, &launches);
    g_printerr ("graphs on %s: %" G_GUINT64_FORMAT " captured, %"
        G_GUINT64_FORMAT " launched\n", pp_backend_name (be), captures,
        launches);
  }
  ok = strchr (out, '%') != NULL || pp_png_save (out, &image, error);
out:
  pp_png_clear (&input);
  pp_png_clear (&image);
  return ok;
}

/* ---- encode-prompt ----------------------------------------------------- */

/* @text: token ids separated by spaces or commas → @ids, padded to
 * @max with the last id (a tokenized prompt ends with the end token, which
 * is what SD 1.5's tokenizer pads with). */
static gboolean
parse_ids (const gchar * text, guint max, gint32 * ids, GError ** error)
{
  g_auto (GStrv) words = g_strsplit_set (text, " ,\t\n", -1);
  guint n = 0;

  for (guint i = 0; words[i] != NULL; i++) {
    gint64 v;

    if (words[i][0] == '\0')
      continue;
    if (!g_ascii_string_to_signed (words[i], 10, 0, G_MAXINT32, &v, NULL)) {
      g_set_error (error, PP_ERROR, PP_ERROR_CONFIG,
          "--ids: '%s' is not a token id (a non-negative integer)",
          words[i]);
      return FALSE;
    }
    if (n == max) {
      g_set_error (error, PP_ERROR, PP_ERROR_CONFIG,
          "--ids: more than %u ids (the text encoder's "
          "max_position_embeddings)", max);
      return FALSE;
    }
    ids[n++] = (gint32) v;
  }
  if (n == 0) {
    g_set_error (error, PP_ERROR, PP_ERROR_CONFIG, "--ids: no ids");
    return FALSE;
  }
  for (; n < max; n++)
    ids[n] = ids[n - 1];
  return TRUE;
}

/* @prompt as @n token ids with the tokenizer/ of pipeline @model; a
 * prompt cut to fit gets a warning naming its length. */
static gboolean
encode_prompt_ids (const gchar * model, const gchar * prompt, guint n,
    gint32 * ids, GError ** error)
{
  g_autofree gchar *dir = g_build_filename (model, "tokenizer", NULL);
  g_autoptr (PpClipTokenizer) tok = pp_clip_tokenizer_load (dir, error);
  gboolean truncated = FALSE;

  if (tok == NULL)
    return FALSE;
  if (pp_clip_tokenizer_model_max_length (tok) != n) {
    g_set_error (error, PP_ERROR, PP_ERROR_CONFIG,
        "%s: model_max_length %u, but the text encoder takes %u positions",
        dir, pp_clip_tokenizer_model_max_length (tok), n);
    return FALSE;
  }
  if (!pp_clip_tokenizer_encode (tok, prompt, ids, &truncated, error))
    return FALSE;
  if (truncated)
    g_printerr ("warning: the prompt is longer than %u tokens: cut to "
        "fit\n", n);
  return TRUE;
}

static gboolean
cmd_encode_prompt (int argc, char **argv, GError ** error)
{
  g_autofree gchar *model = NULL, *ids_text = NULL, *prompt = NULL,
      *out = NULL, *backend = NULL, *dtype_name = NULL;
  GOptionEntry entries[] = {
    {"model", 0, 0, G_OPTION_ARG_FILENAME, &model,
        "pipeline dir (text_encoder/, unet/)", "DIR"},
    {"ids", 0, 0, G_OPTION_ARG_STRING, &ids_text,
          "token ids, space separated; fewer than 77 are padded with the "
          "last", "\"49406 320 …\""},
    {"prompt", 0, 0, G_OPTION_ARG_STRING, &prompt,
        "prompt text, tokenized with the pipeline's tokenizer/", "TEXT"},
    {"out", 0, 0, G_OPTION_ARG_FILENAME, &out, "output [1,77,D]", "E.npy"},
    BACKEND_ENTRY (backend),
    DTYPE_ENTRY (dtype_name),
    {NULL}
  };
  g_autofree gchar *text_dir = NULL, *unet_config = NULL;
  g_autofree gint32 *ids = NULL;
  g_autoptr (PpClipText) m = NULL;
  g_autoptr (PpTensor) e = NULL;
  gint64 shape[3];
  PpDType dtype;
  PpBackend *be;

  if (!parse (entries, "- encode a prompt with the pipeline's text encoder",
          &argc, &argv, error)
      || !require (model, "--model", error) || !require (out, "--out", error))
    return FALSE;
  if ((prompt == NULL) == (ids_text == NULL)) {
    g_set_error (error, PP_ERROR, PP_ERROR_CONFIG,
        "give either --prompt or --ids");
    return FALSE;
  }
  text_dir = g_build_filename (model, "text_encoder", NULL);
  unet_config = g_build_filename (model, "unet", "config.json", NULL);
  if (!parse_dtype (dtype_name, &dtype, error)
      || (be = pp_backend_get (backend, error)) == NULL
      || (m = pp_clip_text_load (text_dir, be, dtype, error)) == NULL
      || !pp_clip_text_check_unet (m, text_dir, unet_config, error))
    return FALSE;
  ids = g_new (gint32, pp_clip_text_max_positions (m));
  if (prompt != NULL) {
    if (!encode_prompt_ids (model, prompt, pp_clip_text_max_positions (m),
            ids, error))
      return FALSE;
  } else if (!parse_ids (ids_text, pp_clip_text_max_positions (m), ids,
          error)) {
    return FALSE;
  }
  shape[0] = 1;
  shape[1] = pp_clip_text_max_positions (m);
  shape[2] = pp_clip_text_hidden_size (m);
  e = pp_tensor_new ("prompt_embeds", PP_DTYPE_F32, 3, shape, error);
  return e != NULL && pp_clip_text_forward (m, ids, (guint) shape[1], e,
      error) && pp_npy_save (out, e, error);
}

/* ---- devices ----------------------------------------------------------- */

/* What this build computes on here: the CPU, each GPU the process sees
 * (or why it cannot be used) and what "auto" picks, with why it passed
 * CUDA over: what a person asks first when a GPU goes unused. */
static gboolean
cmd_devices (int argc, char **argv, GError ** error)
{
  GOptionEntry entries[] = { {NULL} };
  const gchar *reason;
  PpBackend *be, *auto_be;
  gint n;

  if (!parse (entries, "- the CPU and GPUs this build computes on here, and "
          "what backend=auto picks", &argc, &argv, error))
    return FALSE;
  /* auto first: where no GPU is seen, its reason says why. */
  auto_be = pp_backend_get (PP_BACKEND_AUTO, error);
  if (auto_be == NULL)
    return FALSE;
  reason = pp_backend_auto_reason ();
  printf ("cpu: %s\n", pp_backend_device (pp_backend_cpu ()));
  n = pp_backend_cuda_devices ();
  if (!pp_backend_have_cuda ())
    printf ("cuda: not in this build (configured without the CUDA "
        "toolkit: docs/gpu.md)\n");
  else if (n == 0)
    printf ("cuda: %s\n", reason != NULL ? reason : "no GPU is visible to "
        "this process");
  for (gint i = 0; i < n; i++) {
    g_autofree gchar *name = g_strdup_printf ("%s:%d", PP_BACKEND_CUDA, i);
    g_autoptr (GError) why = NULL;

    be = pp_backend_get (name, &why);
    if (be != NULL)
      printf ("%s: %s: runs this build's kernels\n", name,
          pp_backend_device (be));
    else
      printf ("%s: cannot be used: %s\n", name, why->message);
  }
  printf ("auto: %s (%s)%s%s\n", pp_backend_name (auto_be),
      pp_backend_device (auto_be), reason != NULL ? ", CUDA passed over: "
      : "",
      reason != NULL ? reason : "");
  if (g_getenv (PP_BACKEND_ENV) != NULL && *g_getenv (PP_BACKEND_ENV))
    printf ("$%s: %s (the element's and the tools' backend where none is "
        "named)\n", PP_BACKEND_ENV, g_getenv (PP_BACKEND_ENV));
  return TRUE;
}

/* ---- make-tiny --------------------------------------------------------- */

static gboolean
cmd_make_tiny (int argc, char **argv, GError ** error)
{
  g_autofree gchar *kind = NULL, *out = NULL;
  gint64 seed = 0;
  GOptionEntry entries[] = {
    {"kind", 0, 0, G_OPTION_ARG_STRING, &kind, "sd15, turbo, taesd, vae-kl (a small AutoencoderKL), lora (a kohya "
        "LoRA for sd15's UNet), or sd-turbo (the released sizes, ~3.5 GB)",
        "KIND"},
    {"out", 0, 0, G_OPTION_ARG_FILENAME, &out, "output directory", "DIR"},
    {"seed", 0, 0, G_OPTION_ARG_INT64, &seed, "weights seed, default 0",
        "N"},
    {NULL}
  };

  if (!parse (entries, "- write a small random-weight model", &argc, &argv,
          error)
      || !require (kind, "--kind", error) || !require (out, "--out", error))
    return FALSE;
  if (!pp_tiny_write (kind, out, (guint64) seed, error))
    return FALSE;
  printf ("wrote %s model to %s\n", kind, out);
  return TRUE;
}

static const struct
{
  const gchar *name;
  CommandFunc func;
} commands[] = {
  {"info", cmd_info},
  {"devices", cmd_devices},
  {"unet", cmd_unet},
  {"vae-encode", cmd_vae_encode},
  {"vae-decode", cmd_vae_decode},
  {"encode-prompt", cmd_encode_prompt},
  {"img2img", cmd_img2img},
  {"make-tiny", cmd_make_tiny},
  {"test-ops", pp_cmd_test_ops},
  {"tokenize", pp_cmd_tokenize},
};

int
main (int argc, char **argv)
{
  GError *error = NULL;

  if (argc < 2) {
    fprintf (stderr, "usage: %s info|devices|unet|vae-encode|vae-decode|"
        "encode-prompt|img2img|make-tiny|test-ops|tokenize …  (each takes "
        "--help)\n",
        argv[0]);
    return 2;
  }
  for (guint i = 0; i < G_N_ELEMENTS (commands); i++) {
    int status;

    if (!g_str_equal (argv[1], commands[i].name))
      continue;
    if (commands[i].func (argc - 1, argv + 1, &error))
      return 0;
    /* Bad usage (an option's error) is 2, as above; a failure 1; test-ops
     * on a backend whose device is not here is skipped (77, the test
     * harnesses' skip). */
    status = error->domain == G_OPTION_ERROR ? 2 : 1;
    if (commands[i].func == pp_cmd_test_ops
        && g_error_matches (error, PP_ERROR, PP_ERROR_DEVICE)) {
      status = PP_TEST_OPS_EXIT_SKIP;
      g_prefix_error (&error, "skipped: ");
    }
    fprintf (stderr, "ppdiffuse-tool %s: %s\n", argv[1], error->message);
    g_error_free (error);
    return status;
  }
  fprintf (stderr, "ppdiffuse-tool: unknown command '%s'\n", argv[1]);
  return 2;
}
