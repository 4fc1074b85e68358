/* ppdiffuse — the CPU kernels behind the cpu and cpu-strict backends
 * (internal). */
#pragma once

#include "pp-ops.h"
#include "pp-cpu-tuning.h"

G_BEGIN_DECLS

/* The hand-written AVX-512 kernels (fused attention, direct 3×3
 * convolutions) are compiled by gcc on x86-64; defining PP_CPU_NO_AVX512
 * leaves them out, and the vectorised loops' AVX-512 clones too, so that a
 * build on an AVX-512 machine runs the code every other CPU runs. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) \
    && !defined(PP_CPU_NO_AVX512)
#define PP_CPU_AVX512_KERNELS 1
#endif

/* Scratch buffers, one per use and thread (pp-cpu-scratch.c). */
typedef enum
{
  PP_CPU_SCRATCH_ATTENTION_SCORES,      /* a fused chunk's scores */
  PP_CPU_SCRATCH_ATTENTION_PACK,        /* Kᵀ (and Vᵀ) packed per head */
  PP_CPU_SCRATCH_SOFTMAX,               /* a query block's scores and sums */
  PP_CPU_SCRATCH_CONV_BAND,             /* a direct 3×3 conv's padded band */
  PP_CPU_SCRATCH_CONV_WEIGHTS,          /* its weights packed per tile */
  PP_CPU_SCRATCH_CONV_COLUMNS,          /* im2col's columns */
  /* A 16-bit view widened to float32 for a kernel: one use per view
   * parameter an op has (weight and bias, gamma and beta, a and b). */
  PP_CPU_SCRATCH_VIEW_A,
  PP_CPU_SCRATCH_VIEW_B,
  /* Activations of a 16-bit dtype, widened for one op's kernel. */
  PP_CPU_SCRATCH_ACT_0,
  PP_CPU_SCRATCH_ACT_1,
  PP_CPU_SCRATCH_ACT_2,
  PP_CPU_SCRATCH_ACT_3,
  /* A 16-bit channels-last activation between its widening and its
   * transpose (pp-cpu-backend.c). */
  PP_CPU_SCRATCH_LAYOUT,
  /* linear_add's product, before it is added. */
  PP_CPU_SCRATCH_PRODUCT,
  /* A feature bank merge's source lists (ints in a float's room). */
  PP_CPU_SCRATCH_BANK_LISTS,
  PP_CPU_SCRATCH_COUNT
} PpCpuScratch;

/* The calling thread's buffer for @use, at least @floats long (contents
 * undefined).  Valid until the thread's next call for the same use: a
 * kernel must not ask twice for one use at a time. */
float *pp_cpu_scratch (PpCpuScratch use, size_t floats);
/* Grows every buffer of the calling thread to the most any thread asked of
 * its use: for a thread that holds none of its buffers (a helper between
 * loops). */
void pp_cpu_scratch_follow (void);

/* Fences (PpBackendMemory.fence) of a backend whose work is done when its
 * call returns: each has passed when it is made, and the backend itself
 * stands for it; waiting on one orders nothing more. */
gpointer pp_cpu_fence (PpBackend * be);
void pp_cpu_fence_wait (PpBackend * be, gpointer fence, gpointer stream);
void pp_cpu_fence_free (PpBackend * be, gpointer fence);

/* TRUE when the AVX-512 kernels are compiled in and this CPU runs them. */
gboolean pp_cpu_avx512_kernels (void);

/* The OpenBLAS core type ($OPENBLAS_CORETYPE) this CPU's features allow
 * when OpenBLAS did not know the CPU and runs its SSE3 fallback, else
 * NULL. */
const gchar *pp_cpu_blas_better_core (void);
/* Says so once a process (a message naming what to set). */
void pp_cpu_blas_advise (void);

/* Which way the CPU ops went, counted since the process started: the tests
 * read these to prove that a case took the path it was written for. */
typedef enum
{
  PP_CPU_PATH_LOOP_SPLIT,       /* parallel loops run on the team */
  PP_CPU_PATH_GEMM_WHOLE,       /* GEMMs run as one OpenBLAS call */
  PP_CPU_PATH_GEMM_SPLIT_ROWS,  /* GEMMs split into blocks of rows of C */
  PP_CPU_PATH_GEMM_SPLIT_COLS,  /* … of columns of C */
  PP_CPU_PATH_CONV_1X1,         /* 1×1 convolutions: one GEMM per sample */
  PP_CPU_PATH_CONV_IM2COL_BAND, /* bands of output rows through im2col */
  PP_CPU_PATH_CONV_DIRECT_BAND, /* bands of the direct 3×3 kernel */
  PP_CPU_PATH_CONV_DIRECT_PACKED,       /* its calls that repack weights */
  PP_CPU_PATH_CONV_NARROW_BAND, /* bands of the narrow 3×3 kernel */
  PP_CPU_PATH_ATTENTION_FUSED,  /* attention calls on the fused path */
  PP_CPU_PATH_ATTENTION_BLOCK,  /* (sample, head, query block)s by GEMM */
  PP_CPU_PATH_COUNT
} PpCpuPath;

guint64 pp_cpu_path_count (PpCpuPath path);
void pp_cpu_path_add (PpCpuPath path, guint64 n);

void pp_cpu_conv2d (const float *x, int n, int cin, int h, int w,
    const float *weight, const float *bias, int cout, int kh, int kw,
    int stride, int pad, float *y);
void pp_cpu_group_norm (const float *x, int n, int c, int hw, int groups,
    float eps, const float *gamma, const float *beta, float *y);
void pp_cpu_layer_norm (const float *x, int rows, int dim, float eps,
    const float *gamma, const float *beta, float *y);
void pp_cpu_linear (const float *x, int rows, int in, const float *w,
    const float *b, int out, float *y);
/* The attentions compute float32 whatever @dtype says (pp-ops-list.h);
 * q's rows are ld_q apart, k's and v's ld_kv, out's packed. */
void pp_cpu_attention (const float *q, const float *k, const float *v, int n,
    int lq, int lk, int heads, int head_dim, int ld_q, int ld_kv,
    PpDType dtype, float *out);
void pp_cpu_attention_causal (const float *q, const float *k, const float *v,
    int n, int l, int heads, int head_dim, PpDType dtype, float *out);
void pp_cpu_silu (float *x, size_t n);
void pp_cpu_bytes_to_floats (const guint8 * x, size_t n, float *y);
void pp_cpu_floats_to_bytes (const float *x, size_t n, guint8 * y);
void pp_cpu_relu (float *x, size_t n);
void pp_cpu_tanh (float *x, size_t n);
void pp_cpu_gelu (float *x, size_t n);
void pp_cpu_quick_gelu (float *x, size_t n);
void pp_cpu_geglu (const float *x, int rows, int d, float *y);
void pp_cpu_upsample_nearest (const float *x, int n, int c, int h, int w,
    int factor, float *y);
/* The interleave_phases op (pp-ops-list.h), channels first. */
void pp_cpu_interleave_phases (const float *z, int n, int c, int h, int w,
    float *y);
void pp_cpu_concat_channels (const float *a, int ca, const float *b, int cb,
    int n, int hw, float *y);
void pp_cpu_add (float *y, const float *x, size_t n);
void pp_cpu_scale (float *x, size_t n, float s);
void pp_cpu_affine (float *x, size_t n, float mul, float add);
void pp_cpu_axpby (float *y, float a, const float *x, float b, size_t n);
void pp_cpu_lcm_step (float *x, const float *eps, const float *noise,
    size_t n, const PpLcmCoeffs * coeffs);
/* The feature bank's ops (pp-ops-list.h), on float32. */
void pp_cpu_row_norms (const float *x, int rows, int c, float *norms);
void pp_cpu_bank_fuse (const float *sim, int rows, int m, int c,
    const float *y_norms, const float *bank_norms, const float *bank,
    double threshold, double strength, float *y, float *fused);
void pp_cpu_bank_merge_dest (const float *sim, int sources, int first,
    int n, int r, const float *norms, float *dest);
void pp_cpu_bank_merge (const float *x, int n, int r, int c,
    const float *dest, float *y);
void pp_cpu_resize_bilinear (const float *x, int c, int h, int w, float *y,
    int ho, int wo);
void pp_cpu_timestep_embedding (float t, int dim, gboolean flip_sin_to_cos,
    float freq_shift, float *y);
void pp_cpu_nchw_to_nlc (const float *x, int n, int c, int hw, float *y);
void pp_cpu_nlc_to_nchw (const float *x, int n, int c, int hw, float *y);
void pp_cpu_add_channel (float *x, int n, int c, int hw, const float *v);
void pp_cpu_matmul (gboolean trans_a, gboolean trans_b, int m, int n, int k,
    const float *a, int lda, const float *b, int ldb, gboolean accumulate,
    float *y, int ldy);
void pp_cpu_for_rows (int rows, int min_rows, PpRowsFunc func,
    gpointer data);

/* Fills y [rows, cols] (row stride ldy) with bias[r] in row r: the starting
 * value of a GEMM with beta = 1, so that the bias costs no extra pass. */
void pp_cpu_fill_rows (float *y, int rows, int cols, size_t ldy,
    const float *bias);
/* Fills y [rows, cols] with bias as every row. */
void pp_cpu_fill_cols (float *y, int rows, int cols, const float *bias);

G_END_DECLS
