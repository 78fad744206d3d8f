/* The loop around the executor (paper §3-§6, docs/executor.md):
 *
 *   WarmUp     no policy; memory runs out -> passive swaps (oom.c)
 *   GenPolicy  each step is profiled in detail; its profile gives a policy
 *              that the next step applies and measures; after n such
 *              trials the fastest is kept. The trials differ in how long
 *              a swapped-out block waits past its predicted copy end
 *              before reuse (free_delay_ops 0, 1, 2, 4, 8, ...): the
 *              planner's Eq. 1 timing is coarse, and a block reused
 *              before its copy ends stalls the compute stream, one reused
 *              later holds memory longer; measuring settles it.
 *   Stable     the kept policy is applied step after step
 *   a big change of the op sequence -> WarmUp, the policy is dropped.
 *
 * Beyond the paper, kept policies stay in a small cache with the op
 * sequence they were made for: a step whose sequence is like a cached one
 * (by the stage machine's own test) gets that policy back for the next
 * step and goes straight to Stable, instead of WarmUp and n more trials. */
#include <stdlib.h>
#include <string.h>

#include "common/assert.h"
#include "common/grow.h"
#include "runtime/runtime-impl.h"

/* ---- plans ----------------------------------------------------------------*/

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* Item indices by swap_in_op, swaps before recomputations at one op (a
 * re-run may read a tensor swapped in at that op), then index: sorted as
 * (op << 32 | recompute << 31 | index). */
static bool sort_by_swap_in(const cham_policy_view_t *v, uint32_t *out)
{
    CHAM_ASSERT(v->n_items <= INT32_MAX);
    uint64_t *keys = malloc((v->n_items ? v->n_items : 1) * sizeof *keys);
    if (!keys)
        return false;
    for (size_t i = 0; i < v->n_items; i++)
        keys[i] = (uint64_t)v->items[i].swap_in_op << 32 |
                  (uint64_t)v->items[i].recompute << 31 | i;
    qsort(keys, v->n_items, sizeof *keys, cmp_u64);
    for (size_t i = 0; i < v->n_items; i++)
        out[i] = (uint32_t)(keys[i] & INT32_MAX);
    free(keys);
    return true;
}

/* Takes the policy (freed on failure). With positional, its items are
 * named by (op index, i-th tensor), Capuchin's way. */
static cham_plan_t *plan_new(cham_policy_t *policy, const cham_profile_t *profile,
                             bool positional)
{
    cham_plan_t *p = calloc(1, sizeof *p);
    cham_policy_view_t v;
    cham_policy_get(policy, &v);
    if (!p || !(p->in_order = malloc((v.n_items ? v.n_items : 1) * sizeof *p->in_order)) ||
        !sort_by_swap_in(&v, p->in_order) || !cham_match_build(&p->match, policy, profile) ||
        (positional && (!(p->positions = malloc(sizeof *p->positions)) ||
                        !cham_positions_build(p->positions, policy, profile)))) {
        if (p) {
            free(p->in_order);
            free(p->positions);
        }
        free(p);
        cham_policy_free(policy);
        return NULL;
    }
    p->policy = policy;
    p->view = v;
    p->refs = 1;
    return p;
}

cham_plan_t *cham_plan_retain(cham_plan_t *plan)
{
    if (plan)
        plan->refs++;
    return plan;
}

void cham_plan_release(cham_plan_t *plan)
{
    if (!plan || --plan->refs > 0)
        return;
    cham_match_free(&plan->match);
    if (plan->positions)
        cham_positions_free(plan->positions);
    free(plan->positions);
    cham_policy_free(plan->policy);
    free(plan->in_order);
    free(plan);
}

/* Grows the pinned pool, before a new policy's first step, until it holds
 * every swapped item at once (in training nearly all are on the host
 * together, at the turn from forward to backward), or nearly the pinned
 * budget. Pinning costs host time (milliseconds per hundred MiB); paid
 * inside a step it would stall that step and make a trial look slower
 * than the policy is (docs/executor.md, "Pinned memory before a trial"). */
static void reserve_pinned(cham_context_t *ctx, const cham_plan_t *plan)
{
    size_t n = plan->view.n_items, got = 0;
    cham_block_t **held = malloc((n ? n : 1) * sizeof *held);
    if (!held)
        return;   /* best effort: swap-outs pin what they need */
    /* Short of the budget by a sixteenth (blocks round up): a request the
     * budget refuses would first give every cached free segment back, a
     * device wait, on each policy applied. */
    uint64_t room = ctx->config.pinned_budget - ctx->config.pinned_budget / 16, taken = 0;
    for (size_t i = 0; i < n; i++) {
        const cham_policy_item_t *it = &plan->view.items[i];
        if (it->recompute || it->bytes == 0)
            continue;
        if (it->bytes > room - taken ||
            cham_block_alloc(ctx->pinned, it->bytes, ctx->swap_out, &held[got]) != CHAM_OK)
            break;
        taken += it->bytes;
        got++;
    }
    for (size_t i = 0; i < got; i++)
        cham_block_free(ctx->pinned, held[i]);
    free(held);
}

/* Applies plan from the next step on (NULL: none). */
static void apply(cham_context_t *ctx, cham_plan_t *plan)
{
    cham_exec_t *x = &ctx->exec;
    if (plan == x->plan)
        return;
    if (plan) {
        size_t n = plan->view.n_items;
        cham_storage_t **v = cham_grow(x->storage_of, &x->cap_items, n ? n : 1, sizeof *v, 16);
        if (!v) {
            cham_context_log(ctx, "out of host memory installing a policy; none is applied");
            plan = NULL;
        } else {
            x->storage_of = v;
        }
    }
    for (cham_storage_t *s = ctx->storages; s; s = s->next)
        s->item = CHAM_MATCH_NONE;
    if (plan && ctx->pinned)
        reserve_pinned(ctx, plan);
    cham_plan_release(x->plan);
    x->plan = cham_plan_retain(plan);
    if (plan)
        cham_exec_send_away(ctx);
}

/* ---- GenPolicy: generate, try, keep -----------------------------------------*/

static void trials_clear(cham_context_t *ctx)
{
    for (size_t i = 0; i < ctx->n_trials; i++)
        cham_plan_release(ctx->trials[i].plan);
    ctx->n_trials = 0;
}

/* The release delay of trial k: 0, 1, 2, 4, 8, 16, ... */
static uint32_t trial_delay(size_t k)
{
    return k == 0 ? 0 : k >= 16 ? UINT32_C(1) << 15 : UINT32_C(1) << (k - 1);
}

/* A policy from the profile of the step that just ended; NULL (logged) if
 * none can be made. A delay that leaves no policy falls back to none. */
static cham_plan_t *generate(cham_context_t *ctx, const cham_profile_t *profile,
                             uint32_t *delay)
{
    cham_device_info_t info;
    cham_device_get_info(ctx->dev, &info);
    cham_planner_config_t pc = cham_planner_config_default();
    pc.capacity = info.capacity;
    if (ctx->config.memory_budget && ctx->config.memory_budget < info.capacity)
        pc.capacity = ctx->config.memory_budget;
    pc.h2d_bandwidth = info.h2d_bandwidth;
    pc.d2h_bandwidth = info.d2h_bandwidth;
    pc.score_c = ctx->config.score_c;
    pc.min_swap_bytes = ctx->config.min_swap_bytes;
    /* Trials alternate: recomputation planned against the ops' costs (the
     * first, third, fifth), and swaps alone as the paper plans them; the
     * step time decides (docs/executor.md). */
    pc.recompute = ctx->config.recompute && ctx->n_trials % 2 == 0;
    /* Among those, the first, fifth, ninth, ... issue their swap-ins as
     * early as memory allows, the third, seventh, ... as late as they can
     * still be done: the queues time the ops by their costs, and where the
     * step runs late of them only early copies stay hidden, while late ones
     * keep memory free longer (policy.md, "The copy queues"). */
    pc.early_swap_in = pc.recompute && ctx->n_trials % 4 == 0;
    /* The fifth, tenth, ... plan activations only, as the paper: model
     * state moved where it did not have to costs link time the replay can
     * misjudge, and measuring settles it (docs/executor.md). */
    pc.model_state = ctx->config.model_state && ctx->config.planner == CHAM_PLANNER_CHAMELEON &&
                     ctx->n_trials % 5 != 4;
    if (ctx->reserve)
        pc.reserve = ctx->reserve;
    pc.free_delay_ops = *delay;
    cham_policy_t *policy = NULL;
    char err[400] = "";
    cham_status_t st;
    if (ctx->config.planner == CHAM_PLANNER_VDNN) {
        st = cham_plan_vdnn(profile, &pc, &policy, err, sizeof err);
    } else {
        st = cham_plan_chameleon(profile, &pc, &policy, err, sizeof err);
        if (st == CHAM_ERR_OUT_OF_MEMORY && *delay > 0) {
            pc.free_delay_ops = *delay = 0;
            st = cham_plan_chameleon(profile, &pc, &policy, err, sizeof err);
        }
        if (st == CHAM_ERR_OUT_OF_MEMORY) {
            pc.partial = true;    /* what can be planned; passive swaps do the rest */
            st = cham_plan_chameleon(profile, &pc, &policy, err, sizeof err);
        }
    }
    if (st != CHAM_OK) {
        ctx->stats.policy_failures++;
        cham_context_log(ctx, "step %llu: no policy: %s", (unsigned long long)ctx->number, err);
        return NULL;
    }
    cham_plan_t *plan = plan_new(policy, profile,
                                 ctx->config.planner == CHAM_PLANNER_CAPUCHIN);
    if (!plan) {
        cham_context_log(ctx, "step %llu: out of host memory indexing a policy",
                         (unsigned long long)ctx->number);
        return NULL;
    }
    ctx->stats.policies_generated++;
    if (plan->view.predicted_peak > plan->view.usable)
        cham_context_log(ctx, "step %llu: partial policy; passive swaps make up the rest: %s",
                         (unsigned long long)ctx->number, err);
    size_t n_rc = 0;
    for (size_t i = 0; i < plan->view.n_items; i++)
        n_rc += plan->view.items[i].recompute;
    cham_context_log(ctx, "step %llu: policy %zu generated: %zu swaps and %zu recomputations, "
                     "blocks reused %u ops after their copies, predicted peak %llu of %llu "
                     "usable bytes, predicted step %.3f ms",
                     (unsigned long long)ctx->number, ctx->n_trials + 1,
                     plan->view.n_items - n_rc, n_rc, *delay,
                     (unsigned long long)plan->view.predicted_peak,
                     (unsigned long long)plan->view.usable,
                     (double)plan->view.predicted_step_ns / 1e6);
    return plan;
}

/* Records how the step that applied the newest trial went. A complete
 * trial that needed passive swaps planned too close to the limit: the next
 * one gets twice the reserve (a partial one left them to passive swaps on
 * purpose). */
static void measure_trial(cham_context_t *ctx, uint64_t step_ns)
{
    cham_trial_t *t = &ctx->trials[ctx->n_trials - 1];
    t->step_ns = step_ns;
    t->passive = ctx->step_passive;
    t->on_demand = ctx->step_on_demand;
    cham_context_log(ctx, "step %llu: policy %zu took %.3f ms (predicted %.3f ms from its "
                     "profile), %llu passive and %llu on-demand swaps",
                     (unsigned long long)ctx->number, ctx->n_trials, (double)step_ns / 1e6,
                     (double)t->plan->view.predicted_step_ns / 1e6,
                     (unsigned long long)t->passive, (unsigned long long)t->on_demand);
    const cham_policy_view_t *p = &t->plan->view;
    if (t->passive && p->predicted_peak <= p->usable) {
        uint64_t reserve = p->capacity - p->usable;
        ctx->reserve = reserve < p->capacity / 4 ? 2 * reserve + 1 : p->capacity / 2;
    }
}

static cham_plan_t *best_trial(cham_context_t *ctx)
{
    cham_trial_t *best = NULL;
    for (size_t i = 0; i < ctx->n_trials; i++) {
        cham_trial_t *t = &ctx->trials[i];
        if (t->step_ns && (!best || t->step_ns < best->step_ns))
            best = t;
    }
    if (!best)
        return NULL;
    cham_context_log(ctx, "step %llu: kept policy %zu of %zu (reuse delay %u ops): %llu ns a "
                     "step, %llu passive and %llu on-demand swaps", (unsigned long long)ctx->number,
                     (size_t)(best - ctx->trials) + 1, ctx->n_trials, best->free_delay,
                     (unsigned long long)best->step_ns, (unsigned long long)best->passive,
                     (unsigned long long)best->on_demand);
    return best->plan;
}

/* ---- the policy cache ---------------------------------------------------------*/

static uint64_t fingerprint(const cham_op_token_t *seq, size_t len)
{
    uint64_t h = 0xcbf29ce484222325u;
    for (size_t i = 0; i < len; i++) {
        h ^= (uint32_t)seq[i];
        h *= 0x100000001b3u;
    }
    return h;
}

/* Would the stage machine count b as the same sequence as a? */
static bool alike(const cham_context_t *ctx, const cham_op_token_t *a, size_t na,
                  const cham_op_token_t *b, size_t nb)
{
    size_t d = na > nb ? na - nb : nb - na;
    if (nb == 0 || (double)d / (double)nb >= ctx->config.length_tolerance)
        return false;
    return cham_sequence_cosine(a, na, b, nb) > ctx->config.cosine_threshold;
}

static cham_cached_plan_t *cache_find(cham_context_t *ctx, const cham_op_token_t *seq,
                                      size_t len)
{
    uint64_t fp = fingerprint(seq, len);
    for (size_t i = 0; i < ctx->n_cache; i++)
        if (ctx->cache[i].fingerprint == fp && ctx->cache[i].len == len &&
            memcmp(ctx->cache[i].seq, seq, len * sizeof *seq) == 0)
            return &ctx->cache[i];
    for (size_t i = 0; i < ctx->n_cache; i++)
        if (alike(ctx, seq, len, ctx->cache[i].seq, ctx->cache[i].len))
            return &ctx->cache[i];
    return NULL;
}

static void cache_put(cham_context_t *ctx, const cham_op_token_t *seq, size_t len,
                      cham_plan_t *plan)
{
    if (ctx->config.policy_cache == 0)
        return;
    cham_cached_plan_t *e = cache_find(ctx, seq, len);
    if (!e && ctx->n_cache < ctx->config.policy_cache) {
        if (!ctx->cache && !(ctx->cache = calloc(ctx->config.policy_cache, sizeof *ctx->cache)))
            return;
        e = &ctx->cache[ctx->n_cache++];
    }
    if (!e) {                     /* full: the least recently used goes */
        e = &ctx->cache[0];
        for (size_t i = 1; i < ctx->n_cache; i++)
            if (ctx->cache[i].last_used < e->last_used)
                e = &ctx->cache[i];
    }
    cham_op_token_t *copy = malloc((len ? len : 1) * sizeof *copy);
    if (!copy)
        return;                   /* not kept: only a later WarmUp costs more */
    memcpy(copy, seq, len * sizeof *seq);
    free(e->seq);
    cham_plan_release(e->plan);
    *e = (cham_cached_plan_t){.seq = copy, .len = len, .fingerprint = fingerprint(seq, len),
                              .last_used = ctx->step, .plan = cham_plan_retain(plan)};
}

/* ---- the step end -----------------------------------------------------------*/

static bool has_backward(const cham_profile_view_t *v)
{
    for (size_t k = 0; k < v->n_ops; k++)
        if (v->ops[k].phase == CHAM_PHASE_BACKWARD)
            return true;
    return false;
}

void cham_loop_step_end(cham_context_t *ctx, cham_stage_t from, cham_stage_t *to)
{
    cham_exec_t *x = &ctx->exec;
    if (x->plan) {
        const cham_match_t *m = &x->plan->match;
        uint64_t hits = m->hits_strict + m->hits_loose;
        ctx->stats.steps_with_policy++;
        ctx->stats.items_matched += hits;
        ctx->stats.matched_loose += m->hits_loose;
        ctx->stats.items_missed += x->plan->view.n_items - hits;
    }
    if (!ctx->config.executor)
        return;

    const cham_profile_t *prof = ctx->last_profile;
    cham_profile_view_t pv;
    if (prof)
        cham_profile_get(prof, &pv);
    bool fresh = prof && ctx->last_profile_step + 1 == ctx->step;
    cham_plan_t *next = x->plan;

    if (cham_loop_static(ctx)) {
        /* The baselines: one policy from the profile of the first training
         * step (the first with a backward), kept for good. */
        if (!ctx->static_planned && fresh && has_backward(&pv)) {
            ctx->static_planned = true;
            uint32_t delay = 0;
            cham_plan_t *plan = generate(ctx, prof, &delay);
            apply(ctx, plan);
            cham_plan_release(plan);
        } else if (!ctx->static_planned) {
            ctx->profile_requested = true;
        }
        return;
    }

    if (from == CHAM_STAGE_GENPOLICY) {
        /* GenPolicy steps start and end with the device idle (dispatch.c):
         * each trial is timed alone. */
        if (ctx->n_trials && x->plan == ctx->trials[ctx->n_trials - 1].plan &&
            ctx->synced_step_ns)
            measure_trial(ctx, ctx->synced_step_ns);
        if (*to == CHAM_STAGE_GENPOLICY) {
            uint32_t delay = trial_delay(ctx->n_trials);
            cham_plan_t *plan = fresh ? generate(ctx, prof, &delay) : NULL;
            cham_trial_t *t = plan ? cham_grow(ctx->trials, &ctx->cap_trials, ctx->n_trials + 1,
                                               sizeof *t, 8) : NULL;
            if (t) {
                ctx->trials = t;
                ctx->trials[ctx->n_trials++] = (cham_trial_t){.plan = plan, .free_delay = delay};
            } else {
                cham_plan_release(plan);
            }
            next = t ? plan : NULL;
        } else if (*to == CHAM_STAGE_STABLE) {
            next = best_trial(ctx);
            if (!next)
                cham_context_log(ctx, "step %llu: Stable without a policy: none could be made; "
                                 "memory is made by passive swaps", (unsigned long long)ctx->number);
            else
                cache_put(ctx, ctx->seq, ctx->ops_in_step, next);
        }
    }
    if (*to == CHAM_STAGE_WARMUP) {
        /* With the cache, a change seen in Stable is taken for a passing one
         * (a validation step, a skipped update): the kept policy stays for
         * one more step, the step that shows whether the old sequence is
         * back. Without the cache, or if it stays away, WarmUp has none. */
        bool passing = ctx->config.policy_cache && from == CHAM_STAGE_STABLE && x->plan;
        next = passing ? x->plan : NULL;
        cham_cached_plan_t *e = ctx->config.policy_cache
                                    ? cache_find(ctx, ctx->seq, ctx->ops_in_step) : NULL;
        if (e) {
            e->last_used = ctx->step;
            next = e->plan;
            ctx->stages.stage = CHAM_STAGE_STABLE;
            *to = CHAM_STAGE_STABLE;
            ctx->stats.policy_cache_hits++;
            cham_context_log(ctx, "step %llu: this op sequence was seen before; its policy is "
                             "applied again", (unsigned long long)ctx->number);
        }
    }
    if (*to != CHAM_STAGE_GENPOLICY)
        cham_plan_retain(next);    /* trials_clear may drop the last reference */
    apply(ctx, next);
    if (*to != CHAM_STAGE_GENPOLICY) {
        cham_plan_release(next);
        trials_clear(ctx);
        ctx->reserve = 0;
    }
}

bool cham_loop_static(const cham_context_t *ctx)
{
    return ctx->config.executor && ctx->config.planner != CHAM_PLANNER_CHAMELEON;
}

void cham_loop_free(cham_context_t *ctx)
{
    apply(ctx, NULL);
    trials_clear(ctx);
    free(ctx->trials);
    for (size_t i = 0; i < ctx->n_cache; i++) {
        free(ctx->cache[i].seq);
        cham_plan_release(ctx->cache[i].plan);
    }
    free(ctx->cache);
    free(ctx->exec.storage_of);
    free(ctx->exec.carried);
    free(ctx->exec.pending);
    free(ctx->actions);
}
