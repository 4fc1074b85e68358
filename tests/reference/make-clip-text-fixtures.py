#!/usr/bin/env python3
"""Write the CLIP text encoder fixtures under tests/data/clip-text/:

    /usr/bin/python3 tests/reference/make-clip-text-fixtures.py [CLIP_REPO]

For each tiny config (one with hidden_act "quick_gelu", one with "gelu") it
draws seeded random weights, saves them as a transformers CLIPTextModel
directory (config.json + model.safetensors, keys text_model.*), runs the
model in float64 on a few token id sequences and writes, per sequence:

    ids-<seq>.txt                     the ids, space separated
    <seq>/tap-embeddings.npy          token + position embeddings [1, n, D]
    <seq>/tap-encoder.layers.<i>.npy  each encoder layer's output
    <seq>/last_hidden_state.npy       after the final layer norm

(float32, rounded once from float64).  These are transformers'
hidden_states[0…L] and last_hidden_state, what diffusers'
StableDiffusionPipeline conditions the UNet on.

The reference.  transformers itself cannot be installed here (no Debian
package, its repository is larger than the mirror takes), so the model is
OpenAI's original CLIP text transformer, clip/model.py of github:openai/CLIP
(CLIP_REPO, a bare clone; default /work/.mirror/openai+CLIP/repo, commit
CLIP_COMMIT below), which transformers' CLIPTextModel is a port of and whose
checkpoints it converts key by key.  The script loads that file unchanged
and maps the transformers weights onto it (q, k, v → in_proj; fc1/fc2 →
c_fc/c_proj; layer_norm1/2 → ln_1/ln_2; final_layer_norm → ln_final),
replacing two modules for what transformers does differently: OpenAI's
LayerNorm wrapper computes in float32 (torch's nn.LayerNorm with the
config's eps is used, so the run stays float64), and its activation is
always QuickGELU (nn.GELU(), the erf form, stands in for hidden_act
"gelu", as transformers' ACT2FN["gelu"] is).  The causal mask is OpenAI's
own (-inf above the diagonal, built for each sequence length).

Needs Debian's python3-torch and python3-numpy only.
"""

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import torch
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import safetensors_io  # noqa: E402

OUT_DIR = os.path.normpath(os.path.join(HERE, "..", "data", "clip-text"))
CLIP_REPO = sys.argv[1] if len(sys.argv) > 1 else "/work/.mirror/openai+CLIP/repo"
CLIP_COMMIT = "d05afc436d78f1c48dc0dbf8e5980a9d471f35f6"
WEIGHTS_FILE = "model.safetensors"

# The configs: CLIPTextConfig keys.  intermediate_size is 4 * hidden_size,
# as OpenAI's block has it (and every released CLIP).
CONFIGS = {
    "quick-gelu": {
        "seed": 7701, "vocab_size": 1000, "hidden_size": 32,
        "num_attention_heads": 4, "num_hidden_layers": 2,
        "hidden_act": "quick_gelu", "layer_norm_eps": 1e-5,
    },
    "gelu": {
        "seed": 7702, "vocab_size": 600, "hidden_size": 48,
        "num_attention_heads": 3, "num_hidden_layers": 3,
        "hidden_act": "gelu", "layer_norm_eps": 1e-5,
    },
}
MAX_POSITIONS = 77
PROMPT_TOKENS = 10      # words between the begin and end tokens
EMBED_STD = 0.5         # token and position embeddings
BIAS_STD = 0.05
NORM_SCALE_STD = 0.1
NORM_SHIFT_STD = 0.05


def load_openai_model_py():
    src = subprocess.check_output(
        ["git", "-C", CLIP_REPO, "show", CLIP_COMMIT + ":clip/model.py"])
    tmp = tempfile.mkdtemp()
    path = os.path.join(tmp, "openai_clip_model.py")
    with open(path, "wb") as f:
        f.write(src)
    spec = importlib.util.spec_from_file_location("openai_clip_model", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    shutil.rmtree(tmp)
    return module


def random_weights(cfg, gen):
    """transformers CLIPTextModel state dict (float32 numpy)."""
    d, v, p = cfg["hidden_size"], cfg["vocab_size"], MAX_POSITIONS
    inner = 4 * d

    def normal(shape, std, mean=0.0):
        return (mean + std * torch.randn(shape, generator=gen,
                                         dtype=torch.float64)).float().numpy()

    def linear(prefix, n_in, n_out):
        bound = (3.0 / n_in) ** 0.5
        w[prefix + ".weight"] = ((torch.rand((n_out, n_in), generator=gen,
                                             dtype=torch.float64) * 2 - 1)
                                 * bound).float().numpy()
        w[prefix + ".bias"] = normal((n_out,), BIAS_STD)

    def norm(prefix):
        w[prefix + ".weight"] = normal((d,), NORM_SCALE_STD, 1.0)
        w[prefix + ".bias"] = normal((d,), NORM_SHIFT_STD)

    w = {}
    t = "text_model."
    w[t + "embeddings.token_embedding.weight"] = normal((v, d), EMBED_STD)
    w[t + "embeddings.position_embedding.weight"] = normal((p, d), EMBED_STD)
    for i in range(cfg["num_hidden_layers"]):
        layer = t + "encoder.layers.%d." % i
        norm(layer + "layer_norm1")
        for proj in ("q_proj", "k_proj", "v_proj", "out_proj"):
            linear(layer + "self_attn." + proj, d, d)
        norm(layer + "layer_norm2")
        linear(layer + "mlp.fc1", d, inner)
        linear(layer + "mlp.fc2", inner, d)
    norm(t + "final_layer_norm")
    return w


def openai_transformer(oc, cfg, w, n):
    """OpenAI's Transformer for sequences of @n tokens, float64, with the
    transformers weights @w mapped onto it."""
    d, layers = cfg["hidden_size"], cfg["num_hidden_layers"]
    mask = torch.empty(n, n).fill_(float("-inf")).triu_(1)
    model = oc.Transformer(d, layers, cfg["num_attention_heads"], mask)
    t = lambda k: torch.from_numpy(w[k]).double()  # noqa: E731
    for i, block in enumerate(model.resblocks):
        layer = "text_model.encoder.layers.%d." % i
        block.ln_1 = nn.LayerNorm(d, eps=cfg["layer_norm_eps"])
        block.ln_2 = nn.LayerNorm(d, eps=cfg["layer_norm_eps"])
        if cfg["hidden_act"] == "gelu":
            block.mlp.gelu = nn.GELU()
        sd = {
            "attn.in_proj_weight": torch.cat([t(layer + "self_attn.%s_proj.weight" % x)
                                              for x in "qkv"]),
            "attn.in_proj_bias": torch.cat([t(layer + "self_attn.%s_proj.bias" % x)
                                            for x in "qkv"]),
            "attn.out_proj.weight": t(layer + "self_attn.out_proj.weight"),
            "attn.out_proj.bias": t(layer + "self_attn.out_proj.bias"),
            "ln_1.weight": t(layer + "layer_norm1.weight"),
            "ln_1.bias": t(layer + "layer_norm1.bias"),
            "ln_2.weight": t(layer + "layer_norm2.weight"),
            "ln_2.bias": t(layer + "layer_norm2.bias"),
            "mlp.c_fc.weight": t(layer + "mlp.fc1.weight"),
            "mlp.c_fc.bias": t(layer + "mlp.fc1.bias"),
            "mlp.c_proj.weight": t(layer + "mlp.fc2.weight"),
            "mlp.c_proj.bias": t(layer + "mlp.fc2.bias"),
        }
        block.double()
        block.load_state_dict(sd, strict=True)
    return model.double().eval()


def run(oc, cfg, w, ids):
    """{tap name: float64 [1, n, D]} for the id sequence @ids."""
    n = len(ids)
    t = lambda k: torch.from_numpy(w[k]).double()  # noqa: E731
    model = openai_transformer(oc, cfg, w, n)
    final = nn.LayerNorm(cfg["hidden_size"], eps=cfg["layer_norm_eps"]).double()
    final.load_state_dict({"weight": t("text_model.final_layer_norm.weight"),
                           "bias": t("text_model.final_layer_norm.bias")})
    taps = {}
    with torch.no_grad():
        x = (t("text_model.embeddings.token_embedding.weight")[torch.tensor(ids)]
             + t("text_model.embeddings.position_embedding.weight")[:n])[None]
        taps["embeddings"] = x.clone()
        x = x.permute(1, 0, 2)          # OpenAI's blocks take [n, batch, D]
        for i, block in enumerate(model.resblocks):
            x = block(x)
            taps["encoder.layers.%d" % i] = x.permute(1, 0, 2).clone()
        taps["last_hidden_state"] = final(x.permute(1, 0, 2))
    return {k: v.numpy() for k, v in taps.items()}


def sequences(cfg, gen):
    """A short prompt, a prompt padded to 77 like SD 1.5's tokenizer pads
    (with the end token), and 77 random ids."""
    v = cfg["vocab_size"]
    bos, eos = v - 2, v - 1      # CLIP's are the last two ids of the vocab
    words = torch.randint(0, v - 2, (PROMPT_TOKENS,), generator=gen).tolist()
    prompt = [bos] + words + [eos]
    return {
        "short": [bos] + words[:5] + [eos],
        "padded": prompt + [eos] * (MAX_POSITIONS - len(prompt)),
        "random": torch.randint(0, v, (MAX_POSITIONS,), generator=gen).tolist(),
    }


def write_config(path, cfg):
    config = {
        "_name_or_path": "tiny random CLIPTextModel (ppdiffuse fixtures)",
        "architectures": ["CLIPTextModel"],
        "model_type": "clip_text_model",
        "attention_dropout": 0.0,
        "bos_token_id": cfg["vocab_size"] - 2,
        "eos_token_id": cfg["vocab_size"] - 1,
        "pad_token_id": 1,
        "hidden_act": cfg["hidden_act"],
        "hidden_size": cfg["hidden_size"],
        "initializer_factor": 1.0,
        "initializer_range": 0.02,
        "intermediate_size": 4 * cfg["hidden_size"],
        "layer_norm_eps": cfg["layer_norm_eps"],
        "max_position_embeddings": MAX_POSITIONS,
        "num_attention_heads": cfg["num_attention_heads"],
        "num_hidden_layers": cfg["num_hidden_layers"],
        "projection_dim": cfg["hidden_size"],
        "torch_dtype": "float32",
        "vocab_size": cfg["vocab_size"],
    }
    with open(path, "w") as f:
        json.dump(config, f, indent=2, sort_keys=True)
        f.write("\n")


def main():
    torch.set_num_threads(1)
    oc = load_openai_model_py()
    if os.path.isdir(OUT_DIR):
        shutil.rmtree(OUT_DIR)
    for name, cfg in CONFIGS.items():
        gen = torch.Generator().manual_seed(cfg["seed"])
        d = os.path.join(OUT_DIR, name)
        os.makedirs(d)
        w = random_weights(cfg, gen)
        write_config(os.path.join(d, "config.json"), cfg)
        safetensors_io.write(os.path.join(d, WEIGHTS_FILE), w, {"format": "pt"})
        seqs = sequences(cfg, gen)
        results = {}
        for seq, ids in seqs.items():
            taps = results[seq] = run(oc, cfg, w, ids)
            out = taps["last_hidden_state"]
            # A fixture that would not catch a wrong implementation must not
            # be written: outputs vary, the mask matters, layers change x.
            assert out.std() > 0.5, (name, seq, out.std())
            assert not np.allclose(taps["encoder.layers.0"], taps["embeddings"])
            with open(os.path.join(d, "ids-%s.txt" % seq), "w") as f:
                f.write(" ".join(str(i) for i in ids) + "\n")
            os.makedirs(os.path.join(d, seq))
            for tap, value in taps.items():
                file = ("last_hidden_state.npy" if tap == "last_hidden_state"
                        else "tap-%s.npy" % tap)
                np.save(os.path.join(d, seq, file), value.astype("<f4"))
        # Causal: the prompts' common first tokens get the same states.
        common = PROMPT_TOKENS // 2 + 1
        assert np.allclose(results["short"]["last_hidden_state"][:, :common],
                           results["padded"]["last_hidden_state"][:, :common])
        assert not np.allclose(results["short"]["last_hidden_state"][:, common],
                               results["padded"]["last_hidden_state"][:, common])
        print("%s: %d layers, width %d, %s" % (name, cfg["num_hidden_layers"],
                                                cfg["hidden_size"], cfg["hidden_act"]))


if __name__ == "__main__":
    main()
