/* The small deterministic random-number and hashing steps that the library,
 * the command, the benchmarks, the tests and the GPT example share.
 *
 * Why it exists: splitmix64 and xorshift64 had been pasted into a dozen
 * files, each copy with its own seeding and sometimes its own output
 * function. The streams they make are not incidental: SwapAdvisor's search,
 * the workload generator's variation, the benchmark traces and the example's
 * data all depend on them, so every simulated figure does too. This header is
 * their one home, and where the copies differed each variant keeps its own
 * name here instead of being merged into another stream.
 *
 * What it guarantees: pure uint64_t arithmetic, no global state, nothing
 * from libc: the same inputs give the same outputs on every platform and
 * compiler. Changing any function here changes plans, traces and figures;
 * add a new function instead. None of this is for cryptography. */
#ifndef CHAM_COMMON_RNG_H
#define CHAM_COMMON_RNG_H

#include <stdint.h>

/* 2^64 divided by the golden ratio, rounded to odd: splitmix64's increment,
 * and a multiplier that spreads a counter's bits (Fibonacci hashing). */
#define CHAM_GOLDEN64 UINT64_C(0x9e3779b97f4a7c15)

/* splitmix64's output function (Stafford's mix 13): a bijection on 64 bits
 * in which every input bit affects every output bit. Also a good hash of
 * one word. */
static inline uint64_t cham_mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

/* A cheaper, weaker mix: one multiply (shifts 31 and 29). The matcher's keys
 * and the GPT example's stochastic depth were made with it; keep it for
 * them rather than switching them to cham_mix64. */
static inline uint64_t cham_mix64_short(uint64_t z)
{
    z = (z ^ (z >> 31)) * UINT64_C(0xbf58476d1ce4e5b9);
    return z ^ (z >> 29);
}

/* splitmix64 (Steele, Lea, Flood 2014): the state advances by CHAM_GOLDEN64
 * and the new state is mixed. Any seed, 0 included, is a good one. */
static inline uint64_t cham_splitmix64(uint64_t *state)
{
    *state += CHAM_GOLDEN64;
    return cham_mix64(*state);
}

/* What cham_splitmix64 returns from state x, without a state: a hash of x. */
static inline uint64_t cham_splitmix64_hash(uint64_t x)
{
    return cham_mix64(x + CHAM_GOLDEN64);
}

/* A counter stream, not the splitmix64 stream: the counter advances by one
 * and each value is hashed with cham_splitmix64_hash. The GPT example's
 * synthetic data is made with it. */
static inline uint64_t cham_counter_hash64(uint64_t *counter)
{
    *counter += 1;
    return cham_splitmix64_hash(*counter);
}

/* Marsaglia's xorshift64 (shifts 13, 7, 17): the state advances and is
 * returned. The state must not be 0 (0 stays 0). Cheaper and weaker than
 * splitmix64; used for treap priorities and benchmark choices. */
static inline uint64_t cham_xorshift64(uint64_t *state)
{
    uint64_t x = *state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    *state = x;
    return x;
}

/* A double in [0, 1) from the top 53 bits of x: every value is a multiple of
 * 2^-53, exactly (the scaling by a power of two never rounds). */
static inline double cham_unit53(uint64_t x)
{
    return (double)(x >> 11) * 0x1.0p-53;
}

#endif
