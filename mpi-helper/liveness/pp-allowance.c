/* ppdiffuse — the deadline rule for slow but healthy work (pp-allowance.h). */
#include "pp-allowance.h"
#include "pp-protocol.h"

/* A faster round moves the estimate 1/PP_ALLOWANCE_DECAY of the way. */
#define PP_ALLOWANCE_DECAY 8

gint64
pp_allowance_us (guint timeout_ms, gint64 expected_us)
{
  const gint64 floor_us = (gint64) timeout_ms * 1000;
  /* One heartbeat period: a state seen by the watchdog is up to one old. */
  const gint64 margin_us = (gint64) (timeout_ms / PP_HEARTBEAT_DIVISOR)
      * 1000;

  if (expected_us <= 0)
    return floor_us;
  if (expected_us > (G_MAXINT64 - margin_us) / PP_ALLOWANCE_FACTOR)
    return G_MAXINT64;
  return MAX (floor_us, PP_ALLOWANCE_FACTOR * expected_us + margin_us);
}

gint64
pp_allowance_unmeasured_us (guint timeout_ms, guint n_steps)
{
  return (gint64) MAX (n_steps, 1) * PP_ALLOWANCE_UNMEASURED_STEP_TIMEOUTS
      * timeout_ms * 1000;
}

gint64
pp_allowance_expected_slice_us (guint timeout_ms, guint64 busy_us,
    guint64 n_passes, gint64 peer_step_us, gint64 round_us,
    guint slice_steps, guint n_steps, const gchar ** source)
{
  const gchar *unused;

  if (source == NULL)
    source = &unused;
  if (n_passes > 0 && busy_us > 0) {
    *source = PP_ALLOWANCE_BUSY;
    return (gint64) (busy_us / n_passes);
  }
  if (peer_step_us > 0) {
    *source = PP_ALLOWANCE_PEER;
    return peer_step_us * (gint64) MAX (slice_steps, 1);
  }
  if (round_us > 0 && n_steps > 0) {
    *source = PP_ALLOWANCE_ROUND;
    /* The whole round, rank 0's share, the transfers and any queueing
     * included, split by steps: more than the slice takes, never less. */
    return MAX (round_us * (gint64) slice_steps / (gint64) n_steps, 1);
  }
  *source = PP_ALLOWANCE_UNMEASURED;
  return pp_allowance_unmeasured_us (timeout_ms, slice_steps);
}

gint64
pp_allowance_update_round_us (gint64 estimate_us, gint64 sample_us)
{
  if (sample_us <= 0)
    return estimate_us;
  if (estimate_us <= 0 || sample_us >= estimate_us)
    return sample_us;
  return estimate_us - (estimate_us - sample_us) / PP_ALLOWANCE_DECAY;
}

const gchar *
pp_allowance_advice (guint n_workers, guint n_steps)
{
  if (n_workers < n_steps)
    return "use a smaller frame, more ranks (each runs fewer steps), fewer "
        "steps or a faster backend";
  return "use a smaller frame or a faster backend (each rank runs one step "
      "already, the least it can)";
}
