/* Unit tests for the chunk pool: chunks made up front are lent in turn,
 * the pool grows only past them, keeps what it grew, and goes once its
 * owner and every chunk it lent have let go.  A chunk on a device keeps
 * the fence behind its payloads' work, for its send to wait on, until it
 * is marked again or given back; payload tensors fitted anew get one
 * behind their memory's earlier users, for a receive to wait on. */
#include "pp-chunk-pool.h"
#include "pp-backend-impl.h"

#include <string.h>

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

/* A device backend as far as fences go: what it was asked to do. */
typedef struct
{
  guint made, freed, waits;
  gpointer last, waited, waited_stream;
} Fences;

static Fences fences;

static gpointer
fake_fence (PpBackend * be)
{
  fences.made++;
  fences.last = GUINT_TO_POINTER (0x1000 + fences.made);
  return fences.last;
}

static void
fake_fence_free (PpBackend * be, gpointer fence)
{
  g_assert_nonnull (fence);
  fences.freed++;
}

static void
fake_fence_wait (PpBackend * be, gpointer fence, gpointer stream)
{
  fences.waits++;
  fences.waited = fence;
  fences.waited_stream = stream;
}

static void
test_ready_fences (void)
{
  static const PpBackendMemory with_fences = {
    .fence = fake_fence,
    .fence_wait = fake_fence_wait,
    .fence_free = fake_fence_free,
  };
  static const PpBackendMemory without = { 0 };
  PpBackend device = { .name = "fake-device", .memory = &with_fences };
  PpBackend plain = { .name = "fake-plain", .memory = &without };
  gpointer stream = GUINT_TO_POINTER (0x5000);
  PpChunkPool *pool = pp_chunk_pool_new_on (1, &device);
  PpChunkPool *host = pp_chunk_pool_new (1);
  PpChunkPool *unfenced = pp_chunk_pool_new_on (1, &plain);
  PpChunk *c = pp_chunk_pool_acquire (pool);
  gpointer first;

  memset (&fences, 0, sizeof fences);
  /* Nothing to wait on before the payloads are marked. */
  g_assert_false (pp_chunk_wait_ready (c, stream));
  pp_chunk_mark_ready (c);
  first = fences.last;
  g_assert_true (c->ready == first);
  /* Marked again (another pass over it): the newer fence replaces it. */
  pp_chunk_mark_ready (c);
  g_assert_cmpuint (fences.made, ==, 2);
  g_assert_cmpuint (fences.freed, ==, 1);
  g_assert_true (c->ready == fences.last && c->ready != first);
  /* The send's stream waits on the device for that fence alone. */
  g_assert_true (pp_chunk_wait_ready (c, stream));
  g_assert_cmpuint (fences.waits, ==, 1);
  g_assert_true (fences.waited == fences.last);
  g_assert_true (fences.waited_stream == stream);
  /* Given back, the chunk lets its fence go; lent again, it has none. */
  pp_chunk_free (c);
  g_assert_cmpuint (fences.freed, ==, 2);
  c = pp_chunk_pool_acquire (pool);
  g_assert_null (c->ready);
  g_assert_false (pp_chunk_wait_ready (c, stream));
  pp_chunk_free (c);
  g_assert_cmpuint (fences.freed, ==, 2);
  /* A copy has no fence of its own: its send waits for the stream. */
  c = pp_chunk_pool_acquire (pool);
  pp_chunk_mark_ready (c);
  {
    PpChunk *copy = pp_chunk_copy (c, NULL);

    g_assert_null (copy->ready);
    pp_chunk_free (copy);
  }
  pp_chunk_free (c);
  g_assert_cmpuint (fences.made, ==, fences.freed);
  /* On the host, or on a backend without fences, none is made. */
  memset (&fences, 0, sizeof fences);
  c = pp_chunk_pool_acquire (host);
  pp_chunk_mark_ready (c);
  g_assert_null (c->ready);
  pp_chunk_free (c);
  c = pp_chunk_pool_acquire (unfenced);
  pp_chunk_mark_ready (c);
  g_assert_null (c->ready);
  g_assert_false (pp_chunk_wait_ready (c, stream));
  pp_chunk_free (c);
  g_assert_cmpuint (fences.made, ==, 0);
  g_assert_cmpuint (fences.waits, ==, 0);
  pp_chunk_pool_unref (unfenced);
  pp_chunk_pool_unref (host);
  pp_chunk_pool_unref (pool);
}

static guint fake_allocs, fake_frees;

static gpointer
fake_alloc (PpBackend * be, gsize bytes, GError ** error)
{
  fake_allocs++;
  return g_malloc0 (bytes);
}

static void
fake_free (PpBackend * be, gpointer mem)
{
  fake_frees++;
  g_free (mem);
}

/* A payload tensor fitted anew may be memory the backend's stream still
 * uses (freed memory is handed out again without a synchronize): the
 * chunk gets a fence behind that work, which a receive on another stream
 * waits for.  A tensor that already fits makes none. */
static void
test_fresh_payloads_fenced (void)
{
  static const PpBackendMemory memory = {
    .alloc = fake_alloc,
    .free = fake_free,
    .fence = fake_fence,
    .fence_wait = fake_fence_wait,
    .fence_free = fake_fence_free,
  };
  PpBackend device = { .name = "fake-device", .memory = &memory };
  PpTensorSpec spec = { "latents", PP_DTYPE_F32, 4, {1, 4, 8, 8}, 1024 };
  PpChunkPool *pool = pp_chunk_pool_new_on (1, &device);
  gpointer stream = GUINT_TO_POINTER (0x5000);
  PpChunk *c = pp_chunk_pool_acquire (pool);

  memset (&fences, 0, sizeof fences);
  fake_allocs = fake_frees = 0;
  g_assert_nonnull (pp_chunk_fit_tensor (c, 0, &spec, NULL));
  g_assert_cmpuint (fake_allocs, ==, 1);
  g_assert_cmpuint (fences.made, ==, 1);
  g_assert_true (c->ready == fences.last);
  g_assert_true (pp_chunk_wait_ready (c, stream));
  g_assert_true (fences.waited_stream == stream);
  /* The receive has written the payloads: the fence goes. */
  pp_chunk_clear_ready (c);
  g_assert_null (c->ready);
  g_assert_cmpuint (fences.freed, ==, 1);
  pp_chunk_free (c);
  /* Lent again with its tensor, which fits: nothing new, no fence. */
  c = pp_chunk_pool_acquire (pool);
  g_assert_nonnull (pp_chunk_fit_tensor (c, 0, &spec, NULL));
  g_assert_cmpuint (fake_allocs, ==, 1);
  g_assert_cmpuint (fences.made, ==, 1);
  g_assert_false (pp_chunk_wait_ready (c, stream));
  /* Another size: a new tensor, and a fence behind the old one's users. */
  spec.shape[2] = spec.shape[3] = 16;
  spec.nbytes = 4096;
  g_assert_nonnull (pp_chunk_fit_tensor (c, 0, &spec, NULL));
  g_assert_cmpuint (fake_allocs, ==, 2);
  g_assert_cmpuint (fake_frees, ==, 1);
  g_assert_cmpuint (fences.made, ==, 2);
  g_assert_true (pp_chunk_wait_ready (c, stream));
  pp_chunk_free (c);
  pp_chunk_pool_unref (pool);
  g_assert_cmpuint (fences.made, ==, fences.freed);
  g_assert_cmpuint (fake_allocs, ==, fake_frees);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/chunk-pool/turns", test_turns);
  g_test_add_func ("/chunk-pool/grows-past-reserve", test_grows_past_reserve);
  g_test_add_func ("/chunk-pool/outlives-owner", test_outlives_owner);
  g_test_add_func ("/chunk-pool/threads", test_threads);
  g_test_add_func ("/chunk-pool/ready-fences", test_ready_fences);
  g_test_add_func ("/chunk-pool/fresh-payloads-fenced",
      test_fresh_payloads_fenced);
  return g_test_run ();
}
