/* `chameleon report RUN.json`: the HTML page of report.h from the JSON of
 * `chameleon simulate --json` or `chameleon train --json` (docs/trace.md),
 * once the JSON is checked: a page drawn from series of different
 * lengths, unknown stages or negative bytes would show nonsense without a
 * word. */
#include <math.h>
#include <stdarg.h>
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

/* ---- the run's JSON, checked before anything is written (docs/trace.md) ------*/

/* What a key's values must be, from its name, as simulate and train name
 * them: byte counts (bytes, *_bytes, *_bytes_*), times (*_s, *_ns), op and
 * step numbers and counts of swaps (*_op, step, steps, after_step,
 * oom_step, *_swapins, *_swapouts), stage names (stage). */
typedef enum value_rule {
    RULE_ANY,
    RULE_BYTES,
    RULE_TIME,
    RULE_WHOLE,
    RULE_STAGE,
} value_rule_t;

static bool ends_with(const char *s, const char *tail)
{
    size_t n = strlen(s), k = strlen(tail);
    return n >= k && strcmp(s + n - k, tail) == 0;
}

static value_rule_t rule_of(const char *key)
{
    if (strcmp(key, "stage") == 0)
        return RULE_STAGE;
    if (strcmp(key, "bytes") == 0 || ends_with(key, "_bytes") || strstr(key, "_bytes_"))
        return RULE_BYTES;
    if (ends_with(key, "_s") || ends_with(key, "_ns"))
        return RULE_TIME;
    if (ends_with(key, "_op") || ends_with(key, "_swapins") || ends_with(key, "_swapouts") ||
        strcmp(key, "step") == 0 || strcmp(key, "steps") == 0 ||
        strcmp(key, "after_step") == 0 || strcmp(key, "oom_step") == 0)
        return RULE_WHOLE;
    return RULE_ANY;
}

static bool known_stage(const char *s)
{
    static const cham_stage_t stages[] = {CHAM_STAGE_WARMUP, CHAM_STAGE_GENPOLICY,
                                          CHAM_STAGE_STABLE};
    for (size_t k = 0; k < sizeof stages / sizeof stages[0]; k++)
        if (strcmp(s, cham_stage_name(stages[k])) == 0)
            return true;
    return false;
}

/* The check's state: the file, the path to the value at hand
 * ("series.stage[3]"), the first error. */
typedef struct run_check {
    const char *file;
    char path[256];
    size_t len;                  /* of path; more than fits is cut */
    char *err;
    size_t err_size;
} run_check_t;

static size_t path_push(run_check_t *c, const char *fmt, ...)
{
    size_t was = c->len;
    va_list ap;
    va_start(ap, fmt);
    int n = c->len < sizeof c->path ? vsnprintf(c->path + c->len, sizeof c->path - c->len, fmt, ap)
                                    : 0;
    va_end(ap);
    c->len += n > 0 ? (size_t)n : 0;
    if (c->len >= sizeof c->path)
        c->len = sizeof c->path - 1;
    /* A key is the file's text: no control character reaches the terminal. */
    for (size_t k = was; k < c->len; k++)
        if ((unsigned char)c->path[k] < 0x20 || c->path[k] == 0x7f)
            c->path[k] = '?';
    return was;
}

static void path_pop(run_check_t *c, size_t was)
{
    c->len = was;
    c->path[was] = '\0';
}

/* "FILE: PATH: expected WANT, got VALUE" (the value as JSON, cut short). */
static bool refuse(run_check_t *c, const char *want, const json_t *v)
{
    char *text = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
    snprintf(c->err, c->err_size, "%s: %s: expected %s, got %.80s%s", c->file, c->path, want,
             text ? text : "?", text && strlen(text) > 80 ? "..." : "");
    free(text);
    return false;
}

/* v and everything in it, by the rule of the key it is under (an array's
 * values by its own key's). jansson refuses NaN, infinities and numbers
 * that overflow a double when it reads, so every number is finite; this
 * says so again rather than trusting it. */
static bool check_value(run_check_t *c, value_rule_t rule, json_t *v)
{
    if (json_is_array(v)) {
        size_t i;
        json_t *x;
        json_array_foreach(v, i, x) {
            size_t was = path_push(c, "[%zu]", i);
            if (!check_value(c, rule, x))
                return false;
            path_pop(c, was);
        }
        return true;
    }
    if (json_is_object(v)) {
        const char *key;
        json_t *x;
        json_object_foreach(v, key, x) {
            size_t was = path_push(c, c->len ? ".%s" : "%s", key);
            if (!check_value(c, rule_of(key), x))
                return false;
            path_pop(c, was);
        }
        return true;
    }
    if (json_is_number(v) && !isfinite(json_number_value(v)))
        return refuse(c, "a finite number", v);
    switch (rule) {
    case RULE_ANY:
        return true;
    case RULE_STAGE:
        return json_is_string(v) && known_stage(json_string_value(v))
                   ? true : refuse(c, "a stage (WarmUp, GenPolicy or Stable)", v);
    case RULE_BYTES:
        return json_is_null(v) || (json_is_number(v) && json_number_value(v) >= 0)
                   ? true : refuse(c, "a byte count (a number, 0 or more, or null)", v);
    case RULE_TIME:
        return json_is_null(v) || (json_is_number(v) && json_number_value(v) >= 0)
                   ? true : refuse(c, "a time in seconds (a number, 0 or more, or null)", v);
    case RULE_WHOLE:
        return json_is_null(v) || (json_is_integer(v) && json_integer_value(v) >= 0)
                   ? true : refuse(c, "a whole number (0 or more, or null)", v);
    }
    return true;
}

/* The arrays among obj's members (at path name) have one length: a
 * series has one value per step (per validation pass in "validation"). */
static bool same_lengths(run_check_t *c, const char *name, json_t *obj)
{
    const char *key, *first = NULL;
    json_t *x;
    size_t n = 0;
    json_object_foreach(obj, key, x) {
        if (!json_is_array(x))
            continue;
        if (!first) {
            first = key;
            n = json_array_size(x);
        } else if (json_array_size(x) != n) {
            snprintf(c->err, c->err_size, "%s: %s.%s has %zu value(s) but %s.%s has %zu: "
                     "each series needs one value per step", c->file, name, key,
                     json_array_size(x), name, first, n);
            return false;
        }
    }
    return true;
}

/* "series": arrays of one value per step, and objects of such arrays
 * (train's "validation", one value per validation pass). */
static bool check_series(run_check_t *c, json_t *series)
{
    if (!same_lengths(c, "series", series))
        return false;
    const char *key;
    json_t *x;
    json_object_foreach(series, key, x) {
        char name[128];
        snprintf(name, sizeof name, "series.%s", key);
        if (json_is_object(x) && !same_lengths(c, name, x))
            return false;
        if (!json_is_array(x) && !json_is_object(x)) {
            c->len = 0;
            path_push(c, "%s", name);
            return refuse(c, "an array with one value per step", x);
        }
    }
    return true;
}

/* "memory_curve": the bytes in use and without swaps before and after
 * each op: two values for each of its op names. */
static bool check_curve(run_check_t *c, json_t *curve)
{
    json_t *in_use = json_object_get(curve, "in_use_bytes");
    json_t *without = json_object_get(curve, "without_swaps_bytes");
    json_t *ops = json_object_get(curve, "ops");
    size_t n = json_array_size(in_use);
    if ((in_use || without) && (!json_is_array(in_use) || !json_is_array(without) ||
                                json_array_size(without) != n)) {
        snprintf(c->err, c->err_size, "%s: memory_curve.in_use_bytes and "
                 "memory_curve.without_swaps_bytes must be arrays of one length, got %zu and "
                 "%zu value(s)", c->file, n, json_array_size(without));
        return false;
    }
    if (json_is_array(ops) && in_use && 2 * json_array_size(ops) != n) {
        snprintf(c->err, c->err_size, "%s: memory_curve.ops has %zu op(s) but "
                 "memory_curve.in_use_bytes has %zu value(s): it needs two per op (before "
                 "and after)", c->file, json_array_size(ops), n);
        return false;
    }
    return true;
}

/* Whether the report can be drawn from run as it is, and if not, err names
 * the file, the value's path and the value: series of one length, known
 * stages, byte counts, times and counts of 0 or more, finite numbers. */
static bool check_run(json_t *run, const char *file, char *err, size_t err_size)
{
    run_check_t c = {.file = file, .err = err, .err_size = err_size};
    static const char *const parts[] = {"memory_curve", "policy_applied"};
    for (size_t k = 0; k < sizeof parts / sizeof parts[0]; k++) {
        json_t *x = json_object_get(run, parts[k]);
        if (x && !json_is_object(x) && !json_is_null(x)) {
            path_push(&c, "%s", parts[k]);
            return refuse(&c, "an object or null", x);
        }
    }
    json_t *items = json_object_get(json_object_get(run, "policy_applied"), "items");
    size_t i;
    json_t *it;
    json_array_foreach(items, i, it) {
        if (!json_is_object(it)) {
            path_push(&c, "policy_applied.items[%zu]", i);
            return refuse(&c, "an object (a policy item)", it);
        }
    }
    return check_series(&c, json_object_get(run, "series")) &&
           check_curve(&c, json_object_get(run, "memory_curve")) &&
           check_value(&c, RULE_ANY, run);
}

int cmd_report(int argc, char **argv)
{
    static const tool_opt_t opts[] = {{"--out", true, NULL}};
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
    if (!check_run(run, in, err, sizeof err)) {
        fprintf(stderr, "chameleon report: %s\n", err);
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
