#!/usr/bin/env python3
"""Write the temporal feature-bank fixtures under tests/data/feature-bank/
with diffusers' own UNet2DConditionModel in float64:

    ../shared/tools/diffusers-env MIRROR /usr/bin/python3 \\
        tests/reference/make_feature_bank_fixtures.py [sd15] [turbo]

(or PYTHONPATH=DIFFUSERS/src:HUB/src as for make_scale_fixtures.py;
"--scan" prints the fused fractions over a range of thresholds instead,
which is how TAU below was chosen.)

The feature bank follows StreamV2V ("Looking Backward: Streaming
Video-to-Video Translation with Feature Banks", arXiv 2405.15757):
extended self-attention over the keys and values of past frames, feature
fusion with their outputs, and a bank kept to a bounded size by merging.
The model is diffusers' UNet, unchanged, with FeatureBankProcessor (below)
installed on every self-attention (every "attn1" Attention module; the
cross-attentions keep diffusers' default processor).  The rule, per
self-attention layer l (forward order), per denoising step s, with that
layer's bank (Kb, Vb, Ob) of M rows (M = 0 at the start and after a
reset) and the processor's input x [L, C] (BasicTransformerBlock has
already applied norm1), Hd heads of d = C / Hd channels:

 1. q, k, v = to_q(x), to_k(x), to_v(x)     (no bias in these UNets)
 2. K = [k; Kb], V = [v; Vb] (k, v alone while M = 0); per head
    softmax(q_h K_h^T / sqrt(d)) V_h; O = to_out[0](heads side by side)
 3. fusing layers only (the mid block's and those of up_blocks.i with
    i < len(block_out_channels) // 2), while M > 0: per row i,
    cos_ij = O_i . Ob_j / (|O_i| |Ob_j|) (0 when a norm is 0),
    j* = argmax_j cos_ij (lowest j on ties), and when cos_ij* >= tau
    O'_i = (1 - s) O_i + s Ob_j*, else O'_i = O_i; s = 0.8.  The layer
    returns O' (the block adds its residual as usual).
 4. the bank takes the frame: T_K = [Kb; k], T_V = [Vb; v], T_O = [Ob; O]
    (O before fusion), N = M + L rows.  With P = F L (F the bank's frames):
    when N <= P the bank is T; else r = N - P, sources A = rows
    0, 2, ..., 2r - 2, destinations B = the other rows in increasing order;
    each a in A goes to d(a) = argmax_b in B cos(T_K[a], T_K[b]) (lowest b
    on ties, cos 0 when a norm is 0) and the new bank row of b is the mean
    of T[b] and every T[a] with d(a) = b, for T_K, T_V and T_O alike.

Each denoising step has its own banks; a reset empties all of them.  The
sequence: frames 0-9, a reset before frame 5, two steps per frame
(timesteps 999 and 499, one UNet call each, with that step's banks; the
steps do not chain, each has its own input), bank frames F = 1 and 2.
The inputs drift slowly so that fusion takes some rows and not others:
    x_f   = float32(base + 0.05 f drift + 0.02 noise_f)
    step 0 input  x_f,  step 1 input  float32(0.5 x_f + 0.1)
with base, drift, noise_f = seeded.input_tensor(seed, "base" | "drift" |
"noise-<f>", (1, 4, 6, 10)) (float32, combined in float64 and rounded once)
and the context seeded.input_tensor(seed, "encoder_hidden_states",
(1, 7, cross_attention_dim)) for every call.

Before the models, an independent per-row loop (plain Python floats, no
arrays) of the same rule is run on a small random layer for several
frames with both F and compared with the processor to 1e-12, outputs and
banks, fusion and merging both taken and not taken, with a zero row and
duplicated rows for the zero-norm and lowest-index rules.  For each model
the script asserts what the fixtures must show (empty bank = plain UNet;
the bank changes every other frame; F = 1 and 2 part from the third frame
of a segment; a fused share inside 10%..90%; no fusion cosine within
MIN_FUSION_MARGIN of tau), that each of SLIPS (plausible mistakes in the
rule) moves some frame past the C test's bound, and that the same
sequence through diffusers in float32 takes every fusion and merge
decision as float64 does.

Writes tests/data/feature-bank/<model>/ for model sd15 (unet-sd15-tiny)
and turbo (unet-turbo-tiny):
    sequence.json     the sequence, the rule's parameters, the layer names,
                      seeds and formulas, fused rows per frame, statistics
    inputs.npy        float32 [frames · steps, 4, 6, 10] (frame-major): the UNet inputs
    context.npy       float32 [1, 7, cross_attention_dim]
    out-F1.npy, out-F2.npy  float32 [frames · steps, 4, 6, 10] (frame-major): the outputs
                      with a bank of F frames
    plain.npy         float32 [frames · steps, 4, 6, 10] (frame-major): the plain UNet's
and its section of tests/data/README (between README_BEGIN and README_END,
replaced in place, appended when absent).
"""

import json
import math
import os
import platform
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import safetensors_io  # noqa: E402
import seeded  # noqa: E402

import diffusers  # noqa: E402
from diffusers import UNet2DConditionModel  # noqa: E402
from diffusers.models.attention_processor import (  # noqa: E402
    Attention, AttnProcessor)

DATA_DIR = os.path.normpath(os.path.join(HERE, "..", "data"))
OUT_DIR = os.path.join(DATA_DIR, "feature-bank")
README = os.path.join(DATA_DIR, "README")
README_BEGIN = "=== feature-bank/ (make_feature_bank_fixtures.py) ==="
README_END = "=== end of feature-bank/ ==="
WEIGHTS_FILE = "diffusion_pytorch_model.safetensors"

MODELS = {"sd15": "unet-sd15-tiny", "turbo": "unet-turbo-tiny"}
SEEDS = {"sd15": 9101, "turbo": 9201}
# The fusion threshold per model (see --scan): fuses a fair share of the
# rows of the fusing layers, neither almost none nor almost all.
TAU = {"sd15": 0.993, "turbo": 0.978}
STRENGTH = 0.8
BANK_FRAMES = [1, 2]
STEPS = [999, 499]
FRAMES = 10
RESET_BEFORE = [5]
LATENT_SHAPE = (1, 4, 6, 10)
CONTEXT_TOKENS = 7
BASE_KEY = "base"
DRIFT_KEY = "drift"
NOISE_KEY = "noise-%d"
CONTEXT_KEY = "encoder_hidden_states"
DRIFT = 0.05
NOISE = 0.02
STEP1_SCALE = 0.5
STEP1_SHIFT = 0.1
SELF_ATTENTION = "attn1"
PROCESSOR_SUFFIX = SELF_ATTENTION + ".processor"
# The fused share of the fusing layers' rows must lie strictly inside.
FUSED_RANGE = (0.1, 0.9)
# Bounds the asserts hold.
SAME_TOL = 1e-10        # empty bank vs plain UNet
DIFFERENT_MIN = 1e-3    # bank vs plain, F = 1 vs F = 2
NAIVE_TOL = 1e-12
TORCH_THREADS = 1
# No fusion cosine may lie this near tau (float32 could decide it the
# other way).
MIN_FUSION_MARGIN = 5e-5
# The C test's bound: max|c - ref| <= C_TOLERANCE * max(1, max|ref|) per
# frame and step (docs/models.md).
C_TOLERANCE = 1e-4
# Plausible mistakes in the rule; each must move some frame past that
# bound: the bank keeps the fused outputs; the frame's rows come before
# the bank's in T; the odd rows are the sources; the merge matches outputs
# instead of keys; the bank keeps the newest P rows; sources are dropped,
# not averaged; s and 1 - s swapped; every self-attention fuses.
SLIPS = ["bank-takes-fused", "frame-rows-first", "merge-odd",
         "merge-by-output", "fifo", "merge-drop", "strength-swapped",
         "fuse-everywhere"]
SCAN_TAUS = [round(0.95 + 0.001 * i, 3) for i in range(50)]

# The independent check: one layer, C = 8 channels in 2 heads, 6 rows.
CHECK_SEED = 9001
CHECK_CHANNELS = 8
CHECK_HEADS = 2
CHECK_ROWS = 6
CHECK_FRAMES = 6
CHECK_RESET_BEFORE = 4


# -- the rule, vectorised (what the processor runs) --------------------------

def cosine(a, b):
    """[m, n] cosine similarities of the rows of a and b; 0 where either
    norm is 0."""
    dots = a @ b.transpose(0, 1)
    den = a.norm(dim=1)[:, None] * b.norm(dim=1)[None, :]
    safe = torch.where(den > 0, den, torch.ones_like(den))
    return torch.where(den > 0, dots / safe, torch.zeros_like(dots))


def first_argmax(c):
    """Per row, the lowest column of the maximum (numpy's argmax rule)."""
    return torch.from_numpy(np.argmax(c.numpy(), axis=1))


def fuse(o, ob, tau, strength, slip=None):
    """(O', fused mask, best cosine per row).  slip: a deliberate mistake,
    for the sensitivity check only (SLIPS)."""
    c = cosine(o, ob)
    j = first_argmax(c)
    best = c[torch.arange(o.shape[0]), j]
    mask = best >= tau
    if slip == "strength-swapped":
        mixed = strength * o + (1.0 - strength) * ob[j]
    else:
        mixed = (1.0 - strength) * o + strength * ob[j]
    return torch.where(mask[:, None], mixed, o), mask, best


def merge(tk, tv, to, capacity, slip=None):
    """The bank after taking T = (tk, tv, to): T itself when it fits, else
    the bipartite merge down to capacity rows.  Also the sources'
    destinations (positions in B), None when nothing is merged."""
    n = tk.shape[0]
    if n <= capacity:
        return tk, tv, to, None
    r = n - capacity
    if slip == "fifo":
        return tk[r:], tv[r:], to[r:], torch.zeros(r, dtype=torch.long)
    a = torch.arange(1 if slip == "merge-odd" else 0, 2 * r, 2)
    keep = torch.ones(n, dtype=torch.bool)
    keep[a] = False
    b = torch.nonzero(keep)[:, 0]
    assert b.shape[0] == capacity
    sim = to if slip == "merge-by-output" else tk
    dest = first_argmax(cosine(sim[a], sim[b]))
    count = torch.ones(capacity, dtype=tk.dtype)
    count.index_add_(0, dest, torch.ones(r, dtype=tk.dtype))
    out = []
    for t in (tk, tv, to):
        acc = t[b].clone()
        if slip == "merge-drop":
            out.append(acc)
            continue
        acc.index_add_(0, dest, t[a])
        out.append(acc / count[:, None])
    return out[0], out[1], out[2], dest


class BankState:
    """Every layer's bank for every step, and what the processors did."""

    def __init__(self, frames, tau, strength=STRENGTH, slip=None):
        self.frames = frames
        self.tau = tau
        self.strength = strength
        self.slip = slip
        self.step = 0
        self.banks = {}
        self.log = []

    def reset(self):
        self.banks = {}


class FeatureBankProcessor:
    """diffusers attention processor for one self-attention layer: the rule
    of the module docstring, in diffusers' own attention arithmetic
    (head_to_batch_dim, get_attention_scores, batch_to_head_dim)."""

    def __init__(self, name, fusing, state):
        self.name = name
        self.fusing = fusing
        self.state = state

    def __call__(self, attn, hidden_states, encoder_hidden_states=None,
                 attention_mask=None, temb=None, *args, **kwargs):
        assert encoder_hidden_states is None and attention_mask is None
        assert hidden_states.ndim == 3 and hidden_states.shape[0] == 1
        assert attn.spatial_norm is None and attn.group_norm is None
        assert not attn.residual_connection
        assert attn.rescale_output_factor == 1.0
        st = self.state
        slip = st.slip
        fusing = self.fusing or slip == "fuse-everywhere"
        x = hidden_states
        rows = x.shape[1]
        q = attn.to_q(x)
        k = attn.to_k(x)
        v = attn.to_v(x)
        key = (st.step, self.name)
        bank = st.banks.get(key)
        if bank is not None:
            kb, vb, ob = bank
            kk = torch.cat([k[0], kb])[None]
            vv = torch.cat([v[0], vb])[None]
        else:
            kk, vv = k, v
        qh = attn.head_to_batch_dim(q)
        kh = attn.head_to_batch_dim(kk)
        vh = attn.head_to_batch_dim(vv)
        probs = attn.get_attention_scores(qh, kh, None)
        o = attn.batch_to_head_dim(torch.bmm(probs, vh))
        o = attn.to_out[0](o)[0]
        out = o
        entry = {"layer": self.name, "step": st.step,
                 "bank_rows": 0 if bank is None else bank[0].shape[0],
                 "rows": rows, "fusing": self.fusing}
        if fusing and bank is not None:
            out, mask, best = fuse(o, ob, st.tau, st.strength, slip)
            entry["fused"] = int(mask.sum())
            entry["mask"] = mask.numpy().copy()
            entry["best"] = best.numpy().astype(np.float64)
        if slip == "bank-takes-fused":
            o = out
        if bank is None:
            tk, tv, to = k[0], v[0], o
        elif slip == "frame-rows-first":
            tk = torch.cat([k[0], kb])
            tv = torch.cat([v[0], vb])
            to = torch.cat([o, ob])
        else:
            tk = torch.cat([kb, k[0]])
            tv = torch.cat([vb, v[0]])
            to = torch.cat([ob, o])
        nk, nv, no, dest = merge(tk, tv, to, st.frames * rows, slip)
        st.banks[key] = (nk.detach(), nv.detach(), no.detach())
        if dest is not None and slip is None:
            entry["dest"] = dest.numpy().copy()
            entry["merge_margin"] = merge_margin(tk, st.frames * rows)
        st.log.append(entry)
        return attn.to_out[1](out)[None]


def merge_margin(tk, capacity):
    """The smallest gap between the best and second-best destination's
    cosine over the sources: how near a merge decision is to flipping."""
    n = tk.shape[0]
    r = n - capacity
    a = np.arange(0, 2 * r, 2)
    b = np.setdiff1d(np.arange(n), a)
    c = np.sort(cosine(tk[a], tk[b]).numpy(), axis=1)
    return float(np.min(c[:, -1] - c[:, -2]))


# -- the rule once more, one row and one number at a time ------------------

def naive_linear(w, bias, x):
    """y = x W^T + bias on lists of rows."""
    out = []
    for row in x:
        y = []
        for o in range(len(w)):
            acc = 0.0
            for i in range(len(row)):
                acc += w[o][i] * row[i]
            y.append(acc + (bias[o] if bias is not None else 0.0))
        out.append(y)
    return out


def naive_cos(a, b):
    dot = 0.0
    na = 0.0
    nb = 0.0
    for i in range(len(a)):
        dot += a[i] * b[i]
        na += a[i] * a[i]
        nb += b[i] * b[i]
    if na == 0.0 or nb == 0.0:
        return 0.0
    return dot / (math.sqrt(na) * math.sqrt(nb))


def naive_best(row, others):
    """(index, cosine) of the first most similar of others."""
    best_j, best_c = 0, naive_cos(row, others[0])
    for j in range(1, len(others)):
        c = naive_cos(row, others[j])
        if c > best_c:
            best_j, best_c = j, c
    return best_j, best_c


def naive_fuse(o, ob, tau, strength):
    out = []
    fused = 0
    for row in o:
        j, c = naive_best(row, ob)
        if c >= tau:
            fused += 1
            out.append([(1.0 - strength) * row[i] + strength * ob[j][i]
                        for i in range(len(row))])
        else:
            out.append(list(row))
    return out, fused


def naive_merge(tk, tv, to, capacity):
    n = len(tk)
    if n <= capacity:
        return tk, tv, to
    r = n - capacity
    sources = [2 * i for i in range(r)]
    dests = [i for i in range(n) if i not in sources]
    groups = {b: [b] for b in dests}
    for a in sources:
        j, _ = naive_best(tk[a], [tk[b] for b in dests])
        groups[dests[j]].append(a)
    merged = []
    for t in (tk, tv, to):
        rows = []
        for b in dests:
            members = sorted(groups[b])
            rows.append([sum(t[m][i] for m in members) / len(members)
                         for i in range(len(t[b]))])
        merged.append(rows)
    return merged[0], merged[1], merged[2]


def naive_layer(p, x, bank, heads, fusing, frames, tau, strength):
    """One frame through one layer: (output rows, new bank, fused rows)."""
    q = naive_linear(p["q"], None, x)
    k = naive_linear(p["k"], None, x)
    v = naive_linear(p["v"], None, x)
    kb, vb, ob = bank
    kk = k + kb
    vv = v + vb
    c = len(x[0])
    d = c // heads
    scale = 1.0 / math.sqrt(d)
    att = [[0.0] * c for _ in x]
    for h in range(heads):
        lo = h * d
        for i in range(len(x)):
            scores = []
            for j in range(len(kk)):
                acc = 0.0
                for e in range(lo, lo + d):
                    acc += q[i][e] * kk[j][e]
                scores.append(acc * scale)
            top = max(scores)
            ex = [math.exp(s - top) for s in scores]
            tot = sum(ex)
            for e in range(lo, lo + d):
                acc = 0.0
                for j in range(len(kk)):
                    acc += ex[j] / tot * vv[j][e]
                att[i][e] = acc
    o = naive_linear(p["out"], p["out_bias"], att)
    out, fused = o, 0
    if fusing and ob:
        out, fused = naive_fuse(o, ob, tau, strength)
    new = naive_merge(kb + k, vb + v, ob + o, frames * len(x))
    return out, new, fused


def check_naive():
    """The processor against naive_layer, on a random layer and frames."""
    torch.set_default_dtype(torch.float64)
    attn = Attention(query_dim=CHECK_CHANNELS, heads=CHECK_HEADS,
                     dim_head=CHECK_CHANNELS // CHECK_HEADS, bias=False,
                     out_bias=True).eval()
    torch.set_default_dtype(torch.float32)
    assert isinstance(attn.processor, AttnProcessor)
    params = {}
    for name, t in attn.state_dict().items():
        t.copy_(torch.from_numpy(
            seeded.weight(CHECK_SEED, name, tuple(t.shape)).astype(
                np.float64)))
        params[name] = t.numpy().tolist()
    p = {"q": params["to_q.weight"], "k": params["to_k.weight"],
         "v": params["to_v.weight"], "out": params["to_out.0.weight"],
         "out_bias": params["to_out.0.bias"]}
    shape = (CHECK_ROWS, CHECK_CHANNELS)
    base = seeded.input_tensor(CHECK_SEED, "check-base", shape)
    drift = seeded.input_tensor(CHECK_SEED, "check-drift", shape)
    xs = []
    for f in range(CHECK_FRAMES):
        x = base.astype(np.float64) + 0.3 * f * drift
        x[1] = 0.0              # zero keys: cosine 0, lowest b
        x[4] = x[3]             # equal keys and outputs: ties
        xs.append(x)
    for frames in BANK_FRAMES:
        for fusing, tau in ((True, None), (False, 0.0)):
            # tau: the median best cosine of frame 1, so that some fuse.
            if tau is None:
                tau = _check_tau(attn, xs, frames)
            state = BankState(frames, tau)
            proc = FeatureBankProcessor("check", fusing, state)
            attn.set_processor(proc)
            bank = ([], [], [])
            fused_any = kept_any = merged = 0
            for f, x in enumerate(xs):
                if f == CHECK_RESET_BEFORE:
                    state.reset()
                    bank = ([], [], [])
                with torch.no_grad():
                    got = attn(torch.from_numpy(x)[None])[0].numpy()
                want, bank, fused = naive_layer(p, x.tolist(), bank,
                                                CHECK_HEADS, fusing, frames,
                                                tau, STRENGTH)
                entry = state.log[-1]
                assert entry.get("fused", 0) == fused, (f, entry, fused)
                if fusing and entry["bank_rows"]:
                    fused_any += fused > 0
                    kept_any += fused < CHECK_ROWS
                merged += "merge_margin" in entry
                err = np.max(np.abs(got - np.array(want)))
                assert err <= NAIVE_TOL, ("output", frames, fusing, f, err)
                have = state.banks[(0, "check")]
                for t, w in zip(have, bank):
                    assert t.shape == (len(w), CHECK_CHANNELS)
                    err = np.max(np.abs(t.numpy() - np.array(w)))
                    assert err <= NAIVE_TOL, ("bank", frames, fusing, f, err)
            assert merged >= 2, (frames, merged)
            if fusing:
                assert fused_any and kept_any, (frames, fused_any, kept_any)
    # The zero-norm and tie rules on their own.
    f64 = torch.float64
    o = torch.tensor([[0.0, 0.0, 0.0], [1.0, 2.0, 0.5], [2.0, 4.0, 1.0]],
                     dtype=f64)
    ob = torch.tensor([[1.0, 0.0, 0.0], [0.0, 0.0, 0.0], [3.0, 6.0, 1.5],
                       [1.0, 2.0, 0.5], [0.0, 1.0, 0.0]], dtype=f64)
    got, mask, _best = fuse(o, ob, 0.0, STRENGTH)
    want, fused = naive_fuse(o.tolist(), ob.tolist(), 0.0, STRENGTH)
    assert mask.tolist() == [True, True, True] and fused == 3
    assert np.max(np.abs(got.numpy() - np.array(want))) <= NAIVE_TOL
    # Row 0 (zero) takes Ob_0; rows 1, 2 take Ob_2 (equal to Ob_3).
    assert np.allclose(got[0].numpy(), STRENGTH * ob[0].numpy())
    assert np.allclose(got[1].numpy(), 0.2 * o[1].numpy()
                       + STRENGTH * ob[2].numpy())
    tk = torch.cat([ob, o])
    nk, nv, no, dest = merge(tk, tk * 2, tk * 3, 5)
    wk, wv, wo = naive_merge(tk.tolist(), (tk * 2).tolist(),
                             (tk * 3).tolist(), 5)
    for t, w in ((nk, wk), (nv, wv), (no, wo)):
        assert np.max(np.abs(t.numpy() - np.array(w))) <= NAIVE_TOL
    print("naive check: the processor equals the per-row loop to %g "
          "(F = %s, fusion and merging)" % (NAIVE_TOL, BANK_FRAMES),
          flush=True)


def _check_tau(attn, xs, frames):
    state = BankState(frames, 2.0)
    attn.set_processor(FeatureBankProcessor("check", True, state))
    with torch.no_grad():
        for x in xs[:2]:
            attn(torch.from_numpy(x)[None])
    return float(np.median(state.log[-1]["best"]))


# -- the models --------------------------------------------------------------

def load_unet(model_dir, dtype=torch.float64):
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    torch.set_default_dtype(dtype)
    unet = UNet2DConditionModel.from_config(cfg).eval()
    torch.set_default_dtype(torch.float32)
    tensors = safetensors_io.read(os.path.join(model_dir, WEIGHTS_FILE))[0]
    np_dtype = np.float64 if dtype == torch.float64 else np.float32
    unet.load_state_dict({k: torch.from_numpy(v.astype(np_dtype))
                          for k, v in tensors.items()})
    return unet, cfg


def fusing_layer(name, n_blocks):
    if name.startswith("mid_block."):
        return True
    if name.startswith("up_blocks."):
        return int(name.split(".")[1]) < n_blocks // 2
    return False


def self_attention_order(unet, sample, context):
    """attn1 module names in the order the forward calls them."""
    order = []
    handles = []
    for name, module in unet.named_modules():
        if isinstance(module, Attention) and \
                name.rsplit(".", 1)[-1] == SELF_ATTENTION:
            handles.append(module.register_forward_pre_hook(
                lambda _m, _i, name=name: order.append(name)))
    with torch.no_grad():
        unet(sample, STEPS[0], encoder_hidden_states=context)
    for h in handles:
        h.remove()
    assert len(order) == len(set(order)) == len(handles), order
    return order


def make_inputs(seed):
    base = seeded.input_tensor(seed, BASE_KEY, LATENT_SHAPE).astype(
        np.float64)
    drift = seeded.input_tensor(seed, DRIFT_KEY, LATENT_SHAPE).astype(
        np.float64)
    inputs = np.empty((FRAMES, len(STEPS)) + LATENT_SHAPE[1:], np.float32)
    for f in range(FRAMES):
        noise = seeded.input_tensor(seed, NOISE_KEY % f, LATENT_SHAPE).astype(
            np.float64)
        x = (base + DRIFT * f * drift + NOISE * noise).astype(np.float32)
        inputs[f, 0] = x[0]
        inputs[f, 1] = (STEP1_SCALE * x.astype(np.float64)
                        + STEP1_SHIFT).astype(np.float32)[0]
    return inputs


def run_plain(unet, plain_procs, inputs, context):
    unet.set_attn_processor(dict(plain_procs))
    out = np.empty(inputs.shape, np.float64)
    dtype = context.numpy().dtype
    with torch.no_grad():
        for f in range(FRAMES):
            for s, t in enumerate(STEPS):
                x = torch.from_numpy(inputs[f, s][None].astype(dtype))
                out[f, s] = unet(x, t, encoder_hidden_states=context
                                 ).sample[0].numpy()
    return out


def run_bank(unet, plain_procs, fusing, inputs, context, frames, tau,
             slip=None):
    state = BankState(frames, tau, slip=slip)
    procs = {}
    for pname, proc in plain_procs.items():
        if pname.endswith(PROCESSOR_SUFFIX):
            layer = pname[:-len(".processor")]
            procs[pname] = FeatureBankProcessor(layer, layer in fusing, state)
        else:
            procs[pname] = proc
    unet.set_attn_processor(procs)
    out = np.empty(inputs.shape, np.float64)
    dtype = context.numpy().dtype
    logs = []
    with torch.no_grad():
        for f in range(FRAMES):
            if f in RESET_BEFORE:
                state.reset()
            per_step = []
            for s, t in enumerate(STEPS):
                state.step = s
                state.log = []
                x = torch.from_numpy(inputs[f, s][None].astype(dtype))
                out[f, s] = unet(x, t, encoder_hidden_states=context
                                 ).sample[0].numpy()
                per_step.append(state.log)
            logs.append(per_step)
    return out, logs


def fused_stats(logs, tau):
    """Per frame: fused rows, candidate rows (fusing layers with a bank),
    and the fusion decisions' smallest distance to tau."""
    per_frame = []
    margin = math.inf
    merge_margin_min = math.inf
    for per_step in logs:
        fused = cand = 0
        rows = []
        for log in per_step:
            step_rows = {}
            for e in log:
                if "merge_margin" in e:
                    merge_margin_min = min(merge_margin_min,
                                           e["merge_margin"])
                if "fused" in e:
                    fused += e["fused"]
                    cand += e["rows"]
                    step_rows[e["layer"]] = e["fused"]
                    margin = min(margin, float(np.min(np.abs(
                        e["best"] - tau))))
            rows.append(step_rows)
        per_frame.append((fused, cand, rows))
    return per_frame, margin, merge_margin_min


def total_fraction(per_frame):
    fused = sum(p[0] for p in per_frame)
    cand = sum(p[1] for p in per_frame)
    return fused / cand if cand else float("nan")


def segment_starts():
    return [0] + list(RESET_BEFORE)


def prepare(name):
    unet, cfg = load_unet(os.path.join(DATA_DIR, MODELS[name]))
    seed = SEEDS[name]
    cross = cfg["cross_attention_dim"]
    context32 = seeded.input_tensor(seed, CONTEXT_KEY,
                                    (1, CONTEXT_TOKENS, cross))
    context = torch.from_numpy(context32.astype(np.float64))
    inputs = make_inputs(seed)
    plain_procs = dict(unet.attn_processors)
    order = self_attention_order(
        unet, torch.from_numpy(inputs[0, 0][None].astype(np.float64)),
        context)
    n_blocks = len(cfg["block_out_channels"])
    fusing = [n for n in order if fusing_layer(n, n_blocks)]
    assert sorted(order) == sorted(
        p[:-len(".processor")] for p in plain_procs
        if p.endswith(PROCESSOR_SUFFIX))
    return unet, cfg, seed, context32, context, inputs, plain_procs, order, \
        fusing


def scan(name):
    unet, _cfg, _seed, _c32, context, inputs, plain_procs, _order, fusing = \
        prepare(name)
    print("%s: fusing layers %s" % (name, fusing), flush=True)
    for tau in SCAN_TAUS:
        parts = []
        for frames in BANK_FRAMES:
            _out, logs = run_bank(unet, plain_procs, fusing, inputs, context,
                                  frames, tau)
            per_frame, margin, mmargin = fused_stats(logs, tau)
            parts.append("F%d %.3f [%s] margin %.2e merge %.2e" % (
                frames, total_fraction(per_frame),
                " ".join("%.2f" % (p[0] / p[1]) if p[1] else "-"
                         for p in per_frame), margin, mmargin))
        print("  tau %.3f  %s" % (tau, "  ".join(parts)), flush=True)


def decision_flips(logs_a, logs_b):
    """Fusion and merge decisions that differ between two runs, and how
    many decisions there were."""
    fused = fused_all = merged = merged_all = 0
    for frame_a, frame_b in zip(logs_a, logs_b):
        for step_a, step_b in zip(frame_a, frame_b):
            for ea, eb in zip(step_a, step_b):
                assert ea["layer"] == eb["layer"]
                assert ("mask" in ea) == ("mask" in eb)
                assert ("dest" in ea) == ("dest" in eb)
                if "mask" in ea:
                    fused += int(np.sum(ea["mask"] != eb["mask"]))
                    fused_all += ea["mask"].size
                if "dest" in ea:
                    merged += int(np.sum(ea["dest"] != eb["dest"]))
                    merged_all += ea["dest"].size
    return fused, fused_all, merged, merged_all


def frame_diff(a, b):
    """Per frame, max |a - b| over its steps."""
    return [float(np.max(np.abs(a[f] - b[f]))) for f in range(FRAMES)]


def layer_table(unet, order, fusing, logs):
    """Per self-attention layer: channels, heads, rows, fusing."""
    modules = dict(unet.named_modules())
    rows = {e["layer"]: e["rows"] for e in logs[0][0]}
    table = []
    for name in order:
        attn = modules[name]
        c = attn.to_q.in_features
        d = c // attn.heads
        # The C side's arithmetic: no q/k/v bias, an output bias, 1/sqrt(d).
        assert attn.to_q.bias is None and attn.to_k.bias is None
        assert attn.to_v.bias is None and attn.to_out[0].bias is not None
        assert attn.to_q.out_features == c and attn.inner_dim == c
        assert abs(attn.scale - d ** -0.5) < 1e-15, (name, attn.scale)
        assert not attn.upcast_attention and not attn.upcast_softmax
        table.append({"name": name, "channels": c, "heads": attn.heads,
                      "head_dim": d, "rows": rows[name],
                      "fusing": name in fusing})
    return table


def make(name):
    (unet, cfg, seed, context32, context, inputs, plain_procs, order,
     fusing) = prepare(name)
    tau = TAU[name]
    starts = segment_starts()
    print("%s: %d self-attention layers, fusing %s; tau %g" % (
        name, len(order), fusing, tau), flush=True)
    plain = run_plain(unet, plain_procs, inputs, context)
    outs, logs, info_f = {}, {}, {}
    for frames in BANK_FRAMES:
        out, log = run_bank(unet, plain_procs, fusing, inputs, context,
                            frames, tau)
        outs[frames], logs[frames] = out, log
        per_frame, margin, mmargin = fused_stats(log, tau)
        total = total_fraction(per_frame)
        fractions = [p[0] / p[1] if p[1] else None for p in per_frame]
        print("  F=%d fused %.3f of the fusing layers' rows; per frame %s"
              % (frames, total, " ".join(
                  "-" if x is None else "%.3f" % x for x in fractions)),
              flush=True)
        assert FUSED_RANGE[0] < total < FUSED_RANGE[1], (name, frames, total)
        assert margin >= MIN_FUSION_MARGIN, (name, frames, margin)
        d_plain = frame_diff(out, plain)
        for f in range(FRAMES):
            if f in starts:
                # An empty bank is plain self-attention.
                assert d_plain[f] <= SAME_TOL, (name, frames, f, d_plain[f])
                assert per_frame[f][1] == 0
            else:
                for s in range(len(STEPS)):
                    d = float(np.max(np.abs(out[f, s] - plain[f, s])))
                    assert d > DIFFERENT_MIN, (name, frames, f, s, d)
                assert per_frame[f][1] > 0
        info_f[frames] = {
            "per_frame": per_frame, "total": total, "fractions": fractions,
            "margin": margin, "merge_margin": mmargin, "d_plain": d_plain}
    d12 = frame_diff(outs[1], outs[2])
    for f in range(FRAMES):
        since = f - max(x for x in starts if x <= f)
        if since >= 2:
            # F = 1 merged after the second frame; F = 2 did not.
            for s in range(len(STEPS)):
                d = float(np.max(np.abs(outs[1][f, s] - outs[2][f, s])))
                assert d > DIFFERENT_MIN, (name, f, s, d)
        else:
            assert d12[f] <= SAME_TOL, (name, f, d12[f])
    sensitivity = {}
    for slip in SLIPS:
        worst = 0.0
        for frames in BANK_FRAMES:
            out, _log = run_bank(unet, plain_procs, fusing, inputs, context,
                                 frames, tau, slip)
            ref = outs[frames]
            for f in range(FRAMES):
                for s in range(len(STEPS)):
                    bound = C_TOLERANCE * max(1.0, np.max(np.abs(ref[f, s])))
                    worst = max(worst, float(np.max(np.abs(
                        out[f, s] - ref[f, s]))) / bound)
        sensitivity[slip] = worst
        assert worst > 1.0, (name, slip, worst)
    print("  slips, max|diff| over the C bound: %s" % ", ".join(
        "%s %.3g" % kv for kv in sensitivity.items()), flush=True)
    layers = layer_table(unet, order, fusing, logs[1])
    fusing_rows = [x["rows"] for x in layers if x["fusing"]]

    # The same sequence through diffusers in float32: the error a float32
    # implementation of the rule should expect, and whether any fusion or
    # merge decision flips with it.
    unet32, _cfg = load_unet(os.path.join(DATA_DIR, MODELS[name]),
                             torch.float32)
    procs32 = dict(unet32.attn_processors)
    ctx32 = torch.from_numpy(context32)
    check32 = {"plain": {"max_abs_diff": float(np.max(np.abs(
        run_plain(unet32, procs32, inputs, ctx32) - plain)))}}
    for frames in BANK_FRAMES:
        out32, log32 = run_bank(unet32, procs32, fusing, inputs, ctx32,
                                frames, tau)
        ff, fa, mf, ma = decision_flips(logs[frames], log32)
        # A decision that float32 flips would make the fixture fragile.
        assert ff == 0 and mf == 0, (name, frames, ff, mf)
        check32["F%d" % frames] = {
            "max_abs_diff": float(np.max(np.abs(out32 - outs[frames]))),
            "fusion_flips": ff, "fusion_decisions": fa,
            "merge_flips": mf, "merge_decisions": ma}
    print("  float32 vs float64: %s" % json.dumps(check32), flush=True)

    out_dir = os.path.join(OUT_DIR, name)
    os.makedirs(out_dir, exist_ok=True)

    def rows(x):
        """[frames, steps, C, H, W] -> [frames * steps, C, H, W], the
        same bytes: the C tensors have at most 4 dimensions."""
        return x.reshape((-1,) + x.shape[2:]).astype("<f4")

    np.save(os.path.join(out_dir, "inputs.npy"), rows(inputs))
    np.save(os.path.join(out_dir, "context.npy"), context32.astype("<f4"))
    np.save(os.path.join(out_dir, "plain.npy"), rows(plain))
    for frames in BANK_FRAMES:
        np.save(os.path.join(out_dir, "out-F%d.npy" % frames),
                rows(outs[frames]))
    cross = cfg["cross_attention_dim"]
    info = {
        "unet": MODELS[name],
        "steps": STEPS,
        "frames": FRAMES,
        "reset_before": RESET_BEFORE,
        "tau": tau,
        "strength": STRENGTH,
        "bank_frames": BANK_FRAMES,
        "fusing_layers": fusing,
        "self_attention_layers": order,
        "layers": layers,
        "seeds": {"inputs": seed},
        "inputs": {
            "generator": "tests/reference/seeded.py input_tensor(seed, key, "
                         "shape) (C: pp_seeded_fill_input)",
            "shape": list(LATENT_SHAPE),
            "keys": {"base": BASE_KEY, "drift": DRIFT_KEY,
                     "noise": NOISE_KEY.replace("%d", "<f>")},
            "formula": [
                "x_f = float32(base + %g * f * drift + %g * noise_f), "
                "computed in float64 from the float32 tensors" % (DRIFT,
                                                                  NOISE),
                "step 0 input: x_f",
                "step 1 input: float32(%g * x_f + %g), in float64" % (
                    STEP1_SCALE, STEP1_SHIFT)],
            "array": "inputs.npy [frames * steps, 4, 6, 10], frame-major"},
        "context": {"seed": seed, "key": CONTEXT_KEY,
                    "shape": [1, CONTEXT_TOKENS, cross],
                    "array": "context.npy, the same for every call"},
        "timesteps": "steps[s] for step s, passed to the UNet as an integer",
        "fused_fraction": {
            "F%d" % fr: {"total": round(info_f[fr]["total"], 6),
                         "per_frame": [None if x is None else round(x, 6)
                                       for x in info_f[fr]["fractions"]]}
            for fr in BANK_FRAMES},
        "fused_rows": {
            "F%d" % fr: [[[row.get(layer, 0) for layer in fusing]
                          for row in p[2]] if p[1] else None
                         for p in info_f[fr]["per_frame"]]
            for fr in BANK_FRAMES},
        "fused_rows_layout": "[frame][step][fusing layer]: rows of that "
                             "layer fused (of its 'rows'); null while the "
                             "bank is empty",
        "fusing_layer_rows": fusing_rows,
        "min_fusion_margin": {"F%d" % fr: info_f[fr]["margin"]
                              for fr in BANK_FRAMES},
        "min_merge_margin": {"F%d" % fr: info_f[fr]["merge_margin"]
                             for fr in BANK_FRAMES},
        "max_abs_out": {"plain": float(np.max(np.abs(plain))),
                        **{"F%d" % fr: float(np.max(np.abs(outs[fr])))
                           for fr in BANK_FRAMES}},
        "max_abs_diff_from_plain": {
            "F%d" % fr: info_f[fr]["d_plain"] for fr in BANK_FRAMES},
        "max_abs_diff_F1_F2": d12,
        "float32_check": check32,
        "c_tolerance": "max|c - ref| <= %g * max(1, max|ref|) per frame "
                       "and step" % C_TOLERANCE,
        "slips": {k: round(v, 3) for k, v in sensitivity.items()},
        "slips_meaning": "max over frames and steps of |out with the slip "
                         "- out| in units of the C bound, F = 1 and 2",
    }
    with open(os.path.join(out_dir, "sequence.json"), "w") as f:
        json.dump(info, f, indent=2)
        f.write("\n")
    return info


README_TEXT = """\
A temporal feature bank (after StreamV2V, arXiv 2405.15757: extended
self-attention over the keys and values of past frames, feature fusion,
bank merging) against diffusers' own UNet2DConditionModel, in float64,
with an attention processor carrying the bank on every self-attention
("attn1"; the cross-attentions keep diffusers' default processor).
Generated by:
  ../shared/tools/diffusers-env MIRROR /usr/bin/python3 \\
      tests/reference/make_feature_bank_fixtures.py
with diffusers {diffusers} (aafed3f8), torch {torch} ({threads} thread),
numpy {numpy}, Python {python}; no transformers.  The UNets are
unet-sd15-tiny and unet-turbo-tiny above (float32 weights held in float64).
The rule, per self-attention layer (forward order) and denoising step,
with the layer's bank (Kb, Vb, Ob) of M rows and its input x [L, C] (the
transformer block's norm1 output, as diffusers hands it to the processor;
rows in h * W + w order), Hd heads of d = C / Hd channels:
  q, k, v = to_q(x), to_k(x), to_v(x)   (no bias)
  K = [k; Kb], V = [v; Vb] (just k, v while M = 0; the order of the rows
  does not change the attention)
  O = to_out.0(concat_h softmax(q_h K_h^T / sqrt(d)) V_h)   (with bias)
  fusing layers (the mid block's, and those of up_blocks.i with
  i < len(block_out_channels) // 2), while M > 0: per row,
    j* = argmax_j cos(O_i, Ob_j) (lowest j on ties; cos 0 for a zero
    norm), O'_i = (1 - s) O_i + s Ob_j* when cos >= tau, else O_i; s = 0.8;
    the layer returns O' (the block adds its residual)
  bank update: T = [Kb; k], [Vb; v], [Ob; O] (bank rows first; O
    unfused), N = M + L rows, P = F * L.  N <= P: the bank is T.  Else
    r = N - P; rows 0, 2, ..., 2r - 2 are sources, the others (in order)
    destinations; each source goes to the destination with the most
    similar KEY (cosine, lowest on ties) and each destination row becomes
    the mean of itself and its sources, for K, V and O alike (P rows).
Each step has its own banks; a reset empties all of them.  The sequence:
10 frames, a reset before frame 5, two steps per frame (timesteps 999 and
499, passed as integers; one UNet call each, they do not chain), F = 1
and 2 bank frames.  Inputs (seeded.py input_tensor, seed per model below,
shape [1,4,6,10]): x_f = float32(base + 0.05 f drift + 0.02 noise_f),
keys "base", "drift", "noise-<f>", combined in float64; step 0 takes x_f,
step 1 float32(0.5 x_f + 0.1).  Context: key "encoder_hidden_states",
[1,7,cross_attention_dim], the same for every call.  tau was chosen per
model with --scan (which prints the fused share over a range of tau) so
that the fused share lies well inside 10%..90% for both F and no fusion
cosine lies within 5e-5 of it.
The script checks the processor against an independent per-row loop of
the rule (outputs and banks, 1e-12), and asserts: frames 0 and 5 (empty
bank) equal the plain UNet to 1e-10, every other frame differs from it
by more than 1e-3 at both steps, F = 1 and F = 2 agree on frames 0, 1,
5, 6 and differ by more than 1e-3 on the others, the fused share of the
fusing layers' rows is strictly between 10% and 90% for both F, and each
of these slips moves some frame past the C bound (1e-4 * max(1, max|ref|)
per frame and step): the bank takes the fused outputs; the frame's rows
come first in T; the odd rows are the sources; the merge compares outputs
instead of keys; the bank keeps the newest P rows; sources are dropped,
not averaged; s and 1 - s swapped; every self-attention fuses.
The fusion and merge decisions are discrete: "margins" below are the
smallest |cos - tau| of a fusion and the smallest gap between a merge
source's best and second-best destination cosine.  The float32 run (the
same sequence through diffusers in float32) flipped none of them.
Each directory (<model>/):
  sequence.json  the above as data: unet (the directory under tests/data),
                 steps, frames, reset_before, tau, strength, bank_frames,
                 fusing_layers, self_attention_layers (forward order),
                 layers (channels, heads, head_dim, rows per layer),
                 seeds and input formulas, fused_fraction (per F: total
                 and per frame), fused_rows [frame][step][fusing layer],
                 the margins, max|out|, max|out - plain| per frame,
                 float32_check and the slips' sizes
  inputs.npy     float32 [20, 4, 6, 10]: frame · 2 + step; the UNet inputs
  context.npy    float32 [1, 7, cross_attention_dim]
  out-F1.npy, out-F2.npy  float32 [20, 4, 6, 10]: outputs with the bank
  plain.npy      float32 [20, 4, 6, 10]: the UNet without a bank
"""


def readme_rows(infos):
    rows = []
    for name, info in infos:
        fr = info["fused_fraction"]
        rows.append("%s/  %s, seed %d, tau %g; %d self-attention layers; "
                    "fusing:" % (name, info["unet"], info["seeds"]["inputs"],
                                 info["tau"],
                                 len(info["self_attention_layers"])))
        for layer in info["fusing_layers"]:
            rows.append("    " + layer)
        rows.append("  max|plain| %.3g; max|out-F1 - out-F2| %.3g; float32 "
                    "plain run off by %.2e" % (
                        info["max_abs_out"]["plain"],
                        max(info["max_abs_diff_F1_F2"]),
                        info["float32_check"]["plain"]["max_abs_diff"]))
        for key in ("F1", "F2"):
            per = " ".join("-" if x is None else "%.2f" % x
                           for x in fr[key]["per_frame"])
            c32 = info["float32_check"][key]
            rows.append("  %s: fused %.3f of the rows; per frame %s" % (
                key, fr[key]["total"], per))
            rows.append("      max|out| %.3g, max|out - plain| %.3g; "
                        "margins: fusion %.1e, merge %.1e" % (
                            info["max_abs_out"][key],
                            max(info["max_abs_diff_from_plain"][key]),
                            info["min_fusion_margin"][key],
                            info["min_merge_margin"][key]))
            rows.append("      float32 run off by %.2e; flipped %d of %d "
                        "fusion, %d of %d merge decisions" % (
                            c32["max_abs_diff"], c32["fusion_flips"],
                            c32["fusion_decisions"], c32["merge_flips"],
                            c32["merge_decisions"]))
        slips = sorted(info["slips"].items(), key=lambda kv: kv[1])
        rows.append("  slips (max|diff| / C bound), smallest first:")
        line = "   "
        for k, v in slips:
            item = " %s %.0f" % (k, v)
            if len(line) + len(item) > 76:
                rows.append(line)
                line = "   "
            line += item
        rows.append(line)
    return rows


def write_readme(infos):
    with open(README) as f:
        old = f.read()
    body = README_TEXT.format(
        diffusers=diffusers.__version__, torch=torch.__version__,
        threads=TORCH_THREADS, numpy=np.__version__,
        python=platform.python_version())
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
    do_scan = "--scan" in args
    names = [a for a in args if a != "--scan"] or list(MODELS)
    for n in names:
        assert n in MODELS, "unknown model %s (have %s)" % (n, list(MODELS))
    torch.set_num_threads(TORCH_THREADS)
    if do_scan:
        for n in names:
            scan(n)
        return
    check_naive()
    for n in names:
        make(n)
    infos = []
    for n in MODELS:
        path = os.path.join(OUT_DIR, n, "sequence.json")
        if os.path.exists(path):
            with open(path) as f:
                infos.append((n, json.load(f)))
    write_readme(infos)


if __name__ == "__main__":
    main()
