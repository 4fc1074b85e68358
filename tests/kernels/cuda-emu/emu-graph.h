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

/* What a cudaStream_t points to, in both the kernels' and the runtime's
 * view of it. */
typedef struct
{
  EmuGraph *capture;            /* the graph being captured, or NULL */
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
void      emu_graph_ref   (EmuGraph * graph);
void      emu_graph_unref (EmuGraph * graph);

/* Counts a launch of @name (a library call that runs device work, as a
 * kernel's launches are counted): what $PP_CUDA_EMU_LAUNCHES reports. */
void      emu_count_launch (const char *name);

/* The calling thread's last launch error (a cudaError_t value), cleared
 * (cudaGetLastError of the kernels' runtime). */
int       emu_take_launch_error (void);

#ifdef __cplusplus
}
#endif
