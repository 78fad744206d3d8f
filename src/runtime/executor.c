/* Applying a policy to the step being run (paper §6).
 *
 * Every tensor use is matched against the plan's index (exec/match.h). A
 * matched storage is at its last forward use: when the op ends (its kernels
 * are queued) the storage is swapped out on the swap-out stream, and its
 * device block is handed back after the op the policy's simulator chose
 * (free_op), behind an event wait: the custom recordStream. When the op the
 * policy names for an item's swap-in begins, the storage comes back on the
 * swap-in stream; the op that uses it makes the compute stream wait on it.
 *
 * Ops are placed by their index in the step, counted from the step's
 * start. When the step drifts from the profiled one (an op more or less),
 * swaps move by as much; a storage still on the host when an op needs it
 * comes back on demand, so correctness never depends on the plan. */
#include <stdlib.h>
#include <string.h>

#include "common/assert.h"
#include "common/grow.h"
#include "runtime/runtime-impl.h"

void cham_exec_step_start(cham_context_t *ctx)
{
    cham_exec_t *x = &ctx->exec;
    x->step_base = ctx->ops_total;
    x->n_pending = 0;
    x->in_next = 0;
    if (x->plan) {
        cham_match_step_start(&x->plan->match);
        memset(x->storage_of, 0, x->plan->view.n_items * sizeof *x->storage_of);
    }
}

void cham_exec_advise(cham_context_t *ctx, cham_action_kind_t kind, cham_tensor_t *t,
                      bool needed, uint64_t free_after_op)
{
    cham_action_t *a = cham_grow(ctx->actions, &ctx->cap_actions, ctx->n_actions + 1, sizeof *a,
                                 8);
    if (!a)
        return;           /* host OOM: advice lost; on-demand advice follows later */
    ctx->actions = a;
    ctx->actions[ctx->n_actions++] = (cham_action_t){.kind = kind, .tensor = t, .needed = needed,
                                                     .free_after_op = free_after_op};
    if (!needed)
        t->storage->advised = true;
}

/* The op after which item's block may be reused: the planned one, but
 * never the op that ends now, whose wait would stall the next op on the
 * copy the policy meant to hide. */
static uint64_t release_op(const cham_context_t *ctx, uint32_t item)
{
    uint64_t op = ctx->ops_total;
    uint64_t free_op = ctx->exec.step_base + ctx->exec.plan->view.items[item].free_op;
    return free_op <= op ? op + 1 : free_op;
}

void cham_exec_use(cham_context_t *ctx, cham_tensor_t *t, cham_op_token_t token)
{
    cham_exec_t *x = &ctx->exec;
    cham_storage_t *s = t->storage;
    uint32_t item = cham_match_use(&x->plan->match, &s->feat, token);
    if (item == CHAM_MATCH_NONE)
        return;
    if (s->item != CHAM_MATCH_NONE && x->storage_of[s->item] == s)
        x->storage_of[s->item] = NULL;    /* a storage stands for one item */
    x->storage_of[item] = s;
    s->item = item;
    if (ctx->config.mode == CHAM_MODE_ADVISOR) {
        cham_exec_advise(ctx, CHAM_ACTION_SWAP_OUT, t, false, release_op(ctx, item));
        return;
    }
    uint32_t *p = cham_grow(x->pending, &x->cap_pending, x->n_pending + 1, sizeof *p, 16);
    if (!p)
        return;           /* host OOM: this swap-out is skipped, nothing breaks */
    x->pending = p;
    x->pending[x->n_pending++] = item;
}

void cham_exec_forget(cham_context_t *ctx, cham_storage_t *s)
{
    cham_exec_t *x = &ctx->exec;
    if (s->item != CHAM_MATCH_NONE && x->plan && s->item < x->plan->view.n_items &&
        x->storage_of[s->item] == s)
        x->storage_of[s->item] = NULL;
    s->item = CHAM_MATCH_NONE;
}

cham_status_t cham_exec_op_begin(cham_context_t *ctx)
{
    cham_exec_t *x = &ctx->exec;
    const cham_policy_view_t *pol = &x->plan->view;
    uint32_t k = ctx->ops_in_step;               /* the op being begun */
    while (x->in_next < pol->n_items) {
        uint32_t item = x->plan->in_order[x->in_next];
        if (pol->items[item].swap_in_op > k)
            break;
        x->in_next++;
        cham_storage_t *s = x->storage_of[item];
        if (!s || s->residency != CHAM_RESIDENT_HOST)
            continue;     /* not matched, or already back */
        if (ctx->config.mode == CHAM_MODE_ADVISOR) {
            cham_exec_advise(ctx, CHAM_ACTION_SWAP_IN, s->view_list, false, 0);
            continue;
        }
        cham_status_t st = cham_storage_swap_in(s, CHAM_SWAP_PLANNED);
        if (st != CHAM_OK)
            return st;
    }
    return CHAM_OK;
}

cham_status_t cham_exec_op_end(cham_context_t *ctx)
{
    cham_exec_t *x = &ctx->exec;
    for (size_t i = 0; i < x->n_pending; i++) {
        uint32_t item = x->pending[i];
        cham_storage_t *s = x->storage_of[item];
        if (!s || !s->block || s->residency != CHAM_RESIDENT_DEVICE)
            continue;     /* released by its op, or not on the device */
        cham_status_t st = cham_storage_swap_out(s, CHAM_SWAP_PLANNED, release_op(ctx, item));
        if (st == CHAM_ERR_HOST_BUDGET) {
            /* Out of pinned memory: the tensor stays; the OOM path copes. */
            cham_context_log(ctx, "step %llu: planned swap-out skipped: %s",
                             (unsigned long long)ctx->step, ctx->error);
            continue;
        }
        if (st != CHAM_OK)
            return st;
    }
    x->n_pending = 0;
    return CHAM_OK;
}
