/* ppdiffuse — the live settings of a stream, as one typed value.
 *
 * The element's properties, ppdiffuse-tool and every rank's model read
 * the same PpSettings.  Rank 0 sends it to the workers with the first
 * chunk of a cache epoch, serialised as a versioned GVariant.  Adding a
 * live setting: a field here, a line in each direction of the serialiser
 * (pp-settings.c), the property, and the model code that reads it. */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

/* The serialisation's version: a peer of another one is refused. */
#define PP_SETTINGS_VERSION 1
#define PP_SETTINGS_DEFAULT_MODEL "builtin:anisotropic"
#define PP_SETTINGS_DEFAULT_STRENGTH 0.5
#define PP_SETTINGS_DEFAULT_SEED 0
/* The temporal feature bank (pp-feature-bank.h): off by default; a bank of
 * one frame's rows; StreamV2V's fusion threshold. */
#define PP_SETTINGS_TEMPORAL_OFF "off"
#define PP_SETTINGS_TEMPORAL_FEATURE_BANK "feature-bank"
#define PP_SETTINGS_DEFAULT_BANK_FRAMES 1
#define PP_SETTINGS_MAX_BANK_FRAMES 16
#define PP_SETTINGS_DEFAULT_FUSION_THRESHOLD 0.98

typedef struct
{
  /* The model as loaded (pp_model_uri_for_load): its path, its load-time
   * parameters, and the model's own live ones (step-ms, kappa, mark…). */
  gchar *model;
  /* A text prompt or blend (rank 0 only: it is encoded there into
   * prompt_embeds = "chunk:DIGEST"); NULL or "" for none. */
  gchar *prompt;
  /* A file of encoder hidden states, or a prompt's "chunk:DIGEST"; NULL or
   * "" for none. */
  gchar *prompt_embeds;
  gdouble strength;             /* img2img, (0, 1] */
  guint64 seed;                 /* of the noise */
  gchar *t_index_list;          /* "i,j,…" LCM indices; NULL or "": none */
  /* Temporal consistency: "feature-bank", or NULL, "" or "off" for none;
   * the bank's size in frames and the fusion threshold (cosine). */
  gchar *temporal;
  guint64 bank_frames;
  gdouble fusion_threshold;
} PpSettings;

/* The defaults, owning nothing. */
void      pp_settings_init        (PpSettings * s);
void      pp_settings_clear       (PpSettings * s);
void      pp_settings_copy        (PpSettings * dst, const PpSettings * src);
gboolean  pp_settings_equal       (const PpSettings * a,
                                   const PpSettings * b);
/* One line for logs: "model=… strength=0.5 seed=0 …". */
gchar    *pp_settings_describe    (const PpSettings * s);
/* TRUE when @s has a text prompt. */
gboolean  pp_settings_has_prompt  (const PpSettings * s);
/* TRUE when @s asks for the temporal feature bank. */
gboolean  pp_settings_has_feature_bank (const PpSettings * s);

/* The serialised form: a GVariant "(ua{sv})", the version then every
 * field by name. */
GBytes   *pp_settings_serialize   (const PpSettings * s);
/* Reads what pp_settings_serialize wrote into @s (cleared first).  A
 * version other than PP_SETTINGS_VERSION, bytes that are no such GVariant
 * and a field of an unknown name or type are errors that say which. */
gboolean  pp_settings_deserialize (const guint8 * data, gsize size,
                                   PpSettings * s, GError ** error);

G_END_DECLS
