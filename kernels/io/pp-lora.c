/* ppdiffuse — LoRA pairs read from safetensors and fused into weights. */
#include "pp-lora.h"
#include "pp-error.h"

#include <cblas.h>
#include <math.h>
#include <string.h>

#define WEIGHT_SUFFIX ".weight"
/* Names listed in an error before "and N more". */
#define LIST_MAX PP_WEIGHTS_LIST_MAX

typedef enum
{
  ROLE_DOWN,
  ROLE_UP,
  ROLE_ALPHA,
} Role;

/* The key endings of each layout, and what they hold. */
static const struct
{
  const gchar *suffix;
  Role role;
} suffixes[] = {
  {".lora_A.weight", ROLE_DOWN},
  {".lora_B.weight", ROLE_UP},
  {".lora_down.weight", ROLE_DOWN},
  {".lora_up.weight", ROLE_UP},
  {".lora.down.weight", ROLE_DOWN},
  {".lora.up.weight", ROLE_UP},
  {"_lora.down.weight", ROLE_DOWN},     /* attention processors */
  {"_lora.up.weight", ROLE_UP},
  {".alpha", ROLE_ALPHA},
};

/* Key prefixes: the component, and whether the module name that follows
 * has its dots written as underscores (kohya). */
static const struct
{
  const gchar *prefix;
  PpLoraTarget target;
  gboolean underscored;
} prefixes[] = {
  {"unet.", PP_LORA_UNET, FALSE},
  {"text_encoder.", PP_LORA_TEXT_ENCODER, FALSE},
  {"lora_unet_", PP_LORA_UNET, TRUE},
  {"lora_te_", PP_LORA_TEXT_ENCODER, TRUE},
};

static const gchar *const target_names[] = {
  [PP_LORA_UNET] = "unet", [PP_LORA_TEXT_ENCODER] = "text_encoder",
};

/* One low-rank pair. */
typedef struct
{
  gchar *name;                  /* the keys' shared stem, for messages */
  gchar *module;                /* diffusers' module name, or underscored */
  PpLoraTarget target;
  gboolean underscored;
  const PpStEntry *down, *up, *alpha;
} Pair;

typedef struct
{
  gchar *path;
  gdouble scale;
  PpSafetensors *st;
  GPtrArray *pairs;             /* Pair */
} File;

struct _PpLora
{
  GPtrArray *files;             /* File */
};

static void
pair_free (Pair * p)
{
  g_free (p->name);
  g_free (p->module);
  g_free (p);
}

static void
file_free (File * f)
{
  g_free (f->path);
  g_clear_pointer (&f->pairs, g_ptr_array_unref);
  g_clear_pointer (&f->st, pp_safetensors_free);
  g_free (f);
}

void
pp_lora_free (PpLora * lora)
{
  if (lora == NULL)
    return;
  g_ptr_array_unref (lora->files);
  g_free (lora);
}

/* "to_out" of an attention processor's to_out_lora is to_out.0. */
static gchar *
processor_module (const gchar * stem)
{
  const gchar *at = strstr (stem, ".processor.");
  g_autofree gchar *parent = NULL;
  const gchar *leaf;

  if (at == NULL)
    return g_strdup (stem);
  parent = g_strndup (stem, at - stem);
  leaf = at + strlen (".processor.");
  return g_strdup_printf ("%s.%s", parent,
      g_str_equal (leaf, "to_out") ? "to_out.0" : leaf);
}

/* Reads @f's keys into pairs. */
static gboolean
read_pairs (File * f, GError ** error)
{
  g_autoptr (GHashTable) by_stem = g_hash_table_new (g_str_hash,
      g_str_equal);
  g_autoptr (GString) bad = g_string_new (NULL);
  guint n_bad = 0;

  f->pairs = g_ptr_array_new_with_free_func ((GDestroyNotify) pair_free);
  for (guint i = 0; i < pp_safetensors_n_entries (f->st); i++) {
    const PpStEntry *e = pp_safetensors_entry (f->st, i);
    g_autofree gchar *stem = NULL;
    Pair *p;
    gint s = -1, x = -1;

    for (guint j = 0; s < 0 && j < G_N_ELEMENTS (suffixes); j++)
      if (g_str_has_suffix (e->name, suffixes[j].suffix))
        s = (gint) j;
    for (guint j = 0; x < 0 && j < G_N_ELEMENTS (prefixes); j++)
      if (g_str_has_prefix (e->name, prefixes[j].prefix))
        x = (gint) j;
    if (s < 0 || x < 0) {
      if (n_bad++ < LIST_MAX)
        g_string_append_printf (bad, "%s'%s'", bad->len ? ", " : "",
            e->name);
      continue;
    }
    stem = g_strndup (e->name, strlen (e->name)
        - strlen (suffixes[s].suffix));
    p = g_hash_table_lookup (by_stem, stem);
    if (p == NULL) {
      p = g_new0 (Pair, 1);
      p->name = g_strdup (stem);
      p->target = prefixes[x].target;
      p->underscored = prefixes[x].underscored;
      p->module = processor_module (stem + strlen (prefixes[x].prefix));
      g_ptr_array_add (f->pairs, p);
      g_hash_table_insert (by_stem, p->name, p);
    }
    switch (suffixes[s].role) {
      case ROLE_DOWN:
        p->down = e;
        break;
      case ROLE_UP:
        p->up = e;
        break;
      case ROLE_ALPHA:
        p->alpha = e;
        break;
    }
  }
  if (n_bad > 0) {
    if (n_bad > LIST_MAX)
      g_string_append_printf (bad, " and %u more", n_bad - LIST_MAX);
    g_set_error (error, PP_ERROR, PP_ERROR_MODEL,
        "%s: %u key(s) of no LoRA layout ppdiffuse reads (diffusers/PEFT "
        "unet.…lora_A/lora_B, kohya lora_unet_…lora_down/lora_up/alpha, "
        "text_encoder. or lora_te_ for the text encoder): %s", f->path,
        n_bad, bad->str);
    return FALSE;
  }
  for (guint i = 0; i < f->pairs->len; i++) {
    const Pair *p = g_ptr_array_index (f->pairs, i);

    if (p->down == NULL || p->up == NULL) {
      g_set_error (error, PP_ERROR, PP_ERROR_MODEL,
          "%s: LoRA '%s' has its %s matrix but not its %s one", f->path,
          p->name, p->down != NULL ? "down (A)" : "up (B)",
          p->down != NULL ? "up (B)" : "down (A)");
      return FALSE;
    }
  }
  if (f->pairs->len == 0) {
    g_set_error (error, PP_ERROR, PP_ERROR_MODEL,
        "%s holds no LoRA pairs", f->path);
    return FALSE;
  }
  return TRUE;
}

/* "PATH" or "PATH:SCALE": the scale is what follows the last ':' when it
 * is a whole decimal number. */
static gboolean
parse_part (const gchar * part, gchar ** path, gdouble * scale,
    GError ** error)
{
  const gchar *colon = strrchr (part, ':');
  gchar *end = NULL;

  *scale = 1.0;
  if (colon != NULL && colon[1] != '\0') {
    gdouble v = g_ascii_strtod (colon + 1, &end);

    if (end != NULL && *end == '\0' && isfinite (v)) {
      *scale = v;
      *path = g_strndup (part, colon - part);
      return TRUE;
    }
  }
  if (*part == '\0') {
    g_set_error (error, PP_ERROR, PP_ERROR_CONFIG,
        "lora: an empty part (expected PATH[:SCALE][,PATH[:SCALE]…])");
    return FALSE;
  }
  *path = g_strdup (part);
  return TRUE;
}

PpLora *
pp_lora_open (const gchar * spec, GError ** error)
{
  g_auto (GStrv) parts = g_strsplit (spec, ",", -1);
  g_autoptr (PpLora) lora = g_new0 (PpLora, 1);

  lora->files = g_ptr_array_new_with_free_func ((GDestroyNotify) file_free);
  if (parts[0] == NULL) {
    g_set_error (error, PP_ERROR, PP_ERROR_CONFIG,
        "lora: empty (expected PATH[:SCALE][,PATH[:SCALE]…])");
    return NULL;
  }
  for (guint i = 0; parts[i] != NULL; i++) {
    File *f = g_new0 (File, 1);

    g_ptr_array_add (lora->files, f);
    if (!parse_part (g_strstrip (parts[i]), &f->path, &f->scale, error))
      return NULL;
    f->st = pp_safetensors_open (f->path, error);
    if (f->st == NULL) {
      g_prefix_error (error, "lora: ");
      return NULL;
    }
    if (!read_pairs (f, error))
      return NULL;
  }
  return g_steal_pointer (&lora);
}

gboolean
pp_lora_targets (PpLora * lora, PpLoraTarget target)
{
  for (guint i = 0; i < lora->files->len; i++) {
    const File *f = g_ptr_array_index (lora->files, i);

    for (guint j = 0; j < f->pairs->len; j++)
      if (((const Pair *) g_ptr_array_index (f->pairs, j))->target == target)
        return TRUE;
  }
  return FALSE;
}

/* Module name with its dots as underscores → module name, for every
 * ".weight" of @w (kohya's names). */
static GHashTable *
underscored_modules (PpWeights * w)
{
  GHashTable *map = g_hash_table_new_full (g_str_hash, g_str_equal, g_free,
      g_free);

  for (guint i = 0; i < pp_weights_n_tensors (w); i++) {
    const gchar *key = pp_weights_key (w, i, NULL, NULL);
    gchar *module, *flat;

    if (!g_str_has_suffix (key, WEIGHT_SUFFIX))
      continue;
    module = g_strndup (key, strlen (key) - strlen (WEIGHT_SUFFIX));
    flat = g_strdelimit (g_strdup (module), ".", '_');
    g_hash_table_insert (map, flat, module);
  }
  return map;
}

static gfloat *
read_floats (const PpStEntry * e)
{
  gfloat *x = g_new (gfloat, MAX (pp_st_entry_numel (e), 1));

  pp_safetensors_read_f32 (e, x);
  return x;
}

static gdouble
read_alpha (const PpStEntry * e)
{
  gfloat a = 0.0f;

  if (pp_st_entry_numel (e) == 1)
    pp_safetensors_read_f32 (e, &a);
  return a;
}

/* The alpha of a pair without one, as diffusers hands the pairs of one
 * component to PEFT (get_peft_kwargs): the most common alpha among the
 * pairs that have one, the first seen on a tie; when none has one, the
 * rank of the first pair by key.  Pairs are in the file's key order. */
static gdouble
default_alpha (const File * f, PpLoraTarget target)
{
  g_autoptr (GArray) values = g_array_new (FALSE, FALSE, sizeof (gdouble));
  g_autoptr (GArray) counts = g_array_new (FALSE, TRUE, sizeof (guint));
  const Pair *first = NULL;
  guint best = 0;

  for (guint i = 0; i < f->pairs->len; i++) {
    const Pair *p = g_ptr_array_index (f->pairs, i);
    gdouble a;
    guint j;

    if (p->target != target)
      continue;
    if (first == NULL || g_strcmp0 (p->name, first->name) < 0)
      first = p;
    if (p->alpha == NULL)
      continue;
    a = read_alpha (p->alpha);
    for (j = 0; j < values->len; j++)
      if (g_array_index (values, gdouble, j) == a)
        break;
    if (j == values->len) {
      guint zero = 0;

      g_array_append_val (values, a);
      g_array_append_val (counts, zero);
    }
    g_array_index (counts, guint, j)++;
  }
  if (values->len == 0)
    return first != NULL && first->down->ndim >= 1
        ? (gdouble) first->down->shape[0] : 1.0;
  for (guint j = 1; j < values->len; j++)
    if (g_array_index (counts, guint, j) > g_array_index (counts, guint,
            best))
      best = j;
  return g_array_index (values, gdouble, best);
}

/* W [out, cols] += factor · up [out, r] · down [r, cols]; with @dry, the
 * shapes checked and nothing changed. */
static gboolean
fuse_pair (const File * f, const Pair * p, const gchar * key, PpWeights * w,
    gdouble alpha_default, gboolean dry, GError ** error)
{
  gint64 shape[PP_ST_MAX_DIMS];
  guint ndim = 0;
  gint64 numel = 1, r, out, cols;
  g_autofree gfloat *down = NULL, *up = NULL;
  gdouble alpha, factor;
  gfloat *dst;

  if (!pp_weights_shape (w, key, &ndim, shape))
    ndim = 0;                   /* the caller checked: refused below */
  for (guint d = 0; d < ndim; d++)
    numel *= shape[d];
  r = p->down->ndim >= 1 ? p->down->shape[0] : 0;
  out = ndim >= 1 ? shape[0] : 0;
  cols = out > 0 ? numel / out : 0;
  if (ndim < 2 || p->up->ndim < 2 || r < 1
      || p->up->shape[0] != out || p->up->shape[1] != r
      || (gint64) pp_st_entry_numel (p->up) != out * r
      || (gint64) pp_st_entry_numel (p->down) != r * cols) {
    g_set_error (error, PP_ERROR, PP_ERROR_SHAPE,
        "%s: LoRA '%s' (down %" G_GSIZE_FORMAT " values of rank %"
        G_GINT64_FORMAT ", up %" G_GSIZE_FORMAT ") does not fit weight "
        "'%s' of %" G_GINT64_FORMAT " × %" G_GINT64_FORMAT, f->path,
        p->name, pp_st_entry_numel (p->down), r, pp_st_entry_numel (p->up),
        key, out, cols);
    return FALSE;
  }
  alpha = alpha_default;
  if (p->alpha != NULL) {
    if (pp_st_entry_numel (p->alpha) != 1) {
      g_set_error (error, PP_ERROR, PP_ERROR_SHAPE,
          "%s: LoRA '%s.alpha' holds %" G_GSIZE_FORMAT " values, not one",
          f->path, p->name, pp_st_entry_numel (p->alpha));
      return FALSE;
    }
    alpha = read_alpha (p->alpha);
  }
  if (dry)
    return TRUE;
  factor = f->scale * alpha / (gdouble) r;
  dst = pp_weights_get_mutable (w, key, error);
  if (dst == NULL)
    return FALSE;
  down = read_floats (p->down);
  up = read_floats (p->up);
  cblas_sgemm (CblasRowMajor, CblasNoTrans, CblasNoTrans, (int) out,
      (int) cols, (int) r, (float) factor, up, (int) r, down, (int) cols,
      1.0f, dst, (int) cols);
  return TRUE;
}

static gboolean
fuse (PpLora * lora, PpLoraTarget target, PpWeights * w, gboolean dry,
    GError ** error)
{
  g_autoptr (GHashTable) flat = NULL;

  for (guint i = 0; i < lora->files->len; i++) {
    const File *f = g_ptr_array_index (lora->files, i);
    g_autoptr (GString) missing = g_string_new (NULL);
    g_autofree gchar *digest = NULL, *note = NULL;
    gchar scale[G_ASCII_DTOSTR_BUF_SIZE];
    guint n_missing = 0, n_fused = 0;
    const gdouble alpha_default = default_alpha (f, target);

    for (guint j = 0; j < f->pairs->len; j++) {
      const Pair *p = g_ptr_array_index (f->pairs, j);
      g_autofree gchar *key = NULL;
      const gchar *module = p->module;

      if (p->target != target)
        continue;
      if (p->underscored) {
        if (flat == NULL)
          flat = underscored_modules (w);
        module = g_hash_table_lookup (flat, p->module);
      }
      if (module != NULL)
        key = g_strconcat (module, WEIGHT_SUFFIX, NULL);
      if (key == NULL || !pp_weights_has (w, key)) {
        if (n_missing++ < LIST_MAX)
          g_string_append_printf (missing, "%s'%s'",
              missing->len ? ", " : "", p->name);
        continue;
      }
      if (!fuse_pair (f, p, key, w, alpha_default, dry, error))
        return FALSE;
      n_fused++;
    }
    if (n_missing > 0) {
      if (n_missing > LIST_MAX)
        g_string_append_printf (missing, " and %u more",
            n_missing - LIST_MAX);
      g_set_error (error, PP_ERROR, PP_ERROR_MODEL,
          "%s: %u LoRA pair(s) match no weight of the %s (%s): %s", f->path,
          n_missing, target_names[target], pp_weights_source (w),
          missing->str);
      return FALSE;
    }
    if (n_fused == 0 || dry)
      continue;
    digest = pp_weights_file_digest (f->path, error);
    if (digest == NULL)
      return FALSE;
    g_ascii_dtostr (scale, sizeof scale, f->scale);
    note = g_strdup_printf ("lora %s %s", digest, scale);
    pp_weights_note_change (w, note);
  }
  return TRUE;
}

gboolean
pp_lora_fuse (PpLora * lora, PpLoraTarget target, PpWeights * w,
    GError ** error)
{
  return fuse (lora, target, w, FALSE, error);
}

gboolean
pp_lora_check (PpLora * lora, PpLoraTarget target, PpWeights * w,
    GError ** error)
{
  return fuse (lora, target, w, TRUE, error);
}

gchar *
pp_lora_describe (PpLora * lora)
{
  GString *s = g_string_new (NULL);

  for (guint i = 0; i < lora->files->len; i++) {
    const File *f = g_ptr_array_index (lora->files, i);
    guint count[G_N_ELEMENTS (target_names)] = { 0 };
    gint64 rmin = G_MAXINT64, rmax = 0;
    guint kohya = 0, diffusers = 0;

    for (guint j = 0; j < f->pairs->len; j++) {
      const Pair *p = g_ptr_array_index (f->pairs, j);
      gint64 r = p->down->ndim >= 1 ? p->down->shape[0] : 0;

      count[p->target]++;
      rmin = MIN (rmin, r);
      rmax = MAX (rmax, r);
      if (p->underscored)
        kohya++;
      else
        diffusers++;
    }
    g_string_append_printf (s, "%s%s: ", i ? "\n" : "", f->path);
    for (guint t = 0; t < G_N_ELEMENTS (target_names); t++)
      if (count[t] > 0)
        g_string_append_printf (s, "%s %u pair%s, ", target_names[t],
            count[t], count[t] == 1 ? "" : "s");
    if (rmin == rmax)
      g_string_append_printf (s, "rank %" G_GINT64_FORMAT, rmin);
    else
      g_string_append_printf (s, "ranks %" G_GINT64_FORMAT "–%"
          G_GINT64_FORMAT, rmin, rmax);
    g_string_append_printf (s, ", %s layout, scale %g",
        kohya && diffusers ? "kohya and diffusers" : kohya ? "kohya"
        : "diffusers", f->scale);
  }
  return g_string_free (s, FALSE);
}
