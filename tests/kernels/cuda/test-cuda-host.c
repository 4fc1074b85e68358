/* The CUDA adapters, on the host: the runtimes' statuses become errors that
 * name the call, the place and the runtime's words; the device count says
 * why there is no device; and, where a device exists, the dtype kernels
 * give the host formulas' bits. */
#include "pp-cuda-check.h"
#include "pp-cuda-convert.h"
#include "pp-dtype-math.h"
#include "pp-error.h"

#include <gmodule.h>
#include <math.h>
#include <string.h>

static void
assert_mentions (const GError * error, const gchar * const *needles)
{
  g_assert_nonnull (error);
  g_assert_true (error->domain == PP_ERROR && error->code == PP_ERROR_DEVICE);
  for (guint i = 0; needles[i] != NULL; i++)
    if (strstr (error->message, needles[i]) == NULL)
      g_error ("'%s' does not mention '%s'", error->message, needles[i]);
}

static void
test_statuses (void)
{
  GError *error = NULL;
  gint line;

  g_assert_true (PP_CUDA_TRY (cudaSuccess, &error));
  g_assert_no_error (error);
  line = __LINE__ + 1;
  g_assert_false (PP_CUDA_TRY (cudaErrorMemoryAllocation, &error));
  {
    g_autofree gchar *where = g_strdup_printf ("%s:%d", __FILE__, line);
    const gchar *const needles[] = { "cudaErrorMemoryAllocation failed at",
      where, "cudaErrorMemoryAllocation (out of memory)", NULL
    };
    assert_mentions (error, needles);
  }
  g_clear_error (&error);

  g_assert_true (PP_CUBLAS_TRY (CUBLAS_STATUS_SUCCESS, &error));
  g_assert_false (PP_CUBLAS_TRY (CUBLAS_STATUS_NOT_INITIALIZED, &error));
  {
    const gchar *const needles[] = { "CUBLAS_STATUS_NOT_INITIALIZED", NULL };
    assert_mentions (error, needles);
  }
  g_clear_error (&error);

#ifdef PP_HAVE_CUDNN
  g_assert_false (PP_CUDNN_TRY (CUDNN_STATUS_BAD_PARAM, &error));
  {
    const gchar *const needles[] = { "CUDNN_STATUS_BAD_PARAM", NULL };
    assert_mentions (error, needles);
  }
  g_clear_error (&error);
#endif

#ifdef PP_HAVE_NCCL
  /* A non-blocking communicator's call under way is not a failure. */
  g_assert_true (PP_NCCL_TRY (ncclInProgress, &error));
  g_assert_false (PP_NCCL_TRY (ncclInvalidArgument, &error));
  {
    const gchar *const needles[] = { "ncclInvalidArgument failed at",
      "invalid argument", NULL
    };
    assert_mentions (error, needles);
  }
  g_clear_error (&error);
#endif
}

static gboolean
driver_library_present (void)
{
  GModule *lib = g_module_open ("libcuda.so.1", G_MODULE_BIND_LAZY);

  if (lib == NULL)
    return FALSE;
  g_module_close (lib);
  return TRUE;
}

/* Without a device (as on the build machines) the count is 0, or -1 with
 * an error that says what to check, and the conversions are skipped,
 * saying why (never reported as passed); with one, the conversions run on
 * it and give the host's bits. */
static void
test_device (void)
{
  GError *error = NULL;
  gint count = pp_cuda_device_count (&error);
  const gsize n = 1 << 20;
  GRand *rand;
  float *x, *d_x, *back;
  uint16_t *y, *d_y;

  if (count < 0) {
    const gchar *const needles[] = { "no usable CUDA device",
      "cudaGetDeviceCount", "nvidia-smi", NULL
    };
    assert_mentions (error, needles);
    /* Without the driver's library the error says so in plain words. */
    if (!g_file_test ("/proc/driver/nvidia/version", G_FILE_TEST_EXISTS)
        && !driver_library_present ()) {
      const gchar *const no_driver[] = { "no NVIDIA driver is installed",
        NULL
      };
      assert_mentions (error, no_driver);
    }
    {
      g_autofree gchar *why = g_strdup_printf ("f16/bf16 conversions on the "
          "device not run: no device: %s", error->message);
      g_test_skip (why);
    }
    g_clear_error (&error);
    return;
  }
  g_assert_no_error (error);
  g_test_message ("%d CUDA devices", count);
  if (count == 0) {
    g_test_skip ("f16/bf16 conversions on the device not run: the CUDA "
        "runtime counts 0 devices");
    return;
  }

  rand = g_rand_new_with_seed (3);
  x = g_new (float, n);
  back = g_new (float, n);
  y = g_new (uint16_t, n);
  /* Every float16 (NaNs, infinities, subnormals among them), then the
   * ties halfway between each and the next (rounded to the even one),
   * then random bits. */
  for (gsize i = 0; i < n; i++) {
    const uint16_t h = (uint16_t) i;
    const float a = pp_f16_to_f32 (h), b = pp_f16_to_f32 ((uint16_t) (h + 1));

    if (i < 0x10000)
      x[i] = a;
    else if (i < 0x20000 && isfinite (a) && isfinite (b)
        && (h & 0x7fffu) != 0x7fffu)
      x[i] = (float) (((double) a + (double) b) / 2);
    else
      x[i] = pp_dtype_f32_from_bits (g_rand_int (rand));
  }
  g_assert_true (PP_CUDA_TRY (cudaMalloc ((void **) &d_x, n * 4), &error));
  g_assert_true (PP_CUDA_TRY (cudaMalloc ((void **) &d_y, n * 2), &error));
  g_assert_true (PP_CUDA_TRY (cudaMemcpy (d_x, x, n * 4,
              cudaMemcpyHostToDevice), &error));
  for (guint bf = 0; bf < 2; bf++) {
    g_assert_true (PP_CUDA_TRY (bf ? pp_cuda_f32_to_bf16 (d_x, d_y, n, 0)
            : pp_cuda_f32_to_f16 (d_x, d_y, n, 0), &error));
    g_assert_true (PP_CUDA_TRY (cudaMemcpy (y, d_y, n * 2,
                cudaMemcpyDeviceToHost), &error));
    g_assert_true (PP_CUDA_TRY (bf ? pp_cuda_bf16_to_f32 (d_y, d_x, n, 0)
            : pp_cuda_f16_to_f32 (d_y, d_x, n, 0), &error));
    g_assert_true (PP_CUDA_TRY (cudaMemcpy (back, d_x, n * 4,
                cudaMemcpyDeviceToHost), &error));
    for (gsize i = 0; i < n; i++) {
      uint16_t want = bf ? pp_f32_to_bf16 (x[i]) : pp_f32_to_f16 (x[i]);
      float wide = bf ? pp_bf16_to_f32 (want) : pp_f16_to_f32 (want);

      g_assert_cmphex (y[i], ==, want);
      g_assert_cmphex (pp_dtype_f32_bits (back[i]), ==,
          pp_dtype_f32_bits (wide));
    }
    /* the next round narrows the original values again */
    g_assert_true (PP_CUDA_TRY (cudaMemcpy (d_x, x, n * 4,
                cudaMemcpyHostToDevice), &error));
  }
  cudaFree (d_x);
  cudaFree (d_y);
  g_free (x);
  g_free (back);
  g_free (y);
  g_rand_free (rand);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/cuda/statuses", test_statuses);
  g_test_add_func ("/cuda/device", test_device);
  return g_test_run ();
}
