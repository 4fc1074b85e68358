/* ppdiffuse — cuDNN 9's backend graph API from plain C: what the fused
 * attention (pp-cuda-sdpa.c) and the fused convolution
 * (pp-cuda-conv-graph.c) share.  A graph being built keeps every
 * descriptor it creates, in creation order, so that the plans made from
 * it can keep them alive (rather than relying on cuDNN having copied what
 * it needs) and they are destroyed users first.
 *
 * Every call reports cuDNN's status as a GError naming the call, with
 * cuDNN's own message about the last failure when it has one (which
 * engine refused what). */
#pragma once

#include <glib.h>

#ifdef PP_HAVE_CUDNN

#include <cudnn.h>
#include <stdint.h>

G_BEGIN_DECLS

/* The byte alignment every tensor declares: callers run a plan only on
 * pointers on it (pp_cudnn_graph_aligned). */
#define PP_CUDNN_GRAPH_ALIGNMENT 16

typedef struct
{
  GPtrArray *descriptors;       /* every one created, to destroy */
  GPtrArray *ops;               /* the graph's operations, in data order */
  int64_t next_uid;             /* the next virtual tensor's */
} PpCudnnGraph;

typedef enum
{
  PP_CUDNN_TENSOR_IO,           /* device memory named in the variant pack */
  PP_CUDNN_TENSOR_VIRTUAL,      /* an intermediate, never stored */
  PP_CUDNN_TENSOR_BY_VALUE,     /* a host scalar named in the variant pack */
} PpCudnnTensorKind;

gboolean pp_cudnn_graph_check    (cudnnStatus_t status, const gchar * call,
                                  const gchar * file, gint line,
                                  GError ** error);
#define PP_CUDNN_GRAPH_TRY(call, error) \
  pp_cudnn_graph_check ((call), #call, __FILE__, __LINE__, (error))

/* An empty graph whose virtual tensors are numbered from @first_virtual
 * (above every UID the caller names). */
void     pp_cudnn_graph_init     (PpCudnnGraph * g, int64_t first_virtual);
/* Hands over the graph's descriptors (to keep while a plan made from them
 * lives: pp_cudnn_graph_destroy_descriptors) and frees the rest. */
GPtrArray *pp_cudnn_graph_steal  (PpCudnnGraph * g);
/* Destroys @descriptors in reverse creation order and frees the array. */
void     pp_cudnn_graph_destroy_descriptors (GPtrArray * descriptors);
/* Destroys @plan and then what it was made from, @descriptors (either may
 * be NULL). */
void     pp_cudnn_graph_release  (cudnnBackendDescriptor_t plan,
                                  GPtrArray * descriptors);

gboolean pp_cudnn_graph_create   (PpCudnnGraph * g,
                                  cudnnBackendDescriptorType_t type,
                                  cudnnBackendDescriptor_t * desc,
                                  GError ** error);
gboolean pp_cudnn_graph_set      (cudnnBackendDescriptor_t desc,
                                  cudnnBackendAttributeName_t name,
                                  cudnnBackendDescriptor_t value,
                                  GError ** error);
/* A 4-d tensor of @type; @uid is ignored for a virtual one (the next
 * free one). */
gboolean pp_cudnn_graph_tensor   (PpCudnnGraph * g, cudnnDataType_t type,
                                  const int64_t dims[4],
                                  const int64_t strides[4], int64_t uid,
                                  PpCudnnTensorKind kind,
                                  cudnnBackendDescriptor_t * t,
                                  GError ** error);
/* y = mode (x[, b[, t]]) computed in @math; @axis (≥ 0) for GEN_INDEX
 * only.  Both scaling factors are 1.  Added to the graph's operations. */
gboolean pp_cudnn_graph_pointwise (PpCudnnGraph * g,
                                   cudnnPointwiseMode_t mode,
                                   cudnnDataType_t math, int64_t axis,
                                   cudnnBackendDescriptor_t x,
                                   cudnnBackendDescriptor_t b,
                                   cudnnBackendDescriptor_t t,
                                   cudnnBackendDescriptor_t y,
                                   GError ** error);
/* Which engine configuration a plan was made from: the position of its
 * configuration in what one mode of cuDNN's heuristics offered for the
 * graph, and its engine's global index (-1 where cuDNN does not say).
 * The same graph on the same device and cuDNN gets the same offer, so
 * this names a choice that another process can make again
 * (pp-cuda-tuning.h). */
typedef struct
{
  gint32 mode;                  /* 0: mode A, 1: the fallback mode */
  gint32 index;
  gint64 engine;
} PpCudnnConfig;

/* The operation graph of @g's operations on @handle, cuDNN's heuristics
 * (mode A) for it, and the execution plans of the first @max_plans engine
 * configurations (in the heuristics' order) that finalize within
 * @max_workspace bytes of workspace: appended to @plans (the caller
 * destroys them) with their workspaces to @workspaces (gsize) and, when
 * @configs is not NULL, which configurations they are (PpCudnnConfig) to
 * it.  With @only, the plan of that configuration alone, where the
 * heuristics still offer it (its engine the same).  FALSE with why when
 * none does. */
gboolean pp_cudnn_graph_plans    (cudnnHandle_t handle, PpCudnnGraph * g,
                                  guint max_plans, gsize max_workspace,
                                  const PpCudnnConfig * only,
                                  GPtrArray * plans, GArray * workspaces,
                                  GArray * configs, GError ** error);
/* Runs @plan on @handle's stream with the @count tensors @uids at
 * @pointers and @workspace; @status (may be NULL) is the status of the
 * call that failed (CUDNN_STATUS_SUCCESS when none did). */
gboolean pp_cudnn_graph_execute  (cudnnHandle_t handle,
                                  cudnnBackendDescriptor_t plan, int count,
                                  const int64_t * uids, void *const *pointers,
                                  gpointer workspace, cudnnStatus_t * status,
                                  GError ** error);
gboolean pp_cudnn_graph_aligned  (gconstpointer p);

G_END_DECLS

#endif /* PP_HAVE_CUDNN */
