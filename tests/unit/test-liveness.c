/* Unit tests for the liveness messages: a heartbeat written by hand is
 * GVariant's serialisation of its type, and reads back. */
#include "pp-liveness.h"
#include "pp-error.h"

#include <string.h>

static const PpHeartbeat beat = {
  .rank = 3,
  .state = PP_WORK_COMPUTING,
  .chunk_id = G_GUINT64_CONSTANT (0x0102030405060708),
  .state_us = 1234567,
  .received = 41,
  .sent = PP_HEARTBEAT_NONE,
  .seq = 99,
  .busy_us = G_GUINT64_CONSTANT (0x1112131415161718),
  .cache_builds = G_GUINT64_CONSTANT (0x2122232425262728),
  .stream_bytes = G_GUINT64_CONSTANT (0x3132333435363738),
  .batched_steps = G_GUINT64_CONSTANT (0x4142434445464748),
  .pace = { G_GUINT64_CONSTANT (0x5152535455565758),
      G_GUINT64_CONSTANT (0x6162636465666768),
      G_GUINT64_CONSTANT (0x7172737475767778) },
  .cpu_us = G_GUINT64_CONSTANT (0x8182838485868788),
};

static void
test_heartbeat_is_gvariant (void)
{
  g_autoptr (GVariant) v = g_variant_ref_sink (g_variant_new
      (PP_HEARTBEAT_TYPE, beat.rank, (guint32) beat.state, beat.chunk_id,
          beat.state_us, beat.received, beat.sent, beat.seq,
          beat.busy_us, beat.cache_builds, beat.stream_bytes,
          beat.batched_steps, beat.pace.us, beat.pace.passes,
          beat.pace.work, beat.cpu_us));
  guint8 out[PP_HEARTBEAT_SIZE];

  pp_heartbeat_write (&beat, out);
  g_assert_cmpuint (g_variant_get_size (v), ==, PP_HEARTBEAT_SIZE);
  g_assert_cmpmem (out, sizeof out, g_variant_get_data (v),
      g_variant_get_size (v));
}

static void
test_heartbeat_round_trip (void)
{
  guint8 out[PP_HEARTBEAT_SIZE];
  PpHeartbeat back = { 0 };
  g_autoptr (GError) error = NULL;

  pp_heartbeat_write (&beat, out);
  g_assert_true (pp_heartbeat_read (out, sizeof out, &back, &error));
  g_assert_no_error (error);
  g_assert_cmpmem (&back, sizeof back, &beat, sizeof beat);
}

static void
test_heartbeat_malformed (void)
{
  guint8 out[PP_HEARTBEAT_SIZE + 1] = { 0 };
  PpHeartbeat back;
  GError *error = NULL;
  guint32 state = PP_WORK_DONE + 1;

  g_assert_false (pp_heartbeat_read (out, sizeof out, &back, &error));
  g_assert_error (error, PP_ERROR, PP_ERROR_PROTOCOL);
  g_clear_error (&error);
  g_assert_false (pp_heartbeat_read (out, PP_HEARTBEAT_SIZE - 1, &back,
          &error));
  g_assert_error (error, PP_ERROR, PP_ERROR_PROTOCOL);
  g_clear_error (&error);
  memcpy (out + 4, &state, sizeof state);
  g_assert_false (pp_heartbeat_read (out, PP_HEARTBEAT_SIZE, &back, &error));
  g_assert_error (error, PP_ERROR, PP_ERROR_PROTOCOL);
  g_assert_nonnull (strstr (error->message, "state"));
  g_clear_error (&error);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/liveness/heartbeat/is-gvariant",
      test_heartbeat_is_gvariant);
  g_test_add_func ("/liveness/heartbeat/round-trip",
      test_heartbeat_round_trip);
  g_test_add_func ("/liveness/heartbeat/malformed", test_heartbeat_malformed);
  return g_test_run ();
}
