/* ppdiffuse — weights bound by key, from a file or a seed. */
#include "pp-weights.h"
#include "pp-error.h"

#include <math.h>
#include <string.h>

/* Metadata written with saved random weights: Python's loaders expect
 * format "pt" for PyTorch state dicts. */
#define META_FORMAT_KEY "format"
#define META_FORMAT_VALUE "pt"
#define META_SEED_KEY "ppdiffuse.seed"

typedef struct
{
  gchar *key;
  guint ndim;
  gint64 shape[PP_ST_MAX_DIMS];
  gsize numel;
  const PpStEntry *entry;       /* file weights; NULL for random */
  const gfloat *data;           /* NULL until first materialised */
  gfloat *owned;                /* converted or generated data */
  gboolean used;
} Slot;

struct _PpWeights
{
  gchar *source;
  PpSafetensors *st;            /* NULL for random weights */
  guint64 seed;
  GRand *rand;                  /* NULL for file weights */
  GHashTable *slots;            /* key → Slot *, owned by order */
  GPtrArray *order;             /* file order, or request order */
  gchar *digest;                /* cached; NULL when stale */
};

static void
slot_free (Slot * s)
{
  g_free (s->key);
  g_free (s->owned);
  g_free (s);
}

static PpWeights *
weights_new (void)
{
  PpWeights *w = g_new0 (PpWeights, 1);

  w->order = g_ptr_array_new_with_free_func ((GDestroyNotify) slot_free);
  w->slots = g_hash_table_new (g_str_hash, g_str_equal);
  return w;
}

void
pp_weights_free (PpWeights * w)
{
  if (w == NULL)
    return;
  g_hash_table_unref (w->slots);
  g_ptr_array_unref (w->order);
  g_clear_pointer (&w->st, pp_safetensors_free);
  g_clear_pointer (&w->rand, g_rand_free);
  g_free (w->source);
  g_free (w->digest);
  g_free (w);
}

PpWeights *
pp_weights_open (const gchar * safetensors_path, GError ** error)
{
  PpSafetensors *st = pp_safetensors_open (safetensors_path, error);
  PpWeights *w;

  if (st == NULL)
    return NULL;
  w = weights_new ();
  w->st = st;
  w->source = g_strdup (safetensors_path);
  for (guint i = 0; i < pp_safetensors_n_entries (st); i++) {
    const PpStEntry *e = pp_safetensors_entry (st, i);
    Slot *s = g_new0 (Slot, 1);

    s->key = g_strdup (e->name);
    s->ndim = e->ndim;
    memcpy (s->shape, e->shape, sizeof s->shape);
    s->numel = pp_st_entry_numel (e);
    s->entry = e;
    g_ptr_array_add (w->order, s);
    g_hash_table_insert (w->slots, s->key, s);
  }
  return w;
}

PpWeights *
pp_weights_new_random (guint64 seed)
{
  PpWeights *w = weights_new ();
  guint32 seed_words[2] = { (guint32) seed, (guint32) (seed >> 32) };

  w->seed = seed;
  w->rand = g_rand_new_with_seed_array (seed_words,
      G_N_ELEMENTS (seed_words));
  w->source = g_strdup_printf ("random weights (seed %" G_GUINT64_FORMAT ")",
      seed);
  return w;
}

const gchar *
pp_weights_source (PpWeights * w)
{
  return w->source;
}

gboolean
pp_weights_is_random (PpWeights * w)
{
  return w->rand != NULL;
}

gboolean
pp_weights_has (PpWeights * w, const gchar * key)
{
  return g_hash_table_contains (w->slots, key);
}

static gchar *
format_shape (guint ndim, const gint64 * shape)
{
  GString *s = g_string_new ("[");

  for (guint i = 0; i < ndim; i++)
    g_string_append_printf (s, "%s%" G_GINT64_FORMAT, i ? ", " : "",
        shape[i]);
  g_string_append_c (s, ']');
  return g_string_free (s, FALSE);
}

static gboolean
same_shape (const Slot * s, guint ndim, const gint64 * shape)
{
  return s->ndim == ndim && (ndim == 0
      || memcmp (s->shape, shape, ndim * sizeof (gint64)) == 0);
}

/* One standard normal per call; Box–Muller makes two, the second is kept
 * for the next call. */
typedef struct
{
  GRand *rand;
  gboolean have_spare;
  gdouble spare;
} Normal;

static gdouble
normal_next (Normal * n)
{
  gdouble u1, u2, r;

  if (n->have_spare) {
    n->have_spare = FALSE;
    return n->spare;
  }
  /* 1 - u is in (0, 1]: the log is finite. */
  u1 = 1.0 - g_rand_double (n->rand);
  u2 = g_rand_double (n->rand);
  r = sqrt (-2.0 * log (u1));
  n->spare = r * sin (2.0 * G_PI * u2);
  n->have_spare = TRUE;
  return r * cos (2.0 * G_PI * u2);
}

static void
fill_random (PpWeights * w, PpWeightKind kind, gfloat * data, gsize numel)
{
  Normal n = { w->rand, FALSE, 0.0 };
  gdouble mean = 0.0, std;

  switch (kind) {
    case PP_WEIGHT_BIAS:
      std = PP_WEIGHT_STD_BIAS;
      break;
    case PP_WEIGHT_NORM_SCALE:
      mean = 1.0;
      std = PP_WEIGHT_STD_NORM_SCALE;
      break;
    case PP_WEIGHT_NORM_SHIFT:
      std = PP_WEIGHT_STD_NORM_SHIFT;
      break;
    case PP_WEIGHT_DEFAULT:
    default:
      std = PP_WEIGHT_STD_DEFAULT;
      break;
  }
  for (gsize i = 0; i < numel; i++)
    data[i] = (gfloat) (mean + std * normal_next (&n));
}

/* Makes @s->data valid: F32 in place when aligned, else converted once. */
static gboolean
materialise (PpWeights * w, Slot * s, GError ** error)
{
  const PpStEntry *e = s->entry;

  if (s->data != NULL)
    return TRUE;
#if G_BYTE_ORDER == G_LITTLE_ENDIAN
  if (e->dtype == PP_ST_F32
      && (guintptr) e->data % G_ALIGNOF (gfloat) == 0) {
    s->data = (const gfloat *) e->data;
    return TRUE;
  }
#endif
  s->owned = g_try_new (gfloat, MAX (s->numel, 1));
  if (s->owned == NULL) {
    g_set_error (error, PP_ERROR, PP_ERROR_RESOURCE,
        "%s: cannot allocate %" G_GSIZE_FORMAT " floats for weight '%s'",
        w->source, s->numel, s->key);
    return FALSE;
  }
  pp_safetensors_read_f32 (e, s->owned);
  s->data = s->owned;
  return TRUE;
}

static Slot *
generate (PpWeights * w, const gchar * key, PpWeightKind kind, guint ndim,
    const gint64 * shape, GError ** error)
{
  Slot *s;
  gsize numel = 1;

  for (guint i = 0; i < ndim; i++) {
    if ((guint64) shape[i] > G_MAXSIZE / sizeof (gfloat) / numel) {
      g_set_error (error, PP_ERROR, PP_ERROR_SHAPE,
          "%s: weight '%s' is too large to generate", w->source, key);
      return NULL;
    }
    numel *= (gsize) shape[i];
  }
  s = g_new0 (Slot, 1);
  s->owned = g_try_new (gfloat, numel);
  if (s->owned == NULL) {
    g_set_error (error, PP_ERROR, PP_ERROR_RESOURCE,
        "%s: cannot allocate %" G_GSIZE_FORMAT " floats for weight '%s'",
        w->source, numel, key);
    g_free (s);
    return NULL;
  }
  s->key = g_strdup (key);
  s->ndim = ndim;
  if (ndim > 0)
    memcpy (s->shape, shape, ndim * sizeof (gint64));
  s->numel = numel;
  fill_random (w, kind, s->owned, numel);
  s->data = s->owned;
  g_ptr_array_add (w->order, s);
  g_hash_table_insert (w->slots, s->key, s);
  g_clear_pointer (&w->digest, g_free);
  return s;
}

const gfloat *
pp_weights_get_kind (PpWeights * w, const gchar * key, PpWeightKind kind,
    guint ndim, const gint64 * shape, GError ** error)
{
  Slot *s;

  g_return_val_if_fail (w != NULL && key != NULL, NULL);
  if (ndim > PP_ST_MAX_DIMS) {
    g_set_error (error, PP_ERROR, PP_ERROR_SHAPE,
        "%s: weight '%s' asked for with %u dimensions, at most %d exist",
        w->source, key, ndim, PP_ST_MAX_DIMS);
    return NULL;
  }
  for (guint i = 0; i < ndim; i++) {
    if (shape[i] < 1) {
      g_autofree gchar *want = format_shape (ndim, shape);
      g_set_error (error, PP_ERROR, PP_ERROR_SHAPE,
          "%s: weight '%s' asked for with invalid shape %s", w->source, key,
          want);
      return NULL;
    }
  }

  s = g_hash_table_lookup (w->slots, key);
  if (s == NULL && w->rand != NULL) {
    s = generate (w, key, kind, ndim, shape, error);
    if (s == NULL)
      return NULL;
  } else if (s == NULL) {
    g_autofree gchar *want = format_shape (ndim, shape);
    g_set_error (error, PP_ERROR, PP_ERROR_MODEL,
        "%s: weight '%s' is missing (the model expects shape %s)", w->source,
        key, want);
    return NULL;
  }
  if (!same_shape (s, ndim, shape)) {
    g_autofree gchar *want = format_shape (ndim, shape);
    g_autofree gchar *have = format_shape (s->ndim, s->shape);
    g_set_error (error, PP_ERROR, PP_ERROR_SHAPE,
        "%s: weight '%s' has shape %s, the model expects %s", w->source, key,
        have, want);
    return NULL;
  }
  if (s->entry != NULL && !materialise (w, s, error))
    return NULL;
  s->used = TRUE;
  return s->data;
}

const gfloat *
pp_weights_get (PpWeights * w, const gchar * key, guint ndim,
    const gint64 * shape, GError ** error)
{
  return pp_weights_get_kind (w, key, PP_WEIGHT_DEFAULT, ndim, shape, error);
}

gboolean
pp_weights_check_all_used (PpWeights * w, GError ** error)
{
  g_autoptr (GString) list = g_string_new (NULL);
  guint unused = 0;

  for (guint i = 0; i < w->order->len; i++) {
    const Slot *s = g_ptr_array_index (w->order, i);

    if (s->used)
      continue;
    if (unused < PP_WEIGHTS_LIST_MAX)
      g_string_append_printf (list, "%s'%s'", unused ? ", " : "", s->key);
    unused++;
  }
  if (unused == 0)
    return TRUE;
  if (unused > PP_WEIGHTS_LIST_MAX)
    g_string_append_printf (list, " and %u more",
        unused - PP_WEIGHTS_LIST_MAX);
  g_set_error (error, PP_ERROR, PP_ERROR_MODEL,
      "%s: %u weight%s the model does not use (wrong model type or "
      "config?): %s", w->source, unused, unused == 1 ? "" : "s", list->str);
  return FALSE;
}

gboolean
pp_weights_save (PpWeights * w, const gchar * path, GError ** error)
{
  g_autofree PpStEntry *entries = g_new0 (PpStEntry, MAX (w->order->len, 1));
  g_autoptr (GHashTable) meta = g_hash_table_new_full (g_str_hash,
      g_str_equal, NULL, g_free);

  for (guint i = 0; i < w->order->len; i++) {
    Slot *s = g_ptr_array_index (w->order, i);

    if (s->entry != NULL && !materialise (w, s, error))
      return FALSE;
    entries[i].name = s->key;
    entries[i].dtype = PP_ST_F32;
    entries[i].ndim = s->ndim;
    memcpy (entries[i].shape, s->shape, sizeof s->shape);
    entries[i].nbytes = s->numel * sizeof (gfloat);
    entries[i].data = (const guint8 *) s->data;
  }
  if (w->st != NULL) {
    GHashTableIter it;
    gpointer k, v;

    g_hash_table_iter_init (&it, pp_safetensors_metadata (w->st));
    while (g_hash_table_iter_next (&it, &k, &v))
      g_hash_table_insert (meta, k, g_strdup (v));
  } else {
    g_hash_table_insert (meta, (gpointer) META_FORMAT_KEY,
        g_strdup (META_FORMAT_VALUE));
    g_hash_table_insert (meta, (gpointer) META_SEED_KEY,
        g_strdup_printf ("%" G_GUINT64_FORMAT, w->seed));
  }
  return pp_safetensors_write_entries (path, w->order->len, entries, meta,
      error);
}

guint64
pp_weights_n_params (PpWeights * w)
{
  guint64 n = 0;

  for (guint i = 0; i < w->order->len; i++)
    n += ((const Slot *) g_ptr_array_index (w->order, i))->numel;
  return n;
}

guint
pp_weights_n_tensors (PpWeights * w)
{
  return w->order->len;
}

const gchar *
pp_weights_digest (PpWeights * w)
{
  g_autoptr (GChecksum) sum = NULL;

  if (w->digest != NULL)
    return w->digest;
  sum = g_checksum_new (G_CHECKSUM_SHA256);
  if (w->st != NULL) {
    gsize size;
    const guint8 *data = g_bytes_get_data (pp_safetensors_bytes (w->st),
        &size);

    g_checksum_update (sum, data, (gssize) size);
  } else {
    for (guint i = 0; i < w->order->len; i++) {
      const Slot *s = g_ptr_array_index (w->order, i);
#if G_BYTE_ORDER == G_LITTLE_ENDIAN
      g_checksum_update (sum, (const guchar *) s->data,
          (gssize) (s->numel * sizeof (gfloat)));
#else
      for (gsize j = 0; j < s->numel; j++) {
        guint32 bits;

        memcpy (&bits, s->data + j, sizeof bits);
        bits = GUINT32_TO_LE (bits);
        g_checksum_update (sum, (const guchar *) &bits, sizeof bits);
      }
#endif
    }
  }
  w->digest = g_strdup (g_checksum_get_string (sum));
  return w->digest;
}

gchar *
pp_model_dir_weights_path (const gchar * component_dir, GError ** error)
{
  static const gchar *const names[] = { PP_WEIGHTS_FILE, PP_WEIGHTS_FILE_FP16 };

  for (guint i = 0; i < G_N_ELEMENTS (names); i++) {
    gchar *path = g_build_filename (component_dir, names[i], NULL);

    if (g_file_test (path, G_FILE_TEST_IS_REGULAR))
      return path;
    g_free (path);
  }
  g_set_error (error, PP_ERROR, PP_ERROR_CONFIG,
      "%s has neither %s nor %s", component_dir, PP_WEIGHTS_FILE,
      PP_WEIGHTS_FILE_FP16);
  return NULL;
}
