#!/usr/bin/env python3
"""Show that the fixtures in tests/data catch plausible implementation slips.

    python3 tests/reference/check_sensitivity.py      (after make_fixtures.py)

Each mutation below is a mistake a C port could make (wrong attention scale,
heads split the wrong way, GEGLU halves swapped, ...).  The reference is
re-run with the mistake patched in and compared with the written fixture
files using the tolerance the C tests use, |x - ref| <= TOLERANCE *
max(1, max|ref|).  A mutation must move at least one tap past it, or the
fixture would pass a broken port.  Some choices (epsilons, float64 sinusoid)
are below any float32 tolerance; they are listed, not asserted, so the C
authors know the fixtures cannot arbitrate them.
"""

import math
import os
import sys
from unittest import mock

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import make_fixtures as mf  # noqa: E402
import ref_models as rm  # noqa: E402

UNETS = ("unet-sd15-tiny", "unet-turbo-tiny")
TAESD = "taesd-tiny"


def load_taps(name, tap_names):
    d = os.path.join(mf.DATA_DIR, name)
    return {k: np.load(os.path.join(d, mf.tap_file(k))) for k in tap_names}


def worst_excess(taps, fixture):
    """Largest |diff| / allowed over the taps, and the first tap over 1."""
    first, worst = None, 0.0
    for k, ref in fixture.items():
        allowed = mf.TOLERANCE * max(1.0, float(np.abs(ref).max()))
        ratio = float(np.abs(taps[k].numpy() - ref).max()) / allowed
        worst = max(worst, ratio)
        if first is None and ratio > 1:
            first = k
    return worst, first


def run_unet(name):
    cfg = mf.CONFIGS[name]
    model = rm.UNetModel(cfg).eval()
    mf.randomize(model, mf.SEEDS[name]["weights"])
    sample, context = mf.unet_inputs(cfg, mf.SEEDS[name]["inputs"])
    rec = mf.TapRecorder()
    with torch.no_grad():
        model(sample, mf.TIMESTEPS[name], context, tap=rec)
    return rec.taps


def run_taesd():
    model = rm.TaesdModel(mf.CONFIGS[TAESD]).eval()
    mf.randomize(model, mf.SEEDS[TAESD]["weights"])
    rec = mf.TapRecorder()
    with torch.no_grad():
        model.encode(mf.taesd_image(mf.SEEDS[TAESD]["inputs"]), tap=rec)
        # Decode the fixture's latents, as the C test does.
        lat = np.load(os.path.join(mf.DATA_DIR, TAESD, "latents.npy"))
        model.decode(torch.from_numpy(lat), tap=rec)
    return rec.taps


# ---- mutated pieces ------------------------------------------------------

def _attention(self, x, context, scale, split):
    context = x if context is None else context
    q, k, v = (split(self, t) for t in
               (self.to_q(x), self.to_k(context), self.to_v(context)))
    out = torch.softmax(q @ k.transpose(-1, -2) * scale(self), dim=-1) @ v
    n, _, lq, _ = out.shape
    return self.to_out[0](out.transpose(1, 2).reshape(n, lq, -1))


def _split_interleaved(self, t):
    # Head h takes channels h, h + heads, ... instead of a contiguous slice.
    n, length, _ = t.shape
    return t.reshape(n, length, self.head_dim, self.heads).permute(0, 3, 1, 2)


def attention_scale_1_over_d(self, x, context=None):
    return _attention(self, x, context, lambda s: 1.0 / s.head_dim,
                      rm.Attention._split)


def attention_heads_interleaved(self, x, context=None):
    return _attention(self, x, context,
                      lambda s: 1.0 / math.sqrt(s.head_dim), _split_interleaved)


def geglu_swapped(self, x):
    value, gate = self.proj(x).chunk(2, dim=-1)
    return gate * F.gelu(value)


def geglu_tanh_gelu(self, x):
    value, gate = self.proj(x).chunk(2, dim=-1)
    return value * F.gelu(gate, approximate="tanh")


def up_concat_skip_first(self, h, temb, context, skips):
    for j, resnet in enumerate(self.resnets):
        h = resnet(torch.cat([skips.pop(), h], dim=1), temb)
        if self.attentions is not None:
            h = self.attentions[j](h, context)
    if self.upsamplers is not None:
        h = self.upsamplers[0](h)
    return h


def resnet_temb_without_silu(self, x, temb):
    h = self.conv1(F.silu(self.norm1(x)))
    h = h + self.time_emb_proj(temb)[:, :, None, None]
    h = self.conv2(F.silu(self.norm2(h)))
    return (x if self.conv_shortcut is None else self.conv_shortcut(x)) + h


_sinusoid = rm.get_timestep_embedding


def sinusoid_unflipped(t, dim, flip, shift, dtype=torch.float32):
    return _sinusoid(t, dim, not flip, shift, dtype)


def sinusoid_shift_1(t, dim, flip, shift, dtype=torch.float32):
    return _sinusoid(t, dim, flip, 1, dtype)


def sinusoid_float64(t, dim, flip, shift, dtype=torch.float32):
    return _sinusoid(t, dim, flip, shift, torch.float64).to(dtype)


def encoder_without_rescale(self, image, tap):
    x = image
    for i, layer in enumerate(self.layers):
        x = layer(x)
        tap("encoder.layers.%d" % i, x)
    return x


def _decoder(self, latents, tap, clamp):
    x = clamp(latents)
    for i, layer in enumerate(self.layers):
        x = layer(x)
        tap("decoder.layers.%d" % i, x)
    return x * 2 - 1


def decoder_tanh_x_times_3(self, latents, tap):
    return _decoder(self, latents, tap, lambda x: torch.tanh(x) * 3)


def decoder_hard_clamp(self, latents, tap):
    return _decoder(self, latents, tap, lambda x: x.clamp(-3, 3))


# (label, [(object, attribute, replacement)], models, must be caught)
MUTATIONS = [
    ("attention scale 1/head_dim",
     [(rm.Attention, "forward", attention_scale_1_over_d)], UNETS, True),
    ("heads interleaved, not contiguous",
     [(rm.Attention, "forward", attention_heads_interleaved)], UNETS, True),
    ("GEGLU value/gate swapped",
     [(rm.GEGLU, "forward", geglu_swapped)], UNETS, True),
    ("GEGLU with tanh-approximate gelu",
     [(rm.GEGLU, "forward", geglu_tanh_gelu)], UNETS, True),
    ("up block concat [skip, h]",
     [(rm.UpBlock, "forward", up_concat_skip_first)], UNETS, True),
    ("resnet time_emb_proj(temb), no SiLU",
     [(rm.ResnetBlock2D, "forward", resnet_temb_without_silu)], UNETS, True),
    ("sinusoid [sin, cos] (no flip)",
     [(rm, "get_timestep_embedding", sinusoid_unflipped)], UNETS, True),
    ("sinusoid freq_shift 1",
     [(rm, "get_timestep_embedding", sinusoid_shift_1)], UNETS, True),
    ("encoder skips (x + 1) / 2",
     [(rm.TaesdEncoder, "forward", encoder_without_rescale)], (TAESD,), True),
    ("decoder clamp tanh(x) * 3",
     [(rm.TaesdDecoder, "forward", decoder_tanh_x_times_3)], (TAESD,), True),
    ("decoder clamp hard clip to [-3, 3]",
     [(rm.TaesdDecoder, "forward", decoder_hard_clamp)], (TAESD,), True),
    # Below float32 resolution at these sizes: listed, not asserted.
    ("Transformer2D GroupNorm eps 1e-5",
     [(rm, "TRANSFORMER_GROUP_NORM_EPS", 1e-5)], UNETS, False),
    ("LayerNorm eps 1e-6",
     [(rm, "TRANSFORMER_LAYER_NORM_EPS", 1e-6)], UNETS, False),
    ("sinusoid computed in float64",
     [(rm, "get_timestep_embedding", sinusoid_float64)], UNETS, False),
]


def run(name):
    return run_taesd() if name == TAESD else run_unet(name)


def main():
    torch.set_num_threads(1)
    fixtures = {}
    for name in UNETS + (TAESD,):
        taps = run(name)
        fixtures[name] = load_taps(name, taps)
        # Unmutated, the reference must reproduce its own files.
        ratio, first = worst_excess(taps, fixtures[name])
        assert first is None, (name, "fixture does not reproduce", first)

    failures = []
    for label, patches, models, must_catch in MUTATIONS:
        for name in models:
            with _patched(patches):
                ratio, first = worst_excess(run(name), fixtures[name])
            caught = first is not None
            print("%-36s %-16s %-6s worst %.3g x tolerance%s"
                  % (label, name, "caught" if caught else "missed", ratio,
                     " (first at %s)" % first if caught else ""))
            if must_catch and not caught:
                failures.append((label, name))
    assert not failures, "fixtures miss: %s" % failures


class _patched:
    """Apply several mock.patch.object patches as one context."""

    def __init__(self, patches):
        self.patchers = [mock.patch.object(o, a, v) for o, a, v in patches]

    def __enter__(self):
        for p in self.patchers:
            p.start()

    def __exit__(self, *exc):
        for p in reversed(self.patchers):
            p.stop()
        return False


if __name__ == "__main__":
    main()
