/* tests/kernels/cuda-emu: the CUDA runtime, cuBLAS, cuBLASLt and cuDNN
 * calls of the CUDA backend (the C files of kernels/cuda), on the CPU, so
 * that the backend's host code runs where no GPU is: device memory is host
 * memory, a stream holds each call (the emulated kernels', emu.cc,
 * likewise) until the host waits for it (emu-graph.h, "Deferred streams":
 * an event has passed once its stream ran the work before it), or, being
 * captured, makes it a node of the graph (its arguments copied, as a
 * graph's node keeps them), and the libraries' products and
 * convolutions are plain loops that sum in float32 and round once to the
 * output's type.  A synchronize of a stream being captured invalidates
 * the capture, as CUDA does.  cuDNN's graph API runs a convolution's
 * graph and refuses every other (fused attention's), so attention takes
 * its GEMM way.
 *
 * Written against the toolkit's own headers, so that every signature is
 * the one the backend was compiled against.  What is emulated is what the
 * documentation says of each call as the backend uses it, not more: a
 * call outside that (a layout, type or mode the backend never asks for)
 * fails with the library's "not supported", loudly.
 *
 * $PP_CUDA_EMU_REFUSE (a comma-separated list) makes the libraries refuse
 * what a real one may, for the backend's answers to run:
 *   lt-heuristic   cuBLASLt's heuristics offer no algorithm;
 *   lt-matmul      cuBLASLt refuses to run every product its heuristics
 *                  offered an algorithm for (not supported);
 *   conv-algo      cuDNN refuses to run the algorithm it ranks first
 *                  (IMPLICIT_PRECOMP_GEMM; it ranks IMPLICIT_GEMM next);
 *   conv-fused     cuDNN refuses every fused convolution, bias and
 *                  activation (cudnnConvolutionBiasActivationForward);
 *   conv-graph     cuDNN's heuristics offer no engine for a convolution's
 *                  operation graph;
 *   conv-graph-mode-a
 *                  cuDNN's heuristics in mode A offer no engine for a
 *                  convolution's operation graph (its fallback mode
 *                  does);
 *   conv-graph-internal
 *                  cuDNN answers an internal error to every run of a
 *                  convolution's operation graph;
 *   lt-fault       the second algorithm cuBLASLt's heuristics offer
 *                  faults on the device (an illegal address): its product
 *                  is queued, and from the next synchronize on every
 *                  synchronize and cudaGetLastError answer the fault, as a
 *                  device whose context is lost does.
 * $PP_CUDA_EMU_DEVICE_MB, when set, is the device's memory in MiB (16 GiB
 * by default): a cudaMalloc that would take the memory allocated and not
 * freed past it fails with cudaErrorMemoryAllocation, as a full device
 * answers; pp_cuda_emu_fail_malloc (below) makes chosen calls fail so.
 * $PP_CUDA_EMU_FAULT_KERNEL, when set, is a kernel name's prefix: the
 * first such kernel to run faults instead (an illegal address), when it
 * runs, not when it is launched: queued, the fault comes to light at the
 * host's next wait for its stream, as on a device (emu.cc).
 * $PP_CUDA_EMU_DEVICES, when set, is how many devices the process sees
 * (one by default): a mesh's ranks then take them as on a host with that
 * many GPUs, and say which they took.
 * $PP_CUDA_EMU_SM and $PP_CUDA_EMU_NO_KERNEL_IMAGE: the device's compute
 * capability, and a device no kernel of the build runs on (emu-graph.h,
 * emu_device_sm).
 * $PP_CUDA_EMU_SHAPES_ONLY, when set, checks and counts every launch and
 * library call but computes nothing (emu-graph.h, emu_shapes_only).
 * $PP_CUDA_EMU_WAITS and $PP_CUDA_EMU_MEMORY, when set, report at exit
 * the host's waits by the kind of event, and the most device memory the
 * process held (report_at_exit). */
#define _GNU_SOURCE             /* program_invocation_short_name */
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <errno.h>
#include <glib.h>
#include <gmodule.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "emu-graph.h"
#include "include/emu-asan.h"
#include "pp-dtype-math.h"

/* The device the emulation describes: sm_90 (what the backend's choices
 * are made for; $PP_CUDA_EMU_SM another, emu_device_sm), 16 GiB. */
#define EMU_DEVICE_NAME "CUDA emulation on the CPU"
#define EMU_DEVICE_BYTES ((size_t) 16 << 30)
#define EMU_VERSION 13000       /* CUDA 13.0, driver and runtime */
#define EMU_CUDNN_VERSION 91900
#define EMU_CUBLASLT_VERSION 130000
#define EMU_ALIGN 256
/* Blocks of this size and more, device or pinned, are mapped on their own
 * rather than taken from malloc: their pages are the kernel's zero pages
 * until written, as a driver's fresh memory is.  malloc fills each block
 * it hands out with a byte when MALLOC_PERTURB_ is set, as meson test
 * sets it, which touched every page of the backend's staging buffers and
 * cuBLAS workspace (about 100 MiB) at each process's start: 0.5 s of
 * a tiny pipeline's 0.8 s here, and 40 % of the emulated element tests'.
 * Smaller blocks (most of the ops tests' tensors) still come filled.
 * Under AddressSanitizer every block comes from its allocator, whose
 * redzones catch a kernel's access past a block's end. */
#define EMU_MAPPED_BYTES ((size_t) 1 << 20)

/* Per host thread, as the runtime's. */
static __thread cudaError_t last_error;
/* A fault of the device's (lt-fault, or a kernel's: emu.cc): the
 * process's, and for good. */
static cudaError_t
sticky (void)
{
  return (cudaError_t) emu_device_faulted ();
}

static cudaError_t
fail (cudaError_t e)
{
  last_error = e;
  return e;
}

static void
unsupported (const char *what)
{
  fprintf (stderr, "cuda-emu: %s is not emulated\n", what);
}

/* Whether $PP_CUDA_EMU_REFUSE names @what. */
static gboolean
refuses (const char *what)
{
  const char *list = g_getenv ("PP_CUDA_EMU_REFUSE");
  g_auto (GStrv) names = NULL;

  if (list == NULL)
    return FALSE;
  names = g_strsplit (list, ",", -1);
  return g_strv_contains ((const gchar * const *) names, what);
}

/* Values */

static float
load (const void *p, size_t i, int type)
{
  switch (type) {
    case CUDA_R_32F:
      return ((const float *) p)[i];
    case CUDA_R_16F:
      return pp_f16_to_f32 (((const uint16_t *) p)[i]);
    case CUDA_R_16BF:
      return pp_bf16_to_f32 (((const uint16_t *) p)[i]);
    default:
      g_error ("cuda-emu: data type %d", type);
  }
}

static void
store (void *p, size_t i, int type, float v)
{
  switch (type) {
    case CUDA_R_32F:
      ((float *) p)[i] = v;
      break;
    case CUDA_R_16F:
      ((uint16_t *) p)[i] = pp_f32_to_f16 (v);
      break;
    case CUDA_R_16BF:
      ((uint16_t *) p)[i] = pp_f32_to_bf16 (v);
      break;
    default:
      g_error ("cuda-emu: data type %d", type);
  }
}

static gboolean
known_type (int type)
{
  return type == CUDA_R_32F || type == CUDA_R_16F || type == CUDA_R_16BF;
}

/* The runtime */

/* emu.cc reads a stream as its EmuStreamState (the first member). */
struct CUstream_st
{
  EmuStreamState state;
};

/* The graph @stream is capturing, or NULL. */
static EmuGraph *
capturing (cudaStream_t stream)
{
  return stream != NULL ? stream->state.capture : NULL;
}

/* Runs @run (@args, @bytes of them) now, or records it in the graph
 * @stream is capturing, or, deferred, queues it on @stream (a copy of
 * @args, freed with the graph or once it ran).  Work on the legacy default
 * stream runs after every other stream's. */
static void
run_or_record (cudaStream_t stream, void (*run) (void *), const void *args,
    size_t bytes)
{
  EmuGraph *graph = capturing (stream);

  if (graph != NULL) {
    emu_graph_add (graph, run, g_memdup2 (args, bytes), g_free);
  } else if (stream != NULL && emu_deferred ()) {
    emu_stream_enqueue (&stream->state, run, g_memdup2 (args, bytes), g_free);
  } else {
    emu_run_now (run, (void *) args);
  }
}

/* Deferred, where an event was last recorded: it has passed once @stream
 * ran @position nodes (NULL: it has).  Its time is the host's monotonic
 * clock when its stream reached it (a stamp queued with the record, which
 * holds a reference: the event may be destroyed before its stream gets
 * there); a stamp of an earlier record does not count.  @generation,
 * @stamped and @time_us are under events_lock. */
struct CUevent_st
{
  int flags;
  EmuStreamState *stream;
  unsigned long position;
  gint refs;
  guint generation;
  gboolean stamped;
  gint64 time_us;
};

static GMutex events_lock;

/* Pinned host memory (cudaHostAlloc): a deferred copy between it and the
 * device waits in its stream's queue; one from or to pageable memory is
 * made before the call returns, as CUDA makes it. */
static GMutex pinned_lock;
static GHashTable *pinned;      /* start → its size */

static gboolean
is_pinned (const void *p)
{
  GHashTableIter it;
  gpointer key, value;
  gboolean found = FALSE;

  g_mutex_lock (&pinned_lock);
  if (pinned != NULL) {
    g_hash_table_iter_init (&it, pinned);
    while (!found && g_hash_table_iter_next (&it, &key, &value))
      found = (const char *) p >= (const char *) key
          && (const char *) p < (const char *) key + GPOINTER_TO_SIZE (value);
  }
  g_mutex_unlock (&pinned_lock);
  return found;
}

cudaError_t
cudaGetLastError (void)
{
  cudaError_t e = last_error;
  cudaError_t launch = (cudaError_t) emu_take_launch_error ();

  last_error = cudaSuccess;
  if (sticky () != cudaSuccess)
    return sticky ();
  return e != cudaSuccess ? e : launch;
}

const char *
cudaGetErrorName (cudaError_t error)
{
  switch (error) {
    case cudaSuccess:
      return "cudaSuccess";
    case cudaErrorInvalidValue:
      return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation:
      return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration:
      return "cudaErrorInvalidConfiguration";
    case cudaErrorNotSupported:
      return "cudaErrorNotSupported";
    case cudaErrorNoKernelImageForDevice:
      return "cudaErrorNoKernelImageForDevice";
    case cudaErrorNotReady:
      return "cudaErrorNotReady";
    case cudaErrorIllegalState:
      return "cudaErrorIllegalState";
    case cudaErrorStreamCaptureUnsupported:
      return "cudaErrorStreamCaptureUnsupported";
    case cudaErrorStreamCaptureInvalidated:
      return "cudaErrorStreamCaptureInvalidated";
    case cudaErrorIllegalAddress:
      return "cudaErrorIllegalAddress";
    default:
      return "cudaErrorUnknown";
  }
}

const char *
cudaGetErrorString (cudaError_t error)
{
  return error == cudaSuccess ? "no error" : "emulated failure";
}

cudaError_t
cudaDriverGetVersion (int *version)
{
  *version = EMU_VERSION;
  return cudaSuccess;
}

cudaError_t
cudaRuntimeGetVersion (int *version)
{
  *version = EMU_VERSION;
  return cudaSuccess;
}

/* The devices the process sees: $PP_CUDA_EMU_DEVICES (1 to 16), else
 * one.  They share one memory and one set of streams: what tells them
 * apart is the index a backend was made for. */
static int
emu_devices (void)
{
  const char *n = g_getenv ("PP_CUDA_EMU_DEVICES");
  guint64 count;

  if (n == NULL || *n == '\0')
    return 1;
  if (!g_ascii_string_to_unsigned (n, 10, 1, 16, &count, NULL))
    g_error ("PP_CUDA_EMU_DEVICES=%s: expected 1 to 16", n);
  return (int) count;
}

cudaError_t
cudaGetDeviceCount (int *count)
{
  *count = emu_devices ();
  return cudaSuccess;
}

cudaError_t
cudaSetDevice (int device)
{
  return device >= 0 && device < emu_devices () ? cudaSuccess
      : fail (cudaErrorInvalidDevice);
}

/* The device's memory, and what cudaMalloc gave out and cudaFree has
 * not taken back (start → size), under device_lock. */
static GMutex device_lock;
static GHashTable *device_blocks;
static size_t device_used;
static size_t device_peak;      /* the most device_used has been */

static size_t
device_bytes (void)
{
  const char *mb = g_getenv ("PP_CUDA_EMU_DEVICE_MB");

  return mb != NULL && *mb != '\0'
      ? (size_t) g_ascii_strtoull (mb, NULL, 10) << 20 : EMU_DEVICE_BYTES;
}

cudaError_t
cudaGetDeviceProperties (struct cudaDeviceProp *prop, int device)
{
  if (device < 0 || device >= emu_devices ())
    return fail (cudaErrorInvalidDevice);
  memset (prop, 0, sizeof *prop);
  g_strlcpy (prop->name, EMU_DEVICE_NAME, sizeof prop->name);
  prop->major = emu_device_sm () / 10;
  prop->minor = emu_device_sm () % 10;
  prop->totalGlobalMem = device_bytes ();
  prop->multiProcessorCount = EMU_DEVICE_SMS;
  return cudaSuccess;
}

/* cudaMalloc's calls so far, and the calls that are to fail
 * [malloc_fails_from, malloc_fails_end), under device_lock. */
static guint64 malloc_calls, malloc_fails_from, malloc_fails_end;

/* For tests that fail allocations of some work, found by name in the
 * loaded module: the calls so far; and @count calls from the @n-th call
 * from now (n > 0) made to fail as a full device's do (G_MAXUINT64: every
 * call from then on; 0: none). */
G_MODULE_EXPORT guint64
pp_cuda_emu_malloc_calls (void)
{
  guint64 calls;

  g_mutex_lock (&device_lock);
  calls = malloc_calls;
  g_mutex_unlock (&device_lock);
  return calls;
}

G_MODULE_EXPORT void
pp_cuda_emu_fail_malloc (guint64 n, guint64 count)
{
  g_mutex_lock (&device_lock);
  malloc_fails_from = malloc_calls + n;
  malloc_fails_end = count > G_MAXUINT64 - malloc_fails_from
      ? G_MAXUINT64 : malloc_fails_from + count;
  g_mutex_unlock (&device_lock);
}

/* A block of device or pinned memory (EMU_MAPPED_BYTES), NULL when the
 * host has no memory for it; block_free takes its size. */
static void *
block_new (size_t size)
{
  void *p = NULL;

#ifndef EMU_ASAN
  if (size >= EMU_MAPPED_BYTES) {
    p = mmap (NULL, size, PROT_READ | PROT_WRITE,
        MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p != MAP_FAILED ? p : NULL;
  }
#endif
  return posix_memalign (&p, EMU_ALIGN, MAX (size, 1)) == 0 ? p : NULL;
}

static void
block_free (void *p, size_t size)
{
#ifndef EMU_ASAN
  if (p != NULL && size >= EMU_MAPPED_BYTES) {
    munmap (p, size);
    return;
  }
#endif
  free (p);
}

cudaError_t
cudaMalloc (void **ptr, size_t size)
{
  gboolean fits;

  *ptr = NULL;
  g_mutex_lock (&device_lock);
  malloc_calls++;
  fits = size <= device_bytes () - MIN (device_used, device_bytes ())
      && (malloc_calls < malloc_fails_from
      || malloc_calls >= malloc_fails_end);
  if (fits) {
    device_used += size;
    device_peak = MAX (device_peak, device_used);
  }
  g_mutex_unlock (&device_lock);
  if (!fits)
    return fail (cudaErrorMemoryAllocation);
  *ptr = block_new (size);
  if (*ptr == NULL) {
    g_mutex_lock (&device_lock);
    device_used -= size;
    g_mutex_unlock (&device_lock);
    *ptr = NULL;
    return fail (cudaErrorMemoryAllocation);
  }
  g_mutex_lock (&device_lock);
  if (device_blocks == NULL)
    device_blocks = g_hash_table_new (g_direct_hash, g_direct_equal);
  g_hash_table_insert (device_blocks, *ptr, GSIZE_TO_POINTER (size));
  g_mutex_unlock (&device_lock);
  return cudaSuccess;
}

/* Synchronizes the device first, as CUDA's does. */
cudaError_t
cudaFree (void *ptr)
{
  gpointer size = NULL;
  gboolean found = FALSE;

  emu_drain_all ();
  g_mutex_lock (&pinned_lock);
  if (pinned != NULL)
    found = g_hash_table_steal_extended (pinned, ptr, NULL, &size);
  g_mutex_unlock (&pinned_lock);
  g_mutex_lock (&device_lock);
  if (!found && device_blocks != NULL
      && g_hash_table_steal_extended (device_blocks, ptr, NULL, &size))
    device_used -= GPOINTER_TO_SIZE (size);
  g_mutex_unlock (&device_lock);
  block_free (ptr, GPOINTER_TO_SIZE (size));
  return cudaSuccess;
}

cudaError_t
cudaHostAlloc (void **ptr, size_t size, unsigned int flags)
{
  /* Host memory: not the device's to count. */
  const cudaError_t e = (*ptr = block_new (size)) != NULL
      ? cudaSuccess : fail (cudaErrorMemoryAllocation);

  if (e == cudaSuccess) {
    g_mutex_lock (&pinned_lock);
    if (pinned == NULL)
      pinned = g_hash_table_new (NULL, NULL);
    g_hash_table_insert (pinned, *ptr, GSIZE_TO_POINTER (size));
    g_mutex_unlock (&pinned_lock);
  }
  return e;
}

typedef struct
{
  void *dst;
  const void *src;
  size_t dpitch, spitch, width, height;
} Copy2D;

static void
copy_2d (void *data)
{
  const Copy2D *c = data;

  for (size_t r = 0; r < c->height; r++)
    memmove ((char *) c->dst + r * c->dpitch,
        (const char *) c->src + r * c->spitch, c->width);
}

/* Deferred, a copy from or to pageable host memory is made before the
 * call returns, after the work before it on @stream (CUDA stages such a
 * copy through memory of its own). */
static gboolean
copy_at_once (cudaStream_t stream, const void *dst, const void *src,
    enum cudaMemcpyKind kind)
{
  if (!emu_deferred () || stream == NULL || capturing (stream) != NULL)
    return FALSE;
  if ((kind == cudaMemcpyHostToDevice && !is_pinned (src))
      || (kind == cudaMemcpyDeviceToHost && !is_pinned (dst))) {
    emu_stream_drain (&stream->state, G_MAXULONG);
    return TRUE;
  }
  return FALSE;
}

cudaError_t
cudaMemcpyAsync (void *dst, const void *src, size_t count,
    enum cudaMemcpyKind kind, cudaStream_t stream)
{
  const Copy2D c = { dst, src, count, count, count, 1 };

  if (copy_at_once (stream, dst, src, kind))
    copy_2d ((void *) &c);
  else
    run_or_record (stream, copy_2d, &c, sizeof c);
  return cudaSuccess;
}

typedef struct
{
  void *dst;
  int value;
  size_t count;
} Set;

static void
set_bytes (void *data)
{
  const Set *t = data;

  memset (t->dst, t->value, t->count);
}

cudaError_t
cudaMemsetAsync (void *dst, int value, size_t count, cudaStream_t stream)
{
  const Set t = { dst, value, count };

  run_or_record (stream, set_bytes, &t, sizeof t);
  return cudaSuccess;
}

cudaError_t
cudaMemcpy2DAsync (void *dst, size_t dpitch, const void *src,
    size_t spitch, size_t width, size_t height, enum cudaMemcpyKind kind,
    cudaStream_t stream)
{
  const Copy2D c = { dst, src, dpitch, spitch, width, height };

  if (width > dpitch || width > spitch)
    return fail (cudaErrorInvalidPitchValue);
  if (copy_at_once (stream, dst, src, kind))
    copy_2d ((void *) &c);
  else
    run_or_record (stream, copy_2d, &c, sizeof c);
  return cudaSuccess;
}

cudaError_t
cudaStreamCreateWithFlags (cudaStream_t * stream, unsigned int flags)
{
  *stream = g_new0 (struct CUstream_st, 1);
  emu_stream_register (&(*stream)->state);
  return cudaSuccess;
}

cudaError_t
cudaStreamSynchronize (cudaStream_t stream)
{
  /* Of a stream being captured: CUDA refuses it and invalidates the
   * capture. */
  if (capturing (stream) == NULL) {
    if (stream != NULL)
      emu_stream_drain (&stream->state, G_MAXULONG);
    else
      emu_drain_all ();
    return sticky ();
  }
  emu_graph_invalidate (capturing (stream));
  return fail (cudaErrorStreamCaptureUnsupported);
}

typedef struct
{
  cudaHostFn_t fn;
  void *data;
} HostCall;

static void
host_call (void *data)
{
  const HostCall *h = data;

  h->fn (h->data);
}

/* The function now, or deferred in its turn.  Captured host functions are
 * not emulated (the backend launches none there). */
cudaError_t
cudaLaunchHostFunc (cudaStream_t stream, cudaHostFn_t fn, void *data)
{
  const HostCall h = { fn, data };

  if (capturing (stream) != NULL) {
    emu_graph_invalidate (capturing (stream));
    return fail (cudaErrorStreamCaptureUnsupported);
  }
  run_or_record (stream, host_call, &h, sizeof h);
  return cudaSuccess;
}

typedef struct
{
  EmuStreamState *stream;
  unsigned long position;
} Wait;

static void
wait_call (void *data)
{
  const Wait *w = data;

  emu_stream_drain (w->stream, w->position);
}

/* Deferred: @stream's later work waits for the event's stream to reach
 * the event, as recorded now (a later record does not move the wait). */
cudaError_t
cudaStreamWaitEvent (cudaStream_t stream, cudaEvent_t event,
    unsigned int flags)
{
  const Wait w = { event->stream, event->position };

  if (w.stream != NULL && capturing (stream) == NULL)
    run_or_record (stream, wait_call, &w, sizeof w);
  return cudaSuccess;
}

/* Host waits for events, by how the event makes the thread wait: a
 * blocking-sync event's sleeps, any other's spins.  At exit, with
 * $PP_CUDA_EMU_WAITS set, on stderr ("emulated event waits
 * (PROGRAM): N sleeping, M spinning"): which way a program's uploads and
 * downloads waited. */
static gint waits_sleeping, waits_spinning;

/* At exit, with $PP_CUDA_EMU_MEMORY set, the most device memory the
 * process held at once, on stderr ("emulated device memory (PROGRAM):
 * peak N MiB, M MiB held at exit, K allocations"): what a model and its buffers take
 * of a device, its context's own and the libraries' kernels aside. */
static void __attribute__ ((destructor))
report_at_exit (void)
{
  if (g_getenv ("PP_CUDA_EMU_WAITS") != NULL)
    fprintf (stderr, "emulated event waits (%s): %d sleeping, %d "
        "spinning\n", program_invocation_short_name,
        g_atomic_int_get (&waits_sleeping),
        g_atomic_int_get (&waits_spinning));
  if (g_getenv ("PP_CUDA_EMU_MEMORY") != NULL) {
    g_mutex_lock (&device_lock);
    fprintf (stderr, "emulated device memory (%s): peak %.1f MiB, %.1f MiB "
        "held at exit, %" G_GUINT64_FORMAT " allocations\n",
        program_invocation_short_name, device_peak / 1048576.0,
        device_used / 1048576.0, malloc_calls);
    g_mutex_unlock (&device_lock);
  }
}

cudaError_t
cudaEventCreateWithFlags (cudaEvent_t * event, unsigned int flags)
{
  /* As the runtime: a flag it does not know is refused. */
  if (flags & ~(unsigned int) (cudaEventBlockingSync
          | cudaEventDisableTiming | cudaEventInterprocess))
    return fail (cudaErrorInvalidValue);
  *event = g_new0 (struct CUevent_st, 1);
  (*event)->flags = (int) flags;
  (*event)->refs = 1;
  return cudaSuccess;
}

static void
event_unref (cudaEvent_t event)
{
  if (g_atomic_int_dec_and_test (&event->refs))
    g_free (event);
}

cudaError_t
cudaEventDestroy (cudaEvent_t event)
{
  event_unref (event);
  return cudaSuccess;
}

typedef struct
{
  cudaEvent_t event;
  guint generation;
} Stamp;

static void
stamp_call (void *data)
{
  const Stamp *st = data;

  g_mutex_lock (&events_lock);
  if (st->event->generation == st->generation) {
    st->event->time_us = g_get_monotonic_time ();
    st->event->stamped = TRUE;
  }
  g_mutex_unlock (&events_lock);
  event_unref (st->event);
}

cudaError_t
cudaEventRecord (cudaEvent_t event, cudaStream_t stream)
{
  Stamp st = { event, 0 };

  g_mutex_lock (&events_lock);
  st.generation = ++event->generation;
  event->stamped = FALSE;
  g_mutex_unlock (&events_lock);
  if (capturing (stream) != NULL) {
    /* Not timed in a graph: it has passed when recorded. */
    g_atomic_int_inc (&event->refs);
    stamp_call (&st);
    event->stream = NULL;
    return cudaSuccess;
  }
  /* The stamp first, so that the event's position includes it. */
  g_atomic_int_inc (&event->refs);
  run_or_record (stream, stamp_call, &st, sizeof st);
  if (stream != NULL) {
    event->stream = &stream->state;
    event->position = emu_stream_position (&stream->state);
  } else {
    event->stream = NULL;
  }
  return cudaSuccess;
}

cudaError_t
cudaEventSynchronize (cudaEvent_t event)
{
  g_atomic_int_inc (event->flags & cudaEventBlockingSync ? &waits_sleeping
      : &waits_spinning);
  if (event->stream != NULL)
    emu_stream_drain (event->stream, event->position);
  return sticky ();
}

cudaError_t
cudaEventElapsedTime (float *ms, cudaEvent_t start, cudaEvent_t end)
{
  gboolean recorded, stamped;

  if ((start->flags | end->flags) & cudaEventDisableTiming)
    return fail (cudaErrorInvalidResourceHandle);
  g_mutex_lock (&events_lock);
  recorded = start->generation > 0 && end->generation > 0;
  stamped = start->stamped && end->stamped;
  *ms = stamped ? (float) (end->time_us - start->time_us) / 1e3f : 0.0f;
  g_mutex_unlock (&events_lock);
  if (!recorded)
    return fail (cudaErrorInvalidResourceHandle);
  /* As CUDA: not yet reached by its stream. */
  if (!stamped)
    return fail (cudaErrorNotReady);
  return cudaSuccess;
}

/* Graphs: a captured stream's calls, run in order at each launch. */
cudaError_t
cudaStreamBeginCapture (cudaStream_t stream, enum cudaStreamCaptureMode mode)
{
  if (stream == NULL || capturing (stream) != NULL)
    return fail (cudaErrorIllegalState);
  stream->state.capture = emu_graph_new ();
  return cudaSuccess;
}

cudaError_t
cudaStreamEndCapture (cudaStream_t stream, cudaGraph_t * graph)
{
  EmuGraph *g = capturing (stream);

  *graph = NULL;
  if (g == NULL)
    return fail (cudaErrorIllegalState);
  stream->state.capture = NULL;
  if (!emu_graph_valid (g)) {
    emu_graph_unref (g);
    return fail (cudaErrorStreamCaptureInvalidated);
  }
  *graph = (cudaGraph_t) g;
  return cudaSuccess;
}

cudaError_t
cudaGraphInstantiate (cudaGraphExec_t * exec, cudaGraph_t graph,
    unsigned long long flags)
{
  emu_graph_ref ((EmuGraph *) graph);
  *exec = (cudaGraphExec_t) graph;
  return cudaSuccess;
}

static void
graph_call (void *data)
{
  emu_graph_run (*(EmuGraph **) data);
  emu_graph_unref (*(EmuGraph **) data);
}

cudaError_t
cudaGraphLaunch (cudaGraphExec_t exec, cudaStream_t stream)
{
  EmuGraph *graph = (EmuGraph *) exec;

  if (capturing (stream) != NULL)
    return fail (cudaErrorNotSupported);
  /* The launch keeps the graph until it ran, as CUDA lets an executable
   * graph be destroyed while a launch of it is pending. */
  emu_graph_ref (graph);
  run_or_record (stream, graph_call, &graph, sizeof graph);
  return cudaSuccess;
}

cudaError_t
cudaGraphGetNodes (cudaGraph_t graph, cudaGraphNode_t * nodes,
    size_t *num_nodes)
{
  const EmuGraph *g = (const EmuGraph *) graph;
  size_t n = emu_graph_size (g);

  if (nodes != NULL) {
    n = MIN (n, *num_nodes);
    for (size_t i = 0; i < n; i++)
      nodes[i] = (cudaGraphNode_t) emu_graph_node (g, i);
  }
  *num_nodes = n;
  return cudaSuccess;
}

cudaError_t
cudaGraphNodeGetType (cudaGraphNode_t node, enum cudaGraphNodeType *type)
{
  *type = emu_graph_node_is_launch (node) ? cudaGraphNodeTypeKernel
      : cudaGraphNodeTypeHost;
  return cudaSuccess;
}

cudaError_t
cudaGraphDestroy (cudaGraph_t graph)
{
  emu_graph_unref ((EmuGraph *) graph);
  return cudaSuccess;
}

cudaError_t
cudaGraphExecDestroy (cudaGraphExec_t exec)
{
  emu_graph_unref ((EmuGraph *) exec);
  return cudaSuccess;
}

/* Products */

/* x · y over @k values, summed in float32 in their order: the
 * libraries' own float copies, unchecked under AddressSanitizer
 * (emu-asan.h); the copying from device memory stays checked. */
EMU_UNCHECKED static float
dot (const float *x, const float *y, int k)
{
  float sum = 0.0f;

  for (int l = 0; l < k; l++)
    sum += x[l] * y[l];
  return sum;
}

/* The @rows × @k floats of a product's operand, row r holding the k
 * values its sum for output row (or column) r reads, in the order of k:
 * element (r, l) at @p's r · @ld + l with @rows_strided, else at
 * l · @ld + r.  Widened once, not once per output. */
static float *
widen_operand (const void *p, int type, long long ld, gboolean rows_strided,
    int rows, int k)
{
  float *w = g_new (float, (size_t) MAX (rows, 1) * MAX (k, 1));

  for (int r = 0; r < rows; r++)
    for (int l = 0; l < k; l++)
      w[(size_t) r * k + l] = load (p, rows_strided
          ? (size_t) r * ld + l : (size_t) l * ld + r, type);
  return w;
}

/* Column-major C [m, n] = alpha · op(A) [m, k] · op(B) [k, n] + beta · C,
 * summed in float32 in the order of k, rounded once to C's type.  C may be
 * D: each value is read before it is written. */
static void
gemm (int transa, int transb, int m, int n, int k, float alpha,
    const void *a, int atype, long long lda, const void *b, int btype,
    long long ldb, float beta, const void *c, int ctype, long long ldc,
    void *d, int dtype, long long ldd, const void *bias, int bias_type)
{
  /* op(A)'s rows and op(B)'s columns. */
  float *ar = widen_operand (a, atype, lda, transa, m, k);
  float *bc = widen_operand (b, btype, ldb, !transb, n, k);

  for (int j = 0; j < n; j++)
    for (int i = 0; i < m; i++) {
      float v = alpha * dot (ar + (size_t) i * k, bc + (size_t) j * k, k);

      if (beta != 0.0f)
        v += beta * load (c, (size_t) j * ldc + i, ctype);
      if (bias != NULL)
        v += load (bias, i, bias_type);
      store (d, (size_t) j * ldd + i, dtype, v);
    }
  g_free (ar);
  g_free (bc);
}

/* A cuBLAS product's arguments, the scalars' values copied. */
typedef struct
{
  int transa, transb, m, n, k;
  float alpha;
  const void *a;
  int atype;
  long long lda, a_stride_bytes;
  const void *b;
  int btype;
  long long ldb, b_stride_bytes;
  float beta;
  void *c;
  int ctype;
  long long ldc, c_stride_bytes;
  int batch;
} GemmCall;

static void
gemm_call (void *data)
{
  const GemmCall *g = data;

  if (emu_shapes_only ())
    return;

  for (int i = 0; i < g->batch; i++)
    gemm (g->transa, g->transb, g->m, g->n, g->k, g->alpha,
        (const char *) g->a + i * g->a_stride_bytes, g->atype, g->lda,
        (const char *) g->b + i * g->b_stride_bytes, g->btype, g->ldb,
        g->beta, (const char *) g->c + i * g->c_stride_bytes, g->ctype,
        g->ldc, (char *) g->c + i * g->c_stride_bytes, g->ctype, g->ldc,
        NULL, CUDA_R_32F);
}

static gboolean
compute_32f (cublasComputeType_t compute)
{
  return compute == CUBLAS_COMPUTE_32F
      || compute == CUBLAS_COMPUTE_32F_FAST_TF32;
}

struct cublasContext
{
  cudaStream_t stream;
};

cublasStatus_t
cublasCreate (cublasHandle_t * handle)
{
  *handle = g_new0 (struct cublasContext, 1);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t
cublasSetStream (cublasHandle_t handle, cudaStream_t stream)
{
  handle->stream = stream;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t
cublasSetWorkspace (cublasHandle_t handle, void *workspace, size_t bytes)
{
  return workspace != NULL && (uintptr_t) workspace % EMU_ALIGN == 0
      ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
}

cublasStatus_t
cublasSetMathMode (cublasHandle_t handle, cublasMath_t mode)
{
  return CUBLAS_STATUS_SUCCESS;
}

const char *
cublasGetStatusName (cublasStatus_t status)
{
  return status == CUBLAS_STATUS_SUCCESS ? "CUBLAS_STATUS_SUCCESS"
      : status == CUBLAS_STATUS_NOT_SUPPORTED ? "CUBLAS_STATUS_NOT_SUPPORTED"
      : "CUBLAS_STATUS_INVALID_VALUE";
}

const char *
cublasGetStatusString (cublasStatus_t status)
{
  return cublasGetStatusName (status);
}

cublasStatus_t
cublasGemmEx (cublasHandle_t handle, cublasOperation_t transa,
    cublasOperation_t transb, int m, int n, int k, const void *alpha,
    const void *A, cudaDataType Atype, int lda, const void *B,
    cudaDataType Btype, int ldb, const void *beta, void *C,
    cudaDataType Ctype, int ldc, cublasComputeType_t computeType,
    cublasGemmAlgo_t algo)
{
  return cublasGemmStridedBatchedEx (handle, transa, transb, m, n, k, alpha,
      A, Atype, lda, 0, B, Btype, ldb, 0, beta, C, Ctype, ldc, 0, 1,
      computeType, algo);
}

cublasStatus_t
cublasGemmStridedBatchedEx (cublasHandle_t handle, cublasOperation_t transa,
    cublasOperation_t transb, int m, int n, int k, const void *alpha,
    const void *A, cudaDataType Atype, int lda, long long int strideA,
    const void *B, cudaDataType Btype, int ldb, long long int strideB,
    const void *beta, void *C, cudaDataType Ctype, int ldc,
    long long int strideC, int batchCount, cublasComputeType_t computeType,
    cublasGemmAlgo_t algo)
{
  const size_t as = Atype == CUDA_R_32F ? 4 : 2;
  const size_t bs = Btype == CUDA_R_32F ? 4 : 2;
  const size_t cs = Ctype == CUDA_R_32F ? 4 : 2;

  if (!compute_32f (computeType) || !known_type (Atype)
      || !known_type (Btype) || !known_type (Ctype)) {
    unsupported ("a GEMM outside float32 compute and f32/f16/bf16 data");
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  if (m < 0 || n < 0 || k < 0 || batchCount < 0
      || lda < (transa == CUBLAS_OP_N ? MAX (m, 1) : MAX (k, 1))
      || ldb < (transb == CUBLAS_OP_N ? MAX (k, 1) : MAX (n, 1))
      || ldc < MAX (m, 1))
    return CUBLAS_STATUS_INVALID_VALUE;
  {
    const GemmCall c = { transa != CUBLAS_OP_N, transb != CUBLAS_OP_N, m, n,
      k, *(const float *) alpha, A, Atype, lda, strideA * as, B, Btype, ldb,
      strideB * bs, *(const float *) beta, C, Ctype, ldc, strideC * cs,
      batchCount
    };

    run_or_record (handle->stream, gemm_call, &c, sizeof c);
  }
  return CUBLAS_STATUS_SUCCESS;
}

/* cuBLASLt: what the backend sets, kept in the opaque descriptors. */

typedef struct
{
  cublasComputeType_t compute;
  cudaDataType_t scale;
  int32_t transa, transb;
  uint32_t epilogue;
  const void *bias;
  int32_t bias_type;
} LtDesc;

typedef struct
{
  cudaDataType_t type;
  uint64_t rows, cols;
  int64_t ld;
} LtLayout;

G_STATIC_ASSERT (sizeof (LtDesc) <= sizeof (cublasLtMatmulDescOpaque_t));
G_STATIC_ASSERT (sizeof (LtLayout) <= sizeof (cublasLtMatrixLayoutOpaque_t));

struct cublasLtContext
{
  int unused;
};

size_t
cublasLtGetVersion (void)
{
  return EMU_CUBLASLT_VERSION;
}

cublasStatus_t
cublasLtCreate (cublasLtHandle_t * handle)
{
  *handle = g_new0 (struct cublasLtContext, 1);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t
cublasLtMatmulDescCreate (cublasLtMatmulDesc_t * desc,
    cublasComputeType_t computeType, cudaDataType_t scaleType)
{
  LtDesc *d;

  *desc = g_new0 (cublasLtMatmulDescOpaque_t, 1);
  d = (LtDesc *) * desc;
  d->compute = computeType;
  d->scale = scaleType;
  d->transa = d->transb = CUBLAS_OP_N;
  d->epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  d->bias_type = -1;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t
cublasLtMatmulDescDestroy (cublasLtMatmulDesc_t desc)
{
  g_free (desc);
  return CUBLAS_STATUS_SUCCESS;
}

/* Copies the attribute's value, which must be exactly @want bytes. */
static cublasStatus_t
take (void *to, size_t want, const void *buf, size_t size)
{
  if (size != want)
    return CUBLAS_STATUS_INVALID_VALUE;
  memcpy (to, buf, want);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t
cublasLtMatmulDescSetAttribute (cublasLtMatmulDesc_t desc,
    cublasLtMatmulDescAttributes_t attr, const void *buf, size_t size)
{
  LtDesc *d = (LtDesc *) desc;

  switch (attr) {
    case CUBLASLT_MATMUL_DESC_TRANSA:
      return take (&d->transa, sizeof d->transa, buf, size);
    case CUBLASLT_MATMUL_DESC_TRANSB:
      return take (&d->transb, sizeof d->transb, buf, size);
    case CUBLASLT_MATMUL_DESC_EPILOGUE:
      return take (&d->epilogue, sizeof d->epilogue, buf, size);
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
      return take (&d->bias, sizeof d->bias, buf, size);
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE:
      return take (&d->bias_type, sizeof d->bias_type, buf, size);
    default:
      unsupported ("a cuBLASLt matmul attribute the backend does not set");
      return CUBLAS_STATUS_NOT_SUPPORTED;
  }
}

cublasStatus_t
cublasLtMatrixLayoutCreate (cublasLtMatrixLayout_t * layout,
    cudaDataType type, uint64_t rows, uint64_t cols, int64_t ld)
{
  LtLayout *l;

  if (!known_type (type) || ld < (int64_t) MAX (rows, 1))
    return CUBLAS_STATUS_INVALID_VALUE;
  *layout = g_new0 (cublasLtMatrixLayoutOpaque_t, 1);
  l = (LtLayout *) * layout;
  l->type = type;
  l->rows = rows;
  l->cols = cols;
  l->ld = ld;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t
cublasLtMatrixLayoutDestroy (cublasLtMatrixLayout_t layout)
{
  g_free (layout);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t
cublasLtMatmulPreferenceCreate (cublasLtMatmulPreference_t * pref)
{
  *pref = g_new0 (cublasLtMatmulPreferenceOpaque_t, 1);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t
cublasLtMatmulPreferenceDestroy (cublasLtMatmulPreference_t pref)
{
  g_free (pref);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t
cublasLtMatmulPreferenceSetAttribute (cublasLtMatmulPreference_t pref,
    cublasLtMatmulPreferenceAttributes_t attr, const void *buf, size_t size)
{
  switch (attr) {
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES:
      return size == sizeof (uint64_t) ? CUBLAS_STATUS_SUCCESS
          : CUBLAS_STATUS_INVALID_VALUE;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES:
    case CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK:
      return size == sizeof (uint32_t) ? CUBLAS_STATUS_SUCCESS
          : CUBLAS_STATUS_INVALID_VALUE;
    default:
      unsupported ("a cuBLASLt preference the backend does not set");
      return CUBLAS_STATUS_NOT_SUPPORTED;
  }
}

/* A cuBLASLt product's arguments, as the descriptors said them when it
 * was issued. */
typedef struct
{
  int transa, transb, m, n, k;
  float alpha;
  const void *a;
  int atype;
  long long lda;
  const void *b;
  int btype;
  long long ldb;
  float beta;
  const void *c;
  int ctype;
  long long ldc;
  void *d;
  int dtype;
  long long ldd;
  const void *bias;
  int bias_type;
} LtCall;

static void
lt_call (void *data)
{
  const LtCall *l = data;

  if (emu_shapes_only ())
    return;

  gemm (l->transa, l->transb, l->m, l->n, l->k, l->alpha, l->a, l->atype,
      l->lda, l->b, l->btype, l->ldb, l->beta, l->c, l->ctype, l->ldc, l->d,
      l->dtype, l->ldd, l->bias, l->bias_type);
}

/* The dimensions op(@l) has under @trans. */
static void
op_dims (const LtLayout * l, int trans, uint64_t * rows, uint64_t * cols)
{
  *rows = trans ? l->cols : l->rows;
  *cols = trans ? l->rows : l->cols;
}

static gboolean
lt_shapes_agree (const LtDesc * d, const LtLayout * a, const LtLayout * b,
    const LtLayout * c, const LtLayout * dl)
{
  uint64_t am, ak, bk, bn;

  op_dims (a, d->transa != CUBLAS_OP_N, &am, &ak);
  op_dims (b, d->transb != CUBLAS_OP_N, &bk, &bn);
  return ak == bk && am == c->rows && bn == c->cols && c->rows == dl->rows
      && c->cols == dl->cols;
}

cublasStatus_t
cublasLtMatmulAlgoGetHeuristic (cublasLtHandle_t handle,
    cublasLtMatmulDesc_t operationDesc, cublasLtMatrixLayout_t Adesc,
    cublasLtMatrixLayout_t Bdesc, cublasLtMatrixLayout_t Cdesc,
    cublasLtMatrixLayout_t Ddesc, cublasLtMatmulPreference_t preference,
    int requestedAlgoCount, cublasLtMatmulHeuristicResult_t
    heuristicResultsArray[], int *returnAlgoCount)
{
  const LtDesc *d = (const LtDesc *) operationDesc;

  *returnAlgoCount = 0;
  if (requestedAlgoCount < 1)
    return CUBLAS_STATUS_INVALID_VALUE;
  if (!lt_shapes_agree (d, (LtLayout *) Adesc, (LtLayout *) Bdesc,
          (LtLayout *) Cdesc, (LtLayout *) Ddesc))
    return CUBLAS_STATUS_INVALID_VALUE;
  if (!compute_32f (d->compute) || d->scale != CUDA_R_32F)
    return CUBLAS_STATUS_NOT_SUPPORTED;
  if (refuses ("lt-heuristic"))
    return CUBLAS_STATUS_SUCCESS;
  /* Two algorithms when asked for more than one (so that a timed choice
   * runs), alike but for their index in the first word. */
  *returnAlgoCount = MIN (requestedAlgoCount, 2);
  for (int i = 0; i < *returnAlgoCount; i++) {
    memset (&heuristicResultsArray[i], 0, sizeof heuristicResultsArray[i]);
    heuristicResultsArray[i].algo.data[0] = (uint64_t) i;
    heuristicResultsArray[i].state = CUBLAS_STATUS_SUCCESS;
    heuristicResultsArray[i].wavesCount = 1.0f;
  }
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t
cublasLtMatmul (cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t computeDesc,
    const void *alpha, const void *A, cublasLtMatrixLayout_t Adesc,
    const void *B, cublasLtMatrixLayout_t Bdesc, const void *beta,
    const void *C, cublasLtMatrixLayout_t Cdesc, void *D,
    cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t * algo,
    void *workspace, size_t workspaceSizeInBytes, cudaStream_t stream)
{
  const LtDesc *d = (const LtDesc *) computeDesc;
  const LtLayout *a = (const LtLayout *) Adesc, *b = (const LtLayout *) Bdesc;
  const LtLayout *c = (const LtLayout *) Cdesc, *dl = (const LtLayout *) Ddesc;
  const gboolean with_bias = d->epilogue == CUBLASLT_EPILOGUE_BIAS;
  uint64_t m, k, n, bk;

  if (!lt_shapes_agree (d, a, b, c, dl))
    return CUBLAS_STATUS_INVALID_VALUE;
  if (d->epilogue != CUBLASLT_EPILOGUE_DEFAULT && !with_bias) {
    unsupported ("a cuBLASLt epilogue other than the bias");
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  if (with_bias && d->bias == NULL)
    return CUBLAS_STATUS_INVALID_VALUE;
  if (refuses ("lt-matmul"))
    return CUBLAS_STATUS_NOT_SUPPORTED;
  if (refuses ("lt-fault") && algo != NULL && algo->data[0] == 1) {
    emu_device_fault (cudaErrorIllegalAddress);
    return CUBLAS_STATUS_SUCCESS;
  }
  op_dims (a, d->transa != CUBLAS_OP_N, &m, &k);
  op_dims (b, d->transb != CUBLAS_OP_N, &bk, &n);
  {
    /* The bias is D's type unless said otherwise. */
    const LtCall call = { d->transa != CUBLAS_OP_N, d->transb != CUBLAS_OP_N,
      (int) m, (int) n, (int) k, *(const float *) alpha, A, a->type, a->ld,
      B, b->type, b->ld, *(const float *) beta, C, c->type, c->ld, D,
      dl->type, dl->ld, with_bias ? d->bias : NULL,
      d->bias_type >= 0 ? d->bias_type : (int) dl->type
    };

    run_or_record (stream, lt_call, &call, sizeof call);
  }
  return CUBLAS_STATUS_SUCCESS;
}

/* cuDNN */

struct cudnnContext
{
  cudaStream_t stream;
};

struct cudnnTensorStruct
{
  cudnnTensorFormat_t format;
  cudnnDataType_t type;
  int n, c, h, w;
};

struct cudnnFilterStruct
{
  cudnnTensorFormat_t format;
  cudnnDataType_t type;
  int k, c, h, w;
};

struct cudnnConvolutionStruct
{
  int pad_h, pad_w, u, v, dil_h, dil_w;
  cudnnConvolutionMode_t mode;
  cudnnDataType_t compute;
  cudnnMathType_t math;
};

struct cudnnActivationStruct
{
  cudnnActivationMode_t mode;
  cudnnNanPropagation_t nan;
  double coef;
};

size_t
cudnnGetVersion (void)
{
  return EMU_CUDNN_VERSION;
}

const char *
cudnnGetErrorString (cudnnStatus_t status)
{
  return status == CUDNN_STATUS_SUCCESS ? "CUDNN_STATUS_SUCCESS"
      : status == CUDNN_STATUS_NOT_SUPPORTED ? "CUDNN_STATUS_NOT_SUPPORTED"
      : status == CUDNN_STATUS_INTERNAL_ERROR ? "CUDNN_STATUS_INTERNAL_ERROR"
      : "CUDNN_STATUS_BAD_PARAM";
}

/* Forward: the graph API's last refusal (below). */
static __thread const char *graph_refusal;

void
cudnnGetLastErrorString (char *message, size_t max_size)
{
  if (max_size > 0)
    g_strlcpy (message, graph_refusal != NULL ? graph_refusal : "", max_size);
  graph_refusal = NULL;
}

cudnnStatus_t
cudnnCreate (cudnnHandle_t * handle)
{
  *handle = g_new0 (struct cudnnContext, 1);
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t
cudnnSetStream (cudnnHandle_t handle, cudaStream_t stream)
{
  handle->stream = stream;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t
cudnnCreateTensorDescriptor (cudnnTensorDescriptor_t * desc)
{
  *desc = g_new0 (struct cudnnTensorStruct, 1);
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t
cudnnDestroyTensorDescriptor (cudnnTensorDescriptor_t desc)
{
  g_free (desc);
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t
cudnnCreateFilterDescriptor (cudnnFilterDescriptor_t * desc)
{
  *desc = g_new0 (struct cudnnFilterStruct, 1);
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t
cudnnDestroyFilterDescriptor (cudnnFilterDescriptor_t desc)
{
  g_free (desc);
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t
cudnnCreateConvolutionDescriptor (cudnnConvolutionDescriptor_t * desc)
{
  *desc = g_new0 (struct cudnnConvolutionStruct, 1);
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t
cudnnDestroyConvolutionDescriptor (cudnnConvolutionDescriptor_t desc)
{
  g_free (desc);
  return CUDNN_STATUS_SUCCESS;
}

static int
cudnn_type (cudnnDataType_t t)
{
  return t == CUDNN_DATA_FLOAT ? CUDA_R_32F : t == CUDNN_DATA_HALF
      ? CUDA_R_16F : t == CUDNN_DATA_BFLOAT16 ? CUDA_R_16BF : -1;
}

/* Whether a 4-d tensor or filter of these is one the emulation runs. */
static gboolean
valid_4d (cudnnTensorFormat_t format, cudnnDataType_t type, int a, int b,
    int c, int d)
{
  return (format == CUDNN_TENSOR_NCHW || format == CUDNN_TENSOR_NHWC)
      && cudnn_type (type) >= 0 && a > 0 && b > 0 && c > 0 && d > 0;
}

cudnnStatus_t
cudnnSetTensor4dDescriptor (cudnnTensorDescriptor_t desc,
    cudnnTensorFormat_t format, cudnnDataType_t dataType, int n, int c,
    int h, int w)
{
  if (!valid_4d (format, dataType, n, c, h, w))
    return CUDNN_STATUS_BAD_PARAM;
  *desc = (struct cudnnTensorStruct) { format, dataType, n, c, h, w };
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t
cudnnSetFilter4dDescriptor (cudnnFilterDescriptor_t desc,
    cudnnDataType_t dataType, cudnnTensorFormat_t format, int k, int c,
    int h, int w)
{
  if (!valid_4d (format, dataType, k, c, h, w))
    return CUDNN_STATUS_BAD_PARAM;
  *desc = (struct cudnnFilterStruct) { format, dataType, k, c, h, w };
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t
cudnnSetConvolution2dDescriptor (cudnnConvolutionDescriptor_t desc,
    int pad_h, int pad_w, int u, int v, int dilation_h, int dilation_w,
    cudnnConvolutionMode_t mode, cudnnDataType_t computeType)
{
  if (pad_h < 0 || pad_w < 0 || u <= 0 || v <= 0 || dilation_h <= 0
      || dilation_w <= 0)
    return CUDNN_STATUS_BAD_PARAM;
  desc->pad_h = pad_h;
  desc->pad_w = pad_w;
  desc->u = u;
  desc->v = v;
  desc->dil_h = dilation_h;
  desc->dil_w = dilation_w;
  desc->mode = mode;
  desc->compute = computeType;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t
cudnnSetConvolutionMathType (cudnnConvolutionDescriptor_t desc,
    cudnnMathType_t mathType)
{
  desc->math = mathType;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t
cudnnGetConvolutionForwardAlgorithmMaxCount (cudnnHandle_t handle,
    int *count)
{
  *count = CUDNN_CONVOLUTION_FWD_ALGO_COUNT;
  return CUDNN_STATUS_SUCCESS;
}

/* Whether the emulation runs this convolution: what the backend makes of
 * a UNet's and a VAE's. */
static gboolean
conv_supported (const struct cudnnTensorStruct *x,
    const struct cudnnFilterStruct *w, const struct cudnnConvolutionStruct
    *conv, const struct cudnnTensorStruct *y)
{
  const int ho = (x->h + 2 * conv->pad_h - conv->dil_h * (w->h - 1) - 1)
      / conv->u + 1;
  const int wo = (x->w + 2 * conv->pad_w - conv->dil_w * (w->w - 1) - 1)
      / conv->v + 1;

  return conv->mode == CUDNN_CROSS_CORRELATION
      && conv->compute == CUDNN_DATA_FLOAT && x->type == w->type
      && y->type == x->type && x->format == w->format
      && y->format == x->format && x->c == w->c && y->c == w->k
      && y->n == x->n && y->h == ho && y->w == wo;
}

/* The algorithms the emulation ranks, first to last (it runs them all
 * alike). */
static const cudnnConvolutionFwdAlgo_t ranked[] = {
  CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM,
  CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM,
};

static void
fill_perf (cudnnConvolutionFwdAlgoPerf_t * perf, cudnnConvolutionFwdAlgo_t algo,
    const struct cudnnConvolutionStruct *conv)
{
  memset (perf, 0, sizeof *perf);
  perf->algo = algo;
  perf->status = CUDNN_STATUS_SUCCESS;
  perf->memory = 0;
  perf->determinism = CUDNN_DETERMINISTIC;
  perf->mathType = conv->math;
}

cudnnStatus_t
cudnnGetConvolutionForwardAlgorithm_v7 (cudnnHandle_t handle,
    const cudnnTensorDescriptor_t srcDesc,
    const cudnnFilterDescriptor_t filterDesc,
    const cudnnConvolutionDescriptor_t convDesc,
    const cudnnTensorDescriptor_t destDesc, const int requestedAlgoCount,
    int *returnedAlgoCount, cudnnConvolutionFwdAlgoPerf_t * perfResults)
{
  *returnedAlgoCount = 0;
  if (requestedAlgoCount < 1)
    return CUDNN_STATUS_BAD_PARAM;
  if (!conv_supported (srcDesc, filterDesc, convDesc, destDesc))
    return CUDNN_STATUS_NOT_SUPPORTED;
  for (int i = 0; i < (int) G_N_ELEMENTS (ranked)
      && i < requestedAlgoCount; i++)
    fill_perf (&perfResults[i], ranked[i], convDesc);
  *returnedAlgoCount = MIN ((int) G_N_ELEMENTS (ranked), requestedAlgoCount);
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t
cudnnGetConvolutionForwardWorkspaceSize (cudnnHandle_t handle,
    const cudnnTensorDescriptor_t xDesc,
    const cudnnFilterDescriptor_t wDesc,
    const cudnnConvolutionDescriptor_t convDesc,
    const cudnnTensorDescriptor_t yDesc, cudnnConvolutionFwdAlgo_t algo,
    size_t *sizeInBytes)
{
  *sizeInBytes = 0;
  return conv_supported (xDesc, wDesc, convDesc, yDesc)
      ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_NOT_SUPPORTED;
}

/* Element (n, c, h, w) of a 4-d tensor in @format. */
static size_t
at (cudnnTensorFormat_t format, int C, int H, int W, int n, int c, int h,
    int w)
{
  return format == CUDNN_TENSOR_NHWC
      ? (((size_t) n * H + h) * W + w) * C + c
      : (((size_t) n * C + c) * H + h) * W + w;
}

/* A convolution's arguments, its descriptors as they were when it was
 * issued; with @fused, cudnnConvolutionBiasActivationForward's: y =
 * act (alpha · conv + beta · z + bias), @beta being its alpha2. */
typedef struct
{
  struct cudnnTensorStruct x, y;
  struct cudnnFilterStruct w;
  struct cudnnConvolutionStruct conv;
  float alpha, beta;
  const void *xd, *wd;
  void *yd;
  gboolean fused, relu;
  const void *zd, *bias;
} ConvCall;

/* A 4-d tensor's values as floats, channels first ([n][c][h][w]). */
static float *
widen_nchw (const void *p, int type, cudnnTensorFormat_t format, int N,
    int C, int H, int W)
{
  float *w = g_new (float, (size_t) MAX (N * C * H * W, 1));
  size_t o = 0;

  for (int n = 0; n < N; n++)
    for (int c = 0; c < C; c++)
      for (int h = 0; h < H; h++)
        for (int x = 0; x < W; x++)
          w[o++] = load (p, at (format, C, H, W, n, c, h, x), type);
  return w;
}

/* Row (@n, @k, @oh) of @cc's convolution before its epilogue into
 * @sums (one float a column), from the widened input @x and filter @f:
 * each output summed in float32 in the order of c, r and s, taps outside
 * the input left out.  A row at a time, each tap added to every column
 * it reaches (a loop the compiler vectorizes), each sum's additions in
 * the order an output at a time makes them. */
EMU_UNCHECKED static void
conv_row (const ConvCall * cc, const float *x, const float *f, int n, int k,
    int oh, float *sums)
{
  const struct cudnnTensorStruct *xd = &cc->x;
  const struct cudnnFilterStruct *wd = &cc->w;
  const struct cudnnConvolutionStruct *cv = &cc->conv;
  const int out_w = cc->y.w;

  for (int ow = 0; ow < out_w; ow++)
    sums[ow] = 0.0f;
  for (int c = 0; c < xd->c; c++)
    for (int r = 0; r < wd->h; r++) {
      const int ih = oh * cv->u - cv->pad_h + r * cv->dil_h;
      const float *xrow, *frow;

      if (ih < 0 || ih >= xd->h)
        continue;
      xrow = x + (((size_t) n * xd->c + c) * xd->h + ih) * xd->w;
      frow = f + (((size_t) k * wd->c + c) * wd->h + r) * wd->w;
      for (int s = 0; s < wd->w; s++) {
        /* The columns whose tap s falls inside the input:
         * 0 <= ow * v - pad_w + s * dil_w < xd->w. */
        const int shift = s * cv->dil_w - cv->pad_w;
        const float w = frow[s];
        int first = 0, end = out_w;

        if (shift < 0)
          first = (-shift + cv->v - 1) / cv->v;
        if (xd->w - shift <= 0)
          end = 0;
        else
          end = MIN (out_w, (xd->w - shift + cv->v - 1) / cv->v);
        if (cv->v == 1)
          for (int ow = first; ow < end; ow++)
            sums[ow] += xrow[ow + shift] * w;
        else
          for (int ow = first; ow < end; ow++)
            sums[ow] += xrow[ow * cv->v + shift] * w;
      }
    }
}

static void
conv_call (void *data)
{
  const ConvCall *cc = data;
  const struct cudnnTensorStruct *xd = &cc->x, *yd = &cc->y;
  const struct cudnnFilterStruct *wd = &cc->w;
  const int t = cudnn_type (xd->type);
  float *x, *f;

  if (emu_shapes_only ())
    return;
  /* The input and the filter widened once, channels first. */
  x = widen_nchw (cc->xd, t, xd->format, xd->n, xd->c, xd->h, xd->w);
  f = widen_nchw (cc->wd, t, wd->format, wd->k, wd->c, wd->h, wd->w);

  float *sums = g_new (float, MAX (yd->w, 1));

  for (int n = 0; n < yd->n; n++)
    for (int k = 0; k < yd->c; k++)
      for (int oh = 0; oh < yd->h; oh++) {
        conv_row (cc, x, f, n, k, oh, sums);
        for (int ow = 0; ow < yd->w; ow++) {
          const size_t yi = at (yd->format, yd->c, yd->h, yd->w, n, k, oh,
              ow);
          float v = cc->alpha * sums[ow];

          if (cc->fused) {
            /* z may be y: each value is read before it is written. */
            if (cc->beta != 0.0f)
              v += cc->beta * load (cc->zd, yi, t);
            v += load (cc->bias, k, t);
            if (cc->relu && !(v > 0.0f))
              v = 0.0f;
          } else if (cc->beta != 0.0f)
            v += cc->beta * load (cc->yd, yi, t);
          store (cc->yd, yi, t, v);
        }
      }
  g_free (sums);
  g_free (x);
  g_free (f);
}

cudnnStatus_t
cudnnConvolutionForward (cudnnHandle_t handle, const void *alpha,
    const cudnnTensorDescriptor_t xDesc, const void *x,
    const cudnnFilterDescriptor_t wDesc, const void *w,
    const cudnnConvolutionDescriptor_t convDesc,
    cudnnConvolutionFwdAlgo_t algo, void *workSpace,
    size_t workSpaceSizeInBytes, const void *beta,
    const cudnnTensorDescriptor_t yDesc, void *y)
{
  const ConvCall c = { *xDesc, *yDesc, *wDesc, *convDesc,
    *(const float *) alpha, *(const float *) beta, x, w, y,
    FALSE, FALSE, NULL, NULL
  };

  if (!conv_supported (xDesc, wDesc, convDesc, yDesc))
    return CUDNN_STATUS_NOT_SUPPORTED;
  if (algo == ranked[0] && refuses ("conv-algo"))
    return CUDNN_STATUS_NOT_SUPPORTED;
  run_or_record (handle->stream, conv_call, &c, sizeof c);
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t
cudnnCreateActivationDescriptor (cudnnActivationDescriptor_t * desc)
{
  *desc = g_new0 (struct cudnnActivationStruct, 1);
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t
cudnnDestroyActivationDescriptor (cudnnActivationDescriptor_t desc)
{
  g_free (desc);
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t
cudnnSetActivationDescriptor (cudnnActivationDescriptor_t desc,
    cudnnActivationMode_t mode, cudnnNanPropagation_t reluNanOpt,
    double coef)
{
  *desc = (struct cudnnActivationStruct) { mode, reluNanOpt, coef };
  return CUDNN_STATUS_SUCCESS;
}

static gboolean
same_tensor (const struct cudnnTensorStruct *a,
    const struct cudnnTensorStruct *b)
{
  return a->format == b->format && a->type == b->type && a->n == b->n
      && a->c == b->c && a->h == b->h && a->w == b->w;
}

/* As the documentation has it: z of y's descriptor, the bias 1 × C × 1 × 1
 * of y's type (the float, half and bfloat16 configurations), the identity
 * activation with IMPLICIT_PRECOMP_GEMM alone.  $PP_CUDA_EMU_REFUSE's
 * "conv-fused" refuses every call (not supported), as a cuDNN without an
 * engine for the shape would. */
cudnnStatus_t
cudnnConvolutionBiasActivationForward (cudnnHandle_t handle,
    const void *alpha1, const cudnnTensorDescriptor_t xDesc, const void *x,
    const cudnnFilterDescriptor_t wDesc, const void *w,
    const cudnnConvolutionDescriptor_t convDesc,
    cudnnConvolutionFwdAlgo_t algo, void *workSpace,
    size_t workSpaceSizeInBytes, const void *alpha2,
    const cudnnTensorDescriptor_t zDesc, const void *z,
    const cudnnTensorDescriptor_t biasDesc, const void *bias,
    const cudnnActivationDescriptor_t activationDesc,
    const cudnnTensorDescriptor_t yDesc, void *y)
{
  const ConvCall c = { *xDesc, *yDesc, *wDesc, *convDesc,
    *(const float *) alpha1, *(const float *) alpha2, x, w, y,
    TRUE, activationDesc->mode == CUDNN_ACTIVATION_RELU, z, bias
  };

  if (!conv_supported (xDesc, wDesc, convDesc, yDesc)
      || !same_tensor (zDesc, yDesc) || biasDesc->type != yDesc->type
      || biasDesc->n != 1 || biasDesc->c != yDesc->c || biasDesc->h != 1
      || biasDesc->w != 1)
    return CUDNN_STATUS_BAD_PARAM;
  if (activationDesc->mode != CUDNN_ACTIVATION_RELU
      && activationDesc->mode != CUDNN_ACTIVATION_IDENTITY) {
    unsupported ("an activation other than ReLU and identity");
    return CUDNN_STATUS_NOT_SUPPORTED;
  }
  if ((activationDesc->mode == CUDNN_ACTIVATION_IDENTITY
          && algo != CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM)
      || (algo == ranked[0] && refuses ("conv-algo"))
      || refuses ("conv-fused"))
    return CUDNN_STATUS_NOT_SUPPORTED;
  if (capturing (handle->stream) == NULL)
    emu_count_launch ("cudnnConvolutionBiasActivationForward");
  run_or_record (handle->stream, conv_call, &c, sizeof c);
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t
cudnnFindConvolutionForwardAlgorithmEx (cudnnHandle_t handle,
    const cudnnTensorDescriptor_t xDesc, const void *x,
    const cudnnFilterDescriptor_t wDesc, const void *w,
    const cudnnConvolutionDescriptor_t convDesc,
    const cudnnTensorDescriptor_t yDesc, void *y,
    const int requestedAlgoCount, int *returnedAlgoCount,
    cudnnConvolutionFwdAlgoPerf_t * perfResults, void *workSpace,
    size_t workSpaceSizeInBytes)
{
  return cudnnGetConvolutionForwardAlgorithm_v7 (handle, xDesc, wDesc,
      convDesc, yDesc, requestedAlgoCount, returnedAlgoCount, perfResults);
}

/* The graph API.  A descriptor holds its attributes as they were set; a
 * graph of a convolution and a chain of pointwise additions and a ReLU
 * after it (what pp-cuda-conv-graph.c builds) runs, read from those
 * attributes at finalize, and so does a graph of matmuls, pointwise
 * operations and reductions (the fused attention's, pp-cuda-sdpa.c),
 * operation by operation in float32 on the host, each tensor rounded to
 * its type.  The heuristics offer two engines for a convolution graph,
 * alike but for the second's workspace (so that a plan's workspace and a
 * timed choice run), one for the other kind; $PP_CUDA_EMU_REFUSE's
 * "conv-graph" and "attention-graph" make them offer none. */

#define EMU_GRAPH_MAGIC 0x67726170u
#define EMU_GRAPH_ENGINES 2
#define EMU_GRAPH_WORKSPACE 4096
/* Pointwise operations after a convolution, at most. */
#define EMU_GRAPH_MAX_POINTWISE 4

typedef struct
{
  cudnnBackendAttributeName_t name;
  cudnnBackendAttributeType_t type;
  int64_t count;
  void *values;
} EmuAttr;

typedef struct
{
  int64_t uid;
  cudnnDataType_t type;
  gboolean is_virtual, by_value;
  int64_t dims[4], strides[4];
} EmuTensor;

/* A convolution graph as it runs: x ⊛ w into acc (float), then each
 * pointwise operation on acc (with b, broadcast, where it has one), the
 * last (or the convolution, without any) writing y. */
typedef struct
{
  EmuTensor x, w, y;
  int pad[2], stride[2], dil[2];
  int n_pw;
  struct
  {
    cudnnPointwiseMode_t mode;
    gboolean has_b;
    EmuTensor b;
  } pw[EMU_GRAPH_MAX_POINTWISE];
} EmuConvGraph;

typedef struct EmuDesc
{
  guint32 magic;
  cudnnBackendDescriptorType_t type;
  GArray *attrs;                /* EmuAttr */
  gboolean finalized;
  /* An operation graph's, once finalized (a convolution's, or @ops: the
   * other kind); an engine configuration's, engine's and execution
   * plan's (with their engine's index). */
  EmuConvGraph *graph;
  struct EmuOpGraph *ops;
  int64_t engine;
} EmuDesc;

static size_t
attr_size (cudnnBackendAttributeType_t type)
{
  switch (type) {
    case CUDNN_TYPE_HANDLE:
    case CUDNN_TYPE_VOID_PTR:
    case CUDNN_TYPE_BACKEND_DESCRIPTOR:
      return sizeof (void *);
    case CUDNN_TYPE_INT64:
    case CUDNN_TYPE_DOUBLE:
      return 8;
    case CUDNN_TYPE_BOOLEAN:
      return sizeof (bool);
    case CUDNN_TYPE_FLOAT:
    case CUDNN_TYPE_DATA_TYPE:
    case CUDNN_TYPE_CONVOLUTION_MODE:
    case CUDNN_TYPE_HEUR_MODE:
    case CUDNN_TYPE_POINTWISE_MODE:
    case CUDNN_TYPE_REDUCTION_OPERATOR_TYPE:
      return 4;
    default:
      return 0;
  }
}

static EmuDesc *
desc_of (cudnnBackendDescriptor_t d)
{
  EmuDesc *e = d;

  return e != NULL && e->magic == EMU_GRAPH_MAGIC ? e : NULL;
}

/* Attribute @name of @d with @count values of @type, or NULL. */
static const void *
attr (const EmuDesc * d, cudnnBackendAttributeName_t name,
    cudnnBackendAttributeType_t type, int64_t count)
{
  for (guint i = 0; i < d->attrs->len; i++) {
    const EmuAttr *a = &g_array_index (d->attrs, EmuAttr, i);

    if (a->name == name)
      return a->type == type && a->count == count ? a->values : NULL;
  }
  return NULL;
}

/* The descriptor attribute @name of @d, of descriptor type @type, or
 * NULL. */
static EmuDesc *
attr_desc (const EmuDesc * d, cudnnBackendAttributeName_t name,
    cudnnBackendDescriptorType_t type)
{
  void *const *v = attr (d, name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1);
  EmuDesc *e = v != NULL ? desc_of (*v) : NULL;

  return e != NULL && e->type == type ? e : NULL;
}

cudnnStatus_t
cudnnBackendCreateDescriptor (cudnnBackendDescriptorType_t descriptorType,
    cudnnBackendDescriptor_t * descriptor)
{
  EmuDesc *d = g_new0 (EmuDesc, 1);

  d->magic = EMU_GRAPH_MAGIC;
  d->type = descriptorType;
  d->attrs = g_array_new (FALSE, FALSE, sizeof (EmuAttr));
  *descriptor = d;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t
cudnnBackendDestroyDescriptor (cudnnBackendDescriptor_t descriptor)
{
  EmuDesc *d = desc_of (descriptor);

  if (d == NULL)
    return CUDNN_STATUS_BAD_PARAM;
  for (guint i = 0; i < d->attrs->len; i++)
    g_free (g_array_index (d->attrs, EmuAttr, i).values);
  g_array_free (d->attrs, TRUE);
  /* Only an operation graph owns its graph. */
  if (d->type == CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR) {
    g_free (d->graph);
    g_free (d->ops);
  }
  d->magic = 0;
  g_free (d);
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t
cudnnBackendSetAttribute (cudnnBackendDescriptor_t descriptor,
    cudnnBackendAttributeName_t attributeName,
    cudnnBackendAttributeType_t attributeType, int64_t elementCount,
    const void *arrayOfElements)
{
  EmuDesc *d = desc_of (descriptor);
  const size_t size = attr_size (attributeType);
  EmuAttr a = { attributeName, attributeType, elementCount, NULL };

  if (d == NULL || d->finalized || elementCount < 0
      || (elementCount > 0 && arrayOfElements == NULL))
    return CUDNN_STATUS_BAD_PARAM;
  if (size == 0) {
    unsupported ("a cuDNN graph attribute of this type");
    return CUDNN_STATUS_NOT_SUPPORTED;
  }
  for (guint i = 0; i < d->attrs->len; i++)
    if (g_array_index (d->attrs, EmuAttr, i).name == attributeName) {
      g_free (g_array_index (d->attrs, EmuAttr, i).values);
      g_array_remove_index (d->attrs, i);
      break;
    }
  a.values = g_memdup2 (arrayOfElements, size * (size_t) elementCount);
  g_array_append_val (d->attrs, a);
  return CUDNN_STATUS_SUCCESS;
}

/* @t (a finalized tensor descriptor) into @out. */
static gboolean
read_tensor (const EmuDesc * t, EmuTensor * out)
{
  const cudnnDataType_t *type;
  const int64_t *dims, *strides, *uid, *alignment;
  const bool *is_virtual, *by_value;

  if (t == NULL || t->type != CUDNN_BACKEND_TENSOR_DESCRIPTOR
      || !t->finalized)
    return FALSE;
  type = attr (t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1);
  dims = attr (t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4);
  strides = attr (t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4);
  uid = attr (t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1);
  alignment = attr (t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1);
  is_virtual = attr (t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1);
  by_value = attr (t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1);
  /* Every attribute the documentation calls required; index and
   * comparison tensors (a causal mask's) only inside a graph. */
  if (type == NULL || dims == NULL || strides == NULL || uid == NULL
      || alignment == NULL || *alignment <= 0 || (cudnn_type (*type) < 0
          && !((*type == CUDNN_DATA_INT32 || *type == CUDNN_DATA_BOOLEAN)
              && is_virtual != NULL && *is_virtual)))
    return FALSE;
  out->uid = *uid;
  out->type = *type;
  out->is_virtual = is_virtual != NULL && *is_virtual;
  out->by_value = by_value != NULL && *by_value;
  memcpy (out->dims, dims, sizeof out->dims);
  memcpy (out->strides, strides, sizeof out->strides);
  return TRUE;
}

static gboolean
refuse_graph (const char *why)
{
  graph_refusal = why;
  return FALSE;
}

/* Operation @op, a convolution's forward, into @g. */
static gboolean
read_conv (const EmuDesc * op, EmuConvGraph * g)
{
  const EmuDesc *conv = attr_desc (op,
      CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
      CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
  const cudnnDataType_t *compute;
  const cudnnConvolutionMode_t *mode;
  const int64_t *spatial, *dil, *stride, *pre, *post;
  const float *alpha, *beta;

  if (conv == NULL || !conv->finalized
      || !read_tensor (attr_desc (op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
              CUDNN_BACKEND_TENSOR_DESCRIPTOR), &g->x)
      || !read_tensor (attr_desc (op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
              CUDNN_BACKEND_TENSOR_DESCRIPTOR), &g->w)
      || !read_tensor (attr_desc (op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y,
              CUDNN_BACKEND_TENSOR_DESCRIPTOR), &g->y))
    return refuse_graph ("a convolution without its tensors or descriptor");
  compute = attr (conv, CUDNN_ATTR_CONVOLUTION_COMP_TYPE,
      CUDNN_TYPE_DATA_TYPE, 1);
  mode = attr (conv, CUDNN_ATTR_CONVOLUTION_CONV_MODE,
      CUDNN_TYPE_CONVOLUTION_MODE, 1);
  spatial = attr (conv, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS,
      CUDNN_TYPE_INT64, 1);
  dil = attr (conv, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2);
  stride = attr (conv, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES,
      CUDNN_TYPE_INT64, 2);
  pre = attr (conv, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2);
  post = attr (conv, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64,
      2);
  alpha = attr (op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA,
      CUDNN_TYPE_FLOAT, 1);
  beta = attr (op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA,
      CUDNN_TYPE_FLOAT, 1);
  if (compute == NULL || *compute != CUDNN_DATA_FLOAT || mode == NULL
      || *mode != CUDNN_CROSS_CORRELATION || spatial == NULL || *spatial != 2
      || dil == NULL || stride == NULL || pre == NULL || post == NULL
      || pre[0] != post[0] || pre[1] != post[1] || alpha == NULL
      || *alpha != 1.0f || beta == NULL || *beta != 0.0f)
    return refuse_graph ("a convolution other than a 2-d cross-correlation "
        "in float32 with symmetric padding, alpha 1 and beta 0");
  /* [n, c, h, w]: x's c is w's, y's c w's k; the output size follows. */
  if (g->x.type != g->w.type || g->x.is_virtual || g->w.is_virtual
      || g->x.dims[1] != g->w.dims[1] || g->y.dims[0] != g->x.dims[0]
      || g->y.dims[1] != g->w.dims[0]
      || g->y.dims[2] != (g->x.dims[2] + 2 * pre[0] - dil[0]
          * (g->w.dims[2] - 1) - 1) / stride[0] + 1
      || g->y.dims[3] != (g->x.dims[3] + 2 * pre[1] - dil[1]
          * (g->w.dims[3] - 1) - 1) / stride[1] + 1)
    return refuse_graph ("a convolution whose tensors' shapes disagree");
  for (int i = 0; i < 2; i++) {
    g->pad[i] = (int) pre[i];
    g->stride[i] = (int) stride[i];
    g->dil[i] = (int) dil[i];
  }
  return TRUE;
}

/* Pointwise operation @op, reading @acc (the chain's last output), into
 * @g; *@acc becomes its output. */
static gboolean
read_pointwise (const EmuDesc * op, EmuConvGraph * g, EmuTensor * acc)
{
  const EmuDesc *pw = attr_desc (op,
      CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR,
      CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
  const cudnnPointwiseMode_t *mode = pw != NULL ? attr (pw,
      CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1) : NULL;
  const cudnnDataType_t *math = pw != NULL ? attr (pw,
      CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1) : NULL;
  EmuTensor x, y;
  int k = g->n_pw;

  if (k == EMU_GRAPH_MAX_POINTWISE || mode == NULL || math == NULL
      || *math != CUDNN_DATA_FLOAT
      || (*mode != CUDNN_POINTWISE_ADD && *mode != CUDNN_POINTWISE_RELU_FWD))
    return refuse_graph ("a pointwise operation other than a float32 "
        "addition or ReLU");
  if (!read_tensor (attr_desc (op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC,
              CUDNN_BACKEND_TENSOR_DESCRIPTOR), &x)
      || !read_tensor (attr_desc (op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC,
              CUDNN_BACKEND_TENSOR_DESCRIPTOR), &y)
      || x.uid != acc->uid || !acc->is_virtual
      || memcmp (y.dims, acc->dims, sizeof y.dims) != 0)
    return refuse_graph ("a pointwise operation that does not take the "
        "last one's output, or changes its shape");
  g->pw[k].mode = *mode;
  g->pw[k].has_b = *mode == CUDNN_POINTWISE_ADD;
  if (g->pw[k].has_b) {
    if (!read_tensor (attr_desc (op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC,
                CUDNN_BACKEND_TENSOR_DESCRIPTOR), &g->pw[k].b)
        || g->pw[k].b.is_virtual)
      return refuse_graph ("an addition without a stored second operand");
    for (int d = 0; d < 4; d++)
      if (g->pw[k].b.dims[d] != 1 && g->pw[k].b.dims[d] != y.dims[d])
        return refuse_graph ("an addition whose operand does not broadcast");
  }
  g->n_pw++;
  *acc = y;
  return TRUE;
}

/* Whether every tensor operation @op names has a unique id no other
 * tensor of the graph (in @seen: id → tensor descriptor) has. */
static gboolean
unique_ids (const EmuDesc * op, GHashTable * seen)
{
  for (guint i = 0; i < op->attrs->len; i++) {
    const EmuAttr *a = &g_array_index (op->attrs, EmuAttr, i);
    const EmuDesc *t;
    EmuTensor tensor;
    gpointer other;

    if (a->type != CUDNN_TYPE_BACKEND_DESCRIPTOR || a->count != 1)
      continue;
    t = desc_of (*(void **) a->values);
    if (t == NULL || t->type != CUDNN_BACKEND_TENSOR_DESCRIPTOR
        || !read_tensor (t, &tensor))
      continue;
    other = g_hash_table_lookup (seen, &tensor.uid);
    if (other != NULL && other != t)
      return FALSE;
    g_hash_table_insert (seen, g_memdup2 (&tensor.uid, sizeof tensor.uid),
        (gpointer) t);
  }
  return TRUE;
}

/* Operation graph @d's operations attribute, or NULL. */
static const EmuAttr *
graph_ops (const EmuDesc * d)
{
  for (guint i = 0; i < d->attrs->len; i++)
    if (g_array_index (d->attrs, EmuAttr, i).name
        == CUDNN_ATTR_OPERATIONGRAPH_OPS)
      return &g_array_index (d->attrs, EmuAttr, i);
  return NULL;
}

/* Operation graph @d's operations: a convolution, then pointwise
 * operations each on the last's output, the last one's stored; every
 * tensor's id its own, as cuDNN requires. */
static gboolean
read_graph (const EmuDesc * d, EmuConvGraph * g)
{
  g_autoptr (GHashTable) seen = g_hash_table_new_full (g_int64_hash,
      g_int64_equal, g_free, NULL);
  const int64_t *handle = attr (d, CUDNN_ATTR_OPERATIONGRAPH_HANDLE,
      CUDNN_TYPE_HANDLE, 1);
  const EmuAttr *ops = graph_ops (d);
  EmuTensor acc;

  if (handle == NULL || ops == NULL || ops->count < 1
      || ops->type != CUDNN_TYPE_BACKEND_DESCRIPTOR)
    return refuse_graph ("an operation graph without its handle or "
        "operations");
  for (int64_t i = 0; i < ops->count; i++) {
    const EmuDesc *op = desc_of (((void **) ops->values)[i]);

    if (op == NULL || !op->finalized)
      return refuse_graph ("an operation not finalized");
    if (!unique_ids (op, seen))
      return refuse_graph ("two tensors of the graph with one unique id");
    if (i == 0 && op->type
        == CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR) {
      if (!read_conv (op, g))
        return FALSE;
      acc = g->y;
    } else if (i > 0
        && op->type == CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR) {
      if (!read_pointwise (op, g, &acc))
        return FALSE;
    } else
      return refuse_graph ("the CUDA emulation runs cuDNN graphs of a "
          "convolution and its pointwise epilogue only");
  }
  if (acc.is_virtual)
    return refuse_graph ("an operation graph whose result is not stored");
  g->y = acc;
  return TRUE;
}

/* The other kind of graph: matmuls, pointwise operations and reductions
 * over 4-d tensors, in order, each reading tensors an earlier one wrote
 * or the variant pack's (a by-value tensor's one float taken when the
 * plan is executed, as cuDNN takes it). */
#define EMU_OPS_MAX 24

typedef struct
{
  cudnnBackendDescriptorType_t kind;    /* the operation's descriptor type */
  int mode;                     /* cudnnPointwiseMode_t or cudnnReduceTensorOp_t */
  int64_t axis;                 /* a GEN_INDEX's */
  int n_in;
  EmuTensor in[3], out;
} EmuOp;

typedef struct EmuOpGraph
{
  int n_ops;
  EmuOp ops[EMU_OPS_MAX];
} EmuOpGraph;

static gboolean
read_op_tensor (const EmuDesc * op, cudnnBackendAttributeName_t name,
    EmuTensor * t)
{
  return read_tensor (attr_desc (op, name, CUDNN_BACKEND_TENSOR_DESCRIPTOR),
      t);
}

/* Whether @a's dimensions are @out's or 1 (broadcast). */
static gboolean
broadcasts (const EmuTensor * a, const EmuTensor * out)
{
  for (int d = 0; d < 4; d++)
    if (a->dims[d] != 1 && a->dims[d] != out->dims[d])
      return FALSE;
  return TRUE;
}

/* Operation @op (of the second kind) into @e. */
static gboolean
read_op (const EmuDesc * op, EmuOp * e)
{
  const cudnnDataType_t *compute;

  memset (e, 0, sizeof *e);
  e->kind = op->type;
  switch (op->type) {
    case CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR:{
      const EmuDesc *mm = attr_desc (op, CUDNN_ATTR_OPERATION_MATMUL_DESC,
          CUDNN_BACKEND_MATMUL_DESCRIPTOR);

      compute = mm != NULL ? attr (mm, CUDNN_ATTR_MATMUL_COMP_TYPE,
          CUDNN_TYPE_DATA_TYPE, 1) : NULL;
      e->n_in = 2;
      if (compute == NULL || *compute != CUDNN_DATA_FLOAT
          || !read_op_tensor (op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, &e->in[0])
          || !read_op_tensor (op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, &e->in[1])
          || !read_op_tensor (op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, &e->out))
        return refuse_graph ("a matmul without its tensors, or not in "
            "float32");
      /* [b, h, m, k] · [b, h, k, n] = [b, h, m, n]. */
      if (e->in[0].dims[3] != e->in[1].dims[2]
          || e->out.dims[2] != e->in[0].dims[2]
          || e->out.dims[3] != e->in[1].dims[3]
          || e->in[0].dims[0] != e->out.dims[0]
          || e->in[0].dims[1] != e->out.dims[1]
          || e->in[1].dims[0] != e->out.dims[0]
          || e->in[1].dims[1] != e->out.dims[1])
        return refuse_graph ("a matmul whose shapes disagree");
      return TRUE;
    }
    case CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR:{
      const EmuDesc *rd = attr_desc (op, CUDNN_ATTR_OPERATION_REDUCTION_DESC,
          CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
      const cudnnReduceTensorOp_t *reduce = rd != NULL ? attr (rd,
          CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE,
          1) : NULL;

      compute = rd != NULL ? attr (rd, CUDNN_ATTR_REDUCTION_COMP_TYPE,
          CUDNN_TYPE_DATA_TYPE, 1) : NULL;
      e->n_in = 1;
      if (compute == NULL || *compute != CUDNN_DATA_FLOAT || reduce == NULL
          || (*reduce != CUDNN_REDUCE_TENSOR_MAX
              && *reduce != CUDNN_REDUCE_TENSOR_ADD)
          || !read_op_tensor (op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC,
              &e->in[0])
          || !read_op_tensor (op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC,
              &e->out) || !broadcasts (&e->out, &e->in[0]))
        return refuse_graph ("a reduction other than a float32 maximum or "
            "sum to a shape of the input's");
      e->mode = *reduce;
      return TRUE;
    }
    case CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR:{
      const EmuDesc *pw = attr_desc (op,
          CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR,
          CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
      const cudnnPointwiseMode_t *mode = pw != NULL ? attr (pw,
          CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1) : NULL;
      const int64_t *axis = pw != NULL ? attr (pw, CUDNN_ATTR_POINTWISE_AXIS,
          CUDNN_TYPE_INT64, 1) : NULL;

      if (mode == NULL
          || !read_op_tensor (op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC,
              &e->in[0])
          || !read_op_tensor (op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC,
              &e->out))
        return refuse_graph ("a pointwise operation without its tensors");
      e->mode = *mode;
      switch (*mode) {
        case CUDNN_POINTWISE_EXP:
        case CUDNN_POINTWISE_LOG:
          e->n_in = 1;
          break;
        case CUDNN_POINTWISE_GEN_INDEX:
          e->n_in = 1;
          if (axis == NULL || *axis < 0 || *axis > 3)
            return refuse_graph ("an index generation without its axis");
          e->axis = *axis;
          break;
        case CUDNN_POINTWISE_ADD:
        case CUDNN_POINTWISE_SUB:
        case CUDNN_POINTWISE_MUL:
        case CUDNN_POINTWISE_DIV:
        case CUDNN_POINTWISE_CMP_GE:
          e->n_in = 2;
          break;
        case CUDNN_POINTWISE_BINARY_SELECT:
          e->n_in = 3;
          break;
        default:
          return refuse_graph ("a pointwise operation the CUDA emulation "
              "does not run");
      }
      if (e->n_in >= 2 && !read_op_tensor (op,
              CUDNN_ATTR_OPERATION_POINTWISE_BDESC, &e->in[1]))
        return refuse_graph ("a binary pointwise operation without its "
            "second operand");
      if (e->n_in == 3 && !read_op_tensor (op,
              CUDNN_ATTR_OPERATION_POINTWISE_TDESC, &e->in[2]))
        return refuse_graph ("a selection without its condition");
      for (int i = 0; i < e->n_in; i++)
        if (!broadcasts (&e->in[i], &e->out))
          return refuse_graph ("a pointwise operand that does not "
              "broadcast to the output");
      return TRUE;
    }
    default:
      return refuse_graph ("the CUDA emulation runs cuDNN graphs of a "
          "convolution and its pointwise epilogue, or of matmuls, "
          "pointwise operations and reductions, only");
  }
}

/* Operation graph @d's operations (the second kind) into @g: each
 * operand stored (the variant pack's, by value or not) or an earlier
 * operation's output; every tensor's id its own. */
static gboolean
read_op_graph (const EmuDesc * d, EmuOpGraph * g)
{
  g_autoptr (GHashTable) seen = g_hash_table_new_full (g_int64_hash,
      g_int64_equal, g_free, NULL);
  g_autoptr (GHashTable) made = g_hash_table_new_full (g_int64_hash,
      g_int64_equal, g_free, NULL);
  const EmuAttr *ops = graph_ops (d);

  if (attr (d, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1) == NULL
      || ops == NULL || ops->type != CUDNN_TYPE_BACKEND_DESCRIPTOR)
    return refuse_graph ("an operation graph without its handle or "
        "operations");
  if (ops->count > EMU_OPS_MAX)
    return refuse_graph ("more operations than the CUDA emulation holds");
  for (int64_t i = 0; i < ops->count; i++) {
    const EmuDesc *op = desc_of (((void **) ops->values)[i]);
    EmuOp *e = &g->ops[i];

    if (op == NULL || !op->finalized)
      return refuse_graph ("an operation not finalized");
    if (!unique_ids (op, seen))
      return refuse_graph ("two tensors of the graph with one unique id");
    if (!read_op (op, e))
      return FALSE;
    for (int k = 0; k < e->n_in; k++)
      if (e->in[k].is_virtual && !g_hash_table_contains (made,
              &e->in[k].uid))
        return refuse_graph ("an operation reading a virtual tensor no "
            "earlier one wrote");
    if (e->out.by_value || g_hash_table_contains (made, &e->out.uid))
      return refuse_graph ("an operation writing a by-value tensor, or one "
          "another wrote");
    g_hash_table_add (made, g_memdup2 (&e->out.uid, sizeof e->out.uid));
  }
  g->n_ops = (int) ops->count;
  return TRUE;
}

cudnnStatus_t
cudnnBackendFinalize (cudnnBackendDescriptor_t descriptor)
{
  EmuDesc *d = desc_of (descriptor);
  EmuDesc *from;

  if (d == NULL || d->finalized)
    return CUDNN_STATUS_BAD_PARAM;
  switch (d->type) {
    case CUDNN_BACKEND_TENSOR_DESCRIPTOR:{
      EmuTensor t;

      d->finalized = TRUE;
      if (!read_tensor (d, &t)) {
        d->finalized = FALSE;
        return CUDNN_STATUS_BAD_PARAM;
      }
      return CUDNN_STATUS_SUCCESS;
    }
    case CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR:{
      const EmuAttr *ops = graph_ops (d);
      const EmuDesc *first = ops != NULL && ops->count > 0 ? desc_of
          (((void **) ops->values)[0]) : NULL;

      /* A graph that does not begin with a convolution is the other
       * kind. */
      if (first != NULL
          && first->type != CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR) {
        d->ops = g_new0 (EmuOpGraph, 1);
        if (!read_op_graph (d, d->ops)) {
          g_clear_pointer (&d->ops, g_free);
          return CUDNN_STATUS_NOT_SUPPORTED;
        }
        break;
      }
      d->graph = g_new0 (EmuConvGraph, 1);
      if (!read_graph (d, d->graph)) {
        g_clear_pointer (&d->graph, g_free);
        return CUDNN_STATUS_NOT_SUPPORTED;
      }
      break;
    }
    case CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR:
      from = attr_desc (d, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH,
          CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
      if (from == NULL || (from->graph == NULL && from->ops == NULL)
          || attr (d, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1)
          == NULL)
        return CUDNN_STATUS_BAD_PARAM;
      d->graph = from->graph;
      d->ops = from->ops;
      break;
    case CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR:
      from = attr_desc (d, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
          CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
      if (from == NULL || (from->graph == NULL && from->ops == NULL))
        return CUDNN_STATUS_BAD_PARAM;
      d->graph = from->graph;
      d->ops = from->ops;
      d->engine = from->engine;
      break;
    case CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR:
    case CUDNN_BACKEND_POINTWISE_DESCRIPTOR:
    case CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR:
    case CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR:
    case CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR:
    /* Attention's. */
    case CUDNN_BACKEND_MATMUL_DESCRIPTOR:
    case CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR:
    case CUDNN_BACKEND_REDUCTION_DESCRIPTOR:
    case CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR:
      break;
    default:
      unsupported ("this cuDNN graph descriptor type");
      return CUDNN_STATUS_NOT_SUPPORTED;
  }
  d->finalized = TRUE;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t
cudnnBackendGetAttribute (cudnnBackendDescriptor_t const descriptor,
    cudnnBackendAttributeName_t attributeName,
    cudnnBackendAttributeType_t attributeType, int64_t requestedElementCount,
    int64_t * elementCount, void *arrayOfElements)
{
  const EmuDesc *d = desc_of (descriptor);

  if (d == NULL || !d->finalized || elementCount == NULL)
    return CUDNN_STATUS_BAD_PARAM;
  if (d->type == CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR
      && attributeName == CUDNN_ATTR_ENGINEHEUR_RESULTS
      && attributeType == CUDNN_TYPE_BACKEND_DESCRIPTOR) {
    const cudnnBackendHeurMode_t *mode = attr (d, CUDNN_ATTR_ENGINEHEUR_MODE,
        CUDNN_TYPE_HEUR_MODE, 1);
    const gboolean refused = refuses ("conv-graph")
        || (refuses ("conv-graph-mode-a") && *mode == CUDNN_HEUR_MODE_A);
    const int64_t offered = d->ops != NULL ? (refuses ("attention-graph")
        ? 0 : 1) : refused ? 0 : EMU_GRAPH_ENGINES;

    *elementCount = MIN (offered, requestedElementCount > 0
        ? requestedElementCount : offered);
    for (int64_t i = 0; i < requestedElementCount && i < offered; i++) {
      EmuDesc *config = desc_of (((void **) arrayOfElements)[i]);

      if (config == NULL || config->type != CUDNN_BACKEND_ENGINECFG_DESCRIPTOR)
        return CUDNN_STATUS_BAD_PARAM;
      config->graph = d->graph;
      config->ops = d->ops;
      config->engine = i;
      config->finalized = TRUE;
    }
    return CUDNN_STATUS_SUCCESS;
  }
  if (d->type == CUDNN_BACKEND_ENGINECFG_DESCRIPTOR
      && attributeName == CUDNN_ATTR_ENGINECFG_ENGINE
      && attributeType == CUDNN_TYPE_BACKEND_DESCRIPTOR
      && requestedElementCount == 1) {
    EmuDesc *engine = desc_of (*(void **) arrayOfElements);

    if (engine == NULL || engine->type != CUDNN_BACKEND_ENGINE_DESCRIPTOR)
      return CUDNN_STATUS_BAD_PARAM;
    engine->engine = d->engine;
    engine->finalized = TRUE;
    *elementCount = 1;
    return CUDNN_STATUS_SUCCESS;
  }
  if (requestedElementCount == 1 && attributeType == CUDNN_TYPE_INT64
      && ((d->type == CUDNN_BACKEND_ENGINE_DESCRIPTOR
              && attributeName == CUDNN_ATTR_ENGINE_GLOBAL_INDEX)
          || (d->type == CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR
              && attributeName == CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE))) {
    *(int64_t *) arrayOfElements = d->type == CUDNN_BACKEND_ENGINE_DESCRIPTOR
        ? d->engine : d->engine == 1 ? EMU_GRAPH_WORKSPACE : 0;
    *elementCount = 1;
    return CUDNN_STATUS_SUCCESS;
  }
  unsupported ("this cuDNN graph attribute query");
  return CUDNN_STATUS_NOT_SUPPORTED;
}

/* A convolution graph's run: its graph and the data pointers of x, w, y
 * and each addition's operand. */
typedef struct
{
  EmuConvGraph g;
  const void *x, *w, *b[EMU_GRAPH_MAX_POINTWISE];
  void *y;
} GraphCall;

static size_t
strided (const EmuTensor * t, int64_t n, int64_t c, int64_t h, int64_t w)
{
  return (size_t) (n * t->strides[0] + c * t->strides[1] + h * t->strides[2]
      + w * t->strides[3]);
}

/* @t's values as floats, [n][c][h][w]. */
static float *
widen_strided (const EmuTensor * t, const void *p)
{
  const int64_t *d = t->dims;
  float *out = g_new (float, (size_t) MAX (d[0] * d[1] * d[2] * d[3], 1));
  size_t o = 0;

  for (int64_t n = 0; n < d[0]; n++)
    for (int64_t c = 0; c < d[1]; c++)
      for (int64_t h = 0; h < d[2]; h++)
        for (int64_t w = 0; w < d[3]; w++)
          out[o++] = load (p, strided (t, n, c, h, w), cudnn_type (t->type));
  return out;
}

static void
conv_graph_call (void *data)
{
  const GraphCall *gc = data;
  const EmuConvGraph *g = &gc->g;
  float *x = widen_strided (&g->x, gc->x);
  float *f = widen_strided (&g->w, gc->w);
  /* The sums as the legacy calls make them (conv_row). */
  ConvCall cc = { {CUDNN_TENSOR_NCHW, g->x.type, (int) g->x.dims[0],
          (int) g->x.dims[1], (int) g->x.dims[2], (int) g->x.dims[3]},
    {CUDNN_TENSOR_NCHW, g->y.type, (int) g->y.dims[0], (int) g->y.dims[1],
        (int) g->y.dims[2], (int) g->y.dims[3]},
    {CUDNN_TENSOR_NCHW, g->w.type, (int) g->w.dims[0], (int) g->w.dims[1],
        (int) g->w.dims[2], (int) g->w.dims[3]},
    {g->pad[0], g->pad[1], g->stride[0], g->stride[1], g->dil[0], g->dil[1],
        CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT, CUDNN_TENSOR_OP_MATH},
    1.0f, 0.0f, NULL, NULL, NULL, FALSE, FALSE, NULL, NULL
  };
  const int64_t *d = g->y.dims;
  float *sums = g_new (float, MAX (d[3], 1));

  for (int64_t n = 0; n < d[0]; n++)
    for (int64_t k = 0; k < d[1]; k++)
      for (int64_t oh = 0; oh < d[2]; oh++) {
        conv_row (&cc, x, f, (int) n, (int) k, (int) oh, sums);
        for (int64_t ow = 0; ow < d[3]; ow++) {
          const int64_t at4[4] = { n, k, oh, ow };
          float v = sums[ow];

          /* Each operand read before y is written (a residual may be
           * y). */
          for (int p = 0; p < g->n_pw; p++) {
            if (g->pw[p].mode == CUDNN_POINTWISE_RELU_FWD) {
              if (!(v > 0.0f))
                v = 0.0f;
              continue;
            }
            {
              const EmuTensor *b = &g->pw[p].b;
              int64_t bi[4];

              for (int q = 0; q < 4; q++)
                bi[q] = b->dims[q] == 1 ? 0 : at4[q];
              v += load (gc->b[p], strided (b, bi[0], bi[1], bi[2], bi[3]),
                  cudnn_type (b->type));
            }
          }
          store (gc->y, strided (&g->y, n, k, oh, ow), cudnn_type (g->y.type),
              v);
        }
      }
  g_free (sums);
  g_free (x);
  g_free (f);
}

/* An operation graph of the second kind's run: its graph, each stored
 * tensor's data pointer by id, and the by-value tensors' floats. */
#define EMU_OPS_MAX_IO 16

typedef struct
{
  const EmuOpGraph *g;
  int n_io;
  int64_t uids[EMU_OPS_MAX_IO];
  void *data[EMU_OPS_MAX_IO];
  float value[EMU_OPS_MAX_IO];
  gboolean by_value[EMU_OPS_MAX_IO];
} OpsCall;

static size_t
dense_count (const EmuTensor * t)
{
  return (size_t) MAX (t->dims[0] * t->dims[1] * t->dims[2] * t->dims[3],
      1);
}

/* Index of @at (@out's coordinates) in @t, dense and broadcast. */
static size_t
dense_at (const EmuTensor * t, const int64_t at[4])
{
  size_t i = 0;

  for (int d = 0; d < 4; d++)
    i = i * (size_t) t->dims[d] + (size_t) (t->dims[d] == 1 ? 0 : at[d]);
  return i;
}

/* @v as tensor @t keeps it: a float, an integer or a boolean as a float,
 * or rounded to its 16-bit type. */
static float
as_stored (const EmuTensor * t, float v)
{
  uint32_t cell = 0;

  if (cudnn_type (t->type) < 0)
    return v;
  store (&cell, 0, cudnn_type (t->type), v);
  return load (&cell, 0, cudnn_type (t->type));
}

/* Tensor @t's dense values: a stored one read through its strides, a
 * by-value one its float, an earlier operation's its buffer. */
static float *
ops_values (const OpsCall * c, GHashTable * made, const EmuTensor * t)
{
  float *v = g_hash_table_lookup (made, &t->uid);

  if (v != NULL)
    return v;
  for (int i = 0; i < c->n_io && v == NULL; i++)
    if (c->uids[i] == t->uid) {
      if (c->by_value[i]) {
        v = g_new (float, 1);
        v[0] = c->value[i];
      } else
        v = widen_strided (t, c->data[i]);
    }
  g_assert (v != NULL);
  g_hash_table_insert (made, g_memdup2 (&t->uid, sizeof t->uid), v);
  return v;
}

static float
pointwise (int mode, float a, float b, float t, int64_t index)
{
  switch (mode) {
    case CUDNN_POINTWISE_ADD:
      return a + b;
    case CUDNN_POINTWISE_SUB:
      return a - b;
    case CUDNN_POINTWISE_MUL:
      return a * b;
    case CUDNN_POINTWISE_DIV:
      return a / b;
    case CUDNN_POINTWISE_EXP:
      return expf (a);
    case CUDNN_POINTWISE_LOG:
      return logf (a);
    case CUDNN_POINTWISE_CMP_GE:
      return a >= b ? 1.0f : 0.0f;
    case CUDNN_POINTWISE_BINARY_SELECT:
      return t != 0.0f ? a : b;
    case CUDNN_POINTWISE_GEN_INDEX:
      return (float) index;
    default:
      g_error ("cuda-emu: pointwise mode %d", mode);
  }
}

static void
ops_graph_call (void *data)
{
  const OpsCall *c = data;
  g_autoptr (GHashTable) made = g_hash_table_new_full (g_int64_hash,
      g_int64_equal, g_free, g_free);

  if (emu_shapes_only ())
    return;

  for (int i = 0; i < c->g->n_ops; i++) {
    const EmuOp *e = &c->g->ops[i];
    const int64_t *d = e->out.dims;
    float *in[3] = { NULL, NULL, NULL };
    float *out = g_new0 (float, dense_count (&e->out));
    int64_t at[4];

    for (int k = 0; k < e->n_in; k++)
      in[k] = ops_values (c, made, &e->in[k]);
    if (e->kind == CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR) {
      const int64_t *x = e->in[0].dims;
      gboolean *seen = g_new0 (gboolean, dense_count (&e->out));

      /* In the input's order, each value into its output cell. */
      for (at[0] = 0; at[0] < x[0]; at[0]++)
        for (at[1] = 0; at[1] < x[1]; at[1]++)
          for (at[2] = 0; at[2] < x[2]; at[2]++)
            for (at[3] = 0; at[3] < x[3]; at[3]++) {
              const size_t o = dense_at (&e->out, at);
              const float v = in[0][dense_at (&e->in[0], at)];

              out[o] = !seen[o] ? v : e->mode == CUDNN_REDUCE_TENSOR_MAX
                  ? fmaxf (out[o], v) : out[o] + v;
              seen[o] = TRUE;
            }
      g_free (seen);
    } else {
      for (at[0] = 0; at[0] < d[0]; at[0]++)
        for (at[1] = 0; at[1] < d[1]; at[1]++)
          for (at[2] = 0; at[2] < d[2]; at[2]++)
            for (at[3] = 0; at[3] < d[3]; at[3]++) {
              float v = 0.0f;

              if (e->kind == CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR) {
                const int64_t inner = e->in[0].dims[3];

                for (int64_t k = 0; k < inner; k++) {
                  const int64_t a_at[4] = { at[0], at[1], at[2], k };
                  const int64_t b_at[4] = { at[0], at[1], k, at[3] };

                  v += in[0][dense_at (&e->in[0], a_at)]
                      * in[1][dense_at (&e->in[1], b_at)];
                }
              } else
                v = pointwise (e->mode, in[0][dense_at (&e->in[0], at)],
                    e->n_in > 1 ? in[1][dense_at (&e->in[1], at)] : 0.0f,
                    e->n_in > 2 ? in[2][dense_at (&e->in[2], at)] : 0.0f,
                    at[e->axis]);
              out[dense_at (&e->out, at)] = v;
            }
    }
    for (size_t j = 0; j < dense_count (&e->out); j++)
      out[j] = as_stored (&e->out, out[j]);
    if (!e->out.is_virtual) {
      void *p = NULL;

      for (int k = 0; k < c->n_io; k++)
        if (c->uids[k] == e->out.uid)
          p = c->data[k];
      for (at[0] = 0; at[0] < d[0]; at[0]++)
        for (at[1] = 0; at[1] < d[1]; at[1]++)
          for (at[2] = 0; at[2] < d[2]; at[2]++)
            for (at[3] = 0; at[3] < d[3]; at[3]++)
              store (p, strided (&e->out, at[0], at[1], at[2], at[3]),
                  cudnn_type (e->out.type), out[dense_at (&e->out, at)]);
    }
    g_hash_table_insert (made, g_memdup2 (&e->out.uid, sizeof e->out.uid),
        out);
  }
}

/* The stored tensors of @g, each once, into @c's ids. */
static void
ops_io (const EmuOpGraph * g, OpsCall * c)
{
  for (int i = 0; i < g->n_ops; i++) {
    const EmuOp *e = &g->ops[i];

    for (int k = 0; k <= e->n_in; k++) {
      const EmuTensor *t = k < e->n_in ? &e->in[k] : &e->out;
      gboolean known = FALSE;

      if (t->is_virtual)
        continue;
      for (int j = 0; j < c->n_io; j++)
        known = known || c->uids[j] == t->uid;
      if (known)
        continue;
      if (c->n_io == EMU_OPS_MAX_IO)
        g_error ("cuda-emu: an operation graph of more than %d stored "
            "tensors (EMU_OPS_MAX_IO)", EMU_OPS_MAX_IO);
      c->by_value[c->n_io] = t->by_value;
      c->uids[c->n_io++] = t->uid;
    }
  }
}

/* The data pointer @pack gives tensor @uid, or NULL. */
static void *
pack_pointer (const EmuDesc * pack, int64_t uid)
{
  for (guint i = 0; i < pack->attrs->len; i++) {
    const EmuAttr *u = &g_array_index (pack->attrs, EmuAttr, i);

    if (u->name != CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS)
      continue;
    for (guint j = 0; j < pack->attrs->len; j++) {
      const EmuAttr *p = &g_array_index (pack->attrs, EmuAttr, j);

      if (p->name != CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS
          || p->count != u->count)
        continue;
      for (int64_t k = 0; k < u->count; k++)
        if (((const int64_t *) u->values)[k] == uid)
          return ((void **) p->values)[k];
    }
  }
  return NULL;
}

cudnnStatus_t
cudnnBackendExecute (cudnnHandle_t handle,
    cudnnBackendDescriptor_t executionPlan,
    cudnnBackendDescriptor_t variantPack)
{
  const EmuDesc *plan = desc_of (executionPlan);
  const EmuDesc *pack = desc_of (variantPack);
  void *const *workspace;
  GraphCall call = { 0 };

  if (plan == NULL || plan->type != CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR
      || !plan->finalized || pack == NULL
      || pack->type != CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR
      || !pack->finalized)
    return CUDNN_STATUS_BAD_PARAM;
  if (plan->ops != NULL) {
    OpsCall oc = { plan->ops };

    ops_io (plan->ops, &oc);
    for (int i = 0; i < oc.n_io; i++) {
      oc.data[i] = pack_pointer (pack, oc.uids[i]);
      if (oc.data[i] == NULL)
        return CUDNN_STATUS_BAD_PARAM;
      /* A by-value tensor's float, taken now (a captured plan keeps it). */
      if (oc.by_value[i])
        oc.value[i] = *(const float *) oc.data[i];
    }
    if (capturing (handle->stream) == NULL)
      emu_count_launch ("cudnnBackendExecute");
    run_or_record (handle->stream, ops_graph_call, &oc, sizeof oc);
    return CUDNN_STATUS_SUCCESS;
  }
  if (refuses ("conv-graph-internal"))
    return CUDNN_STATUS_INTERNAL_ERROR;
  call.g = *plan->graph;
  call.x = pack_pointer (pack, call.g.x.uid);
  call.w = pack_pointer (pack, call.g.w.uid);
  call.y = pack_pointer (pack, call.g.y.uid);
  if (call.x == NULL || call.w == NULL || call.y == NULL)
    return CUDNN_STATUS_BAD_PARAM;
  for (int p = 0; p < call.g.n_pw; p++)
    if (call.g.pw[p].has_b
        && (call.b[p] = pack_pointer (pack, call.g.pw[p].b.uid)) == NULL)
      return CUDNN_STATUS_BAD_PARAM;
  /* The second engine's plan wants a workspace. */
  workspace = attr (pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE,
      CUDNN_TYPE_VOID_PTR, 1);
  if (plan->engine == 1 && (workspace == NULL || *workspace == NULL))
    return CUDNN_STATUS_BAD_PARAM;
  if (capturing (handle->stream) == NULL)
    emu_count_launch ("cudnnBackendExecute");
  if (!emu_shapes_only ())
    run_or_record (handle->stream, conv_graph_call, &call, sizeof call);
  return CUDNN_STATUS_SUCCESS;
}
