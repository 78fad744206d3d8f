/* kv-offload (issue 22): the shape of HyperOffload's Table 3 and its
 * bandwidth sweep, and its planner beside Chameleon's in training.
 *   kv_offload   llama3-8b, batch 4, 16 tokens generated, on ascend-910b
 *                and h100-80g: peak memory and decode time per token with
 *                the KV caches on the device and offloaded (prompt 32768),
 *                and the longest prompt that runs: native, KV offload, and
 *                the hyperoffload and chameleon planners.
 *   bandwidth    decode time per token against the host link's bandwidth
 *                (both directions), KV caches on the device and offloaded;
 *                the penalty within 10% from which bandwidth on.
 *   training     llama2-7b (mbs 4, dp 8, ZeRO-3) at the unconstrained peak
 *                and 1.25x, 1.5x, 2x less: step overhead against ideal and
 *                the peak of tensors for the hyperoffload and chameleon
 *                planners. */
#include <math.h>
#include <string.h>

#include "experiment.h"

#define GB 1e9
#define CONTEXT_UNIT 4096u

typedef struct infer_setup {
    const char *device;
    uint32_t prompt;             /* for the fixed-prompt columns */
    double bandwidth;            /* the link both ways, bytes/s; 0: the preset's */
    uint64_t capacity;           /* 0: the preset's */
} infer_setup_t;

/* llama3-8b decoding 16 tokens for 4 sequences of `prompt` tokens. */
static cham_model_config_t model_at(uint32_t prompt, bool offload)
{
    cham_model_config_t m;
    cham_model_preset("llama3-8b", &m);
    m.infer = true;
    m.mbs = 4;
    m.seq = prompt;
    m.generate = 16;
    m.kv_offload = offload;
    return m;
}

static cham_status_t infer(const exp_config_t *c, const infer_setup_t *s, uint32_t prompt,
                           bool offload, cham_strategy_t strategy, cham_run_result_t *r,
                           char *err, size_t err_size)
{
    cham_run_config_t rc = cham_run_config_default();
    rc.plan_optimizer = false;      /* the optimizer where the row says */
    rc.model = model_at(prompt, offload);
    rc.steps = rc.model.generate + 1;
    rc.strategy = strategy;
    rc.runtime.device.preset = s->device;
    rc.runtime.device.capacity = s->capacity;
    rc.runtime.device.h2d_bandwidth = s->bandwidth;
    rc.runtime.device.d2h_bandwidth = s->bandwidth;
    cham_status_t st = cham_run(&rc, r);
    if (st != CHAM_OK) {
        snprintf(err, err_size, "kv-offload: %s", r->error);
        return st;
    }
    if (c->progress)
        fprintf(stderr, "  %-12s %-12s prompt %-7u %s %s\n", s->device,
                cham_strategy_name(strategy), prompt, offload ? "offload" : "       ",
                r->status == CHAM_OK ? "ok" : cham_status_string(r->status));
    return CHAM_OK;
}

/* One probe of exp_largest: prompt (k + 1) x 4096 with one setting. */
typedef struct probe {
    const exp_config_t *c;
    const infer_setup_t *s;
    bool offload;
    cham_strategy_t strategy;
} probe_t;

static cham_status_t fits(void *user, uint32_t k, bool *ok, double *step_s, char *err,
                          size_t err_size)
{
    const probe_t *q = user;
    cham_run_result_t r;
    cham_status_t st = infer(q->c, q->s, (k + 1) * CONTEXT_UNIT, q->offload, q->strategy, &r,
                             err, err_size);
    *ok = st == CHAM_OK && r.status == CHAM_OK;
    *step_s = r.step_time_s;
    return st;
}

/* The longest context (prompt + 16) that runs in 4096-token steps; 0 if
 * none does. */
static cham_status_t longest(const exp_config_t *c, const infer_setup_t *s, bool offload,
                             cham_strategy_t strategy, double *out, char *err, size_t err_size)
{
    probe_t q = {c, s, offload, strategy};
    int64_t k;
    double step_s;
    cham_status_t st = exp_largest(fits, &q, 128, &k, &step_s, err, err_size);
    *out = k < 0 ? 0 : (double)(k + 1) * CONTEXT_UNIT + 16;
    return st;
}

static cham_status_t table_row(const exp_config_t *c, const infer_setup_t *s, exp_table_t *t,
                               double *ratio, char *err, size_t err_size)
{
    cham_run_result_t on, off;
    cham_status_t st;
    if ((st = infer(c, s, s->prompt, false, CHAM_STRATEGY_NATIVE, &on, err, err_size)) ||
        (st = infer(c, s, s->prompt, true, CHAM_STRATEGY_NATIVE, &off, err, err_size)))
        return st;
    if (on.status != CHAM_OK || off.status != CHAM_OK) {
        snprintf(err, err_size, "kv-offload: %s, prompt %u: %s", s->device, s->prompt,
                 on.status != CHAM_OK ? on.error : off.error);
        return CHAM_ERR_OUT_OF_MEMORY;
    }
    double ctx[4];
    const cham_strategy_t who[4] = {CHAM_STRATEGY_NATIVE, CHAM_STRATEGY_NATIVE,
                                    CHAM_STRATEGY_HYPEROFFLOAD, CHAM_STRATEGY_CHAMELEON};
    for (int i = 0; i < 4; i++)
        if ((st = longest(c, s, i == 1, who[i], &ctx[i], err, err_size)) != CHAM_OK)
            return st;
    long row = exp_table_add_row(t);
    if (row < 0)
        return CHAM_ERR_HOST_OOM;
    cham_model_config_t m = model_at(s->prompt, false);
    size_t r = (size_t)row;
    exp_table_set_text(t, r, 0, "%s", s->device);
    exp_table_set(t, r, 1, (double)cham_model_kv_cache_bytes(&m) / GB);
    exp_table_set(t, r, 2, (double)on.peak_tensor_bytes / GB);
    exp_table_set(t, r, 3, (double)off.peak_tensor_bytes / GB);
    exp_table_set(t, r, 4, 100.0 * (1 - (double)off.peak_tensor_bytes /
                                           (double)on.peak_tensor_bytes));
    exp_table_set(t, r, 5, on.step_time_s * 1e3);
    exp_table_set(t, r, 6, off.step_time_s * 1e3);
    for (int i = 0; i < 4; i++)
        exp_table_set(t, r, (size_t)(7 + i + (i > 1)), ctx[i]);
    *ratio = ctx[0] > 0 ? ctx[1] / ctx[0] : NAN;
    exp_table_set(t, r, 9, *ratio);
    return CHAM_OK;
}

static cham_status_t bandwidth_rows(const exp_config_t *c, uint32_t prompt,
                                    exp_table_t *t, plot_t *pl, double *lowest, char *err,
                                    size_t err_size)
{
    static const double full[] = {16, 32, 64, 128, 256, 512, 768, 1024, 1536, 2048};
    static const double reduced[] = {32, 256, 1024, 2048};
    const double *bw = c->reduced ? reduced : full;
    size_t n = c->reduced ? sizeof reduced / sizeof *bw : sizeof full / sizeof *bw;
    *lowest = NAN;
    for (size_t i = 0; i < n; i++) {
        infer_setup_t s = {.device = c->device, .bandwidth = bw[i] * GB};
        cham_run_result_t on, off;
        cham_status_t st;
        if ((st = infer(c, &s, prompt, false, CHAM_STRATEGY_NATIVE, &on, err, err_size)) ||
            (st = infer(c, &s, prompt, true, CHAM_STRATEGY_NATIVE, &off, err, err_size)))
            return st;
        double pen = on.status == CHAM_OK && off.status == CHAM_OK
                         ? 100.0 * (off.step_time_s / on.step_time_s - 1) : NAN;
        long row = exp_table_add_row(t);
        if (row < 0)
            return CHAM_ERR_HOST_OOM;
        exp_table_set(t, (size_t)row, 0, bw[i]);
        exp_table_set(t, (size_t)row, 1, on.step_time_s * 1e3);
        exp_table_set(t, (size_t)row, 2, off.step_time_s * 1e3);
        exp_table_set(t, (size_t)row, 3, pen);
        exp_table_set_text(t, (size_t)row, 4, "%s", pen <= 10 ? "yes" : "no");
        plot_add(pl, "KV caches on the device", bw[i], on.step_time_s * 1e3);
        plot_add(pl, "KV caches offloaded", bw[i], off.step_time_s * 1e3);
        if (pen <= 10 && isnan(*lowest))
            *lowest = bw[i];
    }
    return CHAM_OK;
}

static void last_peak(const cham_run_step_t *step, void *user)
{
    *(uint64_t *)user = step->peak_bytes;
}

/* A training run's step time and its last step's peak of tensors (the
 * plan's, not that of the first steps, which run before any plan). */
static cham_status_t train(const exp_config_t *c, const cham_model_config_t *m,
                           cham_strategy_t strategy, uint64_t capacity, cham_run_result_t *r,
                           uint64_t *peak, char *err, size_t err_size)
{
    cham_run_config_t rc = cham_run_config_default();
    rc.plan_optimizer = false;      /* the optimizer where the row says */
    rc.model = *m;
    rc.strategy = strategy;
    rc.steps = EXP_STABLE_STEPS;
    rc.runtime.device.preset = c->device;
    rc.runtime.device.capacity = capacity;
    rc.on_step = last_peak;
    rc.user = peak;
    cham_status_t st = cham_run(&rc, r);
    if (st != CHAM_OK)
        snprintf(err, err_size, "kv-offload: %s", r->error);
    else if (c->progress)
        fprintf(stderr, "  %-12s %-12s %.1f GiB  %s\n", c->device, cham_strategy_name(strategy),
                (double)capacity / (1u << 30),
                r->status == CHAM_OK ? "ok" : cham_status_string(r->status));
    return st;
}

static cham_status_t training_rows(const exp_config_t *c, exp_table_t *t, char *err,
                                   size_t err_size)
{
    exp_setup_t s[2];
    exp_training_setups(s);
    cham_model_config_t m = s[0].m;
    if (c->reduced) {
        m.layers = 4;
        m.seq = 1024;
    }
    cham_run_result_t ideal;
    uint64_t peak[2];
    cham_status_t st = train(c, &m, CHAM_STRATEGY_IDEAL, 0, &ideal, &peak[0], err, err_size);
    if (st != CHAM_OK)
        return st;
    static const double ratios[] = {1, 1.25, 1.5, 2};
    for (size_t i = 0; i < sizeof ratios / sizeof *ratios; i++) {
        uint64_t cap = (uint64_t)((double)ideal.peak_device_bytes / ratios[i]) &
                       ~((UINT64_C(1) << 20) - 1);
        cham_run_result_t x[2];
        if ((st = train(c, &m, CHAM_STRATEGY_HYPEROFFLOAD, cap, &x[0], &peak[0], err,
                        err_size)) ||
            (st = train(c, &m, CHAM_STRATEGY_CHAMELEON, cap, &x[1], &peak[1], err, err_size)))
            return st;
        long row = exp_table_add_row(t);
        if (row < 0)
            return CHAM_ERR_HOST_OOM;
        size_t r = (size_t)row;
        exp_table_set_text(t, r, 0, "%.2fx", ratios[i]);
        exp_table_set(t, r, 1, (double)cap / (1u << 30));
        exp_table_set(t, r, 2, ideal.step_time_s);
        for (int k = 0; k < 2; k++) {
            bool ok = x[k].status == CHAM_OK;
            exp_table_set(t, r, (size_t)(3 + 2 * k),
                          ok ? 100.0 * (x[k].step_time_s / ideal.step_time_s - 1) : NAN);
            exp_table_set(t, r, (size_t)(4 + 2 * k), ok ? (double)peak[k] / GB : NAN);
        }
    }
    return CHAM_OK;
}

static cham_status_t run(const exp_config_t *c, exp_result_t *r, char *err, size_t err_size)
{
    const char *cols[] = {"device", "KV caches GB", "peak GB", "peak offloaded GB",
                          "peak reduction %", "decode ms", "decode offloaded ms",
                          "max context", "max context offloaded", "ratio",
                          "max context hyperoffload", "max context chameleon"};
    exp_table_t *t = exp_result_table(r, "kv-offload",
                                      "KV-cache offload: peak, decode time per token and the "
                                      "longest context (llama3-8b, batch 4, simulated)",
                                      12, cols);
    const char *bcols[] = {"link GB/s", "decode ms", "decode offloaded ms", "penalty %",
                           "within 10%"};
    exp_table_t *bt = exp_result_table(r, "kv-offload-bandwidth",
                                       "Decode time per token against the host link "
                                       "(simulated)", 5, bcols);
    const char *tcols[] = {"capacity", "GiB", "ideal s", "hyperoffload overhead %",
                           "hyperoffload last-step peak GB", "chameleon overhead %",
                           "chameleon last-step peak GB"};
    exp_table_t *tt = exp_result_table(r, "kv-offload-training",
                                       "Training: the hyperoffload and chameleon planners "
                                       "(llama2-7b, mbs 4, dp 8, ZeRO-3, simulated)", 7, tcols);
    plot_t *pl = exp_result_plot(r, "kv-offload-bandwidth",
                                 "Decode time per token against the host link",
                                 "link GB/s (each direction)", "ms a token");
    if (!t || !bt || !tt || !pl)
        return CHAM_ERR_HOST_OOM;
    /* Inference runs take milliseconds: reduced differs only in the
     * bandwidths swept and the training model's size. */
    uint32_t prompt = 32768;
    const char *other = strcmp(c->device, "h100-80g") == 0 ? "ascend-910b" : "h100-80g";
    const char *devices[2] = {c->device, other};
    double ratio[2] = {NAN, NAN}, lowest;
    cham_status_t st;
    for (int i = 0; i < 2; i++) {
        infer_setup_t s = {.device = devices[i], .prompt = prompt};
        if ((st = table_row(c, &s, t, &ratio[i], err, err_size)) != CHAM_OK)
            return st;
    }
    if ((st = bandwidth_rows(c, prompt, bt, pl, &lowest, err, err_size)) ||
        (st = training_rows(c, tt, err, err_size)))
        return st;
    snprintf(r->summary, sizeof r->summary,
             "Offloading the KV caches lengthens the longest context %.2fx on %s and %.2fx on "
             "%s. Decoding then waits for the link: on %s the penalty stays within 10%% from "
             "%.0f GB/s each way on.", ratio[0], devices[0], ratio[1], devices[1], c->device,
             lowest);
    return CHAM_OK;
}

const exp_def_t exp_kv_offload = {
    .name = "kv-offload",
    .what = "KV-cache offload for long-context decoding; HyperOffload's planner (issue 22)",
    .device = "ascend-910b",
    .run = run,
};
