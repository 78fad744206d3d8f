/* The caching allocator's expensive checker: walks every segment and block
 * and verifies the invariants written above the structs in alloc-impl.h.
 * Tests call it directly; with CHAM_DEBUG_CHECKS=1 the allocator calls it
 * after every public operation. Also the block walk tests use. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "alloc/alloc-impl.h"
#include "common/assert.h"
#include "common/output.h"

static bool fail(char *why, size_t why_size, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

static bool fail(char *why, size_t why_size, const char *fmt, ...)
{
    if (why && why_size) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, why_size, fmt, ap);
        va_end(ap);
    }
    return false;
}

typedef struct span {
    uintptr_t lo, hi;
} span_t;

static int span_cmp(const void *x, const void *y)
{
    const span_t *a = x, *b = y;
    return a->lo < b->lo ? -1 : a->lo > b->lo;
}

/* Totals gathered by walking the segments. */
typedef struct totals {
    uint64_t reserved, allocated, requested, pending, free_bytes;
    uint64_t mapped;              /* expandable: granules mapped */
    size_t n_free, n_pending_op, n_waiting_events, n_chained_events, n_segments;
} totals_t;

static bool check_segment(const cham_allocator_t *a, const cham_segment_t *seg, totals_t *t,
                          char *why, size_t n)
{
    const cham_block_tree_t *tree = seg->small ? &a->small : &a->large;
    if (!seg->first || seg->first->prev)
        return fail(why, n, "segment %p: bad first block", (void *)seg->ptr);
    if (seg->size == 0 ||
        (!a->granularity && seg->small && seg->size != CHAM_ALLOC_SMALL_SEGMENT >> a->shift))
        return fail(why, n, "segment %p: size %zu", (void *)seg->ptr, seg->size);
    if (seg->stream_id < 0 || seg->stream_id >= CHAM_ALLOC_MAX_STREAMS ||
        a->streams[seg->stream_id] == NULL)
        return fail(why, n, "segment %p: stream id %d unknown", (void *)seg->ptr,
                    seg->stream_id);
    char *at = seg->ptr;
    const cham_block_t *prev = NULL;
    for (const cham_block_t *b = seg->first; b; prev = b, b = b->next) {
        if (b->seg != seg || b->prev != prev)
            return fail(why, n, "block %p: broken links", (void *)b->ptr);
        if (b->ptr != at)
            return fail(why, n, "block %p: expected at %p (gap or overlap)", (void *)b->ptr,
                        (void *)at);
        if (b->size == 0 || b->size % CHAM_ALLOC_MIN_BLOCK != 0 ||
            b->size > seg->size - (size_t)(b->ptr - seg->ptr))
            return fail(why, n, "block %p: size %zu", (void *)b->ptr, b->size);
        at += b->size;
        /* Expandable: a block in use is mapped, at its first and last
         * granule where the chunk says (the granules between are looked at
         * only when a kernel or copy touches them: this check runs after
         * every operation in debug builds and must stay O(blocks)). */
        size_t g = a->granularity;
        if (g && b->state != CHAM_BLOCK_FREE) {
            size_t ends[2] = {(size_t)(b->ptr - seg->ptr) / g,
                              (size_t)(b->ptr + b->size - 1 - seg->ptr) / g};
            for (int k = 0; k < 2; k++)
                if (!seg->chunks[ends[k]] ||
                    cham_phys_mapped_at(seg->chunks[ends[k]]) != seg->ptr + ends[k] * g)
                    return fail(why, n, "block %p in use over granule %zu, %s",
                                (void *)b->ptr, ends[k],
                                seg->chunks[ends[k]] ? "whose chunk is mapped elsewhere"
                                                     : "which is not mapped");
        }
        bool pending = b->state == CHAM_BLOCK_PENDING_EVENTS || b->state == CHAM_BLOCK_PENDING_OP;
        if (!pending && b->events)
            return fail(why, n, "block %p: events while not pending", (void *)b->ptr);
        switch ((cham_block_state_t)b->state) {
        case CHAM_BLOCK_FREE:
            if (prev && prev->state == CHAM_BLOCK_FREE)
                return fail(why, n, "blocks %p and %p: adjacent free blocks not merged",
                            (void *)prev->ptr, (void *)b->ptr);
            if (cham_block_tree_find(tree, seg->stream_id, b->size, (uintptr_t)b->ptr) !=
                &b->node)
                return fail(why, n, "free block %p (%zu B) not in its pool", (void *)b->ptr,
                            b->size);
            t->n_free++;
            t->free_bytes += b->size;
            break;
        case CHAM_BLOCK_ALLOCATED:
            if (b->requested == 0 || b->requested > b->size)
                return fail(why, n, "block %p: requested %zu of %zu", (void *)b->ptr,
                            b->requested, b->size);
            t->allocated += b->size;
            t->requested += b->requested;
            break;
        case CHAM_BLOCK_PENDING_EVENTS:
            if (b->n_pending == 0)
                return fail(why, n, "block %p: pending on no events", (void *)b->ptr);
            t->pending += b->size;
            t->n_waiting_events += b->n_pending;
            break;
        case CHAM_BLOCK_PENDING_OP:
            t->pending += b->size;
            t->n_pending_op++;
            for (const cham_deferred_t *d = b->events; d; d = d->next_in_block) {
                if (d->block != b || !d->event)
                    return fail(why, n, "block %p: bad event chain", (void *)b->ptr);
                t->n_chained_events++;
            }
            break;
        default:
            return fail(why, n, "block %p: state %d", (void *)b->ptr, b->state);
        }
    }
    if (at != seg->ptr + seg->size)
        return fail(why, n, "segment %p: blocks cover %zu of %zu bytes", (void *)seg->ptr,
                    (size_t)(at - seg->ptr), seg->size);
    t->mapped += seg->n_mapped;
    t->reserved += seg->size;
    t->n_segments++;
    return true;
}

static bool check_deferred(const cham_allocator_t *a, const totals_t *t, char *why, size_t n)
{
    size_t in_queues = 0;
    for (int i = 0; i < CHAM_ALLOC_MAX_STREAMS; i++) {
        bool bit = (a->queue_mask >> i) & 1;
        if (bit != (a->queue_head[i] != NULL))
            return fail(why, n, "queue %d: mask bit %d disagrees", i, (int)bit);
        const cham_deferred_t *last = NULL;
        for (const cham_deferred_t *d = a->queue_head[i]; d; d = d->next_in_queue) {
            if (!d->event || !d->block || d->block->state != CHAM_BLOCK_PENDING_EVENTS)
                return fail(why, n, "queue %d: entry for a block not waiting on events", i);
            last = d;
            in_queues++;
        }
        if (last != a->queue_tail[i])
            return fail(why, n, "queue %d: tail is not the last entry", i);
    }
    if (in_queues != t->n_waiting_events)
        return fail(why, n, "%zu queued events, blocks wait on %zu", in_queues,
                    t->n_waiting_events);
    if (a->n_heap != t->n_pending_op)
        return fail(why, n, "%zu free-after-op entries, %zu blocks pending an op", a->n_heap,
                    t->n_pending_op);
    for (size_t i = 0; i < a->n_heap; i++) {
        const cham_op_entry_t *e = &a->heap[i];
        if (e->block->state != CHAM_BLOCK_PENDING_OP)
            return fail(why, n, "free-after-op entry %zu: block not pending an op", i);
        if (a->any_op && e->op <= a->last_op)
            return fail(why, n, "free-after-op entry for op %ju not released at op %ju",
                        (uintmax_t)e->op, (uintmax_t)a->last_op);
        if (i > 0) {
            const cham_op_entry_t *p = &a->heap[(i - 1) / 2];
            if (p->op > e->op || (p->op == e->op && p->seq > e->seq))
                return fail(why, n, "free-after-op heap out of order at %zu", i);
        }
    }
    if (a->n_events + in_queues + t->n_chained_events != a->n_events_made)
        return fail(why, n, "events: %zu pooled + %zu queued + %zu chained != %zu made",
                    a->n_events, in_queues, t->n_chained_events, a->n_events_made);
    return true;
}

static bool segment_is_idle(const cham_segment_t *seg)
{
    return seg->first->state == CHAM_BLOCK_FREE && !seg->first->next;
}

/* The idle list against a walk of every segment: exactly the segments that
 * are one free block, with their count and bytes; the segment list newest
 * first (the order the OOM path releases idle segments in). */
static bool check_idle(const cham_allocator_t *a, char *why, size_t n)
{
    size_t idle = 0;
    uint64_t idle_bytes = 0;
    for (const cham_segment_t *seg = a->segments; seg; seg = seg->next) {
        if (seg->next && seg->next->seq >= seg->seq)
            return fail(why, n, "segment %p: not newer than the next", (void *)seg->ptr);
        if (segment_is_idle(seg)) {
            idle++;
            idle_bytes += seg->size;
        }
    }
    size_t listed = 0;
    uint64_t listed_bytes = 0;
    const cham_segment_t *prev = NULL;
    for (const cham_segment_t *seg = a->idle; seg; prev = seg, seg = seg->idle_next) {
        if (seg->idle_prev != prev)
            return fail(why, n, "idle list: broken prev link");
        if (!segment_is_idle(seg))
            return fail(why, n, "idle list: segment %p is in use", (void *)seg->ptr);
        if (++listed > idle)
            return fail(why, n, "idle list: more entries than idle segments (%zu)", idle);
        listed_bytes += seg->size;
    }
    if (listed != idle || listed_bytes != idle_bytes || a->n_idle != idle ||
        a->idle_bytes != idle_bytes)
        return fail(why, n, "%zu idle segments (%ju B); the list holds %zu (%ju B), the "
                    "counts say %zu (%ju B)", idle, (uintmax_t)idle_bytes, listed,
                    (uintmax_t)listed_bytes, a->n_idle, (uintmax_t)a->idle_bytes);
    return true;
}

bool cham_allocator_check(const cham_allocator_t *a, char *why, size_t n)
{
    CHAM_ASSERT(a);
    char tree_why[200];
    if (!cham_block_tree_check(&a->small, tree_why, sizeof tree_why))
        return fail(why, n, "small pool tree: %s", tree_why);
    if (!cham_block_tree_check(&a->large, tree_why, sizeof tree_why))
        return fail(why, n, "large pool tree: %s", tree_why);

    totals_t t = {0};
    const cham_segment_t *prev = NULL;
    for (const cham_segment_t *seg = a->segments; seg; prev = seg, seg = seg->next) {
        if (seg->prev != prev)
            return fail(why, n, "segment list: broken prev link");
        if (!check_segment(a, seg, &t, why, n))
            return false;
    }

    if (!check_idle(a, why, n))
        return false;

    /* No two segments overlap. */
    span_t *spans = t.n_segments ? malloc(t.n_segments * sizeof *spans) : NULL;
    if (spans) {
        size_t k = 0;
        for (const cham_segment_t *seg = a->segments; seg; seg = seg->next)
            spans[k++] = (span_t){(uintptr_t)seg->ptr, (uintptr_t)seg->ptr + seg->size};
        qsort(spans, k, sizeof *spans, span_cmp);
        for (size_t i = 1; i < k; i++) {
            if (spans[i].lo < spans[i - 1].hi) {
                uintptr_t at = spans[i].lo;
                free(spans);
                return fail(why, n, "segments overlap at %#jx", (uintmax_t)at);
            }
        }
        free(spans);
    }

    const cham_alloc_stats_t *s = &a->stats;
    if (t.n_free != a->small.count + a->large.count)
        return fail(why, n, "%zu free blocks, pools hold %zu", t.n_free,
                    a->small.count + a->large.count);
    /* Classic segments hold memory; expandable ones addresses, with the
     * chunks mapped in them and the spares holding the memory. */
    uint64_t held = a->granularity ? (t.mapped + a->n_spare) * a->granularity : t.reserved;
    if (held != s->reserved || s->reserved > a->limit)
        return fail(why, n, "segments hold %ju B, reserved says %ju (limit %ju)",
                    (uintmax_t)held, (uintmax_t)s->reserved, (uintmax_t)a->limit);
    if (a->granularity && t.reserved != s->va_reserved)
        return fail(why, n, "reservations span %ju B, va_reserved says %ju",
                    (uintmax_t)t.reserved, (uintmax_t)s->va_reserved);
    for (size_t i = 0; i < a->n_spare; i++)
        if (cham_phys_mapped_at(a->spare[i]))
            return fail(why, n, "spare chunk %zu is mapped", i);
    if (t.allocated != s->allocated || t.requested != s->requested)
        return fail(why, n, "blocks hold %ju B (%ju requested), stats say %ju (%ju)",
                    (uintmax_t)t.allocated, (uintmax_t)t.requested, (uintmax_t)s->allocated,
                    (uintmax_t)s->requested);
    if (t.pending != s->pending_free)
        return fail(why, n, "pending blocks hold %ju B, stats say %ju", (uintmax_t)t.pending,
                    (uintmax_t)s->pending_free);
    if (t.allocated + t.pending + t.free_bytes != t.reserved)
        return fail(why, n, "bytes not conserved");
    if (s->peak_allocated < s->allocated || s->peak_reserved < s->reserved)
        return fail(why, n, "a peak is below its current value");
    return check_deferred(a, &t, why, n);
}

void cham_alloc_debug_check(const cham_allocator_t *a)
{
#if CHAM_DEBUG_CHECKS
    char why[512];
    if (!cham_allocator_check(a, why, sizeof why)) {
        cham_output("allocator invariant broken: %s", why);
        CHAM_ASSERT(!"allocator invariant broken");
    }
#else
    (void)a;
#endif
}

void cham_allocator_walk(const cham_allocator_t *a,
                         void (*fn)(const cham_alloc_block_info_t *info, void *user),
                         void *user)
{
    CHAM_ASSERT(a && fn);
    for (const cham_segment_t *seg = a->segments; seg; seg = seg->next) {
        for (const cham_block_t *b = seg->first; b; b = b->next) {
            cham_alloc_block_info_t info = {
                .ptr = (uintptr_t)b->ptr,
                .size = b->size,
                .state = (cham_block_state_t)b->state,
                .stream_id = seg->stream_id,
                .small = seg->small,
                .segment = (uintptr_t)seg->ptr,
                .segment_size = seg->size,
            };
            fn(&info, user);
        }
    }
}

/* One reservation's free-granule index against its blocks and chunks;
 * adds its free granules to *count. */
static bool check_vm_segment(const cham_allocator_t *a, const cham_segment_t *seg,
                             size_t *count, char *why, size_t n)
{
    size_t g = a->granularity, granules = seg->size / g, leaves = seg->vm_leaves;
    const uint64_t *t = seg->vm_free;
    if (!t || leaves < granules || (leaves & (leaves - 1)))
        return fail(why, n, "segment %p: no index, or %zu leaves for %zu granules",
                    (void *)seg->ptr, leaves, granules);
    uint64_t *want = malloc(leaves * sizeof *want);
    if (!want)
        return true;              /* out of host memory: nothing to compare with */
    for (size_t i = 0; i < leaves; i++)
        want[i] = CHAM_VM_NOT_FREE;
    for (const cham_block_t *b = seg->first; b; b = b->next) {
        if (b->state != CHAM_BLOCK_FREE)
            continue;
        size_t at = (size_t)(b->ptr - seg->ptr);
        for (size_t i = (at + g - 1) / g; i < (at + b->size) / g; i++)
            if (seg->chunks[i])
                want[i] = seg->freed_at[i];
    }
    for (size_t i = 0; i < leaves; i++) {
        if (t[leaves + i] != want[i]) {
            uint64_t has = t[leaves + i], should = want[i];
            free(want);
            return fail(why, n, "segment %p granule %zu: index says %#jx, blocks %#jx",
                        (void *)seg->ptr, i, (uintmax_t)has, (uintmax_t)should);
        }
        *count += want[i] != CHAM_VM_NOT_FREE;
    }
    free(want);
    for (size_t k = 1; k < leaves; k++) {
        uint64_t m = t[2 * k] < t[2 * k + 1] ? t[2 * k] : t[2 * k + 1];
        if (t[k] != m)
            return fail(why, n, "segment %p: index node %zu is not its children's min",
                        (void *)seg->ptr, k);
    }
    return true;
}

bool cham_allocator_check_vm_index(const cham_allocator_t *a, char *why, size_t n)
{
    CHAM_ASSERT(a);
    if (!a->granularity)
        return true;
    size_t count = 0;
    for (const cham_segment_t *seg = a->segments; seg; seg = seg->next)
        if (!check_vm_segment(a, seg, &count, why, n))
            return false;
    if (count != a->n_vm_free)
        return fail(why, n, "%zu free granules, the count says %zu", count, a->n_vm_free);
    return true;
}
