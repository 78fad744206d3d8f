/* `chameleon report RUN.json`: one self-contained HTML page from the JSON
 * of `chameleon simulate --json`: the summary, the last step's memory
 * curve, step time per step over bands of the stages, swapped bytes per
 * step, the policy applied at the end, and the stage changes. Inline SVG, inline CSS, no script: it opens
 * anywhere (docs/trace.md). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "commands.h"
#include "experiment.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: chameleon report RUN.json [--out REPORT.html]\n"
               "Writes an HTML page (REPORT.html; default: RUN.html next to RUN.json) from\n"
               "the output of `chameleon simulate --json`: summary, memory curve, step\n"
               "time with the stages, swapped bytes per step.\n");
}

static void html_text(FILE *f, const char *s)
{
    for (; s && *s; s++) {
        switch (*s) {
        case '&': fputs("&amp;", f); break;
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '"': fputs("&quot;", f); break;
        default: fputc(*s, f);
        }
    }
}

/* The summary: every top-level value that is not a series. */
static void summary(FILE *f, json_t *run)
{
    fputs("<table class=\"summary\">\n", f);
    const char *key;
    json_t *v;
    json_object_foreach(run, key, v) {
        if (json_is_object(v) || json_is_array(v))
            continue;
        fputs("<tr><th>", f);
        html_text(f, key);
        fputs("</th><td>", f);
        if (json_is_string(v))
            html_text(f, json_string_value(v));
        else if (json_is_integer(v))
            fprintf(f, "%lld", (long long)json_integer_value(v));
        else if (json_is_real(v))
            fprintf(f, "%.6g", json_real_value(v));
        else
            fputs(json_is_true(v) ? "true" : json_is_false(v) ? "false" : "-", f);
        fputs("</td></tr>\n", f);
    }
    fputs("</table>\n", f);
}

static void figure(FILE *f, const char *id, const char *caption, exp_plot_t *p)
{
    fprintf(f, "<figure id=\"%s\">\n", id);
    exp_plot_print_svg(p, f);
    fputs("<figcaption>", f);
    html_text(f, caption);
    fputs("</figcaption></figure>\n", f);
    exp_plot_free(p);
}

static bool memory_figure(FILE *f, json_t *curve)
{
    json_t *in_use = json_object_get(curve, "in_use_bytes");
    json_t *without = json_object_get(curve, "without_swaps_bytes");
    if (!json_is_array(in_use) || !json_is_array(without))
        return false;
    double cap = (double)json_integer_value(json_object_get(curve, "capacity_bytes"));
    double unit = cap >= 1073741824.0 ? 1073741824.0 : 1048576.0;
    exp_plot_t p;
    char title[96];
    snprintf(title, sizeof title, "Device memory during step %lld",
             (long long)json_integer_value(json_object_get(curve, "step")));
    exp_plot_init(&p, "memory", title, "op", unit > 1048576.0 ? "GiB" : "MiB");
    size_t n = json_array_size(in_use);
    for (size_t k = 0; k < n; k++) {
        exp_plot_add(&p, "in use", (double)k / 2,
                     (double)json_integer_value(json_array_get(in_use, k)) / unit);
        exp_plot_add(&p, "without swaps", (double)k / 2,
                     (double)json_integer_value(json_array_get(without, k)) / unit);
    }
    exp_plot_add(&p, "capacity", 0, cap / unit);
    exp_plot_add(&p, "capacity", n ? (double)(n - 1) / 2 : 1, cap / unit);
    figure(f, "memory-curve", "Memory in use before and after each op of the last step, as "
           "it was and as it would have been without swaps (rebuilt from the profile), and "
           "the capacity.", &p);
    return true;
}

/* Step time (or swapped bytes) per step, over bands of the stages. */
static void series_figure(FILE *f, json_t *series, const char *key, double scale,
                          const char *id, const char *title, const char *y_label,
                          const char *caption)
{
    json_t *values = json_object_get(series, key), *stages = json_object_get(series, "stage");
    exp_plot_t p;
    exp_plot_init(&p, id, title, "step", y_label);
    for (size_t i = 0; i < json_array_size(values); i++) {
        exp_plot_add(&p, key, (double)i, json_number_value(json_array_get(values, i)) * scale);
        const char *stage = json_string_value(json_array_get(stages, i));
        exp_plot_band(&p, stage ? stage : "?", (double)i - 0.5, (double)i + 0.5);
    }
    figure(f, id, caption, &p);
}

static double gib_of(json_t *obj, const char *key)
{
    return (double)json_integer_value(json_object_get(obj, key)) / 1073741824.0;
}

/* The policy applied at the end: its figures and its first items. */
static void policy_table(FILE *f, json_t *pol)
{
    json_t *items = json_object_get(pol, "items");
    if (!json_is_array(items)) {
        fputs("<p>No policy was applied at the end of the run.</p>\n", f);
        return;
    }
    size_t n = json_array_size(items);
    fprintf(f, "<p>Planner %s: %zu tensors swapped per step; peak %.2f GiB without swaps, "
            "%.2f GiB predicted, %.2f GiB usable.</p>\n",
            json_string_value(json_object_get(pol, "planner")), n,
            gib_of(pol, "peak_without_swaps_bytes"), gib_of(pol, "predicted_peak_bytes"),
            gib_of(pol, "usable_bytes"));
    static const char *const cols[] = {"bytes", "swap_out_after_op", "reusable_from_op",
                                       "swap_in_before_op", "first_use_op",
                                       "predicted_stall_ns"};
    fputs("<table class=\"policy\"><tr><th>#</th><th>MiB</th><th>out after op</th>"
          "<th>reusable from op</th><th>in before op</th><th>first use op</th>"
          "<th>predicted stall (us)</th></tr>\n", f);
    size_t shown = n < 100 ? n : 100;
    for (size_t i = 0; i < shown; i++) {
        json_t *it = json_array_get(items, i);
        fprintf(f, "<tr><td>%zu</td>", i + 1);
        for (size_t k = 0; k < sizeof cols / sizeof cols[0]; k++) {
            double v = (double)json_integer_value(json_object_get(it, cols[k]));
            if (k == 0)
                fprintf(f, "<td>%.1f</td>", v / 1048576.0);
            else if (k == 5)
                fprintf(f, "<td>%.1f</td>", v / 1000.0);
            else
                fprintf(f, "<td>%.0f</td>", v);
        }
        fputs("</tr>\n", f);
    }
    fputs("</table>\n", f);
    if (shown < n)
        fprintf(f, "<p>The first %zu of %zu items.</p>\n", shown, n);
}

/* The steps where the stage changed. */
static void stage_table(FILE *f, json_t *series)
{
    json_t *stages = json_object_get(series, "stage");
    fputs("<table class=\"stages\"><tr><th>step</th><th>stage after it</th></tr>\n", f);
    const char *prev = "";
    for (size_t i = 0; i < json_array_size(stages); i++) {
        const char *s = json_string_value(json_array_get(stages, i));
        if (s && strcmp(s, prev) != 0) {
            fprintf(f, "<tr><td>%zu</td><td>", i);
            html_text(f, s);
            fputs("</td></tr>\n", f);
            prev = s;
        }
    }
    fputs("</table>\n", f);
}

static const char style[] =
    "body{font-family:Helvetica,Arial,sans-serif;margin:2em auto;max-width:1000px;"
    "color:#222}h1{margin-bottom:0}.sub{color:#666;margin-top:.3em}"
    "table{border-collapse:collapse;margin:1em 0}th,td{padding:3px 12px;text-align:left;"
    "border-bottom:1px solid #eee}th{font-weight:600}figure{margin:1.5em 0}"
    "figcaption{color:#555;font-size:.9em;max-width:720px}";

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
    FILE *f = fopen(out, "w");
    if (!f) {
        fprintf(stderr, "chameleon report: %s: %s\n", out, strerror(errno));
        json_decref(run);
        return 1;
    }
    const char *model = json_string_value(json_object_get(run, "model"));
    const char *policy = json_string_value(json_object_get(run, "policy"));
    const char *device = json_string_value(json_object_get(run, "device"));
    fprintf(f, "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<title>Chameleon run report</title><style>%s</style></head><body>\n"
            "<h1>Chameleon run report</h1>\n<p class=\"sub\">", style);
    html_text(f, model);
    fputs(", policy ", f);
    html_text(f, policy);
    fputs(", simulated ", f);
    html_text(f, device);
    fputs("</p>\n<h2>Summary</h2>\n", f);
    summary(f, run);
    fputs("<h2>Memory</h2>\n", f);
    if (!memory_figure(f, json_object_get(run, "memory_curve")))
        fputs("<p>No memory curve: the run failed before its last step.</p>\n", f);
    fputs("<h2>Steps</h2>\n", f);
    series_figure(f, series, "step_time_s", 1, "step-time", "Step time per step",
                  "simulated s", "Simulated time of each step; the bands are the stage "
                  "after the step (WarmUp, GenPolicy, Stable).");
    series_figure(f, series, "swapped_bytes", 1.0 / 1073741824.0, "swapped",
                  "Bytes swapped per step", "GiB", "Bytes moved to and from the host in "
                  "each step, over the same stage bands.");
    fputs("<h2>Policy</h2>\n", f);
    policy_table(f, json_object_get(run, "policy"));
    fputs("<h2>Stage changes</h2>\n", f);
    stage_table(f, series);
    fputs("</body></html>\n", f);
    bool ok = !ferror(f);
    ok = fclose(f) == 0 && ok;
    json_decref(run);
    if (!ok) {
        fprintf(stderr, "chameleon report: %s: writing failed\n", out);
        return 1;
    }
    printf("report written to %s\n", out);
    return 0;
}
