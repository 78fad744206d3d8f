/* Deferred frees: the two ways a block freed while another stream still
 * uses it gets back to its pool.
 *
 * recordStream (PyTorch): cham_block_record_stream notes the streams; at
 * cham_block_free an event is recorded on each, and the block returns when
 * host-side queries, made at later allocations, find them all complete.
 *
 * free-after-op (Chameleon's custom recordStream): an event is recorded on
 * the user (swap) stream at free time; when op k is dispatched the block's
 * own stream waits on it (device-side ordering) and the block returns at
 * once. No queries: the host never polls.
 *
 * Events come from a pool, since making one is not free on real hardware. */
#include <stdio.h>
#include <stdlib.h>

#include "alloc/alloc-impl.h"
#include "common/assert.h"
#include "common/grow.h"

/* ---- event pool ---------------------------------------------------------------*/

static cham_status_t event_get(cham_allocator_t *a, cham_event_t **out)
{
    if (a->n_events) {
        *out = a->events[--a->n_events];
        return CHAM_OK;
    }
    /* Keep room for every event made, so that event_put never fails. */
    cham_event_t **events = cham_grow(a->events, &a->cap_events, a->n_events_made + 1,
                                      sizeof *events, 16);
    if (!events)
        return CHAM_ERR_HOST_OOM;
    a->events = events;
    cham_status_t st = cham_event_new(a->dev, out);
    if (st == CHAM_OK)
        a->n_events_made++;
    return st;
}

static void event_put(cham_allocator_t *a, cham_event_t *e)
{
    CHAM_ASSERT(a->n_events < a->cap_events);
    a->events[a->n_events++] = e;
}

size_t cham_allocator_events_made(const cham_allocator_t *a)
{
    return a->n_events_made;
}

/* A deferred block is back: count its reuse interval and pool it. */
static void finish_deferred(cham_allocator_t *a, cham_block_t *b)
{
    cham_alloc_stats_t *s = &a->stats;
    uint64_t interval = a->op_counter - b->u.freed_at;
    s->pending_free -= b->size;
    s->n_deferred_released++;
    s->reuse_interval_sum += interval;
    if (interval > s->reuse_interval_max)
        s->reuse_interval_max = interval;
    cham_alloc_release_block(a, b);
}

/* ---- recordStream -----------------------------------------------------------------*/

cham_status_t cham_block_record_stream(cham_allocator_t *a, cham_block_t *b,
                                       cham_stream_t *stream)
{
    CHAM_ASSERT(a && b && stream);
    CHAM_ASSERT(b->state == CHAM_BLOCK_ALLOCATED && "record_stream on a block not allocated");
    int id = cham_alloc_note_stream(a, stream);
    if (id != b->seg->stream_id)       /* its own stream is ordered already */
        b->recorded |= UINT64_C(1) << id;
    return CHAM_OK;
}

/* Takes a block out of the allocated bytes (a free call). */
static void count_free(cham_allocator_t *a, cham_block_t *b)
{
    a->stats.allocated -= b->size;
    a->stats.requested -= b->requested;
    a->stats.n_frees++;
}

void cham_block_free(cham_allocator_t *a, cham_block_t *b)
{
    CHAM_ASSERT(a && b);
    CHAM_ASSERT(b->state == CHAM_BLOCK_ALLOCATED && "block freed twice or never allocated");
    count_free(a, b);
    uint64_t others = b->recorded & ~(UINT64_C(1) << b->seg->stream_id);
    b->recorded = 0;
    if (!others) {
        cham_alloc_release_block(a, b);
        cham_alloc_debug_check(a);
        return;
    }
    b->state = CHAM_BLOCK_PENDING_EVENTS;
    b->n_pending = 0;
    b->u.freed_at = a->op_counter;
    while (others) {
        int i = __builtin_ctzll(others);
        others &= others - 1;
        cham_stream_t *s = a->streams[i];
        cham_deferred_t *d = cham_alloc_get_deferred(a);
        cham_event_t *e = NULL;
        if (!d || event_get(a, &e) != CHAM_OK || cham_event_record(e, s) != CHAM_OK) {
            /* No event to wait with: wait for the stream now instead. */
            if (e)
                event_put(a, e);
            if (d)
                cham_alloc_put_deferred(a, d);
            cham_stream_synchronize(s);
            continue;
        }
        d->event = e;
        d->block = b;
        d->stream = s;
        d->next_in_queue = NULL;
        if (a->queue_tail[i])
            a->queue_tail[i]->next_in_queue = d;
        else
            a->queue_head[i] = d;
        a->queue_tail[i] = d;
        a->queue_mask |= UINT64_C(1) << i;
        b->n_pending++;
    }
    a->stats.pending_free += b->size;
    if (b->n_pending == 0)
        finish_deferred(a, b);
    cham_alloc_debug_check(a);
}

/* Pops the head of queue i, whose event has completed. */
static void queue_pop_done(cham_allocator_t *a, int i)
{
    cham_deferred_t *d = a->queue_head[i];
    a->queue_head[i] = d->next_in_queue;
    if (!a->queue_head[i]) {
        a->queue_tail[i] = NULL;
        a->queue_mask &= ~(UINT64_C(1) << i);
    }
    cham_block_t *b = d->block;
    event_put(a, d->event);
    cham_alloc_put_deferred(a, d);
    CHAM_ASSERT(b->state == CHAM_BLOCK_PENDING_EVENTS && b->n_pending > 0);
    if (--b->n_pending == 0)
        finish_deferred(a, b);
}

void cham_alloc_process_events(cham_allocator_t *a)
{
    uint64_t mask = a->queue_mask;
    while (mask) {
        int i = __builtin_ctzll(mask);
        mask &= mask - 1;
        /* Events of one stream complete in order: stop at the first not done. */
        while (a->queue_head[i]) {
            a->stats.n_event_queries++;
            if (cham_event_query(a->queue_head[i]->event) != CHAM_OK)
                break;
            queue_pop_done(a, i);
        }
    }
}

/* ---- free-after-op -------------------------------------------------------------------*/

static inline bool op_before(const cham_op_entry_t *x, const cham_op_entry_t *y)
{
    return x->op < y->op || (x->op == y->op && x->seq < y->seq);
}

static void heap_push(cham_allocator_t *a, cham_op_entry_t e)
{
    CHAM_ASSERT(a->n_heap < a->cap_heap);
    size_t i = a->n_heap++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!op_before(&e, &a->heap[p]))
            break;
        a->heap[i] = a->heap[p];
        i = p;
    }
    a->heap[i] = e;
}

static cham_block_t *heap_pop(cham_allocator_t *a)
{
    CHAM_ASSERT(a->n_heap > 0);
    cham_block_t *top = a->heap[0].block;
    cham_op_entry_t last = a->heap[--a->n_heap];
    size_t n = a->n_heap, i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && op_before(&a->heap[c + 1], &a->heap[c]))
            c++;
        if (!op_before(&a->heap[c], &last))
            break;
        a->heap[i] = a->heap[c];
        i = c;
    }
    if (n)
        a->heap[i] = last;
    return top;
}

/* Orders the block's own stream after its events, then pools the block. */
static void release_op_block(cham_allocator_t *a, cham_block_t *b)
{
    CHAM_ASSERT(b->state == CHAM_BLOCK_PENDING_OP);
    cham_deferred_t *d = b->events;
    while (d) {
        cham_deferred_t *next = d->next_in_block;
        if (cham_stream_wait_event(b->seg->stream, d->event) != CHAM_OK)
            cham_event_synchronize(d->event);   /* the safe, slow way */
        event_put(a, d->event);
        cham_alloc_put_deferred(a, d);
        d = next;
    }
    bool waited = b->events != NULL;
    b->events = NULL;
    const cham_segment_t *seg = b->seg;
    finish_deferred(a, b);
    if (waited && a->granularity)
        cham_alloc_vm_checkpoint_now(a, seg);
}

cham_status_t cham_block_free_after_op(cham_allocator_t *a, cham_block_t *b,
                                       cham_stream_t *user, uint64_t op_index)
{
    CHAM_ASSERT(a && b && user);
    CHAM_ASSERT(b->state == CHAM_BLOCK_ALLOCATED && "block freed twice or never allocated");
    if (a->any_op && op_index < a->last_op) {
        cham_alloc_set_error(a, "free after op %ju, but op %ju has already been dispatched",
                             (uintmax_t)op_index, (uintmax_t)a->last_op);
        return CHAM_ERR_INVALID_ARG;
    }
    int user_id = cham_alloc_note_stream(a, user);
    bool now = a->any_op && op_index == a->last_op;
    if (!now) {
        cham_op_entry_t *heap = cham_grow(a->heap, &a->cap_heap, a->n_heap + 1, sizeof *heap, 64);
        if (!heap) {
            cham_alloc_set_error(a, "out of host memory for the free-after-op list");
            return CHAM_ERR_HOST_OOM;
        }
        a->heap = heap;
    }

    /* An event on the user stream and on every recorded stream but its own. */
    uint64_t targets = (b->recorded | (UINT64_C(1) << user_id)) &
                       ~(UINT64_C(1) << b->seg->stream_id);
    cham_deferred_t *chain = NULL;
    while (targets) {
        int i = __builtin_ctzll(targets);
        targets &= targets - 1;
        cham_deferred_t *d = cham_alloc_get_deferred(a);
        cham_event_t *e = NULL;
        cham_status_t st = d ? event_get(a, &e) : CHAM_ERR_HOST_OOM;
        if (st == CHAM_OK)
            st = cham_event_record(e, a->streams[i]);
        if (st != CHAM_OK) {
            if (e)
                event_put(a, e);
            if (d)
                cham_alloc_put_deferred(a, d);
            while (chain) {
                cham_deferred_t *next = chain->next_in_block;
                event_put(a, chain->event);
                cham_alloc_put_deferred(a, chain);
                chain = next;
            }
            cham_alloc_set_error(a, "free after op %ju: could not record an event on "
                                 "stream \"%s\": %s", (uintmax_t)op_index,
                                 cham_stream_name(a->streams[i]), cham_status_string(st));
            return st;
        }
        d->event = e;
        d->block = b;
        d->stream = a->streams[i];
        d->next_in_block = chain;
        chain = d;
    }

    count_free(a, b);
    b->recorded = 0;
    b->events = chain;
    b->state = CHAM_BLOCK_PENDING_OP;
    b->u.freed_at = a->op_counter;
    a->stats.pending_free += b->size;
    if (now) {
        release_op_block(a, b);
    } else {
        cham_op_entry_t entry = {.op = op_index, .seq = a->heap_seq++, .block = b};
        heap_push(a, entry);
    }
    cham_alloc_debug_check(a);
    return CHAM_OK;
}

cham_status_t cham_allocator_op_dispatched(cham_allocator_t *a, uint64_t op_index)
{
    CHAM_ASSERT(a);
    if (a->any_op && op_index < a->last_op) {
        cham_alloc_set_error(a, "op %ju dispatched after op %ju: op indices must not decrease",
                             (uintmax_t)op_index, (uintmax_t)a->last_op);
        return CHAM_ERR_INVALID_ARG;
    }
    a->any_op = true;
    a->last_op = op_index;
    a->op_counter++;
    while (a->n_heap && a->heap[0].op <= op_index)
        release_op_block(a, heap_pop(a));
    if (a->granularity)
        cham_alloc_vm_checkpoint(a);
    cham_alloc_debug_check(a);
    return CHAM_OK;
}

void cham_allocator_ops_sooner(cham_allocator_t *a, uint64_t n)
{
    CHAM_ASSERT(a);
    /* One shift for all keeps the heap's order (ties stay by arrival). */
    for (size_t i = 0; i < a->n_heap; i++)
        a->heap[i].op = a->heap[i].op > n ? a->heap[i].op - n : 0;
    while (a->any_op && a->n_heap && a->heap[0].op <= a->last_op)
        release_op_block(a, heap_pop(a));
    cham_alloc_debug_check(a);
}

bool cham_alloc_release_first_op_block(cham_allocator_t *a)
{
    if (!a->n_heap)
        return false;
    release_op_block(a, heap_pop(a));
    return true;
}

void cham_alloc_release_all_op_blocks(cham_allocator_t *a)
{
    while (a->n_heap)
        release_op_block(a, heap_pop(a));
}

uint64_t cham_allocator_sync_deferred(cham_allocator_t *a)
{
    CHAM_ASSERT(a);
    uint64_t before = a->stats.pending_free;
    while (a->queue_mask) {
        int i = __builtin_ctzll(a->queue_mask);
        a->stats.n_event_syncs++;
        cham_event_synchronize(a->queue_head[i]->event);
        queue_pop_done(a, i);
    }
    cham_alloc_debug_check(a);
    return before - a->stats.pending_free;
}

void cham_alloc_drain_deferred(cham_allocator_t *a)
{
    cham_allocator_sync_deferred(a);
    cham_alloc_release_all_op_blocks(a);
    CHAM_ASSERT(a->n_events == a->n_events_made);
    for (size_t i = 0; i < a->n_events; i++)
        cham_event_free(a->events[i]);
    a->n_events = a->n_events_made = 0;
}
