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

/* Seeded weights: a counter-based generator that
 * tests/reference/seeded.py reproduces bit for bit, so that full-size models
 * can be tested without a stored weights file.  Every element depends only
 * on (seed, key, index), never on the order of requests:
 *
 *   mix(z):  z ^= z >> 30; z *= 0xBF58476D1CE4E5B9; z ^= z >> 27;
 *            z *= 0x94D049BB133111EB; z ^= z >> 31     (splitmix64's mixer)
 *   base  =  FNV-1a-64 (UTF-8 bytes of the key) XOR mix (seed)
 *   z_i   =  mix (base + (i + 1) · 0x9E3779B97F4A7C15)  (mod 2^64; i: index
 *            in C order; the i-th output of splitmix64 started at base)
 *   u_i   =  ((z_i >> 40) + 0.5) · 2^-23 − 1     (exact in float64; in
 *            (−1, 1), mean 0, variance 1/3)
 *   x_i   =  offset + scale · u_i, computed in float64, rounded once to
 *            float32, with by kind:
 *
 *   PP_WEIGHT_DEFAULT     scale sqrt (3 / fan_in), offset 0, fan_in =
 *                         numel / shape[0]: variance 1 / fan_in, so a layer
 *                         keeps unit-variance activations near unit variance
 *   PP_WEIGHT_BIAS        scale 2^-4, offset 0
 *   PP_WEIGHT_NORM_SCALE  scale 2^-3, offset 1
 *   PP_WEIGHT_NORM_SHIFT  scale 2^-4, offset 0
 *   inputs                scale sqrt (3), offset 0 (unit variance)
 *
 * The power-of-two scales make offset + scale · u exact in float64, so no
 * compiler contraction into a fused multiply-add can change a bit. */
#define PP_SEEDED_SCALE_BIAS 0.0625
#define PP_SEEDED_SCALE_NORM_SCALE 0.125
#define PP_SEEDED_SCALE_NORM_SHIFT 0.0625

/* Maps the file (pp_safetensors_open).  F32 tensors are used in place when
 * aligned; F16/BF16 ones are converted to F32 once, on first use. */
PpWeights     *pp_weights_open        (const gchar * safetensors_path,
                                       GError ** error);
/* Generates each tensor when first asked for, deterministically from @seed
 * and the order of the requests (GRand, Box–Muller normals). */
/* The tensors of @entries (PpStEntry, consumed: their names g_free'd
 * with them), whose data lies inside @st's mapping (taken), under their
 * names and shapes: a file of another key layout seen as the model asks
 * for it.  @source names the weights in errors; the digest is the file's. */
PpWeights     *pp_weights_new_mapped  (PpSafetensors * st, GArray * entries,
                                       const gchar * source);
PpWeights     *pp_weights_new_random  (guint64 seed);
/* Generates each tensor when first asked for by the seeded rule above, in
 * parallel chunks for large tensors. */
PpWeights     *pp_weights_new_seeded  (guint64 seed);
/* Seeded weights only: declares a tensor the model is expected to ask for
 * (a key list written by the reference).  Once any is declared the source
 * behaves like a file: a key never declared is missing, a request with
 * another shape or kind is an error naming both, and
 * pp_weights_check_all_used lists declared keys nobody asked for. */
gboolean       pp_weights_expect      (PpWeights * w, const gchar * key,
                                       PpWeightKind kind, guint ndim,
                                       const gint64 * shape,
                                       GError ** error);
/* Fills @out[0 .. @numel) with unit-variance seeded values under @key (the
 * "inputs" row above). */
void           pp_seeded_fill_input   (guint64 seed, const gchar * key,
                                       gsize numel, gfloat * out);
/* "weight", "bias", "norm_scale", "norm_shift": the names the reference
 * scripts use. */
const gchar   *pp_weight_kind_name    (PpWeightKind kind);
gboolean       pp_weight_kind_from_name (const gchar * name,
                                       PpWeightKind * kind);
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
/* Tensor @i (0 … pp_weights_n_tensors − 1) in file or request order: its
 * key, and its dimensions in @ndim and @shape (PP_ST_MAX_DIMS) when set. */
const gchar   *pp_weights_key         (PpWeights * w, guint i, guint * ndim,
                                       gint64 * shape);
/* The dimensions of weight @key in @ndim and @shape (PP_ST_MAX_DIMS);
 * FALSE when @w has no such key. */
gboolean       pp_weights_shape       (PpWeights * w, const gchar * key,
                                       guint * ndim, gint64 * shape);
/* The float32 data of existing weight @key as a private copy that the
 * caller may change before a model binds it (an adapter fused at load).
 * Does not mark the key used.  Changing it changes what the weights are:
 * say how with pp_weights_note_change, which the digest covers. */
gfloat        *pp_weights_get_mutable (PpWeights * w, const gchar * key,
                                       GError ** error);
/* Adds @change (a line such as "lora <digest> <scale>") to what
 * pp_weights_digest covers: the weights are the file's with these
 * changes. */
void           pp_weights_note_change (PpWeights * w, const gchar * change);
/* TRUE when @key exists (a file), was generated already (random,
 * seeded) or was declared (pp_weights_expect). */
gboolean       pp_weights_has         (PpWeights * w, const gchar * key);
/* Marks @key as used without reading it: a buffer a checkpoint may carry
 * that the model derives itself (CLIP's position_ids).  FALSE when @w has
 * no such key. */
gboolean       pp_weights_skip        (PpWeights * w, const gchar * key);
/* Fails listing the keys of the file nobody asked for (the first
 * PP_WEIGHTS_LIST_MAX, then "and N more").  Always TRUE for random weights,
 * and for seeded ones without declared keys. */
#define PP_WEIGHTS_LIST_MAX 5
gboolean       pp_weights_check_all_used (PpWeights * w, GError ** error);
/* Writes every tensor requested or declared so far (random, seeded) or
 * every tensor of the file (as F32) with pp_safetensors_write_entries. */
gboolean       pp_weights_save        (PpWeights * w, const gchar * path,
                                       GError ** error);
guint64        pp_weights_n_params    (PpWeights * w);
guint          pp_weights_n_tensors   (PpWeights * w);
/* A digest (hex) of every byte of the file (pp_weights_tree_digest), or
 * the SHA-256 of the generated data (F32 little-endian, in declaration and
 * request order; NULL when a declared tensor cannot be allocated).  Owned
 * by @w; valid until the next request or pp_weights_free.
 *
 * A file's digest is computed once and cached under the user's cache
 * directory (pp_weights_digest_cache_path), keyed by the file's size,
 * modification time (ns), device and inode: a later start reads it
 * instead of the whole file, and any write to the file (which changes its
 * mtime) makes it compute the digest again.  A cache that cannot be
 * written is no error: the digest is then computed at every start. */
const gchar   *pp_weights_digest      (PpWeights * w);
/* The same digest of the weights file @path without loading it (its
 * header is checked, its bytes mapped), from the caches or computed; a
 * digest computed here serves the process's later pp_weights_digest of
 * that file even when the user's cache cannot be written.  A worker makes
 * it on another thread while its model loads. */
gchar         *pp_weights_file_digest (const gchar * path, GError ** error);
/* What the cache key's first field says: the digest's definition. */
#define PP_WEIGHTS_DIGEST_FORMAT "tree-sha256-16M"
/* $XDG_CACHE_HOME/ppdiffuse/digests/<SHA-256 of the file's canonical
 * path>. */
gchar         *pp_weights_digest_cache_path (const gchar * weights_path);
/* The file digest: SHA-256 over the file size (8 bytes, little-endian)
 * followed by the SHA-256 of each PP_WEIGHTS_DIGEST_BLOCK-byte block of
 * the data in order (the last block shorter).  Every byte counts, as with
 * a plain SHA-256, but the blocks are hashed on up to @max_threads
 * threads: a worker's start does not wait seconds for one core to read a
 * multi-gigabyte checkpoint. */
#define PP_WEIGHTS_DIGEST_BLOCK ((gsize) 16 << 20)
#define PP_WEIGHTS_DIGEST_BYTES 32
gchar         *pp_weights_tree_digest (const guint8 * data, gsize size,
                                       guint max_threads);
/* Bytes of weights this process has read so far (materialised tensors,
 * digested blocks), for load progress reports; only grows. */
guint64        pp_weights_load_progress (void);
/* Counts @bytes more toward it: loading work done outside PpWeights. */
void           pp_weights_add_load_progress (gsize bytes);
/* The file path, "random weights (seed N)" or "seeded weights (seed N)". */
const gchar   *pp_weights_source      (PpWeights * w);
/* TRUE for generated weights (random or seeded). */
gboolean       pp_weights_is_random   (PpWeights * w);
/* The dtype models bound to @w store their weights in on their backend
 * (pp_backend_upload_weights): F32, F16 or BF16; 0 (the default) means the
 * backend's own default (PpBackend.default_weight_dtype). */
void           pp_weights_set_storage_dtype (PpWeights * w, PpDType dtype);
PpDType        pp_weights_storage_dtype (PpWeights * w);
void           pp_weights_free        (PpWeights * w);

/* @component_dir/diffusion_pytorch_model.safetensors, else
 * @component_dir/diffusion_pytorch_model.fp16.safetensors, else an error
 * naming the directory. */
gchar         *pp_model_dir_weights_path (const gchar * component_dir,
                                       GError ** error);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (PpWeights, pp_weights_free)

G_END_DECLS
