/* The static planners' loop (docs/baselines.md, swapadvisor.md,
 * hyperoffload.md): vDNN and Capuchin plan once from the first training
 * step and keep that policy for good; SwapAdvisor and HyperOffload plan a
 * steady step and keep their plan while the op sequence stays the one they
 * planned. No stage machine, no trials, no classes (loop.c for those). */
#include <stdio.h>
#include <stdlib.h>

#include "policy/registry.h"
#include "runtime/loop-impl.h"
#include "runtime/runtime-impl.h"

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
 * profile, or fail the step when the planner's row says so (fails_on_change). */
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
    const cham_planner_iface_t *p = cham_planner_of(ctx->config.planner);
    if (p && p->fails_on_change && p->fails_on_change(&ctx->config)) {
        ctx->static_changed = true;
        cham_context_error(ctx, "step %llu: %s plans one static op sequence and this "
                           "step's differs from the one it searched (%s); it has no plan "
                           "for it (set %s_fail_on_change false to search again)",
                           (unsigned long long)ctx->number, who, what, who);
        return;
    }
    cham_context_log(ctx, "step %llu: the op sequence differs from the one %s planned "
                     "(%s): its plan is dropped and the next steady step's profile is "
                     "planned again", (unsigned long long)ctx->number, who, what);
    ctx->static_planned = false;
    ctx->stats.static_researches++;
    cham_loop_apply(ctx, NULL);
}

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

void cham_loop_static_end(cham_context_t *ctx, const cham_profile_t *fresh)
{
    /* The baselines: one policy from the profile of the first training
     * step (the first with a backward), kept for good; SwapAdvisor's
     * and HyperOffload's for as long as the op sequence stays the one
     * they planned. */
    bool replans = cham_planner_has(ctx->config.planner, CHAM_PLANNER_FLAG_REPLANS);
    if (replans && ctx->static_planned)
        static_check(ctx);
    cham_profile_view_t pv;
    if (fresh)
        cham_profile_get(fresh, &pv);
    if (!ctx->static_planned && fresh && plans_from(ctx, &pv, replans)) {
        ctx->static_planned = true;
        uint32_t delay = 0;
        cham_plan_t *plan = cham_loop_generate(ctx, fresh, 0, ctx->reserve, NULL, 0, &delay);
        if (replans)
            static_keep(ctx, &pv);
        cham_loop_apply(ctx, plan);
        cham_plan_release(plan);
    } else if (!ctx->static_planned) {
        if (replans && fresh)
            static_keep(ctx, &pv);
        ctx->profile_requested = true;
    }
}
