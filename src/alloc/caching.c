/* The caching allocator's core: segments obtained from the device and kept,
 * blocks carved from them by best fit with split, merged with free
 * neighbours when they come back, two pools with PyTorch's rounding rules,
 * and the out-of-memory fallback chain. Deferred frees: deferred.c;
 * statistics and the OOM report: stats.c; the checker: check.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc/alloc-impl.h"
#include "chameleon/backend.h"
#include "common/assert.h"
#include "common/grow.h"

/* ---- rounding rules -------------------------------------------------------*/

static size_t round_up(size_t n, size_t to)
{
    return (n + to - 1) / to * to;
}

size_t cham_alloc_round_size(size_t bytes)
{
    /* Refuse sizes so large that a later rounding to 2 MiB would overflow. */
    if (bytes > SIZE_MAX - CHAM_ALLOC_LARGE_SEGMENT)
        return 0;
    if (bytes < CHAM_ALLOC_MIN_BLOCK)
        return CHAM_ALLOC_MIN_BLOCK;
    return round_up(bytes, CHAM_ALLOC_MIN_BLOCK);
}

size_t cham_alloc_segment_size_at(unsigned shift, size_t rounded)
{
    if (rounded <= cham_alloc_small_size(shift))
        return CHAM_ALLOC_SMALL_SEGMENT >> shift;
    if (rounded < CHAM_ALLOC_MIN_LARGE >> shift)
        return CHAM_ALLOC_LARGE_SEGMENT >> shift;
    return round_up(rounded, CHAM_ALLOC_ROUND_LARGE >> shift);
}

bool cham_alloc_should_split_at(unsigned shift, bool small, size_t size, size_t rounded)
{
    CHAM_ASSERT(size >= rounded);
    size_t remaining = size - rounded;
    return small ? remaining >= CHAM_ALLOC_MIN_BLOCK : remaining > cham_alloc_small_size(shift);
}

size_t cham_alloc_segment_size(size_t rounded)
{
    return cham_alloc_segment_size_at(0, rounded);
}

bool cham_alloc_should_split(bool small, size_t size, size_t rounded)
{
    return cham_alloc_should_split_at(0, small, size, rounded);
}

/* ---- spare structs ----------------------------------------------------------*/

_Static_assert(sizeof(void *) != 8 || sizeof(cham_block_t) == 128,
               "a block should be two cache lines, the tree's half in the first");

static void *slab_new(cham_allocator_t *a, size_t bytes)
{
    void **slabs = cham_grow(a->slabs, &a->cap_slabs, a->n_slabs + 1, sizeof *slabs, 16);
    if (!slabs)
        return NULL;
    a->slabs = slabs;
    /* Cache-line aligned, so that each block's hot half is one line. */
    bytes = round_up(bytes, 64);
    void *slab = aligned_alloc(64, bytes);
    if (slab) {
        memset(slab, 0, bytes);
        a->slabs[a->n_slabs++] = slab;
    }
    return slab;
}

cham_block_t *cham_alloc_get_block(cham_allocator_t *a)
{
    if (!a->spare_blocks) {
        cham_block_t *slab = slab_new(a, CHAM_ALLOC_SLAB * sizeof *slab);
        if (!slab)
            return NULL;
        for (size_t i = 0; i < CHAM_ALLOC_SLAB; i++) {
            slab[i].state = CHAM_BLOCK_UNUSED;
            slab[i].next = i + 1 < CHAM_ALLOC_SLAB ? &slab[i + 1] : NULL;
        }
        a->spare_blocks = slab;
    }
    cham_block_t *b = a->spare_blocks;
    a->spare_blocks = b->next;
    memset(b, 0, sizeof *b);
    return b;
}

void cham_alloc_put_block(cham_allocator_t *a, cham_block_t *b)
{
    b->state = CHAM_BLOCK_UNUSED;
    b->seg = NULL;
    b->prev = NULL;
    b->next = a->spare_blocks;
    a->spare_blocks = b;
}

cham_deferred_t *cham_alloc_get_deferred(cham_allocator_t *a)
{
    if (!a->spare_deferred) {
        cham_deferred_t *slab = slab_new(a, CHAM_ALLOC_SLAB * sizeof *slab);
        if (!slab)
            return NULL;
        for (size_t i = 0; i < CHAM_ALLOC_SLAB; i++)
            slab[i].next_in_queue = i + 1 < CHAM_ALLOC_SLAB ? &slab[i + 1] : NULL;
        a->spare_deferred = slab;
    }
    cham_deferred_t *d = a->spare_deferred;
    a->spare_deferred = d->next_in_queue;
    memset(d, 0, sizeof *d);
    return d;
}

void cham_alloc_put_deferred(cham_allocator_t *a, cham_deferred_t *d)
{
    d->event = NULL;
    d->block = NULL;
    d->next_in_queue = a->spare_deferred;
    a->spare_deferred = d;
}

int cham_alloc_note_stream(cham_allocator_t *a, cham_stream_t *stream)
{
    CHAM_ASSERT(cham_stream_device(stream) == a->dev &&
                "stream belongs to another device than the allocator");
    int id = cham_stream_id(stream);
    CHAM_ASSERT(id >= 0 && id < CHAM_ALLOC_MAX_STREAMS);
    a->streams[id] = stream;
    return id;
}

/* ---- pools -------------------------------------------------------------------*/

static inline cham_block_tree_t *pool_of(cham_allocator_t *a, const cham_segment_t *seg)
{
    return seg->small ? &a->small : &a->large;
}

static inline void pool_insert(cham_allocator_t *a, cham_block_t *b)
{
    b->node.stream = b->seg->stream_id;
    b->node.size = b->size;
    b->node.addr = (uintptr_t)b->ptr;
    cham_block_tree_insert(pool_of(a, b->seg), &b->node);
}

static inline cham_block_t *block_of(cham_block_tree_node_t *n)
{
    /* node is the first member of struct cham_block. */
    return (cham_block_t *)(void *)n;
}

/* ---- idle segments --------------------------------------------------------*/

static void idle_add(cham_allocator_t *a, cham_segment_t *seg)
{
    seg->idle_prev = NULL;
    seg->idle_next = a->idle;
    if (a->idle)
        a->idle->idle_prev = seg;
    a->idle = seg;
    a->n_idle++;
    a->idle_bytes += seg->size;
}

void cham_alloc_idle_remove(cham_allocator_t *a, cham_segment_t *seg)
{
    CHAM_ASSERT(a->n_idle > 0 && a->idle_bytes >= seg->size);
    if (seg->idle_prev)
        seg->idle_prev->idle_next = seg->idle_next;
    else
        a->idle = seg->idle_next;
    if (seg->idle_next)
        seg->idle_next->idle_prev = seg->idle_prev;
    seg->idle_prev = seg->idle_next = NULL;
    a->n_idle--;
    a->idle_bytes -= seg->size;
}

/* Merges two idle lists sorted newest first (by idle_next only). */
static cham_segment_t *idle_merge(cham_segment_t *x, cham_segment_t *y)
{
    cham_segment_t head = {0}, *tail = &head;
    while (x && y) {
        cham_segment_t **from = x->seq > y->seq ? &x : &y;
        tail->idle_next = *from;
        tail = *from;
        *from = (*from)->idle_next;
    }
    tail->idle_next = x ? x : y;
    return head.idle_next;
}

/* Sorts an idle list newest first by merge sort (by idle_next only): no
 * host memory, so the OOM path cannot fail for it. */
static cham_segment_t *idle_sort(cham_segment_t *list)
{
    if (!list || !list->idle_next)
        return list;
    cham_segment_t *slow = list, *fast = list->idle_next;
    while (fast && fast->idle_next) {
        slow = slow->idle_next;
        fast = fast->idle_next->idle_next;
    }
    cham_segment_t *second = slow->idle_next;
    slow->idle_next = NULL;
    return idle_merge(idle_sort(list), idle_sort(second));
}

cham_segment_t *cham_alloc_idle_newest_first(cham_allocator_t *a)
{
    a->idle = idle_sort(a->idle);
    cham_segment_t *prev = NULL;
    for (cham_segment_t *seg = a->idle; seg; prev = seg, seg = seg->idle_next)
        seg->idle_prev = prev;
    return a->idle;
}

/* Takes free block n out of its pool tree: its segment is no longer idle
 * if n was all of it. */
static cham_block_t *pool_take(cham_allocator_t *a, cham_block_tree_t *tree,
                               cham_block_tree_node_t *n)
{
    cham_block_tree_remove(tree, n);
    cham_block_t *b = block_of(n);
    if (!b->prev && !b->next)
        cham_alloc_idle_remove(a, b->seg);
    return b;
}

/* Best fit: the smallest free block of stream sid with >= rounded bytes,
 * lowest address first; taken out of its pool. */
static cham_block_t *take_best_fit(cham_allocator_t *a, bool small, int sid, size_t rounded)
{
    cham_block_tree_t *tree = small ? &a->small : &a->large;
    cham_block_tree_node_t *n = cham_block_tree_lower_bound(tree, sid, rounded, 0);
    if (!n || n->stream != sid)
        return NULL;
    return pool_take(a, tree, n);
}

void cham_alloc_release_block(cham_allocator_t *a, cham_block_t *b)
{
    CHAM_ASSERT(b->state != CHAM_BLOCK_FREE && b->state != CHAM_BLOCK_UNUSED);
    CHAM_ASSERT(!b->events);
    b->state = CHAM_BLOCK_FREE;
    b->recorded = 0;
    b->requested = 0;
    const char *freed_lo = b->ptr, *freed_hi = b->ptr + b->size;
    if (a->granularity)
        cham_alloc_vm_note_free(a, b);
    cham_block_tree_t *tree = pool_of(a, b->seg);
    cham_block_t *prev = b->prev;
    if (prev && prev->state == CHAM_BLOCK_FREE) {
        cham_block_tree_remove(tree, &prev->node);
        prev->size += b->size;
        prev->next = b->next;
        if (b->next)
            b->next->prev = prev;
        cham_alloc_put_block(a, b);
        b = prev;
        a->stats.n_merges++;
    }
    cham_block_t *next = b->next;
    if (next && next->state == CHAM_BLOCK_FREE) {
        cham_block_tree_remove(tree, &next->node);
        b->size += next->size;
        b->next = next->next;
        if (next->next)
            next->next->prev = b;
        cham_alloc_put_block(a, next);
        a->stats.n_merges++;
    }
    pool_insert(a, b);
    if (!b->prev && !b->next)
        idle_add(a, b->seg);
    /* Only granules over the freed bytes change: the others were already
     * wholly inside the merged neighbours, or still straddle a block in use. */
    if (a->granularity)
        cham_alloc_vm_index(a, b, freed_lo, freed_hi);
}

/* ---- segments -----------------------------------------------------------------*/

/* Obtains a segment for a rounded request of stream and returns its one
 * block (not in any pool). On failure returns the status and, if the device
 * refused, its message in dev_err. */
static cham_status_t segment_new(cham_allocator_t *a, cham_stream_t *stream, int sid,
                                 size_t rounded, bool small, cham_block_t **out,
                                 char *dev_err, size_t dev_err_size)
{
    *out = NULL;
    uint64_t room = a->limit - a->stats.reserved;
    size_t size = cham_alloc_segment_size_at(a->shift, rounded);
    if (size > room && !small) {
        /* Near the limit a shared 20 MiB segment may not fit where one just
         * big enough would: fall back to the request rounded to 2 MiB. */
        size = round_up(rounded, CHAM_ALLOC_ROUND_LARGE >> a->shift);
    }
    if (size > room)
        return CHAM_ERR_OUT_OF_MEMORY;

    cham_block_t *b = cham_alloc_get_block(a);
    cham_segment_t *seg = calloc(1, sizeof *seg);
    if (!b || !seg) {
        if (b)
            cham_alloc_put_block(a, b);
        free(seg);
        snprintf(dev_err, dev_err_size, "out of host memory for the allocator's bookkeeping");
        return CHAM_ERR_HOST_OOM;
    }
    void *ptr = NULL;
    cham_status_t st = a->kind == CHAM_MEM_DEVICE ? cham_device_mem_alloc(a->dev, size, &ptr)
                                                  : cham_device_host_alloc(a->dev, size, &ptr);
    if (st != CHAM_OK) {
        cham_alloc_put_block(a, b);
        free(seg);
        snprintf(dev_err, dev_err_size, "the device refused a segment of %zu bytes: %s (%s)",
                 size, cham_status_string(st), cham_device_last_error(a->dev));
        return st;
    }
    cham_alloc_segment_link(a, seg, b, ptr, size, stream, sid, small);
    a->stats.reserved += size;
    a->stats.n_segment_allocs++;
    cham_alloc_bump_peaks(a);
    *out = b;
    return CHAM_OK;
}

void cham_alloc_segment_link(cham_allocator_t *a, cham_segment_t *seg, cham_block_t *b,
                             char *ptr, size_t size, cham_stream_t *stream, int sid, bool small)
{
    seg->ptr = ptr;
    seg->size = size;
    seg->stream = stream;
    seg->stream_id = sid;
    seg->small = small;
    seg->first = b;
    seg->seq = a->segment_seq++;
    seg->idle_prev = seg->idle_next = NULL;
    seg->prev = NULL;
    seg->next = a->segments;
    if (a->segments)
        a->segments->prev = seg;
    a->segments = seg;
    b->ptr = ptr;
    b->size = size;
    b->seg = seg;
    b->state = CHAM_BLOCK_ALLOCATED;
}

void cham_alloc_segment_unlink(cham_allocator_t *a, cham_segment_t *seg)
{
    if (seg->prev)
        seg->prev->next = seg->next;
    else
        a->segments = seg->next;
    if (seg->next)
        seg->next->prev = seg->prev;
}

static void segment_free(cham_allocator_t *a, cham_segment_t *seg)
{
    if (a->kind == CHAM_MEM_DEVICE)
        cham_device_mem_free(a->dev, seg->ptr);
    else
        cham_device_host_free(a->dev, seg->ptr);
    cham_alloc_segment_unlink(a, seg);
    a->stats.reserved -= seg->size;
    a->stats.n_segment_frees++;
    free(seg);
}

/* Returns every wholly free segment to the device (expandable: every
 * granule of a free block); returns the bytes. The idle list, not every
 * segment: the OOM path calls this after each failed allocation. Newest
 * first, the order of the segment list, so the device sees the frees in
 * the order a walk of every segment gave them. */
static uint64_t release_free_segments(cham_allocator_t *a)
{
    if (a->granularity)
        return cham_alloc_vm_release_free(a);
    uint64_t bytes = 0;
    cham_segment_t *seg = a->n_idle ? cham_alloc_idle_newest_first(a) : NULL;
    while (seg) {
        cham_segment_t *next = seg->idle_next;
        cham_block_t *b = seg->first;
        CHAM_ASSERT(b->state == CHAM_BLOCK_FREE && !b->next);
        cham_alloc_idle_remove(a, seg);
        cham_block_tree_remove(pool_of(a, seg), &b->node);
        cham_alloc_put_block(a, b);
        bytes += seg->size;
        segment_free(a, seg);
        seg = next;
    }
    return bytes;
}

/* ---- the allocator ---------------------------------------------------------------*/

cham_status_t cham_allocator_new(cham_device_t *dev, const cham_allocator_config_t *config,
                                 cham_allocator_t **out)
{
    CHAM_ASSERT(dev && config && out);
    *out = NULL;
    if (config->kind != CHAM_MEM_DEVICE && config->kind != CHAM_MEM_HOST_PINNED) {
        cham_device_set_error(dev, "allocator: memory kind %d is neither device nor "
                              "pinned host", (int)config->kind);
        return CHAM_ERR_INVALID_ARG;
    }
    if (config->granularity_shift > CHAM_ALLOC_MAX_SHIFT) {
        cham_device_set_error(dev, "allocator: granularity_shift %u is above %d",
                              config->granularity_shift, CHAM_ALLOC_MAX_SHIFT);
        return CHAM_ERR_INVALID_ARG;
    }
    uint64_t limit = config->limit;
    if (config->kind == CHAM_MEM_HOST_PINNED && limit == 0) {
        cham_device_set_error(dev, "allocator: a pinned host allocator needs a limit "
                              "(the pinned budget in bytes)");
        return CHAM_ERR_INVALID_ARG;
    }
    if (limit == 0) {
        cham_device_info_t info;
        cham_device_get_info(dev, &info);
        limit = info.capacity ? info.capacity : UINT64_MAX;
    }
    size_t g = config->expandable ? cham_vm_granularity(dev) : 0;
    if (config->expandable && (config->kind != CHAM_MEM_DEVICE || !g)) {
        cham_device_set_error(dev, "allocator: expandable segments need device memory on a "
                              "device with virtual memory (%s)", config->kind != CHAM_MEM_DEVICE
                              ? "this is pinned host memory" : "this device has none");
        return CHAM_ERR_INVALID_ARG;
    }
    cham_allocator_t *a = calloc(1, sizeof *a);
    if (!a) {
        cham_device_set_error(dev, "allocator: out of host memory");
        return CHAM_ERR_HOST_OOM;
    }
    /* Expandable segments move memory in pages of PyTorch's large-segment
     * size (20 MiB, scaled by the shift), but at most 1/4096 of the limit
     * (free memory inside pages a block still touches cannot move: the
     * planner's reserve must cover it, so smaller devices keep finer
     * pages), in whole device granules: a page is one chunk and one map
     * call, and moving 2 MiB granules cost ten times the calls
     * (docs/allocator.md, "Pages"). */
    if (g) {
        uint64_t page = CHAM_ALLOC_LARGE_SEGMENT >> config->granularity_shift;
        page = page < limit / 4096 ? page : limit / 4096;
        g = page > g ? (size_t)(page / g * g) : g;
    }
    a->granularity = g;
    a->dev = dev;
    a->kind = config->kind;
    a->limit = limit;
    a->shift = config->granularity_shift;
    a->stats.limit = limit;
    cham_block_tree_init(&a->small);
    cham_block_tree_init(&a->large);
    *out = a;
    return CHAM_OK;
}

void cham_allocator_free(cham_allocator_t *a)
{
    if (!a)
        return;
    cham_alloc_drain_deferred(a);
    CHAM_ASSERT(a->stats.allocated == 0 &&
                "cham_allocator_free with blocks still allocated");
    release_free_segments(a);
    CHAM_ASSERT(!a->segments);
    free(a->spare);
    for (size_t i = 0; i < a->n_slabs; i++)
        free(a->slabs[i]);
    free(a->slabs);
    free(a->events);
    free(a->heap);
    cham_alloc_vm_free_checkpoints(a);
    free(a);
}

/* Splits what the block holds beyond rounded off as a free block, when the
 * rules say so; without a spare struct the whole block is handed out. */
static void split(cham_allocator_t *a, cham_block_t *b, size_t rounded)
{
    if (!cham_alloc_should_split_at(a->shift, b->seg->small, b->size, rounded))
        return;
    cham_block_t *rest = cham_alloc_get_block(a);
    if (!rest)
        return;
    rest->ptr = b->ptr + rounded;
    rest->size = b->size - rounded;
    rest->seg = b->seg;
    rest->prev = b;
    rest->next = b->next;
    if (b->next)
        b->next->prev = rest;
    b->next = rest;
    b->size = rounded;
    rest->state = CHAM_BLOCK_FREE;
    pool_insert(a, rest);
    a->stats.n_splits++;
}

/* Expandable segments: among the smallest free blocks that hold rounded
 * (up to this many), the one where rounded bytes need the fewest granules
 * mapped, the smallest on a tie; *offset says where in it (0, or far
 * enough in that the part before is a block of its own). Plain best fit
 * ignores where memory is mapped, and then the blocks of a step wander
 * over more addresses than the limit can back: granules follow them
 * around, a map and an unmap each, step after step (measured: 15,000 of
 * each per step of Llama 2 7B on an 88 GiB H100 that needs no swap at
 * all). A block's start alone misses the mapped granules a free block
 * holds further in, where a block freed next to a larger free region
 * left them (docs/allocator.md, "Pages"). */
#define FIT_CANDIDATES 8

static cham_block_t *take_mapped_fit(cham_allocator_t *a, bool small, int sid, size_t rounded,
                                     size_t *offset)
{
    cham_block_tree_t *tree = small ? &a->small : &a->large;
    cham_block_tree_node_t *best = NULL;
    size_t best_missing = SIZE_MAX;
    /* The part before the offset is split off as a free block: as large as
     * a split's remainder must be. */
    size_t min_front = small ? CHAM_ALLOC_MIN_BLOCK : cham_alloc_small_size(a->shift) + 1;
    cham_block_tree_node_t *n = cham_block_tree_lower_bound(tree, sid, rounded, 0);
    for (int k = 0; n && n->stream == sid && k < FIT_CANDIDATES; k++, n = cham_block_tree_next(n)) {
        size_t missing;
        size_t off = cham_alloc_vm_mapped_offset(a, block_of(n), rounded, min_front, &missing);
        if (missing < best_missing) {
            best = n;
            best_missing = missing;
            *offset = off;
            if (missing == 0)
                break;
        }
    }
    if (!best)
        return NULL;
    return pool_take(a, tree, best);
}

/* Splits the first `offset` bytes off taken block b as a free block of
 * their own; without a spare struct b stays whole, from its start. */
static void split_front(cham_allocator_t *a, cham_block_t *b, size_t offset)
{
    cham_block_t *front = offset ? cham_alloc_get_block(a) : NULL;
    if (!front)
        return;
    front->ptr = b->ptr;
    front->size = offset;
    front->seg = b->seg;
    front->prev = b->prev;
    front->next = b;
    if (b->prev)
        b->prev->next = front;
    else
        b->seg->first = front;
    b->prev = front;
    b->ptr += offset;
    b->size -= offset;
    front->state = CHAM_BLOCK_FREE;
    pool_insert(a, front);
    a->stats.n_splits++;
}

/* Expandable segments: the best free block (or a new reservation), split,
 * with physical memory mapped under it. When that fails for memory, it
 * frees what it can, whose granules can then move, and tries again: first
 * the completed recordStream frees, then free-after-op blocks one at a
 * time, the earliest op's first, until the request fits. Each block given
 * back early has its stream wait for its copy: all of them given back,
 * the compute stream waited for the last copy queued where the request
 * needed the first (docs/allocator.md, "Out of memory"). Classic segments
 * still give back all: there, fewer leave free memory stranded in their
 * pages. */
static cham_status_t take_expandable(cham_allocator_t *a, cham_stream_t *stream, int sid,
                                     size_t rounded, bool small, cham_block_t **out,
                                     char *dev_err, size_t dev_err_size)
{
    for (int attempt = 0;; attempt++) {
        size_t offset = 0;
        cham_block_t *b = take_mapped_fit(a, small, sid, rounded, &offset);
        cham_status_t st = CHAM_OK;
        if (b) {
            b->state = CHAM_BLOCK_ALLOCATED;       /* not free while it is backed */
            split_front(a, b, offset);
        } else if ((st = cham_alloc_vm_segment_new(a, stream, sid, rounded, small, &b, dev_err,
                                                   dev_err_size)) != CHAM_OK) {
            return st;
        }
        b->seg->stream = stream;
        split(a, b, rounded);
        /* Its granules are not free any more (those of the parts split off
         * still are), before backing it looks for free ones. */
        cham_alloc_vm_index(a, b, b->ptr, b->ptr + b->size);
        dev_err[0] = '\0';
        if ((st = cham_alloc_vm_back(a, b, dev_err, dev_err_size)) == CHAM_OK) {
            *out = b;
            return CHAM_OK;
        }
        cham_alloc_release_block(a, b);
        if (st != CHAM_ERR_OUT_OF_MEMORY)
            return st;
        if (attempt == 0 && a->queue_mask)
            cham_alloc_process_events(a);
        else if (!cham_alloc_release_first_op_block(a))
            return st;
    }
}

/* Free block b, taken from its pool, becomes an allocation of bytes
 * (rounded up to rounded). */
static void hand_out(cham_allocator_t *a, cham_block_t *b, size_t bytes, size_t rounded,
                     cham_stream_t *stream)
{
    /* The segment serves whichever live stream now has its id. */
    b->seg->stream = stream;
    split(a, b, rounded);
    b->state = CHAM_BLOCK_ALLOCATED;
    b->u.owner = NULL;
    b->requested = bytes;
    b->recorded = 0;
    a->stats.allocated += b->size;
    a->stats.requested += bytes;
    a->stats.n_allocs++;
    cham_alloc_bump_peaks(a);
    cham_alloc_debug_check(a);
}

cham_status_t cham_block_alloc(cham_allocator_t *a, size_t bytes, cham_stream_t *stream,
                               cham_block_t **out)
{
    CHAM_ASSERT(a && stream && out);
    *out = NULL;
    int sid = cham_alloc_note_stream(a, stream);
    if (bytes == 0) {
        cham_alloc_set_error(a, "allocation of 0 bytes on stream \"%s\"",
                             cham_stream_name(stream));
        return CHAM_ERR_INVALID_ARG;
    }
    if (a->queue_mask)
        cham_alloc_process_events(a);

    size_t rounded = cham_alloc_round_size(bytes);
    bool small = rounded <= cham_alloc_small_size(a->shift);
    cham_block_t *b = NULL;
    cham_status_t st = CHAM_ERR_OUT_OF_MEMORY;
    char dev_err[256] = "";
    if (rounded && a->granularity) {
        st = take_expandable(a, stream, sid, rounded, small, &b, dev_err, sizeof dev_err);
    } else if (rounded) {
        b = take_best_fit(a, small, sid, rounded);
        if (!b)
            st = segment_new(a, stream, sid, rounded, small, &b, dev_err, sizeof dev_err);
        if (!b && st != CHAM_ERR_HOST_OOM) {
            /* The fallback chain: release free-after-op blocks now (each
             * behind a stream wait), take completed recordStream frees,
             * retry; then return wholly free segments and retry. */
            cham_alloc_release_all_op_blocks(a);
            if (a->queue_mask)
                cham_alloc_process_events(a);
            b = take_best_fit(a, small, sid, rounded);
            if (!b && release_free_segments(a) > 0) {
                dev_err[0] = '\0';
                st = segment_new(a, stream, sid, rounded, small, &b, dev_err, sizeof dev_err);
            }
        }
    }
    if (!b) {
        if (st == CHAM_ERR_OUT_OF_MEMORY || st == CHAM_ERR_HOST_BUDGET)
            st = a->kind == CHAM_MEM_DEVICE ? CHAM_ERR_OUT_OF_MEMORY : CHAM_ERR_HOST_BUDGET;
        a->stats.n_oom++;
        cham_alloc_record_oom(a, bytes, rounded, stream, st, dev_err);
        cham_alloc_debug_check(a);
        return st;
    }
    hand_out(a, b, bytes, rounded, stream);
    *out = b;
    return CHAM_OK;
}

cham_status_t cham_block_alloc_cached(cham_allocator_t *a, size_t bytes, cham_stream_t *stream,
                                      cham_block_t **out)
{
    CHAM_ASSERT(a && stream && out);
    *out = NULL;
    if (bytes == 0 || a->granularity) {
        cham_alloc_set_error(a, "cached allocation of %zu bytes on stream \"%s\": %s", bytes,
                             cham_stream_name(stream),
                             bytes ? "not on an expandable allocator" : "no bytes");
        return CHAM_ERR_INVALID_ARG;
    }
    int sid = cham_alloc_note_stream(a, stream);
    if (a->queue_mask)
        cham_alloc_process_events(a);
    size_t rounded = cham_alloc_round_size(bytes);
    bool small = rounded <= cham_alloc_small_size(a->shift);
    cham_block_t *b = take_best_fit(a, small, sid, rounded);
    if (!b) {
        cham_alloc_set_error(a, "no cached free block holds %zu bytes on stream \"%s\"", bytes,
                             cham_stream_name(stream));
        return a->kind == CHAM_MEM_DEVICE ? CHAM_ERR_OUT_OF_MEMORY : CHAM_ERR_HOST_BUDGET;
    }
    hand_out(a, b, bytes, rounded, stream);
    *out = b;
    return CHAM_OK;
}

cham_status_t cham_allocator_empty_cache(cham_allocator_t *a)
{
    CHAM_ASSERT(a);
    if (a->queue_mask)
        cham_alloc_process_events(a);
    release_free_segments(a);
    cham_alloc_debug_check(a);
    return CHAM_OK;
}

void *cham_block_ptr(const cham_block_t *b)
{
    CHAM_ASSERT(b && b->state == CHAM_BLOCK_ALLOCATED);
    return b->ptr;
}

size_t cham_block_size(const cham_block_t *b)
{
    CHAM_ASSERT(b && b->state == CHAM_BLOCK_ALLOCATED);
    return b->size;
}

size_t cham_block_requested(const cham_block_t *b)
{
    CHAM_ASSERT(b && b->state == CHAM_BLOCK_ALLOCATED);
    return b->requested;
}

void cham_block_set_owner(cham_block_t *b, void *owner)
{
    CHAM_ASSERT(b && b->state == CHAM_BLOCK_ALLOCATED);
    b->u.owner = owner;
}

void *cham_block_owner(const cham_block_t *b)
{
    CHAM_ASSERT(b && b->state == CHAM_BLOCK_ALLOCATED);
    return b->u.owner;
}

cham_stream_t *cham_block_stream(const cham_block_t *b)
{
    CHAM_ASSERT(b && b->state == CHAM_BLOCK_ALLOCATED);
    return b->seg->stream;
}
