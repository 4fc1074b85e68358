"""Seeded weights and inputs, bit for bit the values of the C generator
pp_weights_new_seeded / pp_seeded_fill_input (kernels/io/pp-weights.h).

Counter-based: every element depends only on (seed, key, index), so any
order of generation, and any split into chunks, gives the same bits.

    mix(z):  z ^= z >> 30; z *= 0xBF58476D1CE4E5B9; z ^= z >> 27;
             z *= 0x94D049BB133111EB; z ^= z >> 31   (splitmix64's mixer)
    base  =  FNV-1a-64(UTF-8 bytes of key) XOR mix(seed)
    z_i   =  mix(base + (i + 1) * 0x9E3779B97F4A7C15)  (mod 2**64, C order)
    u_i   =  ((z_i >> 40) + 0.5) * 2**-23 - 1   (exact in float64, in (-1, 1))
    x_i   =  float32(offset + scale * u_i)      (in float64, rounded once)

    kind        scale                offset
    weight      sqrt(3 / fan_in)     0        fan_in = numel / shape[0]
    bias        2**-4                0
    norm_scale  2**-3                1
    norm_shift  2**-4                0
    input       sqrt(3)              0        (unit variance)

The kind of a model tensor follows from its key: tensors with two or more
dimensions are weights; a one-dimensional tensor of a normalisation module
(a module name containing "norm": norm, norm1/2/3, conv_norm_out) is a
norm_scale (".weight") or norm_shift (".bias"); any other ".bias" is a bias.
"""

import hashlib

import numpy as np

MASK64 = (1 << 64) - 1
FNV_OFFSET = 0xCBF29CE484222325
FNV_PRIME = 0x100000001B3
GAMMA = 0x9E3779B97F4A7C15
MUL_1 = 0xBF58476D1CE4E5B9
MUL_2 = 0x94D049BB133111EB
UNIFORM_SHIFT = 40
UNIFORM_STEP = 2.0 ** -23
INPUT_VARIANCE_FACTOR = 3.0

SCALE_BIAS = 2.0 ** -4
SCALE_NORM_SCALE = 2.0 ** -3
SCALE_NORM_SHIFT = 2.0 ** -4

KINDS = ("weight", "bias", "norm_scale", "norm_shift")
NORM_MARK = "norm"
# Elements per numpy pass: bounds the uint64 temporaries (8 bytes each).
CHUNK = 1 << 22


def fnv1a_64(key):
    h = FNV_OFFSET
    for b in key.encode("utf-8"):
        h = ((h ^ b) * FNV_PRIME) & MASK64
    return h


def mix_int(z):
    z = ((z ^ (z >> 30)) * MUL_1) & MASK64
    z = ((z ^ (z >> 27)) * MUL_2) & MASK64
    return z ^ (z >> 31)


def _mix_array(z):
    """mix() on a uint64 array, in place (numpy wraps uint64 products)."""
    z ^= z >> np.uint64(30)
    z *= np.uint64(MUL_1)
    z ^= z >> np.uint64(27)
    z *= np.uint64(MUL_2)
    z ^= z >> np.uint64(31)
    return z


def uniform(seed, key, numel):
    """u_0 .. u_{numel-1} for (seed, key) as float64."""
    base = np.uint64(fnv1a_64(key) ^ mix_int(seed))
    out = np.empty(numel, dtype=np.float64)
    with np.errstate(over="ignore"):
        for begin in range(0, numel, CHUNK):
            end = min(numel, begin + CHUNK)
            z = np.arange(begin + 1, end + 1, dtype=np.uint64)
            z *= np.uint64(GAMMA)
            z += base
            _mix_array(z)
            u = (z >> np.uint64(UNIFORM_SHIFT)).astype(np.float64)
            u += 0.5
            u *= UNIFORM_STEP
            u -= 1.0
            out[begin:end] = u
    return out


def scale_offset(kind, shape):
    if kind == "weight":
        numel = int(np.prod(shape, dtype=np.int64)) if shape else 1
        fan_in = numel // shape[0] if shape else 1
        return np.sqrt(INPUT_VARIANCE_FACTOR / fan_in), 0.0
    if kind == "bias":
        return SCALE_BIAS, 0.0
    if kind == "norm_scale":
        return SCALE_NORM_SCALE, 1.0
    if kind == "norm_shift":
        return SCALE_NORM_SHIFT, 0.0
    raise ValueError("unknown kind %r" % kind)


def _values(seed, key, shape, scale, offset):
    numel = int(np.prod(shape, dtype=np.int64)) if shape else 1
    x = uniform(seed, key, numel)
    x *= scale
    x += offset
    return x.astype(np.float32).reshape(shape)


def kind_of(key, shape):
    """The kind the C model asks for, derived from the key alone."""
    module, _, param = key.rpartition(".")
    if len(shape) >= 2:
        if param != "weight":
            raise ValueError("%s: a %d-d tensor that is not a weight"
                             % (key, len(shape)))
        return "weight"
    leaf = module.rpartition(".")[2]
    if NORM_MARK in leaf:
        if param == "weight":
            return "norm_scale"
        if param == "bias":
            return "norm_shift"
    elif param == "bias":
        return "bias"
    raise ValueError("%s: no seeded kind for a %d-d tensor" % (key, len(shape)))


def weight(seed, key, shape, kind=None):
    """The float32 tensor pp_weights_new_seeded(seed) gives for key."""
    shape = tuple(int(s) for s in shape)
    if kind is None:
        kind = kind_of(key, shape)
    scale, offset = scale_offset(kind, shape)
    return _values(seed, key, shape, scale, offset)


def input_tensor(seed, key, shape):
    """The float32 tensor pp_seeded_fill_input(seed, key, ...) gives."""
    shape = tuple(int(s) for s in shape)
    return _values(seed, key, shape, np.sqrt(INPUT_VARIANCE_FACTOR), 0.0)


def bits_hex(x):
    """The float32 bit pattern of one value, as the C test prints it."""
    return "0x%08x" % int(np.float32(x).view(np.uint32))


def digest(arr):
    """Short SHA-256 of float32 little-endian data, for spot checks."""
    return hashlib.sha256(np.ascontiguousarray(arr, dtype="<f4").tobytes()
                          ).hexdigest()[:16]
