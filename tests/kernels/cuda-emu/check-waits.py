#!/usr/bin/env python3
"""Every kernel of kernels/cuda begins with pp_cuda_wait_prior ();

With programmatic dependent launches (PPDIFFUSE_CUDA_PDL=on) a kernel may
start while the one before it on its stream still runs; it is correct only
if it touches no memory before griddepcontrol.wait.  The emulation checks
that every thread calls the wait (emu.cc); this checks that it is the
first statement of each __global__ function, where nothing can read or
write before it.

Usage: check-waits.py FILE.cu..."""
import re
import sys

KERNEL = re.compile(r'__global__\s+void\s*(?:__launch_bounds__\s*\([^)]*\))?'
                    r'\s*(\w+)\s*\(')
WAIT = 'pp_cuda_wait_prior ();'


def kernels(src):
    """(name, the body's text after its opening brace) of each kernel."""
    for m in KERNEL.finditer(src):
        depth, i = 0, m.end() - 1
        while True:
            depth += {'(': 1, ')': -1}.get(src[i], 0)
            if depth == 0:
                break
            i += 1
        brace = src.find('{', i)
        yield m.group(1), src[brace + 1:]


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    bad, count = [], 0
    for path in sys.argv[1:]:
        with open(path, encoding='utf-8') as f:
            src = f.read()
        for name, body in kernels(src):
            count += 1
            if not body.lstrip().startswith(WAIT):
                bad.append('%s: %s does not begin with %s' % (path, name,
                                                              WAIT))
    if count == 0:
        sys.exit('no kernel found in %s' % ' '.join(sys.argv[1:]))
    if bad:
        sys.exit('\n'.join(bad))
    print('%d kernels begin with %s' % (count, WAIT))


if __name__ == '__main__':
    main()
