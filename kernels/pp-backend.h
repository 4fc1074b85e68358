/* ppdiffuse — compute backends: device memory and the op table on it.
 *
 * A backend has two halves, as ggml-backend has them: memory (device
 * buffers, upload, download, device-to-device copy, fill, synchronize) and
 * compute (the ops of pp-ops-list.h on device buffers).  Model code holds
 * device pointers it never dereferences: it passes them to ops (weights as
 * typed views, which carry their dtype: no backend looks one up by
 * address) and crosses to the host only through pp_backend_upload /
 * pp_backend_download.
 *
 * Backends are process-wide singletons found by name:
 *   cpu         the CPU kernels (kernels/cpu/), device memory = host memory;
 *   cpu-strict  the same kernels on buffers the host cannot touch: outside
 *               the backend's own calls their pages are PROT_NONE, so a
 *               stray host access faults where a GPU build would read
 *               garbage;
 *   cuda        an NVIDIA GPU (kernels/cuda/; builds with the CUDA
 *               toolkit): the process's node-local rank picks the device,
 *               rank 0 of a host device 0 ("cuda") or N ("cuda:N"), the
 *               host's other ranks the devices after it in turn;
 *   auto        the best backend this build and machine have: cuda when
 *               the build has it and a device is there, else cpu (with
 *               the reason CUDA was passed over, pp_backend_auto_reason).
 *
 * Ops on one backend run in call order; synchronize waits for all of them
 * (a no-op on the CPU backends, whose ops return when done). */
#pragma once

#include <glib.h>
#include <stddef.h>

#include "pp-backend-impl.h"
#include "pp-ops.h"
#include "pp-tensor.h"

G_BEGIN_DECLS

#define PP_BACKEND_AUTO "auto"
#define PP_BACKEND_CPU "cpu"
#define PP_BACKEND_CPU_STRICT "cpu-strict"
#define PP_BACKEND_CUDA "cuda"
/* The environment variable that names the backend of tools and tests when
 * no option does. */
#define PP_BACKEND_ENV "PPDIFFUSE_BACKEND"

/* The backend named @name (auto, cpu, cpu-strict), ready for use; NULL with
 * an error listing the names when there is none.  "auto" logs which
 * backend it picked and why.  NULL or "" means the environment's
 * PPDIFFUSE_BACKEND, else auto. */
PpBackend   *pp_backend_get        (const gchar * name, GError ** error);
/* The same for a process whose node-local rank is @local_rank (its rank
 * among the mesh's processes on its host): "cuda:N" then means device
 * N + @local_rank modulo the devices the process sees ("cuda" as
 * "cuda:0"), so that the ranks of a host spread over its GPUs from the
 * one named, and share them when there are more ranks than GPUs.
 * pp_backend_get is this with @local_rank 0. */
PpBackend   *pp_backend_get_local  (const gchar * name, gint local_rank,
                                    GError ** error);
/* The GPU a process of node-local rank @local_rank uses among the
 * @n_devices it sees (> 0) when the host's rank 0 uses device @first
 * (0 ≤ @first < @n_devices): ranks take the GPUs from @first on in turn,
 * and share them when the host runs more ranks than it has GPUs. */
gint         pp_backend_device_for_rank (gint first, gint local_rank,
                                         gint n_devices);
/* The name that gets @be back in a process of node-local rank 0, for a
 * mesh's plan: "cuda:N" for the GPU backend on device N (its workers
 * then spread over the devices after N), else @be's name.  Free it. */
gchar       *pp_backend_spec       (const PpBackend * be);
/* Why the last "auto" did not pick the GPU backend although this build has
 * one (its CUDA error, say), or NULL when it did or the build has none.
 * Owned by the library. */
const gchar *pp_backend_auto_reason (void);
/* TRUE when this build has the CUDA backend. */
gboolean     pp_backend_have_cuda  (void);
/* The CUDA devices this process sees: 0 without the CUDA backend or a
 * driver. */
gint         pp_backend_cuda_devices (void);
/* pp_backend_get (NULL): $PPDIFFUSE_BACKEND, else auto; aborts with the
 * error when the variable names no backend.  For tests and benchmarks. */
PpBackend   *pp_backend_default    (void);
/* The plain CPU backend (never fails). */
PpBackend   *pp_backend_cpu        (void);
/* The names pp_backend_get accepts, comma-separated, for help texts. */
const gchar *pp_backend_names      (void);
const gchar *pp_backend_name       (const PpBackend * be);
const gchar *pp_backend_device     (const PpBackend * be);
/* The backend's choices among its ways of computing that change the bits
 * of results, as the environment made them ("attention=fused
 * conv-algo=heuristic …" on cuda), or "none" (the CPU backends). */
const gchar *pp_backend_ways       (const PpBackend * be);

/* Failures inside ops.  By default a failed call inside an op (a device
 * out of memory, a library's error) ends the process with a message
 * naming it: ops return void, and a clear crash beats garbage.  A process
 * whose life is not the backend's to end (an application holding the
 * element, rank 0) keeps them instead: the first failure is kept and the
 * backend halted, running no more work until it recovers, and whoever
 * issued the work asks pp_backend_check after it, before using any
 * result.  Idempotent; from then on for the process. */
void         pp_backend_keep_failures (PpBackend * be);
/* The failures kept so far and the recoveries from them: a caller takes
 * it before its work and hands it to pp_backend_check after. */
guint        pp_backend_failures   (PpBackend * be);
/* TRUE when no failure was kept nor recovered from since
 * pp_backend_failures returned @since and @be is not halted; else FALSE
 * with the failure (its code:
 * PP_ERROR_RESOURCE for a device out of memory, PP_ERROR_DEVICE for a
 * runtime's or library's error). */
gboolean     pp_backend_check      (PpBackend * be, guint since,
                                    GError ** error);
/* Takes a halted @be back into use: what the failure may have cut short
 * is dropped and what it holds for reuse goes back to the device
 * (PpBackendMemory.trim), the failure is dropped and the backend runs
 * work again.  TRUE, with the failure's message in @what (when not NULL;
 * free it), when it was halted.  Work on @be must not overlap it, or
 * learns from pp_backend_check that it did. */
gboolean     pp_backend_recover    (PpBackend * be, gchar ** what);
/* Gives back to the device what @be keeps of freed buffers for reuse:
 * where a model was freed (a stream stopped), so that an application
 * holding a stopped element holds no device memory for it. */
void         pp_backend_give_back  (PpBackend * be);

/* @bytes of @be's device memory, starting on a multiple of 256 bytes on
 * every backend; NULL with @error when they do not fit. */
gpointer     pp_backend_alloc      (PpBackend * be, gsize bytes,
                                    GError ** error);
void         pp_backend_free       (PpBackend * be, gpointer mem);
void         pp_backend_upload     (PpBackend * be, gpointer dst,
                                    gconstpointer src, gsize bytes);
void         pp_backend_download   (PpBackend * be, gpointer dst,
                                    gconstpointer src, gsize bytes);
void         pp_backend_copy       (PpBackend * be, gpointer dst,
                                    gconstpointer src, gsize bytes);
void         pp_backend_fill       (PpBackend * be, gpointer dst, float value,
                                    gsize n);
/* @src's values (F32, F16 or BF16) downloaded into host floats @dst,
 * widened; and host floats @src uploaded into @dst, rounded to its dtype:
 * for host code that works in float32 beside activations of any dtype. */
void         pp_backend_download_floats (PpBackend * be, float * dst,
                                    PpView src);
void         pp_backend_upload_floats (PpBackend * be, PpOut dst,
                                    const float * src);
void         pp_backend_synchronize (PpBackend * be);
/* The stream the backend enqueues its work on (a cudaStream_t for cuda),
 * as an opaque pointer; NULL for the CPU backends, whose ops return when
 * done. */
gpointer     pp_backend_stream     (PpBackend * be);
/* Makes the backend's device the calling thread's current one (what
 * runtimes that work on "the current device", such as NCCL, need); a
 * no-op on the CPU backends. */
void         pp_backend_make_current (PpBackend * be);
/* @n float32 weights on the device, stored as @dtype (F32, F16, BF16),
 * as a view for the ops that read them (its dtype is how the backend
 * stored them; data NULL with @error on failure); *@owned is set to what
 * pp_backend_free must release with the model (NULL when the backend uses
 * @src itself).  A backend that computes in float32 on host memory gets
 * an F32 copy rounded to @dtype's precision, so that it computes what a
 * 16-bit device would. */
PpView       pp_backend_upload_weights (PpBackend * be, const float * src,
                                    gsize n, PpDType dtype, gpointer * owned,
                                    GError ** error);

/* Graphs (PpBackendMemory.graph_*): whether @be has them; capture, launch
 * and free. */
gboolean     pp_backend_has_graphs  (const PpBackend * be);
gpointer     pp_backend_graph_capture (PpBackend * be, PpGraphFunc func,
                                    gpointer data, GError ** error);
gboolean     pp_backend_graph_launch (PpBackend * be, gpointer graph,
                                    GError ** error);
void         pp_backend_graph_free  (PpBackend * be, gpointer graph);
/* A graph's nodes and kernels (PpBackendMemory.graph_nodes); FALSE where
 * the backend does not say. */
gboolean     pp_backend_graph_nodes (PpBackend * be, gpointer graph,
                                    guint * nodes, guint * kernels);

/* Kernel traces, a device backend's (FALSE or NULL with @error where the
 * backend has none or cannot: the CPU backends, a CUDA backend without
 * its tracing library).  pp_backend_trace_enable starts recording every
 * kernel the process runs on the device; it comes before the work to
 * trace is made, a graph's capture included, and once it is on, the
 * device's figures include what recording costs.  pp_backend_trace then
 * waits for the device, runs @func (which issues work on @be), waits for
 * that work, and returns each kernel that ran in between (PpKernelSpan,
 * by start; g_array_unref frees their names). */
gboolean     pp_backend_trace_enable (PpBackend * be, GError ** error);
GArray      *pp_backend_trace       (PpBackend * be, PpGraphFunc func,
                                    gpointer data, GError ** error);

/* Whether the models run a batch's samples apart where a sample's bytes
 * could depend on its batch (the CPU backends), or the batch as one (a
 * GPU); the setter is for tests that run the other way on the CPU. */
gboolean     pp_backend_samples_apart (const PpBackend * be);
void         pp_backend_set_samples_apart (PpBackend * be, gboolean apart);
/* Whether the models bind projections of one input as one stacked
 * product (PpBackend.stacks_projections: a GPU); the setter is for tests
 * that run the stacked products on the CPU (models built after it). */
gboolean     pp_backend_stacks_projections (const PpBackend * be);
void         pp_backend_set_stacks_projections (PpBackend * be,
                                    gboolean stacks);
/* Whether a shape's first run makes plans that later runs reuse
 * (PpBackend.plans_shapes: a GPU), so that the workers warm every batch
 * size before the stream; the setter is for tests that do so on the
 * CPU. */
gboolean     pp_backend_plans_shapes (const PpBackend * be);
void         pp_backend_set_plans_shapes (PpBackend * be, gboolean plans);

/* The dtype a model whose weights are stored as @weights keeps its
 * activations in: the weights' 16-bit dtype on a backend whose ops compute
 * on 16-bit activations end to end (PpBackend.act_follows_weights:
 * cpu-strict, which runs the 16-bit graph on the host, and cuda unless
 * $PPDIFFUSE_CUDA_ACTIVATIONS=f32), else float32. */
PpDType      pp_backend_act_dtype  (const PpBackend * be, PpDType weights);

/* The layout the UNet and the VAEs keep their spatial activations of
 * dtype @act in on @be (between their first and last convolutions):
 * $PPDIFFUSE_ACT_LAYOUT, "nchw" (channels first, the CPU kernels' own
 * layout) or "nhwc" (channels last: a transformer's tokens are its rows,
 * as 16-bit tensor cores read convolutions); unset, the backend's for
 * 16-bit activations (PpBackend.act16_layout: NHWC on cuda, NCHW on the
 * CPU backends) and NCHW for float32 ones.  Every backend takes
 * both (a spatial op reads each view as its layout says); pp_backend_get
 * refuses any other value. */
#define PP_ACT_LAYOUT_ENV "PPDIFFUSE_ACT_LAYOUT"
PpLayout     pp_backend_act_layout (const PpBackend * be, PpDType act);
/* "nchw", "nhwc". */
const gchar *pp_layout_name        (PpLayout layout);

/* Device bytes allocated so far (every backend together), for the
 * per-frame allocation measurements of benchmarks and tests. */
guint64      pp_backend_allocated_bytes (void);

/* Device tensors: pp_tensor_new on @backend's device (uninitialised),
 * counted in pp_backend_allocated_bytes. */
PpTensor    *pp_tensor_new_on      (PpBackend * backend, const gchar * name,
                                    PpDType dtype, guint ndim,
                                    const gint64 * shape, GError ** error);
/* Host @src → device @dst and back; dtypes and sizes must agree. */
gboolean     pp_tensor_upload      (PpTensor * dst, const PpTensor * src,
                                    GError ** error);
gboolean     pp_tensor_download    (PpTensor * dst, const PpTensor * src,
                                    GError ** error);
/* @src into @dst, whichever side each is on: a host copy, an upload, a
 * download, or a device-to-device copy on their backend (both tensors on
 * one backend); dtypes and sizes must agree. */
gboolean     pp_tensor_transfer    (PpTensor * dst, const PpTensor * src,
                                    GError ** error);

/* A pool of device memory a model's activations are cut from (pp-pool.c):
 * a request takes the smallest free block of the pool's segments it fits,
 * a released block joins its free neighbours, and the segments stay the
 * pool's until it is freed (a captured graph runs on them).  So once a
 * model has run one forward at its largest shape, forwards at that shape
 * or smaller ones allocate nothing.  Thread-safe (rank 0 encodes and
 * decodes on two threads). */
typedef struct _PpPool PpPool;

/* A model's pool, whose activations are stored as @act_dtype (F32, F16,
 * BF16: pp_backend_act_dtype). */
PpPool      *pp_pool_new           (PpBackend * be, PpDType act_dtype);
void         pp_pool_free          (PpPool * pool);
PpBackend   *pp_pool_backend       (PpPool * pool);
PpDType      pp_pool_act_dtype     (PpPool * pool);
/* When the device is out of memory: aborts (as g_malloc does), or where
 * the process keeps failures (pp_backend_keep_failures) halts the backend
 * and returns a stand-in that no work touches. */
gpointer     pp_pool_acquire       (PpPool * pool, gsize bytes);
void         pp_pool_release       (PpPool * pool, gpointer mem, gsize bytes);
/* What pools hold, summed over several (a model's networks'): their
 * segments' device bytes (in use or free), and the most of them each had
 * in use at once. */
typedef struct
{
  guint64 held, peak;
} PpPoolBytes;
/* Adds @pool's to @sum. */
void         pp_pool_count         (PpPool * pool, PpPoolBytes * sum);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (PpPool, pp_pool_free)

G_END_DECLS
