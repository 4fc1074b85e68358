/* tests/kernels/cuda-emu: the runtime of include/cuda_runtime.h.
 *
 * A block's threads are fibers, run one at a time: the first ready thread
 * in the order (ascending thread index, or descending) runs until it
 * finishes or waits.  A warp shuffle waits for the warp's 32 lanes, a
 * barrier for all the block's threads; the last to arrive releases them
 * and the order picks again.  So a warp that completes a shuffle runs on
 * before the warps after it have started: a value read from shared memory
 * without the barrier that should order it is a stale one, and a
 * different one in each order, which the tests compare.  A thread that
 * finishes without waiting hands its stack to the next thread to start:
 * a kernel without barriers runs without a single switch.
 *
 * A switch on x86-64 is a few instructions: the callee-saved registers
 * pushed on the stack being left, the stack pointers swapped.  No system
 * call (glibc's swapcontext makes one to save the signal mask, which made
 * the test four times slower), and nothing AddressSanitizer intercepts
 * (its swapcontext interceptor warns of false positives, in the log that
 * fails a sanitizer run; the switches are announced to it instead).
 * Elsewhere, ucontext.
 *
 * A cooperative launch's (EMU_LAUNCH_TOGETHER) thread may wait for a
 * word other blocks change (emu_wait_change): its block is put aside, its
 * threads' stacks kept, once no thread of it can go on, and the next
 * block runs; after the last, each block put aside whose word changed goes
 * on, pass after pass, until all finish (a pass in which no block's word
 * changed is a deadlock, named).  Shared memory, one copy here, is the
 * block's that ran last: a block must not read across such a wait what
 * it wrote before it.
 *
 * One launch at a time: every launch runs under the lock of the deferred
 * streams' queues, whether a queue's node or at once.  A launch on a
 * stream being captured is recorded as a node of its graph (emu-graph.h),
 * run when the graph is launched; one on another stream waits in the
 * stream's queue until the host waits for it (emu_deferred). */
#include "cuda_runtime.h"
#include "emu-graph.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <climits>
#include <ctime>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#ifdef EMU_ASAN
#include <pthread.h>
#include <sanitizer/common_interface_defs.h>
#endif

uint3 threadIdx, blockIdx;
dim3 blockDim, gridDim;

#if defined(__x86_64__) && defined(__ELF__)
#define EMU_SWITCH_ASM 1
/* Pushes the callee-saved registers, stores the stack pointer in *@save,
 * loads @load and pops the registers saved there. */
extern "C" void emu_switch_stack (void **save, void *load);
asm (R"(
    .text
    .globl emu_switch_stack
    .type emu_switch_stack, @function
emu_switch_stack:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size emu_switch_stack, .-emu_switch_stack
)");
#else
#include <ucontext.h>
#endif

namespace {

constexpr unsigned WARP = 32;
/* The driver's limits on a launch. */
constexpr unsigned MAX_THREADS = 1024;
constexpr unsigned MAX_BLOCK_XY = 1024;
constexpr unsigned MAX_BLOCK_Z = 64;
constexpr unsigned MAX_GRID_X = 0x7fffffffu;
constexpr unsigned MAX_GRID_YZ = 65535;
constexpr size_t MAX_SHARED_BYTES = 48 * 1024;
/* A thread's stack (an inaccessible page below it turns an overflow into
 * a crash); AddressSanitizer's redzones make the frames larger. */
#ifdef EMU_ASAN
constexpr size_t STACK_BYTES = 256 * 1024;
#else
constexpr size_t STACK_BYTES = 64 * 1024;
#endif

/* A suspended context. */
struct Context
{
#ifdef EMU_SWITCH_ASM
  void *sp;
#else
  ucontext_t uc;
#endif
};

/* A context that starts @entry on @stack; @entry never returns. */
void
context_init (Context *c, void *stack, size_t bytes, void (*entry) ())
{
#ifdef EMU_SWITCH_ASM
  /* What emu_switch_stack pops: six registers, then @entry as the return
   * address, which it enters with the stack as a call leaves it (16-byte
   * aligned before the call, a null return address pushed). */
  const uintptr_t end = (uintptr_t) stack + bytes;
  void **top = (void **) (end & ~(uintptr_t) 15);

  top[-1] = nullptr;
  top[-2] = (void *) entry;
  for (int r = 3; r <= 8; r++)
    top[-r] = nullptr;
  c->sp = top - 8;
#else
  getcontext (&c->uc);
  c->uc.uc_stack.ss_sp = stack;
  c->uc.uc_stack.ss_size = bytes;
  c->uc.uc_link = nullptr;
  makecontext (&c->uc, entry, 0);
#endif
}

void
context_switch (Context *from, Context *to)
{
#ifdef EMU_SWITCH_ASM
  emu_switch_stack (&from->sp, to->sp);
#else
  swapcontext (&from->uc, &to->uc);
#endif
}

struct Fiber
{
  Context context;
  void *stack;                  /* lowest address */
  size_t stack_bytes;
  int thread;                   /* the thread it runs; -1: free */
};

/* The block being run. */
struct Block
{
  const char *kernel;
  const std::function<void ()> *body;
  /* Every thread must call emu_grid_wait (EMU_LAUNCH_WAITS); each
   * thread's call so far. */
  bool must_wait;
  bool waited[MAX_THREADS];
  /* A cooperative launch's (EMU_LAUNCH_TOGETHER): threads may spin. */
  bool together;
  /* The threads waiting for a word other blocks change
   * (emu_wait_change): how many, and each one's word (NULL: none) and the
   * value it waits to see change. */
  unsigned spinning;
  const volatile unsigned *spin_word[MAX_THREADS];
  unsigned spin_value[MAX_THREADS];
  unsigned threads;
  int current;                  /* the running thread */
  Fiber *running;               /* and its fiber */
  Fiber *fiber[MAX_THREADS];    /* NULL: not started */
  /* Ready threads, by position in the order. */
  uint64_t ready[MAX_THREADS / 64];
  unsigned done, at_barrier, at_shuffle[MAX_THREADS / WARP];
  uint64_t shuffle_in[MAX_THREADS], shuffle_out[MAX_THREADS];
  unsigned shuffle_src[MAX_THREADS];
  /* Each thread's threadIdx, worked out once a launch: a thread enters
   * at every switch, and three divisions there were most of a switch. */
  uint3 index[MAX_THREADS];
};

Block blk;
bool descending;
/* The launching thread's own context. */
Fiber launcher = { {}, nullptr, 0, -1 };
std::vector<std::unique_ptr<Fiber>> fibers;
std::vector<Fiber *> free_fibers;
/* Per host thread, as the runtime's. */
thread_local cudaError_t last_error = cudaSuccess;

[[noreturn]] void
fail (const char *format, ...)
{
  va_list args;

  fprintf (stderr, "cuda-emu: kernel %s, block (%u,%u,%u), "
      "thread (%u,%u,%u): ", blk.kernel, blockIdx.x, blockIdx.y, blockIdx.z,
      threadIdx.x, threadIdx.y, threadIdx.z);
  va_start (args, format);
  vfprintf (stderr, format, args);
  va_end (args);
  fputc ('\n', stderr);
  abort ();
}

/* The functions below run at every switch between threads; they touch
 * only the block's bookkeeping, which AddressSanitizer leaves alone
 * (EMU_UNCHECKED, emu-asan.h). */
/* A thread's position in the order, and a position's thread. */
EMU_UNCHECKED unsigned
position (unsigned t)
{
  return descending ? blk.threads - 1 - t : t;
}

EMU_UNCHECKED void
set_ready (unsigned t)
{
  const unsigned p = position (t);

  blk.ready[p / 64] |= (uint64_t) 1 << (p % 64);
}

EMU_UNCHECKED void
clear_ready (unsigned t)
{
  const unsigned p = position (t);

  blk.ready[p / 64] &= ~((uint64_t) 1 << (p % 64));
}

EMU_UNCHECKED int
first_ready ()
{
  for (unsigned w = 0; w < (blk.threads + 63) / 64; w++)
    if (blk.ready[w] != 0)
      return (int) position (w * 64 + __builtin_ctzll (blk.ready[w]));
  return -1;
}

/* With no thread ready: -1 when the block has finished, -2 when a
 * thread spins (the block is put aside), else the threads waiting must
 * all be at the barrier, which lets them go. */
EMU_UNCHECKED int
release_barrier ()
{
  if (blk.done == blk.threads)
    return -1;
  if (blk.spinning > 0)
    return -2;
  if (blk.at_barrier != blk.threads)
    fail ("deadlock: of %u threads, %u wait at the barrier, %u at a warp "
        "shuffle, %u have finished (a barrier or a shuffle that not all "
        "reach)", blk.threads, blk.at_barrier,
        blk.threads - blk.at_barrier - blk.done, blk.done);
  for (unsigned t = 0; t < blk.threads; t++)
    set_ready (t);
  blk.at_barrier = 0;
  return first_ready ();
}

EMU_UNCHECKED void
enter (int t, Fiber *f)
{
  blk.current = t;
  blk.running = f;
  threadIdx = blk.index[t];
}

void
switch_fiber (Fiber *from, Fiber *to)
{
#ifdef EMU_ASAN
  void *fake_stack = nullptr;

  __sanitizer_start_switch_fiber (&fake_stack, to->stack, to->stack_bytes);
#endif
  context_switch (&from->context, &to->context);
#ifdef EMU_ASAN
  __sanitizer_finish_switch_fiber (fake_stack, nullptr, nullptr);
#endif
}

void fiber_main ();

Fiber *
new_fiber ()
{
  const size_t page = (size_t) sysconf (_SC_PAGESIZE);
  auto f = std::make_unique<Fiber> ();
  char *m = (char *) mmap (nullptr, STACK_BYTES + page,
      PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

  if (m == MAP_FAILED || mprotect (m, page, PROT_NONE) != 0)
    fail ("no memory for a thread's stack");
  f->stack = m + page;
  f->stack_bytes = STACK_BYTES;
  f->thread = -1;
  context_init (&f->context, f->stack, f->stack_bytes, fiber_main);
  fibers.push_back (std::move (f));
  return fibers.back ().get ();
}

/* Hands the processor from @self, whose thread waits (or, @self free, has
 * finished), to the first ready thread.  Returns when @self's thread may
 * go on, or, @self free, with a thread for it to start. */
EMU_UNCHECKED void
run_next (Fiber *self)
{
  const bool self_free = self != &launcher && self->thread < 0;
  int t = first_ready ();
  Fiber *to;

  if (t < 0)
    t = release_barrier ();
  if (t < 0) {
    to = &launcher;             /* the block has finished, or waits */
  } else if (blk.fiber[t] != nullptr) {
    to = blk.fiber[t];
  } else {
    if (self_free) {
      to = self;
    } else if (!free_fibers.empty ()) {
      to = free_fibers.back ();
      free_fibers.pop_back ();
    } else {
      to = new_fiber ();
    }
    to->thread = t;
    blk.fiber[t] = to;
  }
  if (t >= 0)
    enter (t, to);
  if (to == self)
    return;
  if (self_free)
    free_fibers.push_back (self);
  switch_fiber (self, to);
}

void
fiber_main ()
{
  Fiber *self = blk.running;

#ifdef EMU_ASAN
  __sanitizer_finish_switch_fiber (nullptr, nullptr, nullptr);
#endif
  for (;;) {
    const int t = self->thread;

    (*blk.body) ();
    if (blk.must_wait && !blk.waited[t])
      fail ("finished without waiting for the grids before it: a kernel "
          "launched by pp_cuda_launch must call pp_cuda_wait_prior first");
    blk.done++;
    clear_ready (t);
    self->thread = -1;
    run_next (self);
  }
}

/* After the block ran as far as it could: false when it was put aside
 * (a thread spinning), else true, every thread finished. */
bool
block_finished ()
{
  if (blk.spinning > 0)
    return false;
  if (blk.done != blk.threads)
    fail ("the block ended with %u of %u threads finished", blk.done,
        blk.threads);
  return true;
}

/* Runs the block set up in blk from its start; false when it was put
 * aside, a thread spinning. */
bool
run_block ()
{
  blk.done = 0;
  blk.at_barrier = 0;
  blk.spinning = 0;
  memset (blk.spin_word, 0, blk.threads * sizeof blk.spin_word[0]);
  memset (blk.at_shuffle, 0, sizeof blk.at_shuffle);
  memset (blk.ready, 0, sizeof blk.ready);
  if (blk.must_wait)
    memset (blk.waited, 0, blk.threads * sizeof blk.waited[0]);
  for (unsigned t = 0; t < blk.threads; t++) {
    blk.fiber[t] = nullptr;
    set_ready (t);
  }
  run_next (&launcher);
  return block_finished ();
}

/* A block put aside goes on where a waiting thread's word changed, those
 * threads ready again; *@moved tells whether one did.  False when it is
 * put aside again. */
bool
resume_block (bool *moved)
{
  *moved = false;
  for (unsigned t = 0; t < blk.threads; t++)
    if (blk.spin_word[t] != nullptr && *blk.spin_word[t] != blk.spin_value[t]) {
      blk.spin_word[t] = nullptr;
      blk.spinning--;
      set_ready (t);
      *moved = true;
    }
  if (!*moved)
    return false;
  run_next (&launcher);
  return block_finished ();
}

/* A block put aside, and where it is in the grid. */
struct Aside
{
  Block block;
  uint3 index;
};

}  // namespace

EMU_UNCHECKED void
emu_grid_wait ()
{
  blk.waited[blk.current] = true;
}

EMU_UNCHECKED void
emu_wait_change (const volatile unsigned *word, unsigned value)
{
  const int t = blk.current;

  if (*word != value)
    return;
  if (!blk.together)
    fail ("a thread waits for other blocks in a launch that is not "
        "cooperative: its blocks need not be resident at once, and it may "
        "wait for one that cannot start (launch it with "
        "PP_CUDA_LAUNCH_TOGETHER)");
  blk.spin_word[t] = word;
  blk.spin_value[t] = value;
  blk.spinning++;
  clear_ready (t);
  run_next (blk.running);
}

EMU_UNCHECKED void
__syncthreads ()
{
  const int t = blk.current;

  blk.at_barrier++;
  clear_ready (t);
  run_next (blk.running);
}

EMU_UNCHECKED uint64_t
emu_shuffle_xor (unsigned mask, uint64_t bits, int lane_mask, int width)
{
  const unsigned t = blk.current, first = t / WARP * WARP;

  if (mask != 0xffffffffu || width != (int) WARP)
    fail ("warp shuffle over part of a warp (mask %#x, width %d)", mask,
        width);
  if (blk.threads % WARP != 0)
    fail ("warp shuffle in a block of %u threads: a partial warp",
        blk.threads);
  if (lane_mask < 0 || lane_mask >= (int) WARP)
    fail ("warp shuffle lane mask %d", lane_mask);
  blk.shuffle_in[t] = bits;
  blk.shuffle_src[t] = first + ((t % WARP) ^ (unsigned) lane_mask);
  clear_ready (t);
  if (++blk.at_shuffle[t / WARP] == WARP) {
    for (unsigned l = first; l < first + WARP; l++) {
      blk.shuffle_out[l] = blk.shuffle_in[blk.shuffle_src[l]];
      set_ready (l);
    }
    blk.at_shuffle[t / WARP] = 0;
  }
  run_next (blk.running);
  return blk.shuffle_out[t];
}

/* Graphs */

struct EmuGraph
{
  struct Node
  {
    void (*run) (void *);
    void *data;
    void (*free_data) (void *);
  };
  std::vector<Node> nodes;
  int refs = 1;
  bool valid = true;
};

extern "C" EmuGraph *
emu_graph_new (void)
{
  return new EmuGraph;
}

extern "C" void
emu_graph_add (EmuGraph *graph, void (*run) (void *), void *data,
    void (*free_data) (void *))
{
  graph->nodes.push_back (EmuGraph::Node { run, data, free_data });
}

extern "C" void
emu_graph_invalidate (EmuGraph *graph)
{
  graph->valid = false;
}

extern "C" int
emu_graph_valid (const EmuGraph *graph)
{
  return graph->valid;
}

extern "C" void
emu_graph_run (EmuGraph *graph)
{
  for (const EmuGraph::Node &n : graph->nodes)
    n.run (n.data);
}

extern "C" void
emu_graph_ref (EmuGraph *graph)
{
  graph->refs++;
}

extern "C" void
emu_graph_unref (EmuGraph *graph)
{
  if (graph == nullptr || --graph->refs > 0)
    return;
  for (const EmuGraph::Node &n : graph->nodes)
    if (n.free_data != nullptr)
      n.free_data (n.data);
  delete graph;
}

/* Deferred streams (emu-graph.h): each stream's queue of nodes, all of
 * them under one lock, which a drain holds while it runs them (a wait
 * node drains another stream from inside a drain). */

struct EmuQueue
{
  std::deque<EmuGraph::Node> nodes;
  unsigned long given = 0, ran = 0;
};

static std::recursive_mutex queues_lock;
/* Every stream made: they live as long as the process (the backend
 * destroys none), and stay reachable from here for a leak checker, which
 * runs after the static destructors (so the list itself is never
 * destroyed). */
static std::vector<EmuStreamState *> &deferred_streams =
    *new std::vector<EmuStreamState *>;

extern "C" void
emu_stream_register (EmuStreamState *stream)
{
  const std::lock_guard<std::recursive_mutex> hold (queues_lock);

  stream->queue = new EmuQueue;
  deferred_streams.push_back (stream);
}

extern "C" int
emu_deferred (void)
{
  static const int on = [] {
    const char *v = getenv ("PP_CUDA_EMU_DEFER");

    return v == NULL || strcmp (v, "0") != 0;
  } ();

  return on;
}

extern "C" void
emu_stream_enqueue (EmuStreamState *stream, void (*run) (void *), void *data,
    void (*free_data) (void *))
{
  const std::lock_guard<std::recursive_mutex> hold (queues_lock);

  stream->queue->nodes.push_back (EmuGraph::Node { run, data, free_data });
  stream->queue->given++;
}

extern "C" unsigned long
emu_stream_position (EmuStreamState *stream)
{
  const std::lock_guard<std::recursive_mutex> hold (queues_lock);

  return stream->queue->given;
}

extern "C" void
emu_stream_drain (EmuStreamState *stream, unsigned long upto)
{
  const std::lock_guard<std::recursive_mutex> hold (queues_lock);
  EmuQueue *q = stream->queue;

  while (q->ran < upto && !q->nodes.empty ()) {
    /* Taken off before it runs: a node that drains again (a wait on
     * another stream's event) finds the queue consistent. */
    const EmuGraph::Node n = q->nodes.front ();

    q->nodes.pop_front ();
    n.run (n.data);
    if (n.free_data != nullptr)
      n.free_data (n.data);
    q->ran++;
  }
}

extern "C" void
emu_drain_all (void)
{
  const std::lock_guard<std::recursive_mutex> hold (queues_lock);

  /* One pass: a node adds no work to any queue (a wait drains another
   * stream in place), so a queue drained stays empty. */
  for (EmuStreamState *s : deferred_streams)
    emu_stream_drain (s, ULONG_MAX);
}

extern "C" void
emu_run_now (void (*run) (void *), void *data)
{
  const std::lock_guard<std::recursive_mutex> hold (queues_lock);

  emu_drain_all ();
  run (data);
}

/* A launch kept for a graph: its configuration and its arguments (the
 * launch's closure copies them, as a kernel node keeps its parameters). */
struct LaunchNode
{
  dim3 grid, block;
  size_t shmem;
  const char *kernel;
  std::function<void ()> body;
  unsigned flags;
};

static void launch_now (dim3 grid, dim3 block, size_t shmem,
    const char *kernel, const std::function<void ()> &body, unsigned flags);

static void
run_launch_node (void *data)
{
  LaunchNode *n = (LaunchNode *) data;

  launch_now (n->grid, n->block, n->shmem, n->kernel, n->body, n->flags);
}

static void
free_launch_node (void *data)
{
  delete (LaunchNode *) data;
}

extern "C" size_t
emu_graph_size (const EmuGraph *graph)
{
  return graph->nodes.size ();
}

extern "C" const void *
emu_graph_node (const EmuGraph *graph, size_t i)
{
  return &graph->nodes[i];
}

extern "C" int
emu_graph_node_is_launch (const void *node)
{
  return ((const EmuGraph::Node *) node)->run == run_launch_node;
}

static void
record_launch (EmuGraph *graph, dim3 grid, dim3 block, size_t shmem,
    const char *kernel, const std::function<void ()> &body, unsigned flags)
{
  emu_graph_add (graph, run_launch_node,
      new LaunchNode { grid, block, shmem, kernel, body, flags },
      free_launch_node);
}

/* emu_kernel_runs's counts, by kernel name. */
static std::mutex runs_lock;
static std::map<std::string, unsigned long> runs;

unsigned long
emu_kernel_runs (const char *prefix)
{
  const std::lock_guard<std::mutex> hold (runs_lock);
  const std::string p (prefix);
  unsigned long n = 0;

  for (auto it = runs.lower_bound (p);
      it != runs.end () && it->first.compare (0, p.size (), p) == 0; ++it)
    n += it->second;
  return n;
}

void
emu_count_launch (const char *name)
{
  const std::lock_guard<std::mutex> hold (runs_lock);

  runs[name]++;
}

/* At exit, with $PP_CUDA_EMU_LAUNCHES set to a kernel name's prefix, the
 * launches of its kernels on stderr ("emulated launches of PREFIX: N"):
 * which of the backend's ways a program's ops took, for tests that run
 * the module from another program.  Set to "all", every kernel's count, a
 * line each, and their total: how many launches a program's work took.
 * Declared after the counts, so it goes before them. */
static struct LaunchReport
{
  ~LaunchReport ()
  {
    const char *prefix = getenv ("PP_CUDA_EMU_LAUNCHES");
    unsigned long total = 0;

    if (prefix == NULL || *prefix == '\0')
      return;
    if (strcmp (prefix, "all") != 0) {
      fprintf (stderr, "emulated launches of %s: %lu\n", prefix,
          emu_kernel_runs (prefix));
      return;
    }
    const std::lock_guard<std::mutex> hold (runs_lock);
    for (const auto &r : runs) {
      fprintf (stderr, "emulated launches of %s: %lu\n", r.first.c_str (),
          r.second);
      total += r.second;
    }
    fprintf (stderr, "emulated launches in all: %lu\n", total);
  }
} launch_report;

const char *
emu_kernel_name (const char *name)
{
  /* A map's values stay where they are as it grows. */
  static std::mutex lock;
  static std::map<std::string, std::string> names;
  const std::lock_guard<std::mutex> hold (lock);
  const size_t len = strlen (name);
  std::string &kept = names[name];

  if (kept.empty ())
    kept = len >= 2 && name[0] == '(' && name[len - 1] == ')'
        ? std::string (name + 1, len - 2) : std::string (name);
  return kept.c_str ();
}

void
emu_launch (dim3 grid, dim3 block, size_t shmem, cudaStream_t stream,
    const char *kernel, const std::function<void ()> &body, unsigned flags)
{
  const unsigned long threads = (unsigned long) block.x * block.y * block.z;
  const unsigned long long blocks = (unsigned long long) grid.x * grid.y
      * grid.z;

  (void) stream;
  if (threads == 0 || threads > MAX_THREADS || block.x > MAX_BLOCK_XY
      || block.y > MAX_BLOCK_XY || block.z > MAX_BLOCK_Z || blocks == 0
      || grid.x > MAX_GRID_X || grid.y > MAX_GRID_YZ
      || grid.z > MAX_GRID_YZ || shmem > MAX_SHARED_BYTES) {
    fprintf (stderr, "cuda-emu: kernel %s: invalid launch: grid (%u,%u,%u), "
        "block (%u,%u,%u), %zu bytes of shared memory\n", kernel, grid.x,
        grid.y, grid.z, block.x, block.y, block.z, shmem);
    last_error = cudaErrorInvalidConfiguration;
    return;
  }
  if ((flags & EMU_LAUNCH_TOGETHER) != 0
      && blocks > (unsigned long long) emu_resident_blocks ((unsigned)
          threads)) {
    fprintf (stderr, "cuda-emu: kernel %s: cooperative launch of %llu "
        "blocks of %lu threads, where the device holds %d at once\n",
        kernel, blocks, threads, emu_resident_blocks ((unsigned) threads));
    last_error = cudaErrorCooperativeLaunchTooLarge;
    return;
  }
  if (stream != nullptr && ((EmuStreamState *) stream)->capture != nullptr) {
    record_launch (((EmuStreamState *) stream)->capture, grid, block, shmem,
        kernel, body, flags);
    return;
  }
  if (stream != nullptr && emu_deferred ()) {
    emu_stream_enqueue ((EmuStreamState *) stream, run_launch_node,
        new LaunchNode { grid, block, shmem, kernel, body, flags },
        free_launch_node);
    return;
  }
  {
    /* The legacy default stream: after every other stream's work. */
    LaunchNode now { grid, block, shmem, kernel, body, flags };

    emu_run_now (run_launch_node, &now);
  }
}

extern "C" int
emu_shapes_only (void)
{
  static const bool only = getenv ("PP_CUDA_EMU_SHAPES_ONLY") != nullptr;

  return only;
}

int
emu_resident_blocks (unsigned threads)
{
  const unsigned per_sm = threads == 0 ? 0 : 2048 / threads;

  return EMU_DEVICE_SMS * (int) (per_sm < 32 ? per_sm : 32);
}

extern "C" int
emu_device_sm (void)
{
  static const int sm = [] {
    const char *v = getenv ("PP_CUDA_EMU_SM");
    char *end = nullptr;
    const long n = v != nullptr ? strtol (v, &end, 10) : 90;

    if (v != nullptr && (end == v || *end != '\0' || n < 10 || n > 199)) {
      fprintf (stderr, "cuda-emu: PP_CUDA_EMU_SM=%s: expected an SM "
          "version (75, 90, 120)\n", v);
      abort ();
    }
    return (int) n;
  } ();

  return sm;
}

cudaError_t
cudaFuncGetAttributes (cudaFuncAttributes * attributes, const void *func)
{
  (void) func;
  if (getenv ("PP_CUDA_EMU_NO_KERNEL_IMAGE") != nullptr) {
    last_error = cudaErrorNoKernelImageForDevice;
    return cudaErrorNoKernelImageForDevice;
  }
  attributes->binaryVersion = emu_device_sm ();
  return cudaSuccess;
}

static std::atomic<int> device_fault;

extern "C" void
emu_device_fault (int error)
{
  device_fault = error;
}

extern "C" int
emu_device_faulted (void)
{
  return device_fault;
}

/* TRUE for the first kernel to run whose name starts with
 * $PP_CUDA_EMU_FAULT_KERNEL: it faults instead of running
 * (emu-libraries.c). */
static bool
faults (const char *kernel)
{
  static const char *const prefix = getenv ("PP_CUDA_EMU_FAULT_KERNEL");
  static std::atomic<bool> faulted;

  return prefix != nullptr && *prefix != '\0'
      && strncmp (kernel, prefix, strlen (prefix)) == 0
      && !faulted.exchange (true);
}

/* A kernel trace's hook (emu-cupti.c sets it, atomically, once kernels
 * are traced): each launch run, by its kernel's name, with the monotonic
 * clock's nanoseconds at its start and end. */
extern "C" {
  void (*emu_trace_hook) (const char *name, unsigned long long start,
      unsigned long long end);
}

extern "C" unsigned long long
emu_now_ns ()
{
  struct timespec ts;

  clock_gettime (CLOCK_MONOTONIC, &ts);
  return (unsigned long long) ts.tv_sec * 1000000000ull
      + (unsigned long long) ts.tv_nsec;
}

static void launch_run (dim3 grid, dim3 block, const char *kernel,
    const std::function<void ()> &body, unsigned flags);

/* Runs a launch emu_launch has checked, here and now (a graph's or a
 * deferred stream's node runs it so, in its turn). */
static void
launch_now (dim3 grid, dim3 block, size_t, const char *kernel,
    const std::function<void ()> &body, unsigned flags)
{
  void (*const hook) (const char *, unsigned long long, unsigned long long)
      = __atomic_load_n (&emu_trace_hook, __ATOMIC_ACQUIRE);
  const unsigned long long start = hook != nullptr ? emu_now_ns () : 0;

  launch_run (grid, block, kernel, body, flags);
  if (hook != nullptr)
    hook (kernel, start, emu_now_ns ());
}

static void
launch_run (dim3 grid, dim3 block, const char *kernel,
    const std::function<void ()> &body, unsigned flags)
{
  const unsigned long threads = (unsigned long) block.x * block.y * block.z;
  const unsigned long long blocks = (unsigned long long) grid.x * grid.y
      * grid.z;

  {
    const std::lock_guard<std::mutex> hold (runs_lock);

    runs[kernel]++;
  }
  if (faults (kernel)) {
    fprintf (stderr, "cuda-emu: kernel %s faults (an illegal address, "
        "$PP_CUDA_EMU_FAULT_KERNEL)\n", kernel);
    emu_device_fault (cudaErrorIllegalAddress);
    return;
  }
  if (emu_shapes_only ())
    return;
#ifdef EMU_ASAN
  {
    /* The launching thread's own stack (the backend launches from
     * several threads, one at a time). */
    static thread_local void *stack;
    static thread_local size_t stack_bytes;

    if (stack == nullptr) {
      pthread_attr_t attr;

      pthread_getattr_np (pthread_self (), &attr);
      pthread_attr_getstack (&attr, &stack, &stack_bytes);
      pthread_attr_destroy (&attr);
    }
    launcher.stack = stack;
    launcher.stack_bytes = stack_bytes;
  }
#endif
  gridDim = grid;
  blockDim = block;
  blk.kernel = kernel;
  blk.body = &body;
  blk.must_wait = (flags & EMU_LAUNCH_WAITS) != 0;
  blk.together = (flags & EMU_LAUNCH_TOGETHER) != 0;
  blk.threads = (unsigned) threads;
  for (unsigned t = 0; t < blk.threads; t++)
    blk.index[t] = uint3 (t % block.x, t / block.x % block.y,
        t / (block.x * block.y));
  std::vector<std::unique_ptr<Aside>> aside;

  for (unsigned long long i = 0; i < blocks; i++) {
    const unsigned long long k = descending ? blocks - 1 - i : i;

    blockIdx = uint3 ((unsigned) (k % grid.x),
        (unsigned) (k / grid.x % grid.y),
        (unsigned) (k / ((unsigned long long) grid.x * grid.y)));
    if (!run_block ())
      aside.push_back (std::unique_ptr<Aside> (new Aside { blk, blockIdx }));
  }
  /* The blocks put aside, in the order they were, until all finish. */
  while (!aside.empty ()) {
    std::vector<std::unique_ptr<Aside>> again;
    bool any = false;

    for (std::unique_ptr<Aside> &a : aside) {
      bool moved;

      blk = a->block;
      blockIdx = a->index;
      if (!resume_block (&moved)) {
        a->block = blk;
        again.push_back (std::move (a));
      }
      any |= moved;
    }
    if (!any)
      fail ("deadlock: %zu blocks wait for a word none of them will change "
          "(each waits for another)", again.size ());
    aside.swap (again);
  }
}

cudaError_t
cudaGetLastError ()
{
  const cudaError_t e = last_error;

  last_error = cudaSuccess;
  return e;
}

extern "C" int
emu_take_launch_error (void)
{
  return cudaGetLastError ();
}

void
emu_set_descending (bool d)
{
  descending = d;
}
