/* ppdiffuse — the CUDA backend's kernel traces (pp_backend_trace): every
 * kernel the device runs, with its start and end, from CUPTI's activity
 * records (CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, which does not
 * serialise the kernels and records a graph's too).
 *
 * CUPTI is opened when a trace is first asked for, never before: a
 * process that traces nothing needs no CUPTI, and one that cannot find it
 * is told where it looked ($PPDIFFUSE_CUDA_CUPTI names the library, else
 * the loader's search path is asked for CUPTI's soname).  Recording is
 * process-wide and stays on: CUPTI hands its records over in buffers it
 * asks the trace for, completed when it fills them or when the trace
 * flushes.  Only a trace's own records are kept (those handed over
 * between its two flushes: the memory they take is its work's), and of
 * them those whose kernel ran between two of CUPTI's timestamps taken
 * around its work, with the device otherwise idle.  Built without
 * CUPTI's headers, a trace says so. */
#include "pp-cuda-backend.h"
#include "pp-cuda-private.h"
#include "pp-error.h"

#include <string.h>

#ifdef PP_HAVE_CUPTI
#include <cupti_activity.h>
#include <gmodule.h>

#define CUPTI_SONAME "libcupti.so.13"
#define CUPTI_ENV "PPDIFFUSE_CUDA_CUPTI"
/* Each buffer CUPTI asks for: about 20,000 kernel records. */
#define TRACE_BUFFER_BYTES ((size_t) 8 << 20)
#define TRACE_BUFFER_ALIGN 8

typedef struct
{
  CUptiResult (*register_callbacks) (CUpti_BuffersCallbackRequestFunc,
      CUpti_BuffersCallbackCompleteFunc);
  CUptiResult (*enable) (CUpti_ActivityKind kind);
  CUptiResult (*flush_all) (uint32_t flag);
  CUptiResult (*next_record) (uint8_t * buffer, size_t valid,
      CUpti_Activity ** record);
  CUptiResult (*timestamp) (uint64_t * timestamp);
  CUptiResult (*result_string) (CUptiResult result, const char **str);
} Cupti;

static Cupti cupti;
static gboolean enabled;
static GMutex records_lock;
static gboolean collecting;     /* a trace runs: its records are kept */
static GArray *records;         /* PpKernelSpan, while collecting */
static guint64 dropped;         /* records without a name or timestamps */

static const char *
result_name (CUptiResult r)
{
  const char *s = NULL;

  if (cupti.result_string == NULL || cupti.result_string (r, &s)
      != CUPTI_SUCCESS || s == NULL)
    return "an unknown CUPTI result";
  return s;
}

static gboolean
cupti_ok (CUptiResult r, const char *call, GError ** error)
{
  if (r == CUPTI_SUCCESS)
    return TRUE;
  g_set_error (error, PP_ERROR, PP_ERROR_DEVICE, "%s: %s (%d)", call,
      result_name (r), (int) r);
  return FALSE;
}

static void
clear_span (gpointer data)
{
  g_free (((PpKernelSpan *) data)->name);
}

static void CUPTIAPI
buffer_requested (uint8_t ** buffer, size_t * size, size_t * max_records)
{
  *buffer = g_aligned_alloc (1, TRACE_BUFFER_BYTES, TRACE_BUFFER_ALIGN);
  *size = TRACE_BUFFER_BYTES;
  *max_records = 0;
}

static void CUPTIAPI
buffer_completed (CUcontext context, uint32_t stream, uint8_t * buffer,
    size_t size, size_t valid)
{
  CUpti_Activity *r = NULL;

  (void) context;
  (void) stream;
  (void) size;
  g_mutex_lock (&records_lock);
  while (collecting && cupti.next_record (buffer, valid, &r)
      == CUPTI_SUCCESS) {
    const CUpti_ActivityKernel10 *k = (const CUpti_ActivityKernel10 *) r;
    PpKernelSpan span;

    if (r->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL)
      continue;
    /* No timestamps: CUPTI lacked the device memory to take them. */
    if (k->name == NULL || k->start == 0 || k->end < k->start) {
      dropped++;
      continue;
    }
    span.name = g_strdup (k->name);
    span.start_ns = k->start;
    span.end_ns = k->end;
    g_array_append_val (records, span);
  }
  g_mutex_unlock (&records_lock);
  g_aligned_free (buffer);
}

#ifdef PP_CUDA_CUPTI_LINKED
/* The process's own CUPTI calls (the emulation's, tests/kernels/cuda-emu),
 * linked in. */
static gboolean
load (GError ** error)
{
  (void) error;
  cupti = (Cupti) {
  cuptiActivityRegisterCallbacks, cuptiActivityEnable,
        cuptiActivityFlushAll, cuptiActivityGetNextRecord,
        cuptiGetTimestamp, cuptiGetResultString};
  return TRUE;
}
#else
static gboolean
symbol (GModule * m, const char *name, gpointer * out, const char *path,
    GError ** error)
{
  if (g_module_symbol (m, name, out) && *out != NULL)
    return TRUE;
  g_set_error (error, PP_ERROR, PP_ERROR_DEVICE, "%s has no %s: not a "
      "CUDA 13 CUPTI (%s=PATH names one)", path, name, CUPTI_ENV);
  return FALSE;
}

static gboolean
load (GError ** error)
{
  const gchar *env = g_getenv (CUPTI_ENV);
  const gchar *path = env != NULL && *env != '\0' ? env : CUPTI_SONAME;
  GModule *m = g_module_open (path, G_MODULE_BIND_LOCAL);

  if (m == NULL) {
    g_set_error (error, PP_ERROR, PP_ERROR_DEVICE, "kernel traces need "
        "CUPTI, which did not load: %s (%s=PATH names its library, or add "
        "its folder to LD_LIBRARY_PATH: the toolkit's extras/CUPTI/lib64, "
        "or the nvidia-cuda-cupti wheel's lib)", g_module_error (),
        CUPTI_ENV);
    return FALSE;
  }
  /* Kept open for the process: CUPTI's threads call back into it. */
  g_module_make_resident (m);
  return symbol (m, "cuptiActivityRegisterCallbacks",
      (gpointer *) & cupti.register_callbacks, path, error)
      && symbol (m, "cuptiActivityEnable", (gpointer *) & cupti.enable,
      path, error)
      && symbol (m, "cuptiActivityFlushAll", (gpointer *) & cupti.flush_all,
      path, error)
      && symbol (m, "cuptiActivityGetNextRecord",
      (gpointer *) & cupti.next_record, path, error)
      && symbol (m, "cuptiGetTimestamp", (gpointer *) & cupti.timestamp,
      path, error)
      && symbol (m, "cuptiGetResultString",
      (gpointer *) & cupti.result_string, path, error);
}
#endif

gboolean
pp_cuda_trace_enable (PpBackend * be, GError ** error)
{
  static GMutex enable_lock;
  gboolean ok = TRUE;

  g_mutex_lock (&enable_lock);
  if (!enabled) {
    /* Where CUPTI's buffers go, before it may hand one over. */
    g_mutex_lock (&records_lock);
    if (records == NULL) {
      records = g_array_new (FALSE, FALSE, sizeof (PpKernelSpan));
      g_array_set_clear_func (records, clear_span);
    }
    g_mutex_unlock (&records_lock);
    be->memory->make_current (be);
    ok = load (error)
        && cupti_ok (cupti.register_callbacks (buffer_requested,
            buffer_completed), "cuptiActivityRegisterCallbacks", error)
        && cupti_ok (cupti.enable (CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL),
        "cuptiActivityEnable (CONCURRENT_KERNEL)", error);
    if (ok)
      enabled = TRUE;
    else
      memset (&cupti, 0, sizeof cupti);
  }
  g_mutex_unlock (&enable_lock);
  return ok;
}

static gint
by_start (gconstpointer a, gconstpointer b)
{
  const PpKernelSpan *x = a, *y = b;

  return x->start_ns < y->start_ns ? -1 : x->start_ns > y->start_ns;
}

GArray *
pp_cuda_trace (PpBackend * be, PpGraphFunc func, gpointer data,
    GError ** error)
{
  GArray *spans;
  uint64_t from = 0, to = 0;
  guint64 lost;
  gboolean ok;

  if (!enabled) {
    g_set_error (error, PP_ERROR, PP_ERROR_CONFIG, "no kernel trace on %s: "
        "pp_backend_trace_enable comes first", be->device);
    return NULL;
  }
  /* The device idle, and every record of the work before handed over
   * and dropped. */
  be->memory->synchronize (be);
  if (!cupti_ok (cupti.flush_all (CUPTI_ACTIVITY_FLAG_FLUSH_FORCED),
          "cuptiActivityFlushAll", error))
    return NULL;
  g_mutex_lock (&records_lock);
  collecting = TRUE;
  dropped = 0;
  g_mutex_unlock (&records_lock);
  ok = cupti_ok (cupti.timestamp (&from), "cuptiGetTimestamp", error)
      && func (data, error);
  be->memory->synchronize (be);
  ok = ok && cupti_ok (cupti.timestamp (&to), "cuptiGetTimestamp", error)
      && cupti_ok (cupti.flush_all (CUPTI_ACTIVITY_FLAG_FLUSH_FORCED),
      "cuptiActivityFlushAll", error);
  spans = g_array_new (FALSE, FALSE, sizeof (PpKernelSpan));
  g_array_set_clear_func (spans, clear_span);
  g_mutex_lock (&records_lock);
  collecting = FALSE;
  lost = dropped;
  for (guint i = 0; ok && i < records->len; i++) {
    PpKernelSpan *s = &g_array_index (records, PpKernelSpan, i);

    if (s->start_ns >= from && s->end_ns <= to) {
      g_array_append_val (spans, *s);
      s->name = NULL;           /* moved */
    }
  }
  g_array_set_size (records, 0);
  g_mutex_unlock (&records_lock);
  if (!ok) {
    g_array_unref (spans);
    return NULL;
  }
  if (lost > 0)
    g_warning ("%s: %" G_GUINT64_FORMAT " kernel records without their "
        "timestamps (CUPTI lacked device memory): the trace leaves them out",
        be->device, lost);
  g_array_sort (spans, by_start);
  return spans;
}

#else

gboolean
pp_cuda_trace_enable (PpBackend * be, GError ** error)
{
  g_set_error (error, PP_ERROR, PP_ERROR_CONFIG, "no kernel traces on %s: "
      "ppdiffuse was built without CUPTI's headers (cupti_activity.h)",
      be->device);
  return FALSE;
}

GArray *
pp_cuda_trace (PpBackend * be, PpGraphFunc func, gpointer data,
    GError ** error)
{
  (void) func;
  (void) data;
  (void) pp_cuda_trace_enable (be, error);
  return NULL;
}

#endif
