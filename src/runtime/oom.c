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
 * each ordered by events; retried until the request fits, nothing movable
 * is left, or the loop stops making progress (a storage moved out for the
 * request is back). Victims come from victims.c's index, O(log n) each.
 * docs/executor.md, "The OOM path". */
#include <stdio.h>

#include "common/assert.h"
#include "policy/registry.h"
#include "runtime/runtime-impl.h"

static bool block_movable(const cham_block_t *b, void *user)
{
    const cham_storage_t *s = cham_block_owner(b);
    return s && cham_victims_movable(user, s);
}

#define MAX_WINDOW 32

/* One request's OOM episode: what it did, for the error message. */
typedef struct oom_episode {
    uint64_t n_moved, moved;      /* storages moved out or dropped, and their bytes */
    uint64_t first_new_id;        /* storages from this id on were made during it */
    const cham_storage_t *stuck;  /* why it stopped without progress, or NULL */
    bool move_failed;             /* a move's own error ended it (its message set) */
} oom_episode_t;

/* Moves a storage out passively: its block is reusable at once, behind
 * the compute stream's wait on the copy. Or drops it, when its op can run
 * again for less than the copies out and back would take on the links
 * (the caller gave the op a cost; config recompute on): Capuchin's
 * choice, made per tensor.
 *
 * Each storage that existed when the request failed leaves at most once
 * for it, and none made since leaves: one that is back on the device (a
 * swap hook that swaps it in again) or new (a hook that makes tensors)
 * means the room made is taken as fast as it is made. That bounds the
 * loop by the storages alive at its start; the episode stops there with
 * CHAM_ERR_OUT_OF_MEMORY (ep->stuck). */
static cham_status_t move_out(cham_context_t *ctx, cham_storage_t *s, oom_episode_t *ep)
{
    if (s->victim.episode == ctx->oom.episode || s->id >= ep->first_new_id) {
        ep->stuck = s;
        return CHAM_ERR_OUT_OF_MEMORY;
    }
    s->victim.episode = ctx->oom.episode;
    uint64_t now = ctx->ops_total ? ctx->ops_total - 1 : 0;
    ep->n_moved++;
    ep->moved += s->bytes;
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
    cham_status_t st = cham_storage_swap_out(s, CHAM_SWAP_PASSIVE, now);
    ep->move_failed = st != CHAM_OK;
    return st;
}

/* Gives back the blocks of storages that hold no data, so this costs no
 * copy; each gets a block again at its first use. Of the storages the op
 * being begun uses, only outputs, and only while its inputs are brought in
 * (the outputs come after and take their blocks then): an input, once
 * checked, stays. The bytes, 0 if none. */
static uint64_t release_unused(cham_context_t *ctx)
{
    uint64_t bytes = 0;
    cham_storage_t *next;
    for (cham_storage_t *s = cham_victims_unused_first(ctx); s; s = next) {
        next = cham_victims_unused_next(s);     /* s leaves the index here */
        if (s->residency != CHAM_RESIDENT_DEVICE)
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
                                  oom_episode_t *ep)
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
        cham_status_t st = move_out(ctx, cham_block_owner(blocks[i]), ep);
        if (st != CHAM_OK)
            return st;
    }
    return CHAM_OK;
}

/* Algorithm 3's loop once the allocator's own fallback failed: what makes
 * room without a copy first, then passive swaps; retried until the block
 * fits (CHAM_OK), nothing is left to move or the loop makes no progress
 * (CHAM_ERR_OUT_OF_MEMORY), or a move fails (its status, ep->move_failed).
 * Each pass either moves a storage out for the first time in the episode
 * or takes frees that only those moves make, so it ends. */
static cham_status_t make_room(cham_context_t *ctx, size_t bytes, oom_episode_t *ep,
                               cham_block_t **out)
{
    cham_status_t st = CHAM_ERR_OUT_OF_MEMORY;
    while (st == CHAM_ERR_OUT_OF_MEMORY) {
        /* Frees that wait on host event queries (PyTorch's recordStream) are
         * waited for, as PyTorch does: the host blocks, nothing moves. */
        if (cham_allocator_sync_deferred(ctx->mem) == 0 && release_unused(ctx) == 0) {
            bool enough;
            cham_storage_t *victim = cham_victims_closest(ctx, bytes, &enough);
            if (!victim)
                return CHAM_ERR_OUT_OF_MEMORY;
            bool evicted = false;
            st = CHAM_OK;
            if (!enough)
                st = evict_window(ctx, bytes, &evicted, ep);
            if (st == CHAM_OK && !evicted)
                st = move_out(ctx, victim, ep);
            if (st != CHAM_OK)
                return st;
        }
        st = cham_block_alloc(ctx->mem, bytes, ctx->compute, out);
    }
    return st;
}

bool cham_oom_passive(const cham_context_t *ctx)
{
    /* A planner without passive swaps (vDNN) has none to fall back on once
     * its policy applies (Capuchin evicts on demand, as its paper's passive
     * mode does). */
    return ctx->config.mode == CHAM_MODE_MANAGED && ctx->config.oom_handling &&
           !(ctx->exec.plan &&
             cham_planner_has(ctx->config.planner, CHAM_PLANNER_FLAG_NO_PASSIVE));
}

/* The error of a request the OOM path could not meet: the sizes, what was
 * tried, and why it stopped. */
static void report_oom(cham_context_t *ctx, const cham_storage_t *owner, const char *what,
                       size_t bytes, const oom_episode_t *ep)
{
    cham_oom_info_t oom;
    cham_allocator_last_oom(ctx->mem, &oom);
    cham_alloc_stats_t as;
    cham_allocator_get_stats(ctx->mem, &as);
    char why[320];
    if (!ep->stuck)
        cham_copy_str(why, sizeof why, "nothing the current op does not use is left to move");
    else
        snprintf(why, sizeof why, "stopped without progress: \"%s\" (storage %llu) %s; a hook "
                 "that brings tensors back or makes new ones takes the room as it is made",
                 ep->stuck->label, (unsigned long long)ep->stuck->id,
                 ep->stuck->id >= ep->first_new_id ? "was made while room was being made"
                                                   : "was moved out for this request and is "
                                                     "back on the device");
    cham_context_error(ctx, "%s \"%s\": out of device memory: %zu bytes requested, capacity %llu, "
                       "%llu allocated, largest free block %llu, %llu bytes waiting for a later "
                       "op before reuse. Tried: handing back the blocks of swap-outs, returning "
                       "free segments, and %llu passive swap-outs (%llu bytes); %s", what,
                       owner->label, bytes, (unsigned long long)oom.limit,
                       (unsigned long long)oom.allocated, (unsigned long long)oom.largest_free,
                       (unsigned long long)as.pending_free, (unsigned long long)ep->n_moved,
                       (unsigned long long)ep->moved, why);
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
    /* Only a caller's hook, run by a move, can ask for memory while room is
     * being made: that request does not start a second episode inside the
     * first (which could recurse once per storage). */
    if (ctx->oom.serving) {
        cham_context_error(ctx, "%s \"%s\": out of device memory: %zu bytes requested while the "
                           "out-of-memory path makes room for \"%s\" (a hook called back into "
                           "the runtime); it does not run inside itself", what, owner->label,
                           bytes, ctx->oom.serving->label);
        return CHAM_ERR_OUT_OF_MEMORY;
    }
    cham_victims_debug_check(ctx);
    oom_episode_t ep = {.first_new_id = ctx->next_storage_id};
    ctx->oom.episode++;
    ctx->oom.serving = owner;
    st = make_room(ctx, bytes, &ep, out);
    ctx->oom.serving = NULL;
    if (st == CHAM_ERR_OUT_OF_MEMORY && !ep.move_failed) {
        report_oom(ctx, owner, what, bytes, &ep);
        return st;
    }
    if (st != CHAM_OK)
        return st;    /* the move's message says what failed */
done:
    if (st == CHAM_OK)
        cham_block_set_owner(*out, owner);
    else
        cham_context_error(ctx, "%s \"%s\": %s", what, owner->label,
                           cham_allocator_last_error(ctx->mem));
    return st;
}
