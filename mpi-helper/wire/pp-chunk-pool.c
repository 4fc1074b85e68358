/* ppdiffuse — a pool of chunks. */
#include "pp-chunk-pool.h"

#include <string.h>

struct _PpChunkPool
{
  GMutex lock;
  /* Given back, linked by next_free: lent from the head, returned to the
   * tail, so that every chunk takes its turn. */
  PpChunk *head;
  PpChunk *tail;
  guint size;                   /* chunks made */
  guint refs;                   /* the owner's and one per chunk lent */
  gboolean closed;              /* the owner let go */
  struct _PpBackend *backend;   /* where tensors live; NULL: the host */
};

/* Called with the lock held. */
static void
push_free (PpChunkPool * pool, PpChunk * chunk)
{
  chunk->next_free = NULL;
  if (pool->tail != NULL)
    pool->tail->next_free = chunk;
  else
    pool->head = chunk;
  pool->tail = chunk;
}

/* Called with the lock held. */
static PpChunk *
pop_free (PpChunkPool * pool)
{
  PpChunk *chunk = pool->head;

  if (chunk != NULL) {
    pool->head = chunk->next_free;
    if (pool->head == NULL)
      pool->tail = NULL;
    chunk->next_free = NULL;
  }
  return chunk;
}

PpChunkPool *
pp_chunk_pool_new (guint reserve)
{
  return pp_chunk_pool_new_on (reserve, NULL);
}

struct _PpBackend *
pp_chunk_pool_backend (PpChunkPool * pool)
{
  return pool->backend;
}

PpChunkPool *
pp_chunk_pool_new_on (guint reserve, struct _PpBackend * backend)
{
  PpChunkPool *pool = g_new0 (PpChunkPool, 1);

  pool->backend = backend;
  g_mutex_init (&pool->lock);
  pool->refs = 1;
  for (; pool->size < reserve; pool->size++)
    push_free (pool, pp_chunk_new ());
  return pool;
}

/* Frees a chunk the pool no longer keeps. */
static void
chunk_destroy (PpChunk * chunk)
{
  chunk->owner = NULL;
  pp_chunk_free (chunk);
}

static void chunk_release (PpChunk * chunk);

/* What pp_chunk_free calls for a chunk the pool lent. */
static const PpChunkOwner pool_owner = { chunk_release };

/* Called with the lock held, which it releases; frees the pool after the
 * last reference. */
static void
unref_unlock (PpChunkPool * pool)
{
  const gboolean last = --pool->refs == 0;

  g_mutex_unlock (&pool->lock);
  if (!last)
    return;
  g_mutex_clear (&pool->lock);
  g_free (pool);
}

void
pp_chunk_pool_unref (PpChunkPool * pool)
{
  PpChunk *free_list;

  if (pool == NULL)
    return;
  g_mutex_lock (&pool->lock);
  pool->closed = TRUE;
  free_list = pool->head;
  pool->head = pool->tail = NULL;
  unref_unlock (pool);
  while (free_list != NULL) {
    PpChunk *next = free_list->next_free;

    chunk_destroy (free_list);
    free_list = next;
  }
}

PpChunk *
pp_chunk_pool_acquire (PpChunkPool * pool)
{
  PpChunk *chunk;

  g_mutex_lock (&pool->lock);
  g_assert (!pool->closed);     /* not after pp_chunk_pool_unref */
  pool->refs++;
  chunk = pop_free (pool);
  if (chunk == NULL)
    pool->size++;
  g_mutex_unlock (&pool->lock);
  if (chunk == NULL) {
    chunk = pp_chunk_new ();
  } else {
    GPtrArray *tensors = chunk->tensors;

    memset (chunk, 0, sizeof *chunk);
    chunk->tensors = tensors;
  }
  chunk->backend = pool->backend;
  chunk->owner = &pool_owner;
  chunk->owner_data = pool;
  return chunk;
}

/* Called by pp_chunk_free for a chunk of a pool. */
static void
chunk_release (PpChunk * chunk)
{
  PpChunkPool *pool = chunk->owner_data;

  g_mutex_lock (&pool->lock);
  if (pool->closed)
    chunk_destroy (chunk);
  else
    push_free (pool, chunk);
  unref_unlock (pool);
}

guint
pp_chunk_pool_size (PpChunkPool * pool)
{
  guint size;

  g_mutex_lock (&pool->lock);
  size = pool->size;
  g_mutex_unlock (&pool->lock);
  return size;
}
