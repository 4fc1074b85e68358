#include "pp-error.h"

G_DEFINE_QUARK (ppdiffuse-error-quark, pp_error)
