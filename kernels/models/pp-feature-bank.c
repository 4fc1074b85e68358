/* ppdiffuse — the temporal feature bank: extended keys and values, fusion
 * and merging (pp-feature-bank.h has the rule), in the model backend's
 * memory, by its ops.
 *
 * A layer's bank is three float32 arrays of (frames + 1) × L rows on the
 * backend, made when the layer takes its first frame of L rows and kept
 * across resets (a new frame size makes them again): the bank's M rows,
 * then, while a frame is taken, the frame's L (T = [bank; frame] in one
 * array).  The similarities are products (matmul) over blocks of rows,
 * the choices, blends and merged means the feature bank's ops
 * (pp-ops-list.h: row_norms, bank_fuse, bank_merge_dest, bank_merge); a
 * frame crosses no bus, and the same code runs on every backend.  Once
 * the bank is full, a frame allocates nothing. */
#include "pp-feature-bank.h"

#include "pp-ops.h"

/* The most similarities computed at once: a block of rows against every
 * row they are compared with.  4 MiB of floats on the host; 32 MiB on a
 * device (a backend with a stream), where each block is two launches and
 * SD's top level then takes four blocks a layer instead of 32. */
#define SIMILARITY_FLOATS_HOST (1u << 20)
#define SIMILARITY_FLOATS_DEVICE (1u << 23)

struct _PpBankLayer
{
  PpFeatureBank *bank;
  gint channels;
  guint rows;                   /* M */
  gsize frame_rows;             /* L */
  gboolean merged;              /* its last take merged: full, and each
                                 * frame's work the same from now on */
  float *k, *v, *o;             /* [(frames + 1) · L, C] each, on the
                                 * backend: at most frames · L kept */
};

/* What one layer's fusion and merging work in on the backend, sized for
 * the largest layer and kept. */
typedef struct
{
  gsize sim_floats;
  float *sim;                   /* a block's similarities */
  gsize rows;                   /* of norms and dest */
  float *norms;                 /* [bank; frame] rows' norms */
  float *dest;                  /* a merge's destinations, per source */
  gsize merged_floats;
  float *merged;                /* one part of a merged layer */
  gsize fused_rows;
  /* [2, fused_rows], not yet read: per frame row, the times it was fused,
   * then the times it could have been */
  float *counts;
} Scratch;

struct _PpFeatureBank
{
  guint frames;                 /* capacity in frames of rows */
  gdouble threshold;
  GPtrArray *layers;            /* PpBankLayer, forward order */
  guint next;
  guint64 fused, candidates;
  PpBackend *be;                /* where the rows are: the first take's */
  gsize similarity;             /* the most similarities at once, there */
  Scratch scratch;
};

/* @bytes of the bank's backend; ends the process when it has none (a
 * layer's take returns nothing to fail with). */
static float *
bank_alloc (PpFeatureBank * b, gsize bytes)
{
  GError *error = NULL;
  gpointer mem = pp_backend_alloc (b->be, MAX (bytes, sizeof (float)),
      &error);

  if (mem == NULL)
    g_error ("feature bank: %" G_GSIZE_FORMAT " bytes for its rows on %s: "
        "%s", bytes, pp_backend_name (b->be), error->message);
  return mem;
}

static void
bank_release (PpFeatureBank * b, float **mem)
{
  if (*mem != NULL)
    pp_backend_free (b->be, *mem);
  *mem = NULL;
}

/* *@mem holding at least @floats floats (*@have of them now): made again,
 * without its contents, when it holds fewer. */
static void
bank_reserve (PpFeatureBank * b, float **mem, gsize * have, gsize floats)
{
  if (*mem != NULL && *have >= floats)
    return;
  bank_release (b, mem);
  *mem = bank_alloc (b, floats * sizeof (float));
  *have = floats;
}

/* The rows fused, and that could have been, that the backend counted
 * since the last call, into the bank's totals; the counts start again
 * from 0.  Both are counted on the backend, so that a graph's launches
 * count as the frames they are. */
static void
fold_fused (PpFeatureBank * b)
{
  Scratch *s = &b->scratch;
  const gsize rows = s->fused_rows;
  g_autofree float *host = NULL;

  if (s->counts == NULL)
    return;
  host = g_new (float, 2 * rows);
  pp_backend_download (b->be, host, s->counts, 2 * rows * sizeof (float));
  for (gsize i = 0; i < rows; i++) {
    b->fused += (guint64) host[i];
    b->candidates += (guint64) host[rows + i];
  }
  pp_backend_fill (b->be, s->counts, 0.0f, 2 * rows);
}

/* The scratch for a frame of @rows rows, @n rows compared and a layer of
 * @kept rows × @c after a merge. */
static void
scratch_reserve (PpFeatureBank * b, gsize rows, gsize n, gsize kept, gint c)
{
  Scratch *s = &b->scratch;

  bank_reserve (b, &s->sim, &s->sim_floats, MAX (n, b->similarity));
  if (n > s->rows) {
    bank_release (b, &s->norms);
    bank_release (b, &s->dest);
    s->norms = bank_alloc (b, n * sizeof (float));
    s->dest = bank_alloc (b, n * sizeof (float));
    s->rows = n;
  }
  bank_reserve (b, &s->merged, &s->merged_floats, kept * c);
  if (rows > s->fused_rows) {
    fold_fused (b);
    bank_release (b, &s->counts);
    s->counts = bank_alloc (b, 2 * rows * sizeof (float));
    s->fused_rows = rows;
    pp_backend_fill (b->be, s->counts, 0.0f, 2 * rows);
  }
}

static gsize
scratch_bytes (const Scratch * s)
{
  return (s->sim_floats + 2 * s->rows + s->merged_floats
      + 2 * s->fused_rows) * sizeof (float);
}

static void
layer_release (PpFeatureBank * b, PpBankLayer * l)
{
  bank_release (b, &l->k);
  bank_release (b, &l->v);
  bank_release (b, &l->o);
}

PpFeatureBank *
pp_feature_bank_new (guint frames, gdouble threshold)
{
  PpFeatureBank *b = g_new0 (PpFeatureBank, 1);

  b->frames = MAX (frames, 1);
  b->threshold = threshold;
  b->layers = g_ptr_array_new_with_free_func (g_free);
  return b;
}

void
pp_feature_bank_free (PpFeatureBank * bank)
{
  Scratch *s;

  if (bank == NULL)
    return;
  s = &bank->scratch;
  for (guint i = 0; i < bank->layers->len; i++)
    layer_release (bank, g_ptr_array_index (bank->layers, i));
  g_ptr_array_unref (bank->layers);
  bank_release (bank, &s->sim);
  bank_release (bank, &s->norms);
  bank_release (bank, &s->dest);
  bank_release (bank, &s->merged);
  bank_release (bank, &s->counts);
  g_free (bank);
}

void
pp_feature_bank_reset (PpFeatureBank * bank)
{
  for (guint i = 0; i < bank->layers->len; i++) {
    PpBankLayer *l = g_ptr_array_index (bank->layers, i);

    l->rows = 0;
    l->merged = FALSE;
  }
  bank->next = 0;
}

gsize
pp_feature_bank_bytes (PpFeatureBank * bank)
{
  gsize bytes = scratch_bytes (&bank->scratch);

  for (guint i = 0; i < bank->layers->len; i++) {
    const PpBankLayer *l = g_ptr_array_index (bank->layers, i);

    if (l->k != NULL)
      bytes += 3 * (bank->frames + 1) * l->frame_rows * l->channels
          * sizeof (float);
  }
  return bytes;
}

guint64
pp_feature_bank_rows (PpFeatureBank * bank)
{
  guint64 rows = 0;

  for (guint i = 0; i < bank->layers->len; i++)
    rows += ((PpBankLayer *) g_ptr_array_index (bank->layers, i))->rows;
  return rows;
}

gboolean
pp_feature_bank_steady (PpFeatureBank * bank)
{
  for (guint i = 0; i < bank->layers->len; i++)
    if (!((PpBankLayer *) g_ptr_array_index (bank->layers, i))->merged)
      return FALSE;
  return bank->layers->len > 0;
}

void
pp_feature_bank_fused (PpFeatureBank * bank, guint64 * fused,
    guint64 * candidates)
{
  fold_fused (bank);
  *fused = bank->fused;
  *candidates = bank->candidates;
}

void
pp_feature_bank_begin (PpFeatureBank * bank)
{
  bank->next = 0;
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

/* Ends the process unless @numel holds @need elements. */
static void
check_device_rows (const gchar * what, gsize numel, gsize need)
{
  if (numel < need)
    g_error ("feature bank: %s holds %" G_GSIZE_FORMAT " elements, "
        "%" G_GSIZE_FORMAT " needed", what, numel, need);
}

/* The bank's rows may live on one backend only: its first take's. */
static void
bind_backend (PpFeatureBank * b, PpBackend * be)
{
  if (b->be == NULL) {
    b->be = be;
    b->similarity = pp_backend_stream (be) != NULL
        ? SIMILARITY_FLOATS_DEVICE : SIMILARITY_FLOATS_HOST;
  }
  if (b->be != be)
    g_error ("feature bank: its rows are on %s, and a layer handed it "
        "rows on %s", pp_backend_name (b->be), pp_backend_name (be));
}

void
pp_bank_layer_extend (PpBankLayer * l, PpBackend * be, PpView k, PpView v,
    gint rows, PpOut k_ext, PpOut v_ext)
{
  const gsize own = (gsize) rows * l->channels;
  const gsize banked = (gsize) l->rows * l->channels;

  check_device_rows ("k", k.numel, own);
  check_device_rows ("v", v.numel, own);
  check_device_rows ("k_ext", k_ext.numel, own + banked);
  check_device_rows ("v_ext", v_ext.numel, own + banked);
  g_assert (k.dtype == k_ext.dtype && v.dtype == v_ext.dtype);
  pp_backend_copy (be, k_ext.data, k.data, own * pp_dtype_size (k.dtype));
  pp_backend_copy (be, v_ext.data, v.data, own * pp_dtype_size (v.dtype));
  if (banked == 0)
    return;
  bind_backend (l->bank, be);
  /* The bank's rows are float32; the model's activations may be 16-bit:
   * axpby with b = 0 converts. */
  pp_axpby (be, pp_out_range (k_ext, own, banked), 1.0f,
      pp_view_f32 (l->k, banked), 0.0f, banked);
  pp_axpby (be, pp_out_range (v_ext, own, banked), 1.0f,
      pp_view_f32 (l->v, banked), 0.0f, banked);
}

/* Rows compared at once against @n others. */
static gsize
block_rows (const PpFeatureBank * b, gsize n)
{
  return MAX (b->similarity / MAX (n, 1), 1);
}

/* Each of the frame's outputs (@out, T's rows M…n − 1 of the layer's o)
 * fused with its most similar bank output when that is similar enough
 * (bank_fuse), a block of rows at a time. */
static void
fuse_rows (PpBankLayer * l, PpBackend * be, PpOut out, gsize rows)
{
  PpFeatureBank *bank = l->bank;
  Scratch *s = &bank->scratch;
  const gint c = l->channels;
  const gsize m = l->rows, block = block_rows (bank, m);

  pp_row_norms (be, pp_view_f32 (l->o, (m + rows) * c), (int) (m + rows), c,
      pp_out_f32 (s->norms, m + rows));
  for (gsize i0 = 0; i0 < rows; i0 += block) {
    const gsize bm = MIN (block, rows - i0);

    pp_matmul (be, FALSE, TRUE, (int) bm, (int) m, c,
        pp_view_f32 (l->o + (m + i0) * c, bm * c), c,
        pp_view_f32 (l->o, m * c), c, FALSE, pp_out_f32 (s->sim, bm * m),
        (int) m);
    pp_bank_fuse (be, pp_view_f32 (s->sim, bm * m), (int) bm, (int) m, c,
        pp_view_f32 (s->norms + m + i0, bm), pp_view_f32 (s->norms, m),
        pp_view_f32 (l->o, m * c), bank->threshold,
        PP_FEATURE_BANK_STRENGTH, pp_out_range (out, i0 * c, bm * c),
        pp_out_f32 (s->counts + i0, bm));
  }
  pp_affine (be, pp_out_f32 (s->counts + s->fused_rows, rows), rows, 1.0f,
      1.0f);
}

/* T (n rows) merged to @keep rows: rows 0, 2, …, 2r − 2 (r = n − keep)
 * each averaged into the kept row whose key is most similar
 * (bank_merge_dest, a block of sources at a time), then each part's kept
 * rows, with their sources' means, moved down (bank_merge).  A block's
 * products are with the kept rows alone, in their order: rows 1, 3, …,
 * 2r − 1 (every other row from row 1), then rows 2r … n − 1; not with the
 * sources, which no source goes to (a frame's first merge: half of the
 * products a merge of all n rows would make). */
static void
merge_rows (PpBankLayer * l, PpBackend * be, gsize n, gsize keep)
{
  Scratch *s = &l->bank->scratch;
  const gint c = l->channels;
  const gsize r = n - keep, tail = n - 2 * r, block = block_rows (l->bank,
      keep);
  float *parts[3] = { l->k, l->v, l->o };

  pp_row_norms (be, pp_view_f32 (l->k, n * c), (int) n, c,
      pp_out_f32 (s->norms, n));
  for (gsize q0 = 0; q0 < r; q0 += block) {
    const gsize bm = MIN (block, r - q0);
    const PpView sources = pp_view_f32 (l->k + 2 * q0 * c,
        pp_strided_numel ((int) bm, c, 2 * c));

    pp_matmul (be, FALSE, TRUE, (int) bm, (int) r, c, sources, 2 * c,
        pp_view_f32 (l->k + c, pp_strided_numel ((int) r, c, 2 * c)),
        2 * c, FALSE, pp_out_f32 (s->sim, pp_strided_numel ((int) bm,
                (int) r, (int) keep)), (int) keep);
    if (tail > 0)
      pp_matmul (be, FALSE, TRUE, (int) bm, (int) tail, c, sources, 2 * c,
          pp_view_f32 (l->k + 2 * r * c, tail * c), c, FALSE,
          pp_out_f32 (s->sim + r, pp_strided_numel ((int) bm, (int) tail,
                  (int) keep)), (int) keep);
    pp_bank_merge_dest (be, pp_view_f32 (s->sim, bm * keep), (int) bm,
        (int) (2 * q0), (int) n, (int) r, pp_view_f32 (s->norms, n),
        pp_out_f32 (s->dest + q0, bm));
  }
  for (guint p = 0; p < 3; p++) {
    pp_bank_merge (be, pp_view_f32 (parts[p], n * c), (int) n, (int) r, c,
        pp_view_f32 (s->dest, r), pp_out_f32 (s->merged, keep * c));
    pp_backend_copy (be, parts[p], s->merged, keep * c * sizeof (float));
  }
  l->rows = keep;
  l->merged = TRUE;
}

void
pp_bank_layer_take (PpBankLayer * l, PpBackend * be, PpView k, PpView v,
    PpOut out, gint rows, gboolean fuse)
{
  PpFeatureBank *bank = l->bank;
  const gint c = l->channels;
  const gsize own = (gsize) rows * c, capacity = (gsize) bank->frames * rows;
  gsize n;

  check_device_rows ("k", k.numel, own);
  check_device_rows ("v", v.numel, own);
  check_device_rows ("out", out.numel, own);
  bind_backend (bank, be);
  /* A new frame size (the bank is empty then: a caps change resets it). */
  if (l->frame_rows != (gsize) rows || l->k == NULL) {
    const gsize floats = (capacity + rows) * c;

    g_assert (l->rows == 0);
    layer_release (bank, l);
    l->k = bank_alloc (bank, floats * sizeof (float));
    l->v = bank_alloc (bank, floats * sizeof (float));
    l->o = bank_alloc (bank, floats * sizeof (float));
    l->frame_rows = rows;
    l->merged = FALSE;
  }
  n = l->rows + (gsize) rows;
  scratch_reserve (bank, rows, n, capacity, c);
  /* The frame's rows after the bank's, in float32: its outputs before
   * they are fused. */
  pp_axpby (be, pp_out_f32 (l->k + (gsize) l->rows * c, own), 1.0f,
      pp_view_range (k, 0, own), 0.0f, own);
  pp_axpby (be, pp_out_f32 (l->v + (gsize) l->rows * c, own), 1.0f,
      pp_view_range (v, 0, own), 0.0f, own);
  pp_axpby (be, pp_out_f32 (l->o + (gsize) l->rows * c, own), 1.0f,
      pp_view_range (pp_out_as_view (out), 0, own), 0.0f, own);
  if (fuse && l->rows > 0)
    fuse_rows (l, be, out, rows);
  if (n <= capacity) {
    l->rows = n;
    return;
  }
  merge_rows (l, be, n, capacity);
}
