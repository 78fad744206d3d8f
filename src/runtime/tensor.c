/* Tensors: reference-counted views of storages, and the storage's moves
 * between device and pinned host memory.
 *
 * A swap-out copies the storage to a pinned block on the swap-out stream,
 * after the work queued so far on the compute stream, and hands the device
 * block back with free-after-op: it becomes reusable once the next op has
 * been dispatched, ordered by an event, with no host polling. A swap-in
 * takes a new device block, copies on the swap-in stream once the compute
 * stream's earlier work (the block's previous user) and the swap-out copy
 * are done, and leaves an event the compute stream waits on before the
 * storage's next use. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/assert.h"
#include "runtime/runtime-impl.h"

static void set_label(cham_tensor_t *t, const char *label)
{
    cham_copy_str(t->label, sizeof t->label, label);
}

static cham_tensor_t *view_new(cham_storage_t *s, size_t offset, size_t bytes,
                               cham_dtype_t dtype, const char *label)
{
    cham_tensor_t *t = calloc(1, sizeof *t);
    if (!t)
        return NULL;
    t->storage = s;
    t->offset = offset;
    t->bytes = bytes;
    t->dtype = dtype;
    t->refs = 1;
    set_label(t, label);
    t->next_view = s->view_list;
    if (t->next_view)
        t->next_view->prev_view = t;
    s->view_list = t;
    s->views++;
    return t;
}

static bool dtype_ok(cham_context_t *ctx, cham_dtype_t dtype)
{
    if ((int)dtype >= 0 && dtype < CHAM_DTYPE_COUNT_)
        return true;
    cham_context_error(ctx, "tensor: unknown dtype %d", (int)dtype);
    return false;
}

static cham_storage_t *storage_new(cham_context_t *ctx, size_t bytes, const char *label)
{
    cham_storage_t *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->ctx = ctx;
    s->id = ctx->next_storage_id++;
    s->bytes = bytes;
    s->residency = CHAM_RESIDENT_DEVICE;
    s->item = CHAM_MATCH_NONE;
    s->born_step = ctx->step;
    s->away_step = ctx->step;
    cham_copy_str(s->label, sizeof s->label, label);
    s->next = ctx->storages;
    if (s->next)
        s->next->prev = s;
    ctx->storages = s;
    ctx->live_storages++;
    return s;
}

/* Forgets a storage that never held memory or whose memory is returned. */
static void storage_unlink(cham_storage_t *s)
{
    cham_context_t *ctx = s->ctx;
    cham_exec_forget(ctx, s);
    cham_victims_forget(s);
    if (s->prev)
        s->prev->next = s->next;
    else
        ctx->storages = s->next;
    if (s->next)
        s->next->prev = s->prev;
    ctx->live_storages--;
    free(s);
}

void cham_context_mem_add(cham_context_t *ctx, int64_t bytes)
{
    ctx->stats.mem_in_use = (uint64_t)((int64_t)ctx->stats.mem_in_use + bytes);
    if (ctx->stats.mem_in_use > ctx->stats.mem_peak)
        ctx->stats.mem_peak = ctx->stats.mem_in_use;
    if (ctx->stats.mem_in_use > ctx->step_mem_peak)
        ctx->step_mem_peak = ctx->stats.mem_in_use;
}

cham_status_t cham_tensor_new(cham_context_t *ctx, size_t bytes, cham_dtype_t dtype,
                              const char *label, cham_tensor_t **out)
{
    CHAM_ASSERT(ctx && out);
    *out = NULL;
    if (cham_hook_refuse(ctx, "cham_tensor_new") != CHAM_OK)
        return CHAM_ERR_INVALID_ARG;
    if (ctx->config.mode != CHAM_MODE_MANAGED) {
        cham_context_error(ctx, "tensor \"%s\": cham_tensor_new needs managed mode; in "
                           "advisor mode report the caller's memory with cham_tensor_wrap",
                           label ? label : "");
        return CHAM_ERR_INVALID_ARG;
    }
    if (!dtype_ok(ctx, dtype))
        return CHAM_ERR_INVALID_ARG;
    cham_storage_t *s = storage_new(ctx, bytes, label);
    if (!s) {
        cham_context_error(ctx, "out of host memory");
        return CHAM_ERR_HOST_OOM;
    }
    cham_status_t st = cham_runtime_alloc(ctx, s, "tensor", &s->block);
    if (st != CHAM_OK) {
        storage_unlink(s);
        return st;
    }
    cham_tensor_t *t = view_new(s, 0, bytes, dtype, label);
    if (!t) {
        cham_block_free(ctx->mem, s->block);
        storage_unlink(s);
        cham_context_error(ctx, "out of host memory");
        return CHAM_ERR_HOST_OOM;
    }
    cham_context_mem_add(ctx, (int64_t)bytes);
    cham_victims_update(s);
    *out = t;
    return CHAM_OK;
}

cham_status_t cham_tensor_wrap(cham_context_t *ctx, void *ptr, size_t bytes,
                               cham_dtype_t dtype, const char *label, cham_tensor_t **out)
{
    CHAM_ASSERT(ctx && out);
    *out = NULL;
    if (cham_hook_refuse(ctx, "cham_tensor_wrap") != CHAM_OK)
        return CHAM_ERR_INVALID_ARG;
    if (ctx->config.mode != CHAM_MODE_ADVISOR) {
        cham_context_error(ctx, "tensor \"%s\": cham_tensor_wrap needs advisor mode; in "
                           "managed mode use cham_tensor_new", label ? label : "");
        return CHAM_ERR_INVALID_ARG;
    }
    cham_device_info_t info;
    cham_device_get_info(ctx->dev, &info);
    if (!ptr && bytes) {
        cham_context_error(ctx, "tensor \"%s\": wrapping %zu bytes at NULL",
                           label ? label : "", bytes);
        return CHAM_ERR_INVALID_ARG;
    }
    if (bytes > info.capacity) {
        /* It could not be on the device, and sums of such sizes overflow. */
        cham_context_error(ctx, "tensor \"%s\": %zu bytes is more than the device's %llu "
                           "(\"%s\")", label ? label : "", bytes,
                           (unsigned long long)info.capacity, info.name);
        return CHAM_ERR_INVALID_ARG;
    }
    if (!dtype_ok(ctx, dtype))
        return CHAM_ERR_INVALID_ARG;
    cham_storage_t *s = storage_new(ctx, bytes, label);
    cham_tensor_t *t = s ? view_new(s, 0, bytes, dtype, label) : NULL;
    if (!t) {
        if (s)
            storage_unlink(s);
        cham_context_error(ctx, "out of host memory");
        return CHAM_ERR_HOST_OOM;
    }
    s->ptr = ptr;
    cham_context_mem_add(ctx, (int64_t)bytes);
    *out = t;
    return CHAM_OK;
}

cham_status_t cham_tensor_view(cham_tensor_t *base, size_t offset, size_t bytes,
                               cham_dtype_t dtype, const char *label, cham_tensor_t **out)
{
    CHAM_ASSERT(base && out);
    *out = NULL;
    cham_context_t *ctx = base->storage->ctx;
    if (offset > base->bytes || bytes > base->bytes - offset) {
        cham_context_error(ctx, "view \"%s\" of \"%s\": [%zu, %zu + %zu) is not inside the "
                           "%zu bytes of the base", label ? label : "", base->label, offset,
                           offset, bytes, base->bytes);
        return CHAM_ERR_INVALID_ARG;
    }
    if (!dtype_ok(ctx, dtype))
        return CHAM_ERR_INVALID_ARG;
    cham_tensor_t *t = view_new(base->storage, base->offset + offset, bytes, dtype, label);
    if (!t) {
        cham_context_error(ctx, "out of host memory");
        return CHAM_ERR_HOST_OOM;
    }
    *out = t;
    return CHAM_OK;
}

cham_status_t cham_tensor_view_strided(cham_tensor_t *base, size_t offset, size_t ndim,
                                       const int64_t *sizes, const int64_t *strides,
                                       cham_dtype_t dtype, const char *label,
                                       cham_tensor_t **out)
{
    CHAM_ASSERT(base && out && (sizes || !ndim) && (strides || !ndim));
    *out = NULL;
    cham_context_t *ctx = base->storage->ctx;
    if (!dtype_ok(ctx, dtype))
        return CHAM_ERR_INVALID_ARG;
    /* The last element's index, in elements from the first; a size of 0
     * makes a view of no bytes where it starts. */
    uint64_t last = 0;
    bool empty = false, overflow = false;
    for (size_t d = 0; d < ndim; d++) {
        if (sizes[d] < 0 || strides[d] < 0) {
            cham_context_error(ctx, "view \"%s\" of \"%s\": dimension %zu has size %lld and "
                               "stride %lld (sizes and strides >= 0)", label ? label : "",
                               base->label, d, (long long)sizes[d], (long long)strides[d]);
            return CHAM_ERR_INVALID_ARG;
        }
        uint64_t span;
        empty |= sizes[d] == 0;
        overflow |= sizes[d] && (__builtin_mul_overflow((uint64_t)sizes[d] - 1,
                                                        (uint64_t)strides[d], &span) ||
                                 __builtin_add_overflow(last, span, &last));
    }
    size_t elem = cham_dtype_size(dtype);
    uint64_t start, count, bytes = 0;
    overflow |= __builtin_mul_overflow((uint64_t)offset, elem, &start) ||
                (!empty && (__builtin_add_overflow(last, 1, &count) ||
                            __builtin_mul_overflow(count, elem, &bytes)));
    if (overflow || start > SIZE_MAX || bytes > SIZE_MAX) {
        cham_context_error(ctx, "view \"%s\" of \"%s\": its extent overflows",
                           label ? label : "", base->label);
        return CHAM_ERR_INVALID_ARG;
    }
    return cham_tensor_view(base, (size_t)start, (size_t)bytes, dtype, label, out);
}

cham_tensor_t *cham_storage_new_view(cham_storage_t *s)
{
    cham_tensor_t *t = view_new(s, 0, s->bytes, CHAM_DTYPE_U8, s->label);
    if (t) {
        t->internal = true;
        s->internal_views++;
    }
    return t;
}

cham_tensor_t *cham_tensor_retain(cham_tensor_t *t)
{
    CHAM_ASSERT(t && t->refs > 0 && t->refs < UINT32_MAX);
    t->refs++;
    return t;
}

/* The device block back to the allocator in compute order, after any
 * swap-in still writing it and the caller's stream's work on it. */
static void free_device_block(cham_storage_t *s)
{
    cham_context_t *ctx = s->ctx;
    if (s->residency == CHAM_RESIDENT_MOVING_IN)
        cham_block_record_stream(ctx->mem, s->block, ctx->swap_in);
    if (s->ext_stream)
        cham_block_record_stream(ctx->mem, s->block, s->ext_stream);
    cham_block_free(ctx->mem, s->block);
}

void cham_storage_give_back(cham_storage_t *s)
{
    cham_context_t *ctx = s->ctx;
    if (s->block) {
        free_device_block(s);
        s->block = NULL;
        cham_context_mem_add(ctx, -(int64_t)s->bytes);
        cham_victims_update(s);
    }
    if (s->host_block)
        cham_host_block_free(s, ctx->swap_in);
}

/* The last view is gone: the storage's memory goes back. */
static void storage_free(cham_storage_t *s)
{
    cham_context_t *ctx = s->ctx;
    s->freeing = true;
    cham_recompute_storage_gone(s);
    cham_storage_give_back(s);
    if (s->ptr)
        cham_context_mem_add(ctx, -(int64_t)s->bytes);
    cham_event_free(s->out_event);
    cham_event_free(s->in_event);
    cham_event_free(s->ext_event);
    cham_event_free(s->host_event);
    storage_unlink(s);
}

void cham_tensor_release(cham_tensor_t *t)
{
    if (!t)
        return;
    cham_context_t *ctx = t->storage->ctx;
    cham_view_release(t);
    /* Ghosts whose last reader went with t go too (their records' views
     * of other tensors with them), before the caller counts its memory. */
    if (ctx->n_ghosts)
        cham_recompute_sweep_ghosts(ctx);
}

void cham_view_release(cham_tensor_t *t)
{
    CHAM_ASSERT(t->refs > 0 && "tensor released more often than retained");
    cham_hook_forbid(t->storage->ctx, "cham_tensor_release");
    if (--t->refs > 0)
        return;
    cham_storage_t *s = t->storage;
    if (!t->internal && cham_recompute_ghost(s, t))
        return;
    if (t->prev_view)
        t->prev_view->next_view = t->next_view;
    else
        s->view_list = t->next_view;
    if (t->next_view)
        t->next_view->prev_view = t->prev_view;
    s->internal_views -= t->internal;
    free(t);
    if (--s->views == 0)
        storage_free(s);
    else
        cham_recompute_unviewed(s);
}

void *cham_tensor_data(const cham_tensor_t *t)
{
    CHAM_ASSERT(t);
    cham_storage_t *s = t->storage;
    /* Its block given back while it held nothing (the OOM path; the test
     * cham_storage_prepare makes): the caller is about to fill it, so it
     * needs one again, now. */
    if (s->ctx->config.mode == CHAM_MODE_MANAGED && s->residency == CHAM_RESIDENT_HOST &&
        !cham_storage_on_host(s) &&
        (cham_hook_refuse(s->ctx, "cham_tensor_data") != CHAM_OK ||
         cham_storage_materialize(s) != CHAM_OK))
        return NULL;
    /* Outside an op the caller may write it through the address as the
     * host does with cham_tensor_host_update: what was made from its bytes
     * is made now or forgotten, as before an op's write. */
    if (s->block && !s->ctx->in_op && !s->ctx->in_begin) {
        if ((s->dependents || s->recompute) &&
            (cham_hook_refuse(s->ctx, "cham_tensor_data") != CHAM_OK ||
             cham_recompute_before_write(s) != CHAM_OK))
            return NULL;
        cham_recompute_written(s);
        cham_storage_forget_kept(s);
    }
    s->holds_data = true;          /* the caller may write it, in or outside an op */
    s->discarded = false;
    cham_victims_update(s);
    char *base = s->block ? cham_block_ptr(s->block) : s->ptr;
    return base ? base + t->offset : NULL;
}

void cham_tensor_set_user(cham_tensor_t *t, void *user)
{
    CHAM_ASSERT(t);
    t->user = user;
}

void *cham_tensor_user(const cham_tensor_t *t)
{
    CHAM_ASSERT(t);
    return t->user;
}

size_t cham_tensor_bytes(const cham_tensor_t *t)
{
    CHAM_ASSERT(t);
    return t->bytes;
}

size_t cham_tensor_storage_bytes(const cham_tensor_t *t)
{
    CHAM_ASSERT(t);
    return t->storage->bytes;
}

cham_dtype_t cham_tensor_dtype(const cham_tensor_t *t)
{
    CHAM_ASSERT(t);
    return t->dtype;
}

const char *cham_tensor_label(const cham_tensor_t *t)
{
    CHAM_ASSERT(t);
    return t->label;
}

bool cham_tensor_same_storage(const cham_tensor_t *a, const cham_tensor_t *b)
{
    CHAM_ASSERT(a && b);
    return a->storage == b->storage;
}

cham_residency_t cham_tensor_residency(const cham_tensor_t *t)
{
    CHAM_ASSERT(t);
    const cham_storage_t *s = t->storage;
    /* A copy in flight is reported as moving until its event completes. */
    if (s->residency == CHAM_RESIDENT_HOST && s->out_event &&
        cham_event_query(s->out_event) == CHAM_NOT_READY)
        return CHAM_RESIDENT_MOVING_OUT;
    return s->residency;
}

static int by_id(const void *a, const void *b)
{
    uint64_t x = (*(cham_storage_t *const *)a)->id, y = (*(cham_storage_t *const *)b)->id;
    return (x > y) - (x < y);
}

cham_storage_t **cham_storages_by_id(cham_context_t *ctx, size_t *n)
{
    *n = 0;
    for (cham_storage_t *s = ctx->storages; s; s = s->next)
        (*n)++;
    cham_storage_t **v = malloc((*n ? *n : 1) * sizeof *v);
    if (!v)
        return NULL;
    size_t i = 0;
    for (cham_storage_t *s = ctx->storages; s; s = s->next)
        v[i++] = s;
    qsort(v, i, sizeof *v, by_id);
    return v;
}

cham_storage_t *cham_storage_find(cham_storage_t *const *by_id, size_t n, uint64_t id)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (by_id[mid]->id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < n && by_id[lo]->id == id ? by_id[lo] : NULL;
}

/* ---- swapping -------------------------------------------------------------*/

static cham_status_t ensure_event(cham_context_t *ctx, cham_event_t **e)
{
    if (*e)
        return CHAM_OK;
    cham_status_t st = cham_event_new(ctx->dev, e);
    if (st != CHAM_OK)
        cham_context_error(ctx, "creating an event: %s", cham_device_last_error(ctx->dev));
    return st;
}

static cham_status_t device_error(cham_context_t *ctx, cham_status_t st, const char *what,
                                  const char *label)
{
    cham_context_error(ctx, "%s of \"%s\": %s", what, label,
                       cham_device_last_error(ctx->dev));
    return st;
}

/* Hands the device block of a storage being swapped out back to the
 * allocator: after op free_op is dispatched, behind an event wait (ours),
 * or when host queries find the copy done (PyTorch's recordStream). */
static cham_status_t release_swapped_block(cham_storage_t *s, bool no_copy, uint64_t free_op)
{
    cham_context_t *ctx = s->ctx;
    if (no_copy) {               /* back in compute order, as a free */
        free_device_block(s);
        return CHAM_OK;
    }
    if (ctx->config.pytorch_record_stream) {
        cham_status_t st = cham_block_record_stream(ctx->mem, s->block, ctx->swap_out);
        if (st == CHAM_OK)
            cham_block_free(ctx->mem, s->block);
        return st;
    }
    return cham_block_free_after_op(ctx->mem, s->block, ctx->swap_out, free_op);
}

/* Tells the swap hook. */
static void notify(cham_storage_t *s, bool out, cham_swap_cause_t cause, const void *dev_ptr)
{
    cham_context_t *ctx = s->ctx;
    if (!ctx->swap_hook)
        return;
    cham_swap_event_t e = {.out = out, .cause = cause, .label = s->label, .storage = s->id,
                           .bytes = s->bytes, .device_ptr = dev_ptr, .step = ctx->number,
                           .op = ctx->ops_in_step};
    const char *outer = cham_hook_enter(ctx, "the swap hook");
    ctx->swap_hook(&e, ctx->swap_hook_user);
    ctx->hook = outer;
}

cham_status_t cham_storage_swap_out(cham_storage_t *s, cham_swap_cause_t cause,
                                    uint64_t free_op)
{
    cham_context_t *ctx = s->ctx;
    if (s->residency == CHAM_RESIDENT_HOST || s->residency == CHAM_RESIDENT_DROPPED)
        return CHAM_OK;
    CHAM_ASSERT(s->block);
    cham_status_t st = ensure_event(ctx, &s->out_event);
    if (st != CHAM_OK)
        return st;
    /* The caller's host copy holds its bytes, or the pinned copy kept
     * since its swap-in does: nothing to copy. */
    bool backed = s->host_copy && s->host_valid;
    if (backed)
        cham_storage_forget_kept(s);
    bool kept = s->host_block != NULL;
    cham_block_t *host = s->host_block;
    st = backed || kept ? CHAM_OK : cham_pinned_block(s, &host);
    if (st != CHAM_OK) {
        cham_context_error(ctx, "swap-out of \"%s\": %s", s->label,
                           cham_allocator_last_error(ctx->pinned));
        return st;
    }
    void *dev_ptr = cham_block_ptr(s->block);
    if (backed || kept) {
        /* Nothing moves, so none of the runtime's streams is involved (a
         * copy queued there would make the block wait for unrelated
         * swap-outs); a later swap-in orders itself after the last use. */
        if ((st = cham_event_record(s->out_event, ctx->compute)) != CHAM_OK)
            goto fail;
    } else if (/* the copy: after the producer, any swap-in still writing the
                * block and the caller's own streams' work on it */
               (s->residency == CHAM_RESIDENT_MOVING_IN &&
                (st = cham_stream_wait_event(ctx->swap_out, s->in_event)) != CHAM_OK) ||
               (s->ext_stream &&
                (st = cham_stream_wait_event(ctx->swap_out, s->ext_event)) != CHAM_OK) ||
               (st = cham_event_record(s->out_event, ctx->compute)) != CHAM_OK ||
               (st = cham_stream_wait_event(ctx->swap_out, s->out_event)) != CHAM_OK ||
               (st = cham_copy_async(ctx->swap_out, cham_block_ptr(host), dev_ptr, s->bytes,
                                     CHAM_COPY_D2H, s->label)) != CHAM_OK ||
               (st = cham_event_record(s->out_event, ctx->swap_out)) != CHAM_OK) {
        goto fail;
    }
    if ((st = release_swapped_block(s, backed || kept, free_op)) != CHAM_OK) {
        cham_context_error(ctx, "swap-out of \"%s\": %s", s->label,
                           cham_allocator_last_error(ctx->mem));
        if (host && !kept)
            cham_block_free(ctx->pinned, host);
        return st;
    }
    s->block = NULL;
    s->host_block = host;
    s->backed = backed;
    s->residency = CHAM_RESIDENT_HOST;
    if (kept)
        cham_kept_leave(s);     /* away, its block holding its bytes */
    cham_victims_update(s);
    cham_context_mem_add(ctx, -(int64_t)s->bytes);
    ctx->stats.swaps_out++;
    ctx->stats.bytes_out += backed || kept ? 0 : s->bytes;
    if (cause == CHAM_SWAP_PASSIVE) {
        ctx->stats.passive_swaps_out++;
        ctx->step_passive++;
    } else if (cause == CHAM_SWAP_PLANNED) {
        ctx->stats.planned_swaps_out++;
    }
    cham_dispatch_note_swap(ctx, CHAM_SWAP_OUT, s, cause == CHAM_SWAP_PASSIVE, false);
    notify(s, true, cause, dev_ptr);
    return CHAM_OK;
fail:
    if (host && !kept)
        cham_block_free(ctx->pinned, host);
    return device_error(ctx, st, "swap-out", s->label);
}

cham_status_t cham_tensor_swap_out(cham_tensor_t *t, bool passive)
{
    CHAM_ASSERT(t);
    cham_context_t *ctx = t->storage->ctx;
    if (cham_hook_refuse(ctx, "cham_tensor_swap_out") != CHAM_OK)
        return CHAM_ERR_INVALID_ARG;
    const char *why = ctx->config.mode != CHAM_MODE_MANAGED ? "advisor mode; the caller moves memory"
                      : !t->storage->bytes                  ? "it has no bytes to move"
                      : cham_storage_in_flight(t->storage)  ? CHAM_IN_FLIGHT
                                                            : NULL;
    if (why) {
        cham_context_error(ctx, "swap-out of \"%s\": %s", t->label, why);
        return CHAM_ERR_INVALID_ARG;
    }
    /* Reusable once the next op is dispatched. */
    return cham_storage_swap_out(t->storage, passive ? CHAM_SWAP_PASSIVE : CHAM_SWAP_CALLER,
                                 ctx->ops_total);
}

cham_status_t cham_storage_swap_in(cham_storage_t *s, cham_swap_cause_t cause)
{
    cham_context_t *ctx = s->ctx;
    CHAM_ASSERT(s->residency == CHAM_RESIDENT_HOST);
    if (s->host_pending) {
        cham_context_error(ctx, "swap-in of \"%s\": its update on the host was not said to be "
                           "queued (cham_tensor_host_ready after cham_tensor_host_update) before "
                           "this use: its bytes on the host are not known to be ready", s->label);
        return CHAM_ERR_INVALID_ARG;
    }
    cham_status_t st = ensure_event(ctx, &s->in_event);
    if (st != CHAM_OK)
        return st;
    cham_block_t *block;
    st = cham_runtime_alloc(ctx, s, "swap-in of", &block);
    if (st != CHAM_OK)
        return st;
    CHAM_ASSERT(s->residency == CHAM_RESIDENT_HOST);
    /* The block's previous user ran on compute; the pinned copy was written
     * by the swap-out stream, the caller's host copy by what the caller's
     * stream (cham_tensor_record_stream) ordered before its last use. */
    const void *from = s->backed ? s->host_copy : cham_block_ptr(s->host_block);
    if ((st = cham_event_record(s->in_event, ctx->compute)) != CHAM_OK ||
        (st = cham_stream_wait_event(ctx->swap_in, s->in_event)) != CHAM_OK ||
        (st = cham_stream_wait_event(ctx->swap_in, s->out_event)) != CHAM_OK ||
        (s->backed && s->ext_stream &&
         (st = cham_stream_wait_event(ctx->swap_in, s->ext_event)) != CHAM_OK) ||
        (s->backed && s->host_event &&
         (st = cham_stream_wait_event(ctx->swap_in, s->host_event)) != CHAM_OK) ||
        (st = cham_copy_async(ctx->swap_in, cham_block_ptr(block), from, s->bytes,
                              CHAM_COPY_H2D, s->label)) != CHAM_OK ||
        (st = cham_event_record(s->in_event, ctx->swap_in)) != CHAM_OK) {
        cham_block_free(ctx->mem, block);
        return device_error(ctx, st, "swap-in", s->label);
    }
    if (s->host_block)
        cham_kept_add(s);       /* until its bytes change */
    s->host_waited = s->host_waited || (s->backed && s->host_event);
    s->backed = false;
    s->block = block;
    s->residency = CHAM_RESIDENT_MOVING_IN;
    cham_victims_update(s);
    cham_context_mem_add(ctx, (int64_t)s->bytes);
    ctx->stats.swaps_in++;
    ctx->stats.bytes_in += s->bytes;
    if (cause == CHAM_SWAP_PLANNED) {
        ctx->stats.planned_swaps_in++;
    } else if (cause == CHAM_SWAP_ON_DEMAND) {
        ctx->stats.on_demand_swaps_in++;
        ctx->step_on_demand++;
        cham_context_log(ctx, "step %llu op %u: \"%s\" (storage %llu) was on the host; brought "
                         "back on demand", (unsigned long long)ctx->number, ctx->ops_in_step,
                         s->label, (unsigned long long)s->id);
    }
    cham_dispatch_note_swap(ctx, CHAM_SWAP_IN, s, false, false);
    notify(s, false, cause, cham_block_ptr(block));
    return CHAM_OK;
}

cham_status_t cham_tensor_swap_in(cham_tensor_t *t)
{
    CHAM_ASSERT(t);
    cham_storage_t *s = t->storage;
    if (cham_hook_refuse(s->ctx, "cham_tensor_swap_in") != CHAM_OK)
        return CHAM_ERR_INVALID_ARG;
    if (s->residency == CHAM_RESIDENT_DROPPED)
        return cham_storage_recompute(s, CHAM_SWAP_CALLER);
    if (s->residency != CHAM_RESIDENT_HOST)
        return CHAM_OK;
    if (!cham_storage_on_host(s))
        return cham_storage_materialize(s);
    return cham_storage_swap_in(s, CHAM_SWAP_CALLER);
}

/* A caller's host copy needs managed mode and bytes to copy: else an
 * error naming the call (`what`) and the reason. */
static cham_status_t host_copy_allowed(cham_storage_t *s, const char *what)
{
    cham_context_t *ctx = s->ctx;
    if (cham_hook_refuse(ctx, what) != CHAM_OK)
        return CHAM_ERR_INVALID_ARG;
    const char *why = ctx->config.mode != CHAM_MODE_MANAGED ? "advisor mode; the caller moves memory"
                      : s->residency == CHAM_RESIDENT_DROPPED ? "it is dropped, to be recomputed"
                      : cham_storage_in_flight(s)             ? CHAM_IN_FLIGHT
                                                              : NULL;
    if (!why)
        return CHAM_OK;
    cham_context_error(ctx, "%s of \"%s\": %s", what, s->label, why);
    return CHAM_ERR_INVALID_ARG;
}

cham_status_t cham_tensor_set_host_copy(cham_tensor_t *t, void *host)
{
    CHAM_ASSERT(t);
    cham_storage_t *s = t->storage;
    cham_context_t *ctx = s->ctx;
    cham_status_t st = host_copy_allowed(s, "host copy");
    if (st != CHAM_OK)
        return st;
    if (!host && (s->backed || s->residency == CHAM_RESIDENT_MOVING_IN)) {
        /* The bytes about to change may be its only ones, or a swap-in may
         * still be reading them: back first, the copy done. */
        st = s->backed ? cham_storage_swap_in(s, CHAM_SWAP_CALLER) : CHAM_OK;
        if (st == CHAM_OK && (st = cham_event_synchronize(s->in_event)) != CHAM_OK)
            return device_error(ctx, st, "waiting for the swap-in", s->label);
        if (st != CHAM_OK)
            return st;
    }
    s->host_copy = host;
    s->host_valid = host != NULL;
    return CHAM_OK;
}

cham_status_t cham_tensor_host_update(cham_tensor_t *t, void *host)
{
    CHAM_ASSERT(t && host);
    cham_storage_t *s = t->storage;
    cham_context_t *ctx = s->ctx;
    cham_status_t st = host_copy_allowed(s, "host update");
    if (st != CHAM_OK)
        return st;
    /* An update is a write: tensors dropped to be made again from these
     * bytes are made now, the records of the others go, and so does the
     * record that made these bytes. */
    if ((st = cham_recompute_before_write(s)) != CHAM_OK)
        return st;
    cham_recompute_written(s);
    if (s->residency == CHAM_RESIDENT_MOVING_IN &&
        (st = cham_event_synchronize(s->in_event)) != CHAM_OK)
        return device_error(ctx, st, "waiting for the swap-in", s->label);
    if (s->host_block)           /* away in the runtime's pinned memory: not needed */
        cham_host_block_free(s, ctx->swap_out);
    s->host_copy = host;
    s->host_valid = true;
    s->host_pending = true;
    if (s->residency == CHAM_RESIDENT_HOST) {
        s->backed = true;
        return CHAM_OK;
    }
    return cham_storage_swap_out(s, CHAM_SWAP_CALLER, ctx->ops_total);
}

cham_status_t cham_tensor_discard(cham_tensor_t *t)
{
    CHAM_ASSERT(t);
    cham_storage_t *s = t->storage;
    cham_context_t *ctx = s->ctx;
    if (cham_hook_refuse(ctx, "cham_tensor_discard") != CHAM_OK)
        return CHAM_ERR_INVALID_ARG;
    const char *why = ctx->config.mode != CHAM_MODE_MANAGED
                          ? "advisor mode; the caller moves memory"
                      : cham_storage_in_flight(s) ? CHAM_IN_FLIGHT
                                                  : NULL;
    if (why) {
        cham_context_error(ctx, "discard of \"%s\": %s", t->label, why);
        return CHAM_ERR_INVALID_ARG;
    }
    if (t->offset != 0 || t->bytes != s->bytes) {
        cham_context_error(ctx, "discard of \"%s\": the view covers bytes %zu..%zu of its "
                           "storage's %zu; only a whole storage's bytes can be discarded",
                           t->label, t->offset, t->offset + t->bytes, s->bytes);
        return CHAM_ERR_INVALID_ARG;
    }
    if (s->residency == CHAM_RESIDENT_DROPPED || s->host_pending)
        return CHAM_OK;          /* a hint: the bytes stay */
    /* Tensors dropped to be made again from these bytes are made now. */
    cham_status_t st = cham_recompute_before_write(s);
    if (st != CHAM_OK)
        return st;
    cham_recompute_written(s);
    cham_storage_forget_kept(s);
    if (cham_storage_on_host(s)) {
        if (s->host_block)       /* after the swap-out copy that filled it */
            cham_host_block_free(s, ctx->swap_out);
        s->backed = false;       /* comes back with no copy (materialize) */
        s->dead_away = true;
    }
    s->host_valid = false;
    s->holds_data = false;
    s->discarded = true;
    cham_victims_update(s);
    return CHAM_OK;
}

/* Records the work queued so far on the caller's stream in *ev (`what`
 * names the call in errors). */
static cham_status_t record_caller(cham_storage_t *s, cham_stream_t *stream, const char *what,
                                   cham_event_t **ev)
{
    cham_context_t *ctx = s->ctx;
    if (cham_stream_device(stream) != ctx->dev) {
        cham_context_error(ctx, "%s of \"%s\": stream \"%s\" is on another device", what,
                           s->label, cham_stream_name(stream));
        return CHAM_ERR_INVALID_ARG;
    }
    cham_status_t st = ensure_event(ctx, ev);
    if (st == CHAM_OK && (st = cham_event_record(*ev, stream)) != CHAM_OK)
        return device_error(ctx, st, what, s->label);
    return st;
}

cham_status_t cham_tensor_host_ready(cham_tensor_t *t, cham_stream_t *stream)
{
    CHAM_ASSERT(t && stream);
    cham_storage_t *s = t->storage;
    if (cham_hook_refuse(s->ctx, "cham_tensor_host_ready") != CHAM_OK)
        return CHAM_ERR_INVALID_ARG;
    if (!s->host_pending && !(s->host_copy && s->host_valid)) {
        cham_context_error(s->ctx, "host ready of \"%s\": no update on the host was "
                           "announced (cham_tensor_host_update) and no host copy is set "
                           "(cham_tensor_set_host_copy)", s->label);
        return CHAM_ERR_INVALID_ARG;
    }
    cham_status_t st = record_caller(s, stream, "host ready", &s->host_event);
    if (st == CHAM_OK)
        s->host_pending = s->host_waited = false;
    return st;
}

cham_status_t cham_tensor_record_stream(cham_tensor_t *t, cham_stream_t *stream)
{
    CHAM_ASSERT(t && stream);
    cham_storage_t *s = t->storage;
    if (cham_hook_refuse(s->ctx, "cham_tensor_record_stream") != CHAM_OK)
        return CHAM_ERR_INVALID_ARG;
    cham_status_t st = record_caller(s, stream, "record_stream", &s->ext_event);
    if (st == CHAM_OK)
        s->ext_stream = stream;
    return st;
}

/* ---- storages without data ---------------------------------------------------*/

void cham_storage_dematerialize(cham_storage_t *s)
{
    cham_context_t *ctx = s->ctx;
    CHAM_ASSERT(s->block && !s->holds_data && s->residency == CHAM_RESIDENT_DEVICE &&
                !s->host_block);
    /* No op used it since it held data (never, or since cham_tensor_discard):
     * compute order, and a caller's stream's work, is all the reuse needs. */
    free_device_block(s);
    s->block = NULL;
    s->residency = CHAM_RESIDENT_HOST;
    cham_victims_update(s);
    cham_context_mem_add(ctx, -(int64_t)s->bytes);
}

cham_status_t cham_storage_materialize(cham_storage_t *s)
{
    cham_context_t *ctx = s->ctx;
    CHAM_ASSERT(s->residency == CHAM_RESIDENT_HOST && !s->host_block && !s->block);
    cham_status_t st = cham_runtime_alloc(ctx, s, "tensor", &s->block);
    if (st != CHAM_OK)
        return st;
    s->residency = CHAM_RESIDENT_DEVICE;
    cham_victims_update(s);
    cham_context_mem_add(ctx, (int64_t)s->bytes);
    if (s->dead_away) {          /* its swap-out was profiled: so is its return */
        s->dead_away = false;
        cham_dispatch_note_swap(ctx, CHAM_SWAP_IN, s, false, false);
    }
    return CHAM_OK;
}

/* ---- advisor mode: the caller's moves ------------------------------------------*/

/* The cause of a move the caller reports: planned if the executor advised
 * it (the flag is spent). */
static cham_swap_cause_t reported_cause(cham_storage_t *s)
{
    bool planned = s->advised;
    s->advised = false;
    return planned ? CHAM_SWAP_PLANNED : CHAM_SWAP_CALLER;
}

static cham_status_t advisor_only(cham_tensor_t *t, const char *what)
{
    cham_context_t *ctx = t->storage->ctx;
    if (cham_hook_refuse(ctx, what) != CHAM_OK)
        return CHAM_ERR_INVALID_ARG;
    if (ctx->config.mode == CHAM_MODE_ADVISOR)
        return CHAM_OK;
    cham_context_error(ctx, "%s \"%s\": only in advisor mode; in managed mode Chameleon "
                       "moves tensors itself", what, t->label);
    return CHAM_ERR_INVALID_ARG;
}

cham_status_t cham_tensor_swapped_out(cham_tensor_t *t)
{
    CHAM_ASSERT(t);
    cham_status_t st = advisor_only(t, "cham_tensor_swapped_out of");
    if (st != CHAM_OK)
        return st;
    cham_storage_t *s = t->storage;
    cham_context_t *ctx = s->ctx;
    const char *why = s->residency != CHAM_RESIDENT_DEVICE ? "it is already on the host"
                      : cham_storage_in_flight(s) &&
                              !cham_storage_advised_now(s, CHAM_ACTION_SWAP_OUT)
                          ? CHAM_IN_FLIGHT
                          : NULL;
    if (why) {
        cham_context_error(ctx, "cham_tensor_swapped_out of \"%s\": %s", t->label, why);
        return CHAM_ERR_INVALID_ARG;
    }
    cham_swap_cause_t cause = reported_cause(s);
    void *old = s->ptr;
    s->ptr = NULL;
    s->residency = CHAM_RESIDENT_HOST;
    cham_context_mem_add(ctx, -(int64_t)s->bytes);
    ctx->stats.swaps_out++;
    ctx->stats.bytes_out += s->bytes;
    ctx->stats.planned_swaps_out += cause == CHAM_SWAP_PLANNED;
    /* A move no action advised made room the policy did not: a passive
     * swap, which ranks the trial below clean ones (trials.c). */
    if (cause == CHAM_SWAP_CALLER) {
        ctx->stats.passive_swaps_out++;
        ctx->step_passive++;
    }
    cham_dispatch_note_swap(ctx, CHAM_SWAP_OUT, s, false, false);
    notify(s, true, cause, old);
    return CHAM_OK;
}

cham_status_t cham_tensor_swapped_in(cham_tensor_t *t, void *device_ptr)
{
    CHAM_ASSERT(t);
    cham_status_t st = advisor_only(t, "cham_tensor_swapped_in of");
    if (st != CHAM_OK)
        return st;
    cham_storage_t *s = t->storage;
    cham_context_t *ctx = s->ctx;
    if (s->residency != CHAM_RESIDENT_HOST || !device_ptr) {
        cham_context_error(ctx, "cham_tensor_swapped_in of \"%s\": %s", t->label,
                           device_ptr ? "it is not on the host" : "device_ptr is NULL");
        return CHAM_ERR_INVALID_ARG;
    }
    cham_swap_cause_t cause = reported_cause(s);
    s->ptr = device_ptr;
    s->residency = CHAM_RESIDENT_DEVICE;
    cham_context_mem_add(ctx, (int64_t)s->bytes);
    ctx->stats.swaps_in++;
    ctx->stats.bytes_in += s->bytes;
    ctx->stats.planned_swaps_in += cause == CHAM_SWAP_PLANNED;
    /* Brought back unadvised: the caller needed it before the policy
     * brought it (or the policy had it away when something read it). */
    if (cause == CHAM_SWAP_CALLER) {
        ctx->stats.on_demand_swaps_in++;
        ctx->step_on_demand++;
    }
    cham_dispatch_note_swap(ctx, CHAM_SWAP_IN, s, false, false);
    notify(s, false, cause, device_ptr);
    return CHAM_OK;
}

/* Advisor mode: a storage on the host that the op being begun uses. */
static void advise_on_demand(cham_storage_t *s)
{
    cham_context_t *ctx = s->ctx;
    if (cham_exec_advise(ctx, CHAM_ACTION_SWAP_IN, s->view_list, true, 0)) {
        ctx->stats.on_demand_swaps_in++;
        ctx->step_on_demand++;
    }
}

cham_status_t cham_storage_prepare(cham_storage_t *s)
{
    cham_context_t *ctx = s->ctx;
    if (ctx->config.mode == CHAM_MODE_ADVISOR) {
        if (s->residency == CHAM_RESIDENT_DROPPED)
            return cham_recompute_advise(s, true);
        if (s->residency == CHAM_RESIDENT_HOST)
            advise_on_demand(s);
        return CHAM_OK;
    }
    if (s->residency == CHAM_RESIDENT_DROPPED)
        return cham_storage_recompute(s, CHAM_SWAP_ON_DEMAND);
    if (s->residency == CHAM_RESIDENT_HOST && !cham_storage_on_host(s))
        return cham_storage_materialize(s);
    if (s->residency == CHAM_RESIDENT_HOST) {
        cham_status_t st = cham_storage_swap_in(s, CHAM_SWAP_ON_DEMAND);
        if (st != CHAM_OK)
            return st;
    }
    if (s->residency == CHAM_RESIDENT_MOVING_IN) {
        cham_status_t st = cham_stream_wait_event(ctx->compute, s->in_event);
        if (st != CHAM_OK)
            return device_error(ctx, st, "waiting for the swap-in", s->label);
        s->residency = CHAM_RESIDENT_DEVICE;   /* compute is ordered after the copy */
    }
    return CHAM_OK;
}
