/* tests/kernels/cuda-emu: streams, graphs and launch errors of the
 * emulation, shared by the kernels' launches (emu.cc) and the emulated
 * runtime that makes the streams and graphs (emu-libraries.c).  A stream being captured records
 * each call as a node instead of running it; a graph's launch runs its
 * nodes in order. */
#pragma once

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct EmuGraph EmuGraph;
typedef struct EmuQueue EmuQueue;

/* What a cudaStream_t points to, in both the kernels' and the runtime's
 * view of it. */
typedef struct
{
  EmuGraph *capture;            /* the graph being captured, or NULL */
  EmuQueue *queue;              /* its deferred work (emu_deferred) */
} EmuStreamState;

EmuGraph *emu_graph_new   (void);
/* Appends a node that calls @run (@data) at each launch; @free_data
 * (@data) when the graph goes (NULL: nothing to free). */
void      emu_graph_add   (EmuGraph * graph, void (*run) (void *data),
                           void *data, void (*free_data) (void *data));
/* Marks the graph as one the capture could not hold (its end fails). */
void      emu_graph_invalidate (EmuGraph * graph);
int       emu_graph_valid (const EmuGraph * graph);
void      emu_graph_run   (EmuGraph * graph);
/* The graph's nodes, in order, as cudaGraphGetNodes hands them out, and
 * whether one is an emulated kernel's launch (cudaGraphNodeTypeKernel;
 * the libraries' calls and the copies are other nodes here, where on a
 * GPU a library's calls are kernels too). */
size_t    emu_graph_size  (const EmuGraph * graph);
const void *emu_graph_node (const EmuGraph * graph, size_t i);
int       emu_graph_node_is_launch (const void *node);
void      emu_graph_ref   (EmuGraph * graph);
void      emu_graph_unref (EmuGraph * graph);

/* Deferred streams (unless $PP_CUDA_EMU_DEFER=0, which runs each call as
 * it is made): a stream holds its work (each
 * call a node, as a capture records it) until the host waits for it: a
 * stream or event synchronize, a free (which synchronizes the device), a
 * copy to or from pageable host memory, work on the legacy default stream,
 * or another stream's node that waits on one of its events.  So a result
 * the host reads without the wait that orders it is stale, and a stream
 * that reads another's output without waiting on its event reads what was
 * there before: what runs at once where a GPU is fast and idle, and
 * differs where it is busy, is then wrong every time. */
int       emu_deferred (void);
/* Gives a new stream its queue (and keeps it reachable): every stream,
 * when cudaStreamCreateWithFlags makes it. */
void      emu_stream_register (EmuStreamState * stream);
/* Appends a node to @stream's queue (@free_data (@data) once it ran). */
void      emu_stream_enqueue (EmuStreamState * stream,
                              void (*run) (void *data), void *data,
                              void (*free_data) (void *data));
/* How many nodes @stream was given so far: an event recorded now has
 * passed once that many have run. */
unsigned long emu_stream_position (EmuStreamState * stream);
/* Runs @stream's nodes until @upto of them have run (all: ULONG_MAX). */
void      emu_stream_drain (EmuStreamState * stream, unsigned long upto);
/* Runs every stream's nodes. */
void      emu_drain_all (void);
/* Runs @run (@data) on the legacy default stream: after every stream's
 * nodes, and never beside another launch or node. */
void      emu_run_now (void (*run) (void *data), void *data);

/* Counts a launch of @name (a library call that runs device work, as a
 * kernel's launches are counted): what $PP_CUDA_EMU_LAUNCHES reports. */
void      emu_count_launch (const char *name);

/* A fault of the device's (a cudaError_t value, such as
 * cudaErrorIllegalAddress): the process's, and for good, as a device
 * whose context is lost answers it from every synchronize and
 * cudaGetLastError on. */
void      emu_device_fault (int error);
/* That fault, or 0 (cudaSuccess). */
int       emu_device_faulted (void);

/* TRUE with $PP_CUDA_EMU_SHAPES_ONLY set: every launch and library call
 * is checked (its configuration, its descriptors, its memory) and
 * counted, but no device work is done, so that a released-size model's
 * every launch is checked in seconds.  Values are then undefined: what
 * reads them learns nothing. */
int       emu_shapes_only (void);

/* The emulated device's SMs (cudaGetDeviceProperties, and what a
 * cooperative launch may take, emu_resident_blocks). */
#define EMU_DEVICE_SMS 4

/* The emulated device's compute capability as an SM version (90 for
 * 9.0): $PP_CUDA_EMU_SM (two or three digits: 75, 89, 120), else 90.
 * cudaGetDeviceProperties and the kernels' cudaFuncGetAttributes say it;
 * with $PP_CUDA_EMU_NO_KERNEL_IMAGE set, the latter answers
 * cudaErrorNoKernelImageForDevice, as a device answers that no binary
 * or PTX of the build's runs on. */
int       emu_device_sm (void);

/* The calling thread's last launch error (a cudaError_t value), cleared
 * (cudaGetLastError of the kernels' runtime). */
int       emu_take_launch_error (void);

#ifdef __cplusplus
}
#endif
