/* `chameleon train`: trains the GPT model of examples/gpt/ on the simulated
 * device under a memory budget (docs/train.md). */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "chameleon/chameleon.h"
#include "args.h"
#include "commands.h"
#include "common/file.h"
#include "plot.h"
#include "report.h"
#include "data.h"
#include "decode.h"
#include "train.h"

#define MAX_OVERFLOW_AT 64

typedef struct train_opts {
    gpt_train_config_t c;
    const char *data;
    const char *curve_dir;       /* --memory-curve */
    const char *report;          /* --report */
    char profile_path[4096];     /* --memory-curve's profile file */
    json_t *series;              /* with --report or --json: per-step values */
    report_parts_t parts;        /* with --report or --json: curve and policy (on_finish) */
    bool curve_failed;           /* --memory-curve: a file could not be written */
    bool curve_written;          /* --memory-curve: the curve and profile are there */
    char curve_err[600];
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
            "                        a training step must fit the device and the host's\n"
            "                        available memory (checked before it runs)\n"
            "training:\n"
            "  --steps N             training steps (200; 0: make the model, measure its\n"
            "                        unconstrained peak, train nothing)\n"
            "  --lr X                AdamW learning rate (0.003)\n"
            "  --seed N              initialisation, data and stochastic depth (1)\n"
            "  --data FILE           train on FILE's bytes, at most 1 GiB (default: a synthetic\n"
            "                        language of 200,000 tokens, which allows --seq up to 19999)\n"
            "dynamic behaviour (all on by default):\n"
            "  --validate-every K    forward-only validation every K steps (50; 0 = off)\n"
            "  --overflow-at S,S,... inject a gradient overflow at these steps\n"
            "  --no-loss-scaling     no dynamic loss scaling\n"
            "  --layer-drop P        stochastic depth: each block skipped with P (0.02)\n"
            "decoding, after training (docs/train.md, \"Decoding\"):\n"
            "  --generate N          greedy decoding of N tokens per sequence (0 = none)\n"
            "  --prompt N            from the first N tokens of a validation batch (16)\n"
            "  --kv-offload on|off   the KV caches in pinned host memory, each block's\n"
            "                        prefetched, its new row stored back (off); with\n"
            "                        --verify the reference decodes with them on the\n"
            "                        device and the tokens must match\n"
            "memory:\n"
            "  --device PRESET       simulated device (`chameleon devices`)\n"
            "  --capacity B          device memory: bytes (64MiB) or a percentage of the\n"
            "                        run's unconstrained peak (50%%, the default)\n"
            "  --strategy NAME       chameleon (default), chameleon-swap, native,\n"
            "                        recompute, capuchin, vdnn (docs/baselines.md),\n"
            "                        protrain (its block plan; docs/protrain.md),\n"
            "                        swapadvisor (docs/swapadvisor.md) or hyperoffload\n"
            "                        (docs/hyperoffload.md)\n"
            "  --min-swap SIZE       smallest tensor worth swapping (16KiB)\n"
            "  --optimizer WHERE     device (default) or host: AdamW's moments and master\n"
            "                        weights in pinned host memory, the update on the\n"
            "                        host (the preset needs host figures: `devices`)\n"
            "  --allocator KIND      auto (the default: classic on the trainer's MiB-sized\n"
            "                        devices), classic or expandable (docs/allocator.md)\n"
            "checking and output:\n"
            "  --verify              train an unconstrained copy alongside; compare every\n"
            "                        loss and, at the end, every parameter byte\n"
            "  --json                print the run as JSON: the summary, per-step series,\n"
            "                        memory curve, policy (`chameleon report` reads it)\n"
            "  --quiet               no progress lines\n"
            "  --log                 the runtime's log (stages, policies) on stderr\n"
            "  --trace FILE          the timeline as Chrome trace-event JSON (Perfetto)\n"
            "  --memory-curve DIR    the last step's memory curve (memory_curve.svg, .csv)\n"
            "                        and its detailed profile (last-step-profile.json)\n"
            "  --report FILE.html    the run report: summary, memory curve, step time and\n"
            "                        swapped bytes per step, the policy (docs/trace.md)\n");
}

#define CMD "train"
/* The built-in data: its size, and its vocabulary (data.h). */
#define SYNTHETIC_TOKENS 200000
#define SYNTHETIC_VOCAB 64
#define MAX_DIM 1000000


/* The model flags that differ from the defaults, for messages:
 * "--layers 100000 --seq 4096" (all five when none does). */
static void shape_flags(char *buf, size_t size, const gpt_shape_t *s)
{
    const gpt_shape_t d = gpt_train_config_default().shape;
    const struct {
        const char *flag;
        int v, def;
    } f[] = {{"--layers", s->layers, d.layers}, {"--hidden", s->hidden, d.hidden},
             {"--heads", s->heads, d.heads}, {"--seq", s->seq, d.seq},
             {"--batch", s->batch, d.batch}};
    bool any = false;
    for (size_t k = 0; k < sizeof f / sizeof f[0]; k++)
        any = any || f[k].v != f[k].def;
    size_t n = 0;
    buf[0] = '\0';
    for (size_t k = 0; k < sizeof f / sizeof f[0] && n < size; k++)
        if (!any || f[k].v != f[k].def)
            n += (size_t)snprintf(buf + n, size - n, "%s%s %d", n ? " " : "", f[k].flag, f[k].v);
}

/* The model must fit the device its unconstrained runs (the measurement,
 * the --verify reference) get: the preset's whole memory. Checked before
 * anything runs, so that a shape that cannot work fails at once. */
static int check_shape(const train_opts_t *o)
{
    const gpt_shape_t *s = &o->c.shape;
    char flags[160], need[32], have[32];
    shape_flags(flags, sizeof flags, s);
    if ((long long)s->batch * s->seq > INT_MAX) {
        fprintf(stderr, "chameleon train: --batch %d x --seq %d = %lld tokens a step, more than "
                "the trainer's limit of %d\n", s->batch, s->seq, (long long)s->batch * s->seq,
                INT_MAX);
        return 2;
    }
    gpt_shape_t sv = *s;
    sv.vocab = o->data ? 256 : SYNTHETIC_VOCAB;
    const char *dev = o->c.preset ? o->c.preset : cham_preset_default_name();
    const cham_preset_t *p = cham_preset_find(dev);
    double bytes = gpt_model_bytes(&sv);
    if (p && bytes > (double)p->capacity) {
        fprintf(stderr, "chameleon train: %s: a training step needs at least %s (parameters, "
                "gradients, AdamW moments and the activations kept for the backward), more "
                "than the %s of the %s that the unconstrained run gets\n", flags,
                tool_bytes(need, sizeof need, bytes), tool_bytes(have, sizeof have,
                (double)p->capacity), p->name);
        return 2;
    }
    char err[200];
    sv.vocab = 2;
    if (gpt_shape_check(&sv, err, sizeof err) != 0) {
        fprintf(stderr, "chameleon train: --%s\n", err);
        return 2;
    }
    gpt_decode_config_t dc = {.prompt = o->c.prompt, .generate = o->c.generate};
    if (o->c.generate > 0 && !gpt_decode_check(&sv, &dc, err, sizeof err)) {
        fprintf(stderr, "chameleon train: %s\n", err);
        return 2;
    }
    return 0;
}

/* 0, 2 after a usage error (printed), -1 after --help. */
/* ---- the options, one handler each ---------------------------------------------*/

static int set_flag(void *state, const char *a, const char *v)
{
    train_opts_t *o = state;
    (void)v;
    o->c.verify = o->c.verify || strcmp(a, "--verify") == 0;
    o->json = o->json || strcmp(a, "--json") == 0;
    o->quiet = o->quiet || strcmp(a, "--quiet") == 0;
    o->c.log = o->c.log || strcmp(a, "--log") == 0;
    if (strcmp(a, "--no-loss-scaling") == 0)
        o->c.loss_scaling = false;
    return 0;
}

/* The whole-number settings: the model's shape, --steps, --validate-every,
 * --generate, --prompt. */
static int set_dim(void *state, const char *a, const char *v)
{
    train_opts_t *o = state;
    gpt_shape_t *s = &o->c.shape;
    int *dim = strcmp(a, "--layers") == 0   ? &s->layers
               : strcmp(a, "--hidden") == 0 ? &s->hidden
               : strcmp(a, "--heads") == 0  ? &s->heads
               : strcmp(a, "--seq") == 0    ? &s->seq
               : strcmp(a, "--batch") == 0  ? &s->batch
               : strcmp(a, "--steps") == 0  ? &o->c.steps
               : strcmp(a, "--validate-every") == 0 ? &o->c.validate_every
               : strcmp(a, "--generate") == 0       ? &o->c.generate
                                                    : &o->c.prompt;
    uint64_t lo = strcmp(a, "--validate-every") == 0 || strcmp(a, "--steps") == 0 ||
                          strcmp(a, "--generate") == 0
                      ? 0 : 1;
    uint64_t n;
    if (!tool_parse_uint(v, lo, MAX_DIM, &n))
        return tool_bad_value(CMD, a, lo ? "an integer from 1 to 1000000"
                                         : "an integer from 0 to 1000000", v);
    *dim = (int)n;
    return 0;
}

static int set_kv_offload(void *state, const char *a, const char *v)
{
    if (strcmp(v, "on") && strcmp(v, "off"))
        return tool_bad_value(CMD, a, "on or off", v);
    ((train_opts_t *)state)->c.kv_offload = strcmp(v, "on") == 0;
    return 0;
}

static int set_lr(void *state, const char *a, const char *v)
{
    double x;
    if (!tool_parse_real(v, 0, 10, &x))
        return tool_bad_value(CMD, a, "a number from 0 to 10", v);
    ((train_opts_t *)state)->c.lr = (float)x;
    return 0;
}

static int set_layer_drop(void *state, const char *a, const char *v)
{
    double x;
    if (!tool_parse_real(v, 0, 0.9, &x))
        return tool_bad_value(CMD, a, "a probability from 0 to 0.9", v);
    ((train_opts_t *)state)->c.drop_prob = x;
    return 0;
}

static int set_seed(void *state, const char *a, const char *v)
{
    uint64_t n;
    if (!tool_parse_uint(v, 0, 2147483647, &n))
        return tool_bad_value(CMD, a, "an integer from 0 to 2147483647", v);
    ((train_opts_t *)state)->c.seed = n;
    return 0;
}

static int set_device(void *state, const char *a, const char *v)
{
    if (!tool_check_preset(CMD, a, v))
        return 2;
    ((train_opts_t *)state)->c.preset = v;
    return 0;
}

static int set_capacity(void *state, const char *a, const char *v)
{
    train_opts_t *o = state;
    (void)a;
    return tool_parse_capacity(CMD, v, &o->c.budget, &o->c.budget_fraction);
}

static int set_allocator(void *state, const char *a, const char *v)
{
    if (cham_allocator_mode_parse(v, &((train_opts_t *)state)->c.allocator) != CHAM_OK)
        return tool_bad_value(CMD, a, "auto, classic or expandable", v);
    return 0;
}

static int set_min_swap(void *state, const char *a, const char *v)
{
    if (!tool_parse_size(v, &((train_opts_t *)state)->c.min_swap_bytes))
        return tool_bad_value(CMD, a, "a size such as 16KiB", v);
    return 0;
}

static int set_overflow_at(void *state, const char *a, const char *v)
{
    train_opts_t *o = state;
    size_t k;
    if (!tool_parse_list(v, 0, MAX_DIM - 1, o->overflow_at, MAX_OVERFLOW_AT, &k))
        return tool_bad_value(CMD, a, "a comma-separated list of step numbers from 0 "
                              "to 999999 (at most 64), such as 60,140", v);
    o->c.overflow_at = o->overflow_at;
    o->c.n_overflow_at = k;
    return 0;
}

/* --data, --trace, --memory-curve, --report: a path, checked before the
 * run (check_paths, load_data). */
static int set_path(void *state, const char *a, const char *v)
{
    train_opts_t *o = state;
    const char **path = strcmp(a, "--data") == 0    ? &o->data
                        : strcmp(a, "--trace") == 0 ? &o->c.trace_path
                        : strcmp(a, "--memory-curve") == 0 ? &o->curve_dir : &o->report;
    *path = v;
    return 0;
}

static int set_optimizer(void *state, const char *a, const char *v)
{
    if (strcmp(v, "host") != 0 && strcmp(v, "device") != 0)
        return tool_bad_value(CMD, a, "device or host", v);
    ((train_opts_t *)state)->c.host_optimizer = strcmp(v, "host") == 0;
    return 0;
}

/* ideal is simulate's (unlimited memory); the trainer runs on the device it
 * is given. */
static int set_strategy(void *state, const char *a, const char *v)
{
    /* zero-offload moves every chunk of parameters to the host; the
     * trainer's parameters are one storage (simulate runs it). */
    unsigned refused = 1u << CHAM_STRATEGY_IDEAL | 1u << CHAM_STRATEGY_ZERO_OFFLOAD;
    return tool_parse_strategy(CMD, a, v, refused, &((train_opts_t *)state)->c.strategy) ? 2 : 0;
}

static const tool_opt_t opts[] = {
    {"--verify", false, set_flag}, {"--json", false, set_flag}, {"--quiet", false, set_flag},
    {"--no-loss-scaling", false, set_flag}, {"--log", false, set_flag},
    {"--layers", true, set_dim}, {"--hidden", true, set_dim}, {"--heads", true, set_dim},
    {"--seq", true, set_dim}, {"--batch", true, set_dim}, {"--steps", true, set_dim},
    {"--validate-every", true, set_dim}, {"--lr", true, set_lr},
    {"--layer-drop", true, set_layer_drop}, {"--seed", true, set_seed},
    {"--device", true, set_device}, {"--data", true, set_path},
    {"--capacity", true, set_capacity}, {"--min-swap", true, set_min_swap},
    {"--overflow-at", true, set_overflow_at}, {"--strategy", true, set_strategy},
    {"--optimizer", true, set_optimizer}, {"--allocator", true, set_allocator},
    {"--trace", true, set_path}, {"--memory-curve", true, set_path},
    {"--report", true, set_path}, {"--generate", true, set_dim}, {"--prompt", true, set_dim},
    {"--kv-offload", true, set_kv_offload},
};

static int parse(int argc, char **argv, train_opts_t *o)
{
    if (tool_wants_help(argc, argv)) {
        usage(stdout);
        return -1;
    }
    int rc = tool_apply_opts(CMD, opts, sizeof opts / sizeof opts[0], argc, argv, o);
    return rc ? rc : check_shape(o);
}

/* Before anything runs: every output can be written, none is the data or
 * another output (tool_check_outputs). */
static int check_paths(const train_opts_t *o, bool *made)
{
    const tool_output_t files[] = {{"--trace", o->c.trace_path}, {"--report", o->report}};
    return tool_check_outputs(CMD, o->curve_dir, files, 2, "--data", o->data, made);
}

/* The data: a file's bytes or the built-in language, long enough for
 * --seq. 0, or the exit status after a message. */
static int load_data(const train_opts_t *o, gpt_data_t *data)
{
    char err[600];
    int seq = o->c.shape.seq;
    if (!o->data) {
        gpt_data_t probe = {.n = SYNTHETIC_TOKENS,   /* split as gpt_data_synthetic does */
                            .n_train = SYNTHETIC_TOKENS - SYNTHETIC_TOKENS / 10};
        if (seq > gpt_data_max_seq(&probe)) {
            fprintf(stderr, "chameleon train: --seq %d is too long for the built-in data: its "
                    "validation tenth holds %d tokens and a sequence needs seq + 1, so --seq "
                    "can be at most %ld; for longer ones train on a file (--data FILE of at "
                    "least %zu bytes)\n", seq, SYNTHETIC_TOKENS / 10, gpt_data_max_seq(&probe),
                    gpt_data_min_tokens(seq));
            return 2;
        }
        if (gpt_data_synthetic(data, SYNTHETIC_TOKENS, SYNTHETIC_VOCAB, o->c.seed) != 0) {
            fprintf(stderr, "chameleon train: out of host memory making the data\n");
            return 1;
        }
        return 0;
    }
    char *bytes;
    size_t n;
    if (cham_file_read(o->data, TOOL_MAX_DATA_BYTES, "training data", &bytes, &n, err,
                       sizeof err) != CHAM_OK) {
        fprintf(stderr, "chameleon train: --data %s\n", err);
        return 1;
    }
    int rc = gpt_data_from_bytes(data, (const unsigned char *)bytes, n);
    free(bytes);
    if (rc != 0) {
        fprintf(stderr, "chameleon train: --data %s: out of host memory\n", o->data);
        return 1;
    }
    if (seq > gpt_data_max_seq(data)) {
        fprintf(stderr, "chameleon train: --data %s: %zu bytes is too short for --seq %d: each "
                "split must hold seq + 1 = %d tokens and the validation tenth has %zu; it "
                "needs at least %zu bytes\n", o->data, n, seq, seq + 1, data->n - data->n_train,
                gpt_data_min_tokens(seq));
        gpt_data_free(data);
        return 1;
    }
    return 0;
}

/* The run must fit the host's memory: a training step at most (twice with
 * --verify, for the reference). 0, or 2 after a message. */
static int check_host_memory(const train_opts_t *o, const gpt_data_t *data)
{
    gpt_shape_t s = o->c.shape;
    s.vocab = data->vocab;
    double need = gpt_model_bytes(&s) * (o->c.verify ? 2 : 1);
    uint64_t avail = tool_host_available();
    if (avail == 0 || need <= (double)avail)
        return 0;
    char flags[160], a[32], b[32];
    shape_flags(flags, sizeof flags, &o->c.shape);
    fprintf(stderr, "chameleon train: %s: the run needs at least %s of host memory (a training "
            "step's parameters, gradients, AdamW moments and kept activations%s), more than "
            "the %s available (MemAvailable)\n", flags, tool_bytes(a, sizeof a, need),
            o->c.verify ? ", twice with --verify" : "", tool_bytes(b, sizeof b, (double)avail));
    return 2;
}

static double mib(uint64_t b)
{
    return (double)b / (1024.0 * 1024.0);
}

/* Appends values to the arrays of obj named by key (made on first use). */
static void append(json_t *obj, const char *key, json_t *v)
{
    json_t *a = json_object_get(obj, key);
    if (!a)
        json_object_set_new(obj, key, a = json_array());
    json_array_append_new(a, v);
}

/* Appends a validation pass's values to the series' "validation" object:
 * the training step it follows, its loss, stage after it, time, bytes. */
static void record_validation(train_opts_t *o, const gpt_step_info_t *i)
{
    json_t *v = json_object_get(o->series, "validation");
    if (!v)
        json_object_set_new(o->series, "validation", v = json_object());
    append(v, "after_step", json_integer(i->step));
    append(v, "loss", plot_json_number(i->loss));
    append(v, "stage", json_string(cham_stage_name(i->stage)));
    append(v, "step_time_s", plot_json_number(i->sim_step_s));
    append(v, "peak_bytes", json_integer((json_int_t)i->peak_bytes));
    append(v, "swapped_bytes", json_integer((json_int_t)i->swapped_bytes));
}

/* Appends a training step's values to the run's series. */
static void record(train_opts_t *o, const gpt_step_info_t *i)
{
    if (i->validation) {
        record_validation(o, i);
        return;
    }
    const struct {
        const char *key;
        json_t *v;
    } values[] = {
        {"step_time_s", plot_json_number(i->sim_step_s)},
        {"stage", json_string(cham_stage_name(i->stage))},
        {"peak_bytes", json_integer((json_int_t)i->peak_bytes)},
        {"swapped_bytes", json_integer((json_int_t)i->swapped_bytes)},
        {"passive_swapouts", json_integer((json_int_t)i->passive)},
        {"on_demand_swapins", json_integer((json_int_t)i->on_demand)},
        {"loss", plot_json_number(i->loss)},
        {"overflow", json_boolean(i->skipped_update)},
    };
    for (size_t k = 0; k < sizeof values / sizeof values[0]; k++)
        append(o->series, values[k].key, values[k].v);
}

static void progress(const gpt_step_info_t *i, void *user)
{
    train_opts_t *o = user;
    if (o->series)
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

/* The end of the run: its last profile and policy, read in memory for
 * the report and the memory curve (the budget is the run's capacity). */
static void on_finish(const cham_profile_t *profile, const cham_policy_t *policy, void *user)
{
    train_opts_t *o = user;
    if (o->series)
        report_parts_take(&o->parts, profile, policy);
    if (!o->curve_dir || !profile)
        return;
    if (!report_write_curve(profile, "budget", o->curve_dir, o->curve_err, sizeof o->curve_err) ||
        cham_profile_save_json(profile, o->profile_path, o->curve_err, sizeof o->curve_err) !=
            CHAM_OK)
        o->curve_failed = true;
    else
        o->curve_written = true;
}

/* A comparison's verdict: null when the run stopped (error), for it
 * compared only what it reached. */
static json_t *verdict(bool equal, const char *error)
{
    return error ? json_null() : json_boolean(equal);
}

/* The run as one JSON object (--json, and the report's input): what was
 * run, the summary, the per-step series, the last step's memory curve
 * and the policy applied at the end. NaN and infinities (no step, no
 * validation, a diverged loss) are null. */
static json_t *run_json(train_opts_t *o, const gpt_train_result_t *r, const char *error)
{
    bool verify = o->c.verify;
    json_t *j = json_object();
    json_object_set_new(j, "model", json_string("gpt (examples/gpt)"));
    json_object_set_new(j, "strategy", json_string(cham_strategy_name(o->c.strategy)));
    json_object_set_new(j, "optimizer", json_string(o->c.host_optimizer ? "host" : "device"));
    json_object_set_new(j, "device", json_string(o->c.preset ? o->c.preset
                                                             : cham_preset_default_name()));
    const struct {
        const char *key;
        json_t *v;
        bool verify_only;
    } values[] = {
        {"steps", json_integer(r->steps), false},
        {"final_train_loss", plot_json_number(r->final_train_loss), false},
        {"final_val_loss", plot_json_number(r->final_val_loss), false},
        {"budget_bytes", json_integer((json_int_t)r->budget_bytes), false},
        {"unconstrained_peak_bytes", json_integer((json_int_t)r->unconstrained_peak_bytes), false},
        {"peak_device_bytes", json_integer((json_int_t)r->peak_device_bytes), false},
        {"bit_exact", verdict(r->bit_exact, error), true},
        {"hazards", json_integer((json_int_t)r->hazards), false},
        {"oom", json_integer((json_int_t)r->oom), false},
        {"stage_changes", json_integer((json_int_t)r->stage_changes), false},
        {"policy_regenerations", json_integer((json_int_t)r->policy_regenerations), false},
        {"on_demand_swapins", json_integer((json_int_t)r->on_demand_swapins), false},
        {"passive_swapouts", json_integer((json_int_t)r->passive_swapouts), false},
        {"stable_steps", json_integer((json_int_t)r->stable_steps), false},
        {"stable_passive_swapouts", json_integer((json_int_t)r->stable_passive), false},
        {"stable_on_demand_swapins", json_integer((json_int_t)r->stable_on_demand), false},
        {"recomputes", json_integer((json_int_t)r->recomputes), false},
        {"decoded_tokens", json_integer(r->decoded), false},
        /* No tokens decoded: nothing to compare, not "differs". */
        {"decode_bit_exact", r->decoded ? verdict(r->decode_bit_exact, error) : json_null(),
         true},
        {"sim_step_time_s", plot_json_number(r->steps ? r->sim_step_time_s : NAN), false},
        {"ideal_step_time_s", plot_json_number(r->steps ? r->ideal_step_time_s : NAN), true},
        {"overhead_vs_ideal", plot_json_number(r->overhead_vs_ideal), true},
        {"host_overhead_ratio", plot_json_number(r->host_overhead_ratio), false},
        {"skipped_updates", json_integer((json_int_t)r->skipped_updates), false},
        {"validations", json_integer((json_int_t)r->validations), false},
        {"layers_skipped", json_integer((json_int_t)r->layers_skipped), false},
        {"swapped_bytes", json_integer((json_int_t)r->swapped_bytes), false},
        {"parameters", json_integer((json_int_t)r->param_count), false},
        {"protrain_n_swap", r->has_protrain ? json_integer(r->protrain.n_swap) : json_null(),
         false},
        {"protrain_n_checkpoint",
         r->has_protrain ? json_integer(r->protrain.n_checkpoint) : json_null(), false},
        {"predicted_step_time_s",
         r->has_protrain ? plot_json_number(r->predicted_step_s) : json_null(), false},
        {"predicted_peak_bytes",
         r->has_protrain ? json_integer((json_int_t)r->predicted_peak_bytes) : json_null(),
         false},
    };
    /* Without --verify nothing was compared: its keys are null, there. */
    for (size_t k = 0; k < sizeof values / sizeof values[0]; k++) {
        if (values[k].verify_only && !verify) {
            json_decref(values[k].v);
            json_object_set_new(j, values[k].key, json_null());
        } else {
            json_object_set_new(j, values[k].key, values[k].v);
        }
    }
    json_object_set_new(j, "error", error ? json_string(error) : json_null());
    json_object_set_new(j, "series", json_incref(o->series));
    report_parts_give(&o->parts, j, "budget_bytes", r->budget_bytes);
    return j;
}

/* false when out of host memory (stdout's errors are main's). */
static bool print_json(json_t *run)
{
    char *text = run ? json_dumps(run, 0) : NULL;
    if (text)
        tool_print_text(text);
    free(text);
    return text != NULL;
}

/* The summary; error: the run's failure, said first, before anything that
 * would read as its result. */
static void print_summary(const gpt_train_result_t *r, const gpt_train_config_t *c,
                          const char *error)
{
    bool verify = c->verify;
    printf("\nsummary\n");
    if (error)
        printf("  FAILED                after %d of %d steps: %s\n", r->steps, c->steps, error);
    else if (verify && (!r->bit_exact || (r->decoded && !r->decode_bit_exact)))
        printf("  FAILED                --verify: the run differs from the unconstrained "
               "run (below)\n");
    printf("  model                 %llu parameters\n", (unsigned long long)r->param_count);
    if (r->steps == 0)
        printf("  steps                 0 (--steps 0: the model was made and one unconstrained "
               "step measured its peak; nothing was trained)\n");
    else
        printf("  steps                 %d (%llu validations, %llu updates skipped on overflow, "
               "%llu blocks skipped)\n", r->steps, (unsigned long long)r->validations,
               (unsigned long long)r->skipped_updates, (unsigned long long)r->layers_skipped);
    if (r->steps > 0) {
        printf("  loss                  %.4f -> %.4f", r->first_train_loss, r->final_train_loss);
        if (r->validations > 0)
            printf(" (validation %.4f)", r->final_val_loss);
        if (!isfinite(r->final_train_loss) || (r->validations > 0 && !isfinite(r->final_val_loss)))
            printf(": diverged");
        printf("\n");
    }
    printf("  memory                budget %.2f MiB = %.0f%% of the unconstrained peak %.2f "
           "MiB; peak in use %.2f MiB\n", mib(r->budget_bytes),
           r->unconstrained_peak_bytes ? 100.0 * (double)r->budget_bytes /
                                             (double)r->unconstrained_peak_bytes : 0,
           mib(r->unconstrained_peak_bytes), mib(r->peak_device_bytes));
    if (r->steps == 0) {
        printf("  hazards               %llu\n", (unsigned long long)r->hazards);
        return;
    }
    printf("  swapping              %.1f MiB moved, %llu on-demand swap-ins, %llu passive "
           "swap-outs, %llu stage changes, %llu policies generated\n", mib(r->swapped_bytes),
           (unsigned long long)r->on_demand_swapins, (unsigned long long)r->passive_swapouts,
           (unsigned long long)r->stage_changes, (unsigned long long)r->policy_regenerations);
    if (r->stable_steps)
        printf("  once Stable           %llu steps: %llu passive swap-outs, %llu on-demand "
               "swap-ins\n", (unsigned long long)r->stable_steps,
               (unsigned long long)r->stable_passive, (unsigned long long)r->stable_on_demand);
    if (r->recomputes)
        printf("  recomputation         %llu tensors dropped, %llu ops run again\n",
               (unsigned long long)r->drops, (unsigned long long)r->recomputes);
    if (r->has_protrain)
        printf("  protrain              %u blocks swapped, %u checkpointed (swap interval %u); "
               "estimated %.3f ms a step, peak %.2f MiB\n", r->protrain.n_swap,
               r->protrain.n_checkpoint, r->protrain.swap_interval,
               r->predicted_step_s * 1e3, (double)r->predicted_peak_bytes / 1048576.0);
    printf("  step time             %.3f ms simulated", r->sim_step_time_s * 1e3);
    if (verify && isfinite(r->overhead_vs_ideal))
        printf(", unconstrained %.3f ms: overhead %+.1f%%", r->ideal_step_time_s * 1e3,
               100 * r->overhead_vs_ideal);
    /* Why the overhead is what it is, when the ideal step is launch-bound:
     * the host's dispatch, not the device's compute, sets its time. */
    if (verify && r->ideal_kernels_per_step > 0 &&
        r->ideal_dispatch_s_per_step > r->ideal_busy_s_per_step)
        printf("\n  why                   launch-bound: %.0f kernel launches at %.1f us dominate "
               "the %.3f ms ideal step (its kernels compute %.3f ms), so the time swapping "
               "adds is not hidden", r->ideal_kernels_per_step,
               r->ideal_dispatch_s_per_step * 1e6 / r->ideal_kernels_per_step,
               r->ideal_step_time_s * 1e3, r->ideal_busy_s_per_step * 1e3);
    if (isnan(r->host_overhead_ratio))
        printf("\n  host overhead         below this measurement (the sim's byte copies and the "
               "trace took more CPU inside Chameleon's calls than all the rest)\n");
    else
        printf("\n  host overhead         %.2f%% of the CPU time in Chameleon's calls\n",
               100 * r->host_overhead_ratio);
    printf("  hazards               %llu\n", (unsigned long long)r->hazards);
    if (r->decoded) {
        printf("  decoded               %d tokens a sequence, the first's:", r->decoded);
        for (int i = 0; i < r->decoded && i < 8; i++)
            printf(" %d", (int)r->first_tokens[i]);
        printf("%s\n", r->decoded > 8 ? " ..." : "");
        if (verify && !error)
            printf("  decoded tokens        %s\n", r->decode_bit_exact
                       ? "equal the unconstrained run's (its KV caches on the device)"
                       : "DIFFER from the unconstrained run's");
    }
    if (verify && error)
        printf("  verification          none: the run stopped before the end, so the final "
               "parameters were never compared\n");
    else if (verify)
        printf("  verification          %s\n", r->bit_exact
                   ? "every loss and every parameter byte equal the unconstrained run's"
                   : "DIFFERS from the unconstrained run");
}

int cmd_train(int argc, char **argv)
{
    train_opts_t o = {.c = gpt_train_config_default()};
    int rc = parse(argc, argv, &o);
    if (rc || tool_parse_only)
        return rc < 0 ? 0 : rc;
    if (o.c.steps == 0 && o.curve_dir) {
        fprintf(stderr, "chameleon train: --memory-curve draws the last training step: it needs "
                "--steps 1 or more, got --steps 0\n");
        return 2;
    }
    bool made = false;
    if ((rc = check_paths(&o, &made)) != 0)
        return rc;
    gpt_data_t data;
    if ((rc = load_data(&o, &data)) == 0 && (rc = check_host_memory(&o, &data)) != 0)
        gpt_data_free(&data);
    if (rc != 0) {
        if (made)
            rmdir(o.curve_dir);
        return rc;
    }
    char err[600];
    if (o.curve_dir) {
        if (mkdir(o.curve_dir, 0777) != 0 && errno != EEXIST) {
            fprintf(stderr, "chameleon train: --memory-curve %s: cannot make the directory: %s\n",
                    o.curve_dir, strerror(errno));
            gpt_data_free(&data);
            return 1;
        }
        /* Saved by on_finish, through the writer of every output. */
        snprintf(o.profile_path, sizeof o.profile_path, "%s/" TOOL_CURVE_PROFILE, o.curve_dir);
    }
    if (o.report || o.json)                 /* the series, curve and policy, in memory */
        o.series = json_object();
    if (o.report || o.json || o.curve_dir) {
        o.c.on_finish = on_finish;
        o.c.on_finish_user = &o;
    }
    gpt_train_result_t r;
    cham_status_t st = gpt_train(&o.c, &data, progress, &o, &r, err, sizeof err);
    gpt_data_free(&data);
    /* The command line was checked before the run: whatever fails now is
     * the run's or its files' failure, exit 1 (docs/cli.md, "Exit status").
     * A run that stopped says so in every output: the JSON's "error", the
     * report's banner, the summary's first line. */
    const char *failed = st == CHAM_OK ? NULL : err;
    json_t *run = o.series ? run_json(&o, &r, failed) : NULL;
    bool report_ok = false;
    char why[600];
    if (o.report && run) {
        report_ok = report_write_html(run, o.report, why, sizeof why);
        if (!report_ok)
            fprintf(stderr, "chameleon train: --report %s\n", why);
    } else if (o.report) {
        fprintf(stderr, "chameleon train: --report %s: out of host memory\n", o.report);
    }
    bool files_ok = report_ok || !o.report;
    json_decref(o.series);
    report_parts_clear(&o.parts);
    if (o.curve_failed) {
        fprintf(stderr, "chameleon train: --memory-curve %s\n", o.curve_err);
        files_ok = false;
    } else if (o.curve_dir && !o.curve_written && !failed) {
        fprintf(stderr, "chameleon train: --memory-curve %s: no detailed profile of the last "
                "step was made\n", o.curve_dir);
        files_ok = false;
    }
    if (o.json && !print_json(run)) {
        fprintf(stderr, "chameleon train: out of host memory writing the JSON\n");
        files_ok = false;
    } else if (!o.json && (!failed || r.steps > 0)) {
        print_summary(&r, &o.c, failed);
        /* Only the files that were written; a trace only after a run that
         * closed it (examples/gpt/train.c reports a trace it could not
         * write as the run's failure). */
        if (o.c.trace_path && !failed)
            printf("  timeline              %s (open it in https://ui.perfetto.dev)\n",
                   o.c.trace_path);
        if (o.curve_written)
            printf("  memory curve          %s/memory_curve.svg (data: memory_curve.csv)\n",
                   o.curve_dir);
        if (report_ok)
            printf("  report                %s\n", o.report);
    }
    json_decref(run);
    if (failed) {
        fprintf(stderr, "chameleon train: %s\n", err);
        return 1;
    }
    if (!files_ok)
        return 1;
    return o.c.verify && (!r.bit_exact || (r.decoded && !r.decode_bit_exact)) ? 1 : 0;
}
