/* ppdiffuse — tensor ops of the diffusion models (contiguous, row-major),
 * on device buffers of a backend (pp-backend.h).
 *
 * The ops are declared once, in pp-ops-list.h.  Every backend has a PpOps
 * table of them (pp-backend-impl.h); model code calls the pp_* wrappers
 * with its backend, which check the ops' views, count FLOPs, profile and
 * call through the table.
 *
 * Weights and activations reach ops as typed views (pp-view.h), which the
 * wrappers check against the backend's dtypes and the op's needs; their
 * shapes ops cannot check against each other: callers check shapes and
 * report errors.  Preconditions that an op can check
 * itself (positive sizes, channels divisible by groups) are
 * g_return_if_fail()s.  Outputs never alias inputs unless an op says so.
 * Ops are thread-safe: none keeps state between calls. */
#pragma once

#include <glib.h>
#include <stddef.h>

#include "pp-backend-impl.h"
#include "pp-ops-list.h"
#include "pp-ops-math.h"
#include "pp-view.h"

G_BEGIN_DECLS

/* The profile entries: one per op, and the row-wise regions. */
typedef enum
{
#define PP_OPS_ENUM(name, NAME, params, args, flops, views) PP_OP_##NAME,
  PP_OPS_LIST (PP_OPS_ENUM)
#undef PP_OPS_ENUM
  PP_OP_FOR_ROWS,
  PP_OP_COUNT
} PpOp;

/* FLOPs of the convolutions, linears and attention matmuls run so far
 * (2 per multiply-add), for benchmarks.  The reset clears the profile too. */
guint64 pp_ops_flop_count (void);
void pp_ops_reset_flop_count (void);

typedef struct
{
  const char *name;
  /* Its calls while profiling, those inside pp_for_rows too (whose wall
   * time and FLOPs count toward the for_rows entry). */
  guint64 calls;
  double seconds;               /* wall time inside the op */
  guint64 flops;
  /* On a backend with device marks (a GPU): the device time of the op's
   * work, from a mark recorded before it to one after it; 0 elsewhere. */
  double device_seconds;
  /* Channels-last views the backend copied channels first for the op's
   * kernel (an input) or laid back after it (an output), counted when the
   * op is queued (pp_ops_reset_flop_count clears them): each a transpose
   * (two for one updated in place) a kernel of the layout's own would not
   * make. */
  guint64 layout_copies;
  /* The bytes the views of the calls whose time it holds hold, while
   * profiling (on a device an op's own calls, inside pp_for_rows too; on a
   * host those inside count toward the for_rows entry, as their time
   * does): each input and output once, an output the op also reads (an
   * add in place) once, a strided view as the span its rows cover.  The
   * least memory traffic of the calls, for the time they would take at
   * the device's bandwidth. */
  guint64 bytes;
} PpOpProfile;

/* While on, every op call through the pp_* wrappers adds its wall time to
 * the op's entry (off by default: it reads the clock twice a call).  Ops
 * called inside pp_for_rows count toward the for_rows entry instead (its
 * wall time, their FLOPs): on several threads at once, their own times
 * would add up to more than the wall time.  On a device backend each op
 * also records two marks on the device's stream (PpBackendMemory.mark),
 * whose elapsed time pp_ops_get_profile adds to the op's device_seconds
 * (waiting for the marks), ops inside pp_for_rows included: a device
 * runs its ranges one after the other. */
void pp_ops_set_profiling (gboolean on);
void pp_ops_get_profile (PpOp op, PpOpProfile * out);
/* A window of the profile: while profiling, the op calls are numbered
 * from 0 (this call restarts the numbering), and only those numbered
 * [@first, @first + @count) are counted and timed (@count 0: all of
 * them); on a device backend the first of them is queued behind a hold of
 * the stream of @hold_s seconds (PpBackendMemory.hold; 0: none), so that the
 * host queues the window's ops before the device runs them and their
 * device times leave out the host's launches.  A run too long to queue
 * whole inside one hold (CUDA's queue of pending work fills) is profiled
 * window by window, one run each. */
void pp_ops_set_profile_window (guint64 first, guint64 count, gdouble hold_s);
/* The op calls numbered since the window was last set, in it or not. */
guint64 pp_ops_profile_calls_numbered (void);
/* The host's longest time, over the windows since the last reset, from a
 * window's hold to the end of queueing its last call: when it reaches the
 * hold, the device waited for the host inside the window. */
gdouble pp_ops_profile_window_queued (void);
/* The profiled calls grouped by shape: calls of one op with the same
 * FLOPs and bytes (PpOpProfile's, per call), which tells one convolution
 * or product of a model from another.  Only calls with a time of their
 * own are grouped: on a device every profiled call (its device time), on
 * a host those outside pp_for_rows (their wall time). */
typedef struct
{
  PpOp op;
  const char *name;             /* the op's */
  guint64 flops, bytes;         /* each call's */
  guint64 calls;
  double seconds;               /* wall time, on a host */
  double device_seconds;        /* device time, on a device */
} PpOpShape;

/* The shapes profiled since the last pp_ops_reset_flop_count, in no
 * order: an array of PpOpShape (free with g_array_unref). */
GArray *pp_ops_get_shapes (void);

/* For backends: op @op (its name) copied a channels-last view channels
 * first for its kernel. */
void pp_ops_note_layout_copy (const char *op);

/* The wrappers: pp_NAME (be, params…) runs op NAME on backend @be.  Each
 * view parameter is checked first, and the process ends with a message
 * naming the op, the parameter and what is wrong (ops return nothing, and a
 * crash beats silent garbage) when it is absent but required, of a dtype
 * @be has no kernel for (PpBackend.view_dtypes for weights, act_dtypes for
 * activations), or shorter than what the op reads or writes of it; the
 * backend gets it trimmed to that. */
#define PP_OPS_WRAPPER(name, NAME, params, args, flops, views) \
  void pp_##name (PpBackend * be, PP_OPS_UNPAREN params);
PP_OPS_LIST (PP_OPS_WRAPPER)
#undef PP_OPS_WRAPPER
void pp_for_rows (PpBackend * be, int rows, PpRowsFunc func, gpointer data);

/* Ends the process: op @op has no kernel on @be for parameter @param of
 * @dtype.  For the wrappers, and for a backend's dispatch on a dtype it
 * was not promised. */
G_GNUC_NORETURN void pp_ops_refuse_dtype (const PpBackend * be,
    const char *op, const char *param, PpDType dtype);

/* Output size of a convolution along one axis: (in + 2 pad - k) / stride +
 * 1, or 0 when the kernel does not fit. */
static inline int
pp_conv2d_out_size (int in, int k, int stride, int pad)
{
  const int span = in + 2 * pad - k;

  return span < 0 || stride < 1 ? 0 : span / stride + 1;
}

/* Elements a row-major @rows × @cols matrix with row stride @ld spans
 * (what matmul reads of a strided operand), 0 when it is empty. */
static inline gint64
pp_strided_numel (int rows, int cols, int ld)
{
  return rows < 1 || cols < 1 ? 0 : (gint64) (rows - 1) * ld + cols;
}

G_END_DECLS
