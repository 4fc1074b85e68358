# One row of the GPU check's bench summary from a gpu-bench log (stdin or
# the files named), for the way named by -v way=...: the graphs'
# milliseconds (the UNet step, the TAESD encode + decode, a 4-frame stream
# batch's pass) and the frames per second one GPU could sustain at one
# step (alone, with frame-batch 2 and 4); "-" where the log has no figure.
# POSIX awk (mawk on the GPU machines).
function ms(line) {
  if (match(line, /[0-9.]+ ms  /))
    return substr(line, RSTART, RLENGTH - 4)
  return ""
}
function or_dash(v) { return v == "" ? "-" : v }
/^[^ ]+ UNet step [0-9]+x[0-9]+, graph / { u = ms($0) }
/^TAESD enc\+dec [0-9]+x[0-9]+, graph / { t = ms($0) }
/^[^ ]+ UNet pass of a 4-frame stream batch, graph / { b = ms($0) }
/^frames\/s one GPU could sustain at 1 step: .* as graphs/ {
  sub(/ as graphs.*/, ""); one = $NF
}
/^frames\/s one GPU could sustain at 1 step with frame-batch 2:/ { f2 = $12 }
/^frames\/s one GPU could sustain at 1 step with frame-batch 4:/ { f4 = $12 }
END {
  printf "%9s %9s %9s %8s %8s %8s  %s\n", or_dash(u), or_dash(t), or_dash(b),
    or_dash(one), or_dash(f2), or_dash(f4), way
}
