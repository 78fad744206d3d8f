/* The live blocks of a checked replay, keyed by address: adding a block that
 * overlaps a live one is refused and names that one, so a replay can prove
 * that every block an allocator hands out is disjoint from all live blocks.
 *
 * One entry per trace slot (bench/lib/trace.h); a treap keyed by the start
 * address, O(log n) expected per operation. */
#ifndef BENCH_LIB_LIVE_SET_H
#define BENCH_LIB_LIVE_SET_H

#include <stdbool.h>
#include <stdint.h>

#define LIVE_SET_NONE UINT32_MAX

typedef struct live_set {
    uint64_t *lo, *hi;       /* [lo, hi) of the block in each slot */
    uint32_t *left, *right, *prio;
    uint32_t root;
    uint64_t rng;
} live_set_t;

/* false when the host is out of memory. */
bool live_set_init(live_set_t *set, uint32_t n_slots);
void live_set_release(live_set_t *set);

/* Adds [lo, lo + size) as slot s; returns the live slot it overlaps
 * (nothing is added then), or LIVE_SET_NONE. */
uint32_t live_set_add(live_set_t *set, uint32_t s, uint64_t lo, uint64_t size);
/* Removes slot s, which must be in the set. */
void live_set_remove(live_set_t *set, uint32_t s);

#endif
