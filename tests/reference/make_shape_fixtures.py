#!/usr/bin/env python3
"""Write fixtures at real token counts under tests/data/shapes/, computed by
diffusers' own models:  python3 tests/reference/make_shape_fixtures.py

Needs diffusers importable next to PyTorch (diffusers 0.32.0.dev0 at commit
aafed3f8 is the newest that imports on Debian's torch 1.13; its safetensors
dependency may be a stand-in, the weights are read with safetensors_io.py).

The tiny models of tests/data (unet-sd15-tiny, unet-turbo-tiny, taesd-tiny,
written by make_fixtures.py) are loaded into diffusers'
UNet2DConditionModel / AutoencoderTiny with from_config + load_state_dict
and run in float64 at the sizes real pipelines use: 77-token text, latents
of 32x32 and 64x64 (1024 and 4096 token rows at the first level, where the
C transformer splits its rows over the thread team) and a non-square size.
Every model also runs in float32, and "f32-f64" (max |float32 - float64|
per tap) is written next to the taps: the error any float32 implementation
can be expected to have, which the C tests size their bounds from.

For the existing small fixtures the same file records the error of the
stored float32 reference itself (make_fixtures.py's re-implementation)
against diffusers in float64; those directories hold nothing else.

Every check is an assert: a fixture that could not catch a wrong C model
(non-finite or constant taps, unwired text, batch items that mix) is not
written.
"""

import hashlib
import json
import os
import random
import shutil
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import make_fixtures  # noqa: E402
import safetensors_io  # noqa: E402
from diffusers import AutoencoderTiny, UNet2DConditionModel  # noqa: E402

DATA_DIR = make_fixtures.DATA_DIR
OUT_DIR = os.path.join(DATA_DIR, "shapes")
README = os.path.join(DATA_DIR, "README")
ERRORS_FILE = "f32-f64.txt"
IMAGE_DIGEST_FILE = "image.sha256"

# CLIP's token count: what every real prompt embedding has.
TEXT_TOKENS = 77
# The new fixtures must stay cheap to keep in git.
MAX_TOTAL_BYTES = 10 * 1000 * 1000

# UNet taps as make_fixtures.py names them (docs/models.md).
UNET_TAPS = ["time_emb", "conv_in", "down_blocks.0", "down_blocks.1",
             "mid_block", "up_blocks.0", "up_blocks.1", "out"]
# At 64x64 the full-resolution taps (conv_in, up_blocks.*) would take
# 2.8 MB per family; the output still covers the up path there, and those
# taps are stored at the other two sizes.
UNET_TAPS_LOW_RES = ["time_emb", "down_blocks.0", "down_blocks.1",
                     "mid_block", "out"]

# (case, batch, height, width, input seed, taps).  26x46: 1196 token rows at
# the first level and 299 (odd, above the split threshold) at the second.
UNET_CASES = [
    ("32x32-b2", 2, 32, 32, 11, UNET_TAPS),
    ("64x64", 1, 64, 64, 12, UNET_TAPS_LOW_RES),
    ("26x46", 1, 26, 46, 13, UNET_TAPS),
]
UNET_MODELS = {"unet-sd15-tiny": 5100, "unet-turbo-tiny": 5200}

# TAESD at 512x512: the image is made from integers (see pattern_image),
# identically by the C test, so it is not stored; only a few taps at the
# latent resolution are kept next to the outputs.
TAESD_SIZE = 512
TAESD_SEED = 5301
TAESD_TAPS = ["encoder.layers.7", "latents", "decoder.layers.2", "image"]
# pattern_image constants, mirrored in tests/kernels/models/test-models.c.
PATTERN_PERIOD = 256          # power of two: every value is exact in float32
# Per channel: x and y slopes of the first wave, then of the second.
PATTERN_SLOPES = [(3, 1, 5, -2), (2, -3, -1, 4), (-1, 2, 3, 3)]
# Phase step per channel of each wave.
PATTERN_PHASES = (17, 41)
# Weights of the two waves; the sum divides, so the waves span [-1, 1].
PATTERN_WEIGHTS = (3, 1)
PATTERN_NOISE_BITS = 8        # noise in [-PERIOD/2, PERIOD/2)


def pattern_image(height, width, seed):
    """[1, 3, H, W] in [-1, 1]: two triangle waves per channel plus uniform
    noise from Mersenne Twister words, all in integers over a power-of-two
    denominator, so C (GRand seeded with the same one-word array) builds the
    same float32 bits without any libm call.  Channel-major, row-major order
    of draws: one 32-bit word per pixel."""
    rng = random.Random(seed)
    p = PATTERN_PERIOD
    w1, w2 = PATTERN_WEIGHTS
    denominator = float((w1 + w2) * p)
    img = np.empty((1, 3, height, width), dtype="<f4")
    for c, (ax, ay, bx, by) in enumerate(PATTERN_SLOPES):
        for y in range(height):
            row = img[0, c, y]
            for x in range(width):
                t1 = (ax * x + ay * y + PATTERN_PHASES[0] * c) % p
                t2 = (bx * x + by * y + PATTERN_PHASES[1] * c) % p
                tri1 = abs(2 * t1 - p)                   # [0, p]
                tri2 = abs(2 * t2 - p)
                noise = (rng.getrandbits(32) >> (32 - PATTERN_NOISE_BITS)) \
                    - (1 << (PATTERN_NOISE_BITS - 1))
                v = w1 * (2 * tri1 - p) + w2 * (2 * tri2 - p) + noise
                row[x] = min(1.0, max(-1.0, v / denominator))
    return img


# --------------------------------------------------------------------------
# Models and taps
# --------------------------------------------------------------------------

def load_weights(model_name):
    cfg_path = os.path.join(DATA_DIR, model_name, "config.json")
    with open(cfg_path) as f:
        cfg = json.load(f)
    tensors, _ = safetensors_io.read(
        os.path.join(DATA_DIR, model_name, make_fixtures.WEIGHTS_FILE))
    return cfg, {k: torch.from_numpy(v) for k, v in tensors.items()}


def diffusers_model(cls, model_name, dtype):
    cfg, state = load_weights(model_name)
    model = cls.from_config(cfg)
    model.load_state_dict(state, strict=True)
    return model.to(dtype).eval()


def hook_taps(modules, taps):
    """Forward hooks that record each module's output under its tap name;
    a down block returns (hidden_states, skips).  diffusers shares one
    activation instance between layers (TAESD's top-level ReLU is also the
    one inside every block), so only calls made outside any other tapped
    module count."""
    assert len({id(m) for m in modules.values()}) == len(modules), \
        "one module under two tap names"
    depth = [0]
    handles = []

    def enter(_m, _inp):
        depth[0] += 1

    for name, module in modules.items():
        def leave(_m, _inp, out, name=name):
            depth[0] -= 1
            if depth[0] == 0:
                assert name not in taps, "tap %s recorded twice" % name
                taps[name] = (out[0] if isinstance(out, tuple)
                              else out).detach()
        handles.append(module.register_forward_pre_hook(enter))
        handles.append(module.register_forward_hook(leave))
    return handles


def unet_tap_modules(model):
    mods = {"time_emb": model.time_embedding, "conv_in": model.conv_in,
            "mid_block": model.mid_block}
    for i, b in enumerate(model.down_blocks):
        mods["down_blocks.%d" % i] = b
    for i, b in enumerate(model.up_blocks):
        mods["up_blocks.%d" % i] = b
    return mods


def run_unet(model, sample, timestep, context):
    dtype = next(model.parameters()).dtype
    taps = {}
    handles = hook_taps(unet_tap_modules(model), taps)
    with torch.no_grad():
        out = model(sample.to(dtype), timestep,
                    encoder_hidden_states=context.to(dtype)).sample
    for h in handles:
        h.remove()
    taps["out"] = out
    return taps


def taesd_encode(model, image):
    dtype = next(model.parameters()).dtype
    taps = {}
    handles = hook_taps({"encoder.layers.%d" % i: layer
                         for i, layer in enumerate(model.encoder.layers)}, taps)
    with torch.no_grad():
        taps["latents"] = model.encode(image.to(dtype)).latents
    for h in handles:
        h.remove()
    return taps


def taesd_decode(model, latents):
    dtype = next(model.parameters()).dtype
    taps = {}
    handles = hook_taps({"decoder.layers.%d" % i: layer
                         for i, layer in enumerate(model.decoder.layers)}, taps)
    with torch.no_grad():
        taps["image"] = model.decode(latents.to(dtype)).sample
    for h in handles:
        h.remove()
    return taps


def max_abs(t):
    return float(t.double().abs().max())


def max_diff(a, b):
    d = (a.double() - b.double()).abs().max()
    return float(d) if torch.isfinite(d) else float("inf")


def check_meaningful(what, t):
    arr = t.double().numpy()
    assert np.all(np.isfinite(arr)), "%s has non-finite values" % what
    assert arr.std() > make_fixtures.MIN_MAGNITUDE, "%s is constant" % what


# --------------------------------------------------------------------------
# Writing
# --------------------------------------------------------------------------

def write_errors(outdir, rows):
    """rows: [(tap, shape, max|ref|, f32-f64)]; the C test reads this file as
    the list of taps the directory holds, with their reference error."""
    os.makedirs(outdir, exist_ok=True)
    with open(os.path.join(outdir, ERRORS_FILE), "w") as f:
        f.write("# tap  shape  max|ref|  f32-f64 (max |float32 - float64|)\n")
        for tap, shape, mx, err in rows:
            f.write("%s [%s] %.6e %.6e\n"
                    % (tap, ",".join(map(str, shape)), mx, err))


def save_taps(outdir, names, taps64, taps32):
    rows = []
    for name in names:
        ref = taps64[name]
        make_fixtures.save_npy(os.path.join(outdir, "tap-%s.npy" % name),
                               ref.float())
        rows.append((name, tuple(ref.shape), max_abs(ref),
                     max_diff(taps32[name], ref)))
    write_errors(outdir, rows)
    return rows


# --------------------------------------------------------------------------
# UNet
# --------------------------------------------------------------------------

def unet_small(model_name, m64, summary):
    """The reference error of the existing fixture in tests/data/<model>."""
    src = os.path.join(DATA_DIR, model_name)
    sample = torch.from_numpy(np.load(os.path.join(src, "sample.npy")))
    context = torch.from_numpy(np.load(os.path.join(src,
                                                    "encoder_hidden_states.npy")))
    with open(os.path.join(src, "timestep.txt")) as f:
        t = int(f.read())
    taps64 = run_unet(m64, sample, t, context)
    rows = []
    for name in UNET_TAPS:
        fixture = torch.from_numpy(np.load(os.path.join(src, "tap-%s.npy"
                                                        % name)))
        err = max_diff(fixture, taps64[name])
        # The re-implementation and diffusers agree to float32 rounding.
        assert err <= make_fixtures.scaled_tolerance(taps64[name]), (
            model_name, name, err)
        rows.append((name, tuple(fixture.shape), max_abs(taps64[name]), err))
    case = "%dx%d-b%d" % (sample.shape[2], sample.shape[3], sample.shape[0])
    write_errors(os.path.join(OUT_DIR, model_name, case), rows)
    summary.append((model_name, case, "existing fixture vs diffusers f64",
                    rows))


def unet_case(model_name, seed_base, case, m64, m32, summary):
    name, batch, h, w, seed, tap_names = case
    cfg = m64.config
    t = make_fixtures.TIMESTEPS[model_name]
    gen = torch.Generator().manual_seed(seed_base + seed)
    sample = torch.randn(batch, cfg.in_channels, h, w, generator=gen)
    context = torch.randn(batch, TEXT_TOKENS, cfg.cross_attention_dim,
                          generator=gen)
    taps64 = run_unet(m64, sample, t, context)
    taps32 = run_unet(m32, sample, t, context)
    assert list(taps64) == UNET_TAPS, list(taps64)
    for k in tap_names:
        check_meaningful("%s %s %s" % (model_name, name, k), taps64[k])
    out = taps64["out"]
    # The text must reach the output, and batch items must not mix.
    other = torch.randn(context.shape, generator=gen)
    with torch.no_grad():
        ctx_effect = max_diff(out, run_unet(m64, sample, t, other)["out"])
    assert ctx_effect > make_fixtures.MIN_EFFECT, (model_name, name,
                                                   ctx_effect)
    if batch > 1:
        solo = run_unet(m64, sample[1:], t, context[1:])["out"]
        assert max_diff(out[1:], solo) < 1e-9 * max(1.0, max_abs(out)), (
            model_name, name, "batch items mix")

    outdir = os.path.join(OUT_DIR, model_name, name)
    os.makedirs(outdir, exist_ok=True)
    make_fixtures.save_npy(os.path.join(outdir, "sample.npy"), sample)
    make_fixtures.save_npy(os.path.join(outdir, "encoder_hidden_states.npy"),
                           context)
    with open(os.path.join(outdir, "timestep.txt"), "w") as f:
        f.write("%d\n" % t)
    rows = save_taps(outdir, tap_names, taps64, taps32)
    summary.append((model_name, name, "sample [%d,%d,%d,%d], text [%d,%d,%d],"
                    " t=%d, seed %d" % (batch, cfg.in_channels, h, w, batch,
                                        TEXT_TOKENS, cfg.cross_attention_dim,
                                        t, seed_base + seed), rows))


def make_unet(model_name, summary):
    m64 = diffusers_model(UNet2DConditionModel, model_name, torch.float64)
    m32 = diffusers_model(UNet2DConditionModel, model_name, torch.float32)
    unet_small(model_name, m64, summary)
    for case in UNET_CASES:
        unet_case(model_name, UNET_MODELS[model_name], case, m64, m32, summary)


# --------------------------------------------------------------------------
# TAESD
# --------------------------------------------------------------------------

def taesd_small(m64, summary):
    name = "taesd-tiny"
    src = os.path.join(DATA_DIR, name)
    image = torch.from_numpy(np.load(os.path.join(src, "image.npy")))
    latents = torch.from_numpy(np.load(os.path.join(src, "latents.npy")))
    # Decode the fixture's float32 latents, as make_fixtures.py does.
    taps64 = dict(taesd_encode(m64, image), **taesd_decode(m64, latents))
    rows = []
    for tap in taps64:
        fixture = torch.from_numpy(np.load(os.path.join(src, "tap-%s.npy"
                                                        % tap)))
        err = max_diff(fixture, taps64[tap])
        assert err <= make_fixtures.scaled_tolerance(taps64[tap]), (tap, err)
        rows.append((tap, tuple(fixture.shape), max_abs(taps64[tap]), err))
    case = "%dx%d" % tuple(image.shape[2:])
    write_errors(os.path.join(OUT_DIR, name, case), rows)
    summary.append((name, case, "existing fixture vs diffusers f64", rows))


def make_taesd(summary):
    name = "taesd-tiny"
    m64 = diffusers_model(AutoencoderTiny, name, torch.float64)
    m32 = diffusers_model(AutoencoderTiny, name, torch.float32)
    taesd_small(m64, summary)

    image = torch.from_numpy(pattern_image(TAESD_SIZE, TAESD_SIZE,
                                           TAESD_SEED))
    assert float(image.min()) >= -1 and float(image.max()) <= 1
    assert float(image.std()) > 0.3, "pattern image is too flat"
    gen = torch.Generator().manual_seed(TAESD_SEED)
    factor = 2 ** (len(m64.config.encoder_block_out_channels) - 1)
    lat_hw = TAESD_SIZE // factor
    dec_in = torch.randn(1, m64.config.latent_channels, lat_hw, lat_hw,
                         generator=gen)
    # Each half runs on the same float32 input in both precisions, so each
    # one's error is its own.
    taps64 = dict(taesd_encode(m64, image), **taesd_decode(m64, dec_in))
    taps32 = dict(taesd_encode(m32, image), **taesd_decode(m32, dec_in))
    for k in TAESD_TAPS:
        check_meaningful("%s %s" % (name, k), taps64[k])
    assert taps64["latents"].shape == (1, 4, lat_hw, lat_hw)
    assert taps64["image"].shape == image.shape

    case = "%dx%d" % (TAESD_SIZE, TAESD_SIZE)
    outdir = os.path.join(OUT_DIR, name, case)
    os.makedirs(outdir, exist_ok=True)
    # The C test checks that it built the same image, bit for bit.
    with open(os.path.join(outdir, IMAGE_DIGEST_FILE), "w") as f:
        f.write(hashlib.sha256(image.numpy().astype("<f4").tobytes())
                .hexdigest() + "\n")
    make_fixtures.save_npy(os.path.join(outdir, "decode-latents.npy"), dec_in)
    rows = save_taps(outdir, TAESD_TAPS, taps64, taps32)
    summary.append((name, case, "pattern image (seed %d), decode of N(0,1) "
                    "latents [1,4,%d,%d]" % (TAESD_SEED, lat_hw, lat_hw),
                    rows))


# --------------------------------------------------------------------------
# README section
# --------------------------------------------------------------------------

README_BEGIN = "=== shapes/ (make_shape_fixtures.py) ==="
README_END = "=== end of shapes/ ==="
README_TEXT = """\
Fixtures at real token counts, computed by diffusers' own models.
Generated by:  python3 tests/reference/make_shape_fixtures.py
with diffusers {diffusers} importable, torch {torch}, CPU, one thread.
They use the weights of the tiny models above (loaded into diffusers'
UNet2DConditionModel / AutoencoderTiny with from_config and a strict
load_state_dict), run in float64 and stored as float32 npy.  diffusers
computes the timestep sinusoid in float32 in both precisions, as the C
model does.  Re-running make_fixtures.py keeps this section and deletes
nothing under shapes/, but changes the weights these fixtures use: re-run
make_shape_fixtures.py after it.

shapes/<model>/<case>/
- f32-f64.txt: one line per tap the directory holds: name, shape, max|ref|
  and max |float32 - float64| of diffusers run in both precisions on the
  same inputs (the error to expect from any float32 implementation;
  "relative" below is f32-f64 / max|ref|).  The kernel tests read it as
  the list of taps to compare and hold each tap to a small multiple of it
  (see the comment in tests/kernels/models/test-models.c).
- sample.npy [N,4,H,W] and encoder_hidden_states.npy [N,77,D]: N(0,1)
  from torch.Generator().manual_seed(<seed below>); timestep.txt as in the
  small fixture; tap-<name>.npy as above (the output is tap-out.npy only).
- 32x32-b2: 1024 token rows at the first level, 256 at the second; 26x46:
  1196 and 299.  64x64 (4096 rows) keeps only the low-resolution taps.
- 6x10-b2 (UNet) and 24x40 (TAESD) hold only f32-f64.txt for the small
  fixtures above: there the column is the stored float32 reference
  (make_fixtures.py) minus diffusers in float64.
- taesd-tiny/512x512: the input image is not stored; it is built from
  integers by pattern_image() in make_shape_fixtures.py and, identically,
  by the C test (a GRand seeded with the array {{{seed}}}); image.sha256 is
  the SHA-256 of its float32 bytes; tap-latents.npy is its encoding;
  decode-latents.npy is N(0,1) and tap-image.npy its decoding.

{tables}
Total {total} bytes.
"""


def summary_tables(summary):
    lines = []
    for model, case, what, rows in summary:
        lines.append("%s/%s: %s" % (model, case, what))
        lines.append("  %-18s %-18s %10s %10s %10s"
                     % ("tap", "shape", "max|ref|", "f32-f64", "relative"))
        for tap, shape, mx, err in rows:
            lines.append("  %-18s %-18s %10.3g %10.2e %10.2e"
                         % (tap, "[" + ",".join(map(str, shape)) + "]", mx,
                            err, err / max(mx, 1e-30)))
        lines.append("")
    return "\n".join(lines)


def write_readme_section(text):
    with open(README) as f:
        old = f.read()
    section = "%s\n%s%s\n" % (README_BEGIN, text, README_END)
    if README_BEGIN in old:
        head, rest = old.split(README_BEGIN, 1)
        tail = rest.split(README_END + "\n", 1)[1]
        new = head + section + tail
    else:
        new = old + ("" if old.endswith("\n\n") else "\n") + section
    with open(README, "w") as f:
        f.write(new)


def fixture_bytes():
    total = 0
    for root, _, files in os.walk(OUT_DIR):
        total += sum(os.path.getsize(os.path.join(root, f)) for f in files)
    return total


def main():
    import diffusers

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    # Everything under shapes/ is this script's: no stale case survives.
    if os.path.isdir(OUT_DIR):
        shutil.rmtree(OUT_DIR)
    summary = []
    make_unet("unet-sd15-tiny", summary)
    make_unet("unet-turbo-tiny", summary)
    make_taesd(summary)
    total = fixture_bytes()
    assert total < MAX_TOTAL_BYTES, "shape fixtures take %d bytes" % total
    write_readme_section(README_TEXT.format(
        diffusers=diffusers.__version__, torch=torch.__version__,
        seed=TAESD_SEED, tables=summary_tables(summary), total=total))
    print(summary_tables(summary))
    print("total %d bytes in %s" % (total, OUT_DIR))


if __name__ == "__main__":
    main()
