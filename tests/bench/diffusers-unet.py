#!/usr/bin/env python3
"""diffusers' own UNet2DConditionModel forward, timed: the baseline next to
model-bench's C figures (CPU) and gpu-bench's (GPU, the same protocol).

Usage (diffusers importable, e.g. through a checkout on PYTHONPATH):
    python3 tests/bench/diffusers-unet.py [--runs N] [--threads T]
        [--latent H] [--device cpu|cuda] [--dtype f32[,f16,bf16]]
        [--taesd] [--error] [CONFIG_DIR]

CONFIG_DIR holds a diffusers config.json (default: the SD-Turbo
architecture in tests/data/scale/sd-turbo).  Weights are PyTorch's default
initialisation: the time does not depend on them.  One HxH latent (64 by
default) and 77 text tokens; each dtype of --dtype in turn (one model,
converted).  With --taesd, also diffusers' AutoencoderTiny (TAESD) encoding
and decoding the 8H x 8H image.  A figure is the best of --runs runs after
two untimed ones, each run synchronized with the device (as gpu-bench
times its own); on a GPU, TensorFloat-32 is off, as in the GPU check.

With --error, nothing is timed: the UNet's output in each dtype of --dtype
against its own float64 run on the same weights and inputs, as
test-kernels-scale judges ppdiffuse's (max |diff| relative to max |ref|,
and NMSE): what the dtype itself costs diffusers on that architecture.
"""
import argparse
import json
import os
import time

import torch
from diffusers import UNet2DConditionModel

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_CONFIG = os.path.join(HERE, "..", "data", "scale", "sd-turbo")
TEXT_TOKENS = 77
WARM_UP_RUNS = 2
DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}
# The VAE's downscale: a latent pixel is 8x8 image pixels.
VAE_FACTOR = 8


def best_ms(run, runs, device):
    """Best wall time of @runs synchronized calls of @run, in ms."""
    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    for _ in range(WARM_UP_RUNS):
        run()
    sync()
    best = float("inf")
    for _ in range(runs):
        t = time.perf_counter()
        run()
        sync()
        best = min(best, time.perf_counter() - t)
    return 1000 * best


def build(make, device):
    """A module made on @device directly where torch allows (a GPU build
    of 866 M parameters on the host takes longer than the runs)."""
    if device.type != "cpu" and hasattr(torch.device, "__enter__"):
        with device:
            return make()
    return make().to(device)


def report_errors(unet, sample, ctx, dtypes, device, name):
    """Each dtype's output against the float64 one, as test-scale
    measures ppdiffuse's."""
    with torch.inference_mode():
        unet.to(torch.float64)
        ref = unet(sample.to(device, torch.float64), 999,
                   encoder_hidden_states=ctx.to(device, torch.float64)
                   ).sample
        ref_max = ref.abs().max().item()
        for dt in dtypes:
            dtype = DTYPES[dt]
            unet.to(dtype)
            y = unet(sample.to(device, dtype), 999,
                     encoder_hidden_states=ctx.to(device, dtype)
                     ).sample.to(torch.float64)
            diff = (y - ref).abs().max().item()
            nmse = ((y - ref) ** 2).sum().item() / (ref ** 2).sum().item()
            print("diffusers UNet %s %-4s against float64: max|diff| %.3e "
                  "= %.2e of max|ref| %.4g, NMSE %.3e" % (
                      name, dt, diff, diff / ref_max, ref_max, nmse),
                  flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("config_dir", nargs="?", default=DEFAULT_CONFIG)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--latent", type=int, default=64)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="f32",
                    help="comma-separated: f32, f16, bf16")
    ap.add_argument("--taesd", action="store_true")
    ap.add_argument("--error", action="store_true",
                    help="each dtype's error against float64, not its time")
    args = ap.parse_args()

    device = torch.device(args.device)
    dtypes = args.dtype.split(",")
    for name in dtypes:
        if name not in DTYPES:
            ap.error("unknown dtype %r (f32, f16, bf16)" % name)
    if device.type == "cpu":
        torch.set_num_threads(args.threads)
        where = "%d torch threads" % args.threads
    else:
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        where = torch.cuda.get_device_name(device)
    with open(os.path.join(args.config_dir, "config.json")) as f:
        cfg = {k: v for k, v in json.load(f).items() if not k.startswith("_")}
    print("diffusers on %s (torch %s), best of %d synchronized runs" % (
        where, torch.__version__, args.runs), flush=True)
    t = time.perf_counter()
    unet = build(lambda: UNet2DConditionModel(**cfg).eval(), device)
    n_params = sum(p.numel() for p in unet.parameters())
    print("UNet %s: %d parameters, made in %.1f s" % (
        os.path.basename(os.path.normpath(args.config_dir)), n_params,
        time.perf_counter() - t), flush=True)
    taesd = None
    if args.taesd:
        from diffusers import AutoencoderTiny
        taesd = build(lambda: AutoencoderTiny().eval(), device)
    gen = torch.Generator(device="cpu").manual_seed(0)
    sample = torch.randn(1, cfg["in_channels"], args.latent, args.latent,
                         generator=gen)
    ctx = torch.randn(1, TEXT_TOKENS, cfg["cross_attention_dim"],
                      generator=gen)
    side = VAE_FACTOR * args.latent
    image = torch.rand(1, 3, side, side, generator=gen) * 2 - 1
    if args.error:
        report_errors(unet, sample, ctx, dtypes, device,
                      os.path.basename(os.path.normpath(args.config_dir)))
        return
    for name in dtypes:
        dtype = DTYPES[name]
        unet.to(dtype)
        x, c = sample.to(device, dtype), ctx.to(device, dtype)
        with torch.inference_mode():
            ms = best_ms(lambda: unet(x, 999, encoder_hidden_states=c),
                         args.runs, device)
        print("diffusers UNet step %dx%d %-4s %9.3f ms" % (
            args.latent, args.latent, name, ms), flush=True)
        if taesd is None:
            continue
        taesd.to(dtype)
        img = image.to(device, dtype)
        with torch.inference_mode():
            ms = best_ms(lambda: taesd.decode(taesd.encode(img).latents),
                         args.runs, device)
        print("diffusers TAESD enc+dec %dx%d %-4s %9.3f ms" % (
            side, side, name, ms), flush=True)


if __name__ == "__main__":
    main()
