/* Trials (paper §5, docs/executor.md "What the GenPolicy trials vary"):
 * a policy made from a step's profile by the configured planner, the
 * variations the trials cycle through, a trial measured on the step that
 * applied it, and the one to keep. Algorithm 1's GenPolicy (loop.c) and
 * each sequence class (loop_classes.c) run their own trials. */
#include <stdio.h>
#include <stdlib.h>

#include "common/assert.h"
#include "policy/registry.h"
#include "runtime/loop-impl.h"
#include "runtime/runtime-impl.h"

void cham_loop_trials_clear(cham_context_t *ctx)
{
    for (size_t i = 0; i < ctx->n_trials; i++)
        cham_plan_release(ctx->trials[i].plan);
    ctx->n_trials = 0;
}

uint32_t cham_loop_trial_delay(size_t k)
{
    return k == 0 ? 0 : k >= 16 ? UINT32_C(1) << 15 : UINT32_C(1) << (k - 1);
}

uint64_t cham_work_ns(uint64_t kernel_overhead_ns, size_t n_ops, double cost_ns)
{
    return n_ops ? (uint64_t)((double)kernel_overhead_ns * (double)n_ops + cost_ns + 0.5) : 0;
}

/* The profile's work (cham_work_ns); 0 when an op has no cost. */
static uint64_t work_of(const cham_profile_t *profile)
{
    cham_profile_view_t v;
    cham_profile_get(profile, &v);
    double cost = 0;
    for (size_t i = 0; i < v.n_ops; i++) {
        if (!v.ops[i].has_cost)
            return 0;
        cost += v.ops[i].cost_ns;
    }
    return cham_work_ns(v.kernel_overhead_ns, v.n_ops, cost);
}

uint64_t cham_loop_per_work(uint64_t ns, uint64_t to, uint64_t from)
{
    return to && from && to != from ? (uint64_t)((double)ns * (double)to / (double)from + 0.5)
                                    : ns;
}

/* Trial k's policy from the profile of the step that just ended, with
 * the planner reserve `reserve` (0: the default rule); NULL (logged) if
 * none can be made. A delay that leaves no policy falls back to none. */
cham_plan_t *cham_loop_generate(cham_context_t *ctx, const cham_profile_t *profile, size_t k,
                                uint64_t reserve, const uint64_t *resident, size_t n_resident,
                                uint32_t *delay)
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
    /* Only the managed runtime keeps what the caller frees (ghosts). */
    pc.through_freed = ctx->config.mode == CHAM_MODE_MANAGED;
    /* The fifth plans activations only, as the paper: model state moved
     * where it did not have to costs link time the replay can misjudge. */
    pc.model_state = ctx->config.model_state &&
                     (planner->flags & CHAM_PLANNER_FLAG_MODEL_STATE) && kind != 4;
    /* The fourth keeps placement's own rule for swaps across the step's
     * end: the other rule is kept by its prediction, which a step unlike
     * its profile can belie (policy.md, "Swaps across the step's end"). */
    pc.cover_tails = kind != 3;
    /* A swap-in at its use comes back into the room the blocks given back
     * at that op make, which only segments that move make whole: with the
     * classic allocator's the runtime ran such plans short (the GPT
     * trainer at 22% of its peak: 463 -> 2192 passive swap-outs in its
     * Stable steps; policy.md, "Swap-ins at the use"). */
    pc.swap_in_at_use = ctx->memory_moves;
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
    pc.resident_at_end = resident;
    pc.n_resident_at_end = n_resident;
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
        cham_plan_new(policy, profile, (planner->flags & CHAM_PLANNER_FLAG_POSITIONAL) != 0);
    if (!plan) {
        cham_context_log(ctx, "step %llu: out of host memory indexing a policy",
                         (unsigned long long)ctx->number);
        return NULL;
    }
    plan->trial = k;
    plan->free_delay = *delay;
    plan->work_ns = work_of(profile);
    ctx->stats.policies_generated++;
    if (plan->view.predicted_peak > plan->view.usable)
        cham_context_log(ctx, "step %llu: partial policy; %s: %s", (unsigned long long)ctx->number,
                         ctx->config.mode == CHAM_MODE_ADVISOR
                             ? "in advisor mode the caller makes the rest of the room (its "
                               "moves count as passive swaps) or goes past the budget"
                             : "passive swaps make up the rest",
                         err);
    size_t n_rc = 0, n_at_use = 0;
    for (size_t i = 0; i < plan->view.n_items; i++) {
        const cham_policy_item_t *it = &plan->view.items[i];
        n_rc += it->recompute;
        n_at_use += !it->recompute && !it->in_use.overwrites && it->swap_in_op == it->use_op;
    }
    cham_context_log(ctx, "step %llu: policy %zu generated: %zu swaps (%zu back only at their "
                     "use) and %zu recomputations, blocks reused %u ops after their copies, "
                     "predicted peak %llu of %llu usable bytes, predicted step %.3f ms",
                     (unsigned long long)ctx->number, k + 1,
                     plan->view.n_items - n_rc, n_at_use, n_rc, *delay,
                     (unsigned long long)plan->view.predicted_peak,
                     (unsigned long long)plan->view.usable,
                     (double)plan->view.predicted_step_ns / 1e6);
    return plan;
}

/* Records in t how the step that applied it went. A complete trial that
 * needed passive swaps planned too close to the limit: the next one gets
 * twice the reserve (a partial one left them to passive swaps on
 * purpose). */
void cham_loop_measure_trial(cham_context_t *ctx, cham_trial_t *trials, size_t k,
                             uint64_t step_ns, uint64_t *reserve)
{
    cham_trial_t *t = &trials[k];
    /* Where the steps differ in work (layers skipped at random: one
     * canonical sequence, profile/canon.c), a trial that ran on a lighter
     * step would look the faster: each is timed, and its prediction read,
     * as if its step had the first trial's plan's work. A layer-drop
     * Llama 2 at 33% of its peak timed a swap-only trial on a step of 4
     * layers fewer at 477 ms and a recomputing one on a step of 1 layer
     * fewer at 491 ms: 444 and 414 ms per the same work. Where every step has the same work
     * (static loops) the times stand as measured. */
    uint64_t ref = trials[0].plan->work_ns, work = ctx->step_work_ns;
    /* A trial starts from an idle device; in Stable the copies out that
     * the step before left running take the link and delay blocks' reuse
     * first: what the replay predicts they cost is added. */
    uint64_t carry = t->plan->view.predicted_carry_ns;
    t->step_ns = cham_loop_per_work(step_ns, ref, work) + carry;
    t->predicted_ns = cham_loop_per_work(t->plan->view.predicted_step_ns, ref, t->plan->work_ns);
    t->passive = ctx->step_passive;
    t->on_demand = ctx->step_on_demand;
    t->over_budget = ctx->step_over_budget;
    char scaled[80] = "";
    if (t->step_ns != step_ns + carry)
        snprintf(scaled, sizeof scaled, ", %.3f ms at the first trial's work",
                 (double)(t->step_ns - carry) / 1e6);
    cham_context_log(ctx, "step %llu: policy %zu took %.3f ms%s (+%.3f ms predicted for the "
                     "copies the step before leaves running; predicted %.3f ms from its "
                     "profile), %llu passive and %llu on-demand swaps, %llu bytes over the "
                     "budget", (unsigned long long)ctx->number, k + 1, (double)step_ns / 1e6,
                     scaled, (double)carry / 1e6, (double)t->plan->view.predicted_step_ns / 1e6,
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

/* Where class c's steps vary, a trial ran clean or short by the draw of
 * its step (one lighter than the profile its plan was made from, or
 * heavier), and the kept policy is made again on heavier steps
 * (cham_loop_cover_heavier): the fastest per work is kept. A layer-drop
 * Llama 2 at 33% of its peak kept a swap-only policy, clean on a step of
 * 4 layers fewer and 7% slower per work than one 2 swaps short
 * (cham_loop_measure_trial), and ran 0.496 s a step against 0.437 s. */
cham_keep_t cham_loop_keep_for(const cham_class_t *c, cham_keep_t otherwise)
{
    return c && c->varies ? CHAM_KEEP_FASTEST : otherwise;
}

/* The fastest measured of n trials (within the budget, in advisor mode,
 * if any is, and with the fewest moves of the caller's own), or the
 * fastest clean one as `keep` says; NULL when none was measured. */
cham_plan_t *cham_loop_best_trial(cham_context_t *ctx, const cham_trial_t *trials, size_t n,
                                  cham_keep_t keep)
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
    if (best_clean && (keep == CHAM_KEEP_CLEAN_FIRST ||
                       (keep == CHAM_KEEP_CLEAN_CLOSE &&
                        cham_clean_is_close(best_clean->step_ns, best->step_ns))))
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
