/* ppdiffuse — model configurations the benchmarks share: the released
 * SD-Turbo UNet and TAESD, as their config.json files say. */
#pragma once

#include <glib.h>

/* stabilityai/sd-turbo unet/config.json (the SD 2.1 architecture), the
 * keys that matter to the forward. */
static const gchar turbo_config[] G_GNUC_UNUSED =
    "{\"_class_name\":\"UNet2DConditionModel\",\"in_channels\":4,"
    "\"out_channels\":4,\"block_out_channels\":[320,640,1280,1280],"
    "\"layers_per_block\":2,\"down_block_types\":[\"CrossAttnDownBlock2D\","
    "\"CrossAttnDownBlock2D\",\"CrossAttnDownBlock2D\",\"DownBlock2D\"],"
    "\"up_block_types\":[\"UpBlock2D\",\"CrossAttnUpBlock2D\","
    "\"CrossAttnUpBlock2D\",\"CrossAttnUpBlock2D\"],"
    "\"mid_block_type\":\"UNetMidBlock2DCrossAttn\",\"cross_attention_dim\":"
    "1024,\"attention_head_dim\":[5,10,20,20],\"norm_num_groups\":32,"
    "\"norm_eps\":1e-5,\"use_linear_projection\":true,\"flip_sin_to_cos\":"
    "true,\"freq_shift\":0,\"act_fn\":\"silu\",\"sample_size\":64}";

/* The SD VAE (AutoencoderKL) of every SD1.5, SD2.x and SD-Turbo
 * download's vae/config.json, the keys that matter to the forward. */
static const gchar vae_kl_config[] G_GNUC_UNUSED =
    "{\"_class_name\":\"AutoencoderKL\",\"in_channels\":3,"
    "\"out_channels\":3,\"latent_channels\":4,"
    "\"block_out_channels\":[128,256,512,512],\"layers_per_block\":2,"
    "\"norm_num_groups\":32,\"act_fn\":\"silu\","
    "\"scaling_factor\":0.18215}";

static const gchar taesd_config[] G_GNUC_UNUSED =
    "{\"_class_name\":\"AutoencoderTiny\",\"in_channels\":3,"
    "\"out_channels\":3,\"latent_channels\":4,"
    "\"encoder_block_out_channels\":[64,64,64,64],"
    "\"decoder_block_out_channels\":[64,64,64,64],"
    "\"num_encoder_blocks\":[1,3,3,3],\"num_decoder_blocks\":[3,3,3,1],"
    "\"upsampling_scaling_factor\":2,\"act_fn\":\"relu\","
    "\"scaling_factor\":1.0}";
