/* Unit tests for the chunk pool: chunks made up front are lent in turn,
 * the pool grows only past them, keeps what it grew, and goes once its
 * owner and every chunk it lent have let go.  A chunk on a device keeps
 * the mark behind its payloads' work, for its send to wait on, until it is
 * marked again or given back. */
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

/* A device backend as far as marks go: what it was asked to do. */
typedef struct
{
  guint marks_made, marks_freed, waits, synchronizes;
  gpointer last_mark, waited_mark, waited_stream;
} Marks;

static Marks marks;

static gpointer
fake_mark (PpBackend * be)
{
  marks.marks_made++;
  marks.last_mark = GUINT_TO_POINTER (0x1000 + marks.marks_made);
  return marks.last_mark;
}

static void
fake_mark_free (PpBackend * be, gpointer mark)
{
  g_assert_nonnull (mark);
  marks.marks_freed++;
}

static void
fake_mark_wait (PpBackend * be, gpointer mark, gpointer stream)
{
  marks.waits++;
  marks.waited_mark = mark;
  marks.waited_stream = stream;
}

static void
fake_synchronize (PpBackend * be)
{
  marks.synchronizes++;
}

static void
test_ready_marks (void)
{
  static const PpBackendMemory with_marks = {
    .synchronize = fake_synchronize,
    .mark = fake_mark,
    .mark_free = fake_mark_free,
    .mark_wait = fake_mark_wait,
  };
  /* Marks for profiles only: nothing can wait on them. */
  static const PpBackendMemory timing_only = {
    .synchronize = fake_synchronize,
    .mark = fake_mark,
    .mark_free = fake_mark_free,
  };
  PpBackend device = { .name = "fake-device", .memory = &with_marks };
  PpBackend timing = { .name = "fake-timing", .memory = &timing_only };
  gpointer stream = GUINT_TO_POINTER (0x5000);
  PpChunkPool *pool = pp_chunk_pool_new_on (1, &device);
  PpChunkPool *host = pp_chunk_pool_new (1);
  PpChunkPool *untimed = pp_chunk_pool_new_on (1, &timing);
  PpChunk *c = pp_chunk_pool_acquire (pool);
  gpointer first;

  memset (&marks, 0, sizeof marks);
  /* Nothing to wait on before the payloads are marked. */
  g_assert_false (pp_chunk_wait_ready (c, stream));
  pp_chunk_mark_ready (c);
  first = marks.last_mark;
  g_assert_true (c->ready == first);
  /* Marked again (another pass over it): the newer mark replaces it. */
  pp_chunk_mark_ready (c);
  g_assert_cmpuint (marks.marks_made, ==, 2);
  g_assert_cmpuint (marks.marks_freed, ==, 1);
  g_assert_true (c->ready == marks.last_mark && c->ready != first);
  /* The send's stream waits on the device for that mark alone. */
  g_assert_true (pp_chunk_wait_ready (c, stream));
  g_assert_cmpuint (marks.waits, ==, 1);
  g_assert_true (marks.waited_mark == marks.last_mark);
  g_assert_true (marks.waited_stream == stream);
  g_assert_cmpuint (marks.synchronizes, ==, 0);
  /* Given back, the chunk lets its mark go; lent again, it has none. */
  pp_chunk_free (c);
  g_assert_cmpuint (marks.marks_freed, ==, 2);
  c = pp_chunk_pool_acquire (pool);
  g_assert_null (c->ready);
  g_assert_false (pp_chunk_wait_ready (c, stream));
  pp_chunk_free (c);
  g_assert_cmpuint (marks.marks_freed, ==, 2);
  /* A copy has no mark of its own: its send waits for the stream. */
  c = pp_chunk_pool_acquire (pool);
  pp_chunk_mark_ready (c);
  {
    PpChunk *copy = pp_chunk_copy (c, NULL);

    g_assert_null (copy->ready);
    pp_chunk_free (copy);
  }
  pp_chunk_free (c);
  g_assert_cmpuint (marks.marks_made, ==, marks.marks_freed);
  /* On the host, or on a backend whose marks nothing can wait on, no
   * mark is made. */
  memset (&marks, 0, sizeof marks);
  c = pp_chunk_pool_acquire (host);
  pp_chunk_mark_ready (c);
  g_assert_null (c->ready);
  pp_chunk_free (c);
  c = pp_chunk_pool_acquire (untimed);
  pp_chunk_mark_ready (c);
  g_assert_null (c->ready);
  g_assert_false (pp_chunk_wait_ready (c, stream));
  pp_chunk_free (c);
  g_assert_cmpuint (marks.marks_made, ==, 0);
  g_assert_cmpuint (marks.waits, ==, 0);
  pp_chunk_pool_unref (untimed);
  pp_chunk_pool_unref (host);
  pp_chunk_pool_unref (pool);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/chunk-pool/turns", test_turns);
  g_test_add_func ("/chunk-pool/grows-past-reserve", test_grows_past_reserve);
  g_test_add_func ("/chunk-pool/outlives-owner", test_outlives_owner);
  g_test_add_func ("/chunk-pool/threads", test_threads);
  g_test_add_func ("/chunk-pool/ready-marks", test_ready_marks);
  return g_test_run ();
}
