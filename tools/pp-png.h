/* ppdiffuse-tool — PNG files as PpImage (8-bit RGB), through libpng. */
#pragma once

#include "pp-image.h"

G_BEGIN_DECLS

/* Loads any PNG as 8-bit RGB into a freshly allocated @image. */
gboolean pp_png_load  (const gchar * path, PpImage * image, GError ** error);
gboolean pp_png_save  (const gchar * path, const PpImage * image,
                       GError ** error);
/* Frees what pp_png_load allocated. */
void     pp_png_clear (PpImage * image);

G_END_DECLS
