/* `chameleon report RUN.json`: the HTML page of report.h from the JSON of
 * `chameleon simulate --json` or `chameleon train --json` (docs/trace.md). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "args.h"
#include "commands.h"
#include "common/file.h"
#include "report.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: chameleon report RUN.json [--out REPORT.html]\n"
               "Writes an HTML page (REPORT.html; default: RUN.html next to RUN.json) from\n"
               "the output of `chameleon simulate --json` or `chameleon train --json`:\n"
               "summary, memory curve, loss (train), step time with the stages, swapped\n"
               "bytes per step, the final policy, every stage change.\n");
}

int cmd_report(int argc, char **argv)
{
    static const tool_opt_t opts[] = {{"--out", true}};
    const char *in = NULL, *out = NULL;
    if (tool_wants_help(argc, argv)) {
        usage(stdout);
        return 0;
    }
    for (int i = 0; i < argc; i++) {
        const char *v;
        if (argv[i][0] != '-' || argv[i][1] == '\0') {
            if (in) {
                fprintf(stderr, "chameleon report: unexpected argument \"%s\" (one run only)\n",
                        argv[i]);
                return 2;
            }
            in = argv[i];
        } else if (!tool_find_opt("report", opts, 1, argc, argv, &i, &v)) {
            return 2;
        } else {
            out = v;
        }
    }
    if (!in) {
        fprintf(stderr, "chameleon report: no RUN.json given\n");
        usage(stderr);
        return 2;
    }
    if (tool_parse_only)
        return 0;
    char path[4096];
    if (!out) {
        size_t n = strlen(in);
        snprintf(path, sizeof path, "%.*s.html",
                 (int)(n > 5 && strcmp(in + n - 5, ".json") == 0 ? n - 5 : n), in);
        out = path;
    }
    if (tool_same_file(in, out)) {
        fprintf(stderr, "chameleon report: --out %s is the run being read (%s): it would be "
                "overwritten; choose another path\n", out, in);
        return 2;
    }
    char err[600], *text;
    size_t len;
    if (cham_file_read(in, CHAM_FILE_MAX_JSON, "a run's JSON", &text, &len, err, sizeof err) !=
        CHAM_OK) {
        fprintf(stderr, "chameleon report: %s\n", err);
        return 1;
    }
    bool blank = true;
    for (size_t i = 0; i < len && blank; i++)
        blank = text[i] == ' ' || text[i] == '\t' || text[i] == '\n' || text[i] == '\r';
    json_error_t e;
    json_t *run = blank ? NULL : json_loadb(text, len, 0, &e);
    free(text);
    if (!run) {
        if (blank)
            fprintf(stderr, "chameleon report: %s: empty file (expected the JSON object of "
                    "`chameleon simulate --json` or `chameleon train --json`)\n", in);
        else
            fprintf(stderr, "chameleon report: %s:%d:%d: %s\n", in, e.line, e.column, e.text);
        return 1;
    }
    json_t *series = json_object_get(run, "series");
    if (!json_is_object(run) || !json_is_object(series)) {
        fprintf(stderr, "chameleon report: %s: no \"series\": is it the output of "
                "`chameleon simulate --json` or `chameleon train --json`?\n", in);
        json_decref(run);
        return 1;
    }
    if (!tool_check_output_file("report", "--out", out)) {
        json_decref(run);
        return 1;
    }
    bool ok = report_write_html(run, out, err, sizeof err);
    json_decref(run);
    if (!ok) {
        fprintf(stderr, "chameleon report: %s\n", err);
        return 1;
    }
    printf("report written to %s\n", out);
    return 0;
}
