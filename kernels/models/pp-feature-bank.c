/* ppdiffuse — the temporal feature bank's host side: extended keys and
 * values, fusion and merging (pp-feature-bank.h has the rule). */
#include "pp-feature-bank.h"

#include <math.h>
#include <string.h>

struct _PpBankLayer
{
  PpFeatureBank *bank;
  gint channels;
  guint rows;                   /* M */
  gfloat *k, *v, *o;            /* [M, C] each */
};

struct _PpFeatureBank
{
  guint frames;                 /* capacity in frames of rows */
  gdouble threshold;
  GPtrArray *layers;            /* PpBankLayer, forward order */
  guint next;
  guint64 frames_seen;
  guint64 fused, candidates;
};

static void
layer_clear (PpBankLayer * l)
{
  g_clear_pointer (&l->k, g_free);
  g_clear_pointer (&l->v, g_free);
  g_clear_pointer (&l->o, g_free);
  l->rows = 0;
}

static void
layer_free (PpBankLayer * l)
{
  layer_clear (l);
  g_free (l);
}

PpFeatureBank *
pp_feature_bank_new (guint frames, gdouble threshold)
{
  PpFeatureBank *b = g_new0 (PpFeatureBank, 1);

  b->frames = MAX (frames, 1);
  b->threshold = threshold;
  b->layers = g_ptr_array_new_with_free_func ((GDestroyNotify) layer_free);
  return b;
}

void
pp_feature_bank_free (PpFeatureBank * bank)
{
  if (bank == NULL)
    return;
  g_ptr_array_unref (bank->layers);
  g_free (bank);
}

void
pp_feature_bank_reset (PpFeatureBank * bank)
{
  for (guint i = 0; i < bank->layers->len; i++)
    layer_clear (g_ptr_array_index (bank->layers, i));
  bank->next = 0;
  bank->frames_seen = 0;
}

gsize
pp_feature_bank_bytes (PpFeatureBank * bank)
{
  gsize bytes = 0;

  for (guint i = 0; i < bank->layers->len; i++) {
    const PpBankLayer *l = g_ptr_array_index (bank->layers, i);

    bytes += 3 * (gsize) l->rows * l->channels * sizeof (gfloat);
  }
  return bytes;
}

guint64
pp_feature_bank_frames_seen (PpFeatureBank * bank)
{
  return bank->frames_seen;
}

void
pp_feature_bank_fused (PpFeatureBank * bank, guint64 * fused,
    guint64 * candidates)
{
  *fused = bank->fused;
  *candidates = bank->candidates;
}

void
pp_feature_bank_begin (PpFeatureBank * bank)
{
  bank->next = 0;
}

void
pp_feature_bank_end (PpFeatureBank * bank)
{
  bank->frames_seen++;
}

PpBankLayer *
pp_feature_bank_next (PpFeatureBank * bank, gint channels)
{
  PpBankLayer *l;

  if (bank->next == bank->layers->len) {
    l = g_new0 (PpBankLayer, 1);
    l->bank = bank;
    l->channels = channels;
    g_ptr_array_add (bank->layers, l);
  }
  l = g_ptr_array_index (bank->layers, bank->next++);
  g_assert (l->channels == channels);
  return l;
}

guint
pp_bank_layer_rows (PpBankLayer * layer)
{
  return layer->rows;
}

void
pp_bank_layer_extend (PpBankLayer * l, PpBackend * be, const float *k,
    const float *v, gint rows, float *k_ext, float *v_ext)
{
  const gsize own = (gsize) rows * l->channels * sizeof (gfloat);
  const gsize banked = (gsize) l->rows * l->channels * sizeof (gfloat);

  pp_backend_copy (be, k_ext, k, own);
  pp_backend_copy (be, v_ext, v, own);
  pp_backend_upload (be, (guint8 *) k_ext + own, l->k, banked);
  pp_backend_upload (be, (guint8 *) v_ext + own, l->v, banked);
}

/* Euclidean norms of @n rows of @c floats. */
static gdouble *
row_norms (const gfloat * x, gsize n, gint c)
{
  gdouble *norms = g_new (gdouble, MAX (n, 1));

  for (gsize i = 0; i < n; i++) {
    gdouble s = 0.0;

    for (gint j = 0; j < c; j++)
      s += (gdouble) x[i * c + j] * x[i * c + j];
    norms[i] = sqrt (s);
  }
  return norms;
}

static gdouble
cosine (const gfloat * a, gdouble na, const gfloat * b, gdouble nb, gint c)
{
  gdouble s = 0.0;

  if (na == 0.0 || nb == 0.0)
    return 0.0;
  for (gint j = 0; j < c; j++)
    s += (gdouble) a[j] * b[j];
  return s / (na * nb);
}

/* Each row of @o [L, C] → (1 − s)·o + s·(its most similar bank output
 * when that is similar enough, else itself). */
static guint
fuse_rows (const PpBankLayer * l, gfloat * o, gint rows, gdouble threshold)
{
  const gint c = l->channels;
  const gdouble s = PP_FEATURE_BANK_STRENGTH;
  g_autofree gdouble *on = row_norms (o, rows, c);
  g_autofree gdouble *bn = row_norms (l->o, l->rows, c);
  guint fused = 0;

  for (gint i = 0; i < rows; i++) {
    gfloat *oi = o + (gsize) i * c;
    gdouble best = -G_MAXDOUBLE;
    guint at = 0;

    for (guint j = 0; j < l->rows; j++) {
      gdouble cs = cosine (oi, on[i], l->o + (gsize) j * c, bn[j], c);

      if (cs > best) {
        best = cs;
        at = j;
      }
    }
    if (best < threshold)
      continue;                 /* (1 − s)·o + s·o */
    for (gint j = 0; j < c; j++)
      oi[j] = (gfloat) ((1.0 - s) * oi[j] + s * l->o[(gsize) at * c + j]);
    fused++;
  }
  return fused;
}

/* @n rows of [K | V | O] (host, [n, C] each) merged to @keep rows: rows
 * 0, 2, …, 2r − 2 (r = n − keep) each averaged into the other row whose
 * key is most similar. */
static void
merge_rows (gint c, gsize n, gsize keep, const gfloat * k, const gfloat * v,
    const gfloat * o, gfloat * k_out, gfloat * v_out, gfloat * o_out)
{
  const gsize r = n - keep;
  g_autofree gdouble *kn = row_norms (k, n, c);
  g_autofree gsize *dest = g_new (gsize, n);      /* row → destination */
  g_autofree gsize *slot = g_new (gsize, n);      /* destination → out row */
  g_autofree gdouble *sum = g_new0 (gdouble, 3 * keep * c);
  g_autofree guint *count = g_new0 (guint, keep);
  const gfloat *const parts[3] = { k, v, o };
  gfloat *const outs[3] = { k_out, v_out, o_out };
  gsize m = 0;

  /* Destinations in order: every row but the sources. */
  for (gsize i = 0; i < n; i++) {
    gboolean source = i < 2 * r && i % 2 == 0;

    slot[i] = source ? G_MAXSIZE : m++;
    dest[i] = i;
  }
  g_assert (m == keep);
  for (gsize a = 0; a < 2 * r; a += 2) {
    gdouble best = -G_MAXDOUBLE;

    for (gsize b = 0; b < n; b++) {
      gdouble cs;

      if (slot[b] == G_MAXSIZE)
        continue;
      cs = cosine (k + a * c, kn[a], k + b * c, kn[b], c);
      if (cs > best) {
        best = cs;
        dest[a] = b;
      }
    }
  }
  for (gsize i = 0; i < n; i++) {
    const gsize to = slot[dest[i]];

    count[to]++;
    for (guint p = 0; p < 3; p++)
      for (gint j = 0; j < c; j++)
        sum[(p * keep + to) * c + j] += parts[p][i * c + j];
  }
  for (guint p = 0; p < 3; p++)
    for (gsize t = 0; t < keep; t++)
      for (gint j = 0; j < c; j++)
        outs[p][t * c + j] = (gfloat) (sum[(p * keep + t) * c + j]
            / count[t]);
}

void
pp_bank_layer_take (PpBankLayer * l, PpBackend * be, const float *k,
    const float *v, float *out, gint rows, gboolean fuse)
{
  PpFeatureBank *bank = l->bank;
  const gint c = l->channels;
  const gsize own = (gsize) rows * c, banked = (gsize) l->rows * c;
  const gsize n = l->rows + (gsize) rows;
  g_autofree gfloat *tk = g_new (gfloat, n * c);
  g_autofree gfloat *tv = g_new (gfloat, n * c);
  g_autofree gfloat *to = g_new (gfloat, n * c);

  /* [bank; frame] */
  if (banked > 0) {
    memcpy (tk, l->k, banked * sizeof (gfloat));
    memcpy (tv, l->v, banked * sizeof (gfloat));
    memcpy (to, l->o, banked * sizeof (gfloat));
  }
  pp_backend_download (be, tk + banked, k, own * sizeof (gfloat));
  pp_backend_download (be, tv + banked, v, own * sizeof (gfloat));
  pp_backend_download (be, to + banked, out, own * sizeof (gfloat));
  if (fuse && l->rows > 0) {
    g_autofree gfloat *fused = g_memdup2 (to + banked, own * sizeof (gfloat));

    bank->fused += fuse_rows (l, fused, rows, bank->threshold);
    bank->candidates += rows;
    pp_backend_upload (be, out, fused, own * sizeof (gfloat));
  }
  if (n <= (gsize) bank->frames * rows) {
    g_free (l->k);
    g_free (l->v);
    g_free (l->o);
    l->k = g_steal_pointer (&tk);
    l->v = g_steal_pointer (&tv);
    l->o = g_steal_pointer (&to);
    l->rows = n;
    return;
  }
  {
    const gsize keep = (gsize) bank->frames * rows;

    l->k = g_renew (gfloat, l->k, keep * c);
    l->v = g_renew (gfloat, l->v, keep * c);
    l->o = g_renew (gfloat, l->o, keep * c);
    merge_rows (c, n, keep, tk, tv, to, l->k, l->v, l->o);
    l->rows = keep;
  }
}
