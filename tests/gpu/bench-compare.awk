# The GPU check's bench summary (bench-row.awk's rows) against its
# "defaults, f16" row: each f16 way's UNet step, TAESD encode + decode and
# 4-frame stream-batch pass as a change from the default's (negative:
# faster), then the ways faster than the default on one of them by more
# than $THRESHOLD per cent (-v threshold=..., default 2): the candidates
# for a default, each to be held by the device step first.
# With -v winners=FILE it also writes there the ways to run together:
# each f16 way of settings alone (`f16, NAME=VALUE ...`) that is faster
# than the defaults by more than the threshold on one figure and slower
# by more than it on none, the most time saved at one step (the UNet step
# and TAESD's encode and decode together) first, a line for each with the
# settings it adds to those before it; a way that would give a setting
# another value than a way before it is left out whole, as a way's
# figures are of all its settings.
# A "defaults again, f16" row (the defaults measured once more after the
# ways) gives each figure's drift over the run: a way must then beat the
# defaults on a figure by more than that figure's drift too (and is
# slower on it only past its drift), so that a GPU warming or clocking
# down between the runs makes no default.
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
function abs(v) { return v < 0 ? -v : v }
# A figure's threshold: the run's, or its drift where that is larger.
function bound(drift) {
  return (drift != "" && abs(drift) > threshold) ? abs(drift) : threshold
}
# Whether the way is settings alone: NAME=VALUE words after "f16, ".
function settings_only(w,   n, i, t) {
  if (w !~ /^f16, /)
    return 0
  n = split(substr(w, 6), t, " ")
  for (i = 1; i <= n; i++)
    if (t[i] !~ /^PPDIFFUSE_[A-Z0-9_]+=[^ =]+$/)
      return 0
  return n > 0
}
# The way's settings in set[] unless one of them has another value there
# already: 1 when taken, the settings it added (those not set before) in
# `added`.
function take(w,   n, i, t, name) {
  n = split(substr(w, 6), t, " ")
  for (i = 1; i <= n; i++) {
    name = t[i]
    sub(/=.*/, "", name)
    if ((name in set) && set[name] != t[i])
      return 0
  }
  added = ""
  for (i = 1; i <= n; i++) {
    name = t[i]
    sub(/=.*/, "", name)
    if (!(name in set))
      added = added (added == "" ? "" : " ") t[i]
    set[name] = t[i]
  }
  return 1
}
{ rows[NR] = $0 }
way_of($0) == "defaults, f16" { ref_u = $1; ref_t = $2; ref_b = $3 }
way_of($0) == "defaults again, f16" { again_u = $1; again_t = $2; again_b = $3 }
END {
  if (threshold == "")
    threshold = 2
  if (ref_u == "") {
    print "no \"defaults, f16\" row: nothing to compare"
    exit 0
  }
  thr_u = thr_t = thr_b = threshold
  if (again_u != "") {
    du = change(again_u, ref_u); dt = change(again_t, ref_t)
    db = change(again_b, ref_b)
    thr_u = bound(du); thr_t = bound(dt); thr_b = bound(db)
    printf "the defaults again after the ways: UNet %s, TAESD %s, batch4 %s " \
      "(a way must beat each figure by more than %.1f %%, %.1f %% and %.1f %%)\n",
      cell(du), cell(dt), cell(db), thr_u, thr_t, thr_b
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
    slower = (cu != "" && cu > thr_u) || (ct != "" && ct > thr_t) \
      || (cb != "" && cb > thr_b)
    what = ""
    if (cu != "" && cu < -thr_u) what = what " UNet " cell(cu)
    if (ct != "" && ct < -thr_t) what = what " TAESD " cell(ct)
    if (cb != "" && cb < -thr_b) what = what " batch4 " cell(cb)
    if (what != "")
      faster = faster "  " w ":" what "\n"
    if (what != "" && !slower && settings_only(w)) {
      # Its place among the winners: by the time saved at one step.
      score = (f[2] != "-" && ref_t != "-") \
        ? change(f[1] + f[2], ref_u + ref_t) : (cu != "" ? cu : cb)
      for (j = n_won; j > 0 && won_score[j] > score; j--) {
        won[j + 1] = won[j]
        won_score[j + 1] = won_score[j]
      }
      won[j + 1] = w
      won_score[j + 1] = score
      n_won++
    }
  }
  if (again_u != "")
    over = "their drift or " threshold
  else
    over = threshold
  if (faster == "")
    printf "no way faster than the defaults by more than %s %%\n", over
  else
    printf "faster than the defaults by more than %s %%:\n%s", over, faster
  if (winners == "")
    exit 0
  printf "" >winners
  together = ""
  for (j = 1; j <= n_won; j++) {
    if (take(won[j])) {
      if (added != "") {
        print added >winners
        together = together " " added
      }
    } else
      left = left "  " won[j] "\n"
  }
  close(winners)
  if (together == "")
    printf "no way of settings alone to run together\n"
  else
    printf "to run together, faster alone and slower on nothing:%s\n", together
  if (left != "")
    printf "left out, another value of a setting taken:\n%s", left
}
