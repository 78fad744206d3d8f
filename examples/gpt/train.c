/* Training the GPT model (train.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "decode.h"
#include "train.h"
#include "common/rng.h" /* header-only (src/, private): the public API stays the only link */

#define GiB (UINT64_C(1) << 30)
/* The loss scale starts here, halves on an overflow and doubles after this
 * many steps without one (the usual dynamic loss scaler). */
#define SCALE_START 4096.0f
#define SCALE_GROWTH_STEPS 100

gpt_train_config_t gpt_train_config_default(void)
{
    return (gpt_train_config_t){
        .shape = {.vocab = 0, .seq = 128, .layers = 4, .hidden = 32, .heads = 2, .batch = 8},
        .steps = 200,
        .lr = 3e-3f,
        .weight_decay = 0.01f,
        .clip = 1.0f,
        .seed = 1,
        .budget_fraction = 0.5,
        .strategy = CHAM_STRATEGY_CHAMELEON,
        .validate_every = 50,
        .loss_scaling = true,
        .drop_prob = 0.02,
        .min_swap_bytes = GPT_MIN_SWAP_DEFAULT,
        .prompt = 16,
    };
}

/* One training run: a context, the model and the loss scaler. */
typedef struct run {
    cham_context_t *ctx;
    gpt_ops_t ops;
    gpt_model_t *model;
    float scale;
    int good_steps;              /* since the last overflow or growth */
    int adam_t;                  /* optimizer steps taken */
    uint64_t cpu_ns;             /* CPU time spent running it */
    int32_t *tok, *tgt;          /* a batch on the host */
    cham_trace_t *trace;         /* its timeline, or NULL */
} run_t;

static void quiet(const char *line, void *user)
{
    (void)line, (void)user;
}

/* The allocator's granularity follows the capacity (the config's default,
 * cham_allocator_shift_for). */
static cham_status_t run_open(run_t *r, const gpt_train_config_t *c, uint64_t capacity,
                              char *err, size_t err_size)
{
    memset(r, 0, sizeof *r);
    cham_config_t cfg = cham_config_default();
    cfg.allocator = c->allocator;
    cfg.device.preset = c->preset;
    cfg.device.capacity = capacity;
    cfg.device.data = true;
    cfg.device.hazard_check = true;
    cfg.pinned_budget = 64 * GiB;
    cfg.min_swap_bytes = c->min_swap_bytes;
    cham_status_t st = cham_strategy_apply(c->strategy, &cfg);
    if (st == CHAM_OK && c->strategy == CHAM_STRATEGY_IDEAL)
        st = CHAM_ERR_INVALID_ARG;    /* the budget is the point of training here */
    if (st != CHAM_OK) {
        snprintf(err, err_size, "strategy %s cannot train (chameleon, chameleon-swap, native, "
                 "recompute, capuchin, vdnn, protrain, swapadvisor or hyperoffload can)", cham_strategy_name(c->strategy));
        return st;
    }
    st = cham_context_new(&cfg, &r->ctx);
    if (st != CHAM_OK) {
        snprintf(err, err_size, "%s", cham_context_last_error(NULL));
        return st;
    }
    if (!c->log)
        cham_context_set_log(r->ctx, quiet, NULL);
    size_t n = (size_t)c->shape.batch * (size_t)c->shape.seq;
    r->tok = malloc(n * sizeof *r->tok);
    r->tgt = malloc(n * sizeof *r->tgt);
    if (!r->tok || !r->tgt) {
        snprintf(err, err_size, "out of host memory");
        return CHAM_ERR_HOST_OOM;
    }
    uint64_t t0 = gpt_cpu_ns();
    st = gpt_ops_init(&r->ops, r->ctx);
    if (st == CHAM_OK && cfg.recompute && cfg.mode == CHAM_MODE_MANAGED && cfg.executor)
        gpt_ops_enable_recompute(&r->ops);
    char why[512] = "";
    if (st == CHAM_OK)
        st = gpt_model_new(&r->ops, &c->shape, c->seed, c->host_optimizer, &r->model, why,
                           sizeof why);
    if (st == CHAM_OK)
        gpt_model_set_recompute(r->model, c->strategy == CHAM_STRATEGY_RECOMPUTE);
    /* Initialisation is a step of its own: training steps start clean. */
    if (st == CHAM_OK && (st = cham_step_end(r->ctx)) != CHAM_OK)
        snprintf(why, sizeof why, "%s", cham_context_last_error(r->ctx));
    r->cpu_ns += gpt_cpu_ns() - t0;
    if (st != CHAM_OK)
        snprintf(err, err_size, "making the model: %s",
                 why[0] ? why : cham_context_last_error(r->ctx));
    r->scale = c->loss_scaling ? SCALE_START : 1.0f;
    return st;
}

static void run_close(run_t *r)
{
    if (r->trace) {
        cham_device_synchronize(cham_context_device(r->ctx));
        cham_trace_close(r->trace, NULL, 0);
    }
    gpt_model_free(r->model);
    if (r->ctx)
        cham_context_free(r->ctx);
    free(r->tok);
    free(r->tgt);
    memset(r, 0, sizeof *r);
}

static double sim_now_s(const run_t *r)
{
    return (double)cham_device_host_time(cham_context_device(r->ctx)) / 1e9;
}

/* Stochastic depth: block l is skipped in step with probability p, from a
 * hash of (seed, step, l); never every block. */
static int choose_skips(const gpt_train_config_t *c, int step, bool *skip)
{
    int n = 0;
    for (int l = 0; l < c->shape.layers; l++) {
        uint64_t h = c->seed * CHAM_GOLDEN64 ^ ((uint64_t)step << 20) ^ (uint64_t)l;
        skip[l] = cham_unit53(cham_mix64_short(h)) < c->drop_prob;
        n += skip[l];
    }
    if (n == c->shape.layers) {
        skip[0] = false;
        n--;
    }
    return n;
}

static bool overflow_injected(const gpt_train_config_t *c, int step)
{
    for (size_t i = 0; i < c->n_overflow_at; i++)
        if (c->overflow_at[i] == (uint64_t)step)
            return true;
    return false;
}

/* One training step of run r. */
static cham_status_t train_step(run_t *r, const gpt_train_config_t *c, const gpt_data_t *d,
                                int step, const bool *skip, gpt_step_info_t *info)
{
    uint64_t t0 = gpt_cpu_ns();
    cham_step_set_number(r->ctx, (uint64_t)step);     /* the console's number */
    gpt_data_batch(d, 0, c->seed, (uint64_t)step, c->shape.batch, c->shape.seq, r->tok, r->tgt);
    double loss = 0, sumsq = 0;
    bool overflow = false;
    cham_status_t st = gpt_forward(r->model, r->tok, r->tgt, skip, true, &loss);
    if (st == CHAM_OK)
        st = gpt_backward(r->model, r->scale);
    if (st == CHAM_OK && overflow_injected(c, step))
        st = gpt_inject_overflow(r->model);
    if (st == CHAM_OK)
        st = gpt_check_grads(r->model, &overflow, &sumsq);
    info->loss = loss;
    info->loss_scale = r->scale;
    info->skipped_update = overflow;
    if (st == CHAM_OK && overflow) {
        st = gpt_zero_grads(r->model);
        if (c->loss_scaling)
            r->scale = r->scale > 1.0f ? r->scale / 2 : 1.0f;
        r->good_steps = 0;
    } else if (st == CHAM_OK) {
        double norm = sqrt(sumsq) / r->scale;
        double factor = 1.0 / r->scale;
        if (c->clip > 0 && norm > c->clip)
            factor *= c->clip / norm;
        st = gpt_optimizer_step(r->model, (float)factor, ++r->adam_t, c->lr, c->weight_decay);
        if (c->loss_scaling && ++r->good_steps == SCALE_GROWTH_STEPS) {
            r->scale *= 2;
            r->good_steps = 0;
        }
    }
    if (st == CHAM_OK)
        st = cham_step_end(r->ctx);
    r->cpu_ns += gpt_cpu_ns() - t0;
    return st;
}

static cham_status_t validation_step(run_t *r, const gpt_train_config_t *c,
                                     const gpt_data_t *d, int step, double *loss)
{
    uint64_t t0 = gpt_cpu_ns();
    cham_step_set_number(r->ctx, (uint64_t)step);     /* "val <step>" on the console */
    gpt_data_batch(d, 1, c->seed, (uint64_t)step, c->shape.batch, c->shape.seq, r->tok, r->tgt);
    cham_status_t st = gpt_forward(r->model, r->tok, r->tgt, NULL, false, loss);
    if (st == CHAM_OK)
        st = cham_step_end(r->ctx);
    r->cpu_ns += gpt_cpu_ns() - t0;
    return st;
}

/* The largest working set of one op in a profile: the bytes of the
 * distinct storages it reads and writes, with its op's name. */
static uint64_t largest_op(const cham_profile_t *p, const char **name)
{
    cham_profile_view_t v;
    cham_profile_get(p, &v);
    uint64_t best = 0;
    for (size_t o = 0; o < v.n_ops; o++) {
        const cham_profile_op_t *op = &v.ops[o];
        uint64_t sum = 0;
        for (uint32_t k = 0; k < op->n_uses; k++) {
            const cham_tensor_use_t *u = &v.uses[op->first_use + k];
            bool seen = false;
            for (uint32_t j = 0; j < k && !seen; j++)
                seen = v.uses[op->first_use + j].storage == u->storage;
            sum += seen ? 0 : u->storage_bytes;
        }
        if (sum > best) {
            best = sum;
            *name = (size_t)op->token < v.n_tokens ? v.token_names[op->token] : "?";
        }
    }
    return best;
}

/* One training step of the whole model, unconstrained and profiled: its
 * peak and its largest op. */
/* The unconstrained step: its peak, its largest op and (protrain, into
 * *pt) ProTrain's model of it. */
static cham_status_t measure(const gpt_train_config_t *c, const gpt_data_t *d,
                             gpt_train_result_t *res, cham_protrain_model_t **pt, char *err,
                             size_t err_size)
{
    run_t r;
    gpt_train_config_t plain = *c;
    plain.strategy = CHAM_STRATEGY_CHAMELEON;
    cham_status_t st = run_open(&r, &plain, 0, err, err_size);
    gpt_step_info_t info;
    if (st == CHAM_OK) {
        cham_context_request_profile(r.ctx);
        if ((st = train_step(&r, &plain, d, 0, NULL, &info)) != CHAM_OK)
            snprintf(err, err_size, "measuring the unconstrained peak: %s",
                     cham_context_last_error(r.ctx));
    }
    if (st == CHAM_OK) {
        cham_runtime_stats_t s;
        cham_context_get_stats(r.ctx, &s);
        res->unconstrained_peak_bytes = s.mem_peak;
        const cham_profile_t *p = cham_context_last_profile(r.ctx);
        const char *name = "?";
        res->largest_op_bytes = p ? largest_op(p, &name) : 0;
        snprintf(res->largest_op, sizeof res->largest_op, "%s", name);
        if (c->strategy == CHAM_STRATEGY_PROTRAIN) {
            cham_device_info_t di;
            cham_device_get_info(cham_context_device(r.ctx), &di);
            cham_protrain_device_t dev = cham_protrain_device_of(&di);
            st = p ? cham_protrain_model_new(p, &dev, pt, err, err_size) : CHAM_ERR_INVALID_ARG;
        }
    }
    run_close(&r);
    return st;
}

/* ProTrain's search for the trainer: every chunk stays on the device (the
 * parameters are one storage), the blocks' modes are planned for the
 * budget (0: the preset's capacity). */
static cham_status_t protrain_plan(run_t *r, const cham_protrain_model_t *pt, uint64_t budget,
                                   cham_protrain_plan_t *plan, char *err, size_t err_size)
{
    cham_device_info_t info;
    cham_device_get_info(cham_context_device(r->ctx), &info);
    cham_protrain_device_t dev = cham_protrain_device_of(&info);
    dev.capacity = budget ? budget : info.capacity;
    dev.min_persist = cham_protrain_chunks(pt);
    return cham_protrain_search(pt, &dev, plan, err, err_size);
}

/* The step's figures from run r's counters before (s0, t0) and now. */
static void step_figures(run_t *r, const cham_runtime_stats_t *s0, double t0,
                         gpt_step_info_t *info)
{
    cham_runtime_stats_t s;
    cham_context_get_stats(r->ctx, &s);
    info->peak_bytes = s.mem_peak;
    info->swapped_bytes = s.bytes_out + s.bytes_in - s0->bytes_out - s0->bytes_in;
    info->passive = s.passive_swaps_out - s0->passive_swaps_out;
    info->on_demand = s.on_demand_swaps_in - s0->on_demand_swaps_in;
    info->sim_step_s = sim_now_s(r) - t0;
    info->stage = cham_context_stage(r->ctx);
    info->stable = info->stage == CHAM_STAGE_STABLE && s.stage_changes == s0->stage_changes;
    cham_context_reset_peak(r->ctx);
}

/* A step's misses count when it ran Stable throughout. */
static void count_stable(gpt_train_result_t *res, const gpt_step_info_t *info)
{
    res->stable_steps += info->stable;
    res->stable_passive += info->stable ? info->passive : 0;
    res->stable_on_demand += info->stable ? info->on_demand : 0;
}

static cham_status_t fail(run_t *r, int step, const char *what, cham_status_t st, char *err,
                          size_t err_size)
{
    snprintf(err, err_size, "step %d (%s): %s", step, what, cham_context_last_error(r->ctx));
    return st;
}

/* After training: both runs decode the same prompts (the reference with
 * its caches on the device) and their tokens are compared. */
static cham_status_t decode(run_t *a, run_t *b, const gpt_train_config_t *c,
                            const gpt_data_t *d, gpt_train_result_t *res, char *err,
                            size_t err_size)
{
    int B = c->shape.batch, T = c->shape.seq;
    size_t n = (size_t)B * (size_t)c->generate;
    int32_t *prompt = malloc((size_t)B * (size_t)(c->prompt > 0 ? c->prompt : 1) *
                             sizeof *prompt);
    int32_t *got = malloc(n * sizeof *got), *want = malloc(n * sizeof *want);
    cham_status_t st = CHAM_OK;
    if (!prompt || !got || !want) {
        snprintf(err, err_size, "decode: out of host memory");
        st = CHAM_ERR_HOST_OOM;
    }
    if (st == CHAM_OK) {
        gpt_data_batch(d, 1, c->seed, 0, B, T, a->tok, a->tgt);
        for (int s = 0; s < B; s++)
            for (int p = 0; p < c->prompt && p < T; p++)
                prompt[(size_t)s * c->prompt + p] = a->tok[(size_t)s * T + p];
        gpt_decode_config_t dc = {.prompt = c->prompt, .generate = c->generate,
                                  .kv_offload = c->kv_offload};
        st = gpt_decode(a->model, &dc, prompt, got, err, err_size);
        dc.kv_offload = false;
        if (st == CHAM_OK && b && (st = gpt_decode(b->model, &dc, prompt, want, err,
                                                   err_size)) != CHAM_OK) {
            size_t len = strlen(err);
            snprintf(err + len, err_size - len, " (the unconstrained reference)");
        }
    }
    if (st == CHAM_OK) {
        res->decoded = c->generate;
        for (size_t i = 0; i < 8 && i < (size_t)c->generate; i++)
            res->first_tokens[i] = got[i];
        res->decode_bit_exact = b && memcmp(got, want, n * sizeof *got) == 0;
        res->bit_exact = res->bit_exact && (!b || res->decode_bit_exact);
    }
    free(prompt);
    free(got);
    free(want);
    return st;
}

/* gpt_train's inputs checked, and the config it runs (the data's vocab). */
static cham_status_t check_inputs(const gpt_train_config_t *c, const gpt_data_t *d,
                                  gpt_train_config_t *cfg, char *err, size_t err_size)
{
    *cfg = *c;
    cfg->shape.vocab = d->vocab;
    const gpt_shape_t *shape = &cfg->shape;
    if (gpt_shape_check(shape, err, err_size) != 0)
        return CHAM_ERR_INVALID_ARG;
    gpt_decode_config_t dc = {.prompt = c->prompt, .generate = c->generate};
    if (c->generate > 0 && !gpt_decode_check(shape, &dc, err, err_size))
        return CHAM_ERR_INVALID_ARG;
    if (shape->seq > gpt_data_max_seq(d)) {
        snprintf(err, err_size, "seq: %d is longer than the data allows (%zu tokens: each "
                 "split must hold seq + 1, the validation tenth %zu; at most %ld)", shape->seq,
                 d->n, d->n - d->n_train, gpt_data_max_seq(d));
        return CHAM_ERR_INVALID_ARG;
    }
    if (c->strategy == CHAM_STRATEGY_ZERO_OFFLOAD) {
        snprintf(err, err_size, "strategy zero-offload moves every chunk of parameters to the "
                 "host, and the trainer's parameters are one storage that stays on the device "
                 "(chameleon simulate runs it)");
        return CHAM_ERR_INVALID_ARG;
    }
    if (c->strategy == CHAM_STRATEGY_PROTRAIN && c->host_optimizer) {
        snprintf(err, err_size, "strategy protrain decides where the optimizer runs: drop "
                 "--optimizer host");
        return CHAM_ERR_INVALID_ARG;
    }
    return CHAM_OK;
}

/* The set-up: the unconstrained peak measured, the budget (*budget), the
 * managed run a (ProTrain's blocks, the trace) and, to verify, the
 * unconstrained reference b (zeroed otherwise). Both closed on failure. */
static cham_status_t set_up(const gpt_train_config_t *cfg, const gpt_data_t *d,
                            gpt_train_result_t *res, run_t *a, run_t *b, uint64_t *budget,
                            char *err, size_t err_size)
{
    memset(a, 0, sizeof *a);
    memset(b, 0, sizeof *b);
    cham_protrain_model_t *pt = NULL;
    cham_status_t st = measure(cfg, d, res, &pt, err, err_size);
    if (st != CHAM_OK)
        return st;
    *budget = cfg->budget_fraction > 0
                  ? (uint64_t)(cfg->budget_fraction * (double)res->unconstrained_peak_bytes)
                  : cfg->budget;
    res->budget_bytes = *budget;
    if (*budget && *budget < res->largest_op_bytes) {
        snprintf(err, err_size, "budget %llu bytes is below the largest single op's working "
                 "set: %s needs %llu bytes at once (the unconstrained peak is %llu)",
                 (unsigned long long)*budget, res->largest_op,
                 (unsigned long long)res->largest_op_bytes,
                 (unsigned long long)res->unconstrained_peak_bytes);
        cham_protrain_model_free(pt);
        return CHAM_ERR_INVALID_ARG;
    }
    cham_protrain_plan_t plan = {0};
    if ((st = run_open(a, cfg, *budget, err, err_size)) != CHAM_OK ||
        (pt && (st = protrain_plan(a, pt, *budget, &plan, err, err_size)) != CHAM_OK) ||
        (cfg->trace_path &&
         (st = cham_trace_open(a->ctx, cfg->trace_path, &a->trace, err, err_size)) != CHAM_OK)) {
        cham_protrain_model_free(pt);
        run_close(a);
        return st;
    }
    if (pt) {
        cham_protrain_model_free(pt);
        gpt_model_set_blocks(a->model, &plan.config);
        res->has_protrain = true;
        res->protrain = plan.config;
        res->predicted_step_s = plan.estimate.step_ns * 1e-9;
        res->predicted_peak_bytes = plan.estimate.peak_bytes;
    }
    if (cfg->on_context)
        cfg->on_context(a->ctx, cfg->on_context_user);
    /* The reference: unlimited memory, nothing managed, nothing recomputed. */
    gpt_train_config_t plain = *cfg;
    plain.strategy = CHAM_STRATEGY_CHAMELEON;
    plain.host_optimizer = false;
    if (cfg->verify && (st = run_open(b, &plain, 0, err, err_size)) != CHAM_OK) {
        run_close(a);
        run_close(b);
        return st;
    }
    return CHAM_OK;
}

/* What the steps add up to, for the results. */
typedef struct totals {
    double train_sim, train_ideal;        /* simulated s of training steps, a and b */
    uint64_t ideal_kernels, ideal_dispatch_ns, ideal_busy_ns;   /* the reference's */
} totals_t;

static void note_peak(gpt_train_result_t *res, const gpt_step_info_t *info)
{
    if (info->peak_bytes > res->peak_device_bytes)
        res->peak_device_bytes = info->peak_bytes;
}

/* One training step on a and, to verify, on the reference b, the losses
 * compared; *info is the step's. */
static cham_status_t verified_step(run_t *a, run_t *b, const gpt_train_config_t *cfg,
                                   const gpt_data_t *d, int step, const bool *skip,
                                   gpt_step_info_t *info, totals_t *t, gpt_train_result_t *res,
                                   char *err, size_t err_size)
{
    cham_runtime_stats_t s0;
    cham_context_get_stats(a->ctx, &s0);
    double t0 = sim_now_s(a);
    if ((cfg->profile_path || cfg->on_finish) && step + 1 == cfg->steps)
        cham_context_request_profile(a->ctx);      /* the last step's, to save */
    cham_status_t st = train_step(a, cfg, d, step, skip, info);
    if (st != CHAM_OK)
        return fail(a, step, "training", st, err, err_size);
    step_figures(a, &s0, t0, info);
    count_stable(res, info);
    note_peak(res, info);
    t->train_sim += info->sim_step_s;
    res->layers_skipped += (uint64_t)info->layers_skipped;
    res->skipped_updates += info->skipped_update;
    if (!cfg->verify)
        return CHAM_OK;
    gpt_step_info_t ref = {0};
    double r0 = sim_now_s(b);
    cham_sim_stats_t b0, b1;
    bool sim_b = cham_sim_get_stats(cham_context_device(b->ctx), &b0) == CHAM_OK;
    if ((st = train_step(b, cfg, d, step, skip, &ref)) != CHAM_OK)
        return fail(b, step, "the unconstrained reference", st, err, err_size);
    t->train_ideal += sim_now_s(b) - r0;
    if (sim_b && cham_sim_get_stats(cham_context_device(b->ctx), &b1) == CHAM_OK) {
        /* Where the ideal step's time goes: the host dispatching
         * (launches, copies, event calls) or the device computing. */
        uint64_t busy = 0;
        for (int k = 0; k < CHAM_SIM_MAX_STREAMS; k++)
            busy += b1.stream_busy_ns[k] - b0.stream_busy_ns[k];
        t->ideal_kernels += b1.kernels - b0.kernels;
        t->ideal_dispatch_ns += (b1.host_ns - b0.host_ns) -
                                (b1.host_blocked_ns - b0.host_blocked_ns);
        t->ideal_busy_ns += busy;
    }
    info->verified = ref.loss == info->loss;
    res->bit_exact = res->bit_exact && info->verified;
    return CHAM_OK;
}

/* The validation after `step` on a and, to verify, on b; *v is its. */
static cham_status_t verified_validation(run_t *a, run_t *b, const gpt_train_config_t *cfg,
                                         const gpt_data_t *d, int step, gpt_step_info_t *v,
                                         gpt_train_result_t *res, char *err, size_t err_size)
{
    cham_runtime_stats_t s0;
    cham_context_get_stats(a->ctx, &s0);
    double t0 = sim_now_s(a);
    cham_status_t st = validation_step(a, cfg, d, step, &v->loss);
    if (st != CHAM_OK)
        return fail(a, step, "validation", st, err, err_size);
    step_figures(a, &s0, t0, v);
    count_stable(res, v);
    note_peak(res, v);
    if (cfg->verify) {
        double ref_loss = 0;
        if ((st = validation_step(b, cfg, d, step, &ref_loss)) != CHAM_OK)
            return fail(b, step, "the reference's validation", st, err, err_size);
        v->verified = ref_loss == v->loss;
        res->bit_exact = res->bit_exact && v->verified;
    }
    res->validations++;
    res->final_val_loss = v->loss;
    return CHAM_OK;
}

/* The parameters of a and b, byte for byte, into res->bit_exact. */
static cham_status_t compare_params(run_t *a, run_t *b, gpt_train_result_t *res, char *err,
                                    size_t err_size)
{
    size_t n = gpt_param_count(a->model);
    float *pa = malloc(n * sizeof *pa), *pb = malloc(n * sizeof *pb);
    cham_status_t st = CHAM_OK;
    if (!pa || !pb) {
        snprintf(err, err_size, "out of host memory comparing the parameters");
        st = CHAM_ERR_HOST_OOM;
    } else if ((st = gpt_read_params(a->model, pa)) != CHAM_OK ||
               (st = gpt_read_params(b->model, pb)) != CHAM_OK) {
        snprintf(err, err_size, "reading the parameters back");
    } else {
        res->bit_exact = res->bit_exact && memcmp(pa, pb, n * sizeof *pa) == 0;
    }
    free(pa);
    free(pb);
    return st;
}

/* The run's figures into res: the runtime's counters, simulated times
 * against the reference's, the host overhead. */
static void results(run_t *a, run_t *b, const gpt_train_config_t *cfg, const totals_t *t,
                    double sim0, double ideal0, cham_status_t st, gpt_train_result_t *res)
{
    cham_runtime_stats_t s;
    cham_context_get_stats(a->ctx, &s);
    res->hazards = cham_device_hazard_count(cham_context_device(a->ctx));
    res->oom = st == CHAM_ERR_OUT_OF_MEMORY;
    res->stage_changes = s.stage_changes;
    res->policy_regenerations = s.policies_generated;
    res->on_demand_swapins = s.on_demand_swaps_in;
    res->passive_swapouts = s.passive_swaps_out;
    res->drops = s.drops;
    res->recomputes = s.recomputes;
    res->swapped_bytes = s.bytes_out + s.bytes_in;
    res->sim_time_s = sim_now_s(a) - sim0;
    res->sim_step_time_s = res->steps ? t->train_sim / res->steps : 0;
    /* The bytes of swaps are moved by the host here, by a copy engine on
     * hardware, and a trace is written: that CPU time (inside Chameleon's
     * calls) is not counted. */
    cham_sim_stats_t sim;
    uint64_t copies = cham_sim_get_stats(cham_context_device(a->ctx), &sim) == CHAM_OK
                          ? sim.data_copy_cpu_ns : 0;
    copies += cham_trace_cpu_ns(a->trace);  /* writing the trace is not Chameleon's work */
    uint64_t hooks = a->ops.hook_ns > copies ? a->ops.hook_ns - copies : 0;
    uint64_t total = a->cpu_ns > copies ? a->cpu_ns - copies : 0;
    /* When the copies and the trace took more than all the time inside the
     * calls, what is left is below what this measures: NaN, said so. */
    res->host_overhead_ratio = !total                            ? 0
                               : a->ops.hook_ns && hooks == 0 ? NAN
                                                              : (double)hooks / (double)total;
    if (!cfg->verify)
        return;
    res->ideal_time_s = sim_now_s(b) - ideal0;
    res->ideal_step_time_s = res->steps ? t->train_ideal / res->steps : 0;
    if (res->ideal_step_time_s > 0)
        res->overhead_vs_ideal = res->sim_step_time_s / res->ideal_step_time_s - 1;
    if (res->steps) {
        res->ideal_kernels_per_step = (double)t->ideal_kernels / res->steps;
        res->ideal_dispatch_s_per_step = (double)t->ideal_dispatch_ns * 1e-9 / res->steps;
        res->ideal_busy_s_per_step = (double)t->ideal_busy_ns * 1e-9 / res->steps;
    }
    res->hazards += cham_device_hazard_count(cham_context_device(b->ctx));
}

cham_status_t gpt_train(const gpt_train_config_t *c, const gpt_data_t *d,
                        gpt_progress_fn progress, void *user, gpt_train_result_t *res,
                        char *err, size_t err_size)
{
    memset(res, 0, sizeof *res);
    res->final_train_loss = res->final_val_loss = res->first_train_loss = NAN;
    res->overhead_vs_ideal = NAN;
    gpt_train_config_t cfg;
    uint64_t budget;
    run_t a, b;
    cham_status_t st = check_inputs(c, d, &cfg, err, err_size);
    if (st != CHAM_OK || (st = set_up(&cfg, d, res, &a, &b, &budget, err, err_size)) != CHAM_OK)
        return st;
    res->param_count = gpt_param_count(a.model);
    res->verified = c->verify;
    res->bit_exact = c->verify;
    bool *skip = calloc((size_t)cfg.shape.layers, sizeof *skip);
    if (!skip) {
        snprintf(err, err_size, "out of host memory");
        st = CHAM_ERR_HOST_OOM;
    }
    double sim0 = sim_now_s(&a), ideal0 = c->verify ? sim_now_s(&b) : 0;
    totals_t t = {0};
    for (int step = 0; st == CHAM_OK && step < c->steps; step++) {
        gpt_step_info_t info = {.step = step, .budget = budget};
        info.layers_skipped = c->drop_prob > 0 ? choose_skips(&cfg, step, skip) : 0;
        st = verified_step(&a, &b, &cfg, d, step, c->drop_prob > 0 ? skip : NULL, &info, &t,
                           res, err, err_size);
        if (st != CHAM_OK)
            break;
        if (step == 0)
            res->first_train_loss = info.loss;
        res->final_train_loss = info.loss;
        res->steps = step + 1;
        if (progress)
            progress(&info, user);
        if (c->validate_every > 0 && (step + 1) % c->validate_every == 0) {
            gpt_step_info_t v = {.step = step, .validation = true, .budget = budget};
            if ((st = verified_validation(&a, &b, &cfg, d, step, &v, res, err, err_size)) !=
                CHAM_OK)
                break;
            if (progress)
                progress(&v, user);
        }
    }
    free(skip);
    if (st == CHAM_OK && c->verify)
        st = compare_params(&a, &b, res, err, err_size);

    const cham_policy_t *pol = cham_context_policy(a.ctx);
    if (st == CHAM_OK && c->policy_path && pol)
        st = cham_policy_save_json(pol, c->policy_path, err, err_size);
    const cham_profile_t *last = cham_context_last_profile(a.ctx);
    if (st == CHAM_OK && c->profile_path &&
        (st = last ? cham_profile_save_json(last, c->profile_path, err, err_size)
                   : CHAM_ERR_INVALID_ARG) != CHAM_OK && !last)
        snprintf(err, err_size, "no detailed profile of the last step was made");
    if (c->on_finish)
        c->on_finish(st == CHAM_OK ? last : NULL, pol, c->on_finish_user);
    if (st == CHAM_OK && c->generate > 0)
        st = decode(&a, c->verify ? &b : NULL, &cfg, d, res, err, err_size);
    results(&a, &b, &cfg, &t, sim0, ideal0, st, res);
    /* A trace that could not be written is the run's failure. */
    if (a.trace) {
        cham_device_synchronize(cham_context_device(a.ctx));
        cham_status_t tst = cham_trace_close(a.trace, st == CHAM_OK ? err : NULL,
                                             st == CHAM_OK ? err_size : 0);
        a.trace = NULL;
        if (st == CHAM_OK)
            st = tst;
    }
    run_close(&a);
    run_close(&b);
    return st;
}
