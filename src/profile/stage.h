/* The stage machine of the lightweight profiler (paper Algorithm 1): at
 * each step end it compares the step's op-token sequence with the previous
 * step's and moves WarmUp -> GenPolicy -> Stable, or back to WarmUp.
 * How sequences of different lengths are compared: docs/profiler.md. */
#ifndef CHAM_PROFILE_STAGE_H
#define CHAM_PROFILE_STAGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "chameleon/types.h"     /* cham_stage_t, cham_op_token_t */

/* Invariant: prev holds the previous step's sequence (prev_len tokens)
 * once have_prev is set. */
typedef struct cham_stage_machine {
    uint32_t m, n;               /* stable steps before GenPolicy / Stable */
    double length_tolerance;     /* |len - prev_len| / prev_len must be below */
    double cosine_threshold;     /* cosine similarity must be above */
    cham_stage_t stage;
    uint32_t stable_steps;       /* StableStep of Algorithm 1 */
    cham_op_token_t *prev;
    size_t prev_len, prev_cap;
    cham_op_token_t *prev_canon;  /* its canonical sequence */
    size_t prev_canon_len, prev_canon_cap;
    bool have_prev;
    /* What the last step's comparison found (for logs and tests). */
    double last_cosine;
    double last_length_change;
} cham_stage_machine_t;

void cham_stage_machine_init(cham_stage_machine_t *sm, uint32_t m, uint32_t n,
                             double length_tolerance, double cosine_threshold);
void cham_stage_machine_free(cham_stage_machine_t *sm);

/* Algorithm 1 for one finished step; returns the new stage. Returns the
 * current stage unchanged and false in *ok when the host is out of memory
 * (the sequence could not be kept). Beyond the paper, a step whose
 * canonical sequence (canon, canon_len tokens) is the one before's is
 * the same step whatever its sequence (layers skipped at random). */
cham_stage_t cham_stage_machine_step(cham_stage_machine_t *sm, const cham_op_token_t *seq,
                                     size_t len, const cham_op_token_t *canon, size_t canon_len,
                                     bool *ok);

/* The canonical sequence of seq (n tokens, blocks[i] op i's block, -1:
 * none) written to out (room for n): each run of consecutive blocks that
 * run the same tokens written once (canon.c). Returns its length. */
size_t cham_sequence_canonical(const cham_op_token_t *seq, const int32_t *blocks, size_t n,
                               cham_op_token_t *out);

/* |len - prev_len| / prev_len, the length change Algorithm 1 bounds (0 for
 * two empty sequences, infinite from an empty one). */
double cham_sequence_length_change(size_t len, size_t prev_len);

/* Cosine similarity of two token sequences as defined in docs/profiler.md;
 * 1 for two empty sequences. */
double cham_sequence_cosine(const cham_op_token_t *a, size_t na, const cham_op_token_t *b,
                            size_t nb);

#endif
