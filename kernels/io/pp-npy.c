/* ppdiffuse — .npy reader and writer.
 *
 * A file is the magic "\x93NUMPY", a major and minor version byte, the
 * header length (2 bytes little-endian in 1.0, 4 bytes in 2.0), the header
 * (a Python dict literal with 'descr', 'fortran_order' and 'shape', padded
 * with spaces and ended by a newline), then the raw array data. */
#include "pp-npy.h"
#include "pp-error.h"

#include <string.h>

#define NPY_MAGIC "\x93NUMPY"
#define NPY_MAGIC_LEN 6
#define NPY_V1_LEN_BYTES 2
#define NPY_V2_LEN_BYTES 4
/* magic + 2 version bytes */
#define NPY_PREAMBLE (NPY_MAGIC_LEN + 2)
/* numpy pads magic + header so the data starts at a multiple of this. */
#define NPY_ALIGN 64
#define NPY_EXTENSION ".npy"
/* No array dimension or count here is longer than this many digits. */
#define NPY_MAX_INT_DIGITS 18

typedef struct
{
  const gchar *path;
  const gchar *p;
  const gchar *end;
} HeaderScan;

typedef struct
{
  gchar *descr;
  gboolean fortran_order;
  guint ndim;
  gint64 shape[PP_TENSOR_MAX_DIMS];
  gboolean have_descr, have_order, have_shape;
} NpyHeader;

/* How much of the header an error message quotes. */
#define NPY_QUOTE_LEN 20

static gboolean
header_fail (HeaderScan * s, GError ** error, const gchar * problem)
{
  /* The header is not NUL-terminated: quote a bounded, printable copy. */
  g_autofree gchar *near = g_strndup (s->p, MIN (NPY_QUOTE_LEN,
          (gsize) (s->end - s->p)));

  for (gchar * c = near; *c != '\0'; c++)
    if (!g_ascii_isprint (*c))
      *c = '?';
  g_set_error (error, PP_ERROR, PP_ERROR_SHAPE,
      "%s: bad .npy header near '%s': %s", s->path, near, problem);
  return FALSE;
}

static void
skip_ws (HeaderScan * s)
{
  while (s->p < s->end && g_ascii_isspace (*s->p))
    s->p++;
}

static gboolean
expect_char (HeaderScan * s, gchar c, GError ** error)
{
  gchar problem[32];

  skip_ws (s);
  if (s->p < s->end && *s->p == c) {
    s->p++;
    return TRUE;
  }
  g_snprintf (problem, sizeof problem, "expected '%c'", c);
  return header_fail (s, error, problem);
}

/* A Python string literal in single or double quotes, no escapes. */
static gboolean
parse_string (HeaderScan * s, gchar ** out, GError ** error)
{
  const gchar *start;
  gchar quote;

  skip_ws (s);
  if (s->p >= s->end || (*s->p != '\'' && *s->p != '"'))
    return header_fail (s, error, "expected a quoted string");
  quote = *s->p++;
  start = s->p;
  while (s->p < s->end && *s->p != quote && *s->p != '\\')
    s->p++;
  if (s->p >= s->end || *s->p != quote)
    return header_fail (s, error, "unterminated or escaped string");
  *out = g_strndup (start, (gsize) (s->p - start));
  s->p++;
  return TRUE;
}

static gboolean
parse_bool (HeaderScan * s, gboolean * out, GError ** error)
{
  static const gchar *const words[2] = { "False", "True" };

  skip_ws (s);
  for (guint i = 0; i < G_N_ELEMENTS (words); i++) {
    gsize len = strlen (words[i]);

    if ((gsize) (s->end - s->p) >= len && memcmp (s->p, words[i], len) == 0) {
      s->p += len;
      *out = i == 1;
      return TRUE;
    }
  }
  return header_fail (s, error, "expected True or False");
}

/* A tuple of non-negative integers: "()", "(5,)", "(2, 3)". */
static gboolean
parse_shape (HeaderScan * s, NpyHeader * h, GError ** error)
{
  if (!expect_char (s, '(', error))
    return FALSE;
  h->ndim = 0;
  for (;;) {
    gint64 v = 0;
    guint digits = 0;

    skip_ws (s);
    if (s->p < s->end && *s->p == ')') {
      s->p++;
      return TRUE;
    }
    while (s->p < s->end && g_ascii_isdigit (*s->p)) {
      if (++digits > NPY_MAX_INT_DIGITS)
        return header_fail (s, error, "dimension too large");
      v = v * 10 + (*s->p++ - '0');
    }
    if (digits == 0)
      return header_fail (s, error, "expected a dimension or ')'");
    if (h->ndim == PP_TENSOR_MAX_DIMS) {
      g_set_error (error, PP_ERROR, PP_ERROR_SHAPE,
          "%s: more than %d dimensions are not supported", s->path,
          PP_TENSOR_MAX_DIMS);
      return FALSE;
    }
    h->shape[h->ndim++] = v;
    skip_ws (s);
    if (s->p < s->end && *s->p == ',')
      s->p++;
    else if (s->p >= s->end || *s->p != ')')
      return header_fail (s, error, "expected ',' or ')'");
  }
}

static gboolean
parse_header (HeaderScan * s, NpyHeader * h, GError ** error)
{
  if (!expect_char (s, '{', error))
    return FALSE;
  for (;;) {
    g_autofree gchar *key = NULL;
    gboolean ok;

    skip_ws (s);
    if (s->p < s->end && *s->p == '}') {
      s->p++;
      break;
    }
    if (!parse_string (s, &key, error) || !expect_char (s, ':', error))
      return FALSE;
    if (g_str_equal (key, "descr") && !h->have_descr) {
      ok = parse_string (s, &h->descr, error);
      h->have_descr = TRUE;
    } else if (g_str_equal (key, "fortran_order") && !h->have_order) {
      ok = parse_bool (s, &h->fortran_order, error);
      h->have_order = TRUE;
    } else if (g_str_equal (key, "shape") && !h->have_shape) {
      ok = parse_shape (s, h, error);
      h->have_shape = TRUE;
    } else {
      g_set_error (error, PP_ERROR, PP_ERROR_SHAPE,
          "%s: unexpected or repeated key '%s' in the .npy header", s->path,
          key);
      return FALSE;
    }
    if (!ok)
      return FALSE;
    skip_ws (s);
    if (s->p < s->end && *s->p == ',')
      s->p++;
    else if (s->p >= s->end || *s->p != '}')
      return header_fail (s, error, "expected ',' or '}'");
  }
  skip_ws (s);
  if (s->p != s->end)
    return header_fail (s, error, "data after the dict");
  if (!h->have_descr || !h->have_order || !h->have_shape) {
    g_set_error (error, PP_ERROR, PP_ERROR_SHAPE,
        "%s: the .npy header has no '%s'", s->path,
        !h->have_descr ? "descr" : !h->have_order ? "fortran_order" :
        "shape");
    return FALSE;
  }
  return TRUE;
}

/* The file's basename without ".npy", cut to fit a tensor name. */
static gchar *
tensor_name_for (const gchar * path)
{
  gchar *name = g_path_get_basename (path);

  if (g_str_has_suffix (name, NPY_EXTENSION))
    name[strlen (name) - strlen (NPY_EXTENSION)] = '\0';
  if (strlen (name) > PP_TENSOR_NAME_MAX)
    name[PP_TENSOR_NAME_MAX] = '\0';
  /* Do not leave half a UTF-8 character at the cut. */
  while (*name != '\0' && !g_utf8_validate (name, -1, NULL))
    name[strlen (name) - 1] = '\0';
  return name;
}

PpTensor *
pp_npy_load (const gchar * path, GError ** error)
{
  g_autoptr (GError) local = NULL;
  g_autoptr (GMappedFile) map = NULL;
  g_autoptr (PpTensor) t = NULL;
  g_autofree gchar *name = NULL;
  NpyHeader h = { 0 };
  HeaderScan s = { path, NULL, NULL };
  const guint8 *base;
  gsize size, len_bytes, header_len, data_off, itemsize;
  gsize numel = 1;
  gboolean f64;

  map = g_mapped_file_new (path, FALSE, &local);
  if (map == NULL) {
    g_set_error (error, PP_ERROR, PP_ERROR_RESOURCE, "cannot read .npy: %s",
        local->message);
    return NULL;
  }
  base = (const guint8 *) g_mapped_file_get_contents (map);
  size = g_mapped_file_get_length (map);
  if (size < NPY_PREAMBLE || memcmp (base, NPY_MAGIC, NPY_MAGIC_LEN) != 0) {
    g_set_error (error, PP_ERROR, PP_ERROR_SHAPE,
        "%s: not a .npy file (no \\x93NUMPY magic)", path);
    return NULL;
  }
  if (base[NPY_MAGIC_LEN] == 1 && base[NPY_MAGIC_LEN + 1] == 0)
    len_bytes = NPY_V1_LEN_BYTES;
  else if (base[NPY_MAGIC_LEN] == 2 && base[NPY_MAGIC_LEN + 1] == 0)
    len_bytes = NPY_V2_LEN_BYTES;
  else {
    g_set_error (error, PP_ERROR, PP_ERROR_SHAPE,
        "%s: .npy format version %u.%u; only 1.0 and 2.0 are supported", path,
        base[NPY_MAGIC_LEN], base[NPY_MAGIC_LEN + 1]);
    return NULL;
  }
  if (size < NPY_PREAMBLE + len_bytes) {
    g_set_error (error, PP_ERROR, PP_ERROR_SHAPE,
        "%s: truncated .npy header", path);
    return NULL;
  }
  header_len = 0;
  for (gsize i = len_bytes; i > 0; i--)
    header_len = header_len * 256 + base[NPY_PREAMBLE + i - 1];
  data_off = NPY_PREAMBLE + len_bytes + header_len;
  if (header_len > size - NPY_PREAMBLE - len_bytes) {
    g_set_error (error, PP_ERROR, PP_ERROR_SHAPE,
        "%s: .npy header length %" G_GSIZE_FORMAT " past the end of the file "
        "(size %" G_GSIZE_FORMAT ")", path, header_len, size);
    return NULL;
  }
  s.p = (const gchar *) base + NPY_PREAMBLE + len_bytes;
  s.end = s.p + header_len;
  if (!parse_header (&s, &h, error)) {
    g_free (h.descr);
    return NULL;
  }

  f64 = g_str_equal (h.descr, "<f8");
  if (!f64 && !g_str_equal (h.descr, "<f4")) {
    g_set_error (error, PP_ERROR, PP_ERROR_SHAPE,
        "%s: .npy dtype '%s' is not supported; only '<f4' and '<f8' "
        "(little-endian float32 and float64)", path, h.descr);
    g_free (h.descr);
    return NULL;
  }
  g_free (h.descr);
  if (h.fortran_order) {
    g_set_error (error, PP_ERROR, PP_ERROR_SHAPE,
        "%s: Fortran-order arrays are not supported; save it in C order",
        path);
    return NULL;
  }
  if (h.ndim == 0) {
    g_set_error (error, PP_ERROR, PP_ERROR_SHAPE,
        "%s: 0-d (scalar) arrays are not supported", path);
    return NULL;
  }
  itemsize = f64 ? sizeof (gdouble) : sizeof (gfloat);
  for (guint i = 0; i < h.ndim; i++) {
    if (h.shape[i] < 1 || (gsize) h.shape[i] > G_MAXSIZE / itemsize / numel) {
      g_set_error (error, PP_ERROR, PP_ERROR_SHAPE,
          "%s: dimension %u has size %" G_GINT64_FORMAT "; sizes must be at "
          "least 1 and the array addressable", path, i, h.shape[i]);
      return NULL;
    }
    numel *= (gsize) h.shape[i];
  }
  if (size - data_off != numel * itemsize) {
    g_set_error (error, PP_ERROR, PP_ERROR_SHAPE,
        "%s: the shape needs %" G_GSIZE_FORMAT " data bytes, the file has %"
        G_GSIZE_FORMAT, path, numel * itemsize, size - data_off);
    return NULL;
  }

  name = tensor_name_for (path);
  t = pp_tensor_new (name, PP_DTYPE_F32, h.ndim, h.shape, error);
  if (t == NULL)
    return NULL;
  for (gsize i = 0; i < numel; i++) {
    const guint8 *src = base + data_off + i * itemsize;
    gfloat *dst = (gfloat *) t->data + i;

    if (f64) {
      guint64 bits;
      gdouble d;

      memcpy (&bits, src, sizeof bits);
      bits = GUINT64_FROM_LE (bits);
      memcpy (&d, &bits, sizeof d);
      *dst = (gfloat) d;
    } else {
      guint32 bits;

      memcpy (&bits, src, sizeof bits);
      bits = GUINT32_FROM_LE (bits);
      memcpy (dst, &bits, sizeof bits);
    }
  }
  return g_steal_pointer (&t);
}

gboolean
pp_npy_save (const gchar * path, const PpTensor * t, GError ** error)
{
  g_autoptr (GString) header = g_string_new (NULL);
  g_autoptr (GByteArray) out = g_byte_array_new ();
  g_autoptr (GError) local = NULL;
  guint8 len_le[NPY_V1_LEN_BYTES];
  gsize numel, data_off;

  if (t->dtype != PP_DTYPE_F32) {
    g_set_error (error, PP_ERROR, PP_ERROR_SHAPE,
        "%s: tensor '%s' is %s; only F32 is written as .npy", path, t->name,
        pp_dtype_name (t->dtype));
    return FALSE;
  }
  /* One GByteArray holds the whole file. */
  if (t->nbytes > G_MAXUINT / 2) {
    g_set_error (error, PP_ERROR, PP_ERROR_RESOURCE,
        "%s: tensor '%s' of %" G_GSIZE_FORMAT " bytes is too large for .npy "
        "output", path, t->name, t->nbytes);
    return FALSE;
  }
  g_string_append (header, "{'descr': '<f4', 'fortran_order': False, "
      "'shape': (");
  for (guint i = 0; i < t->ndim; i++)
    g_string_append_printf (header, "%" G_GINT64_FORMAT "%s", t->shape[i],
        t->ndim == 1 ? "," : i + 1 < t->ndim ? ", " : "");
  g_string_append (header, "), }");
  /* Spaces, then the newline, up to the next multiple of NPY_ALIGN. */
  while ((NPY_PREAMBLE + NPY_V1_LEN_BYTES + header->len + 1) % NPY_ALIGN)
    g_string_append_c (header, ' ');
  g_string_append_c (header, '\n');

  g_byte_array_append (out, (const guint8 *) NPY_MAGIC, NPY_MAGIC_LEN);
  g_byte_array_append (out, (const guint8 *) "\x01\x00", 2);
  len_le[0] = header->len & 0xff;
  len_le[1] = (header->len >> 8) & 0xff;
  g_byte_array_append (out, len_le, sizeof len_le);
  g_byte_array_append (out, (const guint8 *) header->str,
      (guint) header->len);
  numel = t->nbytes / sizeof (gfloat);
  data_off = out->len;
  g_byte_array_set_size (out, (guint) (data_off + t->nbytes));
  for (gsize i = 0; i < numel; i++) {
    guint32 bits;

    memcpy (&bits, (const gfloat *) t->data + i, sizeof bits);
    bits = GUINT32_TO_LE (bits);
    memcpy (out->data + data_off + i * sizeof bits, &bits, sizeof bits);
  }
  if (!g_file_set_contents (path, (const gchar *) out->data, out->len,
          &local)) {
    g_set_error (error, PP_ERROR, PP_ERROR_RESOURCE, "cannot write .npy: %s",
        local->message);
    return FALSE;
  }
  return TRUE;
}
