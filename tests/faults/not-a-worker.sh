#!/bin/sh
# Exists and is executable, but is no MPI program: it never joins the mesh.
exit 1
