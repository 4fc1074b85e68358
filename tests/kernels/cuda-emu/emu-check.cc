/* tests/kernels/cuda-emu: runs and checks (emu-check.h). */
#include "emu-check.h"
#include "pp-dtype-math.h"

#include <math.h>
#include <stdarg.h>

#include <algorithm>

/* Guard bytes on each side of a buffer, and their value.  None under
 * AddressSanitizer, which then sees any access past the buffer itself. */
#ifdef EMU_ASAN
#define GUARD_BYTES 0
#else
#define GUARD_BYTES 64
#endif
#define GUARD_VALUE 0xa5
/* The group norm's float4 partials need 16 bytes. */
#define BUFFER_ALIGN 16
/* The thread orders run_checked runs each launch in: both (their
 * results must agree: a read that a missing barrier leaves unordered
 * differs between them), or under AddressSanitizer the ascending one,
 * whose run shows any access outside a buffer; the orders' agreement is
 * the plain build's check (it halved the checks' time there). */
#ifdef EMU_ASAN
#define CHECKED_ORDERS 1
#else
#define CHECKED_ORDERS 2
#endif
/* Mismatches printed per buffer, at most. */
#define SHOWN 3

const char *const storage_names[] = { "f32", "f16", "bf16", "u8" };

size_t
storage_size (Storage s)
{
  return s == F32 ? 4 : s == U8 ? 1 : 2;
}

uint32_t
stored_bits (Storage s, float v)
{
  switch (s) {
    case F16:
      return pp_f32_to_f16 (v);
    case BF16:
      return pp_f32_to_bf16 (v);
    case U8:
      return (uint8_t) v;
    default:
      return pp_dtype_f32_bits (v);
  }
}

float
widened (Storage s, uint32_t bits)
{
  switch (s) {
    case F16:
      return pp_f16_to_f32 ((uint16_t) bits);
    case BF16:
      return pp_bf16_to_f32 ((uint16_t) bits);
    case U8:
      return (float) bits;
    default:
      return pp_dtype_f32_from_bits (bits);
  }
}

Mem::Mem (Storage storage, size_t n) : storage_ (storage), n_ (n)
{
  block_ = (uint8_t *) g_aligned_alloc (1, bytes () + 2 * GUARD_BYTES,
      BUFFER_ALIGN);
  std::fill_n (block_, GUARD_BYTES, GUARD_VALUE);
  std::fill_n (block_ + GUARD_BYTES + bytes (), GUARD_BYTES, GUARD_VALUE);
}

Mem::~Mem ()
{
  g_aligned_free (block_);
}

void *
Mem::data () const
{
  return block_ + GUARD_BYTES;
}

uint32_t
Mem::bits (size_t i) const
{
  uint32_t b = 0;

  memcpy (&b, (uint8_t *) data () + i * storage_size (storage_),
      storage_size (storage_));
  return b;
}

void
Mem::set_bits (size_t i, uint32_t b)
{
  memcpy ((uint8_t *) data () + i * storage_size (storage_), &b,
      storage_size (storage_));
}

bool
Mem::guards_intact () const
{
  const uint8_t *after = block_ + GUARD_BYTES + bytes ();
  auto guard = [] (uint8_t b) { return b == GUARD_VALUE; };

  return std::all_of (block_, block_ + GUARD_BYTES, guard)
      && std::all_of (after, after + GUARD_BYTES, guard);
}

Arg
in (const char *name, std::vector<float> values)
{
  const size_t n = values.size ();

  return Arg { name, IN, n, std::move (values), {} };
}

Arg
in_bits (const char *name, std::vector<uint32_t> bits)
{
  const size_t n = bits.size ();

  return Arg { name, IN, n, {}, std::move (bits) };
}

Arg
inout (const char *name, std::vector<float> values)
{
  const size_t n = values.size ();

  return Arg { name, INOUT, n, std::move (values), {} };
}

Arg
out (const char *name, size_t n)
{
  return Arg { name, OUT, n, {}, {} };
}

Arg
scratch (const char *name, size_t n)
{
  return Arg { name, SCRATCH, n, {}, {} };
}

std::string
strf (const char *format, ...)
{
  va_list args;
  g_autofree gchar *s = NULL;

  va_start (args, format);
  s = g_strdup_vprintf (format, args);
  va_end (args);
  return s;
}

void
failf (const char *format, ...)
{
  va_list args;
  g_autofree gchar *message = NULL;

  va_start (args, format);
  message = g_strdup_vprintf (format, args);
  va_end (args);
  g_printerr ("FAIL: %s\n", message);
  g_test_fail ();
}

static bool
written (const Arg &a)
{
  return a.role == OUT || a.role == INOUT;
}

/* @what with each argument's name and storage. */
static std::string
describe (const std::string &what, const std::vector<Arg> &args,
    const Types &types)
{
  std::string s = what + " [";

  for (size_t i = 0; i < args.size (); i++)
    s += std::string (i ? ", " : "") + args[i].name + " "
        + storage_names[types[i]];
  return s + "]";
}

static std::unique_ptr<Run>
fresh_run (const std::vector<Arg> &args, const Types &types)
{
  auto run = std::make_unique<Run> ();

  for (size_t i = 0; i < args.size (); i++) {
    const Arg &a = args[i];
    auto m = std::make_unique<Mem> (types[i], a.n);

    if (!a.bits.empty ())
      for (size_t j = 0; j < a.n; j++)
        m->set_bits (j, a.bits[j]);
    else if (!a.values.empty ())
      for (size_t j = 0; j < a.n; j++)
        m->set (j, a.values[j]);
    else if (m->bytes () > 0)
      memset (m->data (), 0xff, m->bytes ());
    run->mem.push_back (std::move (m));
  }
  return run;
}

ptrdiff_t
first_difference (const Mem &a, const Mem &b)
{
  for (size_t j = 0; j < a.size (); j++)
    if (a.bits (j) != b.bits (j))
      return (ptrdiff_t) j;
  return -1;
}

/* Runs @launch in the first @orders of (ascending, descending) into
 * @runs. */
static bool
run_orders (const std::string &what, const std::vector<Arg> &args,
    const Types &types, const Launch &launch, std::unique_ptr<Run> runs[2],
    int orders)
{
  for (int d = 0; d < orders; d++) {
    cudaError_t e;

    runs[d] = fresh_run (args, types);
    emu_set_descending (d == 1);
    e = launch (*runs[d]);
    emu_set_descending (false);
    if (e != cudaSuccess) {
      failf ("%s: launch status %d", what.c_str (), (int) e);
      return false;
    }
  }
  return true;
}

bool
run_both_orders (const std::string &what, const std::vector<Arg> &args,
    const Types &types, const Launch &launch, std::unique_ptr<Run> runs[2])
{
  return run_orders (what, args, types, launch, runs, 2);
}

std::unique_ptr<Run>
run_checked (const std::string &what, const std::vector<Arg> &args,
    const Types &types, const Launch &launch)
{
  const std::string full = describe (what, args, types);
  std::unique_ptr<Run> runs[2];

  if (!run_orders (full, args, types, launch, runs, CHECKED_ORDERS))
    return nullptr;
  for (size_t i = 0; i < args.size (); i++) {
    const Mem &a = (*runs[0])[i];

    if (CHECKED_ORDERS == 2) {
      const Mem &b = (*runs[1])[i];
      const ptrdiff_t j = first_difference (a, b);

      if (j >= 0)
        failf ("%s: %s[%td] is %#x with the threads in ascending order, "
            "%#x in descending", full.c_str (), args[i].name, j, a.bits (j),
            b.bits (j));
      if (!b.guards_intact ())
        failf ("%s: a write outside %s", full.c_str (), args[i].name);
    }
    if (!a.guards_intact ())
      failf ("%s: a write outside %s", full.c_str (), args[i].name);
    if (args[i].role == IN) {
      const std::unique_ptr<Run> before = fresh_run ({ args[i] },
          { types[i] });
      const ptrdiff_t k = first_difference ((*before)[0], a);

      if (k >= 0)
        failf ("%s: input %s[%td] written", full.c_str (), args[i].name, k);
    }
  }
  return std::move (runs[0]);
}

std::unique_ptr<Run>
run_typed (const std::string &what, const std::vector<Arg> &args,
    const Launch &launch, const std::vector<Types> &typings)
{
  std::unique_ptr<Run> f32 = run_checked (what, args,
      Types (args.size (), F32), launch);

  if (!f32)
    return nullptr;
  for (const Types &types : typings) {
    const std::unique_ptr<Run> r = run_checked (what, args, types, launch);
    size_t wrong = 0;

    if (!r)
      continue;
    for (size_t i = 0; i < args.size (); i++) {
      if (!written (args[i]))
        continue;
      for (size_t j = 0; j < args[i].n; j++) {
        const uint32_t want = stored_bits (types[i], (*f32)[i].get (j));

        if ((*r)[i].bits (j) != want && wrong++ < SHOWN)
          failf ("%s: %s[%zu] is %#x, not the float32 run's %.9g rounded "
              "(%#x)", describe (what, args, types).c_str (), args[i].name,
              j, (*r)[i].bits (j), (*f32)[i].get (j), want);
      }
    }
  }
  return f32;
}

void
expect_bits (const std::string &what, const std::vector<Arg> &args,
    const Run &run, size_t i, const std::vector<float> &want)
{
  const Mem &m = run[i];
  size_t wrong = 0;

  g_assert_cmpuint (want.size (), ==, m.size ());
  for (size_t j = 0; j < m.size (); j++) {
    const uint32_t w = stored_bits (m.storage (), want[j]);

    if (m.bits (j) != w && wrong++ < SHOWN)
      failf ("%s: %s[%zu] = %.9g (%#x), want %.9g (%#x)", what.c_str (),
          args[i].name, j, m.get (j), m.bits (j), want[j], w);
  }
}

void
expect_near (const std::string &what, const std::vector<Arg> &args,
    const Run &run, size_t i, const std::vector<double> &want, double abs,
    double rel)
{
  const Mem &m = run[i];
  size_t wrong = 0;
  double worst = 0.0;

  g_assert_cmpuint (want.size (), ==, m.size ());
  for (size_t j = 0; j < m.size (); j++) {
    const double d = fabs (m.get (j) - want[j]);

    if (!(d <= abs + rel * fabs (want[j]))) {
      if (wrong++ < SHOWN)
        failf ("%s: %s[%zu] = %.9g, want %.9g (off by %.3g; bound %.3g + "
            "%.3g |want|)", what.c_str (), args[i].name, j, m.get (j),
            want[j], d, abs, rel);
      worst = INFINITY;
    } else if (d > worst) {
      worst = d;
    }
  }
  if (g_test_verbose ())
    g_test_message ("%s: %s off by %.3g at most", what.c_str (),
        args[i].name, worst);
}
