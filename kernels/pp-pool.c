/* ppdiffuse — activation pools (pp-backend.h): the device memory a model's
 * activations are cut from, reused across forwards, shapes and batch
 * sizes.
 *
 * A pool takes segments from its backend and cuts each request from them:
 * the smallest free block the request fits (best fit), split where enough
 * is left over to serve another; a released block joins its free
 * neighbours again.  So the blocks a large forward (the widest batch, the
 * largest frame) released serve the forwards after it, of any size, and a
 * pool holds about what one forward had in use at once.  (A pool keeping
 * buffers by their exact size holds a set for every size any forward
 * asked for: for a worker's stream batch of up to 8 SD-Turbo latents,
 * 2.9 GiB where its widest pass had 0.43 GiB in use; docs/perf.md.)
 *
 * A segment goes back to the backend only with its pool.  A CUDA graph
 * captured from a forward holds the addresses of that forward's
 * activations and writes them at every launch, long after the forward
 * released them; so what the graph uses must stay device memory of this
 * pool, and be in use by no one else while it runs.  The second holds
 * because a model runs its forwards one at a time, each acquiring and
 * releasing its activations within itself, and what a model keeps across
 * forwards (the UNet's cross-attention K/V cache) is built before a graph
 * is captured and dropped only where the model's graphs are dropped too
 * (pp_model_graphs_reset).
 *
 * Built with AddressSanitizer, on the backends whose device memory is the
 * host's (cpu, cpu-strict), a free block and the bytes past each request
 * are poisoned: a kernel that reads past its activation, or an activation
 * read after its release, is reported as it was when every activation
 * was an allocation of its own, and more (a released one was never
 * caught before). */
#include "pp-backend.h"
#include "pp-backend-impl.h"

#include <string.h>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define POOL_ASAN 1
#else
#define POOL_ASAN 0
#define ASAN_POISON_MEMORY_REGION(addr, size) ((void) (addr), (void) (size))
#define ASAN_UNPOISON_MEMORY_REGION(addr, size) ((void) (addr), (void) (size))
#endif

/* Blocks start and end on this (a backend buffer's alignment,
 * pp_backend_alloc: a CUDA allocation's, which the vectorised kernels and
 * the libraries' fastest paths expect). */
#define POOL_ALIGN 256
/* Segments are whole multiples of this, so that a request's segment has
 * room for smaller ones after it; those for requests under a grain, of
 * the small one (a small model's, a deep level's, a time embedding's
 * pool asks no more of the device than it uses). */
#define POOL_SEGMENT_GRAIN ((gsize) 2 << 20)
#define POOL_SMALL_GRAIN ((gsize) 64 << 10)

typedef struct _Block Block;

/* A stretch of a segment, free or in use; its neighbours in address
 * order within the segment. */
struct _Block
{
  guint8 *mem;
  gsize size;
  Block *prev, *next;
  gboolean free;
};

/* A segment: its bytes, and its first block, which starts it and which
 * no join frees (it has no block before it). */
typedef struct
{
  gsize size;
  Block *first;
} Segment;

struct _PpPool
{
  PpBackend *be;
  PpDType act_dtype;
  gboolean poison;              /* ASan: the backend's memory is the host's */
  GMutex lock;
  /* Arrays kept sorted, which once grown allocate nothing (a warm
   * forward allocates no heap memory): */
  GPtrArray *free_blocks;       /* Block, by size then address: best fit */
  GPtrArray *used;              /* Block, by address */
  Block *spare;                 /* Blocks not in a segment, for reuse (by
                                 * next): see stock */
  guint n_blocks;               /* Blocks allocated */
  guint used_peak;              /* the most blocks in use at once */
  guint free_room;              /* free_blocks' room (see stock) */
  GArray *segments;             /* Segment */
  gsize bytes;                  /* the segments' */
  gsize in_use, in_use_peak;    /* the blocks' in use */
};

/* The first index of @blocks (sorted by size, then address) whose block
 * is @size bytes or more and, of that size, at @mem or after. */
static guint
free_index (GPtrArray * blocks, gsize size, const guint8 * mem)
{
  guint lo = 0, hi = blocks->len;

  while (lo < hi) {
    const guint mid = lo + (hi - lo) / 2;
    const Block *b = g_ptr_array_index (blocks, mid);

    if (b->size < size || (b->size == size && b->mem < mem))
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

static void
free_insert (PpPool * pool, Block * b)
{
  g_ptr_array_insert (pool->free_blocks, (gint) free_index (pool->free_blocks,
          b->size, b->mem), b);
}

static void
free_remove (PpPool * pool, Block * b)
{
  const guint i = free_index (pool->free_blocks, b->size, b->mem);

  g_assert (i < pool->free_blocks->len
      && g_ptr_array_index (pool->free_blocks, i) == b);
  g_ptr_array_remove_index (pool->free_blocks, i);
}

/* The index of @used (sorted by address) of the first block at @mem or
 * after. */
static guint
used_index (GPtrArray * used, const guint8 * mem)
{
  guint lo = 0, hi = used->len;

  while (lo < hi) {
    const guint mid = lo + (hi - lo) / 2;

    if (((const Block *) g_ptr_array_index (used, mid))->mem < mem)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

static Block *
block_new (PpPool * pool)
{
  Block *b = pool->spare;

  if (b == NULL) {
    pool->n_blocks++;
    return g_new0 (Block, 1);
  }
  pool->spare = b->next;
  memset (b, 0, sizeof *b);
  return b;
}

/* Keeps as many Blocks as the segments can ever be cut into with no more
 * blocks in use than there have been: two free blocks are never
 * neighbours, so a segment has at most one free block more than it has
 * in use, and all of them at most 2 × (in use) + (segments); of them
 * free, at most (in use) + (segments), the room free_blocks keeps.  So a
 * forward that asks for no more blocks at once than one before it
 * allocates no heap memory, however its blocks are cut. */
static void
stock (PpPool * pool)
{
  guint free_most;

  pool->used_peak = MAX (pool->used_peak, pool->used->len);
  free_most = pool->used_peak + pool->segments->len + 1;
  while (pool->n_blocks < 2 * pool->used_peak + pool->segments->len) {
    Block *b = g_new0 (Block, 1);

    b->next = pool->spare;
    pool->spare = b;
    pool->n_blocks++;
  }
  if (free_most > pool->free_room) {
    const guint len = pool->free_blocks->len;

    /* Grown and cut back: an array keeps what it has grown to. */
    g_ptr_array_set_size (pool->free_blocks, free_most);
    g_ptr_array_set_size (pool->free_blocks, len);
    pool->free_room = free_most;
  }
}

static gsize
round_up (gsize bytes, gsize to)
{
  return (bytes + to - 1) / to * to;
}

PpPool *
pp_pool_new (PpBackend * be, PpDType act_dtype)
{
  PpPool *pool = g_new0 (PpPool, 1);

  g_return_val_if_fail (be->act_dtypes & PP_DTYPE_BIT (act_dtype), NULL);
  pool->be = be;
  pool->act_dtype = act_dtype;
  pool->poison = POOL_ASAN && (g_str_equal (be->name, PP_BACKEND_CPU)
      || g_str_equal (be->name, PP_BACKEND_CPU_STRICT));
  g_mutex_init (&pool->lock);
  pool->free_blocks = g_ptr_array_new ();
  pool->used = g_ptr_array_new ();
  pool->segments = g_array_new (FALSE, FALSE, sizeof (Segment));
  return pool;
}

void
pp_pool_free (PpPool * pool)
{
  if (pool == NULL)
    return;
  if (pool->used->len != 0)
    g_critical ("a device buffer pool is freed with %u buffers in use",
        pool->used->len);
  g_debug ("activation pool on %s: %" G_GSIZE_FORMAT " bytes in %u "
      "segments, at most %" G_GSIZE_FORMAT " in use at once", pool->be->name,
      pool->bytes, pool->segments->len, pool->in_use_peak);
  for (guint i = 0; i < pool->segments->len; i++) {
    const Segment *seg = &g_array_index (pool->segments, Segment, i);
    guint8 *mem = seg->first->mem;

    for (Block * b = seg->first, *next; b != NULL; b = next) {
      next = b->next;
      g_free (b);
    }
    if (pool->poison)
      ASAN_UNPOISON_MEMORY_REGION (mem, seg->size);
    pp_backend_free (pool->be, mem);
  }
  while (pool->spare != NULL) {
    Block *next = pool->spare->next;

    g_free (pool->spare);
    pool->spare = next;
  }
  g_array_unref (pool->segments);
  g_ptr_array_unref (pool->used);
  g_ptr_array_unref (pool->free_blocks);
  g_mutex_clear (&pool->lock);
  g_free (pool);
}

PpBackend *
pp_pool_backend (PpPool * pool)
{
  return pool->be;
}

PpDType
pp_pool_act_dtype (PpPool * pool)
{
  return pool->act_dtype;
}

/* What pp_pool_acquire hands out when the device is full and the
 * backend halted: an address, aligned as a device buffer, that no work
 * reads or writes. */
static const guint8 pool_stand_in[256] __attribute__((aligned (256)));

/* The bytes a request of @bytes takes of a segment: whole alignments, and
 * under AddressSanitizer one more past them, poisoned (a read just past an
 * activation ends in none of its neighbours).  A request past any device
 * (half the address space) as that much, which no backend gives. */
static gsize
block_bytes (const PpPool * pool, gsize bytes)
{
  return round_up (CLAMP (bytes, 1, G_MAXSIZE / 2), POOL_ALIGN)
      + (pool->poison ? POOL_ALIGN : 0);
}

/* @b, free and out of the free blocks, in use for a request of @bytes:
 * cut to its size where the rest can serve another request. */
static gpointer
block_take (PpPool * pool, Block * b, gsize bytes)
{
  const gsize size = block_bytes (pool, bytes);

  if (b->size - size >= POOL_ALIGN) {
    Block *rest = block_new (pool);

    rest->mem = b->mem + size;
    rest->size = b->size - size;
    rest->prev = b;
    rest->next = b->next;
    rest->free = TRUE;
    if (b->next != NULL)
      b->next->prev = rest;
    b->next = rest;
    b->size = size;
    free_insert (pool, rest);
  }
  b->free = FALSE;
  g_ptr_array_insert (pool->used, (gint) used_index (pool->used, b->mem), b);
  pool->in_use += b->size;
  pool->in_use_peak = MAX (pool->in_use_peak, pool->in_use);
  stock (pool);
  if (pool->poison)
    ASAN_UNPOISON_MEMORY_REGION (b->mem, bytes);
  return b->mem;
}

/* The smallest free block of @size bytes or more (of those, the lowest),
 * out of the free blocks; NULL when none is that large. */
static Block *
best_fit (PpPool * pool, gsize size)
{
  const guint i = free_index (pool->free_blocks, size, NULL);

  if (i == pool->free_blocks->len)
    return NULL;
  return g_ptr_array_steal_index (pool->free_blocks, i);
}

gpointer
pp_pool_acquire (PpPool * pool, gsize bytes)
{
  const gsize size = block_bytes (pool, bytes);
  GError *error = NULL;
  Segment seg;
  gpointer mem;
  Block *b;

  g_mutex_lock (&pool->lock);
  b = best_fit (pool, size);
  if (b != NULL) {
    mem = block_take (pool, b, bytes);
    g_mutex_unlock (&pool->lock);
    return mem;
  }
  g_mutex_unlock (&pool->lock);
  /* No new segment while halted: the work that would use it is skipped. */
  if (pp_backend_is_halted (pool->be))
    return (gpointer) pool_stand_in;

  seg.size = round_up (size, size < POOL_SEGMENT_GRAIN ? POOL_SMALL_GRAIN
      : POOL_SEGMENT_GRAIN);
  mem = pp_backend_alloc (pool->be, seg.size, &error);
  if (mem == NULL) {
    g_prefix_error (&error, "an activation: ");
    /* Where failures are kept, the backend halts, and the caller gets a
     * stand-in no work will touch (the work is skipped while the backend
     * is halted; the caller's check reports it): a NULL would steer the
     * models' host code, which reads an absent buffer as an unused one. */
    if (!pp_backend_halt (pool->be, error))
      g_error ("%s", error->message);
    return (gpointer) pool_stand_in;
  }
  /* Every backend aligns its buffers so (pp_backend_alloc). */
  g_assert ((guintptr) mem % POOL_ALIGN == 0);
  if (pool->poison)
    ASAN_POISON_MEMORY_REGION (mem, seg.size);
  g_mutex_lock (&pool->lock);
  b = seg.first = block_new (pool);
  b->mem = mem;
  b->size = seg.size;
  g_array_append_val (pool->segments, seg);
  pool->bytes += seg.size;
  mem = block_take (pool, b, bytes);
  g_mutex_unlock (&pool->lock);
  return mem;
}

/* @b's free neighbour @n (out of the free blocks) joined to it. */
static void
block_join_next (PpPool * pool, Block * b, Block * n)
{
  b->size += n->size;
  b->next = n->next;
  if (n->next != NULL)
    n->next->prev = b;
  n->next = pool->spare;
  pool->spare = n;
}

void
pp_pool_release (PpPool * pool, gpointer mem, gsize bytes)
{
  Block *b = NULL;
  guint i;

  if (mem == NULL || mem == pool_stand_in)
    return;
  g_mutex_lock (&pool->lock);
  i = used_index (pool->used, mem);
  if (i < pool->used->len)
    b = g_ptr_array_index (pool->used, i);
  if (b == NULL || b->mem != mem)
    g_error ("%p released to a pool of device buffers that did not hand "
        "it out", mem);
  g_assert (block_bytes (pool, bytes) <= b->size);
  g_ptr_array_remove_index (pool->used, i);
  pool->in_use -= b->size;
  b->free = TRUE;
  if (pool->poison)
    ASAN_POISON_MEMORY_REGION (b->mem, b->size);
  if (b->next != NULL && b->next->free) {
    free_remove (pool, b->next);
    block_join_next (pool, b, b->next);
  }
  if (b->prev != NULL && b->prev->free) {
    Block *p = b->prev;

    free_remove (pool, p);
    block_join_next (pool, p, b);
    b = p;
  }
  free_insert (pool, b);
  g_mutex_unlock (&pool->lock);
}

void
pp_pool_count (PpPool * pool, PpPoolBytes * sum)
{
  g_mutex_lock (&pool->lock);
  sum->held += pool->bytes;
  sum->peak += pool->in_use_peak;
  g_mutex_unlock (&pool->lock);
}
