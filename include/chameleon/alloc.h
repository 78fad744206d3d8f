/* The caching allocator: hands out blocks of device memory (or of pinned
 * host memory) carved from large segments it obtains from the device once
 * and keeps, because cudaMalloc and cudaHostAlloc are slow and synchronise.
 *
 * Best-fit with block split and merge; small and large pools; per-stream
 * pools with stream-ordered reuse; deferred free until other streams are
 * done with a block (PyTorch's recordStream, with host-side event queries);
 * and Chameleon's free-after-op, where a block becomes reusable once a given
 * operator has been dispatched, ordered on the device by an event record and
 * wait, with no host polling. Rounding rules and pools: docs/allocator.md.
 *
 * Not thread-safe: one thread at a time per allocator. */
#ifndef CHAMELEON_ALLOC_H
#define CHAMELEON_ALLOC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "chameleon/device.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cham_allocator cham_allocator_t;
typedef struct cham_block cham_block_t;

typedef enum cham_mem_kind {
    CHAM_MEM_DEVICE,         /* segments from cham_device_mem_alloc */
    CHAM_MEM_HOST_PINNED,    /* segments from cham_device_host_alloc */
} cham_mem_kind_t;

typedef struct cham_allocator_config {
    cham_mem_kind_t kind;
    /* Most bytes of segments the allocator may hold at once. 0 = the
     * device's capacity for CHAM_MEM_DEVICE; required (the pinned budget)
     * for CHAM_MEM_HOST_PINNED. */
    uint64_t limit;
    /* Divides the pool thresholds and segment sizes (1 MiB small-pool limit,
     * 2 MiB small segments, 20 MiB shared large segments, 2 MiB rounding) by
     * 2^granularity_shift, 0..10: PyTorch's sizes suit devices of tens of
     * GiB; a device of a few MiB needs finer ones (docs/allocator.md). */
    unsigned granularity_shift;
    /* Expandable segments (device memory only, on a device with virtual
     * memory, chameleon/device.h): one address reservation per stream and
     * pool, with physical granules mapped under the blocks in use and moved
     * from free blocks to where a request needs them, so that free memory
     * is never stranded between blocks (docs/allocator.md). The rounding
     * rules stay; segments are no longer obtained per request. */
    bool expandable;
} cham_allocator_config_t;

CHAM_API cham_status_t cham_allocator_new(cham_device_t *dev, const cham_allocator_config_t *config,
                                          cham_allocator_t **out);
/* Returns every segment to the device. Blocks still allocated are a
 * programmer error (asserted). Pending deferred frees are waited for. */
CHAM_API void cham_allocator_free(cham_allocator_t *alloc);

/* Allocates at least bytes (> 0) for use on stream. On CHAM_ERR_OUT_OF_MEMORY
 * (device) or CHAM_ERR_HOST_BUDGET (pinned host) nothing is allocated and
 * cham_allocator_last_oom() / cham_allocator_last_error() say why. Before
 * failing the allocator completes deferred frees whose events are done and
 * releases cached segments that are wholly free. */
CHAM_API cham_status_t cham_block_alloc(cham_allocator_t *alloc, size_t bytes,
                                        cham_stream_t *stream, cham_block_t **out);

/* As cham_block_alloc, but only from free blocks the allocator already
 * holds (after completing deferred frees whose events are done): it never
 * allocates or maps a segment, so it costs no device or pinning time. Not
 * on an expandable allocator (CHAM_ERR_INVALID_ARG). */
CHAM_API cham_status_t cham_block_alloc_cached(cham_allocator_t *alloc, size_t bytes,
                                               cham_stream_t *stream, cham_block_t **out);

/* The block's memory, its usable size (the request rounded up), the size
 * that was requested, and the stream it belongs to. */
CHAM_API void *cham_block_ptr(const cham_block_t *block);
CHAM_API size_t cham_block_size(const cham_block_t *block);
CHAM_API size_t cham_block_requested(const cham_block_t *block);
CHAM_API cham_stream_t *cham_block_stream(const cham_block_t *block);

/* A pointer the caller keeps with an allocated block (NULL at allocation):
 * the runtime notes which storage holds it. */
CHAM_API void cham_block_set_owner(cham_block_t *block, void *owner);
CHAM_API void *cham_block_owner(const cham_block_t *block);

/* Marks the block as used by work queued on another stream (PyTorch's
 * recordStream): when freed, it is reused only after that work is done. */
CHAM_API cham_status_t cham_block_record_stream(cham_allocator_t *alloc, cham_block_t *block,
                                                cham_stream_t *stream);

/* Frees the block. Work already queued on the block's own stream is
 * ordered before any reuse by stream order; if other streams were recorded,
 * an event is recorded on each and the block returns to the pool when
 * queries (made at later allocations) find them all complete. */
CHAM_API void cham_block_free(cham_allocator_t *alloc, cham_block_t *block);

/* Chameleon's custom recordStream: frees a block that work queued on
 * `user` (a swap stream) still reads. An event is recorded on `user` now;
 * when op_index has been dispatched (cham_allocator_op_dispatched), the
 * block's own stream is made to wait on that event and the block returns to
 * that stream's pool. No host polling. op_index must not be earlier than the
 * last dispatched op. */
CHAM_API cham_status_t cham_block_free_after_op(cham_allocator_t *alloc, cham_block_t *block,
                                                cham_stream_t *user, uint64_t op_index);

/* Tells the allocator that operator op_index (increasing) has been
 * dispatched: blocks freed after this op become reusable. */
CHAM_API cham_status_t cham_allocator_op_dispatched(cham_allocator_t *alloc, uint64_t op_index);

/* Brings every pending free-after-op n ops sooner: a block freed after op
 * k is freed after op k - n, and returns to its pool now where that op
 * has been dispatched. For a caller whose ops turn out to come later in
 * its plan than it counted (it skipped ahead): the frees it placed by
 * the plan come as much sooner. */
CHAM_API void cham_allocator_ops_sooner(cham_allocator_t *alloc, uint64_t n);

/* Waits on the host for the events of every recordStream free still
 * pending and returns those blocks to their pools: PyTorch's answer to a
 * failed allocation (synchronize_and_free_events). The host blocks until
 * the device catches up. Returns the bytes handed back. */
CHAM_API uint64_t cham_allocator_sync_deferred(cham_allocator_t *alloc);

/* Defragmentation help for a request of bytes on stream that failed: the
 * run of address-neighbouring blocks of one segment that would hold it if
 * the allocated blocks in it were moved away, choosing among the runs whose
 * allocated blocks can_move accepts (and that hold no block waiting for a
 * deferred free) the one with the fewest allocated bytes. Writes up to max
 * of those blocks to out and returns how many the run has; -1 when no run
 * exists. A run with more than max blocks is reported but not written. */
CHAM_API long cham_allocator_find_window(const cham_allocator_t *alloc, size_t bytes,
                                         cham_stream_t *stream,
                                         bool (*can_move)(const cham_block_t *block, void *user),
                                         void *user, cham_block_t **out, size_t max);

/* The same when no segment can hold the request: the allocated blocks of
 * the segments to empty (fewest allocated bytes per segment byte first)
 * so that, returned to the device, they leave room for a new segment that
 * holds it. -1 when no such set exists. */
CHAM_API long cham_allocator_find_segments(const cham_allocator_t *alloc, size_t bytes,
                                           cham_stream_t *stream,
                                           bool (*can_move)(const cham_block_t *block, void *user),
                                           void *user, cham_block_t **out, size_t max);

/* Returns every wholly free cached segment to the device. Deferred frees
 * whose events have completed are processed first. */
CHAM_API cham_status_t cham_allocator_empty_cache(cham_allocator_t *alloc);

typedef struct cham_alloc_stats {
    uint64_t limit;              /* bytes of segments allowed */
    uint64_t allocated;          /* bytes in allocated blocks (rounded sizes) */
    uint64_t requested;          /* bytes requested by live blocks */
    uint64_t reserved;           /* bytes of segments held */
    uint64_t peak_allocated;
    uint64_t peak_reserved;
    uint64_t pending_free;       /* bytes freed but waiting on events or ops */
    uint64_t n_allocs, n_frees;
    uint64_t n_splits, n_merges;
    uint64_t n_segment_allocs, n_segment_frees;
    uint64_t n_oom;              /* allocations that failed */
    uint64_t n_event_queries;    /* host-side event queries made */
    uint64_t n_event_syncs;      /* host waits in cham_allocator_sync_deferred */
    uint64_t largest_free;       /* largest block one allocation could get:
                                    max(largest cached free block,
                                        limit - reserved + bytes of cached
                                        segments that are wholly free);
                                    expandable: limit - reserved + the
                                    granules wholly inside free blocks */
    double fragmentation;        /* 1 - largest_free / (limit - allocated);
                                    0 when nothing is free */
    /* Reuse interval: ops dispatched between a deferred free and the block's
     * return to the pool (recordStream and free-after-op alike). */
    uint64_t n_deferred_released;
    uint64_t reuse_interval_sum;
    uint64_t reuse_interval_max;
    /* Expandable segments: addresses reserved, granules mapped and unmapped,
     * the reclaims that waited for the device before unmapping granules of
     * free blocks, and of those waits the ones for a whole stream (the
     * others wait for an event recorded after the granules' frees).
     * reserved counts the physical chunks held (mapped or spare). */
    uint64_t va_reserved;
    uint64_t n_vm_maps, n_vm_unmaps, n_vm_reclaims, n_vm_stream_syncs;
} cham_alloc_stats_t;
CHAM_API void cham_allocator_get_stats(const cham_allocator_t *alloc, cham_alloc_stats_t *stats);
/* Resets the peaks to the current values (for per-step peaks). */
CHAM_API void cham_allocator_reset_peaks(cham_allocator_t *alloc);

/* Details of the last failed allocation. */
typedef struct cham_oom_info {
    size_t requested;            /* bytes asked for */
    size_t rounded;              /* after rounding */
    uint64_t free_bytes;         /* limit - allocated */
    uint64_t largest_free;       /* largest block that could have been had */
    uint64_t reserved, allocated, limit;
} cham_oom_info_t;
/* CHAM_OK and fills info if an allocation has failed, else CHAM_ERR_NOT_FOUND. */
CHAM_API cham_status_t cham_allocator_last_oom(const cham_allocator_t *alloc,
                                               cham_oom_info_t *info);
/* A sentence about the last failure ("" if none). */
CHAM_API const char *cham_allocator_last_error(const cham_allocator_t *alloc);

#ifdef __cplusplus
}
#endif

#endif
