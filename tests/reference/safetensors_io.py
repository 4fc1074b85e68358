"""Minimal safetensors writer and strict reader (F32 only).

The fixtures must not depend on the `safetensors` package, and writing the
format by hand keeps the byte layout explicit for the C reader it tests:

    [u64 little-endian header length N]
    [N bytes of JSON, padded with spaces so that 8 + N is a multiple of 8]
    [tensor data, little-endian, C order, back to back]

Each JSON entry is {"dtype": "F32", "shape": [...], "data_offsets": [begin, end]}
with offsets relative to the first data byte.  Entries (and the data) are
laid out in sorted name order, like the reference implementation does, so the
same tensors always give the same bytes.  An optional "__metadata__" object
maps strings to strings.
"""

import json
import struct

import numpy as np

HEADER_LEN_BYTES = 8
# Data start is kept 8-byte aligned so a reader can map F32 data in place.
HEADER_ALIGN = 8
METADATA_KEY = "__metadata__"
F32 = "F32"


def write(path, tensors, metadata=None):
    """Write {name: array} as F32 safetensors; returns the bytes written."""
    header = {}
    if metadata:
        if not all(isinstance(k, str) and isinstance(v, str)
                   for k, v in metadata.items()):
            raise ValueError("safetensors metadata must map str to str")
        header[METADATA_KEY] = dict(metadata)

    blobs = []
    offset = 0
    for name in sorted(tensors):
        if name == METADATA_KEY:
            raise ValueError("tensor name %r is reserved" % name)
        # '<f4' pins the byte order whatever the host is.
        arr = np.ascontiguousarray(tensors[name], dtype="<f4")
        raw = arr.tobytes(order="C")
        header[name] = {
            "dtype": F32,
            "shape": [int(d) for d in arr.shape],
            "data_offsets": [offset, offset + len(raw)],
        }
        blobs.append(raw)
        offset += len(raw)

    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    pad = (-(HEADER_LEN_BYTES + len(text))) % HEADER_ALIGN
    text += b" " * pad

    data = struct.pack("<Q", len(text)) + text + b"".join(blobs)
    with open(path, "wb") as f:
        f.write(data)
    return data


def read(path):
    """Read an F32 safetensors file strictly; returns ({name: array}, metadata).

    Strict on purpose: the check that a written file reads back identically
    is only worth something if the reader rejects gaps, overlaps and
    trailing bytes instead of tolerating them.
    """
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < HEADER_LEN_BYTES:
        raise ValueError("%s: shorter than the %d-byte header length"
                         % (path, HEADER_LEN_BYTES))
    (n,) = struct.unpack("<Q", data[:HEADER_LEN_BYTES])
    if HEADER_LEN_BYTES + n > len(data):
        raise ValueError("%s: header length %d runs past the end (%d bytes)"
                         % (path, n, len(data)))
    header = json.loads(data[HEADER_LEN_BYTES:HEADER_LEN_BYTES + n]
                        .decode("utf-8"))
    base = HEADER_LEN_BYTES + n
    payload = len(data) - base

    metadata = header.pop(METADATA_KEY, {})
    tensors = {}
    spans = []
    for name, entry in header.items():
        if entry.get("dtype") != F32:
            raise ValueError("%s: tensor %s has dtype %r, only F32 is read"
                             % (path, name, entry.get("dtype")))
        shape = tuple(int(d) for d in entry["shape"])
        begin, end = (int(o) for o in entry["data_offsets"])
        count = int(np.prod(shape, dtype=np.int64))
        if end - begin != 4 * count or begin < 0 or end > payload:
            raise ValueError("%s: tensor %s offsets [%d, %d) do not fit "
                             "shape %s in %d data bytes"
                             % (path, name, begin, end, shape, payload))
        arr = np.frombuffer(data, dtype="<f4", count=count,
                            offset=base + begin).reshape(shape)
        tensors[name] = arr.copy()
        spans.append((begin, end, name))

    # The data must be tiled exactly: no gaps, no overlaps, nothing after.
    cursor = 0
    for begin, end, name in sorted(spans):
        if begin != cursor:
            raise ValueError("%s: tensor %s starts at %d, expected %d"
                             % (path, name, begin, cursor))
        cursor = end
    if cursor != payload:
        raise ValueError("%s: %d data bytes but tensors cover %d"
                         % (path, payload, cursor))
    return tensors, metadata
