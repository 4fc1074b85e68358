#!/bin/sh
# tuning.sh COMMAND [ARG...]: the timed choices kept across processes
# (PPDIFFUSE_CUDA_TUNING_CACHE, kernels/cuda/pp-cuda-tuning.h).  COMMAND
# (a test of the ops on 16-bit and float32 activations, the three timed
# ways on) runs with a fresh folder: it times every convolution, every
# convolution graph and every cuBLASLt product, and keeps each choice.
# Each kept choice is then made another the heuristics offer (the
# emulation's second algorithm, configuration or convolution algorithm):
# run again, it times nothing and takes exactly those.  Then one kept
# choice of each kind no longer fits (an algorithm cuDNN does not have, a
# configuration past the heuristics' offer, an algorithm cuBLASLt's
# heuristics do not offer) and one file is not a choice: those four, and
# only they, are timed again, each said, and rewritten, so that the next
# run times nothing.  With "off" every run times its own, and keeps none.
set -u
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
choices=$dir/choices
export PPDIFFUSE_CUDA_TUNING_CACHE="$choices" G_MESSAGES_DEBUG=all
export PPDIFFUSE_CUDA_CONV_ALGO=timed PPDIFFUSE_CUDA_CONV_API=graph
export PPDIFFUSE_CUDA_GEMM_ALGO=timed

fail () {
  echo "tuning.sh: $*" >&2
  exit 1
}

# run NAME: COMMAND into $dir/NAME.log, which must pass.
run () {
  "$@" > "$dir/$name.log" 2>&1 || {
    tail -30 "$dir/$name.log"
    fail "$name: the command failed"
  }
}

# count PATTERN NAME: lines of $dir/NAME.log that match.
count () {
  grep -Ec "$1" "$dir/$2.log"
}

trials='cuda (conv|conv graph|gemm) trials: '
kept='timed before, kept in '

name=first run "$@"
for kind in 'cuda conv trials: ' 'cuda conv graph trials: ' \
    'cuda gemm trials: '; do
  [ "$(count "$kind" first)" -gt 0 ] || fail "the first run timed no '$kind'"
done
files=$(ls "$choices" | wc -l)
for kind in conv- conv-graph- gemm-; do
  ls "$choices" | grep -q "^$kind" || fail "no $kind choice kept"
done
[ "$files" -eq "$(count "$trials" first)" ] \
  || fail "$files choices kept for $(count "$trials" first) timed"
echo "first run: $files choices timed and kept"

# Every kept choice another the heuristics offer, which the next run must
# take as it is: cuBLASLt's algorithm 1 (the emulation's algorithms are
# their index, then zeros), the configuration at index 1 (engine 1), and
# IMPLICIT_GEMM (0) with the kept math type.
n_gemm=$(ls "$choices" | grep -c '^gemm-')
n_graph=$(ls "$choices" | grep -c '^conv-graph-')
n_conv=$(ls "$choices" | grep -c '^conv-[0-9a-f]*$')
sed -i 's/^values=.*/values=1;0;0;0;0;0;0;0;/' "$choices"/gemm-*
sed -i 's/^values=\([0-9]*\);.*/values=\1;1;1;/' "$choices"/conv-graph-*
for f in $(ls "$choices" | grep '^conv-[0-9a-f]*$'); do
  sed -i 's/^values=[0-9]*;/values=0;/' "$choices/$f"
done
name=second run "$@"
[ "$(count "$trials" second)" -eq 0 ] \
  || fail "the second run timed $(count "$trials" second) choices again"
[ "$(count "$kept" second)" -eq "$files" ] \
  || fail "the second run took $(count "$kept" second) of $files choices"
[ "$(count "algorithm 1, $kept" second)" -eq "$n_gemm" ] \
  || fail "the second run took algorithm 1 for $(count "algorithm 1, $kept" second) of $n_gemm products"
[ "$(count "engine 1 \\($kept" second)" -eq "$n_graph" ] \
  || fail "the second run took engine 1 for $(count "engine 1 \\($kept" second) of $n_graph convolution graphs"
[ "$(count 'cuda conv: .*: IMPLICIT_GEMM \(timed,' second)" -eq "$n_conv" ] \
  || fail "the second run took IMPLICIT_GEMM for $(count 'cuda conv: .*: IMPLICIT_GEMM \(timed,' second) of $n_conv convolutions"
echo "second run: $files choices taken as kept, none timed"

# One of each kind made stale, and a file that is not a choice.
conv=$choices/$(ls "$choices" | grep '^conv-[0-9a-f]*$' | head -1)
graph=$choices/$(ls "$choices" | grep '^conv-graph-' | head -1)
garbage=$choices/$(ls "$choices" | grep '^conv-graph-' | sed -n 2p)
gemm=$choices/$(ls "$choices" | grep '^gemm-' | head -1)
sed -i 's/^values=[0-9]*;/values=99;/' "$conv"
sed -i 's/^values=\([0-9]*\);[0-9]*;/values=\1;57;/' "$graph"
sed -i 's/^values=.*/values=7;7;7;7;7;7;7;7;/' "$gemm"
printf '[half a choi' > "$garbage"
name=stale run "$@"
[ "$(count "$trials" stale)" -eq 4 ] \
  || fail "$(count "$trials" stale) choices timed again, not the 4 stale"
[ "$(count "$kept" stale)" -eq $((files - 4)) ] \
  || fail "$(count "$kept" stale) choices taken, not $((files - 4))"
for said in 'cuda conv: .*timed before \(not an algorithm\) does not run here now: timed again' \
    'cuda conv graph: .*gives no plan now \(.*their number 58\): timed again' \
    'cuda gemm: .*no longer among the heuristics. first [0-9]+: timed again' \
    'not a choice kept by ppdiffuse .*made again, and the file replaced'; do
  [ "$(count "$said" stale)" -eq 1 ] || fail "the stale run did not say '$said'"
done
name=after run "$@"
[ "$(count "$trials" after)" -eq 0 ] \
  || fail "the stale choices were not replaced: $(count "$trials" after) timed"
echo "stale choices: 4 timed again and replaced"

rm -rf "$choices"
export PPDIFFUSE_CUDA_TUNING_CACHE=off
name=off run "$@"
name=off2 run "$@"
[ "$(count "$trials" off2)" -eq "$files" ] && [ ! -e "$choices" ] \
  || fail "with off, $(count "$trials" off2) choices timed, or some kept"
echo "off: every run times its own"
