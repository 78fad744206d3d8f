/* A fixed-seed random generator for randomized tests (xorshift64*): the same
 * sequence on every machine, so a failing seed can be replayed. */
#ifndef CHAM_TESTS_RNG_H
#define CHAM_TESTS_RNG_H

#include <stdint.h>

typedef struct test_rng {
    uint64_t state;          /* never 0 */
} test_rng_t;

static inline uint64_t test_rng_next(test_rng_t *r)
{
    r->state ^= r->state >> 12;
    r->state ^= r->state << 25;
    r->state ^= r->state >> 27;
    return r->state * UINT64_C(2685821657736338717);
}

/* A number in [0, n). */
static inline uint64_t test_rng_below(test_rng_t *r, uint64_t n)
{
    return test_rng_next(r) % n;
}

#endif
