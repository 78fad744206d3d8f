/* The run report's HTML and the JSON parts both commands put in a run's
 * JSON (report.h). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "report.h"
#include "plot.h"
#include "common/file.h"

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

/* How a summary value reads. */
typedef enum value_kind {
    V_COUNT,                     /* a whole number */
    V_BYTES,                     /* MiB or GiB */
    V_TIME,                      /* seconds, shown in ms (s from 10 s) */
    V_RATIO,                     /* a fraction, shown in % */
    V_CHANGE,                    /* a relative change, shown as +x.x % */
    V_LOSS,                      /* cross-entropy, nats */
    V_YESNO,
    V_TEXT,
} value_kind_t;

/* Every summary key `simulate --json` and `train --json` write, in the
 * order shown, with its label in words. Keys not listed are shown under
 * their JSON name (a newer run read by an older report). */
static const struct summary_key {
    const char *key, *label;
    value_kind_t kind;
} summary_keys[] = {
    {"parameters", "Model parameters", V_COUNT},
    {"steps", "Training steps completed", V_COUNT},
    {"ops_per_step", "Ops per step (last step)", V_COUNT},
    {"final_train_loss", "Final training loss", V_LOSS},
    {"final_val_loss", "Final validation loss", V_LOSS},
    {"validations", "Validation passes", V_COUNT},
    {"capacity_bytes", "Device capacity", V_BYTES},
    {"budget_bytes", "Device memory budget", V_BYTES},
    {"unconstrained_peak_bytes", "Peak without a budget (unconstrained run)", V_BYTES},
    {"peak_device_bytes", "Peak device memory", V_BYTES},
    {"peak_tensor_bytes", "Peak device memory held by tensors", V_BYTES},
    {"step_time_s", "Step time (median over Stable steps)", V_TIME},
    {"mean_step_time_s", "Step time (mean over all steps)", V_TIME},
    {"late_mean_step_time_s", "Step time (mean over the last half)", V_TIME},
    {"sim_step_time_s", "Step time (mean, simulated)", V_TIME},
    {"ideal_step_time_s", "Step time with unlimited memory", V_TIME},
    {"lower_bound_step_time_s", "Lower bound on the step time at this capacity", V_TIME},
    {"overhead_vs_ideal", "Slowdown against unlimited memory", V_CHANGE},
    {"host_overhead_ratio", "Host CPU time in Chameleon's calls", V_RATIO},
    {"swapped_bytes_per_step", "Swapped per step (out and in)", V_BYTES},
    {"swapped_bytes", "Swapped in all (out and in)", V_BYTES},
    {"on_demand_swapins", "On-demand swap-ins", V_COUNT},
    {"passive_swapouts", "Passive swap-outs", V_COUNT},
    {"stable_steps", "Steps that ran Stable throughout", V_COUNT},
    {"stable_passive_swapouts", "Passive swap-outs in those steps", V_COUNT},
    {"stable_on_demand_swapins", "On-demand swap-ins in those steps", V_COUNT},
    {"device_groups", "Parameter groups updated on the device (optimizer on the host)",
     V_COUNT},
    {"dropped_bytes_per_step", "Dropped per step, to be recomputed", V_BYTES},
    {"recomputes", "Ops run again (recomputation)", V_COUNT},
    {"stage_changes", "Stage changes", V_COUNT},
    {"policy_regenerations", "Policies generated", V_COUNT},
    {"skipped_updates", "Updates skipped on overflow", V_COUNT},
    {"layers_skipped", "Blocks skipped (stochastic depth)", V_COUNT},
    {"hazards", "Hazards (data races found)", V_COUNT},
    {"bit_exact", "Equal to the unconstrained run, bit for bit", V_YESNO},
    {"decoded_tokens", "Tokens decoded per sequence after training", V_COUNT},
    {"decode_bit_exact", "Decoded tokens equal the unconstrained run's", V_YESNO},
    {"oom", "Out of device memory", V_YESNO},
    {"oom_step", "Failed at step", V_COUNT},
    {"oom_op", "Failed at op", V_COUNT},
    {"error", "Error", V_TEXT},
    {"optimizer", "Optimizer runs on the", V_TEXT},
    {"optimizer_planned", "Where the optimizer runs, chosen by the run", V_YESNO},
    {"lower_bound_optimizer", "Lower bound's program (as --optimizer says it)", V_TEXT},
    {"protrain_n_persist", "ProTrain: chunks kept on the device", V_COUNT},
    {"protrain_n_buffer", "ProTrain: chunk buffers", V_COUNT},
    {"protrain_n_swap", "ProTrain: blocks swapped", V_COUNT},
    {"protrain_n_checkpoint", "ProTrain: blocks checkpointed", V_COUNT},
    {"protrain_swap_interval", "ProTrain: swap interval (blocks)", V_COUNT},
    {"predicted_step_time_s", "ProTrain: estimated step time", V_TIME},
    {"step_time_error", "ProTrain: step time estimate against the run", V_CHANGE},
    {"predicted_peak_bytes", "ProTrain: estimated peak", V_BYTES},
    {"peak_error", "ProTrain: peak estimate against the tensors' peak", V_CHANGE},
    {"protrain_evaluated", "ProTrain: configurations estimated", V_COUNT},
    {"protrain_pruned", "ProTrain: configurations pruned", V_COUNT},
};
/* Shown in the page's subtitle, not in the table. */
static const char *const subtitle_keys[] = {"model", "strategy", "policy", "device"};

static const double MiB = 1048576.0, GiB = 1073741824.0;

/* "812.3 MiB" or "7.05 GiB". */
static void bytes_text(char *buf, size_t size, double b)
{
    if (fabs(b) >= GiB)
        snprintf(buf, size, "%.2f GiB", b / GiB);
    else
        snprintf(buf, size, "%.2f MiB", b / MiB);
}

/* A whole number with thousands separated: "1,071,681,536". */
static void count_text(char *buf, size_t size, json_int_t v)
{
    char digits[32];
    int n = snprintf(digits, sizeof digits, "%llu",
                     v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v);
    size_t k = 0;
    if (v < 0 && k + 1 < size)
        buf[k++] = '-';
    for (int i = 0; i < n && k + 1 < size; i++) {
        buf[k++] = digits[i];
        if ((n - 1 - i) % 3 == 0 && i < n - 1 && k + 1 < size)
            buf[k++] = ',';
    }
    buf[k] = '\0';
}

static void value_text(char *buf, size_t size, value_kind_t kind, json_t *v)
{
    double x = json_number_value(v);
    if (json_is_null(v)) {
        snprintf(buf, size, "n/a");
    } else if (json_is_boolean(v) || (kind == V_YESNO && json_is_number(v))) {
        snprintf(buf, size, "%s", json_is_true(v) || x != 0 ? "yes" : "no");
    } else if (json_is_string(v)) {
        snprintf(buf, size, "%s", json_string_value(v));
    } else if (!json_is_number(v)) {
        snprintf(buf, size, "?");
    } else if (kind == V_BYTES) {
        bytes_text(buf, size, x);
    } else if (kind == V_TIME) {
        if (fabs(x) >= 10)
            snprintf(buf, size, "%.2f s", x);
        else
            snprintf(buf, size, "%.3f ms", x * 1e3);
    } else if (kind == V_RATIO) {
        snprintf(buf, size, "%.2f %%", 100 * x);
    } else if (kind == V_CHANGE) {
        snprintf(buf, size, "%+.1f %%", 100 * x);
    } else if (kind == V_LOSS) {
        snprintf(buf, size, "%.4f", x);
    } else if (json_is_integer(v)) {
        count_text(buf, size, json_integer_value(v));
    } else {
        snprintf(buf, size, "%.6g", x);
    }
}

static void summary_row(FILE *f, const char *label, bool raw_key, const char *value)
{
    fputs("<tr><th>", f);
    if (raw_key)
        fputs("<code>", f);
    html_text(f, label);
    fputs(raw_key ? "</code></th><td>" : "</th><td>", f);
    html_text(f, value);
    fputs("</td></tr>\n", f);
}

/* The summary: the known values in words and units, then any others. */
static void summary(FILE *f, json_t *run)
{
    fputs("<table class=\"summary\">\n", f);
    size_t n_keys = sizeof summary_keys / sizeof summary_keys[0];
    /* simulate --json's step time falls back to every step's median. */
    json_t *stable = json_object_get(run, "stable_steps");
    bool none_stable = json_is_integer(stable) && json_integer_value(stable) == 0;
    char buf[600];
    for (size_t k = 0; k < n_keys; k++) {
        json_t *v = json_object_get(run, summary_keys[k].key);
        /* The failure's step, op and message only when there is one. */
        if (!v || (json_is_null(v) && (strncmp(summary_keys[k].key, "oom_", 4) == 0 ||
                                       strcmp(summary_keys[k].key, "error") == 0)))
            continue;
        value_text(buf, sizeof buf, summary_keys[k].kind, v);
        size_t n = strlen(buf);
        double peak = json_number_value(json_object_get(run, "unconstrained_peak_bytes"));
        if (strcmp(summary_keys[k].key, "budget_bytes") == 0 && peak > 0 && n < sizeof buf)
            snprintf(buf + n, sizeof buf - n, " (%.0f %% of the unconstrained peak)",
                     100 * json_number_value(v) / peak);
        bool fallback = none_stable && strcmp(summary_keys[k].key, "step_time_s") == 0;
        summary_row(f, fallback ? "Step time (median over all steps: none was Stable)"
                                : summary_keys[k].label, false, buf);
    }
    const char *key;
    json_t *v;
    json_object_foreach(run, key, v) {
        bool known = json_is_object(v) || json_is_array(v);
        for (size_t k = 0; k < n_keys && !known; k++)
            known = strcmp(key, summary_keys[k].key) == 0;
        for (size_t k = 0; k < sizeof subtitle_keys / sizeof subtitle_keys[0] && !known; k++)
            known = strcmp(key, subtitle_keys[k]) == 0;
        if (known)
            continue;
        value_text(buf, sizeof buf, V_COUNT, v);
        summary_row(f, key, true, buf);
    }
    fputs("</table>\n", f);
}

static void figure(FILE *f, const char *id, const char *caption, plot_t *p)
{
    fprintf(f, "<figure id=\"%s\">\n", id);
    plot_print_svg(p, f);
    fputs("<figcaption>", f);
    html_text(f, caption);
    fputs("</figcaption></figure>\n", f);
    plot_free(p);
}

static bool memory_figure(FILE *f, json_t *curve)
{
    json_t *in_use = json_object_get(curve, "in_use_bytes");
    json_t *without = json_object_get(curve, "without_swaps_bytes");
    if (!json_is_array(in_use) || !json_is_array(without))
        return false;
    /* Train draws its budget, simulate the device's capacity. */
    json_t *budget = json_object_get(curve, "budget_bytes");
    const char *limit_name = budget ? "budget" : "capacity";
    double limit = json_number_value(budget ? budget : json_object_get(curve, "capacity_bytes"));
    size_t n = json_array_size(in_use);
    double most = limit;
    for (size_t k = 0; k < n; k++)
        most = fmax(most, fmax(json_number_value(json_array_get(in_use, k)),
                               json_number_value(json_array_get(without, k))));
    double unit = most >= GiB ? GiB : MiB;
    plot_t p;
    char title[96];
    snprintf(title, sizeof title, "Device memory during step %lld",
             (long long)json_integer_value(json_object_get(curve, "step")));
    plot_init(&p, "memory", title, "op of the step",
                  unit == GiB ? "device memory (GiB)" : "device memory (MiB)");
    p.y_from_zero = true;
    for (size_t k = 0; k < n; k++) {
        plot_add(&p, "in use", (double)k / 2,
                     json_number_value(json_array_get(in_use, k)) / unit);
        plot_add(&p, "without swaps", (double)k / 2,
                     json_number_value(json_array_get(without, k)) / unit);
    }
    if (limit > 0) {
        plot_add(&p, limit_name, 0, limit / unit);
        plot_add(&p, limit_name, n ? (double)(n - 1) / 2 : 1, limit / unit);
    }
    char caption[400];
    snprintf(caption, sizeof caption, "Memory held by tensors before and after each op of the "
             "last step, as it was and as it would have been without swaps (rebuilt from the "
             "profile), and the %s.", budget ? "memory budget the run was given"
                                             : "device's capacity");
    figure(f, "memory-curve", caption, &p);
    return true;
}

/* One value per step (time, swapped bytes), over bands of the stages. */
static void series_figure(FILE *f, json_t *series, const char *key, double scale,
                          const char *name, const char *id, const char *title,
                          const char *y_label, const char *caption)
{
    json_t *values = json_object_get(series, key), *stages = json_object_get(series, "stage");
    plot_t p;
    plot_init(&p, id, title, "step", y_label);
    p.y_from_zero = true;
    for (size_t i = 0; i < json_array_size(values); i++) {
        plot_add(&p, name, (double)i, json_number_value(json_array_get(values, i)) * scale);
        const char *stage = json_string_value(json_array_get(stages, i));
        plot_band(&p, stage ? stage : "?", (double)i - 0.5, (double)i + 0.5);
    }
    figure(f, id, caption, &p);
}

/* Training loss per step and validation loss per validation pass (train). */
static void loss_figure(FILE *f, json_t *series)
{
    json_t *loss = json_object_get(series, "loss");
    json_t *val = json_object_get(series, "validation");
    json_t *val_loss = json_object_get(val, "loss"), *val_step = json_object_get(val, "after_step");
    if (!json_is_array(loss))
        return;
    plot_t p;
    plot_init(&p, "loss", "Loss per step", "step", "cross-entropy loss (nats)");
    for (size_t i = 0; i < json_array_size(loss); i++)
        plot_add(&p, "training", (double)i, json_number_value(json_array_get(loss, i)));
    for (size_t i = 0; i < json_array_size(val_loss); i++)
        plot_add(&p, "validation", json_number_value(json_array_get(val_step, i)),
                     json_number_value(json_array_get(val_loss, i)));
    figure(f, "loss", "The training loss of each step and the validation loss of each "
           "validation pass (on held-out data, after the step it is drawn at).", &p);
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
    char a[32], b[32], c[32];
    bytes_text(a, sizeof a, json_number_value(json_object_get(pol, "peak_without_swaps_bytes")));
    bytes_text(b, sizeof b, json_number_value(json_object_get(pol, "predicted_peak_bytes")));
    bytes_text(c, sizeof c, json_number_value(json_object_get(pol, "usable_bytes")));
    fputs("<p>Planner ", f);
    html_text(f, planner ? planner : "?");
    fprintf(f, ": %zu tensors swapped per step; peak %s without swaps, %s predicted with "
            "them, %s usable.</p>\n", n, a, b, c);
    static const char *const cols[] = {"bytes", "swap_out_after_op", "reusable_from_op",
                                       "swap_in_before_op", "first_use_op",
                                       "predicted_stall_ns"};
    fputs("<table class=\"policy\"><tr><th>#</th><th>size (MiB)</th><th>out after op</th>"
          "<th>reusable from op</th><th>in before op</th><th>first use op</th>"
          "<th>predicted stall (&micro;s)</th></tr>\n", f);
    size_t shown = n < 100 ? n : 100;
    for (size_t i = 0; i < shown; i++) {
        json_t *it = json_array_get(items, i);
        fprintf(f, "<tr><td>%zu</td>", i + 1);
        for (size_t k = 0; k < sizeof cols / sizeof cols[0]; k++) {
            double v = json_number_value(json_object_get(it, cols[k]));
            if (k == 0)
                fprintf(f, "<td>%.2f</td>", v / MiB);
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

static void stage_row(FILE *f, size_t step, const char *pass, const char *from, const char *to)
{
    fprintf(f, "<tr><td>%zu</td><td>%s</td><td>", step, pass);
    html_text(f, from ? from : "(start)");
    fputs("</td><td>", f);
    html_text(f, to);
    fputs("</td></tr>\n", f);
}

/* Every change of the stage seen after a pass: training steps, and
 * validation passes (train's "validation" series, after the step they
 * follow; simulate's steps that opened with one are marked). */
static void stage_table(FILE *f, json_t *run, json_t *series)
{
    json_t *stages = json_object_get(series, "stage");
    json_t *validated = json_object_get(series, "validated");
    json_t *val = json_object_get(series, "validation");
    json_t *val_stage = json_object_get(val, "stage"), *val_step = json_object_get(val, "after_step");
    fputs("<table class=\"stages\"><tr><th>step</th><th>pass</th><th>stage before</th>"
          "<th>stage after</th></tr>\n", f);
    const char *prev = NULL;
    size_t v = 0, shown = 0, n_val = json_array_size(val_stage);
    for (size_t i = 0; i < json_array_size(stages); i++) {
        const char *s = json_string_value(json_array_get(stages, i));
        if (s && (!prev || strcmp(s, prev) != 0)) {
            stage_row(f, i, json_is_true(json_array_get(validated, i)) ? "training, with validation"
                                                                       : "training", prev, s);
            shown += prev != NULL;
            prev = s;
        }
        for (; v < n_val && json_integer_value(json_array_get(val_step, v)) <= (json_int_t)i; v++) {
            const char *t = json_string_value(json_array_get(val_stage, v));
            if (t && (!prev || strcmp(t, prev) != 0)) {
                stage_row(f, (size_t)json_integer_value(json_array_get(val_step, v)),
                          "validation", prev, t);
                shown += prev != NULL;
                prev = t;
            }
        }
    }
    fputs("</table>\n", f);
    json_t *counted = json_object_get(run, "stage_changes");
    if (json_is_integer(counted) && (json_int_t)shown < json_integer_value(counted))
        fprintf(f, "<p>The runtime counted %lld stage changes; %zu are seen at the ends of "
                "passes, the others came and went within one.</p>\n",
                (long long)json_integer_value(counted), shown);
}

/* A run that did not finish, or whose check failed, says so first, above
 * everything that would read as its result: the run's "error" (a string
 * when it failed, as `simulate --json` and `train --json` write it) and a
 * "bit_exact" or "decode_bit_exact" that is false. */
static void banner(FILE *f, json_t *run)
{
    const char *error = json_string_value(json_object_get(run, "error"));
    if (error) {
        fputs("<p class=\"failed\" id=\"failed\"><strong>FAILED:</strong> the run did not "
              "finish. ", f);
        html_text(f, error);
        fputs(" The figures below are of the steps before the failure.</p>\n", f);
    }
    if (json_is_false(json_object_get(run, "bit_exact")))
        fputs("<p class=\"failed\" id=\"differs\"><strong>DIFFERS:</strong> a loss or a "
              "parameter byte differs from the unconstrained run's.</p>\n", f);
    if (json_is_false(json_object_get(run, "decode_bit_exact")) &&
        json_integer_value(json_object_get(run, "decoded_tokens")) > 0)
        fputs("<p class=\"failed\" id=\"decode-differs\"><strong>DIFFERS:</strong> the "
              "decoded tokens differ from the unconstrained run's.</p>\n", f);
}

static const char style[] =
    "body{font-family:Helvetica,Arial,sans-serif;margin:2em auto;max-width:1000px;"
    "color:#222}h1{margin-bottom:0}.sub{color:#666;margin-top:.3em}"
    "table{border-collapse:collapse;margin:1em 0}th,td{padding:3px 12px;text-align:left;"
    "border-bottom:1px solid #eee}th{font-weight:600}figure{margin:1.5em 0}"
    "figcaption{color:#555;font-size:.9em;max-width:720px}"
    ".failed{background:#fde8e8;border-left:4px solid #c0392b;padding:.6em 1em}";

json_t *report_policy_json(const cham_policy_t *pol)
{
    if (!pol)
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
    return j;
}

json_t *report_curve_json(const cham_profile_t *p)
{
    if (!p)
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
        json_object_set_new(c, "ops", names);
        json_object_set_new(c, "in_use_bytes", a);
        json_object_set_new(c, "without_swaps_bytes", b);
    }
    free(actual);
    free(rebuilt);
    return c;
}

void report_parts_clear(report_parts_t *parts)
{
    json_decref(parts->curve);
    json_decref(parts->policy);
    parts->curve = parts->policy = NULL;
}

void report_parts_take(report_parts_t *parts, const cham_profile_t *profile,
                         const cham_policy_t *policy)
{
    report_parts_clear(parts);
    parts->curve = report_curve_json(profile);
    parts->policy = report_policy_json(policy);
}

void report_parts_give(report_parts_t *parts, json_t *run, const char *limit_key,
                         uint64_t limit_bytes)
{
    json_t *curve = parts->curve ? parts->curve : json_null();
    json_t *policy = parts->policy ? parts->policy : json_null();
    parts->curve = parts->policy = NULL;
    if (json_is_object(curve))
        json_object_set_new(curve, limit_key, json_integer((json_int_t)limit_bytes));
    json_object_set_new(run, "memory_curve", curve);
    json_object_set_new(run, "policy_applied", policy);
}

bool report_write_curve(const cham_profile_t *profile, const char *limit_name, const char *dir,
                        char *err, size_t err_size)
{
    cham_profile_view_t v;
    cham_profile_get(profile, &v);
    return plot_memory_curve(profile, v.capacity, limit_name, dir, "memory_curve", err, err_size);
}

bool report_write_html(json_t *run, const char *out, char *err, size_t err_size)
{
    json_t *series = json_object_get(run, "series");
    cham_out_t *o;
    if (cham_out_open(out, &o, err, err_size) != CHAM_OK)
        return false;
    FILE *f = cham_out_file(o);
    const char *model = json_string_value(json_object_get(run, "model"));
    /* "policy" named the strategy in the JSON of earlier builds. */
    const char *strategy = json_string_value(json_object_get(run, "strategy"));
    if (!strategy)
        strategy = json_string_value(json_object_get(run, "policy"));
    const char *device = json_string_value(json_object_get(run, "device"));
    fprintf(f, "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<title>Chameleon run report</title><style>%s</style></head><body>\n"
            "<h1>Chameleon run report</h1>\n<p class=\"sub\">", style);
    html_text(f, model ? model : "?");
    fputs(", strategy ", f);
    html_text(f, strategy ? strategy : "?");
    fputs(", simulated ", f);
    html_text(f, device ? device : "?");
    fputs("</p>\n", f);
    banner(f, run);
    fputs("<h2>Summary</h2>\n", f);
    summary(f, run);
    fputs("<h2>Memory</h2>\n", f);
    if (!memory_figure(f, json_object_get(run, "memory_curve")))
        fputs("<p>No memory curve: the run failed before its last step.</p>\n", f);
    fputs("<h2>Steps</h2>\n", f);
    if (json_is_array(json_object_get(series, "loss")))
        loss_figure(f, series);
    series_figure(f, series, "step_time_s", 1e3, "step time", "step-time", "Step time per step",
                  "simulated time (ms)", "Simulated time of each step; the bands are the stage "
                  "after the step (WarmUp, GenPolicy, Stable).");
    /* GiB, or MiB for runs that move less than a GiB a step. */
    double most = 0;
    json_t *sw = json_object_get(series, "swapped_bytes");
    for (size_t i = 0; i < json_array_size(sw); i++)
        most = fmax(most, json_number_value(json_array_get(sw, i)));
    bool gib = most >= GiB;
    series_figure(f, series, "swapped_bytes", gib ? 1.0 / GiB : 1.0 / MiB, "swapped", "swapped",
                  "Bytes swapped per step", gib ? "swapped (GiB)" : "swapped (MiB)",
                  "Bytes moved to and from the host in each step (out and in), over the same "
                  "stage bands.");
    fputs("<h2>Policy</h2>\n", f);
    policy_table(f, json_object_get(run, "policy_applied"));
    fputs("<h2>Stage changes</h2>\n", f);
    stage_table(f, run, series);
    fputs("</body></html>\n", f);
    return cham_out_commit(o, err, err_size) == CHAM_OK;
}
