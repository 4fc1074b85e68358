#!/bin/sh
# gpu-bench --small on the cuda backend over its emulation on the CPU: the
# program's every path (the timed runs, each graph, the stream batch's and
# the frame batches' passes, the three device-time profiles with their
# shape tables) as a GPU runs it, and the GPU check's summary row of its
# output (tests/gpu/bench-row.awk) with every figure, its kernel traces
# (--kernels) and its norms alone (--norms), so that none breaks where
# only a GPU would show it.
# Usage: gpu-bench-emulated.sh GPU_BENCH BENCH_ROW_AWK
set -u
bench=$1 row_awk=$2
log=$(mktemp)
trap 'rm -f "$log"' EXIT
fail() { echo "gpu-bench-emulated: $*" >&2; sed 's/^/  | /' "$log" >&2; exit 1; }

timeout -k 10 400 "$bench" --small --repeats 1 >"$log" 2>&1
st=$?
[ "$st" -eq 0 ] || fail "gpu-bench --small exited with status $st"
grep -q '^cuda on .*CUDA emulation' "$log" \
  || fail "not the cuda backend over the emulation"
for what in 'small UNet step 8x8, graph' 'TAESD enc+dec 64x64, graph' \
    'small UNet pass of a 4-frame stream batch, graph' \
    'small UNet pass of a 2-frame batch at one step, graph' \
    'small UNet pass of a 4-frame batch at one step, graph'; do
  grep -q "^$what .* ms " "$log" || fail "no figure for \"$what\""
done
! grep -q 'not measured' "$log" || fail "a figure was not measured"
# What each graph holds (its nodes, its kernels) and the launch floor
# (a chain of one-block kernels), against which a graph's µs a kernel
# are read; and the backend's ways, which the figures are of.
grep -q '^kernel ways: attention=.* pdl=' "$log" || fail "no kernel ways"
n=$(grep -c '^graph nodes of .*: [1-9][0-9]*, [1-9][0-9]* of them kernels, [0-9.]* µs a kernel$' "$log")
[ "$n" -eq 5 ] || fail "$n graphs' node counts, expected 5"
grep -q '^launch floor: a graph of 512 one-block kernels in a chain, [0-9.]* µs a kernel (512 kernel nodes; plain launches)$' "$log" \
  || fail "no launch floor"
# Each profile in device time (the emulated events' clock), with its
# families, its ops and its costliest shapes.
n=$(grep -c '^profile of one .*(device time: ' "$log")
[ "$n" -eq 3 ] || fail "$n profiles in device time, expected 3"
awk '
  /^profile of one / { if (name != "") check(); name = $0; fam = ops = shp = 0
    section = "" ; next }
  /^  family / { section = "family"; next }
  /^  op / { section = "op"; next }
  /^  shape \(per call\)/ { section = "shape"; next }
  /^  channels-last/ { next }
  /^  [a-z]/ && section == "family" { fam++ }
  /^  [a-z]/ && section == "op" { ops++ }
  /^  [a-z]/ && section == "shape" { shp++; if ($1 == "for_rows") bad = 1 }
  function check() {
    if (fam == 0 || ops == 0 || shp == 0) {
      printf "%s: %d families, %d ops, %d shapes\n", name, fam, ops, shp
      failed = 1
    }
  }
  END { if (name != "") check()
    if (bad) { print "a for_rows region among the device shapes"; failed = 1 }
    exit failed }' "$log" >&2 || fail "a profile lacks a table"
row=$(awk -v way=emulated -f "$row_awk" "$log")
echo "summary row: $row"
case " $row " in
  *" - "*) fail "the GPU check's summary row lacks a figure: $row" ;;
esac
# Kernel traces (--kernels): each graph's one launch, every kernel it ran
# (on the emulation as many as its kernel nodes: the libraries' calls run
# there without kernels), the table by kernel name; and where there is no
# device kernel to trace (the cpu backend), a skip that says so.  With
# --kernel-order, a kernel's every call in the order it ran: as many as
# the table's calls of it, in ascending places.
timeout -k 10 400 "$bench" --small --kernels \
  --kernel-order group_norm_ticket_apply >"$log" 2>&1
st=$?
[ "$st" -eq 0 ] || fail "gpu-bench --small --kernels exited with status $st"
n=$(grep -c '^kernels of .*, graph: [1-9][0-9]* kernels (its graph: [1-9][0-9]* kernel nodes) in ' "$log")
[ "$n" -eq 3 ] || fail "$n graphs traced, expected 3"
awk '/^kernels of / {
    match($0, /, graph: [0-9]+ kernels/); k = substr($0, RSTART + 9, RLENGTH - 9)
    match($0, /\(its graph: [0-9]+ kernel nodes/); n = substr($0, RSTART + 12, RLENGTH - 12)
    if (k + 0 != n + 0) { print "traced " k + 0 " kernels of " n + 0 " kernel nodes: " $0; bad = 1 } }
  END { exit bad }' "$log" >&2 || fail "a trace missed kernels of its graph"
grep -Eq '^  group_norm_[a-z_]+kernel.* [1-9][0-9]* +[0-9.]+ +[0-9.]+ % +[0-9.]+$' "$log" \
  || fail "no group norm kernel in the traces' tables"
grep -q 'not traced' "$log" && fail "a graph was not traced"
n=$(grep -c '^kernels of .* in the order they ran, those whose names hold "group_norm_ticket_apply":$' "$log")
[ "$n" -eq 3 ] || fail "$n graphs' kernels listed in order, expected 3"
awk '/^  group_norm_ticket_apply_kernel/ { table += $2 }
  /^kernels of .* in the order they ran/ { last = -1 }
  /^ +[0-9]+ +[0-9.]+ µs  group_norm_ticket_apply_kernel/ {
    listed++; if ($1 + 0 <= last) bad = 1; last = $1 + 0 }
  END { if (table == 0 || listed != table || bad) {
      print "listed " listed " calls in order, the tables " table; exit 1 } }' \
  "$log" >&2 || fail "the kernels in order are not the tables' calls"
timeout -k 10 60 "$bench" --backend cpu --small --kernels >"$log" 2>&1
st=$?
[ "$st" -eq 77 ] && grep -q '^kernel trace: not available: the cpu backend' "$log" \
  || fail "the cpu backend's kernel trace: status $st, expected 77 and why"
# --kernel-order without a trace to list: refused, saying so.
timeout -k 10 60 "$bench" --small --kernel-order fprop >"$log" 2>&1
st=$?
[ "$st" -eq 2 ] && grep -q 'kernel-order lists a trace.s kernels' "$log" \
  || fail "--kernel-order without --kernels: status $st, expected 2 and why"
# The norms alone (--norms): a row per shape with its time, a step's
# norms in all, in the ways the environment chose: the default (unset:
# the ticket kernels), then the grid, vector and split ones (their
# launches counted at exit).
for way in :ticket:group_norm_ticket_apply_kernel \
    grid:grid:group_norm_grid_kernel \
    vector:vector:group_norm_vec_apply_kernel \
    split:split:group_norm_nhwc_apply_kernel; do
  set="${way%%:*}" rest="${way#*:}"
  name="${rest%%:*}" kernel="${rest#*:}"
  PPDIFFUSE_CUDA_GROUP_NORM=$set PP_CUDA_EMU_LAUNCHES=$kernel \
    timeout -k 10 120 "$bench" --small --norms --repeats 1 >"$log" 2>&1
  st=$?
  [ "$st" -eq 0 ] || fail "gpu-bench --small --norms ($name) exited with status $st"
  n=$(grep -Ec '^  (group|layer) norm .* [1-9][0-9]* +[0-9.]+ +[0-9.]+ +[0-9]+' "$log")
  [ "$n" -eq 3 ] || fail "$n norm shapes timed ($name), expected 3"
  grep -q "^  a step's norms: group [0-9.]* ms (3), layer [0-9.]* ms (3)$" "$log" \
    || fail "no step's norms in all ($name)"
  grep -q "group-norm=$name " "$log" || fail "not the $name way"
  grep -q "^emulated launches of $kernel: [1-9]" "$log" \
    || fail "the $name way's kernel did not run"
done
# One norm shape (--norm-shape) with its kernels traced (--kernels): its
# row, then each kernel's device time a call, the ticket way's two; a
# shape past the table refused, naming the range.
timeout -k 10 120 "$bench" --small --norms --kernels --norm-shape 1 \
  --repeats 1 >"$log" 2>&1
st=$?
[ "$st" -eq 0 ] || fail "gpu-bench --small --norms --kernels --norm-shape 1 exited with status $st"
n=$(grep -Ec '^  (group|layer) norm .* [1-9][0-9]* +[0-9.]+ +[0-9.]+ +[0-9]+' "$log")
[ "$n" -eq 1 ] || fail "$n norm shapes timed with --norm-shape 1, expected 1"
grep -Eq '^    kernels \(µs a call, device time\): group_norm_ticket_stats_kernel<A> [0-9.]+, group_norm_ticket_apply_kernel<A> [0-9.]+$' "$log" \
  || fail "no traced kernels under the norm's row"
timeout -k 10 60 "$bench" --small --norms --norm-shape 3 >"$log" 2>&1
st=$?
[ "$st" -eq 1 ] && grep -q '^norms: no shape 3: there are 3 (0 to 2)$' "$log" \
  || fail "a norm shape past the table: status $st, expected 1 and why"
echo "gpu-bench --small ran every path on the emulation, its kernel traces and norms too"
