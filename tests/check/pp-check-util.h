/* ppdiffuse tests — helpers shared by the gst-check tests. */
#pragma once

#include <gst/check/gstcheck.h>
#include <gst/check/gstharness.h>

G_BEGIN_DECLS

/* Pids (gint) of the live descendants of this process whose command name
 * starts with @name. */
GArray *pp_check_find_descendants (const gchar * name);

/* Live descendants of this process whose command name starts with @name
 * (workers are children of Open MPI's daemon, itself our child). */
guint pp_check_count_descendants (const gchar * name);
/* The processes among @pids (or this process, when @pids is NULL) that
 * map the mesh's doorbells (mpi-helper/wire/pp-bells.h). */
guint pp_check_count_bells_mapped (GArray * pids);
/* The doorbells' names this process left in /dev/shm. */
guint pp_check_count_bells_files (void);
/* How often @rank's doorbell has rung, read from this process's own
 * mapping of the bells (one mesh at a time; a word every 64 bytes, as
 * pp-bells.c lays them out); G_MAXUINT64 without a mapping. */
guint64 pp_check_bell_rings (guint rank);

/* Waits until no descendant named @name is left, up to @timeout_ms;
 * returns how many remain, and prints each that does (its pid, state and
 * parent) on stderr. */
guint pp_check_wait_descendants_gone (const gchar * name, guint timeout_ms);

/* Pops the first ERROR message from @bus within @timeout_ms; NULL if none
 * came. */
GstMessage *pp_check_pop_error (GstBus * bus, guint timeout_ms);

/* Pops an error from @bus and checks that it came within @within_ms of
 * @since_us (monotonic; pp_check_bound_ms of it) and names every string
 * in @needles. */
void pp_check_expect_error (GstBus * bus, gint64 since_us, guint within_ms,
    const gchar * const *needles);

/* A mesh error leads with the rank to blame and why; what rank 0 saw and
 * what every worker's heartbeats said follow these marks
 * (mpi-helper/pp-mesh.c:wait_failed). */
#define PP_CHECK_SYMPTOM_MARK "; rank 0 "
#define PP_CHECK_STATES_MARK "; workers: "

/* Pops an error from @bus, as pp_check_expect_error, whose message leads
 * with the culprit: its first "worker rank" starts @culprit (such as
 * "worker rank 2 ("), and every string of @needles is in that leading
 * clause, before the marks above. */
void pp_check_expect_culprit (GstBus * bus, gint64 since_us, guint within_ms,
    const gchar * culprit, const gchar * const *needles);

/* Brings @element (consumed) to PAUSED and expects that to fail with such
 * an error. */
void pp_check_expect_start_failure (GstElement * element, guint within_ms,
    const gchar * const *needles);

/* The same, with an error that leads with @culprit, as
 * pp_check_expect_culprit. */
void pp_check_expect_start_culprit (GstElement * element, guint within_ms,
    const gchar * culprit, const gchar * const *needles);

/* A frame of @bytes, every byte @index, at @index / 30 s: what the fault
 * tests push (their content does not matter, only that it flows). */
GstBuffer *pp_check_make_flat_frame (guint index, gsize bytes);

/* RGB frame @index of @width x @height, its bytes a ramp that differs
 * from frame to frame, @duration long from @index · @duration. */
GstBuffer *pp_check_make_rgb_frame (guint index, guint width, guint height,
    GstClockTime duration);

/* Brings @h's element to PLAYING and sends a new stream's events:
 * stream-start @stream_id, caps @caps_str, a TIME segment. */
void pp_check_harness_start (GstHarness * h, const gchar * stream_id,
    const gchar * caps_str);

/* Nothing lost silently, after a mesh error: every frame that went in
 * came out or was counted as dropped (flush, error, qos, leaky), and the
 * error's victims were counted as dropped-error. */
void pp_check_frames_accounted_after_error (GstElement * element);

/* Leaves with _exit, 0 when @failed is 0, else 1: a test that failed
 * midway may leave an element playing, and gst_deinit at exit would wait
 * for its task forever.  Never returns. */
void pp_check_exit (int failed) G_GNUC_NORETURN;
/* Runs @suite, then pp_check_exit with its failures.  Never returns. */
void pp_check_run_and_exit (Suite * suite, const gchar * name,
    const gchar * file) G_GNUC_NORETURN;

/* A ppdiffuse element (floating) with these ranks, steps and model. */
GstElement *pp_check_make_element (guint ranks, guint steps,
    const gchar * model);

/* A harness around @element (transfer floating: a floating element becomes
 * the harness's, a caller's own reference stays the caller's) with
 * @caps_str on its source pad. */
GstHarness *pp_check_harness_new (GstElement * element,
    const gchar * caps_str);

/* The harness of the case that runs, for when the case fails midway:
 * pp_check_track_harness records @h (and returns it), the case's own stop
 * calls pp_check_untrack_harness, and pp_check_stop_left_over (a checked
 * fixture's teardown) stops a harness still recorded and waits for its
 * workers, so that they do not run on into the next cases (which would
 * then fail too, each waiting for them to be gone). */
GstHarness *pp_check_track_harness (GstHarness * h);
void pp_check_untrack_harness (void);
void pp_check_stop_left_over (void);

/* A flush through @h: FLUSH_START, FLUSH_STOP, then a new TIME segment. */
void pp_check_harness_flush (GstHarness * h);

/* @element's stats structure (free it), failing the test when it has
 * none. */
GstStructure *pp_check_get_stats (GstElement * element);

/* Field @field of a stats structure, failing the test when it is missing. */
guint64 pp_check_stat_u64 (const GstStructure * s, const gchar * field);

/* TRUE under a sanitizer's test setup (PP_TEST_SANITIZED, set in
 * tests/sanitizers/meson.build).  A sanitizer reports a bad access or a
 * race the first time the code runs, not only when it goes wrong, so there
 * a test repeats less, and leaves out comparisons whose other side is a
 * reference made by another program run; the plain run does all of it. */
gboolean pp_check_sanitized (void);

/* @plain in a plain run, @sanitized under a sanitizer's test setup. */
guint pp_check_repeats (guint plain, guint sanitized);

/* A time bound of @plain_ms in a plain run, a few times that under a
 * sanitizer's test setup, where processes start and exit slower: the plain
 * run checks the bound, a sanitizer's only that nothing hangs. */
guint pp_check_bound_ms (guint plain_ms);

/* TRUE when @a and @b hold the same bytes. */
gboolean pp_check_same_bytes (GstBuffer * a, GstBuffer * b);

/* Removes @path and everything under it. */
void pp_check_remove_tree (const gchar * path);

/* ---- builtin:stamp, the test-side reference ----------------------------
 *
 * Written out again from the model's definition (kernels/builtin/pp-stamp.h)
 * and deliberately not calling it, so that a test checks the model rather
 * than repeating it: step k maps channel value v of channel c to
 *   (a(k) v + b(k, c) + mark) mod 256,  a(k) = 2 (k mod 128) + 3,
 *   b(k, c) = (37 k + 101 c + 11) mod 256. */

/* Channel value @v of channel @c after stamp steps 0..@n_steps-1 with
 * @mark, each once and in order. */
guint pp_check_stamp (guint v, guint c, guint n_steps, guint mark);

/* The test pattern: byte @c (R, G or B) of pixel (@x, @y) of frame @index,
 * so that an output can be matched to exactly one input. */
guint8 pp_check_pattern (guint index, guint x, guint y, guint c);

/* Writes RGBA frame @index of @width x @height at @data, rows @stride bytes
 * apart: the pattern in RGB, 255 - @index in alpha. */
void pp_check_fill_pattern (guint8 * data, gsize stride, guint width,
    guint height, guint index);

/* TRUE when the RGBA pixels at @data (@width x @height, rows @stride bytes
 * apart) are frame @index's pattern after @n_steps stamp steps with
 * @mark, alpha untouched.  Otherwise, when @why is not NULL, sets it
 * (free it) to the first byte that differs and how. */
gboolean pp_check_is_stamped (const guint8 * data, gsize stride,
    guint width, guint height, guint index, guint n_steps, guint mark,
    gchar ** why);

#define PP_CHECK_WORKER_COMM "ppdiffuse-worke"   /* comm is cut at 15 chars */

G_END_DECLS
