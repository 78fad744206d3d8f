/* Applying a policy to the step being run (paper §6).
 *
 * Every tensor use is matched against the plan's index (match/match.h). A
 * matched storage is at its last forward use: when the op ends (its kernels
 * are queued) the storage is swapped out on the swap-out stream, and its
 * device block is handed back after the op the planner's placement model chose
 * (free_op), behind an event wait: the custom recordStream. When the op the
 * policy names for an item's swap-in begins, the storage comes back on the
 * swap-in stream; the op that uses it makes the compute stream wait on it.
 *
 * An item to recompute is dropped instead of swapped out, and its op runs
 * again when the op named for its swap-in begins.
 *
 * An item that wraps (model state) comes back in the next step: its
 * storage is carried over the step's end with the op of its swap-in,
 * whatever plan the next step applies; a plan applied anew sends its own
 * away between the steps (docs/executor.md, "Model state across the
 * step's end").
 *
 * The clock: ops are placed by the op of the profiled step the running
 * op stands for. It moves on by one an op, and the uses the plan knows set
 * it where the profile had them: an item matched at its last forward use
 * stands for its swap_out_op, the first use after that for its use_op
 * (when the op there is the same op); where the step marks its blocks,
 * each edge of its runs of blocks stands for the profiled step's edge
 * (clock_follow_blocks), else the backward's first op stands for the
 * profiled backward's, past what the forward skipped. So a step that
 * skips a block, or runs one more, places the swaps after it where the
 * profiled step had them, not a block's ops early or late
 * (docs/executor.md, "The clock").
 * A storage still on the host when an op needs it comes back on demand,
 * so correctness never depends on the plan. */
#include <stdlib.h>
#include <string.h>

#include "common/assert.h"
#include "common/grow.h"
#include "common/order.h"
#include "policy/plan-impl.h"
#include "runtime/runtime-impl.h"

void cham_exec_step_start(cham_context_t *ctx)
{
    cham_exec_t *x = &ctx->exec;
    x->step_base = ctx->ops_total;
    x->clock = x->clock_next = 0;
    x->forward_ops = 0;
    x->in_backward = false;
    x->region = CHAM_REGION_START;
    x->block_ops = x->hold = 0;
    x->n_pending = 0;
    x->in_next = 0;
    if (x->plan) {
        cham_match_step_start(&x->plan->match);
        if (x->plan->positions)
            cham_positions_step_start(x->plan->positions);
        memset(x->storage_of, 0, x->plan->view.n_items * sizeof *x->storage_of);
    }
}

static int by_carry_op(const void *a, const void *b)
{
    uint32_t x = ((const cham_carried_t *)a)->op, y = ((const cham_carried_t *)b)->op;
    return (x > y) - (x < y);
}

/* Slot numbers after the carried list changed, and its order by op. */
static void carried_sort(cham_exec_t *x)
{
    if (x->n_carried > 1)         /* carried is NULL until the first */
        qsort(x->carried, x->n_carried, sizeof *x->carried, by_carry_op);
    for (size_t i = 0; i < x->n_carried; i++)
        if (x->carried[i].storage)
            x->carried[i].storage->carry_slot = i + 1;
}

static bool carried_add(cham_exec_t *x, cham_storage_t *s, uint32_t op)
{
    cham_carried_t *c = cham_grow(x->carried, &x->cap_carried, x->n_carried + 1, sizeof *c, 16);
    if (!c)
        return false;     /* host OOM: it comes back on demand */
    x->carried = c;
    x->carried[x->n_carried++] = (cham_carried_t){.storage = s, .op = op};
    s->carry_slot = x->n_carried;
    return true;
}

/* Sends s, on the device, away as the plan's wrapping item `it` wants it
 * across the step's end: it left with the step that ended, its block is
 * given back at free_op, and it comes back at the item's swap-in op. Out
 * of pinned memory, it stays (the OOM path copes). False: out of host
 * memory for the carried list. */
static bool send_and_carry(cham_context_t *ctx, cham_storage_t *s, const cham_policy_item_t *it,
                           uint64_t free_op)
{
    if (cham_storage_swap_out(s, CHAM_SWAP_PLANNED, free_op) != CHAM_OK) {
        cham_context_log(ctx, "step %llu: \"%s\" not sent away for the policy: %s",
                         (unsigned long long)ctx->number, s->label, ctx->error);
        return true;
    }
    s->away_step = ctx->step - 1;
    return carried_add(&ctx->exec, s, it->swap_in_op);
}

/* Model state the plan keeps away across the step's end that this step
 * did not use after it came back (an overflow skips AdamW, which reads the
 * state an update step's plan brings back for it) was never sent away
 * again: it goes now, as a new plan's does (cham_exec_send_away), so that
 * the next step starts with the memory its plan expects. Left on the
 * device, it took the next step's peak over the budget (GPT-2 1.5B on the
 * 910B, an overflow every 7 steps, `--optimizer auto` at 27.07 GiB: L0's
 * master weights and moments; 3 passive swaps, 649 ms against 505 ms, in
 * each step after an overflow, simulated). False: out of host memory. */
static bool carry_unused(cham_context_t *ctx)
{
    cham_exec_t *x = &ctx->exec;
    const cham_policy_view_t *pol = &x->plan->view;
    bool any = false;
    for (size_t i = 0; i < pol->n_items && !any; i++)
        any = pol->items[i].wraps && !x->storage_of[i];
    if (!any || ctx->config.mode == CHAM_MODE_ADVISOR)
        return true;
    size_t n;
    cham_storage_t **by = cham_storages_by_id(ctx, &n);
    if (!by)
        return false;
    bool ok = true;
    for (size_t i = 0; ok && i < pol->n_items; i++) {
        const cham_policy_item_t *it = &pol->items[i];
        cham_storage_t *s = it->wraps && !x->storage_of[i] ? cham_storage_find(by, n, it->storage)
                                                           : NULL;
        if (!s || s->bytes != it->bytes || s->carry_slot)
            continue;
        /* Brought back and never used: its swap-in may still be in flight. */
        if ((s->residency == CHAM_RESIDENT_DEVICE || s->residency == CHAM_RESIDENT_MOVING_IN) &&
            s->block)
            ok = send_and_carry(ctx, s, it, ctx->ops_total);
        else if (cham_storage_on_host(s))
            ok = carried_add(x, s, it->swap_in_op);
    }
    free(by);
    return ok;
}

void cham_exec_carry(cham_context_t *ctx)
{
    cham_exec_t *x = &ctx->exec;
    for (size_t i = 0; i < x->n_carried; i++)
        if (x->carried[i].storage)
            x->carried[i].storage->carry_slot = 0;
    x->n_carried = x->carry_next = 0;
    if (!x->plan)
        return;
    const cham_policy_view_t *pol = &x->plan->view;
    for (size_t i = 0; i < pol->n_items; i++) {
        cham_storage_t *s = x->storage_of[i];
        if (pol->items[i].wraps && s && s->residency == CHAM_RESIDENT_HOST &&
            !carried_add(x, s, pol->items[i].swap_in_op))
            break;
    }
    carry_unused(ctx);    /* host OOM: what it left comes back on demand */
    carried_sort(x);
}

/* ---- model state between plans --------------------------------------------*/

/* The profiled step's runs of ops in blocks, in the forward and in the
 * backward: anchored where there is one of each, the forward's first
 * (a step of one micro-batch; pipeline schedules and evaluations make
 * more, and the clock follows the phase alone there). */
static void find_block_runs(cham_plan_t *p, const cham_profile_view_t *v)
{
    uint32_t runs = 0, start[2] = {0}, end[2] = {0};
    cham_phase_t phase[2] = {CHAM_PHASE_OTHER, CHAM_PHASE_OTHER};
    for (size_t k = 0; k < v->n_ops; k++) {
        const cham_profile_op_t *op = &v->ops[k];
        bool in = op->block >= 0 &&
                  (op->phase == CHAM_PHASE_FORWARD || op->phase == CHAM_PHASE_BACKWARD);
        if (!in)
            continue;
        if (runs && end[runs - 1] == k && phase[runs - 1] == op->phase) {
            end[runs - 1] = (uint32_t)k + 1;       /* the run goes on */
            continue;
        }
        if (runs++ == 2)
            break;                                  /* a third: not anchored */
        start[runs - 1] = (uint32_t)k;
        end[runs - 1] = (uint32_t)k + 1;
        phase[runs - 1] = op->phase;
    }
    p->anchored = runs == 2 && phase[0] == CHAM_PHASE_FORWARD && phase[1] == CHAM_PHASE_BACKWARD;
    p->fwd_blocks = start[0], p->fwd_blocks_end = end[0];
    p->bwd_blocks = start[1], p->bwd_blocks_end = end[1];
}

/* An anchored plan's predicted memory after the forward's blocks, at the
 * next op's begin (stand_in_for_skipped). false: out of host memory. */
static bool predict_head(cham_plan_t *p, const cham_policy_t *policy,
                         const cham_profile_t *profile, size_t n_ops)
{
    uint64_t *actual = malloc((2 * n_ops + 1) * sizeof *actual);
    uint64_t *curve = malloc((2 * n_ops + 1) * sizeof *curve);
    int64_t *mem = malloc((2 * n_ops + 1) * sizeof *mem);
    bool ok = actual && curve && mem;
    if (ok) {
        cham_profile_memory_curve(profile, actual, curve);
        cham_gen_predicted_memory(policy, curve, mem);
        int64_t at = mem[2 * (size_t)p->fwd_blocks_end];
        p->head_mem = at > 0 ? (uint64_t)at : 0;
    }
    free(actual);
    free(curve);
    free(mem);
    return ok;
}

bool cham_exec_plan_init(cham_plan_t *p, const cham_policy_t *pol,
                         const cham_profile_t *profile)
{
    cham_policy_view_t view;
    cham_policy_get(pol, &view);
    const cham_policy_view_t *policy = &view;
    cham_profile_view_t v;
    cham_profile_get(profile, &v);
    p->state_ids = malloc((v.n_uses ? v.n_uses : 1) * sizeof *p->state_ids);
    p->tokens = malloc((v.n_ops ? v.n_ops : 1) * sizeof *p->tokens);
    p->makes_dropped = calloc(v.n_ops ? v.n_ops : 1, sizeof *p->makes_dropped);
    if (!p->state_ids || !p->tokens || !p->makes_dropped)
        return false;     /* cham_exec_plan_free frees them */
    for (size_t i = 0; i < policy->n_items; i++) {
        const cham_policy_item_t *it = &policy->items[i];
        if (it->recompute && it->made_op < v.n_ops)
            p->makes_dropped[it->made_op] = true;
    }
    p->forward_ops = p->backward_ops = 0;
    p->backward_first = (uint32_t)v.n_ops;
    for (size_t k = 0; k < v.n_ops; k++) {
        p->tokens[k] = v.ops[k].token;
        if (v.ops[k].phase == CHAM_PHASE_BACKWARD) {
            p->backward_first = p->backward_ops++ ? p->backward_first : (uint32_t)k;
        } else if (v.ops[k].phase == CHAM_PHASE_FORWARD && !p->backward_ops) {
            p->forward_ops++;
        }
    }
    p->n_tokens = v.n_ops;
    find_block_runs(p, &v);
    if (p->anchored && !predict_head(p, pol, profile, v.n_ops))
        return false;
    size_t n = 0;
    for (size_t u = 0; u < v.n_uses; u++)
        if (v.uses[u].persistent)
            p->state_ids[n++] = v.uses[u].storage;
    p->n_state = cham_sort_unique_u64(p->state_ids, n);
    return true;
}

void cham_exec_plan_free(cham_plan_t *p)
{
    free(p->state_ids);
    free(p->tokens);
    free(p->makes_dropped);
}

/* Whether the storage of profile id `id` is model state of plan p's step. */
static bool plan_state(const cham_plan_t *p, uint64_t id)
{
    return bsearch(&id, p->state_ids, p->n_state, sizeof *p->state_ids, cham_order_u64);
}

/* When storage s, away, comes back under plan p when p does not want it
 * away: at op 0, or never in this step if p's step does not use it. */
static uint32_t carry_op(const cham_plan_t *p, const cham_storage_t *s)
{
    return !s || plan_state(p, s->id) ? 0 : UINT32_MAX;
}

static cham_status_t bring_back(cham_context_t *ctx, cham_storage_t *s);

void cham_exec_send_away(cham_context_t *ctx)
{
    cham_exec_t *x = &ctx->exec;
    const cham_policy_view_t *pol = &x->plan->view;
    /* What the plan before left away comes back first thing, as this
     * plan expects, unless this plan wants it away too (below) or its step
     * does not use it at all: then it stays away. Brought back, AdamW's
     * state, which an update step's plan leaves away, filled the device at
     * op 0 of the accumulation step after it, which does not use it
     * (docs/executor.md, "Model state the new plan's step does not use
     * stays away"). */
    for (size_t i = 0; i < x->n_carried; i++)
        x->carried[i].op = carry_op(x->plan, x->carried[i].storage);
    size_t n;
    cham_storage_t **by = cham_storages_by_id(ctx, &n);
    if (!by)
        return;           /* host OOM: the first step runs on passive swaps */
    for (size_t i = 0; i < pol->n_items; i++) {
        const cham_policy_item_t *it = &pol->items[i];
        cham_storage_t *s = it->wraps ? cham_storage_find(by, n, it->storage) : NULL;
        /* Another run's policy names other storages: one of another size
         * is not the one (moving a wrong one costs time, never data). */
        if (!s || s->bytes != it->bytes)
            continue;
        if (s->carry_slot) {
            x->carried[s->carry_slot - 1].op = it->swap_in_op;
            continue;
        }
        if (cham_storage_on_host(s)) {   /* a passive swap's */
            if (!carried_add(x, s, it->swap_in_op))
                break;
            continue;
        }
        if (ctx->config.mode == CHAM_MODE_ADVISOR) {
            /* The caller moves it, after the next step's first op. */
            if (s->residency == CHAM_RESIDENT_DEVICE && it->swap_in_op > 0 &&
                !carried_add(x, s, it->swap_in_op))
                break;
            continue;
        }
        if (s->residency != CHAM_RESIDENT_DEVICE || !s->block)
            continue;
        /* Its block is given back where the plan gives it back in the
         * steps it runs: a trial then starts with the memory those steps
         * start with. */
        uint64_t free_op = ctx->ops_total +
                           (it->free_op > pol->n_ops ? it->free_op - pol->n_ops : 0);
        if (!send_and_carry(ctx, s, it, free_op))
            break;
    }
    /* So does what passive swaps left on the host (on demand, each would
     * stall its first use). */
    for (size_t i = 0; i < n; i++)
        if (cham_storage_on_host(by[i]) && !by[i]->carry_slot &&
            !carried_add(x, by[i], carry_op(x->plan, by[i])))
            break;
    carried_sort(x);
    free(by);
    /* What comes back at op 0 comes back now: the copies are the change of
     * plans', and where the loop times the next step from an idle device
     * (a GenPolicy trial) they are not the new plan's (docs/executor.md,
     * "What the plan before left away comes back between the steps").
     * Not a storage whose bytes are the caller's host copy: an optimizer
     * on the host updates it there every step, and its copy back is every
     * step's. */
    for (size_t i = 0; ctx->config.mode != CHAM_MODE_ADVISOR && i < x->n_carried; i++) {
        cham_storage_t *s = x->carried[i].storage;
        if (x->carried[i].op == 0 && s && s->residency == CHAM_RESIDENT_HOST && !s->backed &&
            bring_back(ctx, s) != CHAM_OK)
            break;        /* it comes back at op 0, or on demand */
    }
}

/* A planned swap-in (the plan's or a carried one) at the op being begun:
 * s comes back if it is still away. */
static cham_status_t bring_back(cham_context_t *ctx, cham_storage_t *s)
{
    if (s->residency == CHAM_RESIDENT_DROPPED)
        return ctx->config.mode == CHAM_MODE_ADVISOR ? cham_recompute_advise(s, false)
                                                     : cham_storage_recompute(s, CHAM_SWAP_PLANNED);
    if (s->residency != CHAM_RESIDENT_HOST || s->host_pending)
        return CHAM_OK;   /* already back, or the caller's update is still to come */
    if (ctx->config.mode == CHAM_MODE_MANAGED && !cham_storage_on_host(s))
        return CHAM_OK;   /* its bytes are dead: a new block at its use, no copy */
    /* The caller's update still runs: its swap-in would wait for it at
     * the head of the swap-in queue, holding back every swap-in behind it.
     * It comes back on its use, or when the caller asks for it. Not once
     * a swap-in has waited for that update: a later one is queued behind
     * it on the same stream, and asking from a dispatching thread that
     * runs ahead of the device found the update "still running" where it
     * had long ended on the device (runtime.md, "An update on the host"). */
    if (s->host_event && !s->host_waited && cham_event_query(s->host_event) == CHAM_NOT_READY)
        return CHAM_OK;
    if (ctx->config.mode == CHAM_MODE_ADVISOR) {
        cham_exec_advise(ctx, CHAM_ACTION_SWAP_IN, s->view_list, false, 0);
        return CHAM_OK;
    }
    return cham_storage_swap_in(s, CHAM_SWAP_PLANNED);
}

bool cham_exec_advise(cham_context_t *ctx, cham_action_kind_t kind, cham_tensor_t *t,
                      bool needed, uint64_t free_after_op)
{
    cham_storage_t *s = t->storage;
    bool before = kind == CHAM_ACTION_SWAP_IN || kind == CHAM_ACTION_RECOMPUTE;
    if (before && s->advice_pin == ctx->pin) {
        /* Already in this op's list (planned here, and the op uses it):
         * one action, which the op's kernels now wait for. */
        for (size_t i = 0; needed && i < ctx->n_actions; i++)
            if (ctx->actions[i].tensor->storage == s && ctx->actions[i].kind == kind)
                ctx->actions[i].needed = true;
        return false;
    }
    cham_action_t *a = cham_grow(ctx->actions, &ctx->cap_actions, ctx->n_actions + 1, sizeof *a,
                                 8);
    if (!a)
        return false;     /* host OOM: advice lost; on-demand advice follows later */
    ctx->actions = a;
    ctx->actions[ctx->n_actions++] = (cham_action_t){.kind = kind, .tensor = t, .needed = needed,
                                                     .free_after_op = free_after_op};
    if (before)
        s->advice_pin = ctx->pin;
    if (!needed)
        s->advised = true;
    return true;
}

/* The op after which item's block may be reused: the planned one, but
 * never the op that ends now, whose wait would stall the next op on the
 * copy the policy meant to hide. */
static uint64_t release_op(const cham_context_t *ctx, uint32_t item)
{
    uint32_t planned = ctx->exec.plan->view.items[item].free_op, now = ctx->exec.clock;
    return ctx->ops_total + (planned > now ? planned - now : 1);
}

/* The op being run stands for op k of the profiled step, if the op there
 * is the same op (an extra read of a planned tensor is not its use_op). */
static void clock_set(cham_exec_t *x, uint32_t k, cham_op_token_t token)
{
    if (k < x->plan->n_tokens && x->plan->tokens[k] == token) {
        x->clock = k;
        x->clock_next = k + 1;
    }
}

/* The item of a use by position (Capuchin), checked by
 * cham_exec_check_positions before the op began. */
static uint32_t item_at(cham_context_t *ctx, uint32_t pos)
{
    uint32_t item = cham_positions_take(ctx->exec.plan->positions, ctx->ops_in_step - 1, pos);
    return item == CHAM_POSITION_NONE ? CHAM_MATCH_NONE : item;
}

/* Whether storage s stands for its item in this step of the plan. */
static bool holds_item(const cham_exec_t *x, const cham_storage_t *s)
{
    return x->plan && s->item < x->plan->view.n_items && x->storage_of[s->item] == s;
}

/* Storage t's is item's this step: swapped out or dropped when the op
 * ends (advised, in advisor mode). */
static void take(cham_context_t *ctx, cham_tensor_t *t, uint32_t item)
{
    cham_exec_t *x = &ctx->exec;
    cham_storage_t *s = t->storage;
    if (item == CHAM_MATCH_NONE)
        return;
    if (holds_item(x, s))
        x->storage_of[s->item] = NULL;    /* a storage stands for one item */
    x->storage_of[item] = s;
    s->item = item;
    if (ctx->config.mode == CHAM_MODE_ADVISOR) {
        bool drop = x->plan->view.items[item].recompute && s->recompute &&
                    !s->recompute->stale;
        cham_exec_advise(ctx, drop ? CHAM_ACTION_DROP : CHAM_ACTION_SWAP_OUT, t, false,
                         drop ? 0 : release_op(ctx, item));
        return;
    }
    uint32_t *p = cham_grow(x->pending, &x->cap_pending, x->n_pending + 1, sizeof *p, 16);
    if (!p)
        return;           /* host OOM: this swap-out is skipped, nothing breaks */
    x->pending = p;
    x->pending[x->n_pending++] = item;
}

/* Whether item i is model state the plan sends away in the forward's
 * blocks and wants back later, unmatched this step. */
static bool unmatched_state(const cham_exec_t *x, size_t i)
{
    const cham_plan_t *p = x->plan;
    const cham_policy_item_t *it = &p->view.items[i];
    return !x->storage_of[i] && !it->recompute && it->swap_out_op >= p->fwd_blocks &&
           it->swap_out_op < p->fwd_blocks_end && it->swap_in_op > x->clock &&
           plan_state(p, it->storage);
}

/* The device bytes the step holds now, as the plan counts them: in use,
 * and given back but not reusable yet (frees after ops, behind copies). */
static uint64_t held_bytes(const cham_context_t *ctx)
{
    if (!ctx->mem)
        return ctx->stats.mem_in_use;   /* advisor mode: the caller's allocator */
    cham_alloc_stats_t st;
    cham_allocator_get_stats(ctx->mem, &st);
    return st.allocated + st.pending_free;
}

/* A step that ran fewer blocks than the profiled one leaves the plan's
 * items of the last ranks unmatched. Of those, the model state the plan
 * sends away in the forward's blocks (the weights of its last blocks) is
 * still on the device here: the blocks this step skipped keep theirs,
 * unused. Where the step holds more than the plan predicts here with
 * those away, they stand in for the items, as alike in size, until it
 * does not: sent away now and back at the items' swap-ins, so that the
 * loss and the backward have the room the plan counted on. A step whose
 * skipped blocks freed more than that (their activations) needs none, and
 * moving them would only load the link (GPT-2 48x1600 at 60%: 0.197 ->
 * 0.204 s a step when they always stood in). */
static void stand_in_for_skipped(cham_context_t *ctx)
{
    cham_exec_t *x = &ctx->exec;
    const cham_plan_t *p = x->plan;
    uint64_t unmatched = 0;
    for (size_t i = 0; i < p->view.n_items; i++)
        unmatched += unmatched_state(x, i) ? p->view.items[i].bytes : 0;
    uint64_t held = held_bytes(ctx) + unmatched;
    uint64_t need = held > p->head_mem ? held - p->head_mem : 0;
    cham_storage_t *next = ctx->storages;
    for (size_t i = 0; i < p->view.n_items && next && need; i++) {
        const cham_policy_item_t *it = &p->view.items[i];
        if (!unmatched_state(x, i))
            continue;
        cham_storage_t *s = next;
        while (s && !(s->bytes == it->bytes && s->born_step < ctx->step &&
                      s->feat_step != ctx->step && s->residency == CHAM_RESIDENT_DEVICE &&
                      s->block && s->view_list && !s->carry_slot && !holds_item(x, s)))
            s = s->next;
        if (!s)
            continue;
        next = s->next;
        need -= need < it->bytes ? need : it->bytes;
        take(ctx, s->view_list, (uint32_t)i);
    }
}

void cham_exec_use(cham_context_t *ctx, cham_tensor_t *t, cham_op_token_t token, uint32_t pos)
{
    cham_exec_t *x = &ctx->exec;
    cham_storage_t *s = t->storage;
    if (x->plan->positions) {
        take(ctx, t, item_at(ctx, pos));
        return;           /* Capuchin: positions only, no clock */
    }
    if (ctx->phase == CHAM_PHASE_EVAL)
        return;           /* an evaluation's tensors are no training item */
    uint32_t op = ctx->ops_in_step - 1;
    if (holds_item(x, s) && s->item_op < op) {
        const cham_policy_item_t *it = &x->plan->view.items[s->item];
        s->item_op = UINT32_MAX;          /* its first use since it matched */
        if (!it->wraps)
            clock_set(x, it->use_op, token);
    }
    uint64_t id = s->born_step < ctx->step ? s->id : CHAM_MATCH_NEW;
    uint32_t item = cham_match_use(&x->plan->match, &s->feat, token, id);
    if (item == CHAM_MATCH_NONE)
        return;
    clock_set(x, x->plan->view.items[item].swap_out_op, token);
    s->item_op = op;
    take(ctx, t, item);
}

void cham_exec_forget(cham_context_t *ctx, cham_storage_t *s)
{
    cham_exec_t *x = &ctx->exec;
    if (holds_item(x, s))
        x->storage_of[s->item] = NULL;
    s->item = CHAM_MATCH_NONE;
    if (s->carry_slot)
        x->carried[s->carry_slot - 1].storage = NULL;
    s->carry_slot = 0;
}

cham_status_t cham_exec_check_positions(cham_context_t *ctx, cham_op_token_t token,
                                        cham_tensor_t *const *inputs, size_t n_inputs,
                                        cham_tensor_t *const *outputs, size_t n_outputs)
{
    const cham_positions_t *p = ctx->exec.plan->positions;
    uint32_t k = ctx->ops_in_step, lo, hi;
    cham_positions_of_op(p, k, &lo, &hi);
    for (uint32_t e = lo; e < hi; e++) {
        const cham_policy_item_t *it = &ctx->exec.plan->view.items[p->item[e]];
        uint32_t pos = p->pos[e];
        const cham_tensor_t *t = pos < n_inputs ? inputs[pos]
                                 : pos < n_inputs + n_outputs ? outputs[pos - n_inputs] : NULL;
        if (token == p->token[k] && t && t->storage->bytes == it->bytes)
            continue;
        const char *why = token != p->token[k] ? "the op there is another"
                          : !t                 ? "the op has fewer tensors"
                                               : "that tensor has another size";
        cham_context_error(ctx, "capuchin policy: step %llu: tensor #%u of op %u (\"%s\", %llu "
                           "bytes in the profiled step) is not found: %s (\"%s\"); the op "
                           "sequence changed and a static policy cannot follow it",
                           (unsigned long long)ctx->number, pos, k, cham_op_name(ctx, p->token[k]),
                           (unsigned long long)it->bytes, why, cham_op_name(ctx, token));
        return CHAM_ERR_POLICY_MISMATCH;
    }
    return CHAM_OK;
}

/* The clock at the op being begun in phase: at the backward's first op,
 * the profiled backward's first op, past as many of its ops as the forward
 * ran fewer (scaled by the profile's backward to forward ops). Look-alike
 * blocks the step skipped are, by their ranks, the forward's last, so the
 * backward's first: without this the swap-ins of the backward's first
 * blocks came as many ops late, until a use of theirs set the clock. */
static void clock_follow_phase(cham_exec_t *x, cham_phase_t phase)
{
    const cham_plan_t *p = x->plan;
    if (phase == CHAM_PHASE_FORWARD && !x->in_backward)
        x->forward_ops++;
    if (phase != CHAM_PHASE_BACKWARD || x->in_backward || !p->backward_ops)
        return;
    x->in_backward = true;
    uint64_t fewer = x->forward_ops < p->forward_ops ? p->forward_ops - x->forward_ops : 0;
    uint64_t skip = p->forward_ops ? fewer * p->backward_ops / p->forward_ops : 0;
    x->clock = p->backward_first + (uint32_t)(skip < p->backward_ops ? skip : p->backward_ops - 1);
}

/* The clock of an anchored plan at the op being begun in phase, in a
 * block or not: at each edge of the blocks, the profiled step's edge. A
 * step that ran fewer blocks in the forward skips as many (scaled by the
 * profile's backward to forward block ops) where the backward's blocks
 * begin: look-alike blocks are told apart by rank, so the blocks it
 * skipped are, to the matcher, the forward's last and the backward's
 * first, and the ops before them (the head's and the loss's backward) are
 * the profile's. A step that ran more holds the clock as long: at the
 * forward's last block op while its extra blocks run, at the backward's
 * first while their backward does. */
static void clock_follow_blocks(cham_exec_t *x, cham_phase_t phase, bool in_block)
{
    const cham_plan_t *p = x->plan;
    uint32_t fwd = p->fwd_blocks_end - p->fwd_blocks, bwd = p->bwd_blocks_end - p->bwd_blocks;
    bool forward = phase == CHAM_PHASE_FORWARD, backward = phase == CHAM_PHASE_BACKWARD;
    if (x->region <= CHAM_REGION_FWD_BLOCKS && forward) {
        if (in_block) {
            if (x->region == CHAM_REGION_START)
                x->clock = p->fwd_blocks;
            x->region = CHAM_REGION_FWD_BLOCKS;
            x->block_ops++;
            if (x->clock >= p->fwd_blocks_end)
                x->clock = p->fwd_blocks_end - 1;
        } else if (x->region == CHAM_REGION_FWD_BLOCKS) {
            x->region = CHAM_REGION_FWD_AFTER;
            x->clock = p->fwd_blocks_end;
        }
        return;
    }
    if (!backward)
        return;
    if (x->region < CHAM_REGION_BWD_BEFORE) {
        x->region = CHAM_REGION_BWD_BEFORE;
        x->clock = p->backward_first;
    }
    if (x->region == CHAM_REGION_BWD_BEFORE && in_block) {
        x->region = CHAM_REGION_BWD_BLOCKS;
        x->clock = p->bwd_blocks;
        if (x->block_ops < fwd) {
            uint64_t skip = (uint64_t)(fwd - x->block_ops) * bwd / fwd;
            x->clock += (uint32_t)(skip < bwd ? skip : bwd - 1);
        } else {
            x->hold = (uint32_t)((uint64_t)(x->block_ops - fwd) * bwd / fwd);
        }
    } else if (x->region == CHAM_REGION_BWD_BLOCKS && !in_block) {
        x->region = CHAM_REGION_BWD_AFTER;
        x->clock = p->bwd_blocks_end;
        x->hold = 0;
    }
}

/* Whether carried storage `c` comes back before the plan's item `item`,
 * both due: by op, then by item; one carried for another plan (its item
 * not this plan's) after the plan's own. */
static bool carried_first(const cham_exec_t *x, const cham_carried_t *c, uint32_t item)
{
    uint32_t in_op = x->plan->view.items[item].swap_in_op;
    const cham_storage_t *s = c->storage;
    uint32_t own = s && s->item < x->plan->view.n_items ? s->item : CHAM_MATCH_NONE;
    return c->op < in_op || (c->op == in_op && own < item);
}

cham_status_t cham_exec_op_begin(cham_context_t *ctx)
{
    cham_exec_t *x = &ctx->exec;
    uint32_t k = ctx->ops_in_step;               /* the op being begun */
    x->clock = x->clock_next;                    /* the profiled op it stands for */
    if (x->plan && !x->plan->positions) {
        cham_exec_region_t was = x->region;
        if (x->plan->anchored)
            clock_follow_blocks(x, ctx->phase, ctx->block >= 0);
        else
            clock_follow_phase(x, ctx->phase);
        /* Blocks given back by the clock (release_op) come where the
         * profiled step gave them back: as many ops sooner as it skipped
         * (advisor mode: the caller's allocator counts its own). */
        if (ctx->mem && x->clock > x->clock_next && x->clock_next < x->plan->n_tokens)
            cham_allocator_ops_sooner(ctx->mem, x->clock - x->clock_next);
        if (was == CHAM_REGION_FWD_BLOCKS && x->region == CHAM_REGION_FWD_AFTER &&
            x->block_ops < x->plan->fwd_blocks_end - x->plan->fwd_blocks)
            stand_in_for_skipped(ctx);
    }
    x->clock_next = x->clock + (x->clock < UINT32_MAX && !x->hold);
    x->hold -= x->hold > 0;
    /* A caller that carries out an op's actions after running it hears
     * of what the next ops need ahead (advise_ahead). */
    uint32_t until = ctx->config.mode == CHAM_MODE_ADVISOR
                         ? x->clock + ctx->config.advise_ahead : x->clock;
    /* Advisor mode: what the plan wants away from the step's start but is
     * on the device (a new plan's, or brought back by the caller between
     * steps) goes after the first op. */
    for (size_t i = 0; k == 0 && ctx->config.mode == CHAM_MODE_ADVISOR && i < x->n_carried; i++) {
        cham_storage_t *s = x->carried[i].storage;
        if (s && s->residency == CHAM_RESIDENT_DEVICE && x->carried[i].op > until)
            cham_exec_advise(ctx, CHAM_ACTION_SWAP_OUT, s->view_list, false, ctx->ops_total + 1);
    }
    /* What comes back at this op comes in the plan's item order, as the
     * planner's replay queued it (refine.c): a storage carried from the
     * step before counts as the item it was away for, the plan's last
     * items (those that wrap), so it does not hold the link ahead of what
     * the next ops need. */
    const cham_policy_view_t *pol = x->plan ? &x->plan->view : NULL;
    for (;;) {
        const cham_carried_t *c =
            x->carry_next < x->n_carried && x->carried[x->carry_next].op <= until
                ? &x->carried[x->carry_next] : NULL;
        uint32_t item = pol && x->in_next < pol->n_items ? x->plan->in_order[x->in_next]
                                                         : CHAM_MATCH_NONE;
        if (item != CHAM_MATCH_NONE && pol->items[item].swap_in_op > until)
            item = CHAM_MATCH_NONE;
        if (!c && item == CHAM_MATCH_NONE)
            return CHAM_OK;
        cham_storage_t *s;
        if (c && (item == CHAM_MATCH_NONE || carried_first(x, c, item))) {
            x->carry_next++;
            s = c->storage;
        } else {
            x->in_next++;
            s = x->storage_of[item];
            if (!s && x->plan->positions && x->plan->positions->seen[item]) {
                cham_context_error(ctx, "capuchin policy: step %llu: the tensor swapped out "
                                   "after op %u was freed before its swap-in at op %u: the "
                                   "op sequence changed and a static policy cannot follow it",
                                   (unsigned long long)ctx->number, pol->items[item].swap_out_op,
                                   k);
                return CHAM_ERR_POLICY_MISMATCH;
            }
        }
        cham_status_t st = s ? bring_back(ctx, s) : CHAM_OK;   /* freed or not matched */
        if (st != CHAM_OK)
            return st;
    }
}

cham_status_t cham_exec_op_end(cham_context_t *ctx)
{
    cham_exec_t *x = &ctx->exec;
    /* The op made a tensor the plan drops and makes again: what the caller
     * frees of its inputs before the drop is kept as a ghost (recompute.c;
     * the planner counted on it, policy.md "What may be recomputed"). */
    if (ctx->config.mode == CHAM_MODE_MANAGED && x->clock < x->plan->n_tokens &&
        x->plan->makes_dropped[x->clock])
        for (size_t i = ctx->op_inputs; i < ctx->op_inputs + ctx->op_outputs; i++)
            if (ctx->op_tensors[i]->storage->recompute)
                ctx->op_tensors[i]->storage->recompute->keeps_ghosts = true;
    for (size_t i = 0; i < x->n_pending; i++) {
        uint32_t item = x->pending[i];
        cham_storage_t *s = x->storage_of[item];
        if (!s || !s->block || s->residency != CHAM_RESIDENT_DEVICE)
            continue;     /* released by its op, or not on the device */
        /* A tensor to recompute that cannot be any more (written since,
         * an input gone) is swapped instead. */
        if (x->plan->view.items[item].recompute && s->recompute) {
            cham_status_t st = cham_storage_drop(s);
            if (st != CHAM_ERR_INVALID_ARG) {
                if (st != CHAM_OK)
                    return st;
                continue;
            }
        }
        cham_status_t st = cham_storage_swap_out(s, CHAM_SWAP_PLANNED, release_op(ctx, item));
        if (st == CHAM_ERR_HOST_BUDGET) {
            /* Out of pinned memory: the tensor stays; the OOM path copes. */
            cham_context_log(ctx, "step %llu: planned swap-out skipped: %s",
                             (unsigned long long)ctx->number, ctx->error);
            continue;
        }
        if (st != CHAM_OK)
            return st;
    }
    x->n_pending = 0;
    return CHAM_OK;
}
