/* ppdiffuse — shared libraries stay mapped until the process ends.
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
 * dlclose here keeps the library: what an unload would release is memory
 * the process gives back at exit a moment later anyway.  No code of this
 * project depends on a library being unmapped.  The library defines only
 * dlclose, nothing that the sanitizer's runtime intercepts, and is built
 * without instrumentation, so that a process without the runtime (a shell,
 * python, orted) loads it too. */
#include <dlfcn.h>

int
dlclose (void *handle)
{
  (void) handle;
  return 0;
}
