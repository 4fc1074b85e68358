/* ppdiffuse tests — helpers shared by the gst-check tests. */
#pragma once

#include <gst/check/gstcheck.h>

G_BEGIN_DECLS

/* Pids (gint) of the live descendants of this process whose command name
 * starts with @name. */
GArray *pp_check_find_descendants (const gchar * name);

/* Live descendants of this process whose command name starts with @name
 * (workers are children of Open MPI's daemon, itself our child). */
guint pp_check_count_descendants (const gchar * name);

/* Waits until no descendant named @name is left, up to @timeout_ms;
 * returns how many remain. */
guint pp_check_wait_descendants_gone (const gchar * name, guint timeout_ms);

/* Pops the first ERROR message from @bus within @timeout_ms; NULL if none
 * came. */
GstMessage *pp_check_pop_error (GstBus * bus, guint timeout_ms);

/* Pops an error from @bus and checks that it came within @within_ms of
 * @since_us (monotonic) and names every string in @needles. */
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

/* Nothing lost silently, after a mesh error: every frame that went in
 * came out or was counted as dropped (flush, error, qos, leaky), and the
 * error's victims were counted as dropped-error. */
void pp_check_frames_accounted_after_error (GstElement * element);

/* Runs @suite and leaves with _exit: a test that failed midway may leave an
 * element playing, and gst_deinit at exit would wait for its task forever.
 * Never returns. */
void pp_check_run_and_exit (Suite * suite, const gchar * name,
    const gchar * file) G_GNUC_NORETURN;

/* A ppdiffuse element (floating) with these ranks, steps and model. */
GstElement *pp_check_make_element (guint ranks, guint steps,
    const gchar * model);

/* Field @field of a stats structure, failing the test when it is missing. */
guint64 pp_check_stat_u64 (const GstStructure * s, const gchar * field);

/* TRUE when @a and @b hold the same bytes. */
gboolean pp_check_same_bytes (GstBuffer * a, GstBuffer * b);

/* Removes @path and everything under it. */
void pp_check_remove_tree (const gchar * path);

#define PP_CHECK_WORKER_COMM "ppdiffuse-worke"   /* comm is cut at 15 chars */

G_END_DECLS
