#!/usr/bin/env python3
"""Rewrites the kernel launches of a .cu file for the CPU emulation
(include/cuda_runtime.h):

    kernel<T><<<grid, block, shmem, stream>>> (args)
becomes
    emu_launch (grid, block, shmem, stream, "kernel<T>",
                [=] { kernel<T> (args); })

Everything else is left as it is, line breaks included, and a #line
directive names the .cu file: the compiler's messages point into it.

Usage: emu-launches.py IN.cu OUT.cc"""
import sys


def fail(src, at, path, message):
    line = src.count('\n', 0, at) + 1
    sys.exit('%s:%d: %s' % (path, line, message))


def kernel_start(src, end):
    """Where the kernel's name (with its template arguments) that ends at
    @end begins."""
    k = end
    if src[k - 1] == '>':
        depth = 0
        while True:
            k -= 1
            if k < 0:
                return -1
            depth += {'>': 1, '<': -1}.get(src[k], 0)
            if depth == 0:
                break
        while src[k - 1].isspace():
            k -= 1
    while k > 0 and (src[k - 1].isalnum() or src[k - 1] in '_:'):
        k -= 1
    return k


def closing_paren(src, start):
    """The index of the parenthesis that closes the one at @start."""
    depth = 0
    for i in range(start, len(src)):
        depth += {'(': 1, ')': -1}.get(src[i], 0)
        if depth == 0:
            return i
    return -1


def rewrite(src, path):
    quoted = path.replace('\\', '\\\\').replace('"', '\\"')
    out = ['#line 1 "%s"\n' % quoted]
    pos = 0
    while True:
        launch = src.find('<<<', pos)
        if launch < 0:
            out.append(src[pos:])
            return ''.join(out)
        config_end = src.find('>>>', launch)
        if config_end < 0:
            fail(src, launch, path, '<<< without >>>')
        name_end = launch
        while src[name_end - 1].isspace():
            name_end -= 1
        name_start = kernel_start(src, name_end)
        name = src[name_start:name_end]
        if name_start < 0 or not (name[:1].isalpha() or name[:1] == '_'):
            fail(src, launch, path, 'no kernel name before <<<')
        args = config_end + 3
        while args < len(src) and src[args].isspace():
            args += 1
        args_end = -1
        if src[args:args + 1] == '(':
            args_end = closing_paren(src, args)
        if args_end < 0:
            fail(src, launch, path, 'no argument list after >>>')
        # The line breaks dropped (before <<< and after >>>) come after the
        # call, so that the lines after it stay where they were.
        breaks = src.count('\n', name_end, launch) \
            + src.count('\n', config_end, args)
        out.append(src[pos:name_start])
        out.append('emu_launch (%s, "%s", [=] { %s %s; })%s' % (
            src[launch + 3:config_end], ' '.join(name.split()), name,
            src[args:args_end + 1], '\n' * breaks))
        pos = args_end + 1


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    with open(sys.argv[1], encoding='utf-8') as f:
        src = f.read()
    result = rewrite(src, sys.argv[1])
    with open(sys.argv[2], 'w', encoding='utf-8') as f:
        f.write(result)


if __name__ == '__main__':
    main()
