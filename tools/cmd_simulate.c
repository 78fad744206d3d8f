/* `chameleon simulate`: an LLM training job at paper scale, replayed in
 * virtual time without data, under a memory strategy (docs/workloads.md,
 * docs/baselines.md). */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "chameleon/chameleon.h"
#include "args.h"
#include "commands.h"
#include "plot.h"
#include "report.h"

typedef struct sim_opts {
    cham_run_config_t run;
    const char *model;
    const char *curve_dir;       /* --memory-curve */
    const char *report;          /* --report */
    char profile_path[4096];     /* --memory-curve's profile file */
    bool json, quiet;
    json_t *series;              /* --json or --report: per-step arrays */
    report_parts_t parts;        /* --json or --report: the curve and policy (on_finish) */
    bool curve_failed;           /* --memory-curve: a file could not be written */
    bool curve_written;          /* --memory-curve: the curve and profile are there */
    char curve_err[600];
    double capacity_fraction;    /* --capacity P%: P / 100 of the ideal run's peak */
    bool set_heads, set_kv;      /* --heads, --kv-heads given */
} sim_opts_t;

static void usage(FILE *f)
{
    fprintf(f,
        "usage: chameleon simulate [OPTIONS]\n"
        "Simulates LLM training on one device of a (possibly parallel) job, in\n"
        "virtual time without data, under a device memory strategy.\n"
        "model (a preset fills them; any can be overridden):\n"
        "  --model NAME        gpt2-1.5b, llama2-7b, llama2-13b, llama3-8b, mixtral-8x7b,\n"
        "                      or gpt2, llama2, llama3, mixtral (llama2-7b)\n"
        "  --layers N --hidden N --ffn N --heads N --kv-heads N --vocab N\n"
        "  --experts N --topk N                 Mixtral's experts and experts per token\n"
        "training set-up:\n"
        "  --seq N             tokens per sequence (preset: 4096; gpt2 1024)\n"
        "  --mbs N             micro-batch size (1)\n"
        "  --gbs N             global batch size (0 = mbs x dp: no accumulation)\n"
        "  --dtype fp16|bf16   compute type (bf16; gpt2 fp16)\n"
        "  --precision KIND    master: weights and gradients in the compute type,\n"
        "                      fp32 master weights (the default); main-grads: fp32\n"
        "                      gradients too (Megatron-LM); autocast: torch.autocast's\n"
        "                      fp32 weights cast where used, DDP's buckets\n"
        "  --flash on|off      fused attention (on)\n"
        "  --recompute on|off  full activation recomputation (off)\n"
        "  --optimizer WHERE   device; host: ZeRO-Offload's AdamW on the host, master\n"
        "                      weights and moments in pinned memory, each group\n"
        "                      updated as the backward completes it; host:N the\n"
        "                      first N groups (embedding, layers, head) updated on\n"
        "                      the device; auto: N chosen by ProTrain's cost model.\n"
        "                      Default: device, but under --strategy chameleon the\n"
        "                      run chooses among all of them from their bounds and\n"
        "                      short trial runs (docs/workloads.md, \"Where the\n"
        "                      optimizer runs\")\n"
        "parallelism (this device is the first pipeline stage):\n"
        "  --tp N --pp N --dp N  tensor, pipeline, data parallel degree (1 1 1)\n"
        "  --zero 0-3          ZeRO stage over the data-parallel group (0)\n"
        "  --comm-stash on|off collectives the compute stream waits for stash their\n"
        "                      tensors, as PyTorch 2.7 on does (off: record_stream,\n"
        "                      as before 2.7; docs/workloads.md)\n"
        "dynamic behaviour (off by default):\n"
        "  --overflow-every N  a loss-scale overflow skips the update every N steps\n"
        "  --overflow-prob P   ... or with probability P per step\n"
        "  --validate-every K  a forward-only evaluation opens every K-th step\n"
        "  --accumulate K      gradient accumulation across steps: the optimizer runs\n"
        "                      every K-th step, the others add to the gradients\n"
        "  --layer-drop P      each layer is skipped with probability P per step\n"
        "  --moe-vary on|off   MoE tokens per expert change every step (off)\n"
        "  --seed N            of the seeded choices, swapadvisor's search too (1)\n"
        "run:\n"
        "  --device PRESET     simulated device (`chameleon devices`; its default, as\n"
        "                      every command's)\n"
        "  --capacity SIZE     device memory instead of the preset's (for example 32GiB),\n"
        "                      or P%% of the peak of the same run with unlimited memory\n"
        "  --host-memory SIZE  pinned host memory for swaps (2TiB)\n"
        "  --strategy NAME     chameleon (default: swaps and recomputation),\n"
        "                      chameleon-swap (swaps only), native, ideal, recompute,\n"
        "                      capuchin, vdnn, protrain (ProTrain's searched plan),\n"
        "                      zero-offload, swapadvisor (SwapAdvisor's searched plan),\n"
        "                      hyperoffload (HyperOffload's cache operators)\n"
        "                      (docs/baselines.md, docs/protrain.md, docs/swapadvisor.md,\n"
        "                      docs/hyperoffload.md)\n"
        "  --search-seconds S  swapadvisor: the search's wall-clock limit (10)\n"
        "  --on-change search|fail  swapadvisor, when the op sequence changes: search\n"
        "                      again (default) or stop with an error\n"
        "  --allocator KIND    auto (the default: expandable where the device has\n"
        "                      virtual memory), classic (PyTorch's segments) or\n"
        "                      expandable (docs/allocator.md)\n"
        "  --steps N           steps to run (50)\n");
    fprintf(f,
        "output:\n"
        "  --bound             also the lower bound on the step time at this capacity\n"
        "                      (any mix of keeping, swapping and recomputing; docs/\n"
        "                      policy.md, \"The lower bound\"); --json has it always\n"
        "  --json              one JSON object with the summary\n"
        "  --quiet             no progress lines\n"
        "  --log               the runtime's log (stages, policies) on stderr\n"
        "  --trace FILE        the timeline as Chrome trace-event JSON (Perfetto opens it)\n"
        "  --memory-curve DIR  the last step's memory curve (memory_curve.svg and .csv)\n"
        "                      and its detailed profile (last-step-profile.json) in DIR\n"
        "  --report FILE.html  the run report: summary, memory curve, step time and\n"
        "                      swapped bytes per step, the policy (docs/trace.md)\n"
        "The ideal step time comes from a second run with unlimited device memory.\n");
}

#define CMD "simulate"

static bool parse_onoff(const char *v, bool *out)
{
    if (strcmp(v, "on") == 0 || strcmp(v, "true") == 0 || strcmp(v, "1") == 0)
        *out = true;
    else if (strcmp(v, "off") == 0 || strcmp(v, "false") == 0 || strcmp(v, "0") == 0)
        *out = false;
    else
        return false;
    return true;
}

/* The numeric model settings, by flag. */
static uint32_t *dim_of(const char *a, cham_model_config_t *m)
{
    static const struct {
        const char *flag;
        size_t offset;
    } dims[] = {
        {"--layers", offsetof(cham_model_config_t, layers)},
        {"--hidden", offsetof(cham_model_config_t, hidden)},
        {"--ffn", offsetof(cham_model_config_t, ffn)},
        {"--heads", offsetof(cham_model_config_t, heads)},
        {"--kv-heads", offsetof(cham_model_config_t, kv_heads)},
        {"--vocab", offsetof(cham_model_config_t, vocab)},
        {"--experts", offsetof(cham_model_config_t, experts)},
        {"--topk", offsetof(cham_model_config_t, topk)},
        {"--seq", offsetof(cham_model_config_t, seq)},
        {"--mbs", offsetof(cham_model_config_t, mbs)},
        {"--gbs", offsetof(cham_model_config_t, gbs)},
        {"--tp", offsetof(cham_model_config_t, tp)},
        {"--pp", offsetof(cham_model_config_t, pp)},
        {"--dp", offsetof(cham_model_config_t, dp)},
        {"--zero", offsetof(cham_model_config_t, zero)},
        {"--validate-every", offsetof(cham_model_config_t, validate_every)},
        {"--accumulate", offsetof(cham_model_config_t, accumulate)},
    };
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++)
        if (strcmp(a, dims[i].flag) == 0)
            return (uint32_t *)((char *)m + dims[i].offset);
    return NULL;
}

/* ---- the options, one handler each ---------------------------------------------*/

static int set_flag(void *state, const char *a, const char *v)
{
    sim_opts_t *o = state;
    (void)v;                             /* --log: read by cmd_simulate */
    o->json = o->json || strcmp(a, "--json") == 0;
    o->quiet = o->quiet || strcmp(a, "--quiet") == 0;
    o->run.lower_bound = o->run.lower_bound || strcmp(a, "--bound") == 0;
    return 0;
}

static int set_dim(void *state, const char *a, const char *v)
{
    sim_opts_t *o = state;
    bool zero_ok = strcmp(a, "--zero") == 0 || strcmp(a, "--experts") == 0 ||
                   strcmp(a, "--gbs") == 0 || strcmp(a, "--topk") == 0 ||
                   strcmp(a, "--validate-every") == 0;
    uint64_t n;
    if (!tool_parse_uint(v, zero_ok ? 0 : 1, UINT32_MAX, &n))
        return tool_bad_value(CMD, a, zero_ok ? "a whole number from 0 to 4294967295"
                                              : "a whole number from 1 to 4294967295", v);
    *dim_of(a, &o->run.model) = (uint32_t)n;
    o->set_heads = o->set_heads || strcmp(a, "--heads") == 0;
    o->set_kv = o->set_kv || strcmp(a, "--kv-heads") == 0;
    return 0;
}

static int set_dtype(void *state, const char *a, const char *v)
{
    cham_model_config_t *m = &((sim_opts_t *)state)->run.model;
    if (strcmp(v, "fp16") == 0)
        m->dtype = CHAM_DTYPE_F16;
    else if (strcmp(v, "bf16") == 0)
        m->dtype = CHAM_DTYPE_BF16;
    else
        return tool_bad_value(CMD, a, "fp16 or bf16", v);
    return 0;
}

static int set_precision(void *state, const char *a, const char *v)
{
    cham_model_config_t *m = &((sim_opts_t *)state)->run.model;
    return cham_precision_parse(v, &m->precision) == CHAM_OK
               ? 0
               : tool_bad_value(CMD, a, "master, main-grads or autocast", v);
}

static int set_onoff(void *state, const char *a, const char *v)
{
    cham_model_config_t *m = &((sim_opts_t *)state)->run.model;
    bool *b = strcmp(a, "--flash") == 0       ? &m->flash
              : strcmp(a, "--recompute") == 0 ? &m->recompute
              : strcmp(a, "--moe-vary") == 0  ? &m->moe_vary
                                              : &m->comm_stash;
    return parse_onoff(v, b) ? 0 : tool_bad_value(CMD, a, "on or off", v);
}

static int set_optimizer(void *state, const char *a, const char *v)
{
    cham_model_config_t *m = &((sim_opts_t *)state)->run.model;
    uint64_t n;
    ((sim_opts_t *)state)->run.plan_optimizer = false;
    m->host_optimizer = strcmp(v, "device") != 0;
    m->device_groups = strcmp(v, "auto") == 0 ? CHAM_DEVICE_GROUPS_AUTO : 0;
    if (strncmp(v, "host:", 5) == 0 && tool_parse_uint(v + 5, 0, UINT32_MAX - 1, &n))
        m->device_groups = (uint32_t)n;
    else if (strcmp(v, "host") != 0 && strcmp(v, "device") != 0 && strcmp(v, "auto") != 0)
        return tool_bad_value(CMD, a, "device, host, host:N (N groups on the device) or auto",
                              v);
    return 0;
}

static int set_overflow_every(void *state, const char *a, const char *v)
{
    uint64_t n;
    if (!tool_parse_uint(v, 0, INT64_MAX, &n))
        return tool_bad_value(CMD, a, "a whole number of steps (0 = never)", v);
    ((sim_opts_t *)state)->run.model.overflow_every = (int64_t)n;
    return 0;
}

static int set_overflow_prob(void *state, const char *a, const char *v)
{
    if (!tool_parse_real(v, 0, 1, &((sim_opts_t *)state)->run.model.overflow_prob))
        return tool_bad_value(CMD, a, "a probability from 0 to 1", v);
    return 0;
}

static int set_layer_drop(void *state, const char *a, const char *v)
{
    double *p = &((sim_opts_t *)state)->run.model.layer_drop;
    if (!tool_parse_real(v, 0, 1, p) || *p >= 1)
        return tool_bad_value(CMD, a, "a probability from 0 to below 1", v);
    return 0;
}

static int set_seed(void *state, const char *a, const char *v)
{
    sim_opts_t *o = state;
    if (!tool_parse_uint(v, 0, UINT64_MAX, &o->run.model.seed))
        return tool_bad_value(CMD, a, "a whole number from 0 to 2^64 - 1", v);
    o->run.runtime.swapadvisor.seed = o->run.model.seed;
    return 0;
}

static int set_steps(void *state, const char *a, const char *v)
{
    if (!tool_parse_uint(v, 1, 10000000, &((sim_opts_t *)state)->run.steps))
        return tool_bad_value(CMD, a, "a whole number of steps from 1 to 10000000", v);
    return 0;
}

static int set_device(void *state, const char *a, const char *v)
{
    if (!tool_check_preset(CMD, a, v))
        return 2;
    ((sim_opts_t *)state)->run.runtime.device.preset = v;
    return 0;
}

static int set_capacity(void *state, const char *a, const char *v)
{
    sim_opts_t *o = state;
    (void)a;
    return tool_parse_capacity(CMD, v, &o->run.runtime.device.capacity, &o->capacity_fraction);
}

static int set_host_memory(void *state, const char *a, const char *v)
{
    uint64_t *b = &((sim_opts_t *)state)->run.runtime.pinned_budget;
    if (!tool_parse_size(v, b) || !*b)
        return tool_bad_value(CMD, a, "a size above 0 such as 2TiB", v);
    return 0;
}

/* --trace, --memory-curve, --report: a path, checked when it is written. */
static int set_path(void *state, const char *a, const char *v)
{
    sim_opts_t *o = state;
    const char **path = strcmp(a, "--trace") == 0 ? &o->run.trace_path
                        : strcmp(a, "--memory-curve") == 0 ? &o->curve_dir : &o->report;
    *path = v;
    return 0;
}

static int set_allocator(void *state, const char *a, const char *v)
{
    if (cham_allocator_mode_parse(v, &((sim_opts_t *)state)->run.runtime.allocator) != CHAM_OK)
        return tool_bad_value(CMD, a, "auto, classic or expandable", v);
    return 0;
}

static int set_strategy(void *state, const char *a, const char *v)
{
    return tool_parse_strategy(CMD, a, v, 0, &((sim_opts_t *)state)->run.strategy) ? 2 : 0;
}

static int set_search_seconds(void *state, const char *a, const char *v)
{
    return tool_parse_search_seconds(CMD, a, v,
                                     &((sim_opts_t *)state)->run.runtime.swapadvisor.search_seconds);
}

static int set_on_change(void *state, const char *a, const char *v)
{
    if (strcmp(v, "search") && strcmp(v, "fail"))
        return tool_bad_value(CMD, a, "search or fail", v);
    ((sim_opts_t *)state)->run.runtime.swapadvisor_fail_on_change = strcmp(v, "fail") == 0;
    return 0;
}

/* --model is read first (tool_model_preset); --log by cmd_simulate. */
static const tool_opt_t opts[] = {
    {"--json", false, set_flag}, {"--quiet", false, set_flag}, {"--log", false, set_flag},
    {"--bound", false, set_flag}, {"--model", true, NULL}, {"--layers", true, set_dim},
    {"--hidden", true, set_dim}, {"--ffn", true, set_dim}, {"--heads", true, set_dim},
    {"--kv-heads", true, set_dim}, {"--vocab", true, set_dim}, {"--experts", true, set_dim},
    {"--topk", true, set_dim}, {"--seq", true, set_dim}, {"--mbs", true, set_dim},
    {"--gbs", true, set_dim}, {"--tp", true, set_dim}, {"--pp", true, set_dim},
    {"--dp", true, set_dim}, {"--zero", true, set_dim}, {"--validate-every", true, set_dim},
    {"--accumulate", true, set_dim}, {"--dtype", true, set_dtype}, {"--flash", true, set_onoff},
    {"--recompute", true, set_onoff}, {"--moe-vary", true, set_onoff},
    {"--comm-stash", true, set_onoff}, {"--precision", true, set_precision},
    {"--optimizer", true, set_optimizer}, {"--overflow-every", true, set_overflow_every},
    {"--overflow-prob", true, set_overflow_prob}, {"--layer-drop", true, set_layer_drop},
    {"--seed", true, set_seed}, {"--steps", true, set_steps}, {"--device", true, set_device},
    {"--capacity", true, set_capacity}, {"--host-memory", true, set_host_memory},
    {"--trace", true, set_path}, {"--memory-curve", true, set_path},
    {"--strategy", true, set_strategy}, {"--report", true, set_path},
    {"--allocator", true, set_allocator}, {"--search-seconds", true, set_search_seconds},
    {"--on-change", true, set_on_change},
};
#define N_OPTS (sizeof opts / sizeof opts[0])

/* The model first (a preset), then every other option over it. */
static int parse(int argc, char **argv, sim_opts_t *o)
{
    cham_model_config_t *m = &o->run.model;
    o->model = "llama2-7b";
    if (tool_wants_help(argc, argv)) {
        usage(stdout);
        return -1;
    }
    /* First the names (every option known, every value there) and the model. */
    int rc = tool_model_preset(CMD, opts, N_OPTS, argc, argv, &o->model, m);
    if (rc)
        return rc;
    const cham_model_config_t preset = *m;
    o->run.runtime.device.preset = cham_preset_default_name();
    if ((rc = tool_apply_opts(CMD, opts, N_OPTS, argc, argv, o)) != 0)
        return rc;
    /* A preset whose attention has one kv head per head keeps it so when
     * only --heads is given (gpt2 --heads 2 means 2 and 2). */
    if (o->set_heads && !o->set_kv && preset.kv_heads == preset.heads)
        m->kv_heads = m->heads;
    char err[400];
    if (cham_model_validate(m, err, sizeof err) != CHAM_OK) {
        fprintf(stderr, "chameleon simulate: %s (the values not on the command line are the "
                "%s preset's; --help lists the flags)\n", err, o->model);
        return 2;
    }
    return 0;
}

static double gib(double bytes)
{
    return bytes / (double)(UINT64_C(1) << 30);
}

static void log_line(const char *line, void *user)
{
    (void)user;
    fprintf(stderr, "chameleon: %s\n", line);
}

static void print_step(const cham_run_step_t *s)
{
    printf("step %5llu  %-9s  %9.3f ms  peak %8.2f GiB  swapped %8.2f GiB%s%s",
           (unsigned long long)s->step, cham_stage_name(s->stage), (double)s->time_ns * 1e-6,
           gib((double)s->peak_bytes), gib((double)s->swapped_bytes),
           s->info.validated ? "  validation" : "", s->info.overflow ? "  overflow" : "");
    if (s->info.layers_dropped)
        printf("  %u layers dropped", s->info.layers_dropped);
    if (s->on_demand || s->passive)
        printf("  %llu on-demand, %llu passive", (unsigned long long)s->on_demand,
               (unsigned long long)s->passive);
    printf("\n");
    fflush(stdout);
}

/* A progress line (unless --json or --quiet), and with --json or --report
 * the step's values appended to the series. */
static void on_step(const cham_run_step_t *s, void *user)
{
    sim_opts_t *o = user;
    if (!o->json && !o->quiet)
        print_step(s);
    if (!o->series)
        return;
    const struct {
        const char *key;
        json_t *v;
    } values[] = {
        {"step_time_s", plot_json_number((double)s->time_ns * 1e-9)},
        {"stage", json_string(cham_stage_name(s->stage))},
        {"peak_bytes", json_integer((json_int_t)s->peak_bytes)},
        {"swapped_bytes", json_integer((json_int_t)s->swapped_bytes)},
        {"on_demand_swapins", json_integer((json_int_t)s->on_demand)},
        {"passive_swapouts", json_integer((json_int_t)s->passive)},
        {"accumulated", json_boolean(s->info.accumulated)},
        {"validated", json_boolean(s->info.validated)},
        {"overflow", json_boolean(s->info.overflow)},
    };
    for (size_t i = 0; i < sizeof values / sizeof values[0]; i++) {
        json_t *a = json_object_get(o->series, values[i].key);
        if (!a)
            json_object_set_new(o->series, values[i].key, a = json_array());
        json_array_append_new(a, values[i].v);
    }
}

/* The run's end: its last profile and policy, read in memory for the
 * report and the memory curve. */
static void on_finish(const cham_profile_t *profile, const cham_policy_t *policy, void *user)
{
    sim_opts_t *o = user;
    if (o->series)
        report_parts_take(&o->parts, profile, policy);
    if (!o->curve_dir || !profile)
        return;
    if (!report_write_curve(profile, "capacity", o->curve_dir, o->curve_err,
                            sizeof o->curve_err) ||
        cham_profile_save_json(profile, o->profile_path, o->curve_err, sizeof o->curve_err) !=
            CHAM_OK)
        o->curve_failed = true;
    else
        o->curve_written = true;
}

/* The estimate's error against the simulated run, as a fraction. */
static double error_of(double predicted, double measured)
{
    return measured > 0 ? predicted / measured - 1 : 0;
}

/* protrain, zero-offload: the configuration and the estimates. */
static void protrain_json(json_t *j, const cham_run_result_t *r)
{
    const cham_protrain_config_t *c = &r->protrain;
    json_object_set_new(j, "protrain_n_persist", json_integer(c->n_persist));
    json_object_set_new(j, "protrain_n_buffer", json_integer(c->n_buffer));
    json_object_set_new(j, "protrain_n_swap", json_integer(c->n_swap));
    json_object_set_new(j, "protrain_n_checkpoint", json_integer(c->n_checkpoint));
    json_object_set_new(j, "protrain_swap_interval", json_integer(c->swap_interval));
    if (!(r->predicted_step_time_s > 0))
        return;
    bool ran = r->steps > 0;
    json_object_set_new(j, "predicted_step_time_s", plot_json_number(r->predicted_step_time_s));
    json_object_set_new(j, "predicted_peak_bytes",
                        json_integer((json_int_t)r->predicted_peak_bytes));
    json_object_set_new(j, "step_time_error",
                        ran ? plot_json_number(error_of(r->predicted_step_time_s, r->step_time_s))
                            : json_null());
    json_object_set_new(j, "peak_error",
                        ran ? plot_json_number(error_of((double)r->predicted_peak_bytes,
                                                        (double)r->peak_tensor_bytes))
                            : json_null());
    json_object_set_new(j, "protrain_evaluated", json_integer((json_int_t)r->protrain_evaluated));
    json_object_set_new(j, "protrain_pruned", json_integer((json_int_t)r->protrain_pruned));
}

/* Where a program's optimizer runs, as --optimizer says it: "device",
 * or "host:N" with N groups updated on the device. */
static const char *optimizer_name(bool host, uint32_t device_groups, char *buf, size_t size)
{
    if (!host)
        return "device";
    snprintf(buf, size, "host:%u", device_groups);
    return buf;
}

static json_t *optimizer_json(bool host, uint32_t device_groups)
{
    char buf[32];
    return json_string(optimizer_name(host, device_groups, buf, sizeof buf));
}

/* The run as one JSON object (--json, and the report's input). */
static json_t *run_json(sim_opts_t *o, const cham_run_result_t *r, double ideal_s,
                        bool ideal_ok)
{
    const cham_model_config_t *m = &o->run.model;
    json_t *j = json_object();
    json_object_set_new(j, "strategy", json_string(cham_strategy_name(o->run.strategy)));
    json_object_set_new(j, "device", json_string(o->run.runtime.device.preset));
    json_object_set_new(j, "model", json_string(o->model));
    json_object_set_new(j, "parameters", json_integer((json_int_t)cham_model_parameters(m)));
    json_object_set_new(j, "steps", json_integer((json_int_t)r->steps));
    json_object_set_new(j, "oom", json_boolean(r->oom));
    json_object_set_new(j, "oom_step",
                        r->oom ? json_integer((json_int_t)r->fail_step) : json_null());
    json_object_set_new(j, "oom_op", r->oom ? json_integer((json_int_t)r->fail_op) : json_null());
    json_object_set_new(j, "error", r->status == CHAM_OK ? json_null() : json_string(r->error));
    json_object_set_new(j, "peak_device_bytes", json_integer((json_int_t)r->peak_device_bytes));
    json_object_set_new(j, "peak_tensor_bytes", json_integer((json_int_t)r->peak_tensor_bytes));
    if (r->has_protrain)
        protrain_json(j, r);
    if (!r->has_protrain) {      /* ProTrain's chunks say where it updates */
        json_object_set_new(j, "optimizer", json_string(r->host_optimizer ? "host" : "device"));
        json_object_set_new(j, "optimizer_planned", json_boolean(r->optimizer_planned));
    }
    if (r->host_optimizer)
        json_object_set_new(j, "device_groups", json_integer(r->device_groups));
    json_object_set_new(j, "capacity_bytes", json_integer((json_int_t)r->capacity_bytes));
    json_object_set_new(j, "step_time_s", plot_json_number(r->step_time_s));
    json_object_set_new(j, "mean_step_time_s", plot_json_number(r->mean_step_time_s));
    json_object_set_new(j, "late_mean_step_time_s", plot_json_number(r->late_mean_step_time_s));
    json_object_set_new(j, "stable_steps", json_integer((json_int_t)r->stable_steps));
    json_object_set_new(j, "ideal_step_time_s", ideal_ok ? plot_json_number(ideal_s) : json_null());
    json_object_set_new(j, "overhead_vs_ideal",
                        ideal_ok && ideal_s > 0 && r->steps
                            ? plot_json_number(r->step_time_s / ideal_s - 1) : json_null());
    json_object_set_new(j, "swapped_bytes_per_step",
                        plot_json_number(r->swapped_bytes_per_step));
    json_object_set_new(j, "hazards", json_integer((json_int_t)r->hazards));
    json_object_set_new(j, "stage_changes", json_integer((json_int_t)r->stage_changes));
    json_object_set_new(j, "policy_regenerations",
                        json_integer((json_int_t)r->policy_regenerations));
    json_object_set_new(j, "on_demand_swapins", json_integer((json_int_t)r->on_demand_swapins));
    json_object_set_new(j, "passive_swapouts", json_integer((json_int_t)r->passive_swapouts));
    json_object_set_new(j, "recomputes", json_integer((json_int_t)r->recomputes));
    if (r->has_bound) {
        json_object_set_new(j, "lower_bound_step_time_s",
                            r->bound_feasible ? json_real(r->lower_bound_step_time_s)
                                              : json_null());
        json_object_set_new(j, "lower_bound_optimizer",
                            optimizer_json(r->bound_host_optimizer, r->bound_device_groups));
    }
    json_object_set_new(j, "dropped_bytes_per_step", json_real(r->dropped_bytes_per_step));
    json_object_set_new(j, "ops_per_step", json_integer((json_int_t)r->ops_per_step));
    json_object_set_new(j, "series", json_incref(o->series));
    report_parts_give(&o->parts, j, "capacity_bytes", r->capacity_bytes);
    return j;
}

/* ideal_s: the unlimited run's median step, ideal_late_s its late mean
 * (what a loop that changes is timed by). */
static void print_summary(const sim_opts_t *o, const cham_run_result_t *r, double ideal_s,
                          double ideal_late_s, bool ideal_ok)
{
    const cham_model_config_t *m = &o->run.model;
    printf("\nsummary (simulated time on %s)\n", o->run.runtime.device.preset);
    /* A run that stopped says so first, before anything that would read
     * as its result. */
    if (r->status != CHAM_OK)
        printf("  FAILED              at step %llu, op %llu: %s\n",
               (unsigned long long)r->fail_step, (unsigned long long)r->fail_op, r->error);
    bool precision = m->precision != CHAM_PRECISION_MASTER;   /* named when not the default */
    printf("  model               %s: %.2fB parameters, %u layers, seq %u, mbs %u, gbs %u, "
           "tp %u pp %u dp %u zero %u%s%s\n", o->model, (double)cham_model_parameters(m) * 1e-9,
           m->layers, m->seq, m->mbs, m->gbs ? m->gbs : m->mbs * m->dp, m->tp, m->pp, m->dp,
           m->zero, precision ? ", precision " : "",
           precision ? cham_precision_name(m->precision) : "");
    printf("  strategy            %s\n", cham_strategy_name(o->run.strategy));
    char why[96] = "";
    if (r->optimizer_planned)
        snprintf(why, sizeof why, " (planned: %u programs bounded, %u tried)",
                 r->optimizer_programs, r->optimizer_trials);
    else if (m->device_groups == CHAM_DEVICE_GROUPS_AUTO)
        snprintf(why, sizeof why, " (auto)");
    if (r->host_optimizer)
        printf("  optimizer           on the host; %u of %u groups updated on the device%s\n",
               r->device_groups, m->layers / m->pp + 2, why);
    else if (r->optimizer_planned)
        printf("  optimizer           on the device%s\n", why);
    printf("  steps               %llu of %llu\n", (unsigned long long)r->steps,
           (unsigned long long)o->run.steps);
    printf("  memory              peak %.2f GiB of %.2f GiB\n", gib((double)r->peak_device_bytes),
           gib((double)r->capacity_bytes));
    bool changes = cham_model_loop_changes(m);
    if (r->steps) {
        double step_s = r->step_time_s;
        if (changes) {
            step_s = r->late_mean_step_time_s;
            ideal_s = ideal_late_s;
            printf("  step time           %.4f s (mean of steps %llu-%llu: the loop changes; "
                   "median %.4f s)", step_s, (unsigned long long)(r->steps / 2),
                   (unsigned long long)(r->steps - 1), r->step_time_s);
        } else if (r->stable_steps) {
            printf("  step time           %.4f s (median over Stable steps)", step_s);
        } else {
            printf("  step time           %.4f s (median over all %llu steps: none was Stable)",
                   step_s, (unsigned long long)r->steps);
        }
        if (ideal_ok && ideal_s > 0)
            printf("; ideal %.4f s; overhead %+.1f%%", ideal_s, 100.0 * (step_s / ideal_s - 1));
        printf("\n  swapping            %.2f GiB a step, %llu on-demand swap-ins, %llu passive "
               "swap-outs\n", gib(r->swapped_bytes_per_step),
               (unsigned long long)r->on_demand_swapins, (unsigned long long)r->passive_swapouts);
        if (r->recomputes)
            printf("  recomputation       %.2f GiB dropped a step, %llu ops run again\n",
                   gib(r->dropped_bytes_per_step), (unsigned long long)r->recomputes);
        char buf[32];
        const char *a_step = changes ? "a step on the mean of those steps" : "a step";
        if (r->has_bound && r->bound_feasible && r->optimizer_planned)
            printf("  lower bound         %.4f s %s: no mix of keeping, swapping and "
                   "recomputing is faster here, with the optimizer anywhere (that of "
                   "--optimizer %s)\n", r->lower_bound_step_time_s, a_step,
                   optimizer_name(r->bound_host_optimizer, r->bound_device_groups, buf,
                                  sizeof buf));
        else if (r->has_bound && r->bound_feasible)
            printf("  lower bound         %.4f s %s: no mix of keeping, swapping and "
                   "recomputing is faster here\n", r->lower_bound_step_time_s, a_step);
        else if (r->has_bound)
            printf("  lower bound         none: no mix of keeping, swapping and recomputing "
                   "fits this capacity\n");
    }
    if (r->has_protrain) {
        const cham_protrain_config_t *c = &r->protrain;
        printf("  protrain            %u of %u chunks on the device, %u buffers; %u blocks "
               "swapped, %u checkpointed (swap interval %u)\n", c->n_persist, m->layers + 2,
               c->n_buffer, c->n_swap, c->n_checkpoint, c->swap_interval);
        if (r->predicted_step_time_s > 0 && r->steps)
            printf("  estimates           step %.4f s (%+.1f%% against the run), peak %.2f GiB "
                   "(%+.1f%% against the tensors' peak, %.2f GiB); %llu configurations "
                   "estimated, %llu pruned\n", r->predicted_step_time_s,
                   100 * error_of(r->predicted_step_time_s, r->step_time_s),
                   gib((double)r->predicted_peak_bytes),
                   100 * error_of((double)r->predicted_peak_bytes, (double)r->peak_tensor_bytes),
                   gib((double)r->peak_tensor_bytes),
                   (unsigned long long)r->protrain_evaluated,
                   (unsigned long long)r->protrain_pruned);
    }
    printf("  runtime             %llu stage changes, %llu policies generated, %llu hazards\n",
           (unsigned long long)r->stage_changes, (unsigned long long)r->policy_regenerations,
           (unsigned long long)r->hazards);
}

int cmd_simulate(int argc, char **argv)
{
    sim_opts_t o = {.run = cham_run_config_default()};
    bool want_log = false;
    for (int i = 0; i < argc; i++)
        want_log = want_log || strcmp(argv[i], "--log") == 0;
    int rc = parse(argc, argv, &o);
    if (rc != 0 || tool_parse_only)
        return rc < 0 ? 0 : rc;
    bool made;
    const tool_output_t files[] = {{"--trace", o.run.trace_path}, {"--report", o.report}};
    if ((rc = tool_check_outputs(CMD, o.curve_dir, files, 2, NULL, NULL, &made)) != 0)
        return rc;
    o.run.user = &o;
    o.run.log = want_log ? log_line : NULL;
    o.run.on_step = on_step;
    if (o.json || o.report)                 /* the series, curve and policy, in memory */
        o.series = json_object();
    if (o.json || o.report || o.curve_dir)
        o.run.on_finish = on_finish;
    o.run.lower_bound = o.run.lower_bound || o.json || o.report;

    /* The limit every time is compared with: the same job, unlimited memory
     * (not run when the job itself cannot start: its run says why at once). */
    double ideal_s = 0, ideal_late_s = 0;
    bool ideal_ok = false;
    cham_run_result_t r;
    char ideal_err[sizeof r.error] = "";
    bool startable = cham_run_check(&o.run, NULL, 0) == CHAM_OK;
    if (o.run.strategy != CHAM_STRATEGY_IDEAL && startable) {
        cham_run_config_t ideal = o.run;
        ideal.strategy = CHAM_STRATEGY_IDEAL;
        ideal.on_step = NULL;
        ideal.on_finish = NULL;
        ideal.log = NULL;
        ideal.trace_path = NULL;
        ideal.lower_bound = false;
        if (cham_run(&ideal, &r) == CHAM_OK && r.status == CHAM_OK) {
            ideal_s = r.step_time_s;
            ideal_late_s = r.late_mean_step_time_s;
            ideal_ok = true;
        } else {
            snprintf(ideal_err, sizeof ideal_err, "%s", r.error);
        }
        if (o.capacity_fraction > 0 && ideal_ok) {
            uint64_t bytes = (uint64_t)(o.capacity_fraction * (double)r.peak_tensor_bytes);
            o.run.runtime.device.capacity = bytes ? bytes : 1;
        }
    }
    if (o.capacity_fraction > 0 && startable && o.run.strategy != CHAM_STRATEGY_IDEAL &&
        !o.run.runtime.device.capacity) {
        fprintf(stderr, "chameleon simulate: --capacity %g%%: the run with unlimited memory, "
                "whose peak it is a share of, did not finish: %s\n", 100 * o.capacity_fraction,
                ideal_err[0] ? ideal_err : "no reason given");
        json_decref(o.series);
        return 1;
    }
    if (o.curve_dir) {
        if (mkdir(o.curve_dir, 0777) != 0 && errno != EEXIST) {
            fprintf(stderr, "chameleon simulate: --memory-curve %s: cannot make the directory: "
                    "%s\n", o.curve_dir, strerror(errno));
            json_decref(o.series);
            return 1;
        }
        /* Saved by on_finish, through the writer of every output. */
        snprintf(o.profile_path, sizeof o.profile_path, "%s/" TOOL_CURVE_PROFILE, o.curve_dir);
    }
    cham_status_t st = cham_run(&o.run, &r);
    rc = st != CHAM_OK ? 2 : r.status != CHAM_OK ? 1 : 0;
    char err[600];
    if (st != CHAM_OK)
        fprintf(stderr, "chameleon simulate: %s\n", r.error);
    else if (o.curve_failed) {
        fprintf(stderr, "chameleon simulate: --memory-curve %s\n", o.curve_err);
        rc = 1;
    } else if (o.curve_dir && !o.curve_written && r.status == CHAM_OK) {
        fprintf(stderr, "chameleon simulate: --memory-curve %s: no detailed profile of the "
                "last step was made\n", o.curve_dir);
        rc = 1;
    }
    if (st == CHAM_OK && o.run.strategy == CHAM_STRATEGY_IDEAL) {
        ideal_s = r.step_time_s;
        ideal_late_s = r.late_mean_step_time_s;
        ideal_ok = r.status == CHAM_OK;
    }
    json_t *run = st == CHAM_OK && o.series ? run_json(&o, &r, ideal_s, ideal_ok) : NULL;
    /* The report is written for a failed run too: its banner says so. */
    bool report_ok = run && o.report && report_write_html(run, o.report, err, sizeof err);
    if (st == CHAM_OK && o.report && !report_ok) {
        if (run)
            fprintf(stderr, "chameleon simulate: --report %s\n", err);
        else
            fprintf(stderr, "chameleon simulate: --report %s: out of host memory\n", o.report);
        rc = 1;
    }
    if (st == CHAM_OK && o.json) {
        char *text = run ? json_dumps(run, JSON_INDENT(2)) : NULL;
        if (text) {
            tool_print_text(text);
        } else {
            fprintf(stderr, "chameleon simulate: out of host memory writing the JSON\n");
            rc = 1;
        }
        free(text);
    } else if (st == CHAM_OK) {
        print_summary(&o, &r, ideal_s, ideal_late_s, ideal_ok);
        if (o.curve_written)
            printf("  memory curve        %s/memory_curve.svg (data: memory_curve.csv)\n",
                   o.curve_dir);
        if (report_ok)
            printf("  report              %s\n", o.report);
    }
    if (st == CHAM_OK && r.status != CHAM_OK && !o.json)
        fprintf(stderr, "chameleon simulate: %s\n", r.error);
    json_decref(run);
    json_decref(o.series);
    report_parts_clear(&o.parts);
    return rc;
}
