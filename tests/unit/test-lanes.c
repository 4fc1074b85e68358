/* ppdiffuse — the chunk lanes (mpi-helper/wire/pp-lanes.h) in the bells'
 * shared memory: which links get a lane, two slots a lane, chunks whole
 * from one process to another in order, payloads too large for a slot
 * left to the data plane, and no lanes (only bells) when the host's
 * shared memory has no room for them. */
#include <glib.h>
#include <signal.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "pp-bells.h"
#include "pp-envelope.h"
#include "pp-error.h"
#include "pp-lanes.h"

#define WAIT_US (10 * G_USEC_PER_SEC)
#define CHUNKS 40

static PpBells *
new_bells (guint n_ranks, gboolean lanes, gchar ** name)
{
  g_autoptr (GError) error = NULL;
  PpBells *bells = pp_bells_create (n_ranks,
      lanes ? PP_LANE_SLOT_BYTES_DEFAULT : 0, name, &error);

  g_assert_no_error (error);
  g_assert_nonnull (bells);
  return bells;
}

/* A chunk @id with @n tensors of @bytes each, byte k of tensor t being
 * (id + t + k) % 251. */
static PpChunk *
make_chunk (guint64 id, guint n, gsize bytes)
{
  PpChunk *chunk = pp_chunk_new ();

  chunk->chunk_id = id;
  chunk->flags = PP_CHUNK_FLAG_DATA;
  for (guint t = 0; t < n; t++) {
    const gint64 shape[1] = { (gint64) bytes };
    g_autofree gchar *name = g_strdup_printf ("t%u", t);
    g_autoptr (GError) error = NULL;
    PpTensor *tensor = pp_tensor_new (name, PP_DTYPE_U8, 1, shape, &error);

    g_assert_no_error (error);
    for (gsize k = 0; k < bytes; k++)
      ((guint8 *) tensor->data)[k] = (guint8) ((id + t + k) % 251);
    pp_chunk_add_tensor (chunk, tensor);
  }
  return chunk;
}

/* Fills and publishes a make_chunk (@id, @n, @bytes) on @lane; returns
 * whether its payloads went into the slot. */
static gboolean
put (PpLane * lane, PpEnvelopeCodec * codec, guint64 id, guint n,
    gsize bytes, gboolean short_first)
{
  g_autoptr (PpChunk) chunk = make_chunk (id, n, bytes);
  g_autoptr (GError) error = NULL;
  const guint8 *head;
  gsize head_len;
  gboolean here;

  g_assert_true (pp_envelope_write_head (codec, chunk, &head, &head_len,
          &error));
  g_assert_no_error (error);
  g_assert_true (pp_lane_writable (lane));
  here = pp_lane_fill (lane, head, head_len, chunk, short_first);
  pp_lane_publish (lane);
  return here;
}

/* Reads the chunk waiting on @lane (its head into a new chunk, checked
 * against make_chunk (@id, @n, @bytes)), and releases its slot. */
static void
take (PpLane * lane, PpEnvelopeCodec * codec, guint64 id, guint n,
    gsize bytes, gboolean expect_here)
{
  g_autoptr (GError) error = NULL;
  g_autoptr (PpChunk) chunk = pp_chunk_new ();
  PpLaneSlot slot;

  g_assert_true (pp_lane_readable (lane));
  g_assert_true (pp_lane_peek (lane, &slot, &error));
  g_assert_no_error (error);
  g_assert_true (pp_envelope_read_head (codec, slot.head, slot.head_len,
          chunk, &error));
  g_assert_no_error (error);
  g_assert_cmpuint (chunk->chunk_id, ==, id);
  g_assert_cmpuint (chunk->tensors->len, ==, n);
  g_assert_cmpint (slot.payloads_here, ==, expect_here);
  g_assert_cmpuint (slot.n_payloads, ==, expect_here ? n : 0);
  for (guint t = 0; t < slot.n_payloads; t++) {
    g_assert_cmpuint (slot.payload_len[t], ==, bytes);
    for (gsize k = 0; k < bytes; k++)
      if (slot.payload[t][k] != (guint8) ((id + t + k) % 251))
        g_error ("chunk %" G_GUINT64_FORMAT " tensor %u byte %" G_GSIZE_FORMAT
            ": %u", id, t, k, slot.payload[t][k]);
  }
  pp_lane_release (lane);
}

/* A lane joins consecutive ranks of the ring that both joined, and only
 * once rank 0 opened them. */
static void
test_which_links (void)
{
  g_autofree gchar *name = NULL;
  g_autoptr (GError) error = NULL;
  PpBells *bells = new_bells (4, TRUE, &name);
  PpBells *other = pp_bells_open (name, 4, &error);
  PpLanes *lanes = pp_bells_lanes (bells);

  g_assert_no_error (error);
  g_assert_nonnull (lanes);
  g_assert_nonnull (pp_bells_lanes (other));
  pp_lanes_join (pp_bells_lanes (other), 1);
  pp_lanes_join (pp_bells_lanes (other), 3);
  g_assert_false (pp_lanes_is_open (pp_bells_lanes (other)));
  g_assert_null (pp_lanes_between (lanes, 0, 1));
  pp_lanes_open (lanes);
  g_assert_true (pp_lanes_is_open (pp_bells_lanes (other)));
  /* rank 2 did not join: 0→1 and 3→0 only */
  g_assert_nonnull (pp_lanes_between (lanes, 0, 1));
  g_assert_nonnull (pp_lanes_between (lanes, 3, 0));
  g_assert_null (pp_lanes_between (lanes, 1, 2));
  g_assert_null (pp_lanes_between (lanes, 2, 3));
  /* not consecutive, or backwards */
  g_assert_null (pp_lanes_between (lanes, 0, 3));
  g_assert_null (pp_lanes_between (lanes, 1, 0));
  g_assert_null (pp_lanes_between (lanes, 0, 0));
  g_assert_cmpuint (pp_lanes_count (lanes), ==, 2);
  /* the two mappings are one lane */
  g_assert_true (pp_lanes_between (lanes, 0, 1) != NULL
      && pp_lanes_between (pp_bells_lanes (other), 0, 1) != NULL);
  pp_bells_free (other);
  pp_bells_free (bells);
}

/* Bells made without lanes have none, in any process. */
static void
test_without_lanes (void)
{
  g_autofree gchar *name = NULL;
  g_autoptr (GError) error = NULL;
  PpBells *bells = new_bells (3, FALSE, &name);
  PpBells *other = pp_bells_open (name, 3, &error);

  g_assert_no_error (error);
  g_assert_null (pp_bells_lanes (bells));
  g_assert_null (pp_bells_lanes (other));
  /* nor are they the bells of another number of ranks */
  g_assert_null (pp_bells_open (name, 2, &error));
  g_assert_error (error, PP_ERROR, PP_ERROR_CONFIG);
  pp_bells_free (other);
  pp_bells_free (bells);
}

/* Two slots: a third chunk waits until the first is taken; chunks come out
 * in order, with their bytes; the short first payload is told apart. */
static void
test_two_slots (void)
{
  g_autofree gchar *name = NULL;
  PpBells *bells = new_bells (2, TRUE, &name);
  PpLanes *lanes = pp_bells_lanes (bells);
  PpEnvelopeCodec *tx = pp_envelope_codec_new ();
  PpEnvelopeCodec *rx = pp_envelope_codec_new ();
  g_autoptr (GError) error = NULL;
  PpLane *lane;
  PpLaneSlot slot;

  pp_lanes_join (lanes, 1);
  pp_lanes_open (lanes);
  lane = pp_lanes_between (lanes, 1, 0);
  g_assert_nonnull (lane);
  g_assert_false (pp_lane_readable (lane));
  for (guint64 id = 0; id < 2; id++)
    g_assert_true (put (lane, tx, id, 3, 1000, FALSE));
  g_assert_false (pp_lane_writable (lane));
  take (lane, rx, 0, 3, 1000, TRUE);
  g_assert_true (pp_lane_writable (lane));
  g_assert_true (put (lane, tx, 2, 1, 64, TRUE));
  take (lane, rx, 1, 3, 1000, TRUE);
  /* the fault-injected short payload: half its bytes, said so */
  g_assert_true (pp_lane_peek (lane, &slot, &error));
  g_assert_cmpuint (slot.n_payloads, ==, 1);
  g_assert_cmpuint (slot.payload_len[0], ==, 32);
  pp_lane_release (lane);
  g_assert_false (pp_lane_readable (lane));
  pp_envelope_codec_free (tx);
  pp_envelope_codec_free (rx);
  pp_bells_free (bells);
}

/* Payloads that do not fit a slot with their head stay behind: the head
 * goes alone and says nothing is in the slot. */
static void
test_too_large_for_a_slot (void)
{
  g_autofree gchar *name = NULL;
  PpBells *bells = new_bells (2, TRUE, &name);
  PpLanes *lanes = pp_bells_lanes (bells);
  PpEnvelopeCodec *tx = pp_envelope_codec_new ();
  PpEnvelopeCodec *rx = pp_envelope_codec_new ();
  PpLane *lane;

  pp_lanes_join (lanes, 1);
  pp_lanes_open (lanes);
  lane = pp_lanes_between (lanes, 0, 1);
  g_assert_false (put (lane, tx, 7, 2, PP_LANE_SLOT_BYTES_DEFAULT / 2,
          FALSE));
  take (lane, rx, 7, 2, PP_LANE_SLOT_BYTES_DEFAULT / 2, FALSE);
  /* one that just fits still goes in */
  g_assert_true (put (lane, tx, 8, 1, PP_LANE_SLOT_BYTES_DEFAULT / 2, FALSE));
  take (lane, rx, 8, 1, PP_LANE_SLOT_BYTES_DEFAULT / 2, TRUE);
  pp_envelope_codec_free (tx);
  pp_envelope_codec_free (rx);
  pp_bells_free (bells);
}

/* Waits, on @own's bell, until @ready holds for @lane. */
static void
wait_for (PpBells * bells, guint own, PpLane * lane,
    gboolean (*ready) (PpLane *))
{
  const gint64 t0 = g_get_monotonic_time ();

  for (;;) {
    const guint32 seen = pp_bells_read (bells, own);

    if (ready (lane))
      return;
    if (g_get_monotonic_time () - t0 > WAIT_US)
      g_error ("rank %u: a lane's chunk or slot did not come in %d s", own,
          (gint) (WAIT_US / G_USEC_PER_SEC));
    pp_bells_wait (bells, own, seen, WAIT_US);
  }
}

/* Another process (rank 1) sends CHUNKS chunks of growing sizes to rank 0
 * as the transport does, ringing after each; every one arrives whole and
 * in order, the slots reused over and over. */
static void
test_across_processes (void)
{
  g_autofree gchar *name = NULL;
  PpBells *bells = new_bells (2, TRUE, &name);
  PpEnvelopeCodec *rx = pp_envelope_codec_new ();
  PpLane *lane;
  int status = 0;
  pid_t child;

  child = fork ();
  g_assert_cmpint (child, >=, 0);
  if (child == 0) {
    PpBells *mine = pp_bells_open (name, 2, NULL);
    PpEnvelopeCodec *tx = pp_envelope_codec_new ();
    PpLane *out;

    if (mine == NULL || pp_bells_lanes (mine) == NULL)
      _exit (2);
    pp_lanes_join (pp_bells_lanes (mine), 1);
    pp_bells_ring (mine, 0);
    while (!pp_lanes_is_open (pp_bells_lanes (mine)))
      pp_bells_wait (mine, 1, 0, 1000);
    out = pp_lanes_between (pp_bells_lanes (mine), 1, 0);
    if (out == NULL)
      _exit (3);
    for (guint64 id = 0; id < CHUNKS; id++) {
      wait_for (mine, 1, out, pp_lane_writable);
      put (out, tx, id, 1 + id % 3, 1 + id * 997, FALSE);
      pp_bells_ring (mine, 0);
    }
    pp_envelope_codec_free (tx);
    _exit (0);
  }
  /* the child joins before the lanes open, as a worker before its reply;
   * then the name goes, as rank 0 unlinks it once every reply is in */
  for (gint64 t0 = g_get_monotonic_time (); pp_bells_read (bells, 0) == 0
      && g_get_monotonic_time () - t0 < WAIT_US;)
    pp_bells_wait (bells, 0, 0, WAIT_US);
  g_assert_cmpuint (pp_bells_read (bells, 0), ==, 1);
  pp_bells_unlink (bells);
  pp_lanes_open (pp_bells_lanes (bells));
  pp_bells_ring (bells, 1);
  lane = pp_lanes_between (pp_bells_lanes (bells), 1, 0);
  g_assert_nonnull (lane);
  for (guint64 id = 0; id < CHUNKS; id++) {
    wait_for (bells, 0, lane, pp_lane_readable);
    take (lane, rx, id, 1 + id % 3, 1 + id * 997, TRUE);
    pp_bells_ring (bells, 1);
  }
  g_assert_cmpint (waitpid (child, &status, 0), ==, child);
  g_assert_true (WIFEXITED (status));
  g_assert_cmpint (WEXITSTATUS (status), ==, 0);
  pp_envelope_codec_free (rx);
  pp_bells_free (bells);
}

/* Rank 0's slot size: the default, or the variable's rounded up to a
 * cache line; what is not a size in range is refused, naming it. */
static void
test_slot_size_from_env (void)
{
  const gchar *bad[] = { "1000", "abc", "-5", "65791x", "999999999999" };
  gsize bytes = 0;

  g_unsetenv ("PPDIFFUSE_LANE_SLOT_BYTES");
  g_assert_true (pp_lanes_slot_bytes_from_env (5, &bytes, NULL));
  g_assert_cmpuint (bytes, ==, PP_LANE_SLOT_BYTES_DEFAULT);
  /* many ranks: smaller slots, within the budget (and a counters page and
   * page rounding a lane), not below the minimum */
  g_assert_true (pp_lanes_slot_bytes_from_env (100, &bytes, NULL));
  g_assert_cmpuint (bytes, <, PP_LANE_SLOT_BYTES_DEFAULT);
  g_assert_cmpuint (bytes % 64, ==, 0);
  g_assert_cmpuint (100 * PP_LANE_SLOTS * bytes, <=, PP_LANES_BUDGET_BYTES);
  g_assert_true (pp_lanes_slot_bytes_from_env (257, &bytes, NULL));
  g_assert_cmpuint (bytes, >=, PP_LANE_SLOT_BYTES_MIN);
  g_assert_cmpuint (pp_lanes_bytes (257, bytes), <=,
      PP_LANES_BUDGET_BYTES + 257 * 2 * 4096 + 4096);
  /* the variable is taken as it is, whatever the ranks */
  g_setenv ("PPDIFFUSE_LANE_SLOT_BYTES", "65792", TRUE);
  g_assert_true (pp_lanes_slot_bytes_from_env (2, &bytes, NULL));
  g_assert_cmpuint (bytes, ==, 65792);
  g_setenv ("PPDIFFUSE_LANE_SLOT_BYTES", "70000", TRUE);
  g_assert_true (pp_lanes_slot_bytes_from_env (100, &bytes, NULL));
  g_assert_cmpuint (bytes, ==, 70016);
  for (guint i = 0; i < G_N_ELEMENTS (bad); i++) {
    g_autoptr (GError) error = NULL;

    g_setenv ("PPDIFFUSE_LANE_SLOT_BYTES", bad[i], TRUE);
    g_assert_false (pp_lanes_slot_bytes_from_env (2, &bytes, &error));
    g_assert_error (error, PP_ERROR, PP_ERROR_CONFIG);
    g_assert_nonnull (strstr (error->message, "PPDIFFUSE_LANE_SLOT_BYTES="));
  }
  g_unsetenv ("PPDIFFUSE_LANE_SLOT_BYTES");
}

/* The slot size rank 0 chose travels in the lanes' header: another
 * mapping reads it, and what fits follows it.  Opened for another number
 * of ranks, the lanes are refused. */
static void
test_slot_size_travels (void)
{
  const gsize slot_bytes = PP_LANE_SLOT_BYTES_MIN + 1024;
  g_autofree gchar *name = NULL;
  g_autoptr (GError) error = NULL;
  PpEnvelopeCodec *tx = pp_envelope_codec_new ();
  PpEnvelopeCodec *rx = pp_envelope_codec_new ();
  PpBells *bells = pp_bells_create (3, slot_bytes, &name, &error);
  PpBells *other;
  PpLane *out, *in;

  g_assert_no_error (error);
  g_assert_null (pp_bells_open (name, 2, &error));
  g_assert_error (error, PP_ERROR, PP_ERROR_CONFIG);
  g_clear_error (&error);
  g_assert_null (pp_bells_open (name, 4, &error));
  g_assert_error (error, PP_ERROR, PP_ERROR_CONFIG);
  g_clear_error (&error);
  other = pp_bells_open (name, 3, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (pp_lanes_slot_bytes (pp_bells_lanes (other)), ==,
      slot_bytes);
  pp_lanes_join (pp_bells_lanes (other), 1);
  pp_lanes_open (pp_bells_lanes (bells));
  out = pp_lanes_between (pp_bells_lanes (bells), 0, 1);
  in = pp_lanes_between (pp_bells_lanes (other), 0, 1);
  g_assert_true (put (out, tx, 0, 1, 60 * 1024, FALSE));
  take (in, rx, 0, 1, 60 * 1024, TRUE);
  g_assert_false (put (out, tx, 1, 1, slot_bytes, FALSE));
  take (in, rx, 1, 1, slot_bytes, FALSE);
  pp_envelope_codec_free (tx);
  pp_envelope_codec_free (rx);
  pp_bells_free (other);
  pp_bells_free (bells);
}

/* When the host's shared memory has no room for the lanes, the bells
 * still come, without lanes, and a worker maps them so.  No room is made
 * here by a file size limit far below the lanes (the kernel then refuses
 * to size or fill the object, as a full tmpfs does), in a child process
 * so that the limit stays there. */
static void
test_no_room (void)
{
  int status = 0;
  pid_t child = fork ();

  g_assert_cmpint (child, >=, 0);
  if (child == 0) {
    const struct rlimit small = { 64 * 1024, 64 * 1024 };
    g_autofree gchar *name = NULL;
    g_autoptr (GError) error = NULL;
    PpBells *bells, *other;

    signal (SIGXFSZ, SIG_IGN);
    if (setrlimit (RLIMIT_FSIZE, &small) != 0)
      _exit (2);
    bells = new_bells (4, TRUE, &name);
    other = pp_bells_open (name, 4, &error);
    g_assert_no_error (error);
    g_assert_null (pp_bells_lanes (bells));
    g_assert_null (pp_bells_lanes (other));
    /* the bells themselves work */
    pp_bells_ring (other, 3);
    g_assert_cmpuint (pp_bells_read (bells, 3), ==, 1);
    pp_bells_free (other);
    pp_bells_free (bells);
    _exit (0);
  }
  g_assert_cmpint (waitpid (child, &status, 0), ==, child);
  g_assert_true (WIFEXITED (status));
  g_assert_cmpint (WEXITSTATUS (status), ==, 0);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/lanes/which-links", test_which_links);
  g_test_add_func ("/lanes/without-lanes", test_without_lanes);
  g_test_add_func ("/lanes/two-slots", test_two_slots);
  g_test_add_func ("/lanes/too-large-for-a-slot", test_too_large_for_a_slot);
  g_test_add_func ("/lanes/across-processes", test_across_processes);
  g_test_add_func ("/lanes/slot-size-from-env", test_slot_size_from_env);
  g_test_add_func ("/lanes/slot-size-travels", test_slot_size_travels);
  g_test_add_func ("/lanes/no-room", test_no_room);
  return g_test_run ();
}
