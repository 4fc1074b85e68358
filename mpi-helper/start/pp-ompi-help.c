/* ppdiffuse — Open MPI's warnings printed where they arise
 * (pp-ompi-help.h). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "pp-ompi-help.h"
#include "pp-log.h"

#include <dlfcn.h>
#include <mpi.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

/* Open MPI's own library (libopen-pal) holds the printer of help messages
 * as two function pointers, which its runtime points at the relay to the
 * daemon during MPI_Init; and the renderer, which reads the message's
 * text from Open MPI's help files.  Their types, as opal/util/show_help.h
 * of Open MPI 4 declares them. */
typedef int (*HelpFn) (const char *file, const char *topic,
    int want_error_header, ...);
typedef int (*VhelpFn) (const char *file, const char *topic,
    bool want_error_header, va_list ap);
typedef char *(*VstringFn) (const char *file, const char *topic,
    bool want_error_header, va_list ap);

#define OPAL_LIBRARY "libopen-pal.so.40"

static VstringFn render;
static PpOmpiHelpSink sink;

static int
print_vhelp (const char *file, const char *topic, bool want_error_header,
    va_list ap)
{
  char *text = render (file, topic, want_error_header, ap);

  if (text == NULL)
    return 0;
  if (sink != NULL) {
    sink (text);
  } else {
    fputs (text, stderr);
    fflush (stderr);
  }
  free (text);
  return 0;
}

static int
print_help (const char *file, const char *topic, int want_error_header, ...)
{
  va_list ap;
  int rc;

  va_start (ap, want_error_header);
  rc = print_vhelp (file, topic, want_error_header != 0, ap);
  va_end (ap);
  return rc;
}

gboolean
pp_ompi_help_here (PpOmpiHelpSink to)
{
#if defined(OPEN_MPI) && OMPI_MAJOR_VERSION == 4
  /* Already loaded by libmpi: no new reference, no other copy. */
  void *opal = dlopen (OPAL_LIBRARY, RTLD_LAZY | RTLD_NOLOAD);
  HelpFn *help;
  VhelpFn *vhelp;

  if (opal == NULL) {
    PP_DEBUG ("Open MPI's help messages go to its daemon: %s is not "
        "loaded (%s)", OPAL_LIBRARY, dlerror ());
    return FALSE;
  }
  help = dlsym (opal, "opal_show_help");
  vhelp = dlsym (opal, "opal_show_vhelp");
  render = dlsym (opal, "opal_show_help_vstring");
  dlclose (opal);
  if (help == NULL || vhelp == NULL || render == NULL) {
    PP_DEBUG ("Open MPI's help messages go to its daemon: %s has no "
        "opal_show_help, opal_show_vhelp or opal_show_help_vstring",
        OPAL_LIBRARY);
    return FALSE;
  }
  sink = to;
  /* Aligned pointer stores: a thread of Open MPI's reading one sees the
   * old printer or the new, both whole. */
  __atomic_store_n (vhelp, print_vhelp, __ATOMIC_RELEASE);
  __atomic_store_n (help, print_help, __ATOMIC_RELEASE);
  return TRUE;
#else
  PP_DEBUG ("Open MPI's help messages are left as they are: the MPI is "
      "not Open MPI 4");
  return FALSE;
#endif
}
