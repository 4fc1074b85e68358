#!/usr/bin/env python3
"""What a 16-bit dtype costs diffusers' own UNet on the full-size fixtures of
tests/data/scale (make_scale_fixtures.py): the same seeded weights and
inputs, the model converted to each dtype, its output against the float64
reference out.npy, measured as test-kernels-scale measures ppdiffuse's
(max |diff| relative to max |ref|, and NMSE):

    PYTHONPATH=DIFFUSERS/src:HUB/src python3 \\
        tests/reference/scale_dtype_error.py [--device cuda] \\
        [--dtype f16,bf16] [sd-turbo] [sd15]

test-scale.c's 16-bit bounds are about twice these.  float16 needs a device
whose torch runs it (a GPU); bfloat16 also runs on the CPU.  TensorFloat-32
stays off.
"""

import argparse
import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import seeded  # noqa: E402
from make_scale_fixtures import (CONTEXT_KEY, MODELS, SAMPLE_KEY,  # noqa
                                 SCALE_DIR, fill)
from diffusers import UNet2DConditionModel  # noqa: E402

DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}


def measure(name, spec, dtypes, device):
    ref = np.load(os.path.join(SCALE_DIR, name, "out.npy")).astype(np.float64)
    ref_max = float(np.max(np.abs(ref)))
    model = UNet2DConditionModel(**spec["config"]).eval()
    fill(model, spec["seeds"]["weights"])
    shape = ref.shape
    ctx_shape = (shape[0], 77, spec["config"]["cross_attention_dim"])
    sample = seeded.input_tensor(spec["seeds"]["inputs"], SAMPLE_KEY, shape)
    ctx = seeded.input_tensor(spec["seeds"]["inputs"], CONTEXT_KEY,
                              ctx_shape)
    # Each dtype from the float32 weights (converting one dtype's model to
    # the next would round twice).
    weights = {k: v.clone() for k, v in model.state_dict().items()}
    model.to(device)
    for dt in dtypes:
        dtype = DTYPES[dt]
        model.to(dtype)
        model.load_state_dict(weights)
        with torch.inference_mode():
            out = model(torch.from_numpy(sample).to(device, dtype),
                        spec["timestep"],
                        encoder_hidden_states=torch.from_numpy(ctx).to(
                            device, dtype)).sample
        y = out.to(torch.float64).cpu().numpy()
        diff = float(np.max(np.abs(y - ref)))
        nmse = float(np.sum((y - ref) ** 2) / np.sum(ref ** 2))
        print("diffusers %s %-4s on %s against float64: max|diff| %.3e = "
              "%.2e of max|ref| %.4g, NMSE %.3e" % (
                  name, dt, device, diff, diff / ref_max, ref_max, nmse),
              flush=True)
    del model


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("models", nargs="*", default=list(MODELS))
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="f16,bf16")
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    for name in args.models:
        assert name in MODELS, "unknown model %s (have %s)" % (
            name, list(MODELS))
        measure(name, MODELS[name], args.dtype.split(","),
                torch.device(args.device))


if __name__ == "__main__":
    main()
