/* `chameleon report RUN.json`: the HTML page of report.h from the JSON of
 * `chameleon simulate --json` (docs/trace.md). */
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "commands.h"
#include "report.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: chameleon report RUN.json [--out REPORT.html]\n"
               "Writes an HTML page (REPORT.html; default: RUN.html next to RUN.json) from\n"
               "the output of `chameleon simulate --json`: summary, memory curve, step\n"
               "time with the stages, swapped bytes per step.\n");
}

int cmd_report(int argc, char **argv)
{
    const char *in = NULL, *out = NULL;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(stdout);
            return 0;
        }
        if (strcmp(argv[i], "--out") == 0 && i + 1 < argc)
            out = argv[++i];
        else if (argv[i][0] == '-' || in) {
            fprintf(stderr, "chameleon report: unexpected argument %s\n", argv[i]);
            return 2;
        } else
            in = argv[i];
    }
    if (!in) {
        usage(stderr);
        return 2;
    }
    json_error_t e;
    json_t *run = json_load_file(in, 0, &e);
    if (!run) {
        fprintf(stderr, "chameleon report: %s:%d:%d: %s\n", in, e.line, e.column, e.text);
        return 1;
    }
    json_t *series = json_object_get(run, "series");
    if (!json_is_object(run) || !json_is_object(series)) {
        fprintf(stderr, "chameleon report: %s: no \"series\": is it the output of "
                "`chameleon simulate --json`?\n", in);
        json_decref(run);
        return 1;
    }
    char path[4096];
    if (!out) {
        size_t n = strlen(in);
        snprintf(path, sizeof path, "%.*s.html",
                 (int)(n > 5 && strcmp(in + n - 5, ".json") == 0 ? n - 5 : n), in);
        out = path;
    }
    char err[600];
    bool ok = tool_report_write(run, out, err, sizeof err);
    json_decref(run);
    if (!ok) {
        fprintf(stderr, "chameleon report: %s\n", err);
        return 1;
    }
    printf("report written to %s\n", out);
    return 0;
}
