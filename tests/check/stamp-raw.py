#!/usr/bin/env python3
"""Raw video frames for the builtin:stamp model, and the check of what came out.

  stamp-raw.py make  FORMAT WIDTH HEIGHT FRAMES SEED OUT
  stamp-raw.py check FORMAT WIDTH HEIGHT FRAMES STEPS IN OUT

make writes FRAMES random frames in GStreamer's default layout of FORMAT
(rows padded to 4 bytes): every byte random, alpha, padding and row padding
included.  check expects OUT to be IN with R, G and B of every pixel after
stamp steps 0..STEPS-1, each once and in order, and every other byte
unchanged.  Only the standard library: CI has python3 but nothing more.
"""

import random
import sys

# Byte offsets of R, G, B in a pixel, and bytes per pixel.
FORMATS = {
    'RGBA': ((0, 1, 2), 4),
    'RGBx': ((0, 1, 2), 4),
    'BGRx': ((2, 1, 0), 4),
    'RGB': ((0, 1, 2), 3),
}
# GStreamer pads each row of a packed RGB frame to this many bytes.
ROW_ALIGN = 4
# Differences reported before giving up.
MAX_REPORTED = 5


def layout(fmt, width, height):
    offsets, pixel = FORMATS[fmt]
    stride = (width * pixel + ROW_ALIGN - 1) // ROW_ALIGN * ROW_ALIGN
    return offsets, pixel, stride, stride * height


def stamp(k, c, v):
    """Step k of builtin:stamp on channel c, written out independently of
    kernels/builtin/pp-stamp.c: v <- (a(k) v + b(k, c)) mod 256."""
    a = 2 * (k % 128) + 3
    b = (37 * k + 101 * c + 11) % 256
    return (a * v + b) % 256


def make(fmt, width, height, frames, seed, out):
    size = layout(fmt, width, height)[3]
    rng = random.Random(seed)
    with open(out, 'wb') as f:
        f.write(bytes(rng.randrange(256) for _ in range(size * frames)))


def check(fmt, width, height, frames, steps, path_in, path_out):
    offsets, pixel, stride, size = layout(fmt, width, height)
    with open(path_in, 'rb') as f:
        data_in = f.read()
    with open(path_out, 'rb') as f:
        data_out = f.read()
    if len(data_in) != size * frames:
        sys.exit('%s: %d bytes, expected %d frames of %d'
                 % (path_in, len(data_in), frames, size))
    if len(data_out) != len(data_in):
        sys.exit('%s %s: %d bytes out, %d in (%d frames of %d bytes)'
                 % (fmt, path_out, len(data_out), len(data_in), frames, size))
    table = []
    for c in range(3):
        row = list(range(256))
        for k in range(steps):
            row = [stamp(k, c, v) for v in row]
        table.append(row)
    expected = bytearray(data_in)
    for frame in range(frames):
        for y in range(height):
            for x in range(width):
                base = frame * size + y * stride + x * pixel
                for c, off in enumerate(offsets):
                    expected[base + off] = table[c][data_in[base + off]]
    if data_out == bytes(expected):
        print('%s: %d frames of %dx%d stamped by %d steps, other bytes '
              'untouched' % (fmt, frames, width, height, steps))
        return
    bad = [i for i in range(len(expected)) if data_out[i] != expected[i]]
    for i in bad[:MAX_REPORTED]:
        frame, rest = divmod(i, size)
        y, col = divmod(rest, stride)
        print('%s frame %d row %d byte %d: expected %d, got %d (input %d)'
              % (fmt, frame, y, col, expected[i], data_out[i], data_in[i]),
              file=sys.stderr)
    sys.exit('%s: %d of %d bytes differ' % (fmt, len(bad), len(expected)))


def main(argv):
    if len(argv) == 8 and argv[1] == 'make':
        make(argv[2], int(argv[3]), int(argv[4]), int(argv[5]), int(argv[6]),
             argv[7])
    elif len(argv) == 9 and argv[1] == 'check':
        check(argv[2], int(argv[3]), int(argv[4]), int(argv[5]), int(argv[6]),
              argv[7], argv[8])
    else:
        sys.exit(__doc__)


if __name__ == '__main__':
    main(sys.argv)
