/* ppdiffuse — fault injection for the break-it tests. */
#include "pp-fault.h"
#include "pp-error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const gchar *const kind_names[] = {
  [PP_FAULT_NONE] = "none",
  [PP_FAULT_KILL] = "kill",
  [PP_FAULT_HANG] = "hang",
  [PP_FAULT_EXIT0] = "exit0",
  [PP_FAULT_EXIT1] = "exit1",
  [PP_FAULT_ABORT] = "abort",
  [PP_FAULT_BAD_VERSION] = "bad-version",
  [PP_FAULT_BAD_SPEC] = "bad-spec",
  [PP_FAULT_SKIP] = "skip",
  [PP_FAULT_DUP] = "dup",
  [PP_FAULT_SLOW] = "slow",
  [PP_FAULT_EARLY_CRASH] = "early-crash",
  [PP_FAULT_BAD_DIGEST] = "bad-digest",
  [PP_FAULT_LATE_START] = "late-start",
  [PP_FAULT_SLOW_LOAD] = "slow-load",
  [PP_FAULT_STALLED_LOAD] = "stalled-load",
  [PP_FAULT_LATE_BEAT] = "late-beat",
};

const gchar *
pp_fault_kind_name (PpFaultKind kind)
{
  return kind < G_N_ELEMENTS (kind_names) ? kind_names[kind] : "?";
}

static gboolean
parse_number (const gchar * key, const gchar * text, guint64 max,
    guint64 * out, GError ** error)
{
  if (!g_ascii_string_to_unsigned (text, 10, 0, max, out, NULL)) {
    g_set_error (error, PP_ERROR, PP_ERROR_CONFIG,
        "%s: '%s' is not a number for '%s'", PP_FAULT_ENV, text, key);
    return FALSE;
  }
  return TRUE;
}

gboolean
pp_fault_parse (const gchar * spec, PpFault * fault, GError ** error)
{
  g_auto (GStrv) fields = NULL;
  gboolean have_rank = FALSE;

  memset (fault, 0, sizeof *fault);
  if (spec == NULL || *spec == '\0')
    return TRUE;
  fields = g_strsplit (spec, ",", -1);
  for (guint i = 0; fields[i] != NULL; i++) {
    const gchar *colon = strchr (fields[i], ':');
    g_autofree gchar *key = NULL;
    const gchar *value;
    guint64 n;

    if (colon == NULL) {
      g_set_error (error, PP_ERROR, PP_ERROR_CONFIG,
          "%s: '%s' is not key:value (expected rank:R,chunk:N,kind:K)",
          PP_FAULT_ENV, fields[i]);
      return FALSE;
    }
    key = g_strndup (fields[i], colon - fields[i]);
    value = colon + 1;
    if (g_str_equal (key, "rank")) {
      if (!parse_number (key, value, G_MAXINT, &n, error))
        return FALSE;
      fault->rank = (gint) n;
      have_rank = TRUE;
    } else if (g_str_equal (key, "chunk")) {
      if (!parse_number (key, value, G_MAXUINT64, &fault->chunk, error))
        return FALSE;
    } else if (g_str_equal (key, "ms")) {
      if (!parse_number (key, value, G_MAXUINT32, &fault->ms, error))
        return FALSE;
    } else if (g_str_equal (key, "kind")) {
      fault->kind = PP_FAULT_NONE;
      for (guint k = 1; k < G_N_ELEMENTS (kind_names); k++)
        if (g_str_equal (value, kind_names[k]))
          fault->kind = (PpFaultKind) k;
      if (fault->kind == PP_FAULT_NONE) {
        g_set_error (error, PP_ERROR, PP_ERROR_CONFIG,
            "%s: unknown kind '%s'", PP_FAULT_ENV, value);
        return FALSE;
      }
    } else {
      g_set_error (error, PP_ERROR, PP_ERROR_CONFIG,
          "%s: unknown key '%s' (expected rank, chunk, kind, ms)",
          PP_FAULT_ENV, key);
      return FALSE;
    }
  }
  if (!have_rank || fault->kind == PP_FAULT_NONE) {
    g_set_error (error, PP_ERROR, PP_ERROR_CONFIG,
        "%s='%s' needs both rank:R and kind:K", PP_FAULT_ENV, spec);
    return FALSE;
  }
  return TRUE;
}

PpFault
pp_fault_for_rank (gint rank)
{
  PpFault fault;
  GError *error = NULL;

  if (!pp_fault_parse (g_getenv (PP_FAULT_ENV), &fault, &error)) {
    fprintf (stderr, "ppdiffuse-worker: %s\n", error->message);
    exit (2);
  }
  if (fault.rank != rank)
    fault.kind = PP_FAULT_NONE;
  return fault;
}

gboolean
pp_fault_fires (PpFault * fault, PpFaultKind kind, guint64 chunk_id)
{
  if (fault->kind != kind || fault->chunk != chunk_id)
    return FALSE;
  fault->kind = PP_FAULT_NONE;
  return TRUE;
}
