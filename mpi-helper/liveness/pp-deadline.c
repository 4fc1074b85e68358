/* ppdiffuse — blocking calls under a deadline. */
#include "pp-deadline.h"
#include "pp-error.h"
#include "pp-sigpipe.h"

typedef struct
{
  gint refs;
  GMutex lock;
  GCond cond;
  gboolean done;
  gboolean result;
  GError *error;
  PpBlockingFunc func;
  gpointer data;
  GDestroyNotify free_data;
} Call;

static void
call_unref (Call * call)
{
  if (!g_atomic_int_dec_and_test (&call->refs))
    return;
  if (call->free_data != NULL)
    call->free_data (call->data);
  g_clear_error (&call->error);
  g_mutex_clear (&call->lock);
  g_cond_clear (&call->cond);
  g_free (call);
}

static gpointer
call_thread (gpointer user_data)
{
  Call *call = user_data;
  GError *error = NULL;
  gboolean result = call->func (call->data, &error);

  if (!result && error == NULL)
    g_set_error (&error, PP_ERROR, PP_ERROR_RESOURCE, "the call failed "
        "without saying why");

  g_mutex_lock (&call->lock);
  call->result = result;
  call->error = error;
  call->done = TRUE;
  g_cond_signal (&call->cond);
  g_mutex_unlock (&call->lock);
  call_unref (call);
  return NULL;
}

gboolean
pp_run_with_deadline (const gchar * what, PpBlockingFunc func, gpointer data,
    GDestroyNotify free_data, guint timeout_ms, GError ** error)
{
  Call *call = g_new0 (Call, 1);
  gint64 deadline = g_get_monotonic_time () + (gint64) timeout_ms * 1000;
  GThread *thread;
  gboolean result = FALSE;
  gboolean done;

  call->refs = 2;
  g_mutex_init (&call->lock);
  g_cond_init (&call->cond);
  call->func = func;
  call->data = data;
  call->free_data = free_data;
  thread = pp_thread_new ("pp-deadline", call_thread, call);

  g_mutex_lock (&call->lock);
  while (!call->done)
    if (!g_cond_wait_until (&call->cond, &call->lock, deadline))
      break;
  /* Read under the lock: an abandoned call may finish at any time. */
  done = call->done;
  if (done) {
    result = call->result;
    if (!result)
      g_propagate_error (error, g_steal_pointer (&call->error));
  } else {
    g_set_error (error, PP_ERROR, PP_ERROR_TIMEOUT,
        "%s did not finish within %u ms (timeout-ms)", what, timeout_ms);
  }
  g_mutex_unlock (&call->lock);
  if (done)
    g_thread_join (thread);
  else
    g_thread_unref (thread);
  call_unref (call);
  return result;
}
