/* ppdiffuse — safetensors files: a strict reader (memory-mapped, no copy)
 * and an F32 writer.
 *
 * Layout: 8-byte little-endian header length N, N bytes of JSON (an object:
 * tensor name → {dtype, shape, data_offsets}, plus an optional
 * "__metadata__" object of strings), then the data region.  data_offsets are
 * [begin, end) relative to the start of the data region.  The reader rejects
 * anything the format does not allow: the tensors must tile the data region
 * exactly, with no holes, overlaps or trailing bytes. */
#pragma once

#include "pp-tensor.h"

G_BEGIN_DECLS

#define PP_ST_MAX_DIMS 8
/* The JSON header this reader accepts at most (the reference implementation
 * uses the same bound); a larger length is corruption, not a model. */
#define PP_ST_MAX_HEADER_BYTES (100 * 1024 * 1024)
#define PP_ST_METADATA_KEY "__metadata__"

typedef enum
{
  PP_ST_F32,
  PP_ST_F16,
  PP_ST_BF16,
  PP_ST_I64,                    /* integer buffers (CLIP's position_ids):
                                 * read as floats, exact to 2^24 */
} PpStDType;

typedef struct
{
  gchar *name;
  PpStDType dtype;
  guint ndim;                   /* 0 for a scalar */
  gint64 shape[PP_ST_MAX_DIMS];
  gsize nbytes;
  const guint8 *data;           /* inside the mapping; any alignment */
} PpStEntry;

typedef struct _PpSafetensors PpSafetensors;

/* Memory-maps @path (GMappedFile) and validates it; NULL with an error
 * naming the file and the problem when it is not a valid safetensors file. */
PpSafetensors   *pp_safetensors_open       (const gchar * path,
                                            GError ** error);
/* The same from memory; @what names the bytes in error messages.  The
 * entries point into @bytes, which the result keeps a reference to. */
PpSafetensors   *pp_safetensors_parse      (GBytes * bytes,
                                            const gchar * what,
                                            GError ** error);
void             pp_safetensors_free       (PpSafetensors * st);
/* The path (or @what) it was read from. */
const gchar     *pp_safetensors_path       (PpSafetensors * st);
guint            pp_safetensors_n_entries  (PpSafetensors * st);
/* Entries are in data order (by data_offsets). */
const PpStEntry *pp_safetensors_entry      (PpSafetensors * st, guint i);
const PpStEntry *pp_safetensors_find       (PpSafetensors * st,
                                            const gchar * name);
/* The whole file (header included), for digests. */
GBytes          *pp_safetensors_bytes      (PpSafetensors * st);
/* string → string, owned by @st; empty when the file has none. */
GHashTable      *pp_safetensors_metadata   (PpSafetensors * st);

/* Element count of @e (1 for a scalar). */
gsize            pp_st_entry_numel         (const PpStEntry * e);
/* "F32", "F16", "BF16". */
const gchar     *pp_st_dtype_name          (PpStDType dtype);
gsize            pp_st_dtype_size          (PpStDType dtype);

/* Writes numel(@e) floats to @dst, converting F16 and BF16 exactly (both
 * are subsets of F32).  FALSE only for an invalid dtype. */
gboolean         pp_safetensors_read_f32   (const PpStEntry * e, gfloat * dst);
/* IEEE 754 binary16 and bfloat16 bit patterns → float; subnormals, infinities
 * and NaNs (payload kept) included. */
gfloat           pp_half_to_float          (guint16 bits);
gfloat           pp_bf16_to_float          (guint16 bits);

/* Writes F32 @tensors under @names (names may be longer than a PpTensor
 * name).  @metadata (string → string) may be NULL.  Keys are written
 * sorted, the header padded with spaces to a multiple of 8 bytes, so the file
 * is readable by this reader and by Python's safetensors.  The file is
 * written beside @path and renamed into place. */
gboolean         pp_safetensors_write      (const gchar * path, guint n,
                                            const gchar * const *names,
                                            const PpTensor * const *tensors,
                                            GHashTable * metadata,
                                            GError ** error);
/* The same from entries (dtype must be PP_ST_F32; data is native floats),
 * for tensors of up to PP_ST_MAX_DIMS dimensions. */
gboolean         pp_safetensors_write_entries (const gchar * path, guint n,
                                            const PpStEntry * entries,
                                            GHashTable * metadata,
                                            GError ** error);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (PpSafetensors, pp_safetensors_free)

G_END_DECLS
