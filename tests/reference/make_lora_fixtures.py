#!/usr/bin/env python3
"""Write the LoRA fixtures under tests/data/lora/ with diffusers' own LoRA
key handling, in float64:

    ../shared/tools/diffusers-env MIRROR /usr/bin/python3 \\
        tests/reference/make_lora_fixtures.py

Two seeded LoRA files for the tiny SD1.5 UNet of tests/data/unet-sd15-tiny
and the tiny text encoder of tests/data/clip-text/quick-gelu:

  lora-kohya.safetensors  kohya's layout (lora_unet_…, lora_te_…;
                          lora_down, lora_up and an alpha per pair), rank 4:
                          attention projections, a 1x1-conv proj_in, a 3x3
                          resnet conv, the GEGLU projection, a time
                          embedding projection, two text-encoder linears
  lora-peft.safetensors   diffusers' own layout (unet.… and text_encoder.…
                          lora_A / lora_B, no alphas), ranks 2 and 3

The setting "lora-kohya.safetensors:0.8,lora-peft.safetensors:0.5" is fused
as diffusers does: each file's state dict through
StableDiffusionPipeline.lora_state_dict (the kohya conversion and its
network alphas), diffusers' convert_unet_state_dict_to_peft and
get_peft_kwargs (the rank and alpha PEFT gives each module: a file without
alphas takes its most common rank as alpha), then fuse_lora's
W + scale * (alpha / r) * B @ A per module.  PEFT itself (load_lora_weights
and fuse_lora call it) needs transformers, which Debian 12 does not have:
the arithmetic of the fuse is written here, the key handling is
diffusers'.  Writes:

  fused-unet.safetensors, fused-text.safetensors  the changed tensors,
                          fused, float32
  out.npy                 the fused UNet's output on unet-sd15-tiny's
                          inputs (sample.npy, encoder_hidden_states.npy,
                          timestep.txt), float32 of a float64 run
  lora.json               the setting, and which tensors each file changes
"""

import json
import os
import re
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import safetensors_io  # noqa: E402
import seeded  # noqa: E402

from diffusers import UNet2DConditionModel  # noqa: E402
from diffusers.loaders.lora_pipeline import (  # noqa: E402
    StableDiffusionLoraLoaderMixin)
from diffusers.utils import (  # noqa: E402
    convert_state_dict_to_diffusers, convert_state_dict_to_peft,
    convert_unet_state_dict_to_peft)
from diffusers.utils.peft_utils import get_peft_kwargs  # noqa: E402

DATA = os.path.normpath(os.path.join(HERE, "..", "data"))
UNET_DIR = os.path.join(DATA, "unet-sd15-tiny")
TEXT_DIR = os.path.join(DATA, "clip-text", "quick-gelu")
OUT_DIR = os.path.join(DATA, "lora")
SEED = 7301
SCALES = {"lora-kohya.safetensors": 0.8, "lora-peft.safetensors": 0.5}

# (module, rank) per file; the modules are diffusers' names.
KOHYA_UNET = [
    ("down_blocks.0.attentions.0.transformer_blocks.0.attn1.to_q", 4),
    ("down_blocks.0.attentions.0.transformer_blocks.0.attn2.to_k", 4),
    ("down_blocks.0.attentions.0.transformer_blocks.0.attn1.to_out.0", 4),
    ("down_blocks.0.attentions.0.proj_in", 4),
    ("down_blocks.0.resnets.0.conv1", 4),
    ("up_blocks.1.attentions.0.transformer_blocks.0.ff.net.0.proj", 4),
    ("mid_block.resnets.0.time_emb_proj", 4),
]
# diffusers infers the old text-encoder layout from an out_proj pair.
KOHYA_TEXT = [
    ("text_model.encoder.layers.0.self_attn.q_proj", 4),
    ("text_model.encoder.layers.0.self_attn.out_proj", 4),
    ("text_model.encoder.layers.1.mlp.fc1", 4),
]
KOHYA_ALPHA = 2.0
PEFT_UNET = [
    ("down_blocks.0.attentions.0.transformer_blocks.0.attn1.to_q", 2),
    ("mid_block.attentions.0.transformer_blocks.0.attn2.to_v", 2),
    ("up_blocks.0.resnets.1.conv2", 3),
    ("conv_in", 2),
]
PEFT_TEXT = [
    ("text_model.encoder.layers.1.self_attn.v_proj", 2),
]


def read(path):
    tensors = safetensors_io.read(path)[0]
    return {k: v.astype(np.float64) for k, v in tensors.items()}


def pair_shapes(weight_shape, rank):
    """down [r, in, kh, kw] (or [r, in]), up [out, r, 1, 1] (or [out, r])."""
    out = weight_shape[0]
    if len(weight_shape) == 4:
        return (rank,) + tuple(weight_shape[1:]), (out, rank, 1, 1)
    return (rank, weight_shape[1]), (out, rank)


def seeded_pair(key, weight_shape, rank):
    down_shape, up_shape = pair_shapes(weight_shape, rank)
    down = seeded.input_tensor(SEED, key + ".down", down_shape) * 0.3
    up = seeded.input_tensor(SEED, key + ".up", up_shape) * 0.3
    return down.astype(np.float32), up.astype(np.float32)


def kohya_file(unet, text):
    sd = {}
    for prefix, modules, weights in (("lora_unet_", KOHYA_UNET, unet),
                                     ("lora_te_", KOHYA_TEXT, text)):
        for module, rank in modules:
            name = prefix + module.replace(".", "_")
            down, up = seeded_pair(name, weights[module + ".weight"].shape,
                                   rank)
            sd[name + ".lora_down.weight"] = down
            sd[name + ".lora_up.weight"] = up
            sd[name + ".alpha"] = np.array(KOHYA_ALPHA, dtype=np.float32)
    return sd


def peft_file(unet, text):
    sd = {}
    for prefix, modules, weights in (("unet.", PEFT_UNET, unet),
                                     ("text_encoder.", PEFT_TEXT, text)):
        for module, rank in modules:
            name = prefix + module
            down, up = seeded_pair(name, weights[module + ".weight"].shape,
                                   rank)
            sd[name + ".lora_A.weight"] = down
            sd[name + ".lora_B.weight"] = up
    return sd


def pattern_value(patterns, module, default):
    """PEFT's rank_pattern / alpha_pattern lookup: a key matching the end
    of the module name."""
    for key, value in patterns.items():
        if re.match(r"(.*\.)?%s$" % re.escape(key), module):
            return value
    return default


def peft_modules(state_dict, network_alphas, prefix):
    """module -> (A, B, scaling) as diffusers hands them to PEFT."""
    sd = {k[len(prefix) + 1:]: v for k, v in state_dict.items()
          if k.startswith(prefix + ".")}
    if not sd:
        return {}
    alphas = None
    if network_alphas:
        alphas = {k[len(prefix) + 1:]: v for k, v in network_alphas.items()
                  if k.startswith(prefix + ".")}
    if prefix == "unet":
        sd = convert_unet_state_dict_to_peft(sd)
    else:
        # load_lora_into_text_encoder's conversion
        sd = convert_state_dict_to_peft(convert_state_dict_to_diffusers(sd))
    rank = {k: v.shape[1] for k, v in sd.items() if "lora_B" in k}
    kw = get_peft_kwargs(rank, alphas, sd, is_unet=prefix == "unet")
    out = {}
    for module in kw["target_modules"]:
        a = sd[module + ".lora_A.weight"].double()
        b = sd[module + ".lora_B.weight"].double()
        r = pattern_value(kw["rank_pattern"], module, kw["r"])
        alpha = pattern_value(kw["alpha_pattern"], module, kw["lora_alpha"])
        assert r == a.shape[0], (module, r, a.shape)
        out[module] = (a, b, float(alpha) / r)
    return out


def fuse(weights, modules, scale, changed):
    for module, (a, b, scaling) in modules.items():
        key = module + ".weight"
        w = weights[key]
        delta = (b.reshape(b.shape[0], -1) @ a.reshape(a.shape[0], -1))
        weights[key] = w + scale * scaling * delta.numpy().reshape(w.shape)
        changed.add(key)


def main():
    os.makedirs(OUT_DIR, exist_ok=True)
    unet_w = read(os.path.join(UNET_DIR, "diffusion_pytorch_model"
                               ".safetensors"))
    text_w = read(os.path.join(TEXT_DIR, "model.safetensors"))
    files = {"lora-kohya.safetensors": kohya_file(unet_w, text_w),
             "lora-peft.safetensors": peft_file(unet_w, text_w)}
    changed = {"unet": set(), "text_encoder": set()}
    info = {"setting": ",".join("%s:%g" % (f, s) for f, s in SCALES.items()),
            "files": {}}
    for name, sd in files.items():
        safetensors_io.write(os.path.join(OUT_DIR, name), sd)
        state_dict, alphas = StableDiffusionLoraLoaderMixin.lora_state_dict(
            {k: torch.from_numpy(v) for k, v in sd.items()})
        per = {}
        for prefix, weights in (("unet", unet_w), ("text_encoder", text_w)):
            mods = peft_modules(state_dict, alphas, prefix)
            fuse(weights, mods, SCALES[name], changed[prefix])
            per[prefix] = {m: round(v[2], 6) for m, v in sorted(mods.items())}
        info["files"][name] = per
    for prefix, fname, weights in (("unet", "fused-unet.safetensors", unet_w),
                                   ("text_encoder", "fused-text.safetensors",
                                    text_w)):
        safetensors_io.write(os.path.join(OUT_DIR, fname),
                             {k: weights[k].astype(np.float32)
                              for k in sorted(changed[prefix])})
    # The fused UNet's forward, as the C model runs it after the fuse.
    with open(os.path.join(UNET_DIR, "config.json")) as f:
        cfg = json.load(f)
    torch.set_default_dtype(torch.float64)
    unet = UNet2DConditionModel.from_config(cfg).eval()
    torch.set_default_dtype(torch.float32)
    unet.load_state_dict({k: torch.from_numpy(v) for k, v in unet_w.items()})
    sample = np.load(os.path.join(UNET_DIR, "sample.npy")).astype(np.float64)
    ctx = np.load(os.path.join(UNET_DIR, "encoder_hidden_states.npy"))
    with open(os.path.join(UNET_DIR, "timestep.txt")) as f:
        t = float(f.read())
    with torch.no_grad():
        out = unet(torch.from_numpy(sample), t,
                   encoder_hidden_states=torch.from_numpy(
                       ctx.astype(np.float64))).sample.numpy()
    assert np.all(np.isfinite(out))
    np.save(os.path.join(OUT_DIR, "out.npy"), out.astype("<f4"))
    info["changed"] = {k: sorted(v) for k, v in changed.items()}
    with open(os.path.join(OUT_DIR, "lora.json"), "w") as f:
        json.dump(info, f, indent=2)
        f.write("\n")
    print("lora: %d UNet and %d text-encoder tensors changed; max|out| %.4g"
          % (len(changed["unet"]), len(changed["text_encoder"]),
             np.max(np.abs(out))))


if __name__ == "__main__":
    main()
