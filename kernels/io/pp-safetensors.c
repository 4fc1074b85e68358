/* ppdiffuse — safetensors reader and writer. */
#include "pp-safetensors.h"
#include "pp-dtype-math.h"
#include "pp-error.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <glib/gstdio.h>
#include <json-glib/json-glib.h>

/* The 8-byte little-endian length that precedes the JSON header. */
#define HEADER_LEN_BYTES 8
/* The writer pads the header so the data region starts 8-byte aligned. */
#define HEADER_ALIGN 8
/* Real headers nest three levels (root, entry, shape); anything much deeper
 * is corruption, and the bound keeps the recursive checker's stack small. */
#define JSON_MAX_DEPTH 32
/* An integer literal longer than this cannot be a valid size or offset and
 * would overflow json-glib's gint64 silently. */
#define JSON_MAX_INT_DIGITS 18
/* data_offsets is [begin, end). */
#define N_DATA_OFFSETS 2
/* Floats converted per chunk when the host is big-endian. */
#define SWAP_CHUNK 4096

struct _PpSafetensors
{
  gchar *path;
  GBytes *bytes;                /* the whole file; entries point into it */
  PpStEntry *entries;           /* in data order */
  guint n_entries;
  GHashTable *index;            /* name → PpStEntry * */
  GHashTable *metadata;         /* string → string */
};

/* ---- dtypes and conversions ---------------------------------------------- */

const gchar *
pp_st_dtype_name (PpStDType dtype)
{
  switch (dtype) {
    case PP_ST_F32:
      return "F32";
    case PP_ST_F16:
      return "F16";
    case PP_ST_BF16:
      return "BF16";
    case PP_ST_I64:
      return "I64";
  }
  return "invalid";
}

gsize
pp_st_dtype_size (PpStDType dtype)
{
  switch (dtype) {
    case PP_ST_F32:
      return 4;
    case PP_ST_F16:
    case PP_ST_BF16:
      return 2;
    case PP_ST_I64:
      return 8;
  }
  return 0;
}

static gboolean
dtype_from_string (const gchar * s, PpStDType * out)
{
  for (PpStDType d = PP_ST_F32; d <= PP_ST_I64; d++) {
    if (g_str_equal (s, pp_st_dtype_name (d))) {
      *out = d;
      return TRUE;
    }
  }
  return FALSE;
}

gsize
pp_st_entry_numel (const PpStEntry * e)
{
  gsize numel = 1;

  for (guint i = 0; i < e->ndim; i++)
    numel *= (gsize) e->shape[i];
  return numel;
}

/* Widening is exact, the same formulas on every backend
 * (pp-dtype-math.h). */
gfloat
pp_half_to_float (guint16 bits)
{
  return pp_f16_to_f32 (bits);
}

gfloat
pp_bf16_to_float (guint16 bits)
{
  return pp_bf16_to_f32 (bits);
}

static guint16
get_u16_le (const guint8 * p)
{
  return (guint16) (p[0] | (p[1] << 8));
}

gboolean
pp_safetensors_read_f32 (const PpStEntry * e, gfloat * dst)
{
  gsize numel;

  g_return_val_if_fail (e != NULL, FALSE);
  numel = pp_st_entry_numel (e);
  if (pp_st_dtype_size (e->dtype) == 0)
    return FALSE;
  if (numel == 0)
    return TRUE;
  switch (e->dtype) {
    case PP_ST_F32:
      memcpy (dst, e->data, numel * sizeof (gfloat));
#if G_BYTE_ORDER != G_LITTLE_ENDIAN
      for (gsize i = 0; i < numel; i++) {
        guint32 v;
        memcpy (&v, dst + i, sizeof v);
        v = GUINT32_FROM_LE (v);
        memcpy (dst + i, &v, sizeof v);
      }
#endif
      return TRUE;
    case PP_ST_F16:
      for (gsize i = 0; i < numel; i++)
        dst[i] = pp_half_to_float (get_u16_le (e->data + 2 * i));
      return TRUE;
    case PP_ST_BF16:
      for (gsize i = 0; i < numel; i++)
        dst[i] = pp_bf16_to_float (get_u16_le (e->data + 2 * i));
      return TRUE;
    case PP_ST_I64:
      for (gsize i = 0; i < numel; i++) {
        guint64 v;

        memcpy (&v, e->data + 8 * i, sizeof v);
        dst[i] = (gfloat) (gint64) GUINT64_FROM_LE (v);
      }
      return TRUE;
  }
  return FALSE;
}

/* ---- strict JSON syntax check --------------------------------------------
 * json-glib is lenient (single quotes, comments, hex numbers, a second
 * top-level object, silently wrapped integers).  A header must be exactly one
 * RFC 8259 object, so it is checked here first and only then parsed into a
 * tree by json-glib. */

typedef struct
{
  const gchar *start;
  const gchar *p;
  const gchar *end;
  const gchar *problem;         /* static string, set on failure */
} JsonScan;

static gboolean scan_value (JsonScan * s, guint depth);

static gboolean
scan_fail (JsonScan * s, const gchar * problem)
{
  s->problem = problem;
  return FALSE;
}

static void
scan_ws (JsonScan * s)
{
  while (s->p < s->end && (*s->p == ' ' || *s->p == '\t' || *s->p == '\n'
          || *s->p == '\r'))
    s->p++;
}

/* UTF-16 surrogate ranges: a high half must be followed by a low half. */
#define SURROGATE_HIGH 0xd800
#define SURROGATE_LOW 0xdc00
#define SURROGATE_END 0xdfff
#define HEX4_DIGITS 4

/* @s->p is at the 'u' of a \u escape; reads the four hex digits after it. */
static gboolean
scan_hex4 (JsonScan * s, guint * value)
{
  *value = 0;
  s->p++;
  for (guint i = 0; i < HEX4_DIGITS; i++, s->p++) {
    if (s->p >= s->end || !g_ascii_isxdigit (*s->p))
      return scan_fail (s, "\\u needs four hex digits");
    *value = *value * 16 + (guint) g_ascii_xdigit_value (*s->p);
  }
  return TRUE;
}

static gboolean
scan_string (JsonScan * s)
{
  if (s->p >= s->end || *s->p != '"')
    return scan_fail (s, "expected a string");
  s->p++;
  while (s->p < s->end) {
    guchar c = (guchar) * s->p;

    if (c == '"') {
      s->p++;
      return TRUE;
    }
    if (c < 0x20)
      return scan_fail (s, "control character inside a string");
    if (c != '\\') {
      s->p++;
      continue;
    }
    s->p++;
    if (s->p >= s->end)
      break;
    switch (*s->p) {
      case '"':
      case '\\':
      case '/':
      case 'b':
      case 'f':
      case 'n':
      case 'r':
      case 't':
        s->p++;
        break;
      case 'u':{
        guint value;

        if (!scan_hex4 (s, &value))
          return FALSE;
        if (value == 0)
          return scan_fail (s, "NUL character (\\u0000) inside a string");
        if (value >= SURROGATE_LOW && value <= SURROGATE_END)
          return scan_fail (s, "lone UTF-16 low surrogate in a \\u escape");
        if (value >= SURROGATE_HIGH && value < SURROGATE_LOW) {
          /* json-glib would turn a lone half into invalid UTF-8. */
          if (s->end - s->p < 2 || s->p[0] != '\\' || s->p[1] != 'u')
            return scan_fail (s, "lone UTF-16 high surrogate in a \\u escape");
          s->p++;
          if (!scan_hex4 (s, &value))
            return FALSE;
          if (value < SURROGATE_LOW || value > SURROGATE_END)
            return scan_fail (s, "UTF-16 high surrogate without its low half");
        }
        break;
      }
      default:
        return scan_fail (s, "invalid escape inside a string");
    }
  }
  return scan_fail (s, "unterminated string");
}

static guint
scan_digits (JsonScan * s)
{
  guint n = 0;

  while (s->p < s->end && g_ascii_isdigit (*s->p)) {
    s->p++;
    n++;
  }
  return n;
}

static gboolean
scan_number (JsonScan * s)
{
  guint int_digits;
  gboolean fraction = FALSE;

  if (*s->p == '-')
    s->p++;
  if (s->p >= s->end || !g_ascii_isdigit (*s->p))
    return scan_fail (s, "expected a digit");
  if (*s->p == '0') {
    s->p++;
    int_digits = 1;
    if (s->p < s->end && g_ascii_isdigit (*s->p))
      return scan_fail (s, "number with a leading zero");
  } else {
    int_digits = scan_digits (s);
  }
  if (s->p < s->end && *s->p == '.') {
    s->p++;
    fraction = TRUE;
    if (scan_digits (s) == 0)
      return scan_fail (s, "expected a digit after '.'");
  }
  if (s->p < s->end && (*s->p == 'e' || *s->p == 'E')) {
    s->p++;
    fraction = TRUE;
    if (s->p < s->end && (*s->p == '+' || *s->p == '-'))
      s->p++;
    if (scan_digits (s) == 0)
      return scan_fail (s, "expected a digit in the exponent");
  }
  if (!fraction && int_digits > JSON_MAX_INT_DIGITS)
    return scan_fail (s, "integer too large");
  return TRUE;
}

static gboolean
scan_literal (JsonScan * s, const gchar * word)
{
  gsize len = strlen (word);

  if ((gsize) (s->end - s->p) < len || memcmp (s->p, word, len) != 0)
    return scan_fail (s, "unexpected character");
  s->p += len;
  return TRUE;
}

static gboolean
scan_container (JsonScan * s, guint depth, gboolean object)
{
  gchar close = object ? '}' : ']';

  s->p++;
  scan_ws (s);
  if (s->p < s->end && *s->p == close) {
    s->p++;
    return TRUE;
  }
  for (;;) {
    scan_ws (s);
    if (object) {
      if (!scan_string (s))
        return FALSE;
      scan_ws (s);
      if (s->p >= s->end || *s->p != ':')
        return scan_fail (s, "expected ':' after an object key");
      s->p++;
    }
    if (!scan_value (s, depth + 1))
      return FALSE;
    scan_ws (s);
    if (s->p >= s->end)
      return scan_fail (s, object ? "unterminated object" :
          "unterminated array");
    if (*s->p == ',') {
      s->p++;
      continue;
    }
    if (*s->p == close) {
      s->p++;
      return TRUE;
    }
    return scan_fail (s, object ? "expected ',' or '}'" :
        "expected ',' or ']'");
  }
}

static gboolean
scan_value (JsonScan * s, guint depth)
{
  if (depth > JSON_MAX_DEPTH)
    return scan_fail (s, "nested too deeply");
  scan_ws (s);
  if (s->p >= s->end)
    return scan_fail (s, "expected a value");
  switch (*s->p) {
    case '{':
      return scan_container (s, depth, TRUE);
    case '[':
      return scan_container (s, depth, FALSE);
    case '"':
      return scan_string (s);
    case 't':
      return scan_literal (s, "true");
    case 'f':
      return scan_literal (s, "false");
    case 'n':
      return scan_literal (s, "null");
    default:
      if (*s->p == '-' || g_ascii_isdigit (*s->p))
        return scan_number (s);
      return scan_fail (s, "unexpected character");
  }
}

static gboolean
check_json_syntax (const gchar * what, const gchar * text, gsize len,
    GError ** error)
{
  JsonScan s = { text, text, text + len, NULL };

  scan_ws (&s);
  if (s.p >= s.end || *s.p != '{')
    scan_fail (&s, "the header is not a JSON object");
  else if (scan_value (&s, 0)) {
    scan_ws (&s);
    if (s.p < s.end)
      scan_fail (&s, "data after the JSON object");
  }
  if (s.problem == NULL)
    return TRUE;
  g_set_error (error, PP_ERROR, PP_ERROR_MODEL,
      "%s: bad JSON header at byte %" G_GSIZE_FORMAT " of %" G_GSIZE_FORMAT
      ": %s", what, (gsize) (s.p - s.start), len, s.problem);
  return FALSE;
}

/* ---- header parsing ------------------------------------------------------ */

/* json-glib keeps the last of two equal keys; the object-member signal sees
 * both, and the object does not grow on the second. */
typedef struct
{
  GHashTable *seen;             /* JsonObject * → members signalled */
  gchar *duplicate;
} DupCheck;

static void
on_object_member (JsonParser * parser, JsonObject * object,
    const gchar * name, gpointer user_data)
{
  DupCheck *d = user_data;
  guint n = GPOINTER_TO_UINT (g_hash_table_lookup (d->seen, object)) + 1;

  g_hash_table_insert (d->seen, object, GUINT_TO_POINTER (n));
  if (n != json_object_get_size (object) && d->duplicate == NULL)
    d->duplicate = g_strdup (name);
}

/* What a person would call @node in an error: "an integer (-2)", "a list of
 * 1 element", … */
static gchar *
node_kind (JsonNode * node)
{
  if (JSON_NODE_HOLDS_OBJECT (node))
    return g_strdup ("an object");
  if (JSON_NODE_HOLDS_ARRAY (node)) {
    guint n = json_array_get_length (json_node_get_array (node));
    return g_strdup_printf ("a list of %u element%s", n, n == 1 ? "" : "s");
  }
  if (JSON_NODE_HOLDS_NULL (node))
    return g_strdup ("null");
  switch (json_node_get_value_type (node)) {
    case G_TYPE_STRING:
      return g_strdup ("a string");
    case G_TYPE_INT64:
      return g_strdup_printf ("an integer (%" G_GINT64_FORMAT ")",
          json_node_get_int (node));
    case G_TYPE_DOUBLE:
      return g_strdup_printf ("a number (%g)", json_node_get_double (node));
    case G_TYPE_BOOLEAN:
      return g_strdup ("a boolean");
  }
  return g_strdup ("a value");
}

/* A non-negative JSON integer. */
static gboolean
node_to_count (JsonNode * node, gint64 * out)
{
  if (!JSON_NODE_HOLDS_VALUE (node)
      || json_node_get_value_type (node) != G_TYPE_INT64)
    return FALSE;
  *out = json_node_get_int (node);
  return *out >= 0;
}

static gboolean
parse_metadata (PpSafetensors * st, JsonNode * node, GError ** error)
{
  JsonObject *obj;
  g_autoptr (GList) members = NULL;

  if (!JSON_NODE_HOLDS_OBJECT (node)) {
    g_autofree gchar *kind = node_kind (node);

    g_set_error (error, PP_ERROR, PP_ERROR_MODEL,
        "%s: '%s' must be an object of strings, found %s", st->path,
        PP_ST_METADATA_KEY, kind);
    return FALSE;
  }
  obj = json_node_get_object (node);
  members = json_object_get_members (obj);
  for (GList * l = members; l != NULL; l = l->next) {
    JsonNode *v = json_object_get_member (obj, l->data);

    if (!JSON_NODE_HOLDS_VALUE (v)
        || json_node_get_value_type (v) != G_TYPE_STRING) {
      g_autofree gchar *kind = node_kind (v);

      g_set_error (error, PP_ERROR, PP_ERROR_MODEL,
          "%s: '%s' value '%s' must be a string, found %s", st->path,
          PP_ST_METADATA_KEY, (const gchar *) l->data, kind);
      return FALSE;
    }
    g_hash_table_insert (st->metadata, g_strdup (l->data),
        g_strdup (json_node_get_string (v)));
  }
  return TRUE;
}

/* Fills @e from one header entry; offsets are checked against the data
 * region later, all together. */
static gboolean
parse_entry (PpSafetensors * st, const gchar * name, JsonNode * node,
    guint64 data_len, PpStEntry * e, guint64 * begin, guint64 * end,
    GError ** error)
{
  JsonObject *obj;
  JsonNode *dtype_node, *shape_node, *offsets_node;
  JsonArray *arr;
  const gchar *dtype;
  guint64 expected;
  gint64 v;

  if (!JSON_NODE_HOLDS_OBJECT (node)) {
    g_autofree gchar *kind = node_kind (node);

    g_set_error (error, PP_ERROR, PP_ERROR_MODEL,
        "%s: tensor '%s' must be an object with dtype, shape and "
        "data_offsets, found %s", st->path, name, kind);
    return FALSE;
  }
  obj = json_node_get_object (node);
  dtype_node = json_object_get_member (obj, "dtype");
  shape_node = json_object_get_member (obj, "shape");
  offsets_node = json_object_get_member (obj, "data_offsets");
  if (dtype_node == NULL || shape_node == NULL || offsets_node == NULL) {
    g_set_error (error, PP_ERROR, PP_ERROR_MODEL,
        "%s: tensor '%s' has no %s", st->path, name,
        dtype_node == NULL ? "dtype" : shape_node == NULL ? "shape" :
        "data_offsets");
    return FALSE;
  }

  if (!JSON_NODE_HOLDS_VALUE (dtype_node)
      || json_node_get_value_type (dtype_node) != G_TYPE_STRING) {
    g_autofree gchar *kind = node_kind (dtype_node);

    g_set_error (error, PP_ERROR, PP_ERROR_MODEL,
        "%s: tensor '%s': dtype must be a string, found %s", st->path, name,
        kind);
    return FALSE;
  }
  dtype = json_node_get_string (dtype_node);
  if (!dtype_from_string (dtype, &e->dtype)) {
    g_set_error (error, PP_ERROR, PP_ERROR_MODEL,
        "%s: tensor '%s' has dtype %s; only F32, F16, BF16 (and I64 "
        "buffers) are supported", st->path, name, dtype);
    return FALSE;
  }

  if (!JSON_NODE_HOLDS_ARRAY (shape_node)) {
    g_autofree gchar *kind = node_kind (shape_node);

    g_set_error (error, PP_ERROR, PP_ERROR_MODEL,
        "%s: tensor '%s': shape must be a list of sizes, found %s",
        st->path, name, kind);
    return FALSE;
  }
  arr = json_node_get_array (shape_node);
  if (json_array_get_length (arr) > PP_ST_MAX_DIMS) {
    g_set_error (error, PP_ERROR, PP_ERROR_MODEL,
        "%s: tensor '%s' has %u dimensions, at most %d are supported",
        st->path, name, json_array_get_length (arr), PP_ST_MAX_DIMS);
    return FALSE;
  }
  e->ndim = json_array_get_length (arr);
  expected = pp_st_dtype_size (e->dtype);
  for (guint i = 0; i < e->ndim; i++) {
    JsonNode *dim = json_array_get_element (arr, i);

    if (!node_to_count (dim, &v)) {
      g_autofree gchar *kind = node_kind (dim);

      g_set_error (error, PP_ERROR, PP_ERROR_MODEL,
          "%s: tensor '%s': shape[%u] must be a non-negative integer, "
          "found %s", st->path, name, i, kind);
      return FALSE;
    }
    e->shape[i] = v;
    if (v != 0 && expected > G_MAXUINT64 / (guint64) v) {
      g_set_error (error, PP_ERROR, PP_ERROR_MODEL,
          "%s: tensor '%s': the size of its shape overflows 64 bits",
          st->path, name);
      return FALSE;
    }
    expected *= (guint64) v;
  }

  if (!JSON_NODE_HOLDS_ARRAY (offsets_node)
      || json_array_get_length (json_node_get_array (offsets_node))
      != N_DATA_OFFSETS) {
    g_autofree gchar *kind = node_kind (offsets_node);

    g_set_error (error, PP_ERROR, PP_ERROR_MODEL,
        "%s: tensor '%s': data_offsets must be a list [begin, end], found %s",
        st->path, name, kind);
    return FALSE;
  }
  arr = json_node_get_array (offsets_node);
  for (guint i = 0; i < N_DATA_OFFSETS; i++) {
    JsonNode *off = json_array_get_element (arr, i);

    if (!node_to_count (off, &v)) {
      g_autofree gchar *kind = node_kind (off);

      g_set_error (error, PP_ERROR, PP_ERROR_MODEL,
          "%s: tensor '%s': data_offsets[%u] must be a non-negative integer, "
          "found %s", st->path, name, i, kind);
      return FALSE;
    }
    *(i == 0 ? begin : end) = (guint64) v;
  }
  if (*end < *begin) {
    g_set_error (error, PP_ERROR, PP_ERROR_MODEL,
        "%s: tensor '%s': data_offsets [%" G_GUINT64_FORMAT ", %"
        G_GUINT64_FORMAT "] end before they begin", st->path, name, *begin,
        *end);
    return FALSE;
  }
  if (*end > data_len) {
    g_set_error (error, PP_ERROR, PP_ERROR_MODEL,
        "%s: tensor '%s': data_offsets [%" G_GUINT64_FORMAT ", %"
        G_GUINT64_FORMAT "] reach past the end of the %" G_GUINT64_FORMAT
        "-byte data region (truncated file?)", st->path, name, *begin, *end,
        data_len);
    return FALSE;
  }
  if (*end - *begin != expected) {
    g_autoptr (GString) shape = g_string_new (NULL);

    for (guint i = 0; i < e->ndim; i++)
      g_string_append_printf (shape, "%s%" G_GINT64_FORMAT, i ? ", " : "",
          e->shape[i]);
    g_set_error (error, PP_ERROR, PP_ERROR_MODEL,
        "%s: tensor '%s' (%s [%s]) needs %" G_GUINT64_FORMAT " bytes but "
        "data_offsets [%" G_GUINT64_FORMAT ", %" G_GUINT64_FORMAT "] span %"
        G_GUINT64_FORMAT, st->path, name, dtype, shape->str, expected, *begin,
        *end, *end - *begin);
    return FALSE;
  }
  e->nbytes = (gsize) expected;
  e->name = g_strdup (name);
  return TRUE;
}

typedef struct
{
  PpStEntry entry;
  guint64 begin;
  guint64 end;
} Span;

static gint
compare_spans (gconstpointer a, gconstpointer b)
{
  const Span *x = a, *y = b;

  if (x->begin != y->begin)
    return x->begin < y->begin ? -1 : 1;
  if (x->end != y->end)
    return x->end < y->end ? -1 : 1;
  return 0;
}

/* The sorted spans must cover [0, data_len) exactly once. */
static gboolean
check_tiling (PpSafetensors * st, const Span * spans, guint n,
    guint64 data_len, GError ** error)
{
  guint64 expected = 0;

  for (guint i = 0; i < n; i++) {
    const Span *s = &spans[i];

    if (s->begin < expected) {
      g_set_error (error, PP_ERROR, PP_ERROR_MODEL,
          "%s: tensors '%s' [%" G_GUINT64_FORMAT ", %" G_GUINT64_FORMAT
          ") and '%s' [%" G_GUINT64_FORMAT ", %" G_GUINT64_FORMAT
          ") overlap", st->path, spans[i - 1].entry.name, spans[i - 1].begin,
          spans[i - 1].end, s->entry.name, s->begin, s->end);
      return FALSE;
    }
    if (s->begin > expected) {
      if (i == 0)
        g_set_error (error, PP_ERROR, PP_ERROR_MODEL,
            "%s: gap of %" G_GUINT64_FORMAT " bytes at the start of the data "
            "region, before tensor '%s'", st->path, s->begin, s->entry.name);
      else
        g_set_error (error, PP_ERROR, PP_ERROR_MODEL,
            "%s: gap of %" G_GUINT64_FORMAT " bytes [%" G_GUINT64_FORMAT ", %"
            G_GUINT64_FORMAT ") between tensors '%s' and '%s'", st->path,
            s->begin - expected, expected, s->begin, spans[i - 1].entry.name,
            s->entry.name);
      return FALSE;
    }
    expected = s->end;
  }
  if (expected != data_len) {
    if (n == 0)
      g_set_error (error, PP_ERROR, PP_ERROR_MODEL,
          "%s: %" G_GUINT64_FORMAT " bytes of data but no tensors", st->path,
          data_len);
    else
      g_set_error (error, PP_ERROR, PP_ERROR_MODEL,
          "%s: %" G_GUINT64_FORMAT " trailing bytes past the end of the last "
          "tensor '%s'", st->path, data_len - expected, spans[n - 1].entry.name);
    return FALSE;
  }
  return TRUE;
}

static void
entries_free (PpStEntry * entries, guint n)
{
  for (guint i = 0; i < n; i++)
    g_free (entries[i].name);
  g_free (entries);
}

void
pp_safetensors_free (PpSafetensors * st)
{
  if (st == NULL)
    return;
  g_free (st->path);
  g_clear_pointer (&st->bytes, g_bytes_unref);
  entries_free (st->entries, st->n_entries);
  g_clear_pointer (&st->index, g_hash_table_unref);
  g_clear_pointer (&st->metadata, g_hash_table_unref);
  g_free (st);
}

/* Parses the JSON header @text (already syntax-checked) into @st. */
static gboolean
parse_header (PpSafetensors * st, const gchar * text, gsize text_len,
    const guint8 * data, guint64 data_len, GError ** error)
{
  g_autoptr (JsonParser) parser = json_parser_new ();
  g_autoptr (GError) local = NULL;
  g_autoptr (GList) members = NULL;
  DupCheck dup = { g_hash_table_new (NULL, NULL), NULL };
  JsonObject *root;
  Span *spans;
  guint n = 0;
  gboolean ok;

  g_signal_connect (parser, "object-member", G_CALLBACK (on_object_member),
      &dup);
  ok = json_parser_load_from_data (parser, text, (gssize) text_len, &local);
  g_hash_table_unref (dup.seen);
  if (!ok) {
    g_free (dup.duplicate);
    g_set_error (error, PP_ERROR, PP_ERROR_MODEL, "%s: bad JSON header: %s",
        st->path, local->message);
    return FALSE;
  }
  if (dup.duplicate != NULL) {
    g_set_error (error, PP_ERROR, PP_ERROR_MODEL,
        "%s: duplicate key '%s' in the header", st->path, dup.duplicate);
    g_free (dup.duplicate);
    return FALSE;
  }
  root = json_node_get_object (json_parser_get_root (parser));
  members = json_object_get_members (root);
  spans = g_new0 (Span, json_object_get_size (root));
  for (GList * l = members; l != NULL; l = l->next) {
    const gchar *name = l->data;
    JsonNode *node = json_object_get_member (root, name);

    if (!g_utf8_validate (name, -1, NULL)) {
      g_set_error (error, PP_ERROR, PP_ERROR_MODEL,
          "%s: a key in the header is not valid UTF-8", st->path);
      ok = FALSE;
      break;
    }
    if (g_str_equal (name, PP_ST_METADATA_KEY))
      ok = parse_metadata (st, node, error);
    else {
      ok = parse_entry (st, name, node, data_len, &spans[n].entry,
          &spans[n].begin, &spans[n].end, error);
      if (ok)
        n++;
    }
    if (!ok)
      break;
  }
  if (ok) {
    if (n > 1)
      qsort (spans, n, sizeof (Span), compare_spans);
    ok = check_tiling (st, spans, n, data_len, error);
  }
  st->entries = g_new0 (PpStEntry, n);
  st->n_entries = n;
  for (guint i = 0; i < n; i++) {
    st->entries[i] = spans[i].entry;
    st->entries[i].data = data + spans[i].begin;
    g_hash_table_insert (st->index, st->entries[i].name, &st->entries[i]);
  }
  g_free (spans);
  return ok;
}

PpSafetensors *
pp_safetensors_parse (GBytes * bytes, const gchar * what, GError ** error)
{
  g_autoptr (PpSafetensors) st = g_new0 (PpSafetensors, 1);
  g_autofree gchar *text = NULL;
  const guint8 *base;
  gsize size;
  guint64 header_len;

  g_return_val_if_fail (bytes != NULL, NULL);
  st->path = g_strdup (what != NULL ? what : "<memory>");
  st->bytes = g_bytes_ref (bytes);
  st->index = g_hash_table_new (g_str_hash, g_str_equal);
  st->metadata = g_hash_table_new_full (g_str_hash, g_str_equal, g_free,
      g_free);
  base = g_bytes_get_data (bytes, &size);

  if (size < HEADER_LEN_BYTES) {
    g_set_error (error, PP_ERROR, PP_ERROR_MODEL,
        "%s: %" G_GSIZE_FORMAT " bytes, too short for the %d-byte header "
        "length (truncated file?)", st->path, size, HEADER_LEN_BYTES);
    return NULL;
  }
  memcpy (&header_len, base, sizeof header_len);
  header_len = GUINT64_FROM_LE (header_len);
  if (header_len > size - HEADER_LEN_BYTES) {
    g_set_error (error, PP_ERROR, PP_ERROR_MODEL,
        "header length %" G_GUINT64_FORMAT " past the end of %s (size %"
        G_GSIZE_FORMAT ")", header_len, st->path, size);
    return NULL;
  }
  if (header_len > PP_ST_MAX_HEADER_BYTES) {
    g_set_error (error, PP_ERROR, PP_ERROR_MODEL,
        "%s: header length %" G_GUINT64_FORMAT " is more than the %d bytes "
        "a header may have", st->path, header_len, PP_ST_MAX_HEADER_BYTES);
    return NULL;
  }
  /* A NUL-terminated copy: json-glib wants one, the header is small. */
  text = g_strndup ((const gchar *) base + HEADER_LEN_BYTES, header_len);
  if (strlen (text) != header_len
      || !g_utf8_validate (text, (gssize) header_len, NULL)) {
    g_set_error (error, PP_ERROR, PP_ERROR_MODEL,
        "%s: the %" G_GUINT64_FORMAT "-byte header is not UTF-8 text "
        "without NUL bytes",
        st->path, header_len);
    return NULL;
  }
  if (!check_json_syntax (st->path, text, header_len, error))
    return NULL;
  if (!parse_header (st, text, header_len,
          base + HEADER_LEN_BYTES + header_len,
          size - HEADER_LEN_BYTES - header_len, error))
    return NULL;
  return g_steal_pointer (&st);
}

PpSafetensors *
pp_safetensors_open (const gchar * path, GError ** error)
{
  g_autoptr (GError) local = NULL;
  g_autoptr (GBytes) bytes = NULL;
  GMappedFile *map;

  g_return_val_if_fail (path != NULL, NULL);
  map = g_mapped_file_new (path, FALSE, &local);
  if (map == NULL) {
    g_set_error (error, PP_ERROR, PP_ERROR_RESOURCE,
        "cannot map safetensors file: %s", local->message);
    return NULL;
  }
  bytes = g_mapped_file_get_bytes (map);
  g_mapped_file_unref (map);    /* @bytes keeps the mapping */
  return pp_safetensors_parse (bytes, path, error);
}

const gchar *
pp_safetensors_path (PpSafetensors * st)
{
  return st->path;
}

guint
pp_safetensors_n_entries (PpSafetensors * st)
{
  return st->n_entries;
}

const PpStEntry *
pp_safetensors_entry (PpSafetensors * st, guint i)
{
  g_return_val_if_fail (i < st->n_entries, NULL);
  return &st->entries[i];
}

const PpStEntry *
pp_safetensors_find (PpSafetensors * st, const gchar * name)
{
  return g_hash_table_lookup (st->index, name);
}

GBytes *
pp_safetensors_bytes (PpSafetensors * st)
{
  return st->bytes;
}

GHashTable *
pp_safetensors_metadata (PpSafetensors * st)
{
  return st->metadata;
}

/* ---- writer -------------------------------------------------------------- */

static void
append_json_string (GString * s, const gchar * str)
{
  g_string_append_c (s, '"');
  for (const guchar * p = (const guchar *) str; *p != '\0'; p++) {
    if (*p == '"' || *p == '\\')
      g_string_append_printf (s, "\\%c", *p);
    else if (*p < 0x20)
      g_string_append_printf (s, "\\u%04x", *p);
    else
      g_string_append_c (s, (gchar) * p);
  }
  g_string_append_c (s, '"');
}

static gint
compare_entry_names (gconstpointer a, gconstpointer b)
{
  const PpStEntry *x = *(const PpStEntry * const *) a;
  const PpStEntry *y = *(const PpStEntry * const *) b;

  return strcmp (x->name, y->name);
}

static gint
compare_strings (gconstpointer a, gconstpointer b)
{
  return strcmp (*(const gchar * const *) a, *(const gchar * const *) b);
}

static gboolean
check_write_entry (const gchar * path, const PpStEntry * e, GError ** error)
{
  guint64 expected = sizeof (gfloat);

  if (e->name == NULL || *e->name == '\0' || !g_utf8_validate (e->name, -1,
          NULL) || g_str_equal (e->name, PP_ST_METADATA_KEY)) {
    g_set_error (error, PP_ERROR, PP_ERROR_SHAPE,
        "%s: cannot write a tensor named '%s'", path,
        e->name != NULL ? e->name : "(null)");
    return FALSE;
  }
  if (e->dtype != PP_ST_F32 || e->ndim > PP_ST_MAX_DIMS) {
    g_set_error (error, PP_ERROR, PP_ERROR_SHAPE,
        "%s: tensor '%s': only F32 tensors of up to %d dimensions are "
        "written, found %s with %u", path, e->name, PP_ST_MAX_DIMS,
        pp_st_dtype_name (e->dtype), e->ndim);
    return FALSE;
  }
  for (guint i = 0; i < e->ndim; i++) {
    if (e->shape[i] < 0 || (e->shape[i] != 0
            && expected > G_MAXSIZE / (guint64) e->shape[i])) {
      g_set_error (error, PP_ERROR, PP_ERROR_SHAPE,
          "%s: tensor '%s': invalid size %" G_GINT64_FORMAT " in dimension %u",
          path, e->name, e->shape[i], i);
      return FALSE;
    }
    expected *= (guint64) e->shape[i];
  }
  if (expected != e->nbytes || (e->nbytes > 0 && e->data == NULL)) {
    g_set_error (error, PP_ERROR, PP_ERROR_SHAPE,
        "%s: tensor '%s': its shape needs %" G_GUINT64_FORMAT " bytes, it "
        "has %" G_GSIZE_FORMAT, path, e->name, expected, e->nbytes);
    return FALSE;
  }
  return TRUE;
}

/* The header JSON, padded with spaces to a multiple of HEADER_ALIGN. */
static GString *
build_header (PpStEntry ** sorted, guint n, GHashTable * metadata)
{
  GString *s = g_string_new ("{");
  guint64 offset = 0;

  if (metadata != NULL && g_hash_table_size (metadata) > 0) {
    g_autofree gpointer keys = g_hash_table_get_keys_as_array (metadata,
        NULL);
    guint n_keys = g_hash_table_size (metadata);

    qsort (keys, n_keys, sizeof (gchar *), compare_strings);
    append_json_string (s, PP_ST_METADATA_KEY);
    g_string_append (s, ":{");
    for (guint i = 0; i < n_keys; i++) {
      const gchar *k = ((const gchar **) keys)[i];

      if (i > 0)
        g_string_append_c (s, ',');
      append_json_string (s, k);
      g_string_append_c (s, ':');
      append_json_string (s, g_hash_table_lookup (metadata, k));
    }
    g_string_append_c (s, '}');
  }
  for (guint i = 0; i < n; i++) {
    const PpStEntry *e = sorted[i];

    if (s->len > 1)
      g_string_append_c (s, ',');
    append_json_string (s, e->name);
    g_string_append (s, ":{\"dtype\":\"F32\",\"shape\":[");
    for (guint d = 0; d < e->ndim; d++)
      g_string_append_printf (s, "%s%" G_GINT64_FORMAT, d ? "," : "",
          e->shape[d]);
    g_string_append_printf (s, "],\"data_offsets\":[%" G_GUINT64_FORMAT ",%"
        G_GUINT64_FORMAT "]}", offset, offset + e->nbytes);
    offset += e->nbytes;
  }
  g_string_append_c (s, '}');
  while (s->len % HEADER_ALIGN != 0)
    g_string_append_c (s, ' ');
  return s;
}

static gboolean
write_floats (FILE * f, const gfloat * data, gsize nbytes)
{
#if G_BYTE_ORDER == G_LITTLE_ENDIAN
  return fwrite (data, 1, nbytes, f) == nbytes;
#else
  guint32 buf[SWAP_CHUNK];
  gsize numel = nbytes / sizeof (gfloat);

  for (gsize i = 0; i < numel; i += SWAP_CHUNK) {
    gsize m = MIN (SWAP_CHUNK, numel - i);

    memcpy (buf, data + i, m * sizeof (gfloat));
    for (gsize j = 0; j < m; j++)
      buf[j] = GUINT32_TO_LE (buf[j]);
    if (fwrite (buf, sizeof (gfloat), m, f) != m)
      return FALSE;
  }
  return TRUE;
#endif
}

gboolean
pp_safetensors_write_entries (const gchar * path, guint n,
    const PpStEntry * entries, GHashTable * metadata, GError ** error)
{
  g_autofree PpStEntry **sorted = g_new (PpStEntry *, MAX (n, 1));
  g_autofree gchar *tmp = NULL;
  g_autoptr (GString) header = NULL;
  guint64 header_len;
  gboolean ok;
  FILE *f;
  gint fd, saved_errno;

  g_return_val_if_fail (path != NULL, FALSE);
  for (guint i = 0; i < n; i++) {
    if (!check_write_entry (path, &entries[i], error))
      return FALSE;
    sorted[i] = (PpStEntry *) & entries[i];
  }
  qsort (sorted, n, sizeof (PpStEntry *), compare_entry_names);
  for (guint i = 1; i < n; i++) {
    if (g_str_equal (sorted[i - 1]->name, sorted[i]->name)) {
      g_set_error (error, PP_ERROR, PP_ERROR_SHAPE,
          "%s: tensor '%s' given twice", path, sorted[i]->name);
      return FALSE;
    }
  }
  header = build_header (sorted, n, metadata);

  tmp = g_strdup_printf ("%s.XXXXXX", path);
  fd = g_mkstemp_full (tmp, O_WRONLY, 0644);
  if (fd < 0 || (f = fdopen (fd, "wb")) == NULL) {
    saved_errno = errno;
    if (fd >= 0) {
      g_close (fd, NULL);
      g_unlink (tmp);
    }
    g_set_error (error, PP_ERROR, PP_ERROR_RESOURCE,
        "cannot create a file beside %s: %s", path, g_strerror (saved_errno));
    return FALSE;
  }
  header_len = GUINT64_TO_LE ((guint64) header->len);
  ok = fwrite (&header_len, sizeof header_len, 1, f) == 1
      && fwrite (header->str, 1, header->len, f) == header->len;
  for (guint i = 0; ok && i < n; i++)
    ok = write_floats (f, (const gfloat *) sorted[i]->data, sorted[i]->nbytes);
  saved_errno = errno;
  if (fclose (f) != 0 && ok) {
    ok = FALSE;
    saved_errno = errno;
  }
  if (ok && g_rename (tmp, path) != 0) {
    ok = FALSE;
    saved_errno = errno;
  }
  if (!ok) {
    g_unlink (tmp);
    g_set_error (error, PP_ERROR, PP_ERROR_RESOURCE,
        "cannot write %s: %s", path, g_strerror (saved_errno));
  }
  return ok;
}

gboolean
pp_safetensors_write (const gchar * path, guint n,
    const gchar * const *names, const PpTensor * const *tensors,
    GHashTable * metadata, GError ** error)
{
  g_autofree PpStEntry *entries = g_new0 (PpStEntry, MAX (n, 1));

  for (guint i = 0; i < n; i++) {
    const PpTensor *t = tensors[i];

    if (t->dtype != PP_DTYPE_F32) {
      g_set_error (error, PP_ERROR, PP_ERROR_SHAPE,
          "%s: tensor '%s' is %s; only F32 tensors are written", path,
          names[i], pp_dtype_name (t->dtype));
      return FALSE;
    }
    entries[i].name = (gchar *) names[i];
    entries[i].dtype = PP_ST_F32;
    entries[i].ndim = t->ndim;
    memcpy (entries[i].shape, t->shape, t->ndim * sizeof (gint64));
    entries[i].nbytes = t->nbytes;
    entries[i].data = t->data;
  }
  return pp_safetensors_write_entries (path, n, entries, metadata, error);
}
