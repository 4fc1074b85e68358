/* ppdiffuse — the cpu-strict backend: the CPU kernels on device buffers the
 * host cannot touch.
 *
 * Every buffer comes from one reserved stretch of address space that is
 * PROT_NONE except while a call of this backend runs (an op, an upload, a
 * download, a copy, a fill): the call opens the used part of the stretch,
 * runs, and closes it again.  So any read or write of device memory from
 * model, mesh or element code — where a GPU build would read garbage —
 * faults at once, with a backtrace pointing at it.
 *
 * Calls may overlap (rank 0 encodes and decodes on two threads, an op's
 * rows run on the thread team): the stretch stays open while any call runs,
 * so a stray access that races with a call on another thread can slip
 * through; one on a quiet backend never does.  It is a debugging backend:
 * every call costs two mprotect system calls.
 *
 * Weights asked for in 16 bits are stored in 16 bits, as a GPU stores them
 * (the plain cpu backend keeps float32 copies rounded to the dtype), and
 * reach the ops as F16 or BF16 views: every op that reads a weight runs
 * its 16-bit path on the CPU, and computes exactly what cpu does on its
 * rounded copies (tests/kernels/ops /kernels/ops/views/widened).  A model
 * with 16-bit weights keeps its activations in that dtype too
 * (act_follows_weights), as a GPU's 16-bit graph does: every op then reads
 * and writes 16-bit activations, each rounded on write, so the host suite
 * runs the 16-bit graph a device runs, and its bounds. */
#include "pp-backend-impl.h"
#include "pp-cpu-ops.h"
#include "pp-dtype-math.h"
#include "pp-error.h"

#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

PpBackend *pp_cpu_strict_backend_get (GError ** error);
gchar *pp_cpu_describe (void);
const PpOps *pp_cpu_ops (void);

/* Address space reserved for device buffers (PROT_NONE, no memory behind
 * it until used): far more than any model here needs. */
#define STRICT_RESERVE ((gsize) 256 << 30)
/* The stretch is backed by transparent huge pages where the kernel allows
 * them: opening and closing it then changes one page-table entry per 2 MiB
 * instead of 512, which keeps a full-size UNet's 3.4 GB of weights usable
 * (every op opens and closes all of it). */
#define STRICT_HUGE_PAGE ((gsize) 2 << 20)

typedef struct
{
  gsize offset, size;
} Block;

typedef struct
{
  GMutex lock;
  guint8 *base;
  gsize page;
  gsize extent;                 /* bytes of the stretch ever handed out */
  guint depth;                  /* calls running: open while > 0 */
  GArray *free_blocks;          /* Block */
  GHashTable *sizes;            /* buffer → its Block size */
  GList *graphs;                /* StrictGraph, live */
} Strict;

static Strict strict;

static void
protect (gsize offset, gsize size, int prot)
{
  if (size > 0 && mprotect (strict.base + offset, size, prot) != 0)
    g_error ("cpu-strict: mprotect of %" G_GSIZE_FORMAT " bytes failed: %s",
        size, g_strerror (errno));
}

/* The used part of the stretch, in whole huge pages (past the extent they
 * hold nothing, so opening them too costs nothing and splits none). */
static gsize
used (void)
{
  return (strict.extent + STRICT_HUGE_PAGE - 1) / STRICT_HUGE_PAGE
      * STRICT_HUGE_PAGE;
}

static void
strict_open (void)
{
  g_mutex_lock (&strict.lock);
  if (strict.depth++ == 0)
    protect (0, used (), PROT_READ | PROT_WRITE);
  g_mutex_unlock (&strict.lock);
}

static void
strict_close (void)
{
  g_mutex_lock (&strict.lock);
  g_assert (strict.depth > 0);
  if (--strict.depth == 0)
    protect (0, used (), PROT_NONE);
  g_mutex_unlock (&strict.lock);
}

static void graphs_forget (gsize offset, gsize size);

static gpointer
strict_alloc (PpBackend * be, gsize bytes, GError ** error)
{
  const gsize size = (bytes + strict.page - 1) / strict.page * strict.page;
  Block block = { 0, 0 };
  gpointer mem;

  g_mutex_lock (&strict.lock);
  for (guint i = 0; i < strict.free_blocks->len; i++) {
    Block *b = &g_array_index (strict.free_blocks, Block, i);

    if (b->size < size)
      continue;
    block.offset = b->offset;
    block.size = size;
    b->offset += size;
    b->size -= size;
    if (b->size == 0)
      g_array_remove_index_fast (strict.free_blocks, i);
    break;
  }
  if (block.size == 0) {
    if (strict.extent + size > STRICT_RESERVE) {
      g_mutex_unlock (&strict.lock);
      g_set_error (error, PP_ERROR, PP_ERROR_RESOURCE,
          "cpu-strict: out of reserved address space for %" G_GSIZE_FORMAT
          " bytes", bytes);
      return NULL;
    }
    block.offset = strict.extent;
    block.size = size;
    strict.extent += size;
  }
  /* A call running now has the stretch open: open the new block with it. */
  if (strict.depth > 0)
    protect (0, used (), PROT_READ | PROT_WRITE);
  mem = strict.base + block.offset;
  g_hash_table_insert (strict.sizes, mem, GSIZE_TO_POINTER (block.size));
  g_mutex_unlock (&strict.lock);
  return mem;
}

static void
strict_free (PpBackend * be, gpointer mem)
{
  Block block;

  g_mutex_lock (&strict.lock);
  block.size = GPOINTER_TO_SIZE (g_hash_table_lookup (strict.sizes, mem));
  if (block.size == 0)
    g_error ("cpu-strict: free of %p, which is no buffer of this backend",
        mem);
  g_hash_table_remove (strict.sizes, mem);
  block.offset = (guint8 *) mem - strict.base;
  graphs_forget (block.offset, block.size);
  /* Kept for the next buffer (giving small blocks back to the kernel
   * would split huge pages). */
  g_array_append_val (strict.free_blocks, block);
  g_mutex_unlock (&strict.lock);
}

typedef struct _StrictGraph StrictGraph;
static __thread StrictGraph *noting;
static void note_buffer (StrictGraph * g, gconstpointer p);

static void
strict_copy (PpBackend * be, gpointer dst, gconstpointer src, gsize bytes)
{
  if (noting != NULL) {
    note_buffer (noting, dst);
    note_buffer (noting, src);
  }
  strict_open ();
  memmove (dst, src, bytes);
  strict_close ();
}

/* Set while an emulated graph runs its work (below): what a device graph
 * cannot hold is refused there, as a CUDA stream capture refuses it. */
static __thread gboolean in_graph;

static void
refuse_in_graph (const gchar * what)
{
  if (in_graph)
    g_error ("cpu-strict: %s inside a graph: a device graph cannot hold "
        "it (capture only ops on device buffers)", what);
}

static void
strict_upload (PpBackend * be, gpointer dst, gconstpointer src, gsize bytes)
{
  refuse_in_graph ("an upload");
  strict_copy (be, dst, src, bytes);
}

static void
strict_download (PpBackend * be, gpointer dst, gconstpointer src,
    gsize bytes)
{
  refuse_in_graph ("a download");
  strict_copy (be, dst, src, bytes);
}

static void
strict_fill (PpBackend * be, gpointer dst, float value, gsize n)
{
  float *p = dst;

  if (noting != NULL)
    note_buffer (noting, dst);
  strict_open ();
  for (gsize i = 0; i < n; i++)
    p[i] = value;
  strict_close ();
}

static void
strict_synchronize (PpBackend * be)
{
  refuse_in_graph ("a synchronize");
}

static gpointer
strict_upload_weights (PpBackend * be, const float *src, gsize n,
    PpDType dtype, GError ** error)
{
  const gsize bytes = n * pp_dtype_size (dtype);
  gpointer mem = strict_alloc (be, bytes, error);
  g_autofree guint16 *narrow = NULL;

  if (mem == NULL)
    return NULL;
  if (dtype == PP_DTYPE_F32) {
    strict_copy (be, mem, src, bytes);
    return mem;
  }
  /* Narrowed on the host, as the CUDA backend's staging does. */
  narrow = g_new (guint16, MAX (n, 1));
  for (gsize i = 0; i < n; i++)
    narrow[i] = dtype == PP_DTYPE_F16 ? pp_f32_to_f16 (src[i])
        : pp_f32_to_bf16 (src[i]);
  strict_copy (be, mem, narrow, bytes);
  return mem;
}

/* Graphs, emulated: a capture keeps the work without running it and a
 * launch runs it, so that what a caller does around a device graph
 * (capture after warm-up, a launch per frame, a new capture for a new shape
 * or cache epoch) runs and is checked on the host.  Unlike a CUDA graph, a
 * launch issues the work again: host values it reads are read at each
 * launch rather than frozen at capture.  What a device graph does freeze
 * is the buffers its ops were captured with: the first launch notes every
 * buffer an op is given, and a buffer of those freed while the graph lives
 * makes its next launch fail, naming the buffer — where a CUDA graph would
 * read freed memory or a stale copy (the step buffers or the prompt's
 * states replaced under a captured graph). */
struct _StrictGraph
{
  PpGraphFunc func;
  gpointer data;
  gboolean noted;               /* the first launch has run */
  GHashTable *buffers;          /* pointers its ops were given (a set) */
  gchar *stale;                 /* why a launch must fail; NULL */
};

/* (noting, declared above: the graph whose first launch runs on this
 * thread, which notes the buffers its ops are given.) */

static void
note_buffer (StrictGraph * g, gconstpointer p)
{
  if (p != NULL)
    g_hash_table_add (g->buffers, (gpointer) p);
}

static void
note_view (StrictGraph * g, PpView v)
{
  note_buffer (g, v.data);
}

static void
note_out (StrictGraph * g, PpOut o)
{
  note_buffer (g, o.data);
}

/* Sizes, scalars: nothing to note. */
static void
note_nothing (StrictGraph * g, ...)
{
}

#define STRICT_NOTE_ARG(a)                                                  \
  _Generic ((a), float *: note_buffer, const float *: note_buffer,           \
      guint8 *: note_buffer, const guint8 *: note_buffer,                    \
      PpView: note_view, PpOut: note_out,                                   \
      default: note_nothing) (noting, (a));

/* STRICT_FOR_EACH (F, a, b, ...): F (a) F (b) … for up to 16 arguments. */
#define STRICT_NTH(_1, _2, _3, _4, _5, _6, _7, _8, _9, _10, _11, _12, _13,   \
    _14, _15, _16, N, ...) N
#define STRICT_E1(F, a) F (a)
#define STRICT_E2(F, a, ...) F (a) STRICT_E1 (F, __VA_ARGS__)
#define STRICT_E3(F, a, ...) F (a) STRICT_E2 (F, __VA_ARGS__)
#define STRICT_E4(F, a, ...) F (a) STRICT_E3 (F, __VA_ARGS__)
#define STRICT_E5(F, a, ...) F (a) STRICT_E4 (F, __VA_ARGS__)
#define STRICT_E6(F, a, ...) F (a) STRICT_E5 (F, __VA_ARGS__)
#define STRICT_E7(F, a, ...) F (a) STRICT_E6 (F, __VA_ARGS__)
#define STRICT_E8(F, a, ...) F (a) STRICT_E7 (F, __VA_ARGS__)
#define STRICT_E9(F, a, ...) F (a) STRICT_E8 (F, __VA_ARGS__)
#define STRICT_E10(F, a, ...) F (a) STRICT_E9 (F, __VA_ARGS__)
#define STRICT_E11(F, a, ...) F (a) STRICT_E10 (F, __VA_ARGS__)
#define STRICT_E12(F, a, ...) F (a) STRICT_E11 (F, __VA_ARGS__)
#define STRICT_E13(F, a, ...) F (a) STRICT_E12 (F, __VA_ARGS__)
#define STRICT_E14(F, a, ...) F (a) STRICT_E13 (F, __VA_ARGS__)
#define STRICT_E15(F, a, ...) F (a) STRICT_E14 (F, __VA_ARGS__)
#define STRICT_E16(F, a, ...) F (a) STRICT_E15 (F, __VA_ARGS__)
#define STRICT_FOR_EACH(F, ...)                                              \
  STRICT_NTH (__VA_ARGS__, STRICT_E16, STRICT_E15, STRICT_E14, STRICT_E13,   \
      STRICT_E12, STRICT_E11, STRICT_E10, STRICT_E9, STRICT_E8, STRICT_E7,   \
      STRICT_E6, STRICT_E5, STRICT_E4, STRICT_E3, STRICT_E2, STRICT_E1)      \
      (F, __VA_ARGS__)

static gpointer
strict_graph_capture (PpBackend * be, PpGraphFunc func, gpointer data,
    GError ** error)
{
  StrictGraph *graph = g_new0 (StrictGraph, 1);

  graph->func = func;
  graph->data = data;
  graph->buffers = g_hash_table_new (g_direct_hash, g_direct_equal);
  g_mutex_lock (&strict.lock);
  strict.graphs = g_list_prepend (strict.graphs, graph);
  g_mutex_unlock (&strict.lock);
  return graph;
}

static gboolean
strict_graph_launch (PpBackend * be, gpointer graph, GError ** error)
{
  StrictGraph *g = graph;
  gboolean ok;

  g_mutex_lock (&strict.lock);
  if (g->stale != NULL) {
    g_set_error (error, PP_ERROR, PP_ERROR_RESOURCE, "cpu-strict: a graph "
        "launched after %s: a device graph would read freed memory (a "
        "graph must be captured again when what it uses is replaced)",
        g->stale);
    g_mutex_unlock (&strict.lock);
    return FALSE;
  }
  g_mutex_unlock (&strict.lock);
  in_graph = TRUE;
  if (!g->noted)
    noting = g;
  ok = g->func (g->data, error);
  noting = NULL;
  g->noted = TRUE;
  in_graph = FALSE;
  return ok;
}

static void
strict_graph_free (PpBackend * be, gpointer graph)
{
  StrictGraph *g = graph;

  if (g == NULL)
    return;
  g_mutex_lock (&strict.lock);
  strict.graphs = g_list_remove (strict.graphs, g);
  g_mutex_unlock (&strict.lock);
  g_hash_table_unref (g->buffers);
  g_free (g->stale);
  g_free (g);
}

/* Under the lock: the graphs that noted a pointer into the buffer at
 * @offset, @size bytes, which is being freed, cannot launch again. */
static void
graphs_forget (gsize offset, gsize size)
{
  const guint8 *from = strict.base + offset, *to = from + size;

  for (GList * l = strict.graphs; l != NULL; l = l->next) {
    StrictGraph *g = l->data;
    GHashTableIter iter;
    gpointer p;

    if (g->stale != NULL)
      continue;
    g_hash_table_iter_init (&iter, g->buffers);
    while (g_hash_table_iter_next (&iter, &p, NULL)) {
      if ((const guint8 *) p >= from && (const guint8 *) p < to) {
        g->stale = g_strdup_printf ("the %" G_GSIZE_FORMAT "-byte buffer "
            "at device offset %" G_GSIZE_FORMAT ", which its ops were "
            "captured with, was freed", size, offset);
        break;
      }
    }
  }
}

/* As on a device, no fence is made inside a graph. */
static gpointer
strict_fence (PpBackend * be)
{
  return in_graph ? NULL : pp_cpu_fence (be);
}

static const PpBackendMemory strict_memory = {
  .alloc = strict_alloc,
  .free = strict_free,
  .upload = strict_upload,
  .download = strict_download,
  .copy = strict_copy,
  .fill = strict_fill,
  .synchronize = strict_synchronize,
  .upload_weights = strict_upload_weights,
  .graph_capture = strict_graph_capture,
  .graph_launch = strict_graph_launch,
  .graph_free = strict_graph_free,
  .fence = strict_fence,
  .fence_wait = pp_cpu_fence_wait,
  .fence_free = pp_cpu_fence_free,
};

/* The cpu backend's glue, open: it reads views (widening 16-bit ones)
 * and runs the kernels on device memory. */
#define STRICT_OP(name, NAME, params, args, flops, views)                   \
  static void                                                               \
  strict_##name (PpBackend * be, PP_OPS_UNPAREN params)                     \
  {                                                                         \
    if (noting != NULL) {                                                   \
      STRICT_FOR_EACH (STRICT_NOTE_ARG, PP_OPS_UNPAREN args)                \
    }                                                                       \
    strict_open ();                                                         \
    pp_cpu_ops ()->name (be, PP_OPS_UNPAREN args);                          \
    strict_close ();                                                        \
  }
PP_OPS_LIST (STRICT_OP)
#undef STRICT_OP

/* The ranges' code is model code: it runs closed, and opens for each op it
 * calls. */
static void
strict_for_rows (PpBackend * be, int rows, PpRowsFunc func, gpointer data)
{
  pp_cpu_ops ()->for_rows (be, rows, func, data);
}

static const PpOps strict_ops = {
#define STRICT_ENTRY(name, NAME, params, args, flops, views) \
  .name = strict_##name,
  PP_OPS_LIST (STRICT_ENTRY)
#undef STRICT_ENTRY
  .for_rows = strict_for_rows,
};

PpBackend *
pp_cpu_strict_backend_get (GError ** error)
{
  static PpBackend be = {
    .name = "cpu-strict",
    .default_weight_dtype = PP_DTYPE_F32,
    .samples_apart = TRUE,
    .view_dtypes = PP_DTYPE_BIT (PP_DTYPE_F32) | PP_DTYPE_BIT (PP_DTYPE_F16)
        | PP_DTYPE_BIT (PP_DTYPE_BF16),
    .act_dtypes = PP_DTYPE_BIT (PP_DTYPE_F32) | PP_DTYPE_BIT (PP_DTYPE_F16)
        | PP_DTYPE_BIT (PP_DTYPE_BF16),
    .act_follows_weights = TRUE,
    .memory = &strict_memory,
    .ops = &strict_ops,
  };
  static gsize ready;
  static gchar *failure;

  if (g_once_init_enter (&ready)) {
    guint8 *base = mmap (NULL, STRICT_RESERVE + STRICT_HUGE_PAGE, PROT_NONE,
        MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);

    if (base != MAP_FAILED) {
      /* Start on a huge page boundary. */
      base = (guint8 *) (((guintptr) base + STRICT_HUGE_PAGE - 1)
          & ~(guintptr) (STRICT_HUGE_PAGE - 1));
      madvise (base, STRICT_RESERVE, MADV_HUGEPAGE);
    }
    if (base == MAP_FAILED) {
      failure = g_strdup_printf ("cpu-strict: cannot reserve %" G_GSIZE_FORMAT
          " GiB of address space: %s", STRICT_RESERVE >> 30,
          g_strerror (errno));
    } else {
      g_autofree gchar *cpu = pp_cpu_describe ();

      g_mutex_init (&strict.lock);
      strict.base = base;
      strict.page = (gsize) sysconf (_SC_PAGESIZE);
      strict.free_blocks = g_array_new (FALSE, FALSE, sizeof (Block));
      strict.sizes = g_hash_table_new (g_direct_hash, g_direct_equal);
      be.device = g_strdup_printf ("%s; host access to device buffers "
          "traps", cpu);
    }
    g_once_init_leave (&ready, 1);
  }
  if (failure != NULL) {
    g_set_error_literal (error, PP_ERROR, PP_ERROR_RESOURCE, failure);
    return NULL;
  }
  return &be;
}
