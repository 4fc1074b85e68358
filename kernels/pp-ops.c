/* ppdiffuse — the pp_* op wrappers: the checks of the ops' views, FLOP
 * counts and the profile, then a call through the backend's table. */
#include "pp-ops.h"
#include "pp-backend-impl.h"

#include <stdatomic.h>
#include <stdbool.h>

/* Per-op counters: matrix FLOPs and layout copies always (benchmarks read
 * them), calls, time and bytes only while profiling is on, so that the
 * default costs one relaxed load per call. */
typedef struct
{
  atomic_ullong calls, ns, flops, device_ns, layout_copies, bytes;
} OpCounters;

static OpCounters counters[PP_OP_COUNT];
static atomic_bool profiling;

/* The profile's window (pp_ops_set_profile_window): the calls numbered
 * since it was set, the range profiled, the hold before it, when that
 * hold was queued (host µs) and the longest queueing of a window. */
static atomic_ullong calls_numbered, window_first, window_count;
static _Atomic double window_hold_s;
static atomic_llong window_held_at_us, window_queued_us;

/* Device marks of ops not yet read (profiling on a device backend), and
 * the call's FLOPs and bytes (its shape). */
typedef struct
{
  PpBackend *be;
  PpOp op;
  gpointer from, to;
  guint64 flops, bytes;
} PendingMarks;

/* Read in batches: each read waits for the device. */
#define PENDING_MARKS_MAX 8192

static GMutex pending_lock;
static GArray *pending;          /* PendingMarks */
/* Under pending_lock: the profiled calls by shape, PpOpShape keyed by
 * itself (op, flops, bytes). */
static GHashTable *shapes;

static const char *const op_names[PP_OP_COUNT] = {
#define OP_NAME(name, NAME, params, args, flops, views) \
  [PP_OP_##NAME] = #name,
  PP_OPS_LIST (OP_NAME)
#undef OP_NAME
  [PP_OP_FOR_ROWS] = "for_rows",
};

/* Set on a thread while it runs a range of pp_for_rows. */
static __thread gboolean in_rows;

static guint
shape_hash (gconstpointer key)
{
  const PpOpShape *s = key;

  return g_int64_hash (&s->flops) ^ (g_int64_hash (&s->bytes) * 31u)
      ^ ((guint) s->op * 0x9e3779b1u);
}

static gboolean
shape_equal (gconstpointer a, gconstpointer b)
{
  const PpOpShape *x = a, *y = b;

  return x->op == y->op && x->flops == y->flops && x->bytes == y->bytes;
}

/* Under pending_lock: one call of @op with @flops and @bytes took
 * @seconds (host) or @device_seconds. */
static void
shape_add (PpOp op, guint64 flops, guint64 bytes, gdouble seconds,
    gdouble device_seconds)
{
  const PpOpShape key = { op, op_names[op], flops, bytes, 0, 0, 0 };
  PpOpShape *s;

  if (shapes == NULL)
    shapes = g_hash_table_new_full (shape_hash, shape_equal, g_free, NULL);
  s = g_hash_table_lookup (shapes, &key);
  if (s == NULL) {
    s = g_memdup2 (&key, sizeof key);
    g_hash_table_add (shapes, s);
  }
  s->calls++;
  s->seconds += seconds;
  s->device_seconds += device_seconds;
}

/* Under pending_lock: the device times of the marks recorded so far. */
static void
collect_marks (void)
{
  for (guint i = 0; pending != NULL && i < pending->len; i++) {
    PendingMarks *m = &g_array_index (pending, PendingMarks, i);
    const gdouble s = m->be->memory->elapsed (m->be, m->from, m->to);

    atomic_fetch_add_explicit (&counters[m->op].device_ns,
        (unsigned long long) (s * 1e9), memory_order_relaxed);
    shape_add (m->op, m->flops, m->bytes, 0, s);
    m->be->memory->mark_free (m->be, m->from);
    m->be->memory->mark_free (m->be, m->to);
  }
  if (pending != NULL)
    g_array_set_size (pending, 0);
}

/* Whether this call, while profiling, is one the window profiles: it
 * takes the next call number, and the window's first call queues the
 * window's hold. */
static gboolean
in_window (PpBackend * be)
{
  const unsigned long long n = atomic_fetch_add (&calls_numbered, 1);
  const unsigned long long first = atomic_load (&window_first);
  const unsigned long long count = atomic_load (&window_count);

  if (count == 0)
    return TRUE;
  if (n < first || n >= first + count)
    return FALSE;
  if (n == first && atomic_load (&window_hold_s) > 0
      && be->memory != NULL && be->memory->hold != NULL
      && be->memory->hold (be, atomic_load (&window_hold_s)))
    atomic_store (&window_held_at_us, g_get_monotonic_time ());
  return TRUE;
}

/* The end of a profiled call's queueing in a held window: how long the
 * host has taken since the hold (the window's last call gives the most). */
static void
window_call_queued (void)
{
  const gint64 held_at = atomic_load (&window_held_at_us);
  long long took, longest;

  if (held_at == 0)
    return;
  took = g_get_monotonic_time () - held_at;
  longest = atomic_load (&window_queued_us);
  while (took > longest
      && !atomic_compare_exchange_weak (&window_queued_us, &longest, took));
}

/* A mark before an op on a device backend while profiling; else NULL. */
static gpointer
mark_begin (PpBackend * be)
{
  if (be->memory == NULL || be->memory->mark == NULL)
    return NULL;
  return be->memory->mark (be);
}

static void
mark_end (PpBackend * be, PpOp op, gpointer from, guint64 flops,
    guint64 bytes)
{
  PendingMarks m = { be, op, from, NULL, flops, bytes };

  if (from == NULL)
    return;
  m.to = be->memory->mark (be);
  if (m.to == NULL) {
    be->memory->mark_free (be, from);
    return;
  }
  g_mutex_lock (&pending_lock);
  if (pending == NULL)
    pending = g_array_new (FALSE, FALSE, sizeof (PendingMarks));
  g_array_append_val (pending, m);
  if (pending->len >= PENDING_MARKS_MAX)
    collect_marks ();
  g_mutex_unlock (&pending_lock);
}

/* Starts timing one call of an op; 0 when profiling is off. */
static gint64
op_begin (void)
{
  return atomic_load_explicit (&profiling, memory_order_relaxed) && !in_rows
      ? g_get_monotonic_time () * 1000 : 0;
}

/* A call the profile leaves out: its FLOPs only. */
static void
op_flops (PpOp op, gint64 flops)
{
  if (flops)
    atomic_fetch_add_explicit (&counters[in_rows ? PP_OP_FOR_ROWS : op].flops,
        (unsigned long long) flops, memory_order_relaxed);
}

/* The end of a profiled call (@start_ns from op_begin) of @flops and
 * @bytes; @marked when a device mark times it (its shape is added when
 * the marks are read). */
static void
op_end (PpOp op, gint64 start_ns, gint64 flops, guint64 bytes,
    gboolean marked)
{
  OpCounters *c = &counters[in_rows ? PP_OP_FOR_ROWS : op];
  gint64 ns;

  if (flops)
    atomic_fetch_add_explicit (&c->flops, (unsigned long long) flops,
        memory_order_relaxed);
  /* Inside a range: the call and its bytes are the op's, its time the
   * range's. */
  if (in_rows && atomic_load_explicit (&profiling, memory_order_relaxed))
    atomic_fetch_add_explicit (&counters[op].calls, 1, memory_order_relaxed);
  if (start_ns == 0)
    return;
  ns = g_get_monotonic_time () * 1000 - start_ns;
  atomic_fetch_add_explicit (&c->calls, 1, memory_order_relaxed);
  atomic_fetch_add_explicit (&c->ns, (unsigned long long) ns,
      memory_order_relaxed);
  if (!marked) {
    g_mutex_lock (&pending_lock);
    shape_add (op, (guint64) MAX (flops, 0), bytes, ns / 1e9, 0);
    g_mutex_unlock (&pending_lock);
  }
}

guint64
pp_ops_flop_count (void)
{
  guint64 total = 0;

  for (int op = 0; op < PP_OP_COUNT; op++)
    total += atomic_load (&counters[op].flops);
  return total;
}

void
pp_ops_reset_flop_count (void)
{
  g_mutex_lock (&pending_lock);
  collect_marks ();
  g_mutex_unlock (&pending_lock);
  for (int op = 0; op < PP_OP_COUNT; op++) {
    atomic_store (&counters[op].calls, 0);
    atomic_store (&counters[op].ns, 0);
    atomic_store (&counters[op].flops, 0);
    atomic_store (&counters[op].device_ns, 0);
    atomic_store (&counters[op].layout_copies, 0);
    atomic_store (&counters[op].bytes, 0);
  }
  atomic_store (&window_queued_us, 0);
  g_mutex_lock (&pending_lock);
  if (shapes != NULL)
    g_hash_table_remove_all (shapes);
  g_mutex_unlock (&pending_lock);
}

GArray *
pp_ops_get_shapes (void)
{
  GArray *out = g_array_new (FALSE, FALSE, sizeof (PpOpShape));
  GHashTableIter it;
  gpointer key;

  g_mutex_lock (&pending_lock);
  collect_marks ();
  if (shapes != NULL) {
    g_hash_table_iter_init (&it, shapes);
    while (g_hash_table_iter_next (&it, &key, NULL))
      g_array_append_vals (out, key, 1);
  }
  g_mutex_unlock (&pending_lock);
  return out;
}

void
pp_ops_set_profiling (gboolean on)
{
  atomic_store (&profiling, on != FALSE);
}

void
pp_ops_set_profile_window (guint64 first, guint64 count, gdouble hold_s)
{
  atomic_store (&window_first, first);
  atomic_store (&window_count, count);
  atomic_store (&window_hold_s, hold_s);
  atomic_store (&window_held_at_us, 0);
  atomic_store (&calls_numbered, 0);
}

guint64
pp_ops_profile_calls_numbered (void)
{
  return atomic_load (&calls_numbered);
}

gdouble
pp_ops_profile_window_queued (void)
{
  return atomic_load (&window_queued_us) / 1e6;
}

void
pp_ops_get_profile (PpOp op, PpOpProfile * out)
{
  g_return_if_fail (op < PP_OP_COUNT && out != NULL);

  g_mutex_lock (&pending_lock);
  collect_marks ();
  g_mutex_unlock (&pending_lock);
  out->name = op_names[op];
  out->device_seconds = atomic_load (&counters[op].device_ns) / 1e9;
  out->calls = atomic_load (&counters[op].calls);
  out->seconds = atomic_load (&counters[op].ns) / 1e9;
  out->flops = atomic_load (&counters[op].flops);
  out->layout_copies = atomic_load (&counters[op].layout_copies);
  out->bytes = atomic_load (&counters[op].bytes);
}

void
pp_ops_note_layout_copy (const char *op)
{
  for (int i = 0; i < PP_OP_COUNT; i++)
    if (op_names[i] != NULL && g_str_equal (op_names[i], op)) {
      atomic_fetch_add_explicit (&counters[i].layout_copies, 1,
          memory_order_relaxed);
      return;
    }
  g_warn_if_reached ();
}

/* The dtypes of @set, for messages ("F32, F16"). */
static GString *
dtype_names (guint set)
{
  GString *names = g_string_new (NULL);

  for (guint d = PP_DTYPE_F32; d <= PP_DTYPE_BF16; d++)
    if (set & PP_DTYPE_BIT (d))
      g_string_append_printf (names, "%s%s", names->len ? ", " : "",
          pp_dtype_name (d));
  return names;
}

void
pp_ops_refuse_dtype (const PpBackend * be, const char *op, const char *param,
    PpDType dtype)
{
  g_autoptr (GString) reads = dtype_names (be->view_dtypes);

  g_error ("%s: parameter %s is %s (dtype %u), and the %s backend has no "
      "%s kernel for it (its ops read %s)", op, param, pp_dtype_name (dtype),
      (guint) dtype, be->name, op, reads->len ? reads->str : "no views");
}

/* An activation of a dtype @be's ops do not take (PpBackend.act_dtypes). */
static G_GNUC_NORETURN void
refuse_act_dtype (const PpBackend * be, const char *op, const char *param,
    PpDType dtype)
{
  g_autoptr (GString) takes = dtype_names (be->act_dtypes);

  g_error ("%s: activation %s is %s (dtype %u), and the %s backend's ops "
      "take activations in %s only", op, param, pp_dtype_name (dtype),
      (guint) dtype, be->name, takes->len ? takes->str : "no dtype");
}

/* View @v of parameter @param of @op, which reads or writes @needed
 * elements of it: the process ends when it is absent but not @optional,
 * of a dtype @be has no kernel for (its @set of dtypes: view_dtypes for
 * weights, act_dtypes for activations), or too short (what would
 * otherwise read or write past its end, or read 16-bit values as floats).
 * Returns it trimmed to @needed, so that a backend converts no more than
 * the op reads or writes. */
static PpView
check_view (const PpBackend * be, PpOp op, const char *param, PpView v,
    gint64 needed, gboolean optional, gboolean activation)
{
  const gsize count = needed > 0 ? (gsize) needed : 0;
  const guint set = activation ? be->act_dtypes : be->view_dtypes;

  if (v.data == NULL) {
    if (!optional)
      g_error ("%s: parameter %s is absent (NULL data); the op %s %"
          G_GSIZE_FORMAT " elements of it", op_names[op], param,
          activation ? "uses" : "reads", count);
    return v;
  }
  if ((guint) v.dtype >= sizeof (set) * 8 || !(set & PP_DTYPE_BIT (v.dtype))) {
    if (activation)
      refuse_act_dtype (be, op_names[op], param, v.dtype);
    pp_ops_refuse_dtype (be, op_names[op], param, v.dtype);
  }
  if (v.numel < count)
    g_error ("%s: parameter %s has %" G_GSIZE_FORMAT " elements (%s) on the "
        "%s backend; the op %s %" G_GSIZE_FORMAT, op_names[op], param,
        v.numel, pp_dtype_name (v.dtype), be->name,
        activation ? "uses" : "reads", count);
  v.numel = count;
  return v;
}

static PpOut
check_out (const PpBackend * be, PpOp op, const char *param, PpOut o,
    gint64 needed)
{
  const PpView v = check_view (be, op, param, pp_out_as_view (o), needed,
      FALSE, TRUE);

  o.numel = v.numel;
  return o;
}

/* A row stride @ld of rows @width elements wide: at least @width. */
static void
check_stride (PpOp op, const char *param, int ld, int width)
{
  if (ld < width)
    g_error ("%s: row stride %s = %d is less than a row's %d elements",
        op_names[op], param, ld, width);
}

/* The bytes of @numel elements of @dtype at @data (none when absent). */
static inline guint64
view_bytes (gconstpointer data, PpDType dtype, gsize numel)
{
  return data != NULL ? (guint64) numel * pp_dtype_size (dtype) : 0;
}

/* The views column of the list (pp-ops-list.h), as statements of a
 * wrapper: each view checked and trimmed in place, each stride checked,
 * and the bytes of what the op reads and writes summed in @bytes. */
#define PP_OPS_STRIDE(param, width) check_stride (op, #param, param, (width));
/* @param checked (and trimmed) by @checked, its bytes summed. */
#define OPS_TAKE(param, checked) \
  param = (checked); \
  bytes += view_bytes (param.data, param.dtype, param.numel);
#define PP_OPS_VIEW(param, count) \
  OPS_TAKE (param, check_view (be, op, #param, param, (count), FALSE, FALSE))
#define PP_OPS_VIEW_OPTIONAL(param, count) \
  OPS_TAKE (param, check_view (be, op, #param, param, (count), TRUE, FALSE))
#define PP_OPS_IN(param, count) \
  OPS_TAKE (param, check_view (be, op, #param, param, (count), FALSE, TRUE))
#define PP_OPS_IN_OPTIONAL(param, count) \
  OPS_TAKE (param, check_view (be, op, #param, param, (count), TRUE, TRUE))
#define PP_OPS_OUT(param, count) \
  OPS_TAKE (param, check_out (be, op, #param, param, (count)))

#define OP_WRAPPER(name, NAME, params, args, flops, views)                \
  void                                                                      \
  pp_##name (PpBackend * be, PP_OPS_UNPAREN params)                         \
  {                                                                         \
    const PpOp op = PP_OP_##NAME;                                           \
    guint64 bytes = 0;                                                      \
    gint64 start;                                                           \
    gpointer mark;                                                          \
                                                                            \
    /* Halted by a kept failure: its buffers may be missing. */             \
    if (G_UNLIKELY (pp_backend_is_halted (be)))                             \
      return;                                                               \
    PP_OPS_UNPAREN views                                                    \
    if (!atomic_load_explicit (&profiling, memory_order_relaxed)            \
        || !in_window (be)) {                                               \
      be->ops->name (be, PP_OPS_UNPAREN args);                              \
      op_flops (op, (flops));                                               \
      return;                                                               \
    }                                                                       \
    start = op_begin ();                                                    \
    mark = mark_begin (be);                                                 \
    be->ops->name (be, PP_OPS_UNPAREN args);                                \
    mark_end (be, op, mark, (flops), bytes);                                \
    window_call_queued ();                                                  \
    /* Its bytes where its time is: the op's with a device mark, else   \
     * (inside pp_for_rows on a host) the range's. */                       \
    atomic_fetch_add_explicit (&counters[mark != NULL || !in_rows ? op      \
            : PP_OP_FOR_ROWS].bytes, bytes, memory_order_relaxed);          \
    op_end (op, start, (flops), bytes, mark != NULL);                       \
  }
PP_OPS_LIST (OP_WRAPPER)
#undef OP_WRAPPER
#undef PP_OPS_STRIDE
#undef PP_OPS_VIEW
#undef PP_OPS_VIEW_OPTIONAL
#undef PP_OPS_IN
#undef PP_OPS_IN_OPTIONAL
#undef PP_OPS_OUT
#undef OPS_TAKE

typedef struct
{
  PpRowsFunc func;
  gpointer data;
} RowsCall;

static void
rows_range (int begin, int end, gpointer data)
{
  const RowsCall *call = data;
  const gboolean outer = in_rows;

  in_rows = TRUE;
  call->func (begin, end, call->data);
  in_rows = outer;
}

void
pp_for_rows (PpBackend * be, int rows, PpRowsFunc func, gpointer data)
{
  const gint64 start = op_begin ();
  RowsCall call = { func, data };

  be->ops->for_rows (be, rows, rows_range, &call);
  op_end (PP_OP_FOR_ROWS, start, 0, 0, FALSE);
}
