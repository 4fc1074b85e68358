# The GPU check's bench summary (bench-row.awk's rows) against its
# "defaults, f16" row: each f16 way's UNet step, TAESD encode + decode and
# 4-frame stream-batch pass as a change from the default's (negative:
# faster), then the ways faster than the default on one of them by more
# than $THRESHOLD per cent (-v threshold=..., default 2): the candidates
# for a default, each to be held by the device step first.
# POSIX awk (mawk on the GPU machines).
# The way: what follows the row's six figures.
function way_of(line,   i) {
  for (i = 0; i < 6; i++)
    sub(/^ *[^ ]+/, "", line)
  sub(/^ +/, "", line)
  return line
}
function change(v, ref) {
  if (v == "-" || ref == "-" || ref + 0 <= 0)
    return ""
  return (v - ref) / ref * 100
}
function cell(c) { return c == "" ? "-" : sprintf("%+.1f%%", c) }
{ rows[NR] = $0 }
way_of($0) == "defaults, f16" { ref_u = $1; ref_t = $2; ref_b = $3 }
END {
  if (threshold == "")
    threshold = 2
  if (ref_u == "") {
    print "no \"defaults, f16\" row: nothing to compare"
    exit 0
  }
  printf "change from the defaults (f16), negative faster:\n"
  printf "%9s %9s %9s  %s\n", "UNet", "TAESD", "batch4", "way"
  faster = ""
  for (i = 1; i <= NR; i++) {
    w = way_of(rows[i])
    if (w == "defaults, f16" || w !~ /^(defaults, )?f16/)
      continue
    split(rows[i], f, " ")
    cu = change(f[1], ref_u); ct = change(f[2], ref_t)
    cb = change(f[3], ref_b)
    printf "%9s %9s %9s  %s\n", cell(cu), cell(ct), cell(cb), w
    what = ""
    if (cu != "" && cu < -threshold) what = what " UNet " cell(cu)
    if (ct != "" && ct < -threshold) what = what " TAESD " cell(ct)
    if (cb != "" && cb < -threshold) what = what " batch4 " cell(cb)
    if (what != "")
      faster = faster "  " w ":" what "\n"
  }
  if (faster == "")
    printf "no way faster than the defaults by more than %s %%\n", threshold
  else
    printf "faster than the defaults by more than %s %%:\n%s", threshold, faster
}
