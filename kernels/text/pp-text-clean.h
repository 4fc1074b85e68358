/* ppdiffuse — the text clean-up CLIP applies before it splits a prompt:
 * OpenAI's simple_tokenizer basic_clean (a subset of ftfy.fix_text, then
 * html.unescape twice, then strip) and whitespace_clean (runs of white space
 * to one space, strip), then lower-casing.  Input must be valid UTF-8.
 *
 * Of ftfy.fix_text (6.x, default configuration) this does, per line and
 * until nothing changes: unescape_html (names ending in ';', ftfy's
 * upper-case names, numeric references; off from the first line holding a
 * '<' on), fix_c1_controls, fix_latin_ligatures, fix_character_width,
 * uncurl_quotes, remove_terminal_escapes, remove_control_chars, NFC.  It
 * does not repair mojibake (fix_encoding and its sub-steps); fix_line_breaks
 * and fix_surrogates change nothing that the white-space collapse or valid
 * UTF-8 leave visible. */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

/* Python's html.unescape: every named reference of html.entities.html5
 * (with the legacy names that need no ';' and the longest-prefix rule),
 * &#N; and &#xN; with the HTML5 replacements for invalid numbers. */
gchar   *pp_text_html_unescape  (const gchar * utf8);
/* The ftfy.fix_text subset described above. */
gchar   *pp_text_ftfy_fix       (const gchar * utf8);
/* The whole CLIP clean-up: ftfy subset, unescape twice, strip, collapse
 * white space, strip, lower-case. */
gchar   *pp_text_clip_clean     (const gchar * utf8);

/* Unicode White_Space: what regex's \s matches. */
gboolean pp_text_is_white_space (gunichar c);

G_END_DECLS
