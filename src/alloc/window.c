/* Finding where moving a few blocks away would make room for a request
 * that failed for fragmentation (alloc.h): inside one segment
 * (cham_allocator_find_window), or by emptying whole segments so that they
 * go back to the device and a new one fits (cham_allocator_find_segments). */
#include "alloc/alloc-impl.h"
#include "common/assert.h"

typedef bool (*can_move_fn)(const cham_block_t *block, void *user);

static bool usable(const cham_block_t *b, can_move_fn can_move, void *user)
{
    return b->state == CHAM_BLOCK_FREE ||
           (b->state == CHAM_BLOCK_ALLOCATED && can_move(b, user));
}

static size_t moved_bytes(const cham_block_t *b)
{
    return b->state == CHAM_BLOCK_ALLOCATED ? b->size : 0;
}

long cham_allocator_find_window(const cham_allocator_t *a, size_t bytes, cham_stream_t *stream,
                                can_move_fn can_move, void *user, cham_block_t **out,
                                size_t max)
{
    CHAM_ASSERT(a && stream && can_move && (out || max == 0));
    size_t rounded = cham_alloc_round_size(bytes);
    /* Expandable segments strand no memory between blocks: any block moved
     * away frees its granules, so there is no window to find. */
    if (rounded == 0 || a->granularity)
        return -1;
    bool small = rounded <= cham_alloc_small_size(a->shift);
    cham_block_t *best_lo = NULL, *best_hi = NULL;
    size_t best_cost = SIZE_MAX;
    for (const cham_segment_t *seg = a->segments; seg; seg = seg->next) {
        if (seg->small != small || seg->stream != stream || seg->size < rounded)
            continue;
        /* Two pointers over the blocks in address order: [lo, hi] is the
         * shortest run ending at hi that still holds rounded bytes. */
        cham_block_t *lo = seg->first;
        size_t sum = 0, cost = 0;
        for (cham_block_t *hi = seg->first; hi; hi = hi->next) {
            if (!usable(hi, can_move, user)) {
                lo = hi->next;
                sum = cost = 0;
                continue;
            }
            sum += hi->size;
            cost += moved_bytes(hi);
            while (sum - lo->size >= rounded) {
                sum -= lo->size;
                cost -= moved_bytes(lo);
                lo = lo->next;
            }
            if (sum >= rounded && cost < best_cost) {
                best_lo = lo, best_hi = hi;
                best_cost = cost;
            }
        }
    }
    if (!best_lo)
        return -1;
    long n = 0;
    for (cham_block_t *b = best_lo;; b = b->next) {
        if (b->state == CHAM_BLOCK_ALLOCATED) {
            if ((size_t)n < max)
                out[n] = b;
            n++;
        }
        if (b == best_hi)
            break;
    }
    return n;
}

/* The allocated bytes of seg if every block in it is free or movable, else
 * SIZE_MAX. */
static size_t evictable(const cham_segment_t *seg, can_move_fn can_move, void *user)
{
    size_t cost = 0;
    for (const cham_block_t *b = seg->first; b; b = b->next) {
        if (!usable(b, can_move, user))
            return SIZE_MAX;
        cost += moved_bytes(b);
    }
    return cost;
}

long cham_allocator_find_segments(const cham_allocator_t *a, size_t bytes,
                                  cham_stream_t *stream, can_move_fn can_move, void *user,
                                  cham_block_t **out, size_t max)
{
    CHAM_ASSERT(a && stream && can_move && (out || max == 0));
    size_t rounded = cham_alloc_round_size(bytes);
    if (rounded == 0 || a->granularity)     /* no segments to empty (see above) */
        return -1;
    size_t need = cham_alloc_segment_size_at(a->shift, rounded);
    uint64_t room = a->limit - a->stats.reserved;
    /* Greedy: the emptiest evictable segments first (fewest allocated bytes
     * per byte of segment), until the room they leave holds a new segment. */
    long n = 0;
    const cham_segment_t *taken[64];
    size_t n_taken = 0;
    while (room < need && n_taken < sizeof taken / sizeof taken[0]) {
        const cham_segment_t *best = NULL;
        double best_ratio = 0;
        for (const cham_segment_t *seg = a->segments; seg; seg = seg->next) {
            bool used = false;
            for (size_t i = 0; i < n_taken && !used; i++)
                used = taken[i] == seg;
            size_t cost = used ? SIZE_MAX : evictable(seg, can_move, user);
            if (cost == SIZE_MAX)
                continue;
            double ratio = (double)cost / (double)seg->size;
            if (!best || ratio < best_ratio)
                best = seg, best_ratio = ratio;
        }
        if (!best)
            return -1;
        taken[n_taken++] = best;
        room += best->size;
    }
    if (room < need)
        return -1;
    for (size_t i = 0; i < n_taken; i++)
        for (cham_block_t *b = taken[i]->first; b; b = b->next)
            if (b->state == CHAM_BLOCK_ALLOCATED) {
                if ((size_t)n < max)
                    out[n] = b;
                n++;
            }
    return n;
}
