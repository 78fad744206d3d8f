/* The run report's HTML and the JSON parts both commands put in a run's
 * JSON (report.h). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "report.h"
#include "experiment.h"

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

static double mib_of(json_t *obj, const char *key)
{
    return (double)json_integer_value(json_object_get(obj, key)) / 1048576.0;
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
    /* The name comes from the file: escaped like all text, "?" if absent. */
    const char *planner = json_string_value(json_object_get(pol, "planner"));
    fputs("<p>Planner ", f);
    html_text(f, planner ? planner : "?");
    fprintf(f, ": %zu tensors swapped per step; peak %.1f MiB without swaps, "
            "%.1f MiB predicted, %.1f MiB usable.</p>\n", n,
            mib_of(pol, "peak_without_swaps_bytes"), mib_of(pol, "predicted_peak_bytes"),
            mib_of(pol, "usable_bytes"));
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

json_t *tool_policy_json(const char *path)
{
    cham_policy_t *pol;
    char err[600];
    if (!path || !path[0] ||
        cham_policy_load_json(path, &pol, err, sizeof err) != CHAM_OK)
        return json_null();
    cham_policy_view_t v;
    cham_policy_get(pol, &v);
    json_t *j = json_object(), *items = json_array();
    for (size_t i = 0; i < v.n_items; i++) {
        const cham_policy_item_t *it = &v.items[i];
        json_t *x = json_object();
        json_object_set_new(x, "bytes", json_integer((json_int_t)it->bytes));
        json_object_set_new(x, "swap_out_after_op", json_integer(it->swap_out_op));
        json_object_set_new(x, "reusable_from_op", json_integer(it->free_op));
        json_object_set_new(x, "swap_in_before_op", json_integer(it->swap_in_op));
        json_object_set_new(x, "first_use_op", json_integer(it->use_op));
        json_object_set_new(x, "predicted_stall_ns", json_integer((json_int_t)it->stall_ns));
        json_array_append_new(items, x);
    }
    json_object_set_new(j, "planner", json_string(v.planner));
    json_object_set_new(j, "ops", json_integer((json_int_t)v.n_ops));
    json_object_set_new(j, "usable_bytes", json_integer((json_int_t)v.usable));
    json_object_set_new(j, "peak_without_swaps_bytes",
                        json_integer((json_int_t)v.peak_without_swaps));
    json_object_set_new(j, "predicted_peak_bytes", json_integer((json_int_t)v.predicted_peak));
    json_object_set_new(j, "items", items);
    cham_policy_free(pol);
    return j;
}

json_t *tool_curve_json(const char *path, uint64_t capacity)
{
    cham_profile_t *p = NULL;
    char err[600];
    if (!path || cham_profile_load_json(path, &p, err, sizeof err) != CHAM_OK)
        return json_null();
    cham_profile_view_t v;
    cham_profile_get(p, &v);
    size_t n = 2 * v.n_ops;
    uint64_t *actual = malloc((n ? n : 1) * sizeof *actual);
    uint64_t *rebuilt = malloc((n ? n : 1) * sizeof *rebuilt);
    json_t *c = json_null();
    if (actual && rebuilt) {
        cham_profile_memory_curve(p, actual, rebuilt);
        json_t *a = json_array(), *b = json_array(), *names = json_array();
        for (size_t k = 0; k < n; k++) {
            json_array_append_new(a, json_integer((json_int_t)actual[k]));
            json_array_append_new(b, json_integer((json_int_t)rebuilt[k]));
        }
        for (size_t k = 0; k < v.n_ops; k++) {
            cham_op_token_t t = v.ops[k].token;
            json_array_append_new(names, json_string((size_t)t < v.n_tokens ? v.token_names[t]
                                                                             : "?"));
        }
        c = json_object();
        json_object_set_new(c, "step", json_integer((json_int_t)v.step));
        json_object_set_new(c, "capacity_bytes", json_integer((json_int_t)capacity));
        json_object_set_new(c, "ops", names);
        json_object_set_new(c, "in_use_bytes", a);
        json_object_set_new(c, "without_swaps_bytes", b);
    }
    free(actual);
    free(rebuilt);
    cham_profile_free(p);
    return c;
}

bool tool_write_curve(const char *path, uint64_t capacity, const char *dir, char *err,
                      size_t err_size)
{
    cham_profile_t *p = NULL;
    bool ok = cham_profile_load_json(path, &p, err, err_size) == CHAM_OK &&
              exp_memory_curve(p, capacity, dir, "memory_curve", err, err_size);
    cham_profile_free(p);
    return ok;
}

bool tool_report_write(json_t *run, const char *out, char *err, size_t err_size)
{
    json_t *series = json_object_get(run, "series");
    FILE *f = fopen(out, "w");
    if (!f) {
        snprintf(err, err_size, "%s: %s", out, strerror(errno));
        return false;
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
    /* GiB, or MiB for runs that move less than a GiB a step. */
    double most = 0;
    json_t *sw = json_object_get(series, "swapped_bytes");
    for (size_t i = 0; i < json_array_size(sw); i++)
        most = fmax(most, json_number_value(json_array_get(sw, i)));
    bool gib = most >= 1073741824.0;
    series_figure(f, series, "swapped_bytes", gib ? 1.0 / 1073741824.0 : 1.0 / 1048576.0,
                  "swapped", "Bytes swapped per step", gib ? "GiB" : "MiB",
                  "Bytes moved to and from the host in each step, over the same stage bands.");
    fputs("<h2>Policy</h2>\n", f);
    policy_table(f, json_object_get(run, "policy_applied"));
    fputs("<h2>Stage changes</h2>\n", f);
    stage_table(f, series);
    fputs("</body></html>\n", f);
    bool ok = !ferror(f);
    ok = fclose(f) == 0 && ok;
    if (!ok)
        snprintf(err, err_size, "%s: writing failed", out);
    return ok;
}
