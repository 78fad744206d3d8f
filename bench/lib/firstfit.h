/* The benchmark's naive baseline: a first-fit allocator over one arena.
 *
 * The arena is a range of offsets [0, capacity) (no memory behind it, like
 * the sim device without data). Free space is one address-ordered,
 * doubly linked list of free runs; an allocation takes the front of the
 * first run that is large enough (O(free runs)), a free walks the list to
 * its address and merges with adjacent runs (O(free runs)). Sizes round up
 * to the alignment. Simple and correct, and deliberately not fast. */
#ifndef BENCH_LIB_FIRSTFIT_H
#define BENCH_LIB_FIRSTFIT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct firstfit firstfit_t;
typedef struct firstfit_block firstfit_block_t;

/* align: a power of two (512 matches the caching allocator's rounding).
 * NULL if the host is out of memory or the arguments are invalid. */
firstfit_t *firstfit_new(uint64_t capacity, uint64_t align);
/* Frees the allocator and every block handle it gave out. */
void firstfit_destroy(firstfit_t *ff);

/* NULL when no free run is large enough (or bytes is 0, or the host is out
 * of memory); firstfit_last_error() then says why. */
firstfit_block_t *firstfit_alloc(firstfit_t *ff, uint64_t bytes);
/* Freeing a block twice or a block of another arena stops the program. */
void firstfit_free(firstfit_t *ff, firstfit_block_t *block);

uint64_t firstfit_block_offset(const firstfit_block_t *block);
uint64_t firstfit_block_size(const firstfit_block_t *block);   /* rounded */

typedef struct firstfit_stats {
    uint64_t capacity;
    uint64_t allocated;      /* bytes in allocated blocks (rounded) */
    uint64_t peak_allocated;
    uint64_t high_water;     /* highest end offset ever allocated */
    uint64_t free_bytes;     /* capacity - allocated */
    uint64_t free_runs;      /* entries in the free list */
    uint64_t largest_free;
    double fragmentation;    /* 1 - largest_free / free_bytes; 0 when none free */
    uint64_t n_allocs, n_frees, n_failed;
} firstfit_stats_t;
/* O(free runs): walks the free list for the largest run. */
void firstfit_get_stats(const firstfit_t *ff, firstfit_stats_t *stats);

/* A sentence about the last failed allocation ("" if none). */
const char *firstfit_last_error(const firstfit_t *ff);

#endif
