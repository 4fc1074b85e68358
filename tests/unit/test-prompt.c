/* Unit tests for text prompts (kernels/pipeline/pp-prompt.c) on a tiny
 * pipeline: blends mix the encoded prompts by their normalised weights,
 * malformed blends are refused naming the part, and a prompt's reference
 * names its states. */
#include "pp-prompt.h"
#include "pp-error.h"
#include "pp-tiny.h"

#include <glib/gstdio.h>
#include <math.h>
#include <string.h>

/* Mixing is in f32: a blend equals the weighted sum within this. */
#define MIX_TOLERANCE 1e-5

static gchar *tiny_dir;

static PpPromptEncoder *
encoder (void)
{
  g_autoptr (GError) error = NULL;
  PpPromptEncoder *enc = pp_prompt_encoder_new (tiny_dir, NULL, NULL,
      pp_backend_get (NULL, NULL), &error);

  g_assert_no_error (error);
  g_assert_nonnull (enc);
  return enc;
}

static PpTensor *
encode (PpPromptEncoder * enc, const gchar * prompt)
{
  g_autoptr (GError) error = NULL;
  PpTensor *t = pp_prompt_encode (enc, prompt, NULL, &error);

  g_assert_no_error (error);
  g_assert_nonnull (t);
  return t;
}

static void
assert_mix (const PpTensor * got, const PpTensor * a, gdouble wa,
    const PpTensor * b, gdouble wb)
{
  const gfloat *g = (const gfloat *) got->data;
  const gfloat *x = (const gfloat *) a->data, *y = (const gfloat *) b->data;

  g_assert_cmpuint (got->nbytes, ==, a->nbytes);
  for (gint64 i = 0; i < pp_tensor_numel (got); i++)
    g_assert_cmpfloat_with_epsilon (g[i], wa * x[i] + wb * y[i],
        MIX_TOLERANCE * (1.0 + fabs (x[i]) + fabs (y[i])));
}

static void
test_blend_weights (void)
{
  g_autoptr (PpPromptEncoder) enc = encoder ();
  g_autoptr (PpTensor) cat = encode (enc, "a photo of a cat");
  g_autoptr (PpTensor) dog = encode (enc, "a dog");
  g_autoptr (PpTensor) even = encode (enc, "a photo of a cat|a dog");
  g_autoptr (PpTensor) doubled = encode (enc, "a photo of a cat:2|a dog:2");
  g_autoptr (PpTensor) mostly = encode (enc, "a photo of a cat:0.7| a dog "
      ":0.3");
  g_autoptr (PpTensor) scaled = encode (enc, "a photo of a cat:7|a dog:3");

  g_assert_cmpint (cat->ndim, ==, 3);
  g_assert_cmpint (cat->shape[1], ==, 77);
  g_assert_true (memcmp (cat->data, dog->data, cat->nbytes) != 0);
  assert_mix (even, cat, 0.5, dog, 0.5);
  assert_mix (doubled, cat, 0.5, dog, 0.5);
  assert_mix (mostly, cat, 0.7, dog, 0.3);
  assert_mix (scaled, cat, 0.7, dog, 0.3);
}

/* Without '|' the text is the prompt, ':' and all; with one, a ':' not
 * followed by a number belongs to the part's text. */
static void
test_colon_is_text (void)
{
  g_autoptr (PpPromptEncoder) enc = encoder ();
  g_autoptr (PpTensor) plain = encode (enc, "a cat:0.5");
  g_autoptr (PpTensor) cat = encode (enc, "a cat");
  g_autoptr (PpTensor) time = encode (enc, "time: ten|dusk:0");
  g_autoptr (PpTensor) time_only = encode (enc, "time: ten");

  g_assert_true (memcmp (plain->data, cat->data, cat->nbytes) != 0);
  g_assert_true (memcmp (time->data, time_only->data, time->nbytes) == 0);
}

static void
test_blend_errors (void)
{
  const struct
  {
    const gchar *prompt, *needle;
  } bad[] = {
    {"a cat||a dog", "part 2"},
    {"a cat|", "part 2"},
    {"|a dog", "part 1"},
    {"a cat:-1|a dog", "non-negative"},
    {"a cat:0|a dog:0", "sum to 0"},
    {"a cat:0.5|:0.5", "part 2"},
  };
  g_autoptr (PpPromptEncoder) enc = encoder ();

  for (guint i = 0; i < G_N_ELEMENTS (bad); i++) {
    g_autoptr (GError) error = NULL;
    PpTensor *t = pp_prompt_encode (enc, bad[i].prompt, NULL, &error);

    g_assert_null (t);
    g_assert_nonnull (error);
    if (strstr (error->message, bad[i].needle) == NULL)
      g_error ("'%s': the error does not say '%s': %s", bad[i].prompt,
          bad[i].needle, error->message);
  }
}

/* A prompt over 77 tokens is cut and says so; the reference names the
 * states: the same states, the same reference, other ones another. */
static void
test_truncated_and_ref (void)
{
  g_autoptr (PpPromptEncoder) enc = encoder ();
  g_autoptr (GString) longer = g_string_new (NULL);
  g_autoptr (GError) error = NULL;
  g_autoptr (PpTensor) a = encode (enc, "a photo of a cat");
  g_autoptr (PpTensor) b = encode (enc, "a photo of a cat");
  g_autoptr (PpTensor) c = encode (enc, "a dog");
  g_autoptr (PpTensor) cut = NULL;
  g_autofree gchar *ra = pp_prompt_ref (a), *rb = pp_prompt_ref (b),
      *rc = pp_prompt_ref (c);
  gboolean truncated = FALSE;

  for (guint i = 0; i < 100; i++)
    g_string_append (longer, "cat ");
  cut = pp_prompt_encode (enc, longer->str, &truncated, &error);
  g_assert_no_error (error);
  g_assert_true (truncated);
  g_assert_true (g_str_has_prefix (ra, PP_PROMPT_REF_PREFIX));
  g_assert_cmpstr (ra, ==, rb);
  g_assert_cmpstr (ra, !=, rc);
}

/* A pipeline without tokenizer/ is an error that names the folder. */
static void
test_missing_tokenizer (void)
{
  g_autofree gchar *dir = g_dir_make_tmp ("pp-prompt-XXXXXX", NULL);
  g_autoptr (GError) error = NULL;
  PpPromptEncoder *enc;

  enc = pp_prompt_encoder_new (dir, NULL, NULL, pp_backend_get (NULL, NULL),
      &error);
  g_assert_null (enc);
  g_assert_nonnull (error);
  g_assert_nonnull (strstr (error->message, "tokenizer"));
  g_rmdir (dir);
}

static void
remove_tree (const gchar * path)
{
  GDir *dir = g_dir_open (path, 0, NULL);
  const gchar *name;

  if (dir != NULL) {
    while ((name = g_dir_read_name (dir)) != NULL) {
      g_autofree gchar *child = g_build_filename (path, name, NULL);
      remove_tree (child);
    }
    g_dir_close (dir);
  }
  g_remove (path);
}

int
main (int argc, char **argv)
{
  g_autoptr (GError) error = NULL;
  g_autofree gchar *root = g_dir_make_tmp ("pp-prompt-XXXXXX", NULL);
  int rc;

  g_test_init (&argc, &argv, NULL);
  tiny_dir = g_build_filename (root, "model", NULL);
  if (!pp_tiny_write ("turbo", tiny_dir, 2, &error))
    g_error ("make-tiny: %s", error->message);
  g_test_add_func ("/prompt/blend/weights", test_blend_weights);
  g_test_add_func ("/prompt/blend/colon", test_colon_is_text);
  g_test_add_func ("/prompt/blend/errors", test_blend_errors);
  g_test_add_func ("/prompt/truncated-and-ref", test_truncated_and_ref);
  g_test_add_func ("/prompt/missing-tokenizer", test_missing_tokenizer);
  rc = g_test_run ();
  remove_tree (root);
  g_free (tiny_dir);
  return rc;
}
