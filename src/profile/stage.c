/* The stage machine of the lightweight profiler (stage.h): paper Algorithm 1
 * as written, and the cosine similarity of two op-token sequences that it
 * uses. Why the cosine is defined the way it is: docs/profiler.md. */
#include "profile/stage.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/assert.h"
#include "common/grow.h"

void cham_stage_machine_init(cham_stage_machine_t *sm, uint32_t m, uint32_t n,
                             double length_tolerance, double cosine_threshold)
{
    CHAM_ASSERT(sm);
    CHAM_ASSERT(!isnan(length_tolerance) && !isnan(cosine_threshold));
    memset(sm, 0, sizeof *sm);
    sm->m = m;
    sm->n = n;
    sm->length_tolerance = length_tolerance;
    sm->cosine_threshold = cosine_threshold;
    sm->stage = CHAM_STAGE_WARMUP;    /* PrevStage <- WarmUp */
    sm->last_cosine = 1.0;
}

void cham_stage_machine_free(cham_stage_machine_t *sm)
{
    CHAM_ASSERT(sm);
    free(sm->prev);
    free(sm->prev_canon);
    memset(sm, 0, sizeof *sm);
}

/* Cosine similarity of the one-hot encodings of a and b, the shorter one
 * zero-padded where the two diverge (docs/profiler.md, "Cosine similarity"):
 *
 *   P = the length of the longest common prefix,
 *   S = the length of the longest common suffix, at most min(na, nb) - P,
 *   M = P + S + #{ i < min(na, nb) - P - S : a[P + i] == b[P + i] },
 *   cosine = M / sqrt(na * nb).
 *
 * For equal lengths this is the fraction of positions holding the same op.
 * M is an exact integer, so the result is deterministic: one division (and
 * one square root when the lengths differ), no summation order to fix. */
double cham_sequence_cosine(const cham_op_token_t *a, size_t na, const cham_op_token_t *b,
                            size_t nb)
{
    CHAM_ASSERT(a || na == 0);
    CHAM_ASSERT(b || nb == 0);
    if (na == 0 && nb == 0)
        return 1.0;                   /* two empty steps are the same step */
    if (na == 0 || nb == 0)
        return 0.0;                   /* a zero vector shares nothing */
    size_t shorter = na < nb ? na : nb;
    size_t prefix = 0;
    while (prefix < shorter && a[prefix] == b[prefix])
        prefix++;
    size_t suffix = 0;
    while (prefix + suffix < shorter && a[na - 1 - suffix] == b[nb - 1 - suffix])
        suffix++;
    size_t matches = prefix + suffix;
    for (size_t i = prefix; i < shorter - suffix; i++)
        matches += a[i] == b[i];
    if (na == nb)
        return (double)matches / (double)na;      /* exactly 1 when identical */
    return (double)matches / sqrt((double)na * (double)nb);
}

/* diff(len(OpSeq), len(PrevOpSeq)) of Algorithm 1: |len - prev_len| / prev_len;
 * 0 from empty to empty, infinite from empty to non-empty. */
double cham_sequence_length_change(size_t len, size_t prev_len)
{
    if (prev_len == 0)
        return len == 0 ? 0.0 : INFINITY;
    size_t d = len > prev_len ? len - prev_len : prev_len - len;
    return (double)d / (double)prev_len;
}

/* Room for n tokens in *buf (capacity *cap); false out of host memory. */
static bool room(cham_op_token_t **buf, size_t *cap, size_t n)
{
    if (n <= *cap)
        return true;
    cham_op_token_t *p = cham_grow(*buf, cap, n, sizeof *p, 256);
    if (p)
        *buf = p;
    return p != NULL;
}

cham_stage_t cham_stage_machine_step(cham_stage_machine_t *sm, const cham_op_token_t *seq,
                                     size_t len, const cham_op_token_t *canon, size_t canon_len,
                                     bool *ok)
{
    CHAM_ASSERT(sm && ok);
    CHAM_ASSERT(seq || len == 0);
    CHAM_ASSERT(canon || canon_len == 0);
    /* Room for the copies first: when there is none, nothing has changed. */
    if (!room(&sm->prev, &sm->prev_cap, len) ||
        !room(&sm->prev_canon, &sm->prev_canon_cap, canon_len)) {
        *ok = false;
        return sm->stage;
    }
    *ok = true;

    /* static PrevOpSeq <- OpSeq: the very first step is compared with itself. */
    const cham_op_token_t *prev = sm->have_prev ? sm->prev : seq;
    size_t prev_len = sm->have_prev ? sm->prev_len : len;
    sm->last_length_change = cham_sequence_length_change(len, prev_len);
    sm->last_cosine = cham_sequence_cosine(seq, len, prev, prev_len);

    bool same_canon = sm->have_prev && canon_len && canon_len == sm->prev_canon_len &&
                      memcmp(canon, sm->prev_canon, canon_len * sizeof *canon) == 0;
    if (same_canon || (sm->last_length_change < sm->length_tolerance &&
                       sm->last_cosine > sm->cosine_threshold)) {
        /* In Stable the count goes on as in Algorithm 1, where nothing reads
         * it any more; it saturates instead of wrapping. */
        if (sm->stable_steps < UINT32_MAX)
            sm->stable_steps++;
        if (sm->stage == CHAM_STAGE_WARMUP && sm->stable_steps > sm->m) {
            sm->stage = CHAM_STAGE_GENPOLICY;
            sm->stable_steps = 0;
        } else if (sm->stage == CHAM_STAGE_GENPOLICY && sm->stable_steps > sm->n) {
            sm->stage = CHAM_STAGE_STABLE;
        }
        /* otherwise Stage = PrevStage */
    } else {
        sm->stage = CHAM_STAGE_WARMUP;
        sm->stable_steps = 0;
    }

    /* PrevStage, PrevOpSeq <- Stage, OpSeq */
    if (len > 0)
        memcpy(sm->prev, seq, len * sizeof *seq);
    sm->prev_len = len;
    if (canon_len > 0)
        memcpy(sm->prev_canon, canon, canon_len * sizeof *canon);
    sm->prev_canon_len = canon_len;
    sm->have_prev = true;
    return sm->stage;
}
