/* libFuzzer target for the safetensors reader: any bytes must give either a
 * valid file whose every entry converts to F32, or an error — never a crash,
 * a leak or undefined behaviour (built with ASan and UBSan). */
#include "pp-safetensors.h"

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput (const uint8_t * data, size_t size);

int
LLVMFuzzerTestOneInput (const uint8_t * data, size_t size)
{
  GBytes *bytes = g_bytes_new_static (data, size);
  GError *error = NULL;
  PpSafetensors *st = pp_safetensors_parse (bytes, "fuzz", &error);

  if (st == NULL) {
    /* Every failure must say why. */
    if (error == NULL || error->message == NULL || *error->message == '\0')
      __builtin_trap ();
    g_error_free (error);
  } else {
    for (guint i = 0; i < pp_safetensors_n_entries (st); i++) {
      const PpStEntry *e = pp_safetensors_entry (st, i);
      gfloat *dst = g_new (gfloat, MAX (pp_st_entry_numel (e), 1));

      if (e->data < data || e->data + e->nbytes > data + size
          || !g_utf8_validate (e->name, -1, NULL)
          || pp_safetensors_find (st, e->name) != e
          || !pp_safetensors_read_f32 (e, dst))
        __builtin_trap ();
      g_free (dst);
    }
    pp_safetensors_free (st);
  }
  g_bytes_unref (bytes);
  return 0;
}
