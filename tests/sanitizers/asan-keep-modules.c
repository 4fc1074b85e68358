/* ppdiffuse — Open MPI's components stay mapped until the process ends.
 *
 * Preloaded (LD_PRELOAD) into every process of the asan test setup
 * (tests/sanitizers/meson.build).  Open MPI 4.1 and the PMIx inside it
 * unload their components (mca_*.so, PMIx's plugins) in MPI_Finalize,
 * before LeakSanitizer runs at exit, and Open MPI 4.1 has no parameter to
 * keep them (ompi_info --all lists no *_disable_dlclose).  The frames of
 * what those components allocated and kept then lie in no mapped module:
 *
 *   - they print as "<unknown module>", which no suppression can name;
 *   - the sanitizer's symbolizer re-reads /proc/self/maps for every such
 *     frame of every leak it checks against the suppressions: about a
 *     second of CPU at each exit of a worker or a test process, most of
 *     the asan run's time in the tests that start many meshes.
 *
 * dlclose here keeps those components mapped (a file name that begins
 * with mca_ or pmix_mca_) and closes every other library as usual: what
 * an unload would release is memory the process gives back at exit a
 * moment later anyway, and no code of this project depends on a component
 * being unmapped.  The library defines only dlclose, nothing that the
 * sanitizer's runtime intercepts, and is built without instrumentation, so
 * that a process without the runtime (a shell, python, orted) loads it
 * too. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <string.h>

typedef int (*DlcloseFunc) (void *handle);

static int
is_component (const char *path)
{
  const char *base = strrchr (path, '/');

  base = base != NULL ? base + 1 : path;
  return strncmp (base, "mca_", 4) == 0 || strncmp (base, "pmix_mca_", 9) == 0;
}

int
dlclose (void *handle)
{
  static DlcloseFunc real_dlclose;
  struct link_map *map = NULL;
  DlcloseFunc next;

  if (dlinfo (handle, RTLD_DI_LINKMAP, &map) == 0 && map != NULL
      && map->l_name != NULL && is_component (map->l_name))
    return 0;
  next = __atomic_load_n (&real_dlclose, __ATOMIC_ACQUIRE);
  if (next == NULL) {
    next = (DlcloseFunc) dlsym (RTLD_NEXT, "dlclose");
    __atomic_store_n (&real_dlclose, next, __ATOMIC_RELEASE);
  }
  return next (handle);
}
