/* Unit tests for the chunk pool: chunks made up front are lent in turn,
 * the pool grows only past them, keeps what it grew, and goes once its
 * owner and every chunk it lent have let go. */
#include "pp-chunk-pool.h"

static PpTensor *
sample (void)
{
  static const gint64 shape[4] = { 1, 4, 8, 8 };

  return pp_tensor_new ("sample", PP_DTYPE_F32, 4, shape, NULL);
}

/* However acquisitions and returns interleave, the first @reserve
 * acquisitions take @reserve different chunks. */
static void
test_turns (void)
{
  PpChunkPool *pool = pp_chunk_pool_new (3);
  PpChunk *seen[3];

  for (guint i = 0; i < 3; i++) {
    PpChunk *c = pp_chunk_pool_acquire (pool);

    for (guint j = 0; j < i; j++)
      g_assert_true (c != seen[j]);
    seen[i] = c;
    g_assert_cmpuint (c->tensors->len, ==, 0);
    pp_chunk_add_tensor (c, sample ());
    /* Given back at once: the next acquisition takes another. */
    pp_chunk_free (c);
  }
  g_assert_cmpuint (pp_chunk_pool_size (pool), ==, 3);
  /* Every chunk now comes with its tensor, header fields cleared. */
  for (guint i = 0; i < 6; i++) {
    PpChunk *c = pp_chunk_pool_acquire (pool);

    g_assert_true (c == seen[i % 3]);
    g_assert_cmpuint (c->tensors->len, ==, 1);
    g_assert_cmpuint (c->chunk_id, ==, 0);
    c->chunk_id = 7;
    c->flags = PP_CHUNK_FLAG_DATA;
    pp_chunk_free (c);
  }
  g_assert_cmpuint (pp_chunk_pool_size (pool), ==, 3);
  pp_chunk_pool_unref (pool);
}

static void
test_grows_past_reserve (void)
{
  PpChunkPool *pool = pp_chunk_pool_new (1);
  PpChunk *a = pp_chunk_pool_acquire (pool);
  PpChunk *b = pp_chunk_pool_acquire (pool);

  g_assert_true (a != b);
  g_assert_cmpuint (pp_chunk_pool_size (pool), ==, 2);
  pp_chunk_free (a);
  pp_chunk_free (b);
  a = pp_chunk_pool_acquire (pool);
  b = pp_chunk_pool_acquire (pool);
  g_assert_cmpuint (pp_chunk_pool_size (pool), ==, 2);
  pp_chunk_free (b);
  pp_chunk_free (a);
  pp_chunk_pool_unref (pool);
}

/* Chunks given back after the owner let go are freed, the pool with the
 * last of them (the leak check of the sanitizer runs holds it to that). */
static void
test_outlives_owner (void)
{
  PpChunkPool *pool = pp_chunk_pool_new (2);
  PpChunk *a = pp_chunk_pool_acquire (pool);
  PpChunk *b = pp_chunk_pool_acquire (pool);

  pp_chunk_add_tensor (a, sample ());
  pp_chunk_pool_unref (pool);
  pp_chunk_free (a);
  pp_chunk_free (b);
}

typedef struct
{
  PpChunkPool *pool;
  guint rounds;
} Churn;

static gpointer
churn (gpointer data)
{
  Churn *c = data;

  for (guint i = 0; i < c->rounds; i++) {
    PpChunk *chunk = pp_chunk_pool_acquire (c->pool);

    if (chunk->tensors->len == 0)
      pp_chunk_add_tensor (chunk, sample ());
    pp_chunk_free (chunk);
  }
  return NULL;
}

/* Threads that each hold one chunk at a time never need more chunks than
 * there are threads. */
static void
test_threads (void)
{
  enum { THREADS = 4, ROUNDS = 2000 };
  Churn c = { pp_chunk_pool_new (THREADS), ROUNDS };
  GThread *threads[THREADS];

  for (guint i = 0; i < THREADS; i++)
    threads[i] = g_thread_new ("churn", churn, &c);
  for (guint i = 0; i < THREADS; i++)
    g_thread_join (threads[i]);
  g_assert_cmpuint (pp_chunk_pool_size (c.pool), ==, THREADS);
  pp_chunk_pool_unref (c.pool);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/chunk-pool/turns", test_turns);
  g_test_add_func ("/chunk-pool/grows-past-reserve", test_grows_past_reserve);
  g_test_add_func ("/chunk-pool/outlives-owner", test_outlives_owner);
  g_test_add_func ("/chunk-pool/threads", test_threads);
  return g_test_run ();
}
