/* Tests of the backend interface: backends by name, the memory half on
 * every backend, cpu-strict's trap on host access, pools, and a model frame
 * in steady state allocating no device memory. */
#include "pp-backend.h"
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#endif
#include "pp-dtype-math.h"
#include "pp-error.h"
#include "pp-model.h"
#include "pp-tiny.h"

#include <glib/gstdio.h>
#include <gmodule.h>
#include <math.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define N_FLOATS 1000
#define FRAMES 3
#define FRAME_SIDE 48
#define STEPS 2

static const gchar *const backends[] = { PP_BACKEND_CPU,
  PP_BACKEND_CPU_STRICT
};

static PpBackend *
get (const gchar * name)
{
  g_autoptr (GError) error = NULL;
  PpBackend *be = pp_backend_get (name, &error);

  g_assert_no_error (error);
  g_assert_nonnull (be);
  return be;
}

/* TRUE when this process has mapped the CUDA module. */
static gboolean
cuda_module_mapped (void)
{
  g_autofree gchar *maps = NULL;

  g_assert_true (g_file_get_contents ("/proc/self/maps", &maps, NULL, NULL));
  return strstr (maps, "libppdiffuse-cuda") != NULL;
}

/* auto on a host without the NVIDIA driver's library (the CI machines):
 * the CPU, said why, and the CUDA module (the CUDA runtime, cuBLAS, cuDNN,
 * NCCL) never loaded to learn it.  Before any test here asks for cuda by
 * name. */
static void
auto_skips_cuda_module_without_driver (void)
{
  GModule *driver;

  if (!pp_backend_have_cuda ())
    return;
  driver = g_module_open ("libcuda.so.1", G_MODULE_BIND_LAZY);
  if (driver != NULL) {
    g_module_close (driver);
    return;
  }
  g_assert_false (cuda_module_mapped ());
  g_assert_cmpint (pp_backend_cuda_devices (), ==, 0);
  g_assert_nonnull (strstr (pp_backend_auto_reason (),
          "no NVIDIA driver is installed (libcuda.so.1 cannot be loaded"));
  g_assert_false (cuda_module_mapped ());
}

static void
test_names (void)
{
  g_autoptr (GError) error = NULL;

  g_assert_cmpstr (pp_backend_name (get (PP_BACKEND_CPU)), ==, "cpu");
  g_assert_cmpstr (pp_backend_name (get (PP_BACKEND_CPU_STRICT)), ==,
      "cpu-strict");
  /* auto: the best this build and machine have; the test machines have
   * no GPU, so the CPU, with the reason when the build has CUDA. */
  g_assert_true (get (PP_BACKEND_AUTO) == pp_backend_cpu ());
  if (pp_backend_have_cuda ())
    g_assert_nonnull (pp_backend_auto_reason ());
  else
    g_assert_null (pp_backend_auto_reason ());
  auto_skips_cuda_module_without_driver ();
  g_assert_nonnull (strstr (pp_backend_device (pp_backend_cpu ()), "CPU"));
  g_assert_nonnull (strstr (pp_backend_device (get (PP_BACKEND_CPU_STRICT)),
          "traps"));
  g_assert_null (pp_backend_get ("gpu", &error));
  g_assert_error (error, PP_ERROR, PP_ERROR_CONFIG);
  g_assert_nonnull (strstr (error->message, "unknown backend 'gpu'"));
  g_assert_nonnull (strstr (error->message, "cpu-strict"));
}

/* cuda without a device (every test machine): a device error that names
 * the CUDA runtime's status, or, without CUDA in the build, says so; a
 * malformed device index is a config error. */
static void
test_cuda_absent (void)
{
  const gchar *const names[] = { "cuda", "cuda:0", "cuda:7" };

  if (g_getenv ("PP_TEST_HAVE_GPU") != NULL) {
    g_test_skip ("a GPU is present: tests/gpu covers the CUDA backend");
    return;
  }
  for (guint i = 0; i < G_N_ELEMENTS (names); i++) {
    g_autoptr (GError) error = NULL;

    g_assert_null (pp_backend_get (names[i], &error));
    g_assert_nonnull (error);
    g_assert_error (error, PP_ERROR, PP_ERROR_DEVICE);
    /* With CUDA built, the module loaded and the runtime said why. */
    if (pp_backend_have_cuda ())
      g_assert_nonnull (strstr (error->message, "cudaGetDeviceCount"));
    else
      g_assert_nonnull (strstr (error->message, "no CUDA backend"));
  }
  {
    g_autoptr (GError) error = NULL;
    const gint expected = pp_backend_have_cuda ()? PP_ERROR_CONFIG :
        PP_ERROR_DEVICE;

    /* A build without CUDA says that first. */
    g_assert_null (pp_backend_get ("cuda:first", &error));
    g_assert_error (error, PP_ERROR, expected);
  }
  {
    g_autoptr (GError) error = NULL;

    g_assert_null (pp_backend_get ("cudax", &error));
    g_assert_error (error, PP_ERROR, PP_ERROR_CONFIG);
    g_assert_nonnull (strstr (error->message, "unknown backend 'cudax'"));
  }
  g_assert_true (pp_backend_have_cuda () == (strstr (pp_backend_names (),
              "cuda") != NULL));
}

/* Node-local ranks spread over a host's GPUs in turn from rank 0's and
 * share them when there are more ranks than GPUs. */
static void
test_device_for_rank (void)
{
  /* rank 0 and 3 workers on 1, 2, 4 and 8 GPUs, rank 0 on the first */
  const gint expect[4][4] = {
    { 0, 0, 0, 0 }, { 0, 1, 0, 1 }, { 0, 1, 2, 3 }, { 0, 1, 2, 3 },
  };
  /* the same with rank 0 on the second (cuda:1): no worker of the host
   * takes rank 0's GPU while another is free */
  const gint expect_from_1[4][4] = {
    { -1 }, { 1, 0, 1, 0 }, { 1, 2, 3, 0 }, { 1, 2, 3, 4 },
  };
  const gint n_devices[4] = { 1, 2, 4, 8 };

  for (guint d = 0; d < G_N_ELEMENTS (n_devices); d++)
    for (gint r = 0; r < 4; r++) {
      g_assert_cmpint (pp_backend_device_for_rank (0, r, n_devices[d]), ==,
          expect[d][r]);
      if (n_devices[d] > 1)
        g_assert_cmpint (pp_backend_device_for_rank (1, r, n_devices[d]),
            ==, expect_from_1[d][r]);
    }
  g_assert_cmpint (pp_backend_device_for_rank (0, -1, 2), ==, 0);
  g_assert_cmpint (pp_backend_device_for_rank (2, G_MAXINT, 3), ==,
      (gint) ((2 + (gint64) G_MAXINT) % 3));
  for (gint first = 0; first < 3; first++)
    for (gint r = 0; r < 64; r++) {
      g_assert_cmpint (pp_backend_device_for_rank (first, r, 3), ==,
          (first + r) % 3);
    }
}

/* A backend's spec names what gets it back: the CPU backends by name. */
static void
test_backend_spec (void)
{
  g_autofree gchar *cpu = pp_backend_spec (pp_backend_cpu ());

  g_assert_cmpstr (cpu, ==, PP_BACKEND_CPU);
}

/* The default backend's timestep embedding has the CPU's bits: a UNet's
 * widths (320 and 1280, whose frequencies a GPU takes from the host) and
 * one wider (1282: the device's own). */
static void
test_timestep_bits (void)
{
  PpBackend *be = pp_backend_default (), *cpu = pp_backend_cpu ();
  const int dims[] = { 320, 1280, 1282, 7 };
  const float ts[] = { 0.0f, 1.0f, 261.0f, 999.0f };

  for (guint d = 0; d < G_N_ELEMENTS (dims); d++)
    for (guint i = 0; i < G_N_ELEMENTS (ts); i++) {
      const int dim = dims[d];
      const gboolean flip = d % 2 == 0;
      const float shift = d == 1 ? 1.0f : 0.0f;
      g_autofree float *want = g_new0 (float, dim);
      g_autofree float *got = g_new0 (float, dim);
      float *dy = pp_backend_alloc (be, dim * sizeof (float), NULL);

      pp_timestep_embedding (cpu, ts[i], dim, flip, shift,
          pp_out_f32 (want, dim));
      pp_timestep_embedding (be, ts[i], dim, flip, shift,
          pp_out_f32 (dy, dim));
      pp_backend_download (be, got, dy, dim * sizeof (float));
      pp_backend_free (be, dy);
      for (int k = 0; k < dim; k++)
        if (memcmp (&got[k], &want[k], sizeof (float)) != 0)
          g_error ("%s: timestep embedding dim %d t %g: [%d] %.9g, the "
              "CPU's %.9g", pp_backend_name (be), dim, ts[i], k, got[k],
              want[k]);
    }
}

/* The GPUs of a host with three ($PP_CUDA_EMU_DEVICES=3, the emulated
 * libraries): "cuda:N" puts node-local rank r on device N + r in turn, a
 * spec names the device that gets the backend back, and a device that is
 * not there is an error naming the ones that are, for rank 0 and its
 * workers alike (never wrapped round to another). */
static void
test_cuda_devices (void)
{
  GError *error = NULL;
  PpBackend *be;

  for (gint first = 0; first < 3; first++)
    for (gint r = 0; r < 5; r++) {
      g_autofree gchar *name = g_strdup_printf ("cuda:%d", first);
      g_autofree gchar *spec = NULL, *expect = NULL;

      be = pp_backend_get_local (name, r, &error);
      g_assert_no_error (error);
      spec = pp_backend_spec (be);
      expect = g_strdup_printf ("cuda:%d", (first + r) % 3);
      g_assert_cmpstr (spec, ==, expect);
      g_assert_true (g_str_has_prefix (pp_backend_device (be), expect));
      /* The spec gets the same backend back. */
      g_assert_true (pp_backend_get (spec, NULL) == be);
    }
  be = pp_backend_get (PP_BACKEND_CUDA, &error);
  g_assert_no_error (error);
  g_assert_true (pp_backend_get ("cuda:0", NULL) == be);
  for (gint r = 0; r < 2; r++) {
    g_assert_null (pp_backend_get_local ("cuda:3", r, &error));
    g_assert_error (error, PP_ERROR, PP_ERROR_DEVICE);
    g_test_message ("%s", error->message);
    g_assert_nonnull (strstr (error->message, "no device 3 here, this "
            "process sees 3 CUDA devices (0 to 2;"));
    g_clear_error (&error);
  }
  g_assert_null (pp_backend_get ("cuda:one", &error));
  g_assert_error (error, PP_ERROR, PP_ERROR_CONFIG);
  g_clear_error (&error);
}

/* Weights stored as F16 or BF16 hold the f32 weights rounded to that
 * precision (to nearest even), and their view says how they are stored:
 * the cpu backend keeps float32 (a rounded copy; F32 is the caller's
 * memory itself), cpu-strict stores 16 bits, as a GPU does. */
static void
test_weights_dtype (gconstpointer data)
{
  PpBackend *be = get (data);
  const gboolean strict = be != pp_backend_cpu ();
  const float src[] = { 1.0f, 1.0f + 1.0f / 4096.0f, 3.14159265f, -65504.0f,
    1e-8f, 0.1f, 70000.0f, -2.5f
  };
  const gsize n = G_N_ELEMENTS (src);
  const float f16[] = { 1.0f, 1.0f, 3.140625f, -65504.0f, 0.0f,
    0.0999755859375f, INFINITY, -2.5f
  };
  const float bf16[] = { 1.0f, 1.0f, 3.140625f, -65536.0f, 1.00117176e-08f,
    0.10009765625f, 70144.0f, -2.5f
  };
  const PpDType dtypes[] = { PP_DTYPE_F32, PP_DTYPE_F16, PP_DTYPE_BF16 };
  const float *expect[] = { src, f16, bf16 };

  for (guint d = 0; d < G_N_ELEMENTS (dtypes); d++) {
    g_autoptr (GError) error = NULL;
    gpointer owned = NULL;
    union
    {
      float f[G_N_ELEMENTS (src)];
      guint16 h[G_N_ELEMENTS (src)];
    } back;
    PpView dev = pp_backend_upload_weights (be, src, n, dtypes[d], &owned,
        &error);

    g_assert_no_error (error);
    g_assert_nonnull (dev.data);
    g_assert_cmpuint (dev.numel, ==, n);
    g_assert_cmpint (dev.dtype, ==, strict ? dtypes[d] : PP_DTYPE_F32);
    if (dtypes[d] == PP_DTYPE_F32 && !strict)
      g_assert_true (dev.data == (gconstpointer) src && owned == NULL);
    else
      g_assert_true (dev.data == owned && owned != NULL);
    pp_backend_download (be, &back, dev.data, n * pp_dtype_size (dev.dtype));
    for (gsize i = 0; i < n; i++) {
      const float got = dev.dtype == PP_DTYPE_F16 ? pp_f16_to_f32 (back.h[i])
          : dev.dtype == PP_DTYPE_BF16 ? pp_bf16_to_f32 (back.h[i])
          : back.f[i];

      g_assert_cmpfloat (got, ==, expect[d][i]);
    }
    pp_backend_free (be, owned);
  }
  {
    g_autoptr (GError) error = NULL;
    gpointer owned = NULL;

    g_assert_true (pp_view_is_none (pp_backend_upload_weights (be, src, n,
                PP_DTYPE_U8, &owned, &error)));
    g_assert_error (error, PP_ERROR, PP_ERROR_CONFIG);
    g_assert_null (owned);
  }
}

/* The weight dtype names of the dtype property. */
static void
test_dtype_names (void)
{
  const gchar *const names[] = { "f32", "f16", "bf16" };

  for (guint i = 0; i < G_N_ELEMENTS (names); i++) {
    PpDType dtype = 0;

    g_assert_true (pp_dtype_parse_weights (names[i], &dtype, NULL));
    g_assert_cmpstr (pp_dtype_weights_name (dtype), ==, names[i]);
    g_assert_cmpuint (pp_dtype_size (dtype), ==, i == 0 ? 4 : 2);
  }
  {
    g_autoptr (GError) error = NULL;
    PpDType dtype = 0;

    g_assert_false (pp_dtype_parse_weights ("fp16", &dtype, &error));
    g_assert_error (error, PP_ERROR, PP_ERROR_CONFIG);
    g_assert_nonnull (strstr (error->message, "f32, f16, bf16"));
  }
}

/* NULL or "": the environment's choice. */
static void
test_env (void)
{
  const gchar *saved = g_getenv (PP_BACKEND_ENV);
  g_autofree gchar *keep = g_strdup (saved);

  g_setenv (PP_BACKEND_ENV, PP_BACKEND_CPU_STRICT, TRUE);
  g_assert_cmpstr (pp_backend_name (get (NULL)), ==, "cpu-strict");
  g_assert_cmpstr (pp_backend_name (get ("")), ==, "cpu-strict");
  g_assert_cmpstr (pp_backend_name (get (PP_BACKEND_CPU)), ==, "cpu");
  g_unsetenv (PP_BACKEND_ENV);
  g_assert_true (get (NULL) == pp_backend_cpu ());
  if (keep != NULL)
    g_setenv (PP_BACKEND_ENV, keep, TRUE);
}

/* PPDIFFUSE_ACT_LAYOUT: the models' layout on every backend; any other
 * value than its two is refused when a backend is got, naming both. */
static void
test_act_layout_env (void)
{
  g_autofree gchar *keep = g_strdup (g_getenv (PP_ACT_LAYOUT_ENV));
  g_autoptr (GError) error = NULL;

  g_unsetenv (PP_ACT_LAYOUT_ENV);
  g_assert_cmpint (pp_backend_act_layout (pp_backend_cpu (), PP_DTYPE_F32),
      ==, PP_LAYOUT_NCHW);
  /* The CPU backends' 16-bit activations are channels first too. */
  g_assert_cmpint (pp_backend_act_layout (get (PP_BACKEND_CPU_STRICT),
          PP_DTYPE_F16), ==, PP_LAYOUT_NCHW);
  g_setenv (PP_ACT_LAYOUT_ENV, "nhwc", TRUE);
  g_assert_cmpint (pp_backend_act_layout (get (PP_BACKEND_CPU_STRICT),
          PP_DTYPE_F16), ==, PP_LAYOUT_NHWC);
  g_assert_cmpint (pp_backend_act_layout (pp_backend_cpu (), PP_DTYPE_F32),
      ==, PP_LAYOUT_NHWC);
  g_assert_cmpstr (pp_layout_name (PP_LAYOUT_NHWC), ==, "nhwc");
  g_setenv (PP_ACT_LAYOUT_ENV, "NHWC", TRUE);
  g_assert_null (pp_backend_get (PP_BACKEND_CPU, &error));
  g_assert_error (error, PP_ERROR, PP_ERROR_CONFIG);
  g_assert_nonnull (strstr (error->message, "PPDIFFUSE_ACT_LAYOUT=NHWC: "
          "unknown layout; the choices are nchw"));
  g_assert_nonnull (strstr (error->message, "and nhwc"));
  if (keep != NULL)
    g_setenv (PP_ACT_LAYOUT_ENV, keep, TRUE);
  else
    g_unsetenv (PP_ACT_LAYOUT_ENV);
}

/* upload, copy, fill, an op, download: the values come back. */
static void
test_memory (gconstpointer data)
{
  PpBackend *be = get (data);
  g_autofree float *host = g_new (float, N_FLOATS);
  g_autofree float *back = g_new (float, N_FLOATS);
  g_autoptr (GError) error = NULL;
  float *a = pp_backend_alloc (be, N_FLOATS * sizeof (float), &error);
  float *b = pp_backend_alloc (be, N_FLOATS * sizeof (float), &error);

  g_assert_no_error (error);
  for (int i = 0; i < N_FLOATS; i++)
    host[i] = (float) i - 100.0f;
  pp_backend_upload (be, a, host, N_FLOATS * sizeof (float));
  pp_backend_copy (be, b, a, N_FLOATS * sizeof (float));
  pp_relu (be, pp_out_f32 (b, N_FLOATS), N_FLOATS);
  pp_backend_synchronize (be);
  pp_backend_download (be, back, b, N_FLOATS * sizeof (float));
  for (int i = 0; i < N_FLOATS; i++)
    g_assert_cmpfloat (back[i], ==, MAX (host[i], 0.0f));
  pp_backend_fill (be, a, 2.5f, N_FLOATS);
  pp_backend_download (be, back, a, N_FLOATS * sizeof (float));
  for (int i = 0; i < N_FLOATS; i++)
    g_assert_cmpfloat (back[i], ==, 2.5f);
  pp_backend_free (be, a);
  pp_backend_free (be, b);
}

/* Touches @mem from the host in a child process: TRUE when the child died
 * of SIGSEGV. */
static gboolean
host_touch_faults (float *mem, gboolean write)
{
  pid_t pid = fork ();
  int status = 0;

  g_assert_cmpint (pid, >=, 0);
  if (pid == 0) {
    volatile float *p = mem;

    /* Die of the signal itself, not through a sanitizer's handler. */
    signal (SIGSEGV, SIG_DFL);
    if (write)
      p[3] = 1.0f;
    else
      _exit ((int) p[3]);
    _exit (0);
  }
  g_assert_cmpint (waitpid (pid, &status, 0), ==, pid);
  return WIFSIGNALED (status) && WTERMSIG (status) == SIGSEGV;
}

/* cpu-strict: a host read or write of a device buffer faults, outside the
 * backend's calls; cpu: device memory is host memory. */
static void
test_strict_traps (void)
{
  PpBackend *strict = get (PP_BACKEND_CPU_STRICT);
  float *mem = pp_backend_alloc (strict, N_FLOATS * sizeof (float), NULL);
  float *plain = pp_backend_alloc (pp_backend_cpu (),
      N_FLOATS * sizeof (float), NULL);
  float one = 1.0f;

  pp_backend_fill (strict, mem, 0.0f, N_FLOATS);
  g_assert_true (host_touch_faults (mem, FALSE));
  g_assert_true (host_touch_faults (mem, TRUE));
  /* Still usable through the backend. */
  pp_backend_upload (strict, mem + 3, &one, sizeof one);
  pp_scale (strict, pp_out_f32 (mem, N_FLOATS), N_FLOATS, 2.0f);
  pp_backend_download (strict, &one, mem + 3, sizeof one);
  g_assert_cmpfloat (one, ==, 2.0f);
  /* Buffers allocated later are protected too. */
  pp_backend_free (strict, mem);
  mem = pp_backend_alloc (strict, 3 * N_FLOATS * sizeof (float), NULL);
  g_assert_true (host_touch_faults (mem + 2 * N_FLOATS, FALSE));
  pp_backend_free (strict, mem);

  pp_backend_fill (pp_backend_cpu (), plain, 0.0f, N_FLOATS);
  g_assert_false (host_touch_faults (plain, TRUE));
  pp_backend_free (pp_backend_cpu (), plain);
}

/* What @pool holds, and the most of it in use at once. */
static PpPoolBytes
pool_bytes (PpPool * pool)
{
  PpPoolBytes sum = { 0, 0 };

  pp_pool_count (pool, &sum);
  return sum;
}

/* A pool cuts its blocks, each 256-byte aligned, from segments of 64 KiB
 * multiples (2 MiB ones from 2 MiB on), and a released block goes to the
 * next request it fits. */
static void
test_pool (gconstpointer data)
{
  PpBackend *be = get (data);
  g_autoptr (PpPool) pool = pp_pool_new (be, PP_DTYPE_F32);
  gpointer a = pp_pool_acquire (pool, 4096);
  gpointer b = pp_pool_acquire (pool, 8000);
  guint64 before;

  g_assert_true (a != b);
  g_assert_cmpuint ((guintptr) a % 256, ==, 0);
  g_assert_cmpuint ((guintptr) b % 256, ==, 0);
  /* One segment for both. */
  g_assert_cmpuint (pool_bytes (pool).held, ==, 64 << 10);
  pp_pool_release (pool, a, 4096);
  pp_pool_release (pool, b, 8000);
  before = pp_backend_allocated_bytes ();
  /* The two joined again: the first request takes their start. */
  g_assert_true (pp_pool_acquire (pool, 8192) == a);
  b = pp_pool_acquire (pool, 4096);
  g_assert_true (b != a);
  g_assert_cmpuint (pp_backend_allocated_bytes (), ==, before);
  g_assert_cmpuint (pool_bytes (pool).peak, >=, 8192 + 4096);
  pp_pool_release (pool, a, 8192);
  pp_pool_release (pool, b, 4096);
  /* A request larger than what is free: a segment of its own, rounded. */
  b = pp_pool_acquire (pool, (3 << 20) + 1);
  g_assert_cmpuint (pool_bytes (pool).held, ==, (64 << 10) + (4 << 20));
  pp_pool_release (pool, b, (3 << 20) + 1);
}

/* Built with AddressSanitizer, on the backends whose memory is the
 * host's: a block is poisoned past its request's bytes, and all of it
 * once released, so that a read past an activation or after its release
 * is reported.  (Registered in such builds alone.) */
#if defined(__SANITIZE_ADDRESS__)
static void
test_pool_poisoned (gconstpointer data)
{
  PpBackend *be = get (data);
  g_autoptr (PpPool) pool = pp_pool_new (be, PP_DTYPE_F32);
  guint8 *a = pp_pool_acquire (pool, 1000);
  guint8 *b = pp_pool_acquire (pool, 4096);

  g_assert_false (__asan_address_is_poisoned (a));
  g_assert_false (__asan_address_is_poisoned (a + 999));
  g_assert_true (__asan_address_is_poisoned (a + 1000));
  g_assert_false (__asan_address_is_poisoned (b + 4095));
  g_assert_true (__asan_address_is_poisoned (b + 4096));
  pp_pool_release (pool, a, 1000);
  g_assert_true (__asan_address_is_poisoned (a));
  g_assert_false (__asan_address_is_poisoned (b));
  pp_pool_release (pool, b, 4096);
  g_assert_true (__asan_address_is_poisoned (b));
}
#endif

/* A forward's activations at batch size @n, the shape of a UNet's: each
 * level's input held (a skip) while its work comes and goes, the levels
 * narrower and deeper; all released at the end. */
static void
pool_forward (PpPool * pool, gsize n)
{
  const gsize unit = 40960;     /* a sample's bytes at the widest level */
  gpointer skips[4], work[3];

  for (guint l = 0; l < 4; l++) {
    const gsize level = n * unit >> l;

    skips[l] = pp_pool_acquire (pool, level);
    work[0] = pp_pool_acquire (pool, level);
    work[1] = pp_pool_acquire (pool, 3 * level);        /* q, k, v */
    pp_pool_release (pool, work[0], level);
    work[2] = pp_pool_acquire (pool, 8 * level);        /* a GEGLU's */
    pp_pool_release (pool, work[1], 3 * level);
    pp_pool_release (pool, work[2], 8 * level);
  }
  for (guint l = 4; l-- > 0;)
    pp_pool_release (pool, skips[l], n * unit >> l);
}

/* Forwards of every batch size from the widest down, as a worker warms
 * them (pp_model_warm_batches), allocate once: the narrower ones run in
 * what the widest released, the pool holding about what the widest had
 * in use at once (a pool that kept buffers by their exact size held one
 * set for every size). */
static void
test_pool_narrower (gconstpointer data)
{
  PpBackend *be = get (data);
  g_autoptr (PpPool) pool = pp_pool_new (be, PP_DTYPE_F32);
  gsize held;

  pool_forward (pool, 8);
  held = pool_bytes (pool).held;
  g_assert_cmpuint (held, <=, 2 * pool_bytes (pool).peak);
  for (gsize n = 7; n >= 1; n--)
    pool_forward (pool, n);
  g_assert_cmpuint (pool_bytes (pool).held, ==, held);
  /* Widest again: nothing more either. */
  pool_forward (pool, 8);
  g_assert_cmpuint (pool_bytes (pool).held, ==, held);
}

/* Blocks in use never share a byte: each keeps what was written into it
 * while others are cut, released and joined around it (random sizes from
 * a few bytes to a few MiB, half of the blocks released at each round). */
static void
test_pool_apart (gconstpointer data)
{
  PpBackend *be = get (data);
  g_autoptr (PpPool) pool = pp_pool_new (be, PP_DTYPE_F32);
  g_autoptr (GRand) rand = g_rand_new_with_seed (7);
  enum { SLOTS = 48, ROUNDS = 40 };
  gpointer mem[SLOTS] = { NULL };
  gsize floats[SLOTS] = { 0 };
  float *host = g_new (float, (4 << 20) / sizeof (float));

  for (guint round = 0; round < ROUNDS; round++) {
    for (guint i = 0; i < SLOTS; i++) {
      if (mem[i] != NULL && g_rand_boolean (rand)) {
        /* Still what was written into it. */
        pp_backend_download (be, host, mem[i], floats[i] * sizeof (float));
        for (gsize k = 0; k < floats[i]; k += 97)
          g_assert_cmpfloat (host[k], ==, (float) i);
        pp_pool_release (pool, mem[i], floats[i] * sizeof (float));
        mem[i] = NULL;
      }
      if (mem[i] == NULL) {
        floats[i] = g_rand_boolean (rand)
            ? (gsize) g_rand_int_range (rand, 1, 2048)
            : (gsize) g_rand_int_range (rand, 2048, (4 << 20) / 4);
        mem[i] = pp_pool_acquire (pool, floats[i] * sizeof (float));
        g_assert_cmpuint ((guintptr) mem[i] % 256, ==, 0);
        pp_backend_fill (be, mem[i], (float) i, floats[i]);
      }
    }
  }
  for (guint i = 0; i < SLOTS; i++) {
    pp_backend_download (be, host, mem[i], floats[i] * sizeof (float));
    for (gsize k = 0; k < floats[i]; k++)
      g_assert_cmpfloat (host[k], ==, (float) i);
    pp_pool_release (pool, mem[i], floats[i] * sizeof (float));
  }
  g_free (host);
}

/* A model of the tiny pipeline in @dir, loaded from @uri, with the
 * settings the frames below run with. */
static PpModel *
tiny_model_new (const gchar * uri, const gchar * dir, PpBackend * be,
    GError ** error)
{
  g_autofree gchar *embeds = g_strdup_printf ("%s/prompt_embeds.npy", dir);
  PpSettings settings = { (gchar *) uri, NULL, embeds, 0.8, 3, NULL };
  PpModel *m = pp_model_new (uri, STEPS, PP_MODEL_ROLE_ALL, be, error);

  if (m != NULL && !pp_model_update (m, &settings, NULL, error))
    g_clear_pointer (&m, pp_model_free);
  return m;
}

/* An img2img frame the way the element and the workers run it: after the
 * first frame, a frame allocates no device memory, on either backend, and
 * every frame gives the same bytes on both. */
static void
run_frames (PpBackend * be, const gchar * dir, guint8 * out)
{
  g_autoptr (GError) error = NULL;
  g_autoptr (PpModel) m = tiny_model_new (dir, dir, be, &error);
  const gsize bytes = FRAME_SIDE * FRAME_SIDE * 3;

  g_assert_no_error (error);
  for (int f = 0; f < FRAMES; f++) {
    PpImage image = { out, FRAME_SIDE, FRAME_SIDE, FRAME_SIDE * 3, 3,
      {0, 1, 2}
    };
    g_autoptr (PpTensor) sample = NULL;
    guint64 before = pp_backend_allocated_bytes ();

    for (gsize i = 0; i < bytes; i++)
      out[i] = (guint8) ((i * 7 + i / 97) & 0xff);
    sample = pp_model_encode (m, &image, &error);
    g_assert_no_error (error);
    g_assert_true (pp_model_steps_begin (m, sample, &error));
    for (guint k = 0; k < STEPS; k++)
      g_assert_true (pp_model_step (m, k, STEPS, sample, &error));
    g_assert_true (pp_model_steps_end (m, sample, &error));
    g_assert_true (pp_model_decode (m, sample, &image, &error));
    g_assert_no_error (error);
    if (f > 0)
      g_assert_cmpuint (pp_backend_allocated_bytes () - before, ==, 0);
  }
}

static void
test_frames (void)
{
  g_autoptr (GError) error = NULL;
  g_autofree gchar *dir = g_dir_make_tmp ("pp-backend-XXXXXX", &error);
  g_autofree guint8 *cpu = g_malloc (FRAME_SIDE * FRAME_SIDE * 3);
  g_autofree guint8 *strict = g_malloc (FRAME_SIDE * FRAME_SIDE * 3);
  g_autofree gchar *rm = NULL;

  g_assert_no_error (error);
  g_assert_true (pp_tiny_write ("turbo", dir, 5, &error));
  g_assert_no_error (error);
  run_frames (pp_backend_cpu (), dir, cpu);
  run_frames (get (PP_BACKEND_CPU_STRICT), dir, strict);
  g_assert_cmpmem (cpu, FRAME_SIDE * FRAME_SIDE * 3, strict,
      FRAME_SIDE * FRAME_SIDE * 3);
  rm = g_strdup_printf ("rm -rf '%s'", dir);
  g_assert_cmpint (system (rm), ==, 0);
}

/* Runs @runs chunks of steps [first, end) on @m, each from the same
 * encoded frame, into @out (the last chunk's latents, @n floats). */
static void
run_slices (PpModel * m, guint first, guint end, guint runs, float *out,
    gsize n)
{
  g_autoptr (GError) error = NULL;
  g_autofree guint8 *pixels = g_malloc (FRAME_SIDE * FRAME_SIDE * 3);
  PpImage image = { pixels, FRAME_SIDE, FRAME_SIDE, FRAME_SIDE * 3, 3,
    {0, 1, 2}
  };

  for (gsize i = 0; i < FRAME_SIDE * FRAME_SIDE * 3; i++)
    pixels[i] = (guint8) ((i * 5 + i / 89) & 0xff);
  for (guint r = 0; r < runs; r++) {
    g_autoptr (PpTensor) sample = pp_model_encode (m, &image, &error);

    g_assert_no_error (error);
    g_assert_cmpuint (pp_tensor_numel (sample), ==, n);
    g_assert_true (pp_model_steps_begin (m, sample, &error));
    g_assert_true (pp_model_steps_slice (m, first, end, STEPS, sample, NULL,
            NULL, &error));
    g_assert_true (pp_model_steps_end (m, sample, &error));
    g_assert_no_error (error);
    memcpy (out, sample->data, n * sizeof (float));
  }
}

/* The graphs @counts says @m captured and launched (its slices' or its
 * stream batches'). */
static void
assert_counts (PpModel * m, void (*counts) (PpModel *, guint64 *,
        guint64 *), guint64 captures, guint64 launches)
{
  guint64 c, l;

  counts (m, &c, &l);
  g_assert_cmpuint (c, ==, captures);
  g_assert_cmpuint (l, ==, launches);
}

static void
assert_graph_counts (PpModel * m, guint64 captures, guint64 launches)
{
  assert_counts (m, pp_model_graph_counts, captures, launches);
}

/* cuda-graphs=1 on cpu-strict (which emulates device graphs): the first
 * chunk of a slice runs as is, the second is captured and launched, the
 * later ones launch the graph; a reset (new cache epoch) or another slice
 * captures again; every chunk gives the bytes of the same model without
 * graphs.  On the cpu backend (no graphs) the parameter changes nothing. */
static void
test_graphs (void)
{
  g_autoptr (GError) error = NULL;
  g_autofree gchar *dir = g_dir_make_tmp ("pp-graphs-XXXXXX", &error);
  g_autofree gchar *uri = NULL, *plain_uri = NULL, *rm = NULL;
  const gsize n = 4 * (FRAME_SIDE / 8) * (FRAME_SIDE / 8);
  g_autofree float *eager = g_new (float, n);
  g_autofree float *graphed = g_new (float, n);
  PpBackend *strict = get (PP_BACKEND_CPU_STRICT);

  g_assert_no_error (error);
  g_assert_true (pp_tiny_write ("turbo", dir, 6, &error));
  plain_uri = g_strdup (dir);
  uri = g_strdup_printf ("%s?cuda-graphs=1", plain_uri);
  {
    g_autoptr (PpModel) plain = tiny_model_new (plain_uri, dir, strict,
        &error);
    g_autoptr (PpModel) m = tiny_model_new (uri, dir, strict, &error);

    g_assert_no_error (error);
    g_assert_true (pp_backend_has_graphs (strict));
    g_assert_false (pp_backend_has_graphs (pp_backend_cpu ()));
    run_slices (plain, 0, STEPS, 1, eager, n);
    assert_graph_counts (plain, 0, 0);
    run_slices (m, 0, STEPS, 1, graphed, n);
    assert_graph_counts (m, 0, 0);
    g_assert_cmpmem (eager, n * 4, graphed, n * 4);
    run_slices (m, 0, STEPS, 1, graphed, n);
    assert_graph_counts (m, 1, 1);
    g_assert_cmpmem (eager, n * 4, graphed, n * 4);
    run_slices (m, 0, STEPS, 3, graphed, n);
    assert_graph_counts (m, 1, 4);
    g_assert_cmpmem (eager, n * 4, graphed, n * 4);
    /* a new cache epoch: warm up, capture again */
    pp_model_graphs_reset (m);
    run_slices (m, 0, STEPS, 2, graphed, n);
    assert_graph_counts (m, 2, 5);
    g_assert_cmpmem (eager, n * 4, graphed, n * 4);
    /* another slice of the steps: its own warm-up and capture */
    run_slices (plain, 1, STEPS, 1, eager, n);
    run_slices (m, 1, STEPS, 3, graphed, n);
    assert_graph_counts (m, 3, 7);
    g_assert_cmpmem (eager, n * 4, graphed, n * 4);
    /* settings taken (pp_model_update) replace buffers the graph was
     * captured with: warm up, capture again, never launch the old one */
    {
      g_autofree gchar *embeds = g_strdup_printf ("%s/prompt_embeds.npy",
          dir);
      PpSettings settings = { uri, NULL, embeds, 0.8, 3, NULL };

      g_assert_true (pp_model_update (m, &settings, NULL, &error));
      g_assert_no_error (error);
    }
    run_slices (m, 1, STEPS, 2, graphed, n);
    assert_graph_counts (m, 4, 8);
    g_assert_cmpmem (eager, n * 4, graphed, n * 4);
  }
  {
    g_autoptr (PpModel) m = tiny_model_new (uri, dir, pp_backend_cpu (),
        &error);

    g_assert_no_error (error);
    run_slices (m, 0, STEPS, 3, graphed, n);
    assert_graph_counts (m, 0, 0);
  }
  {
    g_autofree gchar *bad = g_strdup_printf ("%s?cuda-graphs=maybe",
        plain_uri);

    g_assert_null (pp_model_new (bad, STEPS, PP_MODEL_ROLE_ALL, strict,
            &error));
    g_assert_error (error, PP_ERROR, PP_ERROR_MODEL);
    g_assert_nonnull (strstr (error->message, "cuda-graphs=maybe"));
  }
  rm = g_strdup_printf ("rm -rf '%s'", dir);
  g_assert_cmpint (system (rm), ==, 0);
}

/* Frame @f of a moving sequence through all of @m's steps (a frame of
 * the stream, or with @warm_up a warm-up pass), its latents into @out. */
static void
run_sequence_frame (PpModel * m, guint f, gboolean warm_up, float *out,
    gsize n)
{
  g_autoptr (GError) error = NULL;
  g_autofree guint8 *pixels = g_malloc (FRAME_SIDE * FRAME_SIDE * 3);
  PpImage image = { pixels, FRAME_SIDE, FRAME_SIDE, FRAME_SIDE * 3, 3,
    {0, 1, 2}
  };
  g_autoptr (PpTensor) sample = NULL;

  for (gsize i = 0; i < FRAME_SIDE * FRAME_SIDE * 3; i++)
    pixels[i] = (guint8) ((i * 5 + i / 89 + f * 11) & 0xff);
  sample = pp_model_encode (m, &image, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (pp_tensor_numel (sample), ==, n);
  pp_model_stream_frame (m, !warm_up);
  g_assert_true (pp_model_steps_begin (m, sample, &error));
  g_assert_true (pp_model_steps_slice (m, 0, STEPS, STEPS, sample, NULL,
          NULL, &error));
  g_assert_true (pp_model_steps_end (m, sample, &error));
  g_assert_no_error (error);
  pp_model_stream_frame (m, TRUE);
  memcpy (out, sample->data, n * sizeof (float));
}

/* The temporal feature bank (one bank frame) with graphs on cpu-strict:
 * the slices run as is while the banks fill (frames 0 and 1, the second
 * merging), the next frame runs as is (its warm-up), the one after is
 * captured and the later ones launch it; a warm-up pass in between runs
 * as is and drops the graph (its sample may be of another size), which
 * is then warmed up and captured again; a new epoch empties the banks,
 * and graphs wait for them to be steady again.  Every frame gives the
 * bytes of the same model without graphs, fed the same passes. */
static void
test_graphs_feature_bank (void)
{
  g_autoptr (GError) error = NULL;
  g_autofree gchar *dir = g_dir_make_tmp ("pp-graphs-XXXXXX", &error);
  g_autofree gchar *uri = NULL, *embeds = NULL, *rm = NULL;
  const gsize n = 4 * (FRAME_SIDE / 8) * (FRAME_SIDE / 8);
  g_autofree float *eager = g_new (float, n);
  g_autofree float *graphed = g_new (float, n);
  PpBackend *strict = get (PP_BACKEND_CPU_STRICT);
  /* After each frame: the captures and launches so far; a warm-up pass
   * before frame 6, a new epoch before frame 9. */
  const struct
  {
    guint captures, launches;
  } after[] = { {0, 0}, {0, 0}, {0, 0}, {1, 1}, {1, 2}, {1, 3}, {1, 3},
  {2, 4}, {2, 5}, {2, 5}, {2, 5}, {2, 5}, {3, 6}
  };

  g_assert_no_error (error);
  g_assert_true (pp_tiny_write ("turbo", dir, 6, &error));
  uri = g_strdup_printf ("%s?cuda-graphs=1", dir);
  embeds = g_strdup_printf ("%s/prompt_embeds.npy", dir);
  {
    g_autoptr (PpModel) plain = pp_model_new (dir, STEPS,
        PP_MODEL_ROLE_ALL, strict, &error);
    g_autoptr (PpModel) m = pp_model_new (uri, STEPS, PP_MODEL_ROLE_ALL,
        strict, &error);
    PpSettings plain_settings = { dir, NULL, embeds, 0.8, 3, NULL,
      (gchar *) PP_SETTINGS_TEMPORAL_FEATURE_BANK, 1, 0.5
    };
    PpSettings settings = plain_settings;

    g_assert_no_error (error);
    settings.model = uri;
    g_assert_true (pp_model_update (plain, &plain_settings, NULL, &error));
    g_assert_true (pp_model_update (m, &settings, NULL, &error));
    g_assert_no_error (error);
    for (guint f = 0; f < G_N_ELEMENTS (after); f++) {
      if (f == 6) {
        run_sequence_frame (plain, 100, TRUE, eager, n);
        run_sequence_frame (m, 100, TRUE, graphed, n);
        g_assert_cmpmem (eager, n * 4, graphed, n * 4);
        assert_graph_counts (m, 1, 3);
      }
      if (f == 9) {
        pp_model_new_epoch (plain);
        pp_model_new_epoch (m);
      }
      run_sequence_frame (plain, f, FALSE, eager, n);
      run_sequence_frame (m, f, FALSE, graphed, n);
      g_assert_cmpmem (eager, n * 4, graphed, n * 4);
      assert_graph_counts (m, after[f].captures, after[f].launches);
    }
  }
  rm = g_strdup_printf ("rm -rf '%s'", dir);
  g_assert_cmpint (system (rm), ==, 0);
}

static void
assert_batch_graph_counts (PpModel * m, guint64 captures, guint64 launches)
{
  assert_counts (m, pp_model_batch_graph_counts, captures, launches);
}

/* The samples' steps of the batch numbered @key (the batches of 2, 3, 4
 * samples over STEPS steps, in order), into @steps; returns its size. */
static guint
batch_key (guint key, guint steps[4])
{
  for (guint n = 2; n <= 4; n++) {
    guint count = 1;

    for (guint i = 0; i < n; i++)
      count *= STEPS;
    if (key < count) {
      for (guint i = 0; i < n; i++, key /= STEPS)
        steps[i] = key % STEPS;
      return n;
    }
    key -= count;
  }
  g_assert_not_reached ();
}

/* @count samples of @m, each encoded from one frame of pattern @mul. */
static void
encode_samples (PpModel * m, guint mul, PpTensor ** samples, guint count)
{
  g_autoptr (GError) error = NULL;
  g_autofree guint8 *pixels = g_malloc (FRAME_SIDE * FRAME_SIDE * 3);
  PpImage image = { pixels, FRAME_SIDE, FRAME_SIDE, FRAME_SIDE * 3, 3,
    {0, 1, 2}
  };

  for (gsize i = 0; i < FRAME_SIDE * FRAME_SIDE * 3; i++)
    pixels[i] = (guint8) ((i * mul + i / 61) & 0xff);
  for (guint i = 0; i < count; i++) {
    samples[i] = pp_model_encode (m, &image, &error);
    g_assert_no_error (error);
  }
}

/* The latent samples of @n frames of @side latent pixels, each its own
 * values. */
static void
latent_samples (guint n, gint64 side, PpTensor ** samples)
{
  const gint64 shape[4] = { 1, 4, side, side };

  for (guint i = 0; i < n; i++) {
    float *v;

    samples[i] = pp_tensor_new ("latents", PP_DTYPE_F32, 4, shape, NULL);
    v = (float *) samples[i]->data;
    for (gint64 k = 0; k < 4 * side * side; k++)
      v[k] = (float) ((k * 7 + i * 13) % 17) / 17.0f - 0.5f;
  }
}

/* The batch sizes a worker warms (pp_model_warm_batches) run widest
 * first, so that the narrower ones run in the activations it released:
 * the model's pools hold what one pass of the widest leaves them, and no
 * more (the narrowest first, or a pool that kept buffers by their exact
 * size, held a set for every size). */
static void
test_warm_batches_pools (void)
{
  g_autoptr (GError) error = NULL;
  g_autofree gchar *dir = g_dir_make_tmp ("pp-warm-pools-XXXXXX", &error);
  g_autofree gchar *uri = NULL, *rm = NULL;
  PpBackend *cpu = pp_backend_cpu ();
  const guint at_step_0[4] = { 0, 0, 0, 0 };
  PpTensor *samples[4];
  PpPoolBytes warmed, widest;
  guint sizes = 0;

  g_assert_no_error (error);
  g_assert_true (pp_tiny_write ("turbo", dir, 6, &error));
  /* frame-batch 2 over 2 steps: passes of up to 4 samples, each large
   * enough (32×32 latents) to take several of a pool's segments. */
  uri = g_strdup_printf ("%s?frame-batch=2", dir);
  latent_samples (G_N_ELEMENTS (samples), 32, samples);
  pp_backend_set_plans_shapes (cpu, TRUE);
  {
    g_autoptr (PpModel) m = tiny_model_new (uri, dir, cpu, &error);

    g_assert_no_error (error);
    g_assert_true (pp_model_warm_batches (m, samples[0], 4, 0, STEPS,
            &sizes, &error));
    g_assert_no_error (error);
    g_assert_cmpuint (sizes, ==, 3);
    warmed = pp_model_pools (m);
  }
  {
    g_autoptr (PpModel) m = tiny_model_new (uri, dir, cpu, &error);

    g_assert_no_error (error);
    g_assert_true (pp_model_steps_batch (m, 4, samples, at_step_0, STEPS,
            &error));
    g_assert_no_error (error);
    widest = pp_model_pools (m);
  }
  pp_backend_set_plans_shapes (cpu, FALSE);
  g_test_message ("pools after the warm-up: %" G_GUINT64_FORMAT " bytes held, "
      "%" G_GUINT64_FORMAT " at most in use; after a pass of 4: %"
      G_GUINT64_FORMAT ", %" G_GUINT64_FORMAT, warmed.held, warmed.peak,
      widest.held, widest.peak);
  g_assert_cmpuint (widest.held, >, 8 << 20);
  g_assert_cmpuint (warmed.peak, ==, widest.peak);
  g_assert_cmpuint (warmed.held, ==, widest.held);
  for (guint i = 0; i < G_N_ELEMENTS (samples); i++)
    pp_tensor_free (samples[i]);
  rm = g_strdup_printf ("rm -rf '%s'", dir);
  g_assert_cmpint (system (rm), ==, 0);
}

/* Stream batches as graphs on cpu-strict (which emulates device graphs):
 * a batch runs as is the first time, is captured the second, and a full
 * set of graphs (16) drops the one used longest ago, not the others: the
 * batch a source makes most keeps its graph while bursts make others. */
static void
test_batch_graphs (void)
{
  g_autoptr (GError) error = NULL;
  g_autofree gchar *dir = g_dir_make_tmp ("pp-batch-graphs-XXXXXX", &error);
  g_autofree gchar *uri = NULL, *rm = NULL;
  PpTensor *samples[4];
  /* Batch 0 (two samples at step 0) is the usual one; 1 … 16 come once
   * each, twice in a row, between two of it. */
  guint usual[4], steps[4];
  const guint usual_n = batch_key (0, usual);
  guint64 captures = 0, launches = 0;

  g_assert_no_error (error);
  g_assert_true (pp_tiny_write ("turbo", dir, 6, &error));
  uri = g_strdup_printf ("%s?cuda-graphs=1&frame-batch=2", dir);
  {
    g_autoptr (PpModel) m = tiny_model_new (uri, dir,
        get (PP_BACKEND_CPU_STRICT), &error);

    g_assert_no_error (error);
    encode_samples (m, 3, samples, G_N_ELEMENTS (samples));
    for (guint r = 0; r < 2; r++)
      g_assert_true (pp_model_steps_batch (m, usual_n, samples, usual,
              STEPS, &error));
    assert_batch_graph_counts (m, ++captures, ++launches);
    for (guint key = 1; key <= 16; key++) {
      const guint n = batch_key (key, steps);

      g_assert_true (pp_model_steps_batch (m, n, samples, steps, STEPS,
              &error));
      assert_batch_graph_counts (m, captures, launches);
      g_assert_true (pp_model_steps_batch (m, n, samples, steps, STEPS,
              &error));
      assert_batch_graph_counts (m, ++captures, ++launches);
      /* The 17th batch (key 16) found the set full and dropped batch 1,
       * used longest ago: the usual one is launched, never run again as
       * is or captured again. */
      g_assert_true (pp_model_steps_batch (m, usual_n, samples, usual,
              STEPS, &error));
      assert_batch_graph_counts (m, captures, ++launches);
    }
    /* Batch 1 was dropped: it runs as is again. */
    g_assert_cmpuint (batch_key (1, steps), ==, 2);
    g_assert_true (pp_model_steps_batch (m, 2, samples, steps, STEPS,
            &error));
    assert_batch_graph_counts (m, captures, launches);
    g_assert_no_error (error);
    for (guint i = 0; i < G_N_ELEMENTS (samples); i++)
      pp_tensor_free (samples[i]);
  }
  rm = g_strdup_printf ("rm -rf '%s'", dir);
  g_assert_cmpint (system (rm), ==, 0);
}

/* A batch of two samples at steps 0 and 1 on @m, from @samples' values
 * (copied: the pass writes its samples), into @out. */
static void
run_batch_copy (PpModel * m, PpTensor * const *samples, float *out, gsize n)
{
  g_autoptr (GError) error = NULL;
  const guint steps[2] = { 0, 1 };
  PpTensor *copies[2];

  for (guint i = 0; i < 2; i++) {
    copies[i] = pp_tensor_new ("copy", samples[i]->dtype, samples[i]->ndim,
        samples[i]->shape, &error);
    g_assert_no_error (error);
    memcpy (copies[i]->data, samples[i]->data, samples[i]->nbytes);
  }
  g_assert_true (pp_model_steps_batch (m, 2, copies, steps, STEPS, &error));
  g_assert_no_error (error);
  for (guint i = 0; i < 2; i++) {
    memcpy (out + i * n, copies[i]->data, n * sizeof (float));
    pp_tensor_free (copies[i]);
  }
}

/* The batch sizes warmed before a stream (pp_model_warm_batches), on
 * cpu-strict told it plans per shape as a GPU does: every size from 2 to
 * the most a pass takes runs once as is, so that its first batch in the
 * stream is captured at once; the warm-up leaves nothing behind (a batch
 * after it gives the bytes it gives without one); a backend that makes no
 * plans runs none. */
static void
test_warm_batches (void)
{
  g_autoptr (GError) error = NULL;
  g_autofree gchar *dir = g_dir_make_tmp ("pp-warm-batches-XXXXXX", &error);
  g_autofree gchar *uri = NULL, *rm = NULL;
  PpBackend *strict = get (PP_BACKEND_CPU_STRICT);
  const gsize n = 4 * (FRAME_SIDE / 8) * (FRAME_SIDE / 8);
  g_autofree float *cold = g_new (float, 2 * n);
  g_autofree float *warm = g_new (float, 2 * n);
  const guint three[3] = { 0, 0, 0 };
  PpTensor *samples[3];
  guint sizes = 99;

  g_assert_no_error (error);
  g_assert_true (pp_tiny_write ("turbo", dir, 6, &error));
  uri = g_strdup_printf ("%s?cuda-graphs=1&frame-batch=2", dir);
  g_assert_false (pp_backend_plans_shapes (strict));
  g_assert_false (pp_backend_plans_shapes (pp_backend_cpu ()));
  {
    g_autoptr (PpModel) m = tiny_model_new (uri, dir, strict, &error);

    g_assert_no_error (error);
    encode_samples (m, 11, samples, G_N_ELEMENTS (samples));
    /* No plans per shape: nothing runs, and a batch's first run is as
     * is. */
    g_assert_true (pp_model_warm_batches (m, samples[0], 4, 0, STEPS,
            &sizes, &error));
    g_assert_cmpuint (sizes, ==, 0);
    run_batch_copy (m, samples, cold, n);
    assert_batch_graph_counts (m, 0, 0);
  }
  pp_backend_set_plans_shapes (strict, TRUE);
  {
    g_autoptr (PpModel) m = tiny_model_new (uri, dir, strict, &error);

    g_assert_no_error (error);
    /* frame-batch 2 over 2 steps: passes of up to 4 (more asked). */
    g_assert_true (pp_model_warm_batches (m, samples[0], 9, 0, STEPS,
            &sizes, &error));
    g_assert_no_error (error);
    g_assert_cmpuint (sizes, ==, 3);
    assert_batch_graph_counts (m, 0, 0);
    /* A batch not warmed (steps 0 and 1) runs as is first, and gives the
     * bytes the model gives it without a warm-up. */
    run_batch_copy (m, samples, warm, n);
    assert_batch_graph_counts (m, 0, 0);
    g_assert_cmpmem (cold, 2 * n * sizeof (float), warm,
        2 * n * sizeof (float));
    /* A batch of three at step 0, warmed: captured at its first run. */
    g_assert_true (pp_model_steps_batch (m, 3, samples, three, STEPS,
            &error));
    g_assert_no_error (error);
    assert_batch_graph_counts (m, 1, 1);
  }
  pp_backend_set_plans_shapes (strict, FALSE);
  for (guint i = 0; i < G_N_ELEMENTS (samples); i++)
    pp_tensor_free (samples[i]);
  rm = g_strdup_printf ("rm -rf '%s'", dir);
  g_assert_cmpint (system (rm), ==, 0);
}

static gboolean
upload_in_graph (gpointer data, GError ** error)
{
  float one = 1.0f;

  pp_backend_upload (get (PP_BACKEND_CPU_STRICT), data, &one, sizeof one);
  return TRUE;
}

/* Rank 0 moves frames from two threads at once (its chain uploads and
 * encodes, its collector decodes and downloads): on the backend
 * $PPDIFFUSE_BACKEND names, each thread's bytes come back as it wrote
 * them, in sizes of one staging buffer and of several each way (on cuda a
 * transfer waits for its copies without the backend's lock,
 * kernels/cuda/pp-cuda-private.h: PpCudaStaging). */
typedef struct
{
  PpBackend *be;
  gsize bytes;
  guint rounds, seed;
  gboolean ok;
} Mover;

static gpointer
move_bytes (gpointer data)
{
  Mover *m = data;
  g_autofree guint8 *out = g_malloc (m->bytes);
  g_autofree guint8 *in = g_malloc (m->bytes);
  gpointer dev = pp_backend_alloc (m->be, m->bytes, NULL);

  m->ok = dev != NULL;
  for (guint r = 0; m->ok && r < m->rounds; r++) {
    for (gsize i = 0; i < m->bytes; i++)
      out[i] = (guint8) (i * 7 + r * 13 + m->seed);
    pp_backend_upload (m->be, dev, out, m->bytes);
    memset (in, 0, m->bytes);
    pp_backend_download (m->be, in, dev, m->bytes);
    m->ok = memcmp (in, out, m->bytes) == 0;
  }
  if (dev != NULL)
    pp_backend_free (m->be, dev);
  return NULL;
}

static void
test_transfers_from_threads (void)
{
  PpBackend *be = get (NULL);
  Mover movers[] = {
    {be, (3 << 20) + 5, 40, 1, FALSE},
    {be, (41 << 20) + 3, 3, 2, FALSE},
    {be, (9 << 20) + 1, 12, 3, FALSE},
  };
  GThread *threads[G_N_ELEMENTS (movers)];

  g_test_message ("backend %s", pp_backend_name (be));
  for (guint i = 0; i < G_N_ELEMENTS (movers); i++)
    threads[i] = g_thread_new ("mover", move_bytes, &movers[i]);
  for (guint i = 0; i < G_N_ELEMENTS (movers); i++) {
    g_thread_join (threads[i]);
    g_assert_true (movers[i].ok);
  }
}

/* A product whose shape is first met inside a capture.  Where its way is
 * still to be timed (cuda with PPDIFFUSE_CUDA_GEMM_ALGO=timed), the
 * capture fails naming it: a graph recording the heuristics' first
 * algorithm would replay other sums than the direct runs, which take the
 * fastest once timed.  The run without a graph times it, and the next
 * capture replays what the direct runs compute: byte for byte, on every
 * backend with graphs. */
#define PRODUCT_ROWS 24
#define PRODUCT_IN 40
#define PRODUCT_OUT 32
/* The captured product's rows, in and out are these fewer than the
 * warm-up's. */
#define PRODUCT_LESS 8

typedef struct
{
  PpBackend *be;
  PpDType t;
  gpointer x, w, b, y;
} Product;

/* The product of @p's rows less @less (the warm-up's shape: 0). */
static void
product_run (Product * p, int less)
{
  const int rows = PRODUCT_ROWS - less, in = PRODUCT_IN - less,
      out = PRODUCT_OUT - less;

  pp_linear (p->be, pp_view (p->x, p->t, rows * in), rows, in,
      pp_view (p->w, p->t, out * in), pp_view (p->b, p->t, out), out,
      pp_out (p->y, p->t, rows * out));
}

static gboolean
product_func (gpointer data, GError ** error)
{
  product_run (data, PRODUCT_LESS);
  return TRUE;
}

static gpointer
product_operand (Product * p, GRand * rand, gsize n)
{
  g_autofree float *host = g_new (float, n);
  gpointer mem = pp_backend_alloc (p->be, n * pp_dtype_size (p->t), NULL);

  for (gsize i = 0; i < n; i++)
    host[i] = (float) g_rand_double_range (rand, -1.0, 1.0);
  pp_backend_upload_floats (p->be, pp_out (mem, p->t, n), host);
  return mem;
}

static void
test_graph_first_met (void)
{
  PpBackend *be = get (NULL);
  const gchar *algo = g_getenv ("PPDIFFUSE_CUDA_GEMM_ALGO");
  const gsize y_values = (PRODUCT_ROWS - PRODUCT_LESS)
      * (PRODUCT_OUT - PRODUCT_LESS);
  g_autofree float *direct = g_new0 (float, y_values);
  g_autofree float *graphed = g_new0 (float, y_values);
  gsize y_used;
  g_autoptr (GError) error = NULL;
  GRand *rand = g_rand_new_with_seed (11);
  gboolean timed;
  gpointer graph;
  Product p;

  if (!pp_backend_has_graphs (be))
    be = get (PP_BACKEND_CPU_STRICT);
  timed = g_str_equal (pp_backend_name (be), "cuda")
      && g_strcmp0 (algo, "timed") == 0;
  p.be = be;
  /* 16 bits where the backend takes them: cuBLASLt's products on cuda. */
  p.t = (be->act_dtypes & PP_DTYPE_BIT (PP_DTYPE_F16)) ? PP_DTYPE_F16
      : PP_DTYPE_F32;
  g_test_message ("backend %s, %s, timed: %d", pp_backend_name (be),
      pp_dtype_name (p.t), timed);
  p.x = product_operand (&p, rand, PRODUCT_ROWS * PRODUCT_IN);
  p.w = product_operand (&p, rand, PRODUCT_OUT * PRODUCT_IN);
  p.b = product_operand (&p, rand, PRODUCT_OUT);
  p.y = product_operand (&p, rand, PRODUCT_ROWS * PRODUCT_OUT);
  /* A larger shape without a graph first: the scratch buffers are then in
   * place, and cannot be what fails the capture. */
  product_run (&p, 0);
  graph = pp_backend_graph_capture (be, product_func, &p, &error);
  if (timed) {
    g_assert_null (graph);
    g_assert_error (error, PP_ERROR, PP_ERROR_DEVICE);
    if (strstr (error->message, "still to be timed") == NULL)
      g_error ("the capture failed with '%s'", error->message);
    g_clear_error (&error);
  } else {
    g_assert_no_error (error);
    g_assert_nonnull (graph);
    pp_backend_graph_free (be, graph);
  }
  /* Without a graph (timed there), then captured and replayed. */
  g_assert_true (product_func (&p, NULL));
  y_used = y_values * pp_dtype_size (p.t);
  pp_backend_download (be, direct, p.y, y_used);
  pp_backend_upload (be, p.y, graphed, y_used);
  graph = pp_backend_graph_capture (be, product_func, &p, &error);
  g_assert_no_error (error);
  g_assert_nonnull (graph);
  g_assert_true (pp_backend_graph_launch (be, graph, &error));
  g_assert_no_error (error);
  pp_backend_download (be, graphed, p.y, y_used);
  g_assert_cmpmem (direct, y_used, graphed, y_used);
  pp_backend_graph_free (be, graph);
  pp_backend_free (be, p.x);
  pp_backend_free (be, p.w);
  pp_backend_free (be, p.b);
  pp_backend_free (be, p.y);
  g_rand_free (rand);
}

/* A group norm of channels-last views of a shape first met inside a
 * capture.  On cuda its scratch grows there, which fails the capture, and
 * the ticket way's counts (which must start at 0, and which a capture
 * cannot zero) must be grown and zeroed again by the run without a graph:
 * freed device blocks of about their size, filled with ones, come first,
 * which a slot grown and not zeroed would take as they are.  The run
 * without a graph and a graph's then equal the cpu backend's. */
typedef struct
{
  PpBackend *be;
  gpointer x, y;
  gint n, c, hw;
} NormRun;

static gboolean
norm_func (gpointer data, GError ** error)
{
  NormRun *r = data;
  const gsize total = (gsize) r->n * r->c * r->hw;

  (void) error;
  pp_group_norm (r->be, pp_view_laid (pp_view_f32 (r->x, total),
          PP_LAYOUT_NHWC), pp_view_none (), r->n, r->c, r->hw, 8, 1e-5f,
      pp_view_none (), pp_view_none (), TRUE,
      pp_out_laid (pp_out_f32 (r->y, total), PP_LAYOUT_NHWC));
  return TRUE;
}

static void
test_graph_norm_first_met (void)
{
  PpBackend *be = get (NULL), *cpu = get (PP_BACKEND_CPU);
  NormRun r = { .n = 40, .c = 64, .hw = 50 };
  const gsize total = (gsize) r.n * r.c * r.hw;
  g_autofree float *x = g_new (float, total);
  g_autofree float *want = g_new (float, total);
  g_autofree float *got = g_new (float, total);
  g_autoptr (GError) error = NULL;
  GRand *rand = g_rand_new_with_seed (11);
  gpointer graph;

  if (!pp_backend_has_graphs (be))
    be = get (PP_BACKEND_CPU_STRICT);
  for (gsize i = 0; i < total; i++)
    x[i] = (float) g_rand_double_range (rand, -2.0, 3.0);
  g_rand_free (rand);
  r.x = x;
  r.y = want;
  r.be = cpu;
  norm_func (&r, NULL);
  r.be = be;
  for (gsize bytes = 16; bytes <= 4096; bytes *= 2) {
    g_autofree guint8 *ones = g_malloc (bytes);
    gpointer d = pp_backend_alloc (be, bytes, NULL);

    memset (ones, 0xff, bytes);
    pp_backend_upload (be, d, ones, bytes);
    pp_backend_synchronize (be);
    pp_backend_free (be, d);
  }
  r.x = pp_backend_alloc (be, total * sizeof (float), NULL);
  r.y = pp_backend_alloc (be, total * sizeof (float), NULL);
  pp_backend_upload (be, r.x, x, total * sizeof (float));
  graph = pp_backend_graph_capture (be, norm_func, &r, &error);
  if (graph == NULL) {
    g_assert_error (error, PP_ERROR, PP_ERROR_DEVICE);
    if (strstr (error->message, "while a CUDA graph was captured") == NULL)
      g_error ("the capture failed with '%s'", error->message);
    g_clear_error (&error);
  } else
    pp_backend_graph_free (be, graph);
  for (gint pass = 0; pass < 2; pass++) {
    pp_backend_upload (be, r.y, x, total * sizeof (float));
    if (pass == 0)
      g_assert_true (norm_func (&r, NULL));
    else {
      graph = pp_backend_graph_capture (be, norm_func, &r, &error);
      g_assert_no_error (error);
      g_assert_true (pp_backend_graph_launch (be, graph, &error));
      g_assert_no_error (error);
      pp_backend_graph_free (be, graph);
    }
    pp_backend_download (be, got, r.y, total * sizeof (float));
    for (gsize i = 0; i < total; i++)
      if (!(fabsf (got[i] - want[i]) <= 1e-4f))
        g_error ("%s, %s: value %" G_GSIZE_FORMAT " %g where the cpu "
            "backend gave %g", pp_backend_name (be), pass == 0
            ? "without a graph after the capture" : "as a graph", i,
            got[i], want[i]);
  }
  pp_backend_free (be, r.x);
  pp_backend_free (be, r.y);
}

/* A kernel queued before a product's first (timed) run faults on the
 * device ($PP_CUDA_EMU_FAULT_KERNEL=fill_kernel,
 * PPDIFFUSE_CUDA_GEMM_ALGO=timed): the trial waits for the work before
 * it first, and the process ends saying that this work failed, not that
 * the trial did.  Its caller checks the message. */
static void
test_trial_after_fault (void)
{
  PpBackend *be = get (NULL);
  GRand *rand = g_rand_new_with_seed (11);
  gpointer filled;
  Product p;

  p.be = be;
  p.t = PP_DTYPE_F16;
  p.x = product_operand (&p, rand, PRODUCT_ROWS * PRODUCT_IN);
  p.w = product_operand (&p, rand, PRODUCT_OUT * PRODUCT_IN);
  p.b = product_operand (&p, rand, PRODUCT_OUT);
  p.y = product_operand (&p, rand, PRODUCT_ROWS * PRODUCT_OUT);
  filled = pp_backend_alloc (be, 64 * sizeof (float), NULL);
  pp_backend_fill (be, filled, 1.0f, 64);
  product_run (&p, 0);
  pp_backend_synchronize (be);
  g_rand_free (rand);
  g_error ("the fault of the kernel before the product was not said");
}

/* An upload inside a graph is refused, as a CUDA stream capture refuses
 * it: the emulation ends the process naming it. */
static void
test_graph_refuses_upload (void)
{
  if (g_test_subprocess ()) {
    PpBackend *be = get (PP_BACKEND_CPU_STRICT);
    gpointer mem = pp_backend_alloc (be, sizeof (float), NULL);
    gpointer graph = pp_backend_graph_capture (be, upload_in_graph, mem,
        NULL);

    pp_backend_graph_launch (be, graph, NULL);
    return;
  }
  g_test_trap_subprocess (NULL, 0, G_TEST_SUBPROCESS_DEFAULT);
  g_test_trap_assert_failed ();
  g_test_trap_assert_stderr ("*an upload inside a graph*");
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/backend/names", test_names);
  g_test_add_func ("/backend/env", test_env);
  g_test_add_func ("/backend/act-layout-env", test_act_layout_env);
  g_test_add_func ("/backend/cuda-absent", test_cuda_absent);
  g_test_add_func ("/backend/device-for-rank", test_device_for_rank);
  g_test_add_func ("/backend/spec", test_backend_spec);
  g_test_add_func ("/backend/timestep-bits", test_timestep_bits);
  /* Only where the emulated libraries show a host of several GPUs. */
  if (g_getenv ("PP_CUDA_EMU_DEVICES") != NULL)
    g_test_add_func ("/backend/cuda-devices", test_cuda_devices);
  g_test_add_func ("/backend/dtype-names", test_dtype_names);
  g_test_add_func ("/backend/graphs", test_graphs);
  g_test_add_func ("/backend/graphs/feature-bank", test_graphs_feature_bank);
  g_test_add_func ("/backend/graphs/batches", test_batch_graphs);
  g_test_add_func ("/backend/graphs/warm-batches", test_warm_batches);
  g_test_add_func ("/backend/warm-batches/pools", test_warm_batches_pools);
  g_test_add_func ("/backend/graphs/refuse-upload", test_graph_refuses_upload);
  g_test_add_func ("/backend/graphs/first-met", test_graph_first_met);
  g_test_add_func ("/backend/graphs/norm-first-met",
      test_graph_norm_first_met);
  /* Only where the emulated libraries make a kernel fault. */
  if (g_getenv ("PP_CUDA_EMU_FAULT_KERNEL") != NULL)
    g_test_add_func ("/backend/trial-after-fault", test_trial_after_fault);
  g_test_add_func ("/backend/transfers/threads", test_transfers_from_threads);
  for (guint i = 0; i < G_N_ELEMENTS (backends); i++) {
    g_autofree gchar *weights = g_strdup_printf ("/backend/%s/weights-dtype",
        backends[i]);

    g_test_add_data_func (weights, backends[i], test_weights_dtype);
  }
  for (guint i = 0; i < G_N_ELEMENTS (backends); i++) {
    g_autofree gchar *mem = g_strdup_printf ("/backend/%s/memory",
        backends[i]);
    g_autofree gchar *pool = g_strdup_printf ("/backend/%s/pool",
        backends[i]);

    g_autofree gchar *narrower = g_strdup_printf ("%s/narrower", pool);
    g_autofree gchar *apart = g_strdup_printf ("%s/apart", pool);
#if defined(__SANITIZE_ADDRESS__)
    g_autofree gchar *poisoned = g_strdup_printf ("%s/poisoned", pool);
#endif

    g_test_add_data_func (mem, backends[i], test_memory);
    g_test_add_data_func (pool, backends[i], test_pool);
    g_test_add_data_func (narrower, backends[i], test_pool_narrower);
    g_test_add_data_func (apart, backends[i], test_pool_apart);
#if defined(__SANITIZE_ADDRESS__)
    g_test_add_data_func (poisoned, backends[i], test_pool_poisoned);
#endif
  }
  g_test_add_func ("/backend/cpu-strict/traps", test_strict_traps);
  g_test_add_func ("/backend/frames-allocate-nothing", test_frames);
  return g_test_run ();
}
