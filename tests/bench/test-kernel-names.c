/* pp_kernel_short_name on names as nvcc mangles the backend's kernels and
 * as the libraries name theirs. */
#include "pp-kernel-names.h"

#include <string.h>

static void
expect (const gchar * mangled, const gchar * want)
{
  g_autofree gchar *got = pp_kernel_short_name (mangled);

  g_assert_cmpstr (got, ==, want);
}

static void
test_mangled (void)
{
  /* A function template of the backend's, its arguments left out. */
  expect ("_Z24group_norm_single_kernelIL10PpCudaType1EEvPKvS1_iiPv",
      "group_norm_single_kernel<...>");
  /* A plain kernel, and one of internal linkage. */
  expect ("_Z30group_norm_nhwc_combine_kernelPK6float4imm",
      "group_norm_nhwc_combine_kernel");
  expect ("_ZL11relu_kernelPfi", "relu_kernel");
  /* A class template's member in namespaces (a CUTLASS kernel). */
  expect ("_ZN7cutlass7Kernel2INS_4gemm6kernel4GemmEEEvNT_6ParamsE",
      "cutlass::Kernel2<...>");
  expect ("_ZN5cudnn6detail14softmax_kernelEv", "cudnn::detail::softmax_kernel");
}

static void
test_plain (void)
{
  const gchar *lib = "sm90_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize128x128x64_"
      "warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas";
  g_autofree gchar *got = pp_kernel_short_name (lib);

  /* The libraries' names in C as they are, cut to the width. */
  g_assert_cmpuint (strlen (got), ==, PP_KERNEL_NAME_WIDTH);
  g_assert_true (g_str_has_prefix (lib, got));
  expect ("fill_kernel", "fill_kernel");
  /* Not a mangling this reads: as it is. */
  expect ("_Zx", "_Zx");
  expect ("_Z999short", "_Z999short");
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/kernel-names/mangled", test_mangled);
  g_test_add_func ("/kernel-names/plain", test_plain);
  return g_test_run ();
}
