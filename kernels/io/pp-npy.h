/* ppdiffuse — NumPy .npy files (format versions 1.0 and 2.0), float arrays
 * in C order, for test fixtures and debugging dumps. */
#pragma once

#include "pp-tensor.h"

G_BEGIN_DECLS

/* Loads a little-endian float32 ('<f4') or float64 ('<f8') array in C order
 * of 1 to PP_TENSOR_MAX_DIMS dimensions as an F32 tensor named after the
 * file (basename without ".npy", cut to PP_TENSOR_NAME_MAX bytes). */
PpTensor *pp_npy_load (const gchar * path, GError ** error);
/* Writes an F32 tensor as '<f4', format version 1.0. */
gboolean  pp_npy_save (const gchar * path, const PpTensor * t,
                       GError ** error);

G_END_DECLS
