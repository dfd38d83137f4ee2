/* SPDX-License-Identifier: MIT */
/*
 * The HTML report of `tfalloc report --format html`: one self-contained page
 * that opens offline in a browser.  The page carries its own style and script
 * (tools/html/report.css and report.js, embedded at build time) and the
 * profiles' data as JSON in a <script type="application/json"> element; the
 * script draws, for each process, the summary, memory over time (SVG), flame
 * graphs of the bytes live at the peak and of the leaks, and the top sites.
 *
 * Escaping: nothing from a profile is written into the page as HTML.  It goes
 * into the JSON only, where '<', '>' and '&' are written as \u003c, \u003e
 * and \u0026 (so "</script>" in a function name or a command cannot end the
 * element), and the script puts it into the page as text (textContent,
 * setAttribute), never as markup.
 *
 * Use: tfa_html_begin, tfa_html_process for each profile (in the order of the
 * report), tfa_html_end.  The state lives in the caller's struct; nothing to
 * free after tfa_html_end.
 */
#ifndef TFA_TOOLS_HTML_H
#define TFA_TOOLS_HTML_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "core/profile_read.h"
#include "tools/json.h"
#include "tools/stacks.h"

typedef struct tfa_html_s {
	FILE *out;    /* the page */
	FILE *data;   /* out through the JSON filter; NULL when it could not be made */
	tfa_json_t j; /* writes to data */
	size_t nprocesses;
	bool oom; /* memory ran out: the page misses data */
} tfa_html_t;

/* Writes the page's head and opens its data. */
void tfa_html_begin(tfa_html_t *h, FILE *out);

/*
 * Adds one process: p, read from file (shown as the profile's path), its
 * stacks symbolized by sym (NULL: frames as module+offset from p's module
 * map).
 */
void tfa_html_process(tfa_html_t *h, const tfa_profile_t *p, const char *file,
                      tfa_profile_symbols_t *sym);

/*
 * Adds the messages of the files that could not be read, and of the files
 * whose frames are shown as offsets (why: tfa_sym_cache_problems), closes the
 * data and writes the rest of the page.  Returns 0, or -1 when memory ran out
 * on the way (after "tfalloc: report: out of memory" on stderr; the page is
 * complete but misses data).  Write errors are the caller's to check on out.
 */
int tfa_html_end(tfa_html_t *h, char *const *unreadable, size_t nunreadable, char *const *symbols,
                 size_t nsymbols);

#endif /* TFA_TOOLS_HTML_H */
