#!/usr/bin/env python3
"""Write the tiny-model fixtures under tests/data/ that the C kernels are
tested against:  python3 tests/reference/make_fixtures.py

Needs only PyTorch (Debian's python3-torch, CPU) and numpy.  For each of
unet-sd15-tiny, unet-turbo-tiny and taesd-tiny it builds the model of
docs/models.md with seeded random weights, runs it with taps, checks itself and
writes config.json, diffusion_pytorch_model.safetensors, inputs, outputs
and tap-<name>.npy files, then tests/data/README.

Every check is an assert: a fixture that would not catch a wrong C
implementation (zero outputs, unwired cross-attention, keys that would not
load a real checkpoint, a file that does not read back) must not be written
silently.
"""

import copy
import json
import os
import platform
import re
import shutil
import subprocess
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import ref_models  # noqa: E402
import safetensors_io  # noqa: E402

DATA_DIR = os.path.normpath(os.path.join(HERE, "..", "data"))
WEIGHTS_FILE = "diffusion_pytorch_model.safetensors"
SAFETENSORS_METADATA = {"format": "pt"}

# Random-weight rule of docs/models.md (same as pp_weights_new_random).
WEIGHT_STD = 0.2
BIAS_STD = 0.05
NORM_SCALE_STD = 0.1
NORM_SHIFT_STD = 0.05

# Seeds: one for the weights and one for the inputs of each model, so that
# changing an input never changes the weights and vice versa.
SEEDS = {
    "unet-sd15-tiny": {"weights": 1501, "inputs": 1502},
    "unet-turbo-tiny": {"weights": 2101, "inputs": 2102},
    "taesd-tiny": {"weights": 3101, "inputs": 3102},
    "timestep-probe": {"inputs": 4102},
}

UNET_BATCH = 2
UNET_SAMPLE_HW = (6, 10)          # non-square, and 6 -> 3 after one downsample
UNET_CONTEXT_LEN = 7
TAESD_IMAGE_SHAPE = (1, 3, 24, 40)
TIMESTEPS = {"unet-sd15-tiny": 357, "unet-turbo-tiny": 999}
# Direct check of the sinusoid (written next to the sd15 fixture).
SINUSOID_T = 357
SINUSOID_DIM = 32

# The C tolerance target of docs/models.md.  With the docs/models.md weight rule the
# UNet's up-block activations reach ~5e3, where float32 itself is only good
# to ~1e-3 absolute, so tensors are held to TOLERANCE * max(1, max|x|): an
# absolute 1e-4 for the O(1) outputs, relative for the large taps.
TOLERANCE = 1e-4
# "Depends on" means a change well above any rounding noise.
MIN_EFFECT = 1e-3
# A tap whose largest value is below this is treated as trivially zero.
MIN_MAGNITUDE = 1e-3
# Keep the fixtures cheap to keep in git.
MAX_TOTAL_BYTES = 10 * 1024 * 1024

UNET_COMMON = {
    "_class_name": ref_models.UNET_CLASS,
    "act_fn": "silu",
    "flip_sin_to_cos": True,
    "freq_shift": 0,
    "in_channels": 4,
    "out_channels": 4,
    "mid_block_type": ref_models.MID_CROSS,
    "norm_eps": 1e-5,
    "norm_num_groups": 8,
    "sample_size": 8,
    "transformer_layers_per_block": 1,
    "upcast_attention": False,
}

CONFIGS = {
    "unet-sd15-tiny": dict(
        UNET_COMMON,
        block_out_channels=[32, 64],
        layers_per_block=1,
        down_block_types=[ref_models.CROSS_DOWN, ref_models.PLAIN_DOWN],
        up_block_types=[ref_models.PLAIN_UP, ref_models.CROSS_UP],
        cross_attention_dim=16,
        attention_head_dim=2,
        use_linear_projection=False,
    ),
    "unet-turbo-tiny": dict(
        UNET_COMMON,
        block_out_channels=[32, 64],
        layers_per_block=2,
        down_block_types=[ref_models.CROSS_DOWN, ref_models.CROSS_DOWN],
        up_block_types=[ref_models.CROSS_UP, ref_models.CROSS_UP],
        cross_attention_dim=24,
        attention_head_dim=[2, 4],
        use_linear_projection=True,
    ),
    "taesd-tiny": {
        "_class_name": ref_models.TAESD_CLASS,
        "act_fn": "relu",
        "in_channels": 3,
        "out_channels": 3,
        "latent_channels": 4,
        "encoder_block_out_channels": [8, 8, 8, 8],
        "decoder_block_out_channels": [8, 8, 8, 8],
        "num_encoder_blocks": [1, 1, 1, 1],
        "num_decoder_blocks": [1, 1, 1, 1],
        "upsampling_scaling_factor": 2,
        "upsample_fn": "nearest",
        "latent_magnitude": 3,
        "latent_shift": 0.5,
        "scaling_factor": 1.0,
        "shift_factor": 0.0,
        "force_upcast": False,
    },
}
# Real diffusers configs carry every constructor argument; the fixtures do
# too (at their only supported value) so the C config reader sees the same
# shape of file it will meet in a downloaded model.
for _name in ("unet-sd15-tiny", "unet-turbo-tiny"):
    for _k, _v in ref_models.UNET_FIXED_KEYS.items():
        CONFIGS[_name].setdefault(_k, _v)


# --------------------------------------------------------------------------
# Expected diffusers keys, derived independently of the modules
# --------------------------------------------------------------------------

class KeyBook:
    """Collects key -> shape the way diffusers names them."""

    def __init__(self):
        self.shapes = {}

    def add(self, key, shape):
        assert key not in self.shapes, "duplicate key %s" % key
        self.shapes[key] = tuple(shape)

    def linear(self, p, cin, cout, bias=True):
        self.add(p + ".weight", (cout, cin))
        if bias:
            self.add(p + ".bias", (cout,))

    def conv(self, p, cin, cout, k, bias=True):
        self.add(p + ".weight", (cout, cin, k, k))
        if bias:
            self.add(p + ".bias", (cout,))

    def norm(self, p, c):
        self.add(p + ".weight", (c,))
        self.add(p + ".bias", (c,))


def expected_unet_keys(cfg):
    """Key -> shape of a diffusers UNet2DConditionModel checkpoint.

    The up-block input widths come from simulating the skip stack (push on
    the way down, pop on the way up) rather than from the closed-form rule
    the model uses, so the two derivations check each other.
    """
    kb = KeyBook()
    ch = cfg["block_out_channels"]
    n = len(ch)
    lpb = cfg["layers_per_block"]
    ctx = cfg["cross_attention_dim"]
    temb = ref_models.TIME_EMBED_MULT * ch[0]
    ff = ref_models.FF_MULT

    def resnet(p, cin, cout):
        kb.norm(p + ".norm1", cin)
        kb.conv(p + ".conv1", cin, cout, 3)
        kb.linear(p + ".time_emb_proj", temb, cout)
        kb.norm(p + ".norm2", cout)
        kb.conv(p + ".conv2", cout, cout, 3)
        if cin != cout:
            kb.conv(p + ".conv_shortcut", cin, cout, 1)

    def transformer(p, c):
        kb.norm(p + ".norm", c)
        for proj in ("proj_in", "proj_out"):
            if cfg["use_linear_projection"]:
                kb.linear(p + "." + proj, c, c)
            else:
                kb.conv(p + "." + proj, c, c, 1)
        b = p + ".transformer_blocks.0"
        for i in (1, 2, 3):
            kb.norm("%s.norm%d" % (b, i), c)
        for attn, kv in (("attn1", c), ("attn2", ctx)):
            kb.linear("%s.%s.to_q" % (b, attn), c, c, bias=False)
            kb.linear("%s.%s.to_k" % (b, attn), kv, c, bias=False)
            kb.linear("%s.%s.to_v" % (b, attn), kv, c, bias=False)
            kb.linear("%s.%s.to_out.0" % (b, attn), c, c)
        kb.linear(b + ".ff.net.0.proj", c, 2 * ff * c)
        kb.linear(b + ".ff.net.2", ff * c, c)

    kb.linear("time_embedding.linear_1", ch[0], temb)
    kb.linear("time_embedding.linear_2", temb, temb)
    kb.conv("conv_in", cfg["in_channels"], ch[0], 3)
    stack = [ch[0]]
    cur = ch[0]
    for i, c in enumerate(ch):
        cross = cfg["down_block_types"][i] == ref_models.CROSS_DOWN
        for j in range(lpb):
            resnet("down_blocks.%d.resnets.%d" % (i, j), cur, c)
            cur = c
            if cross:
                transformer("down_blocks.%d.attentions.%d" % (i, j), c)
            stack.append(c)
        if i != n - 1:
            kb.conv("down_blocks.%d.downsamplers.0.conv" % i, c, c, 3)
            stack.append(c)
    resnet("mid_block.resnets.0", cur, cur)
    transformer("mid_block.attentions.0", cur)
    resnet("mid_block.resnets.1", cur, cur)
    for i, c in enumerate(reversed(ch)):
        cross = cfg["up_block_types"][i] == ref_models.CROSS_UP
        for j in range(lpb + 1):
            resnet("up_blocks.%d.resnets.%d" % (i, j), cur + stack.pop(), c)
            cur = c
            if cross:
                transformer("up_blocks.%d.attentions.%d" % (i, j), c)
        if i != n - 1:
            kb.conv("up_blocks.%d.upsamplers.0.conv" % i, c, c, 3)
    assert not stack
    kb.norm("conv_norm_out", ch[0])
    kb.conv("conv_out", ch[0], cfg["out_channels"], 3)
    return kb.shapes


def expected_taesd_keys(cfg):
    kb = KeyBook()

    def block(p, c):
        for k in (0, 2, 4):
            kb.conv("%s.conv.%d" % (p, k), c, c, 3)

    idx = 0
    enc = cfg["encoder_block_out_channels"]
    for i, nb in enumerate(cfg["num_encoder_blocks"]):
        cin = cfg["in_channels"] if i == 0 else enc[i]
        kb.conv("encoder.layers.%d" % idx, cin, enc[i], 3, bias=(i == 0))
        idx += 1
        for _ in range(nb):
            block("encoder.layers.%d" % idx, enc[i])
            idx += 1
    kb.conv("encoder.layers.%d" % idx, enc[-1], cfg["latent_channels"], 3)

    dec = cfg["decoder_block_out_channels"]
    kb.conv("decoder.layers.0", cfg["latent_channels"], dec[0], 3)
    idx = 2                                     # index 1 is the ReLU
    last = len(dec) - 1
    for i, nb in enumerate(cfg["num_decoder_blocks"]):
        for _ in range(nb):
            block("decoder.layers.%d" % idx, dec[i])
            idx += 1
        if i != last:
            idx += 1                            # the nearest upsample
        cout = cfg["out_channels"] if i == last else dec[i]
        kb.conv("decoder.layers.%d" % idx, dec[i], cout, 3, bias=(i == last))
        idx += 1
    return kb.shapes


# Key names known from diffusers checkpoints; a cheap guard against a systematic
# naming slip that both derivations above could share.
MUST_HAVE = {
    "unet-sd15-tiny": [
        "down_blocks.0.attentions.0.transformer_blocks.0.attn2.to_k.weight",
        "down_blocks.0.attentions.0.proj_in.weight",
        "time_embedding.linear_1.weight",
        "up_blocks.0.upsamplers.0.conv.weight",
        "up_blocks.0.resnets.0.conv_shortcut.weight",
        "down_blocks.1.resnets.0.conv_shortcut.weight",
    ],
    "unet-turbo-tiny": [
        "down_blocks.1.attentions.1.transformer_blocks.0.ff.net.0.proj.weight",
        "mid_block.attentions.0.transformer_blocks.0.attn1.to_out.0.bias",
        "up_blocks.1.attentions.2.proj_out.weight",
    ],
    "taesd-tiny": [
        "encoder.layers.0.weight",
        "encoder.layers.1.conv.0.weight",
        "decoder.layers.2.conv.4.bias",
    ],
}
MUST_NOT_HAVE = {
    "unet-sd15-tiny": ["mid_block.resnets.1.conv_shortcut.weight",
                       "up_blocks.1.upsamplers.0.conv.weight",
                       "down_blocks.1.attentions.0.norm.weight",
                       "down_blocks.1.downsamplers.0.conv.weight"],
    "unet-turbo-tiny": ["mid_block.resnets.0.conv_shortcut.weight"],
    "taesd-tiny": ["encoder.layers.2.bias", "decoder.layers.1.weight",
                   "encoder.layers.1.skip.weight"],
}
# Every diffusers UNet key in these families ends in one of these; anything
# else (e.g. a stray 'linear_proj' buffer) would not be in a checkpoint.
KEY_PATTERN = re.compile(r"^[a-z_0-9.]+\.(weight|bias)$")


def check_keys(name, model, expected):
    sd = model.state_dict()
    got = {k: tuple(v.shape) for k, v in sd.items()}
    missing = sorted(set(expected) - set(got))
    extra = sorted(set(got) - set(expected))
    assert not missing and not extra, (name, missing[:5], extra[:5])
    wrong = [(k, got[k], expected[k]) for k in got if got[k] != expected[k]]
    assert not wrong, (name, wrong[:5])
    for k in got:
        assert KEY_PATTERN.match(k), (name, k)
    for k in MUST_HAVE[name]:
        assert k in got, (name, "missing", k)
    for k in MUST_NOT_HAVE[name]:
        assert k not in got, (name, "unexpected", k)
    # Weights must be parameters, not buffers, so nothing else sneaks in.
    assert set(dict(model.named_parameters())) == set(got), name


# --------------------------------------------------------------------------
# Weights, inputs, running
# --------------------------------------------------------------------------

NORM_TYPES = (torch.nn.GroupNorm, torch.nn.LayerNorm)


def randomize(model, seed):
    """Fill every tensor by the docs/models.md rule, in sorted key order so the
    values do not depend on the order modules are declared in."""
    kinds = {}
    for mname, module in model.named_modules():
        for pname, _ in module.named_parameters(recurse=False):
            key = "%s.%s" % (mname, pname) if mname else pname
            is_norm = isinstance(module, NORM_TYPES)
            if pname == "weight":
                kinds[key] = "norm_scale" if is_norm else "weight"
            elif pname == "bias":
                kinds[key] = "norm_shift" if is_norm else "bias"
            else:
                raise AssertionError("unexpected parameter %s" % key)
    gen = torch.Generator().manual_seed(seed)
    params = dict(model.named_parameters())
    with torch.no_grad():
        for key in sorted(params):
            p = params[key]
            z = torch.randn(p.shape, generator=gen, dtype=torch.float32)
            kind = kinds[key]
            if kind == "weight":
                p.copy_(WEIGHT_STD * z)
            elif kind == "bias":
                p.copy_(BIAS_STD * z)
            elif kind == "norm_scale":
                p.copy_(1 + NORM_SCALE_STD * z)
            else:
                p.copy_(NORM_SHIFT_STD * z)
    return kinds


class TapRecorder:
    def __init__(self):
        self.taps = {}

    def __call__(self, name, tensor):
        assert name not in self.taps, "tap %s recorded twice" % name
        self.taps[name] = tensor.detach().clone()


def unet_inputs(cfg, seed):
    gen = torch.Generator().manual_seed(seed)
    sample = torch.randn((UNET_BATCH, cfg["in_channels"]) + UNET_SAMPLE_HW,
                         generator=gen)
    context = torch.randn(UNET_BATCH, UNET_CONTEXT_LEN,
                          cfg["cross_attention_dim"], generator=gen)
    return sample, context


def taesd_image(seed):
    """A smooth colour pattern plus noise, clipped to [-1, 1]; smooth parts
    keep the convolutions' borders meaningful, noise breaks symmetries."""
    gen = torch.Generator().manual_seed(seed)
    n, c, h, w = TAESD_IMAGE_SHAPE
    y = torch.linspace(0, 1, h)[:, None]
    x = torch.linspace(0, 1, w)[None, :]
    chans = []
    for k in range(c):
        phase = 2.0 * k
        chans.append(0.7 * torch.sin(2 * np.pi * (1.3 * x + 0.6 * y) + phase)
                     + 0.3 * torch.cos(2 * np.pi * (0.4 * x - 1.1 * y) * (k + 1)))
    img = torch.stack(chans)[None].expand(n, c, h, w)
    img = img + 0.15 * torch.randn(n, c, h, w, generator=gen)
    return img.clamp(-1, 1).contiguous()


def assert_meaningful(name, arr):
    assert np.all(np.isfinite(arr)), "%s has non-finite values" % name
    assert np.abs(arr).max() > MIN_MAGNITUDE, "%s is trivially zero" % name
    # A constant tensor would hide layout mistakes.
    assert arr.std() > MIN_MAGNITUDE, "%s is constant" % name


def max_diff(a, b):
    return float((a.double() - b.double()).abs().max())


def scaled_tolerance(ref):
    return TOLERANCE * max(1.0, float(ref.abs().max()))


def check_float64(name, run32, run64_fn):
    """|float32 - float64| per tensor of one run, checked against the
    scaled tolerance; returns {tap: max abs diff}."""
    out64, taps64 = run64_fn()
    out32, taps32 = run32
    diffs = {}
    for k, ref in list(taps32.items()) + [("<output>", out32)]:
        other = out64 if k == "<output>" else taps64[k]
        diffs[k] = max_diff(ref, other)
        assert diffs[k] < scaled_tolerance(other), (
            name, k, "float32 is off float64 by", diffs[k])
    return diffs


# --------------------------------------------------------------------------
# Writing
# --------------------------------------------------------------------------

def save_npy(path, tensor):
    arr = np.ascontiguousarray(
        tensor.detach().cpu().numpy() if torch.is_tensor(tensor) else tensor,
        dtype="<f4")
    np.save(path, arr, allow_pickle=False)
    back = np.load(path, allow_pickle=False)
    assert back.dtype == np.dtype("<f4") and back.flags.c_contiguous
    assert np.array_equal(back, arr), path
    return arr


def tap_file(name):
    return "tap-%s.npy" % name


def write_model_files(outdir, cfg, model):
    os.makedirs(outdir, exist_ok=True)
    with open(os.path.join(outdir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")
    with open(os.path.join(outdir, "config.json")) as f:
        assert json.load(f) == cfg
    sd = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    path = os.path.join(outdir, WEIGHTS_FILE)
    safetensors_io.write(path, sd, SAFETENSORS_METADATA)
    back, meta = safetensors_io.read(path)
    assert meta == SAFETENSORS_METADATA, meta
    assert set(back) == set(sd)
    for k in sd:
        # Bitwise, not approximately: the file is the model.
        assert back[k].shape == sd[k].shape, k
        assert back[k].tobytes() == np.ascontiguousarray(sd[k]).tobytes(), k
    return back


def reload(cls, cfg, tensors):
    """A fresh model from the written file's tensors (strict)."""
    m = cls(cfg)
    m.load_state_dict({k: torch.from_numpy(v) for k, v in tensors.items()},
                      strict=True)
    return m.eval()


# --------------------------------------------------------------------------
# The three fixtures
# --------------------------------------------------------------------------

def make_unet(name, summary):
    cfg = CONFIGS[name]
    seeds = SEEDS[name]
    model = ref_models.UNetModel(cfg).eval()
    check_keys(name, model, expected_unet_keys(cfg))
    kinds = randomize(model, seeds["weights"])
    t = TIMESTEPS[name]
    sample, context = unet_inputs(cfg, seeds["inputs"])

    rec = TapRecorder()
    with torch.no_grad():
        out = model(sample, t, context, tap=rec)
    expected_taps = (["time_emb", "conv_in"]
                     + ["down_blocks.%d" % i
                        for i in range(len(cfg["block_out_channels"]))]
                     + ["mid_block"]
                     + ["up_blocks.%d" % i
                        for i in range(len(cfg["block_out_channels"]))]
                     + ["out"])
    assert list(rec.taps) == expected_taps, list(rec.taps)
    assert out.shape == sample.shape[:1] + (cfg["out_channels"],) + sample.shape[2:]
    assert rec.taps["time_emb"].shape == (
        UNET_BATCH, ref_models.TIME_EMBED_MULT * cfg["block_out_channels"][0])
    for k, v in rec.taps.items():
        assert_meaningful("%s tap %s" % (name, k), v.numpy())

    with torch.no_grad():
        # Cross-attention must be wired: another context changes the output.
        other_ctx = unet_inputs(cfg, seeds["inputs"] + 1000)[1]
        ctx_effect = max_diff(out, model(sample, t, other_ctx))
        # So must the timestep (through every resnet's time_emb_proj).
        t_effect = max_diff(out, model(sample, t + 1, context))
        # The batch items must not mix (attention is per item); mixing
        # would show as O(1) changes, BLAS blocking only as rounding.
        solo = model(sample[1:], t, context[1:])
        batch_mix = max_diff(out[1:], solo)
    assert ctx_effect > MIN_EFFECT, (name, "context has no effect", ctx_effect)
    assert t_effect > MIN_EFFECT, (name, "timestep has no effect", t_effect)
    assert batch_mix < scaled_tolerance(out), (name, "batch items mix",
                                               batch_mix)

    def run64():
        m64 = copy.deepcopy(model).double()
        r = TapRecorder()
        with torch.no_grad():
            o = m64(sample.double(), t, context.double(), tap=r)
        return o, r.taps
    f64 = check_float64(name, (out, rec.taps), run64)

    outdir = os.path.join(DATA_DIR, name)
    tensors = write_model_files(outdir, cfg, model)
    with torch.no_grad():
        again = reload(ref_models.UNetModel, cfg, tensors)(sample, t, context)
    assert torch.equal(again, out), name + ": reloaded weights differ"

    save_npy(os.path.join(outdir, "sample.npy"), sample)
    save_npy(os.path.join(outdir, "encoder_hidden_states.npy"), context)
    with open(os.path.join(outdir, "timestep.txt"), "w") as f:
        f.write("%d\n" % t)
    save_npy(os.path.join(outdir, "out.npy"), out)
    for k, v in rec.taps.items():
        save_npy(os.path.join(outdir, tap_file(k)), v)

    summary[name] = {
        "seeds": seeds, "timestep": t,
        "n_keys": len(kinds), "n_params": sum(p.numel() for p in model.parameters()),
        "taps": {k: (tuple(v.shape), float(v.abs().max()), f64[k])
                 for k, v in rec.taps.items()},
        "float64_diff": f64["out"],
        "ctx_effect": ctx_effect, "t_effect": t_effect,
    }
    return model


def make_sinusoid(summary):
    """timestep-embedding.npy: the raw sinusoid, shape [SINUSOID_DIM]."""
    cfg = CONFIGS["unet-sd15-tiny"]
    t = torch.tensor([float(SINUSOID_T)])
    emb = ref_models.get_timestep_embedding(
        t, SINUSOID_DIM, cfg["flip_sin_to_cos"], cfg["freq_shift"])[0]
    exact = ref_models.get_timestep_embedding(
        t, SINUSOID_DIM, cfg["flip_sin_to_cos"], cfg["freq_shift"],
        dtype=torch.float64)[0]
    # Spot-check the layout independently: with flip the first half is cos.
    half = SINUSOID_DIM // 2
    # freq_0 = 1, so entry 0 is cos(t) and entry `half` is sin(t).
    assert abs(float(emb[0]) - np.cos(SINUSOID_T)) < TOLERANCE
    assert abs(float(emb[half]) - np.sin(SINUSOID_T)) < TOLERANCE
    f_last = np.exp(-np.log(ref_models.MAX_PERIOD) * (half - 1) / half)
    assert abs(float(emb[half - 1]) - np.cos(SINUSOID_T * f_last)) < TOLERANCE
    save_npy(os.path.join(DATA_DIR, "unet-sd15-tiny", "timestep-embedding.npy"),
             emb)
    summary["sinusoid"] = {"float64_diff": max_diff(emb, exact)}


def make_taesd(summary):
    name = "taesd-tiny"
    cfg = CONFIGS[name]
    seeds = SEEDS[name]
    model = ref_models.TaesdModel(cfg).eval()
    check_keys(name, model, expected_taesd_keys(cfg))
    kinds = randomize(model, seeds["weights"])
    image = taesd_image(seeds["inputs"])
    assert image.shape == TAESD_IMAGE_SHAPE
    assert float(image.min()) >= -1 and float(image.max()) <= 1

    enc_rec, dec_rec = TapRecorder(), TapRecorder()
    with torch.no_grad():
        latents = model.encode(image, tap=enc_rec)
        decoded = model.decode(latents, tap=dec_rec)
    n_enc, n_dec = len(model.encoder.layers), len(model.decoder.layers)
    assert list(enc_rec.taps) == (["encoder.layers.%d" % i for i in range(n_enc)]
                                  + ["latents"])
    assert list(dec_rec.taps) == (["decoder.layers.%d" % i for i in range(n_dec)]
                                  + ["image"])
    down = 2 ** (len(cfg["encoder_block_out_channels"]) - 1)
    assert latents.shape == (1, cfg["latent_channels"],
                             TAESD_IMAGE_SHAPE[2] // down,
                             TAESD_IMAGE_SHAPE[3] // down)
    assert decoded.shape == TAESD_IMAGE_SHAPE
    taps = dict(enc_rec.taps, **dec_rec.taps)
    for k, v in taps.items():
        assert_meaningful("%s tap %s" % (name, k), v.numpy())

    def run64():
        m64 = copy.deepcopy(model).double()
        r = TapRecorder()
        with torch.no_grad():
            m64.encode(image.double(), tap=r)
            # Decode the float32 latents, as the fixture does, so the
            # decoder's error is measured on its own.
            img = m64.decode(latents.double(), tap=r)
        return img, r.taps
    f64 = check_float64(name, (decoded, taps), run64)

    outdir = os.path.join(DATA_DIR, name)
    tensors = write_model_files(outdir, cfg, model)
    with torch.no_grad():
        m2 = reload(ref_models.TaesdModel, cfg, tensors)
        assert torch.equal(m2.encode(image), latents)
        assert torch.equal(m2.decode(latents), decoded)

    save_npy(os.path.join(outdir, "image.npy"), image)
    save_npy(os.path.join(outdir, "latents.npy"), latents)
    save_npy(os.path.join(outdir, "decoded.npy"), decoded)
    for k, v in taps.items():
        save_npy(os.path.join(outdir, tap_file(k)), v)

    summary[name] = {
        "seeds": seeds, "n_keys": len(kinds),
        "n_params": sum(p.numel() for p in model.parameters()),
        "taps": {k: (tuple(v.shape), float(v.abs().max()), f64[k])
                 for k, v in taps.items()},
        "float64_diff": max(f64["latents"], f64["image"]),
    }


# --------------------------------------------------------------------------
# README
# --------------------------------------------------------------------------

README_HEAD = """\
Fixture data for the kernel tests, written by tests/reference/*.py.
Generated by:  python3 tests/reference/make_fixtures.py
with Debian's /usr/bin/python3 {python}, python3-torch {torch_pkg}
(torch.__version__ {torch}) and python3-numpy {numpy}, CPU, one thread; no
diffusers, no safetensors package.  (A pyenv python3 earlier in PATH has no
torch: run /usr/bin/python3 explicitly there.)  Do not edit by hand: change the
script and re-run it.  Re-running with the same torch version gives the
same bytes.

The models are tiny random-weight versions of diffusers' AutoencoderTiny
(TAESD) and UNet2DConditionModel, computed by the independent PyTorch
re-implementation in tests/reference/ref_models.py (float32).  Weights:
N(0, {ws}) for weights, N(0, {bs}) for biases, 1 + N(0, {ns}) for
GroupNorm/LayerNorm scales, N(0, {nb}) for their shifts, drawn from
torch.Generator().manual_seed(<weights seed>) in sorted key order.

Common conventions
- *.npy: float32 little-endian ('<f4'), C order, NumPy format 1.0.
- diffusion_pytorch_model.safetensors: F32 only, keys exactly diffusers'
  state_dict keys, entries and data in sorted key order (byte order, so
  "decoder.layers.10" comes before "decoder.layers.2"; look keys up by
  name, never by position), header padded with spaces to a multiple of 8,
  __metadata__ {{"format": "pt"}}.
- config.json: diffusers-style; includes every constructor key of the
  class at its (only supported) value, as real downloaded configs do.
- Images/latents/taps are NCHW; "time_emb" is [N, 4*block_out_channels[0]].
- tap-<name>.npy: intermediate outputs, names as in docs/models.md.  UNet
  "down_blocks.i"/"up_blocks.i" include the block's down/upsampler.  TAESD
  "encoder.layers.i"/"decoder.layers.i" exist for every index, including
  ReLU and Upsample layers; decoder taps are before the final x*2-1, and
  decoder.layers.0 is taken after the tanh(x/3)*3 clamp.
- Tolerance: compare with |c - ref| <= {tol} * max(1, max|ref|) per
  tensor.  A plain {tol} absolute cannot hold for the UNet's up-block taps
  (|x| reaches thousands with these weights), where float32 itself is off
  by ~1e-3; "f32-f64" below is the max |diff| between the float32 fixture
  and a float64 re-run of the same model, i.e. the reference's own error.
- python3 tests/reference/check_sensitivity.py re-runs the reference with
  plausible porting mistakes (attention scale, head split, GEGLU halves,
  tanh gelu, concat order, sinusoid flip/shift, TAESD rescale and clamp)
  and asserts each one moves some tap past that tolerance.  Epsilon slips
  (GroupNorm 1e-6 vs 1e-5, LayerNorm 1e-5 vs 1e-6) stay below it: the
  fixtures cannot arbitrate those, read the code.
"""


def debian_version(package):
    """The Debian package version (torch.__version__ of Debian's build says
    1.13.0a0 whatever the package is)."""
    try:
        return subprocess.run(["dpkg-query", "-W", "-f=${Version}", package],
                              capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def tap_rows(taps):
    rows = ["  %-26s %-16s %10s %10s" % ("file", "shape", "max|x|",
                                         "f32-f64")]
    for k, (shape, mx, d64) in taps.items():
        rows.append("  %-26s %-16s %10.3g %10.2e"
                    % (tap_file(k), "[" + ",".join(map(str, shape)) + "]",
                       mx, d64))
    return rows


def write_readme(summary):
    lines = [README_HEAD.format(
        python=platform.python_version(), torch_pkg=debian_version("python3-torch"),
        torch=torch.__version__, numpy=np.__version__, ws=WEIGHT_STD,
        bs=BIAS_STD, ns=NORM_SCALE_STD, nb=NORM_SHIFT_STD, tol=TOLERANCE)]

    lines.append("unet-sd15-tiny/  SD1.5 family (use_linear_projection false: "
                 "proj_in/proj_out are 1x1 convs)")
    lines.append("unet-turbo-tiny/ SD2/Turbo family (use_linear_projection "
                 "true: Linear proj_in/proj_out, per-block head counts)")
    for name in ("unet-sd15-tiny", "unet-turbo-tiny"):
        s = summary[name]
        cfg = CONFIGS[name]
        lines.append("")
        lines.append("%s: seeds weights=%d inputs=%d; %d tensors, %d "
                     "parameters; float64 diff %.2e"
                     % (name, s["seeds"]["weights"], s["seeds"]["inputs"],
                        s["n_keys"], s["n_params"], s["float64_diff"]))
        lines.append("  config.json, diffusion_pytorch_model.safetensors")
        lines.append("  sample.npy [%d,%d,%d,%d]    N(0,1)"
                     % ((UNET_BATCH, cfg["in_channels"]) + UNET_SAMPLE_HW))
        lines.append("  encoder_hidden_states.npy [%d,%d,%d]  N(0,1)"
                     % (UNET_BATCH, UNET_CONTEXT_LEN, cfg["cross_attention_dim"]))
        lines.append("  timestep.txt   %d (one number, shared by the batch)"
                     % s["timestep"])
        lines.append("  out.npy        UNet output (same data as tap-out.npy)")
        lines.extend(tap_rows(s["taps"]))
    lines.append("  unet-sd15-tiny/timestep-embedding.npy [%d]: the raw "
                 "sinusoid for t=%d, dim %d, flip_sin_to_cos true, freq_shift 0"
                 % (SINUSOID_DIM, SINUSOID_T, SINUSOID_DIM))
    lines.append("    (diffusers computes it in float32; float64 diff %.2e)"
                 % summary["sinusoid"]["float64_diff"])

    s = summary["taesd-tiny"]
    lines.append("")
    lines.append("taesd-tiny/  AutoencoderTiny; seeds weights=%d inputs=%d; %d "
                 "tensors, %d parameters; float64 diff %.2e"
                 % (s["seeds"]["weights"], s["seeds"]["inputs"], s["n_keys"],
                    s["n_params"], s["float64_diff"]))
    lines.append("  config.json, diffusion_pytorch_model.safetensors")
    lines.append("  image.npy [1,3,24,40]  smooth pattern + N(0,0.15) noise, "
                 "clipped to [-1,1]")
    lines.append("  latents.npy    encode(image)   (same data as tap-latents.npy)")
    lines.append("  decoded.npy    decode(latents.npy), in the [-1,1] convention "
                 "(not clamped; same data as tap-image.npy)")
    lines.extend(tap_rows(s["taps"]))
    path = os.path.join(DATA_DIR, "README")
    with open(path) as f:
        old = f.read()
    # The other fixture scripts keep sections of their own, each opened by a
    # line "=== <dir>/ (<script>) ===": they stay as they are.
    later = old.find("\n=== ")
    tail = old[later:] if later >= 0 else ""
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n" + tail)


def main():
    # One thread: reductions then run in a fixed order, so re-running gives
    # identical bytes.
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    for name in CONFIGS:
        d = os.path.join(DATA_DIR, name)
        if os.path.isdir(d):
            shutil.rmtree(d)   # stale taps from an older layout must go
    summary = {}
    make_unet("unet-sd15-tiny", summary)
    make_unet("unet-turbo-tiny", summary)
    make_sinusoid(summary)
    make_taesd(summary)
    write_readme(summary)

    total = 0
    for name in CONFIGS:
        for root, _, files in os.walk(os.path.join(DATA_DIR, name)):
            total += sum(os.path.getsize(os.path.join(root, f)) for f in files)
    assert total < MAX_TOTAL_BYTES, "fixtures take %d bytes" % total
    for name in ("unet-sd15-tiny", "unet-turbo-tiny", "taesd-tiny"):
        s = summary[name]
        print("%-16s %4d tensors %8d params  float64 diff %.2e"
              % (name, s["n_keys"], s["n_params"], s["float64_diff"]))
    print("sinusoid float64 diff %.2e" % summary["sinusoid"]["float64_diff"])
    print("total %d bytes in %s" % (total, ", ".join(CONFIGS)))


if __name__ == "__main__":
    main()
