/* ppdiffuse — a UNet's temporal feature bank (after StreamV2V, "Looking
 * Backward: Streaming Video-to-Video Translation with Feature Banks"): per
 * self-attention layer, the keys, values and outputs of past frames, which
 * the next frame's self-attention also attends to (extended attention) and
 * whose most similar outputs it takes in part (feature fusion), merged to
 * a bounded size.  One bank per stream and denoising step; the caller
 * hands it to the UNet before each forward (pp_unet_set_bank).
 *
 * At self-attention layer ℓ (forward order), with the bank's M rows
 * (Kb, Vb, Ob) and the frame's L rows q, k, v of C channels:
 *   K = [k; Kb], V = [v; Vb] (just k, v while M = 0);
 *   O = to_out (attention (q, K, V));
 *   in the fusing layers (the mid block's and the up blocks' before the
 *   middle one, as StreamV2V's), while M > 0, each row O_i becomes
 *   (1 − s)·O_i + s·N_i, N_i the bank output most similar to O_i (cosine,
 *   lowest index on ties) when that similarity is at least the threshold,
 *   else O_i itself; s = PP_FEATURE_BANK_STRENGTH;
 *   then the bank takes [Kb; k], [Vb; v], [Ob; O] (O before fusion): when
 *   that is more than P = frames · L rows, r = N − P of them (rows 0, 2, …,
 *   2r − 2) are each averaged into the remaining row whose key is most
 *   similar (StreamV2V's bipartite token merging, with a fixed split
 *   instead of a random one, so that a sequence always gives the same
 *   frames).
 * The bank lives in the model backend's memory and its work is that
 * backend's ops (the bank's four in pp-ops-list.h, products and
 * conversions): nothing of it crosses the bus.  docs/models.md,
 * "Temporal feature bank". */
#pragma once

#include "pp-backend.h"

G_BEGIN_DECLS

/* StreamV2V's feature injection strength. */
#define PP_FEATURE_BANK_STRENGTH 0.8

typedef struct _PpFeatureBank PpFeatureBank;

/* A bank keeping at most @frames frames' worth of rows per layer and
 * fusing outputs whose cosine similarity is at least @threshold. */
PpFeatureBank *pp_feature_bank_new    (guint frames, gdouble threshold);
void           pp_feature_bank_free   (PpFeatureBank * bank);
/* Empties every layer: the next frame attends to itself alone. */
void           pp_feature_bank_reset  (PpFeatureBank * bank);
/* Bytes the bank holds in its backend's memory: its layers' rows (and
 * room for a frame's) and the scratch one layer's fusion and merging
 * work in.  Kept across resets. */
gsize          pp_feature_bank_bytes  (PpFeatureBank * bank);
/* Rows the bank's layers hold now (0 after a reset). */
guint64        pp_feature_bank_rows   (PpFeatureBank * bank);
/* Whether every layer's last take merged: each holds its frames' worth
 * of rows, and each frame's work (its rows, sizes and buffers) is the
 * same as the last one's until a reset.  So a forward with the bank may
 * be a CUDA graph's replay from then on; the bank keeps no count on the
 * host that a replay would miss. */
gboolean       pp_feature_bank_steady (PpFeatureBank * bank);
/* Rows fused over the bank's life, and rows that could have been (those
 * of fusing layers while the bank held rows). */
void           pp_feature_bank_fused  (PpFeatureBank * bank,
                                       guint64 * fused, guint64 * candidates);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (PpFeatureBank, pp_feature_bank_free)

/* For the UNet (pp-unet.c): one layer's bank in forward order. */
typedef struct _PpBankLayer PpBankLayer;

/* Starts a forward: layers are numbered from 0 again. */
void           pp_feature_bank_begin  (PpFeatureBank * bank);
/* The next layer's bank, for @channels channels. */
PpBankLayer   *pp_feature_bank_next   (PpFeatureBank * bank, gint channels);
guint          pp_bank_layer_rows     (PpBankLayer * layer);
/* The bank's keys and values after the frame's own on the device:
 * @k_ext, @v_ext [L + M, C] get @k, @v (device, [L, C]) then the bank's.
 * The bank holds float32; the views may be of any activation dtype
 * (@k_ext's that of @k, @v_ext's that of @v): the bank's rows are
 * rounded to it, and the frame's widened when the bank takes them. */
void           pp_bank_layer_extend   (PpBankLayer * layer, PpBackend * be,
                                       PpView k, PpView v, gint rows,
                                       PpOut k_ext, PpOut v_ext);
/* Fuses @out ([L, C] on the device) with the bank's outputs (when it has
 * rows) and takes the frame's @k, @v and unfused @out into the bank.
 * Views of any activation dtype, as for pp_bank_layer_extend. */
void           pp_bank_layer_take     (PpBankLayer * layer, PpBackend * be,
                                       PpView k, PpView v, PpOut out,
                                       gint rows, gboolean fuse);

G_END_DECLS
