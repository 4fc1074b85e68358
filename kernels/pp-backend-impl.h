/* ppdiffuse — the backend interface: the memory table, the op table and
 * the struct that holds them (pp-backend.h tells the two halves).  For
 * the code that implements a backend (kernels/cpu, kernels/cuda) and the
 * code that calls through its tables without the registry of backends
 * (the op wrappers, tensors in device memory); the rest includes
 * pp-backend.h. */
#pragma once

#include <glib.h>
#include <stddef.h>

#include "pp-dtype.h"
#include "pp-error.h"
#include "pp-ops-list.h"
#include "pp-ops-math.h"
#include "pp-view.h"

G_BEGIN_DECLS

typedef struct _PpBackend PpBackend;

/* Processes rows [begin, end) of a row-wise region (pp_for_rows). */
typedef void (*PpRowsFunc) (int begin, int end, gpointer data);

/* The op table of a backend: one field per op of pp-ops-list.h, plus the
 * row-wise region. */
typedef struct
{
#define PP_OPS_FIELD(name, NAME, params, args, flops, views) \
  void (*name) (PpBackend * be, PP_OPS_UNPAREN params);
  PP_OPS_LIST (PP_OPS_FIELD)
#undef PP_OPS_FIELD
  /* Calls @func on disjoint ranges covering [0, rows), each range's ops
   * working on its rows alone: for chains of row-wise ops.  A backend may
   * run the ranges in parallel, each chain's intermediates then staying in
   * a core's cache (CPU), or as one range (GPU).  How it cuts is the
   * backend's tuning. */
  void (*for_rows) (PpBackend * be, int rows, PpRowsFunc func,
      gpointer data);
} PpOps;

/* Work to capture as a graph: issues ops on the backend; FALSE with
 * @error when it cannot. */
typedef gboolean (*PpGraphFunc) (gpointer data, GError ** error);

/* A kernel the device ran, as a trace records it (pp_backend_trace): its
 * name (as the device has it, a C++ kernel's mangled) and its start and
 * end, in nanoseconds of the trace's own clock. */
typedef struct
{
  gchar *name;
  guint64 start_ns, end_ns;
} PpKernelSpan;

typedef struct
{
  /* Device memory: NULL with @error when it cannot be had. */
  gpointer (*alloc) (PpBackend * be, gsize bytes, GError ** error);
  void (*free) (PpBackend * be, gpointer mem);
  void (*upload) (PpBackend * be, gpointer dst, gconstpointer src,
      gsize bytes);
  void (*download) (PpBackend * be, gpointer dst, gconstpointer src,
      gsize bytes);
  void (*copy) (PpBackend * be, gpointer dst, gconstpointer src, gsize bytes);
  /* n floats of @dst = value. */
  void (*fill) (PpBackend * be, gpointer dst, float value, gsize n);
  void (*synchronize) (PpBackend * be);
  /* Weights: device memory holding @n floats of host @src stored as
   * @dtype (F32, F16 or BF16), for the model's lifetime (released with
   * free); pp_backend_upload_weights hands it out as a view of @dtype.
   * NULL: the backend computes on float32 host memory and uses @src
   * itself (the CPU backend keeps the weights' memory map), or a rounded
   * float32 copy of it for a 16-bit @dtype. */
  gpointer (*upload_weights) (PpBackend * be, const float *src, gsize n,
      PpDType dtype, GError ** error);
  /* Graphs (NULL on a backend without them): graph_capture records the
   * ops @func issues, without running them, into a graph ready to launch;
   * graph_launch runs the recorded ops again, on the same buffers with the
   * same scalars; graph_free releases it.  No other thread may use the
   * backend while a capture runs, and the work captured must not upload,
   * download or synchronize. */
  gpointer (*graph_capture) (PpBackend * be, PpGraphFunc func,
      gpointer data, GError ** error);
  gboolean (*graph_launch) (PpBackend * be, gpointer graph, GError ** error);
  void (*graph_free) (PpBackend * be, gpointer graph);
  /* What a captured graph holds: its nodes and, of them, its kernels (a
   * device's: what each launch of it runs one after another).  NULL, or
   * FALSE: not known. */
  gboolean (*graph_nodes) (PpBackend * be, gpointer graph, guint * nodes,
      guint * kernels);
  /* A device backend's stream (cudaStream_t), for a data plane that
   * enqueues behind its ops, and making its device the calling thread's
   * current one; NULL on the CPU backends. */
  gpointer (*stream) (PpBackend * be);
  void (*make_current) (PpBackend * be);
  /* Device time, for profiles (NULL on the CPU backends, whose ops the op
   * layer times by the host's clock): mark records a point on the
   * backend's stream behind the work issued so far (NULL when it cannot,
   * during a graph capture); elapsed waits for @to and returns the seconds
   * of device time from @from to it; mark_free releases a mark. */
  gpointer (*mark) (PpBackend * be);
  gdouble (*elapsed) (PpBackend * be, gpointer from, gpointer to);
  void (*mark_free) (PpBackend * be, gpointer mark);
  /* Keeps the stream from starting the work issued next for about
   * @seconds (FALSE when it cannot, during a graph capture): a profile
   * queues a whole run meanwhile, so that no op's device time includes
   * the host's own time between launches.  NULL on the CPU backends. */
  gboolean (*hold) (PpBackend * be, gdouble seconds);
  /* Order between the backend's stream and another stream of its device
   * (a data plane's, which sends what the backend's work wrote): fence
   * records a point behind the work issued so far (NULL when it cannot,
   * during a graph capture); fence_wait makes the work queued later on
   * @stream (an opaque cudaStream_t) start after that point, the host
   * waiting for nothing; fence_free releases a fence.  On the CPU
   * backends, whose work is done when its call returns, a fence has
   * passed when it is made (pp_cpu_fence). */
  gpointer (*fence) (PpBackend * be);
  void (*fence_wait) (PpBackend * be, gpointer fence, gpointer stream);
  void (*fence_free) (PpBackend * be, gpointer fence);
  /* After a kept failure (pp_backend_recover), once the work queued
   * before it is done: drops what the failure may have cut short and no
   * graph may still run on (scratch, per-shape plans and the choices made
   * with them) and gives back to the device what the backend holds for
   * reuse, so that the work tried next starts clean with the most room;
   * NULL where there is nothing of the kind (the CPU backends). */
  void (*trim) (PpBackend * be);
  /* Gives back to the device the freed buffers the backend keeps for
   * reuse, once the work queued may no longer use them
   * (pp_backend_give_back); NULL where none are kept (the CPU
   * backends). */
  void (*give_back) (PpBackend * be);
  /* Kernel traces (pp_backend_trace_enable, pp_backend_trace; NULL where
   * the backend runs no device kernels: the CPU backends). */
  gboolean (*trace_enable) (PpBackend * be, GError ** error);
  GArray *(*trace) (PpBackend * be, PpGraphFunc func, gpointer data,
      GError ** error);
} PpBackendMemory;

struct _PpBackend
{
  const gchar *name;
  /* What it runs on, for logs and the handshake ("2-core x86_64, AVX-512,
   * 8 threads"); filled in when the backend is first got. */
  gchar *device;
  /* A GPU backend's device among those the process sees (the N of
   * "cuda:N"); 0 on the CPU backends, which have none. */
  gint device_index;
  /* Its choices among ways of computing that change the bits of results
   * (an algorithm, a kernel, a layout), as its environment made them when
   * it was made, one "name=choice" each, space-separated: the handshake
   * holds every rank to the same (pp_backend_ways).  NULL: it has none
   * (the CPU backends). */
  gchar *ways;
  const PpBackendMemory *memory;
  const PpOps *ops;
  /* The weights' storage dtype when a model does not ask for one: F32 on
   * the CPU, F16 on a GPU. */
  PpDType default_weight_dtype;
  /* The dtypes its ops read views in (PP_DTYPE_BIT each): the wrappers
   * refuse a view of any other. */
  guint view_dtypes;
  /* The dtypes its ops take activations in (PP_DTYPE_BIT each): the
   * wrappers refuse an activation of any other. */
  guint act_dtypes;
  /* TRUE: models keep their activations in their weights' dtype, when it
   * is one of act_dtypes (pp_backend_act_dtype); FALSE: in float32. */
  gboolean act_follows_weights;
  /* The models' layout for 16-bit activations when $PPDIFFUSE_ACT_LAYOUT
   * names none (pp_backend_act_layout): NHWC on a GPU (as its 16-bit
   * convolutions run), NCHW on the CPU (its kernels' own).  Float32
   * activations are NCHW there (a GPU's float32 convolutions run channels
   * first). */
  PpLayout act16_layout;
  /* TRUE: the models cut a batch's row-count-dependent work (GEMMs, row
   * ranges) sample by sample, so that each sample gets the bytes it gets
   * alone (the CPU backends, whose GEMM kernels and ranges depend on the
   * row count); FALSE: a batch runs as one, each sample within the
   * dtype's bounds of its result alone (a GPU: fewer, larger launches).
   * pp_backend_samples_apart. */
  gboolean samples_apart;
  /* TRUE: models compute projections of one input as one stacked product
   * (a self-attention's q, k and v), where one wide GEMM beats several (a
   * GPU); FALSE: as they are stored (the CPU backends: no faster there,
   * and a stacked weight would copy float32 weights the ops read in
   * place).  pp_backend_stacks_projections. */
  gboolean stacks_projections;
  /* TRUE: a shape's first run makes what later runs of it reuse (the
   * libraries' plans per shape: cuDNN compiles its fused attention's
   * kernels for each), so that a model warms each batch size it will run
   * before the stream (a GPU); FALSE: a first run costs what later ones
   * do (the CPU backends).  pp_backend_plans_shapes. */
  gboolean plans_shapes;
  /* pp_ops_note_layout_copy, set by pp_backend_get for a backend module
   * (which may call none of the kernels library's functions by name: it
   * is loaded privately); NULL: the backend counts no layout copies. */
  void (*note_layout_copy) (const char *op);
  /* Failures inside ops (which return void): in a process that keeps them
   * (pp_backend_keep_failures: an application's, whose life is not the
   * backend's to end), the first is kept in @failure and the backend is
   * halted: it runs no more work (ops, transfers, graphs) until
   * pp_backend_recover, and the work's callers learn of it through
   * pp_backend_check; elsewhere (a worker, a tool) a failure ends the
   * process with its message.  @failures counts the failures kept and
   * the recoveries, so a caller can ask whether one came during its
   * work.  @lost: the failure took the device with it (a kernel's fault,
   * which a GPU's context keeps for good): the backend is never taken
   * back.  Atomic ints; the
   * error under @failure_lock, which is taken inside the backend's own
   * lock, never around it. */
  gint keeps_failures;
  gint halted;
  gint lost;
  gint failures;
  GMutex failure_lock;
  GError *failure;
  gpointer priv;
};

/* For backends: a call inside an op of @be failed with @error.  Where the
 * process keeps failures, @error is kept (or dropped when an earlier
 * failure is kept), @be halted and TRUE returned: the op goes on without
 * enqueueing more work (pp_backend_is_halted), and its buffers may be
 * missing.  FALSE otherwise, @error left to the caller, which ends the
 * process with it.  Inline, for backend modules, which call no function
 * of the kernels library by name. */
static inline gboolean
pp_backend_halt (PpBackend * be, GError * error)
{
  if (!g_atomic_int_get (&be->keeps_failures))
    return FALSE;
  g_mutex_lock (&be->failure_lock);
  if (be->failure == NULL) {
    be->failure = error;
    g_atomic_int_inc (&be->failures);
  } else {
    g_error_free (error);
  }
  g_atomic_int_set (&be->halted, 1);
  g_mutex_unlock (&be->failure_lock);
  return TRUE;
}

/* Whether @be is halted by a kept failure: its work is skipped. */
static inline gboolean
pp_backend_is_halted (PpBackend * be)
{
  return g_atomic_int_get (&be->halted) != 0;
}

/* For backends: FALSE, with @be's kept failure in @error, when @be is
 * halted (a device allocation asked for then: it takes no more of the
 * device); else TRUE. */
static inline gboolean
pp_backend_running (PpBackend * be, GError ** error)
{
  if (!pp_backend_is_halted (be))
    return TRUE;
  g_mutex_lock (&be->failure_lock);
  if (be->failure != NULL)
    g_set_error_literal (error, be->failure->domain, be->failure->code,
        be->failure->message);
  else
    g_set_error_literal (error, PP_ERROR, PP_ERROR_DEVICE, "the backend "
        "failed during this work and has recovered since");
  g_mutex_unlock (&be->failure_lock);
  return FALSE;
}

G_END_DECLS
