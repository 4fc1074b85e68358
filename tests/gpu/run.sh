#!/bin/sh
# The GPU check: the one command a GPU owner runs, from the source tree:
#
#   tests/gpu/run.sh      exit 0: every check passed; 1: a check failed (the
#                         summary lists each); 77: skipped, nvidia-smi lists
#                         no GPU (the only reason to skip)
#
# With $PP_GPU_BUILD_DIR naming a finished build (a CUDA build copied to a
# machine without meson or ninja) it runs that build
# as it is; otherwise it builds ppdiffuse with CUDA, cuDNN and NCCL in
# build-gpu ($CUDA_ROOT, default /usr/local/cuda).  Every step is bounded
# (timeout) and the run goes on past a failing check, so that one run shows
# every failure; docs/gpu.md lists the checks and their bounds.  The steps,
# by default all in this order (PP_GPU_STEPS names some, run in the order
# it names them):
#   device     the f16/bf16 conversion kernels and the CUDA backend's tests
#              on the device (a skip is a failure), every GPU running the
#              build's kernels and auto picking cuda (ppdiffuse-tool
#              devices), every op on cuda
#              against float64 (test-ops), the attentions also the ways
#              PPDIFFUSE_CUDA_ATTENTION=gemm and f32 choose, the
#              convolutions in each PPDIFFUSE_CUDA_CONV_LAYOUT and with
#              PPDIFFUSE_CUDA_CONV_EPILOGUE=pass, the group
#              norms with each PPDIFFUSE_CUDA_GROUP_NORM, every op on
#              16-bit activations and on channels-last ones
#              (test-kernels-act-dtypes), linear's and matmul's 16-bit
#              outputs also through float32 (PPDIFFUSE_CUDA_GEMM_OUT=f32);
#   f32        every tests/data fixture (the tiny UNets and TAESD, the
#              shapes 64x64, 26x46, 32x32 batch 2, TAESD at 512x512, the
#              tiny AutoencoderKL, the LoRA fuse, single-file
#              checkpoints) and the full-size
#              SD-Turbo and SD1.5 UNets and SD VAE (test-kernels-scale) on
#              cuda in f32, TF32 off, within the CPU backends' bounds; the
#              feature bank's fixtures, and the element with it through
#              meshes of 1 to 4 workers against the tool (temporal-setting);
#              the stacked QKV; the benchmark's profile windows;
#   dtypes     the tiny fixtures in f16 and bf16 (NMSE against float32), the
#              full-size UNets in f16 and bf16 against diffusers' float64
#              (cuda's defaults: 16-bit channels-last activations),
#              SD-Turbo's also with float32 activations channels first
#              ($ACT32), with the ways the defaults would take next (the
#              bench step's winners when it ran before, else
#              $CANDIDATES; the tiny turbo UNet too) and, in f16, 16-bit
#              ones channels first;
#   text       the CLIP text encoder fixtures on cuda in f32, and a text
#              prompt end to end (element, prompt=) on cuda against the CPU;
#   mesh       2 workers sharing GPU 0: each reports cuda:0 and the MPI
#              plane; frames against the CPU mesh (f32) and byte for byte
#              against ppdiffuse-tool img2img on cuda (f32, f16), with and
#              without CUDA graphs, whose counts are checked; in f16 also
#              with float32 channels-first activations ($ACT32) against the
#              tool with them, byte for byte; one worker with stream-batch
#              (two frames a pass) against img2img;
#   spread     with N >= 2 GPUs: rank 0 and N-1 workers, each on its own
#              GPU, chunks over NCCL; the same with rank 0 on the last GPU
#              (cuda-device-id), its workers on the GPUs after it; then N
#              workers (N+1 ranks on N GPUs: the MPI plane), each on the
#              GPU of its node-local rank;
#   determinism  the same UNet forward twice on cuda, f16 and f32: the same
#              bytes;
#   faults     a worker killed / hung inside a real model's CUDA work: an
#              error naming it, in bounded time;
#   startup    the element with a released-size pipeline (make-tiny --kind
#              sd-turbo) at 512x512 and the DEFAULT settings: spawn -> ready,
#              first frame, steady frame period (reported; it must start);
#              the same with $ACT32 (reported);
#              then with the ways not yet the defaults (those the bench
#              step, run before it, found faster; else $CANDIDATES),
#              then 4 steps on one worker without and with stream-batch
#              (and with it and frame-batch 2), and 1 step with
#              frame-batch 2 and 4, and frame-batch 2 with
#              max-in-flight=3 (the frame periods
#              reported); a sustained stream (1200 frames) at the
#              defaults with the GPUs' utilization sampled (nvidia-smi)
#              over its steady frames, and again with
#              PPDIFFUSE_CUDA_WAIT=sleep (each run's CPU loads, rank 0's
#              and the worker's, from the stats, and the device memory
#              each process held, from nvidia-smi); the sustained stream, the 4-step
#              stream batch and 1 step with frame-batch 2 again under
#              CUDA's multi-process service (MPS), where the driver has
#              its control program; one step with temporal=feature-bank
#              (12 frames, graphs once the bank is steady);
#   bench      gpu-bench (reported; it must run), diffusers' own UNet
#              and TAESD eager beside it ($PP_GPU_TORCH_PYTHON, default
#              python3, with torch and diffusers; skipped, saying so,
#              without them; and its error in f16 and bf16 on the
#              full-size fixtures, the basis of the dtypes step's bounds),
#              gpu-bench --kernels (each graph's kernels in one launch,
#              from a CUPTI trace; skipped, saying so, without CUPTI),
#              gpu-bench also with the choices of
#              PPDIFFUSE_CUDA_ATTENTION, PPDIFFUSE_CUDA_CONV_ALGO,
#              PPDIFFUSE_CUDA_CONV_LAYOUT, PPDIFFUSE_CUDA_CONV_EPILOGUE,
#              PPDIFFUSE_CUDA_CONV_API, PPDIFFUSE_CUDA_GEMM_ALGO,
#              PPDIFFUSE_CUDA_GROUP_NORM and
#              PPDIFFUSE_CUDA_LAYER_NORM side by side, with float32
#              activations ($ACT32) and 16-bit ones channels first, and
#              the GEMMs' outputs through float32, the defaults again
#              (the run's drift, which a way must beat too), then the ways of
#              settings faster alone and slower on nothing all together
#              (bench-compare.awk), and a latent's hop
#              between ranks with and without the doorbells
#              (ppdiffuse-bench), and the feature bank's work at
#              SD-Turbo's shapes on the device and on the host's cores
#              (bank-bench);
#   sanitizer  compute-sanitizer memcheck on test-ops and on the fixtures in
#              f32, f16 and bf16, and on the tiny turbo UNet and TAESD
#              with the ways the defaults would take next; racecheck and
#              synccheck on every op on 16-bit channels-last activations
#              (test-kernels-act-dtypes), with each norm's ways (skipped,
#              saying so, without compute-sanitizer).
# PP_GPU_BENCH_WAYS=ERE runs only the bench step's runs whose names (as
# it prints them: "gpu-bench f16", "gpu-bench f16,
# PPDIFFUSE_CUDA_CONV_API=graph", "diffusers eager (f16, bf16, f32)",
# "transport hop alone (hop-bench)", ...) it matches, the others listed
# as skipped: a machine lent for minutes measures the ways that decide.
# PP_GPU_LOGS=DIR keeps every step's log there.  PP_GPU_DEADLINE_S=N
# starts no step after N seconds: the steps left are listed as skipped and
# the summary is printed (a machine lent for a bounded time then still
# says what passed); PP_GPU_END_S=M runs no command past M seconds (one
# that would is cut short there, one with under 5 s left is listed as not
# run), so that the summary comes before a lent machine's time is up.  PP_GPU_DRY_RUN=1 runs the
# same plumbing on the CPU (cpu-strict in the place of cuda, the emulated
# NCCL plane): it checks this script, never a GPU, and exits 77 when it
# passed.  PP_GPU_EMULATED=1 runs the steps on the cuda backend itself,
# its host code over the emulated runtime, libraries and kernels
# (tests/kernels/cuda-emu's module, on the CPU): what needs a GPU (the
# device tests, the full-size models, fused attention, NCCL, timings, the
# sanitizer) is skipped, saying so; it exits 0 when it passed, and is not
# a GPU check either.
set -u
SKIP=77
T0=$(date +%s)
src=$(cd "$(dirname "$0")/../.." && pwd)
here=$src/tests/gpu
data=$src/tests/data
build=${PP_GPU_BUILD_DIR:-$src/build-gpu}
case $build in /*) ;; *) build=$PWD/$build ;; esac
cuda_root=${CUDA_ROOT:-/usr/local/cuda}
all_steps="device f32 dtypes text mesh spread determinism faults startup bench sanitizer"
steps=${PP_GPU_STEPS:-$all_steps}
dry=${PP_GPU_DRY_RUN:-}
emulated=${PP_GPU_EMULATED:-}
[ -n "$dry" ] && emulated=""
# The Python with torch (CUDA) and diffusers for the bench step's baseline,
# an env prefix allowed ("env PYTHONPATH=... python3").
torch_python=${PP_GPU_TORCH_PYTHON:-python3}

# Bounds (docs/gpu.md).  The f32 fixtures are held to the CPU backends'
# bound (tests/kernels/models/test-models.c: 5 x max(the tap's own
# float32 - float64 error, 4 ulp of max|ref|)); the text encoder to
# test-clip-text.c's; the full-size UNets' bounds per dtype are in
# tests/kernels/models/test-scale.c.
CLIP_ABS=1e-4
# NMSE of the tiny fixtures in a 16-bit dtype against the float32 reference.
NMSE_F16=1e-4
NMSE_BF16=2e-3
# Frames of the GPU mesh against the CPU mesh in f32: at most this many
# levels of 8 bits apart and this mean (weights rounded to f16 alone give
# 3 and 0.17 with these models), with at most this share of the CPU's bytes
# clamped at 0 or 255 (the decoder of make-tiny's TAESD is scaled so that
# its frames are not: gpucheck.py tame).
FRAME_LEVELS=2
FRAME_MEAN=0.05
FRAME_CLAMPED=0.02
# A killed or hung worker: the element's error within 2 x timeout-ms of the
# fault, plus the frames before it and the workers' teardown.
FAULT_TIMEOUT_MS=2000
FAULT_BOUND_S=14
# Worker spawn to ready of a released-size pipeline, weights in the page
# cache (the dry run's CPU start of a small model is far below it).
READY_S=5

say() { printf '\n== [%ss] %s\n' "$(($(date +%s) - T0))" "$*"; }
deadline=${PP_GPU_DEADLINE_S:-}
# Whether step $1 may start: not past PP_GPU_DEADLINE_S.
may_start() {
  if [ -n "$deadline" ] && [ $(($(date +%s) - T0)) -ge "$deadline" ]; then
    current=$1
    note_skip "step $1: not started, past PP_GPU_DEADLINE_S=$deadline s"
    return 1
  fi
  return 0
}
checks=0
failures=0
failed=""
skipped=""
current=setup
pass() { checks=$((checks + 1)); echo "  ok: $*"; }
bad() {
  checks=$((checks + 1))
  failures=$((failures + 1))
  failed="$failed
  [$current] $*"
  echo "  FAILED: $*"
}
note_skip() { skipped="$skipped
  [$current] $*"; echo "  skipped: $*"; }
indent() { sed 's/^/    /'; }

# What a status means.
status_text() {
  case $1 in
    124 | 137) echo "timed out after $2 s" ;;
    77) echo "exit 77 (skipped: no usable device) although nvidia-smi lists $n_gpus GPU(s)" ;;
    1[2-9][0-9]) echo "exit status $1 (signal $(($1 - 128)))" ;;
    *) echo "exit status $1" ;;
  esac
}

# PP_GPU_END_S: no command runs past that many seconds from the start; one
# that would is cut short there, and one with less than END_MARGIN_S left
# is not started (status NOT_RUN): so that the run ends, printing its
# summary, before the time a lent machine gives it.
end_s=${PP_GPU_END_S:-}
END_MARGIN_S=5
NOT_RUN=75
cut_short=""
# The name runs gives the command exec_to runs next (for the durations).
exec_name=""

# exec_to LOG LIMIT CMD...: CMD under timeout, all its output in LOG; sets
# st to its status.
exec_to() {
  _log=$1 _limit=$2
  shift 2
  st=0
  cut_short=""
  if [ -n "$end_s" ]; then
    _left=$((end_s - ($(date +%s) - T0)))
    if [ "$_left" -lt "$END_MARGIN_S" ]; then
      echo "not run: past PP_GPU_END_S=$end_s s" >"$_log"
      st=$NOT_RUN
      return "$st"
    fi
    if [ "$_left" -lt "$_limit" ]; then
      _limit=$_left
      cut_short=1
    fi
  fi
  _t0=$(date +%s)
  timeout -k 10 "$_limit" "$@" >"$_log" 2>&1 || st=$?
  # What each command took, by its log, for the summary: where the next
  # run's minutes go.
  printf '%s\t%s\t%s\n' "$(($(date +%s) - _t0))" "$current" \
    "${exec_name:-$(basename "$_log" .log)}" | cut -c1-160 >>"$work/durations"
  exec_name=""
  [ -n "${PP_GPU_LOGS:-}" ] && cp "$_log" "$PP_GPU_LOGS/$(basename "$_log")" 2>/dev/null
  return "$st"
}

# runs NAME LOG LIMIT CMD...: as exec_to; a failure is counted, named and
# its log's tail shown; returns the status.
runs() {
  _name=$1
  shift
  exec_name=$_name
  if exec_to "$@"; then
    return 0
  fi
  if [ "$st" = "$NOT_RUN" ]; then
    note_skip "$_name: not run, past PP_GPU_END_S=$end_s s"
    return 1
  fi
  if [ -n "$cut_short" ] && { [ "$st" = 124 ] || [ "$st" = 137 ]; }; then
    bad "$_name: cut short at PP_GPU_END_S=$end_s s"
  else
    bad "$_name: $(status_text "$st" "$2")"
  fi
  { grep -m 3 -E '^ERROR|ERROR:|ERROR \*\*|Bail out|^not ok|[Ee]rror: ' "$1"
    tail -n 4 "$1"; } | cut -c1-400 | indent
  return 1
}

# judge NAME CMD...: a comparison printing its figures (gpucheck.py,
# npy-compare, a test printing its bound): 0 passes.
judge() {
  _name=$1
  shift
  st=0
  timeout -k 10 300 "$@" >"$work/judge.txt" 2>&1 || st=$?
  indent <"$work/judge.txt"
  case $st in
    0) pass "$_name" ;;
    1) bad "$_name: not met (figures above)" ;;
    *) bad "$_name: could not compare ($(status_text "$st" 300))" ;;
  esac
}

gc=$here/gpucheck.py

# ---- is there a GPU --------------------------------------------------------

if [ -n "$dry" ]; then
  BE=cpu-strict
  n_gpus=2
  echo "tests/gpu/run.sh: DRY RUN on the CPU ($BE in the place of cuda):"
  echo "it checks this script's plumbing, not a GPU"
elif [ -n "$emulated" ]; then
  BE=cuda
  n_gpus=1
  echo "tests/gpu/run.sh: EMULATED on the CPU (the cuda backend's host code over"
  echo "the emulated runtime, libraries and kernels): not a GPU check"
else
  BE=cuda
  gpus=$(timeout -k 5 60 nvidia-smi -L 2>/dev/null | grep '^GPU ')
  if [ -z "$gpus" ]; then
    echo "tests/gpu/run.sh: skipped: no NVIDIA GPU here (nvidia-smi lists none)"
    exit "$SKIP"
  fi
  echo "$gpus"
  n_gpus=$(echo "$gpus" | grep -c '^GPU ')
  # The devices CUDA will show the processes.
  if [ -n "${CUDA_VISIBLE_DEVICES:-}" ]; then
    visible=$(echo "$CUDA_VISIBLE_DEVICES" | tr ',' '\n' | grep -c .)
    [ "$visible" -lt "$n_gpus" ] && n_gpus=$visible
  fi
fi

work=$(mktemp -d)
[ -n "${PP_GPU_LOGS:-}" ] && mkdir -p "$PP_GPU_LOGS"

# CUDA's multi-process service for the startup step's runs under it: its
# daemon, its pipes and logs in $work.  mps_start returns 1, saying why,
# where the driver has no control program or the daemon does not start.
mps_dir=$work/mps
mps_up=""
mps_start() {
  _ctl=$(command -v nvidia-cuda-mps-control 2>/dev/null)
  if [ -z "$_ctl" ]; then
    note_skip "runs under MPS (no nvidia-cuda-mps-control here)"
    return 1
  fi
  mkdir -p "$mps_dir/pipe" "$mps_dir/log"
  if ! CUDA_MPS_PIPE_DIRECTORY=$mps_dir/pipe \
      CUDA_MPS_LOG_DIRECTORY=$mps_dir/log timeout 30 "$_ctl" -d; then
    note_skip "runs under MPS (nvidia-cuda-mps-control -d failed)"
    return 1
  fi
  mps_up=$_ctl
  echo "    MPS daemon started ($_ctl)"
}
# Asks the daemon to quit and waits (30 s at most) until it has.
mps_stop() {
  [ -n "$mps_up" ] || return 0
  echo quit | CUDA_MPS_PIPE_DIRECTORY=$mps_dir/pipe timeout 10 "$mps_up" \
    >/dev/null 2>&1
  _i=0
  while [ "$_i" -lt 30 ] && pgrep -x nvidia-cuda-mps >/dev/null 2>&1; do
    sleep 1
    _i=$((_i + 1))
  done
  tail -n 3 "$mps_dir/log/control.log" 2>/dev/null | cut -c1-300 | indent
  mps_up=""
}
# gpu_samples_start CSV: every GPU's utilization (the share of time a
# kernel ran), SM clock and power, from nvidia-smi every 100 ms, into CSV
# until gpu_samples_stop (CSV stays empty without nvidia-smi: the dry run).
# Beside them, every 500 ms, the device memory each process on a GPU
# holds (its context's included), into CSV.apps (gpu_apps_summary).
gpu_sampler=""
gpu_apps_sampler=""
gpu_samples_start() {
  : >"$1"
  : >"$1.apps"
  { [ -z "$dry" ] && command -v nvidia-smi >/dev/null 2>&1; } || return 0
  nvidia-smi --query-gpu=timestamp,index,utilization.gpu,clocks.sm,power.draw \
    --format=csv,noheader,nounits -lms 100 >"$1" 2>/dev/null &
  gpu_sampler=$!
  nvidia-smi --query-compute-apps=pid,process_name,used_memory \
    --format=csv,noheader,nounits -lms 500 >"$1.apps" 2>/dev/null &
  gpu_apps_sampler=$!
}
gpu_samples_stop() {
  # SIGKILL: their lines are written as taken, and a sampler stuck in the
  # driver must not keep the wait below (and the check) from ending.
  for _s in $gpu_sampler $gpu_apps_sampler; do
    kill -9 "$_s" 2>/dev/null
    wait "$_s" 2>/dev/null
  done
  gpu_sampler=""
  gpu_apps_sampler=""
}
# gpu_apps_summary CSV: the most device memory each process held while
# sampled (gpu_samples_start's CSV.apps), a line; nothing without samples.
gpu_apps_summary() {
  [ -s "$1.apps" ] || return 0
  awk -F', *' 'NF >= 3 && $3 + 0 > 0 {
      n = split($2, part, "/"); name = part[n] " (pid " $1 ")"
      if ($3 + 0 > most[name]) most[name] = $3 + 0
    }
    END {
      line = ""
      for (name in most) line = line (line == "" ? "" : ", ") name " " most[name] " MiB"
      if (line != "") print "device memory, the most each process held (nvidia-smi): " line
    }' "$1.apps"
}
trap 'gpu_samples_stop; mps_stop; rm -rf "$work"' EXIT

finish() {
  say "summary"
  [ -n "$skipped" ] && printf 'skipped:%s\n' "$skipped"
  # Each step's seconds in its commands, and the slowest commands: what
  # to leave out of a run that must fit a lent machine's minutes.
  if [ -s "$work/durations" ]; then
    awk -F '\t' '{ step[$2] += $1; if (!($2 in seen)) { seen[$2] = 1; order[++n] = $2 } }
      END { line = ""
        for (i = 1; i <= n; i++) line = line (i > 1 ? ", " : "") order[i] " " step[order[i]] " s"
        print "seconds in commands, by step: " line }' "$work/durations"
    echo "the slowest commands:"
    sort -t "$(printf '\t')" -k1,1nr "$work/durations" | head -n 10 \
      | awk -F '\t' '{ printf "  %4d s  [%s] %s\n", $1, $2, $3 }'
  fi
  if [ "$failures" -gt 0 ]; then
    printf 'tests/gpu/run.sh: FAILED: %d of %d checks failed (%s, %s GPU(s), %ss):%s\n' \
      "$failures" "$checks" "$BE" "$n_gpus" "$(($(date +%s) - T0))" "$failed"
    exit 1
  fi
  if [ "$checks" -eq 0 ]; then
    echo "tests/gpu/run.sh: FAILED: no check ran (PP_GPU_STEPS: $steps)"
    exit 1
  fi
  if [ -n "$dry" ]; then
    echo "tests/gpu/run.sh: dry run passed ($checks checks on the CPU): not a GPU check"
    exit "$SKIP"
  fi
  if [ -n "$emulated" ]; then
    echo "tests/gpu/run.sh: emulated run passed ($checks checks, the cuda backend on the CPU in $(($(date +%s) - T0)) s): not a GPU check"
    exit 0
  fi
  echo "tests/gpu/run.sh: passed: $checks checks on $n_gpus GPU(s) in $(($(date +%s) - T0)) s"
  exit 0
}

# ---- the build -------------------------------------------------------------

current=build
tool=$build/tools/ppdiffuse-tool
if [ -n "${PP_GPU_BUILD_DIR:-}" ] && [ -x "$tool" ]; then
  say "build: the pre-built $build (no meson, no ninja)"
else
  say "build with CUDA, cuDNN and NCCL ($cuda_root) in $build"
  if ! command -v meson >/dev/null 2>&1 || ! command -v ninja >/dev/null 2>&1; then
    bad "no meson and ninja to build $build (set PP_GPU_BUILD_DIR to a finished build)"
    finish
  fi
  if [ ! -f "$build/build.ninja" ]; then
    runs "meson setup" "$work/setup.log" 900 meson setup "$build" "$src" \
      -Dtests=enabled -Dcuda=enabled -Dcudnn=enabled -Dnccl=enabled \
      -Dcuda-root="$cuda_root" || finish
  fi
  runs "ninja" "$work/ninja.log" 3600 ninja -C "$build" || finish
fi
module=$build/kernels/libppdiffuse-cuda.so
[ -n "$emulated" ] && module=$build/tests/kernels/cuda-emu/libppdiffuse-cuda-emu.so
if [ -z "$dry" ] && [ ! -f "$module" ]; then
  bad "$build has no CUDA backend ($module): configure with -Dcuda=enabled"
  finish
fi

# The build's own plugin, worker and CUDA module; nothing from the caller's
# environment loosens or redirects a check.
export GST_PLUGIN_PATH_1_0="$build/gst/ppdiffuse"
export PPDIFFUSE_WORKER="$build/mpi-helper/ppdiffuse-worker"
[ -f "$module" ] && export PPDIFFUSE_CUDA_MODULE="$module"
unset PP_TEST_HAVE_GPU PPDIFFUSE_BACKEND PPDIFFUSE_DATA_PLANE PPDIFFUSE_FAULT \
  PPDIFFUSE_NO_KV_CACHE PPDIFFUSE_DEBUG GST_DEBUG
# Float32 stays float32 (no TensorFloat-32) in every f32 check.
export PPDIFFUSE_CUDA_TF32=0
# The timed ways' choices kept for this run alone (pp-cuda-tuning.h): a
# later command with a timed way takes what an earlier one timed (the
# element, the tool and gpu-bench agree, a way's row and the ways
# together), and nothing timed before the run is taken.  With
# PP_GPU_LOGS they come back with the logs, the shapes in words.
export PPDIFFUSE_CUDA_TUNING_CACHE="${PP_GPU_LOGS:-$work}/cuda-tuning"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# (No OMPI_MCA_mpi_yield_when_idle: with it Open MPI can spin for good
# after a worker's death, docs/architecture.md.)
export OMPI_MCA_rmaps_base_oversubscribe=1
command -v ssh >/dev/null 2>&1 \
  || export OMPI_MCA_plm_rsh_agent="${OMPI_MCA_plm_rsh_agent:-/bin/false}"
export GST_DEBUG_NO_COLOR=1
compare=$build/tests/check/npy-compare
scale=$build/tests/kernels/models/test-kernels-scale
# The device of a rank of node-local rank R among G GPUs (pp-backend.h).
device_of() { [ -n "$dry" ] || echo "cuda:$(($1 % $2))"; }

# ---- device ----------------------------------------------------------------

# ops_way SETTING OP: test-ops --op OP on $BE with PPDIFFUSE_CUDA_SETTING
# (NAME=VALUE), one of the backend's other ways; its log, with info
# messages (what a way took or refused), in $work/ops-OP-VALUE.log.
ops_way() {
  if runs "test-ops --op $2, PPDIFFUSE_CUDA_$1" "$work/ops-$2-${1#*=}.log" \
      300 env "PPDIFFUSE_CUDA_$1" G_MESSAGES_DEBUG=all "$tool" test-ops \
      --backend "$BE" --op "$2"; then
    pass "test-ops --op $2, PPDIFFUSE_CUDA_$1"
  fi
}

step_device() {
  current=device
  say "device: the CUDA backend's tests on the device, every op on $BE against float64"
  if [ -n "$dry$emulated" ]; then
    note_skip "the CUDA backend's device tests (no device)"
  else
    found=""
    for exe in "$build"/tests/kernels/cuda/test-kernels-cuda-*; do
      if [ ! -f "$exe" ] || [ ! -x "$exe" ]; then continue; fi
      found=1
      t=${exe##*/}
      if runs "$t" "$work/$t.log" 300 "$exe"; then
        if grep -q '# SKIP' "$work/$t.log"; then
          bad "$t skipped a device test: $(grep '# SKIP' "$work/$t.log" | head -n 1)"
        else
          pass "$t: $(grep -c '^ok ' "$work/$t.log") tests passed, none skipped"
        fi
      fi
    done
    [ -n "$found" ] || bad "no tests/kernels/cuda/test-kernels-cuda-* in $build"
    # What the build runs on here: every GPU the process sees runs its
    # kernels (the backend's check of the device code against the GPU,
    # and the driver loading one), and auto picks cuda.
    if runs "ppdiffuse-tool devices" "$work/devices.log" 60 "$tool" devices
    then
      cut -c1-300 "$work/devices.log" | indent
      if grep -q ': cannot be used: ' "$work/devices.log" \
          || ! grep -q '^auto: cuda ' "$work/devices.log"; then
        bad "ppdiffuse-tool devices: a GPU is not used (above)"
      else
        pass "ppdiffuse-tool devices: $(grep -c ': runs this build.s kernels$' \
          "$work/devices.log") GPU(s) run this build's kernels, auto picks cuda"
      fi
    fi
  fi
  # Every op on 16-bit activations: the float32 op's bits, rounded.
  acts=$build/tests/kernels/ops/test-kernels-act-dtypes
  if runs "act-dtypes" "$work/act-dtypes.log" 300 \
      env PPDIFFUSE_BACKEND="$BE" "$acts"; then
    if grep -q '# SKIP' "$work/act-dtypes.log"; then
      bad "test-kernels-act-dtypes skipped: $(grep '# SKIP' "$work/act-dtypes.log" | head -n 1)"
    else
      pass "test-kernels-act-dtypes: $(grep -c '^ok ' "$work/act-dtypes.log") ops' cases on 16-bit and channels-last activations"
    fi
    # The linears cuBLASLt did not take ran through float32, which is
    # right too: the aligned case (16 -> 8, a bias on 256 bytes) must be
    # taken, or the cuBLASLt way went untested.
    grep 'cuBLASLt' "$work/act-dtypes.log" | sort | uniq -c | cut -c1-300 \
      | indent
    if grep 'cuBLASLt' "$work/act-dtypes.log" | grep -q '16 → 8'; then
      bad "act-dtypes: cuBLASLt did not take the aligned linear (16 → 8): its way is untested"
    fi
  fi
  # The group norm's other ways: one block per group, whose channels-last
  # views are copied channels first, channels last a thread a channel
  # (split, the vector way's kernels before it), channels last eight
  # channels a thread in three launches (vector) and in two (ticket: one
  # pass of sums, combined by a sample's last tile), and the ticket way's
  # sums in one cooperative launch whose tiles wait for each other (grid);
  # in place and shifted too.
  for gn in whole split vector ticket grid; do
    if runs "act-dtypes, group norm $gn" "$work/act-dtypes.log" 120 \
        env PPDIFFUSE_BACKEND="$BE" PPDIFFUSE_CUDA_GROUP_NORM=$gn "$acts" \
        -p /kernels/act-dtypes/group_norm+silu \
        -p /kernels/act-dtypes/group_norm/in-place \
        -p /kernels/act-dtypes/group_norm/shifted \
        -p /kernels/act-dtypes/group_norm/shifted-in-place \
        -p /kernels/act-dtypes/group_norm/16-channels \
        -p /kernels/act-dtypes/group_norm/16-channels-in-place; then
      pass "test-kernels-act-dtypes: group norms with PPDIFFUSE_CUDA_GROUP_NORM=$gn"
    fi
  done
  # Programmatic dependent launches: each kernel of the backend may start
  # while the one before it still runs, and must wait for it before it
  # touches memory.  Every op on 16-bit activations, bit for bit against
  # the float32 kernels rounded: a kernel that read early would differ.
  if runs "act-dtypes, programmatic dependent launches" \
      "$work/act-dtypes-pdl.log" 300 \
      env PPDIFFUSE_BACKEND="$BE" PPDIFFUSE_CUDA_PDL=on "$acts"; then
    pass "test-kernels-act-dtypes with PPDIFFUSE_CUDA_PDL=on"
  fi
  # Linear's and matmul's 16-bit outputs through float32 (linear's bias by
  # a kernel, then narrowed): the float32 kernel's bits, rounded, where the
  # default (cuBLAS writing 16 bits itself) may be one unit in the last
  # place apart.
  if runs "act-dtypes, 16-bit GEMM outputs through float32" \
      "$work/act-dtypes.log" 120 \
      env PPDIFFUSE_BACKEND="$BE" PPDIFFUSE_CUDA_GEMM_OUT=f32 "$acts" \
      -p /kernels/act-dtypes/linear -p /kernels/act-dtypes/matmul/strided; then
    pass "test-kernels-act-dtypes: linear and matmul with PPDIFFUSE_CUDA_GEMM_OUT=f32"
  fi
  # With info messages: which attention shapes cuDNN's fused kernel did
  # not take (they ran as 16-bit GEMMs), and its plans that were slow to
  # make.
  if runs "test-ops --backend $BE" "$work/ops.log" 600 \
      env G_MESSAGES_DEBUG=all "$tool" test-ops --backend "$BE"; then
    grep -v ' ok$' "$work/ops.log" | grep -v 'INFO' | tail -n 3 | cut -c1-300 | indent
    pass "test-ops --backend $BE"
  fi
  grep -E 'cuda attention:' "$work/ops.log" | sed 's/.*cuda attention:/cuda attention:/' \
    | sort | uniq | cut -c1-300 | indent
  # The UNets' head sizes (SD1.5's 40 and 160, SD2's 64) must take cuDNN's
  # fused kernel: where they do not (NVRTC not found, no engine), every
  # check still passes on the 16-bit GEMMs and the fused way goes untested.
  if [ -z "$emulated" ] && grep -E 'cuda attention:.* heads of (40|64|160)[,)].*unsupported' \
      "$work/ops.log" >/dev/null; then
    bad "cuDNN's fused attention did not take a UNet head size (40, 64, 160): the lines above say why"
  fi
  # The group norms one block per group (the first way), and channels
  # last a thread a channel (split).
  for gn in whole split; do
    ops_way GROUP_NORM=$gn group_norm
  done
  # The layer norms a block per row (the first way), a warp per row
  # (warp) and a thread per eight values, several rows a block (octet), on
  # test-ops and on 16-bit activations.
  for ln in block warp octet width; do
    ops_way LAYER_NORM=$ln layer_norm
  done
  for ln in warp octet width; do
    if runs "act-dtypes, layer norm $ln" "$work/act-dtypes.log" 120 \
        env PPDIFFUSE_BACKEND="$BE" PPDIFFUSE_CUDA_LAYER_NORM=$ln "$acts" \
        -p /kernels/act-dtypes/layer_norm \
        -p /kernels/act-dtypes/layer_norm/in-place; then
      pass "test-kernels-act-dtypes: layer norms with PPDIFFUSE_CUDA_LAYER_NORM=$ln"
    fi
  done
  # The convolutions in each layout: every 16-bit case channels-first,
  # then every channel-aligned one channels-last, then every one
  # channels-last, the others' channels padded with zeros (and on 16-bit
  # and channels-last activations the float32 run's bits rounded, as
  # graphs too).
  for layout in nchw nhwc padded; do
    ops_way CONV_LAYOUT=$layout conv2d
  done
  for api in legacy graph; do
    if runs "act-dtypes, padded convolutions, $api API" \
        "$work/act-dtypes-padded-$api.log" 120 env PPDIFFUSE_BACKEND="$BE" \
        PPDIFFUSE_CUDA_CONV_LAYOUT=padded PPDIFFUSE_CUDA_CONV_API=$api \
        "$acts" -p /kernels/act-dtypes/conv2d; then
      pass "test-kernels-act-dtypes: conv2d with PPDIFFUSE_CUDA_CONV_LAYOUT=padded, $api API"
    fi
  done
  # Their bias, residual and ReLU in cuDNN's fused call (the default):
  # every case against float64, and on 16-bit and channels-last
  # activations the float32 run's bits rounded.  cuDNN must have taken
  # some (its info lines), or the way went untested; what it refused is
  # listed.  And the way before it, a pass of the backend's own after
  # cuDNN wrote y.
  ops_way CONV_EPILOGUE=fused conv2d
  ops_way CONV_EPILOGUE=pass conv2d
  if runs "act-dtypes, fused convolution epilogues" \
      "$work/act-dtypes-fused.log" 120 env PPDIFFUSE_BACKEND="$BE" \
      PPDIFFUSE_CUDA_CONV_EPILOGUE=fused G_MESSAGES_DEBUG=all "$acts"; then
    pass "test-kernels-act-dtypes with PPDIFFUSE_CUDA_CONV_EPILOGUE=fused"
  fi
  fused_logs="$work/ops-conv2d-fused.log $work/act-dtypes-fused.log"
  # shellcheck disable=SC2086  # two paths
  cat $fused_logs 2>/dev/null | grep -E 'cuDNN refused its fused' \
    | sed 's/.*cuDNN refused/cuDNN refused/' | sort | uniq | cut -c1-300 \
    | indent
  # shellcheck disable=SC2086
  n_fused=$(cat $fused_logs 2>/dev/null | grep -c 'cuda conv fused:' || true)
  echo "cuDNN's fused epilogue taken by $n_fused convolution plans" | indent
  if [ -n "$dry" ]; then
    note_skip "cuDNN's fused convolution epilogues ($BE has no cuDNN)"
  elif [ "${n_fused:-0}" -eq 0 ]; then
    bad "cuDNN ran no fused convolution epilogue: PPDIFFUSE_CUDA_CONV_EPILOGUE=fused went untested"
  fi
  # The 16-bit channels-last convolutions and their epilogues as cuDNN
  # operation graphs (the backend API): every case against float64, and
  # on 16-bit channels-last activations the float32 run's bits rounded.
  # cuDNN must have planned some, or the way went untested; the graphs it
  # had no engine for (they ran the legacy way) are listed.
  ops_way CONV_API=graph conv2d
  if runs "act-dtypes, convolution graphs" "$work/act-dtypes-graph.log" \
      120 env PPDIFFUSE_BACKEND="$BE" PPDIFFUSE_CUDA_CONV_API=graph \
      G_MESSAGES_DEBUG=all "$acts"; then
    pass "test-kernels-act-dtypes with PPDIFFUSE_CUDA_CONV_API=graph"
  fi
  # The 16-bit channels-last convolutions of few output pixels as im2col
  # and a cuBLASLt product (PPDIFFUSE_CUDA_CONV_GEMM; here every case's):
  # on 16-bit channels-last activations within a unit of the float32
  # run's bits (a sum into a residual, of a partial sum's rounding).
  if runs "act-dtypes, convolutions as products" \
      "$work/act-dtypes-conv-gemm.log" 120 env PPDIFFUSE_BACKEND="$BE" \
      PPDIFFUSE_CUDA_CONV_GEMM=1024 "$acts" \
      -p /kernels/act-dtypes/conv2d; then
    pass "test-kernels-act-dtypes: conv2d with PPDIFFUSE_CUDA_CONV_GEMM=1024"
  fi
  # cuBLASLt's algorithms timed: the products on 16-bit activations, a
  # sum into y among them, whose trials must leave y as it is (timed
  # here, whatever an earlier command of the run kept).
  if runs "act-dtypes, cuBLASLt's algorithms timed" \
      "$work/act-dtypes-gemm-timed.log" 120 env PPDIFFUSE_BACKEND="$BE" \
      PPDIFFUSE_CUDA_GEMM_ALGO=timed PPDIFFUSE_CUDA_TUNING_CACHE=off \
      G_MESSAGES_DEBUG=all "$acts" \
      -p /kernels/act-dtypes/linear -p /kernels/act-dtypes/linear_add; then
    grep -E 'cuda gemm trials' "$work/act-dtypes-gemm-timed.log" \
      | sed 's/.*cuda gemm trials/cuda gemm trials/' | cut -c1-400 | indent
    pass "test-kernels-act-dtypes: linear and linear_add with PPDIFFUSE_CUDA_GEMM_ALGO=timed"
  fi
  graph_logs="$work/ops-conv2d-graph.log $work/act-dtypes-graph.log"
  # shellcheck disable=SC2086  # two paths
  cat $graph_logs 2>/dev/null | grep -E 'cuda conv graph: .*unsupported' \
    | sed 's/.*cuda conv graph:/cuda conv graph:/' | sort | uniq \
    | cut -c1-400 | indent
  # shellcheck disable=SC2086
  n_graph=$(cat $graph_logs 2>/dev/null \
    | grep -c -E 'cuda conv graph: .*: engine -?[0-9]+ ' || true)
  echo "cuDNN's operation graphs planned for $n_graph convolutions" | indent
  if [ -n "$dry" ]; then
    note_skip "cuDNN's convolution graphs ($BE has no cuDNN)"
  elif [ "${n_graph:-0}" -eq 0 ]; then
    bad "cuDNN planned no convolution graph: PPDIFFUSE_CUDA_CONV_API=graph went untested"
  fi
  # The attentions' other ways on the device: 16-bit GEMMs (where the
  # fused kernel would run) and float32 whatever the dtype.
  for way in gemm f32; do
    for op in attention attention_causal; do
      ops_way ATTENTION=$way $op
    done
  done
  # The timed ways' kept choices (PPDIFFUSE_CUDA_TUNING_CACHE): the tiny
  # turbo UNet in f16 with every timed way, twice on a folder of its own.
  # The first run times its shapes and keeps each choice; the second
  # takes them all, times nothing, and gives the first run's bytes.
  if [ -n "$dry" ]; then
    note_skip "the timed ways' kept choices ($BE times nothing)"
  else
    kept=$work/kept-choices
    rm -rf "$kept"
    m=$data/unet-turbo-tiny
    for i in 1 2; do
      unet_case "$work/kept$i.npy" f16 "$m" "$m" "$BE" \
        PPDIFFUSE_CUDA_CONV_API=graph PPDIFFUSE_CUDA_CONV_ALGO=timed \
        PPDIFFUSE_CUDA_GEMM_ALGO=timed PPDIFFUSE_CUDA_TUNING_CACHE="$kept" \
        G_MESSAGES_DEBUG=all && cp "$work/tool.log" "$work/kept$i.log"
    done
    if [ -f "$work/kept1.log" ] && [ -f "$work/kept2.log" ]; then
      timed1=$(grep -c -E 'cuda (conv|conv graph|gemm) trials: ' "$work/kept1.log")
      timed2=$(grep -c -E 'cuda (conv|conv graph|gemm) trials: ' "$work/kept2.log")
      taken=$(grep -c 'timed before, kept in ' "$work/kept2.log")
      echo "kept choices: the first run timed $timed1, the second timed $timed2 and took $taken" | indent
      if [ "$timed1" -gt 0 ] && [ "$timed2" -eq 0 ] && [ "$taken" -eq "$timed1" ] \
          && cmp -s "$work/kept1.npy" "$work/kept2.npy"; then
        pass "timed ways' kept choices: a second run takes all $taken and gives the first run's bytes"
      else
        bad "timed ways' kept choices: the first run timed $timed1, the second timed $timed2 and took $taken; outputs $(cmp -s "$work/kept1.npy" "$work/kept2.npy" && echo equal || echo different)"
      fi
    fi
  fi
}

# ---- f32 -------------------------------------------------------------------

# unet_case OUT DTYPE MODEL INPUTS BACKEND [NAME=VALUE ...]: ppdiffuse-tool
# unet on BACKEND, with those settings.
unet_case() {
  _o=$1 _d=$2 _m=$3 _i=$4 _b=$5
  shift 5
  runs "unet $_m on $_b $_d${1:+, with $*}" "$work/tool.log" 300 \
    env "$@" "$tool" unet --backend "$_b" --dtype "$_d" --model "$_m" \
    --sample "$_i/sample.npy" --timestep "$(cat "$_i/timestep.txt")" \
    --encoder-hidden-states "$_i/encoder_hidden_states.npy" --out "$_o"
}

step_f32() {
  current=f32
  say "f32: every fixture on $BE in f32 (TF32 off) within the CPU backends' bounds"
  for fam in sd15 turbo; do
    m=$data/unet-$fam-tiny
    unet_case "$work/u.npy" f32 "$m" "$m" "$BE" \
      && judge "unet-$fam-tiny 6x10 b2" python3 "$gc" npy "unet-$fam-tiny 6x10 b2" \
        "$work/u.npy" "$m/out.npy" --tap "$data/shapes/unet-$fam-tiny/6x10-b2/f32-f64.txt" out
    for sz in 64x64 26x46 32x32-b2; do
      s=$data/shapes/unet-$fam-tiny/$sz
      unet_case "$work/u.npy" f32 "$m" "$s" "$BE" \
        && judge "unet-$fam-tiny $sz" python3 "$gc" npy "unet-$fam-tiny $sz" \
          "$work/u.npy" "$s/tap-out.npy" --tap "$s/f32-f64.txt" out
    done
  done
  v=$data/taesd-tiny
  s=$data/shapes/taesd-tiny
  runs "taesd encode" "$work/tool.log" 300 "$tool" vae-encode --backend "$BE" \
    --dtype f32 --model "$v" --image "$v/image.npy" --out "$work/z.npy" \
    && judge "taesd-tiny encode 24x40" python3 "$gc" npy "taesd-tiny encode 24x40" \
      "$work/z.npy" "$v/latents.npy" --tap "$s/24x40/f32-f64.txt" latents
  runs "taesd decode" "$work/tool.log" 300 "$tool" vae-decode --backend "$BE" \
    --dtype f32 --model "$v" --latents "$v/latents.npy" --out "$work/x.npy" \
    && judge "taesd-tiny decode 24x40" python3 "$gc" npy "taesd-tiny decode 24x40" \
      "$work/x.npy" "$v/decoded.npy" --tap "$s/24x40/f32-f64.txt" image
  runs "the 512x512 pattern image" "$work/pattern.log" 120 \
      python3 "$gc" pattern "$work/pattern.npy" "$s/512x512/image.sha256" \
    && runs "taesd encode 512" "$work/tool.log" 300 "$tool" vae-encode \
      --backend "$BE" --dtype f32 --model "$v" --image "$work/pattern.npy" \
      --out "$work/z.npy" \
    && judge "taesd-tiny encode 512x512" python3 "$gc" npy "taesd-tiny encode 512x512" \
      "$work/z.npy" "$s/512x512/tap-latents.npy" --tap "$s/512x512/f32-f64.txt" latents
  runs "taesd decode 512" "$work/tool.log" 300 "$tool" vae-decode --backend "$BE" \
    --dtype f32 --model "$v" --latents "$s/512x512/decode-latents.npy" \
    --out "$work/x.npy" \
    && judge "taesd-tiny decode 512x512" python3 "$gc" npy "taesd-tiny decode 512x512" \
      "$work/x.npy" "$s/512x512/tap-image.npy" --tap "$s/512x512/f32-f64.txt" image
  # The AutoencoderKL, the LoRA fuse, single-file checkpoints and the
  # temporal feature bank on the device: every tap of the tiny
  # AutoencoderKL, the fused UNet's output (f32 weights), a checkpoint's
  # parts built into models there, every frame of the banked sequences.
  for t in vae-kl lora checkpoint feature-bank; do
    exe=$build/tests/kernels/models/test-kernels-$t
    if runs "test-kernels-$t on $BE" "$work/$t.log" 300 \
        env PPDIFFUSE_BACKEND="$BE" "$exe" "$data"; then
      grep -E 'latents:|image:|fused UNet out:|rows fused' "$work/$t.log" \
        | indent
      pass "test-kernels-$t on $BE: $(grep -c '^ok ' "$work/$t.log") tests"
    fi
  done
  # The feature bank through the element on cuda: meshes of 1 to 4
  # workers, every frame the tool's (without graphs).  Three bank frames
  # and eight frames: each worker's slice waits for its banks to be
  # steady (their first merge, frame 3), runs once as is (frame 4), is
  # captured (frame 5) and launched twice, as each worker's log says
  # (on cuda, where graphs are on without being asked for).
  graphs_log=
  [ "$BE" != cuda ] || graphs_log='step graphs: 1 captured, 3 launched$'
  if runs "temporal=feature-bank through the mesh on $BE" \
      "$work/temporal.log" 300 env PPDIFFUSE_BACKEND="$BE" \
      PP_TEST_FRAMES=8 PP_TEST_BANK_FRAMES=3 PPDIFFUSE_DEBUG=3 \
      PP_TEST_EXPECT_LOG="$graphs_log" \
      sh "$src/tests/check/temporal-setting.sh" "$tool"; then
    grep -E 'workers, [0-9]+ steps:' "$work/temporal.log" | indent
    pass "temporal=feature-bank through meshes of 1 to 4 workers on $BE"
  fi
  # Self-attention's q, k and v as one stacked product on cuda (every
  # self-attention of the tiny UNet), and the resnets' time projections
  # as one for a sample, the same output as the separate products; the
  # fixtures above hold its numbers.
  if runs "stacked QKV and time projections on $BE" "$work/qkv.log" 120 \
      env PPDIFFUSE_BACKEND="$BE" \
      "$build/tests/kernels/models/test-kernels-models" \
      -p /models/unet/stacked --verbose "$data"; then
    grep 'projections stacked' "$work/qkv.log" | indent
    if [ "$(grep -c '^ok ' "$work/qkv.log")" -ne 2 ]; then
      bad "stacked QKV and time projections: expected 2 tests to pass"
    else
      pass "self-attention's q, k and v and the time projections as one product each on $BE"
    fi
  fi
  # The benchmark's profile in windows, each queued behind a hold of the
  # stream: every op call counted once, the output unchanged.
  if runs "profile windows on $BE" "$work/windows.log" 300 \
      env PPDIFFUSE_BACKEND="$BE" \
      "$build/tests/kernels/models/test-kernels-models" \
      -p /models/unet/profile-windows --verbose "$data"; then
    grep 'profiled in' "$work/windows.log" | indent
    pass "the profile's windows on $BE"
  fi
  # The full-size UNets and the SD VAE (encode and decode at 512x512):
  # scale.json's bound, 1e-4 x max|ref|.
  if [ -n "$emulated" ]; then
    note_skip "the full-size models (emulated: hours on the CPU)"
  else
    for m in sd-turbo sd15 vae-kl; do
      if runs "scale $m f32" "$work/scale.log" 600 env PPDIFFUSE_BACKEND="$BE" \
          "$scale" "$data/scale" "$m" f32; then
        grep -E ' weights f32, |decode: ' "$work/scale.log" | indent
        pass "full-size $m in f32"
      fi
    done
  fi
}

# ---- dtypes ----------------------------------------------------------------

step_dtypes() {
  current=dtypes
  say "dtypes: f16 and bf16 on $BE (tiny fixtures by NMSE against float32; full-size UNets against diffusers' float64)"
  [ -n "$emulated" ] && note_skip "the full-size UNets in f16 and bf16 (emulated: hours on the CPU)"
  # The ways the defaults would take next (candidate_ways).
  ways=$(candidate_ways)
  for dt in f16 bf16; do
    case $dt in f16) nmse=$NMSE_F16 ;; *) nmse=$NMSE_BF16 ;; esac
    for fam in sd15 turbo; do
      m=$data/unet-$fam-tiny
      unet_case "$work/u.npy" "$dt" "$m" "$m" "$BE" \
        && judge "unet-$fam-tiny $dt" python3 "$gc" npy "unet-$fam-tiny $dt" \
          "$work/u.npy" "$m/out.npy" --nmse "$nmse"
    done
    # The tiny turbo UNet with the ways the defaults would take next.
    m=$data/unet-turbo-tiny
    # shellcheck disable=SC2086  # $ways is a list of assignments
    unet_case "$work/u.npy" "$dt" "$m" "$m" "$BE" $ways \
      && judge "unet-turbo-tiny $dt, with $ways" python3 "$gc" npy \
        "unet-turbo-tiny $dt, with $ways" "$work/u.npy" "$m/out.npy" \
        --nmse "$nmse"
    v=$data/taesd-tiny
    runs "taesd encode $dt" "$work/tool.log" 300 "$tool" vae-encode \
      --backend "$BE" --dtype "$dt" --model "$v" --image "$v/image.npy" \
      --out "$work/z.npy" \
      && judge "taesd-tiny encode $dt" python3 "$gc" npy "taesd-tiny encode $dt" \
        "$work/z.npy" "$v/latents.npy" --nmse "$nmse"
    runs "taesd decode $dt" "$work/tool.log" 300 "$tool" vae-decode \
      --backend "$BE" --dtype "$dt" --model "$v" --latents "$v/latents.npy" \
      --out "$work/x.npy" \
      && judge "taesd-tiny decode $dt" python3 "$gc" npy "taesd-tiny decode $dt" \
        "$work/x.npy" "$v/decoded.npy" --nmse "$nmse"
    # test-scale.c: relative max |diff| 4e-3 (f16), 3e-2 (bf16); NMSE
    # 5e-6, 3.2e-4.  (Not emulated: hours on the CPU.)
    [ -n "$emulated" ] && continue
    for m in sd-turbo sd15; do
      scale_case "" "$m" "$dt"
    done
    # The way back from the defaults: float32 activations channels first
    # ($ACT32), each 16-bit product narrowing a copy of its operand, to
    # the same bound.
    # shellcheck disable=SC2086  # $ACT32 is a list of assignments
    scale_case ", float32 activations" sd-turbo "$dt" $ACT32
    # The ways the defaults would take next (candidate_ways: the bench
    # step's winners when it ran before this step in this run, else
    # $CANDIDATES), all at once, to the same bound: the run that times
    # them also says whether they keep the defaults' accuracy.
    # shellcheck disable=SC2086  # $ways is a list of assignments
    scale_case ", with $ways" sd-turbo "$dt" $ways
    # And 16-bit activations channels first (PPDIFFUSE_ACT_LAYOUT=nchw):
    # the norms and convolutions on their channels-first kernels, to the
    # same bound; kernels-scale-sd-turbo-f16-nhwc-cpu-strict holds the
    # layouts' agreement on the host.
    [ "$dt" = f16 ] || continue
    scale_case ", 16-bit activations channels first" sd-turbo f16 \
      PPDIFFUSE_ACT_LAYOUT=nchw
  done
}

# scale_case WHAT MODEL DTYPE [NAME=VALUE ...]: the full-size MODEL UNet in
# DTYPE with those settings against diffusers' float64
# (test-kernels-scale, its bounds), its figures shown either way; WHAT
# ends its name.
scale_case() {
  _what=$1 _m=$2 _dt=$3
  shift 3
  runs "scale $_m $_dt$_what" "$work/scale.log" 600 \
    env PPDIFFUSE_BACKEND="$BE" "$@" "$scale" "$data/scale" "$_m" "$_dt"
  _ok=$?
  grep " weights $_dt, " "$work/scale.log" | indent
  [ "$_ok" = 0 ] && pass "full-size $_m UNet in $_dt$_what"
  return 0
}

# ---- shared by text, mesh, spread, faults ------------------------------------

# A make-tiny turbo pipeline whose decoder is scaled to give unclamped
# frames, and 4 moving 256x256 frames as PNG.
tiny=$work/tiny
frames_ready=""
prepare_frames() {
  [ -n "$frames_ready" ] && return 0
  runs "make-tiny turbo" "$work/make-tiny.log" 120 "$tool" make-tiny \
    --kind turbo --out "$tiny" --seed 5 || return 1
  runs "scale the tiny decoder" "$work/tame.log" 60 python3 "$gc" tame "$tiny" \
    || return 1
  runs "input frames" "$work/frames.log" 60 gst-launch-1.0 -q videotestsrc \
    num-buffers=4 pattern=ball ! video/x-raw,format=RGB,width=256,height=256 \
    ! pngenc ! multifilesink location="$work/in-%02d.png" || return 1
  frames_ready=1
}

# mesh_run TAG RANKS BACKEND DTYPE [ELEMENT SETTINGS...]: the 4 frames
# through a mesh into $work/TAG-NN.rgb, its log (rank 0 at GST_DEBUG
# ppdiffuse:5, the workers at PPDIFFUSE_DEBUG=4) in $work/TAG.log; with
# $mesh_env (NAME=VALUE ...) in the environment.
mesh_env=""
mesh_run() {
  _tag=$1 _ranks=$2 _be=$3 _dt=$4
  shift 4
  rm -f "$work/$_tag"-*.rgb
  # shellcheck disable=SC2086  # $mesh_env is a list of assignments
  runs "mesh $_tag" "$work/$_tag.log" 300 env GST_DEBUG=ppdiffuse:5 \
    PPDIFFUSE_DEBUG=4 $mesh_env gst-launch-1.0 multifilesrc \
    location="$work/in-%02d.png" index=0 stop-index=3 \
    caps=image/png,framerate=25/1 ! pngdec ! videoconvert \
    ! video/x-raw,format=RGB ! ppdiffuse ranks="$_ranks" steps=2 \
    backend="$_be" dtype="$_dt" model="$tiny" \
    prompt-embeds="$tiny/prompt_embeds.npy" strength=0.7 seed=3 "$@" \
    ! video/x-raw,format=RGB ! multifilesink location="$work/$_tag-%02d.rgb"
}

# png_to_raw PREFIX [LAST]: PREFIX-NN.png -> PREFIX-NN.rgb (NN = 00 ..
# LAST, default 03).
png_to_raw() {
  runs "decode $1" "$work/png.log" 60 gst-launch-1.0 -q multifilesrc \
    location="$1-%02d.png" index=0 stop-index="${2:-3}" \
    caps=image/png,framerate=1/1 \
    ! pngdec ! videoconvert ! video/x-raw,format=RGB \
    ! multifilesink location="$1-%02d.rgb"
}

# tool_frames DTYPE [NAME [NAME=VALUE...]]: ppdiffuse-tool img2img on
# $BE, frame by frame, with the mesh's settings (and that environment),
# into $work/NAME-NN.rgb (default NAME: tool-DTYPE), once.
tool_frames() {
  _tf_dt=$1 _tf_name=${2:-tool-$1}
  shift
  [ $# -gt 0 ] && shift
  [ -f "$work/$_tf_name-03.rgb" ] && return 0
  for i in 00 01 02 03; do
    runs "img2img $_tf_name frame $i" "$work/img2img.log" 300 env "$@" "$tool" \
      img2img --backend "$BE" --dtype "$_tf_dt" --model "$tiny" \
      --in "$work/in-$i.png" --out "$work/$_tf_name-$i.png" \
      --prompt-embeds "$tiny/prompt_embeds.npy" --steps 2 --strength 0.7 \
      --seed 3 || return 1
  done
  png_to_raw "$work/$_tf_name"
}

# ---- text ------------------------------------------------------------------

step_text() {
  current=text
  say "text: the CLIP text encoder on $BE in f32 (bound |diff| <= $CLIP_ABS), a prompt end to end"
  for c in quick-gelu gelu; do
    p=$work/clip-$c
    mkdir -p "$p/unet"
    cp -r "$data/clip-text/$c" "$p/text_encoder"
    width=$(sed -n 's/.*"hidden_size": *\([0-9]*\).*/\1/p' "$data/clip-text/$c/config.json")
    echo "{\"cross_attention_dim\": $width}" >"$p/unet/config.json"
    for seq in padded random; do
      runs "encode-prompt $c $seq" "$work/tool.log" 120 "$tool" encode-prompt \
        --backend "$BE" --dtype f32 --model "$p" \
        --ids "$(cat "$data/clip-text/$c/ids-$seq.txt")" --out "$work/e.npy" \
        && judge "CLIP $c $seq" python3 "$gc" npy "CLIP $c $seq" "$work/e.npy" \
          "$data/clip-text/$c/$seq/last_hidden_state.npy" --abs "$CLIP_ABS"
    done
  done
  if prepare_frames; then
    # The element encodes the prompt on rank 0 (tokenizer, text encoder on
    # the backend) and sends the states with the first chunk.
    mesh_env=""
    mesh_run prompt-cpu 2 cpu f32 "prompt=watercolor:0.7|neon:0.3" \
      && mesh_run prompt-dev 2 "$BE" f32 "prompt=watercolor:0.7|neon:0.3" \
      && judge "a text prompt on $BE against the CPU (f32)" python3 "$gc" frames \
        "prompt $BE vs cpu" "$work/prompt-cpu" "$work/prompt-dev" 4 \
        --levels "$FRAME_LEVELS" --max-mean "$FRAME_MEAN" --max-clamped "$FRAME_CLAMPED"
  fi
}

# ---- mesh ------------------------------------------------------------------

# The way back from cuda's defaults (16-bit activations channels last,
# measured faster on an H200: docs/perf.md): float32 activations channels
# first.
ACT32="PPDIFFUSE_CUDA_ACTIVATIONS=f32 PPDIFFUSE_ACT_LAYOUT=nchw"
# The ways written to be faster and not yet the defaults, the same in every
# process (no timed choice): the element's figures with all of them.
CANDIDATES="PPDIFFUSE_CUDA_CONV_API=graph"

# The ways the defaults would take next: those the bench step found faster
# alone and slower on nothing, when it ran before the caller in this run
# ($work/winners), else $CANDIDATES.
candidate_ways() {
  if [ -s "$work/winners" ]; then
    tr '\n' ' ' <"$work/winners" | sed 's/ $//'
  else
    echo "$CANDIDATES"
  fi
}

step_mesh() {
  current=mesh
  say "mesh: 2 workers sharing GPU 0 against the CPU mesh and ppdiffuse-tool img2img"
  if prepare_frames; then
    # One GPU for the 3 ranks, also where there are more.
    mesh_env=""
    [ -n "$dry" ] || mesh_env=CUDA_VISIBLE_DEVICES=0
    mesh_run cpu-f32 2 cpu f32
    for dt in f32 f16; do
      tool_frames "$dt"
      # ppdiffuse-tool with graphs: captured after the first frame, launched
      # for the others, the same bytes.
      if runs "img2img $dt with graphs" "$work/graphs-tool.log" 300 "$tool" \
          img2img --backend "$BE" --dtype "$dt" --model "$tiny" \
          --in "$work/in-00.png" --out "$work/tg-$dt-00.png" \
          --prompt-embeds "$tiny/prompt_embeds.npy" --steps 2 --strength 0.7 \
          --seed 3 --frames 3 --cuda-graphs 1; then
        counts=$(grep "^graphs on $BE: " "$work/graphs-tool.log")
        echo "    ppdiffuse-tool img2img --frames 3 --cuda-graphs 1: ${counts:-no graph counts}"
        if [ "$counts" = "graphs on $BE: 1 captured, 2 launched" ]; then
          pass "img2img $dt: 1 graph captured, 2 launched"
        else
          bad "img2img $dt with graphs: '${counts:-nothing}', expected 'graphs on $BE: 1 captured, 2 launched'"
        fi
        png_to_raw "$work/tg-$dt" 0 && [ -f "$work/tool-$dt-00.rgb" ] \
          && judge "img2img $dt with graphs equals without" python3 "$gc" frames \
            "img2img $dt graphs vs none" "$work/tool-$dt" "$work/tg-$dt" 1 --exact
      fi
      for g in 0 1; do
        tag=shared-$dt-g$g
        if [ "$g" = 1 ]; then graphs=on; else graphs=off; fi
        mesh_run "$tag" 2 "$BE" "$dt" cuda-graphs="$g" || continue
        # Both workers (node-local ranks 1 and 2, rank 0 is 0) on cuda:0,
        # the MPI plane (NCCL wants a GPU per rank).
        if [ -n "$dry" ]; then
          judge "$tag: devices, plane, graphs" python3 "$gc" mesh-log "$work/$tag.log" \
            --workers 2 --frames 4 --backend "$BE" --plane mpi --graphs "$graphs"
        else
          judge "$tag: both workers on cuda:0, plane, graphs" python3 "$gc" mesh-log \
            "$work/$tag.log" --workers 2 --frames 4 --backend "$BE" \
            --device 1=cuda:0 --device 2=cuda:0 --plane mpi --graphs "$graphs"
        fi
        [ -f "$work/tool-$dt-03.rgb" ] \
          && judge "$tag equals img2img on $BE byte for byte" python3 "$gc" frames \
            "$tag vs img2img" "$work/tool-$dt" "$work/$tag" 4 --exact
        [ "$dt" = f32 ] && [ -f "$work/cpu-f32-03.rgb" ] \
          && judge "$tag against the CPU mesh" python3 "$gc" frames "$tag vs cpu" \
            "$work/cpu-f32" "$work/$tag" 4 --levels "$FRAME_LEVELS" \
            --max-mean "$FRAME_MEAN" --max-clamped "$FRAME_CLAMPED"
      done
      # Float32 channels-first activations ($ACT32) through the mesh with
      # graphs: the tool's bytes with the same settings; how far the
      # defaults' 16-bit frames are from them is reported (the full-size
      # step's error against float64 is the dtypes step's to judge).
      if [ "$dt" = f16 ] && [ -z "$dry" ] && [ -z "$emulated" ]; then
        # shellcheck disable=SC2086  # $ACT32 is a list of assignments
        if tool_frames f16 tool32 $ACT32 \
            && mesh_env="CUDA_VISIBLE_DEVICES=0 $ACT32" \
            && mesh_run act32-g1 2 "$BE" f16 cuda-graphs=1; then
          judge "act32-g1: both workers on cuda:0, plane, graphs" python3 "$gc" \
            mesh-log "$work/act32-g1.log" --workers 2 --frames 4 \
            --backend "$BE" --device 1=cuda:0 --device 2=cuda:0 --plane mpi \
            --graphs on
          judge "float32 activations: the mesh equals img2img byte for byte" \
            python3 "$gc" frames "act32-g1 vs img2img" "$work/tool32" \
            "$work/act32-g1" 4 --exact
          python3 "$gc" frames "16-bit vs float32 activations (reported)" \
            "$work/act32-g1" "$work/tool-f16" 4 --levels 255 | indent
          python3 "$gc" frames "f16 vs f32 weights (reported)" \
            "$work/tool-f32" "$work/tool-f16" 4 --levels 255 | indent
        fi
        mesh_env=CUDA_VISIBLE_DEVICES=0
      fi
      # Stream batch: one worker runs both steps, two frames a pass.  On
      # the GPU a batched product or convolution may take another kernel
      # than one sample's, which in 16 bits rounds to other values: held
      # to the mesh's bound against the tool, or in 16 bits to what the 16
      # bits cost (the tool's frames in DTYPE against its f32 ones), at
      # the larger (exact on the CPU backends, as the dry run checks; an
      # H200 gave f16 batches 2 levels and a mean of 0.09 from unbatched
      # f16).  Every pass sleeps 50 ms
      # more (step-ms: the same values), so that the frames wait for the
      # worker and batch whatever the speeds.
      tag=batch-$dt
      if mesh_run "$tag" 1 "$BE" "$dt" stream-batch=true max-in-flight=4 \
          "model=$tiny?step-ms=50"; then
        if grep -Eq 'stream batch: [1-9][0-9]* frame-steps batched' "$work/$tag.log"; then
          pass "$tag: $(grep -Eo 'stream batch: [0-9]+ frame-steps batched(, batch graphs: [0-9]+ captured, [0-9]+ launched)?' "$work/$tag.log" | head -n 1)"
        else
          bad "$tag: no frame-steps ran batched"
        fi
        if [ -n "$dry" ]; then
          judge "$tag equals img2img byte for byte" python3 "$gc" frames \
            "$tag vs img2img" "$work/tool-$dt" "$work/$tag" 4 --exact
        elif [ "$dt" = f32 ]; then
          judge "$tag against img2img on $BE" python3 "$gc" frames \
            "$tag vs img2img" "$work/tool-$dt" "$work/$tag" 4 \
            --levels "$FRAME_LEVELS" --max-mean "$FRAME_MEAN" \
            --max-clamped "$FRAME_CLAMPED"
        else
          judge "$tag against img2img on $BE, or as far as $dt from f32" \
            python3 "$gc" frames "$tag vs img2img" "$work/tool-$dt" \
            "$work/$tag" 4 --levels "$FRAME_LEVELS" --max-mean "$FRAME_MEAN" \
            --max-clamped "$FRAME_CLAMPED" \
            --or-as-far-as "$work/tool-$dt" "$work/tool-f32"
        fi
      fi
    done
  fi
}

# ---- spread ----------------------------------------------------------------

step_spread() {
  current=spread
  say "spread: one process per GPU over NCCL, then more ranks than GPUs ($n_gpus GPU(s))"
  if [ "$n_gpus" -lt 2 ]; then
    note_skip "one GPU: NCCL wants a GPU per rank; the mesh step checked 2 workers sharing cuda:0"
  elif prepare_frames; then
    w=$((n_gpus - 1))
    if [ -n "$dry" ]; then
      # The NCCL data path over the emulated table, on the CPU.
      plane=nccl-emulated spread_be=cpu mesh_env=PPDIFFUSE_DATA_PLANE=nccl-emulated
    else
      # The plan chooses NCCL itself (auto): a GPU for every rank.
      plane=nccl spread_be=$BE mesh_env=""
    fi
    devices=""
    r=1
    while [ "$r" -le "$w" ]; do
      d=$(device_of "$r" "$n_gpus")
      [ -n "$d" ] && devices="$devices --device $r=$d"
      r=$((r + 1))
    done
    mesh_env_spread=$mesh_env
    mesh_env=""
    mesh_run "cpu-w$w" "$w" cpu f32
    tool_frames f32
    mesh_env=$mesh_env_spread
    for g in 0 1; do
      tag=nccl-g$g
      # (the cpu backend the dry run's emulated NCCL needs has no graphs)
      if [ "$g" = 1 ] && [ -z "$dry" ]; then graphs=on; else graphs=off; fi
      # shellcheck disable=SC2086  # $devices is a list of options
      mesh_run "$tag" "$w" "$spread_be" f32 cuda-graphs="$g" \
        && judge "$tag: rank 0 and $w workers each on its own GPU, chunks over $plane" \
          python3 "$gc" mesh-log "$work/$tag.log" --workers "$w" --frames 4 \
          --backend "$spread_be" --plane "$plane" --graphs "$graphs" $devices \
        && judge "$tag against the CPU mesh" python3 "$gc" frames "$tag vs cpu" \
          "$work/cpu-w$w" "$work/$tag" 4 --levels "$FRAME_LEVELS" \
          --max-mean "$FRAME_MEAN" --max-clamped "$FRAME_CLAMPED" \
        && { [ -n "$dry" ] || judge "$tag equals img2img on cuda:0 byte for byte" \
          python3 "$gc" frames "$tag vs img2img" "$work/tool-f32" "$work/$tag" 4 --exact; }
    done
    # Rank 0 on the last GPU (cuda-device-id): its host's workers take the
    # GPUs after it in turn, from GPU 0, none rank 0's; chunks over NCCL.
    if [ -z "$dry" ]; then
      last=$((n_gpus - 1))
      devices=""
      r=1
      while [ "$r" -le "$w" ]; do
        devices="$devices --device $r=cuda:$(((last + r) % n_gpus))"
        r=$((r + 1))
      done
      mesh_env=""
      # shellcheck disable=SC2086
      mesh_run "last-gpu" "$w" "$BE" f32 cuda-device-id="$last" \
        && judge "rank 0 on cuda:$last (cuda-device-id), its $w workers on the GPUs after it" \
          python3 "$gc" mesh-log "$work/last-gpu.log" --workers "$w" \
          --frames 4 --backend "$BE" --plane nccl $devices \
        && judge "rank 0 on cuda:$last: img2img's frames byte for byte" \
          python3 "$gc" frames "last-gpu vs img2img" "$work/tool-f32" \
          "$work/last-gpu" 4 --exact
    fi
    # N workers and rank 0 on N GPUs: worker N shares GPU 0 with rank 0, so
    # the chunks go over MPI; each worker on the GPU of its node-local rank.
    if [ -z "$dry" ]; then
      devices=""
      r=1
      while [ "$r" -le "$n_gpus" ]; do
        devices="$devices --device $r=$(device_of "$r" "$n_gpus")"
        r=$((r + 1))
      done
      mesh_env=""
      # shellcheck disable=SC2086
      mesh_run "over-$n_gpus" "$n_gpus" "$BE" f32 \
        && judge "$n_gpus workers on $n_gpus GPUs: devices by node-local rank, MPI plane" \
          python3 "$gc" mesh-log "$work/over-$n_gpus.log" --workers "$n_gpus" \
          --frames 4 --backend "$BE" --plane mpi $devices \
        && judge "$n_gpus workers equal img2img byte for byte" python3 "$gc" frames \
          "over-$n_gpus vs img2img" "$work/tool-f32" "$work/over-$n_gpus" 4 --exact
    fi
  fi
}

# ---- determinism -----------------------------------------------------------

step_determinism() {
  current=determinism
  say "determinism: the same UNet forward twice on $BE (64x64), byte for byte"
  for fam in turbo sd15; do
    m=$data/unet-$fam-tiny
    s=$data/shapes/unet-$fam-tiny/64x64
    for dt in f16 f32; do
      unet_case "$work/d1.npy" "$dt" "$m" "$s" "$BE" \
        && unet_case "$work/d2.npy" "$dt" "$m" "$s" "$BE" \
        && if cmp -s "$work/d1.npy" "$work/d2.npy"; then
          pass "unet-$fam-tiny 64x64 $dt: the same bytes twice"
        else
          "$compare" --nmse 1 "$work/d1.npy" "$work/d2.npy" 2>&1 | tail -n 1 | indent
          bad "unet-$fam-tiny 64x64 $dt: two runs differ"
        fi
    done
  done
}

# ---- faults ----------------------------------------------------------------

step_faults() {
  current=faults
  say "faults: a worker killed / hung in a real model's CUDA work (3 workers on $BE)"
  if prepare_frames; then
    before=$(pgrep -c -f "$PPDIFFUSE_WORKER" || true)
    for kind in kill hang; do
      # Rank 2's fault fires on its 4th chunk, while ranks 1 and 3 compute
      # the chunks beside it on the device.
      t=$(date +%s.%N)
      exec_to "$work/fault-$kind.log" 120 env \
        PPDIFFUSE_FAULT="rank:2,chunk:3,kind:$kind" GST_DEBUG=ppdiffuse:5 \
        gst-launch-1.0 videotestsrc num-buffers=60 pattern=ball \
        ! video/x-raw,format=RGB,width=64,height=64 ! ppdiffuse ranks=3 \
        steps=3 backend="$BE" dtype=f16 model="$tiny" \
        prompt-embeds="$tiny/prompt_embeds.npy" strength=0.7 \
        timeout-ms="$FAULT_TIMEOUT_MS" ! fakesink
      elapsed=$(awk -v a="$t" -v b="$(date +%s.%N)" 'BEGIN { print b - a }')
      case $st in
        "$NOT_RUN") note_skip "fault $kind: not run, past PP_GPU_END_S=$end_s s" ;;
        0) bad "fault $kind: the pipeline ended without an error" ;;
        124 | 137) bad "fault $kind: $(status_text "$st" 120): a hang" ;;
        *) judge "fault $kind: an error naming rank 2 within ${FAULT_BOUND_S} s" \
             python3 "$gc" fault "$work/fault-$kind.log" "$elapsed" "$FAULT_BOUND_S" 2 "$kind" ;;
      esac
    done
    sleep 5
    after=$(pgrep -c -f "$PPDIFFUSE_WORKER" || true)
    if [ "${after:-0}" -gt "${before:-0}" ]; then
      bad "faults: $((after - before)) worker processes left behind"
      pgrep -a -f "$PPDIFFUSE_WORKER" | indent
    else
      pass "faults: no worker left behind"
    fi
  fi
}

# ---- startup ---------------------------------------------------------------

# sustained NAME LOG CSV [VAR=VALUE ...]: $frames_long frames of the
# released-size pipeline $sdt at the default settings, 1 worker, with the
# variables given, the GPUs sampled into CSV over them; the steady figures
# (from frame 20) with the samples taken between the first steady frame's
# push and the last one's.
sustained() {
  sus_name=$1 sus_log=$2 sus_csv=$3
  shift 3
  sus_t0=$(date +%s.%N)
  gpu_samples_start "$sus_csv"
  if runs "$sus_name" "$sus_log" 600 env GST_DEBUG=ppdiffuse:5 "$@" \
      gst-launch-1.0 -m videotestsrc num-buffers="$frames_long" \
      ! video/x-raw,format=RGB,width=512,height=512 \
      ! ppdiffuse ranks=1 steps=1 backend="$BE" model="$sdt" \
      prompt-embeds="$sdt/prompt_embeds.npy" ! fakesink; then
    gpu_samples_stop
    judge "$sus_name runs" python3 "$gc" startup "$sus_log" --skip 20 \
      --frames "$frames_long" --gpu-samples "$sus_csv" --t0 "$sus_t0" \
      --rows "$work/startup-summary" --row "$sus_name, $frames_long frames"
  fi
  gpu_samples_stop
  gpu_apps_summary "$sus_csv" | indent
}

# element_run NAME LOG STEPS PROPERTY...: $frames frames of $sdt at
# 512x512 through one worker with the properties given and the
# environment's assignments in $run_env, reported beside the other runs
# with the batches the worker ran, what warming its batch sizes took, what
# its and rank 0's activation pools held and its slow attention plans.
run_env=
element_run() {
  er_name=$1 er_log=$2 er_steps=$3
  shift 3
  # shellcheck disable=SC2086  # $run_env is a list of assignments
  if runs "$er_name" "$er_log" 600 env GST_DEBUG=ppdiffuse:5 \
      PPDIFFUSE_DEBUG=3 G_MESSAGES_DEBUG=all $run_env gst-launch-1.0 -m \
      videotestsrc num-buffers="$frames" \
      ! video/x-raw,format=RGB,width=512,height=512 \
      ! ppdiffuse ranks=1 steps="$er_steps" backend="$BE" model="$sdt" \
      prompt-embeds="$sdt/prompt_embeds.npy" "$@" ! fakesink; then
    judge "$er_name runs" python3 "$gc" startup "$er_log" --skip 5 \
      --frames "$frames" --rows "$work/startup-summary" --row "$er_name"
    grep -Eo 'stream batch: [0-9]+ frame-steps batched|passes of up to [0-9]+ frames' \
      "$er_log" | paste -sd ' ' - | grep . | indent
    grep -Eo 'warm-up: batches of 2 to [0-9]+ samples run once \([0-9]+ ms\)' \
      "$er_log" | indent
    # What the activation pools held (the worker's, rank 0's).
    grep -Eo 'activation pools on [a-z]+: [0-9.]+ MiB held, at most [0-9.]+ MiB in use at once' \
      "$er_log" | indent
    slow_plans "$er_log" | indent
  fi
}

# slow_plans LOG: the attention plans that took 20 ms or more in a run
# (cuDNN compiling kernels for a new shape), as one line: what the
# batched runs show beyond the unbatched one is what their batch sizes
# cost, which the worker's first warm-up pass pays (its line above).
slow_plans() {
  awk '/cuda attention: .*the plan took/ {
      n++
      for (i = 1; i < NF; i++) if ($i == "took") t += $(i + 1)
    }
    END { printf "attention plans of 20 ms or more: %d, %.0f ms in all\n", n, t }' "$1"
}

step_startup() {
if [ -n "$emulated" ]; then
  current=startup
  note_skip "startup (emulated: a released-size pipeline takes hours on the CPU)"
else
  current=startup
  if [ -n "$dry" ]; then
    kind=turbo frames=12 frames_long=24
  else
    kind=sd-turbo frames=60 frames_long=1200
  fi
  say "startup: make-tiny --kind $kind at 512x512 with the default settings, 1 worker"
  sdt=$work/start-model
  if runs "make-tiny $kind" "$work/make-big.log" 300 "$tool" make-tiny \
      --kind "$kind" --out "$sdt" --seed 1; then
    # No timeout-ms, no dtype: what a user gets.
    t=$(date +%s.%N)
    if runs "start with the default settings" "$work/startup.log" 600 env \
        GST_DEBUG=ppdiffuse:5 PPDIFFUSE_DEBUG=3 gst-launch-1.0 -m videotestsrc \
        num-buffers="$frames" ! video/x-raw,format=RGB,width=512,height=512 \
        ! ppdiffuse ranks=1 steps=1 backend="$BE" model="$sdt" \
        prompt-embeds="$sdt/prompt_embeds.npy" ! fakesink; then
      echo "    wall time $(awk -v a="$t" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s for $frames frames"
      judge "a released-size pipeline starts with the default settings" \
        python3 "$gc" startup "$work/startup.log" --skip 5 --frames "$frames" \
        --max-ready "$READY_S" --rows "$work/startup-summary" \
        --row "default settings, $frames frames"
    else
      grep -E '^(ERROR|WARNING)' "$work/startup.log" | head -n 3 | cut -c1-400 | indent
    fi
    grep -o 'ppdiffuse-stats.*' "$work/startup.log" | tail -n 1 | cut -c1-600 | indent
    # A sustained stream at the default settings, the GPUs' utilization
    # sampled: the steady rate over many frames, and the share of that
    # time a kernel ran (a GPU busy all the time is bound by its kernels;
    # one idle part of it, by what feeds it).
    sustained "sustained stream, default settings" "$work/sustained.log" \
      "$work/util.csv"
    # The same with the host's waits for the device sleeping
    # (PPDIFFUSE_CUDA_WAIT=sleep) where they spin by default: what the
    # spinning costs each process's CPU (the runs' CPU loads, from the
    # stats) and what sleeping costs the frame rate and the round trip.
    sustained "sustained stream, PPDIFFUSE_CUDA_WAIT=sleep" \
      "$work/sustained-sleep.log" "$work/util-sleep.csv" \
      PPDIFFUSE_CUDA_WAIT=sleep
    # The same with float32 channels-first activations ($ACT32, the former
    # defaults), and with the ways not yet the defaults, all at once: those
    # the bench step found faster alone when it ran before this step in
    # this run ($work/winners), else $CANDIDATES: what they buy the
    # element; every rank reads them from the environment; reported,
    # beside the default run.
    others=$(candidate_ways)
    n_ways=0
    for ways in "$ACT32" "$others"; do
      n_ways=$((n_ways + 1))
      # shellcheck disable=SC2086  # $ways is a list of assignments
      if runs "start with $ways" "$work/startup-ways-$n_ways.log" 600 \
          env GST_DEBUG=ppdiffuse:5 PPDIFFUSE_DEBUG=3 $ways gst-launch-1.0 \
          -m videotestsrc num-buffers="$frames" \
          ! video/x-raw,format=RGB,width=512,height=512 \
          ! ppdiffuse ranks=1 steps=1 backend="$BE" model="$sdt" \
          prompt-embeds="$sdt/prompt_embeds.npy" ! fakesink; then
        judge "the same with $ways" python3 "$gc" startup \
          "$work/startup-ways-$n_ways.log" --skip 5 --frames "$frames" \
          --rows "$work/startup-summary" --row "$ways"
      fi
    done
    # 4 steps on one worker, without and with the stream batch, 6 frames
    # in flight, and with two frames at each step (frame-batch 2: passes
    # of up to 8 latents, 16 frames in flight), reported: the frame
    # period is the throughput.
    n_batch=0
    for batch in "stream-batch=false max-in-flight=6" \
        "stream-batch=true max-in-flight=6" \
        "stream-batch=true frame-batch=2 max-in-flight=16"; do
      n_batch=$((n_batch + 1))
      # shellcheck disable=SC2086  # $batch is a list of properties
      element_run "4 steps, $batch" "$work/batch-$n_batch.log" 4 $batch
    done
    # One step with a third frame in flight (the default is (ranks + 1) ×
    # frame-batch, 2 here), reported: whether two keep the GPU fed.
    element_run "1 step, max-in-flight=3" "$work/inflight-3.log" 1 \
      max-in-flight=3
    # One step, up to 2 and 4 waiting frames a pass (frame-batch; the
    # default max-in-flight, (ranks + 1) × frame-batch), reported: the
    # frame rate against the first run's.
    for fb in 2 4; do
      element_run "1 step, frame-batch=$fb" "$work/frames-$fb.log" 1 \
        frame-batch="$fb"
    done
    # Two frames a pass with three in flight, not four: the round trip
    # bounded closer to the 20 ms p95 the one-step target sets beside its
    # frame rate (a frame in flight more is a frame period more of it).
    element_run "1 step, frame-batch=2 max-in-flight=3" \
      "$work/frames-2-inflight-3.log" 1 frame-batch=2 max-in-flight=3
    # The first run, the 4-step stream batch and 1 step with frame-batch 2
    # again under CUDA's multi-process service, where the driver has it
    # (reported, beside the runs above): without it rank 0's encodes and
    # decodes and the worker's steps, two processes on one GPU, take turns
    # in time slices of their own contexts; under it their kernels may run
    # side by side.
    if [ -z "$dry" ] && mps_start; then
      sustained "sustained stream, default settings, under MPS" \
        "$work/sustained-mps.log" "$work/util-mps.csv" \
        CUDA_MPS_PIPE_DIRECTORY="$mps_dir/pipe"
      run_env="CUDA_MPS_PIPE_DIRECTORY=$mps_dir/pipe"
      element_run "4 steps, stream-batch=true, under MPS" \
        "$work/mps-batch.log" 4 max-in-flight=6 stream-batch=true
      # One step, two frames a pass, under it: the two ways of keeping
      # the GPU fed together.
      element_run "1 step, frame-batch=2, under MPS" \
        "$work/mps-frames-2.log" 1 frame-batch=2
      run_env=
      mps_stop
    fi
    # One step with the temporal feature bank (one frame banked, the
    # default): at each of the UNet's self-attentions the bank's fusion
    # and merging run on the device, by the bank's ops, and its steps are
    # a graph once the bank is steady (captured at the fourth frame):
    # what that costs a full-size UNet, reported; 12 frames.
    er_frames=$frames
    frames=12
    element_run "1 step, temporal=feature-bank" "$work/bank.log" 1 \
      temporal=feature-bank
    frames=$er_frames
    # With N GPUs: rank 0 and N - 1 workers on their own GPUs, N - 1 steps
    # (one each), chunks over NCCL.
    w=$((n_gpus - 1))
    if [ -z "$dry" ] && [ "$w" -ge 2 ] \
        && runs "$w workers, default settings" "$work/startup-w$w.log" 600 \
          env GST_DEBUG=ppdiffuse:5 gst-launch-1.0 videotestsrc \
          num-buffers="$frames" ! video/x-raw,format=RGB,width=512,height=512 \
          ! ppdiffuse ranks="$w" steps="$w" backend="$BE" model="$sdt" \
          prompt-embeds="$sdt/prompt_embeds.npy" ! fakesink; then
      judge "$w workers on their own GPUs start with the default settings" \
        python3 "$gc" startup "$work/startup-w$w.log" --skip 5 \
        --frames "$frames" --rows "$work/startup-summary" \
        --row "$w workers on their own GPUs, $w steps"
    fi
    # Every run side by side: what the element's defaults are chosen by.
    if [ -s "$work/startup-summary" ]; then
      echo "  the element's runs side by side (steady frames):"
      printf '%8s %9s %8s %7s %10s  %s\n' "fps" "trip ms" "p95 ms" "busy %" \
        "CPU cores" "run" | indent
      indent <"$work/startup-summary"
    fi
  fi
  rm -rf "$sdt"
fi
}

# ---- bench -----------------------------------------------------------------

# Whether the bench step runs its run $1 (PP_GPU_BENCH_WAYS); listed as
# skipped when not.
bench_wanted() {
  if [ -z "${PP_GPU_BENCH_WAYS:-}" ] \
      || printf '%s\n' "$1" | grep -Eq -- "$PP_GPU_BENCH_WAYS"; then
    return 0
  fi
  note_skip "$1 (not in PP_GPU_BENCH_WAYS)"
  return 1
}

# A log's name for the way $1, its settings' common prefixes left out:
# each bench run keeps its own log (PP_GPU_LOGS).
log_slug() {
  printf '%s' "$1" | sed 's/PPDIFFUSE_//g; s/CUDA_//g' \
    | tr -c 'A-Za-z0-9._-' '-' | cut -c1-80
}

# One row of the bench step's summary (bench-row.awk) from gpu-bench's log
# $2, for the way named $1.
bench_row() {
  awk -v way="$1" -f "$here/bench-row.awk" "$2" >>"$work/bench-summary"
}

# trace_kernels NAME LOG [NAME=VALUE ...]: gpu-bench --kernels in f16 with
# those settings, its tables shown; skipped, saying why, where the device
# has no kernel trace (no CUPTI).
trace_kernels() {
  _n=$1 _l=$2
  shift 2
  bench_wanted "$_n" || return 0
  # The convolutions' kernels in the order they ran too (cuDNN's names
  # hold "fprop"; a graph's kernels run in its ops' order): which shapes
  # took which kernels, in the log (the run's output keeps the tables).
  # shellcheck disable=SC2086  # $bench_size is a list of options
  exec_to "$_l" 300 env "$@" "$build/tests/bench/gpu-bench" --dtype f16 \
    --kernels --kernel-order fprop $bench_size
  case $st in
    0)
      sed -n '/^kernels of /,$p' "$_l" | grep -v -E '(INFO|DEBUG|MESSAGE)' \
        | grep -v -E '^ +[0-9]+ +[0-9.]+ µs  ' | cut -c1-400 | indent
      pass "$_n ran" ;;
    77)
      # No kernel trace (its reason), or no device (gpu-bench's).
      note_skip "$_n: $(grep -m 1 -E '^kernel trace: |skipped: ' "$_l" \
        | cut -c1-300)" ;;
    "$NOT_RUN")
      note_skip "$_n: not run, past PP_GPU_END_S=$end_s s" ;;
    *)
      bad "$_n: $(status_text "$st" 300)"
      tail -n 4 "$_l" | cut -c1-400 | indent ;;
  esac
}

step_bench() {
  current=bench
  say "bench: gpu-bench (reported, not judged)"
  # CUPTI for the kernel traces, where the caller named none: the
  # toolkit's or a wheel's (nvidia-cuda-cupti).
  if [ -z "${PPDIFFUSE_CUDA_CUPTI:-}" ] && [ -z "$dry$emulated" ]; then
    cupti=$(timeout 30 find /usr/local/cuda*/ /usr/lib/python3* \
      /usr/local/lib /opt -xdev -name 'libcupti.so.13*' 2>/dev/null \
      | head -n 1)
    [ -n "$cupti" ] && export PPDIFFUSE_CUDA_CUPTI="$cupti"
    echo "  CUPTI for the kernel traces: ${cupti:-none found}"
  fi
  # Emulated, every run at gpu-bench's small size, once: each way's path
  # through the benchmark, not its time.
  bench_size=""
  [ -n "$emulated" ] && bench_size="--small --repeats 1"
  rm -f "$work/winners"
  if [ -n "$dry" ]; then
    note_skip "gpu-bench (no device)"
  else
    for dt in f16 bf16 f32; do
      # With info messages: the attention shapes cuDNN's fused kernel did
      # not take, and its plans slow to make (a compilation each).
      blog=$work/bench-$dt.log
      bench_wanted "gpu-bench $dt" \
        && runs "gpu-bench $dt" "$blog" 300 \
          env G_MESSAGES_DEBUG=all "$build/tests/bench/gpu-bench" --dtype "$dt" $bench_size \
        && { grep -E '^(SD-Turbo|small|TAESD|frames/s|activation|kernel ways|graph nodes|launch floor)' "$blog" \
          | indent
          grep -E 'cuda attention:' "$blog" \
            | sed 's/.*cuda attention:/cuda attention:/' | sort | uniq \
            | cut -c1-300 | indent
          # Each convolution shape's algorithm (the profile's shapes give
          # their times), f16 only.
          [ "$dt" = f16 ] && grep -E 'cuda conv:' "$blog" \
            | sed 's/.*cuda conv:/cuda conv:/' | sort | uniq \
            | cut -c1-300 | indent
          # Where the time of a step goes, by op family (device time).
          [ "$dt" = f16 ] && sed -n '/^profile of/,$p' "$blog" \
            | grep -v -E '(INFO|DEBUG|MESSAGE)' | indent
          bench_row "defaults, $dt" "$blog"
          pass "gpu-bench $dt ran"; }
    done
    # Each graph's kernels as the device ran them in one launch (a CUPTI
    # kernel trace: the libraries' kernels by name, the time a kernel ran
    # and the device idle between kernels), at the defaults.
    trace_kernels "gpu-bench f16, kernels" "$work/bench-kernels.log"
    # Each norm shape of a step alone, as graphs (gpu-bench --norms), at
    # the defaults, in the norms' other ways and with channels-last tiles
    # of other sizes: which is faster for which shape, and a step's norms
    # in all.
    for way in "" "PPDIFFUSE_CUDA_GROUP_NORM=vector PPDIFFUSE_CUDA_LAYER_NORM=vector" \
        "PPDIFFUSE_CUDA_GROUP_NORM=split PPDIFFUSE_CUDA_LAYER_NORM=warp" \
        "PPDIFFUSE_CUDA_GROUP_NORM=whole PPDIFFUSE_CUDA_LAYER_NORM=block" \
        "PPDIFFUSE_CUDA_LAYER_NORM=octet" \
        "PPDIFFUSE_CUDA_GROUP_NORM=vector PPDIFFUSE_CUDA_GROUP_NORM_TILE=512" \
        "PPDIFFUSE_CUDA_GROUP_NORM=vector PPDIFFUSE_CUDA_GROUP_NORM_TILE=8192" \
        "PPDIFFUSE_CUDA_GROUP_NORM=grid"; do
      name="gpu-bench f16, norms${way:+, $way}"
      blog=$work/bench-norms$(log_slug "${way:+-$way}").log
      # shellcheck disable=SC2086  # $way is a list of assignments
      bench_wanted "$name" \
        && runs "$name" "$blog" 120 env $way "$build/tests/bench/gpu-bench" \
          --dtype f16 --norms $bench_size \
        && { grep -E "^(kernel ways|  )" "$blog" | indent
          pass "$name ran"; }
    done
    # The same f16 step the ways the backend can still be told to run it,
    # side by side with the default above: the first measured way (float32
    # attention, heuristic NCHW convolutions, whole group norms, on the
    # default activations), each convolution shape's algorithm timed, the
    # group norms channels first (whole).
    for way in "f32 heuristic nchw whole" "fused timed auto split" \
        "fused heuristic auto whole"; do
      set -- $way
      blog=$work/bench-$(log_slug "$1 $2 $3 $4").log
      bench_wanted "gpu-bench f16, attention $1, convolutions $2 $3, group norm $4" \
        && runs "gpu-bench f16, attention $1, convolutions $2 $3, group norm $4" \
          "$blog" 300 \
          env PPDIFFUSE_CUDA_ATTENTION="$1" PPDIFFUSE_CUDA_CONV_ALGO="$2" \
          PPDIFFUSE_CUDA_CONV_LAYOUT="$3" PPDIFFUSE_CUDA_GROUP_NORM="$4" \
          G_MESSAGES_DEBUG=all "$build/tests/bench/gpu-bench" --dtype f16 \
          $bench_size \
        && { grep -E '^(SD-Turbo|small|TAESD|graph nodes|launch floor|first run)' "$blog" | indent
          # The algorithms the trials chose, against the heuristics'
          # (the default's lines above), and every trial's time.
          [ "$2" = timed ] && grep -E 'cuda conv( trials)?:' \
            "$blog" | sed 's/.*cuda conv/cuda conv/' | sort \
            | uniq | cut -c1-800 | indent
          sed -n '/^profile of/,$p' "$blog" \
            | grep -v -E '(INFO|DEBUG|MESSAGE)' | indent
          bench_row "f16, attention $1, convolutions $2 $3, group norm $4" \
            "$blog"
          pass "gpu-bench f16, attention $1, convolutions $2 $3, group norm $4 ran"; }
    done
    # The activations the other ways: float32 channels first ($ACT32, the
    # former defaults: each op's kernel between a widening and a
    # narrowing), 16 bits channels first, and 16 bits with the GEMMs'
    # outputs through float32 scratch (a bias kernel and a narrowing each)
    # instead of cuBLAS writing them; the layer norms a block a row;
    # both norms eight channels a thread in the vector kernels (the
    # defaults before the ticket group norms and the width layer norms);
    # both norms a value a thread (split and warp, the ways before the
    # vector kernels: the profile gives each norm's time); the layer norms
    # a thread per eight values at every width (octet); the
    # ticket group norms in one cooperative launch (grid: the tiles meet,
    # where the ticket way launches again to normalise); the
    # convolutions of 3 and 4 channels (a model's first and last) channels
    # first (nhwc: the way before padding them); the
    # convolutions after the upsamplings as 3×3 ones of the upsampled
    # activation (upsample: the way before their output phases); the
    # convolutions' bias, residual and ReLU in a pass of the backend's
    # own (pass: the way before cuDNN's fused epilogue); and the four
    # ways before together, what the defaults were before 2026-12-04; the
    # legacy API's convolutions with the fastest of cuDNN's algorithms for
    # each shape (timed: a step's graph ran 16 of its 51 convolutions in
    # cuDNN's sm80 kernels on an H200 by the heuristics' choice); the
    # convolutions with their epilogues as cuDNN operation graphs (graph:
    # the engines of cuDNN's backend API), by its heuristics' first engine
    # and by the fastest of its first four, with the engine each shape
    # got and the time its plans took (cuDNN may compile kernels); and
    # cuBLASLt's algorithms timed (the fastest of the heuristics' first
    # eight for each product's shape); the convolutions of at most 64 and
    # 256 output pixels (a step's 8×8, and 16×16, levels) as im2col and a
    # cuBLASLt product (conv-gemm: the 8×8 ones read 29.5 MB of filter in
    # cuDNN's sm80 kernels at 23 µs); and the backend's kernels launched
    # as programmatic dependents (pdl: each started while the one before
    # it finishes).
    for way in "$ACT32" "PPDIFFUSE_ACT_LAYOUT=nchw" \
        "PPDIFFUSE_CUDA_GEMM_OUT=f32" "PPDIFFUSE_CUDA_LAYER_NORM=block" \
        "PPDIFFUSE_CUDA_GROUP_NORM=vector PPDIFFUSE_CUDA_LAYER_NORM=vector" \
        "PPDIFFUSE_CUDA_GROUP_NORM=split PPDIFFUSE_CUDA_LAYER_NORM=warp" \
        "PPDIFFUSE_CUDA_LAYER_NORM=octet" "PPDIFFUSE_CUDA_GROUP_NORM=grid" \
        "PPDIFFUSE_CUDA_CONV_LAYOUT=nhwc" "PPDIFFUSE_UPSAMPLE_CONV=upsample" \
        "PPDIFFUSE_CUDA_CONV_EPILOGUE=pass" \
        "PPDIFFUSE_CUDA_GROUP_NORM=split PPDIFFUSE_CUDA_LAYER_NORM=warp PPDIFFUSE_CUDA_CONV_EPILOGUE=pass PPDIFFUSE_CUDA_CONV_LAYOUT=nhwc" \
        "PPDIFFUSE_CUDA_CONV_ALGO=timed" "PPDIFFUSE_CUDA_CONV_API=graph" \
        "PPDIFFUSE_CUDA_CONV_API=graph PPDIFFUSE_CUDA_CONV_ALGO=timed" \
        "PPDIFFUSE_CUDA_GEMM_ALGO=timed" "PPDIFFUSE_CUDA_CONV_GEMM=64" \
        "PPDIFFUSE_CUDA_CONV_GEMM=256" "PPDIFFUSE_CUDA_PDL=on"; do
      blog=$work/bench-$(log_slug "$way").log
      # shellcheck disable=SC2086  # $way is a list of assignments
      bench_wanted "gpu-bench f16, $way" \
        && runs "gpu-bench f16, $way" "$blog" 300 \
          env $way G_MESSAGES_DEBUG=all "$build/tests/bench/gpu-bench" \
          --dtype f16 $bench_size \
        && { grep -E '^(SD-Turbo|small|TAESD|graph nodes|launch floor|first run)' "$blog" | indent
          case $way in
            *GEMM_ALGO=timed*)
              grep -E 'cuda gemm trials' "$blog" \
                | sed 's/.*cuda gemm trials/cuda gemm trials/' | sort \
                | uniq | cut -c1-600 | indent ;;
            *CONV_API=graph*)
              grep -E 'cuda conv graph' "$blog" \
                | sed 's/.*cuda conv graph/cuda conv graph/' | sort | uniq \
                | cut -c1-800 | indent ;;
            *CONV_ALGO=timed*)
              grep -E 'cuda conv( trials)?:' "$blog" \
                | sed 's/.*cuda conv/cuda conv/' | sort | uniq \
                | cut -c1-800 | indent ;;
          esac
          sed -n '/^profile of/,$p' "$blog" \
            | grep -v -E '(INFO|DEBUG|MESSAGE)' | indent
          bench_row "f16, $way" "$blog"
          pass "gpu-bench f16, $way ran"; }
    done
    # The defaults once more, after the ways: how far the run's figures
    # drifted (a GPU warming, its clocks); bench-compare.awk holds each way
    # to beat the defaults by more than that too.
    blog=$work/bench-f16-again.log
    bench_wanted "gpu-bench f16, the defaults again" \
      && runs "gpu-bench f16, the defaults again" "$blog" 300 \
        env G_MESSAGES_DEBUG=all "$build/tests/bench/gpu-bench" --dtype f16 \
        $bench_size \
      && { grep -E '^(SD-Turbo|small|TAESD|frames/s)' "$blog" | indent
        bench_row "defaults again, f16" "$blog"
        pass "gpu-bench f16, the defaults again ran"; }
    # The ways of settings alone that were faster than the defaults and
    # slower on nothing, together (bench-compare.awk, best first, one that
    # would change a setting already taken left out): the figures of the
    # defaults the run argues for, not only of each change alone. The
    # startup step runs the element with them ($work/winners).
    if [ -s "$work/bench-summary" ]; then
      awk -v winners="$work/winners" -f "$here/bench-compare.awk" \
        "$work/bench-summary" >/dev/null
    fi
    together=''
    n_won=0
    if [ -f "$work/winners" ]; then
      together=$(tr '\n' ' ' <"$work/winners" | sed 's/ $//')
      n_won=$(grep -c . "$work/winners")
    fi
    if [ "$n_won" -ge 2 ]; then
      blog=$work/bench-together.log
      # shellcheck disable=SC2086  # $together is a list of assignments
      bench_wanted "gpu-bench f16, the faster ways together" \
        && runs "gpu-bench f16, the faster ways together" "$blog" 300 \
          env $together G_MESSAGES_DEBUG=all "$build/tests/bench/gpu-bench" \
          --dtype f16 $bench_size \
        && { echo "  with $together:"
          grep -E '^(SD-Turbo|small|TAESD|frames/s|graph nodes|launch floor)' "$blog" | indent
          sed -n '/^profile of/,$p' "$blog" \
            | grep -v -E '(INFO|DEBUG|MESSAGE)' | indent
          bench_row "f16 together: $together" "$blog"
          pass "gpu-bench f16, the faster ways together ran"; }
    fi
    # The kernels with the faster ways (one or more), as the defaults'.
    if [ "$n_won" -ge 1 ]; then
      # shellcheck disable=SC2086  # $together is a list of assignments
      trace_kernels "gpu-bench f16, kernels with the faster ways together" \
        "$work/bench-kernels-together.log" $together
    fi
    # Every way side by side: the figures the defaults are chosen by.
    if [ -s "$work/bench-summary" ]; then
      echo "  gpu-bench side by side (graphs; ms, and frames/s one GPU could sustain at 1 step):"
      printf '%9s %9s %9s %8s %8s %8s  %s\n' "UNet ms" "TAESD ms" \
          "batch4 ms" "fps" "fps fb2" "fps fb4" "way" | indent
      indent <"$work/bench-summary"
      # Each f16 way against the defaults, and the candidates for one.
      awk -f "$here/bench-compare.awk" "$work/bench-summary" | indent
    fi
    # What the timed ways chose and kept, by kind (conv, conv-graph,
    # gemm): the files name each shape and its choice.
    if [ -d "$PPDIFFUSE_CUDA_TUNING_CACHE" ]; then
      echo "  timed choices kept in $PPDIFFUSE_CUDA_TUNING_CACHE:" \
        "$(ls "$PPDIFFUSE_CUDA_TUNING_CACHE" | sed 's/-[0-9a-f]*$//' \
          | sort | uniq -c | awk '{printf "%s%s %s", (NR > 1 ? ", " : ""), $1, $2}')"
    fi
    # diffusers' own UNet and TAESD, eager, on the same GPU in the same
    # run: the baseline the targets are set against.
    # shellcheck disable=SC2086  # the command may carry an env prefix
    if $torch_python -c 'import sys, torch, diffusers
sys.exit(0 if torch.cuda.is_available() else "torch sees no CUDA device")' >"$work/torch.log" 2>&1; then
      # shellcheck disable=SC2086
      bench_wanted "diffusers eager (f16, bf16, f32)" \
        && runs "diffusers eager (f16, bf16, f32)" "$work/diffusers.log" 600 \
          $torch_python "$src/tests/bench/diffusers-unet.py" --device cuda \
          --dtype f16,bf16,f32 --runs 10 --taesd \
        && { grep -E '^(diffusers|UNet)' "$work/diffusers.log" | indent
          pass "diffusers eager ran"; }
      # What f16 and bf16 cost diffusers' own UNet on the full-size
      # fixtures: the basis of test-kernels-scale's 16-bit bounds (about
      # twice these), measured again on this GPU.
      # shellcheck disable=SC2086
      bench_wanted "diffusers' own 16-bit error on the fixtures" \
        && runs "diffusers' own 16-bit error on the fixtures" \
          "$work/dtype-error.log" 300 \
          $torch_python "$src/tests/reference/scale_dtype_error.py" \
          --device cuda --dtype f16,bf16 \
        && { grep -E '^diffusers' "$work/dtype-error.log" | indent
          pass "diffusers' own 16-bit error measured"; }
    else
      note_skip "diffusers eager: no torch with CUDA and diffusers in $torch_python ($(tail -1 "$work/torch.log"))"
    fi
    # A latent's hop between two ranks of this host through the transport
    # alone: on the chunk lanes, over MPI with the doorbells, over MPI
    # (docs/perf.md, "Chunk lanes").
    bench_wanted "transport hop alone (hop-bench)" \
      && runs "transport hop alone (hop-bench)" "$work/hop-alone.log" 120 \
        "$build/tests/bench/hop-bench" --iters 1000 \
        --sizes 32768,65536,262144 \
      && { grep -E '^ +(bytes|[0-9])' "$work/hop-alone.log" | indent
        pass "transport hop alone measured"; }
    # The same inside the element's mesh (65 KB chunks, one in flight, the
    # MPI plane), with and without the lanes: the step from W to W + 1 is
    # one hop and a worker's hand-offs (docs/perf.md, "Doorbells").
    for nl in 1 0; do
      bench_wanted "transport hop, PPDIFFUSE_LANES=$nl" \
        && runs "transport hop, PPDIFFUSE_LANES=$nl" "$work/hop-lanes-$nl.log" 120 \
          env PPDIFFUSE_BACKEND=cpu PPDIFFUSE_LANES="$nl" \
          "$build/tests/bench/ppdiffuse-bench" --steps 3 --step-ms 1 \
          --frames 300 --max-ranks 3 --width 85 --height 64 \
          --max-in-flight 1 \
        && { grep -E '^ +[0-9] ' "$work/hop-lanes-$nl.log" | indent
          pass "transport hop measured (PPDIFFUSE_LANES=$nl)"; }
    done
    # The temporal feature bank's work at SD-Turbo's shapes on the
    # device (its ops' kernels) and on this host's cores (the CPU
    # backend's threads): what a step with temporal=feature-bank adds
    # (docs/perf.md).  Each layer's digest is printed beside its time,
    # and one more frame's ops with theirs (--profile: which of the
    # bank's ops the time goes to).  Emulated, its small layers: the
    # path, not the time.
    for bb in "$BE" cpu; do
      bench_wanted "feature bank on $bb (bank-bench)" \
        && runs "feature bank on $bb (bank-bench)" \
          "$work/bank-bench-$bb.log" 120 "$build/tests/bench/bank-bench" \
          --backend "$bb" --profile ${emulated:+--small} \
        && { indent <"$work/bank-bench-$bb.log"
          pass "feature bank measured on $bb"; }
    done
  fi
}

# ---- sanitizer -------------------------------------------------------------

step_sanitizer() {
  current=sanitizer
  say "sanitizer: compute-sanitizer memcheck on test-ops and the fixtures (f32, f16, bf16), racecheck and synccheck on the 16-bit ops"
  cs=$(command -v compute-sanitizer 2>/dev/null)
  [ -z "$cs" ] && [ -x "$cuda_root/bin/compute-sanitizer" ] && cs=$cuda_root/bin/compute-sanitizer
  for c in /usr/local/cuda*/bin/compute-sanitizer \
      /usr/local/cuda*/compute-sanitizer/compute-sanitizer; do
    [ -z "$cs" ] && [ -x "$c" ] && cs=$c
  done
  if [ -n "$dry$emulated" ]; then
    note_skip "compute-sanitizer (no device)"
  elif [ -z "$cs" ]; then
    note_skip "no compute-sanitizer (PATH, $cuda_root/bin, /usr/local/cuda*/bin): memcheck not run"
  else
    # sanitize TOOL NAME LIMIT CMD...: compute-sanitizer's TOOL (memcheck,
    # racecheck: shared-memory hazards, synccheck: barriers a thread
    # misses) reports nothing.
    sanitize() {
      _t=$1 _n="$1 $2" _l=$3
      shift 3
      exec_to "$work/sanitizer.log" "$_l" "$cs" --tool "$_t" \
        --error-exitcode 9 --print-limit 10 "$@"
      summary=$(grep -m 1 -E '(ERROR|RACECHECK) SUMMARY' "$work/sanitizer.log")
      if [ "$st" = "$NOT_RUN" ]; then
        note_skip "$_n: not run, past PP_GPU_END_S=$end_s s"
      elif [ "$st" = 0 ] && echo "$summary" \
          | grep -Eq 'ERROR SUMMARY: 0 errors|RACECHECK SUMMARY: 0 hazards'; then
        pass "$_n: $summary"
      else
        bad "$_n: $(status_text "$st" "$_l"), ${summary:-no summary}"
        grep -m 8 -E 'Invalid|Program hit|at 0x|by thread|Saved host|[Hh]azard|Barrier' \
          "$work/sanitizer.log" | cut -c1-300 | indent
      fi
    }
    memcheck() { sanitize memcheck "$@"; }
    memcheck "test-ops" 600 "$tool" test-ops --backend cuda
    for dt in f32 f16 bf16; do
      for fam in sd15 turbo; do
        m=$data/unet-$fam-tiny
        memcheck "unet-$fam-tiny $dt" 300 "$tool" unet --backend cuda \
          --dtype "$dt" --model "$m" --sample "$m/sample.npy" \
          --timestep "$(cat "$m/timestep.txt")" \
          --encoder-hidden-states "$m/encoder_hidden_states.npy" \
          --out "$work/cs.npy"
      done
      v=$data/taesd-tiny
      memcheck "taesd-tiny encode $dt" 300 "$tool" vae-encode --backend cuda \
        --dtype "$dt" --model "$v" --image "$v/image.npy" --out "$work/cs.npy"
      memcheck "taesd-tiny decode $dt" 300 "$tool" vae-decode --backend cuda \
        --dtype "$dt" --model "$v" --latents "$v/latents.npy" --out "$work/cs.npy"
    done
    # The ways the defaults would take next (candidate_ways), whose kernels
    # (the norms' other ways among them) memcheck has not seen above: the
    # tiny turbo UNet and TAESD in f16, a timed way's trials run (nothing
    # kept taken).
    ways="$(candidate_ways) PPDIFFUSE_CUDA_TUNING_CACHE=off"
    m=$data/unet-turbo-tiny
    v=$data/taesd-tiny
    # shellcheck disable=SC2086  # $ways is a list of assignments
    memcheck "unet-turbo-tiny f16, with $ways" 300 env $ways "$tool" unet \
      --backend cuda --dtype f16 --model "$m" --sample "$m/sample.npy" \
      --timestep "$(cat "$m/timestep.txt")" \
      --encoder-hidden-states "$m/encoder_hidden_states.npy" \
      --out "$work/cs.npy"
    # shellcheck disable=SC2086
    memcheck "taesd-tiny decode f16, with $ways" 300 env $ways "$tool" \
      vae-decode --backend cuda --dtype f16 --model "$v" \
      --latents "$v/latents.npy" --out "$work/cs.npy"
    # Every op on 16-bit channels-last activations, whose norms and
    # softmax reduce in shared memory between barriers: the emulation runs
    # a block's threads in two orders to catch a missing barrier, racecheck
    # and synccheck the device's own scheduling; at the defaults and with
    # each norm's other ways.  Only the backend's own kernels (every name
    # ends in _kernel), not the libraries'.
    acts=$build/tests/kernels/ops/test-kernels-act-dtypes
    for w in "" "PPDIFFUSE_CUDA_GROUP_NORM=split PPDIFFUSE_CUDA_LAYER_NORM=warp" \
        "PPDIFFUSE_CUDA_GROUP_NORM=vector PPDIFFUSE_CUDA_LAYER_NORM=block" \
        "PPDIFFUSE_CUDA_GROUP_NORM=whole PPDIFFUSE_CUDA_LAYER_NORM=octet" \
        "PPDIFFUSE_CUDA_GROUP_NORM=grid"; do
      for t in racecheck synccheck; do
        # shellcheck disable=SC2086  # $w is a list of assignments
        sanitize "$t" "act-dtypes${w:+, $w}" 300 --kernel-regex kns=_kernel \
          env $w "$acts"
      done
    done
  fi
}

# ---- the steps, in the order PP_GPU_STEPS names them ----------------------

for s in $steps; do
  case " $all_steps " in
    *" $s "*) may_start "$s" && "step_$s" ;;
    *) current=setup
      bad "no step '$s' (the steps: $all_steps)" ;;
  esac
done
finish
