/* A step's canonical op sequence (stage.h; docs/profiler.md, "Canonical
 * sequences"): its op tokens with each run of consecutive blocks
 * (cham_set_block) that run the same tokens written once. Steps that
 * skip layers at random (stochastic depth), or that run a model at
 * another depth, differ in how many blocks each such run has, not in what
 * they run: their canonical sequences are the same. */
#include "profile/stage.h"

#include <string.h>

#include "common/assert.h"

size_t cham_sequence_canonical(const cham_op_token_t *seq, const int32_t *blocks, size_t n,
                               cham_op_token_t *out)
{
    CHAM_ASSERT((seq && blocks && out) || n == 0);
    size_t m = 0;
    size_t kept_at = 0, kept_len = 0;   /* the last block written, in out */
    int32_t prev_block = -1;            /* the block of the ops just before */
    for (size_t i = 0, j; i < n; i = j) {
        for (j = i + 1; j < n && blocks[j] == blocks[i];)
            j++;
        size_t len = j - i;
        bool again = blocks[i] >= 0 && prev_block >= 0 && len == kept_len &&
                     memcmp(out + kept_at, seq + i, len * sizeof *seq) == 0;
        prev_block = blocks[i];
        if (again)
            continue;
        memcpy(out + m, seq + i, len * sizeof *seq);
        kept_at = m;
        kept_len = len;
        m += len;
    }
    return m;
}
