/* ppdiffuse — a heap allocation counter to preload (LD_PRELOAD) into a
 * process whose allocations per frame are to be measured: every malloc,
 * calloc, realloc and aligned allocation adds its size to a process-wide
 * count, which the measuring code reads through pp_alloc_count_bytes()
 * (a weak symbol there: absent when nothing is preloaded).  Allocations
 * made by OpenBLAS itself (its small-matrix sgemm kernels allocate per call)
 * are counted apart, in pp_alloc_count_openblas_bytes(): they are the
 * library's, not the caller's.  With PP_ALLOC_COUNT_REPORT=1 each process
 * prints its totals at exit, so that runs of N and M frames give the bytes
 * a frame allocates by difference.  The glibc allocator does the work
 * (__libc_*: no dlsym, which would allocate). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

extern void *__libc_malloc (size_t size);
extern void *__libc_calloc (size_t n, size_t size);
extern void *__libc_realloc (void *p, size_t size);
extern void *__libc_memalign (size_t align, size_t size);

static atomic_ullong bytes, calls, openblas_bytes;
/* Set while this thread is inside count(): dladdr must not recurse. */
static __thread int counting;

/* Whether @caller is code of libopenblas. */
static int
in_openblas (void *caller)
{
  Dl_info info;

  return dladdr (caller, &info) != 0 && info.dli_fname != NULL
      && strstr (info.dli_fname, "openblas") != NULL;
}

static void
count_from (size_t size, void *caller)
{
  atomic_fetch_add_explicit (&bytes, size, memory_order_relaxed);
  atomic_fetch_add_explicit (&calls, 1, memory_order_relaxed);
  if (counting)
    return;
  counting = 1;
  if (in_openblas (caller))
    atomic_fetch_add_explicit (&openblas_bytes, size, memory_order_relaxed);
  counting = 0;
}

#define count(size) count_from ((size), __builtin_return_address (0))

unsigned long long
pp_alloc_count_bytes (void)
{
  return atomic_load (&bytes);
}

unsigned long long
pp_alloc_count_openblas_bytes (void)
{
  return atomic_load (&openblas_bytes);
}

unsigned long long
pp_alloc_count_calls (void)
{
  return atomic_load (&calls);
}

void *
malloc (size_t size)
{
  count (size);
  return __libc_malloc (size);
}

void *
calloc (size_t n, size_t size)
{
  count (n * size);
  return __libc_calloc (n, size);
}

void *
realloc (void *p, size_t size)
{
  count (size);
  return __libc_realloc (p, size);
}

void *
memalign (size_t align, size_t size)
{
  count (size);
  return __libc_memalign (align, size);
}

void *
aligned_alloc (size_t align, size_t size)
{
  count (size);
  return __libc_memalign (align, size);
}

int
posix_memalign (void **out, size_t align, size_t size)
{
  void *p;

  count (size);
  p = __libc_memalign (align, size);
  if (p == NULL)
    return ENOMEM;
  *out = p;
  return 0;
}

__attribute__ ((destructor)) static void
report (void)
{
  const char *on = getenv ("PP_ALLOC_COUNT_REPORT");
  char exe[256] = "";
  ssize_t len;

  if (on == NULL || strcmp (on, "1") != 0)
    return;
  len = readlink ("/proc/self/exe", exe, sizeof exe - 1);
  exe[len > 0 ? len : 0] = '\0';
  fprintf (stderr, "alloc-count %s pid %d: %llu bytes in %llu calls, "
      "%llu bytes by OpenBLAS\n", strrchr (exe, '/') ? strrchr (exe, '/') + 1
      : exe, (int) getpid (), pp_alloc_count_bytes (),
      pp_alloc_count_calls (), pp_alloc_count_openblas_bytes ());
}
