/* CLIP's tokenizer (kernels/text) against ids OpenAI's simple_tokenizer
 * gave (tests/reference/make-tokenizer-fixtures.py), in both pad
 * conventions; with CLIP's released vocabulary when
 * $PPDIFFUSE_CLIP_TOKENIZER names a tokenizer/ folder; and its errors.
 *
 * Usage: test-clip-tokenizer FIXTURE_DIR (tests/data/tokenizer) */
#include "pp-clip-tokenizer.h"
#include "pp-error.h"
#include "pp-text-clean.h"

#include <glib/gstdio.h>
#include <string.h>

#define MAX_LENGTH 77
#define FULL_ENV "PPDIFFUSE_CLIP_TOKENIZER"

static const gchar *fixture_dir;

static GStrv
read_lines (const gchar * name)
{
  g_autofree gchar *path = g_build_filename (fixture_dir, name, NULL);
  g_autofree gchar *text = NULL;
  g_autoptr (GError) error = NULL;
  GStrv lines;
  guint n;

  g_assert_true (g_file_get_contents (path, &text, NULL, &error));
  g_assert_no_error (error);
  lines = g_strsplit (text, "\n", -1);
  n = g_strv_length (lines);
  /* The text after the last newline is empty. */
  g_assert_cmpstr (lines[n - 1], ==, "");
  g_free (lines[n - 1]);
  lines[n - 1] = NULL;
  return lines;
}

static PpClipTokenizer *
load (const gchar * dir)
{
  g_autoptr (GError) error = NULL;
  PpClipTokenizer *tok = pp_clip_tokenizer_load (dir, &error);

  g_assert_no_error (error);
  g_assert_nonnull (tok);
  return tok;
}

static gchar *
ids_line (const gint32 * ids, guint n)
{
  GString *s = g_string_new (NULL);

  for (guint i = 0; i < n; i++)
    g_string_append_printf (s, i ? " %d" : "%d", ids[i]);
  return g_string_free (s, FALSE);
}

static void
check_convention (const gchar * name, const gchar * pad_text)
{
  g_autofree gchar *dir = g_build_filename (fixture_dir, name, NULL);
  g_autofree gchar *expected_name = g_strdup_printf ("expected-%s.txt", name);
  g_auto (GStrv) prompts = read_lines ("prompts.txt");
  g_auto (GStrv) expected = read_lines (expected_name);
  g_autoptr (PpClipTokenizer) tok = load (dir);
  guint n_truncated = 0;

  g_assert_cmpuint (pp_clip_tokenizer_model_max_length (tok), ==, MAX_LENGTH);
  g_assert_cmpuint (g_strv_length (prompts), ==, g_strv_length (expected));
  g_assert_cmpuint (g_strv_length (prompts), >=, 100);
  for (guint i = 0; prompts[i] != NULL; i++) {
    gint32 ids[MAX_LENGTH];
    gboolean truncated;
    g_autoptr (GError) error = NULL;
    g_autofree gchar *got = NULL;

    g_assert_true (pp_clip_tokenizer_encode (tok, prompts[i], ids,
            &truncated, &error));
    g_assert_no_error (error);
    got = ids_line (ids, MAX_LENGTH);
    if (g_strcmp0 (got, expected[i]) != 0)
      g_error ("%s, prompts.txt:%u '%s':\n  got      %s\n  expected %s",
          name, i + 1, prompts[i], got, expected[i]);
    g_assert_cmpint (ids[0], ==, pp_clip_tokenizer_bos_id (tok));
    n_truncated += truncated;
  }
  /* The fixture's long prompts. */
  g_assert_cmpuint (n_truncated, >, 0);
  /* The pad convention: SD 1.x pads with EOS, SD 2.x with "!" (id 0 in a
   * CLIP vocabulary: the first byte character). */
  if (g_str_equal (pad_text, "!"))
    g_assert_cmpint (pp_clip_tokenizer_pad_id (tok), ==, 0);
  else
    g_assert_cmpint (pp_clip_tokenizer_pad_id (tok), ==,
        pp_clip_tokenizer_eos_id (tok));
}

static void
test_fixtures_sd15 (void)
{
  check_convention ("sd15", "<|endoftext|>");
}

static void
test_fixtures_sd2 (void)
{
  check_convention ("sd2", "!");
}

/* Multi-character tokens: the fixture's merges are used, not only bytes. */
static void
test_merges_used (void)
{
  g_autofree gchar *dir = g_build_filename (fixture_dir, "sd15", NULL);
  g_autoptr (PpClipTokenizer) tok = load (dir);
  g_autoptr (GError) error = NULL;
  g_autoptr (GArray) ids = pp_clip_tokenizer_tokenize (tok,
      "photo painting street", &error);
  /* 256 byte characters and 256 with </w> come first. */
  const gint32 first_merge = 512;

  g_assert_no_error (error);
  g_assert_cmpuint (ids->len, ==, 3);
  for (guint i = 0; i < ids->len; i++)
    g_assert_cmpint (g_array_index (ids, gint32, i), >=, first_merge);
}

/* With CLIP's released vocabulary, the ids the reference gave before
 * packing, packed with the folder's own BOS, EOS and pad. */
static void
test_full_vocabulary (void)
{
  const gchar *dir = g_getenv (FULL_ENV);
  g_auto (GStrv) prompts = read_lines ("prompts.txt");
  g_auto (GStrv) expected = read_lines ("expected-full.txt");
  g_autoptr (PpClipTokenizer) tok = NULL;

  if (dir == NULL || *dir == '\0') {
    g_test_message ("full-vocabulary comparison not run: $" FULL_ENV " names "
        "no tokenizer folder (make one with tests/reference/make-tokenizer-"
        "fixtures.py --full-out DIR)");
    return;
  }
  tok = load (dir);
  for (guint i = 0; prompts[i] != NULL; i++) {
    g_auto (GStrv) fields = g_strsplit (expected[i], " ", -1);
    guint n = expected[i][0] ? g_strv_length (fields) : 0;
    g_autofree gint32 *want_tokens = g_new0 (gint32, n + 1);
    gint32 got[MAX_LENGTH], want[MAX_LENGTH];
    g_autoptr (GError) error = NULL;
    g_autofree gchar *got_line = NULL, *want_line = NULL;

    for (guint j = 0; j < n; j++)
      want_tokens[j] = (gint32) g_ascii_strtoll (fields[j], NULL, 10);
    pp_clip_tokenizer_pack (tok, want_tokens, n, want);
    g_assert_true (pp_clip_tokenizer_encode (tok, prompts[i], got, NULL,
            &error));
    g_assert_no_error (error);
    got_line = ids_line (got, MAX_LENGTH);
    want_line = ids_line (want, MAX_LENGTH);
    if (g_strcmp0 (got_line, want_line) != 0)
      g_error ("%s, prompts.txt:%u '%s':\n  got      %s\n  expected %s",
          dir, i + 1, prompts[i], got_line, want_line);
  }
  g_test_message ("full vocabulary: %u prompts equal with %s (%u tokens)",
      g_strv_length (prompts), dir, pp_clip_tokenizer_vocab_size (tok));
}

/* ---- bad inputs -------------------------------------------------------- */

/* A copy of the sd15 fixture folder in a scratch directory. */
static gchar *
scratch_copy (void)
{
  static const gchar *const files[] = { PP_CLIP_TOKENIZER_VOCAB,
    PP_CLIP_TOKENIZER_MERGES, PP_CLIP_TOKENIZER_CONFIG,
    PP_CLIP_TOKENIZER_SPECIAL
  };
  g_autoptr (GError) error = NULL;
  gchar *dir = g_dir_make_tmp ("clip-tok-XXXXXX", &error);

  g_assert_no_error (error);
  for (guint i = 0; i < G_N_ELEMENTS (files); i++) {
    g_autofree gchar *from = g_build_filename (fixture_dir, "sd15", files[i],
        NULL);
    g_autofree gchar *to = g_build_filename (dir, files[i], NULL);
    g_autofree gchar *text = NULL;
    gsize len;

    g_assert_true (g_file_get_contents (from, &text, &len, &error));
    g_assert_true (g_file_set_contents (to, text, len, &error));
  }
  return dir;
}

static void
remove_scratch (const gchar * dir)
{
  g_autoptr (GDir) d = g_dir_open (dir, 0, NULL);
  const gchar *name;

  while (d != NULL && (name = g_dir_read_name (d)) != NULL) {
    g_autofree gchar *path = g_build_filename (dir, name, NULL);

    g_unlink (path);
  }
  g_rmdir (dir);
}

static void
write_file (const gchar * dir, const gchar * name, const gchar * text)
{
  g_autofree gchar *path = g_build_filename (dir, name, NULL);
  g_autoptr (GError) error = NULL;

  g_assert_true (g_file_set_contents (path, text, -1, &error));
}

/* Loading @dir fails with an error whose message holds every @needle. */
static void
expect_load_error (const gchar * dir, const gchar * const *needles)
{
  g_autoptr (GError) error = NULL;
  PpClipTokenizer *tok = pp_clip_tokenizer_load (dir, &error);

  g_assert_null (tok);
  g_assert_nonnull (error);
  g_assert_true (error->domain == PP_ERROR);
  for (; *needles != NULL; needles++)
    if (strstr (error->message, *needles) == NULL)
      g_error ("error '%s' does not name '%s'", error->message, *needles);
  g_test_message ("as expected: %s", error->message);
}

static void
test_missing_files (void)
{
  static const gchar *const required[] = { PP_CLIP_TOKENIZER_VOCAB,
    PP_CLIP_TOKENIZER_MERGES, PP_CLIP_TOKENIZER_CONFIG
  };

  for (guint i = 0; i < G_N_ELEMENTS (required); i++) {
    g_autofree gchar *dir = scratch_copy ();
    g_autofree gchar *path = g_build_filename (dir, required[i], NULL);
    const gchar *needles[] = { path, NULL };

    g_unlink (path);
    expect_load_error (dir, needles);
    remove_scratch (dir);
  }
  /* A folder that is not there at all. */
  {
    const gchar *needles[] = { "/nonexistent/tokenizer", NULL };

    expect_load_error ("/nonexistent/tokenizer", needles);
  }
}

static void
test_malformed_json (void)
{
  static const gchar *const files[] = { PP_CLIP_TOKENIZER_VOCAB,
    PP_CLIP_TOKENIZER_CONFIG, PP_CLIP_TOKENIZER_SPECIAL
  };

  for (guint i = 0; i < G_N_ELEMENTS (files); i++) {
    g_autofree gchar *dir = scratch_copy ();
    g_autofree gchar *path = g_build_filename (dir, files[i], NULL);
    /* json-glib names the line and column: the error is on line 3. */
    const gchar *needles[] = { path, ":3:", NULL };

    write_file (dir, files[i], "{\n  \"a\": 1,\n  \"b\": ]\n}\n");
    expect_load_error (dir, needles);
    remove_scratch (dir);
  }
  /* Well-formed, but not what a vocabulary is. */
  {
    g_autofree gchar *dir = scratch_copy ();
    g_autofree gchar *path = g_build_filename (dir, PP_CLIP_TOKENIZER_VOCAB,
        NULL);
    const gchar *needles[] = { path, "'hello'", NULL };

    write_file (dir, PP_CLIP_TOKENIZER_VOCAB, "{\"hello\": \"world\"}");
    expect_load_error (dir, needles);
    remove_scratch (dir);
  }
  /* A pad token the vocabulary lacks. */
  {
    g_autofree gchar *dir = scratch_copy ();
    const gchar *needles[] = { "pad_token", "<nope>", NULL };

    write_file (dir, PP_CLIP_TOKENIZER_SPECIAL, "{\"pad_token\": \"<nope>\"}");
    expect_load_error (dir, needles);
    remove_scratch (dir);
  }
}

static void
test_broken_merges (void)
{
  g_autofree gchar *dir = scratch_copy ();
  g_autofree gchar *path = g_build_filename (dir, PP_CLIP_TOKENIZER_MERGES,
      NULL);
  g_autofree gchar *line3 = g_strconcat (path, ":3:", NULL);
  g_autofree gchar *line1 = g_strconcat (path, ":1:", NULL);
  const gchar *broken[] = { line3, "'a b c'", NULL };
  const gchar *headless[] = { line1, "#version", NULL };

  write_file (dir, PP_CLIP_TOKENIZER_MERGES, "#version: 0.2\nc a\na b c\n");
  expect_load_error (dir, broken);
  write_file (dir, PP_CLIP_TOKENIZER_MERGES, "c a\n");
  expect_load_error (dir, headless);
  remove_scratch (dir);
}

static void
test_long_prompt (void)
{
  g_autofree gchar *dir = g_build_filename (fixture_dir, "sd2", NULL);
  g_autoptr (PpClipTokenizer) tok = load (dir);
  g_autoptr (GString) prompt = g_string_new (NULL);
  g_autoptr (GError) error = NULL;
  g_autoptr (GArray) tokens = NULL;
  gint32 ids[MAX_LENGTH];
  gboolean truncated = FALSE;

  /* Each digit is a token of its own. */
  for (guint i = 0; i < MAX_LENGTH; i++)
    g_string_append (prompt, "7 ");
  tokens = pp_clip_tokenizer_tokenize (tok, prompt->str, &error);
  g_assert_cmpuint (tokens->len, ==, MAX_LENGTH);
  g_assert_true (pp_clip_tokenizer_encode (tok, prompt->str, ids, &truncated,
          &error));
  g_assert_no_error (error);
  g_assert_true (truncated);
  g_assert_cmpint (ids[0], ==, pp_clip_tokenizer_bos_id (tok));
  g_assert_cmpint (ids[MAX_LENGTH - 1], ==, pp_clip_tokenizer_eos_id (tok));
  for (guint i = 1; i < MAX_LENGTH - 1; i++)
    g_assert_cmpint (ids[i], ==, g_array_index (tokens, gint32, 0));
  /* Exactly 75 tokens fit. */
  g_string_truncate (prompt, 2 * (MAX_LENGTH - 2));
  g_assert_true (pp_clip_tokenizer_encode (tok, prompt->str, ids, &truncated,
          &error));
  g_assert_false (truncated);
  g_assert_cmpint (ids[MAX_LENGTH - 1], ==, pp_clip_tokenizer_eos_id (tok));
}

static void
test_invalid_utf8 (void)
{
  g_autofree gchar *dir = g_build_filename (fixture_dir, "sd15", NULL);
  g_autoptr (PpClipTokenizer) tok = load (dir);
  static const struct
  {
    const gchar *text;
    const gchar *needle;
  } cases[] = {
    {"abc\xff", "0xff at byte offset 3"},
    {"caf\xc3", "0xc3 at byte offset 3"},
    {"\xc0\xaf slash", "0xc0 at byte offset 0"},
    {"ok \xed\xa0\x80 surrogate", "0xed at byte offset 3"},
  };

  for (guint i = 0; i < G_N_ELEMENTS (cases); i++) {
    g_autoptr (GError) error = NULL;
    gint32 ids[MAX_LENGTH];

    g_assert_false (pp_clip_tokenizer_encode (tok, cases[i].text, ids, NULL,
            &error));
    g_assert_error (error, PP_ERROR, PP_ERROR_CONFIG);
    if (strstr (error->message, cases[i].needle) == NULL)
      g_error ("error '%s' does not name '%s'", error->message,
          cases[i].needle);
  }
}

/* The clean-up alone, on what a prompts file (one prompt a line) cannot
 * hold: line breaks, and entities on lines after one with a '<'. */
static void
test_clean_lines (void)
{
  g_autofree gchar *a = pp_text_clip_clean ("A\r\nB\n\nc\u2029d");
  g_autofree gchar *b = pp_text_clip_clean ("&amp;lt;\n<i>\n&amp;lt;");
  g_autofree gchar *c = pp_text_ftfy_fix ("&amp;lt;\n<i>\n&amp;lt;");

  g_assert_cmpstr (a, ==, "a b c d");
  /* ftfy decodes the first line fully, html.unescape twice the third. */
  g_assert_cmpstr (b, ==, "< <i> <");
  g_assert_cmpstr (c, ==, "<\n<i>\n&amp;lt;");
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  if (argc != 2) {
    g_printerr ("usage: %s FIXTURE_DIR\n", argv[0]);
    return 2;
  }
  fixture_dir = argv[1];
  g_test_add_func ("/clip-tokenizer/fixtures/sd15", test_fixtures_sd15);
  g_test_add_func ("/clip-tokenizer/fixtures/sd2", test_fixtures_sd2);
  g_test_add_func ("/clip-tokenizer/merges-used", test_merges_used);
  g_test_add_func ("/clip-tokenizer/full-vocabulary", test_full_vocabulary);
  g_test_add_func ("/clip-tokenizer/errors/missing-files",
      test_missing_files);
  g_test_add_func ("/clip-tokenizer/errors/malformed-json",
      test_malformed_json);
  g_test_add_func ("/clip-tokenizer/errors/broken-merges",
      test_broken_merges);
  g_test_add_func ("/clip-tokenizer/errors/invalid-utf8", test_invalid_utf8);
  g_test_add_func ("/clip-tokenizer/long-prompt", test_long_prompt);
  g_test_add_func ("/clip-tokenizer/clean-lines", test_clean_lines);
  return g_test_run ();
}
