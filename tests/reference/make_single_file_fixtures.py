#!/usr/bin/env python3
"""Write the single-file checkpoint fixtures under tests/data/single-file/:
a tiny Stable Diffusion checkpoint in the original (LDM / CompVis) key
layout per family, and what diffusers' own single-file conversion makes of
it, for testing a loader of such checkpoints:

    ../shared/tools/diffusers-env MIRROR /usr/bin/python3 \\
        tests/reference/make_single_file_fixtures.py MIRROR

MIRROR is the directory given to diffusers-env: the checkpoint is written by
diffusers' scripts/convert_diffusers_to_original_stable_diffusion.py, which
is not part of the diffusers package and is read from the bare repository
MIRROR/huggingface+diffusers/repo at the commit diffusers-env unpacks
(DIFFUSERS_COMMIT below).

Inputs, per family F (sd15, turbo): a tiny random-weight diffusers pipeline
directory F-pipeline/, read from tests/data/single-file/F-pipeline/ when
present, else from /tmp/single-file-inputs/F-pipeline/.  They are not kept
in the tree; they come from ppdiffuse-tool:

    ppdiffuse-tool make-tiny --kind F --out F-pipeline --seed 11
    rm -r F-pipeline/vae
    ppdiffuse-tool make-tiny --kind vae-kl --out F-pipeline/vae --seed 12

sd15 is the SD 1.x family (1x1-conv proj_in/proj_out, transformers' CLIP
text encoder with quick_gelu), turbo the SD 2.x / SD-Turbo family (linear
projections, per-block head counts, a "gelu" text encoder that SD 2.x
checkpoints store in OpenCLIP's layout).

Writes, per family:

  F-tiny.safetensors  one checkpoint in the original layout: the UNet under
                      model.diffusion_model., the VAE under
                      first_stage_model., the text encoder under
                      cond_stage_model.transformer. (sd15, transformers'
                      names) or cond_stage_model.model. (turbo, OpenCLIP's
                      names), all F16 as community checkpoints usually are,
                      plus what a real checkpoint carries besides the
                      weights (below).
  F-config/           the pipeline directory without its weights files:
                      model_index.json, scheduler/, unet/, vae/ and
                      text_encoder/ config.json, tokenizer/, prompt_embeds.npy
                      (what a user names as the checkpoint's architecture).
  F-expected.txt      diffusers' conversion of the checkpoint: one line
                      "COMPONENT KEY SHAPE SHA" per tensor it gives (SHA: the
                      first 16 hex digits of SHA-256 of the tensor as
                      float32, little-endian, C order), then "skip KEY" for
                      each checkpoint tensor that conversion does not use.

The diffusers -> original mapping is the reverse script's:
convert_unet_state_dict, convert_vae_state_dict and, for the text encoder,
convert_text_enc_state_dict (sd15: the keys stay transformers') or the
"transformer." prefix and convert_text_enc_state_dict_v20 (turbo: q/k/v
concatenated into in_proj).  The script's UNet tables hard-code SD's four
blocks of two resnets each, with attention in all but the last down block
and the first up block; unet_layer_table() builds the same table from a
UNet config (checked to equal the script's own for SD's config) and the
script's convert_unet_state_dict runs with it.

A real SD 1.x / 2.x checkpoint also holds, and so do these:
- the DDPM schedule buffers of LDM's LatentDiffusion at top level (betas,
  alphas_cumprod, ... posterior_mean_coef2: F32 [1000], LDM's "linear"
  schedule, i.e. diffusers' scaled_linear 0.00085 .. 0.012);
- sd15: cond_stage_model.transformer.text_model.embeddings.position_ids,
  I64 [1, 77], 0..76 (a buffer of older transformers' CLIPTextModel);
- turbo: one resblock more than the diffusers text encoder (SD 2.x keeps
  OpenCLIP's 24 layers; diffusers' text encoder is the first 23, the
  pipelines using the penultimate layer's output): resblocks.N, N the
  diffusers config's num_hidden_layers, with seeded values (seed
  EXTRA_SEED, tests/reference/seeded.py); text_projection [width, 16] and
  logit_scale [] (ln 100), which the text encoder does not use.

The check runs diffusers' own forward conversion (loaders/single_file_utils)
on the checkpoint as read back from the file: convert_ldm_unet_checkpoint
and convert_ldm_vae_checkpoint with the pipeline's unet/ and vae/
config.json, convert_ldm_clip_checkpoint (sd15) and
convert_open_clip_checkpoint (turbo).  Every tensor it gives must equal the
pipeline's tensor rounded to float16, under the key diffusers' models have
(UNet2DConditionModel / AutoencoderKL.from_pretrained of the pipeline: that
loads the pipeline VAE's older attention names query/key/value/proj_attn
as to_q/to_k/to_v/to_out.0, the names the conversion gives), with no key
missing and none extra; a mismatch stops the script naming the key.

transformers is not available here, so two steps of diffusers'
create_diffusers_clip_model_from_ldm are written out rather than run:
convert_open_clip_checkpoint gets no model object (it reads one only for
text_model.config.projection_dim when the checkpoint has no
text_projection; these have one), and the model load that follows the
conversion is replaced by its key filter: a converted key the text encoder
does not have is dropped, as load_model_dict_into_meta and
load_state_dict(strict=False) drop it.  That drop is where diffusers loses
the extra resblock of the tiny turbo checkpoint (its ignore list names
resblocks.23 literally, the extra block of a real 24-layer SD 2.x text
model) and sd15's position_ids; which checkpoint tensors each converted
tensor comes from is found by converting a copy of the checkpoint whose
every tensor is filled with its own index.

The README section between README_BEGIN and README_END is rewritten.  The
same inputs give the same bytes.
"""

import contextlib
import importlib.util
import io
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import textwrap

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import seeded  # noqa: E402

from diffusers import AutoencoderKL, UNet2DConditionModel  # noqa: E402
from diffusers.loaders import single_file_utils as sfu  # noqa: E402

DATA_DIR = os.path.normpath(os.path.join(HERE, "..", "data"))
OUT_DIR = os.path.join(DATA_DIR, "single-file")
INPUT_FALLBACK = "/tmp/single-file-inputs"
FAMILIES = ("sd15", "turbo")

# The diffusers commit of ../shared/tools/diffusers-env.
DIFFUSERS_COMMIT = "aafed3f8dd042bfe786f6c3e902c5cdb5de1fb08"
REVERSE_SCRIPT = "scripts/convert_diffusers_to_original_stable_diffusion.py"

WEIGHTS = {"unet": "unet/diffusion_pytorch_model.safetensors",
           "vae": "vae/diffusion_pytorch_model.safetensors",
           "text_encoder": "text_encoder/model.safetensors"}
CONFIG_FILES = ["model_index.json", "prompt_embeds.npy",
                "scheduler/scheduler_config.json", "text_encoder/config.json",
                "unet/config.json", "vae/config.json"]

UNET_PREFIX = "model.diffusion_model."
VAE_PREFIX = "first_stage_model."
CLIP_PREFIX = "cond_stage_model.transformer."
OPEN_CLIP_PREFIX = "cond_stage_model.model."
# Every top-level prefix the checkpoints use, for the summary.
PREFIXES = (UNET_PREFIX, VAE_PREFIX, CLIP_PREFIX,
            OPEN_CLIP_PREFIX + "transformer.", OPEN_CLIP_PREFIX)

# LatentDiffusion's schedule (LDM's make_beta_schedule "linear": betas =
# linspace(sqrt(start), sqrt(end), n)^2, diffusers' "scaled_linear").
NUM_TRAIN_TIMESTEPS = 1000
BETA_START = 0.00085
BETA_END = 0.012

EXTRA_SEED = 8101
# OpenCLIP's text_projection is [width, embed_dim]; 1024 x 1024 in SD 2.x.
# Not square here, so a reader that takes the in_proj split from the wrong
# dimension shows.  diffusers takes it from shape[0].
TEXT_PROJECTION_DIM = 16
LOGIT_SCALE = float(np.log(100.0))
POSITION_IDS_KEY = CLIP_PREFIX + "text_model.embeddings.position_ids"

README = os.path.join(DATA_DIR, "README")
README_BEGIN = "=== single-file/ (make_single_file_fixtures.py) ==="
README_END = "=== end of single-file/ ==="


# ---------------------------------------------------------------------------
# safetensors with F16, F32 and I64 tensors
# ---------------------------------------------------------------------------

DTYPES = {"F16": "<f2", "F32": "<f4", "I64": "<i8"}
DTYPE_NAMES = {np.dtype(v): k for k, v in DTYPES.items()}


def write_safetensors(path, tensors, metadata):
    """Write {name: array} keeping each array's dtype (float16, float32,
    int64).  The header lists the names sorted; the data is laid out by
    element size, largest first, then by name, as the safetensors package
    does, so that every tensor starts at a multiple of its element size."""
    order = sorted(tensors, key=lambda k: (-tensors[k].dtype.itemsize, k))
    entries, blobs, offset = {}, [], 0
    for name in order:
        # np.array keeps a 0-d array 0-d (ascontiguousarray would not).
        arr = np.array(tensors[name], order="C")
        dtype = DTYPE_NAMES[arr.dtype.newbyteorder("<")]
        raw = arr.astype(DTYPES[dtype]).tobytes(order="C")
        entries[name] = {"dtype": dtype, "shape": list(arr.shape),
                         "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    header = {"__metadata__": metadata}
    header.update((k, entries[k]) for k in sorted(entries))
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * ((-(8 + len(text))) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def read_safetensors(path):
    """{name: torch tensor} of a file write_safetensors wrote, checking that
    the data is tiled exactly."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    header.pop("__metadata__", None)
    base, out, spans = 8 + n, {}, []
    for name, e in header.items():
        begin, end = e["data_offsets"]
        dtype = np.dtype(DTYPES[e["dtype"]])
        count = int(np.prod(e["shape"], dtype=np.int64))
        assert end - begin == count * dtype.itemsize, name
        arr = np.frombuffer(data, dtype=dtype, count=count,
                            offset=base + begin).reshape(e["shape"])
        out[name] = torch.from_numpy(arr.astype(dtype.newbyteorder("=")))
        spans.append((begin, end))
    cursor = 0
    for begin, end in sorted(spans):
        assert begin == cursor, (path, begin, cursor)
        cursor = end
    assert base + cursor == len(data), path
    return out


# ---------------------------------------------------------------------------
# diffusers -> original: the reverse script
# ---------------------------------------------------------------------------

def load_reverse_script(mirror):
    """diffusers' scripts/convert_diffusers_to_original_stable_diffusion.py
    at DIFFUSERS_COMMIT, imported as a module."""
    repo = os.path.join(mirror, "huggingface+diffusers", "repo")
    text = subprocess.run(
        ["git", "-C", repo, "show", "%s:%s" % (DIFFUSERS_COMMIT,
                                              REVERSE_SCRIPT)],
        check=True, capture_output=True).stdout
    tmp = tempfile.mkdtemp()
    path = os.path.join(tmp, "convert_diffusers_to_original.py")
    with open(path, "wb") as f:
        f.write(text)
    spec = importlib.util.spec_from_file_location("d2o", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    shutil.rmtree(tmp)
    return module


def has_attention(block_type):
    return block_type.startswith("CrossAttn")


def unet_layer_table(cfg):
    """The reverse script's unet_conversion_map_layer for a UNet config:
    the script's loops with its constants (4 blocks, 2 resnets per down
    block, 3 per up block, attention in down blocks 0-2 and up blocks 1-3,
    the upsampler after an up block's attention or, in up block 0, after
    its resnet) taken from the config instead."""
    n = len(cfg["block_out_channels"])
    per = cfg["layers_per_block"]
    table = []
    for i in range(n):
        for j in range(per):
            # loop over resnets/attentions for downblocks
            table.append(("input_blocks.%d.0." % ((per + 1) * i + j + 1),
                          "down_blocks.%d.resnets.%d." % (i, j)))
            if has_attention(cfg["down_block_types"][i]):
                table.append(("input_blocks.%d.1." % ((per + 1) * i + j + 1),
                              "down_blocks.%d.attentions.%d." % (i, j)))
        for j in range(per + 1):
            # loop over resnets/attentions for upblocks
            table.append(("output_blocks.%d.0." % ((per + 1) * i + j),
                          "up_blocks.%d.resnets.%d." % (i, j)))
            if has_attention(cfg["up_block_types"][i]):
                table.append(("output_blocks.%d.1." % ((per + 1) * i + j),
                              "up_blocks.%d.attentions.%d." % (i, j)))
        if i < n - 1:
            # no downsample/upsample in the last block
            table.append(("input_blocks.%d.0.op." % ((per + 1) * (i + 1)),
                          "down_blocks.%d.downsamplers.0.conv." % i))
            up_index = 2 if has_attention(cfg["up_block_types"][i]) else 1
            table.append(("output_blocks.%d.%d." % ((per + 1) * i + per,
                                                    up_index),
                          "up_blocks.%d.upsamplers.0." % i))
    table.append(("middle_block.1.", "mid_block.attentions.0."))
    for j in range(2):
        table.append(("middle_block.%d." % (2 * j),
                      "mid_block.resnets.%d." % j))
    return table


SD_UNET = {"block_out_channels": [320, 640, 1280, 1280], "layers_per_block": 2,
           "down_block_types": ["CrossAttnDownBlock2D"] * 3 + ["DownBlock2D"],
           "up_block_types": ["UpBlock2D"] + ["CrossAttnUpBlock2D"] * 3}


def quiet(fn, *args):
    """Run fn with its progress prints ("Reshaping ...") swallowed."""
    with contextlib.redirect_stdout(io.StringIO()):
        return fn(*args)


def to_original(d2o, family, unet_cfg, weights):
    """The pipeline's weights (torch, diffusers names) in the original
    layout, as the reverse script's __main__ assembles them."""
    d2o.unet_conversion_map_layer = unet_layer_table(unet_cfg)
    unet = quiet(d2o.convert_unet_state_dict, weights["unet"])
    vae = quiet(d2o.convert_vae_state_dict, weights["vae"])
    ckpt = {UNET_PREFIX + k: v for k, v in unet.items()}
    ckpt.update((VAE_PREFIX + k, v) for k, v in vae.items())
    text = weights["text_encoder"]
    if family == "turbo":
        # the "transformer." tag first, so that the final layer norm loses it
        text = {"transformer." + k: v for k, v in text.items()}
        text = d2o.convert_text_enc_state_dict_v20(text)
        ckpt.update((OPEN_CLIP_PREFIX + k, v) for k, v in text.items())
    else:
        text = d2o.convert_text_enc_state_dict(text)
        ckpt.update((CLIP_PREFIX + k, v) for k, v in text.items())
    return ckpt


# ---------------------------------------------------------------------------
# What a real checkpoint holds besides the weights
# ---------------------------------------------------------------------------

def ddpm_buffers():
    """LatentDiffusion.register_schedule's buffers: float64, then float32."""
    betas = np.linspace(BETA_START ** 0.5, BETA_END ** 0.5,
                        NUM_TRAIN_TIMESTEPS, dtype=np.float64) ** 2
    alphas = 1.0 - betas
    ac = np.cumprod(alphas, axis=0)
    ac_prev = np.append(1.0, ac[:-1])
    post_var = betas * (1.0 - ac_prev) / (1.0 - ac)
    buffers = {
        "betas": betas,
        "alphas_cumprod": ac,
        "alphas_cumprod_prev": ac_prev,
        "sqrt_alphas_cumprod": np.sqrt(ac),
        "sqrt_one_minus_alphas_cumprod": np.sqrt(1.0 - ac),
        "log_one_minus_alphas_cumprod": np.log(1.0 - ac),
        "sqrt_recip_alphas_cumprod": np.sqrt(1.0 / ac),
        "sqrt_recipm1_alphas_cumprod": np.sqrt(1.0 / ac - 1.0),
        "posterior_variance": post_var,
        "posterior_log_variance_clipped": np.log(np.maximum(post_var, 1e-20)),
        "posterior_mean_coef1": betas * np.sqrt(ac_prev) / (1.0 - ac),
        "posterior_mean_coef2": (1.0 - ac_prev) * np.sqrt(alphas) / (1.0 - ac),
    }
    return {k: v.astype(np.float32) for k, v in buffers.items()}


def open_clip_kind(key):
    """seeded.py's kind for an OpenCLIP tensor (its names carry no "norm")."""
    name = key.rpartition(".")[2]
    if ".ln_" in key:
        return "norm_scale" if name == "weight" else "norm_shift"
    return "bias" if name.endswith("bias") else "weight"


def extras(family, ckpt, text_cfg):
    """The checkpoint's tensors that are not the pipeline's weights."""
    out = {k: torch.from_numpy(v) for k, v in ddpm_buffers().items()}
    if family == "sd15":
        out[POSITION_IDS_KEY] = torch.arange(
            text_cfg["max_position_embeddings"], dtype=torch.int64)[None]
        return out
    # The resblock the diffusers text encoder leaves out: the last one, with
    # the shapes of resblock 0.
    blocks = OPEN_CLIP_PREFIX + "transformer.resblocks."
    last = text_cfg["num_hidden_layers"]
    first = blocks + "0."
    for key in [k for k in ckpt if k.startswith(first)]:
        name = blocks + "%d." % last + key[len(first):]
        out[name] = torch.from_numpy(seeded.weight(
            EXTRA_SEED, name, tuple(ckpt[key].shape), open_clip_kind(name)))
    width = text_cfg["hidden_size"]
    name = OPEN_CLIP_PREFIX + "text_projection"
    out[name] = torch.from_numpy(seeded.weight(
        EXTRA_SEED, name, (width, TEXT_PROJECTION_DIM), "weight"))
    out[OPEN_CLIP_PREFIX + "logit_scale"] = torch.tensor(
        LOGIT_SCALE, dtype=torch.float32)
    return out


def as_stored(ckpt):
    """Weights as float16; the DDPM buffers stay float32, position_ids
    int64 (so a real checkpoint stores them)."""
    out = {}
    for k, v in ckpt.items():
        if "." not in k or v.dtype == torch.int64:
            out[k] = v.numpy()
        else:
            out[k] = v.to(torch.float16).numpy()
    return out


# ---------------------------------------------------------------------------
# original -> diffusers: diffusers' single-file conversion
# ---------------------------------------------------------------------------

def from_original(family, ckpt, configs):
    """{component: {diffusers key: tensor}} as diffusers' single-file
    loading converts the checkpoint, before the model load."""
    out = {"unet": sfu.convert_ldm_unet_checkpoint(ckpt, configs["unet"]),
           "vae": sfu.convert_ldm_vae_checkpoint(ckpt, configs["vae"])}
    # create_diffusers_clip_model_from_ldm picks the conversion by key.
    if family == "sd15":
        assert sfu.is_clip_model(ckpt) and not sfu.is_open_clip_model(ckpt)
        out["text_encoder"] = sfu.convert_ldm_clip_checkpoint(ckpt)
    else:
        assert sfu.is_open_clip_model(ckpt) and not sfu.is_clip_model(ckpt)
        out["text_encoder"] = sfu.convert_open_clip_checkpoint(
            None, ckpt, prefix=OPEN_CLIP_PREFIX)
    return out


def model_keys_filter(converted, reference):
    """The model load's filter: converted keys the model lacks are dropped.
    Only the text encoder may lose any; returns the dropped keys."""
    dropped = {}
    for comp, sd in converted.items():
        extra = sorted(set(sd) - set(reference[comp]))
        if comp != "text_encoder" and extra:
            raise AssertionError("%s: conversion gives keys the model lacks: "
                                 "%s" % (comp, extra))
        dropped[comp] = extra
        for k in extra:
            del sd[k]
    return dropped


def sources(family, ckpt, configs, converted):
    """{component: {diffusers key: checkpoint key}}: the conversion run on
    a copy of the checkpoint with every tensor filled with its index."""
    names = sorted(ckpt)
    probe = {k: torch.full(tuple(ckpt[k].shape), float(i),
                           dtype=torch.float64) for i, k in enumerate(names)}
    out = {}
    for comp, sd in from_original(family, probe, configs).items():
        out[comp] = {}
        for key in converted[comp]:
            ids = torch.unique(sd[key]).tolist()
            if len(ids) != 1:
                raise AssertionError("%s %s comes from %d checkpoint tensors"
                                     % (comp, key, len(ids)))
            out[comp][key] = names[int(ids[0])]
    return out


def check(comp, converted, reference):
    """converted == reference rounded to float16, key for key."""
    missing = sorted(set(reference) - set(converted))
    extra = sorted(set(converted) - set(reference))
    if missing or extra:
        raise AssertionError("%s: missing %s, extra %s"
                             % (comp, missing, extra))
    for key in sorted(reference):
        got, want = converted[key], reference[key]
        if got.dtype != torch.float16:
            raise AssertionError("%s %s: dtype %s" % (comp, key, got.dtype))
        if tuple(got.shape) != tuple(want.shape):
            raise AssertionError("%s %s: shape %s, expected %s"
                                 % (comp, key, tuple(got.shape),
                                    tuple(want.shape)))
        if not torch.equal(got.float(), want.half().float()):
            raise AssertionError("%s %s: values differ" % (comp, key))


# ---------------------------------------------------------------------------
# Per family
# ---------------------------------------------------------------------------

def input_dir(family):
    for root in (OUT_DIR, INPUT_FALLBACK):
        d = os.path.join(root, family + "-pipeline")
        if os.path.isdir(d):
            return d
    raise SystemExit("no %s-pipeline/ in %s or %s (see the docstring)"
                     % (family, OUT_DIR, INPUT_FALLBACK))


def read_json(path):
    with open(path) as f:
        return json.load(f)


def reference_weights(src):
    """The pipeline's weights under the keys diffusers' models have: the
    UNet and VAE as from_pretrained loads them (the VAE's older attention
    names become to_q/...), the text encoder's file as it is."""
    unet = UNet2DConditionModel.from_pretrained(src, subfolder="unet",
                                                low_cpu_mem_usage=False)
    vae = AutoencoderKL.from_pretrained(src, subfolder="vae",
                                        low_cpu_mem_usage=False)
    return {"unet": unet.state_dict(), "vae": vae.state_dict(),
            "text_encoder": read_safetensors(
                os.path.join(src, WEIGHTS["text_encoder"]))}


def copy_config(src, dst):
    if os.path.isdir(dst):
        shutil.rmtree(dst)
    files = list(CONFIG_FILES)
    files += ["tokenizer/" + f
              for f in sorted(os.listdir(os.path.join(src, "tokenizer")))]
    for rel in files:
        os.makedirs(os.path.dirname(os.path.join(dst, rel)), exist_ok=True)
        shutil.copyfile(os.path.join(src, rel), os.path.join(dst, rel))
    return files


def prefix_of(key):
    for p in PREFIXES:
        if key.startswith(p):
            return p
    return key


def make(d2o, family):
    src = input_dir(family)
    configs = {c: read_json(os.path.join(src, c, "config.json"))
               for c in ("unet", "vae", "text_encoder")}

    # diffusers -> original, F16, with what a real checkpoint adds
    raw = {c: read_safetensors(os.path.join(src, p))
           for c, p in WEIGHTS.items()}
    ckpt = to_original(d2o, family, configs["unet"], raw)
    ckpt.update(extras(family, ckpt, configs["text_encoder"]))
    # The VAE's mid attention is a 1x1 conv in the original layout.
    for part in ("encoder", "decoder"):
        for name in ("q", "k", "v", "proj_out"):
            shape = tuple(ckpt["%s%s.mid.attn_1.%s.weight"
                               % (VAE_PREFIX, part, name)].shape)
            assert len(shape) == 4 and shape[2:] == (1, 1), (part, name, shape)
    path = os.path.join(OUT_DIR, family + "-tiny.safetensors")
    write_safetensors(path, as_stored(ckpt), {"format": "pt"})

    # original -> diffusers, from the file
    stored = read_safetensors(path)
    assert sorted(stored) == sorted(ckpt)
    reference = reference_weights(src)
    converted = from_original(family, stored, configs)
    dropped = model_keys_filter(converted, reference)
    for comp in ("unet", "vae", "text_encoder"):
        check(comp, converted[comp], reference[comp])
    src_keys = sources(family, stored, configs, converted)
    used = {}
    for comp, m in src_keys.items():
        for ckey in m.values():
            assert used.get(ckey, comp) == comp, (ckey, used[ckey], comp)
            used[ckey] = comp
    skipped = sorted(set(stored) - set(used))

    # Exactly what the C loader is to skip: the DDPM buffers and the extras
    # above (the turbo resblock, text_projection, logit_scale; sd15's
    # position_ids).  Anything else unused would be a mapping slip.
    expect_skip = set(ddpm_buffers()) | (
        set(extras(family, ckpt, configs["text_encoder"])))
    if set(skipped) != expect_skip:
        raise AssertionError("skipped %s, expected %s"
                             % (sorted(set(skipped) ^ expect_skip),
                                sorted(expect_skip)))

    lines = ["# %s-tiny.safetensors as diffusers %s converts it "
             "(loaders/single_file_utils.py): COMPONENT KEY SHAPE SHA, SHA "
             "= first 16 hex digits of SHA-256 of the tensor as float32 "
             "little-endian C order; then 'skip KEY' for every checkpoint "
             "tensor the conversion does not use."
             % (family, DIFFUSERS_COMMIT[:8])]
    for comp in sorted(converted):
        for key in sorted(converted[comp]):
            t = converted[comp][key]
            lines.append("%s %s %s %s" % (comp, key,
                                          ",".join(map(str, t.shape)),
                                          seeded.digest(t.float().numpy())))
    lines += ["skip " + k for k in skipped]
    with open(os.path.join(OUT_DIR, family + "-expected.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")

    files = copy_config(src, os.path.join(OUT_DIR, family + "-config"))

    prefixes = {}
    for k in stored:
        prefixes[prefix_of(k)] = prefixes.get(prefix_of(k), 0) + 1
    info = {"family": family, "size": os.path.getsize(path),
            "tensors": len(stored), "prefixes": prefixes,
            "counts": {c: len(converted[c]) for c in converted},
            "dropped": dropped, "skipped": skipped, "config_files": files}
    print("%s-tiny.safetensors: %d tensors, %d bytes" % (
        family, info["tensors"], info["size"]))
    for p in sorted(prefixes):
        print("  %-40s %d" % (p, prefixes[p]))
    print("  diffusers: %s; dropped at load: %s; %d skipped"
          % (", ".join("%s %d" % kv for kv in sorted(info["counts"].items())),
             _compress(dropped["text_encoder"]) or "none", len(skipped)),
          flush=True)
    return info


# ---------------------------------------------------------------------------
# README section
# ---------------------------------------------------------------------------

README_TEXT = """\
Tiny checkpoints in the original (LDM / CompVis) single-file layout, and
what diffusers' own single-file conversion makes of them.
Generated by:
  ../shared/tools/diffusers-env MIRROR /usr/bin/python3 \\
      tests/reference/make_single_file_fixtures.py MIRROR
with diffusers {commit} (its loaders/single_file_utils.py, and
scripts/convert_diffusers_to_original_stable_diffusion.py read from MIRROR),
torch 1.13.0a0; no transformers.  The inputs are two make-tiny pipelines
(tests/data/single-file/F-pipeline/, else /tmp/single-file-inputs/
F-pipeline/; not kept in the tree):
  ppdiffuse-tool make-tiny --kind F --out F-pipeline --seed 11
  rm -r F-pipeline/vae
  ppdiffuse-tool make-tiny --kind vae-kl --out F-pipeline/vae --seed 12
for F in sd15 (SD 1.x family) and turbo (SD 2.x / SD-Turbo family).

F-tiny.safetensors: the pipeline's UNet, VAE and text encoder in the
  original layout, written by diffusers' reverse script (its UNet tables
  built for the tiny configs), stored F16.  Prefixes: model.diffusion_model.
  (UNet), first_stage_model. (VAE; mid.attn_1.q/k/v/proj_out are
  [C,C,1,1]), and cond_stage_model.transformer.text_model. (sd15,
  transformers' names) or cond_stage_model.model. (turbo, OpenCLIP's:
  token_embedding.weight, positional_embedding, transformer.resblocks.i.
  {{ln_1,attn.in_proj_weight,attn.in_proj_bias,attn.out_proj,ln_2,mlp.c_fc,
  mlp.c_proj}}, ln_final, text_projection, logit_scale).  Also, as in real
  checkpoints: the 12 DDPM buffers of LDM at top level (betas ...
  posterior_mean_coef2, F32 [1000], scaled_linear 0.00085 .. 0.012);
  sd15's text_model.embeddings.position_ids (I64 [1,77]); turbo's text
  model has one resblock more than the diffusers text encoder (seeded,
  seed {extra_seed}), as SD 2.x keeps OpenCLIP's 24 layers where diffusers
  uses 23, text_projection [width,{proj}] (not square, unlike SD 2.x's
  1024x1024) and logit_scale (shape [], ln 100).  Header keys sorted; the
  data ordered I64, F32, F16 and by name within each, so data_offsets do
  not follow key order.  __metadata__ {{"format": "pt"}}.
F-config/: the pipeline directory less its weights (model_index.json,
  scheduler/, unet/, vae/, text_encoder/ config.json, tokenizer/,
  prompt_embeds.npy): what names the checkpoint's architecture.
F-expected.txt: "#" lines, then one line per tensor of diffusers'
  conversion (convert_ldm_unet_checkpoint / convert_ldm_vae_checkpoint
  with the configs above, convert_ldm_clip_checkpoint or
  convert_open_clip_checkpoint, then the text-encoder load's drop of keys
  the model lacks): "COMPONENT KEY SHAPE SHA", COMPONENT unet, vae or
  text_encoder, KEY diffusers' (the VAE attention as to_q/to_k/to_v/
  to_out.0), SHAPE comma-separated, SHA the first 16 hex digits of SHA-256
  of the tensor as float32 little-endian C-order bytes (the F16 values
  widened); sorted by component and key.  Then "skip KEY" for every
  checkpoint tensor that conversion does not use.  The script asserts that
  the conversion gives every key of diffusers' models, no other, each equal
  to the pipeline's float32 tensor rounded to float16.

"""


def write_readme(infos):
    rows = []
    for info in infos:
        f = info["family"]
        rows.append("%s-tiny.safetensors  %d bytes, %d tensors; %d skipped"
                    % (f, info["size"], info["tensors"],
                       len(info["skipped"])))
        rows.append("  converts to %s" % ", ".join(
            "%s %d" % kv for kv in sorted(info["counts"].items())))
        for p in sorted(info["prefixes"]):
            if p in PREFIXES:
                rows.append("  %-38s %d tensors" % (p, info["prefixes"][p]))
        top = [p for p in info["skipped"] if "." not in p]
        rest = [p for p in info["skipped"] if "." in p]
        rows.append(textwrap.fill("top level: " + " ".join(top), 78,
                                  initial_indent="  ",
                                  subsequent_indent="    "))
        rows.append(textwrap.fill("skipped besides: " + (
            _compress(rest) if rest else "none"), 78, initial_indent="  ",
            subsequent_indent="    ", break_on_hyphens=False))
    text = README_TEXT.format(commit=DIFFUSERS_COMMIT[:8],
                              extra_seed=EXTRA_SEED,
                              proj=TEXT_PROJECTION_DIM)
    section = "%s\n%s%s\n%s\n" % (README_BEGIN, text, "\n".join(rows),
                                  README_END)
    with open(README) as f:
        old = f.read()
    if README_BEGIN in old:
        head, rest = old.split(README_BEGIN, 1)
        new = head + section + rest.split(README_END + "\n", 1)[1]
    else:
        new = old + ("" if old.endswith("\n\n") else "\n") + section
    with open(README, "w") as f:
        f.write(new)


def _compress(keys):
    """Keys of one text-encoder layer shown once, as PREFIX.N.*."""
    out = []
    for k in keys:
        for mark in (".resblocks.", ".layers."):
            if mark in k:
                head, tail = k.split(mark, 1)
                k = "%s%s%s.*" % (head, mark, tail.split(".", 1)[0])
        if k not in out:
            out.append(k)
    return " ".join(out)


def main():
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    torch.set_num_threads(1)
    d2o = load_reverse_script(sys.argv[1])
    # The generalised table must be the script's own for SD's UNet.
    assert unet_layer_table(SD_UNET) == d2o.unet_conversion_map_layer
    os.makedirs(OUT_DIR, exist_ok=True)
    infos = [make(d2o, family) for family in FAMILIES]
    write_readme(infos)


if __name__ == "__main__":
    main()
