#!/usr/bin/env python3
"""Write the full-size UNet fixtures under tests/data/scale/ with diffusers'
own UNet2DConditionModel in float64:

    PYTHONPATH=DIFFUSERS/src:HUB/src /usr/bin/python3 \\
        tests/reference/make_scale_fixtures.py [sd-turbo] [sd15]

(DIFFUSERS and HUB: checkouts of diffusers at commit aafed3f8, the newest
that imports on Debian's torch 1.13, and huggingface_hub v0.36.2; diffusers
imports the safetensors package, for which a pure-Python stand-in with
safe_open, load_file and save_file is enough.)

For the SD-Turbo (SD 2.x) and SD1.5 UNet architectures it builds the model
from the config, fills every tensor with the seeded weights of seeded.py
(the values pp_weights_new_seeded gives in C, rounded to float32 and then
held in float64), runs one forward at a 64x64 latent (512x512 pixels) with
77 seeded text tokens, and writes into tests/data/scale/<model>/:

    config.json   diffusers' own save_config: every constructor key
    weights.txt   every state_dict key with its seeded kind, shape and the
                  float32 bits of its first and last element
    scale.json    seeds, timestep, input keys and shapes, output statistics
    out.npy       the UNet output, float32 [1, 4, 64, 64]

and its section of tests/data/README (between README_BEGIN and README_END,
replaced in place, appended when absent).  No weights and no inputs are
stored: both sides generate them.  One model is resident at a time (~7 GB
of float64 weights each).  With --readme only the README section is
rewritten, from the scale.json files.
"""

import gc
import json
import os
import platform
import sys
import time

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import seeded  # noqa: E402

from diffusers import UNet2DConditionModel  # noqa: E402
import diffusers  # noqa: E402

SCALE_DIR = os.path.normpath(os.path.join(HERE, "..", "data", "scale"))
README = os.path.normpath(os.path.join(HERE, "..", "data", "README"))
README_BEGIN = "=== scale/ (make_scale_fixtures.py) ==="
README_END = "=== end of scale/ ==="

LATENT_HW = 64              # 512x512 pixels
TEXT_TOKENS = 77
BATCH = 1
SAMPLE_KEY = "sample"
CONTEXT_KEY = "encoder_hidden_states"
# The C test's bound on max|c - ref|, relative to max|ref|.
TOLERANCE = 1e-4
TORCH_THREADS = 2
FLOAT32_BYTES = 4

DOWN = ["CrossAttnDownBlock2D", "CrossAttnDownBlock2D",
        "CrossAttnDownBlock2D", "DownBlock2D"]
UP = ["UpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D",
      "CrossAttnUpBlock2D"]
COMMON = {
    "act_fn": "silu",
    "block_out_channels": [320, 640, 1280, 1280],
    "center_input_sample": False,
    "down_block_types": DOWN,
    "downsample_padding": 1,
    "flip_sin_to_cos": True,
    "freq_shift": 0,
    "in_channels": 4,
    "layers_per_block": 2,
    "mid_block_scale_factor": 1,
    "norm_eps": 1e-05,
    "norm_num_groups": 32,
    "out_channels": 4,
    "up_block_types": UP,
}

MODELS = {
    # stabilityai/sd-turbo unet/config.json (the SD 2.1 architecture).
    # sample_size and upcast_attention do not change a float64 forward.
    "sd-turbo": {
        "config": dict(COMMON, attention_head_dim=[5, 10, 20, 20],
                       cross_attention_dim=1024, use_linear_projection=True,
                       sample_size=64, upcast_attention=None,
                       transformer_layers_per_block=1),
        "seeds": {"weights": 5101, "inputs": 5102},
        "timestep": 999,
    },
    # runwayml/stable-diffusion-v1-5 unet/config.json.
    "sd15": {
        "config": dict(COMMON, attention_head_dim=8, cross_attention_dim=768,
                       sample_size=64),
        "seeds": {"weights": 5201, "inputs": 5202},
        "timestep": 500,
    },
}

# Values the C generator gave (pp_weights_new_seeded (7), float32 bits of
# elements 0, 1, 2): if seeded.py drifts from the C definition, this fails
# before any model is built.  test-scale.c checks the same values in C.
GENERATOR_SEED = 7
GENERATOR_CHECKS = [
    ("conv_in.weight", (320, 4, 3, 3), "weight",
     ["0xbe0d18d5", "0x3dcde17c", "0xbe5de35e"]),
    ("conv_in.bias", (320,), "bias",
     ["0xba914f20", "0xbd64a119", "0x3d7fa44f"]),
    ("conv_norm_out.weight", (320,), "norm_scale",
     ["0x3f63b6e5", "0x3f77f9ae", "0x3f683ea3"]),
]
INPUT_CHECK = (SAMPLE_KEY, ["0x3f922704", "0x3f4b7883", "0xbf270439"])

NORM_TYPES = (torch.nn.GroupNorm, torch.nn.LayerNorm)


def check_generator():
    for key, shape, kind, want in GENERATOR_CHECKS:
        got = seeded.weight(GENERATOR_SEED, key, shape, kind).ravel()[:3]
        got = [seeded.bits_hex(v) for v in got]
        assert got == want, (key, got, want)
        assert seeded.kind_of(key, shape) == kind, key
    key, want = INPUT_CHECK
    got = [seeded.bits_hex(v)
           for v in seeded.input_tensor(GENERATOR_SEED, key, (3,))]
    assert got == want, (key, got, want)


def module_kinds(model):
    """Key -> kind from the module types, to check seeded.kind_of."""
    kinds = {}
    for mname, module in model.named_modules():
        for pname, p in module.named_parameters(recurse=False):
            key = "%s.%s" % (mname, pname) if mname else pname
            if isinstance(module, NORM_TYPES):
                kinds[key] = "norm_scale" if pname == "weight" else "norm_shift"
            elif pname == "bias":
                kinds[key] = "bias"
            else:
                assert p.dim() >= 2, key
                kinds[key] = "weight"
    return kinds


def fill(model, seed):
    """Seeded weights into every parameter; returns the weights.txt lines."""
    params = dict(model.named_parameters())
    state = model.state_dict()
    # Parameters only: a buffer would be a tensor C never asks for.
    assert set(params) == set(state), sorted(set(state) ^ set(params))[:5]
    by_module = module_kinds(model)
    lines = []
    with torch.no_grad():
        for key in state:
            p = params[key]
            shape = tuple(p.shape)
            kind = seeded.kind_of(key, shape)
            assert kind == by_module[key], (key, kind, by_module[key])
            x = seeded.weight(seed, key, shape, kind)
            p.copy_(torch.from_numpy(x.astype(np.float64)))
            flat = x.reshape(-1)
            lines.append("%s %s %s %s %s" % (
                key, kind, ",".join(str(s) for s in shape),
                seeded.bits_hex(flat[0]), seeded.bits_hex(flat[-1])))
    return lines


def make(name, spec):
    out_dir = os.path.join(SCALE_DIR, name)
    os.makedirs(out_dir, exist_ok=True)
    cfg = spec["config"]
    seeds = spec["seeds"]
    times = {}

    t = time.time()
    torch.set_default_dtype(torch.float64)
    model = UNet2DConditionModel(**cfg).eval()
    torch.set_default_dtype(torch.float32)
    times["build"] = time.time() - t
    assert all(p.dtype == torch.float64 for p in model.parameters())

    t = time.time()
    lines = fill(model, seeds["weights"])
    times["weights"] = time.time() - t
    n_params = sum(p.numel() for p in model.parameters())

    ctx_dim = cfg["cross_attention_dim"]
    sample_shape = (BATCH, cfg["in_channels"], LATENT_HW, LATENT_HW)
    ctx_shape = (BATCH, TEXT_TOKENS, ctx_dim)
    sample = seeded.input_tensor(seeds["inputs"], SAMPLE_KEY, sample_shape)
    ctx = seeded.input_tensor(seeds["inputs"], CONTEXT_KEY, ctx_shape)

    t = time.time()
    with torch.no_grad():
        out = model(torch.from_numpy(sample.astype(np.float64)),
                    spec["timestep"],
                    encoder_hidden_states=torch.from_numpy(
                        ctx.astype(np.float64))).sample
    times["forward"] = time.time() - t
    out = out.numpy()
    assert out.dtype == np.float64 and out.shape == sample_shape
    assert np.all(np.isfinite(out)), name
    max_abs = float(np.max(np.abs(out)))
    # A reference that is nearly zero would hold C to nothing.
    assert max_abs > 0.1 and float(np.std(out)) > 0.01, (name, max_abs)

    model.save_config(out_dir)
    with open(os.path.join(out_dir, "weights.txt"), "w") as f:
        f.write("# %s UNet: seeded weights (tests/reference/seeded.py), "
                "seed %d.\n" % (name, seeds["weights"]))
        f.write("# One line per diffusers state_dict key, in state_dict "
                "order: key kind shape\n# and the float32 bits of elements 0 "
                "and numel - 1.\n")
        f.write("\n".join(lines) + "\n")
    np.save(os.path.join(out_dir, "out.npy"), out.astype("<f4"))
    info = {
        "model": name,
        "weights_seed": seeds["weights"],
        "inputs_seed": seeds["inputs"],
        "timestep": spec["timestep"],
        "sample_key": SAMPLE_KEY,
        "sample_shape": list(sample_shape),
        "encoder_hidden_states_key": CONTEXT_KEY,
        "encoder_hidden_states_shape": list(ctx_shape),
        "tolerance": TOLERANCE,
        "max_abs_out": max_abs,
        "n_tensors": len(lines),
        "n_params": n_params,
        "seconds": {k: round(v, 1) for k, v in times.items()},
    }
    with open(os.path.join(out_dir, "scale.json"), "w") as f:
        json.dump(info, f, indent=2)
        f.write("\n")
    print("%s: %d tensors, %d parameters, max|out| %.4g, build %.0f s, "
          "weights %.0f s, forward %.0f s" % (
              name, len(lines), n_params, max_abs, times["build"],
              times["weights"], times["forward"]), flush=True)
    del model, out
    gc.collect()
    return info


README_TEXT = """\
Full-size UNets against diffusers itself, with no weights file: the
weights and inputs come from a counter-based generator that C
(pp_weights_new_seeded, pp_seeded_fill_input in kernels/io/pp-weights.h)
and Python (tests/reference/seeded.py) compute bit for bit.  For weight
key K (UTF-8), seed S and element index i (C order):
    mix(z)  splitmix64's mixer: z ^= z>>30; z *= 0xBF58476D1CE4E5B9;
            z ^= z>>27; z *= 0x94D049BB133111EB; z ^= z>>31
    base  = FNV-1a-64(K) XOR mix(S)
    z_i   = mix(base + (i + 1) * 0x9E3779B97F4A7C15)   (mod 2^64)
    u_i   = ((z_i >> 40) + 0.5) * 2^-23 - 1            (exact, in (-1, 1))
    x_i   = float32(offset + scale * u_i), computed in float64
  kind        scale              offset   which keys
  weight      sqrt(3/fan_in)     0        ndim >= 2; fan_in = numel/shape[0]
  bias        2^-4               0        other ".bias"
  norm_scale  2^-3               1        ".weight" of a module named *norm*
  norm_shift  2^-4               0        ".bias" of a module named *norm*
  input       sqrt(3)            0        keys "{sample}", "{context}"
The fan-in scale keeps activations O(1..10) through the whole network, so
float32 stays accurate; the power-of-two scales keep offset + scale*u exact.
Generated by:
  PYTHONPATH=DIFFUSERS/src:HUB/src /usr/bin/python3 \\
      tests/reference/make_scale_fixtures.py
with diffusers {diffusers}, torch {torch} ({threads} threads), numpy
{numpy}, Python {python}; the model runs in float64 (diffusers' float32 CPU
run once gave NaN for a tiny model of this family).  Re-running
make_fixtures.py keeps this section.  Each directory holds
config.json (diffusers' save_config: every constructor key), weights.txt
(every state_dict key: kind, shape, bits of the first and last element, so
a C/Python disagreement names its key), scale.json (seeds, timestep, input
shapes, max|out|) and out.npy (float32 [1,4,64,64]).
tests/kernels/models/test-scale.c builds the C UNet from config.json and
pp_weights_new_seeded with weights.txt declared (every key must be asked
for, with the same kind and shape), and holds max|c - ref| <= {tol} *
max|ref|.  The C float32 forward was off by about 1e-5 when these were
written (5e-6 of max|out|, some 20x inside the bound) at 1, 2 and 4 threads.
"""


def readme_rows(infos):
    rows = []
    for info in infos:
        s = info["seconds"]
        rows.append("")
        rows.append("%s/  seeds weights=%d inputs=%d; timestep %d" % (
            info["model"], info["weights_seed"], info["inputs_seed"],
            info["timestep"]))
        rows.append("  %d tensors, %d parameters (%.2f GB as float32)" % (
            info["n_tensors"], info["n_params"],
            info["n_params"] * FLOAT32_BYTES / 1e9))
        rows.append("  sample %s, encoder_hidden_states %s; max|out| %.4g" % (
            ",".join(map(str, info["sample_shape"])).join("[]"),
            ",".join(map(str, info["encoder_hidden_states_shape"])).join("[]"),
            info["max_abs_out"]))
        rows.append("  diffusers: build %.0f s, seeded weights %.0f s, "
                    "float64 forward %.0f s" % (
                        s["build"], s["weights"], s["forward"]))
    return rows


def write_readme(infos):
    with open(README) as f:
        old = f.read()
    body = README_TEXT.format(
        sample=SAMPLE_KEY, context=CONTEXT_KEY,
        diffusers=diffusers.__version__, torch=torch.__version__,
        threads=TORCH_THREADS, numpy=np.__version__,
        python=platform.python_version(), tol=TOLERANCE)
    section = "%s\n%s%s\n%s\n" % (README_BEGIN, body,
                                   "\n".join(readme_rows(infos)), README_END)
    if README_BEGIN in old:
        head, rest = old.split(README_BEGIN, 1)
        assert README_END in rest, "README: %s without %s" % (README_BEGIN,
                                                              README_END)
        tail = rest.split(README_END, 1)[1].lstrip("\n")
    else:
        head, tail = old.rstrip("\n") + "\n\n", ""
    with open(README, "w") as f:
        f.write(head + section + ("\n" + tail if tail else ""))


def main():
    args = sys.argv[1:]
    readme_only = "--readme" in args
    names = [a for a in args if a != "--readme"] or list(MODELS)
    if readme_only:
        names = []
    for n in names:
        assert n in MODELS, "unknown model %s (have %s)" % (n, list(MODELS))
    check_generator()
    torch.set_num_threads(TORCH_THREADS)
    for n in names:
        make(n, MODELS[n])
    infos = []
    for n in MODELS:
        path = os.path.join(SCALE_DIR, n, "scale.json")
        if os.path.exists(path):
            with open(path) as f:
                infos.append(json.load(f))
    write_readme(infos)


if __name__ == "__main__":
    main()
