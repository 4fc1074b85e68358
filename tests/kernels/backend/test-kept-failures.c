/* A backend that keeps its failures (pp_backend_keep_failures, as rank 0,
 * the application's process, does): each device allocation of a model's
 * load and frames, failed in turn, fails that load or frame with an error
 * naming the device's memory, never the process; a halted backend
 * recovers, and the frames after it are the frames of a run that never
 * failed, byte for byte.  And a halted backend takes nothing from the
 * device and plans nothing.
 *
 * Run on the emulated CUDA backend ($PPDIFFUSE_CUDA_MODULE), which counts
 * its cudaMalloc calls and fails the one a test names
 * (pp_cuda_emu_malloc_calls, pp_cuda_emu_fail_malloc), so that the sweep
 * reaches every allocation whatever their number.
 * $PP_TEST_FIRST_ALLOCATION starts the frames' sweep at that allocation
 * (to rerun one); $PP_TEST_ALLOCATION_STRIDE makes it take every so many;
 * and (not under a sanitizer, which holds the memory, not the choices)
 * each allocation just before a choice is taken as well. */
#include "pp-backend.h"
#include "pp-error.h"
#include "pp-model.h"
#include "pp-tiny.h"

#include <gmodule.h>
#include <stdlib.h>
#include <string.h>

#define FRAMES 2                /* as is; captured and launched */
#define FRAME_SIDE 32
#define STEPS 1
/* The frames must allocate, and halt the backend, at least this many
 * times, or the sweep tested nothing. */
#define MIN_FAILURES 3

typedef struct
{
  gchar *dir;
  const gchar *params;          /* the model's URI parameters, or "" */
  PpBackend *be;
  guint64 (*malloc_calls) (void);
  void (*fail_malloc) (guint64 n, guint64 count);
} Fixture;

/* The convolution plans the backend made (its info line for each), the
 * choices made while it was halted (none may be: a plan or a timed pick
 * made then keeps a choice made without running anything), and the log
 * writer that counts them, letting the rest of the info and debug lines
 * go unprinted.  The lines of a choice: a convolution's plan, a
 * convolution graph's plan and its timed engines, cuBLASLt's timed
 * algorithms, a fused attention's plan. */
static const gchar *const choice_lines[] = {
  ": cuda conv: ", ": cuda conv graph: ", ": cuda conv graph trials: ",
  ": cuda gemm trials: ", "cuda attention: ",
};

static PpBackend *watched;
static gint conv_plans_logged, choices_while_halted;
/* While set, the device allocations made before each choice line (the
 * emulation's count then, less marks_base): the allocations whose
 * failure comes just before a choice, which the sweep fails whatever its
 * stride. */
static guint64 (*marks_counter) (void);
static guint64 marks_base;
static GArray *choice_marks;

static GLogWriterOutput
count_plans (GLogLevelFlags level, const GLogField * fields, gsize n_fields,
    gpointer data)
{
  (void) data;
  if (!(level & (G_LOG_LEVEL_INFO | G_LOG_LEVEL_DEBUG)))
    return g_log_writer_default (level, fields, n_fields, NULL);
  for (gsize i = 0; i < n_fields; i++) {
    if (!g_str_equal (fields[i].key, "MESSAGE") || fields[i].length >= 0)
      continue;
    /* A plan of the legacy API, or an operation graph's engine (every
     * 16-bit convolution's under PPDIFFUSE_CUDA_CONV_API=graph, a model's
     * first and last padded). */
    if (strstr (fields[i].value, ": cuda conv: ") != NULL
        || (strstr (fields[i].value, ": cuda conv graph: ") != NULL
            && strstr (fields[i].value, ": engine ") != NULL))
      g_atomic_int_inc (&conv_plans_logged);
    for (guint j = 0; j < G_N_ELEMENTS (choice_lines); j++) {
      if (strstr (fields[i].value, choice_lines[j]) == NULL)
        continue;
      if (watched != NULL && pp_backend_is_halted (watched)) {
        g_test_message ("made while halted: %s",
            (const gchar *) fields[i].value);
        g_atomic_int_inc (&choices_while_halted);
      }
      if (marks_counter != NULL) {
        const guint64 mark = marks_counter () - marks_base;

        g_array_append_val (choice_marks, mark);
      }
      break;
    }
  }
  return G_LOG_WRITER_HANDLED;
}

static void
fixture_set_up (Fixture * f, gconstpointer data)
{
  const gchar *module_path = g_getenv ("PPDIFFUSE_CUDA_MODULE");
  g_autoptr (GError) error = NULL;
  GModule *module;

  f->params = data != NULL ? data : "";
  g_assert_nonnull (module_path);
  f->dir = g_dir_make_tmp ("pp-kept-failures-XXXXXX", &error);
  g_assert_no_error (error);
  g_assert_true (pp_tiny_write ("turbo", f->dir, 5, &error));
  g_assert_no_error (error);
  f->be = pp_backend_get (PP_BACKEND_CUDA, &error);
  g_assert_no_error (error);
  pp_backend_keep_failures (f->be);
  watched = f->be;
  g_atomic_int_set (&choices_while_halted, 0);
  /* The emulation the backend loaded, found again for its counter. */
  module = g_module_open (module_path, G_MODULE_BIND_LAZY);
  g_assert_nonnull (module);
  g_assert_true (g_module_symbol (module, "pp_cuda_emu_malloc_calls",
          (gpointer *) & f->malloc_calls));
  g_assert_true (g_module_symbol (module, "pp_cuda_emu_fail_malloc",
          (gpointer *) & f->fail_malloc));
}

static void
fixture_tear_down (Fixture * f, gconstpointer data)
{
  g_autofree gchar *rm = g_strdup_printf ("rm -rf '%s'", f->dir);

  (void) data;
  g_assert_cmpint (system (rm), ==, 0);
  g_free (f->dir);
}

/* The tiny pipeline, loaded with the settings its frames run with. */
static PpModel *
load (Fixture * f, GError ** error)
{
  g_autofree gchar *embeds = g_strdup_printf ("%s/%s", f->dir,
      PP_TINY_PROMPT_EMBEDS);
  g_autofree gchar *uri = g_strconcat (f->dir, f->params, NULL);
  PpSettings settings = { uri, NULL, embeds, 0.8, 3, NULL };
  PpModel *m = pp_model_new (uri, STEPS, PP_MODEL_ROLE_ALL, f->be, error);

  if (m != NULL && !pp_model_update (m, &settings, NULL, error))
    g_clear_pointer (&m, pp_model_free);
  return m;
}

/* FRAMES img2img frames @side pixels square through @m, the last one's
 * pixels in @out; FALSE with the first error, each piece of work checked
 * as rank 0 checks it (encode and decode by the model itself, the steps
 * here). */
static gboolean
run_frames_of (Fixture * f, PpModel * m, gint side, guint8 * out,
    GError ** error)
{
  for (int fr = 0; fr < FRAMES; fr++) {
    PpImage image = { out, side, side, side * 3, 3, {0, 1, 2} };
    g_autoptr (PpTensor) sample = NULL;
    guint since;

    for (gsize i = 0; i < (gsize) side * side * 3; i++)
      out[i] = (guint8) ((i * 7 + i / 97 + fr) & 0xff);
    sample = pp_model_encode (m, &image, error);
    if (sample == NULL)
      return FALSE;
    since = pp_backend_failures (f->be);
    if (!pp_model_steps_begin (m, sample, error))
      return FALSE;
    for (guint k = 0; k < STEPS; k++)
      if (!pp_model_step (m, k, STEPS, sample, error))
        return FALSE;
    if (!pp_model_steps_end (m, sample, error)
        || !pp_backend_check (f->be, since, error)
        || !pp_model_decode (m, sample, &image, error))
      return FALSE;
  }
  return TRUE;
}

static gboolean
run_frames (Fixture * f, PpModel * m, guint8 * out, GError ** error)
{
  return run_frames_of (f, m, FRAME_SIDE, out, error);
}

/* What the backend keeps for reuse goes back, so that a run allocates as
 * the counted one did. */
static void
give_back (Fixture * f)
{
  g_assert_true (pp_backend_halt (f->be, g_error_new_literal (PP_ERROR,
              PP_ERROR_DEVICE, "given back between runs")));
  g_assert_true (pp_backend_recover (f->be, NULL));
}

/* A failed allocation's error: the device's memory, named. */
static void
assert_out_of_memory (guint64 n, GError ** error)
{
  g_test_message ("allocation %" G_GUINT64_FORMAT ": %s", n,
      (*error)->message);
  g_assert_error (*error, PP_ERROR, PP_ERROR_RESOURCE);
  g_assert_nonnull (strstr ((*error)->message, "out of device memory"));
  g_clear_error (error);
}

/* Whether the test runs under a sanitizer ($PP_TEST_SANITIZED). */
static gboolean
sanitized (void)
{
  const gchar *value = g_getenv ("PP_TEST_SANITIZED");

  return value != NULL && *value != '\0' && !g_str_equal (value, "0");
}

/* The allocation the sweep fails after @n of @last: each in turn (the
 * tiny pipeline's frames make 23 since activations are cut from a pool's
 * segments: 4 of them halt the backend), or every
 * $PP_TEST_ALLOCATION_STRIDE-th; and the last. */
static guint64
next_allocation (guint64 n, guint64 last)
{
  const gchar *stride = g_getenv ("PP_TEST_ALLOCATION_STRIDE");
  guint64 step = 1;

  if (stride != NULL && *stride != '\0')
    step = MAX (g_ascii_strtoull (stride, NULL, 10), 1);
  return n == last ? n + 1 : MIN (n + step, last);
}

static void
test_each_allocation (Fixture * f, gconstpointer data)
{
  const gsize bytes = FRAME_SIDE * FRAME_SIDE * 3;
  g_autofree guint8 *want = g_malloc (bytes);
  g_autofree guint8 *got = g_malloc (bytes);
  g_autoptr (GError) error = NULL;
  PpModel *m;
  guint64 before, loading, framing;
  guint halted = 0, refused = 0, passed = 0;
  g_autoptr (GHashTable) trials = NULL;
  const gchar *first;

  (void) data;
  /* The reference frames, then a counted run as the trials will make
   * it (a new model; what the backend keeps given back). */
  m = load (f, &error);
  g_assert_no_error (error);
  g_assert_true (run_frames (f, m, want, &error));
  g_assert_no_error (error);
  pp_model_free (m);
  give_back (f);
  before = f->malloc_calls ();
  m = load (f, &error);
  g_assert_no_error (error);
  loading = f->malloc_calls () - before;
  choice_marks = g_array_new (FALSE, FALSE, sizeof (guint64));
  marks_base = before + loading;
  marks_counter = f->malloc_calls;
  g_assert_true (run_frames (f, m, got, &error));
  marks_counter = NULL;
  g_assert_no_error (error);
  framing = f->malloc_calls () - before - loading;
  pp_model_free (m);
  g_assert_cmpmem (got, bytes, want, bytes);
  g_test_message ("a load allocates %" G_GUINT64_FORMAT " times on the "
      "device, %d frames after it %" G_GUINT64_FORMAT " times, %u choices "
      "made among them", loading, FRAMES, framing, choice_marks->len);
  g_assert_cmpuint (framing, >=, MIN_FAILURES);

  /* A load's allocation (its first, one in the middle, its last) fails
   * the load with its error; the backend goes on. */
  for (guint i = 0; i < 3; i++) {
    const guint64 n = i == 0 ? 1 : i == 1 ? (loading + 1) / 2 : loading;

    give_back (f);
    f->fail_malloc (n, 1);
    m = load (f, &error);
    g_assert_null (m);
    assert_out_of_memory (n, &error);
    g_assert_false (pp_backend_recover (f->be, NULL));
  }

  /* Each of the frames' allocations in turn (or every so many, and
   * each just before a choice). */
  first = g_getenv ("PP_TEST_FIRST_ALLOCATION");
  trials = g_hash_table_new_full (g_int64_hash, g_int64_equal, g_free, NULL);
  for (guint64 n = first != NULL ? g_ascii_strtoull (first, NULL, 10) : 1;
      n <= framing; n = next_allocation (n, framing))
    g_hash_table_add (trials, g_memdup2 (&n, sizeof n));
  for (guint i = 0; i < choice_marks->len && !sanitized (); i++) {
    guint64 n = g_array_index (choice_marks, guint64, i);

    if (n >= 1 && n <= framing && (first == NULL
            || n >= g_ascii_strtoull (first, NULL, 10)))
      g_hash_table_add (trials, g_memdup2 (&n, sizeof n));
  }
  g_clear_pointer (&choice_marks, g_array_unref);
  for (guint64 n = 1; n <= framing; n++) {
    g_autofree gchar *what = NULL;
    gboolean ok;

    if (!g_hash_table_contains (trials, &n))
      continue;
    give_back (f);
    m = load (f, &error);
    g_assert_no_error (error);
    f->fail_malloc (n, 1);
    ok = run_frames (f, m, got, &error);
    if (ok) {
      /* Where a failed allocation has another way (the blocks kept for
       * reuse given back and the allocation tried again, a graph's
       * capture given up): the frames of a run that never failed. */
      g_assert_no_error (error);
      g_assert_cmpmem (got, bytes, want, bytes);
      g_assert_false (pp_backend_recover (f->be, NULL));
      passed++;
    } else {
      /* A tensor's allocation fails with its error; one inside an op
       * halts the backend, which recovers, and spoils the model, which
       * is loaded again.  Either way the next frames are the frames of a
       * run that never failed. */
      assert_out_of_memory (n, &error);
      if (pp_backend_recover (f->be, &what)) {
        g_assert_nonnull (strstr (what, "out of device memory"));
        g_assert_true (pp_model_spoiled (m));
        g_assert_false (run_frames (f, m, got, &error));
        g_assert_error (error, PP_ERROR, PP_ERROR_DEVICE);
        g_assert_nonnull (strstr (error->message, "loaded again"));
        /* The work refused names the failure that spoiled the model (on
         * another thread its error may come first). */
        g_assert_nonnull (strstr (error->message, "out of device memory"));
        g_clear_error (&error);
        pp_model_free (m);
        m = load (f, &error);
        g_assert_no_error (error);
        halted++;
      } else {
        g_assert_false (pp_model_spoiled (m));
        refused++;
      }
      g_assert_true (run_frames (f, m, got, &error));
      g_assert_no_error (error);
      g_assert_cmpmem (got, bytes, want, bytes);
    }
    pp_model_free (m);
  }
  g_test_message ("of %" G_GUINT64_FORMAT " allocations of the frames, %u "
      "failed in turn: %u halted the backend, %u failed a tensor's making, "
      "%u had another way", framing, g_hash_table_size (trials), halted,
      refused, passed);
  g_assert_cmpuint (halted, >=, MIN_FAILURES);
  g_assert_cmpint (g_atomic_int_get (&choices_while_halted), ==, 0);
}

/* A halted backend takes nothing from the device and makes no plan:
 * frames of a size it has not met, run while it is halted, fail with its
 * failure, allocate nothing and plan no convolution; recovered, a model
 * loaded again runs them, planning their convolutions then. */
static void
test_halted_makes_nothing (Fixture * f, gconstpointer data)
{
  const gint side = FRAME_SIDE + 8;
  g_autofree guint8 *out = g_malloc ((gsize) side * side * 3);
  g_autoptr (GError) error = NULL;
  PpModel *m;
  guint64 calls;

  (void) data;
  m = load (f, &error);
  g_assert_no_error (error);
  g_assert_true (run_frames (f, m, out, &error));
  g_assert_no_error (error);
  g_assert_true (pp_backend_halt (f->be, g_error_new_literal (PP_ERROR,
              PP_ERROR_DEVICE, "a failure for the test")));
  calls = f->malloc_calls ();
  g_atomic_int_set (&conv_plans_logged, 0);
  g_assert_false (run_frames_of (f, m, side, out, &error));
  g_assert_error (error, PP_ERROR, PP_ERROR_DEVICE);
  g_assert_nonnull (strstr (error->message, "a failure for the test"));
  g_clear_error (&error);
  g_assert_cmpuint (f->malloc_calls (), ==, calls);
  g_assert_cmpint (g_atomic_int_get (&conv_plans_logged), ==, 0);
  g_assert_cmpint (g_atomic_int_get (&choices_while_halted), ==, 0);
  g_assert_true (pp_model_spoiled (m));
  g_assert_false (run_frames_of (f, m, side, out, &error));
  g_assert_error (error, PP_ERROR, PP_ERROR_DEVICE);
  g_assert_nonnull (strstr (error->message, "loaded again"));
  g_assert_nonnull (strstr (error->message, "a failure for the test"));
  g_clear_error (&error);
  pp_model_free (m);

  g_assert_true (pp_backend_recover (f->be, NULL));
  m = load (f, &error);
  g_assert_no_error (error);
  g_assert_true (run_frames_of (f, m, side, out, &error));
  g_assert_no_error (error);
  g_test_message ("frames of %dx%d planned %d convolutions once the backend "
      "recovered", side, side, g_atomic_int_get (&conv_plans_logged));
  g_assert_cmpint (g_atomic_int_get (&conv_plans_logged), >, 0);
  pp_model_free (m);
}

/* Other work on the backend than the model's (rank 0's prompt encoding),
 * its activation out of device memory. */
typedef struct
{
  Fixture *f;
  gsize bytes;
} OtherWork;

static gboolean
other_work (gpointer data, GError ** error)
{
  OtherWork *w = data;
  g_autoptr (PpPool) pool = pp_pool_new (w->f->be, PP_DTYPE_F32);
  guint since = pp_backend_failures (w->f->be);
  gpointer mem;

  w->f->fail_malloc (1, G_MAXUINT64);
  mem = pp_pool_acquire (pool, w->bytes);
  w->f->fail_malloc (0, 0);
  pp_pool_release (pool, mem, w->bytes);
  return pp_backend_check (w->f->be, since, error);
}

/* A failure of other work than the model's, run alone beside it
 * (pp_model_run_alone), is that work's only: the backend is taken back
 * at once, the model is not spoiled, and its frames are those of a run
 * that never failed.  And work that ran while the backend was halted and
 * ended after it was taken back learns that it failed. */
static void
test_other_work_alone (Fixture * f, gconstpointer data)
{
  const gsize bytes = FRAME_SIDE * FRAME_SIDE * 3;
  g_autofree guint8 *want = g_malloc (bytes);
  g_autofree guint8 *got = g_malloc (bytes);
  g_autoptr (GError) error = NULL;
  g_autofree gchar *recovered = NULL;
  OtherWork work = { f, 64 << 20 };
  PpModel *m;
  guint since;

  (void) data;
  m = load (f, &error);
  g_assert_no_error (error);
  g_assert_true (run_frames (f, m, want, &error));
  g_assert_no_error (error);

  g_assert_false (pp_model_run_alone (m, other_work, &work, &recovered,
          &error));
  g_assert_error (error, PP_ERROR, PP_ERROR_RESOURCE);
  g_assert_nonnull (strstr (error->message, "out of device memory"));
  g_clear_error (&error);
  g_assert_nonnull (recovered);
  g_assert_nonnull (strstr (recovered, "out of device memory"));
  g_assert_false (pp_backend_is_halted (f->be));
  g_assert_false (pp_model_spoiled (m));
  g_assert_true (run_frames (f, m, got, &error));
  g_assert_no_error (error);
  g_assert_cmpmem (got, bytes, want, bytes);

  /* Halted by other work, taken back before the model's next work; work
   * begun while halted fails even when it ends after that. */
  since = pp_backend_failures (f->be);
  g_assert_true (pp_backend_halt (f->be, g_error_new_literal (PP_ERROR,
              PP_ERROR_DEVICE, "other work failed")));
  g_clear_pointer (&recovered, g_free);
  g_assert_true (pp_model_take_backend_back (m, &recovered));
  g_assert_cmpstr (recovered, ==, "other work failed");
  g_assert_false (pp_backend_check (f->be, since + 1, &error));
  g_assert_nonnull (strstr (error->message, "recovered since"));
  g_clear_error (&error);
  g_clear_pointer (&recovered, g_free);
  g_assert_false (pp_model_take_backend_back (m, &recovered));
  g_assert_null (recovered);
  g_assert_true (run_frames (f, m, got, &error));
  g_assert_no_error (error);
  g_assert_cmpmem (got, bytes, want, bytes);

  /* A spoiled model's backend is not taken back: the model is loaded
   * again first. */
  g_assert_true (pp_backend_halt (f->be, g_error_new_literal (PP_ERROR,
              PP_ERROR_DEVICE, "a failure during the model's work")));
  g_assert_false (run_frames (f, m, got, &error));
  g_clear_error (&error);
  g_assert_true (pp_model_spoiled (m));
  g_assert_false (pp_model_take_backend_back (m, &recovered));
  g_assert_true (pp_backend_is_halted (f->be));
  pp_model_free (m);
  g_assert_true (pp_backend_recover (f->be, NULL));
}

/* What a stopped stream hands back (pp_backend_give_back): the freed
 * buffers the backend keeps for reuse go back to the device, so that the
 * next allocation of their size asks the device again; not while a graph
 * is captured, where a free would end the capture. */
typedef struct
{
  PpBackend *be;
  float *buf;
} GiveBackInCapture;

static gboolean
give_back_in_capture (gpointer data, GError ** error)
{
  GiveBackInCapture *c = data;

  (void) error;
  pp_backend_give_back (c->be);
  pp_backend_fill (c->be, c->buf, 1.0f, 1024);
  return TRUE;
}

static void
test_give_back (Fixture * f, gconstpointer data)
{
  const gsize bytes = (gsize) 64 << 20;
  g_autoptr (GError) error = NULL;
  GiveBackInCapture c = { f->be, NULL };
  gpointer hold, a, graph;
  guint64 calls;

  (void) data;
  /* A live buffer: the backend keeps what is freed beside it. */
  hold = pp_backend_alloc (f->be, 4096, NULL);
  c.buf = hold;
  g_assert_nonnull (hold);
  a = pp_backend_alloc (f->be, bytes, NULL);
  g_assert_nonnull (a);
  pp_backend_free (f->be, a);
  calls = f->malloc_calls ();
  a = pp_backend_alloc (f->be, bytes, NULL);
  g_assert_nonnull (a);
  g_assert_cmpuint (f->malloc_calls (), ==, calls);
  pp_backend_free (f->be, a);

  /* Inside a capture it gives nothing back. */
  graph = pp_backend_graph_capture (f->be, give_back_in_capture, &c, &error);
  g_assert_no_error (error);
  g_assert_nonnull (graph);
  pp_backend_graph_free (f->be, graph);
  calls = f->malloc_calls ();
  a = pp_backend_alloc (f->be, bytes, NULL);
  g_assert_cmpuint (f->malloc_calls (), ==, calls);
  pp_backend_free (f->be, a);

  /* Given back: the same size is the device's again. */
  pp_backend_give_back (f->be);
  calls = f->malloc_calls ();
  a = pp_backend_alloc (f->be, bytes, NULL);
  g_assert_nonnull (a);
  g_assert_cmpuint (f->malloc_calls (), ==, calls + 1);
  pp_backend_free (f->be, a);
  pp_backend_free (f->be, hold);
  g_assert_false (pp_backend_is_halted (f->be));
}

/* With $PP_CUDA_EMU_REFUSE=lt-fault and cuBLASLt's algorithms timed: a
 * trial's kernels fault on the device, whose context is lost for good.
 * The frame fails naming the trial and the loss; the backend is never
 * taken back, and the next load fails with that cause, not with
 * whichever op met the lost device next. */
static void
test_device_lost (Fixture * f, gconstpointer data)
{
  g_autofree guint8 *out = g_malloc (FRAME_SIDE * FRAME_SIDE * 3);
  g_autoptr (GError) error = NULL;
  g_autoptr (PpModel) m = load (f, &error);

  g_assert_no_error (error);
  g_assert_false (run_frames (f, m, out, &error));
  g_assert_nonnull (error);
  g_test_message ("the frame: %s", error->message);
  if (strstr (error->message, "faulted on the device while it was timed")
      == NULL || strstr (error->message, "context is lost") == NULL)
    g_error ("the frame failed with '%s'", error->message);
  g_clear_error (&error);
  g_assert_true (pp_backend_is_halted (f->be));
  g_assert_false (pp_backend_recover (f->be, NULL));
  g_assert_true (pp_backend_is_halted (f->be));
  {
    g_autoptr (PpModel) again = load (f, &error);
    guint since = pp_backend_failures (f->be);

    if (again != NULL)
      g_assert_false (run_frames (f, again, out, &error)
          && pp_backend_check (f->be, since, &error));
  }
  g_assert_nonnull (error);
  g_test_message ("the next load: %s", error->message);
  if (strstr (error->message, "context is lost") == NULL)
    g_error ("the next load failed with '%s'", error->message);
}

int
main (int argc, char **argv)
{
  /* The backend's info lines, which count_plans reads. */
  g_setenv ("G_MESSAGES_DEBUG", "all", TRUE);
  g_log_set_writer_func (count_plans, NULL, NULL);
  g_test_init (&argc, &argv, NULL);
  g_test_add ("/backend/kept-failures/halted-makes-nothing", Fixture, NULL,
      fixture_set_up, test_halted_makes_nothing, fixture_tear_down);
  g_test_add ("/backend/kept-failures/each-allocation", Fixture, NULL,
      fixture_set_up, test_each_allocation, fixture_tear_down);
  g_test_add ("/backend/kept-failures/other-work-alone", Fixture, NULL,
      fixture_set_up, test_other_work_alone, fixture_tear_down);
  /* Without graphs the backend, taken back, drops what it made per shape
   * (cuda_trim): the filters laid out channels last in their own bytes
   * stay known as such, or the next convolution lays them out again. */
  g_test_add ("/backend/kept-failures/other-work-alone-eager", Fixture,
      "?cuda-graphs=0", fixture_set_up, test_other_work_alone,
      fixture_tear_down);
  g_test_add ("/backend/kept-failures/give-back", Fixture, NULL,
      fixture_set_up, test_give_back, fixture_tear_down);
  /* The emulated device's fault is the process's for good: a run of its
   * own. */
  if (g_strcmp0 (g_getenv ("PP_CUDA_EMU_REFUSE"), "lt-fault") == 0)
    g_test_add ("/backend/kept-failures/device-lost", Fixture, NULL,
        fixture_set_up, test_device_lost, fixture_tear_down);
  return g_test_run ();
}
