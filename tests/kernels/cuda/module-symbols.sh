#!/bin/sh
# The CUDA module calls none of the kernels library's functions by name:
# the element's plugin, which holds that library, is loaded privately
# (G_MODULE_BIND_LOCAL) and loads the module the same way, so such a
# symbol would not resolve and the module would not load in a pipeline
# (the tool and the worker, executables, would hide it).  The library's
# functions reach the module through PpBackend's hooks instead.
# Usage: module-symbols.sh MODULE
set -eu
module=$1
undefined=$(nm -D --undefined-only "$module" | awk '{ print $2 }' \
  | grep -E '^pp_' || true)
if [ -n "$undefined" ]; then
  echo "$module needs symbols of the kernels library, which a pipeline's" \
    "plugin does not export to it:" >&2
  printf '  %s\n' $undefined >&2
  exit 1
fi
echo "$module: no symbol of the kernels library left to resolve"
