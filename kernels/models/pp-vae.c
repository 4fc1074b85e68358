/* ppdiffuse — one VAE interface over the classes a pipeline may carry. */
#include "pp-vae.h"
#include "pp-error.h"
#include "pp-layers.h"
#include "pp-taesd.h"
#include "pp-vae-kl.h"

#define CLASS_TINY "AutoencoderTiny"
#define CLASS_KL "AutoencoderKL"

struct _PpVae
{
  const gchar *klass;
  PpTaesd *tiny;                /* one of the two */
  PpVaeKl *kl;
};

PpVae *
pp_vae_load (const gchar * component_dir, PpBackend * be, PpDType dtype,
    GError ** error)
{
  g_autofree gchar *config = g_build_filename (component_dir,
      PP_COMPONENT_CONFIG, NULL);
  g_autofree gchar *klass = pp_component_class (component_dir);
  g_autoptr (PpVae) v = g_new0 (PpVae, 1);

  if (klass == NULL && g_file_test (config, G_FILE_TEST_EXISTS)) {
    g_set_error (error, PP_ERROR, PP_ERROR_MODEL,
        "%s names no VAE class (its \"_class_name\"); ppdiffuse runs "
        PP_VAE_CLASSES, config);
    return NULL;
  }
  /* A missing config.json: the TAESD loader names what is missing. */
  if (klass == NULL || g_str_equal (klass, CLASS_TINY)) {
    v->klass = CLASS_TINY;
    v->tiny = pp_taesd_load (component_dir, be, dtype, error);
  } else if (g_str_equal (klass, CLASS_KL)) {
    v->klass = CLASS_KL;
    v->kl = pp_vae_kl_load (component_dir, be, dtype, error);
  } else {
    g_set_error (error, PP_ERROR, PP_ERROR_MODEL,
        "%s: the VAE class is %s (its \"_class_name\"); ppdiffuse runs "
        PP_VAE_CLASSES, config, klass);
    return NULL;
  }
  if (v->tiny == NULL && v->kl == NULL)
    return NULL;
  return g_steal_pointer (&v);
}

PpVae *
pp_vae_load_checkpoint (const gchar * config_path, PpWeights * w,
    PpBackend * be, PpDType dtype, GError ** error)
{
  g_autoptr (PpVae) v = g_new0 (PpVae, 1);

  v->klass = CLASS_KL;
  v->kl = pp_vae_kl_load_weights (config_path, w, be, dtype, error);
  return v->kl != NULL ? g_steal_pointer (&v) : NULL;
}

const gchar *
pp_vae_class (PpVae * v)
{
  return v->klass;
}

gboolean
pp_vae_encode (PpVae * v, const PpTensor * image, PpTensor ** latents,
    PpTapFunc tap, gpointer tap_data, GError ** error)
{
  return v->tiny != NULL
      ? pp_taesd_encode (v->tiny, image, latents, tap, tap_data, error)
      : pp_vae_kl_encode (v->kl, image, latents, tap, tap_data, error);
}

gboolean
pp_vae_decode (PpVae * v, const PpTensor * latents, PpTensor ** image,
    PpTapFunc tap, gpointer tap_data, GError ** error)
{
  return v->tiny != NULL
      ? pp_taesd_decode (v->tiny, latents, image, tap, tap_data, error)
      : pp_vae_kl_decode (v->kl, latents, image, tap, tap_data, error);
}

gboolean
pp_vae_encode_into (PpVae * v, const PpTensor * image, PpTensor * latents,
    GError ** error)
{
  return v->tiny != NULL
      ? pp_taesd_encode_into (v->tiny, image, latents, error)
      : pp_vae_kl_encode_into (v->kl, image, latents, error);
}

gboolean
pp_vae_decode_into (PpVae * v, const PpTensor * latents, PpTensor * image,
    GError ** error)
{
  return v->tiny != NULL
      ? pp_taesd_decode_into (v->tiny, latents, image, error)
      : pp_vae_kl_decode_into (v->kl, latents, image, error);
}

void
pp_vae_pools (PpVae * v, PpPoolBytes * sum)
{
  if (v->tiny != NULL)
    pp_taesd_pools (v->tiny, sum);
  else
    pp_vae_kl_pools (v->kl, sum);
}

guint
pp_vae_latent_channels (PpVae * v)
{
  return v->tiny != NULL ? pp_taesd_latent_channels (v->tiny)
      : pp_vae_kl_latent_channels (v->kl);
}

guint
pp_vae_scale_factor (PpVae * v)
{
  return v->tiny != NULL ? pp_taesd_scale_factor (v->tiny)
      : pp_vae_kl_scale_factor (v->kl);
}

PpLayout
pp_vae_act_layout (PpVae * v)
{
  return v->tiny != NULL ? pp_taesd_act_layout (v->tiny)
      : pp_vae_kl_act_layout (v->kl);
}

void
pp_vae_free (PpVae * v)
{
  if (v == NULL)
    return;
  g_clear_pointer (&v->tiny, pp_taesd_free);
  g_clear_pointer (&v->kl, pp_vae_kl_free);
  g_free (v);
}
