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
    void *va = NULL;
    cham_status_t st = b && seg && chunks && freed_at ? cham_vm_reserve(a->dev, size, &va)
                                                      : CHAM_ERR_HOST_OOM;
    if (st != CHAM_OK) {
        if (b)
            cham_alloc_put_block(a, b);
        free(seg);
        free(chunks);
        free(freed_at);
        snprintf(dev_err, dev_err_size, "%s", st == CHAM_ERR_HOST_OOM
                 ? "out of host memory for the allocator's bookkeeping"
                 : cham_device_last_error(a->dev));
        return st;
    }
    seg->chunks = chunks;
    seg->freed_at = freed_at;
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

/* A mapped granule wholly inside a free block, and the checkpoint whose
 * event its unmapping waits for (UINT64_MAX: the whole stream). */
typedef struct cham_vm_candidate {
    cham_segment_t *seg;
    size_t granule;
    uint64_t wait;
} candidate_t;

/* The earliest wait first; then by address, the order granules were taken
 * in before there were checkpoints. */
static int earliest_wait_first(const void *x, const void *y)
{
    const candidate_t *a = x, *b = y;
    if (a->wait != b->wait)
        return a->wait < b->wait ? -1 : 1;
    if (a->seg != b->seg)
        return a->seg->ptr < b->seg->ptr ? -1 : 1;
    return (a->granule > b->granule) - (a->granule < b->granule);
}

/* Every mapped granule wholly inside a free block, earliest wait first, in
 * a->candidates; their number, or SIZE_MAX when the host is out of memory. */
static size_t candidates(cham_allocator_t *a)
{
    size_t g = a->granularity, n = 0;
    for (cham_segment_t *seg = a->segments; seg; seg = seg->next)
        for (cham_block_t *b = seg->first; b; b = b->next) {
            if (b->state != CHAM_BLOCK_FREE)
                continue;
            for (size_t i = granule_of(seg, b->ptr + g - 1, g);
                 i < granule_of(seg, b->ptr + b->size, g); i++) {
                if (!seg->chunks[i])
                    continue;
                candidate_t *v = cham_grow(a->candidates, &a->cap_candidates, n + 1,
                                           sizeof *v, 64);
                if (!v)
                    return SIZE_MAX;
                a->candidates = v;
                v[n++] = (candidate_t){seg, i,
                                       checkpoint_after(a, seg->stream_id, seg->freed_at[i])};
            }
        }
    if (n > 1)          /* qsort of none may not be given NULL */
        qsort(a->candidates, n, sizeof *a->candidates, earliest_wait_first);
    return n;
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
    size_t n = candidates(a);
    if (n == SIZE_MAX)
        return 0;                   /* out of host memory: take nothing */
    return need - a->n_spare < n ? need - a->n_spare : n;
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

size_t cham_alloc_vm_mapped_offset(const cham_allocator_t *a, const cham_block_t *b, size_t bytes,
                                   size_t min_front, size_t *missing)
{
    const cham_segment_t *seg = b->seg;
    size_t g = a->granularity, best_off = 0;
    *missing = cham_alloc_vm_missing(a, b, bytes);
    size_t at = (size_t)(b->ptr - seg->ptr);              /* the block's offset in seg */
    size_t first = (at + min_front + g - 1) / g, w = (bytes + g - 1) / g;
    CHAM_ASSERT(b->size >= bytes);
    if (*missing == 0 || (at + b->size - bytes) / g < first)
        return 0;
    /* A window of w granules from granule first, slid one at a time. */
    size_t last = (at + b->size - bytes) / g, unmapped = 0;
    for (size_t i = first; i < first + w; i++)
        unmapped += !seg->chunks[i];
    for (size_t i = first;; i++) {
        if (unmapped < *missing) {
            *missing = unmapped;
            best_off = i * g - at;
        }
        if (*missing == 0 || i == last)
            break;
        unmapped = unmapped - !seg->chunks[i] + !seg->chunks[i + w];
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
    cham_segment_t *seg = a->segments;
    while (seg) {
        cham_segment_t *next = seg->next;
        cham_block_t *b = seg->first;
        if (b->state == CHAM_BLOCK_FREE && !b->next && seg->n_mapped == 0) {
            cham_block_tree_remove(seg->small ? &a->small : &a->large, &b->node);
            cham_alloc_put_block(a, b);
            cham_vm_release(a->dev, seg->ptr, seg->size);
            cham_alloc_segment_unlink(a, seg);
            a->stats.va_reserved -= seg->size;
            a->stats.n_segment_frees++;
            free(seg->chunks);
            free(seg->freed_at);
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
    size_t g = a->granularity;
    uint64_t free_granules = a->n_spare;
    for (const cham_segment_t *seg = a->segments; seg; seg = seg->next)
        for (const cham_block_t *b = seg->first; b; b = b->next) {
            if (b->state != CHAM_BLOCK_FREE)
                continue;
            for (size_t i = granule_of(seg, b->ptr + g - 1, g);
                 i < granule_of(seg, b->ptr + b->size, g); i++)
                free_granules += seg->chunks[i] != NULL;
        }
    return a->limit - a->stats.reserved + free_granules * g;
}
