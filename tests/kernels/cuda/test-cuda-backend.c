/* The CUDA backend's host-side logic, which needs no device: the
 * attention's chunk planner, the convolution cache's key, the variables
 * that choose the attention's and convolutions' ways, the group norm's
 * split, the activations' dtype, the freed blocks kept for reuse, and the
 * backend's error without a device.  Where a device exists, a few ops are
 * compared with the CPU backend, on weights of each dtype. */
#include "pp-backend.h"
#include "pp-cuda-arch.h"
#include "pp-cuda-attention-plan.h"
#include "pp-cuda-backend.h"
#include "pp-cuda-blocks.h"
#include "pp-cuda-choice.h"
#include "pp-cuda-conv-key.h"
#include "pp-cuda-kernels.h"
#include "pp-cuda-private.h"
#include "pp-cuda-tuning.h"
#include "pp-error.h"
#include "pp-ops.h"

#include <glib/gstdio.h>
#include <math.h>
#include <string.h>

/* Kept blocks */

typedef struct
{
  GPtrArray *released;
} Released;

static void
note_release (gpointer mem, gpointer data)
{
  Released *r = data;

  g_ptr_array_add (r->released, mem);
}

/* Stand-ins for device addresses: the set only compares and returns
 * them. */
#define FAKE_BLOCK(i) ((gpointer) (guintptr) (0x10000 * (i)))

static void
test_blocks (void)
{
  PpCudaBlocks *blocks = pp_cuda_blocks_new ();
  Released r = { g_ptr_array_new () };
  gsize got = 0;

  g_assert_cmpuint (pp_cuda_blocks_round (0), ==, PP_CUDA_BLOCK_ALIGN);
  g_assert_cmpuint (pp_cuda_blocks_round (1), ==, PP_CUDA_BLOCK_ALIGN);
  g_assert_cmpuint (pp_cuda_blocks_round (PP_CUDA_BLOCK_ALIGN), ==,
      PP_CUDA_BLOCK_ALIGN);
  g_assert_cmpuint (pp_cuda_blocks_round (PP_CUDA_BLOCK_ALIGN + 1), ==,
      2 * PP_CUDA_BLOCK_ALIGN);
  g_assert_cmpuint (pp_cuda_blocks_round (G_MAXSIZE), ==, G_MAXSIZE);
  g_assert_null (pp_cuda_blocks_take (blocks, 1, &got));

  pp_cuda_blocks_keep (blocks, FAKE_BLOCK (1), 4096);
  pp_cuda_blocks_keep (blocks, FAKE_BLOCK (2), 1024);
  pp_cuda_blocks_keep (blocks, FAKE_BLOCK (3), 1024);
  pp_cuda_blocks_keep (blocks, FAKE_BLOCK (4), 65536);
  g_assert_cmpuint (pp_cuda_blocks_count (blocks), ==, 4);
  g_assert_cmpuint (pp_cuda_blocks_bytes (blocks), ==, 4096 + 2048 + 65536);

  /* The smallest that fits, the lower address first among equals. */
  g_assert_true (pp_cuda_blocks_take (blocks, 1000, &got) == FAKE_BLOCK (2));
  g_assert_cmpuint (got, ==, 1024);
  g_assert_true (pp_cuda_blocks_take (blocks, 1024, &got) == FAKE_BLOCK (3));
  /* 1025 bytes round to 1280, which 4096 exceeds twice over: none. */
  g_assert_null (pp_cuda_blocks_take (blocks, 1025, &got));
  /* 2048 takes the 4096 (at most twice its size); the next size down
   * would not. */
  g_assert_null (pp_cuda_blocks_take (blocks, 2048 - PP_CUDA_BLOCK_ALIGN,
          &got));
  g_assert_true (pp_cuda_blocks_take (blocks, 2048, &got) == FAKE_BLOCK (1));
  g_assert_cmpuint (got, ==, 4096);
  g_assert_null (pp_cuda_blocks_take (blocks, 65537, &got));
  g_assert_cmpuint (pp_cuda_blocks_count (blocks), ==, 1);
  g_assert_cmpuint (pp_cuda_blocks_bytes (blocks), ==, 65536);

  /* Kept again, and handed back smallest first. */
  pp_cuda_blocks_keep (blocks, FAKE_BLOCK (1), 4096);
  pp_cuda_blocks_keep (blocks, FAKE_BLOCK (3), 1024);
  g_assert_cmpuint (pp_cuda_blocks_drain (blocks, note_release, &r), ==,
      65536 + 4096 + 1024);
  g_assert_cmpuint (r.released->len, ==, 3);
  g_assert_true (g_ptr_array_index (r.released, 0) == FAKE_BLOCK (3));
  g_assert_true (g_ptr_array_index (r.released, 1) == FAKE_BLOCK (1));
  g_assert_true (g_ptr_array_index (r.released, 2) == FAKE_BLOCK (4));
  g_assert_cmpuint (pp_cuda_blocks_count (blocks), ==, 0);
  g_assert_cmpuint (pp_cuda_blocks_bytes (blocks), ==, 0);
  g_assert_null (pp_cuda_blocks_take (blocks, 1, &got));
  g_ptr_array_unref (r.released);
  pp_cuda_blocks_free (blocks);
}

/* A block kept twice would be handed to two users: refused. */
static void
test_blocks_kept_twice (void)
{
  if (g_test_subprocess ()) {
    PpCudaBlocks *blocks = pp_cuda_blocks_new ();

    pp_cuda_blocks_keep (blocks, FAKE_BLOCK (1), 1024);
    pp_cuda_blocks_keep (blocks, FAKE_BLOCK (1), 1024);
    return;
  }
  g_test_trap_subprocess (NULL, 0, G_TEST_SUBPROCESS_DEFAULT);
  g_test_trap_assert_failed ();
  g_test_trap_assert_stderr ("*pp_cuda_blocks_keep*");
}

/* Attention planner */

static void
check_plan (int lq, int lk, int heads, gsize bound)
{
  PpCudaAttentionPlan plan;
  g_autofree guint8 *seen = g_new0 (guint8, (gsize) lq * heads);
  gsize largest = 0;

  g_assert_true (pp_cuda_attention_plan (lq, lk, heads, bound, &plan));
  g_assert_cmpuint (plan.scratch_bytes, <=, bound);
  for (int i = 0; i < pp_cuda_attention_n_chunks (&plan); i++) {
    PpCudaAttentionChunk c = pp_cuda_attention_chunk (&plan, i);
    const gsize bytes = (gsize) c.rows * c.heads * lk * sizeof (float);

    g_assert_cmpint (c.rows, >, 0);
    g_assert_cmpint (c.heads, >, 0);
    g_assert_cmpint (c.row0 + c.rows, <=, lq);
    g_assert_cmpint (c.head0 + c.heads, <=, heads);
    g_assert_cmpuint (bytes, <=, plan.scratch_bytes);
    largest = MAX (largest, bytes);
    for (int h = c.head0; h < c.head0 + c.heads; h++)
      for (int r = c.row0; r < c.row0 + c.rows; r++)
        seen[(gsize) h * lq + r]++;
  }
  g_assert_cmpuint (largest, ==, plan.scratch_bytes);
  for (gsize i = 0; i < (gsize) lq * heads; i++)
    g_assert_cmpuint (seen[i], ==, 1);
}

static void
test_attention_plan (void)
{
  const gsize bound = PP_CUDA_ATTENTION_SCRATCH_BYTES;
  PpCudaAttentionPlan plan;

  /* SD UNet shapes: self-attention at 64², 32², 16², 8² and
   * cross-attention over 77 text tokens, 5 to 20 heads. */
  for (int heads = 5; heads <= 20; heads++) {
    check_plan (4096, 4096, heads, bound);
    check_plan (4096, 77, heads, bound);
    check_plan (1024, 1024, heads, bound);
    check_plan (256, 77, heads, bound);
    check_plan (64, 64, heads, bound);
  }
  /* A big shape leaves min rows per chunk with heads split. */
  g_assert_true (pp_cuda_attention_plan (4096, 4096, 20, bound, &plan));
  g_assert_cmpint (plan.rows, >=, PP_CUDA_ATTENTION_MIN_ROWS);
  /* Tiny ones: one chunk. */
  check_plan (1, 1, 1, bound);
  check_plan (3, 5, 2, bound);
  g_assert_true (pp_cuda_attention_plan (7, 9, 3, bound, &plan));
  g_assert_cmpint (pp_cuda_attention_n_chunks (&plan), ==, 1);
  /* Tight bounds: odd remainders, one row of one head at a time. */
  check_plan (100, 77, 8, 77 * 4 * 13);
  check_plan (50, 10, 3, 40);
  check_plan (33, 7, 5, 7 * 4 * 64 * 2 + 4);
  /* Not even one row fits. */
  g_assert_false (pp_cuda_attention_plan (10, 1000, 2, 3999, &plan));
}

/* Convolution cache key */

static void
test_conv_key (void)
{
  const PpCudaConvKey a = { 1, 320, 64, 64, 320, 3, 3, 1, 1, PP_DTYPE_F16,
    FALSE
  };
  PpCudaConvKey b = a;
  gint *fields = (gint *) &b.n;
  GHashTable *table = g_hash_table_new (pp_cuda_conv_key_hash,
      pp_cuda_conv_key_equal);

  g_assert_true (pp_cuda_conv_key_equal (&a, &b));
  g_assert_cmpuint (pp_cuda_conv_key_hash (&a), ==,
      pp_cuda_conv_key_hash (&b));
  /* Any field changed, the dtype included: another key. */
  for (guint i = 0; i < 9; i++) {
    b = a;
    fields[i]++;
    g_assert_false (pp_cuda_conv_key_equal (&a, &b));
  }
  b = a;
  b.nhwc = TRUE;
  g_assert_false (pp_cuda_conv_key_equal (&a, &b));
  b = a;
  b.dtype = PP_DTYPE_BF16;
  g_assert_false (pp_cuda_conv_key_equal (&a, &b));
  g_hash_table_add (table, (gpointer) &a);
  g_assert_true (g_hash_table_contains (table, &b) == FALSE);
  b.dtype = PP_DTYPE_F16;
  g_assert_true (g_hash_table_contains (table, &b));
  g_hash_table_unref (table);
}

/* The environment variables that choose the attention's and the
 * convolutions' ways: their defaults, each value, and an error that
 * names the variable and the choices for anything else. */
static void
test_ways (void)
{
  const struct
  {
    const gchar *value;
    PpCudaAttention way;
  } ok[] = {
    {NULL, PP_CUDA_ATTENTION_FUSED}, {"", PP_CUDA_ATTENTION_FUSED},
    {"fused", PP_CUDA_ATTENTION_FUSED}, {"gemm", PP_CUDA_ATTENTION_GEMM},
    {"f32", PP_CUDA_ATTENTION_F32},
  };
  const gchar *const bad[] = { "FUSED", "f16", "cudnn", " gemm" };
  PpCudaAttention way;
  gboolean timed;
  GError *error = NULL;

  for (guint i = 0; i < G_N_ELEMENTS (ok); i++) {
    way = (PpCudaAttention) -1;
    g_assert_true (pp_cuda_attention_parse (ok[i].value, &way, &error));
    g_assert_no_error (error);
    g_assert_cmpint (way, ==, ok[i].way);
  }
  for (guint i = 0; i < G_N_ELEMENTS (bad); i++) {
    g_assert_false (pp_cuda_attention_parse (bad[i], &way, &error));
    g_assert_error (error, PP_ERROR, PP_ERROR_CONFIG);
    g_assert_nonnull (strstr (error->message, "PPDIFFUSE_CUDA_ATTENTION="));
    g_assert_nonnull (strstr (error->message, bad[i]));
    g_assert_nonnull (strstr (error->message, "fused, gemm or f32"));
    g_clear_error (&error);
  }
  g_assert_true (pp_cuda_conv_algo_parse (NULL, &timed, &error));
  g_assert_false (timed);
  g_assert_true (pp_cuda_conv_algo_parse ("timed", &timed, &error) && timed);
  g_assert_true (pp_cuda_conv_algo_parse ("heuristic", &timed, &error));
  g_assert_false (timed);
  g_assert_no_error (error);
  g_assert_false (pp_cuda_conv_algo_parse ("find", &timed, &error));
  g_assert_error (error, PP_ERROR, PP_ERROR_CONFIG);
  g_assert_nonnull (strstr (error->message,
          "PPDIFFUSE_CUDA_CONV_ALGO=find: expected heuristic or timed"));
  g_clear_error (&error);
}

/* Which of a build's device code a GPU runs: a binary for its
 * architecture's same or an earlier minor revision, the best of them;
 * else the PTX where the GPU is not older than it; else nothing.  And
 * the build's code in words. */
static void
test_device_code (void)
{
  static const struct
  {
    const gchar *archs;
    gint ptx, major, minor;
    PpCudaCode code;
    gint arch;
  } cases[] = {
    /* The demo's build: Ampere, Ada, Hopper binaries, Hopper's PTX. */
    { "80,89,90", 90, 8, 0, PP_CUDA_CODE_BINARY, 80 },
    { "80,89,90", 90, 8, 6, PP_CUDA_CODE_BINARY, 80 },
    { "80,89,90", 90, 8, 7, PP_CUDA_CODE_BINARY, 80 },
    { "80,89,90", 90, 8, 9, PP_CUDA_CODE_BINARY, 89 },
    { "80,89,90", 90, 9, 0, PP_CUDA_CODE_BINARY, 90 },
    { "80,89,90", 90, 10, 0, PP_CUDA_CODE_PTX, 90 },
    { "80,89,90", 90, 12, 0, PP_CUDA_CODE_PTX, 90 },
    { "80,89,90", 90, 7, 5, PP_CUDA_CODE_NONE, 0 },
    /* The test suite's: the PTX alone. */
    { "", 90, 9, 0, PP_CUDA_CODE_PTX, 90 },
    { "", 90, 8, 9, PP_CUDA_CODE_NONE, 0 },
    { "", 90, 12, 0, PP_CUDA_CODE_PTX, 90 },
    /* The GPU check's: one binary, no other for the PTX to cover. */
    { "90", 90, 9, 0, PP_CUDA_CODE_BINARY, 90 },
    { "90", 90, 8, 0, PP_CUDA_CODE_NONE, 0 },
    /* A binary is not for a later major architecture, nor an earlier
     * minor revision; the order of the list does not matter. */
    { "89,75", 89, 9, 0, PP_CUDA_CODE_PTX, 89 },
    { "89,75", 89, 8, 6, PP_CUDA_CODE_NONE, 0 },
    { "89,75", 89, 7, 5, PP_CUDA_CODE_BINARY, 75 },
    { " 75, 86 ,bogus,,", 86, 8, 9, PP_CUDA_CODE_BINARY, 86 },
    { "75", 0, 8, 0, PP_CUDA_CODE_NONE, 0 },
    { "120", 120, 12, 1, PP_CUDA_CODE_BINARY, 120 },
    { "120", 120, 10, 0, PP_CUDA_CODE_NONE, 0 },
  };
  g_autofree gchar *three = pp_cuda_code_describe ("80,89,90", 90);
  g_autofree gchar *two = pp_cuda_code_describe ("80,90", 0);
  g_autofree gchar *one = pp_cuda_code_describe ("90", 90);
  g_autofree gchar *ptx = pp_cuda_code_describe ("", 90);
  g_autofree gchar *none = pp_cuda_code_describe (NULL, 0);

  for (guint i = 0; i < G_N_ELEMENTS (cases); i++) {
    gint arch = -1;

    g_test_message ("archs '%s', PTX %d, device %d.%d", cases[i].archs,
        cases[i].ptx, cases[i].major, cases[i].minor);
    g_assert_cmpint (pp_cuda_code_for (cases[i].archs, cases[i].ptx,
            cases[i].major, cases[i].minor, &arch), ==, cases[i].code);
    g_assert_cmpint (arch, ==, cases[i].arch);
  }
  g_assert_cmpstr (three, ==, "binaries for sm_80, sm_89 and sm_90 and PTX "
      "for compute_90");
  g_assert_cmpstr (two, ==, "binaries for sm_80 and sm_90");
  g_assert_cmpstr (one, ==, "a binary for sm_90 and PTX for compute_90");
  g_assert_cmpstr (ptx, ==, "PTX for compute_90 alone");
  g_assert_cmpstr (none, ==, "no device code");
}

/* The choice behind every variable: the first name by default, each name
 * its index, one name alone, and the error's list of the names. */
static void
test_choice (void)
{
  static const gchar *const three[] = { "split", "whole", "third", NULL };
  static const gchar *const one[] = { "only", NULL };
  GError *error = NULL;
  guint index = 99;

  g_assert_true (pp_cuda_choice_parse ("V", NULL, three, &index, &error));
  g_assert_cmpuint (index, ==, 0);
  g_assert_true (pp_cuda_choice_parse ("V", "", three, &index, &error));
  g_assert_cmpuint (index, ==, 0);
  for (guint i = 0; three[i] != NULL; i++) {
    g_assert_true (pp_cuda_choice_parse ("V", three[i], three, &index,
            &error));
    g_assert_cmpuint (index, ==, i);
  }
  g_assert_no_error (error);
  g_assert_false (pp_cuda_choice_parse ("PPDIFFUSE_CUDA_GROUP_NORM", "half",
          three, &index, &error));
  g_assert_error (error, PP_ERROR, PP_ERROR_CONFIG);
  g_assert_cmpstr (error->message, ==, "PPDIFFUSE_CUDA_GROUP_NORM=half: "
      "expected split, whole or third");
  g_clear_error (&error);
  g_assert_false (pp_cuda_choice_parse ("V", "x", one, &index, &error));
  g_assert_cmpstr (error->message, ==, "V=x: expected only");
  g_clear_error (&error);
}

/* The only file in @folder (asserted). */
static gchar *
only_file (const gchar * folder)
{
  GDir *dir = g_dir_open (folder, 0, NULL);
  const gchar *name;
  gchar *path;

  g_assert_nonnull (dir);
  name = g_dir_read_name (dir);
  g_assert_nonnull (name);
  path = g_build_filename (folder, name, NULL);
  g_assert_null (g_dir_read_name (dir));
  g_dir_close (dir);
  return path;
}

/* The timed choices kept across processes: none at first; a choice kept
 * is found by the same identity, op and key alone, in a file that says
 * what it is for; a file that is not one, or holds another number of
 * values, is said and not taken, and the next store replaces it; "off"
 * keeps nothing; a folder that cannot be made is said once, and nothing
 * fails. */
static void
tuning_body (void)
{
  g_autofree gchar *root = g_dir_make_tmp ("ppdiffuse-tuning-XXXXXX", NULL);
  g_autofree gchar *folder = g_build_filename (root, "choices", NULL);
  g_autofree gchar *blocker = g_build_filename (root, "a-file", NULL);
  g_autofree gchar *under = g_build_filename (blocker, "choices", NULL);
  g_autofree gchar *path = NULL, *text = NULL;
  const gint64 kept[3] = { 1, -7, G_MAXINT64 };
  gint64 got[3] = { 0 };
  PpCudaTuning *t = pp_cuda_tuning_new (folder, "GPU A, cuDNN 9");
  PpCudaTuning *other = pp_cuda_tuning_new (folder, "GPU B, cuDNN 9");
  PpCudaTuning *lost = pp_cuda_tuning_new (under, "GPU A, cuDNN 9");

  g_assert_null (pp_cuda_tuning_new ("off", "GPU A"));
  g_assert_cmpstr (pp_cuda_tuning_folder (t), ==, folder);
  g_assert_false (pp_cuda_tuning_lookup (t, "conv", "3×3", got, 3));
  pp_cuda_tuning_store (t, "conv", "3×3", kept, 3);
  g_assert_true (pp_cuda_tuning_lookup (t, "conv", "3×3", got, 3));
  g_assert_cmpmem (got, sizeof got, kept, sizeof kept);
  /* Another shape, op or device has none. */
  g_assert_false (pp_cuda_tuning_lookup (t, "conv", "1×1", got, 3));
  g_assert_false (pp_cuda_tuning_lookup (t, "gemm", "3×3", got, 3));
  g_assert_false (pp_cuda_tuning_lookup (other, "conv", "3×3", got, 3));
  /* The file says what it is for. */
  path = only_file (folder);
  g_assert_true (g_file_get_contents (path, &text, NULL, NULL));
  g_assert_nonnull (strstr (text, "identity=GPU A, cuDNN 9\n"));
  g_assert_nonnull (strstr (text, "op=conv\n"));
  g_assert_nonnull (strstr (text, "key=3×3\n"));
  g_assert_nonnull (strstr (text, "values=1;-7;9223372036854775807;"));
  /* Another number of values than asked for, then not a key file. */
  g_assert_false (pp_cuda_tuning_lookup (t, "conv", "3×3", got, 2));
  g_assert_true (g_file_set_contents (path, "[half a choi", -1, NULL));
  g_assert_false (pp_cuda_tuning_lookup (t, "conv", "3×3", got, 3));
  pp_cuda_tuning_store (t, "conv", "3×3", kept, 3);
  memset (got, 0, sizeof got);
  g_assert_true (pp_cuda_tuning_lookup (t, "conv", "3×3", got, 3));
  g_assert_cmpmem (got, sizeof got, kept, sizeof kept);
  /* A value that is not a number. */
  g_clear_pointer (&text, g_free);
  g_assert_true (g_file_get_contents (path, &text, NULL, NULL));
  {
    g_autofree gchar *bad = g_strdup (text);

    *strstr (bad, "-7") = 'x';
    g_assert_true (g_file_set_contents (path, bad, -1, NULL));
  }
  g_assert_false (pp_cuda_tuning_lookup (t, "conv", "3×3", got, 3));
  /* A folder under a file: said once, for every store. */
  g_assert_true (g_file_set_contents (blocker, "", -1, NULL));
  pp_cuda_tuning_store (lost, "conv", "3×3", kept, 3);
  pp_cuda_tuning_store (lost, "gemm", "3×3", kept, 3);
  g_assert_false (pp_cuda_tuning_lookup (lost, "conv", "3×3", got, 3));

  pp_cuda_tuning_free (t);
  pp_cuda_tuning_free (other);
  pp_cuda_tuning_free (lost);
  g_assert_cmpint (g_remove (path), ==, 0);
  g_assert_cmpint (g_rmdir (folder), ==, 0);
  g_assert_cmpint (g_remove (blocker), ==, 0);
  g_assert_cmpint (g_rmdir (root), ==, 0);
}

/* tuning_body in a process of its own, whose messages are read: each
 * file that is not a choice said, the folder that cannot be made once. */
static void
test_tuning (void)
{
  if (g_test_subprocess ()) {
    tuning_body ();
    return;
  }
  g_test_trap_subprocess (NULL, 30 * G_USEC_PER_SEC, G_TEST_SUBPROCESS_DEFAULT);
  g_test_trap_assert_passed ();
  g_test_trap_assert_stderr ("*not a choice kept by ppdiffuse (no group*"
      "and 2 values)*not a choice kept by ppdiffuse (*made again, and the "
      "file replaced*value 1, \"x7\", is not a number*timed choices cannot "
      "be kept there*" PP_CUDA_TUNING_ENV "=FOLDER*");
  g_test_trap_assert_stderr_unmatched ("*cannot be kept there*"
      "cannot be kept there*");
}

/* Which convolutions run channels-last: 16-bit ones with channels in
 * multiples of 8, under auto (the default) as under nhwc, a UNet's
 * 1280-channel 8² layers among them; under padded, the other 16-bit
 * ones too, their channels padded. */
static void
test_conv_layout (void)
{
  const PpDType f16 = PP_DTYPE_F16, f32 = PP_DTYPE_F32;
  const struct
  {
    PpCudaConvKey key;
    gboolean nchw, nhwc, automatic;
  } cases[] = {
    {{1, 320, 64, 64, 320, 3, 3, 1, 1, f16, 0}, FALSE, TRUE, TRUE},
    {{1, 64, 256, 256, 64, 3, 3, 1, 1, f16, 0}, FALSE, TRUE, TRUE},
    {{1, 1280, 8, 8, 1280, 3, 3, 1, 1, f16, 0}, FALSE, TRUE, TRUE},
    {{4, 1280, 8, 8, 1280, 3, 3, 1, 1, f16, 0}, FALSE, TRUE, TRUE},
    {{1, 4, 64, 64, 320, 3, 3, 1, 1, f16, 0}, FALSE, FALSE, FALSE},
    {{1, 64, 512, 512, 3, 3, 3, 1, 1, f16, 0}, FALSE, FALSE, FALSE},
    {{1, 320, 64, 64, 320, 3, 3, 1, 1, f32, 0}, FALSE, FALSE, FALSE},
    {{1, 320, 64, 64, 320, 3, 3, 2, 1, PP_DTYPE_BF16, 0}, FALSE, TRUE,
        TRUE},
  };
  PpCudaConvLayout layout;
  GError *error = NULL;

  for (guint i = 0; i < G_N_ELEMENTS (cases); i++) {
    /* Padded: those nhwc takes, and the other 16-bit ones padded. */
    g_assert_cmpint (pp_cuda_conv_nhwc (PP_CUDA_CONV_PADDED, &cases[i].key),
        ==, cases[i].nhwc);
    g_assert_cmpint (pp_cuda_conv_padded (PP_CUDA_CONV_PADDED,
            &cases[i].key), ==, !cases[i].nhwc
        && cases[i].key.dtype != f32);
    /* Auto: as padded. */
    g_assert_cmpint (pp_cuda_conv_padded (PP_CUDA_CONV_AUTO, &cases[i].key),
        ==, pp_cuda_conv_padded (PP_CUDA_CONV_PADDED, &cases[i].key));
    g_assert_false (pp_cuda_conv_padded (PP_CUDA_CONV_NHWC, &cases[i].key));
    g_assert_cmpint (pp_cuda_conv_nhwc (PP_CUDA_CONV_NCHW, &cases[i].key),
        ==, cases[i].nchw);
    g_assert_cmpint (pp_cuda_conv_nhwc (PP_CUDA_CONV_NHWC, &cases[i].key),
        ==, cases[i].nhwc);
    g_assert_cmpint (pp_cuda_conv_nhwc (PP_CUDA_CONV_AUTO, &cases[i].key),
        ==, cases[i].automatic);
  }
  g_assert_true (pp_cuda_conv_layout_parse (NULL, &layout, &error));
  g_assert_cmpint (layout, ==, PP_CUDA_CONV_AUTO);
  g_assert_true (pp_cuda_conv_layout_parse ("nchw", &layout, &error));
  g_assert_cmpint (layout, ==, PP_CUDA_CONV_NCHW);
  g_assert_true (pp_cuda_conv_layout_parse ("nhwc", &layout, &error));
  g_assert_cmpint (layout, ==, PP_CUDA_CONV_NHWC);
  g_assert_true (pp_cuda_conv_layout_parse ("auto", &layout, &error));
  g_assert_cmpint (layout, ==, PP_CUDA_CONV_AUTO);
  g_assert_true (pp_cuda_conv_layout_parse ("padded", &layout, &error));
  g_assert_cmpint (layout, ==, PP_CUDA_CONV_PADDED);
  g_assert_cmpint (pp_cuda_conv_pad_channels (3), ==, 8);
  g_assert_cmpint (pp_cuda_conv_pad_channels (4), ==, 8);
  g_assert_cmpint (pp_cuda_conv_pad_channels (8), ==, 8);
  g_assert_cmpint (pp_cuda_conv_pad_channels (9), ==, 16);
  g_assert_no_error (error);
  g_assert_false (pp_cuda_conv_layout_parse ("NHWC", &layout, &error));
  g_assert_error (error, PP_ERROR, PP_ERROR_CONFIG);
  g_assert_nonnull (strstr (error->message, "PPDIFFUSE_CUDA_CONV_LAYOUT=NHWC: "
          "expected auto, nchw, nhwc or padded"));
  g_clear_error (&error);
}

/* The group norm's split: a UNet's 32 groups of 40,960 values at 64²
 * become hundreds of blocks, a small group stays one block, and no split
 * goes past what one warp combines. */
static void
test_group_norm_splits (void)
{
  const int hws[] = { 4096, 1024, 256, 64, 10 };
  const int channels[] = { 320, 640, 1280, 8 };

  g_assert_cmpint (pp_cuda_group_norm_splits (1, 320, 4096, 32) * 32, >=,
      512);
  g_assert_cmpint (pp_cuda_group_norm_splits (1, 8, 10, 4), ==, 1);
  /* Past a grid row per group or a 32-bit index: the one-block way. */
  g_assert_cmpint (pp_cuda_group_norm_splits (65536, 32, 64, 1), ==, 0);
  g_assert_cmpint (pp_cuda_group_norm_splits (1, 2, (size_t) 1 << 32, 1),
      ==, 0);
  for (guint i = 0; i < G_N_ELEMENTS (hws); i++)
    for (guint j = 0; j < G_N_ELEMENTS (channels); j++)
      for (int n = 1; n <= 4; n *= 2) {
        const int groups = channels[j] == 8 ? 4 : 32;
        const int splits = pp_cuda_group_norm_splits (n, channels[j],
            hws[i], groups);
        const gsize count = (gsize) channels[j] / groups * hws[i];

        g_assert_cmpint (splits, >=, 1);
        g_assert_cmpint (splits, <=, PP_CUDA_GROUP_MAX_SPLITS);
        /* Every slice has values. */
        g_assert_cmpuint ((count + splits - 1) / splits * (splits - 1), <,
            count);
      }
}

/* Every scratch slot has a name for the message of a buffer that had to
 * grow during a capture. */
static void
test_scratch_names (void)
{
  for (int slot = 0; slot < PP_CUDA_SCRATCH_COUNT; slot++)
    g_assert_nonnull (pp_cuda_scratch_name ((PpCudaScratch) slot));
}

/* A failed call inside an op: on the thread capturing a graph it fails
 * the capture (the first error kept, named), elsewhere it ends the
 * process, naming the device. */
static void
test_op_error (void)
{
  PpCudaBackend cu;

  if (g_test_subprocess ()) {
    memset (&cu, 0, sizeof cu);
    cu.be.device = (gchar *) "cuda:9 test";
    pp_cuda_op_error (&cu, g_error_new_literal (PP_ERROR, PP_ERROR_DEVICE,
            "cudaErrorIllegalAddress"));
    return;
  }
  memset (&cu, 0, sizeof cu);
  cu.be.device = (gchar *) "cuda:9 test";
  cu.capturing = g_thread_self ();
  pp_cuda_op_error (&cu, g_error_new_literal (PP_ERROR, PP_ERROR_DEVICE,
          "cudaErrorStreamCaptureUnsupported"));
  pp_cuda_op_error (&cu, g_error_new_literal (PP_ERROR, PP_ERROR_DEVICE,
          "cudaErrorStreamCaptureInvalidated"));
  g_assert_nonnull (cu.capture_error);
  g_assert_cmpstr (cu.capture_error->message, ==, "cuda:9 test: while a "
      "CUDA graph was captured: cudaErrorStreamCaptureUnsupported");
  g_clear_error (&cu.capture_error);

  g_test_trap_subprocess (NULL, 0, G_TEST_SUBPROCESS_DEFAULT);
  g_test_trap_assert_failed ();
  g_test_trap_assert_stderr ("*CUDA backend cuda:9 test: "
      "cudaErrorIllegalAddress*");
}

/* Where the process keeps failures (rank 0's), a call failing inside an
 * op outside a capture halts the backend instead, keeping the first
 * failure, named as the process's end would have named it; the backend
 * runs work again once recovered. */
static void
test_op_error_kept (void)
{
  static const PpBackendMemory no_memory = { 0 };
  g_autoptr (GError) error = NULL;
  PpCudaBackend cu;
  g_autofree gchar *what = NULL;
  guint since;

  memset (&cu, 0, sizeof cu);
  cu.be.name = "cuda";
  cu.be.device = (gchar *) "cuda:9 test";
  cu.be.memory = &no_memory;
  pp_backend_keep_failures (&cu.be);
  since = pp_backend_failures (&cu.be);
  g_assert_true (pp_backend_check (&cu.be, since, NULL));
  pp_cuda_op_error (&cu, g_error_new_literal (PP_ERROR, PP_ERROR_RESOURCE,
          "out of device memory"));
  pp_cuda_op_error (&cu, g_error_new_literal (PP_ERROR, PP_ERROR_DEVICE,
          "cudaErrorIllegalAddress"));
  g_assert_true (pp_cuda_halted (&cu));
  g_assert_cmpuint (pp_backend_failures (&cu.be), ==, since + 1);
  g_assert_false (pp_backend_check (&cu.be, since, &error));
  g_assert_error (error, PP_ERROR, PP_ERROR_RESOURCE);
  g_assert_cmpstr (error->message, ==, "CUDA backend cuda:9 test: out of "
      "device memory");
  g_assert_true (pp_backend_recover (&cu.be, &what));
  g_assert_cmpstr (what, ==, "CUDA backend cuda:9 test: out of device "
      "memory");
  g_assert_false (pp_cuda_halted (&cu));
  g_assert_false (pp_backend_recover (&cu.be, NULL));
  /* Work begun before the failure still learns of it, and so does work
   * begun while halted (its first part skipped); the recovery counts. */
  g_clear_error (&error);
  g_assert_false (pp_backend_check (&cu.be, since, &error));
  g_clear_error (&error);
  g_assert_false (pp_backend_check (&cu.be, since + 1, &error));
  g_assert_nonnull (strstr (error->message, "recovered since"));
  g_assert_cmpuint (pp_backend_failures (&cu.be), ==, since + 2);
  g_assert_true (pp_backend_check (&cu.be, since + 2, NULL));
  g_mutex_clear (&cu.be.failure_lock);
}

/* Float32 activations reach the kernels as they are, an absent one as
 * NULL (16-bit ones are widened on the device: the on-device tests and
 * test-kernels-act-dtypes); one of a dtype no kernel takes (which the
 * wrappers refuse first) ends the process, naming the op and the
 * parameter. */
static void
test_activations (void)
{
  PpCudaBackend cu;
  float data[4] = { 0 };
  guint8 bytes[4] = { 0 };

  memset (&cu, 0, sizeof cu);
  cu.be.device = (gchar *) "cuda:9 test";
  if (g_test_subprocess ()) {
    pp_cuda_out (&cu, "silu", "x", pp_out (bytes, PP_DTYPE_U8, 4));
    return;
  }
  g_assert_true (pp_cuda_in (&cu, "conv2d", "x", pp_view_f32 (data, 4))
      == data);
  g_assert_null (pp_cuda_in (&cu, "lcm_step", "noise", pp_view_none ()));
  g_assert_true (pp_cuda_out (&cu, "silu", "x", pp_out_f32 (data, 4))
      == data);

  g_test_trap_subprocess (NULL, 0, G_TEST_SUBPROCESS_DEFAULT);
  g_test_trap_assert_failed ();
  g_test_trap_assert_stderr ("*CUDA backend cuda:9 test: silu: activation x "
      "is of dtype *float32*");
}

/* The backend */

static void
test_backend_get (void)
{
  GError *error = NULL;
  gint count = pp_cuda_backend_n_devices (&error);
  PpBackend *be;

  if (count > 0) {
    g_clear_error (&error);
    be = pp_cuda_backend_get (0, &error);
    g_assert_no_error (error);
    g_assert_cmpstr (be->name, ==, "cuda");
    g_assert_true (g_str_has_prefix (be->device, "cuda:0 "));
    g_assert_cmpint (be->default_weight_dtype, ==, PP_DTYPE_F16);
    g_assert_cmpuint (be->act_dtypes, ==, PP_DTYPE_BIT (PP_DTYPE_F32)
        | PP_DTYPE_BIT (PP_DTYPE_F16) | PP_DTYPE_BIT (PP_DTYPE_BF16));
    /* The defaults, unless the environment says otherwise: 16-bit
     * weights keep 16-bit activations, channels last, float32 ones
     * float32, channels first. */
    if (g_getenv (PP_CUDA_ACTIVATIONS_ENV) == NULL) {
      g_assert_cmpint (pp_backend_act_dtype (be, PP_DTYPE_F16), ==,
          PP_DTYPE_F16);
      g_assert_cmpint (pp_backend_act_dtype (be, PP_DTYPE_BF16), ==,
          PP_DTYPE_BF16);
      g_assert_cmpint (pp_backend_act_dtype (be, PP_DTYPE_F32), ==,
          PP_DTYPE_F32);
    }
    if (g_getenv (PP_ACT_LAYOUT_ENV) == NULL) {
      g_assert_cmpint (pp_backend_act_layout (be, PP_DTYPE_F16), ==,
          PP_LAYOUT_NHWC);
      g_assert_cmpint (pp_backend_act_layout (be, PP_DTYPE_F32), ==,
          PP_LAYOUT_NCHW);
    }
    g_assert_true (pp_cuda_backend_get (0, NULL) == be);
    g_test_message ("%s", be->device);
    be = pp_cuda_backend_get (count, &error);
    g_assert_null (be);
    g_assert_error (error, PP_ERROR, PP_ERROR_DEVICE);
    g_assert_nonnull (strstr (error->message, "out of range"));
    g_clear_error (&error);
    return;
  }
  g_clear_error (&error);
  /* No driver (the build machines): the runtime's status is named. */
  be = pp_cuda_backend_get (0, &error);
  g_assert_null (be);
  g_assert_error (error, PP_ERROR, PP_ERROR_DEVICE);
  g_test_message ("%s", error->message);
  g_assert_nonnull (strstr (error->message, "cudaGetDeviceCount"));
  g_assert_nonnull (strstr (error->message, "cudaError"));
  g_clear_error (&error);
  /* Every call says so again (nothing half-made is kept). */
  g_assert_null (pp_cuda_backend_get (0, &error));
  g_assert_error (error, PP_ERROR, PP_ERROR_DEVICE);
  g_clear_error (&error);
  g_assert_null (pp_cuda_backend_get (-1, &error));
  g_assert_error (error, PP_ERROR, PP_ERROR_DEVICE);
  g_clear_error (&error);
}

/* With a device: ops against the CPU backend */

typedef struct
{
  PpBackend *cpu, *gpu;
  GRand *rand;
} Pair;

static float *
random_floats (GRand * rand, gsize n)
{
  float *x = g_new (float, n);

  for (gsize i = 0; i < n; i++)
    x[i] = (float) g_rand_double_range (rand, -1.0, 1.0);
  return x;
}

static float *
to_device (PpBackend * be, const float *x, gsize n)
{
  float *d = pp_backend_alloc (be, n * sizeof (float), NULL);

  g_assert_nonnull (d);
  pp_backend_upload (be, d, x, n * sizeof (float));
  return d;
}

/* max |a - b| / max |b| over @n values. */
static double
normalised_error (const float *a, const float *b, gsize n)
{
  double err = 0.0, mag = 1e-30;

  for (gsize i = 0; i < n; i++) {
    err = MAX (err, fabs ((double) a[i] - b[i]));
    mag = MAX (mag, fabs ((double) b[i]));
  }
  return err / mag;
}

static void
compare (PpBackend * gpu, const float *d_y, const float *want, gsize n,
    double tolerance, const gchar * what)
{
  g_autofree float *got = g_new (float, n);
  double err;

  pp_backend_download (gpu, got, d_y, n * sizeof (float));
  err = normalised_error (got, want, n);
  g_test_message ("%s: normalised error %.3g", what, err);
  if (!(err <= tolerance))
    g_error ("%s: normalised error %.3g above %.3g", what, err, tolerance);
}

static void
test_ops_on_device (void)
{
  PpBackend *gpu = pp_cuda_backend_get (0, NULL), *cpu = pp_backend_cpu ();
  GRand *rand;

  if (gpu == NULL) {
    g_test_skip ("no CUDA device");
    return;
  }
  rand = g_rand_new_with_seed (11);
  /* conv2d and linear, weights of each dtype. */
  for (int d = 0; d < 3; d++) {
    const int n = 2, cin = 8, h = 13, w = 11, cout = 16, k = 3;
    const gsize xn = n * cin * h * w, wn = cout * cin * k * k;
    const gsize yn = (gsize) n * cout * h * w;
    g_autofree float *x = random_floats (rand, xn);
    g_autofree float *wt = random_floats (rand, wn);
    g_autofree float *b = random_floats (rand, cout);
    g_autofree float *want = g_new (float, yn);
    const PpDType dtypes[] = { PP_DTYPE_F32, PP_DTYPE_F16, PP_DTYPE_BF16 };
    const PpDType dt = dtypes[d];
    /* 16 bits: x is narrowed to the weights' type, y made in it. */
    const double tolerance = dt == PP_DTYPE_F32 ? 1e-5
        : dt == PP_DTYPE_F16 ? 2e-3 : 1.6e-2;
    g_autofree gchar *conv_what = g_strdup_printf ("conv2d %s",
        pp_dtype_name (dt));
    g_autofree gchar *linear_what = g_strdup_printf ("linear %s",
        pp_dtype_name (dt));
    gpointer owned_w, owned_b, owned_cw, owned_cb;
    PpView cw, cb, dw, db;
    float *dx = to_device (gpu, x, xn), *dy = to_device (gpu, want, yn);

    dw = pp_backend_upload_weights (gpu, wt, wn, dt, &owned_w, NULL);
    db = pp_backend_upload_weights (gpu, b, cout, dt, &owned_b, NULL);
    cw = pp_backend_upload_weights (cpu, wt, wn, dt, &owned_cw, NULL);
    cb = pp_backend_upload_weights (cpu, b, cout, dt, &owned_cb, NULL);
    g_assert_cmpint (dw.dtype, ==, dt);
    g_assert_cmpint (db.dtype, ==, dt);
    pp_conv2d (cpu, pp_view_f32 (x, xn), n, cin, h, w, cw, cb, cout, k, k, 1,
        1, pp_view_none (), FALSE, pp_out_f32 (want, yn));
    pp_conv2d (gpu, pp_view_f32 (dx, xn), n, cin, h, w, dw, db, cout, k, k, 1,
        1, pp_view_none (), FALSE, pp_out_f32 (dy, yn));
    compare (gpu, dy, want, yn, tolerance, conv_what);
    /* linear on the same weights read as [cout, cin·9]. */
    pp_linear (cpu, pp_view_f32 (x, xn), 2, cin * k * k, cw, cb, cout,
        pp_out_f32 (want, yn));
    pp_linear (gpu, pp_view_f32 (dx, xn), 2, cin * k * k, dw, db, cout,
        pp_out_f32 (dy, yn));
    compare (gpu, dy, want, 2 * cout, tolerance, linear_what);
    pp_backend_free (gpu, owned_w);
    pp_backend_free (gpu, owned_b);
    pp_backend_free (cpu, owned_cw);
    pp_backend_free (cpu, owned_cb);
    pp_backend_free (gpu, dx);
    pp_backend_free (gpu, dy);
  }
  /* attention and group norm, float32. */
  {
    const int n = 2, lq = 100, lk = 77, heads = 3, hd = 8;
    const gsize qn = (gsize) n * lq * heads * hd, kn = (gsize) n * lk
        * heads * hd;
    g_autofree float *q = random_floats (rand, qn);
    g_autofree float *k = random_floats (rand, kn);
    g_autofree float *v = random_floats (rand, kn);
    g_autofree float *want = g_new (float, qn);
    float *dq = to_device (gpu, q, qn), *dk = to_device (gpu, k, kn);
    float *dv = to_device (gpu, v, kn), *dout = to_device (gpu, q, qn);

    pp_attention (cpu, pp_view_f32 (q, qn), pp_view_f32 (k, kn),
        pp_view_f32 (v, kn), n, lq, lk, heads, hd, heads * hd, heads * hd,
        PP_DTYPE_F32, pp_out_f32 (want, qn));
    pp_attention (gpu, pp_view_f32 (dq, qn), pp_view_f32 (dk, kn),
        pp_view_f32 (dv, kn), n, lq, lk, heads, hd, heads * hd, heads * hd,
        PP_DTYPE_F32, pp_out_f32 (dout, qn));
    compare (gpu, dout, want, qn, 1e-5, "attention");
    /* q as [n, c = 24, hw = 100]: 4 groups. */
    pp_group_norm (cpu, pp_view_f32 (q, qn), pp_view_none (), n, heads * hd, lq,
        4, 1e-5f, pp_view_none (), pp_view_none (), FALSE,
        pp_out_f32 (want, qn));
    pp_group_norm (gpu, pp_view_f32 (dq, qn), pp_view_none (), n, heads * hd,
        lq, 4, 1e-5f, pp_view_none (), pp_view_none (), FALSE,
        pp_out_f32 (dout, qn));
    compare (gpu, dout, want, qn, 1e-5, "group_norm");
    pp_nchw_to_nlc (cpu, pp_view_f32 (q, qn), n, heads * hd, lq,
        pp_out_f32 (want, qn));
    pp_nchw_to_nlc (gpu, pp_view_f32 (dq, qn), n, heads * hd, lq,
        pp_out_f32 (dout, qn));
    compare (gpu, dout, want, qn, 0.0, "nchw_to_nlc");
    pp_backend_free (gpu, dq);
    pp_backend_free (gpu, dk);
    pp_backend_free (gpu, dv);
    pp_backend_free (gpu, dout);
  }
  /* The timestep embedding: the CPU's bits (its frequencies from the
   * host's libm, as the CPU backend's), for a UNet's widths (320, 1280)
   * at SD-Turbo's and SD's timesteps, flipped and shifted as their
   * configs say. */
  {
    const int dims[] = { 320, 1280, 257 };
    const float ts[] = { 0.0f, 1.0f, 261.0f, 499.5f, 999.0f };

    for (guint d = 0; d < G_N_ELEMENTS (dims); d++)
      for (guint i = 0; i < G_N_ELEMENTS (ts); i++) {
        const int dim = dims[d];
        g_autofree float *want = g_new0 (float, dim);
        g_autofree gchar *what = g_strdup_printf ("timestep_embedding "
            "dim %d t %g", dim, ts[i]);
        float *dy = to_device (gpu, want, dim);

        pp_timestep_embedding (cpu, ts[i], dim, d != 1, d == 1 ? 1.0f : 0.0f,
            pp_out_f32 (want, dim));
        pp_timestep_embedding (gpu, ts[i], dim, d != 1, d == 1 ? 1.0f : 0.0f,
            pp_out_f32 (dy, dim));
        compare (gpu, dy, want, dim, 0.0, what);
        pp_backend_free (gpu, dy);
      }
  }
  g_rand_free (rand);
}

/* Graphs on the device: what a captured function may not do (upload,
 * download, synchronize, free) fails its capture with the reason, and
 * the same work then runs without a graph (the failed capture's error
 * must not reach the next op's launch check, which would end the
 * process); a capture of ops alone launches as often as asked. */
typedef struct
{
  PpBackend *be;
  float *d;                     /* 4 floats on the device */
  const gchar *misstep;         /* what the function does after its op */
  float host[4];
} Capture;

static gboolean
capture_func (gpointer data, GError ** error)
{
  Capture *c = data;

  pp_scale (c->be, pp_out_f32 (c->d, 4), 4, 2.0f);
  if (g_strcmp0 (c->misstep, "upload") == 0)
    pp_backend_upload (c->be, c->d, c->host, sizeof c->host);
  else if (g_strcmp0 (c->misstep, "download") == 0)
    pp_backend_download (c->be, c->host, c->d, sizeof c->host);
  else if (g_strcmp0 (c->misstep, "synchronize") == 0)
    pp_backend_synchronize (c->be);
  else if (g_strcmp0 (c->misstep, "free") == 0)
    pp_backend_free (c->be, pp_backend_alloc (c->be, 1024, NULL));
  else if (g_strcmp0 (c->misstep, "stream-synchronize") == 0)
    /* Past the backend: CUDA itself invalidates the capture, and leaves
     * its error for the calling thread. */
    (void) cudaStreamSynchronize (pp_cuda_backend_stream (c->be));
  return TRUE;
}

static void
expect_values (Capture * c, float want)
{
  float got[4];

  pp_backend_download (c->be, got, c->d, sizeof got);
  for (int i = 0; i < 4; i++)
    if (got[i] != want)
      g_error ("[%d] is %g, not %g", i, got[i], want);
}

static void
test_graph_capture_on_device (void)
{
  static const gchar *const missteps[] = { "upload", "download",
    "synchronize", "free", "stream-synchronize"
  };
  PpBackend *gpu = pp_cuda_backend_get (0, NULL);
  const float ones[4] = { 1, 1, 1, 1 };
  Capture c = { gpu, NULL, NULL, {5, 5, 5, 5} };
  gpointer graph;
  GError *error = NULL;

  if (gpu == NULL) {
    g_test_skip ("no CUDA device");
    return;
  }
  c.d = to_device (gpu, ones, 4);
  /* Once without a graph first: the kernel is loaded before any capture. */
  g_assert_true (capture_func (&c, NULL));
  expect_values (&c, 2.0f);
  for (guint i = 0; i < G_N_ELEMENTS (missteps); i++) {
    g_autofree gchar *what = g_str_equal (missteps[i],
        "stream-synchronize") ? g_strdup ("*cudaStreamEndCapture*")
        : g_strdup_printf ("*%s inside a CUDA graph "
        "capture*", g_str_equal (missteps[i], "upload") ? "an upload"
        : g_str_equal (missteps[i], "download") ? "a download"
        : g_str_equal (missteps[i], "free") ? "a free" : "a synchronize");

    c.misstep = missteps[i];
    pp_backend_upload (gpu, c.d, ones, sizeof ones);
    graph = pp_backend_graph_capture (gpu, capture_func, &c, &error);
    g_assert_null (graph);
    g_assert_error (error, PP_ERROR, PP_ERROR_DEVICE);
    if (!g_pattern_match_simple (what, error->message))
      g_error ("%s: the capture failed with '%s'", missteps[i],
          error->message);
    g_clear_error (&error);
    /* The work again without a graph: the ops' checks see no error. */
    pp_backend_upload (gpu, c.d, ones, sizeof ones);
    c.misstep = NULL;
    g_assert_true (capture_func (&c, NULL));
    expect_values (&c, 2.0f);
  }
  c.misstep = NULL;
  pp_backend_upload (gpu, c.d, ones, sizeof ones);
  graph = pp_backend_graph_capture (gpu, capture_func, &c, &error);
  g_assert_no_error (error);
  g_assert_nonnull (graph);
  /* Captured, not run. */
  expect_values (&c, 1.0f);
  for (int i = 0; i < 3; i++)
    g_assert_true (pp_backend_graph_launch (gpu, graph, NULL));
  expect_values (&c, 8.0f);
  pp_backend_graph_free (gpu, graph);
  pp_backend_free (gpu, c.d);
}

/* Fills of the fence test's 256 MiB queued before the one the copy must
 * see: some 15 ms of work on an H100. */
#define FENCE_BUSY_FILLS 200

/* A fence orders another stream of the device after the work before it,
 * the host waiting for nothing (a data plane's send waits so for the fence
 * behind its payloads): a copy queued on a stream of its own behind a wait
 * on the fence reads what the backend's fill before the fence wrote, while
 * the fill may still be running when the host queues the copy. */
static void
test_fence_wait_on_device (void)
{
  PpBackend *gpu = pp_cuda_backend_get (0, NULL);
  const gsize n = (gsize) 64 << 20;     /* 256 MiB: a fill of tens of µs */
  cudaStream_t other = NULL;
  float *d, *host = NULL;

  if (gpu == NULL) {
    g_test_skip ("no CUDA device");
    return;
  }
  g_assert_nonnull (gpu->memory->fence_wait);
  d = pp_backend_alloc (gpu, n * sizeof (float), NULL);
  g_assert_nonnull (d);
  g_assert_cmpint (cudaStreamCreateWithFlags (&other,
          cudaStreamNonBlocking), ==, cudaSuccess);
  g_assert_cmpint (cudaMallocHost ((void **) &host, n * sizeof (float)), ==,
      cudaSuccess);
  pp_backend_fill (gpu, d, 1.0f, n);
  pp_backend_synchronize (gpu);
  for (int round = 0; round < 3; round++) {
    const float want = 2.0f + round;
    gpointer fence;
    gsize wrong = 0;
    cudaError_t state;

    /* Fills of another value first, a few ms of work: a copy not held
     * back by the fence would read them. */
    for (int i = 0; i < FENCE_BUSY_FILLS; i++)
      pp_backend_fill (gpu, d, -1.0f, n);
    pp_backend_fill (gpu, d, want, n);
    fence = gpu->memory->fence (gpu);
    g_assert_nonnull (fence);
    gpu->memory->fence_wait (gpu, fence, other);
    /* The fence had not passed when the copy was queued behind it. */
    state = cudaEventQuery ((cudaEvent_t) fence);
    (void) cudaGetLastError ();
    if (state != cudaErrorNotReady)
      g_error ("round %d: the fence had passed before the copy was queued "
          "(cudaEventQuery: %s): the test proves nothing", round,
          cudaGetErrorName (state));
    g_assert_cmpint (cudaMemcpyAsync (host, d, n * sizeof (float),
            cudaMemcpyDeviceToHost, other), ==, cudaSuccess);
    g_assert_cmpint (cudaStreamSynchronize (other), ==, cudaSuccess);
    for (gsize i = 0; i < n; i++)
      wrong += host[i] != want;
    if (wrong > 0)
      g_error ("round %d: %" G_GSIZE_FORMAT " of %" G_GSIZE_FORMAT
          " values read by the other stream are not the fill's %g", round,
          wrong, n, want);
    gpu->memory->fence_free (gpu, fence);
  }
  pp_backend_synchronize (gpu);
  g_assert_cmpint (cudaStreamDestroy (other), ==, cudaSuccess);
  g_assert_cmpint (cudaFreeHost (host), ==, cudaSuccess);
  pp_backend_free (gpu, d);
}

/* A hold of the stream (a profile's): the host queues work behind it
 * without waiting, the device starts that work only after the hold, and
 * the device time between marks around it counts the hold. */
#define HOLD_S 0.2

static void
test_hold_on_device (void)
{
  PpBackend *gpu = pp_cuda_backend_get (0, NULL);
  const gsize n = (gsize) 1 << 20;
  gpointer before, after;
  cudaError_t state;
  gdouble queued, span;
  gint64 t;
  float *d;

  if (gpu == NULL) {
    g_test_skip ("no CUDA device");
    return;
  }
  d = pp_backend_alloc (gpu, n * sizeof (float), NULL);
  g_assert_nonnull (d);
  pp_backend_synchronize (gpu);
  g_assert_nonnull (gpu->memory->hold);
  before = gpu->memory->mark (gpu);
  g_assert_nonnull (before);
  t = g_get_monotonic_time ();
  g_assert_true (gpu->memory->hold (gpu, HOLD_S));
  for (int i = 0; i < 20; i++)
    pp_backend_fill (gpu, d, (float) i, n);
  after = gpu->memory->mark (gpu);
  queued = (g_get_monotonic_time () - t) / 1e6;
  state = cudaEventQuery ((cudaEvent_t) after);
  (void) cudaGetLastError ();
  if (queued >= HOLD_S / 2)
    g_error ("queueing 20 fills behind a hold of %.0f ms took the host "
        "%.1f ms: the hold held the host, not the stream", HOLD_S * 1e3,
        queued * 1e3);
  if (state != cudaErrorNotReady)
    g_error ("the fills queued behind the hold had run %.1f ms after it "
        "(cudaEventQuery: %s): the hold held nothing", queued * 1e3,
        cudaGetErrorName (state));
  span = gpu->memory->elapsed (gpu, before, after);
  g_test_message ("a hold of %.0f ms: the fills queued in %.2f ms, %.1f ms "
      "of device time across the hold", HOLD_S * 1e3, queued * 1e3,
      span * 1e3);
  g_assert_cmpfloat (span, >=, HOLD_S * 0.9);
  gpu->memory->mark_free (gpu, before);
  gpu->memory->mark_free (gpu, after);
  pp_backend_synchronize (gpu);
  pp_backend_free (gpu, d);
}

/* A download waits for its copy, which runs behind the work queued
 * before it, without the backend's lock: another thread (rank 0's chain,
 * while its collector downloads a frame) queues its work meanwhile. */
typedef struct
{
  PpBackend *gpu;
  gpointer host, dev;
  gsize bytes;
  gdouble took;
} Download;

static gpointer
download_thread (gpointer data)
{
  Download *d = data;
  const gint64 t = g_get_monotonic_time ();

  pp_backend_download (d->gpu, d->host, d->dev, d->bytes);
  d->took = (g_get_monotonic_time () - t) / 1e6;
  return NULL;
}

static void
test_download_unlocked_on_device (void)
{
  PpBackend *gpu = pp_cuda_backend_get (0, NULL);
  const gsize n = (gsize) 1 << 20;
  Download d = { gpu, NULL, NULL, n * sizeof (float), 0.0 };
  g_autofree float *mine = g_new0 (float, 1024);
  GThread *thread;
  gdouble queued;
  gint64 t;
  float *other;

  if (gpu == NULL) {
    g_test_skip ("no CUDA device");
    return;
  }
  d.host = g_malloc (d.bytes);
  d.dev = pp_backend_alloc (gpu, d.bytes, NULL);
  other = pp_backend_alloc (gpu, n * sizeof (float), NULL);
  g_assert_nonnull (d.dev);
  g_assert_nonnull (other);
  pp_backend_fill (gpu, d.dev, 3.0f, n);
  pp_backend_synchronize (gpu);
  g_assert_true (gpu->memory->hold (gpu, HOLD_S));
  thread = g_thread_new ("download", download_thread, &d);
  /* The download is queued and waits behind the hold. */
  g_usleep ((gulong) (HOLD_S * 1e6 / 4));
  t = g_get_monotonic_time ();
  for (int i = 0; i < 20; i++)
    pp_backend_fill (gpu, other, (float) i, n);
  pp_backend_upload (gpu, other, mine, 1024 * sizeof (float));
  queued = (g_get_monotonic_time () - t) / 1e6;
  g_thread_join (thread);
  g_test_message ("a download behind a hold of %.0f ms took %.1f ms; "
      "another thread queued 20 fills and an upload meanwhile in %.2f ms",
      HOLD_S * 1e3, d.took * 1e3, queued * 1e3);
  if (queued >= HOLD_S / 2)
    g_error ("queueing work took %.1f ms while another thread's download "
        "waited behind a hold of %.0f ms: the download held the backend",
        queued * 1e3, HOLD_S * 1e3);
  g_assert_cmpfloat (d.took, >=, HOLD_S / 2);
  for (gsize i = 0; i < n; i++)
    g_assert_cmpfloat (((float *) d.host)[i], ==, 3.0f);
  pp_backend_synchronize (gpu);
  pp_backend_free (gpu, d.dev);
  pp_backend_free (gpu, other);
  g_free (d.host);
}

/* Fills of a 1 GiB buffer queued on another stream: a hundred-odd ms of
 * work on an H100, which a free must not wait for. */
#define BUSY_BYTES ((gsize) 1 << 30)
#define BUSY_FILLS 512

/* Whether @stream still has work queued; clears the "not ready" status the
 * query leaves behind for the next launch check. */
static gboolean
stream_busy (cudaStream_t stream)
{
  cudaError_t rc = cudaStreamQuery (stream);

  (void) cudaGetLastError ();
  if (rc != cudaSuccess && rc != cudaErrorNotReady)
    g_error ("cudaStreamQuery: %s", cudaGetErrorName (rc));
  return rc == cudaErrorNotReady;
}

/* A freed buffer is kept for reuse, not freed: its free and the next
 * allocation of its size return while another stream of the device is
 * still busy (a cudaFree would wait for that stream, as it would for an
 * NCCL transfer's kernel whose peer may be waiting the same way), and the
 * next buffer of that size is the same memory.  A request the kept blocks
 * crowd out of the device gets them given back and succeeds; the last
 * buffer's free gives back every kept block. */
static void
test_blocks_on_device (void)
{
  PpBackend *gpu = pp_cuda_backend_get (0, NULL);
  const gsize bytes = (gsize) 64 << 20;
  cudaStream_t other = NULL;
  gpointer busy = NULL, hold, a, b;
  size_t free_mem = 0, total_mem = 0;
  PpCudaBackend *cu;
  size_t now = 0;

  if (gpu == NULL) {
    g_test_skip ("no CUDA device");
    return;
  }
  cu = gpu->priv;
  /* This test's buffers are the only ones (the earlier tests freed
   * theirs): the blocks it is handed and the last free's give-back are
   * its own. */
  if (cu->buffers_live != 0 || pp_cuda_blocks_count (cu->kept) != 0)
    g_error ("%u buffers live and %u blocks kept before the test",
        cu->buffers_live, pp_cuda_blocks_count (cu->kept));
  hold = pp_backend_alloc (gpu, 4096, NULL);
  a = pp_backend_alloc (gpu, bytes, NULL);
  g_assert_nonnull (a);
  pp_backend_free (gpu, a);
  g_assert_cmpuint (pp_cuda_blocks_bytes (cu->kept), >=, bytes);
  b = pp_backend_alloc (gpu, bytes - 1000, NULL);
  g_assert_true (b == a);

  g_assert_cmpint (cudaStreamCreateWithFlags (&other,
          cudaStreamNonBlocking), ==, cudaSuccess);
  g_assert_cmpint (cudaMalloc (&busy, BUSY_BYTES), ==, cudaSuccess);
  for (int i = 0; i < BUSY_FILLS; i++)
    g_assert_cmpint (cudaMemsetAsync (busy, i, BUSY_BYTES, other), ==,
        cudaSuccess);
  g_assert_true (stream_busy (other));
  pp_backend_free (gpu, b);
  if (!stream_busy (other))
    g_error ("the free waited for another stream's work (%d fills of "
        "%" G_GSIZE_FORMAT " bytes)", BUSY_FILLS, BUSY_BYTES);
  b = pp_backend_alloc (gpu, bytes, NULL);
  g_assert_true (b == a);
  if (!stream_busy (other))
    g_error ("the allocation waited for another stream's work");
  pp_backend_free (gpu, b);
  g_assert_cmpint (cudaStreamSynchronize (other), ==, cudaSuccess);
  g_assert_cmpint (cudaFree (busy), ==, cudaSuccess);
  g_assert_cmpint (cudaStreamDestroy (other), ==, cudaSuccess);

  /* 60 % of the free memory kept, then 70 % asked for. */
  g_assert_cmpint (cudaMemGetInfo (&free_mem, &total_mem), ==, cudaSuccess);
  a = pp_backend_alloc (gpu, free_mem / 10 * 6, NULL);
  g_assert_nonnull (a);
  pp_backend_free (gpu, a);
  g_assert_cmpuint (pp_cuda_blocks_bytes (cu->kept), >=, free_mem / 10 * 6);
  b = pp_backend_alloc (gpu, free_mem / 10 * 7, NULL);
  if (b == NULL)
    g_error ("70 %% of the device's free memory did not fit beside the "
        "kept 60 %%: the kept blocks were not given back");
  g_assert_cmpuint (pp_cuda_blocks_bytes (cu->kept), <, free_mem / 10 * 6);
  pp_backend_free (gpu, b);
  pp_backend_free (gpu, hold);
  g_assert_cmpuint (cu->buffers_live, ==, 0);
  g_assert_cmpuint (pp_cuda_blocks_count (cu->kept), ==, 0);
  g_assert_cmpint (cudaMemGetInfo (&now, &total_mem), ==, cudaSuccess);
  /* All back: the 64 MiB block kept when free_mem was read included. */
  g_assert_cmpuint (now, >=, free_mem);
}

/* A 16-bit attention of a shape first met inside a capture: with the
 * fused way the capture fails (its cuDNN plan may compile and load
 * kernels), the work runs without a graph and makes the plan (or learns
 * there is none), and the next capture of it succeeds; either way the
 * graph's output equals the eager one's. */
typedef struct
{
  PpBackend *be;
  float *q, *k, *v, *out;
  gsize qn, kn;                 /* floats at q and out, at k and v */
} AttentionCapture;

static gboolean
attention_func (gpointer data, GError ** error)
{
  AttentionCapture *a = data;

  pp_attention (a->be, pp_view_f32 (a->q, a->qn), pp_view_f32 (a->k, a->kn),
      pp_view_f32 (a->v, a->kn), 1, 96, 77, 2, 40, 80, 80, PP_DTYPE_F16,
      pp_out_f32 (a->out, a->qn));
  return TRUE;
}

static void
test_attention_capture_on_device (void)
{
  PpBackend *gpu = pp_cuda_backend_get (0, NULL);
  /* Room for the larger shape run first. */
  const gsize qn = 128 * 80, kn = 96 * 80;
  AttentionCapture a = { .be = gpu, .qn = qn, .kn = kn };
  g_autofree float *eager = g_new (float, qn);
  GRand *rand;
  gpointer graph;
  GError *error = NULL;

  if (gpu == NULL) {
    g_test_skip ("no CUDA device");
    return;
  }
  rand = g_rand_new_with_seed (5);
  {
    g_autofree float *q = random_floats (rand, qn);
    g_autofree float *k = random_floats (rand, kn);
    g_autofree float *v = random_floats (rand, kn);

    a.q = to_device (gpu, q, qn);
    a.k = to_device (gpu, k, kn);
    a.v = to_device (gpu, v, kn);
    a.out = to_device (gpu, q, qn);
  }
  /* A larger shape without a graph first: the scratch buffers are then
   * large enough, and cannot be what fails the capture. */
  pp_attention (gpu, pp_view_f32 (a.q, qn), pp_view_f32 (a.k, kn),
      pp_view_f32 (a.v, kn), 1, 128, 96, 2, 40, 80, 80, PP_DTYPE_F16,
      pp_out_f32 (a.out, qn));
  graph = pp_backend_graph_capture (gpu, attention_func, &a, &error);
  if (((PpCudaBackend *) gpu->priv)->attention == PP_CUDA_ATTENTION_FUSED) {
    g_assert_null (graph);
    g_assert_error (error, PP_ERROR, PP_ERROR_DEVICE);
    g_assert_nonnull (strstr (error->message, "first met while a CUDA "
            "graph was captured"));
    g_clear_error (&error);
  } else {
    g_assert_no_error (error);
    pp_backend_graph_free (gpu, graph);
  }
  g_assert_true (attention_func (&a, NULL));
  pp_backend_download (gpu, eager, a.out, 96 * 80 * sizeof (float));
  pp_backend_upload (gpu, a.out, eager + 1, (96 * 80 - 1) * sizeof (float));
  graph = pp_backend_graph_capture (gpu, attention_func, &a, &error);
  g_assert_no_error (error);
  g_assert_nonnull (graph);
  g_assert_true (pp_backend_graph_launch (gpu, graph, NULL));
  compare (gpu, a.out, eager, 96 * 80, 0.0,
      "attention, graph against eager");
  pp_backend_graph_free (gpu, graph);
  pp_backend_free (gpu, a.q);
  pp_backend_free (gpu, a.k);
  pp_backend_free (gpu, a.v);
  pp_backend_free (gpu, a.out);
  g_rand_free (rand);
}

/* Rank 0's way on a device: an activation larger than any device fails
 * its allocation, which halts the backend (the process keeps failures)
 * and hands out a stand-in; work on it is skipped, the failure names the
 * device's memory, and the backend recovered computes as before.  Last:
 * the backend keeps failures for the rest of the process. */
static void
test_kept_failure_on_device (void)
{
  PpBackend *gpu = pp_cuda_backend_get (0, NULL);
  const gsize huge = (gsize) 1 << 42, n = 4096;
  g_autoptr (GError) error = NULL;
  g_autofree float *host = g_new0 (float, n);
  PpPool *pool;
  gpointer stand_in;
  float *dev;
  guint since;

  if (gpu == NULL) {
    g_test_skip ("no CUDA device");
    return;
  }
  pp_backend_keep_failures (gpu);
  pool = pp_pool_new (gpu, PP_DTYPE_F32);
  dev = pp_backend_alloc (gpu, n * sizeof (float), NULL);
  g_assert_nonnull (dev);
  since = pp_backend_failures (gpu);
  stand_in = pp_pool_acquire (pool, huge);
  g_assert_nonnull (stand_in);
  g_assert_true (pp_backend_is_halted (gpu));
  pp_backend_fill (gpu, stand_in, 1.0f, huge / sizeof (float));
  pp_backend_fill (gpu, dev, 7.0f, n);
  g_assert_false (pp_backend_check (gpu, since, &error));
  g_assert_error (error, PP_ERROR, PP_ERROR_RESOURCE);
  g_test_message ("%s", error->message);
  g_assert_nonnull (strstr (error->message, "out of device memory"));
  pp_pool_release (pool, stand_in, huge);
  g_assert_true (pp_backend_recover (gpu, NULL));
  /* The device is whole: work runs again. */
  pp_backend_fill (gpu, dev, 2.5f, n);
  pp_backend_download (gpu, host, dev, n * sizeof (float));
  for (gsize i = 0; i < n; i++)
    g_assert_cmpfloat (host[i], ==, 2.5f);
  /* The failure and the recovery counted. */
  g_assert_true (pp_backend_check (gpu, since + 2, NULL));
  pp_backend_free (gpu, dev);
  pp_pool_free (pool);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/cuda-backend/blocks", test_blocks);
  g_test_add_func ("/cuda-backend/blocks/kept-twice", test_blocks_kept_twice);
  g_test_add_func ("/cuda-backend/attention-plan", test_attention_plan);
  g_test_add_func ("/cuda-backend/conv-key", test_conv_key);
  g_test_add_func ("/cuda-backend/ways", test_ways);
  g_test_add_func ("/cuda-backend/choice", test_choice);
  g_test_add_func ("/cuda-backend/device-code", test_device_code);
  g_test_add_func ("/cuda-backend/tuning", test_tuning);
  g_test_add_func ("/cuda-backend/conv-layout", test_conv_layout);
  g_test_add_func ("/cuda-backend/group-norm-splits", test_group_norm_splits);
  g_test_add_func ("/cuda-backend/scratch-names", test_scratch_names);
  g_test_add_func ("/cuda-backend/op-error", test_op_error);
  g_test_add_func ("/cuda-backend/op-error/kept", test_op_error_kept);
  g_test_add_func ("/cuda-backend/activations", test_activations);
  g_test_add_func ("/cuda-backend/get", test_backend_get);
  g_test_add_func ("/cuda-backend/ops-on-device", test_ops_on_device);
  g_test_add_func ("/cuda-backend/blocks-on-device", test_blocks_on_device);
  g_test_add_func ("/cuda-backend/fence-wait-on-device",
      test_fence_wait_on_device);
  g_test_add_func ("/cuda-backend/graph-capture-on-device",
      test_graph_capture_on_device);
  g_test_add_func ("/cuda-backend/attention-capture-on-device",
      test_attention_capture_on_device);
  g_test_add_func ("/cuda-backend/hold-on-device", test_hold_on_device);
  g_test_add_func ("/cuda-backend/download-unlocked-on-device",
      test_download_unlocked_on_device);
  g_test_add_func ("/cuda-backend/kept-failure-on-device",
      test_kept_failure_on_device);
  return g_test_run ();
}
