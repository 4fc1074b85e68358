/* ppdiffuse — how long healthy work may take: the rule that turns what
 * the mesh has measured into the deadlines of its waits and the
 * watchdog's allowance for one compute.
 *
 * timeout-ms alone cannot tell slow from stuck: a 1080p frame on a CPU
 * takes seconds per UNet step, a stuck kernel takes forever, and both
 * keep heartbeats coming.  So every wait on work (a chunk's return, a
 * worker computing one chunk, a queue or send that waits behind the next
 * stage) is allowed
 *
 *   allowance = max (timeout-ms, PP_ALLOWANCE_FACTOR × expected + margin)
 *
 * where expected is the measured time of that work and margin is one
 * heartbeat period (what the watchdog sees lags by up to one).  Work
 * that runs PP_ALLOWANCE_FACTOR times longer than measured is an error; fast
 * work keeps timeout-ms, as before.  Before anything is measured (the
 * first chunk round the mesh, normally the warm-up pass), a step is
 * expected to take up to PP_ALLOWANCE_UNMEASURED_STEP_TIMEOUTS × timeout-ms:
 * a slice of n steps is allowed PP_ALLOWANCE_FACTOR × that × n (6 n ×
 * timeout-ms), since a first compute also builds caches and touches its
 * memory for the first time.  Pure functions: no MPI, no clock. */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

/* How many times its measured time a piece of work may run before it
 * counts as stuck: above the jitter of a loaded machine (a busy core
 * halves a worker's speed) and of a new cache epoch's first chunk. */
#define PP_ALLOWANCE_FACTOR 3
/* What one step is expected to take, in timeouts, before any was
 * measured. */
#define PP_ALLOWANCE_UNMEASURED_STEP_TIMEOUTS 2

/* The allowance (µs) for work expected to take @expected_us (0 when
 * nothing was measured yet: timeout-ms alone). */
gint64   pp_allowance_us  (guint timeout_ms, gint64 expected_us);
/* What a slice of @n_steps steps is expected to take before anything was
 * measured: PP_ALLOWANCE_UNMEASURED_STEP_TIMEOUTS × timeout-ms per step. */
gint64   pp_allowance_unmeasured_us (guint timeout_ms, guint n_steps);
/* A slice's expected time, from the best measure there is: this worker's
 * compute time over its computes that finished stream chunks (@busy_us
 * over @n_passes, PpPace: a pass that finished a batch counts once); else the time per step measured on another
 * worker (@peer_step_us: every stage runs the same model on the same
 * frames) for its @slice_steps; else what a chunk round the mesh took
 * (@round_us: the warm-up pass, then the chunks back; its share
 * @slice_steps of @n_steps); else unmeasured.  *@source says which
 * (PP_ALLOWANCE_BUSY, PP_ALLOWANCE_PEER, PP_ALLOWANCE_ROUND, PP_ALLOWANCE_UNMEASURED; may be
 * NULL). */
#define PP_ALLOWANCE_BUSY "measured compute"
#define PP_ALLOWANCE_PEER "measured on another worker"
#define PP_ALLOWANCE_ROUND "measured round trip"
#define PP_ALLOWANCE_UNMEASURED "nothing measured yet: 2 × timeout-ms a step"
gint64   pp_allowance_expected_slice_us (guint timeout_ms, guint64 busy_us,
                                    guint64 n_passes, gint64 peer_step_us,
                                    gint64 round_us, guint slice_steps,
                                    guint n_steps, const gchar ** source);
/* The next estimate of a round from @estimate_us (0: none) and a new
 * measure @sample_us: it follows a slower sample at once and a faster one
 * slowly, so one quick chunk does not shorten every deadline. */
gint64   pp_allowance_update_round_us   (gint64 estimate_us, gint64 sample_us);
/* What a person can change when work is too slow for the stream, with
 * @n_workers ranks running @n_steps steps: "use a smaller frame, more
 * ranks (each runs fewer steps), fewer steps or a faster backend"; where
 * each rank runs one step already, neither more ranks nor fewer steps
 * shortens a rank's work, and the advice leaves them out. */
const gchar *pp_allowance_advice    (guint n_workers, guint n_steps);

G_END_DECLS
