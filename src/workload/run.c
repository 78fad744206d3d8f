/* Running a workload under a memory policy, step by step, and summing up
 * what happened: the engine behind `chameleon simulate`, the experiments
 * and the baselines' tests (docs/baselines.md). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/order.h"
#include "workload/workload-impl.h"

#define TiB (UINT64_C(1) << 40)

cham_run_config_t cham_run_config_default(void)
{
    cham_run_config_t c = {.runtime = cham_config_default(), .strategy = CHAM_STRATEGY_CHAMELEON,
                           .steps = 50, .plan_optimizer = true};
    c.runtime.pinned_budget = 2 * TiB;
    return c;
}

void wl_silent_log(const char *line, void *user)
{
    (void)line;
    (void)user;
}

typedef struct hazards {
    uint64_t n;
    char first[400];
} hazards_t;

static void on_hazard(const cham_hazard_t *h, void *user)
{
    hazards_t *hz = user;
    if (hz->n++ == 0)
        cham_hazard_format(h, hz->first, sizeof hz->first);
}

static double median_s(uint64_t *v, size_t n)
{
    if (n == 0)
        return 0;
    qsort(v, n, sizeof *v, cham_order_u64);
    return (n % 2 ? (double)v[n / 2] : ((double)v[n / 2 - 1] + (double)v[n / 2]) / 2) * 1e-9;
}

static void fail(cham_run_result_t *r, cham_status_t st, uint64_t step, uint64_t op,
                 const char *why)
{
    r->status = st;
    r->oom = st == CHAM_ERR_OUT_OF_MEMORY;
    r->fail_step = step;
    r->fail_op = op;
    snprintf(r->error, sizeof r->error, "%s", why);
}

/* Runs the steps; the result's counters are filled by the caller. */
static void run_steps(const cham_run_config_t *c, cham_context_t *ctx, cham_workload_t *w,
                      cham_run_result_t *r, uint64_t *times, bool *stable)
{
    cham_device_t *dev = cham_context_device(ctx);
    cham_runtime_stats_t before, after;
    uint64_t t_prev = cham_device_host_time(dev);
    for (uint64_t s = 0; s < c->steps; s++) {
        cham_context_get_stats(ctx, &before);
        uint64_t ops0 = cham_context_ops(ctx);
        cham_context_reset_peak(ctx);
        if (c->profile_every_step ||
            ((c->profile_path || c->on_finish || c->lower_bound) && s + 1 == c->steps))
            cham_context_request_profile(ctx);
        cham_step_info_t info;
        cham_status_t st = cham_workload_step(w, s, &info);
        if (st == CHAM_OK)
            st = cham_workload_wait(w);
        if (st != CHAM_OK) {
            fail(r, st, s, cham_context_ops(ctx) - ops0, cham_workload_last_error(w));
            return;
        }
        uint64_t now = cham_device_host_time(dev);
        cham_context_get_stats(ctx, &after);
        cham_run_step_t rs = {
            .step = s, .stage = cham_context_stage(ctx), .time_ns = now - t_prev,
            .peak_bytes = after.mem_peak,
            .swapped_bytes = after.bytes_out + after.bytes_in - before.bytes_out - before.bytes_in,
            .on_demand = after.on_demand_swaps_in - before.on_demand_swaps_in,
            .passive = after.passive_swaps_out - before.passive_swaps_out, .info = info};
        t_prev = now;
        if (rs.peak_bytes > r->peak_tensor_bytes)
            r->peak_tensor_bytes = rs.peak_bytes;
        times[s] = rs.time_ns;
        stable[s] = rs.stage == CHAM_STAGE_STABLE;
        r->steps = s + 1;
        r->ops_per_step = info.ops;
        r->swapped_bytes_per_step += (double)rs.swapped_bytes;
        if (c->on_step)
            c->on_step(&rs, c->user);
    }
}

static bool is_protrain(cham_strategy_t s)
{
    return s == CHAM_STRATEGY_PROTRAIN || s == CHAM_STRATEGY_ZERO_OFFLOAD;
}

/* Whether model state may leave the device in this run (then the device
 * and the pinned host memory together must hold it). */
static bool moves_state(const cham_run_config_t *c, const cham_config_t *rc)
{
    return cham_config_moves_model_state(rc) || is_protrain(c->strategy);
}

/* The sim preset the run's device opens with. */
static const char *preset_name(const cham_config_t *rc)
{
    return rc->device.preset ? rc->device.preset : cham_preset_default_name();
}

/* The run's runtime and model settings: the caller's with the strategy's
 * applied, checked. */
static cham_status_t prepare(const cham_run_config_t *c, cham_config_t *rc,
                             cham_model_config_t *m, char *err, size_t err_size)
{
    *rc = c->runtime;
    *m = c->model;
    if (cham_strategy_apply(c->strategy, rc) != CHAM_OK) {
        cham_set_err(err, err_size, "run: unknown strategy %d", (int)c->strategy);
        return CHAM_ERR_INVALID_ARG;
    }
    m->recompute = m->recompute || c->strategy == CHAM_STRATEGY_RECOMPUTE;
    if (is_protrain(c->strategy) && !m->protrain) {
        /* Checked with every chunk on the device; the run's configuration
         * comes from the search (or zero-offload's) once the device is open. */
        m->protrain = true;
        m->protrain_config = (cham_protrain_config_t){.n_persist = m->layers + 2};
    }
    cham_status_t st = cham_model_validate(m, err, err_size);
    if (st == CHAM_OK)
        st = cham_config_validate(rc, err, err_size);
    if (st != CHAM_OK || !(m->host_optimizer || m->protrain))
        return st;
    /* The host's optimizer is timed by the host's figures: say now, not at
     * the first step, when the device has none. */
    const char *name = preset_name(rc);
    double flops, bw;
    wl_host_figures(rc, &flops, &bw);
    if (flops > 0 && bw > 0)
        return CHAM_OK;
    cham_set_err(err, err_size, "run: %s needs the host's figures and "
                 "device %s lacks them (host_flops %g, host_mem_bandwidth %g): set both in the "
                 "device config, or use a preset that has them (`chameleon devices`)",
                 m->protrain ? cham_strategy_name(c->strategy) : "the optimizer on the host", name,
                 flops, bw);
    return CHAM_ERR_INVALID_ARG;
}

/* The device memory a run gets, from the settings: the override or the
 * sim preset's; 0 when only opening the device would tell. */
static uint64_t run_capacity(const cham_config_t *rc)
{
    if (rc->device.capacity)
        return rc->device.capacity;
    if (rc->device.backend && strcmp(rc->device.backend, "sim") != 0)
        return 0;
    const cham_preset_t *p = cham_preset_find(preset_name(rc));
    return p ? p->capacity : 0;
}

cham_status_t cham_run_check(const cham_run_config_t *c, char *err, size_t err_size)
{
    cham_config_t rc;
    cham_model_config_t m;
    cham_status_t st = prepare(c, &rc, &m, err, err_size);
    if (st != CHAM_OK)
        return st;
    uint64_t capacity = run_capacity(&rc);
    char why[1024];
    if (capacity && !wl_state_fits(&m, capacity, rc.pinned_budget, moves_state(c, &rc), why,
                                   sizeof why)) {
        cham_set_err(err, err_size, "workload: %s", why);   /* as cham_workload_new says it */
        return CHAM_ERR_OUT_OF_MEMORY;
    }
    return CHAM_OK;
}

/* A lower bound of bound_s (infinite: no policy fits) for program p. */
static void put_bound(cham_run_result_t *r, double bound_s, const wl_program_t *p)
{
    r->has_bound = true;
    r->bound_feasible = isfinite(bound_s);
    r->lower_bound_step_time_s = bound_s;
    r->bound_host_optimizer = p->host;
    r->bound_device_groups = p->host ? p->device_groups : 0;
}

/* The lower bound at the capacity policies plan for: a changing loop's
 * over the run's late steps; else from the last step's profile, with the
 * optimizer on the host at least the host's work in a step (the profile's
 * bound leaves it out). */
static void bound(const cham_config_t *rc, const cham_device_info_t *info,
                  const cham_model_config_t *m, uint64_t steps, const cham_profile_t *last,
                  cham_run_result_t *r)
{
    bool feasible;
    double bound_s;
    wl_program_t p = {.host = m->host_optimizer, .device_groups = m->device_groups};
    if (cham_model_loop_changes(m)) {
        if (wl_loop_bound(rc, info, m, steps, &bound_s))
            put_bound(r, bound_s, &p);
        return;
    }
    if (!wl_bound_of(rc, info, last, &feasible, &bound_s, NULL))
        return;                /* host memory: no bound, nothing else lost */
    if (feasible && p.host && wl_program_measure(rc, info, m, false, &p))
        bound_s = fmax(bound_s, fmax(p.host_s, p.chain_s));
    put_bound(r, bound_s, &p);
}

/* ProTrain's profile: one training step of the job (the second: the
 * first allocates) with unlimited memory, every chunk on the device and
 * every block kept, read into the planner's model. */
static cham_status_t protrain_profile(const cham_config_t *rc, const cham_model_config_t *m,
                                      const cham_protrain_device_t *dev,
                                      cham_protrain_model_t **out, char *err, size_t err_size)
{
    cham_config_t pc = *rc;
    cham_strategy_apply(CHAM_STRATEGY_IDEAL, &pc);
    cham_model_config_t pm = wl_training_steps(m);
    pm.protrain_config = (cham_protrain_config_t){.n_persist = m->layers + 2};
    cham_context_t *ctx;
    cham_status_t st = cham_context_new(&pc, &ctx);
    if (st != CHAM_OK) {
        cham_set_err(err, err_size, "protrain: profiling: %s", cham_context_last_error(NULL));
        return st;
    }
    cham_context_set_log(ctx, wl_silent_log, NULL);
    cham_workload_t *w = NULL;
    char why[1024];
    if ((st = cham_workload_new(ctx, &pm, &w, why, sizeof why)) == CHAM_OK &&
        (st = cham_workload_step(w, 0, NULL)) == CHAM_OK) {
        cham_context_request_profile(ctx);
        st = cham_workload_step(w, 1, NULL);
        if (st != CHAM_OK)
            snprintf(why, sizeof why, "%s", cham_workload_last_error(w));
    } else if (w) {
        snprintf(why, sizeof why, "%s", cham_workload_last_error(w));
    }
    if (st == CHAM_OK)
        st = cham_device_synchronize(cham_context_device(ctx));
    const cham_profile_t *p = cham_context_last_profile(ctx);
    if (st == CHAM_OK && p)
        st = cham_protrain_model_new(p, dev, out, err, err_size);
    else
        cham_set_err(err, err_size, "protrain: profiling the step: %s",
                     st != CHAM_OK ? why : "no profile was made");
    cham_workload_free(w);
    cham_context_free(ctx);
    return st != CHAM_OK ? st : p ? CHAM_OK : CHAM_ERR_INVALID_ARG;
}

/* ProTrain's planner on the job (m, with protrain set) for the device
 * opened: with search, its searched plan, keeping on the device at least
 * the chunks the pinned host memory cannot hold; else plan->config's
 * estimates. */
static cham_status_t protrain_run(const cham_config_t *rc, const cham_device_info_t *info,
                                  const cham_model_config_t *m, bool search,
                                  cham_protrain_plan_t *plan, char *err, size_t err_size)
{
    cham_protrain_device_t dev = cham_protrain_device_of(info);
    dev.capacity = cham_config_budget(rc, info->capacity);
    dev.min_persist = wl_least_device_groups(m, rc->pinned_budget);
    cham_protrain_model_t *pm;
    cham_status_t st = protrain_profile(rc, m, &dev, &pm, err, err_size);
    if (st != CHAM_OK)
        return st;
    if (search)
        st = cham_protrain_search(pm, &dev, plan, err, err_size);
    else
        st = cham_protrain_estimate(pm, &dev, &plan->config, &plan->estimate, err, err_size);
    cham_protrain_model_free(pm);
    return st;
}

/* host_optimizer with device_groups auto: the groups on the device are
 * the chunks ProTrain's search keeps there (its cost models weigh the
 * host's updates against the device's memory; Chameleon then plans the
 * activations itself). */
static cham_status_t choose_device_groups(const cham_config_t *rc,
                                          const cham_device_info_t *info,
                                          cham_model_config_t *m, char *err, size_t err_size)
{
    cham_model_config_t pm = *m;
    pm.host_optimizer = false;
    pm.device_groups = 0;
    pm.recompute = false;
    pm.protrain = true;
    pm.protrain_config = (cham_protrain_config_t){.n_persist = m->layers + 2};
    char why[512];
    if (cham_model_validate(&pm, why, sizeof why) != CHAM_OK) {
        cham_set_err(err, err_size, "optimizer auto: ProTrain's cost model chooses the groups "
                     "on the device and cannot model this job (%s); give their number instead "
                     "(host:N)", why);
        return CHAM_ERR_INVALID_ARG;
    }
    cham_protrain_plan_t plan = {0};
    cham_status_t st = protrain_run(rc, info, &pm, true, &plan, err, err_size);
    if (st == CHAM_OK)
        m->device_groups = plan.config.n_persist;
    return st;
}

/* protrain: the searched configuration for the device opened, or the
 * caller's (model.protrain set) with its estimates; zero-offload its fixed
 * one. CHAM_ERR_OUT_OF_MEMORY when none fits (err says why). */
static cham_status_t protrain_plan(const cham_run_config_t *c, const cham_config_t *rc,
                                   const cham_device_info_t *info, cham_model_config_t *m,
                                   cham_run_result_t *r, char *err, size_t err_size)
{
    if (c->strategy == CHAM_STRATEGY_ZERO_OFFLOAD) {
        m->protrain_config = (cham_protrain_config_t){
            .n_buffer = 2, .n_checkpoint = m->layers, .swap_interval = 1};
        r->protrain = m->protrain_config;
        r->has_protrain = true;
        return CHAM_OK;
    }
    cham_protrain_plan_t plan = {.config = m->protrain_config};
    cham_status_t st = protrain_run(rc, info, m, !c->model.protrain, &plan, err, err_size);
    r->protrain_evaluated = plan.evaluated;
    r->protrain_pruned = plan.pruned;
    if (st != CHAM_OK)
        return st;
    m->protrain_config = r->protrain = plan.config;
    r->has_protrain = true;
    r->predicted_step_time_s = plan.estimate.step_ns * 1e-9;
    r->predicted_peak_bytes = plan.estimate.peak_bytes;
    return CHAM_OK;
}

/* Steps a trial of a program runs: Chameleon's WarmUp and GenPolicy,
 * then Stable steps to take the median of. A loop that changes runs
 * longer, for its classes to settle, and is timed by the mean of its last
 * half, every class in its share: 14 steps of a layer-drop loop gave one
 * Stable step, and the trial kept the device's program at 0.56 s a step
 * where 15 groups on the device run 0.41 s. */
static uint64_t trial_steps(const cham_model_config_t *m)
{
    return cham_model_loop_changes(m) ? 40 : 14;
}

/* What the optimizer's trials need: the run's config and device. */
typedef struct place_run {
    const cham_run_config_t *c;
    const cham_config_t *rc;
    const cham_device_info_t *info;
} place_run_t;

/* The Stable step of the job with the optimizer where p puts it, from a
 * short run of it. */
static double trial(const wl_program_t *p, void *user)
{
    const cham_run_config_t *c = ((place_run_t *)user)->c;
    bool changes = cham_model_loop_changes(&c->model);
    cham_run_config_t t = {.model = c->model, .runtime = c->runtime, .strategy = c->strategy,
                           .steps = trial_steps(&c->model)};
    t.model.host_optimizer = p->host;
    t.model.device_groups = p->device_groups;
    cham_run_result_t *r = malloc(sizeof *r);
    bool ran = r && cham_run(&t, r) == CHAM_OK && r->status == CHAM_OK;
    double s = !ran              ? INFINITY
               : changes         ? r->late_mean_step_time_s
               : r->stable_steps ? r->step_time_s
                                 : INFINITY;
    free(r);
    return s;
}

/* ProTrain's cost model's choice of groups on the device, where it models
 * the job (one device, no accumulation; else UINT32_MAX). */
static uint32_t protrain_hint(void *user)
{
    place_run_t *pr = user;
    cham_model_config_t m = pr->c->model;
    m.host_optimizer = true;
    m.device_groups = CHAM_DEVICE_GROUPS_AUTO;
    char err[512];
    return choose_device_groups(pr->rc, pr->info, &m, err, sizeof err) == CHAM_OK
               ? m.device_groups : UINT32_MAX;
}

/* plan_optimizer with strategy chameleon: m's optimizer where
 * wl_place_optimizer puts it (with trials when the run is long enough for
 * them to mean something). Else the model's stands. */
static void plan_optimizer(const cham_run_config_t *c, const cham_config_t *rc,
                           const cham_device_info_t *info, cham_model_config_t *m,
                           wl_optimizer_choice_t *choice, cham_run_result_t *r)
{
    if (!c->plan_optimizer || c->strategy != CHAM_STRATEGY_CHAMELEON)
        return;
    place_run_t pr = {c, rc, info};
    wl_place_hooks_t hooks = {trial, protrain_hint, &pr};
    if (!wl_place_optimizer(rc, info, m, c->lower_bound ? c->steps : 0,
                            c->steps >= trial_steps(m) ? &hooks : NULL, choice)) {
        m->host_optimizer = false;           /* nothing to choose: the device's */
        m->device_groups = 0;
        return;
    }
    m->host_optimizer = choice->chosen.host;
    m->device_groups = choice->chosen.device_groups;
    r->optimizer_planned = true;
    r->optimizer_programs = choice->programs;
    r->optimizer_trials = choice->trials;
}

cham_status_t cham_run(const cham_run_config_t *c, cham_run_result_t *r)
{
    memset(r, 0, sizeof *r);
    cham_config_t rc;
    cham_model_config_t m;
    cham_status_t st = prepare(c, &rc, &m, r->error, sizeof r->error);
    if (st != CHAM_OK)
        return st;
    cham_context_t *ctx;
    if ((st = cham_context_new(&rc, &ctx)) != CHAM_OK) {
        snprintf(r->error, sizeof r->error, "%s", cham_context_last_error(NULL));
        return st;
    }
    cham_context_set_log(ctx, c->log ? c->log : wl_silent_log, c->user);
    cham_device_t *dev = cham_context_device(ctx);
    hazards_t hz = {0};
    cham_device_set_hazard_hook(dev, on_hazard, &hz);
    cham_device_info_t info;
    cham_device_get_info(dev, &info);
    r->capacity_bytes = info.capacity;

    wl_optimizer_choice_t choice = {0};
    plan_optimizer(c, &rc, &info, &m, &choice, r);
    uint64_t *times = calloc(c->steps ? c->steps : 1, sizeof *times);
    bool *stable = calloc(c->steps ? c->steps : 1, sizeof *stable);
    cham_workload_t *w = NULL;
    cham_trace_t *trace = NULL;
    char err[sizeof r->error];
    if (!times || !stable) {
        fail(r, CHAM_ERR_HOST_OOM, 0, 0, "run: out of host memory");
    } else if (c->trace_path &&
               (st = cham_trace_open(ctx, c->trace_path, &trace, err, sizeof err)) != CHAM_OK) {
        fail(r, st, 0, 0, err);
    } else if (is_protrain(c->strategy) &&
               (st = protrain_plan(c, &rc, &info, &m, r, err, sizeof err)) != CHAM_OK) {
        fail(r, st, 0, 0, err);
    } else if (m.host_optimizer && m.device_groups == CHAM_DEVICE_GROUPS_AUTO &&
               (st = choose_device_groups(&rc, &info, &m, err, sizeof err)) != CHAM_OK) {
        fail(r, st, 0, 0, err);
    } else if ((st = cham_workload_new(ctx, &m, &w, err, sizeof err)) != CHAM_OK) {
        fail(r, st, 0, 0, err);
    } else {
        r->host_optimizer = m.host_optimizer;
        r->device_groups = m.host_optimizer ? m.device_groups : 0;
        run_steps(c, ctx, w, r, times, stable);
    }
    cham_workload_free(w);
    const cham_profile_t *last = cham_context_last_profile(ctx);
    if (c->profile_path && r->status == CHAM_OK &&
        (!last || cham_profile_save_json(last, c->profile_path, err, sizeof err) != CHAM_OK))
        fail(r, CHAM_ERR_INVALID_ARG, r->steps, 0, last ? err : "run: no profile was made");
    const cham_policy_t *pol = cham_context_policy(ctx);
    if (c->policy_path && pol && cham_policy_save_json(pol, c->policy_path, err, sizeof err) !=
                                     CHAM_OK && r->status == CHAM_OK)
        fail(r, CHAM_ERR_INVALID_ARG, r->steps, 0, err);
    if (c->on_finish)
        c->on_finish(r->status == CHAM_OK ? last : NULL, pol, c->user);
    if (c->lower_bound && r->optimizer_planned && r->status == CHAM_OK)
        put_bound(r, wl_program_bound(&choice.bound), &choice.bound);
    else if (c->lower_bound && last && r->status == CHAM_OK)
        bound(&rc, &info, &m, c->steps, last, r);
    cham_device_synchronize(dev);          /* the last tasks reach the trace */
    if (cham_trace_close(trace, err, sizeof err) != CHAM_OK && r->status == CHAM_OK)
        fail(r, CHAM_ERR_INVALID_ARG, r->steps, 0, err);

    cham_runtime_stats_t rs;
    cham_context_get_stats(ctx, &rs);
    cham_alloc_stats_t as;
    if (cham_context_alloc_stats(ctx, &as) == CHAM_OK) {
        r->peak_device_bytes = as.peak_reserved;
        r->reuse_interval_max = as.reuse_interval_max;
        r->reuse_interval_mean = as.n_deferred_released
                                     ? (double)as.reuse_interval_sum /
                                           (double)as.n_deferred_released
                                     : 0;
    }
    r->stage_changes = rs.stage_changes;
    r->policy_regenerations = rs.policies_generated;
    r->on_demand_swapins = rs.on_demand_swaps_in;
    r->passive_swapouts = rs.passive_swaps_out;
    r->drops = rs.drops;
    r->recomputes = rs.recomputes;
    r->dropped_bytes_per_step = r->steps ? (double)rs.bytes_dropped / (double)r->steps : 0;
    r->hazards = hz.n;
    if (hz.n && r->status == CHAM_OK)
        fail(r, CHAM_ERR_HAZARD, r->steps, 0, hz.first);
    if (r->steps) {
        double sum = 0;
        size_t n_stable = 0, first = 0;
        if (c->model.infer) {    /* the prefill apart; decode steps per token */
            r->prefill_time_s = (double)times[0] * 1e-9;
            first = r->steps > 1;
        }
        size_t n = r->steps - first, from = first + n / 2;
        double late_s = 0;
        for (size_t i = first; i < r->steps; i++) {
            sum += (double)times[i];
            if (i >= from)
                late_s += (double)times[i] * 1e-9;
            if (stable[i])
                times[n_stable++] = times[i];   /* n_stable <= i: the steps after are intact */
        }
        r->late_mean_step_time_s = late_s / (double)(r->steps - from);
        r->mean_step_time_s = sum / (double)n * 1e-9;
        r->step_time_s = n_stable ? median_s(times, n_stable) : median_s(times + first, n);
        r->stable_steps = n_stable;
        r->swapped_bytes_per_step /= (double)r->steps;
    }
    free(times);
    free(stable);
    cham_context_free(ctx);
    return CHAM_OK;
}
