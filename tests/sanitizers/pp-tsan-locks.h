/* ppdiffuse — GLib's locks, announced to ThreadSanitizer.
 *
 * Force-included (-include) into every C file of a -Db_sanitize=thread
 * build, and only there (see the top-level meson.build).
 *
 * GLib's GMutex, GRecMutex and GCond are built on futexes inside an
 * uninstrumented libglib, so ThreadSanitizer never sees them taken: every
 * access made under one looks unordered, and each is reported as a race.
 * Here the project's calls, and the GStreamer macros that expand to them
 * (GST_OBJECT_LOCK, GST_PAD_STREAM_LOCK, ...), go through wrappers that
 * tell ThreadSanitizer about each lock and unlock with its mutex
 * annotations; the lock itself is still GLib's.  A g_cond wait releases the
 * mutex and takes it again: it is announced as an unlock and a lock.
 *
 * What GLib and GStreamer lock inside themselves stays invisible; their
 * own accesses are not instrumented either, so that costs nothing.  A
 * file without GLib on its include path is left alone. */
#pragma once

#if defined(__has_include)
#if __has_include(<glib.h>) && __has_include(<sanitizer/tsan_interface.h>)
#define PP_TSAN_LOCKS 1
#endif
#endif

#ifdef PP_TSAN_LOCKS
/* Included before anything of the file: the feature macros that a file
 * defines on its first line (_GNU_SOURCE) must hold for the system headers
 * included here as well. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <glib.h>
#include <sanitizer/tsan_interface.h>

/* The wrappers call the real functions by their names in parentheses, so
 * that the macros below do not expand there. */

static inline void
pp_tsan_mutex_init (GMutex * m)
{
  (g_mutex_init) (m);
  __tsan_mutex_create (m, __tsan_mutex_not_static);
}

static inline void
pp_tsan_mutex_clear (GMutex * m)
{
  __tsan_mutex_destroy (m, __tsan_mutex_not_static);
  (g_mutex_clear) (m);
}

static inline void
pp_tsan_mutex_lock (GMutex * m)
{
  __tsan_mutex_pre_lock (m, 0);
  (g_mutex_lock) (m);
  __tsan_mutex_post_lock (m, 0, 0);
}

static inline gboolean
pp_tsan_mutex_trylock (GMutex * m)
{
  gboolean taken;

  __tsan_mutex_pre_lock (m, __tsan_mutex_try_lock);
  taken = (g_mutex_trylock) (m);
  __tsan_mutex_post_lock (m, taken ? __tsan_mutex_try_lock
      : __tsan_mutex_try_lock | __tsan_mutex_try_lock_failed, 0);
  return taken;
}

static inline void
pp_tsan_mutex_unlock (GMutex * m)
{
  __tsan_mutex_pre_unlock (m, 0);
  (g_mutex_unlock) (m);
  __tsan_mutex_post_unlock (m, 0);
}

static inline void
pp_tsan_rec_mutex_init (GRecMutex * m)
{
  (g_rec_mutex_init) (m);
  __tsan_mutex_create (m, __tsan_mutex_not_static
      | __tsan_mutex_write_reentrant);
}

static inline void
pp_tsan_rec_mutex_clear (GRecMutex * m)
{
  __tsan_mutex_destroy (m, __tsan_mutex_not_static);
  (g_rec_mutex_clear) (m);
}

/* ThreadSanitizer counts a re-entrant mutex's depth itself. */
static inline void
pp_tsan_rec_mutex_lock (GRecMutex * m)
{
  __tsan_mutex_pre_lock (m, 0);
  (g_rec_mutex_lock) (m);
  __tsan_mutex_post_lock (m, 0, 0);
}

static inline gboolean
pp_tsan_rec_mutex_trylock (GRecMutex * m)
{
  gboolean taken;

  __tsan_mutex_pre_lock (m, __tsan_mutex_try_lock);
  taken = (g_rec_mutex_trylock) (m);
  __tsan_mutex_post_lock (m, taken ? __tsan_mutex_try_lock
      : __tsan_mutex_try_lock | __tsan_mutex_try_lock_failed, 0);
  return taken;
}

static inline void
pp_tsan_rec_mutex_unlock (GRecMutex * m)
{
  __tsan_mutex_pre_unlock (m, 0);
  (g_rec_mutex_unlock) (m);
  __tsan_mutex_post_unlock (m, 0);
}

static inline void
pp_tsan_cond_wait (GCond * c, GMutex * m)
{
  __tsan_mutex_pre_unlock (m, 0);
  __tsan_mutex_post_unlock (m, 0);
  (g_cond_wait) (c, m);
  __tsan_mutex_pre_lock (m, 0);
  __tsan_mutex_post_lock (m, 0, 0);
}

static inline gboolean
pp_tsan_cond_wait_until (GCond * c, GMutex * m, gint64 end_time)
{
  gboolean signalled;

  __tsan_mutex_pre_unlock (m, 0);
  __tsan_mutex_post_unlock (m, 0);
  signalled = (g_cond_wait_until) (c, m, end_time);
  __tsan_mutex_pre_lock (m, 0);
  __tsan_mutex_post_lock (m, 0, 0);
  return signalled;
}

#define g_mutex_init(m) pp_tsan_mutex_init (m)
#define g_mutex_clear(m) pp_tsan_mutex_clear (m)
#define g_mutex_lock(m) pp_tsan_mutex_lock (m)
#define g_mutex_trylock(m) pp_tsan_mutex_trylock (m)
#define g_mutex_unlock(m) pp_tsan_mutex_unlock (m)
#define g_rec_mutex_init(m) pp_tsan_rec_mutex_init (m)
#define g_rec_mutex_clear(m) pp_tsan_rec_mutex_clear (m)
#define g_rec_mutex_lock(m) pp_tsan_rec_mutex_lock (m)
#define g_rec_mutex_trylock(m) pp_tsan_rec_mutex_trylock (m)
#define g_rec_mutex_unlock(m) pp_tsan_rec_mutex_unlock (m)
#define g_cond_wait(c, m) pp_tsan_cond_wait ((c), (m))
#define g_cond_wait_until(c, m, t) pp_tsan_cond_wait_until ((c), (m), (t))
#endif /* PP_TSAN_LOCKS */
