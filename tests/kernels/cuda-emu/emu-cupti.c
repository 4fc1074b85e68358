/* tests/kernels/cuda-emu: CUPTI's activity calls that the CUDA backend's
 * kernel trace makes (kernels/cuda/pp-cuda-trace.c), over the emulated
 * runtime: each emulated kernel that runs while kernel activity is
 * enabled becomes a CUpti_ActivityKernel10 record, its start and end the
 * monotonic clock's (cuptiGetTimestamp's too), handed to the client's
 * buffers when it flushes, as CUPTI hands its records.  The libraries'
 * calls (cuBLAS, cuBLASLt, cuDNN), whose device work the emulation runs
 * without kernels of its own, have no records. */
#include <cupti_activity.h>

#include <glib.h>
#include <string.h>

extern void (*emu_trace_hook) (const char *name, unsigned long long start,
    unsigned long long end);
unsigned long long emu_now_ns (void);

typedef struct
{
  const char *name;             /* interned */
  unsigned long long start, end;
} Span;

static GMutex lock;
static GArray *pending;         /* Span, not yet handed over */
static CUpti_BuffersCallbackRequestFunc requested;
static CUpti_BuffersCallbackCompleteFunc completed;
static guint32 correlation;

static void
record (const char *name, unsigned long long start, unsigned long long end)
{
  const Span s = { g_intern_string (name), start, end };

  g_mutex_lock (&lock);
  g_array_append_val (pending, s);
  g_mutex_unlock (&lock);
}

CUptiResult CUPTIAPI
cuptiActivityRegisterCallbacks (CUpti_BuffersCallbackRequestFunc request,
    CUpti_BuffersCallbackCompleteFunc complete)
{
  if (request == NULL || complete == NULL)
    return CUPTI_ERROR_INVALID_PARAMETER;
  requested = request;
  completed = complete;
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI
cuptiActivityEnable (CUpti_ActivityKind kind)
{
  if (kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL)
    return CUPTI_ERROR_NOT_SUPPORTED;
  if (requested == NULL)
    return CUPTI_ERROR_INVALID_OPERATION;
  g_mutex_lock (&lock);
  if (pending == NULL)
    pending = g_array_new (FALSE, FALSE, sizeof (Span));
  g_mutex_unlock (&lock);
  __atomic_store_n (&emu_trace_hook, record, __ATOMIC_RELEASE);
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI
cuptiGetTimestamp (uint64_t * timestamp)
{
  *timestamp = emu_now_ns ();
  return CUPTI_SUCCESS;
}

/* The pending records into the client's buffers, as many a buffer as it
 * holds (at most its maxNumRecords). */
CUptiResult CUPTIAPI
cuptiActivityFlushAll (uint32_t flag)
{
  GArray *spans;
  guint done = 0;

  (void) flag;
  if (completed == NULL)
    return CUPTI_ERROR_INVALID_OPERATION;
  g_mutex_lock (&lock);
  spans = pending;
  pending = g_array_new (FALSE, FALSE, sizeof (Span));
  g_mutex_unlock (&lock);
  if (spans == NULL)
    return CUPTI_SUCCESS;
  while (done < spans->len) {
    uint8_t *buffer = NULL;
    size_t size = 0, max_records = 0, n;

    requested (&buffer, &size, &max_records);
    if (buffer == NULL)
      break;                    /* declined: the records are dropped */
    n = size / sizeof (CUpti_ActivityKernel10);
    if (max_records > 0 && max_records < n)
      n = max_records;
    if (n > spans->len - done)
      n = spans->len - done;
    for (size_t i = 0; i < n; i++) {
      const Span *s = &g_array_index (spans, Span, done + i);
      CUpti_ActivityKernel10 k;

      memset (&k, 0, sizeof k);
      k.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
      k.start = s->start;
      k.end = s->end;
      k.completed = s->end;
      k.name = s->name;
      k.correlationId = ++correlation;
      memcpy (buffer + i * sizeof k, &k, sizeof k);
    }
    done += (guint) n;
    completed (NULL, 0, buffer, size, n * sizeof (CUpti_ActivityKernel10));
  }
  g_array_unref (spans);
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI
cuptiActivityGetNextRecord (uint8_t * buffer, size_t valid,
    CUpti_Activity ** record)
{
  size_t at;

  if (buffer == NULL)
    return CUPTI_ERROR_INVALID_PARAMETER;
  at = *record == NULL ? 0 : (size_t) ((uint8_t *) * record - buffer)
      + sizeof (CUpti_ActivityKernel10);
  if (at + sizeof (CUpti_ActivityKernel10) > valid)
    return CUPTI_ERROR_MAX_LIMIT_REACHED;
  *record = (CUpti_Activity *) (buffer + at);
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI
cuptiGetResultString (CUptiResult result, const char **str)
{
  *str = result == CUPTI_SUCCESS ? "CUPTI_SUCCESS" : "CUPTI_ERROR (emulated)";
  return CUPTI_SUCCESS;
}
