/* ppdiffuse — the init handshake between rank 0 and each worker.
 *
 * rank 0 → worker:  PP_HELLO_TYPE  (protocol version, rank 0 pid, rank 0
 *                   host, plan, plan_id, options)
 * worker → rank 0:  PP_REPLY_TYPE  (protocol version, plan_id as the worker
 *                   derived it, world rank, pid, host, error text or "",
 *                   parity)
 *
 * Both messages start with the protocol version, so that a peer of another
 * version is told so rather than that its message is malformed.  Parity is
 * a dictionary of what the worker runs (build, backend, library versions,
 * model digest, dtype, …); rank 0 compares it key by key with its own and
 * across workers, and refuses the mesh listing every mismatch. */
#pragma once

#include <mpi.h>

#include "pp-backend.h"
#include "pp-plan.h"
#include "pp-protocol.h"

G_BEGIN_DECLS

#define PP_HELLO_TYPE "(uxsvua{sv})"
#define PP_REPLY_TYPE "(uuuxssa{ss})"

/* Parity keys.  Checked: must be equal on every rank (against rank 0's
 * own value where rank 0 has one, else against worker rank 1's). */
#define PP_PARITY_PROTOCOL "protocol"
#define PP_PARITY_ENVELOPE "envelope"
#define PP_PARITY_BUILD "build"
#define PP_PARITY_BACKEND "backend"
#define PP_PARITY_DTYPE "dtype"
/* The models' activations: their dtype and layout, "f16, nhwc"
 * (pp_backend_act_dtype, pp_backend_act_layout: the environment can change
 * both, and either changes the bits). */
#define PP_PARITY_ACTIVATIONS "activations"
/* How the models run the convolution after an upsampling, "phases" or
 * "upsample" (pp_model_upsample_conv: the environment's choice, which
 * changes the bits). */
#define PP_PARITY_UPSAMPLE_CONV "upsample-conv"
/* The backend's other choices that change the bits, "attention=fused
 * conv-algo=heuristic …" on cuda, "none" on the CPU backends
 * (pp_backend_ways: the environment's choices). */
#define PP_PARITY_KERNEL_WAYS "kernel-ways"
#define PP_PARITY_MPI "mpi"
#define PP_PARITY_MODEL_DIGEST "model-digest"
#define PP_PARITY_PLAN "plan"
/* The data plane the rank runs (the plan's, once it checked that it can). */
#define PP_PARITY_DATA_PLANE "data-plane"
/* Reported only (logged; may differ between hosts). */
#define PP_PARITY_DEVICE "device"

/* Hello option keys. */
#define PP_OPTION_DUMP_DIR "dump-dir"
#define PP_OPTION_BELLS "bells"

typedef struct _PpWorkerInfo
{
  guint32 plan_id;
  gint rank;
  gint64 pid;
  gchar *host;
  gchar *error;                 /* NULL when the worker accepted the plan */
  GHashTable *parity;           /* key → value, owned */
} PpWorkerInfo;

typedef struct
{
  gchar *dump_dir;              /* NULL: no flight recorder files */
  gchar *bells;                 /* the doorbells' name (pp-bells.h), or NULL */
} PpHelloOptions;

GBytes     *pp_handshake_hello_new   (const PpPlan * plan,
                                      const PpHelloOptions * options);
/* Validates a hello; returns the plan, rank 0's identity and the options
 * (to clear with pp_hello_options_clear). */
PpPlan     *pp_handshake_hello_parse (GBytes * bytes, gint64 * rank0_pid,
                                      gchar ** rank0_host,
                                      PpHelloOptions * options,
                                      GError ** error);
void        pp_hello_options_clear   (PpHelloOptions * options);
/* @parity may be NULL (a worker that failed before it knew its model). */
GBytes     *pp_handshake_reply_new   (guint32 plan_id, gint rank,
                                      const gchar * error_text,
                                      GHashTable * parity);
gboolean    pp_handshake_reply_parse (GBytes * bytes, PpWorkerInfo * info,
                                      GError ** error);
void        pp_worker_info_clear     (PpWorkerInfo * info);

/* This process's parity dictionary: the backend it computes on (@be's
 * name, checked, and device, reported), the weights' dtype of @model_uri
 * on it (NULL: the backend's default); @model_digest and @plan_id are
 * added when set (workers), left out otherwise (rank 0). */
GHashTable *pp_parity_local          (const gchar * model_digest,
                                      const guint32 * plan_id,
                                      PpBackend * be,
                                      const gchar * model_uri);
/* Compares every checked key of every worker; an error lists all the
 * mismatches, one "rank R: key = value (rank X: value)" each. */
gboolean    pp_parity_check          (GHashTable * rank0,
                                      const PpWorkerInfo * workers,
                                      guint n_workers, GError ** error);

typedef enum
{
  PP_HANDSHAKE_WAITING,         /* its reply is awaited next */
  PP_HANDSHAKE_LOADING,         /* it reported @loaded_bytes read */
  PP_HANDSHAKE_READY,           /* its reply was accepted */
} PpHandshakeStage;

/* Told of worker rank @rank's stage; @loaded_bytes: the bytes of its
 * model it has read so far (PP_HANDSHAKE_LOADING), else 0. */
typedef void (*PpHandshakeProgressFunc) (guint rank, PpHandshakeStage stage,
                                         guint64 loaded_bytes,
                                         gpointer user_data);

/* Rank 0: sends every worker of @world the hello, then reads the replies
 * in rank order into @workers (n_workers of @plan) and checks them (rank,
 * plan_id, the worker's own refusal, parity).  Each worker's reply is
 * due within @timeout_ms of the hello or of its last load progress report
 * (PP_TAG_LOAD_PROGRESS), whichever is later: a large model on a slow
 * disk takes as long as it needs, a load that stalls ends the start.
 * @progress may be NULL. */
gboolean    pp_handshake_run         (MPI_Comm world, const PpPlan * plan,
                                      const PpHelloOptions * options,
                                      PpWorkerInfo * workers,
                                      guint timeout_ms,
                                      PpHandshakeProgressFunc progress,
                                      gpointer progress_data,
                                      GError ** error);

/* A worker's main, first thing: TRUE (after printing its probe reply)
 * when run as "WORKER --ppdiffuse-probe" (PP_WORKER_PROBE_ARG); it must
 * then exit 0 without touching MPI. */
gboolean    pp_worker_answer_probe   (int argc, char **argv);
/* The start budget rank 0 passed as PP_WORKER_START_ARG=MS, else
 * @fallback. */
guint       pp_worker_start_timeout_arg (int argc, char **argv,
                                      guint fallback);

G_END_DECLS
