/* The caching allocator's statistics (definitions in chameleon/alloc.h and
 * docs/allocator.md) and the report of the last failed allocation. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "alloc/alloc-impl.h"
#include "common/assert.h"
#include "common/size.h"

uint64_t cham_alloc_largest_cached(const cham_allocator_t *a)
{
    uint64_t largest = 0;
    for (int i = 0; i < CHAM_ALLOC_MAX_STREAMS; i++) {
        if (!a->streams[i])
            continue;
        size_t s = cham_block_tree_max_size(&a->small, i);
        size_t l = cham_block_tree_max_size(&a->large, i);
        if (s > largest)
            largest = s;
        if (l > largest)
            largest = l;
    }
    return largest;
}

/* max(largest cached free block, room under the limit once idle segments
 * are released): the largest block one allocation can get. */
static uint64_t largest_free(const cham_allocator_t *a)
{
    if (a->granularity)        /* addresses are plenty: physical memory decides */
        return cham_alloc_vm_obtainable(a);
    uint64_t cached = cham_alloc_largest_cached(a);
    /* Idle segments (one free block each): the out-of-memory path returns
     * them to the device, so their room is as good as unreserved. Kept as
     * a sum, not walked: this runs at every failed allocation. */
    uint64_t room = a->limit - a->stats.reserved + a->idle_bytes;
    return cached > room ? cached : room;
}

void cham_allocator_get_stats(const cham_allocator_t *a, cham_alloc_stats_t *stats)
{
    CHAM_ASSERT(a && stats);
    *stats = a->stats;
    stats->limit = a->limit;
    stats->largest_free = largest_free(a);
    uint64_t free_bytes = a->limit - a->stats.allocated;
    stats->fragmentation =
        free_bytes ? 1.0 - (double)stats->largest_free / (double)free_bytes : 0.0;
    if (stats->fragmentation < 0)   /* cannot happen; keeps rounding honest */
        stats->fragmentation = 0;
}

void cham_allocator_reset_peaks(cham_allocator_t *a)
{
    CHAM_ASSERT(a);
    a->stats.peak_allocated = a->stats.allocated;
    a->stats.peak_reserved = a->stats.reserved;
}

void cham_alloc_record_oom(cham_allocator_t *a, size_t bytes, size_t rounded,
                           cham_stream_t *stream, cham_status_t status,
                           const char *device_error)
{
    cham_oom_info_t *o = &a->oom;
    o->requested = bytes;
    o->rounded = rounded;
    o->limit = a->limit;
    o->reserved = a->stats.reserved;
    o->allocated = a->stats.allocated;
    o->free_bytes = a->limit - a->stats.allocated;
    /* Expandable segments find it by walking every block: the OOM path
     * fails allocations by the thousand and reads the figure once, right
     * after the last. */
    a->oom_largest_unknown = a->granularity != 0;
    o->largest_free = a->granularity ? 0 : largest_free(a);
    a->have_oom = true;
    a->oom_unformatted = true;
    a->oom_status = status;
    a->oom_pending_free = a->stats.pending_free;
    cham_copy_str(a->oom_stream, sizeof a->oom_stream, cham_stream_name(stream));
    cham_copy_str(a->oom_device_error, sizeof a->oom_device_error, device_error);
}

/* The largest free block of the last out-of-memory, when it was left to
 * be computed on reading. */
static void complete_oom(cham_allocator_t *a)
{
    if (a->oom_largest_unknown)
        a->oom.largest_free = largest_free(a);
    a->oom_largest_unknown = false;
}

/* The message of the last out-of-memory, from what record_oom kept. */
static void format_oom(cham_allocator_t *a)
{
    complete_oom(a);
    const cham_oom_info_t *o = &a->oom;
    char req[32], rnd[32], lim[32], alc[32], fre[32], lrg[32], pnd[32];
    const char *what = a->kind == CHAM_MEM_DEVICE ? "out of device memory"
                                                  : "out of pinned host budget";
    if (a->oom_status != CHAM_ERR_OUT_OF_MEMORY && a->oom_status != CHAM_ERR_HOST_BUDGET)
        what = a->kind == CHAM_MEM_DEVICE ? "device allocation failed"
                                          : "pinned host allocation failed";
    /* Expandable segments: what one request can get is physical granules,
     * wherever they are mapped now. */
    char gran[80] = "", gsz[32];
    if (a->granularity)
        snprintf(gran, sizeof gran, " (in %s granules, expandable segments)",
                 cham_size_format(gsz, sizeof gsz, a->granularity));
    int n = snprintf(a->error, sizeof a->error,
                     "%s: requested %s (rounded %s) on stream \"%s\"; limit %s, "
                     "allocated %s, free %s, %s %s%s",
                     what, cham_size_format(req, sizeof req, o->requested),
                     o->rounded ? cham_size_format(rnd, sizeof rnd, o->rounded) : "too large",
                     a->oom_stream, cham_size_format(lim, sizeof lim, o->limit),
                     cham_size_format(alc, sizeof alc, o->allocated),
                     cham_size_format(fre, sizeof fre, o->free_bytes),
                     a->granularity ? "obtainable" : "largest free block",
                     cham_size_format(lrg, sizeof lrg, o->largest_free), gran);
    size_t used = n > 0 ? (size_t)n : 0;
    if (a->oom_pending_free && used < sizeof a->error) {
        n = snprintf(a->error + used, sizeof a->error - used,
                     "; %s held by deferred frees",
                     cham_size_format(pnd, sizeof pnd, a->oom_pending_free));
        used += n > 0 ? (size_t)n : 0;
    }
    if (a->oom_device_error[0] && used < sizeof a->error)
        snprintf(a->error + used, sizeof a->error - used, "; %s", a->oom_device_error);
    a->oom_unformatted = false;
}

void cham_alloc_set_error(cham_allocator_t *a, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(a->error, sizeof a->error, fmt, ap);
    va_end(ap);
    a->oom_unformatted = false;
}

cham_status_t cham_allocator_last_oom(const cham_allocator_t *a, cham_oom_info_t *info)
{
    CHAM_ASSERT(a && info);
    if (!a->have_oom)
        return CHAM_ERR_NOT_FOUND;
    complete_oom((cham_allocator_t *)a);   /* a cache, as the message below */
    *info = a->oom;
    return CHAM_OK;
}

const char *cham_allocator_last_error(const cham_allocator_t *a)
{
    CHAM_ASSERT(a);
    /* The message is a cache of the recorded failure: formatting it on
     * first read changes nothing a caller can observe (no allocator is
     * ever defined const, so writing through this pointer is defined). */
    if (a->oom_unformatted)
        format_oom((cham_allocator_t *)a);
    return a->error;
}
