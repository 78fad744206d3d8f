/* Device allocation with the out-of-memory path (paper §6.3, Algorithm 3).
 *
 * The caching allocator already does the first half when a request fails:
 * it hands back every block of a finished or in-flight swap-out at once,
 * each behind an event wait of the compute stream on the swap stream (no
 * host synchronisation), takes recordStream frees whose events are done,
 * returns wholly free segments to the device and retries (docs/allocator.md).
 * What is left here: waiting on the host for recordStream frees (only
 * PyTorch's mode or storages freed mid swap-in make them); then passive
 * swaps: the resident storage whose size is closest to the request from
 * above, or, when none is big enough, the storages of the cheapest run of
 * neighbouring blocks that would hold it (defragmentation by eviction),
 * each ordered by events; retried until the request fits or nothing
 * movable is left. docs/executor.md, "The OOM path". */
#include "common/assert.h"
#include "runtime/runtime-impl.h"

/* Can s be moved out to make room now? Not if the op being begun uses it,
 * not if it holds no data (its block is given back without a copy
 * instead), not if it has no bytes, and only from the device. */
static bool movable(const cham_context_t *ctx, const cham_storage_t *s)
{
    return s->block && s->holds_data && s->bytes && s->pin != ctx->pin &&
           (s->residency == CHAM_RESIDENT_DEVICE || s->residency == CHAM_RESIDENT_MOVING_IN);
}

static bool block_movable(const cham_block_t *b, void *user)
{
    const cham_storage_t *s = cham_block_owner(b);
    return s && movable(user, s);
}

/* The victim: the smallest movable storage of at least bytes (its block
 * alone makes room), else the largest. NULL if none. */
static cham_storage_t *closest_victim(const cham_context_t *ctx, size_t bytes, bool *enough)
{
    cham_storage_t *above = NULL, *below = NULL;
    for (cham_storage_t *s = ctx->storages; s; s = s->next) {
        if (!movable(ctx, s))
            continue;
        if (s->bytes >= bytes) {
            if (!above || s->bytes < above->bytes)
                above = s;
        } else if (!below || s->bytes > below->bytes) {
            below = s;
        }
    }
    *enough = above != NULL;
    return above ? above : below;
}

#define MAX_WINDOW 32

/* Moves a storage out passively: its block is reusable at once, behind
 * the compute stream's wait on the copy. Or drops it, when its op can run
 * again for less than the copies out and back would take on the links
 * (the caller gave the op a cost; config recompute on): Capuchin's
 * choice, made per tensor. */
static cham_status_t move_out(cham_context_t *ctx, cham_storage_t *s, uint64_t *n_moved,
                              uint64_t *moved)
{
    uint64_t now = ctx->ops_total ? ctx->ops_total - 1 : 0;
    (*n_moved)++;
    *moved += s->bytes;
    double rerun = ctx->config.recompute ? cham_recompute_cost(s) : -1;
    if (rerun >= 0 && s->residency == CHAM_RESIDENT_DEVICE) {
        cham_device_info_t info;
        cham_device_get_info(ctx->dev, &info);
        double copies = 1e9 * (double)s->bytes * (1 / info.d2h_bandwidth + 1 / info.h2d_bandwidth);
        if (rerun < copies && cham_storage_drop(s) == CHAM_OK) {
            ctx->stats.passive_drops++;
            ctx->step_passive++;
            return CHAM_OK;
        }
    }
    return cham_storage_swap_out(s, CHAM_SWAP_PASSIVE, now);
}

/* Gives back the blocks of storages that hold no data, so this costs no
 * copy; each gets a block again at its first use. Of the storages the op
 * being begun uses, only outputs, and only while its inputs are brought in
 * (the outputs come after and take their blocks then): an input, once
 * checked, stays. The bytes, 0 if none. */
static uint64_t release_unused(cham_context_t *ctx)
{
    uint64_t bytes = 0;
    for (cham_storage_t *s = ctx->storages; s; s = s->next) {
        if (!s->block || s->holds_data || s->residency != CHAM_RESIDENT_DEVICE)
            continue;
        if (s->pin == ctx->pin &&
            (s->input_pin == ctx->pin || !ctx->in_begin || ctx->preparing_outputs))
            continue;
        bytes += s->bytes;
        cham_storage_dematerialize(s);
    }
    return bytes;
}

/* No single storage is big enough: moves out the storages of the cheapest
 * run of neighbouring blocks that would hold the request once they are
 * gone, or, when no segment could, of the segments whose return to the
 * device leaves room for a new one (defragmentation by eviction). *done
 * says whether there was such a set. */
static cham_status_t evict_window(cham_context_t *ctx, size_t bytes, bool *done,
                                  uint64_t *n_moved, uint64_t *moved)
{
    cham_block_t *blocks[MAX_WINDOW];
    long n = cham_allocator_find_window(ctx->mem, bytes, ctx->compute, block_movable, ctx,
                                        blocks, MAX_WINDOW);
    if (n < 0 || n > MAX_WINDOW)      /* no segment holds it: empty whole ones */
        n = cham_allocator_find_segments(ctx->mem, bytes, ctx->compute, block_movable, ctx,
                                         blocks, MAX_WINDOW);
    *done = n > 0 && n <= MAX_WINDOW;
    if (!*done)
        return CHAM_OK;
    ctx->stats.defrag_evictions++;
    for (long i = 0; i < n; i++) {
        cham_status_t st = move_out(ctx, cham_block_owner(blocks[i]), n_moved, moved);
        if (st != CHAM_OK)
            return st;
    }
    return CHAM_OK;
}

bool cham_oom_passive(const cham_context_t *ctx)
{
    /* vDNN has no passive swaps to fall back on once its policy applies
     * (Capuchin evicts on demand, as its paper's passive mode does). */
    return ctx->config.mode == CHAM_MODE_MANAGED && ctx->config.oom_handling &&
           !(ctx->config.planner == CHAM_PLANNER_VDNN && ctx->exec.plan);
}

cham_status_t cham_runtime_alloc(cham_context_t *ctx, cham_storage_t *owner, const char *what,
                                 cham_block_t **out)
{
    /* A storage of no bytes gets a block too (the allocator's smallest):
     * every managed storage on the device has one, and its address. */
    size_t bytes = owner->bytes ? owner->bytes : 1;
    cham_status_t st = cham_block_alloc(ctx->mem, bytes, ctx->compute, out);
    /* What PyTorch's allocator does itself on a failure, in every mode:
     * wait for the frees that wait on events, and retry. */
    if (st == CHAM_ERR_OUT_OF_MEMORY && cham_allocator_sync_deferred(ctx->mem) > 0)
        st = cham_block_alloc(ctx->mem, bytes, ctx->compute, out);
    if (st != CHAM_ERR_OUT_OF_MEMORY || !cham_oom_passive(ctx))
        goto done;
    uint64_t moved = 0, n_moved = 0;
    while (st == CHAM_ERR_OUT_OF_MEMORY) {
        /* Frees that wait on host event queries (PyTorch's recordStream) are
         * waited for, as PyTorch does: the host blocks, nothing moves. */
        if (cham_allocator_sync_deferred(ctx->mem) == 0 && release_unused(ctx) == 0) {
            bool enough;
            cham_storage_t *victim = closest_victim(ctx, bytes, &enough);
            if (!victim)
                break;
            bool evicted = false;
            st = CHAM_OK;
            if (!enough)
                st = evict_window(ctx, bytes, &evicted, &n_moved, &moved);
            if (st == CHAM_OK && !evicted)
                st = move_out(ctx, victim, &n_moved, &moved);
            if (st != CHAM_OK)
                return st;    /* the swap's message says what failed */
        }
        st = cham_block_alloc(ctx->mem, bytes, ctx->compute, out);
    }
    if (st != CHAM_ERR_OUT_OF_MEMORY)
        goto done;
    cham_oom_info_t oom;
    cham_allocator_last_oom(ctx->mem, &oom);
    cham_alloc_stats_t as;
    cham_allocator_get_stats(ctx->mem, &as);
    cham_context_error(ctx, "%s \"%s\": out of device memory: %zu bytes requested, capacity %llu, "
                       "%llu allocated, largest free block %llu, %llu bytes waiting for a later "
                       "op before reuse. Tried: handing back the blocks of swap-outs, returning "
                       "free segments, and %llu passive swap-outs (%llu bytes); nothing the "
                       "current op does not use is left to move", what, owner->label, bytes,
                       (unsigned long long)oom.limit, (unsigned long long)oom.allocated,
                       (unsigned long long)oom.largest_free, (unsigned long long)as.pending_free,
                       (unsigned long long)n_moved, (unsigned long long)moved);
    return CHAM_ERR_OUT_OF_MEMORY;
done:
    if (st == CHAM_OK)
        cham_block_set_owner(*out, owner);
    else
        cham_context_error(ctx, "%s \"%s\": %s", what, owner->label,
                           cham_allocator_last_error(ctx->mem));
    return st;
}
