/* Training data (data.h). */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data.h"
#include "common/rng.h" /* header-only (src/, private): the public API stays the only link */

/* splitmix64's mix of a counter: small, fast, and enough for data and
 * sampling. */
static uint64_t next(uint64_t *state)
{
    return cham_counter_hash64(state);
}

/* Validation gets the last tenth. */
static void split(gpt_data_t *d)
{
    d->n_train = d->n - d->n / 10;
}

int gpt_data_synthetic(gpt_data_t *d, size_t n, int vocab, uint64_t seed)
{
    memset(d, 0, sizeof *d);
    d->tokens = malloc(n * sizeof *d->tokens);
    if (!d->tokens)
        return -1;
    d->n = n;
    d->vocab = vocab;
    uint64_t st = seed;
    size_t i = 0;
    /* Token 0 separates sentences; the others count 1 .. vocab - 1. */
    int span = vocab - 1;
    while (i < n) {
        int start = (int)(next(&st) % (uint64_t)span);
        int stride = 1 + (int)(next(&st) % 4);
        int len = 8 + (int)(next(&st) % 17);
        for (int k = 0; k < len && i < n; k++) {
            int v = (start + k * stride) % span;
            if (next(&st) % 10 == 0)            /* noise: one token in ten */
                v = (int)(next(&st) % (uint64_t)span);
            d->tokens[i++] = 1 + v;
        }
        if (i < n)
            d->tokens[i++] = 0;
    }
    split(d);
    return 0;
}

int gpt_data_from_bytes(gpt_data_t *d, const unsigned char *bytes, size_t n)
{
    memset(d, 0, sizeof *d);
    d->tokens = malloc((n ? n : 1) * sizeof *d->tokens);
    if (!d->tokens)
        return -1;
    for (size_t i = 0; i < n; i++)
        d->tokens[i] = bytes[i];
    d->n = n;
    d->vocab = 256;
    split(d);
    return 0;
}

long gpt_data_max_seq(const gpt_data_t *d)
{
    size_t shorter = d->n - d->n_train < d->n_train ? d->n - d->n_train : d->n_train;
    return shorter > (size_t)INT_MAX ? INT_MAX : (long)shorter - 1;
}

size_t gpt_data_min_tokens(int seq)
{
    return 10 * ((size_t)seq + 1);
}

void gpt_data_free(gpt_data_t *d)
{
    free(d->tokens);
    memset(d, 0, sizeof *d);
}

void gpt_data_batch(const gpt_data_t *d, int validation, uint64_t seed, uint64_t step, int B,
                    int T, int32_t *tokens, int32_t *targets)
{
    size_t base = validation ? d->n_train : 0;
    size_t len = validation ? d->n - d->n_train : d->n_train;
    if (T < 1 || (long)T > gpt_data_max_seq(d)) {   /* a caller's bug: see gpt_data_max_seq */
        fprintf(stderr, "gpt_data_batch: sequences of %d tokens do not fit the %s split of %zu "
                "tokens (gpt_data_max_seq: %ld)\n", T, validation ? "validation" : "training",
                len, gpt_data_max_seq(d));
        abort();
    }
    size_t positions = len - (size_t)T;          /* starts with T + 1 tokens after them */
    for (int b = 0; b < B; b++) {
        uint64_t h = cham_splitmix64_hash(seed ^
                                          cham_splitmix64_hash(step * 2 + (uint64_t)validation) ^
                                          cham_splitmix64_hash((uint64_t)b));
        size_t at = base + (size_t)(h % positions);
        memcpy(tokens + (size_t)b * T, d->tokens + at, (size_t)T * sizeof *tokens);
        memcpy(targets + (size_t)b * T, d->tokens + at + 1, (size_t)T * sizeof *targets);
    }
}
