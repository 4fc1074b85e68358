/* Unit tests for the init handshake messages. */
#include "pp-handshake.h"
#include "pp-error.h"
#include "pp-model.h"

#include <string.h>
#include <unistd.h>

static PpPlan *
make_plan (void)
{
  g_autoptr (GError) error = NULL;
  PpPlan *plan = pp_plan_new (3, 8, "builtin:stamp?step-ms=1", 4000, &error);

  g_assert_no_error (error);
  return plan;
}

static void
test_hello_round_trip (void)
{
  g_autoptr (PpPlan) plan = make_plan ();
  PpHelloOptions options = { (gchar *) "/tmp/dumps",
    (gchar *) "/ppdiffuse-bells-1-0"
  }, got;
  g_autoptr (GBytes) hello = pp_handshake_hello_new (plan, &options);
  g_autoptr (PpPlan) back = NULL;
  g_autoptr (GError) error = NULL;
  g_autofree gchar *host = NULL;
  gint64 pid = -1;

  g_assert_cmpuint (g_bytes_get_size (hello), <=, PP_HANDSHAKE_MAX);
  back = pp_handshake_hello_parse (hello, &pid, &host, &got, &error);
  g_assert_no_error (error);
  g_assert_nonnull (back);
  g_assert_cmpint (pid, ==, (gint64) getpid ());
  g_assert_cmpstr (host, ==, g_get_host_name ());
  g_assert_cmpuint (back->plan_id, ==, plan->plan_id);
  g_assert_cmpuint (back->n_workers, ==, plan->n_workers);
  g_assert_cmpuint (back->n_steps, ==, plan->n_steps);
  g_assert_cmpuint (back->timeout_ms, ==, plan->timeout_ms);
  g_assert_cmpstr (back->model, ==, plan->model);
  for (guint i = 0; i < plan->n_workers; i++) {
    g_assert_cmpuint (back->slices[i].first, ==, plan->slices[i].first);
    g_assert_cmpuint (back->slices[i].end, ==, plan->slices[i].end);
  }
  g_assert_cmpstr (got.dump_dir, ==, "/tmp/dumps");
  g_assert_cmpstr (got.bells, ==, "/ppdiffuse-bells-1-0");
  pp_hello_options_clear (&got);
}

static void
test_reply_round_trip (void)
{
  g_autoptr (GHashTable) parity = pp_parity_local ("abc", NULL,
      pp_backend_cpu (), NULL);
  g_autoptr (GBytes) ok = pp_handshake_reply_new (0xdeadbeef, 3, "", parity);
  g_autoptr (GBytes) ok_null = pp_handshake_reply_new (7, 1, NULL, NULL);
  g_autoptr (GBytes) bad = pp_handshake_reply_new (0x01020304, 2,
      "plan field slices[0]: mismatch", NULL);
  g_autoptr (GError) error = NULL;
  PpWorkerInfo info = { 0 };

  g_assert_true (pp_handshake_reply_parse (ok, &info, &error));
  g_assert_no_error (error);
  g_assert_cmpuint (info.plan_id, ==, 0xdeadbeef);
  g_assert_cmpint (info.rank, ==, 3);
  g_assert_cmpint (info.pid, ==, (gint64) getpid ());
  g_assert_cmpstr (info.host, ==, g_get_host_name ());
  /* "" on the wire means the worker accepted the plan. */
  g_assert_null (info.error);
  g_assert_cmpuint (g_hash_table_size (info.parity), ==,
      g_hash_table_size (parity));
  g_assert_cmpstr (g_hash_table_lookup (info.parity, PP_PARITY_MODEL_DIGEST),
      ==, "abc");
  pp_worker_info_clear (&info);
  g_assert_null (info.host);
  g_assert_null (info.parity);

  g_assert_true (pp_handshake_reply_parse (ok_null, &info, &error));
  g_assert_cmpuint (info.plan_id, ==, 7);
  g_assert_cmpint (info.rank, ==, 1);
  g_assert_null (info.error);
  pp_worker_info_clear (&info);

  g_assert_true (pp_handshake_reply_parse (bad, &info, &error));
  g_assert_no_error (error);
  g_assert_cmpuint (info.plan_id, ==, 0x01020304);
  g_assert_cmpint (info.rank, ==, 2);
  g_assert_cmpstr (info.error, ==, "plan field slices[0]: mismatch");
  pp_worker_info_clear (&info);
  g_assert_null (info.error);
}

/* A hello from a build speaking another protocol version, otherwise
 * well-formed. */
static void
test_hello_version (void)
{
  g_autoptr (PpPlan) plan = make_plan ();
  g_autoptr (GVariant) v = g_variant_ref_sink (g_variant_new (PP_HELLO_TYPE,
          (guint32) PP_PROTOCOL_VERSION + 1, (gint64) 1234, "elsewhere",
          pp_plan_to_variant (plan), plan->plan_id, NULL));
  g_autoptr (GBytes) bytes = g_variant_get_data_as_bytes (v);
  g_autoptr (GError) error = NULL;
  g_autofree gchar *host = NULL;
  PpHelloOptions opts;
  gint64 pid = 0;

  g_assert_null (pp_handshake_hello_parse (bytes, &pid, &host, &opts, &error));
  g_assert_error (error, PP_ERROR, PP_ERROR_PROTOCOL);
  g_assert_nonnull (strstr (error->message, "protocol version"));
  g_assert_null (host);
}

/* The same message with version 1 is accepted: the failure above is the
 * version's. */
static void
test_hello_by_hand (void)
{
  g_autoptr (PpPlan) plan = make_plan ();
  g_autoptr (GVariant) v = g_variant_ref_sink (g_variant_new (PP_HELLO_TYPE,
          (guint32) PP_PROTOCOL_VERSION, (gint64) 1234, "elsewhere",
          pp_plan_to_variant (plan), plan->plan_id, NULL));
  g_autoptr (GBytes) bytes = g_variant_get_data_as_bytes (v);
  g_autoptr (GError) error = NULL;
  g_autofree gchar *host = NULL;
  g_autoptr (PpPlan) back = NULL;
  PpHelloOptions opts;
  gint64 pid = 0;

  back = pp_handshake_hello_parse (bytes, &pid, &host, &opts, &error);
  g_assert_no_error (error);
  g_assert_nonnull (back);
  g_assert_cmpint (pid, ==, 1234);
  g_assert_cmpstr (host, ==, "elsewhere");
  g_assert_null (opts.dump_dir);
  g_assert_null (opts.bells);
}

static void
test_reply_version (void)
{
  g_autoptr (GVariant) v = g_variant_ref_sink (g_variant_new (PP_REPLY_TYPE,
          (guint32) PP_PROTOCOL_VERSION + 1, (guint32) 5, (guint32) 1,
          (gint64) 99, "h", "", NULL));
  g_autoptr (GBytes) bytes = g_variant_get_data_as_bytes (v);
  g_autoptr (GError) error = NULL;
  PpWorkerInfo info = { 0 };

  g_assert_false (pp_handshake_reply_parse (bytes, &info, &error));
  g_assert_error (error, PP_ERROR, PP_ERROR_PROTOCOL);
  g_assert_nonnull (strstr (error->message, "protocol version"));
  pp_worker_info_clear (&info);
}

/* The hello carries plan_id; a plan that re-derives to another id is
 * refused naming the field. */
static void
test_hello_wrong_plan_id (void)
{
  g_autoptr (PpPlan) plan = make_plan ();
  g_autoptr (GVariant) v = g_variant_ref_sink (g_variant_new (PP_HELLO_TYPE,
          (guint32) PP_PROTOCOL_VERSION, (gint64) 1, "h",
          pp_plan_to_variant (plan), plan->plan_id + 1, NULL));
  g_autoptr (GBytes) bytes = g_variant_get_data_as_bytes (v);
  g_autoptr (GError) error = NULL;
  g_autofree gchar *host = NULL;
  PpHelloOptions opts;
  gint64 pid;

  g_assert_null (pp_handshake_hello_parse (bytes, &pid, &host, &opts, &error));
  g_assert_error (error, PP_ERROR, PP_ERROR_PROTOCOL);
  g_assert_nonnull (strstr (error->message, "plan_id"));
  g_assert_null (host);
}

/* The plan slot is a variant: something else in it is refused. */
static void
test_hello_plan_type (void)
{
  g_autoptr (GVariant) v = g_variant_ref_sink (g_variant_new (PP_HELLO_TYPE,
          (guint32) PP_PROTOCOL_VERSION, (gint64) 1, "h",
          g_variant_new_string ("not a plan"), 0u, NULL));
  g_autoptr (GBytes) bytes = g_variant_get_data_as_bytes (v);
  g_autoptr (GError) error = NULL;
  g_autofree gchar *host = NULL;
  PpHelloOptions opts;
  gint64 pid;

  g_assert_null (pp_handshake_hello_parse (bytes, &pid, &host, &opts, &error));
  g_assert_error (error, PP_ERROR, PP_ERROR_PROTOCOL);
}

static void
assert_hello_refused (GBytes * bytes)
{
  g_autoptr (GError) error = NULL;
  g_autofree gchar *host = NULL;
  PpHelloOptions opts;
  gint64 pid = 0;

  g_assert_null (pp_handshake_hello_parse (bytes, &pid, &host, &opts, &error));
  g_assert_nonnull (error);
  g_assert_true (error->domain == PP_ERROR);
  g_assert_null (host);
}

static void
assert_reply_refused (GBytes * bytes)
{
  g_autoptr (GError) error = NULL;
  PpWorkerInfo info = { 0 };

  g_assert_false (pp_handshake_reply_parse (bytes, &info, &error));
  g_assert_nonnull (error);
  g_assert_true (error->domain == PP_ERROR);
  g_assert_null (info.host);
  g_assert_null (info.error);
}

/* Garbage of every kind fails with an error, never a crash or a critical
 * (criticals abort under g_test). */
static void
test_garbage (void)
{
  g_autoptr (PpPlan) plan = make_plan ();
  g_autoptr (GBytes) hello = pp_handshake_hello_new (plan, NULL);
  g_autoptr (GBytes) reply = pp_handshake_reply_new (plan->plan_id, 1, "",
      NULL);
  g_autoptr (GRand) rand = g_rand_new_with_seed (20240611);
  gsize hello_len = g_bytes_get_size (hello);
  g_autoptr (GBytes) empty = g_bytes_new (NULL, 0);
  static const guint8 text[] = "hello, this is not a handshake at all";
  g_autoptr (GBytes) ascii = g_bytes_new_static (text, sizeof text);
  guint8 ff[64];

  assert_hello_refused (empty);
  assert_reply_refused (empty);
  assert_hello_refused (ascii);
  assert_reply_refused (ascii);
  memset (ff, 0xff, sizeof ff);
  {
    g_autoptr (GBytes) b = g_bytes_new (ff, sizeof ff);
    assert_hello_refused (b);
    assert_reply_refused (b);
  }
  /* The other message type. */
  assert_hello_refused (reply);
  assert_reply_refused (hello);

  for (guint i = 0; i < 200; i++) {
    gsize len = g_rand_int_range (rand, 1, 300);
    g_autofree guint8 *buf = g_malloc (len);
    g_autoptr (GBytes) b = NULL;

    for (gsize j = 0; j < len; j++)
      buf[j] = (guint8) g_rand_int_range (rand, 0, 256);
    b = g_bytes_new_take (g_steal_pointer (&buf), len);
    assert_hello_refused (b);
    assert_reply_refused (b);
  }

  /* Every truncation of a valid hello. */
  for (gsize len = 0; len < hello_len; len++) {
    g_autoptr (GBytes) b = g_bytes_new_from_bytes (hello, 0, len);
    assert_hello_refused (b);
  }
}

/* Parity: equal dictionaries pass; every differing or missing checked key
 * is listed with both values; reported-only keys may differ. */
static void
test_parity (void)
{
  const guint32 plan_id = 0x1234;
  g_autoptr (GHashTable) rank0 = pp_parity_local (NULL, NULL,
      pp_backend_cpu (), NULL);
  PpWorkerInfo workers[3] = { { 0 } };
  g_autoptr (GError) error = NULL;

  for (guint i = 0; i < 3; i++)
    workers[i].parity = pp_parity_local ("digest-a", &plan_id,
        pp_backend_cpu (), NULL);
  g_hash_table_insert (workers[1].parity, g_strdup (PP_PARITY_DEVICE),
      g_strdup ("another cpu"));
  g_assert_true (pp_parity_check (rank0, workers, 3, &error));
  g_assert_no_error (error);

  g_hash_table_insert (workers[2].parity, g_strdup (PP_PARITY_MODEL_DIGEST),
      g_strdup ("digest-b"));
  /* The rebuild advice only where the builds differ. */
  g_assert_false (pp_parity_check (rank0, workers, 3, &error));
  g_assert_null (strstr (error->message, "different builds"));
  g_clear_error (&error);
  g_hash_table_insert (workers[1].parity, g_strdup (PP_PARITY_BUILD),
      g_strdup ("other-build"));
  g_hash_table_remove (workers[2].parity, PP_PARITY_MPI);
  g_assert_false (pp_parity_check (rank0, workers, 3, &error));
  g_assert_error (error, PP_ERROR, PP_ERROR_CONFIG);
  g_test_message ("%s", error->message);
  g_assert_nonnull (strstr (error->message,
          "rank 3: model-digest = digest-b (rank 1: digest-a)"));
  g_assert_nonnull (strstr (error->message, "rank 2: build = other-build"));
  g_assert_nonnull (strstr (error->message, "different builds: rebuild"));
  g_assert_nonnull (strstr (error->message, "rank 3: mpi = (absent)"));
  g_assert_null (strstr (error->message, "device"));
  for (guint i = 0; i < 3; i++)
    pp_worker_info_clear (&workers[i]);
}

/* A mesh whose ranks compute on different backends is refused, naming
 * each rank's backend; the device is reported with the backend's. */

/* A worker's parity on the cpu backend with $@name set to @value, then
 * set back to @saved (unset when NULL). */
static GHashTable *
parity_with_env (const gchar * name, const gchar * value,
    const gchar * saved, guint32 plan_id)
{
  GHashTable *parity;

  g_setenv (name, value, TRUE);
  parity = pp_parity_local ("d", &plan_id, pp_backend_cpu (), NULL);
  if (saved != NULL)
    g_setenv (name, saved, TRUE);
  else
    g_unsetenv (name);
  return parity;
}

static void
test_parity_backend (void)
{
  const guint32 plan_id = 0x1234;
  g_autoptr (GError) error = NULL;
  PpBackend *strict = pp_backend_get (PP_BACKEND_CPU_STRICT, &error);
  g_autoptr (GHashTable) rank0 = NULL;
  PpWorkerInfo workers[2] = { { 0 } };
  g_autofree gchar *layout = g_strdup (g_getenv (PP_ACT_LAYOUT_ENV));
  g_autofree gchar *upsample = g_strdup (g_getenv (PP_UPSAMPLE_CONV_ENV));
  g_autofree gchar *expected = NULL;
  const gchar *mine, *other;

  /* Rank 0 with the default layout, whatever the test runs under. */
  g_unsetenv (PP_ACT_LAYOUT_ENV);

  g_assert_no_error (error);
  rank0 = pp_parity_local (NULL, NULL, pp_backend_cpu (), NULL);
  g_assert_cmpstr (g_hash_table_lookup (rank0, PP_PARITY_BACKEND), ==,
      "cpu");
  g_assert_true (g_str_has_prefix (g_hash_table_lookup (rank0,
              PP_PARITY_DEVICE), "cpu: CPU, "));
  workers[0].parity = pp_parity_local ("d", &plan_id, pp_backend_cpu (),
      NULL);
  workers[1].parity = pp_parity_local ("d", &plan_id, strict, NULL);
  g_assert_false (pp_parity_check (rank0, workers, 2, &error));
  g_assert_error (error, PP_ERROR, PP_ERROR_CONFIG);
  g_assert_nonnull (strstr (error->message,
          "rank 2: backend = cpu-strict (rank 0: cpu)"));
  g_assert_null (strstr (error->message, "rank 1"));
  g_clear_error (&error);

  /* Activations laid out otherwise on one rank (its environment). */
  g_assert_cmpstr (g_hash_table_lookup (rank0, PP_PARITY_ACTIVATIONS), ==,
      "f32, nchw");
  pp_worker_info_clear (&workers[1]);
  workers[1].parity = parity_with_env (PP_ACT_LAYOUT_ENV, "nhwc", layout,
      plan_id);
  g_assert_false (pp_parity_check (rank0, workers, 2, &error));
  g_assert_nonnull (strstr (error->message,
          "rank 2: activations = f32, nhwc (rank 0: f32, nchw)"));
  g_clear_error (&error);

  /* The convolutions after the upsamplings run otherwise on one rank (its
   * environment). */
  mine = g_hash_table_lookup (rank0, PP_PARITY_UPSAMPLE_CONV);
  g_assert_cmpstr (mine, ==, upsample != NULL && *upsample != '\0'
      ? upsample : "phases");
  other = g_str_equal (mine, "upsample") ? "phases" : "upsample";
  pp_worker_info_clear (&workers[1]);
  workers[1].parity = parity_with_env (PP_UPSAMPLE_CONV_ENV, other, upsample,
      plan_id);
  g_assert_false (pp_parity_check (rank0, workers, 2, &error));
  expected = g_strdup_printf ("rank 2: upsample-conv = %s (rank 0: %s)",
      other, mine);
  g_assert_nonnull (strstr (error->message, expected));
  g_clear_error (&error);

  /* A backend's other choices that change the bits: none on the CPU
   * backends; a rank whose kernels were chosen otherwise is refused (the
   * cuda backend's own choices, from a rank's environment, through a mesh:
   * fault-kernel-ways-mismatch). */
  g_assert_cmpstr (g_hash_table_lookup (rank0, PP_PARITY_KERNEL_WAYS), ==,
      "none");
  g_assert_cmpstr (g_hash_table_lookup (workers[0].parity,
          PP_PARITY_KERNEL_WAYS), ==, "none");
  pp_worker_info_clear (&workers[1]);
  workers[1].parity = pp_parity_local ("d", &plan_id, pp_backend_cpu (),
      NULL);
  g_assert_true (pp_parity_check (rank0, workers, 2, &error));
  g_assert_no_error (error);
  g_hash_table_insert (workers[1].parity, g_strdup (PP_PARITY_KERNEL_WAYS),
      g_strdup ("attention=gemm"));
  g_assert_false (pp_parity_check (rank0, workers, 2, &error));
  g_assert_nonnull (strstr (error->message,
          "rank 2: kernel-ways = attention=gemm (rank 0: none)"));
  g_assert_nonnull (strstr (error->message,
          "give every host the same PPDIFFUSE_* variables"));
  g_assert_null (strstr (error->message, "rank 1"));
  g_clear_error (&error);
  for (guint i = 0; i < 2; i++)
    pp_worker_info_clear (&workers[i]);
}

/* Rank 0 tells a new frame size by the chunk's PP_WORK_TENSOR, a worker
 * by its model's sample: the same tensor, or their counts of sizes
 * (PpPace.work) part. */
static void
test_work_tensor_is_sample (void)
{
  g_assert_cmpstr (PP_WORK_TENSOR, ==, PP_MODEL_SAMPLE_NAME);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/handshake/hello/round-trip", test_hello_round_trip);
  g_test_add_func ("/handshake/hello/by-hand", test_hello_by_hand);
  g_test_add_func ("/handshake/hello/version", test_hello_version);
  g_test_add_func ("/handshake/hello/wrong-plan-id", test_hello_wrong_plan_id);
  g_test_add_func ("/handshake/hello/plan-type", test_hello_plan_type);
  g_test_add_func ("/handshake/reply/round-trip", test_reply_round_trip);
  g_test_add_func ("/handshake/reply/version", test_reply_version);
  g_test_add_func ("/handshake/garbage", test_garbage);
  g_test_add_func ("/handshake/parity", test_parity);
  g_test_add_func ("/handshake/parity-backend", test_parity_backend);
  g_test_add_func ("/handshake/work-tensor", test_work_tensor_is_sample);
  return g_test_run ();
}
