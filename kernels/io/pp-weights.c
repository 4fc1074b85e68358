/* ppdiffuse — weights bound by key, from a file or a seed. */
#include "pp-weights.h"
#include "pp-error.h"

#include <glib/gstdio.h>
#include <math.h>
#include <stdatomic.h>
#include <string.h>

/* Metadata written with saved random weights: Python's loaders expect
 * format "pt" for PyTorch state dicts. */
#define META_FORMAT_KEY "format"
#define META_FORMAT_VALUE "pt"
#define META_SEED_KEY "ppdiffuse.seed"

/* The seeded rule of pp-weights.h. */
#define FNV_OFFSET G_GUINT64_CONSTANT (0xcbf29ce484222325)
#define FNV_PRIME G_GUINT64_CONSTANT (0x100000001b3)
#define SPLITMIX_GAMMA G_GUINT64_CONSTANT (0x9E3779B97F4A7C15)
#define SPLITMIX_MUL_1 G_GUINT64_CONSTANT (0xBF58476D1CE4E5B9)
#define SPLITMIX_MUL_2 G_GUINT64_CONSTANT (0x94D049BB133111EB)
#define UNIFORM_SHIFT 40        /* keep the top 24 bits */
#define UNIFORM_STEP (1.0 / (1 << 23))  /* 2^-23: 24 bits span (0, 2) */
#define INPUT_VARIANCE_FACTOR 3.0       /* var u = 1/3 */
/* Tensors smaller than this are filled by the calling thread alone: a
 * thread start costs more than they take. */
#define SEEDED_PARALLEL_MIN (1 << 20)
#define SEEDED_MAX_THREADS 64

/* The seeded fill is integer work on 64-bit lanes: vectorised, it needs
 * AVX-512's 64-bit multiply (x86-64-v4), and then runs ~4× faster than
 * scalar code (about 0.7 ns an element here).  The build targets baseline
 * x86-64, so the loop is also compiled for v4 and picked at load time; the
 * result is the same bits either way (integer mixing, one exact float64
 * step and one rounding). */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) \
    && defined(__linux__) && !defined(PPDIFFUSE_SANITIZE)
#define SEEDED_VECTOR_CLONES \
  __attribute__ ((optimize ("tree-vectorize", "vect-cost-model=dynamic"), \
          target_clones ("default", "arch=x86-64-v4")))
#else
#define SEEDED_VECTOR_CLONES
#endif

typedef struct
{
  gchar *key;
  guint ndim;
  gint64 shape[PP_ST_MAX_DIMS];
  gsize numel;
  const PpStEntry *entry;       /* file weights; NULL for random */
  const gfloat *data;           /* NULL until first materialised */
  gfloat *owned;                /* converted or generated data */
  PpWeightKind kind;            /* declared (seeded) or first asked for */
  gboolean declared;            /* by pp_weights_expect */
  gboolean used;
} Slot;

struct _PpWeights
{
  gchar *source;
  PpSafetensors *st;            /* NULL for random weights */
  guint64 seed;
  GRand *rand;                  /* random weights only */
  gboolean seeded;
  guint n_declared;             /* pp_weights_expect calls */
  GHashTable *slots;            /* key → Slot *, owned by order */
  GPtrArray *order;             /* file order, or request order */
  gchar *digest;                /* cached; NULL when stale */
  GString *changes;             /* pp_weights_note_change; NULL: none */
  gchar *path;                  /* the file, when source names more */
  GArray *mapped;               /* PpStEntry of pp_weights_new_mapped */
  PpDType storage;              /* on the device; 0: the backend's default */
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
  if (w->changes != NULL)
    g_string_free (w->changes, TRUE);
  g_free (w->path);
  if (w->mapped != NULL) {
    for (guint i = 0; i < w->mapped->len; i++)
      g_free (g_array_index (w->mapped, PpStEntry, i).name);
    g_array_unref (w->mapped);
  }
  g_free (w);
}

/* A slot for a file's tensor @e, in the file's order. */
static void
add_entry (PpWeights * w, const PpStEntry * e)
{
  Slot *s = g_new0 (Slot, 1);

  s->key = g_strdup (e->name);
  s->ndim = e->ndim;
  memcpy (s->shape, e->shape, sizeof s->shape);
  s->numel = pp_st_entry_numel (e);
  s->entry = e;
  g_ptr_array_add (w->order, s);
  g_hash_table_insert (w->slots, s->key, s);
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
  for (guint i = 0; i < pp_safetensors_n_entries (st); i++)
    add_entry (w, pp_safetensors_entry (st, i));
  return w;
}

PpWeights *
pp_weights_new_mapped (PpSafetensors * st, GArray * entries,
    const gchar * source)
{
  PpWeights *w = weights_new ();

  w->st = st;
  w->source = g_strdup (source);
  w->path = g_strdup (pp_safetensors_path (st));
  w->mapped = entries;
  for (guint i = 0; i < entries->len; i++)
    add_entry (w, &g_array_index (entries, PpStEntry, i));
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

PpWeights *
pp_weights_new_seeded (guint64 seed)
{
  PpWeights *w = weights_new ();

  w->seed = seed;
  w->seeded = TRUE;
  w->source = g_strdup_printf ("seeded weights (seed %" G_GUINT64_FORMAT ")",
      seed);
  return w;
}

static const gchar *const kind_names[] = {
  [PP_WEIGHT_DEFAULT] = "weight",
  [PP_WEIGHT_BIAS] = "bias",
  [PP_WEIGHT_NORM_SCALE] = "norm_scale",
  [PP_WEIGHT_NORM_SHIFT] = "norm_shift",
};

const gchar *
pp_weight_kind_name (PpWeightKind kind)
{
  g_return_val_if_fail ((guint) kind < G_N_ELEMENTS (kind_names), NULL);
  return kind_names[kind];
}

gboolean
pp_weight_kind_from_name (const gchar * name, PpWeightKind * kind)
{
  for (guint i = 0; i < G_N_ELEMENTS (kind_names); i++) {
    if (g_strcmp0 (name, kind_names[i]) == 0) {
      *kind = (PpWeightKind) i;
      return TRUE;
    }
  }
  return FALSE;
}

const gchar *
pp_weights_source (PpWeights * w)
{
  return w->source;
}

gboolean
pp_weights_is_random (PpWeights * w)
{
  return w->rand != NULL || w->seeded;
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

static inline guint64
splitmix_mix (guint64 z)
{
  z = (z ^ (z >> 30)) * SPLITMIX_MUL_1;
  z = (z ^ (z >> 27)) * SPLITMIX_MUL_2;
  return z ^ (z >> 31);
}

static guint64
fnv1a_64 (const gchar * key)
{
  guint64 h = FNV_OFFSET;

  for (const guchar * p = (const guchar *) key; *p != '\0'; p++)
    h = (h ^ *p) * FNV_PRIME;
  return h;
}

typedef struct
{
  guint64 base;
  gdouble scale, offset;
  gfloat *out;
  gsize begin, end;
} SeededRange;

SEEDED_VECTOR_CLONES static void
seeded_fill_range (const SeededRange * r)
{
  for (gsize i = r->begin; i < r->end; i++) {
    guint64 z = splitmix_mix (r->base + (guint64) (i + 1) * SPLITMIX_GAMMA);
    /* 24 bits: the signed conversion is exact and vectorises */
    gdouble u = ((gdouble) (gint32) (z >> UNIFORM_SHIFT) + 0.5)
        * UNIFORM_STEP - 1.0;

    r->out[i] = (gfloat) (r->offset + r->scale * u);
  }
}

static gpointer
seeded_fill_thread (gpointer data)
{
  seeded_fill_range (data);
  return NULL;
}

/* Each element depends on its index alone, so any split into ranges gives
 * the same bits. */
static void
seeded_fill (guint64 seed, const gchar * key, gdouble scale, gdouble offset,
    gsize numel, gfloat * out)
{
  SeededRange ranges[SEEDED_MAX_THREADS];
  GThread *threads[SEEDED_MAX_THREADS];
  guint n = numel < SEEDED_PARALLEL_MIN ? 1
      : CLAMP (g_get_num_processors (), 1, SEEDED_MAX_THREADS);
  guint64 base = fnv1a_64 (key) ^ splitmix_mix (seed);

  for (guint t = 0; t < n; t++) {
    SeededRange r = { base, scale, offset, out, numel * t / n,
      numel * (t + 1) / n
    };

    ranges[t] = r;
  }
  for (guint t = 1; t < n; t++)
    threads[t] = g_thread_new ("pp-seeded", seeded_fill_thread, &ranges[t]);
  seeded_fill_range (&ranges[0]);
  for (guint t = 1; t < n; t++)
    g_thread_join (threads[t]);
}

static void
fill_seeded (PpWeights * w, const Slot * s, gfloat * data)
{
  gdouble scale, offset = 0.0;

  switch (s->kind) {
    case PP_WEIGHT_BIAS:
      scale = PP_SEEDED_SCALE_BIAS;
      break;
    case PP_WEIGHT_NORM_SCALE:
      offset = 1.0;
      scale = PP_SEEDED_SCALE_NORM_SCALE;
      break;
    case PP_WEIGHT_NORM_SHIFT:
      scale = PP_SEEDED_SCALE_NORM_SHIFT;
      break;
    case PP_WEIGHT_DEFAULT:
    default:{
      gsize fan_in = s->ndim > 0 ? s->numel / (gsize) s->shape[0] : 1;

      scale = sqrt (INPUT_VARIANCE_FACTOR / (gdouble) fan_in);
      break;
    }
  }
  seeded_fill (w->seed, s->key, scale, offset, s->numel, data);
}

void
pp_seeded_fill_input (guint64 seed, const gchar * key, gsize numel,
    gfloat * out)
{
  seeded_fill (seed, key, sqrt (INPUT_VARIANCE_FACTOR), 0.0, numel, out);
}

/* Gives @s a buffer of its own for its floats. */
static gboolean
slot_alloc (PpWeights * w, Slot * s, GError ** error)
{
  s->owned = g_try_new (gfloat, MAX (s->numel, 1));
  if (s->owned == NULL) {
    g_set_error (error, PP_ERROR, PP_ERROR_RESOURCE,
        "%s: cannot allocate %" G_GSIZE_FORMAT " floats for weight '%s'",
        w->source, s->numel, s->key);
    return FALSE;
  }
  return TRUE;
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
  if (!slot_alloc (w, s, error))
    return FALSE;
  pp_safetensors_read_f32 (e, s->owned);
  s->data = s->owned;
  return TRUE;
}

/* A slot for @key, not yet in @w and without data. */
static Slot *
slot_new (PpWeights * w, const gchar * key, PpWeightKind kind, guint ndim,
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
  s->key = g_strdup (key);
  s->kind = kind;
  s->ndim = ndim;
  if (ndim > 0)
    memcpy (s->shape, shape, ndim * sizeof (gint64));
  s->numel = numel;
  return s;
}

static void
slot_add (PpWeights * w, Slot * s)
{
  g_ptr_array_add (w->order, s);
  g_hash_table_insert (w->slots, s->key, s);
}

/* Gives a slot of generated weights its data, by its kind. */
static gboolean
generate (PpWeights * w, Slot * s, GError ** error)
{
  if (!slot_alloc (w, s, error))
    return FALSE;
  if (w->seeded)
    fill_seeded (w, s, s->owned);
  else
    fill_random (w, s->kind, s->owned, s->numel);
  s->data = s->owned;
  g_clear_pointer (&w->digest, g_free);
  return TRUE;
}

/* Makes @s->data valid: a file's tensor read, a declared one generated. */
static void add_progress (gsize bytes);

static gboolean
slot_ready (PpWeights * w, Slot * s, GError ** error)
{
  if (s->data != NULL)
    return TRUE;
  if (s->entry != NULL) {
    if (!materialise (w, s, error))
      return FALSE;
    add_progress (s->entry->nbytes);
    return TRUE;
  }
  return generate (w, s, error);
}

static gboolean
check_shape (PpWeights * w, const gchar * key, guint ndim,
    const gint64 * shape, GError ** error)
{
  if (ndim > PP_ST_MAX_DIMS) {
    g_set_error (error, PP_ERROR, PP_ERROR_SHAPE,
        "%s: weight '%s' asked for with %u dimensions, at most %d exist",
        w->source, key, ndim, PP_ST_MAX_DIMS);
    return FALSE;
  }
  for (guint i = 0; i < ndim; i++) {
    if (shape[i] < 1) {
      g_autofree gchar *want = format_shape (ndim, shape);
      g_set_error (error, PP_ERROR, PP_ERROR_SHAPE,
          "%s: weight '%s' asked for with invalid shape %s", w->source, key,
          want);
      return FALSE;
    }
  }
  return TRUE;
}

const gchar *
pp_weights_key (PpWeights * w, guint i, guint * ndim, gint64 * shape)
{
  const Slot *s;

  g_return_val_if_fail (i < w->order->len, NULL);
  s = g_ptr_array_index (w->order, i);
  if (ndim != NULL)
    *ndim = s->ndim;
  if (shape != NULL)
    memcpy (shape, s->shape, sizeof s->shape);
  return s->key;
}

gboolean
pp_weights_shape (PpWeights * w, const gchar * key, guint * ndim,
    gint64 * shape)
{
  const Slot *s = g_hash_table_lookup (w->slots, key);

  if (s == NULL)
    return FALSE;
  *ndim = s->ndim;
  memcpy (shape, s->shape, sizeof s->shape);
  return TRUE;
}

gfloat *
pp_weights_get_mutable (PpWeights * w, const gchar * key, GError ** error)
{
  Slot *s = g_hash_table_lookup (w->slots, key);

  if (s == NULL) {
    g_set_error (error, PP_ERROR, PP_ERROR_MODEL,
        "%s: weight '%s' is missing", w->source, key);
    return NULL;
  }
  if (!slot_ready (w, s, error))
    return NULL;
  if (s->owned == NULL) {
    /* In the file's mapping: copy it out. */
    if (!slot_alloc (w, s, error))
      return NULL;
    memcpy (s->owned, s->data, s->numel * sizeof (gfloat));
    s->data = s->owned;
  }
  return s->owned;
}

void
pp_weights_note_change (PpWeights * w, const gchar * change)
{
  if (w->changes == NULL)
    w->changes = g_string_new (NULL);
  g_string_append_printf (w->changes, "%s\n", change);
  g_clear_pointer (&w->digest, g_free);
}

gboolean
pp_weights_expect (PpWeights * w, const gchar * key, PpWeightKind kind,
    guint ndim, const gint64 * shape, GError ** error)
{
  Slot *s;

  g_return_val_if_fail (w != NULL && w->seeded && key != NULL, FALSE);
  if (!check_shape (w, key, ndim, shape, error))
    return FALSE;
  if (g_hash_table_contains (w->slots, key)) {
    g_set_error (error, PP_ERROR, PP_ERROR_MODEL,
        "%s: weight '%s' is declared twice", w->source, key);
    return FALSE;
  }
  s = slot_new (w, key, kind, ndim, shape, error);
  if (s == NULL)
    return FALSE;
  s->declared = TRUE;
  slot_add (w, s);
  w->n_declared++;
  g_clear_pointer (&w->digest, g_free);
  return TRUE;
}

const gfloat *
pp_weights_get_kind (PpWeights * w, const gchar * key, PpWeightKind kind,
    guint ndim, const gint64 * shape, GError ** error)
{
  Slot *s;

  g_return_val_if_fail (w != NULL && key != NULL, NULL);
  if (!check_shape (w, key, ndim, shape, error))
    return NULL;

  s = g_hash_table_lookup (w->slots, key);
  if (s == NULL && pp_weights_is_random (w) && w->n_declared == 0) {
    s = slot_new (w, key, kind, ndim, shape, error);
    if (s == NULL)
      return NULL;
    if (!generate (w, s, error)) {
      slot_free (s);
      return NULL;
    }
    slot_add (w, s);
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
  if (s->declared && s->kind != kind) {
    g_set_error (error, PP_ERROR, PP_ERROR_MODEL,
        "%s: weight '%s' is declared as a %s tensor, the model asks for a "
        "%s", w->source, key, pp_weight_kind_name (s->kind),
        pp_weight_kind_name (kind));
    return NULL;
  }
  if (!slot_ready (w, s, error))
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
pp_weights_skip (PpWeights * w, const gchar * key)
{
  Slot *s = g_hash_table_lookup (w->slots, key);

  if (s == NULL)
    return FALSE;
  s->used = TRUE;
  return TRUE;
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

    if (!slot_ready (w, s, error))
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

/* ---- the digest of a file: SHA-256 over its blocks' SHA-256s ---------- */

/* Bytes loaded so far in this process (pp_weights_load_progress). */
static atomic_uint_fast64_t load_progress;

static void
add_progress (gsize bytes)
{
  atomic_fetch_add_explicit (&load_progress, bytes, memory_order_relaxed);
}

void
pp_weights_add_load_progress (gsize bytes)
{
  add_progress (bytes);
}

guint64
pp_weights_load_progress (void)
{
  return atomic_load_explicit (&load_progress, memory_order_relaxed);
}

typedef struct
{
  const guint8 *data;
  gsize size;
  gsize n_blocks;
  guint8 *sums;                 /* n_blocks × PP_WEIGHTS_DIGEST_BYTES */
  gint next;                    /* the next block to take */
} TreeDigest;

static gpointer
tree_digest_thread (gpointer data)
{
  TreeDigest *t = data;
  gsize i;

  while ((i = (gsize) g_atomic_int_add (&t->next, 1)) < t->n_blocks) {
    const gsize at = i * PP_WEIGHTS_DIGEST_BLOCK;
    const gsize len = MIN (PP_WEIGHTS_DIGEST_BLOCK, t->size - at);
    g_autoptr (GChecksum) sum = g_checksum_new (G_CHECKSUM_SHA256);
    gsize out = PP_WEIGHTS_DIGEST_BYTES;

    g_checksum_update (sum, t->data + at, (gssize) len);
    g_checksum_get_digest (sum, t->sums + i * PP_WEIGHTS_DIGEST_BYTES, &out);
    add_progress (len);
  }
  return NULL;
}

gchar *
pp_weights_tree_digest (const guint8 * data, gsize size, guint max_threads)
{
  TreeDigest t = { data, size, 0, NULL, 0 };
  g_autoptr (GChecksum) top = g_checksum_new (G_CHECKSUM_SHA256);
  g_autoptr (GPtrArray) threads = g_ptr_array_new ();
  guint64 size_le = GUINT64_TO_LE ((guint64) size);
  guint n_threads;

  t.n_blocks = (size + PP_WEIGHTS_DIGEST_BLOCK - 1) / PP_WEIGHTS_DIGEST_BLOCK;
  t.sums = g_malloc (MAX (t.n_blocks, 1) * PP_WEIGHTS_DIGEST_BYTES);
  n_threads = (guint) MIN ((gsize) MAX (max_threads, 1), t.n_blocks);
  for (guint i = 1; i < n_threads; i++)
    g_ptr_array_add (threads, g_thread_new ("pp-digest", tree_digest_thread,
            &t));
  tree_digest_thread (&t);
  for (guint i = 0; i < threads->len; i++)
    g_thread_join (g_ptr_array_index (threads, i));
  g_checksum_update (top, (const guchar *) &size_le, sizeof size_le);
  g_checksum_update (top, t.sums, (gssize) (t.n_blocks
          * PP_WEIGHTS_DIGEST_BYTES));
  g_free (t.sums);
  return g_strdup (g_checksum_get_string (top));
}

/* ---- the digest cache: one file per weights file, under the user's
 * cache directory, keyed by what changes when the file does ---------------- */

/* "FORMAT SIZE MTIME_NS DEVICE INODE": the file the digest was made of.
 * NULL when the file cannot be looked at. */
static gchar *
digest_cache_key (const gchar * path)
{
  GStatBuf st;

  if (g_stat (path, &st) != 0)
    return NULL;
  return g_strdup_printf ("%s %" G_GUINT64_FORMAT " %" G_GINT64_FORMAT
      " %" G_GUINT64_FORMAT " %" G_GUINT64_FORMAT, PP_WEIGHTS_DIGEST_FORMAT,
      (guint64) st.st_size, (gint64) st.st_mtim.tv_sec * G_GINT64_CONSTANT
      (1000000000) + st.st_mtim.tv_nsec, (guint64) st.st_dev,
      (guint64) st.st_ino);
}

gchar *
pp_weights_digest_cache_path (const gchar * weights_path)
{
  g_autofree gchar *real = g_canonicalize_filename (weights_path, NULL);
  g_autofree gchar *name = g_compute_checksum_for_string (G_CHECKSUM_SHA256,
      real, -1);

  return g_build_filename (g_get_user_cache_dir (), "ppdiffuse", "digests",
      name, NULL);
}

/* Digests made in this process, by cache key: a digest made ahead (on
 * another thread, while the model loads) serves without the disk cache. */
static GMutex memo_lock;
static GHashTable *memo;

static gchar *
memo_lookup (const gchar * key)
{
  gchar *digest = NULL;

  g_mutex_lock (&memo_lock);
  if (memo != NULL && key != NULL)
    digest = g_strdup (g_hash_table_lookup (memo, key));
  g_mutex_unlock (&memo_lock);
  return digest;
}

static void
memo_store (const gchar * key, const gchar * digest)
{
  g_mutex_lock (&memo_lock);
  if (memo == NULL)
    memo = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, g_free);
  g_hash_table_replace (memo, g_strdup (key), g_strdup (digest));
  g_mutex_unlock (&memo_lock);
}

/* The cached digest of @path when its key still matches (the user's
 * cache, else this process's), else NULL. */
static gchar *
digest_cache_read (const gchar * path, const gchar * key)
{
  g_autofree gchar *cache = pp_weights_digest_cache_path (path);
  g_autofree gchar *text = NULL;
  g_auto (GStrv) lines = NULL;

  if (key == NULL || !g_file_get_contents (cache, &text, NULL, NULL))
    return memo_lookup (key);
  lines = g_strsplit (text, "\n", 3);
  if (g_strv_length (lines) < 2 || !g_str_equal (lines[0], key)
      || strlen (lines[1]) != 2 * PP_WEIGHTS_DIGEST_BYTES)
    return memo_lookup (key);
  return g_strdup (lines[1]);
}

/* Best effort: a start that cannot write the cache hashes again next time. */
static void
digest_cache_write (const gchar * path, const gchar * key,
    const gchar * digest)
{
  g_autofree gchar *cache = pp_weights_digest_cache_path (path);
  g_autofree gchar *dir = g_path_get_dirname (cache);
  g_autofree gchar *text = NULL;

  if (key == NULL || g_mkdir_with_parents (dir, 0700) != 0)
    return;
  text = g_strdup_printf ("%s\n%s\n", key, digest);
  /* Written to a temporary file and renamed: workers that start together
   * never read half a cache file. */
  g_file_set_contents (cache, text, -1, NULL);
}

/* The digest of the weights file @path, whose bytes @st holds: from the
 * caches (this process's, the user's), else computed and cached. */
static gchar *
file_digest (const gchar * path, PpSafetensors * st)
{
  g_autofree gchar *key = digest_cache_key (path);
  g_autofree gchar *after = NULL;
  gchar *digest = digest_cache_read (path, key);
  const guint8 *data;
  gsize size;

  if (digest != NULL)
    return digest;
  data = g_bytes_get_data (pp_safetensors_bytes (st), &size);
  digest = pp_weights_tree_digest (data, size, g_get_num_processors ());
  /* The key again: a file that changed while it was read is not cached. */
  after = digest_cache_key (path);
  if (key != NULL && g_strcmp0 (key, after) == 0) {
    memo_store (key, digest);
    digest_cache_write (path, key, digest);
  }
  return digest;
}

gchar *
pp_weights_file_digest (const gchar * path, GError ** error)
{
  PpSafetensors *st = pp_safetensors_open (path, error);
  gchar *digest;

  if (st == NULL)
    return NULL;
  digest = file_digest (path, st);
  pp_safetensors_free (st);
  return digest;
}

const gchar *
pp_weights_digest (PpWeights * w)
{
  g_autoptr (GChecksum) sum = NULL;

  if (w->digest != NULL)
    return w->digest;
  if (w->st != NULL) {
    w->digest = file_digest (w->path != NULL ? w->path : w->source, w->st);
    if (w->changes != NULL) {
      /* The file's digest, then what changed it. */
      g_autofree gchar *file = g_steal_pointer (&w->digest);

      sum = g_checksum_new (G_CHECKSUM_SHA256);
      g_checksum_update (sum, (const guchar *) file, -1);
      g_checksum_update (sum, (const guchar *) "\n", 1);
      g_checksum_update (sum, (const guchar *) w->changes->str,
          (gssize) w->changes->len);
      w->digest = g_strdup (g_checksum_get_string (sum));
    }
    return w->digest;
  }
  sum = g_checksum_new (G_CHECKSUM_SHA256);
  for (guint i = 0; i < w->order->len; i++) {
    Slot *s = g_ptr_array_index (w->order, i);

    if (!slot_ready (w, s, NULL))
      return NULL;
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

void
pp_weights_set_storage_dtype (PpWeights * w, PpDType dtype)
{
  w->storage = dtype;
}

PpDType
pp_weights_storage_dtype (PpWeights * w)
{
  return w->storage;
}
