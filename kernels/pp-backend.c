/* ppdiffuse — backends by name and the memory wrappers. */
#include "pp-backend.h"
#include "pp-error.h"
#include "pp-tensor.h"

#include <stdatomic.h>
#include <string.h>

/* kernels/cpu */
extern PpBackend *pp_cpu_backend_get (void);
extern PpBackend *pp_cpu_strict_backend_get (GError ** error);
#ifdef PP_HAVE_CUDA
#include "pp-cuda-module.h"

#include <gmodule.h>

/* The NVIDIA driver's library, which every CUDA device needs. */
#define CUDA_DRIVER_LIBRARY "libcuda.so.1"

/* kernels/cuda/pp-cuda-backend.h, in the CUDA module */
typedef PpBackend *(*CudaBackendGet) (gint device, GError ** error);
typedef gint (*CudaDeviceCount) (GError ** error);
#endif

static atomic_ullong allocated_bytes;

static const struct
{
  const gchar *name;
  const gchar *what;
} backend_names[] = {
  { PP_BACKEND_AUTO, "the best backend available" },
  { PP_BACKEND_CPU, "the CPU kernels" },
  { PP_BACKEND_CPU_STRICT,
      "the CPU kernels on buffers the host cannot touch (debugging)" },
#ifdef PP_HAVE_CUDA
  { PP_BACKEND_CUDA, "an NVIDIA GPU; cuda:N for device N, a mesh's other "
        "ranks of the host on the devices after it" },
#endif
};

static GMutex auto_lock;
static gchar *auto_reason;

const gchar *
pp_backend_names (void)
{
#ifdef PP_HAVE_CUDA
  return PP_BACKEND_AUTO ", " PP_BACKEND_CPU ", " PP_BACKEND_CPU_STRICT ", "
      PP_BACKEND_CUDA;
#else
  return PP_BACKEND_AUTO ", " PP_BACKEND_CPU ", " PP_BACKEND_CPU_STRICT;
#endif
}

gint
pp_backend_device_for_rank (gint first, gint local_rank, gint n_devices)
{
  g_return_val_if_fail (n_devices > 0, 0);
  g_return_val_if_fail (first >= 0 && first < n_devices, 0);
  return (gint) (((gint64) first + MAX (local_rank, 0)) % n_devices);
}

#ifdef PP_HAVE_CUDA
/* FALSE, with the error a cuda backend would give, when the NVIDIA
 * driver's library cannot be loaded: then there is no device, and the
 * CUDA module (the CUDA runtime, cuBLAS, cuDNN, NCCL: about a gigabyte to
 * map and relocate, 0.8 s and as much CPU for each process on a host
 * without a GPU) is not loaded to learn it.  Asked once a process; the
 * driver stays loaded (the CUDA runtime opens it again). */
static gboolean
cuda_driver_present (GError ** error)
{
  static gsize probed;
  static gchar *absent;

  if (g_once_init_enter (&probed)) {
    GModule *driver = g_module_open (CUDA_DRIVER_LIBRARY,
        G_MODULE_BIND_LAZY | G_MODULE_BIND_LOCAL);

    if (driver == NULL)
      absent = g_strdup (g_module_error ());
    else
      g_module_make_resident (driver);
    g_once_init_leave (&probed, 1);
  }
  if (absent != NULL)
    g_set_error (error, PP_ERROR, PP_ERROR_DEVICE, "no usable CUDA device: "
        "no NVIDIA driver is installed (%s cannot be loaded: %s); install "
        "one, then check nvidia-smi", CUDA_DRIVER_LIBRARY, absent);
  return absent == NULL;
}

/* The GPUs the NVIDIA driver itself sees (its cuInit and
 * cuDeviceGetCount, from the library cuda_driver_present loaded),
 * whatever became of the CUDA module: whether "auto" passed a GPU over.
 * 0 where there is no driver or it says none. */
static gint
driver_devices (void)
{
  typedef int (*CuInit) (unsigned int flags);
  typedef int (*CuDeviceGetCount) (int *count);
  GModule *driver;
  gpointer init = NULL, get_count = NULL;
  int n = 0;

  if (!cuda_driver_present (NULL))
    return 0;
  driver = g_module_open (CUDA_DRIVER_LIBRARY, G_MODULE_BIND_LAZY
      | G_MODULE_BIND_LOCAL);
  if (driver == NULL)
    return 0;
  /* CUDA_SUCCESS is 0. */
  if (!g_module_symbol (driver, "cuInit", &init)
      || !g_module_symbol (driver, "cuDeviceGetCount", &get_count)
      || ((CuInit) init) (0) != 0
      || ((CuDeviceGetCount) get_count) (&n) != 0)
    n = 0;
  g_module_close (driver);
  return MAX (n, 0);
}
#endif

gint
pp_backend_cuda_devices (void)
{
#ifdef PP_HAVE_CUDA
  CudaDeviceCount n_devices;

  if (!cuda_driver_present (NULL))
    return 0;
  n_devices = (CudaDeviceCount)
      pp_cuda_module_symbol ("pp_cuda_backend_n_devices", NULL);
  return n_devices != NULL ? MAX (n_devices (NULL), 0) : 0;
#else
  return 0;
#endif
}

gboolean
pp_backend_have_cuda (void)
{
#ifdef PP_HAVE_CUDA
  return TRUE;
#else
  return FALSE;
#endif
}

const gchar *
pp_backend_auto_reason (void)
{
  const gchar *reason;

  g_mutex_lock (&auto_lock);
  reason = auto_reason;
  g_mutex_unlock (&auto_lock);
  return reason;
}

/* Records why auto passed over the GPU (NULL: it did not); the strings
 * are kept, so that a pointer handed out stays valid. */
static void
set_auto_reason (const gchar * reason)
{
  static GPtrArray *kept;

  g_mutex_lock (&auto_lock);
  if (reason != NULL && g_strcmp0 (reason, auto_reason) != 0) {
    if (kept == NULL)
      kept = g_ptr_array_new ();
    auto_reason = g_strdup (reason);
    g_ptr_array_add (kept, auto_reason);
  } else if (reason == NULL)
    auto_reason = NULL;
  g_mutex_unlock (&auto_lock);
}

#ifdef PP_HAVE_CUDA
/* @be (NULL too) with the op layer's functions a backend module calls
 * through it: the module links none of this library's symbols (a process
 * loads it privately, G_MODULE_BIND_LOCAL, from a plugin that was itself
 * loaded privately, so they would not resolve).  Set once, atomically: a
 * backend is shared, and other threads may be running its ops. */
static PpBackend *
with_hooks (PpBackend * be)
{
  if (be != NULL)
    (void) g_atomic_pointer_compare_and_exchange (&be->note_layout_copy,
        NULL, pp_ops_note_layout_copy);
  return be;
}

/* "cuda:N" → device N + @local_rank modulo the devices seen; "cuda" is
 * "cuda:0". */
static PpBackend *
get_cuda (const gchar * name, gint local_rank, GError ** error)
{
  const gchar *index = name + strlen (PP_BACKEND_CUDA);
  CudaBackendGet backend_get;
  CudaDeviceCount n_devices;
  guint64 first = 0;
  gint n;

  if (*index == ':') {
    if (!g_ascii_string_to_unsigned (index + 1, 10, 0, G_MAXINT, &first,
            NULL)) {
      g_set_error (error, PP_ERROR, PP_ERROR_CONFIG, "backend '%s': the "
          "device after 'cuda:' must be a number (cuda:0, cuda:1, …)", name);
      return NULL;
    }
  }
  backend_get = (CudaBackendGet) pp_cuda_module_symbol
      ("pp_cuda_backend_get", error);
  n_devices = backend_get == NULL ? NULL : (CudaDeviceCount)
      pp_cuda_module_symbol ("pp_cuda_backend_n_devices", error);
  if (n_devices == NULL)
    return NULL;
  n = n_devices (error);
  if (n < 0)
    return NULL;
  if (n == 0) {
    g_set_error (error, PP_ERROR, PP_ERROR_DEVICE, "no CUDA device is "
        "visible to this process (check nvidia-smi and "
        "CUDA_VISIBLE_DEVICES)");
    return NULL;
  }
  /* Named by the user or by rank 0's plan: never wrapped round to another
   * device. */
  if (first >= (guint64) n) {
    g_set_error (error, PP_ERROR, PP_ERROR_DEVICE, "backend '%s': there is "
        "no device %" G_GUINT64_FORMAT " here, this process sees %d CUDA "
        "device%s (0 to %d; check nvidia-smi and CUDA_VISIBLE_DEVICES)",
        name, first, n, n == 1 ? "" : "s", n - 1);
    return NULL;
  }
  return with_hooks (backend_get (pp_backend_device_for_rank ((gint) first,
              local_rank, n), error));
}
#endif

/* auto: the GPU when this build has one and a device is there, else the
 * CPU, remembering why the GPU was passed over. */
static PpBackend *
pick_auto (gint local_rank)
{
  static gsize logged;
  PpBackend *be = NULL;
  g_autoptr (GError) cuda_error = NULL;

#ifdef PP_HAVE_CUDA
  if (cuda_driver_present (&cuda_error))
    be = get_cuda (PP_BACKEND_CUDA, local_rank, &cuda_error);
#endif
  set_auto_reason (cuda_error ? cuda_error->message : NULL);
  if (be == NULL)
    be = pp_cpu_backend_get ();
  if (g_once_init_enter (&logged)) {
    /* Info only: the CPU on a machine without a GPU (or without the
     * driver's library) is no surprise; who asks for CUDA by name gets
     * its error instead.  A GPU the driver sees and the process cannot
     * use (a driver too old for the build's runtime, a CUDA module that
     * does not load, a GPU the build has no device code for) is: said
     * by default. */
    gint seen = 0;

#ifdef PP_HAVE_CUDA
    if (cuda_error != NULL)
      seen = driver_devices ();
#endif

    if (seen > 0)
      g_message ("backend auto: %s (%s), far slower than a GPU: CUDA passed "
          "over although this process sees %d GPU%s: %s", be->name,
          be->device, seen, seen == 1 ? "" : "s", cuda_error->message);
    else if (cuda_error != NULL)
      g_info ("backend auto: %s (%s), CUDA passed over: %s", be->name,
          be->device, cuda_error->message);
    else
      g_info ("backend auto: %s (%s)", be->name, be->device);
    g_once_init_leave (&logged, 1);
  }
  return be;
}

PpBackend *
pp_backend_get (const gchar * name, GError ** error)
{
  return pp_backend_get_local (name, 0, error);
}

/* PPDIFFUSE_ACT_LAYOUT's values, by PpLayout. */
static const gchar *const layout_names[] = { "nchw", "nhwc" };

const gchar *
pp_layout_name (PpLayout layout)
{
  return (guint) layout < G_N_ELEMENTS (layout_names)
      ? layout_names[layout] : "?";
}

/* The layout $PPDIFFUSE_ACT_LAYOUT names in *@layout (@unset when it
 * names none); FALSE with an error naming the choices for any other
 * value. */
static gboolean
act_layout_parse (PpLayout unset, PpLayout * layout, GError ** error)
{
  const gchar *value = g_getenv (PP_ACT_LAYOUT_ENV);

  *layout = unset;
  if (value == NULL || *value == '\0')
    return TRUE;
  for (guint i = 0; i < G_N_ELEMENTS (layout_names); i++)
    if (g_str_equal (value, layout_names[i])) {
      *layout = (PpLayout) i;
      return TRUE;
    }
  g_set_error (error, PP_ERROR, PP_ERROR_CONFIG, "%s=%s: unknown layout; "
      "the choices are nchw (channels first) and nhwc (channels last); "
      "unset, a GPU's 16-bit activations are channels last and the rest "
      "channels first", PP_ACT_LAYOUT_ENV, value);
  return FALSE;
}

PpLayout
pp_backend_act_layout (const PpBackend * be, PpDType act)
{
  const PpLayout unset = act == PP_DTYPE_F16 || act == PP_DTYPE_BF16
      ? be->act16_layout : PP_LAYOUT_NCHW;
  PpLayout layout;

  /* pp_backend_get refused a bad value before any backend existed. */
  if (!act_layout_parse (unset, &layout, NULL))
    return unset;
  return layout;
}

PpBackend *
pp_backend_get_local (const gchar * name, gint local_rank, GError ** error)
{
  g_autoptr (GString) known = NULL;
  PpLayout layout;

  if (!act_layout_parse (PP_LAYOUT_NCHW, &layout, error))
    return NULL;

  if (name == NULL || *name == '\0')
    name = g_getenv (PP_BACKEND_ENV);
  if (name == NULL || *name == '\0')
    name = PP_BACKEND_AUTO;
  if (g_str_equal (name, PP_BACKEND_AUTO))
    return pick_auto (local_rank);
  if (g_str_equal (name, PP_BACKEND_CPU))
    return pp_cpu_backend_get ();
  if (g_str_equal (name, PP_BACKEND_CPU_STRICT))
    return pp_cpu_strict_backend_get (error);
  if (g_str_has_prefix (name, PP_BACKEND_CUDA)
      && (name[strlen (PP_BACKEND_CUDA)] == '\0'
          || name[strlen (PP_BACKEND_CUDA)] == ':')) {
#ifdef PP_HAVE_CUDA
    return get_cuda (name, local_rank, error);
#else
    g_set_error (error, PP_ERROR, PP_ERROR_DEVICE, "backend '%s': this "
        "build of ppdiffuse has no CUDA backend (it was built without the "
        "CUDA toolkit); use cpu or auto, or rebuild with the toolkit under "
        "-Dcuda-root", name);
    return NULL;
#endif
  }

  known = g_string_new (NULL);
  for (guint i = 0; i < G_N_ELEMENTS (backend_names); i++)
    g_string_append_printf (known, "%s%s (%s)", i ? ", " : "",
        backend_names[i].name, backend_names[i].what);
  g_set_error (error, PP_ERROR, PP_ERROR_CONFIG,
      "unknown backend '%s'; this build has: %s", name, known->str);
  return NULL;
}

PpBackend *
pp_backend_default (void)
{
  GError *error = NULL;
  PpBackend *be = pp_backend_get (NULL, &error);

  if (be == NULL)
    g_error ("%s: %s", PP_BACKEND_ENV, error->message);
  return be;
}

PpBackend *
pp_backend_cpu (void)
{
  return pp_cpu_backend_get ();
}

const gchar *
pp_backend_name (const PpBackend * be)
{
  return be->name;
}

gchar *
pp_backend_spec (const PpBackend * be)
{
  if (g_str_equal (be->name, PP_BACKEND_CUDA))
    return g_strdup_printf ("%s:%d", be->name, be->device_index);
  return g_strdup (be->name);
}

const gchar *
pp_backend_device (const PpBackend * be)
{
  return be->device;
}

const gchar *
pp_backend_ways (const PpBackend * be)
{
  return be->ways != NULL ? be->ways : "none";
}

void
pp_backend_keep_failures (PpBackend * be)
{
  static GMutex init_lock;

  /* The lock is made once, before any failure can use it. */
  g_mutex_lock (&init_lock);
  if (!g_atomic_int_get (&be->keeps_failures)) {
    g_mutex_init (&be->failure_lock);
    g_atomic_int_set (&be->keeps_failures, 1);
  }
  g_mutex_unlock (&init_lock);
}

guint
pp_backend_failures (PpBackend * be)
{
  return (guint) g_atomic_int_get (&be->failures);
}

gboolean
pp_backend_check (PpBackend * be, guint since, GError ** error)
{
  /* Halted first: a recovery counts itself before it ends the halt, so
   * work that a recovery overlapped finds the count moved. */
  if (!pp_backend_running (be, error))
    return FALSE;
  /* A failure since @since that a recovery has dropped already, or a
   * recovery during the work (whose first part was skipped). */
  if (pp_backend_failures (be) != since) {
    g_set_error (error, PP_ERROR, PP_ERROR_DEVICE, "the %s backend (%s) "
        "failed during this work and has recovered since", be->name,
        be->device ? be->device : "?");
    return FALSE;
  }
  return TRUE;
}

gboolean
pp_backend_recover (PpBackend * be, gchar ** what)
{
  GError *failure;

  if (what != NULL)
    *what = NULL;
  if (!pp_backend_is_halted (be))
    return FALSE;
  /* The device went with the failure: every start fails with it, named
   * (pp_backend_check), instead of failing again at whichever op meets
   * the lost device next. */
  if (g_atomic_int_get (&be->lost))
    return FALSE;
  /* Halted, the backend enqueues nothing: what it holds can go back.
   * The trim takes the backend's lock, inside which a failure takes
   * failure_lock: never the other way round. */
  if (be->memory->trim != NULL)
    be->memory->trim (be);
  g_mutex_lock (&be->failure_lock);
  failure = g_steal_pointer (&be->failure);
  /* Counted, so that work begun while halted and ended after this learns
   * that its first part was skipped (pp_backend_check). */
  g_atomic_int_inc (&be->failures);
  g_atomic_int_set (&be->halted, 0);
  g_mutex_unlock (&be->failure_lock);
  if (what != NULL)
    *what = g_strdup (failure != NULL ? failure->message : "?");
  g_clear_error (&failure);
  return TRUE;
}

void
pp_backend_give_back (PpBackend * be)
{
  if (be->memory->give_back != NULL)
    be->memory->give_back (be);
}

gpointer
pp_backend_alloc (PpBackend * be, gsize bytes, GError ** error)
{
  gpointer mem = be->memory->alloc (be, MAX (bytes, 1), error);

  if (mem != NULL)
    atomic_fetch_add_explicit (&allocated_bytes, bytes,
        memory_order_relaxed);
  return mem;
}

void
pp_backend_free (PpBackend * be, gpointer mem)
{
  if (mem != NULL)
    be->memory->free (be, mem);
}

void
pp_backend_upload (PpBackend * be, gpointer dst, gconstpointer src,
    gsize bytes)
{
  if (bytes > 0 && !pp_backend_is_halted (be))
    be->memory->upload (be, dst, src, bytes);
}

void
pp_backend_download (PpBackend * be, gpointer dst, gconstpointer src,
    gsize bytes)
{
  if (bytes > 0 && !pp_backend_is_halted (be))
    be->memory->download (be, dst, src, bytes);
}

void
pp_backend_download_floats (PpBackend * be, float *dst, PpView src)
{
  g_autofree guint16 *narrow = NULL;

  if (src.dtype == PP_DTYPE_F32) {
    pp_backend_download (be, dst, src.data, src.numel * sizeof (float));
    return;
  }
  narrow = g_new (guint16, MAX (src.numel, 1));
  pp_backend_download (be, narrow, src.data, src.numel * sizeof (guint16));
  pp_dtype_widen (narrow, src.dtype, dst, src.numel);
}

void
pp_backend_upload_floats (PpBackend * be, PpOut dst, const float *src)
{
  g_autofree guint16 *narrow = NULL;

  if (dst.dtype == PP_DTYPE_F32) {
    pp_backend_upload (be, dst.data, src, dst.numel * sizeof (float));
    return;
  }
  narrow = g_new (guint16, MAX (dst.numel, 1));
  pp_dtype_narrow (src, dst.dtype, narrow, dst.numel);
  pp_backend_upload (be, dst.data, narrow, dst.numel * sizeof (guint16));
}

void
pp_backend_copy (PpBackend * be, gpointer dst, gconstpointer src, gsize bytes)
{
  if (bytes > 0 && !pp_backend_is_halted (be))
    be->memory->copy (be, dst, src, bytes);
}

void
pp_backend_fill (PpBackend * be, gpointer dst, float value, gsize n)
{
  if (n > 0 && !pp_backend_is_halted (be))
    be->memory->fill (be, dst, value, n);
}

void
pp_backend_synchronize (PpBackend * be)
{
  be->memory->synchronize (be);
}

gpointer
pp_backend_stream (PpBackend * be)
{
  return be->memory->stream != NULL ? be->memory->stream (be) : NULL;
}

void
pp_backend_make_current (PpBackend * be)
{
  if (be->memory->make_current != NULL)
    be->memory->make_current (be);
}

PpView
pp_backend_upload_weights (PpBackend * be, const float *src, gsize n,
    PpDType dtype, gpointer * owned, GError ** error)
{
  const gsize bytes = n * sizeof (float);
  gpointer mem;

  *owned = NULL;
  if (dtype != PP_DTYPE_F32 && dtype != PP_DTYPE_F16
      && dtype != PP_DTYPE_BF16) {
    g_set_error (error, PP_ERROR, PP_ERROR_CONFIG, "weights cannot be "
        "stored as %s (F32, F16 or BF16)", pp_dtype_name (dtype));
    return pp_view_none ();
  }
  if (be->memory->upload_weights != NULL) {
    mem = be->memory->upload_weights (be, src, n, dtype, error);
    if (mem == NULL)
      return pp_view_none ();
    atomic_fetch_add_explicit (&allocated_bytes, n * pp_dtype_size (dtype),
        memory_order_relaxed);
    *owned = mem;
    return pp_view (mem, dtype, n);
  }
  if (dtype == PP_DTYPE_F32)
    return pp_view_f32 (src, n);
  /* Host float32 compute: the weights at the precision asked for. */
  mem = pp_backend_alloc (be, bytes, error);
  if (mem == NULL)
    return pp_view_none ();
  pp_dtype_round_floats (src, mem, n, dtype);
  *owned = mem;
  return pp_view_f32 (mem, n);
}

gboolean
pp_backend_samples_apart (const PpBackend * be)
{
  return be->samples_apart;
}

PpDType
pp_backend_act_dtype (const PpBackend * be, PpDType weights)
{
  if (be->act_follows_weights && (be->act_dtypes & PP_DTYPE_BIT (weights)))
    return weights;
  return PP_DTYPE_F32;
}

void
pp_backend_set_samples_apart (PpBackend * be, gboolean apart)
{
  be->samples_apart = apart;
}

gboolean
pp_backend_stacks_projections (const PpBackend * be)
{
  return be->stacks_projections;
}

void
pp_backend_set_stacks_projections (PpBackend * be, gboolean stacks)
{
  be->stacks_projections = stacks;
}

gboolean
pp_backend_plans_shapes (const PpBackend * be)
{
  return be->plans_shapes;
}

void
pp_backend_set_plans_shapes (PpBackend * be, gboolean plans)
{
  be->plans_shapes = plans;
}

gboolean
pp_backend_has_graphs (const PpBackend * be)
{
  return be->memory->graph_capture != NULL;
}

gpointer
pp_backend_graph_capture (PpBackend * be, PpGraphFunc func, gpointer data,
    GError ** error)
{
  if (!pp_backend_has_graphs (be)) {
    g_set_error (error, PP_ERROR, PP_ERROR_CONFIG, "the %s backend cannot "
        "capture graphs", be->name);
    return NULL;
  }
  /* A halted backend records nothing: its failure answers. */
  if (!pp_backend_check (be, pp_backend_failures (be), error))
    return NULL;
  return be->memory->graph_capture (be, func, data, error);
}

gboolean
pp_backend_graph_launch (PpBackend * be, gpointer graph, GError ** error)
{
  return pp_backend_check (be, pp_backend_failures (be), error)
      && be->memory->graph_launch (be, graph, error);
}

void
pp_backend_graph_free (PpBackend * be, gpointer graph)
{
  if (graph != NULL)
    be->memory->graph_free (be, graph);
}

gboolean
pp_backend_graph_nodes (PpBackend * be, gpointer graph, guint * nodes,
    guint * kernels)
{
  *nodes = *kernels = 0;
  return graph != NULL && be->memory->graph_nodes != NULL
      && be->memory->graph_nodes (be, graph, nodes, kernels);
}

gboolean
pp_backend_trace_enable (PpBackend * be, GError ** error)
{
  if (be->memory->trace_enable == NULL) {
    g_set_error (error, PP_ERROR, PP_ERROR_CONFIG, "the %s backend runs no "
        "device kernels to trace", be->name);
    return FALSE;
  }
  return be->memory->trace_enable (be, error);
}

GArray *
pp_backend_trace (PpBackend * be, PpGraphFunc func, gpointer data,
    GError ** error)
{
  guint since;
  GArray *spans;

  if (be->memory->trace == NULL) {
    g_set_error (error, PP_ERROR, PP_ERROR_CONFIG, "the %s backend runs no "
        "device kernels to trace", be->name);
    return NULL;
  }
  since = pp_backend_failures (be);
  if (!pp_backend_check (be, since, error))
    return NULL;
  spans = be->memory->trace (be, func, data, error);
  /* A failure kept while the work ran answers, not its partial trace. */
  if (spans != NULL && !pp_backend_check (be, since, error))
    g_clear_pointer (&spans, g_array_unref);
  return spans;
}

guint64
pp_backend_allocated_bytes (void)
{
  return atomic_load (&allocated_bytes);
}

/* Device tensors */

PpTensor *
pp_tensor_new_on (PpBackend * backend, const gchar * name, PpDType dtype,
    guint ndim, const gint64 * shape, GError ** error)
{
  PpTensor *t = pp_tensor_new_full (backend, name, dtype, ndim, shape,
      error);

  if (t != NULL)
    atomic_fetch_add_explicit (&allocated_bytes, t->nbytes,
        memory_order_relaxed);
  return t;
}

static gboolean
check_transfer (const PpTensor * dst, const PpTensor * src, gboolean up,
    GError ** error)
{
  const PpTensor *device = up ? dst : src, *host = up ? src : dst;

  if (device->backend != NULL && host->backend == NULL
      && dst->dtype == src->dtype && dst->nbytes == src->nbytes)
    return TRUE;
  {
    g_autofree gchar *d = pp_tensor_describe (dst);
    g_autofree gchar *s = pp_tensor_describe (src);

    g_set_error (error, PP_ERROR, PP_ERROR_SHAPE,
        "cannot %s %s (%s) into %s (%s): a host and a device tensor of one "
        "dtype and size are needed", up ? "upload" : "download", s,
        src->backend ? src->backend->name : "host", d,
        dst->backend ? dst->backend->name : "host");
  }
  return FALSE;
}

gboolean
pp_tensor_upload (PpTensor * dst, const PpTensor * src, GError ** error)
{
  guint since;

  if (!check_transfer (dst, src, TRUE, error))
    return FALSE;
  since = pp_backend_failures (dst->backend);
  pp_backend_upload (dst->backend, dst->data, src->data, src->nbytes);
  /* Halted (pp_backend_keep_failures): nothing was copied. */
  return pp_backend_check (dst->backend, since, error);
}

gboolean
pp_tensor_download (PpTensor * dst, const PpTensor * src, GError ** error)
{
  guint since;

  if (!check_transfer (dst, src, FALSE, error))
    return FALSE;
  since = pp_backend_failures (src->backend);
  pp_backend_download (src->backend, dst->data, src->data, src->nbytes);
  return pp_backend_check (src->backend, since, error);
}

gboolean
pp_tensor_transfer (PpTensor * dst, const PpTensor * src, GError ** error)
{
  if (dst->backend != NULL && src->backend != NULL) {
    if (dst->backend != src->backend || dst->dtype != src->dtype
        || dst->nbytes != src->nbytes) {
      g_autofree gchar *d = pp_tensor_describe (dst);
      g_autofree gchar *s = pp_tensor_describe (src);

      g_set_error (error, PP_ERROR, PP_ERROR_SHAPE, "cannot copy %s (%s) "
          "into %s (%s): device tensors of one backend, dtype and size are "
          "needed", s, src->backend->name, d, dst->backend->name);
      return FALSE;
    }
    pp_backend_copy (dst->backend, dst->data, src->data, src->nbytes);
    return TRUE;
  }
  if (dst->backend != NULL)
    return pp_tensor_upload (dst, src, error);
  if (src->backend != NULL)
    return pp_tensor_download (dst, src, error);
  if (dst->dtype != src->dtype || dst->nbytes != src->nbytes) {
    g_autofree gchar *d = pp_tensor_describe (dst);
    g_autofree gchar *s = pp_tensor_describe (src);

    g_set_error (error, PP_ERROR, PP_ERROR_SHAPE, "cannot copy %s into %s: "
        "tensors of one dtype and size are needed", s, d);
    return FALSE;
  }
  memcpy (dst->data, src->data, src->nbytes);
  return TRUE;
}
