/* Fuzz target: the run report writer (report_write_html, report/report.c,
 * and the SVG plots of report/svg.c it draws with), fed a fuzzed run
 * JSON as `chameleon report RUN.json` reads it (tools/cmd_report.c:
 * jansson's default flags, an object with a "series" object). Besides
 * crashes, sanitizer reports, leaks and hangs, it checks that the page
 * escapes what it quotes from the run: every '<' in it must open or close
 * one of the tags the writer itself emits, so text from the file can never
 * become markup. Seeds: fuzz/corpus/report/ (`chameleon simulate --json`). */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "memfile.h"
#include "report.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static fuzz_memfile_t page;

/* The tags of report/report.c and report/svg.c. */
static bool known_tag(const char *s)
{
    static const char *const tags[] = {
        "!DOCTYPE", "html", "head", "meta", "title", "style", "body", "h1", "h2", "p",
        "table", "tr", "th", "td", "code", "figure", "figcaption", "svg", "rect", "line", "text",
        "polyline", "circle", "strong"};   /* strong: the banner of a run that failed */
    if (*s == '/')
        s++;
    for (size_t i = 0; i < sizeof tags / sizeof tags[0]; i++) {
        size_t n = strlen(tags[i]);
        if (strncmp(s, tags[i], n) == 0 && (s[n] == ' ' || s[n] == '>' || s[n] == '/'))
            return true;
    }
    return false;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (page.path[0] == '\0')
        fuzz_memfile_open(&page, "report-page");
    json_error_t e;
    json_t *run = json_loadb((const char *)data, size, 0, &e);
    if (!run) {
        fuzz_note("not JSON", e.text);
        return 0;
    }
    /* The command's own check before it writes the page. */
    if (!json_is_object(run) || !json_is_object(json_object_get(run, "series"))) {
        fuzz_note("not a run", "no \"series\" object");
        json_decref(run);
        return 0;
    }
    char err[600];
    if (!report_write_html(run, page.path, err, sizeof err))
        fuzz_fail("the page could not be written", err);
    json_decref(run);
    size_t len;
    char *html = fuzz_memfile_get(&page, &len);
    if (strlen(html) != len)
        fuzz_fail("the page has a NUL byte", NULL);
    for (const char *lt = strchr(html, '<'); lt; lt = strchr(lt + 1, '<')) {
        if (!known_tag(lt + 1)) {
            char near[64];
            snprintf(near, sizeof near, "%.48s", lt);
            fuzz_fail("text from the run is not escaped in the page", near);
        }
    }
    fuzz_note("written", NULL);
    free(html);
    return 0;
}
