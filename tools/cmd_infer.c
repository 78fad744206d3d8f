/* `chameleon infer`: LLM inference at paper scale in virtual time, the
 * prefill of a prompt and then one decode step per generated token, under
 * a memory strategy, with the KV caches on the device or offloaded to
 * host memory (docs/workloads.md, "Inference"); optionally the longest
 * context that runs. */
#include <assert.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "chameleon/chameleon.h"
#include "args.h"
#include "commands.h"

#define CMD "infer"
#define GiB (1024.0 * 1024.0 * 1024.0)
/* --find-max-context tries prompts in steps of this many tokens. */
#define CONTEXT_STEP 256

typedef struct infer_opts {
    cham_run_config_t run;
    const char *model;
    bool json, quiet, find_max;
} infer_opts_t;

static void usage(FILE *f)
{
    fprintf(f,
        "usage: chameleon infer [--model NAME] [--prompt N] [--generate N] [--batch N]\n"
        "                       [--kv-offload on|off] [--strategy NAME] [--device PRESET]\n"
        "                       [--capacity SIZE] [--find-max-context] [--json] [--quiet]\n"
        "                       [--log]\n"
        "Inference in virtual time: the prefill of the prompt, then one decode step per\n"
        "generated token, each layer's KV cache sized for the whole context.\n"
        "  --model NAME        as simulate (llama2-7b); --layers --hidden --ffn --heads\n"
        "                      --kv-heads --vocab --experts --topk override it\n"
        "  --prompt N          prompt tokens per sequence (4096; at most %lu)\n"
        "  --generate N        tokens generated per sequence (32; at most %lu)\n"
        "  --batch N           sequences decoded together (1)\n"
        "  --kv-offload on|off the KV caches in pinned host memory, each layer's\n"
        "                      prefetched before its attention and its new keys and\n"
        "                      values stored back (off)\n"
        "  --strategy NAME     native (default), chameleon, chameleon-swap, vdnn,\n"
        "                      capuchin, swapadvisor, hyperoffload (its cache\n"
        "                      operators for the KV caches and weights; docs/\n"
        "                      hyperoffload.md), ideal (docs/baselines.md)\n"
        "  --device PRESET     simulated device (`chameleon devices`; its default, as\n"
        "                      every command's)\n"
        "  --capacity SIZE     device memory instead of the preset's\n"
        "  --find-max-context  also the longest context (prompt + generate, in steps of\n"
        "                      %d prompt tokens) that runs at this capacity, up to the\n"
        "                      longest prompt the model takes\n"
        "  --json              one JSON object with the summary\n"
        "  --quiet             no progress lines\n"
        "  --log               the runtime's log (stages, policies) on stderr\n",
        (unsigned long)CHAM_MODEL_MAX_SEQ, (unsigned long)CHAM_MODEL_MAX_GENERATE, CONTEXT_STEP);
}

static void log_line(const char *line, void *user)
{
    (void)user;
    fprintf(stderr, "chameleon: %s\n", line);
}


/* The numeric settings, by flag, with their lowest and highest value:
 * the prompt's and the generated tokens' are the model's own limits
 * (cham_model_validate), the others' are checked there with the model. */
static uint32_t *dim_of(const char *a, cham_model_config_t *m, uint64_t *lo, uint64_t *hi)
{
    static const struct {
        const char *flag;
        size_t offset;
        uint64_t lo, hi;
    } dims[] = {
        {"--layers", offsetof(cham_model_config_t, layers), 1, 1u << 24},
        {"--hidden", offsetof(cham_model_config_t, hidden), 1, 1u << 24},
        {"--ffn", offsetof(cham_model_config_t, ffn), 1, 1u << 24},
        {"--heads", offsetof(cham_model_config_t, heads), 1, 1u << 24},
        {"--kv-heads", offsetof(cham_model_config_t, kv_heads), 1, 1u << 24},
        {"--vocab", offsetof(cham_model_config_t, vocab), 1, 1u << 24},
        {"--experts", offsetof(cham_model_config_t, experts), 0, 1u << 24},
        {"--topk", offsetof(cham_model_config_t, topk), 0, 1u << 24},
        {"--prompt", offsetof(cham_model_config_t, seq), 1, CHAM_MODEL_MAX_SEQ},
        {"--generate", offsetof(cham_model_config_t, generate), 0, CHAM_MODEL_MAX_GENERATE},
        {"--batch", offsetof(cham_model_config_t, mbs), 1, 1u << 24},
    };
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++)
        if (strcmp(a, dims[i].flag) == 0) {
            *lo = dims[i].lo;
            *hi = dims[i].hi;
            return (uint32_t *)((char *)m + dims[i].offset);
        }
    return NULL;
}

/* ---- the options, one handler each ---------------------------------------------*/

static int set_flag(void *state, const char *a, const char *v)
{
    infer_opts_t *o = state;
    (void)v;
    o->json = o->json || strcmp(a, "--json") == 0;
    o->quiet = o->quiet || strcmp(a, "--quiet") == 0;
    if (strcmp(a, "--log") == 0)
        o->run.log = log_line;
    o->find_max = o->find_max || strcmp(a, "--find-max-context") == 0;
    return 0;
}

static int set_dim(void *state, const char *a, const char *v)
{
    uint64_t n, lo = 0, hi = 0;
    uint32_t *dim = dim_of(a, &((infer_opts_t *)state)->run.model, &lo, &hi);
    assert(dim);                         /* every row with set_dim is a dimension */
    if (!tool_parse_uint(v, lo, hi, &n)) {
        char want[64];
        snprintf(want, sizeof want, "a whole number from %llu to %llu",
                 (unsigned long long)lo, (unsigned long long)hi);
        return tool_bad_value(CMD, a, want, v);
    }
    *dim = (uint32_t)n;
    return 0;
}

static int set_kv_offload(void *state, const char *a, const char *v)
{
    if (strcmp(v, "on") && strcmp(v, "off"))
        return tool_bad_value(CMD, a, "on or off", v);
    ((infer_opts_t *)state)->run.model.kv_offload = strcmp(v, "on") == 0;
    return 0;
}

/* Training's strategies are refused: recomputation for a backward, and the
 * host optimizer's. */
static int set_strategy(void *state, const char *a, const char *v)
{
    return tool_parse_strategy(CMD, a, v,
                               1u << CHAM_STRATEGY_RECOMPUTE | 1u << CHAM_STRATEGY_PROTRAIN |
                                   1u << CHAM_STRATEGY_ZERO_OFFLOAD,
                               &((infer_opts_t *)state)->run.strategy) ? 2 : 0;
}

static int set_device(void *state, const char *a, const char *v)
{
    if (!tool_check_preset(CMD, a, v))
        return 2;
    ((infer_opts_t *)state)->run.runtime.device.preset = v;
    return 0;
}

static int set_capacity(void *state, const char *a, const char *v)
{
    uint64_t n;
    if (!tool_parse_size(v, &n) || n == 0)
        return tool_bad_value(CMD, a, "a size above 0 such as 64GiB", v);
    ((infer_opts_t *)state)->run.runtime.device.capacity = n;
    return 0;
}

/* --model is read first (tool_model_preset). */
static const tool_opt_t opts[] = {
    {"--model", true, NULL}, {"--layers", true, set_dim}, {"--hidden", true, set_dim},
    {"--ffn", true, set_dim}, {"--heads", true, set_dim}, {"--kv-heads", true, set_dim},
    {"--vocab", true, set_dim}, {"--experts", true, set_dim}, {"--topk", true, set_dim},
    {"--prompt", true, set_dim}, {"--generate", true, set_dim}, {"--batch", true, set_dim},
    {"--kv-offload", true, set_kv_offload}, {"--strategy", true, set_strategy},
    {"--device", true, set_device}, {"--capacity", true, set_capacity},
    {"--find-max-context", false, set_flag}, {"--json", false, set_flag},
    {"--quiet", false, set_flag}, {"--log", false, set_flag},
};
#define N_OPTS (sizeof opts / sizeof opts[0])

static int parse(int argc, char **argv, infer_opts_t *o)
{
    cham_model_config_t *m = &o->run.model;
    o->model = "llama2-7b";
    if (tool_wants_help(argc, argv)) {
        usage(stdout);
        return -1;
    }
    int rc = tool_model_preset(CMD, opts, N_OPTS, argc, argv, &o->model, m);
    if (rc)
        return rc;
    m->infer = true;
    m->generate = 32;
    o->run.strategy = CHAM_STRATEGY_NATIVE;
    o->run.runtime.device.preset = cham_preset_default_name();
    if ((rc = tool_apply_opts(CMD, opts, N_OPTS, argc, argv, o)) != 0)
        return rc;
    char err[400];
    if (cham_model_validate(m, err, sizeof err) != CHAM_OK) {
        fprintf(stderr, "chameleon infer: %s\n", err);
        return 2;
    }
    o->run.steps = (uint64_t)m->generate + 1;
    return 0;
}

/* One run at prompt length `prompt`. */
static cham_status_t run_at(const infer_opts_t *o, uint32_t prompt, cham_run_result_t *r)
{
    cham_run_config_t c = o->run;
    c.model.seq = prompt;
    return cham_run(&c, r);
}

/* What --find-max-context found: the longest prompt that runs (0: none)
 * and the longest the model takes, where the search stops. */
typedef struct context_search {
    uint32_t prompt, limit;
} context_search_t;

/* Candidate k of the search: k steps of CONTEXT_STEP tokens, the last one
 * cut to the model's limit (so the limit itself is tried). */
static uint32_t candidate(uint32_t k, uint32_t limit)
{
    uint64_t p = (uint64_t)k * CONTEXT_STEP;
    return p < limit ? (uint32_t)p : limit;
}

/* The longest prompt whose run completes, in steps of CONTEXT_STEP tokens
 * up to the model's limit: doubling, then bisecting. Never past the limit,
 * which cham_run would refuse (a run that cannot be set up ends the search
 * with its message: 2). */
static int longest_prompt(const infer_opts_t *o, context_search_t *out)
{
    uint32_t limit = cham_model_max_seq(&o->run.model);
    uint32_t n = (uint32_t)(((uint64_t)limit + CONTEXT_STEP - 1) / CONTEXT_STEP);
    uint32_t good = 0, bad = n + 1;
    cham_run_result_t r;
    bool doubling = true;
    /* Doubling, then bisecting (good runs, bad does not). */
    for (uint32_t k = 1; bad - good > 1;) {
        uint32_t prompt = candidate(k, limit);
        if (run_at(o, prompt, &r) != CHAM_OK) {
            fprintf(stderr, "chameleon infer: --find-max-context: prompt %u: %s\n", prompt,
                    r.error);
            return 2;
        }
        *(r.status == CHAM_OK ? &good : &bad) = k;
        if (r.status == CHAM_OK && !o->quiet)
            fprintf(stderr, "  context %llu: runs\n",
                    (unsigned long long)prompt + o->run.model.generate);
        doubling = doubling && r.status == CHAM_OK && k < n;
        k = doubling ? (k <= n / 2 ? 2 * k : n) : good + (bad - good) / 2;
    }
    *out = (context_search_t){.prompt = good ? candidate(good, limit) : 0, .limit = limit};
    return 0;
}

int cmd_infer(int argc, char **argv)
{
    infer_opts_t o = {.run = cham_run_config_default()};
    int rc = parse(argc, argv, &o);
    if (rc != 0 || tool_parse_only)
        return rc < 0 ? 0 : rc;
    const cham_model_config_t *m = &o.run.model;
    cham_run_result_t r;
    cham_status_t st = cham_run(&o.run, &r);
    if (st != CHAM_OK) {
        fprintf(stderr, "chameleon infer: %s\n", r.error);
        return 2;
    }
    context_search_t found = {0};
    if (o.find_max && (rc = longest_prompt(&o, &found)) != 0)
        return rc;
    /* Contexts: the prompt and the generated tokens. */
    uint64_t longest = found.prompt ? (uint64_t)found.prompt + m->generate : 0;
    uint64_t limit = (uint64_t)found.limit + m->generate;
    bool at_limit = found.prompt && found.prompt == found.limit;
    uint64_t kv = cham_model_kv_cache_bytes(m);
    uint64_t context = (uint64_t)m->seq + m->generate;
    if (o.json) {
        /* A run that stopped: its "error", and no times that would read as
         * its result. */
        bool ok = r.status == CHAM_OK;
        json_t *j = json_pack("{s:s, s:s, s:b, s:i, s:i, s:i, s:I, s:s, s:o}", "model", o.model,
                              "strategy", cham_strategy_name(o.run.strategy), "kv_offload",
                              m->kv_offload, "batch", (json_int_t)m->mbs, "prompt",
                              (json_int_t)m->seq, "generate", (json_int_t)m->generate,
                              "capacity_bytes", (json_int_t)r.capacity_bytes, "status",
                              cham_status_string(r.status), "error",
                              ok ? json_null() : json_string(r.error));
        json_object_set_new(j, "kv_cache_bytes", json_integer((json_int_t)kv));
        json_object_set_new(j, "peak_device_bytes", json_integer((json_int_t)r.peak_device_bytes));
        json_object_set_new(j, "prefill_time_s", ok ? json_real(r.prefill_time_s) : json_null());
        json_object_set_new(j, "decode_time_per_token_s",
                            ok && m->generate ? json_real(r.step_time_s) : json_null());
        json_object_set_new(j, "swapped_bytes_per_step", json_real(r.swapped_bytes_per_step));
        json_object_set_new(j, "hazards", json_integer((json_int_t)r.hazards));
        if (o.find_max) {
            json_object_set_new(j, "max_context", json_integer((json_int_t)longest));
            json_object_set_new(j, "max_context_limit", json_integer((json_int_t)limit));
            json_object_set_new(j, "max_context_at_limit", json_boolean(at_limit));
        }
        char *text = j ? json_dumps(j, JSON_INDENT(2)) : NULL;
        if (text)
            tool_print_text(text);
        else
            fprintf(stderr, "chameleon infer: out of host memory writing the JSON\n");
        free(text);
        json_decref(j);
        return ok && text ? 0 : 1;
    }
    printf("inference (simulated time on %s)\n", o.run.runtime.device.preset);
    /* A run that stopped says so first. */
    if (r.status != CHAM_OK)
        printf("  FAILED              at step %llu: %s\n", (unsigned long long)r.fail_step,
               r.error);
    printf("  model               %s: %u layers, batch %u, context %llu (prompt %u + %u "
           "generated)\n", o.model, m->layers, m->mbs, (unsigned long long)context, m->seq,
           m->generate);
    printf("  strategy            %s, KV caches %s (%.2f GiB)\n",
           cham_strategy_name(o.run.strategy), m->kv_offload ? "offloaded to the host"
                                                             : "on the device",
           (double)kv / GiB);
    printf("  memory              peak %.2f GiB of %.2f GiB\n",
           (double)r.peak_device_bytes / GiB, (double)r.capacity_bytes / GiB);
    if (r.status == CHAM_OK) {
        printf("  prefill             %.4f s\n", r.prefill_time_s);
        if (m->generate)
            printf("  decode              %.3f ms a token\n", r.step_time_s * 1e3);
        else
            printf("  decode              none (--generate 0)\n");
    }
    printf("  hazards             %llu\n", (unsigned long long)r.hazards);
    if (o.find_max && at_limit)
        printf("  max context         %llu tokens: the search stopped at the model's limit "
               "(prompt %u tokens)\n", (unsigned long long)longest, found.limit);
    else if (o.find_max)
        printf("  max context         %llu tokens (prompt in steps of %d; the model's limit: "
               "%llu)\n", (unsigned long long)longest, CONTEXT_STEP, (unsigned long long)limit);
    return r.status == CHAM_OK ? 0 : 1;
}
