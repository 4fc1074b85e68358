/* ppdiffuse — a heap allocation counter to preload (LD_PRELOAD) into a
 * process whose allocations per frame are to be measured: every malloc,
 * calloc, realloc and aligned allocation adds its size to a process-wide
 * count, which the measuring code reads through pp_alloc_count_bytes()
 * (a weak symbol there: absent when nothing is preloaded).  Allocations
 * made by OpenBLAS itself (its small-matrix sgemm kernels allocate per call)
 * are counted apart, in pp_alloc_count_openblas_bytes(): they are the
 * library's, not the caller's.  The glibc allocator does the work
 * (__libc_*: no dlsym, which would allocate).
 *
 * Environment:
 *
 *   PP_ALLOC_COUNT_REPORT=1      each process prints its totals at exit, so
 *                                that runs of N and M frames give the bytes
 *                                a frame allocates by difference:
 *     alloc-count EXE pid P: B bytes in C calls, O bytes by OpenBLAS
 *
 *   PP_ALLOC_COUNT_BY_LIBRARY=1  every allocation is also charged to the
 *                                library that asked for it: the first frame
 *                                of its call stack outside the C library,
 *                                the loader, GLib, GObject, the unwinder and
 *                                this counter (they allocate on their
 *                                callers' behalf).  The report adds
 *     alloc-count-libraries EXE pid P mpi-rank R: ours B gstreamer B openmpi B openblas B other B
 *                                (R: the process's rank in its own
 *                                MPI_COMM_WORLD, "-" outside MPI).
 *
 *   PP_ALLOC_COUNT_OUT=DIR       the report goes to DIR/alloc-count-PID.txt
 *                                instead of stderr (whose lines the MPI
 *                                runtime may interleave across processes).
 *
 *   PP_ALLOC_COUNT_SITES=N       with BY_LIBRARY, the report also names the
 *                                N call sites that allocated the most, each
 *                                as the charged frame and its two callers,
 *                                OBJECT+0xOFFSET (addr2line -f -e OBJECT),
 *                                then (SYMBOL+0xOFFSET) when the object
 *                                exports the function:
 *     alloc-count-site EXE pid P: B bytes in C calls, LIBRARY: F < F < F
 *
 *   PP_ALLOC_COUNT_WINDOW=1      with BY_LIBRARY, a first SIGUSR2 opens a
 *                                window and a second closes it; the report
 *                                adds what each library allocated in it
 *                                ("open" or "unopened" when it was not
 *                                closed) and, with SITES, every site that
 *                                allocated in it:
 *     alloc-count-window EXE pid P mpi-rank R: ours B gstreamer B openmpi B openblas B other B
 *     alloc-count-window-site EXE pid P: B bytes in C calls, LIBRARY: F < F < F
 *                                A measurement opens it once a stream is
 *                                warm and closes it before the stream ends:
 *                                what start-up and teardown allocate, and
 *                                how much warming up takes on a given run
 *                                (threads race to grow their buffers), stay
 *                                out of it.
 *
 * Walking the stack costs a few microseconds an allocation: the in-suite
 * tests that only read the totals leave BY_LIBRARY off. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <unwind.h>

extern void *__libc_malloc (size_t size);
extern void *__libc_calloc (size_t n, size_t size);
extern void *__libc_realloc (void *p, size_t size);
extern void *__libc_memalign (size_t align, size_t size);

/* Frames of one stack walk, and of one call site as reported. */
#define WALK_FRAMES 48
#define SITE_FRAMES 3
/* Distinct call sites kept (open addressing; more are counted, unnamed). */
#define MAX_SITES 8192

typedef enum
{
  LIB_OURS,
  LIB_GSTREAMER,
  LIB_OPENMPI,
  LIB_OPENBLAS,
  LIB_OTHER,
  N_LIBS,
  LIB_SKIP = N_LIBS,            /* allocates on its caller's behalf */
} Library;

static const char *const library_names[N_LIBS] = {
  [LIB_OURS] = "ours",
  [LIB_GSTREAMER] = "gstreamer",
  [LIB_OPENMPI] = "openmpi",
  [LIB_OPENBLAS] = "openblas",
  [LIB_OTHER] = "other",
};

/* Objects by the start of their file name.  Ours: the plugin, the worker
 * and the tool (the project's static libraries are linked into them).  Open
 * MPI with the libraries it brings for its runtime and transports. */
static const char *const skip_prefixes[] = {
  "libc.so", "libc-", "ld-linux", "libpthread", "libglib-2.0",
  "libgobject-2.0", "libgcc_s", "libstdc++", NULL
};
static const char *const ours_prefixes[] = {
  "libgstppdiffuse", "libppdiffuse", "ppdiffuse-", NULL
};
static const char *const gstreamer_prefixes[] = {
  "libgst", "gst-", NULL
};
static const char *const openmpi_prefixes[] = {
  "libmpi", "libopen-", "mca_", "libpmix", "libevent", "libhwloc",
  "libucp", "libucs", "libuct", "libucm", "libfabric", "orted", NULL
};

typedef struct
{
  atomic_ullong key;            /* 0: free; else the hash of ips */
  void *ips[SITE_FRAMES];       /* written once, by the thread that keyed it */
  atomic_int library;
  atomic_ullong bytes, calls;
} Site;

static atomic_ullong bytes, calls, openblas_bytes;
static atomic_ullong library_bytes[N_LIBS];
static atomic_ullong unnamed_site_bytes;
static Site sites[MAX_SITES];

/* The window: the counts when it opened and when it closed. */
typedef enum
{
  WINDOW_UNOPENED,
  WINDOW_OPEN,
  WINDOW_CLOSED,
} WindowState;

typedef struct
{
  unsigned long long library_bytes[N_LIBS];
  unsigned long long site_bytes[MAX_SITES];
  unsigned long long site_calls[MAX_SITES];
} Counts;

static atomic_int window_state;
static Counts window_open, window_close;
/* -1: not read yet; else whether PP_ALLOC_COUNT_BY_LIBRARY=1. */
static atomic_int by_library = -1;
/* Set while this thread is inside count(): dladdr and the unwinder must
 * not recurse into it. */
static __thread int counting;

static int
env_is_one (const char *name)
{
  const char *v = getenv (name);

  return v != NULL && strcmp (v, "1") == 0;
}

static int
has_prefix (const char *s, const char *const *prefixes)
{
  for (; *prefixes != NULL; prefixes++)
    if (strncmp (s, *prefixes, strlen (*prefixes)) == 0)
      return 1;
  return 0;
}

static const char *
base_name (const char *path)
{
  const char *slash = strrchr (path, '/');

  return slash != NULL ? slash + 1 : path;
}

/* The object holding @addr, or NULL. */
static const char *
object_of (const void *addr, void **base)
{
  Dl_info info;

  if (dladdr (addr, &info) == 0 || info.dli_fname == NULL)
    return NULL;
  *base = info.dli_fbase;
  return info.dli_fname;
}

static Library
library_of (const void *addr)
{
  static char self_anchor;
  void *base, *self_base;
  const char *path = object_of (addr, &base), *name;

  if (path == NULL)
    return LIB_OTHER;
  if (object_of (&self_anchor, &self_base) != NULL && base == self_base)
    return LIB_SKIP;
  name = base_name (path);
  if (has_prefix (name, skip_prefixes))
    return LIB_SKIP;
  if (has_prefix (name, ours_prefixes))
    return LIB_OURS;
  if (has_prefix (name, gstreamer_prefixes))
    return LIB_GSTREAMER;
  if (has_prefix (name, openmpi_prefixes))
    return LIB_OPENMPI;
  if (strstr (name, "openblas") != NULL)
    return LIB_OPENBLAS;
  return LIB_OTHER;
}

/* Whether @caller is code of libopenblas. */
static int
in_openblas (void *caller)
{
  void *base;
  const char *path = object_of (caller, &base);

  return path != NULL && strstr (path, "openblas") != NULL;
}

typedef struct
{
  void *ips[WALK_FRAMES];
  int n;
} Walk;

static _Unwind_Reason_Code
walk_frame (struct _Unwind_Context *ctx, void *data)
{
  Walk *walk = data;
  int before = 0;
  uintptr_t ip = _Unwind_GetIPInfo (ctx, &before);

  if (ip == 0 || walk->n == WALK_FRAMES)
    return _URC_END_OF_STACK;
  /* A return address points after its call: step back into it. */
  walk->ips[walk->n++] = (void *) (before ? ip : ip - 1);
  return _URC_NO_REASON;
}

static uint64_t
hash_ips (void *const *ips, int n)
{
  uint64_t h = 1469598103934665603ull;        /* FNV-1a */

  for (int i = 0; i < n; i++) {
    h ^= (uint64_t) (uintptr_t) ips[i];
    h *= 1099511628211ull;
  }
  return h != 0 ? h : 1;
}

static void
note_site (void *const *ips, int n, Library library, size_t size)
{
  const uint64_t key = hash_ips (ips, n);

  for (unsigned probe = 0; probe < MAX_SITES; probe++) {
    Site *s = &sites[(key + probe) % MAX_SITES];
    unsigned long long seen = atomic_load (&s->key);

    if (seen == 0 && atomic_compare_exchange_strong (&s->key, &seen, key)) {
      memcpy (s->ips, ips, n * sizeof *ips);
      atomic_store (&s->library, library);
      seen = key;
    }
    if (seen == key) {
      atomic_fetch_add_explicit (&s->bytes, size, memory_order_relaxed);
      atomic_fetch_add_explicit (&s->calls, 1, memory_order_relaxed);
      return;
    }
  }
  atomic_fetch_add_explicit (&unnamed_site_bytes, size, memory_order_relaxed);
}

/* Charges @size to the first frame of the stack outside the skipped
 * objects (all skipped: to other). */
static void
attribute (size_t size)
{
  Walk walk = { .n = 0 };
  void *site[SITE_FRAMES] = { NULL };
  Library library = LIB_OTHER;
  int first = -1;

  _Unwind_Backtrace (walk_frame, &walk);
  for (int i = 0; i < walk.n && first < 0; i++) {
    Library l = library_of (walk.ips[i]);

    if (l != LIB_SKIP) {
      library = l;
      first = i;
    }
  }
  if (first < 0)
    first = walk.n > 0 ? walk.n - 1 : 0;
  for (int i = 0; i < SITE_FRAMES && first + i < walk.n; i++)
    site[i] = walk.ips[first + i];
  atomic_fetch_add_explicit (&library_bytes[library], size,
      memory_order_relaxed);
  note_site (site, SITE_FRAMES, library, size);
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
  if (atomic_load_explicit (&by_library, memory_order_relaxed) < 0)
    atomic_store (&by_library, env_is_one ("PP_ALLOC_COUNT_BY_LIBRARY"));
  if (atomic_load_explicit (&by_library, memory_order_relaxed))
    attribute (size);
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

/* Atomic loads only: it runs in a signal handler. */
static void
snapshot (Counts * c)
{
  for (int l = 0; l < N_LIBS; l++)
    c->library_bytes[l] = atomic_load (&library_bytes[l]);
  for (int i = 0; i < MAX_SITES; i++) {
    c->site_bytes[i] = atomic_load (&sites[i].bytes);
    c->site_calls[i] = atomic_load (&sites[i].calls);
  }
}

static void
on_window_signal (int sig)
{
  const int state = atomic_load (&window_state);

  (void) sig;
  if (state == WINDOW_UNOPENED) {
    snapshot (&window_open);
    atomic_store (&window_state, WINDOW_OPEN);
  } else if (state == WINDOW_OPEN) {
    snapshot (&window_close);
    atomic_store (&window_state, WINDOW_CLOSED);
  }
}

__attribute__ ((constructor)) static void
install_window (void)
{
  struct sigaction sa;

  if (!env_is_one ("PP_ALLOC_COUNT_WINDOW"))
    return;
  memset (&sa, 0, sizeof sa);
  sa.sa_handler = on_window_signal;
  sa.sa_flags = SA_RESTART;
  sigemptyset (&sa.sa_mask);
  sigaction (SIGUSR2, &sa, NULL);
}

/* "object+0xoffset" of @ip into @buf, and "(symbol+0xoffset)" when the
 * object exports the function around it. */
static void
describe_ip (void *ip, char *buf, size_t len)
{
  Dl_info info;

  if (ip == NULL || dladdr (ip, &info) == 0 || info.dli_fname == NULL) {
    snprintf (buf, len, "?");
    return;
  }
  if (info.dli_sname != NULL && info.dli_saddr != NULL)
    snprintf (buf, len, "%s+0x%lx(%s+0x%lx)", info.dli_fname,
        (unsigned long) ((uintptr_t) ip - (uintptr_t) info.dli_fbase),
        info.dli_sname,
        (unsigned long) ((uintptr_t) ip - (uintptr_t) info.dli_saddr));
  else
    snprintf (buf, len, "%s+0x%lx", info.dli_fname,
        (unsigned long) ((uintptr_t) ip - (uintptr_t) info.dli_fbase));
}

/* The @n sites that allocated the most, largest first, after @prefix:
 * all they allocated, or when @since and @until are set, what they
 * allocated between those counts.  No allocation: a scan per line. */
static void
report_sites (FILE * out, const char *prefix, const char *exe, int n,
    const Counts * since, const Counts * until)
{
  static char reported[MAX_SITES];

  memset (reported, 0, sizeof reported);
  for (int line = 0; line < n; line++) {
    int best = -1;
    unsigned long long most = 0, most_calls = 0;
    char frames[SITE_FRAMES][512];

    for (int i = 0; i < MAX_SITES; i++) {
      unsigned long long b = atomic_load (&sites[i].bytes);
      unsigned long long c = atomic_load (&sites[i].calls);

      if (since != NULL) {
        b = until->site_bytes[i] - since->site_bytes[i];
        c = until->site_calls[i] - since->site_calls[i];
      }
      if (!reported[i] && atomic_load (&sites[i].key) != 0 && c > 0
          && (best < 0 || b > most)) {
        most = b;
        most_calls = c;
        best = i;
      }
    }
    if (best < 0)
      break;
    reported[best] = 1;
    for (int f = 0; f < SITE_FRAMES; f++)
      describe_ip (sites[best].ips[f], frames[f], sizeof frames[f]);
    fprintf (out, "%s %s pid %d: %llu bytes in %llu calls, %s: %s < %s < %s\n",
        prefix, exe, (int) getpid (), most, most_calls,
        library_names[atomic_load (&sites[best].library)], frames[0],
        frames[1], frames[2]);
  }
  if (since == NULL && atomic_load (&unnamed_site_bytes) > 0)
    fprintf (out, "%s %s pid %d: %llu bytes at sites past the table's %d\n",
        prefix, exe, (int) getpid (),
        (unsigned long long) atomic_load (&unnamed_site_bytes), MAX_SITES);
}

/* "PREFIX EXE pid P mpi-rank R: ours B gstreamer B ..." */
static void
report_libraries (FILE * out, const char *prefix, const char *exe,
    const unsigned long long *since, const unsigned long long *until)
{
  const char *rank = getenv ("OMPI_COMM_WORLD_RANK");

  fprintf (out, "%s %s pid %d mpi-rank %s:", prefix, exe, (int) getpid (),
      rank != NULL ? rank : "-");
  for (int l = 0; l < N_LIBS; l++)
    fprintf (out, " %s %llu", library_names[l], until[l] - since[l]);
  fprintf (out, "\n");
}

static void
report_window (FILE * out, const char *exe, int n_sites)
{
  const int state = atomic_load (&window_state);
  const char *rank = getenv ("OMPI_COMM_WORLD_RANK");

  if (state != WINDOW_CLOSED) {
    fprintf (out, "alloc-count-window %s pid %d mpi-rank %s: %s\n", exe,
        (int) getpid (), rank != NULL ? rank : "-",
        state == WINDOW_OPEN ? "open" : "unopened");
    return;
  }
  report_libraries (out, "alloc-count-window", exe,
      window_open.library_bytes, window_close.library_bytes);
  report_sites (out, "alloc-count-window-site", exe, n_sites, &window_open,
      &window_close);
}

__attribute__ ((destructor)) static void
report (void)
{
  static const unsigned long long zero[N_LIBS];
  const char *n_sites = getenv ("PP_ALLOC_COUNT_SITES");
  const char *dir = getenv ("PP_ALLOC_COUNT_OUT");
  unsigned long long totals[N_LIBS];
  char exe[256] = "", path[512];
  const char *name;
  FILE *out = stderr;
  ssize_t len;

  if (!env_is_one ("PP_ALLOC_COUNT_REPORT"))
    return;
  counting = 1;                 /* what the report allocates is not counted */
  len = readlink ("/proc/self/exe", exe, sizeof exe - 1);
  exe[len > 0 ? len : 0] = '\0';
  name = base_name (exe);
  if (dir != NULL && *dir != '\0') {
    snprintf (path, sizeof path, "%s/alloc-count-%d.txt", dir,
        (int) getpid ());
    out = fopen (path, "w");
    if (out == NULL)
      out = stderr;
  }
  fprintf (out, "alloc-count %s pid %d: %llu bytes in %llu calls, "
      "%llu bytes by OpenBLAS\n", name, (int) getpid (),
      pp_alloc_count_bytes (), pp_alloc_count_calls (),
      pp_alloc_count_openblas_bytes ());
  if (atomic_load (&by_library) == 1) {
    for (int l = 0; l < N_LIBS; l++)
      totals[l] = atomic_load (&library_bytes[l]);
    report_libraries (out, "alloc-count-libraries", name, zero, totals);
    if (n_sites != NULL)
      report_sites (out, "alloc-count-site", name, atoi (n_sites), NULL,
          NULL);
    if (env_is_one ("PP_ALLOC_COUNT_WINDOW"))
      report_window (out, name, n_sites != NULL ? atoi (n_sites) : 0);
  }
  if (out != stderr)
    fclose (out);
}
