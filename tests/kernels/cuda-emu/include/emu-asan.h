/* tests/kernels/cuda-emu: whether the emulation is built with
 * AddressSanitizer, for the runtime (cuda_runtime.h, emu.cc) and the
 * libraries (emu-libraries.c, which includes this by its path: it is
 * compiled against the toolkit's own headers, not this folder's). */
#ifndef EMU_ASAN_H
#define EMU_ASAN_H

/* EMU_ASAN: built with AddressSanitizer (gcc says so one way, clang the
 * other). */
#ifdef __SANITIZE_ADDRESS__
#define EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define EMU_ASAN 1
#endif
#endif

/* EMU_UNCHECKED: a function of the emulation's own that AddressSanitizer
 * leaves uninstrumented, where it touches only the emulation's state (the
 * runtime's bookkeeping at every switch between threads, the libraries'
 * sums over their own float copies): instrumented, those were a third
 * and a fifth of an emulated run's time under ASan.  The kernels, and
 * every read and write of device memory, stay checked. */
#ifdef EMU_ASAN
#define EMU_UNCHECKED __attribute__ ((no_sanitize_address))
#else
#define EMU_UNCHECKED
#endif

#endif
