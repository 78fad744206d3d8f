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
 * step and goes straight to Stable, instead of WarmUp and n more trials.
 *
 * This file is the step end's dispatcher and Algorithm 1's own handlers
 * (GenPolicy, WarmUp, the check in Stable). The other modes have their own
 * files: the static planners (loop_static.c) and sequence classes
 * (loop_classes.c); what they share is plans.c (plans, applying one) and
 * trials.c (generating, measuring, keeping). */
#include <stdio.h>
#include <stdlib.h>

#include "common/grow.h"
#include "policy/registry.h"
#include "runtime/loop-impl.h"
#include "runtime/runtime-impl.h"

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
    size_t measured = k->at;
    uint64_t trial_ns = k->cand[measured].trial_ns;
    cham_plan_t *plan;
    /* Timed as the trials are: as if the step had the first trial's work. */
    uint64_t ns = cham_loop_per_work(ctx->synced_step_ns, k->work_ref, ctx->step_work_ns);
    cham_check_verdict_t v = cham_check_sample(k, ns, ctx->step_passive > 0, &plan);
    if (v == CHAM_CHECK_MEASURING)
        return next;
    uint64_t stable_ns = k->cand[v == CHAM_CHECK_TRY_NEXT ? measured : k->at].stable_ns;
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
        cham_loop_keep(c, plan);
    /* In classes, the next step's plan is its predicted class's kept one. */
    return ctx->class_mode ? next : plan;
}

void cham_loop_check_start(cham_context_t *ctx, const cham_trial_t *trials, size_t n,
                           cham_plan_t *kept, cham_class_t *c)
{
    /* One check at a time: a class whose check another's replaces keeps
     * the best it measured. It had tried the next candidate after its
     * kept policy needed passive swaps in its first Stable steps, and
     * stayed on one 30% slower (an accumulating Llama 2 13B at 33%: 4.1
     * against 3.1 s a step). */
    uint32_t id;
    cham_plan_t *best = cham_check_abandon(&ctx->check, &id);
    cham_class_t *o = best ? cham_class_by_id(ctx, id) : NULL;
    if (o && o != c && o->kept != best) {
        cham_context_log(ctx, "step %llu: class %u's check ends early: the best it measured "
                         "from now on", (unsigned long long)ctx->number, o->id);
        cham_loop_keep(o, best);
    }
    cham_check_start(&ctx->check, trials, n, kept, c ? c->id : 0);
}

/* GenPolicy begins again from a heavier step at most this many times
 * between two Stable stages (genpolicy_end). */
enum { GENPOLICY_RESTARTS = 8 };

/* The end of a GenPolicy step: its trial measured (GenPolicy steps start
 * and end with the device idle, dispatch.c: each trial is timed alone),
 * then the next trial from the step's profile or, entering Stable, the
 * best trial kept. Returns the plan for the next step. */
static cham_plan_t *genpolicy_end(cham_context_t *ctx, cham_class_t *c,
                                  const cham_profile_t *fresh, cham_stage_t *to, cham_plan_t *next)
{
    cham_exec_t *x = &ctx->exec;
    cham_trial_t *last = ctx->n_trials ? &ctx->trials[ctx->n_trials - 1] : NULL;
    bool ran = last && x->plan == last->plan && ctx->synced_step_ns;
    /* A trial's first step may pin host memory for its swaps that
     * reserve_pinned (plans.c) did not (blocks of a size the pool held
     * too few of where the step's copies overlapped): host time, paid
     * once, that a step in Stable does not pay. A Mixtral's first trial
     * took 1235 ms for a plan of 888 ms, 363 ms of it pinning 1.4 GB, and
     * was not kept. Such a trial is timed again on the next step,
     * GenPolicy one step longer, until a step of it pins nothing new (the
     * first steps of a plan may each need one more block of a size), one
     * no faster than the step before (the pool gives segments back and
     * pins them again each step: a cost of the policy) or
     * CHAM_TRIAL_RETIMES. Not one that ran short: its passive swaps pin
     * memory at each step, and the trials keep a clean one first. Nor
     * where the steps vary (layers skipped): the next step has other
     * work, and timing it again compared steps. */
    bool again = ran && ctx->step_pinned && !ctx->step_passive && !ctx->step_on_demand &&
                 !(c && c->varies) &&
                 last->timed_again < CHAM_TRIAL_RETIMES && *to != CHAM_STAGE_WARMUP &&
                 (!last->pinned_ns || ctx->synced_step_ns < last->pinned_ns);
    if (ran && !again)
        cham_loop_measure_trial(ctx, ctx->trials, ctx->n_trials - 1,
                                ctx->synced_step_ns, &ctx->reserve);
    /* Where the steps vary, trials are made from the heaviest step seen
     * (cham_loop_trial_source); GenPolicy often begins on a step that
     * skipped layers, the only profile then, and the trials made from it
     * run short on the full steps after it. A heavier step begins the
     * trials' kinds again from its profile, GenPolicy n steps more; those
     * measured so far stay candidates (timed per work as all are). */
    uint64_t heaviest = c ? c->heaviest_peak : 0;
    const cham_profile_t *source = cham_loop_trial_source(c, fresh);
    if (ctx->n_trials > ctx->trial_base && c && c->heaviest_peak > heaviest && heaviest &&
        ctx->trial_restarts < GENPOLICY_RESTARTS) {
        cham_context_log(ctx, "step %llu: heavier than the step the trials so far were made "
                         "from (%.3f against %.3f GiB without swaps): GenPolicy starts again "
                         "from it, the trials so far kept as candidates",
                         (unsigned long long)ctx->number, (double)c->heaviest_peak / (1 << 30),
                         (double)heaviest / (1 << 30));
        ctx->trial_base = ctx->n_trials;
        ctx->reserve = 0;
        ctx->trial_restarts++;
        /* This step is GenPolicy's first again: its profile makes trial 1. */
        *to = ctx->stages.stage = CHAM_STAGE_GENPOLICY;
        ctx->stages.stable_steps = 1;
    }
    if (again) {
        last->timed_again++;
        last->pinned_ns = ctx->synced_step_ns;
        cham_context_log(ctx, "step %llu: policy %zu's step (%.3f ms) pinned new host memory, "
                         "which later steps do not: it is timed again on the next step",
                         (unsigned long long)ctx->number, ctx->n_trials,
                         (double)ctx->synced_step_ns / 1e6);
        if (ctx->stages.stable_steps)
            ctx->stages.stable_steps--;
        *to = ctx->stages.stage = CHAM_STAGE_GENPOLICY;
        return x->plan;
    }
    if (*to == CHAM_STAGE_GENPOLICY) {
        size_t k = ctx->n_trials - ctx->trial_base;
        uint32_t delay = cham_loop_trial_delay(k);
        cham_plan_t *plan =
            source ? cham_loop_generate(ctx, source, k, ctx->reserve, NULL, 0, &delay) : NULL;
        cham_trial_t *t = plan ? cham_grow(ctx->trials, &ctx->cap_trials, ctx->n_trials + 1,
                                           sizeof *t, 8) : NULL;
        if (t) {
            ctx->trials = t;
            ctx->trials[ctx->n_trials++] = (cham_trial_t){.plan = plan, .free_delay = delay};
        } else {
            cham_plan_release(plan);
        }
        return t ? plan : NULL;
    }
    if (*to == CHAM_STAGE_STABLE) {
        next = cham_loop_best_trial(ctx, ctx->trials, ctx->n_trials,
                                    cham_loop_keep_for(c, CHAM_KEEP_CLEAN_CLOSE));
        if (!next)
            cham_context_log(ctx, "step %llu: Stable without a policy: none could be made; "
                             "memory is made by passive swaps", (unsigned long long)ctx->number);
        else
            cham_loop_check_start(ctx, ctx->trials, ctx->n_trials, next, c);
        if (next && c)
            cham_loop_keep(c, next);
    }
    return next;
}

/* The plan for a WarmUp step while there is one recurring class so far: a
 * change is Algorithm 1's, and WarmUp has no policy, unless the sequence
 * is one whose policy was kept. A change seen in Stable is taken for a
 * passing one: the kept policy stays for the one step that shows whether
 * the old sequence is back. */
static cham_plan_t *warmup_end(cham_context_t *ctx, cham_class_t *c, cham_stage_t from,
                               cham_stage_t *to)
{
    cham_plan_t *next = from == CHAM_STAGE_STABLE && c ? ctx->exec.plan : NULL;
    if (c && c->kept) {
        next = c->kept;
        ctx->stages.stage = CHAM_STAGE_STABLE;
        *to = CHAM_STAGE_STABLE;
        ctx->stats.policy_cache_hits++;
        cham_context_log(ctx, "step %llu: this op sequence was seen before; its policy is "
                         "applied again", (unsigned long long)ctx->number);
    }
    return next;
}

/* The plan for the next step of Algorithm 1's Stable: the kept one; where
 * the steps of class c vary (one canonical sequence), made again where it
 * runs short on heavier steps (cham_loop_cover_heavier), the next step
 * profiled while that looks for one. */
static cham_plan_t *stable_end(cham_context_t *ctx, const cham_class_t *c, cham_stage_t from,
                               const cham_profile_t *fresh, cham_plan_t *next)
{
    bool varies = c && c->varies && next == ctx->exec.plan;
    cham_class_t *p = varies ? cham_loop_cover_heavier(ctx, from, fresh) : NULL;
    if (!p)
        return next;
    ctx->profile_requested |= p->hunt_left > 0;
    return p->kept ? p->kept : next;
}

void cham_loop_step_end(cham_context_t *ctx, cham_stage_t from, cham_stage_t *to)
{
    cham_exec_t *x = &ctx->exec;
    if (x->plan) {
        /* Capuchin's positions count as strict hits. */
        const cham_match_t *m = &x->plan->match;
        uint64_t hits = m->hits_strict + m->hits_loose +
                        (x->plan->positions ? x->plan->positions->hits : 0);
        ctx->stats.steps_with_policy++;
        ctx->stats.items_matched += hits;
        ctx->stats.matched_loose += m->hits_loose;
        ctx->stats.items_missed += x->plan->view.n_items - hits;
    }
    if (!ctx->config.executor)
        return;

    const cham_profile_t *prof = ctx->last_profile;
    const cham_profile_t *fresh = prof && ctx->last_profile_step + 1 == ctx->step ? prof : NULL;
    if (cham_loop_static(ctx)) {
        cham_loop_static_end(ctx, fresh);
        return;
    }

    cham_class_t *c = cham_loop_class_of_step(ctx);
    if (ctx->class_mode && *to == CHAM_STAGE_GENPOLICY) {
        /* Per class, trials replace Algorithm 1's run of GenPolicy steps. */
        *to = ctx->stages.stage = CHAM_STAGE_WARMUP;
        ctx->stages.stable_steps = 0;
    }
    cham_plan_t *next = x->plan;
    if (from == CHAM_STAGE_GENPOLICY)
        next = genpolicy_end(ctx, c, fresh, to, next);
    next = check_stable(ctx, c, from, *to, next);
    bool sync = false;
    if (ctx->class_mode && *to != CHAM_STAGE_GENPOLICY && c)
        next = cham_loop_classes_end(ctx, c, from, fresh, to, &sync);
    else if (*to == CHAM_STAGE_WARMUP)
        next = warmup_end(ctx, c, from, to);
    else if (*to == CHAM_STAGE_STABLE)
        next = stable_end(ctx, c, from, fresh, next);
    if (*to == CHAM_STAGE_STABLE)
        ctx->last_stable_step = ctx->step;
    if (*to != CHAM_STAGE_GENPOLICY)
        cham_plan_retain(next);    /* trials_clear may drop the last reference */
    cham_loop_apply(ctx, next);
    if (sync) {                   /* after the policy's pinned memory, as dispatch.c does */
        cham_context_idle(ctx);
        ctx->synced = true;
    }
    if (*to != CHAM_STAGE_GENPOLICY) {
        cham_plan_release(next);
        cham_loop_trials_clear(ctx);
        ctx->reserve = 0;
        ctx->trial_restarts = 0;
        ctx->trial_base = 0;
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
    cham_loop_apply(ctx, NULL);
    cham_loop_trials_clear(ctx);
    cham_check_clear(&ctx->check);
    free(ctx->trials);
    cham_classes_free(ctx);
    free(ctx->exec.storage_of);
    free(ctx->exec.carried);
    free(ctx->exec.pending);
    free(ctx->actions);
    free(ctx->static_seq);
}
