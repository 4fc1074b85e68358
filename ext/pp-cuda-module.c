/* ppdiffuse — loading the CUDA module. */
#include "pp-cuda-module.h"
#include "pp-error.h"

#include <gmodule.h>

#ifndef PP_CUDA_MODULE_INSTALLED
#error "PP_CUDA_MODULE_INSTALLED must name the installed CUDA module"
#endif
#ifndef PP_CUDA_MODULE_BUILT
#error "PP_CUDA_MODULE_BUILT must name the CUDA module in the build tree"
#endif

static GMutex lock;
static GModule *module;
static gchar *load_error;

const gchar *
pp_cuda_module_path (void)
{
  const gchar *path = g_getenv (PP_CUDA_MODULE_ENV);

  if (path != NULL && *path != '\0')
    return path;
  if (g_file_test (PP_CUDA_MODULE_INSTALLED, G_FILE_TEST_EXISTS))
    return PP_CUDA_MODULE_INSTALLED;
  return PP_CUDA_MODULE_BUILT;
}

gpointer
pp_cuda_module_symbol (const gchar * symbol, GError ** error)
{
  const gchar *path;
  gpointer address = NULL;

  g_mutex_lock (&lock);
  path = pp_cuda_module_path ();
  if (module == NULL && load_error == NULL) {
    /* Local: its symbols stay its own; kept for the process's life. */
    module = g_module_open (path, G_MODULE_BIND_LOCAL);
    if (module == NULL)
      load_error = g_strdup (g_module_error ());
    else
      g_module_make_resident (module);
  }
  if (module == NULL)
    g_set_error (error, PP_ERROR, PP_ERROR_DEVICE, "the CUDA module %s "
        "cannot be loaded (%s); set $%s to where libppdiffuse-cuda.so is",
        path, load_error, PP_CUDA_MODULE_ENV);
  else if (!g_module_symbol (module, symbol, &address) || address == NULL)
    g_set_error (error, PP_ERROR, PP_ERROR_DEVICE, "the CUDA module %s has "
        "no %s: is it of another build of ppdiffuse?", path, symbol);
  g_mutex_unlock (&lock);
  return address;
}
