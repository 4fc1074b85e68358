/* ppdiffuse — the weights a model binds by key: from a safetensors file, or
 * generated on request from a seed (for tiny test models).
 *
 * A model asks for every tensor it needs by diffusers state_dict key and
 * exact shape; afterwards pp_weights_check_all_used reports keys in the file
 * the model never asked for. */
#pragma once

#include "pp-safetensors.h"

G_BEGIN_DECLS

typedef struct _PpWeights PpWeights;

/* The kind of tensor tells the random source how to fill it; a file
 * ignores it. */
typedef enum
{
  PP_WEIGHT_DEFAULT,            /* N(0, 0.2) */
  PP_WEIGHT_BIAS,               /* N(0, 0.05) */
  PP_WEIGHT_NORM_SCALE,         /* 1 + N(0, 0.1) */
  PP_WEIGHT_NORM_SHIFT,         /* N(0, 0.05) */
} PpWeightKind;

#define PP_WEIGHT_STD_DEFAULT 0.2
#define PP_WEIGHT_STD_BIAS 0.05
#define PP_WEIGHT_STD_NORM_SCALE 0.1
#define PP_WEIGHT_STD_NORM_SHIFT 0.05

#define PP_WEIGHTS_FILE "diffusion_pytorch_model.safetensors"
#define PP_WEIGHTS_FILE_FP16 "diffusion_pytorch_model.fp16.safetensors"

/* Maps the file (pp_safetensors_open).  F32 tensors are used in place when
 * aligned; F16/BF16 ones are converted to F32 once, on first use. */
PpWeights     *pp_weights_open        (const gchar * safetensors_path,
                                       GError ** error);
/* Generates each tensor when first asked for, deterministically from @seed
 * and the order of the requests (GRand, Box–Muller normals). */
PpWeights     *pp_weights_new_random  (guint64 seed);
/* F32 data of exactly @shape, owned by @w.  A missing key or a different
 * shape is an error naming the file, the key and both shapes.  Asking again
 * for the same key returns the same data. */
const gfloat  *pp_weights_get         (PpWeights * w, const gchar * key,
                                       guint ndim, const gint64 * shape,
                                       GError ** error);
const gfloat  *pp_weights_get_kind    (PpWeights * w, const gchar * key,
                                       PpWeightKind kind, guint ndim,
                                       const gint64 * shape,
                                       GError ** error);
/* TRUE when @key exists (a file) or was generated already (random). */
gboolean       pp_weights_has         (PpWeights * w, const gchar * key);
/* Fails listing the keys of the file nobody asked for (the first
 * PP_WEIGHTS_LIST_MAX, then "and N more").  Always TRUE for random weights. */
#define PP_WEIGHTS_LIST_MAX 5
gboolean       pp_weights_check_all_used (PpWeights * w, GError ** error);
/* Writes every tensor requested so far (random) or every tensor of the file
 * (as F32) with pp_safetensors_write_entries. */
gboolean       pp_weights_save        (PpWeights * w, const gchar * path,
                                       GError ** error);
guint64        pp_weights_n_params    (PpWeights * w);
guint          pp_weights_n_tensors   (PpWeights * w);
/* SHA-256 (hex) of the file's bytes, or of the generated data (F32
 * little-endian, in request order).  Owned by @w; valid until the next
 * request or pp_weights_free. */
const gchar   *pp_weights_digest      (PpWeights * w);
/* The file path, or "random weights (seed N)". */
const gchar   *pp_weights_source      (PpWeights * w);
gboolean       pp_weights_is_random   (PpWeights * w);
void           pp_weights_free        (PpWeights * w);

/* @component_dir/diffusion_pytorch_model.safetensors, else
 * @component_dir/diffusion_pytorch_model.fp16.safetensors, else an error
 * naming the directory. */
gchar         *pp_model_dir_weights_path (const gchar * component_dir,
                                       GError ** error);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (PpWeights, pp_weights_free)

G_END_DECLS
