/* ppdiffuse — the CUDA backend's timed choices kept across processes: a
 * convolution's algorithm or engine, a product's cuBLASLt algorithm, each
 * timed once (PPDIFFUSE_CUDA_CONV_ALGO=timed, PPDIFFUSE_CUDA_GEMM_ALGO=
 * timed) and then taken by every later process on the same device and
 * libraries.  Two processes that time the same shape may pick different
 * algorithms (the trials are close, the device's clocks move), and two
 * algorithms sum in different orders: without what the first one kept, a
 * mesh's workers and a later run of the same frames would differ in
 * their last bits, and every start would pay the trials again.
 *
 * A choice is a small file in the tuning folder, named by a hash of what
 * it is for, that holds what it was made for in words (the device, its
 * libraries' versions, the op and its shape) beside the values: a file
 * for another device, library or shape is never taken, only replaced.
 * Each is written whole and renamed into place, so processes that start
 * together read either a whole choice or none.  Plain C, no CUDA: the host
 * tests check it. */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

/* The folder (default: the user's cache folder's ppdiffuse/cuda-tuning),
 * or "off": every process times its own choices and keeps none. */
#define PP_CUDA_TUNING_ENV "PPDIFFUSE_CUDA_TUNING_CACHE"

typedef struct _PpCudaTuning PpCudaTuning;

/* The choices kept in @value's folder (PP_CUDA_TUNING_ENV's value; NULL
 * or "": the default) for @identity (the device and what its choices
 * depend on, in words); NULL for "off". */
PpCudaTuning *pp_cuda_tuning_new    (const gchar * value,
                                     const gchar * identity);
void          pp_cuda_tuning_free   (PpCudaTuning * t);
const gchar  *pp_cuda_tuning_folder (const PpCudaTuning * t);
/* The @n values kept for @op's @key (@op: a word, "gemm"; @key: the
 * shape in words); FALSE when none are, or the file holds another
 * choice's or is not one (said at message level). */
gboolean      pp_cuda_tuning_lookup (PpCudaTuning * t, const gchar * op,
                                     const gchar * key, gint64 * values,
                                     guint n);
/* Keeps @values for @op's @key, replacing what was kept.  Best effort: a
 * folder that cannot be written is said once (message level), and the
 * choice is timed again by the next process. */
void          pp_cuda_tuning_store  (PpCudaTuning * t, const gchar * op,
                                     const gchar * key,
                                     const gint64 * values, guint n);

G_END_DECLS
