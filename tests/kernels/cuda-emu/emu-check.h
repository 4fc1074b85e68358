/* tests/kernels/cuda-emu: running an entry point of the kernels on
 * buffers made for the purpose, and checking what it wrote.
 *
 * A case lists a kernel's buffer arguments (Arg: read, written, or
 * both, with the values read) and a launch that calls the entry point on
 * a Run, the buffers made from them.  Every launch runs twice on fresh
 * buffers: threads and blocks in ascending, then in descending order,
 * which must leave every buffer the same, bit for bit.  The buffers are
 * exactly as large as the arguments say: AddressSanitizer builds flag
 * an access past them, other builds a write into guard bytes around
 * them.  Inputs must come back unchanged.  Failures are printed (FAIL:
 * the case, the buffer, the index, got and want) and fail the GLib test
 * that runs the case. */
#pragma once

#include "cuda_runtime.h"
#include "pp-cuda-kernels.h"

#include <glib.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

/* How a buffer stores its elements: a PpCudaType, or bytes. */
enum Storage
{
  F32 = PP_CUDA_F32,
  F16 = PP_CUDA_F16,
  BF16 = PP_CUDA_BF16,
  U8,
};

extern const char *const storage_names[];

size_t storage_size (Storage s);
/* The bits of @v as @s stores it (16 bits: rounded to nearest even). */
uint32_t stored_bits (Storage s, float v);
float widened (Storage s, uint32_t bits);

/* A kernel's buffer: @n elements stored as @storage. */
class Mem
{
public:
  Mem (Storage storage, size_t n);
  ~Mem ();
  Mem (const Mem &) = delete;
  Mem &operator= (const Mem &) = delete;

  Storage storage () const { return storage_; }
  size_t size () const { return n_; }
  size_t bytes () const { return n_ * storage_size (storage_); }
  void *data () const;
  uint32_t bits (size_t i) const;
  void set_bits (size_t i, uint32_t b);
  float get (size_t i) const { return widened (storage_, bits (i)); }
  void set (size_t i, float v) { set_bits (i, stored_bits (storage_, v)); }
  /* Nothing was written around the buffer (always, under ASan). */
  bool guards_intact () const;

private:
  Storage storage_;
  size_t n_;
  uint8_t *block_;
};

enum Role
{
  IN,                           /* read */
  OUT,                          /* written */
  INOUT,                        /* read and written */
  SCRATCH,                      /* the kernel's own (float32 in any run) */
};

/* A buffer argument of a kernel: read ones hold @values, or the stored
 * @bits when those are given; the others start as NaN (all bits set). */
struct Arg
{
  const char *name;
  Role role;
  size_t n;
  std::vector<float> values;
  std::vector<uint32_t> bits;
};

Arg in (const char *name, std::vector<float> values);
Arg in_bits (const char *name, std::vector<uint32_t> bits);
Arg inout (const char *name, std::vector<float> values);
Arg out (const char *name, size_t n);
Arg scratch (const char *name, size_t n);

/* The buffers of one run, as a launch gets them. */
struct Run
{
  std::vector<std::unique_ptr<Mem>> mem;

  void *p (size_t i) const { return mem[i]->data (); }
  float *f (size_t i) const { return (float *) mem[i]->data (); }
  PpCudaType t (size_t i) const { return (PpCudaType) mem[i]->storage (); }
  const Mem &operator[] (size_t i) const { return *mem[i]; }
};

typedef std::function<cudaError_t (const Run &)> Launch;
/* The storage of each argument of a run. */
typedef std::vector<Storage> Types;

std::string strf (const char *format, ...) G_GNUC_PRINTF (1, 2);
/* Prints "FAIL: message" and fails the running test. */
void failf (const char *format, ...) G_GNUC_PRINTF (1, 2);

/* Runs @launch on fresh buffers of @types holding @args' values, in
 * ascending thread order into @runs[0] and in descending into @runs[1];
 * FALSE when a launch did not return cudaSuccess. */
bool run_both_orders (const std::string &what, const std::vector<Arg> &args,
    const Types &types, const Launch &launch, std::unique_ptr<Run> runs[2]);
/* The first element where @a and @b differ, or -1. */
ptrdiff_t first_difference (const Mem &a, const Mem &b);
/* Runs @launch in both orders and checks them (see above; under
 * AddressSanitizer in the ascending order alone, emu-check.cc).  Returns
 * the ascending run, or NULL when the launch failed. */
std::unique_ptr<Run> run_checked (const std::string &what,
    const std::vector<Arg> &args, const Types &types, const Launch &launch);
/* Runs @launch on float32 buffers, then on those of
 * each of @typings: every element of a written buffer must be the float32
 * run's as its storage stores it, bit for bit.  Returns the float32 run,
 * or NULL. */
std::unique_ptr<Run> run_typed (const std::string &what,
    const std::vector<Arg> &args, const Launch &launch,
    const std::vector<Types> &typings = {});

/* Buffer @i of @run equals @want as its storage stores it, bit for bit. */
void expect_bits (const std::string &what, const std::vector<Arg> &args,
    const Run &run, size_t i, const std::vector<float> &want);
/* Buffer @i of @run within @abs + @rel · |want| of @want. */
void expect_near (const std::string &what, const std::vector<Arg> &args,
    const Run &run, size_t i, const std::vector<double> &want, double abs,
    double rel);
