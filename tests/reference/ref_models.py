"""Independent PyTorch reference for TAESD and the SD UNet (float32).

This is a small re-implementation of diffusers' AutoencoderTiny and
UNet2DConditionModel, written from the semantics in docs/models.md (checked against
diffusers' source, not copied from it).  Its only jobs are to produce the
fixtures the C code is tested against and to pin down the exact semantics:

* Module attribute names are chosen so that state_dict() keys are exactly
  diffusers' checkpoint keys; a real checkpoint therefore loads unchanged.
* Every forward takes an optional `tap(name, tensor)` callback, called with
  the intermediate outputs docs/models.md names ("time_emb", "conv_in",
  "down_blocks.{i}", "mid_block", "up_blocks.{i}", "out"; TAESD
  "encoder.layers.{i}", "latents", "decoder.layers.{i}", "image").

Only what the supported configurations need is implemented; anything else in
a config is rejected, so a fixture can never silently exercise a path the
reference does not model.
"""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

# diffusers' get_timestep_embedding default; not a config key.
MAX_PERIOD = 10000.0
# Transformer2DModel's GroupNorm uses a fixed eps, not the UNet's norm_eps.
TRANSFORMER_GROUP_NORM_EPS = 1e-6
# BasicTransformerBlock's LayerNorms (norm_eps default of the block).
TRANSFORMER_LAYER_NORM_EPS = 1e-5
# FeedForward hidden width is FF_MULT * channels (GEGLU projects to twice that).
FF_MULT = 4
# Time embedding width is TIME_EMBED_MULT * block_out_channels[0].
TIME_EMBED_MULT = 4


def _no_tap(name, tensor):
    pass


def _tap_or_noop(tap):
    return tap if tap is not None else _no_tap


# --------------------------------------------------------------------------
# TAESD (diffusers AutoencoderTiny)
# --------------------------------------------------------------------------

TAESD_CLASS = "AutoencoderTiny"


def _conv3x3(cin, cout, stride=1, bias=True):
    return nn.Conv2d(cin, cout, kernel_size=3, stride=stride, padding=1,
                     bias=bias)


class TinyBlock(nn.Module):
    """AutoencoderTinyBlock: relu(conv(x) + skip(x)).

    `conv` is a Sequential so its convolutions land at keys conv.0, conv.2,
    conv.4 (the ReLUs take indices 1 and 3 without weights).
    """

    def __init__(self, cin, cout):
        super().__init__()
        self.conv = nn.Sequential(
            _conv3x3(cin, cout), nn.ReLU(),
            _conv3x3(cout, cout), nn.ReLU(),
            _conv3x3(cout, cout))
        # A 1x1 projection only exists when the widths differ (key skip.weight).
        self.skip = (nn.Conv2d(cin, cout, kernel_size=1, bias=False)
                     if cin != cout else nn.Identity())

    def forward(self, x):
        return F.relu(self.conv(x) + self.skip(x))


class TaesdEncoder(nn.Module):
    def __init__(self, in_channels, latent_channels, channels, num_blocks):
        super().__init__()
        layers = []
        for i, (c, n) in enumerate(zip(channels, num_blocks)):
            if i == 0:
                layers.append(_conv3x3(in_channels, c))
            else:
                # diffusers uses C -> C here (not prev -> C); only equal
                # widths are supported, see TaesdModel.
                layers.append(_conv3x3(c, c, stride=2, bias=False))
            layers.extend(TinyBlock(c, c) for _ in range(n))
        layers.append(_conv3x3(channels[-1], latent_channels))
        self.layers = nn.Sequential(*layers)

    def forward(self, image, tap):
        # The network was trained on [0, 1] images; callers pass [-1, 1].
        x = (image + 1) / 2
        for i, layer in enumerate(self.layers):
            x = layer(x)
            tap("encoder.layers.%d" % i, x)
        return x


class TaesdDecoder(nn.Module):
    def __init__(self, latent_channels, out_channels, channels, num_blocks,
                 factor):
        super().__init__()
        layers = [_conv3x3(latent_channels, channels[0]), nn.ReLU()]
        last = len(channels) - 1
        for i, (c, n) in enumerate(zip(channels, num_blocks)):
            layers.extend(TinyBlock(c, c) for _ in range(n))
            if i != last:
                layers.append(nn.Upsample(scale_factor=factor, mode="nearest"))
            # Only the final conv (to RGB) has a bias.
            layers.append(_conv3x3(c, out_channels if i == last else c,
                                   bias=(i == last)))
        self.layers = nn.Sequential(*layers)

    def forward(self, latents, tap):
        # Soft clamp of the latents to (-3, 3) before decoding.
        x = torch.tanh(latents / 3) * 3
        for i, layer in enumerate(self.layers):
            x = layer(x)
            tap("decoder.layers.%d" % i, x)
        # The network produces [0, 1]; callers get [-1, 1].
        return x * 2 - 1


class TaesdModel(nn.Module):
    """AutoencoderTiny with keys encoder.layers.{i}.* / decoder.layers.{i}.*."""

    def __init__(self, cfg):
        super().__init__()
        _check_taesd_config(cfg)
        self.config = dict(cfg)
        self.encoder = TaesdEncoder(
            cfg["in_channels"], cfg["latent_channels"],
            cfg["encoder_block_out_channels"], cfg["num_encoder_blocks"])
        self.decoder = TaesdDecoder(
            cfg["latent_channels"], cfg["out_channels"],
            cfg["decoder_block_out_channels"], cfg["num_decoder_blocks"],
            cfg["upsampling_scaling_factor"])

    def encode(self, image, tap=None):
        tap = _tap_or_noop(tap)
        latents = self.encoder(image, tap)
        tap("latents", latents)
        return latents

    def decode(self, latents, tap=None):
        tap = _tap_or_noop(tap)
        image = self.decoder(latents, tap)
        tap("image", image)
        return image


def _check_taesd_config(cfg):
    _expect(cfg, "_class_name", TAESD_CLASS)
    _expect(cfg, "act_fn", "relu")
    _expect(cfg, "upsample_fn", "nearest", optional=True)
    _expect(cfg, "scaling_factor", 1.0, optional=True)
    _expect(cfg, "shift_factor", 0.0, optional=True)
    for side in ("encoder", "decoder"):
        ch = cfg["%s_block_out_channels" % side]
        nb = cfg["num_%s_blocks" % side]
        if len(ch) != len(nb):
            raise ValueError("%s_block_out_channels and num_%s_blocks differ "
                             "in length" % (side, side))
        # The stride-2 convs and upsample convs map C -> C, so a width change
        # between stages would not load a diffusers checkpoint either.
        if len(set(ch)) != 1:
            raise ValueError("%s_block_out_channels must all be equal, got %s"
                             % (side, ch))


# --------------------------------------------------------------------------
# UNet (diffusers UNet2DConditionModel)
# --------------------------------------------------------------------------

UNET_CLASS = "UNet2DConditionModel"
CROSS_DOWN = "CrossAttnDownBlock2D"
PLAIN_DOWN = "DownBlock2D"
CROSS_UP = "CrossAttnUpBlock2D"
PLAIN_UP = "UpBlock2D"
MID_CROSS = "UNetMidBlock2DCrossAttn"


def get_timestep_embedding(timesteps, dim, flip_sin_to_cos, freq_shift,
                           dtype=torch.float32):
    """Sinusoidal embedding [N, dim] of 1-D `timesteps`.

    freq_k = exp(-ln(MAX_PERIOD) * k / (half - freq_shift)), k < half;
    rows are [sin(t f), cos(t f)], or [cos, sin] with flip_sin_to_cos.
    diffusers evaluates this in float32 (exponent, exp and t * f all
    rounded to float32); dtype=float64 is only used to measure that error.
    """
    if dim % 2:
        raise ValueError("odd timestep embedding dim %d is not supported" % dim)
    half = dim // 2
    k = torch.arange(half, dtype=dtype)
    freqs = torch.exp(-math.log(MAX_PERIOD) * k / (half - freq_shift))
    args = timesteps.to(dtype)[:, None] * freqs[None, :]
    sin, cos = torch.sin(args), torch.cos(args)
    return torch.cat([cos, sin] if flip_sin_to_cos else [sin, cos], dim=-1)


class TimestepEmbedding(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.linear_1 = nn.Linear(cin, cout)
        self.linear_2 = nn.Linear(cout, cout)

    def forward(self, x):
        return self.linear_2(F.silu(self.linear_1(x)))


class ResnetBlock2D(nn.Module):
    def __init__(self, cin, cout, temb_dim, groups, eps):
        super().__init__()
        self.norm1 = nn.GroupNorm(groups, cin, eps=eps)
        self.conv1 = _conv3x3(cin, cout)
        self.time_emb_proj = nn.Linear(temb_dim, cout)
        self.norm2 = nn.GroupNorm(groups, cout, eps=eps)
        self.conv2 = _conv3x3(cout, cout)
        if cin != cout:
            self.conv_shortcut = nn.Conv2d(cin, cout, kernel_size=1)
        else:
            self.conv_shortcut = None

    def forward(self, x, temb):
        h = self.conv1(F.silu(self.norm1(x)))
        # The time embedding is a per-channel bias broadcast over H, W.
        h = h + self.time_emb_proj(F.silu(temb))[:, :, None, None]
        h = self.conv2(F.silu(self.norm2(h)))
        skip = x if self.conv_shortcut is None else self.conv_shortcut(x)
        return skip + h


class Attention(nn.Module):
    """Multi-head attention; heads split the channel axis in order.

    Head h owns channels [h * head_dim, (h + 1) * head_dim) of q, k, v and
    of the concatenated output, i.e. [N, L, heads * head_dim] row-major.
    """

    def __init__(self, dim, context_dim, heads):
        super().__init__()
        if dim % heads:
            raise ValueError("%d channels do not split into %d heads"
                             % (dim, heads))
        self.heads = heads
        self.head_dim = dim // heads
        self.to_q = nn.Linear(dim, dim, bias=False)
        self.to_k = nn.Linear(context_dim, dim, bias=False)
        self.to_v = nn.Linear(context_dim, dim, bias=False)
        # A list so the projection's key is to_out.0 (index 1 is dropout).
        self.to_out = nn.ModuleList([nn.Linear(dim, dim)])

    def _split(self, x):
        n, length, _ = x.shape
        return x.reshape(n, length, self.heads, self.head_dim).transpose(1, 2)

    def forward(self, x, context=None):
        context = x if context is None else context
        q = self._split(self.to_q(x))
        k = self._split(self.to_k(context))
        v = self._split(self.to_v(context))
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.head_dim)
        out = torch.softmax(scores, dim=-1) @ v
        n, _, lq, _ = out.shape
        out = out.transpose(1, 2).reshape(n, lq, self.heads * self.head_dim)
        return self.to_out[0](out)


class GEGLU(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.proj = nn.Linear(dim, 2 * hidden)

    def forward(self, x):
        # First half of the projection is the value, second half the gate;
        # gelu is the exact (erf) form, not the tanh approximation.
        value, gate = self.proj(x).chunk(2, dim=-1)
        return value * F.gelu(gate)


class FeedForward(nn.Module):
    def __init__(self, dim):
        super().__init__()
        hidden = FF_MULT * dim
        # Index 1 is diffusers' dropout slot, kept so the output Linear is
        # ff.net.2.
        self.net = nn.ModuleList([GEGLU(dim, hidden), nn.Identity(),
                                  nn.Linear(hidden, dim)])

    def forward(self, x):
        for layer in self.net:
            x = layer(x)
        return x


class BasicTransformerBlock(nn.Module):
    def __init__(self, dim, context_dim, heads):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=TRANSFORMER_LAYER_NORM_EPS)
        self.attn1 = Attention(dim, dim, heads)
        self.norm2 = nn.LayerNorm(dim, eps=TRANSFORMER_LAYER_NORM_EPS)
        self.attn2 = Attention(dim, context_dim, heads)
        self.norm3 = nn.LayerNorm(dim, eps=TRANSFORMER_LAYER_NORM_EPS)
        self.ff = FeedForward(dim)

    def forward(self, h, context):
        h = self.attn1(self.norm1(h)) + h
        h = self.attn2(self.norm2(h), context) + h
        return self.ff(self.norm3(h)) + h


class Transformer2D(nn.Module):
    """Transformer2DModel on [N, C, H, W]; tokens are pixels in row-major
    (y, x) order, token features are channels: [N, H*W, C]."""

    def __init__(self, dim, context_dim, heads, groups, linear_proj):
        super().__init__()
        self.linear_proj = linear_proj
        self.norm = nn.GroupNorm(groups, dim, eps=TRANSFORMER_GROUP_NORM_EPS)
        if linear_proj:
            self.proj_in = nn.Linear(dim, dim)
        else:
            self.proj_in = nn.Conv2d(dim, dim, kernel_size=1)
        self.transformer_blocks = nn.ModuleList(
            [BasicTransformerBlock(dim, context_dim, heads)])
        if linear_proj:
            self.proj_out = nn.Linear(dim, dim)
        else:
            self.proj_out = nn.Conv2d(dim, dim, kernel_size=1)

    def forward(self, x, context):
        n, c, hgt, wid = x.shape
        h = self.norm(x)
        # Both projection kinds are the same per-pixel affine map; only
        # where the layout change happens differs (and so the weight shape).
        if not self.linear_proj:
            h = self.proj_in(h)
        h = h.permute(0, 2, 3, 1).reshape(n, hgt * wid, c)
        if self.linear_proj:
            h = self.proj_in(h)
        for block in self.transformer_blocks:
            h = block(h, context)
        if self.linear_proj:
            h = self.proj_out(h)
        h = h.reshape(n, hgt, wid, c).permute(0, 3, 1, 2)
        if not self.linear_proj:
            h = self.proj_out(h)
        return h + x


class Downsample2D(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv = _conv3x3(c, c, stride=2)

    def forward(self, x):
        return self.conv(x)


class Upsample2D(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv = _conv3x3(c, c)

    def forward(self, x):
        return self.conv(F.interpolate(x, scale_factor=2.0, mode="nearest"))


class DownBlock(nn.Module):
    """CrossAttnDownBlock2D (with attentions) or DownBlock2D (without)."""

    def __init__(self, cin, cout, layers, temb_dim, groups, eps, cross,
                 context_dim, heads, linear_proj, downsample):
        super().__init__()
        self.resnets = nn.ModuleList(
            [ResnetBlock2D(cin if j == 0 else cout, cout, temb_dim, groups, eps)
             for j in range(layers)])
        if cross:
            self.attentions = nn.ModuleList(
                [Transformer2D(cout, context_dim, heads, groups, linear_proj)
                 for _ in range(layers)])
        else:
            self.attentions = None
        self.downsamplers = (nn.ModuleList([Downsample2D(cout)])
                             if downsample else None)

    def forward(self, h, temb, context, skips):
        for j, resnet in enumerate(self.resnets):
            h = resnet(h, temb)
            if self.attentions is not None:
                h = self.attentions[j](h, context)
            skips.append(h)
        if self.downsamplers is not None:
            h = self.downsamplers[0](h)
            skips.append(h)
        return h


class MidBlock(nn.Module):
    """UNetMidBlock2DCrossAttn: resnet, attention, resnet."""

    def __init__(self, c, temb_dim, groups, eps, context_dim, heads,
                 linear_proj):
        super().__init__()
        self.resnets = nn.ModuleList(
            [ResnetBlock2D(c, c, temb_dim, groups, eps) for _ in range(2)])
        self.attentions = nn.ModuleList(
            [Transformer2D(c, context_dim, heads, groups, linear_proj)])

    def forward(self, h, temb, context):
        h = self.resnets[0](h, temb)
        h = self.attentions[0](h, context)
        return self.resnets[1](h, temb)


class UpBlock(nn.Module):
    """CrossAttnUpBlock2D or UpBlock2D.

    Resnet j sees cat([h, skip], channels) with h first; h has `prev`
    channels for j == 0 and `cout` after; the skip has `cin` channels for
    the last resnet and `cout` otherwise.
    """

    def __init__(self, cin, cout, prev, layers, temb_dim, groups, eps, cross,
                 context_dim, heads, linear_proj, upsample):
        super().__init__()
        resnets = []
        for j in range(layers):
            h_ch = prev if j == 0 else cout
            skip_ch = cin if j == layers - 1 else cout
            resnets.append(ResnetBlock2D(h_ch + skip_ch, cout, temb_dim,
                                         groups, eps))
        self.resnets = nn.ModuleList(resnets)
        if cross:
            self.attentions = nn.ModuleList(
                [Transformer2D(cout, context_dim, heads, groups, linear_proj)
                 for _ in range(layers)])
        else:
            self.attentions = None
        self.upsamplers = (nn.ModuleList([Upsample2D(cout)])
                           if upsample else None)

    def forward(self, h, temb, context, skips):
        for j, resnet in enumerate(self.resnets):
            # Skips are consumed last-in first-out.
            h = resnet(torch.cat([h, skips.pop()], dim=1), temb)
            if self.attentions is not None:
                h = self.attentions[j](h, context)
        if self.upsamplers is not None:
            h = self.upsamplers[0](h)
        return h


# Config keys the reference understands and the only values it accepts
# (absent is fine too).  They mirror what diffusers writes in config.json
# today, so the fixtures look like real checkpoints.
UNET_FIXED_KEYS = {
    "act_fn": "silu",
    "addition_embed_type": None,
    "addition_time_embed_dim": None,
    "attention_type": "default",
    "center_input_sample": False,
    "class_embed_type": None,
    "class_embeddings_concat": False,
    "conv_in_kernel": 3,
    "conv_out_kernel": 3,
    "cross_attention_norm": None,
    "downsample_padding": 1,
    "dropout": 0.0,
    "dual_cross_attention": False,
    "encoder_hid_dim": None,
    "encoder_hid_dim_type": None,
    "mid_block_only_cross_attention": None,
    "mid_block_scale_factor": 1,
    "mid_block_type": MID_CROSS,
    "num_attention_heads": None,
    "num_class_embeds": None,
    "only_cross_attention": False,
    "projection_class_embeddings_input_dim": None,
    "resnet_out_scale_factor": 1.0,
    "resnet_skip_time_act": False,
    "resnet_time_scale_shift": "default",
    "reverse_transformer_layers_per_block": None,
    "time_cond_proj_dim": None,
    "time_embedding_act_fn": None,
    "time_embedding_dim": None,
    "time_embedding_type": "positional",
    "timestep_post_act": None,
}


def _expect(cfg, key, value, optional=False):
    if key not in cfg:
        if optional:
            return
        raise ValueError("config key %s is missing (expected %r)" % (key, value))
    if cfg[key] != value:
        raise ValueError("config key %s is %r, only %r is supported"
                         % (key, cfg[key], value))


def _per_block(cfg, key, n):
    """An int broadcast to every block, or a list of exactly n ints."""
    v = cfg[key]
    if isinstance(v, int):
        return [v] * n
    if len(v) != n:
        raise ValueError("config key %s has %d entries, expected %d"
                         % (key, len(v), n))
    return list(v)


def unet_heads(cfg):
    """Heads per down block.  attention_head_dim is a head COUNT here (the
    diffusers naming accident that SD configs rely on)."""
    return _per_block(cfg, "attention_head_dim", len(cfg["block_out_channels"]))


class UNetModel(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        _expect(cfg, "_class_name", UNET_CLASS)
        # Absent means diffusers' default, which is the supported value.
        for key, value in UNET_FIXED_KEYS.items():
            _expect(cfg, key, value, optional=True)
        self.config = dict(cfg)
        channels = list(cfg["block_out_channels"])
        nblocks = len(channels)
        down_types = list(cfg["down_block_types"])
        up_types = list(cfg["up_block_types"])
        if len(down_types) != nblocks or len(up_types) != nblocks:
            raise ValueError("down/up_block_types must have %d entries" % nblocks)
        for t in down_types:
            if t not in (CROSS_DOWN, PLAIN_DOWN):
                raise ValueError("unsupported down block type %s" % t)
        for t in up_types:
            if t not in (CROSS_UP, PLAIN_UP):
                raise ValueError("unsupported up block type %s" % t)
        if any(v != 1 for v in _per_block(cfg, "transformer_layers_per_block",
                                          nblocks)):
            raise ValueError("only transformer_layers_per_block 1 is supported")
        layers = _per_block(cfg, "layers_per_block", nblocks)
        if len(set(layers)) != 1:
            # The up path would need reversed per-block counts; not needed.
            raise ValueError("per-block layers_per_block is not supported")
        layers = layers[0]
        heads = unet_heads(cfg)
        groups = cfg["norm_num_groups"]
        eps = cfg["norm_eps"]
        ctx = cfg["cross_attention_dim"]
        linear = cfg["use_linear_projection"]

        self.flip_sin_to_cos = cfg["flip_sin_to_cos"]
        self.freq_shift = cfg["freq_shift"]
        c0 = channels[0]
        temb_dim = TIME_EMBED_MULT * c0
        self.time_embedding = TimestepEmbedding(c0, temb_dim)
        self.conv_in = _conv3x3(cfg["in_channels"], c0)

        self.down_blocks = nn.ModuleList()
        cin = c0
        for i, c in enumerate(channels):
            self.down_blocks.append(DownBlock(
                cin, c, layers, temb_dim, groups, eps,
                down_types[i] == CROSS_DOWN, ctx, heads[i], linear,
                downsample=(i != nblocks - 1)))
            cin = c

        self.mid_block = MidBlock(channels[-1], temb_dim, groups, eps, ctx,
                                  heads[-1], linear)

        rc = channels[::-1]
        rheads = heads[::-1]
        self.up_blocks = nn.ModuleList()
        for i in range(nblocks):
            prev = rc[i - 1] if i > 0 else rc[0]
            self.up_blocks.append(UpBlock(
                rc[min(i + 1, nblocks - 1)], rc[i], prev, layers + 1,
                temb_dim, groups, eps, up_types[i] == CROSS_UP, ctx,
                rheads[i], linear, upsample=(i != nblocks - 1)))

        self.conv_norm_out = nn.GroupNorm(groups, c0, eps=eps)
        self.conv_out = _conv3x3(c0, cfg["out_channels"])

    def forward(self, sample, timestep, context, tap=None):
        """sample [N, C, H, W], timestep a number (shared by the batch),
        context [N, L, cross_attention_dim]."""
        tap = _tap_or_noop(tap)
        n = sample.shape[0]
        # diffusers turns a scalar timestep into a tensor and converts it to
        # float32 before the sinusoid, whatever the model dtype.
        t = torch.full((n,), float(timestep), dtype=torch.float32)
        emb = get_timestep_embedding(t, self.conv_in.out_channels,
                                     self.flip_sin_to_cos, self.freq_shift,
                                     dtype=sample.dtype)
        temb = self.time_embedding(emb)
        tap("time_emb", temb)

        h = self.conv_in(sample)
        tap("conv_in", h)
        skips = [h]
        for i, block in enumerate(self.down_blocks):
            h = block(h, temb, context, skips)
            tap("down_blocks.%d" % i, h)

        h = self.mid_block(h, temb, context)
        tap("mid_block", h)

        for i, block in enumerate(self.up_blocks):
            h = block(h, temb, context, skips)
            tap("up_blocks.%d" % i, h)
        assert not skips, "every skip must be consumed"

        out = self.conv_out(F.silu(self.conv_norm_out(h)))
        tap("out", out)
        return out
