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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/assert.h"
#include "common/grow.h"
#include "common/order.h"
#include "policy/registry.h"
#include "runtime/runtime-impl.h"

/* ---- plans ----------------------------------------------------------------*/

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
    qsort(keys, v->n_items, sizeof *keys, cham_order_u64);
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
        !sort_by_swap_in(&v, p->in_order) || !cham_exec_plan_init(p, profile) ||
        !cham_match_build(&p->match, policy, profile) ||
        (positional && (!(p->positions = malloc(sizeof *p->positions)) ||
                        !cham_positions_build(p->positions, policy, profile)))) {
        if (p) {
            free(p->in_order);
            free(p->positions);
            cham_exec_plan_free(p);
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
    cham_exec_plan_free(plan);
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

/* Trial k's policy from the profile of the step that just ended, with
 * the planner reserve `reserve` (0: the default rule); NULL (logged) if
 * none can be made. A delay that leaves no policy falls back to none. */
static cham_plan_t *generate(cham_context_t *ctx, const cham_profile_t *profile, size_t k,
                             uint64_t reserve, uint32_t *delay)
{
    const cham_planner_iface_t *planner = cham_planner_of(ctx->config.planner);
    CHAM_ASSERT(planner);    /* the config was validated */
    cham_device_info_t info;
    cham_device_get_info(ctx->dev, &info);
    cham_planner_config_t pc = cham_planner_config_default();
    pc.capacity = cham_context_budget(ctx);
    pc.h2d_bandwidth = info.h2d_bandwidth;
    pc.d2h_bandwidth = info.d2h_bandwidth;
    pc.score_c = ctx->config.score_c;
    pc.min_swap_bytes = cham_context_min_swap(ctx);
    /* Trials cycle through five plans; the step time decides (docs/
     * executor.md, "What the GenPolicy trials vary"). The second plans
     * swaps alone as the paper does, the others recomputation too, against
     * the ops' costs. The first and fifth issue their swap-ins as early as
     * memory allows, the third and fourth as late as they can still be
     * done: the queues time the ops by their costs, and where the step
     * runs late of them only early copies stay hidden, while late ones keep
     * memory free longer (policy.md, "The copy queues"). */
    size_t kind = k % 5;
    pc.recompute = ctx->config.recompute && kind != 1;
    pc.early_swap_in = pc.recompute && (kind == 0 || kind == 4);
    /* The fifth plans activations only, as the paper: model state moved
     * where it did not have to costs link time the replay can misjudge. */
    pc.model_state = ctx->config.model_state &&
                     (planner->flags & CHAM_PLANNER_FLAG_MODEL_STATE) && kind != 4;
    /* With expandable segments little memory strands, and the baselines
     * keep their reserve. The first plans with a quarter of it, the third
     * with half, the others with all: a ladder, since what a thin reserve
     * risks depends on what pages strand at the peak, which no profile
     * says; the trials and the check in Stable (check_stable) find the
     * policy that runs fastest. `reserve`, doubled after a trial that
     * needed passive swaps, is a floor. */
    if (ctx->memory_moves && !(planner->flags & CHAM_PLANNER_FLAG_STATIC)) {
        uint64_t r = cham_planner_default_reserve(pc.capacity, true);
        r = kind == 0 ? r / 4 : kind == 2 ? r / 2 : r;
        pc.reserve = r > reserve ? r : reserve;
    } else if (reserve || ctx->config.mode == CHAM_MODE_ADVISOR) {
        /* In advisor mode the budget is of the bytes the caller reports:
         * its allocator's rounding is on its side, not in the budget. No
         * reserve until a trial shows one is needed (measure_trial). */
        pc.reserve = reserve;
    }
    pc.free_delay_ops = *delay;
    cham_policy_t *policy = NULL;
    char err[400] = "", note[300] = "";
    cham_status_t st = planner->plan(profile, &pc, cham_planner_options(planner, &ctx->config),
                                     &policy, note, sizeof note, err, sizeof err);
    *delay = pc.free_delay_ops;    /* the planner may have reused blocks at once instead */
    if (st == CHAM_OK && note[0])
        cham_context_log(ctx, "step %llu: %s", (unsigned long long)ctx->number, note);
    if (st != CHAM_OK) {
        ctx->stats.policy_failures++;
        cham_context_log(ctx, "step %llu: no policy: %s", (unsigned long long)ctx->number, err);
        return NULL;
    }
    cham_plan_t *plan =
        plan_new(policy, profile, (planner->flags & CHAM_PLANNER_FLAG_POSITIONAL) != 0);
    if (!plan) {
        cham_context_log(ctx, "step %llu: out of host memory indexing a policy",
                         (unsigned long long)ctx->number);
        return NULL;
    }
    ctx->stats.policies_generated++;
    if (plan->view.predicted_peak > plan->view.usable)
        cham_context_log(ctx, "step %llu: partial policy; %s: %s", (unsigned long long)ctx->number,
                         ctx->config.mode == CHAM_MODE_ADVISOR
                             ? "in advisor mode the caller makes the rest of the room (its "
                               "moves count as passive swaps) or goes past the budget"
                             : "passive swaps make up the rest",
                         err);
    size_t n_rc = 0;
    for (size_t i = 0; i < plan->view.n_items; i++)
        n_rc += plan->view.items[i].recompute;
    cham_context_log(ctx, "step %llu: policy %zu generated: %zu swaps and %zu recomputations, "
                     "blocks reused %u ops after their copies, predicted peak %llu of %llu "
                     "usable bytes, predicted step %.3f ms",
                     (unsigned long long)ctx->number, k + 1,
                     plan->view.n_items - n_rc, n_rc, *delay,
                     (unsigned long long)plan->view.predicted_peak,
                     (unsigned long long)plan->view.usable,
                     (double)plan->view.predicted_step_ns / 1e6);
    return plan;
}

/* Records in t how the step that applied it went. A complete trial that
 * needed passive swaps planned too close to the limit: the next one gets
 * twice the reserve (a partial one left them to passive swaps on
 * purpose). */
static void measure_trial(cham_context_t *ctx, cham_trial_t *t, size_t k, uint64_t step_ns,
                          uint64_t *reserve)
{
    /* A trial starts from an idle device; in Stable the copies out that
     * the step before left running take the link and delay blocks' reuse
     * first: what the replay predicts they cost is added. */
    uint64_t carry = t->plan->view.predicted_carry_ns;
    t->step_ns = step_ns + carry;
    t->passive = ctx->step_passive;
    t->on_demand = ctx->step_on_demand;
    t->over_budget = ctx->step_over_budget;
    cham_context_log(ctx, "step %llu: policy %zu took %.3f ms (+%.3f ms predicted for the copies "
                     "the step before leaves running; predicted %.3f ms from its profile), %llu "
                     "passive and %llu on-demand swaps, %llu bytes over the budget",
                     (unsigned long long)ctx->number, k + 1, (double)step_ns / 1e6,
                     (double)carry / 1e6, (double)t->plan->view.predicted_step_ns / 1e6,
                     (unsigned long long)t->passive, (unsigned long long)t->on_demand,
                     (unsigned long long)t->over_budget);
    const cham_policy_view_t *p = &t->plan->view;
    if (t->passive && p->predicted_peak <= p->usable) {
        uint64_t r = p->capacity - p->usable;
        *reserve = r == 0                 ? p->capacity / 32
                   : r < p->capacity / 4 ? 2 * r + 1
                                         : p->capacity / 2;
    }
}

/* The fastest measured of n trials (within the budget, in advisor mode,
 * if any is, and with the fewest moves of the caller's own), or the
 * fastest clean one when it is close to that (cham_clean_is_close), or at
 * any time with clean_first; NULL when none was measured. */
static cham_plan_t *best_trial(cham_context_t *ctx, const cham_trial_t *trials, size_t n,
                               bool clean_first)
{
    /* Advisor mode: past the budget is not a slower step but memory the
     * caller does not have; such a trial is kept only when all were. */
    bool some_within = false;
    for (size_t i = 0; i < n; i++)
        some_within |= trials[i].step_ns && !trials[i].over_budget;
    /* Advisor mode: the caller's own moves (passive, on demand) are copies
     * the caller makes outside the plan, which the trial's time does not
     * show: fewer of them first, then the faster. */
    bool advisor = ctx->config.mode == CHAM_MODE_ADVISOR;
    const cham_trial_t *best = NULL, *best_clean = NULL;
    for (size_t i = 0; i < n; i++) {
        const cham_trial_t *t = &trials[i];
        if (some_within && t->over_budget)
            continue;
        uint64_t moves = t->passive + t->on_demand;
        uint64_t best_moves = best ? best->passive + best->on_demand : 0;
        if (t->step_ns &&
            (!best || (advisor && moves != best_moves ? moves < best_moves
                                                      : t->step_ns < best->step_ns)))
            best = t;
        if (t->step_ns && cham_trial_clean(t) && (!best_clean || t->step_ns < best_clean->step_ns))
            best_clean = t;
    }
    if (best_clean && (clean_first || cham_clean_is_close(best_clean->step_ns, best->step_ns)))
        best = best_clean;
    if (!best)
        return NULL;
    cham_context_log(ctx, "step %llu: kept policy %zu of %zu (reuse delay %u ops): %llu ns a "
                     "step, %llu passive and %llu on-demand swaps", (unsigned long long)ctx->number,
                     (size_t)(best - trials) + 1, n, best->free_delay,
                     (unsigned long long)best->step_ns, (unsigned long long)best->passive,
                     (unsigned long long)best->on_demand);
    return best->plan;
}

/* ---- sequence classes -------------------------------------------------------*/

/* The class c keeps plan from now on. */
static void keep(cham_class_t *c, cham_plan_t *plan)
{
    cham_plan_retain(plan);
    cham_plan_release(c->kept);
    c->kept = plan;
    cham_class_drop_trials(c);
    cham_plan_release(c->next_trial);
    c->next_trial = NULL;
}

/* The step that ended was of class c; it ran class trial_class's trial
 * (if any) and, when fresh, was profiled. Measures the trial when the
 * prediction was right, keeps the best of config.class_trials
 * (best_trial's, clean ones first), and makes c's next trial from the
 * profile. */
static void class_learn(cham_context_t *ctx, cham_class_t *c, const cham_profile_t *fresh)
{
    cham_class_t *t = cham_class_by_id(ctx, ctx->trial_class);
    ctx->trial_class = 0;
    if (t && t != c) {
        cham_context_log(ctx, "step %llu: was class %u, not the class %u predicted; its trial "
                         "waits for its next step", (unsigned long long)ctx->number, c->id,
                         t->id);
    } else if (t && t->next_trial && ctx->synced_step_ns) {
        cham_trial_t *v = cham_grow(c->trials, &c->cap_trials, c->n_trials + 1, sizeof *v, 4);
        if (v) {
            c->trials = v;
            cham_trial_t *tr = &c->trials[c->n_trials++];
            *tr = (cham_trial_t){.plan = c->next_trial, .free_delay = c->next_delay};
            c->next_trial = NULL;
            measure_trial(ctx, tr, c->n_trials - 1, ctx->synced_step_ns, &c->reserve);
            /* Clean first: a trial is timed from an idle device, but in
             * the loop what its passive swaps leave on the host comes back
             * on demand in the next step, another class's. So a class
             * with no clean trial yet tries on, as long as GenPolicy
             * would (n), while each trial falls less short than the one
             * before (each is made from a profile its predecessor ran). */
            bool any_clean = false;
            for (size_t i = 0; i < c->n_trials; i++)
                any_clean = any_clean || cham_trial_clean(&c->trials[i]);
            const cham_trial_t *before = c->n_trials >= 2 ? tr - 1 : NULL;
            bool try_on = !any_clean && c->n_trials < ctx->config.genpolicy_steps &&
                          (!before || tr->passive + tr->on_demand <
                                          before->passive + before->on_demand);
            if (c->n_trials >= ctx->config.class_trials && !try_on) {
                cham_plan_t *best = best_trial(ctx, c->trials, c->n_trials, true);
                if (best) {
                    cham_check_start(&ctx->check, c->trials, c->n_trials, best, c->id);
                    keep(c, best);
                }
            }
        }
    }
    if (fresh && !c->kept && !c->next_trial) {
        c->next_delay = trial_delay(c->n_trials);
        c->next_trial = generate(ctx, fresh, c->n_trials, c->reserve, &c->next_delay);
    }
}

/* The plan for the next step, from the class predicted for it: its kept
 * policy (the stage becomes Stable), its trial (the step is profiled and
 * timed alone), or none (profiled, to learn the class). */
static cham_plan_t *class_choose(cham_context_t *ctx, const cham_class_t *c,
                                 cham_stage_t *to, bool *sync)
{
    uint32_t context, period;
    cham_class_t *p = cham_class_predict(ctx, &context, &period);
    bool passing = !p && ctx->n_history >= 2;
    if (passing) {
        /* A sequence never followed before is taken for a passing change:
         * the class before it comes back. */
        p = cham_class_by_id(ctx, ctx->history[ctx->n_history - 2]);
    }
    cham_plan_t *next = NULL;
    char what[96];
    if (p && p->kept) {
        next = p->kept;
        p->last_used = ctx->step;
        *to = ctx->stages.stage = CHAM_STAGE_STABLE;
        ctx->stats.policy_cache_hits += next != ctx->exec.plan;
        snprintf(what, sizeof what, "its kept policy");
    } else {
        if (*to == CHAM_STAGE_STABLE)
            *to = ctx->stages.stage = CHAM_STAGE_WARMUP;
        ctx->profile_requested = true;
        if (p && p->next_trial) {
            next = p->next_trial;
            ctx->trial_class = p->id;
            *sync = !ctx->synced;     /* the trial is timed from an idle device */
            snprintf(what, sizeof what, "its trial policy %zu, profiled", p->n_trials + 1);
        } else {
            snprintf(what, sizeof what, "no policy yet, profiled");
        }
    }
    char who[96];
    if (!p)
        snprintf(who, sizeof who, "none predicted");
    else if (passing)
        snprintf(who, sizeof who, "class %u again (a passing change)", p->id);
    else if (period)
        snprintf(who, sizeof who, "class %u (due: every %u steps)", p->id, period);
    else
        snprintf(who, sizeof who, "class %u (%u steps of context)", p->id, context);
    cham_context_log(ctx, "step %llu was class %u (seen %u times); next step: %s: %s",
                     (unsigned long long)ctx->number, c->id, c->seen, who, p ? what : "profiled");
    return next;
}

/* ---- the static planners' sequence (SwapAdvisor, HyperOffload) -----------*/

/* Keeps the op sequence of a profile: the one SwapAdvisor or HyperOffload
 * planned, or the last step's while they wait for a steady one (on host
 * OOM none: every later step then counts as changed). */
static void static_keep(cham_context_t *ctx, const cham_profile_view_t *pv)
{
    free(ctx->static_seq);
    ctx->n_static_seq = 0;
    ctx->static_seq = malloc((pv->n_ops ? pv->n_ops : 1) * sizeof *ctx->static_seq);
    if (!ctx->static_seq)
        return;
    for (size_t k = 0; k < pv->n_ops; k++)
        ctx->static_seq[k] = pv->ops[k].token;
    ctx->n_static_seq = pv->n_ops;
}

static const char *token_name(const cham_context_t *ctx, cham_op_token_t t)
{
    const char *name = cham_op_name(ctx, t);
    return name ? name : "?";
}

/* Whether the profile's op sequence is the one kept. */
static bool same_seq(const cham_context_t *ctx, const cham_profile_view_t *pv)
{
    if (!ctx->static_seq || ctx->n_static_seq != pv->n_ops)
        return false;
    for (size_t k = 0; k < pv->n_ops; k++)
        if (ctx->static_seq[k] != pv->ops[k].token)
            return false;
    return true;
}

/* The step that ended ran the planned sequence; if not, SwapAdvisor or
 * HyperOffload has no plan for it: plan again from the next steady step's
 * profile, or fail the step (swapadvisor_fail_on_change). */
static void static_check(cham_context_t *ctx)
{
    size_t n = ctx->ops_in_step, m = ctx->n_static_seq, k = 0;
    while (k < n && k < m && ctx->seq[k] == ctx->static_seq[k])
        k++;
    if (k == n && n == m && ctx->static_seq)
        return;
    char what[200];
    if (k < n && k < m)
        snprintf(what, sizeof what, "op %zu is %s, not %s", k, token_name(ctx, ctx->seq[k]),
                 token_name(ctx, ctx->static_seq[k]));
    else
        snprintf(what, sizeof what, "it ran %zu ops, not %zu (the first %zu the same)", n, m, k);
    const char *who = cham_planner_kind_name(ctx->config.planner);
    if (ctx->config.planner == CHAM_PLANNER_SWAPADVISOR && ctx->config.swapadvisor_fail_on_change) {
        ctx->static_changed = true;
        cham_context_error(ctx, "step %llu: swapadvisor plans one static op sequence and this "
                           "step's differs from the one it searched (%s); it has no plan "
                           "for it (set swapadvisor_fail_on_change false to search again)",
                           (unsigned long long)ctx->number, what);
        return;
    }
    cham_context_log(ctx, "step %llu: the op sequence differs from the one %s planned "
                     "(%s): its plan is dropped and the next steady step's profile is "
                     "planned again", (unsigned long long)ctx->number, who, what);
    ctx->static_planned = false;
    ctx->stats.static_researches++;
    apply(ctx, NULL);
}

/* ---- the step end -----------------------------------------------------------*/

static bool has_backward(const cham_profile_view_t *v)
{
    for (size_t k = 0; k < v->n_ops; k++)
        if (v->ops[k].phase == CHAM_PHASE_BACKWARD)
            return true;
    return false;
}

/* Whether a baseline plans from this profile. vDNN and Capuchin: the
 * first training step. SwapAdvisor and HyperOffload plan a steady step:
 * the second training step (in the first, state an optimizer makes lazily
 * is new, not model state that lives on) or, where there is no backward
 * (inference), a step running the op sequence of the one before it (a
 * decode step after a decode step, not the prefill). */
static bool plans_from(cham_context_t *ctx, const cham_profile_view_t *pv, bool replans)
{
    if (has_backward(pv))
        return !replans || ctx->static_training_steps++ > 0;
    return replans && same_seq(ctx, pv);
}

bool cham_loop_checking(const cham_context_t *ctx)
{
    const cham_check_t *k = &ctx->check;
    return k->n && !k->done && ctx->exec.plan == k->cand[k->at].plan;
}

/* The kept policy measured in Stable (stable_check.c): a Stable step that
 * applied the policy under check after one that did too (same class) is
 * timed from the compute stream's end of the one before to its own, both
 * synchronized (dispatch.c), as a trial is but without the idle start.
 * Returns the plan for the next step: next, or the candidate the check
 * applies from now on. */
static cham_plan_t *check_stable(cham_context_t *ctx, cham_class_t *c, cham_stage_t from,
                                 cham_stage_t to, cham_plan_t *next)
{
    cham_check_t *k = &ctx->check;
    const cham_plan_t *applied = ctx->exec.plan;
    uint32_t class_id = c ? c->id : 0;
    bool in_row = from == CHAM_STAGE_STABLE && ctx->synced_step_ns && applied &&
                  applied == ctx->prev_stable_plan && class_id == ctx->prev_class;
    ctx->prev_stable_plan = from == CHAM_STAGE_STABLE ? applied : NULL;
    ctx->prev_class = class_id;
    /* Outside classes, a step whose sequence left Stable is not the kept
     * policy's step. */
    if (!in_row || !cham_loop_checking(ctx) || class_id != k->class_id ||
        (!ctx->class_mode && to != CHAM_STAGE_STABLE))
        return next;
    uint64_t trial_ns = k->cand[k->at].trial_ns;
    cham_plan_t *plan;
    cham_check_verdict_t v = cham_check_sample(k, ctx->synced_step_ns, ctx->step_passive > 0,
                                               &plan);
    if (v == CHAM_CHECK_MEASURING)
        return next;
    uint64_t stable_ns = k->cand[v == CHAM_CHECK_TRY_NEXT ? k->at - 1 : k->at].stable_ns;
    if (v == CHAM_CHECK_TRY_NEXT)
        cham_context_log(ctx, "step %llu: the policy applied takes %.3f ms a step in Stable (its "
                         "trial %.3f ms); the next trial took %.3f ms: its policy from now on",
                         (unsigned long long)ctx->number, (double)stable_ns / 1e6,
                         (double)trial_ns / 1e6, (double)k->cand[k->at].trial_ns / 1e6);
    else
        cham_context_log(ctx, "step %llu: kept for good: the policy that takes %.3f ms a step "
                         "in Stable (its trial %.3f ms)", (unsigned long long)ctx->number,
                         (double)stable_ns / 1e6, (double)k->cand[k->at].trial_ns / 1e6);
    if (plan == applied)
        return next;
    ctx->stats.stable_switches++;
    if (c)
        keep(c, plan);
    /* In classes, the next step's plan is its predicted class's kept one. */
    return ctx->class_mode ? next : plan;
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
         * step (the first with a backward), kept for good; SwapAdvisor's
         * and HyperOffload's for as long as the op sequence stays the one
         * they planned. */
        bool replans = cham_planner_has(ctx->config.planner, CHAM_PLANNER_FLAG_REPLANS);
        if (replans && ctx->static_planned)
            static_check(ctx);
        if (!ctx->static_planned && fresh && plans_from(ctx, &pv, replans)) {
            ctx->static_planned = true;
            uint32_t delay = 0;
            cham_plan_t *plan = generate(ctx, prof, 0, ctx->reserve, &delay);
            if (replans)
                static_keep(ctx, &pv);
            apply(ctx, plan);
            cham_plan_release(plan);
        } else if (!ctx->static_planned) {
            if (replans && fresh)
                static_keep(ctx, &pv);
            ctx->profile_requested = true;
        }
        return;
    }

    /* The step's class; a second one that recurs (a one-off, the first
     * step or a rare evaluation, does not) turns the loop to classes for
     * good. */
    cham_class_t *c =
        ctx->config.policy_cache ? cham_class_of(ctx, ctx->seq, ctx->ops_in_step) : NULL;
    if (c) {
        cham_class_seen(ctx, c);
        size_t recurring = 0, kept = 0;
        for (size_t i = 0; i < ctx->n_classes; i++) {
            recurring += ctx->classes[i].seen >= 2;
            kept += ctx->classes[i].kept != NULL;
        }
        /* Where Algorithm 1 keeps finding Stable (a change now and then, a
         * policy kept), it stays: classes are for loops it cannot settle. */
        uint64_t settle = 2 * ((uint64_t)ctx->config.warmup_steps +
                               ctx->config.genpolicy_steps + 2);
        bool unsettled = !kept || ctx->step > ctx->last_stable_step + settle;
        if (recurring >= 2 && unsettled && !ctx->class_mode) {
            ctx->class_mode = true;
            cham_context_log(ctx, "step %llu: a second op sequence recurs (class %u): a policy "
                             "per class from now on", (unsigned long long)ctx->number, c->id);
        }
    }
    if (ctx->class_mode && *to == CHAM_STAGE_GENPOLICY) {
        /* Per class, trials replace Algorithm 1's run of GenPolicy steps. */
        *to = ctx->stages.stage = CHAM_STAGE_WARMUP;
        ctx->stages.stable_steps = 0;
    }

    if (from == CHAM_STAGE_GENPOLICY) {
        /* GenPolicy steps start and end with the device idle (dispatch.c):
         * each trial is timed alone. */
        if (ctx->n_trials && x->plan == ctx->trials[ctx->n_trials - 1].plan &&
            ctx->synced_step_ns)
            measure_trial(ctx, &ctx->trials[ctx->n_trials - 1], ctx->n_trials - 1,
                          ctx->synced_step_ns, &ctx->reserve);
        if (*to == CHAM_STAGE_GENPOLICY) {
            uint32_t delay = trial_delay(ctx->n_trials);
            cham_plan_t *plan =
                fresh ? generate(ctx, prof, ctx->n_trials, ctx->reserve, &delay) : NULL;
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
            next = best_trial(ctx, ctx->trials, ctx->n_trials, false);
            if (!next)
                cham_context_log(ctx, "step %llu: Stable without a policy: none could be made; "
                                 "memory is made by passive swaps", (unsigned long long)ctx->number);
            else
                cham_check_start(&ctx->check, ctx->trials, ctx->n_trials, next, c ? c->id : 0);
            if (next && c)
                keep(c, next);
        }
    }
    next = check_stable(ctx, c, from, *to, next);
    bool sync = false;
    if (ctx->class_mode && *to != CHAM_STAGE_GENPOLICY && c) {
        class_learn(ctx, c, fresh ? prof : NULL);
        next = class_choose(ctx, c, to, &sync);
    } else if (*to == CHAM_STAGE_WARMUP) {
        /* One recurring class so far: a change is Algorithm 1's, and WarmUp
         * has no policy, unless the sequence is one whose policy was kept.
         * A change seen in Stable is taken for a passing one: the kept
         * policy stays for the one step that shows whether the old
         * sequence is back. */
        next = from == CHAM_STAGE_STABLE && c ? x->plan : NULL;
        if (c && c->kept) {
            next = c->kept;
            ctx->stages.stage = CHAM_STAGE_STABLE;
            *to = CHAM_STAGE_STABLE;
            ctx->stats.policy_cache_hits++;
            cham_context_log(ctx, "step %llu: this op sequence was seen before; its policy is "
                             "applied again", (unsigned long long)ctx->number);
        }
    }
    if (*to == CHAM_STAGE_STABLE)
        ctx->last_stable_step = ctx->step;
    if (*to != CHAM_STAGE_GENPOLICY)
        cham_plan_retain(next);    /* trials_clear may drop the last reference */
    apply(ctx, next);
    if (sync) {                   /* after the policy's pinned memory, as dispatch.c does */
        cham_device_synchronize(ctx->dev);
        ctx->synced = true;
        ctx->last_sync_ns = cham_device_host_time(ctx->dev);
    }
    if (*to != CHAM_STAGE_GENPOLICY) {
        cham_plan_release(next);
        trials_clear(ctx);
        ctx->reserve = 0;
    }
    if (ctx->check.done)
        cham_check_clear(&ctx->check);
}

bool cham_loop_static(const cham_context_t *ctx)
{
    return ctx->config.executor &&
           cham_planner_has(ctx->config.planner, CHAM_PLANNER_FLAG_STATIC);
}

void cham_loop_free(cham_context_t *ctx)
{
    apply(ctx, NULL);
    trials_clear(ctx);
    cham_check_clear(&ctx->check);
    free(ctx->trials);
    cham_classes_free(ctx);
    free(ctx->exec.storage_of);
    free(ctx->exec.carried);
    free(ctx->exec.pending);
    free(ctx->actions);
    free(ctx->static_seq);
}
