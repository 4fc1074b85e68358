/* ppdiffuse — taps: named intermediate outputs of a model's forward pass,
 * handed to a callback so that tests can compare each stage with the
 * reference and a person can see where two implementations part. */
#pragma once

#include "pp-tensor.h"

G_BEGIN_DECLS

/* @t is only valid during the call: copy what you keep. */
typedef void (*PpTapFunc) (const gchar * name, const PpTensor * t,
    gpointer user_data);

G_END_DECLS
