/* `chameleon train`: trains the GPT model of examples/gpt/ on the simulated
 * device under a memory budget (docs/train.md). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "chameleon/chameleon.h"
#include "args.h"
#include "commands.h"
#include "report.h"
#include "data.h"
#include "train.h"

#define MAX_OVERFLOW_AT 64

typedef struct train_opts {
    gpt_train_config_t c;
    const char *data;
    const char *curve_dir;       /* --memory-curve */
    const char *report;          /* --report */
    const char *policy_name;     /* --policy, as given */
    char profile_path[4096], policy_path[4096];
    json_t *series;              /* with --report: per-step values */
    bool json, quiet;
    uint64_t overflow_at[MAX_OVERFLOW_AT];
} train_opts_t;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: chameleon train [OPTIONS]\n"
            "Trains a GPT-2-style model on the CPU through Chameleon's runtime, on a\n"
            "simulated device whose memory is cut to a budget.\n"
            "model:\n"
            "  --layers N --hidden N --heads N --seq N --batch N   (4 32 2 128 8)\n"
            "training:\n"
            "  --steps N             training steps (200)\n"
            "  --lr X                AdamW learning rate (0.003)\n"
            "  --seed N              initialisation, data and stochastic depth (1)\n"
            "  --data FILE           train on FILE's bytes (default: a synthetic language)\n"
            "dynamic behaviour (all on by default):\n"
            "  --validate-every K    forward-only validation every K steps (50; 0 = off)\n"
            "  --overflow-at S,S,... inject a gradient overflow at these steps\n"
            "  --no-loss-scaling     no dynamic loss scaling\n"
            "  --drop-prob P         stochastic depth: each block skipped with P (0.02)\n"
            "memory:\n"
            "  --device PRESET       simulated device (`chameleon devices`)\n"
            "  --budget B            device memory: bytes (64MiB) or a percentage of the\n"
            "                        run's unconstrained peak (50%%, the default)\n"
            "  --policy NAME         chameleon (default), native, recompute, capuchin or\n"
            "                        vdnn (docs/baselines.md)\n"
            "  --min-swap SIZE       smallest tensor worth swapping (16KiB)\n"
            "checking and output:\n"
            "  --verify              train an unconstrained copy alongside; compare every\n"
            "                        loss and, at the end, every parameter byte\n"
            "  --json                print the summary as JSON\n"
            "  --quiet               no progress lines\n"
            "  --log                 the runtime's log (stages, policies) on stderr\n"
            "  --trace FILE          the timeline as Chrome trace-event JSON (Perfetto)\n"
            "  --memory-curve DIR    the last step's memory curve (memory_curve.svg, .csv)\n"
            "                        and its detailed profile (last-step-profile.json)\n"
            "  --report FILE.html    the run report: summary, memory curve, step time and\n"
            "                        swapped bytes per step, the policy (docs/trace.md)\n");
}

static bool parse_int(const char *v, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long n = strtol(v, &end, 10);
    if (errno || end == v || *end || n < lo || n > hi)
        return false;
    *out = n;
    return true;
}

static bool parse_real(const char *v, double lo, double hi, double *out)
{
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (errno || end == v || *end || !(x >= lo && x <= hi))
        return false;
    *out = x;
    return true;
}

static int bad(const char *opt, const char *want, const char *v)
{
    fprintf(stderr, "chameleon train: %s must be %s, got \"%s\"\n", opt, want, v);
    return 2;
}

static int parse_budget(const char *v, gpt_train_config_t *c)
{
    size_t n = strlen(v);
    if (n > 1 && v[n - 1] == '%') {
        char num[32];
        double pct;
        if (n - 1 >= sizeof num)
            return bad("--budget", "a size or a percentage such as 50%", v);
        memcpy(num, v, n - 1);
        num[n - 1] = '\0';
        if (!parse_real(num, 1e-6, 1000, &pct))
            return bad("--budget", "a percentage above 0 such as 50%", v);
        c->budget_fraction = pct / 100;
        c->budget = 0;
        return 0;
    }
    if (!tool_parse_size(v, &c->budget) || c->budget == 0)
        return bad("--budget", "a size above 0 such as 64MiB, or a percentage such as 50%", v);
    c->budget_fraction = 0;
    return 0;
}

static int parse_steps_list(const char *v, train_opts_t *o)
{
    const char *p = v;
    size_t n = 0;
    while (*p) {
        char *end;
        errno = 0;
        unsigned long long s = strtoull(p, &end, 10);
        if (errno || end == p || (*end && *end != ',') || n == MAX_OVERFLOW_AT)
            return bad("--overflow-at", "a comma-separated list of step numbers (at most 64)",
                       v);
        o->overflow_at[n++] = s;
        p = *end ? end + 1 : end;
    }
    o->c.overflow_at = o->overflow_at;
    o->c.n_overflow_at = n;
    return 0;
}

/* 0, 2 after a usage error (printed), -1 after --help. */
static int parse(int argc, char **argv, train_opts_t *o)
{
    static const char *const flags[] = {"--verify", "--json", "--quiet", "--no-loss-scaling",
                                        "--log"};
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return -1;
        }
        bool flag = false;
        for (size_t k = 0; k < sizeof flags / sizeof flags[0]; k++)
            flag = flag || strcmp(a, flags[k]) == 0;
        if (flag) {
            o->c.verify = o->c.verify || strcmp(a, "--verify") == 0;
            o->json = o->json || strcmp(a, "--json") == 0;
            o->quiet = o->quiet || strcmp(a, "--quiet") == 0;
            o->c.log = o->c.log || strcmp(a, "--log") == 0;
            if (strcmp(a, "--no-loss-scaling") == 0)
                o->c.loss_scaling = false;
            continue;
        }
        static const char *const valued[] = {
            "--layers", "--hidden", "--heads", "--seq", "--batch", "--steps", "--validate-every",
            "--lr", "--drop-prob", "--seed", "--device", "--data", "--budget", "--min-swap",
            "--overflow-at", "--policy", "--trace", "--memory-curve", "--report"};
        bool known = false;
        for (size_t k = 0; k < sizeof valued / sizeof valued[0]; k++)
            known = known || strcmp(a, valued[k]) == 0;
        if (!known) {
            fprintf(stderr, "chameleon train: %s %s\n",
                    strncmp(a, "-", 1) == 0 ? "unknown option" : "unexpected argument", a);
            return 2;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "chameleon train: option %s needs a value\n", a);
            return 2;
        }
        const char *v = argv[++i];
        long n;
        double x;
        gpt_shape_t *s = &o->c.shape;
        int *dim = strcmp(a, "--layers") == 0   ? &s->layers
                   : strcmp(a, "--hidden") == 0 ? &s->hidden
                   : strcmp(a, "--heads") == 0  ? &s->heads
                   : strcmp(a, "--seq") == 0    ? &s->seq
                   : strcmp(a, "--batch") == 0  ? &s->batch
                   : strcmp(a, "--steps") == 0  ? &o->c.steps
                   : strcmp(a, "--validate-every") == 0 ? &o->c.validate_every
                                                        : NULL;
        if (dim) {
            long lo = strcmp(a, "--validate-every") == 0 || strcmp(a, "--steps") == 0 ? 0 : 1;
            if (!parse_int(v, lo, 1000000, &n))
                return bad(a, lo ? "an integer from 1 to 1000000" : "an integer from 0 to "
                           "1000000", v);
            *dim = (int)n;
        } else if (strcmp(a, "--lr") == 0) {
            if (!parse_real(v, 0, 10, &x))
                return bad(a, "a number from 0 to 10", v);
            o->c.lr = (float)x;
        } else if (strcmp(a, "--drop-prob") == 0) {
            if (!parse_real(v, 0, 0.9, &x))
                return bad(a, "a probability from 0 to 0.9", v);
            o->c.drop_prob = x;
        } else if (strcmp(a, "--seed") == 0) {
            if (!parse_int(v, 0, 2147483647, &n))
                return bad(a, "an integer from 0 to 2147483647", v);
            o->c.seed = (uint64_t)n;
        } else if (strcmp(a, "--device") == 0) {
            o->c.preset = v;
        } else if (strcmp(a, "--data") == 0) {
            o->data = v;
        } else if (strcmp(a, "--budget") == 0) {
            if (parse_budget(v, &o->c))
                return 2;
        } else if (strcmp(a, "--min-swap") == 0) {
            if (!tool_parse_size(v, &o->c.min_swap_bytes))
                return bad(a, "a size such as 16KiB", v);
        } else if (strcmp(a, "--overflow-at") == 0) {
            if (parse_steps_list(v, o))
                return 2;
        } else if (strcmp(a, "--trace") == 0) {
            o->c.trace_path = v;
        } else if (strcmp(a, "--memory-curve") == 0) {
            o->curve_dir = v;
        } else if (strcmp(a, "--report") == 0) {
            o->report = v;
        } else if (strcmp(a, "--policy") == 0) {
            static const struct {
                const char *name;
                gpt_policy_t policy;
            } policies[] = {{"chameleon", GPT_POLICY_CHAMELEON}, {"native", GPT_POLICY_NATIVE},
                            {"recompute", GPT_POLICY_RECOMPUTE},
                            {"capuchin", GPT_POLICY_CAPUCHIN}, {"vdnn", GPT_POLICY_VDNN}};
            size_t k = 0;
            while (k < sizeof policies / sizeof policies[0] && strcmp(v, policies[k].name) != 0)
                k++;
            if (k == sizeof policies / sizeof policies[0])
                return bad(a, "chameleon, native, recompute, capuchin or vdnn", v);
            o->c.policy = policies[k].policy;
            o->policy_name = policies[k].name;
        }
    }
    if (o->c.preset && !cham_preset_find(o->c.preset)) {
        fprintf(stderr, "chameleon train: unknown device preset \"%s\" (`chameleon devices` "
                "lists them)\n", o->c.preset);
        return 2;
    }
    char err[200];
    gpt_shape_t s = o->c.shape;
    s.vocab = 2;
    if (gpt_shape_check(&s, err, sizeof err) != 0) {
        fprintf(stderr, "chameleon train: --%s\n", err);
        return 2;
    }
    return 0;
}

static double mib(uint64_t b)
{
    return (double)b / (1024.0 * 1024.0);
}

/* Appends a training step's values to the report's series. */
static void record(train_opts_t *o, const gpt_step_info_t *i)
{
    const struct {
        const char *key;
        json_t *v;
    } values[] = {
        {"step_time_s", json_real(i->sim_step_s)},
        {"stage", json_string(cham_stage_name(i->stage))},
        {"peak_bytes", json_integer((json_int_t)i->peak_bytes)},
        {"swapped_bytes", json_integer((json_int_t)i->swapped_bytes)},
        {"loss", json_real(i->loss)},
        {"overflow", json_boolean(i->skipped_update)},
    };
    for (size_t k = 0; k < sizeof values / sizeof values[0]; k++) {
        json_t *a = json_object_get(o->series, values[k].key);
        if (!a)
            json_object_set_new(o->series, values[k].key, a = json_array());
        json_array_append_new(a, values[k].v);
    }
}

static void progress(const gpt_step_info_t *i, void *user)
{
    train_opts_t *o = user;
    if (o->series && !i->validation)
        record(o, i);
    if (o->quiet || o->json)
        return;
    printf("%s %5d  loss %7.4f  %-9s  mem %7.2f / %.2f MiB  swapped %7.2f MiB  %8.3f ms%s%s%s\n",
           i->validation ? "val " : "step", i->step, i->loss, cham_stage_name(i->stage),
           mib(i->peak_bytes), mib(i->budget), mib(i->swapped_bytes), i->sim_step_s * 1e3,
           i->skipped_update ? "  overflow: update skipped" : "",
           i->layers_skipped ? "  (blocks skipped)" : "",
           o->c.verify ? (i->verified ? "  =ref" : "  DIFFERS") : "");
}

static void print_json(const gpt_train_result_t *r, bool verify)
{
    printf("{\"steps\": %d, \"final_train_loss\": %.6f, \"final_val_loss\": ", r->steps,
           r->final_train_loss);
    if (isnan(r->final_val_loss))
        printf("null, ");
    else
        printf("%.6f, ", r->final_val_loss);
    printf("\"budget_bytes\": %llu, \"unconstrained_peak_bytes\": %llu, "
           "\"peak_device_bytes\": %llu, ",
           (unsigned long long)r->budget_bytes, (unsigned long long)r->unconstrained_peak_bytes,
           (unsigned long long)r->peak_device_bytes);
    if (verify)
        printf("\"bit_exact\": %s, ", r->bit_exact ? "true" : "false");
    printf("\"hazards\": %llu, \"oom\": %llu, \"stage_changes\": %llu, "
           "\"policy_regenerations\": %llu, \"on_demand_swapins\": %llu, "
           "\"sim_step_time_s\": %.9f, ",
           (unsigned long long)r->hazards, (unsigned long long)r->oom,
           (unsigned long long)r->stage_changes, (unsigned long long)r->policy_regenerations,
           (unsigned long long)r->on_demand_swapins, r->sim_step_time_s);
    if (verify)
        printf("\"ideal_step_time_s\": %.9f, \"overhead_vs_ideal\": %.6f, ",
               r->ideal_step_time_s, r->overhead_vs_ideal);
    printf("\"host_overhead_ratio\": %.6f, \"skipped_updates\": %llu, \"validations\": %llu, "
           "\"layers_skipped\": %llu, \"swapped_bytes\": %llu, \"parameters\": %llu}\n",
           r->host_overhead_ratio, (unsigned long long)r->skipped_updates,
           (unsigned long long)r->validations, (unsigned long long)r->layers_skipped,
           (unsigned long long)r->swapped_bytes, (unsigned long long)r->param_count);
}

static void print_summary(const gpt_train_result_t *r, bool verify)
{
    printf("\nsummary\n");
    printf("  model                 %llu parameters\n", (unsigned long long)r->param_count);
    printf("  steps                 %d (%llu validations, %llu updates skipped on overflow, "
           "%llu blocks skipped)\n", r->steps, (unsigned long long)r->validations,
           (unsigned long long)r->skipped_updates, (unsigned long long)r->layers_skipped);
    printf("  loss                  %.4f -> %.4f (validation %.4f)\n", r->first_train_loss,
           r->final_train_loss, r->final_val_loss);
    printf("  memory                budget %.2f MiB = %.0f%% of the unconstrained peak %.2f "
           "MiB; peak in use %.2f MiB\n", mib(r->budget_bytes),
           r->unconstrained_peak_bytes ? 100.0 * (double)r->budget_bytes /
                                             (double)r->unconstrained_peak_bytes : 0,
           mib(r->unconstrained_peak_bytes), mib(r->peak_device_bytes));
    printf("  swapping              %.1f MiB moved, %llu on-demand swap-ins, %llu stage "
           "changes, %llu policies generated\n", mib(r->swapped_bytes),
           (unsigned long long)r->on_demand_swapins, (unsigned long long)r->stage_changes,
           (unsigned long long)r->policy_regenerations);
    printf("  step time             %.3f ms simulated", r->sim_step_time_s * 1e3);
    if (verify)
        printf(", unconstrained %.3f ms: overhead %+.1f%%", r->ideal_step_time_s * 1e3,
               100 * r->overhead_vs_ideal);
    printf("\n  host overhead         %.2f%% of the CPU time in Chameleon's calls\n",
           100 * r->host_overhead_ratio);
    printf("  hazards               %llu\n", (unsigned long long)r->hazards);
    if (verify)
        printf("  verification          %s\n", r->bit_exact
                   ? "every loss and every parameter byte equal the unconstrained run's"
                   : "DIFFERS from the unconstrained run");
}

/* The run report: the summary, the series, the last step's curve and the
 * policy the run ended with. */
static bool write_report(const train_opts_t *o, const gpt_train_result_t *r, char *err,
                         size_t err_size)
{
    json_t *j = json_object();
    json_object_set_new(j, "model", json_string("gpt (examples/gpt)"));
    json_object_set_new(j, "policy", json_string(o->policy_name));
    json_object_set_new(j, "device", json_string(o->c.preset ? o->c.preset
                                                             : cham_preset_default_name()));
    json_object_set_new(j, "parameters", json_integer((json_int_t)r->param_count));
    json_object_set_new(j, "steps", json_integer(r->steps));
    json_object_set_new(j, "final_train_loss", json_real(r->final_train_loss));
    json_object_set_new(j, "budget_bytes", json_integer((json_int_t)r->budget_bytes));
    json_object_set_new(j, "unconstrained_peak_bytes",
                        json_integer((json_int_t)r->unconstrained_peak_bytes));
    json_object_set_new(j, "peak_device_bytes", json_integer((json_int_t)r->peak_device_bytes));
    json_object_set_new(j, "hazards", json_integer((json_int_t)r->hazards));
    json_object_set_new(j, "stage_changes", json_integer((json_int_t)r->stage_changes));
    json_object_set_new(j, "policy_regenerations",
                        json_integer((json_int_t)r->policy_regenerations));
    json_object_set_new(j, "on_demand_swapins", json_integer((json_int_t)r->on_demand_swapins));
    json_object_set_new(j, "sim_step_time_s", json_real(r->sim_step_time_s));
    if (o->c.verify) {
        json_object_set_new(j, "bit_exact", json_boolean(r->bit_exact));
        json_object_set_new(j, "ideal_step_time_s", json_real(r->ideal_step_time_s));
        json_object_set_new(j, "overhead_vs_ideal", json_real(r->overhead_vs_ideal));
    }
    json_object_set_new(j, "host_overhead_ratio", json_real(r->host_overhead_ratio));
    json_object_set_new(j, "series", json_incref(o->series));
    json_object_set_new(j, "memory_curve", tool_curve_json(o->profile_path, r->budget_bytes));
    json_object_set_new(j, "policy_applied", tool_policy_json(o->policy_path));
    bool ok = tool_report_write(j, o->report, err, err_size);
    json_decref(j);
    return ok;
}

int cmd_train(int argc, char **argv)
{
    train_opts_t o = {.c = gpt_train_config_default(), .policy_name = "chameleon"};
    int rc = parse(argc, argv, &o);
    if (rc)
        return rc < 0 ? 0 : rc;
    gpt_data_t data;
    char err[600];
    if (o.data) {
        if (gpt_data_load(&data, o.data, o.c.shape.seq, err, sizeof err) != 0) {
            fprintf(stderr, "chameleon train: %s\n", err);
            return 1;
        }
    } else if (gpt_data_synthetic(&data, 200000, 64, o.c.seed) != 0) {
        fprintf(stderr, "chameleon train: out of host memory making the data\n");
        return 1;
    }
    if (o.curve_dir) {
        if (mkdir(o.curve_dir, 0777) != 0 && errno != EEXIST) {
            fprintf(stderr, "chameleon train: %s: cannot make the directory: %s\n",
                    o.curve_dir, strerror(errno));
            gpt_data_free(&data);
            return 1;
        }
        snprintf(o.profile_path, sizeof o.profile_path, "%s/last-step-profile.json",
                 o.curve_dir);
        o.c.profile_path = o.profile_path;
    }
    int tmp_fds[2] = {-1, -1};
    if (o.report) {                         /* the report's curve and policy */
        o.series = json_object();
        if (!o.curve_dir) {
            snprintf(o.profile_path, sizeof o.profile_path, "/tmp/cham-profile-XXXXXX");
            if ((tmp_fds[0] = mkstemp(o.profile_path)) >= 0) {
                close(tmp_fds[0]);
                o.c.profile_path = o.profile_path;
            }
        }
        snprintf(o.policy_path, sizeof o.policy_path, "/tmp/cham-policy-XXXXXX");
        if ((tmp_fds[1] = mkstemp(o.policy_path)) >= 0) {
            close(tmp_fds[1]);
            unlink(o.policy_path);          /* written only if there is a policy */
            o.c.policy_path = o.policy_path;
        }
    }
    gpt_train_result_t r;
    cham_status_t st = gpt_train(&o.c, &data, progress, &o, &r, err, sizeof err);
    gpt_data_free(&data);
    if (st == CHAM_OK && o.report && !write_report(&o, &r, err, sizeof err))
        st = CHAM_ERR_HOST_OOM;           /* reported below, exit 1 */
    json_decref(o.series);
    if (tmp_fds[0] >= 0)
        unlink(o.profile_path);
    if (tmp_fds[1] >= 0)
        unlink(o.policy_path);
    if (st == CHAM_OK && o.curve_dir &&
        !tool_write_curve(o.profile_path, r.budget_bytes, o.curve_dir, err, sizeof err))
        st = CHAM_ERR_HOST_OOM;           /* reported below, exit 1 */
    if (o.json)
        print_json(&r, o.c.verify);
    else if (r.steps > 0)
        print_summary(&r, o.c.verify);
    if (st != CHAM_OK) {
        fprintf(stderr, "chameleon train: %s\n", err);
        return st == CHAM_ERR_INVALID_ARG ? 2 : 1;
    }
    if (!o.json && o.c.trace_path)
        printf("  timeline              %s (open it in https://ui.perfetto.dev)\n",
               o.c.trace_path);
    if (!o.json && o.curve_dir)
        printf("  memory curve          %s/memory_curve.svg (data: memory_curve.csv)\n",
               o.curve_dir);
    if (!o.json && o.report)
        printf("  report                %s\n", o.report);
    return o.c.verify && !r.bit_exact ? 1 : 0;
}
