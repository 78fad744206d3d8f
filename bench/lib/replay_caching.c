/* Chameleon's caching allocator (include/chameleon/alloc.h) as an entry of
 * the replay table (replay.h), on the replay's sim device. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "chameleon/alloc.h"
#include "lib/replay.h"

static void *caching_make(const replay_env_t *env)
{
    cham_allocator_config_t cfg = {.kind = CHAM_MEM_DEVICE, .limit = 0,
                                   .expandable = env->expandable};
    cham_allocator_t *a = NULL;
    cham_status_t st = cham_allocator_new(env->dev, &cfg, &a);
    if (st != CHAM_OK) {
        fprintf(stderr, "bench_alloc: cham_allocator_new: %s: %s\n", cham_status_string(st),
                cham_device_last_error(env->dev));
        exit(1);
    }
    return a;
}

static const char *caching_alloc(void *a, const replay_env_t *env, const bench_op_t *op,
                                 void **block)
{
    cham_block_t *blk;
    cham_status_t st = cham_block_alloc(a, op->bytes, env->streams[op->stream], &blk);
    if (st == CHAM_OK) {
        *block = blk;
        return NULL;
    }
    const char *why = cham_allocator_last_error(a);
    return *why ? why : cham_status_string(st);
}

static void caching_free(void *a, void *block)
{
    cham_block_free(a, block);
}

static void caching_sample(void *a, replay_sample_t *out)
{
    cham_alloc_stats_t s;
    cham_allocator_get_stats(a, &s);
    *out = (replay_sample_t){.allocated = s.allocated, .capacity = s.limit,
                             .fragmentation = s.fragmentation,
                             .vm_calls = s.n_vm_maps + s.n_vm_unmaps};
}

/* The block must report the requested size and stream. */
static const char *caching_inspect(const replay_env_t *env, const bench_op_t *op, void *block,
                                   uint64_t *lo, uint64_t *size, char *why, size_t why_size)
{
    const cham_block_t *blk = block;
    cham_stream_t *stream = env->streams[op->stream];
    *lo = (uint64_t)(uintptr_t)cham_block_ptr(blk);
    *size = cham_block_size(blk);
    if (*lo && *size >= op->bytes && cham_block_requested(blk) == op->bytes &&
        cham_block_stream(blk) == stream)
        return NULL;
    snprintf(why, why_size, "block %#" PRIx64 " of %" PRIu64 " bytes (requested %zu, stream "
             "%p) for a request of %" PRIu64 " bytes on stream %p", *lo, *size,
             cham_block_requested(blk), (void *)cham_block_stream(blk), op->bytes,
             (void *)stream);
    return why;
}

static void caching_finish(void *a, const replay_env_t *env, replay_peaks_t *peaks)
{
    cham_alloc_stats_t s;
    cham_allocator_get_stats(a, &s);
    size_t n = env->trace->n_allocs;
    if (s.allocated != 0 || s.n_allocs != n || s.n_frees != n) {
        fprintf(stderr, "bench_alloc: caching allocator: statistics disagree with the trace "
                "(allocated %" PRIu64 " after freeing all, %" PRIu64 " allocs and %" PRIu64
                " frees counted, %zu allocs replayed)\n", s.allocated, s.n_allocs, s.n_frees, n);
        exit(1);
    }
    *peaks = (replay_peaks_t){.peak_allocated = s.peak_allocated,
                              .peak_reserved = s.peak_reserved,
                              .segments = s.n_segment_allocs, .vm_maps = s.n_vm_maps,
                              .vm_unmaps = s.n_vm_unmaps, .vm_reclaims = s.n_vm_reclaims};
    cham_allocator_free(a);
}

const replay_allocator_t replay_caching = {
    .name = "caching allocator", .hex_addresses = true, .make = caching_make,
    .alloc = caching_alloc, .free = caching_free, .sample = caching_sample,
    .inspect = caching_inspect, .finish = caching_finish};
