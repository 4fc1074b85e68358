/* ppdiffuse — the temporal feature bank's host side: extended keys and
 * values, fusion and merging (pp-feature-bank.h has the rule).
 *
 * A layer's bank is three arrays of frames × L rows, allocated when the
 * layer takes its first frame of L rows and kept across resets (a new
 * frame size makes them again).  The frame's own rows come down into the
 * bank's scratch, which every layer shares in turn; the similarities are
 * products over blocks of rows and the choices a loop over each block's
 * rows, both on the host's backend (the CPU backend, whichever backend
 * the model runs on): its threads share them, the same bytes on any
 * number of threads; norms, the threshold test and merged means are in
 * double.  Once the bank is full, a frame allocates nothing. */
#include "pp-feature-bank.h"

#include "pp-ops.h"

#include <math.h>
#include <string.h>

/* The most similarities computed at once: a block of rows against every
 * row they are compared with (4 MiB of floats). */
#define SIMILARITY_FLOATS (1u << 20)
/* No row: a destination without sources. */
#define NONE G_MAXUINT32

struct _PpBankLayer
{
  PpFeatureBank *bank;
  gint channels;
  guint rows;                   /* M */
  gsize capacity;               /* rows the arrays hold: frames × L */
  gfloat *k, *v, *o;            /* [capacity, C] each */
};

/* One layer's frame and what its fusion and merging work on; sized for
 * the largest layer and kept. */
typedef struct
{
  gsize floats;                 /* of each of k, v, o, fused */
  gfloat *k, *v, *o, *fused;    /* the frame's rows [L, C] */
  gsize rows;                   /* of each row array below */
  gdouble *norms;               /* [bank rows; frame rows] */
  gdouble *frame_norms;         /* the fusion's: the frame's outputs */
  gfloat *inverse;              /* 1 / norms (0 for a zero row) */
  guint32 *dest, *slot, *head, *link;
  guint32 *flags;               /* the fusion's: a block's rows fused */
  gsize similarity;             /* floats of sim */
  gfloat *sim;
} Scratch;

struct _PpFeatureBank
{
  guint frames;                 /* capacity in frames of rows */
  gdouble threshold;
  GPtrArray *layers;            /* PpBankLayer, forward order */
  guint next;
  guint64 frames_seen;
  guint64 fused, candidates;
  Scratch scratch;
};

static void
layer_free (PpBankLayer * l)
{
  g_free (l->k);
  g_free (l->v);
  g_free (l->o);
  g_free (l);
}

static void
scratch_clear (Scratch * s)
{
  g_free (s->k);
  g_free (s->v);
  g_free (s->o);
  g_free (s->fused);
  g_free (s->norms);
  g_free (s->frame_norms);
  g_free (s->inverse);
  g_free (s->dest);
  g_free (s->slot);
  g_free (s->head);
  g_free (s->link);
  g_free (s->flags);
  g_free (s->sim);
  memset (s, 0, sizeof *s);
}

/* Grows the scratch to a frame of @rows × @c and @n compared rows. */
static void
scratch_reserve (Scratch * s, gsize rows, gint c, gsize n)
{
  const gsize floats = rows * (gsize) c;

  if (floats > s->floats) {
    s->k = g_renew (gfloat, s->k, floats);
    s->v = g_renew (gfloat, s->v, floats);
    s->o = g_renew (gfloat, s->o, floats);
    s->fused = g_renew (gfloat, s->fused, floats);
    s->floats = floats;
  }
  if (n > s->rows) {
    s->norms = g_renew (gdouble, s->norms, n);
    s->frame_norms = g_renew (gdouble, s->frame_norms, n);
    s->inverse = g_renew (gfloat, s->inverse, n);
    s->dest = g_renew (guint32, s->dest, n);
    s->slot = g_renew (guint32, s->slot, n);
    s->head = g_renew (guint32, s->head, n);
    s->link = g_renew (guint32, s->link, n);
    s->flags = g_renew (guint32, s->flags, n);
    s->rows = n;
  }
  if (MAX (n, SIMILARITY_FLOATS) > s->similarity) {
    s->similarity = MAX (n, SIMILARITY_FLOATS);
    s->sim = g_renew (gfloat, s->sim, s->similarity);
  }
}

static gsize
scratch_bytes (const Scratch * s)
{
  return 4 * s->floats * sizeof (gfloat)
      + s->rows * (2 * sizeof (gdouble) + sizeof (gfloat)
      + 5 * sizeof (guint32))
      + s->similarity * sizeof (gfloat);
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
  scratch_clear (&bank->scratch);
  g_free (bank);
}

void
pp_feature_bank_reset (PpFeatureBank * bank)
{
  for (guint i = 0; i < bank->layers->len; i++)
    ((PpBankLayer *) g_ptr_array_index (bank->layers, i))->rows = 0;
  bank->next = 0;
  bank->frames_seen = 0;
}

gsize
pp_feature_bank_bytes (PpFeatureBank * bank)
{
  gsize bytes = scratch_bytes (&bank->scratch);

  for (guint i = 0; i < bank->layers->len; i++) {
    const PpBankLayer *l = g_ptr_array_index (bank->layers, i);

    bytes += 3 * l->capacity * l->channels * sizeof (gfloat);
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

/* Ends the process unless @numel holds @need elements. */
static void
check_device_rows (const gchar * what, gsize numel, gsize need)
{
  if (numel < need)
    g_error ("feature bank: %s holds %" G_GSIZE_FORMAT " elements, "
        "%" G_GSIZE_FORMAT " needed", what, numel, need);
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
  /* The bank's rows are float32 on the host; the model's activations may
   * be 16-bit. */
  pp_backend_upload_floats (be, pp_out_range (k_ext, own, banked), l->k);
  pp_backend_upload_floats (be, pp_out_range (v_ext, own, banked), l->v);
}

/* The backend the bank's host rows are computed on: the CPU backend, whose
 * products and row loops use its threads. */
static PpBackend *
host_backend (void)
{
  static PpBackend *host;

  if (g_once_init_enter (&host)) {
    GError *error = NULL;
    PpBackend *be = pp_backend_get ("cpu", &error);

    if (be == NULL)
      g_error ("feature bank: no CPU backend for its host rows: %s",
          error->message);
    g_once_init_leave (&host, be);
  }
  return host;
}

/* A row_norms call, row by row on the host's threads. */
typedef struct
{
  const gfloat *x;
  gint c;
  gdouble *norms;
  gfloat *inverse;
} Norms;

static void
norms_range (int begin, int end, gpointer data)
{
  const Norms *r = data;

  for (gsize i = begin; i < (gsize) end; i++) {
    gdouble s = 0.0;

    for (gint j = 0; j < r->c; j++)
      s += (gdouble) r->x[i * r->c + j] * r->x[i * r->c + j];
    r->norms[i] = sqrt (s);
    r->inverse[i] = r->norms[i] > 0.0 ? (gfloat) (1.0 / r->norms[i]) : 0.0f;
  }
}

/* Euclidean norms of @n rows of @c floats, into @norms, and their
 * inverses (0 for a zero row) into @inverse. */
static void
row_norms (const gfloat * x, gsize n, gint c, gdouble * norms,
    gfloat * inverse)
{
  Norms r = { x, c, norms, inverse };

  if (n > 0)
    pp_for_rows (host_backend (), (int) n, norms_range, &r);
}

/* The first j in [@lo, @hi) (every @step-th) with the largest
 * @sim[j] × @inverse[j] (the cosine times the row's own norm, which leaves
 * the order as it is) if it beats *@best; *@at is set when it does. */
static void
most_similar (const gfloat * sim, const gfloat * inverse, gsize lo,
    gsize hi, gsize step, gfloat * best, gsize * at)
{
  for (gsize j = lo; j < hi; j += step) {
    const gfloat score = sim[j] * inverse[j];

    if (score > *best) {
      *best = score;
      *at = j;
    }
  }
}

/* @sim [m, n0 + n1] = the dot products of @m rows of @a (@lda floats
 * apart) with the @n0 rows of @b0 then the @n1 rows of @b1 ([n, C]). */
static void
dots (gint c, const gfloat * a, gsize lda, gsize m, const gfloat * b0,
    gsize n0, const gfloat * b1, gsize n1, gfloat * sim)
{
  PpBackend *host = host_backend ();
  const gsize ld = n0 + n1;
  const PpView rows = pp_view_f32 (a, pp_strided_numel ((int) m, c,
          (int) lda));

  if (n0 > 0)
    pp_matmul (host, FALSE, TRUE, (int) m, (int) n0, c, rows, (int) lda,
        pp_view_f32 (b0, n0 * c), c, FALSE,
        pp_out_f32 (sim, pp_strided_numel ((int) m, (int) n0, (int) ld)),
        (int) ld);
  if (n1 > 0)
    pp_matmul (host, FALSE, TRUE, (int) m, (int) n1, c, rows, (int) lda,
        pp_view_f32 (b1, n1 * c), c, FALSE,
        pp_out_f32 (sim + n0, pp_strided_numel ((int) m, (int) n1,
                (int) ld)), (int) ld);
}

static gdouble
cosine (gfloat dot, gdouble na, gdouble nb)
{
  return na == 0.0 || nb == 0.0 ? 0.0 : dot / (na * nb);
}

/* Rows compared at once against @n others. */
static gsize
block_rows (gsize n)
{
  return MAX (SIMILARITY_FLOATS / MAX (n, 1), 1);
}

/* A block of the frame's rows in fuse_rows: each row's choice and blend,
 * row by row on the host's threads. */
typedef struct
{
  const PpBankLayer *l;
  Scratch *s;
  gsize i0, m;
  gdouble threshold;
} FuseBlock;

static void
fuse_range (int begin, int end, gpointer data)
{
  const FuseBlock *f = data;
  const gint c = f->l->channels;
  const gdouble strength = PP_FEATURE_BANK_STRENGTH;

  for (gsize i = f->i0 + begin; i < f->i0 + end; i++) {
    const gfloat *sim = f->s->sim + (i - f->i0) * f->m;
    gfloat *oi = f->s->fused + i * c;
    gfloat best = -G_MAXFLOAT;
    gsize at = 0;

    f->s->flags[i - f->i0] = 0;
    most_similar (sim, f->s->inverse, 0, f->m, 1, &best, &at);
    if (cosine (sim[at], f->s->frame_norms[i], f->s->norms[at])
        < f->threshold)
      continue;                 /* (1 − s)·o + s·o */
    for (gint j = 0; j < c; j++)
      oi[j] = (gfloat) ((1.0 - strength) * oi[j]
          + strength * f->l->o[at * c + j]);
    f->s->flags[i - f->i0] = 1;
  }
}

/* Each row of the frame's outputs → (1 − s)·o + s·(its most similar bank
 * output when that is similar enough, else itself), into the scratch's
 * fused rows. */
static guint
fuse_rows (const PpBankLayer * l, Scratch * s, gint rows, gdouble threshold)
{
  const gint c = l->channels;
  const gsize m = l->rows, block = block_rows (m);
  guint fused = 0;

  /* the bank's inverse norms are the ones the choice reads */
  row_norms (s->o, rows, c, s->frame_norms, s->inverse);
  row_norms (l->o, m, c, s->norms, s->inverse);
  memcpy (s->fused, s->o, (gsize) rows * c * sizeof (gfloat));
  for (gsize i0 = 0; i0 < (gsize) rows; i0 += block) {
    const gsize bm = MIN (block, rows - i0);
    FuseBlock f = { l, s, i0, m, threshold };

    dots (c, s->o + i0 * c, c, bm, l->o, m, NULL, 0, s->sim);
    pp_for_rows (host_backend (), (int) bm, fuse_range, &f);
    for (gsize q = 0; q < bm; q++)
      fused += s->flags[q];
  }
  return fused;
}

/* Row @i of [bank; frame] in one of the three parts. */
static gfloat *
row_of (gfloat * bank, gfloat * frame, gsize m, gsize i, gint c)
{
  return i < m ? bank + i * c : frame + (i - m) * c;
}

/* A block of sources in merge_destinations: each one's destination, on
 * the host's threads. */
typedef struct
{
  Scratch *s;
  gsize a0, n, r;
} DestBlock;

static void
dest_range (int begin, int end, gpointer data)
{
  const DestBlock *d = data;

  for (gsize q = begin; q < (gsize) end; q++) {
    const gsize a = d->a0 + 2 * q;
    const gfloat *sim = d->s->sim + q * d->n;
    gfloat best = -G_MAXFLOAT;
    gsize at = a;

    /* the destinations: odd rows below 2r, then every row */
    most_similar (sim, d->s->inverse, 1, 2 * d->r, 2, &best, &at);
    most_similar (sim, d->s->inverse, 2 * d->r, d->n, 1, &best, &at);
    d->s->dest[a] = (guint32) at;
  }
}

/* The sources' destinations: for each source a (rows 0, 2, …, 2r − 2 of
 * [bank; frame], n rows), the other row whose key is most similar, lowest
 * index on ties. */
static void
merge_destinations (PpBankLayer * l, Scratch * s, gsize n, gsize r)
{
  const gint c = l->channels;
  const gsize m = l->rows, block = block_rows (n);

  row_norms (l->k, m, c, s->norms, s->inverse);
  row_norms (s->k, n - m, c, s->norms + m, s->inverse + m);
  for (gsize i = 0; i < n; i++)
    s->dest[i] = (guint32) i;
  /* Sources in blocks, each block within the bank or within the frame. */
  for (gsize a0 = 0; a0 < 2 * r;) {
    const gsize end = a0 < m ? MIN (2 * r, m) : 2 * r;
    const gsize bm = MIN (block, (end - a0 + 1) / 2);
    DestBlock d = { s, a0, n, r };

    dots (c, row_of (l->k, s->k, m, a0, c), 2 * (gsize) c, bm, l->k, m,
        s->k, n - m, s->sim);
    pp_for_rows (host_backend (), (int) bm, dest_range, &d);
    a0 += 2 * bm;
  }
}

/* The merged means of merge_rows, destination by destination on the
 * host's threads (each writes its own rows and reads its sources', which
 * no destination is), MEAN_CHUNK channels at a time, each summed in
 * double in row order, the destination's own row in its place. */
#define MEAN_CHUNK 64

typedef struct
{
  gint c;
  gsize m;
  const Scratch *s;
  gfloat *banks[3], *frames[3];
} MeanRows;

static void
mean_range (int begin, int end, gpointer data)
{
  const MeanRows *mr = data;
  const Scratch *s = mr->s;
  const gint c = mr->c;

  for (gsize t = begin; t < (gsize) end; t++) {
    if (s->slot[t] == NONE || s->head[t] == NONE)
      continue;
    for (guint p = 0; p < 3; p++) {
      gfloat *own = row_of (mr->banks[p], mr->frames[p], mr->m, t, c);

      for (gint j0 = 0; j0 < c; j0 += MEAN_CHUNK) {
        const gint w = MIN (MEAN_CHUNK, c - j0);
        gdouble acc[MEAN_CHUNK] = { 0.0 };
        guint32 src = s->head[t];
        gboolean own_added = FALSE;
        guint count = 0;

        while (src != NONE || !own_added) {
          const gfloat *x;

          if (!own_added && (src == NONE || src > t)) {
            x = own;
            own_added = TRUE;
          } else {
            x = row_of (mr->banks[p], mr->frames[p], mr->m, src, c);
            src = s->link[src];
          }
          for (gint j = 0; j < w; j++)
            acc[j] += x[j0 + j];
          count++;
        }
        for (gint j = 0; j < w; j++)
          own[j0 + j] = (gfloat) (acc[j] / count);
      }
    }
  }
}

/* [bank; frame] (n rows) merged to @keep rows in the bank: rows 0, 2, …,
 * 2r − 2 (r = n − keep) each averaged into the other row whose key is most
 * similar; the rows left keep their order.  In place: each destination
 * first becomes the mean of itself and its sources (in row order, summed
 * in double), then the destinations move down to their places. */
static void
merge_rows (PpBankLayer * l, Scratch * s, gsize n, gsize keep)
{
  const gint c = l->channels;
  const gsize m = l->rows, r = n - keep;
  MeanRows mr = { c, m, s, { l->k, l->v, l->o }, { s->k, s->v, s->o } };
  gsize to = 0;

  for (gsize i = 0; i < n; i++) {
    const gboolean source = i < 2 * r && i % 2 == 0;

    s->slot[i] = source ? NONE : (guint32) to++;
    s->head[i] = NONE;
  }
  g_assert (to == keep);
  merge_destinations (l, s, n, r);
  /* Each destination's sources in row order: a list from head[]. */
  for (gsize a = 2 * r; a >= 2; a -= 2) {
    const guint32 d = s->dest[a - 2];

    s->link[a - 2] = s->head[d];
    s->head[d] = (guint32) (a - 2);
  }
  pp_for_rows (host_backend (), (int) n, mean_range, &mr);
  for (gsize t = 0; t < n; t++) {
    if (s->slot[t] == NONE || s->slot[t] == t)
      continue;
    for (guint p = 0; p < 3; p++)
      memcpy (mr.banks[p] + (gsize) s->slot[t] * c,
          row_of (mr.banks[p], mr.frames[p], m, t, c), c * sizeof (gfloat));
  }
  l->rows = keep;
}

void
pp_bank_layer_take (PpBankLayer * l, PpBackend * be, PpView k, PpView v,
    PpOut out, gint rows, gboolean fuse)
{
  PpFeatureBank *bank = l->bank;
  Scratch *s = &bank->scratch;
  const gint c = l->channels;
  const gsize own = (gsize) rows * c, capacity = (gsize) bank->frames * rows;
  gsize n;

  check_device_rows ("k", k.numel, own);
  check_device_rows ("v", v.numel, own);
  check_device_rows ("out", out.numel, own);
  /* A new frame size (the bank is empty then: a caps change resets it). */
  if (l->capacity != capacity) {
    g_assert (l->rows == 0);
    g_free (l->k);
    g_free (l->v);
    g_free (l->o);
    l->k = g_new (gfloat, capacity * c);
    l->v = g_new (gfloat, capacity * c);
    l->o = g_new (gfloat, capacity * c);
    l->capacity = capacity;
  }
  n = l->rows + (gsize) rows;
  scratch_reserve (s, rows, c, n);
  pp_backend_download_floats (be, s->k, pp_view_range (k, 0, own));
  pp_backend_download_floats (be, s->v, pp_view_range (v, 0, own));
  pp_backend_download_floats (be, s->o,
      pp_view_range (pp_out_as_view (out), 0, own));
  if (fuse && l->rows > 0) {
    bank->fused += fuse_rows (l, s, rows, bank->threshold);
    bank->candidates += rows;
    pp_backend_upload_floats (be, pp_out_range (out, 0, own), s->fused);
  }
  if (n <= capacity) {
    memcpy (l->k + (gsize) l->rows * c, s->k, own * sizeof (gfloat));
    memcpy (l->v + (gsize) l->rows * c, s->v, own * sizeof (gfloat));
    memcpy (l->o + (gsize) l->rows * c, s->o, own * sizeof (gfloat));
    l->rows = n;
    return;
  }
  merge_rows (l, s, n, capacity);
}
