#!/usr/bin/env python3
"""Write the AutoencoderKL fixtures with diffusers' own AutoencoderKL, in
float64:

    ../shared/tools/diffusers-env MIRROR /usr/bin/python3 \\
        tests/reference/make_vae_kl_fixtures.py [tiny] [scale]

(or PYTHONPATH=DIFFUSERS/src:HUB/src as for make_scale_fixtures.py).

tiny   tests/data/vae-kl-tiny/: a small seeded configuration of the same
       classes (four stages, so 8 image pixels per latent pixel as in SD;
       one resnet per stage, the mid block's attention), its weights as a
       float32 safetensors file, an image [2, 3, 24, 40], and with the
       pipeline's conventions (below): latents.npy (encode), decoded.npy
       (decode of latents.npy) and a tap-<name>.npy for every tap.
scale  tests/data/scale/vae-kl/: the released SD VAE architecture
       (stabilityai/sd-turbo's vae/config.json, the same as SD 1.5's but for
       sample_size) with the seeded weights of seeded.py, a seeded image
       [1, 3, 512, 512] and seeded latents [1, 4, 64, 64]; writes
       config.json, weights.txt, scale.json, encoded.npy and decoded.npy.
       No weights and no inputs are stored: C generates the same bits.

The pipeline's conventions, which the C model follows: encode takes an
image in [-1, 1] and gives the mean of the latent distribution (diffusers'
latent_dist.mode(): deterministic, where the pipelines sample it) times
scaling_factor; decode divides by scaling_factor and gives the decoder's
output unclamped.
"""

import json
import os
import sys
import time

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import make_scale_fixtures as msf  # noqa: E402
import safetensors_io  # noqa: E402
import seeded  # noqa: E402

from diffusers import AutoencoderKL  # noqa: E402

DATA_DIR = os.path.normpath(os.path.join(HERE, "..", "data"))
WEIGHTS_FILE = "diffusion_pytorch_model.safetensors"
TOLERANCE = 1e-4
TORCH_THREADS = 2

SD_VAE = {
    "act_fn": "silu",
    "block_out_channels": [128, 256, 512, 512],
    "down_block_types": ["DownEncoderBlock2D"] * 4,
    "in_channels": 3,
    "latent_channels": 4,
    "layers_per_block": 2,
    "norm_num_groups": 32,
    "out_channels": 3,
    "sample_size": 768,
    "scaling_factor": 0.18215,
    "up_block_types": ["UpDecoderBlock2D"] * 4,
}

TINY_VAE = dict(SD_VAE, block_out_channels=[8, 16, 16, 16],
                layers_per_block=1, norm_num_groups=4, sample_size=32)

TINY = {"seeds": {"weights": 6101, "inputs": 6102},
        "image_shape": (2, 3, 24, 40)}
SCALE = {"seeds": {"weights": 6201, "inputs": 6202},
         "image_shape": (1, 3, 512, 512)}
IMAGE_KEY = "image"
LATENTS_KEY = "latents"


def build(cfg, seed):
    torch.set_default_dtype(torch.float64)
    model = AutoencoderKL(**cfg).eval()
    torch.set_default_dtype(torch.float32)
    lines = msf.fill(model, seed)
    return model, lines


def encode(model, image):
    """[-1, 1] image -> scaled latent mean (the C model's encode)."""
    with torch.no_grad():
        dist = model.encode(torch.from_numpy(image.astype(np.float64))
                            ).latent_dist
        return (dist.mode() * model.config.scaling_factor).numpy()


def decode(model, latents):
    with torch.no_grad():
        z = torch.from_numpy(latents.astype(np.float64))
        return model.decode(z / model.config.scaling_factor).sample.numpy()


def tap_hooks(model, taps):
    """Forward hooks that record the taps the C model reports."""
    names = {"encoder.conv_in": model.encoder.conv_in,
             "encoder.mid_block": model.encoder.mid_block,
             "encoder.conv_out": model.encoder.conv_out,
             "quant_conv": model.quant_conv,
             "post_quant_conv": model.post_quant_conv,
             "decoder.conv_in": model.decoder.conv_in,
             "decoder.mid_block": model.decoder.mid_block}
    for i, blk in enumerate(model.encoder.down_blocks):
        names["encoder.down_blocks.%d" % i] = blk
    for i, blk in enumerate(model.decoder.up_blocks):
        names["decoder.up_blocks.%d" % i] = blk
    handles = []
    for name, module in names.items():
        def hook(_m, _inp, out, name=name):
            taps[name] = out.detach().numpy().copy()
        handles.append(module.register_forward_hook(hook))
    return handles


def check_output(name, x):
    assert np.all(np.isfinite(x)), name
    # A reference that is nearly zero would hold C to nothing.
    assert float(np.max(np.abs(x))) > 0.1 and float(np.std(x)) > 0.01, name


def make_tiny():
    out_dir = os.path.join(DATA_DIR, "vae-kl-tiny")
    os.makedirs(out_dir, exist_ok=True)
    seeds = TINY["seeds"]
    model, _lines = build(TINY_VAE, seeds["weights"])
    image = seeded.input_tensor(seeds["inputs"], IMAGE_KEY,
                                TINY["image_shape"])
    image = np.clip(image / np.sqrt(3.0), -1.0, 1.0).astype(np.float32)
    taps = {}
    handles = tap_hooks(model, taps)
    latents = encode(model, image)
    decoded = decode(model, latents.astype(np.float32))
    for h in handles:
        h.remove()
    check_output("latents", latents)
    check_output("decoded", decoded)
    model.save_config(out_dir)
    tensors = {k: v.detach().numpy().astype(np.float32)
               for k, v in model.state_dict().items()}
    safetensors_io.write(os.path.join(out_dir, WEIGHTS_FILE), tensors,
                         {"format": "pt"})
    np.save(os.path.join(out_dir, "image.npy"), image.astype("<f4"))
    np.save(os.path.join(out_dir, "latents.npy"), latents.astype("<f4"))
    np.save(os.path.join(out_dir, "decoded.npy"), decoded.astype("<f4"))
    for name, x in taps.items():
        check_output(name, x)
        np.save(os.path.join(out_dir, "tap-%s.npy" % name), x.astype("<f4"))
    print("vae-kl-tiny: %d tensors, latents %s max %.4g, decoded %s max %.4g,"
          " %d taps" % (len(tensors), latents.shape,
                        np.max(np.abs(latents)), decoded.shape,
                        np.max(np.abs(decoded)), len(taps)), flush=True)


def make_scale():
    out_dir = os.path.join(DATA_DIR, "scale", "vae-kl")
    os.makedirs(out_dir, exist_ok=True)
    seeds = SCALE["seeds"]
    times = {}
    t = time.time()
    model, lines = build(SD_VAE, seeds["weights"])
    times["weights"] = time.time() - t
    image_shape = SCALE["image_shape"]
    latent_shape = (image_shape[0], SD_VAE["latent_channels"],
                    image_shape[2] // 8, image_shape[3] // 8)
    image = seeded.input_tensor(seeds["inputs"], IMAGE_KEY, image_shape)
    latents = seeded.input_tensor(seeds["inputs"], LATENTS_KEY, latent_shape)
    t = time.time()
    encoded = encode(model, image)
    times["encode"] = time.time() - t
    t = time.time()
    decoded = decode(model, latents)
    times["decode"] = time.time() - t
    check_output("encoded", encoded)
    check_output("decoded", decoded)
    model.save_config(out_dir)
    with open(os.path.join(out_dir, "weights.txt"), "w") as f:
        f.write("# SD VAE (AutoencoderKL): seeded weights "
                "(tests/reference/seeded.py), seed %d.\n" % seeds["weights"])
        f.write("# One line per diffusers state_dict key, in state_dict "
                "order: key kind shape\n# and the float32 bits of elements 0 "
                "and numel - 1.\n")
        f.write("\n".join(lines) + "\n")
    np.save(os.path.join(out_dir, "encoded.npy"), encoded.astype("<f4"))
    np.save(os.path.join(out_dir, "decoded.npy"), decoded.astype("<f4"))
    info = {
        "model": "vae-kl",
        "weights_seed": seeds["weights"],
        "inputs_seed": seeds["inputs"],
        "image_key": IMAGE_KEY,
        "image_shape": list(image_shape),
        "latents_key": LATENTS_KEY,
        "latents_shape": list(latent_shape),
        "tolerance": TOLERANCE,
        "max_abs_encoded": float(np.max(np.abs(encoded))),
        "max_abs_decoded": float(np.max(np.abs(decoded))),
        "n_tensors": len(lines),
        "n_params": sum(p.numel() for p in model.parameters()),
        "seconds": {k: round(v, 1) for k, v in times.items()},
    }
    with open(os.path.join(out_dir, "scale.json"), "w") as f:
        json.dump(info, f, indent=2)
        f.write("\n")
    print("vae-kl scale: %d tensors, %d parameters, max|enc| %.4g, "
          "max|dec| %.4g, %s" % (len(lines), info["n_params"],
                                 info["max_abs_encoded"],
                                 info["max_abs_decoded"], info["seconds"]),
          flush=True)


def main():
    names = sys.argv[1:] or ["tiny", "scale"]
    msf.check_generator()
    torch.set_num_threads(TORCH_THREADS)
    for n in names:
        {"tiny": make_tiny, "scale": make_scale}[n]()


if __name__ == "__main__":
    main()
