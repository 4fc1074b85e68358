/* ppdiffuse — noise schedules for img2img.
 *
 * All schedules share the scaled-linear betas of Stable Diffusion:
 * β_i = (√0.00085 + i/(T−1)·(√0.012 − √0.00085))², T = 1000, ᾱ_t = Π_{i≤t}(1 − β_i).
 *
 * A schedule is the list of the S timesteps the mesh runs (S = the element's
 * steps), and how a step turns x_t into the next sample:
 *
 * - EULER (SD-Turbo, diffusers EulerDiscreteScheduler, trailing spacing,
 *   epsilon prediction): the sample lives in σ space, σ_t = √((1−ᾱ_t)/ᾱ_t).
 *   img2img start: x = z0 + σ_0·ε.  Step k: ε̂ = UNet(x/√(σ_k²+1), t_k),
 *   x ← x + (σ_{k+1} − σ_k)·ε̂ with σ_S = 0.
 * - LCM (latent consistency, diffusers LCMScheduler with 50 original steps,
 *   timestep scaling 10, σ_data 0.5): start x = √ᾱ_0·z0 + √(1−ᾱ_0)·ε.
 *   Step k: ε̂ = UNet(x, t_k); x̂0 = (x − √(1−ᾱ)·ε̂)/√ᾱ;
 *   d = c_out·x̂0 + c_skip·x with c_skip = 0.25/((10t)² + 0.25),
 *   c_out = 10t/√((10t)² + 0.25); x ← d on the last step, else
 *   √ᾱ_{k+1}·d + √(1−ᾱ_{k+1})·ε_k.
 *
 * Timesteps: EULER with strength s runs the last S of the N = round(S/s)
 * trailing timesteps round(T − j·T/N) − 1.  LCM runs the last S of the
 * N = round(S/s) timesteps picked from 999, 979, …, 19 (every 50/N-th),
 * or, given a t_index_list (StreamDiffusion), t = 999 − 20·idx. */
#pragma once

#include <glib.h>

#include "pp-backend.h"

G_BEGIN_DECLS

#define PP_SCHEDULE_TRAIN_STEPS 1000
#define PP_SCHEDULE_LCM_ORIGINAL_STEPS 50

typedef enum
{
  PP_SCHEDULE_EULER,
  PP_SCHEDULE_LCM,
} PpScheduleKind;

typedef struct
{
  PpScheduleKind kind;
  guint n_steps;
  guint *timesteps;             /* n_steps */
  gdouble *sigmas;              /* EULER: n_steps + 1, the last 0 */
  gdouble *alphas_cumprod;      /* PP_SCHEDULE_TRAIN_STEPS */
} PpSchedule;

const gchar *pp_schedule_kind_name (PpScheduleKind kind);
/* @t_index_list may be NULL; when given (LCM only) its length must be
 * @n_steps.  @strength in (0, 1]. */
PpSchedule  *pp_schedule_new (PpScheduleKind kind, guint n_steps,
                              gdouble strength, const GArray * t_index_list,
                              GError ** error);
void         pp_schedule_free (PpSchedule * s);
gchar       *pp_schedule_describe (const PpSchedule * s);

/* img2img start: turns clean latents @z (n float32 values, device memory
 * of @be) into the first sample, with @noise of the same size.  Every
 * buffer of these functions holds float32 values. */
void         pp_schedule_add_noise (const PpSchedule * s, PpBackend * be,
                                    gfloat * z, const gfloat * noise,
                                    gsize n);
/* The UNet input for step @k: a scaled copy of the sample @x (EULER) or
 * the sample itself (LCM), on @be. */
void         pp_schedule_scale_input (const PpSchedule * s, PpBackend * be,
                                      guint k, const gfloat * x,
                                      gfloat * out, gsize n);
/* Step @k on @be: updates the sample @x from the UNet's noise prediction
 * @eps; @noise is used by LCM between steps (may be NULL on the last step
 * or for EULER). */
void         pp_schedule_step (const PpSchedule * s, PpBackend * be,
                               guint k, gfloat * x, const gfloat * eps,
                               const gfloat * noise, gsize n);
/* Whether step @k needs fresh noise. */
gboolean     pp_schedule_step_needs_noise (const PpSchedule * s, guint k);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (PpSchedule, pp_schedule_free)

G_END_DECLS
