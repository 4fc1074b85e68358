/* ppdiffuse — device memory blocks kept for reuse (pp-cuda-blocks.h): a
 * set ordered by size, then address, so that a take is a binary search
 * for the smallest block that fits. */
#include "pp-cuda-blocks.h"

typedef struct
{
  gsize bytes;
  gpointer mem;
} Block;

struct _PpCudaBlocks
{
  GArray *kept;                 /* of Block, ascending (bytes, mem) */
  gsize bytes;                  /* their sum */
};

PpCudaBlocks *
pp_cuda_blocks_new (void)
{
  PpCudaBlocks *blocks = g_new0 (PpCudaBlocks, 1);

  blocks->kept = g_array_new (FALSE, FALSE, sizeof (Block));
  return blocks;
}

gsize
pp_cuda_blocks_round (gsize bytes)
{
  gsize units = bytes / PP_CUDA_BLOCK_ALIGN
      + (bytes % PP_CUDA_BLOCK_ALIGN != 0);

  /* A size no device holds stays as it is (its allocation fails). */
  if (units > G_MAXSIZE / PP_CUDA_BLOCK_ALIGN)
    return bytes;
  return MAX (units, 1) * PP_CUDA_BLOCK_ALIGN;
}

static gboolean
before (const Block * a, gsize bytes, gconstpointer mem)
{
  return a->bytes < bytes || (a->bytes == bytes
      && (guintptr) a->mem < (guintptr) mem);
}

/* The index of the first kept block not before (@bytes, @mem). */
static guint
lower_bound (const PpCudaBlocks * blocks, gsize bytes, gconstpointer mem)
{
  guint lo = 0, hi = blocks->kept->len;

  while (lo < hi) {
    guint mid = lo + (hi - lo) / 2;

    if (before (&g_array_index (blocks->kept, Block, mid), bytes, mem))
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

gpointer
pp_cuda_blocks_take (PpCudaBlocks * blocks, gsize bytes, gsize * block_bytes)
{
  const gsize want = pp_cuda_blocks_round (bytes);
  guint i = lower_bound (blocks, want, NULL);
  Block b;

  if (i == blocks->kept->len)
    return NULL;
  b = g_array_index (blocks->kept, Block, i);
  if (b.bytes - want > want)
    return NULL;
  g_array_remove_index (blocks->kept, i);
  blocks->bytes -= b.bytes;
  *block_bytes = b.bytes;
  return b.mem;
}

void
pp_cuda_blocks_keep (PpCudaBlocks * blocks, gpointer mem, gsize block_bytes)
{
  Block b = { block_bytes, mem };
  guint i = lower_bound (blocks, block_bytes, mem);

  g_return_if_fail (mem != NULL);
  /* A block kept twice would be handed out twice. */
  g_return_if_fail (i == blocks->kept->len
      || g_array_index (blocks->kept, Block, i).mem != mem);
  g_array_insert_val (blocks->kept, i, b);
  blocks->bytes += block_bytes;
}

gsize
pp_cuda_blocks_drain (PpCudaBlocks * blocks,
    void (*release) (gpointer mem, gpointer data), gpointer data)
{
  const gsize bytes = blocks->bytes;

  for (guint i = 0; i < blocks->kept->len; i++)
    release (g_array_index (blocks->kept, Block, i).mem, data);
  g_array_set_size (blocks->kept, 0);
  blocks->bytes = 0;
  return bytes;
}

guint
pp_cuda_blocks_count (const PpCudaBlocks * blocks)
{
  return blocks->kept->len;
}

gsize
pp_cuda_blocks_bytes (const PpCudaBlocks * blocks)
{
  return blocks->bytes;
}

void
pp_cuda_blocks_free (PpCudaBlocks * blocks)
{
  if (blocks == NULL)
    return;
  g_warn_if_fail (blocks->kept->len == 0);
  g_array_free (blocks->kept, TRUE);
  g_free (blocks);
}
