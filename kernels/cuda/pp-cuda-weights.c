/* ppdiffuse — the CUDA backend's weights table: a sorted array of
 * intervals, binary search.  A UNet has about a thousand blocks; lookups
 * (one per parameter operand of an op) cost ten comparisons. */
#include "pp-cuda-weights.h"

typedef struct
{
  guintptr start, end;          /* [start, end) */
  PpDType dtype;
} Block;

struct _PpCudaWeights
{
  GArray *blocks;               /* Block, sorted by start, disjoint */
};

PpCudaWeights *
pp_cuda_weights_new (void)
{
  PpCudaWeights *w = g_new0 (PpCudaWeights, 1);

  w->blocks = g_array_new (FALSE, FALSE, sizeof (Block));
  return w;
}

void
pp_cuda_weights_free (PpCudaWeights * w)
{
  if (w == NULL)
    return;
  g_array_unref (w->blocks);
  g_free (w);
}

/* The number of blocks starting at or before @p: the block that may hold
 * @p is the one before that index. */
static guint
upper_bound (const PpCudaWeights * w, guintptr p)
{
  guint lo = 0, hi = w->blocks->len;

  while (lo < hi) {
    const guint mid = lo + (hi - lo) / 2;

    if (g_array_index (w->blocks, Block, mid).start <= p)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

void
pp_cuda_weights_add (PpCudaWeights * w, gconstpointer start, gsize bytes,
    PpDType dtype)
{
  Block block = { (guintptr) start, (guintptr) start + bytes, dtype };

  g_return_if_fail (bytes > 0);
  g_array_insert_val (w->blocks, upper_bound (w, block.start), block);
}

gboolean
pp_cuda_weights_remove (PpCudaWeights * w, gconstpointer start)
{
  const guint i = upper_bound (w, (guintptr) start);

  if (i == 0 || g_array_index (w->blocks, Block, i - 1).start
      != (guintptr) start)
    return FALSE;
  g_array_remove_index (w->blocks, i - 1);
  return TRUE;
}

PpDType
pp_cuda_weights_lookup (const PpCudaWeights * w, gconstpointer p)
{
  const guint i = upper_bound (w, (guintptr) p);
  const Block *b;

  if (i == 0)
    return PP_DTYPE_F32;
  b = &g_array_index (w->blocks, Block, i - 1);
  return (guintptr) p < b->end ? b->dtype : PP_DTYPE_F32;
}

guint
pp_cuda_weights_count (const PpCudaWeights * w)
{
  return w->blocks->len;
}
