/* GStreamer ppdiffuse — what live applications watch: progress messages
 * while the mesh starts, and the statistics (the stats property and the
 * periodic ppdiffuse-stats element message). */
#pragma once

#include "gstppdiffuse.h"

G_BEGIN_DECLS

/* The code of every GST_MESSAGE_PROGRESS of a start. */
#define GST_PP_DIFFUSE_PROGRESS_CODE "ppdiffuse-start"
/* The name of the stats structure, of the property and of the message. */
#define GST_PP_DIFFUSE_STATS_NAME "ppdiffuse-stats"

/* ---- progress ---------------------------------------------------------- */

/* START (and CONTINUE "loading model"), then CONTINUE per stage with a "percent" field (0–100, never
 * decreasing), then COMPLETE, or ERROR with the error's text. */
void gst_pp_diffuse_progress_start    (GstPpDiffuse * self);
void gst_pp_diffuse_progress_continue (GstPpDiffuse * self, gint percent,
                                       const gchar * format, ...)
    G_GNUC_PRINTF (3, 4);
void gst_pp_diffuse_progress_complete (GstPpDiffuse * self);
void gst_pp_diffuse_progress_error    (GstPpDiffuse * self,
                                       const gchar * text);
/* PpStreamCallbacks.progress; @data is the element. */
void gst_pp_diffuse_mesh_progress     (PpStreamProgress stage, guint rank,
                                       guint n_workers, guint64 loaded_bytes,
                                       gpointer data);

/* ---- statistics -------------------------------------------------------- */

typedef struct _GstPpDiffuseStatsTimer GstPpDiffuseStatsTimer;

GstPpDiffuseStatsTimer *gst_pp_diffuse_stats_timer_new  (GstPpDiffuse * self);
void     gst_pp_diffuse_stats_timer_free  (GstPpDiffuseStatsTimer * timer);
/* Starts the interval thread once the mesh is up (start), and joins it
 * before the mesh goes (stop). */
void     gst_pp_diffuse_stats_timer_start (GstPpDiffuseStatsTimer * timer,
                                           guint n_workers);
void     gst_pp_diffuse_stats_timer_stop  (GstPpDiffuseStatsTimer * timer);
/* stats-interval-ms changed: the thread takes the new one at once. */
void     gst_pp_diffuse_stats_timer_wake  (GstPpDiffuseStatsTimer * timer);

/* The stats structure: cumulative fields since start, interval fields of
 * the last completed interval. */
GstStructure *gst_pp_diffuse_stats_structure (GstPpDiffuse * self);

/* ---- the engine's log ------------------------------------------------- */

/* The engine's log lines go to the ppdiffuse debug category, formatted
 * only when its threshold would show them. */
void gst_pp_diffuse_log_follow_threshold (void);

G_END_DECLS
