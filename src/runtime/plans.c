/* Plans (docs/executor.md): a policy indexed for the executor (its items
 * in swap-in order, its matcher, Capuchin's positions), shared by
 * reference count between the trials, the classes and the check in
 * Stable, and applied from the next step on. */
#include <stdlib.h>

#include "common/assert.h"
#include "common/grow.h"
#include "common/order.h"
#include "runtime/loop-impl.h"
#include "runtime/runtime-impl.h"

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
cham_plan_t *cham_plan_new(cham_policy_t *policy, const cham_profile_t *profile,
                             bool positional)
{
    cham_plan_t *p = calloc(1, sizeof *p);
    cham_policy_view_t v;
    cham_policy_get(policy, &v);
    if (!p || !(p->in_order = malloc((v.n_items ? v.n_items : 1) * sizeof *p->in_order)) ||
        !sort_by_swap_in(&v, p->in_order) || !cham_exec_plan_init(p, policy, profile) ||
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

void cham_loop_apply(cham_context_t *ctx, cham_plan_t *plan)
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
