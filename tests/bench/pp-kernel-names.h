/* ppdiffuse — kernel names as gpu-bench's kernel traces show them. */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

/* The width a name is cut to. */
#define PP_KERNEL_NAME_WIDTH 70

/* @name, a kernel's as the device has it, for a table (free it): a C++
 * kernel's mangled name (_Z…) as its qualified function name, its
 * template arguments shown as <...>; a name in C (the libraries' kernels
 * mostly) as it is; either cut to PP_KERNEL_NAME_WIDTH bytes. */
gchar    *pp_kernel_short_name (const gchar * name);

G_END_DECLS
