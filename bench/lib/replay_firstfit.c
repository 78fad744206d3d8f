/* The naive first-fit baseline (firstfit.h) as an entry of the replay table
 * (replay.h): one arena of the device's capacity, the same rounding. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "lib/firstfit.h"
#include "lib/replay.h"

static void *ff_make(const replay_env_t *env)
{
    firstfit_t *ff = firstfit_new(env->capacity, REPLAY_ALIGN);
    if (!ff) {
        fprintf(stderr, "bench_alloc: first-fit: cannot create the arena\n");
        exit(1);
    }
    return ff;
}

static const char *ff_alloc(void *ff, const replay_env_t *env, const bench_op_t *op,
                            void **block)
{
    (void)env;
    firstfit_block_t *blk = firstfit_alloc(ff, op->bytes);
    *block = blk;
    return blk ? NULL : firstfit_last_error(ff);
}

static void ff_free(void *ff, void *block)
{
    firstfit_free(ff, block);
}

static void ff_sample(void *ff, replay_sample_t *out)
{
    firstfit_stats_t s;
    firstfit_get_stats(ff, &s);
    *out = (replay_sample_t){.allocated = s.allocated, .capacity = s.capacity,
                             .fragmentation = s.fragmentation, .free_runs = s.free_runs};
}

/* The block must lie inside the arena. */
static const char *ff_inspect(const replay_env_t *env, const bench_op_t *op, void *block,
                              uint64_t *lo, uint64_t *size, char *why, size_t why_size)
{
    *lo = firstfit_block_offset(block);
    *size = firstfit_block_size(block);
    if (*size >= op->bytes && *lo + *size <= env->capacity)
        return NULL;
    snprintf(why, why_size, "block [%" PRIu64 ", %" PRIu64 ") for a request of %" PRIu64
             " bytes", *lo, *lo + *size, op->bytes);
    return why;
}

/* The arena must be one free run again. */
static void ff_finish(void *ff, const replay_env_t *env, replay_peaks_t *peaks)
{
    firstfit_stats_t s;
    firstfit_get_stats(ff, &s);
    size_t n = env->trace->n_allocs;
    if (s.allocated != 0 || s.free_runs != 1 || s.largest_free != s.capacity ||
        s.n_allocs != n || s.n_frees != n) {
        fprintf(stderr, "bench_alloc: first-fit: the arena is not whole again after freeing "
                "everything (%" PRIu64 " bytes allocated, %" PRIu64 " free runs)\n",
                s.allocated, s.free_runs);
        exit(1);
    }
    *peaks = (replay_peaks_t){.peak_allocated = s.peak_allocated,
                              .peak_reserved = s.high_water};
    firstfit_destroy(ff);
}

const replay_allocator_t replay_firstfit = {
    .name = "first-fit", .hex_addresses = false, .make = ff_make, .alloc = ff_alloc,
    .free = ff_free, .sample = ff_sample, .inspect = ff_inspect, .finish = ff_finish};
