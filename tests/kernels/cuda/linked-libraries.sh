#!/bin/sh
# The CUDA build links the real libraries of the toolkit under cuda-root:
# each of them resolves, at run time, to a file there (no stub).  With
# --absent: none of them is linked at all (a binary that loads the CUDA
# module only when CUDA is asked for).
# Usage: linked-libraries.sh [--absent] EXECUTABLE CUDA_ROOT LIBRARY...
set -eu
if [ "$1" = --absent ]; then
  shift
  exe=$1
  shift 2
  deps=$(ldd "$exe")
  status=0
  for lib in "$@"; do
    if printf '%s\n' "$deps" | grep -q "^[[:space:]]*$lib\.so"; then
      echo "$exe links $lib: it should load the CUDA module instead" >&2
      status=1
    else
      echo "$lib: not linked"
    fi
  done
  exit $status
fi
exe=$1 root=$2
shift 2
deps=$(ldd "$exe")
status=0
for lib in "$@"; do
  line=$(printf '%s\n' "$deps" | grep "^[[:space:]]*$lib\.so" || true)
  path=$(printf '%s\n' "$line" | awk '{ print $3 }')
  case $path in
    "$root"/*) echo "$lib: $path" ;;
    *) echo "$lib is not linked from $root: '${line:-absent}'" >&2
       status=1 ;;
  esac
  case $path in
    */stubs/*) echo "$lib resolves to a stub: $path" >&2; status=1 ;;
  esac
done
exit $status
