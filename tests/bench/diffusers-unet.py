#!/usr/bin/env python3
"""diffusers' own UNet2DConditionModel forward on the CPU, timed: the
baseline next to model-bench's C figures.

Usage (diffusers importable, e.g. through a checkout on PYTHONPATH):
    python3 tests/bench/diffusers-unet.py [--runs N] [--threads T]
        [--latent H] [CONFIG_DIR]

CONFIG_DIR holds a diffusers config.json (default: the SD-Turbo
architecture in tests/data/scale/sd-turbo).  Weights are PyTorch's default
initialisation: the time does not depend on them.  float32, one 64x64 latent
and 77 text tokens by default, best of --runs forwards after one warm-up.
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("config_dir", nargs="?", default=DEFAULT_CONFIG)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--latent", type=int, default=64)
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    with open(os.path.join(args.config_dir, "config.json")) as f:
        cfg = {k: v for k, v in json.load(f).items() if not k.startswith("_")}
    model = UNet2DConditionModel(**cfg).eval()
    n_params = sum(p.numel() for p in model.parameters())
    gen = torch.Generator().manual_seed(0)
    sample = torch.randn(1, cfg["in_channels"], args.latent, args.latent,
                         generator=gen)
    ctx = torch.randn(1, TEXT_TOKENS, cfg["cross_attention_dim"],
                      generator=gen)
    times = []
    with torch.no_grad():
        for i in range(args.runs + 1):
            t = time.perf_counter()
            model(sample, 999, encoder_hidden_states=ctx)
            if i > 0:
                times.append(time.perf_counter() - t)
    print("diffusers UNet %dx%d  %9.1f ms  (best of %d, float32, %d torch "
          "threads, %d parameters, %s)" % (
              args.latent, args.latent, 1000 * min(times), args.runs,
              args.threads, n_params, os.path.basename(
                  os.path.normpath(args.config_dir))))


if __name__ == "__main__":
    main()
