/* ppdiffuse — the channels-last filters of the CUDA backend's
 * convolutions (pp_cuda_filter_nhwc, declared in pp-cuda-private.h with
 * what it keeps): a 16-bit filter laid out channels last for cuDNN, in
 * its own bytes or as a copy (padded where its channels are not
 * multiples of 8), and the table of them, cu->conv_filters, which every
 * transfer and every product consults so that whatever else reads or
 * writes a filter's bytes finds them as they were uploaded.  Its own
 * file below the ops that read filters (conv2d, the products), which
 * all call it, and the backend's transfers. */
#include "pp-cuda-conv-key.h"
#include "pp-cuda-private.h"
#include "pp-error.h"

/* A filter's channels-last copy, and what it was made from: the same
 * buffer read as another shape of the same size is another filter.
 * @in_place: @mem is the filter's own bytes, laid channels last where
 * they are (filter_transpose_in_place), not a copy: conv2d reads them as
 * they are, and any other reader finds them laid back first
 * (filter_lay_back). */
typedef struct
{
  PpCudaBackend *cu;
  gpointer mem;
  PpDType dtype;
  int cout, cin, khkw;
  int cout_pad, cin_pad;        /* its channels, padded with zeros */
  gboolean in_place;
  PpCudaType type;              /* in place: its values' */
} FilterCopy;

/* The device memory a filter's layout changes in place through, a slice
 * of its output channels at a time. */
#define FILTER_SLICE_BYTES ((gsize) 4 << 20)

/* @copy's filter, [cout, rows, cols] of 16-bit @t, made [cout, cols, rows]
 * where it is: a slice of output channels transposed into a block of
 * FILTER_SLICE_BYTES and copied back over itself, slice after slice on the
 * stream (each slice read before it is written).  FALSE, with the
 * backend's error said, when the block cannot be had. */
static gboolean
filter_transpose_in_place (PpCudaBackend * cu, gpointer mem, PpCudaType t,
    int cout, int rows, int cols)
{
  const gsize channel = (gsize) rows * cols * sizeof (guint16);
  const int per_slice = (int) MAX (FILTER_SLICE_BYTES / channel, 1);
  GError *error = NULL;
  gpointer slice = pp_cuda_obtain (cu, MIN ((gsize) per_slice, (gsize) cout)
      * channel, &error);

  if (slice == NULL) {
    g_prefix_error (&error, "conv2d: laying a %d×%d×%d filter out in "
        "place: ", cout, rows, cols);
    pp_cuda_op_error (cu, error);
    return FALSE;
  }
  for (int c = 0; c < cout; c += per_slice) {
    const int n = MIN (per_slice, cout - c);
    guint8 *at = (guint8 *) mem + (gsize) c * channel;

    PP_CUDA_OP_RUN (cu, pp_cuda_transpose_narrow (at, n, rows, cols, slice,
            t, cu->stream));
    PP_CUDA_OP_RUN (cu, cudaMemcpyAsync (at, slice, (gsize) n * channel,
            cudaMemcpyDeviceToDevice, cu->stream));
  }
  /* Kept for reuse: the next user's work queues behind the copies. */
  pp_cuda_release (cu, slice);
  return TRUE;
}

/* An in-place filter laid back channels first, as every reader but
 * conv2d's channels-last path reads it.  FALSE where it stays laid out
 * channels last, and so kept in the table: inside a capture, which then
 * fails (a graph would lay it back at every launch: the work runs again
 * without a graph, and lays it back then), or with the backend halted
 * (its work is skipped) or halting for want of the block. */
static gboolean
filter_lay_back (PpCudaBackend * cu, const FilterCopy * copy)
{
  g_assert (copy->in_place);
  if (pp_cuda_capturing_here (cu)) {
    if (cu->capture_error == NULL)
      g_set_error (&cu->capture_error, PP_ERROR, PP_ERROR_DEVICE,
          "%s: a %d×%d×%d filter laid out channels last in place, read or "
          "written otherwise inside a CUDA graph capture (a run without a "
          "graph lays it back)", cu->be.device, copy->cout, copy->cin,
          copy->khkw);
    return FALSE;
  }
  return !pp_cuda_halted (cu) && filter_transpose_in_place (cu, copy->mem,
      copy->type, copy->cout, copy->khkw, copy->cin);
}

/* pp-cuda-private.h says what it keeps, and when. */
gconstpointer
pp_cuda_filter_nhwc (PpCudaBackend * cu, PpView weight,
    const PpCudaConvKey * key, int cout_pad, int cin_pad)
{
  const PpCudaType t = pp_cuda_view_type (cu, "conv2d", "weight", weight);
  const int khkw = key->kh * key->kw;
  const gboolean padded = cout_pad != key->cout || cin_pad != key->cin;
  const gsize count = (gsize) cout_pad * cin_pad * khkw;
  FilterCopy *copy = g_hash_table_lookup (cu->conv_filters, weight.data);
  GError *error = NULL;

  if (khkw == 1 && !padded)
    return weight.data;
  if (copy != NULL && copy->dtype == weight.dtype
      && copy->cout == key->cout && copy->cin == key->cin
      && copy->khkw == khkw && copy->cout_pad == cout_pad
      && copy->cin_pad == cin_pad)
    return copy->mem;
  /* Under a capture, or halted (the convolution's work is skipped). */
  if (cu->capturing != NULL || pp_cuda_halted (cu))
    return NULL;
  /* Enqueued work that still reads an old copy comes before the new
   * one's transpose (pp_cuda_release); an old in-place layout is laid
   * back first. */
  if (copy != NULL) {
    if (copy->in_place && !filter_lay_back (cu, copy))
      return NULL;
    g_hash_table_remove (cu->conv_filters, weight.data);
  }
  if (!padded && cu->graphs_live == 0 && !cu->filters_copied) {
    if (!filter_transpose_in_place (cu, (gpointer) weight.data, t,
            key->cout, key->cin, khkw))
      return NULL;
    copy = g_new0 (FilterCopy, 1);
    copy->cu = cu;
    copy->mem = (gpointer) weight.data;
    copy->dtype = weight.dtype;
    copy->cout = copy->cout_pad = key->cout;
    copy->cin = copy->cin_pad = key->cin;
    copy->khkw = khkw;
    copy->in_place = TRUE;
    copy->type = t;
    g_hash_table_insert (cu->conv_filters, (gpointer) weight.data, copy);
    return copy->mem;
  }
  copy = g_new0 (FilterCopy, 1);
  copy->cu = cu;
  copy->dtype = weight.dtype;
  copy->cout = key->cout;
  copy->cin = key->cin;
  copy->khkw = khkw;
  copy->cout_pad = cout_pad;
  copy->cin_pad = cin_pad;
  copy->mem = pp_cuda_obtain (cu, count * sizeof (guint16), &error);
  if (copy->mem == NULL) {
    g_prefix_error (&error, "conv2d: a channels-last copy of a %d×%d×%d×%d "
        "filter: ", key->cout, key->cin, key->kh, key->kw);
    g_free (copy);
    /* Halted (else the process ends): the convolution's work is
     * skipped. */
    pp_cuda_op_error (cu, error);
    return NULL;
  }
  g_hash_table_insert (cu->conv_filters, (gpointer) weight.data, copy);
  /* [cout, cin, kh·kw] → [cout, kh·kw, cin]: a transpose per output
   * channel, kh·kw columns wide; padded, the same pass writes the
   * zeros. */
  if (padded)
    PP_CUDA_OP_RUN (cu, pp_cuda_pad_channels (weight.data, t, FALSE,
            key->cout, key->cin, khkw, copy->mem, t, cout_pad, cin_pad,
            cu->stream));
  else
    PP_CUDA_OP_RUN (cu, pp_cuda_transpose_narrow (weight.data, key->cout,
            key->cin, khkw, copy->mem, t, cu->stream));
  return copy->mem;
}

/* How the @bytes at @mem lie over @copy's filter. */
typedef enum
{
  FILTER_APART,
  FILTER_PART,                  /* some of it */
  FILTER_WHOLE,                 /* all of it */
} FilterOverlap;

static FilterOverlap
filter_overlap (gconstpointer key, const FilterCopy * copy,
    gconstpointer mem, gsize bytes)
{
  const guint8 *f = key, *m = mem;
  const gsize filter_bytes = (gsize) copy->cout * copy->cin * copy->khkw
      * sizeof (guint16);

  if (!(f < m + MAX (bytes, 1) && m < f + filter_bytes))
    return FILTER_APART;
  return m <= f && f + filter_bytes <= m + bytes ? FILTER_WHOLE
      : FILTER_PART;
}

/* The filters among the @bytes at @mem, about to be written (@written)
 * or read by a transfer.  Written, what is kept of them goes; an in-place
 * filter read, or written in part, is laid back first, so that it is what
 * its reader or writer thinks (not inside a capture, which fails
 * instead). */
static void
filters_touched (PpCudaBackend * cu, gconstpointer mem, gsize bytes,
    gboolean written)
{
  GHashTableIter iter;
  gpointer key, value;

  g_hash_table_iter_init (&iter, cu->conv_filters);
  while (g_hash_table_iter_next (&iter, &key, &value)) {
    const FilterCopy *copy = value;
    const FilterOverlap o = filter_overlap (key, copy, mem, bytes);

    if (o == FILTER_APART || (!written && !copy->in_place))
      continue;
    if (copy->in_place && (!written || o == FILTER_PART)
        && !filter_lay_back (cu, copy))
      continue;
    g_hash_table_iter_remove (&iter);
  }
}

void
pp_cuda_conv_filters_forget (PpCudaBackend * cu, gconstpointer mem,
    gsize bytes)
{
  filters_touched (cu, mem, bytes, TRUE);
}

void
pp_cuda_conv_filters_read (PpCudaBackend * cu, gconstpointer mem,
    gsize bytes)
{
  filters_touched (cu, mem, bytes, FALSE);
}

void
pp_cuda_conv_filters_trim (PpCudaBackend * cu)
{
  GHashTableIter iter;
  gpointer value;

  g_hash_table_iter_init (&iter, cu->conv_filters);
  while (g_hash_table_iter_next (&iter, NULL, &value))
    if (!((const FilterCopy *) value)->in_place)
      g_hash_table_iter_remove (&iter);
}

/* The copies are released for reuse (their readers are queued on the
 * stream before any next user's work), or retired while a graph may still
 * launch on them or one is being captured (released by the backend once
 * no graph is left). */
static void
filter_free (gpointer data)
{
  FilterCopy *copy = data;
  PpCudaBackend *cu = copy->cu;

  /* In place, the memory is the filter's buffer: its owner's. */
  if (!copy->in_place) {
    if (cu->graphs_live > 0 || pp_cuda_capturing_here (cu))
      g_ptr_array_add (cu->retired, copy->mem);
    else
      pp_cuda_release (cu, copy->mem);
  }
  g_free (copy);
}

GHashTable *
pp_cuda_conv_filters_new (void)
{
  return g_hash_table_new_full (g_direct_hash, g_direct_equal, NULL,
      filter_free);
}
