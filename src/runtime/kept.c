/* Pinned copies kept on the device (docs/executor.md, "Copies kept after
 * a swap-in"): a storage swapped back in keeps the pinned block it came
 * from until its bytes change, so that going out again unwritten copies
 * nothing. The copies are a cache of the pinned pool, never a reason for
 * it to grow: a swap-out that needs a block takes a kept one of about its
 * size, where a freed one would have been, then a free one, then every
 * kept one's; and none outlives its step (a trial's step must not gain
 * from copies the steps before left). */
#include "common/assert.h"
#include "runtime/runtime-impl.h"

static void unlink_kept(cham_storage_t *s)
{
    cham_context_t *ctx = s->ctx;
    if (s->kept_prev)
        s->kept_prev->kept_next = s->kept_next;
    else
        ctx->kept = s->kept_next;
    if (s->kept_next)
        s->kept_next->kept_prev = s->kept_prev;
    s->kept_prev = s->kept_next = NULL;
    ctx->kept_bytes -= s->bytes;
}

static bool on_list(const cham_storage_t *s)
{
    return s->kept_prev || s->ctx->kept == s;
}

void cham_kept_add(cham_storage_t *s)
{
    cham_context_t *ctx = s->ctx;
    CHAM_ASSERT(s->host_block && !on_list(s));
    s->kept = true;
    s->kept_next = ctx->kept;
    if (ctx->kept)
        ctx->kept->kept_prev = s;
    ctx->kept = s;
    ctx->kept_bytes += s->bytes;
}

void cham_kept_leave(cham_storage_t *s)
{
    CHAM_ASSERT(on_list(s));
    unlink_kept(s);
}

void cham_host_block_free(cham_storage_t *s, cham_stream_t *user)
{
    cham_context_t *ctx = s->ctx;
    if (s->kept) {
        /* Its last reader was its own swap-in: once that is done (as it
         * mostly is long before) the block is free at once, not after
         * every swap-in queued since. */
        if (cham_event_query(s->in_event) != CHAM_OK)
            cham_block_record_stream(ctx->pinned, s->host_block, ctx->swap_in);
    } else {
        cham_block_record_stream(ctx->pinned, s->host_block, user);
    }
    cham_block_free(ctx->pinned, s->host_block);
    if (on_list(s))
        unlink_kept(s);
    s->host_block = NULL;
    s->kept = false;
}

void cham_storage_forget_kept(cham_storage_t *s)
{
    if (on_list(s))
        cham_host_block_free(s, s->ctx->swap_in);
}

void cham_context_forget_kept(cham_context_t *ctx)
{
    while (ctx->kept)
        cham_host_block_free(ctx->kept, ctx->swap_in);
}

/* The kept copy whose block holds bytes with the least to spare, within an
 * eighth (a larger one would be split where a freed block of the size
 * would have served), its swap-in done; NULL if none. */
static cham_storage_t *kept_of_size(cham_context_t *ctx, size_t bytes)
{
    cham_storage_t *best = NULL;
    size_t best_size = bytes + bytes / 8 + 1;
    for (cham_storage_t *k = ctx->kept; k; k = k->kept_next) {
        size_t size = cham_block_size(k->host_block);
        if (size >= bytes && size < best_size && cham_event_query(k->in_event) == CHAM_OK) {
            best = k;
            best_size = size;
        }
    }
    return best;
}

cham_status_t cham_pinned_block(cham_storage_t *s, cham_block_t **host)
{
    cham_context_t *ctx = s->ctx;
    cham_storage_t *k = ctx->kept ? kept_of_size(ctx, s->bytes) : NULL;
    if (k) {
        *host = k->host_block;   /* read by a swap-in that is done: s's now */
        unlink_kept(k);
        k->host_block = NULL;
        k->kept = false;
        return CHAM_OK;
    }
    if (cham_block_alloc_cached(ctx->pinned, s->bytes, ctx->swap_out, host) == CHAM_OK)
        return CHAM_OK;
    if (ctx->kept) {
        cham_context_forget_kept(ctx);
        if (cham_block_alloc_cached(ctx->pinned, s->bytes, ctx->swap_out, host) == CHAM_OK)
            return CHAM_OK;
    }
    cham_status_t st = cham_block_alloc(ctx->pinned, s->bytes, ctx->swap_out, host);
    if (st == CHAM_ERR_HOST_BUDGET) {
        /* Pinned blocks of storages swapped back in are free once their
         * copies are done: wait for those and try once more, rather than
         * fail a run whose budget holds the bytes. */
        cham_alloc_stats_t ps;
        cham_allocator_get_stats(ctx->pinned, &ps);
        if (ps.pending_free >= s->bytes && cham_stream_synchronize(ctx->swap_in) == CHAM_OK)
            st = cham_block_alloc(ctx->pinned, s->bytes, ctx->swap_out, host);
    }
    return st;
}
