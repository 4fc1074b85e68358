/* ppdiffuse — GLib's and GStreamer's thread hand-overs, announced to
 * ThreadSanitizer.
 *
 * Preloaded (LD_PRELOAD) into every process of the tsan test setup
 * (tests/sanitizers/meson.build).  GLib's GMutex and GCond are futexes
 * inside an uninstrumented libglib, so ThreadSanitizer does not see a
 * thread hand data to another through a GAsyncQueue, a GThreadPool or a
 * GstBus: the pad task's first touch of the element that the application
 * thread set up, and the test's read of every buffer that GstHarness hands
 * over, would each be reported as a race.  pp-tsan-locks.h covers the calls
 * this project makes itself; this library covers the hand-overs that happen
 * between GLib, GStreamer and a test, by interposing the public functions at
 * the boundary (calls between shared libraries go through the PLT, so the
 * preloaded definition wins) and announcing each hand-over as a release by
 * the giving thread and an acquire by the taking thread on one address:
 *
 *   g_async_queue_*     push: release the queue; pop: acquire it
 *   g_thread_pool_*     push: release the item; the pool's function is
 *                       wrapped so that it acquires the item first
 *   gst_pad_start_task  the task function acquires the pad on every
 *                       iteration; starting, pausing and stopping the task
 *                       release it
 *   gst_bus_* / post    setting an element's bus and posting release,
 *                       posting and popping acquire (one address for
 *                       every bus: the poster reads the bus that another
 *                       thread set, the reader reads what was posted)
 *
 * Each is a happens-before that the real implementation provides with its
 * futexes; none adds an ordering that the library does not guarantee.  The
 * annotations are weak references: in a process without the ThreadSanitizer
 * runtime (a shell, python, Open MPI's daemons) they are absent and every
 * wrapper only forwards to the real function. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* The types are opaque here: this file includes neither GLib nor
 * GStreamer, so that it builds into a library that links neither. */
typedef int gboolean;
typedef void *gpointer;
typedef void (*GFunc) (gpointer data, gpointer user_data);
typedef void (*GDestroyNotify) (gpointer data);
typedef void (*GstTaskFunction) (gpointer user_data);

void __tsan_acquire (void *addr) __attribute__ ((weak));
void __tsan_release (void *addr) __attribute__ ((weak));

static void
acquire (void *addr)
{
  if (__tsan_acquire != NULL && addr != NULL)
    __tsan_acquire (addr);
}

static void
release (void *addr)
{
  if (__tsan_release != NULL && addr != NULL)
    __tsan_release (addr);
}

/* The next definition of @name after this library's, looked up once. */
static void *
real (_Atomic (void *) *slot, const char *name)
{
  void *f = atomic_load_explicit (slot, memory_order_acquire);

  if (f == NULL) {
    f = dlsym (RTLD_NEXT, name);
    if (f == NULL) {
      fprintf (stderr, "tsan-handoffs: no definition of %s after the "
          "preloaded one\n", name);
      abort ();
    }
    atomic_store_explicit (slot, f, memory_order_release);
  }
  return f;
}

#define REAL(ret, name, params) \
  static _Atomic (void *) name##_slot; \
  typedef ret (*name##_fn) params; \
  static name##_fn \
  real_##name (void) \
  { \
    return (name##_fn) real (&name##_slot, #name); \
  }

/* ---- GAsyncQueue -------------------------------------------------------- */

REAL (void, g_async_queue_push, (gpointer q, gpointer data))
REAL (void, g_async_queue_push_unlocked, (gpointer q, gpointer data))
REAL (void, g_async_queue_push_front, (gpointer q, gpointer data))
REAL (void, g_async_queue_push_front_unlocked, (gpointer q, gpointer data))
REAL (void, g_async_queue_push_sorted, (gpointer q, gpointer data,
        gpointer func, gpointer user_data))
REAL (void, g_async_queue_push_sorted_unlocked, (gpointer q, gpointer data,
        gpointer func, gpointer user_data))
REAL (gpointer, g_async_queue_pop, (gpointer q))
REAL (gpointer, g_async_queue_pop_unlocked, (gpointer q))
REAL (gpointer, g_async_queue_try_pop, (gpointer q))
REAL (gpointer, g_async_queue_try_pop_unlocked, (gpointer q))
REAL (gpointer, g_async_queue_timeout_pop, (gpointer q, int64_t timeout))
REAL (gpointer, g_async_queue_timeout_pop_unlocked, (gpointer q,
        int64_t timeout))
REAL (void, g_async_queue_lock, (gpointer q))
REAL (void, g_async_queue_unlock, (gpointer q))

void
g_async_queue_push (gpointer q, gpointer data)
{
  release (q);
  real_g_async_queue_push () (q, data);
}

void
g_async_queue_push_unlocked (gpointer q, gpointer data)
{
  release (q);
  real_g_async_queue_push_unlocked () (q, data);
}

void
g_async_queue_push_front (gpointer q, gpointer data)
{
  release (q);
  real_g_async_queue_push_front () (q, data);
}

void
g_async_queue_push_front_unlocked (gpointer q, gpointer data)
{
  release (q);
  real_g_async_queue_push_front_unlocked () (q, data);
}

void
g_async_queue_push_sorted (gpointer q, gpointer data, gpointer func,
    gpointer user_data)
{
  release (q);
  real_g_async_queue_push_sorted () (q, data, func, user_data);
}

void
g_async_queue_push_sorted_unlocked (gpointer q, gpointer data, gpointer func,
    gpointer user_data)
{
  release (q);
  real_g_async_queue_push_sorted_unlocked () (q, data, func, user_data);
}

gpointer
g_async_queue_pop (gpointer q)
{
  gpointer data = real_g_async_queue_pop () (q);

  acquire (q);
  return data;
}

gpointer
g_async_queue_pop_unlocked (gpointer q)
{
  gpointer data = real_g_async_queue_pop_unlocked () (q);

  acquire (q);
  return data;
}

gpointer
g_async_queue_try_pop (gpointer q)
{
  gpointer data = real_g_async_queue_try_pop () (q);

  acquire (q);
  return data;
}

gpointer
g_async_queue_try_pop_unlocked (gpointer q)
{
  gpointer data = real_g_async_queue_try_pop_unlocked () (q);

  acquire (q);
  return data;
}

gpointer
g_async_queue_timeout_pop (gpointer q, int64_t timeout)
{
  gpointer data = real_g_async_queue_timeout_pop () (q, timeout);

  acquire (q);
  return data;
}

gpointer
g_async_queue_timeout_pop_unlocked (gpointer q, int64_t timeout)
{
  gpointer data = real_g_async_queue_timeout_pop_unlocked () (q, timeout);

  acquire (q);
  return data;
}

/* The queue's own lock, held around the _unlocked calls. */
void
g_async_queue_lock (gpointer q)
{
  real_g_async_queue_lock () (q);
  acquire (q);
}

void
g_async_queue_unlock (gpointer q)
{
  release (q);
  real_g_async_queue_unlock () (q);
}

/* ---- GThreadPool -------------------------------------------------------- */

/* What a pool created through this library really calls. */
typedef struct
{
  GFunc func;
  gpointer user_data;
} PoolFunc;

static void
pool_trampoline (gpointer data, gpointer pool_func)
{
  PoolFunc *pf = pool_func;

  acquire (data);
  pf->func (data, pf->user_data);
}

/* The trampoline's closure lives as long as the process: a pool's function
 * may run until g_thread_pool_free returns, and pools are few. */
static PoolFunc *
pool_func_new (GFunc func, gpointer user_data)
{
  PoolFunc *pf = malloc (sizeof *pf);

  if (pf == NULL)
    abort ();
  pf->func = func;
  pf->user_data = user_data;
  return pf;
}

REAL (gpointer, g_thread_pool_new, (GFunc func, gpointer user_data,
        int max_threads, gboolean exclusive, gpointer * error))
REAL (gpointer, g_thread_pool_new_full, (GFunc func, gpointer user_data,
        GDestroyNotify item_free_func, int max_threads, gboolean exclusive,
        gpointer * error))
REAL (gboolean, g_thread_pool_push, (gpointer pool, gpointer data,
        gpointer * error))

gpointer
g_thread_pool_new (GFunc func, gpointer user_data, int max_threads,
    gboolean exclusive, gpointer * error)
{
  return real_g_thread_pool_new () (pool_trampoline,
      pool_func_new (func, user_data), max_threads, exclusive, error);
}

gpointer
g_thread_pool_new_full (GFunc func, gpointer user_data,
    GDestroyNotify item_free_func, int max_threads, gboolean exclusive,
    gpointer * error)
{
  return real_g_thread_pool_new_full () (pool_trampoline,
      pool_func_new (func, user_data), item_free_func, max_threads,
      exclusive, error);
}

gboolean
g_thread_pool_push (gpointer pool, gpointer data, gpointer * error)
{
  release (data);
  return real_g_thread_pool_push () (pool, data, error);
}

/* ---- GstPad tasks ------------------------------------------------------- */

typedef struct
{
  GstTaskFunction func;
  gpointer user_data;
  GDestroyNotify notify;
  gpointer pad;
} PadTask;

static void
pad_task_trampoline (gpointer pad_task)
{
  PadTask *pt = pad_task;

  acquire (pt->pad);
  pt->func (pt->user_data);
  release (pt->pad);
}

static void
pad_task_free (gpointer pad_task)
{
  PadTask *pt = pad_task;

  if (pt->notify != NULL)
    pt->notify (pt->user_data);
  free (pt);
}

REAL (gboolean, gst_pad_start_task, (gpointer pad, GstTaskFunction func,
        gpointer user_data, GDestroyNotify notify))
REAL (gboolean, gst_pad_pause_task, (gpointer pad))
REAL (gboolean, gst_pad_stop_task, (gpointer pad))

gboolean
gst_pad_start_task (gpointer pad, GstTaskFunction func, gpointer user_data,
    GDestroyNotify notify)
{
  PadTask *pt = malloc (sizeof *pt);
  gboolean started;

  if (pt == NULL)
    abort ();
  *pt = (PadTask) { func, user_data, notify, pad };
  release (pad);
  started = real_gst_pad_start_task () (pad, pad_task_trampoline, pt,
      pad_task_free);
  acquire (pad);
  return started;
}

gboolean
gst_pad_pause_task (gpointer pad)
{
  gboolean paused;

  release (pad);
  paused = real_gst_pad_pause_task () (pad);
  acquire (pad);
  return paused;
}

gboolean
gst_pad_stop_task (gpointer pad)
{
  gboolean stopped;

  release (pad);
  stopped = real_gst_pad_stop_task () (pad);
  acquire (pad);
  return stopped;
}

/* ---- GstBus ------------------------------------------------------------- */

/* One address for every bus: a message can reach its reader by the bus's
 * queue or by a sync handler, and which bus is not always at hand. */
static char bus_traffic;

REAL (void, gst_element_set_bus, (gpointer element, gpointer bus))
REAL (gboolean, gst_bus_post, (gpointer bus, gpointer message))
REAL (gboolean, gst_element_post_message, (gpointer element,
        gpointer message))
REAL (void, gst_element_message_full, (gpointer element, int type,
        uint32_t domain, int code, char *text, char *debug, const char *file,
        const char *function, int line))
REAL (void, gst_element_message_full_with_details, (gpointer element,
        int type, uint32_t domain, int code, char *text, char *debug,
        const char *file, const char *function, int line,
        gpointer structure))
REAL (gpointer, gst_bus_pop, (gpointer bus))
REAL (gpointer, gst_bus_pop_filtered, (gpointer bus, int types))
REAL (gpointer, gst_bus_timed_pop, (gpointer bus, uint64_t timeout))
REAL (gpointer, gst_bus_timed_pop_filtered, (gpointer bus, uint64_t timeout,
        int types))
REAL (gpointer, gst_bus_poll, (gpointer bus, int events, int64_t timeout))

void
gst_element_set_bus (gpointer element, gpointer bus)
{
  real_gst_element_set_bus () (element, bus);
  release (&bus_traffic);
}

gboolean
gst_bus_post (gpointer bus, gpointer message)
{
  acquire (&bus_traffic);
  release (&bus_traffic);
  return real_gst_bus_post () (bus, message);
}

gboolean
gst_element_post_message (gpointer element, gpointer message)
{
  acquire (&bus_traffic);
  release (&bus_traffic);
  return real_gst_element_post_message () (element, message);
}

/* GST_ELEMENT_ERROR and its kin post through these, inside
 * libgstreamer. */
void
gst_element_message_full (gpointer element, int type, uint32_t domain,
    int code, char *text, char *debug, const char *file,
    const char *function, int line)
{
  acquire (&bus_traffic);
  release (&bus_traffic);
  real_gst_element_message_full () (element, type, domain, code, text, debug,
      file, function, line);
}

void
gst_element_message_full_with_details (gpointer element, int type,
    uint32_t domain, int code, char *text, char *debug, const char *file,
    const char *function, int line, gpointer structure)
{
  acquire (&bus_traffic);
  release (&bus_traffic);
  real_gst_element_message_full_with_details () (element, type, domain, code,
      text, debug, file, function, line, structure);
}

gpointer
gst_bus_pop (gpointer bus)
{
  gpointer message = real_gst_bus_pop () (bus);

  acquire (&bus_traffic);
  return message;
}

gpointer
gst_bus_pop_filtered (gpointer bus, int types)
{
  gpointer message = real_gst_bus_pop_filtered () (bus, types);

  acquire (&bus_traffic);
  return message;
}

gpointer
gst_bus_timed_pop (gpointer bus, uint64_t timeout)
{
  gpointer message = real_gst_bus_timed_pop () (bus, timeout);

  acquire (&bus_traffic);
  return message;
}

gpointer
gst_bus_timed_pop_filtered (gpointer bus, uint64_t timeout, int types)
{
  gpointer message = real_gst_bus_timed_pop_filtered () (bus, timeout,
      types);

  acquire (&bus_traffic);
  return message;
}

gpointer
gst_bus_poll (gpointer bus, int events, int64_t timeout)
{
  gpointer message = real_gst_bus_poll () (bus, events, timeout);

  acquire (&bus_traffic);
  return message;
}
