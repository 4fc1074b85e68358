#!/usr/bin/env python3
"""Writes the seed corpus for fuzz-safetensors (checked in; rerun to
regenerate): a few valid safetensors files and a few broken ones, so the
fuzzer starts from inputs that reach every check of the reader."""
import json
import os
import struct
import sys

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                   'corpus-safetensors')


def st_file(header, data, pad=True):
    text = header if isinstance(header, str) else json.dumps(
        header, separators=(',', ':'))
    raw = text.encode()
    if pad:
        raw += b' ' * (-len(raw) % 8)
    return struct.pack('<Q', len(raw)) + raw + data


def entry(dtype, shape, begin, end):
    return {'dtype': dtype, 'shape': shape, 'data_offsets': [begin, end]}


def f32(*values):
    return struct.pack('<%df' % len(values), *values)


SEEDS = {
    'valid-f32': st_file({'a': entry('F32', [2, 2], 0, 16),
                          'b': entry('F32', [1], 16, 20)},
                         f32(1, -2.5, 0.5, 3, 7)),
    'valid-metadata': st_file({'__metadata__': {'format': 'pt'},
                               'w': entry('F32', [3], 0, 12)},
                              f32(1, 2, 3)),
    'valid-half': st_file({'h': entry('F16', [4], 0, 8),
                           'b': entry('BF16', [2], 8, 12)},
                          bytes([0x00, 0x3c, 0x01, 0x00, 0x00, 0x7c,
                                 0x00, 0x7e, 0x80, 0x3f, 0x20, 0xc0])),
    'valid-scalar-empty': st_file({'s': entry('F32', [], 0, 4),
                                   'z': entry('F32', [0, 5], 4, 4)},
                                  f32(9)),
    'valid-empty': st_file({}, b''),
    'bad-overlap': st_file({'a': entry('F32', [2], 0, 8),
                            'b': entry('F32', [2], 4, 12)}, f32(1, 2, 3)),
    'bad-gap': st_file({'a': entry('F32', [1], 0, 4),
                        'b': entry('F32', [1], 8, 12)}, f32(1, 2, 3)),
    'bad-dtype': st_file({'a': entry('I64', [1], 0, 8)}, b'\0' * 8),
    'bad-duplicate': st_file('{"a":{"dtype":"F32","shape":[1],'
                             '"data_offsets":[0,4]},"a":{"dtype":"F32",'
                             '"shape":[1],"data_offsets":[4,8]}}',
                             f32(1, 2)),
    'bad-json': st_file('{"a":{"dtype":"F32","shape":[1,', f32(1)),
    'bad-length': struct.pack('<Q', 4096) + b'{}',
}


def main():
    os.makedirs(OUT, exist_ok=True)
    for name, data in SEEDS.items():
        with open(os.path.join(OUT, name), 'wb') as f:
            f.write(data)
    return 0


if __name__ == '__main__':
    sys.exit(main())
