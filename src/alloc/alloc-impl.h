/* The caching allocator's internals, shared by its source files and by the
 * tests: blocks, segments, the allocator, the rounding rules, and the
 * expensive checker. Nothing outside src/alloc/ and tests/ includes this.
 *
 *   caching.c   new/free, alloc, free, split and merge, segments, OOM path
 *   expandable.c  expandable segments: reservations, granules mapped and moved
 *   deferred.c  record_stream, free-after-op, event pool, op counter
 *   stats.c     statistics, the out-of-memory report
 *   check.c     the invariant checker and the block walk for tests */
#ifndef CHAM_ALLOC_IMPL_H
#define CHAM_ALLOC_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "alloc/block_tree.h"
#include "chameleon/alloc.h"
#include "common/message.h"

/* ---- rounding rules (docs/allocator.md) ----------------------------------*/
#define CHAM_ALLOC_MIN_BLOCK     ((size_t)512)            /* sizes round up to this */
#define CHAM_ALLOC_SMALL_SIZE    ((size_t)1 << 20)        /* <= this: small pool */
#define CHAM_ALLOC_SMALL_SEGMENT ((size_t)2 << 20)        /* small pool's segments */
#define CHAM_ALLOC_MIN_LARGE     ((size_t)10 << 20)       /* < this: a large segment */
#define CHAM_ALLOC_LARGE_SEGMENT ((size_t)20 << 20)       /* large pool's shared segments */
#define CHAM_ALLOC_ROUND_LARGE   ((size_t)2 << 20)        /* big segments round to this */

#define CHAM_ALLOC_MAX_SHIFT     10                       /* granularity_shift */

/* The sizes above divided by 2^shift (an allocator's granularity_shift;
 * MIN_BLOCK stays). */
static inline size_t cham_alloc_small_size(unsigned shift)
{
    return CHAM_ALLOC_SMALL_SIZE >> shift;
}

/* Request rounded up to a multiple of 512 B; 0 if that overflows. */
size_t cham_alloc_round_size(size_t bytes);
/* The segment a rounded request that found no free block would get. */
size_t cham_alloc_segment_size_at(unsigned shift, size_t rounded);
/* True if a block of size holding rounded bytes is split (the remainder
 * becomes a free block): small pool when remainder >= 512 B, large pool
 * when remainder > the small-pool limit (1 MiB at shift 0). */
bool cham_alloc_should_split_at(unsigned shift, bool small, size_t size, size_t rounded);
/* The same at PyTorch's sizes (shift 0). */
size_t cham_alloc_segment_size(size_t rounded);
bool cham_alloc_should_split(bool small, size_t size, size_t rounded);

/* ---- blocks --------------------------------------------------------------*/
typedef enum cham_block_state {
    CHAM_BLOCK_FREE,          /* in its pool's tree, reusable on its stream */
    CHAM_BLOCK_ALLOCATED,     /* handed out */
    CHAM_BLOCK_PENDING_EVENTS,/* freed; waits for recorded streams' events (queried) */
    CHAM_BLOCK_PENDING_OP,    /* freed; waits for an op to be dispatched */
    CHAM_BLOCK_UNUSED,        /* a spare struct in the allocator's free list */
} cham_block_state_t;

typedef struct cham_segment cham_segment_t;
typedef struct cham_deferred cham_deferred_t;

/* A block: a run of bytes of one segment.
 * Invariants: the blocks of a segment, in prev/next order, tile it exactly
 * (the first starts at the segment, each starts where the previous ends, the
 * last ends at the segment's end); ptr and size are multiples of 512 B
 * relative to the segment; a block is in a pool tree iff it is FREE, with
 * key (segment's stream id, size, ptr); no two neighbours are both FREE
 * (free blocks are merged at once; PENDING blocks are not free and are
 * merged when they return); `events` is non-empty only while PENDING;
 * n_pending counts the not yet completed events of a PENDING_EVENTS block. */
struct cham_block {
    /* First cache line (blocks are 64-byte aligned, 128 bytes): what tree
     * searches and merges read. */
    cham_block_tree_node_t node;  /* in the pool tree while FREE */
    uint8_t state;                /* cham_block_state_t */
    uint32_t n_pending;
    size_t size;                  /* usable bytes, a multiple of 512 */
    /* Second line. */
    char *ptr;
    cham_block_t *prev, *next;    /* address neighbours in the segment;
                                     next also links the spare list */
    cham_segment_t *seg;
    size_t requested;             /* bytes asked for (while allocated) */
    uint64_t recorded;            /* ids of streams given to record_stream */
    cham_deferred_t *events;      /* pending events, linked by next_in_block */
    union {
        void *owner;              /* while ALLOCATED: the caller's (set_owner) */
        uint64_t freed_at;        /* while PENDING: op counter when freed */
    } u;
};

/* A segment: one allocation from the device, owned by one stream and one
 * pool. Invariants: size = sum of its blocks' sizes; segments never overlap;
 * small segments hold only small-pool blocks. */
struct cham_segment {
    char *ptr;
    size_t size;
    cham_stream_t *stream;
    int stream_id;
    bool small;
    cham_block_t *first;          /* lowest block */
    cham_segment_t *prev, *next;  /* the allocator's segment list */
    cham_phys_t **chunks;         /* expandable: the chunk mapped at each granule, or
                                     NULL; classic segments: NULL */
    uint64_t *freed_at;           /* expandable: per granule, the allocator's vm_tick
                                     when a block over it last went back to the pool */
    size_t n_mapped;              /* expandable: granules with a chunk */
    uint64_t seq;                 /* creation order: the segment list's order */
    cham_segment_t *idle_prev, *idle_next;  /* the allocator's idle list, while idle */
    /* Expandable: the free-granule index, a min-tree over the granules
     * (leaf i at vm_free[vm_leaves + i], node k the min of 2k and 2k + 1;
     * vm_leaves a power of 2): leaf i is freed_at[i] if granule i is
     * mapped and wholly inside a free block, else CHAM_VM_NOT_FREE. The
     * reclaim takes the earliest of those granules and the best fit looks
     * for mapped ones inside a free block: both were walks of every block,
     * once per allocation that needed memory (issue 47, bench_oom). */
    uint64_t *vm_free;
    size_t vm_leaves;
};

/* Expandable segments: an event recorded on a segment's stream every
 * CHAM_VM_CHECKPOINT_OPS dispatched ops, on a block's stream after the
 * waits its free-after-op release queued there, and after the first free
 * of a page or more in an op on the block's stream; the last
 * CHAM_VM_CHECKPOINTS of them, oldest at head. Each advances the
 * allocator's tick. Work that used a granule freed at tick t was queued
 * before the first checkpoint recorded at a tick > t: unmapping the
 * granule waits for that event, not for the whole stream. */
#define CHAM_VM_CHECKPOINT_OPS 8
#define CHAM_VM_CHECKPOINTS 256    /* the releases of one op must not push out the
                                      checkpoints older granules wait for */
typedef struct cham_vm_checkpoints {
    cham_event_t *event[CHAM_VM_CHECKPOINTS];
    uint64_t tick[CHAM_VM_CHECKPOINTS];
    unsigned head, n;
    uint64_t free_op;             /* 1 + the op_counter of the last one a free recorded */
} cham_vm_checkpoints_t;

/* One pending event of a deferred free. recordStream frees sit in a FIFO per
 * recorded stream (events of one stream complete in order, so a query stops
 * at the first that is not done); free-after-op events hang off the block. */
struct cham_deferred {
    cham_event_t *event;
    cham_block_t *block;
    cham_stream_t *stream;        /* where the event was recorded */
    cham_deferred_t *next_in_queue;
    cham_deferred_t *next_in_block;
};

/* A free-after-op entry in the min-heap ordered by (op, seq). */
typedef struct cham_op_entry {
    uint64_t op;
    uint64_t seq;                 /* arrival order: ties release in order */
    cham_block_t *block;
} cham_op_entry_t;

#define CHAM_ALLOC_MAX_STREAMS 64
#define CHAM_ALLOC_SLAB 256       /* block / deferred structs per host malloc */

/* The allocator.
 * Invariants: reserved = sum of segment sizes <= limit; allocated = sum of
 * ALLOCATED blocks' sizes; pending_free = sum of PENDING blocks' sizes;
 * reserved = allocated + pending_free + bytes of FREE blocks; the trees hold
 * exactly the FREE blocks, small segments' in `small`, others' in `large`;
 * queue[i] holds the recordStream events recorded on stream i, oldest first,
 * and bit i of queue_mask is set iff it is non-empty; the heap holds exactly
 * the PENDING_OP blocks. */
struct cham_allocator {
    cham_device_t *dev;
    cham_mem_kind_t kind;
    uint64_t limit;
    unsigned shift;                   /* granularity_shift */

    cham_block_tree_t small, large;   /* free blocks: the two pools */
    cham_segment_t *segments;         /* all segments, newest first */
    /* Idle segments: those that are one FREE block, which the OOM path
     * gives back to the device. Kept as they become idle and stop being
     * so, because that path runs once per failed allocation, thousands of
     * times in a step, and a walk of every segment made it quadratic in
     * live tensors (issue 47, bench_oom). Invariant: the list holds
     * exactly the idle segments, n_idle of them, idle_bytes in all. */
    cham_segment_t *idle;
    size_t n_idle;
    uint64_t idle_bytes;
    uint64_t segment_seq;             /* seq of the next segment */
    cham_stream_t *streams[CHAM_ALLOC_MAX_STREAMS]; /* last stream seen per id */

    /* Spare structs, carved from slabs so that the hot path never mallocs. */
    cham_block_t *spare_blocks;
    cham_deferred_t *spare_deferred;
    void **slabs;
    size_t n_slabs, cap_slabs;

    /* Event pool. */
    cham_event_t **events;
    size_t n_events, cap_events, n_events_made;

    /* recordStream frees: FIFO per stream of recorded events. */
    cham_deferred_t *queue_head[CHAM_ALLOC_MAX_STREAMS];
    cham_deferred_t *queue_tail[CHAM_ALLOC_MAX_STREAMS];
    uint64_t queue_mask;

    /* free-after-op: min-heap by (op, seq). */
    cham_op_entry_t *heap;
    size_t n_heap, cap_heap;
    uint64_t heap_seq;
    uint64_t last_op;                 /* last op index dispatched */
    bool any_op;                      /* an op has been dispatched */
    uint64_t op_counter;              /* number of op_dispatched calls */

    /* Expandable segments (granularity > 0). Invariants: every granule a
     * block that is not FREE overlaps is mapped; reserved = (mapped granules
     * + n_spare) * granularity <= limit; va_reserved = the segments' sizes. */
    size_t granularity;               /* 0: classic segments */
    cham_phys_t **spare;              /* chunks held, mapped nowhere */
    size_t n_spare, cap_spare;
    cham_vm_checkpoints_t *checkpoints[CHAM_ALLOC_MAX_STREAMS]; /* per stream id, lazily */
    uint64_t last_checkpoint;         /* op counter of the last periodic checkpoints */
    uint64_t vm_tick;                 /* advances with every checkpoint */
    struct cham_vm_candidate *candidates;   /* reclaim's scratch */
    size_t n_vm_free;                 /* leaves of the free-granule indexes that are not
                                         CHAM_VM_NOT_FREE */
    size_t cap_candidates;

    cham_alloc_stats_t stats;         /* counters; derived fields filled on read */
    bool have_oom;
    cham_oom_info_t oom;
    /* The last failure's message. After an out-of-memory it is formatted
     * only when read (oom_unformatted), from oom and these: the OOM path
     * fails and retries allocations by the thousand, and reads few. */
    char error[512];
    bool oom_unformatted;
    bool oom_largest_unknown;     /* expandable: oom.largest_free is computed when
                                     read (a walk of every block) */
    cham_status_t oom_status;
    uint64_t oom_pending_free;
    char oom_stream[48];
    char oom_device_error[256];
};

/* ---- cross-file internals ---------------------------------------------*/
/* Returns a block to its stream's pool (merging with free neighbours).
 * The block must not be ALLOCATED any more in the stats' eyes. */
void cham_alloc_release_block(cham_allocator_t *alloc, cham_block_t *block);
/* Spare structs; NULL when the host is out of memory. */
cham_block_t *cham_alloc_get_block(cham_allocator_t *alloc);
void cham_alloc_put_block(cham_allocator_t *alloc, cham_block_t *block);
cham_deferred_t *cham_alloc_get_deferred(cham_allocator_t *alloc);
void cham_alloc_put_deferred(cham_allocator_t *alloc, cham_deferred_t *d);
/* Notes the stream under its id (streams[]); returns the id. */
int cham_alloc_note_stream(cham_allocator_t *alloc, cham_stream_t *stream);

/* deferred.c: queries the heads of the recordStream queues and returns the
 * blocks whose events have all completed. */
void cham_alloc_process_events(cham_allocator_t *alloc);
/* deferred.c: releases every free-after-op block now, each after a stream
 * wait on its event (the OOM path: paper's Algorithm 3, steps i-ii). */
void cham_alloc_release_all_op_blocks(cham_allocator_t *alloc);
/* deferred.c: releases the free-after-op block of the earliest op (ties:
 * the first freed) as above; false when there is none. */
bool cham_alloc_release_first_op_block(cham_allocator_t *alloc);
/* deferred.c: waits for and releases every deferred free; frees the events. */
void cham_alloc_drain_deferred(cham_allocator_t *alloc);

/* caching.c: takes an idle segment off the idle list (before it stops
 * being idle or is freed). */
void cham_alloc_idle_remove(cham_allocator_t *alloc, cham_segment_t *seg);
/* caching.c: sorts the idle list newest first (the segment list's order)
 * and returns its head. O(idle log idle). */
cham_segment_t *cham_alloc_idle_newest_first(cham_allocator_t *alloc);

/* caching.c: links seg (size bytes at ptr, for stream sid's pool) into the
 * allocator's list with b as its one block, taken (ALLOCATED); unlinks it. */
void cham_alloc_segment_link(cham_allocator_t *alloc, cham_segment_t *seg, cham_block_t *b,
                             char *ptr, size_t size, cham_stream_t *stream, int sid, bool small);
void cham_alloc_segment_unlink(cham_allocator_t *alloc, cham_segment_t *seg);

/* expandable.c: a new reservation for a rounded request, its one block
 * taken (not in a pool; the caller splits it and backs it). */
cham_status_t cham_alloc_vm_segment_new(cham_allocator_t *alloc, cham_stream_t *stream, int sid,
                                        size_t rounded, bool small, cham_block_t **out,
                                        char *dev_err, size_t dev_err_size);
/* expandable.c: maps physical memory under every granule the block covers,
 * taking granules of free blocks when the limit is reached;
 * CHAM_ERR_OUT_OF_MEMORY (with why) when even that is not enough. */
cham_status_t cham_alloc_vm_back(cham_allocator_t *alloc, cham_block_t *block, char *dev_err,
                                 size_t dev_err_size);
/* expandable.c: granules of [block, block + bytes) not mapped. */
size_t cham_alloc_vm_missing(const cham_allocator_t *alloc, const cham_block_t *block,
                             size_t bytes);
/* expandable.c: where in free block `block` `bytes` need the fewest
 * granules mapped (that number in *missing): an offset of 0, or of a
 * granule boundary at least min_front bytes in; 0 on a tie. */
size_t cham_alloc_vm_mapped_offset(const cham_allocator_t *alloc, const cham_block_t *block,
                                   size_t bytes, size_t min_front, size_t *missing);
/* A mapped granule wholly inside a free block, and the checkpoint whose
 * event its unmapping waits for (UINT64_MAX: the whole stream). */
typedef struct cham_vm_candidate {
    cham_segment_t *seg;
    size_t granule;
    uint64_t wait;
} cham_vm_candidate_t;

/* expandable.c: a leaf of the free-granule index that is no granule of a
 * free block (freed_at values are ticks, far below). */
#define CHAM_VM_NOT_FREE UINT64_MAX
/* expandable.c: brings the free-granule index up to date for the granules
 * overlapping [lo, hi), which lie in block b: after b went back to the pool
 * (merged; [lo, hi) what was freed) or was taken from it. */
void cham_alloc_vm_index(cham_allocator_t *alloc, const cham_block_t *block, const char *lo,
                         const char *hi);
/* expandable.c: the first `want` granules a reclaim would take (mapped,
 * wholly inside a free block; earliest wait, then address) into
 * alloc->candidates; their number, or SIZE_MAX when the host is out of
 * memory. Exposed for the tests, which compare it with a walk. */
size_t cham_alloc_vm_candidates(cham_allocator_t *alloc, size_t want);
/* expandable.c: gives back every granule of free blocks, every spare and
 * the reservations left empty; returns the physical bytes given back. */
uint64_t cham_alloc_vm_release_free(cham_allocator_t *alloc);
/* expandable.c: physical bytes one allocation could still get. */
uint64_t cham_alloc_vm_obtainable(const cham_allocator_t *alloc);
/* expandable.c: notes that the block goes back to the pool now (the tick
 * of its granules). */
void cham_alloc_vm_note_free(cham_allocator_t *alloc, const cham_block_t *block);
/* expandable.c: records the checkpoint events when they are due (called
 * at every dispatched op); frees them all, and reclaim's scratch. */
void cham_alloc_vm_checkpoint(cham_allocator_t *alloc);
/* expandable.c: records a checkpoint on the segment's stream now, behind
 * the work queued there so far: after a block released after an op (behind
 * the waits for its copies: its granules can move once those copies are
 * done, without waiting for the stream's later work or other blocks'
 * copies), and after a large free (cham_alloc_vm_note_free). */
void cham_alloc_vm_checkpoint_now(cham_allocator_t *alloc, const cham_segment_t *seg);
void cham_alloc_vm_free_checkpoints(cham_allocator_t *alloc);

/* stats.c: the largest cached free block over both pools and all streams. */
uint64_t cham_alloc_largest_cached(const cham_allocator_t *alloc);
/* stats.c: the message of a failure other than out-of-memory (printf-style). */
void cham_alloc_set_error(cham_allocator_t *alloc, const char *fmt, ...) CHAM_PRINTF(2, 3);
/* stats.c: fills alloc->oom after a failed allocation, and what its
 * message is formatted from. */
void cham_alloc_record_oom(cham_allocator_t *alloc, size_t bytes, size_t rounded,
                           cham_stream_t *stream, cham_status_t status,
                           const char *device_error);
/* stats.c: keeps the peaks up to date. */
static inline void cham_alloc_bump_peaks(cham_allocator_t *alloc)
{
    cham_alloc_stats_t *s = &alloc->stats;
    if (s->allocated > s->peak_allocated)
        s->peak_allocated = s->allocated;
    if (s->reserved > s->peak_reserved)
        s->peak_reserved = s->reserved;
}

/* ---- checker and walk (tests) -----------------------------------------*/
/* Walks every segment and block and checks all invariants written above the
 * structs (tiling, no overlap, coalescing, tree membership, byte totals
 * against the stats, queue and heap contents). Always compiled, so tests
 * can call it in any build; the allocator itself calls it after every
 * public operation when built with CHAM_DEBUG_CHECKS=1. Returns true if all
 * hold, else false with a reason in why. O(blocks). */
bool cham_allocator_check(const cham_allocator_t *alloc, char *why, size_t why_size);

/* Expandable segments: the free-granule indexes against every granule
 * (each leaf, each node, the count). Not part of cham_allocator_check,
 * which must stay O(blocks): O(granules of every reservation). */
bool cham_allocator_check_vm_index(const cham_allocator_t *alloc, char *why, size_t why_size);

/* CHAM_ASSERTs cham_allocator_check when CHAM_DEBUG_CHECKS=1; no-op else. */
void cham_alloc_debug_check(const cham_allocator_t *alloc);

typedef struct cham_alloc_block_info {
    uintptr_t ptr;
    size_t size;
    cham_block_state_t state;
    int stream_id;
    bool small;                   /* lives in a small-pool segment */
    uintptr_t segment;            /* its segment's base address */
    size_t segment_size;
} cham_alloc_block_info_t;
/* Calls fn for every block of every segment, in address order within a
 * segment. */
void cham_allocator_walk(const cham_allocator_t *alloc,
                         void (*fn)(const cham_alloc_block_info_t *info, void *user),
                         void *user);
/* Number of events the allocator has made with cham_event_new (its pool's
 * size): tests check that events are reused. */
size_t cham_allocator_events_made(const cham_allocator_t *alloc);

#endif
