/* Expandable segments (docs/allocator.md, "Expandable segments"): in this
 * mode a segment is a large reservation of device addresses, one per stream
 * and pool, carved into blocks as usual, with physical memory mapped only
 * under the granules that blocks in use cover. A request that needs more
 * physical memory than the limit leaves takes it from granules that lie
 * wholly inside free blocks anywhere: they are unmapped, after the device
 * has finished with them, and mapped where the request goes. Physical memory
 * is therefore never stranded between blocks, which is what fragments a
 * classic caching allocator; what remains is the part of a granule a block
 * does not fill.
 *
 * One chunk per granule, so that any granule can move alone. Chunks taken
 * away from a free block stay made ("spare") and are mapped again where
 * needed: an unmap and a map per moved granule, no cuMemCreate.
 *
 * Before a granule is unmapped, the work queued before its block was freed
 * must be done. An event recorded on each segment's stream every few ops
 * (checkpoints) says when: the granules freed longest ago go first, each
 * after the first checkpoint recorded after its free, so that the host
 * waits for old work, not for the whole stream (docs/allocator.md,
 * "Waiting for the frees, not the stream"). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc/alloc-impl.h"
#include "common/assert.h"
#include "common/grow.h"

/* Reservation per stream and pool: several times the limit, so that
 * addresses run out long after memory does (addresses cost nothing), but
 * at most 1 TiB (CUDA offers 256 TiB of addresses; an unlimited device's
 * allocator makes another reservation when one is full). */
#define VA_PER_LIMIT 4
#define VA_MAX ((uint64_t)1 << 40)

static size_t granule_of(const cham_segment_t *seg, const char *p, size_t g)
{
    return (size_t)(p - seg->ptr) / g;
}

cham_status_t cham_alloc_vm_segment_new(cham_allocator_t *a, cham_stream_t *stream, int sid,
                                        size_t rounded, bool small, cham_block_t **out,
                                        char *dev_err, size_t dev_err_size)
{
    *out = NULL;
    size_t g = a->granularity;
    /* Whole granules: a granule crossing the reservation's end could not
     * be mapped (1 TiB is not a multiple of 20 MiB). */
    uint64_t want = a->limit / VA_PER_LIMIT < VA_MAX / VA_PER_LIMIT
                        ? (a->limit + g - 1) / g * g * VA_PER_LIMIT : VA_MAX / g * g;
    size_t need = (rounded + g - 1) / g * g;
    size_t size = want > need ? (size_t)want : need;
    cham_block_t *b = cham_alloc_get_block(a);
    cham_segment_t *seg = calloc(1, sizeof *seg);
    cham_phys_t **chunks = calloc(size / g, sizeof *chunks);
    uint64_t *freed_at = calloc(size / g, sizeof *freed_at);
    size_t leaves = 1;
    while (leaves < size / g)
        leaves *= 2;
    uint64_t *index = malloc(2 * leaves * sizeof *index);
    void *va = NULL;
    cham_status_t st = b && seg && chunks && freed_at && index
                           ? cham_vm_reserve(a->dev, size, &va) : CHAM_ERR_HOST_OOM;
    if (st != CHAM_OK) {
        if (b)
            cham_alloc_put_block(a, b);
        free(seg);
        free(chunks);
        free(freed_at);
        free(index);
        snprintf(dev_err, dev_err_size, "%s", st == CHAM_ERR_HOST_OOM
                 ? "out of host memory for the allocator's bookkeeping"
                 : cham_device_last_error(a->dev));
        return st;
    }
    seg->chunks = chunks;
    seg->freed_at = freed_at;
    for (size_t k = 0; k < 2 * leaves; k++)    /* nothing mapped yet */
        index[k] = CHAM_VM_NOT_FREE;
    seg->vm_free = index;
    seg->vm_leaves = leaves;
    /* Taken: the caller splits and backs it. */
    cham_alloc_segment_link(a, seg, b, va, size, stream, sid, small);
    a->stats.va_reserved += size;
    a->stats.n_segment_allocs++;
    *out = b;
    return CHAM_OK;
}

/* Room in the spare list for one more chunk; false when the host has no
 * memory for it. */
static bool spare_room(cham_allocator_t *a)
{
    cham_phys_t **grown = cham_grow(a->spare, &a->cap_spare, a->n_spare + 1, sizeof *grown, 64);
    if (grown)
        a->spare = grown;
    return grown != NULL;
}

/* Records a checkpoint of tick `tick` on the segment's stream, over the
 * oldest when the ring is full. */
static void record_checkpoint(cham_allocator_t *a, const cham_segment_t *seg, uint64_t tick)
{
    cham_vm_checkpoints_t *c = a->checkpoints[seg->stream_id];
    if (!c && !(c = a->checkpoints[seg->stream_id] = calloc(1, sizeof *c)))
        return;                   /* out of host memory: reclaims wait for the stream */
    unsigned last = (c->head + c->n + CHAM_VM_CHECKPOINTS - 1) % CHAM_VM_CHECKPOINTS;
    if (c->n && c->tick[last] == tick)
        return;                   /* the stream's other pool recorded it */
    unsigned at = c->n < CHAM_VM_CHECKPOINTS ? (c->head + c->n) % CHAM_VM_CHECKPOINTS : c->head;
    if (!c->event[at] && cham_event_new(a->dev, &c->event[at]) != CHAM_OK) {
        c->event[at] = NULL;
        return;
    }
    if (cham_event_record(c->event[at], seg->stream) != CHAM_OK)
        return;
    c->tick[at] = tick;
    if (c->n < CHAM_VM_CHECKPOINTS)
        c->n++;
    else
        c->head = (c->head + 1) % CHAM_VM_CHECKPOINTS;
}

/* A free of a page or more records a checkpoint right behind it, the
 * first in each op on its stream: the next op's outputs often need its
 * pages (GPT-2's logit gradients, where its logits were), and without it
 * that reclaim waits for the whole stream, so that the device has nothing
 * queued while the host maps (docs/allocator.md, "Waiting for the frees,
 * not the stream"). Frees after it in the same op wait for a later
 * checkpoint. Without dispatched ops there are none (the ring is made by
 * the first). */
void cham_alloc_vm_note_free(cham_allocator_t *a, const cham_block_t *b)
{
    const cham_segment_t *seg = b->seg;
    size_t g = a->granularity;
    for (size_t i = granule_of(seg, b->ptr, g); i < granule_of(seg, b->ptr + b->size + g - 1, g);
         i++)
        seg->freed_at[i] = a->vm_tick;
    cham_vm_checkpoints_t *c = a->checkpoints[seg->stream_id];
    if (b->size >= g && c && c->free_op != a->op_counter + 1) {
        c->free_op = a->op_counter + 1;
        cham_alloc_vm_checkpoint_now(a, seg);
    }
}

void cham_alloc_vm_checkpoint(cham_allocator_t *a)
{
    if (a->op_counter - a->last_checkpoint < CHAM_VM_CHECKPOINT_OPS)
        return;
    a->last_checkpoint = a->op_counter;
    a->vm_tick++;
    for (cham_segment_t *seg = a->segments; seg; seg = seg->next)
        record_checkpoint(a, seg, a->vm_tick);
}

void cham_alloc_vm_checkpoint_now(cham_allocator_t *a, const cham_segment_t *seg)
{
    a->vm_tick++;
    record_checkpoint(a, seg, a->vm_tick);
}

void cham_alloc_vm_free_checkpoints(cham_allocator_t *a)
{
    for (int i = 0; i < CHAM_ALLOC_MAX_STREAMS; i++) {
        cham_vm_checkpoints_t *c = a->checkpoints[i];
        for (unsigned k = 0; c && k < CHAM_VM_CHECKPOINTS; k++)
            cham_event_free(c->event[k]);
        free(c);
        a->checkpoints[i] = NULL;
    }
    free(a->candidates);
    a->candidates = NULL;
    a->cap_candidates = 0;
}

/* The ring slot of the first checkpoint of stream id sid with a tick > t
 * (the ring is in tick order); CHAM_VM_CHECKPOINTS when there is none. */
static unsigned slot_after(const cham_allocator_t *a, int sid, uint64_t t)
{
    const cham_vm_checkpoints_t *c = a->checkpoints[sid];
    if (!c)
        return CHAM_VM_CHECKPOINTS;
    unsigned lo = 0, hi = c->n;
    while (lo < hi) {
        unsigned mid = (lo + hi) / 2;
        if (c->tick[(c->head + mid) % CHAM_VM_CHECKPOINTS] > t)
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo < c->n ? (c->head + lo) % CHAM_VM_CHECKPOINTS : CHAM_VM_CHECKPOINTS;
}

/* The tick of the first checkpoint of stream id sid recorded after tick t
 * (the work queued before t is over when that checkpoint's event is);
 * UINT64_MAX when none has been recorded since t. */
static uint64_t checkpoint_after(const cham_allocator_t *a, int sid, uint64_t t)
{
    unsigned at = slot_after(a, sid, t);
    return at < CHAM_VM_CHECKPOINTS ? a->checkpoints[sid]->tick[at] : UINT64_MAX;
}

/* The event of the segment's stream's checkpoint of tick `tick`; NULL if
 * none (UINT64_MAX, or gone from the ring). */
static cham_event_t *checkpoint_event(const cham_allocator_t *a, const cham_segment_t *seg,
                                      uint64_t tick)
{
    if (tick == UINT64_MAX || tick == 0)
        return NULL;
    unsigned at = slot_after(a, seg->stream_id, tick - 1);
    const cham_vm_checkpoints_t *c = a->checkpoints[seg->stream_id];
    return at < CHAM_VM_CHECKPOINTS && c->tick[at] == tick ? c->event[at] : NULL;
}

typedef cham_vm_candidate_t candidate_t;

/* ---- the free-granule index ------------------------------------------------*/

/* Sets leaf i to v and its ancestors to their children's min. */
static void index_put(cham_segment_t *seg, size_t i, uint64_t v)
{
    uint64_t *t = seg->vm_free;
    size_t k = seg->vm_leaves + i;
    t[k] = v;
    for (k /= 2; k; k /= 2) {
        uint64_t m = t[2 * k] < t[2 * k + 1] ? t[2 * k] : t[2 * k + 1];
        if (t[k] == m)
            break;                  /* the ancestors above are unchanged too */
        t[k] = m;
    }
}

/* index_put that keeps the count of free granules. */
static void index_set(cham_allocator_t *a, cham_segment_t *seg, size_t i, uint64_t v)
{
    uint64_t old = seg->vm_free[seg->vm_leaves + i];
    if (old == v)
        return;
    a->n_vm_free += (old == CHAM_VM_NOT_FREE) - (v == CHAM_VM_NOT_FREE);
    index_put(seg, i, v);
}

/* The first granule >= x whose leaf is below bound (CHAM_VM_NOT_FREE: any
 * free granule), or SIZE_MAX. O(log granules). */
static size_t index_first_below(const cham_segment_t *seg, size_t x, uint64_t bound)
{
    const uint64_t *t = seg->vm_free;
    size_t leaves = seg->vm_leaves;
    if (x >= leaves)
        return SIZE_MAX;
    /* Climb to the first subtree right of x holding a leaf below bound... */
    size_t k = leaves + x;
    while (t[k] >= bound) {
        while (k & 1)               /* a right child: its parent holds leaves left of x */
            k /= 2;
        if (k == 0)
            return SIZE_MAX;        /* climbed past the root */
        k++;                        /* the right sibling */
    }
    /* ... then down to its leftmost such leaf. */
    while (k < leaves) {
        k *= 2;
        if (t[k] >= bound)
            k++;
    }
    return k - leaves;
}

void cham_alloc_vm_index(cham_allocator_t *a, const cham_block_t *b, const char *lo,
                         const char *hi)
{
    cham_segment_t *seg = b->seg;
    size_t g = a->granularity;
    CHAM_ASSERT(lo >= b->ptr && hi <= b->ptr + b->size && lo < hi);
    /* Granules wholly inside b: [in_lo, in_hi); those overlapping [lo, hi)
     * but not wholly inside b straddle its ends, so no free block holds
     * them whole. */
    size_t in_lo = granule_of(seg, b->ptr + g - 1, g), in_hi = granule_of(seg, b->ptr + b->size, g);
    bool free_block = b->state == CHAM_BLOCK_FREE;
    for (size_t i = granule_of(seg, lo, g); i < granule_of(seg, hi + g - 1, g); i++) {
        bool is_free = free_block && i >= in_lo && i < in_hi && seg->chunks[i];
        index_set(a, seg, i, is_free ? seg->freed_at[i] : CHAM_VM_NOT_FREE);
    }
}

/* The segment whose next granule comes first in the reclaim's order
 * (earliest wait, then address), with that wait in *wait; NULL when no
 * granule is free. A segment's earliest wait is its least freed_at's:
 * checkpoint_after grows with the tick. */
static cham_segment_t *earliest_segment(const cham_allocator_t *a, uint64_t *wait)
{
    cham_segment_t *best = NULL;
    for (cham_segment_t *seg = a->segments; seg; seg = seg->next) {
        if (!seg->vm_free || seg->vm_free[1] == CHAM_VM_NOT_FREE)
            continue;
        uint64_t w = checkpoint_after(a, seg->stream_id, seg->vm_free[1]);
        if (!best || w < *wait || (w == *wait && seg->ptr < best->ptr)) {
            best = seg;
            *wait = w;
        }
    }
    return best;
}

/* The reclaim's order is (wait, segment address, granule), the order of
 * a sort of every free granule; this merges the segments' indexes, a
 * granule at a time: within a segment whose earliest wait is w, the
 * granules with that wait are those freed before tick w (every other is
 * freed at or after the checkpoint before w), the lowest first. Each one
 * taken is hidden from the index until the end, then put back: the
 * caller unmaps those it uses. */
size_t cham_alloc_vm_candidates(cham_allocator_t *a, size_t want)
{
    size_t n = 0;
    bool host_oom = false;
    uint64_t wait = 0;
    cham_segment_t *seg;
    while (n < want && (seg = earliest_segment(a, &wait)) != NULL) {
        size_t i = index_first_below(seg, 0, wait);
        CHAM_ASSERT(i != SIZE_MAX && seg->chunks[i]);
        candidate_t *v = cham_grow(a->candidates, &a->cap_candidates, n + 1, sizeof *v, 64);
        if (!v) {
            host_oom = true;
            break;
        }
        a->candidates = v;
        v[n++] = (candidate_t){seg, i, wait};
        index_put(seg, i, CHAM_VM_NOT_FREE);
    }
    for (size_t k = 0; k < n; k++) {
        const candidate_t *c = &a->candidates[k];
        index_put(c->seg, c->granule, c->seg->freed_at[c->granule]);
    }
    return host_oom ? SIZE_MAX : n;
}

/* How many of the granules wholly inside free blocks (a->candidates, the
 * earliest wait first) to take as spares so that `need` are spare: only
 * what the request needs, since every page moved costs the host a map and
 * an unmap (docs/allocator.md, "Pages"). Unmapping does not wait, and a
 * free block may still be read or written by work queued before it was
 * freed: on its segment's stream only, since a block other streams use is
 * not free until their events are done (record_stream) and one handed back
 * after an op has that stream wait for the copy (free_after_op). So a
 * granule goes once the first checkpoint of that stream recorded after its
 * free is complete, or, when none has been recorded since, the stream is;
 * not the device, whose copy queues may run far ahead of the compute
 * stream (docs/allocator.md, "Waiting for the frees, not the stream").
 * Which granules go depends on the frees, not on how far the device has
 * got. */
static size_t choose(cham_allocator_t *a, size_t need)
{
    if (a->n_spare >= need)
        return 0;
    size_t n = cham_alloc_vm_candidates(a, need - a->n_spare);
    if (n == SIZE_MAX)
        return 0;                   /* out of host memory: take nothing */
    return n;
}

/* How far a reclaim has waited: per stream, the last checkpoint known
 * complete (UINT64_MAX: the whole stream). */
typedef struct reclaim {
    uint64_t done[CHAM_ALLOC_MAX_STREAMS];
    bool counted;                   /* it waited: counted in n_vm_reclaims */
} reclaim_t;

/* Takes chosen candidate k's chunk after its wait, and those after it
 * that wait is then known to cover; returns the next candidate to take
 * (`to` when the host has no room for more spares). The waits come one
 * checkpoint at a time, so that the caller maps the chunks that are free
 * while the device still works towards the later ones. */
static size_t take_next(cham_allocator_t *a, size_t k, size_t to, reclaim_t *r)
{
    const candidate_t *c = &a->candidates[k];
    int sid = c->seg->stream_id;
    if (c->wait > r->done[sid]) {
        uint64_t reached = c->wait;
        cham_event_t *e = checkpoint_event(a, c->seg, c->wait);
        if (!e || cham_event_query(e) != CHAM_OK) {
            if (!e || cham_event_synchronize(e) != CHAM_OK) {
                cham_stream_synchronize(c->seg->stream);
                a->stats.n_vm_stream_syncs++;
                reached = UINT64_MAX;
            }
            a->stats.n_vm_reclaims += !r->counted;
            r->counted = true;
        }
        r->done[sid] = reached;
    }
    for (; k < to && a->candidates[k].wait <= r->done[a->candidates[k].seg->stream_id]; k++) {
        cham_segment_t *seg = a->candidates[k].seg;
        size_t i = a->candidates[k].granule;
        if (!spare_room(a))
            return to;              /* out of host memory: take no more */
        /* An unmap of a chunk the device layer knows mapped only fails on
         * a broken backend: then the chunk stays put. */
        if (cham_vm_unmap(seg->chunks[i]) != CHAM_OK)
            continue;
        a->spare[a->n_spare++] = seg->chunks[i];
        seg->chunks[i] = NULL;
        seg->n_mapped--;
        index_set(a, seg, i, CHAM_VM_NOT_FREE);
        a->stats.n_vm_unmaps++;
    }
    return k;
}

/* Takes candidates [k, to) as spares. */
static void take_all(cham_allocator_t *a, size_t k, size_t to, reclaim_t *r)
{
    while (k < to)
        k = take_next(a, k, to, r);
}

size_t cham_alloc_vm_missing(const cham_allocator_t *a, const cham_block_t *b, size_t bytes)
{
    const cham_segment_t *seg = b->seg;
    size_t g = a->granularity, missing = 0;
    for (size_t i = granule_of(seg, b->ptr, g); i < granule_of(seg, b->ptr + bytes + g - 1, g); i++)
        missing += !seg->chunks[i];
    return missing;
}

/* The mapped granules of [from, to) in address order, where every granule
 * of that range lies in free block b at or after its start: those wholly
 * inside b from the index, and the one b ends in part way, if mapped. */
typedef struct mapped_iter {
    const cham_segment_t *seg;
    size_t at;                      /* the current one; SIZE_MAX past the end */
    size_t to, tail;                /* tail: the granule b ends in part way, or SIZE_MAX */
} mapped_iter_t;

static void mapped_seek(mapped_iter_t *it, size_t from)
{
    size_t i = index_first_below(it->seg, from, CHAM_VM_NOT_FREE);
    if (it->tail != SIZE_MAX && it->tail >= from && it->tail < i)
        i = it->tail;
    it->at = i < it->to ? i : SIZE_MAX;
}

static mapped_iter_t mapped_iter(const cham_allocator_t *a, const cham_block_t *b, size_t from,
                                 size_t to)
{
    const cham_segment_t *seg = b->seg;
    size_t g = a->granularity, end = (size_t)(b->ptr + b->size - seg->ptr);
    mapped_iter_t it = {seg, SIZE_MAX, to, SIZE_MAX};
    if (end % g && seg->chunks[end / g])
        it.tail = end / g;
    mapped_seek(&it, from);
    return it;
}

static void mapped_next(mapped_iter_t *it)
{
    mapped_seek(it, it->at + 1);
}

size_t cham_alloc_vm_mapped_offset(const cham_allocator_t *a, const cham_block_t *b, size_t bytes,
                                   size_t min_front, size_t *missing)
{
    const cham_segment_t *seg = b->seg;
    size_t g = a->granularity, best_off = 0;
    *missing = cham_alloc_vm_missing(a, b, bytes);
    size_t at = (size_t)(b->ptr - seg->ptr);              /* the block's offset in seg */
    size_t first = (at + min_front + g - 1) / g, w = (bytes + g - 1) / g;
    CHAM_ASSERT(b->size >= bytes && b->state == CHAM_BLOCK_FREE);
    if (*missing == 0 || (at + b->size - bytes) / g < first)
        return 0;
    /* A window of w granules from granule i, for i from first to last: the
     * first i with the fewest unmapped, if fewer than at offset 0. Only
     * where a mapped granule enters the window can that number fall, so
     * the windows that end at a mapped granule are the only ones to look
     * at besides the first: the mapped granules come from the index, not
     * from every granule of a block that may span the reservation. */
    size_t last = (at + b->size - bytes) / g;
    mapped_iter_t in = mapped_iter(a, b, first, last + w), out = in;
    size_t entered = 0, left = 0;  /* mapped granules before in.at, before out.at */
    for (size_t i = first;;) {
        while (in.at < i + w) {
            entered++;
            mapped_next(&in);
        }
        while (out.at < i) {
            left++;
            mapped_next(&out);
        }
        size_t unmapped = w - (entered - left);
        if (unmapped < *missing) {
            *missing = unmapped;
            best_off = i * g - at;
        }
        /* The next window that ends at a mapped granule. */
        if (*missing == 0 || in.at == SIZE_MAX || in.at - w + 1 > last)
            break;
        i = in.at - w + 1;
    }
    return best_off;
}

cham_status_t cham_alloc_vm_back(cham_allocator_t *a, cham_block_t *b, char *dev_err,
                                 size_t dev_err_size)
{
    cham_segment_t *seg = b->seg;
    size_t g = a->granularity;
    size_t lo = granule_of(seg, b->ptr, g), hi = granule_of(seg, b->ptr + b->size + g - 1, g);
    size_t missing = cham_alloc_vm_missing(a, b, b->size);
    /* Chunks held = mapped + spare; new ones only while under the limit. */
    uint64_t held = a->stats.reserved / g;
    uint64_t can_make = a->limit / g > held ? a->limit / g - held : 0;
    size_t k = 0, to = 0;          /* the chosen free granules, those taken */
    reclaim_t r = {0};
    if (missing > a->n_spare + can_make) {
        to = choose(a, missing - (size_t)can_make);
        if (missing > a->n_spare + can_make + to) {
            take_all(a, k, to, &r);     /* kept as spares for the retry */
            snprintf(dev_err, dev_err_size, "%zu granules of %zu bytes to map, %zu spare and "
                     "%ju more under the limit after unmapping every free granule",
                     missing, g, a->n_spare, (uintmax_t)can_make);
            return CHAM_ERR_OUT_OF_MEMORY;
        }
    }
    for (size_t i = lo; i < hi; i++) {
        if (seg->chunks[i])
            continue;
        while (!a->n_spare && !can_make && k < to)
            k = take_next(a, k, to, &r);
        cham_phys_t *c = NULL;
        cham_status_t st = CHAM_OK;
        if (a->n_spare) {
            c = a->spare[--a->n_spare];
        } else if (!can_make) {
            snprintf(dev_err, dev_err_size, "a free granule could not be unmapped (%s)",
                     cham_device_last_error(a->dev));
            return CHAM_ERR_OUT_OF_MEMORY;
        } else if ((st = cham_phys_create(a->dev, g, &c)) == CHAM_OK) {
            a->stats.reserved += g;
            can_make--;
        }
        if (st == CHAM_OK && (st = cham_vm_map(c, seg->ptr + i * g)) != CHAM_OK) {
            if (spare_room(a)) {
                a->spare[a->n_spare++] = c;      /* kept for the next try */
            } else {
                cham_phys_release(c);
                a->stats.reserved -= g;
            }
        }
        if (st != CHAM_OK) {
            snprintf(dev_err, dev_err_size, "the device refused a granule: %s (%s)",
                     cham_status_string(st), cham_device_last_error(a->dev));
            return st;
        }
        seg->chunks[i] = c;
        seg->n_mapped++;
        a->stats.n_vm_maps++;
    }
    cham_alloc_bump_peaks(a);
    return CHAM_OK;
}

/* Gives back to the device every granule wholly inside a free block, every
 * spare chunk, and the reservations that are then empty and wholly free. */
uint64_t cham_alloc_vm_release_free(cham_allocator_t *a)
{
    uint64_t before = a->stats.reserved;
    reclaim_t r = {0};
    take_all(a, 0, choose(a, SIZE_MAX), &r);
    for (size_t i = 0; i < a->n_spare; i++)
        cham_phys_release(a->spare[i]);
    a->stats.reserved -= (uint64_t)a->n_spare * a->granularity;
    a->n_spare = 0;
    /* The idle reservations, newest first as in the segment list. */
    cham_segment_t *seg = a->n_idle ? cham_alloc_idle_newest_first(a) : NULL;
    while (seg) {
        cham_segment_t *next = seg->idle_next;
        cham_block_t *b = seg->first;
        if (seg->n_mapped == 0) {
            cham_alloc_idle_remove(a, seg);
            cham_block_tree_remove(seg->small ? &a->small : &a->large, &b->node);
            cham_alloc_put_block(a, b);
            cham_vm_release(a->dev, seg->ptr, seg->size);
            cham_alloc_segment_unlink(a, seg);
            a->stats.va_reserved -= seg->size;
            a->stats.n_segment_frees++;
            free(seg->chunks);
            free(seg->freed_at);
            free(seg->vm_free);
            free(seg);
        }
        seg = next;
    }
    return before - a->stats.reserved;
}

/* Physical bytes one allocation could still get: the room under the limit
 * and every granule wholly inside a free block. */
uint64_t cham_alloc_vm_obtainable(const cham_allocator_t *a)
{
    uint64_t free_granules = a->n_spare + a->n_vm_free;
    return a->limit - a->stats.reserved + free_granules * a->granularity;
}
