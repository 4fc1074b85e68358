/* ppdiffuse — single-file checkpoints in the original Stable Diffusion key
 * layout (one .safetensors with the UNet under model.diffusion_model., the
 * VAE under first_stage_model. and the text encoder under
 * cond_stage_model.), read as diffusers' components without a converted
 * copy: each component's tensors are renamed (and, where the layouts
 * differ in shape, viewed) to diffusers' keys over the file's mapping.
 *
 * The family tells the text encoder's layout and the built-in
 * configurations: SD 1.x (OpenAI CLIP under cond_stage_model.transformer.)
 * or SD 2.x / SD-Turbo (OpenCLIP under cond_stage_model.model.). */
#pragma once

#include "pp-weights.h"

G_BEGIN_DECLS

typedef enum
{
  PP_CHECKPOINT_UNET,
  PP_CHECKPOINT_VAE,
  PP_CHECKPOINT_TEXT_ENCODER,
} PpCheckpointPart;

typedef enum
{
  PP_FAMILY_SD1,                /* SD 1.x: CLIP ViT-L/14, 768 wide */
  PP_FAMILY_SD2,                /* SD 2.x, SD-Turbo: OpenCLIP ViT-H/14 */
} PpFamily;

/* TRUE when @path names a file that is a single-file checkpoint (a
 * regular file ending in .safetensors), not a pipeline directory. */
gboolean     pp_checkpoint_is_file   (const gchar * path);
/* The family of @path, told by its text encoder's keys; an error names
 * what the file holds instead (SDXL's conditioner., a lone UNet, …). */
gboolean     pp_checkpoint_family    (const gchar * path, PpFamily * family,
                                      GError ** error);
const gchar *pp_family_name          (PpFamily family);
/* Writes the family's released configurations as a diffusers pipeline
 * folder without weights (model_index.json, unet/, vae/, text_encoder/,
 * scheduler/ config files) into @dir, for a checkpoint that comes without
 * one. */
gboolean     pp_family_write_configs (PpFamily family, const gchar * dir,
                                      GError ** error);
/* Removes what pp_family_write_configs wrote into @dir, and @dir. */
void         pp_family_remove_configs (const gchar * dir);
/* @part of checkpoint @path as diffusers' keys, for the component whose
 * config.json is @config_path (the UNet's and the VAE's say how the blocks
 * are numbered, the text encoder's how many layers it keeps).  A key of
 * the part's prefix that maps to nothing is an error naming it; what
 * diffusers leaves out (the DDPM schedule buffers, OpenCLIP's projection
 * and the layers after those the text encoder keeps) is skipped. */
PpWeights   *pp_checkpoint_part      (const gchar * path,
                                      PpCheckpointPart part,
                                      const gchar * config_path,
                                      GError ** error);

G_END_DECLS
