/* Sequence classes (docs/profiler.md, "Sequence classes"): the recurring
 * op sequences of a loop that changes every few steps (gradient
 * accumulation, an evaluation every k steps, skipped updates), each with
 * its own policy, and a prediction of the next step's class from the
 * history of classes. The loop (loop_classes.c) decides what to apply. */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "common/assert.h"
#include "runtime/runtime-impl.h"

enum { CONTEXT_MAX = 16 };       /* the longest run of classes matched */
enum { SCORED_MIN = 32 };        /* steps scored before the scores decide */

static uint64_t fingerprint(const cham_op_token_t *seq, size_t len)
{
    uint64_t h = 0xcbf29ce484222325u;
    for (size_t i = 0; i < len; i++) {
        h ^= (uint32_t)seq[i];
        h *= 0x100000001b3u;
    }
    return h;
}

/* Would the stage machine count each of a and b, after the other, as the
 * same sequence? Its length change is relative to the step before, so
 * near the tolerance one order may pass and the other not; a class must
 * hold steps the stage machine never tells apart (Llama 2 8 layers, PP 2,
 * main-grads, an overflow every 4 steps: 99 ops after 104 changed 4.8%,
 * 104 after 99 5.05%; with one class for both, Algorithm 1 went back to
 * WarmUp after every overflow step and no policy was ever kept). */
static bool alike(const cham_context_t *ctx, const cham_op_token_t *a, size_t na,
                  const cham_op_token_t *b, size_t nb)
{
    double tol = ctx->config.length_tolerance;
    return cham_sequence_length_change(na, nb) < tol &&
           cham_sequence_length_change(nb, na) < tol &&
           cham_sequence_cosine(a, na, b, nb) > ctx->config.cosine_threshold;
}

static bool same(const cham_op_token_t *a, size_t na, uint64_t fa, const cham_op_token_t *b,
                 size_t nb, uint64_t fb)
{
    return fa == fb && na == nb && (na == 0 || memcmp(a, b, na * sizeof *a) == 0);
}

/* The same sequence first, else the same canonical one (the class's steps
 * then vary), else one alike (the most recently used). */
static cham_class_t *find(cham_context_t *ctx, const cham_op_token_t *seq, size_t len,
                          const cham_op_token_t *canon, size_t canon_len)
{
    uint64_t fp = fingerprint(seq, len), canon_fp = fingerprint(canon, canon_len);
    for (size_t i = 0; i < ctx->n_classes; i++) {
        cham_class_t *c = &ctx->classes[i];
        if (same(c->seq, c->len, c->fingerprint, seq, len, fp))
            return c;
    }
    for (size_t i = 0; canon_len && i < ctx->n_classes; i++) {
        cham_class_t *c = &ctx->classes[i];
        if (same(c->canon, c->canon_len, c->canon_fp, canon, canon_len, canon_fp)) {
            c->varies = true;
            return c;
        }
    }
    cham_class_t *best = NULL;
    for (size_t i = 0; i < ctx->n_classes; i++) {
        cham_class_t *c = &ctx->classes[i];
        if ((!best || c->last_used > best->last_used) && alike(ctx, seq, len, c->seq, c->len))
            best = c;
    }
    return best;
}

void cham_class_drop_trials(cham_class_t *c)
{
    for (size_t i = 0; i < c->n_trials; i++)
        cham_plan_release(c->trials[i].plan);
    c->n_trials = 0;
}

static void forget(cham_class_t *c)
{
    cham_class_drop_trials(c);
    free(c->trials);
    free(c->seq);
    free(c->canon);
    cham_profile_free(c->heaviest);
    cham_plan_release(c->kept);
    cham_plan_release(c->next_trial);
    cham_plan_release(c->uncovered);
    memset(c, 0, sizeof *c);
}

/* A copy of seq (len tokens; a step of no ops has none: seq NULL). */
static cham_op_token_t *copy_of(const cham_op_token_t *seq, size_t len)
{
    cham_op_token_t *copy = malloc((len ? len : 1) * sizeof *copy);
    if (copy && len)
        memcpy(copy, seq, len * sizeof *seq);
    return copy;
}

cham_class_t *cham_class_of(cham_context_t *ctx, const cham_op_token_t *seq, size_t len,
                            const cham_op_token_t *canon, size_t canon_len)
{
    cham_class_t *c = find(ctx, seq, len, canon, canon_len);
    if (c)
        return c;
    uint32_t cap = ctx->config.policy_cache;
    CHAM_ASSERT(cap > 0);
    if (!ctx->classes && !(ctx->classes = calloc(cap, sizeof *ctx->classes)))
        return NULL;
    cham_op_token_t *copy = copy_of(seq, len), *canon_copy = copy_of(canon, canon_len);
    if (!copy || !canon_copy) {
        free(copy);
        free(canon_copy);
        return NULL;
    }
    if (ctx->n_classes < cap) {
        c = &ctx->classes[ctx->n_classes++];
    } else {                      /* full: the least recently used goes */
        c = &ctx->classes[0];
        for (size_t i = 1; i < ctx->n_classes; i++)
            if (ctx->classes[i].last_used < c->last_used)
                c = &ctx->classes[i];
        cham_context_log(ctx, "step %llu: class %u forgotten (least recently used of %u)",
                         (unsigned long long)ctx->number, c->id, cap);
        forget(c);
    }
    *c = (cham_class_t){.id = ++ctx->next_class_id, .seq = copy, .len = len,
                        .fingerprint = fingerprint(seq, len), .canon = canon_copy,
                        .canon_len = canon_len, .canon_fp = fingerprint(canon, canon_len),
                        .last_used = ctx->step};
    return c;
}

cham_class_t *cham_class_by_id(cham_context_t *ctx, uint32_t id)
{
    for (size_t i = 0; id && i < ctx->n_classes; i++)
        if (ctx->classes[i].id == id)
            return &ctx->classes[i];
    return NULL;
}

enum { PERIOD_GAPS = 4 };         /* the most recent gaps a period must match */

/* A class that recurs every k > 1 steps: k when its last gaps in the
 * history (up to PERIOD_GAPS of them; one when it was seen only twice) are
 * all k, else 0 (a class seen at irregular steps is taken for periodic
 * once, then no longer). *next is the history position it is due at. */
static size_t period_of(const cham_context_t *ctx, uint32_t id, size_t *next)
{
    const uint32_t *h = ctx->history;
    size_t seen = 0, newest = 0, prev = 0, gap = 0;
    for (size_t j = ctx->n_history; j-- > 0 && seen <= PERIOD_GAPS;) {
        if (h[j] != id)
            continue;
        if (seen == 0)
            newest = j;
        else if (seen == 1)
            gap = prev - j;
        else if (prev - j != gap)
            return 0;
        prev = j;
        seen++;
    }
    if (seen < 2 || gap < 2)
        return 0;
    *next = newest + gap;
    return gap;
}

/* A periodic class that is not due next: the context's votes for it are
 * the beat of its period, not a prediction (a run of training steps is
 * followed by an evaluation once in every period). */
static bool off_beat(const cham_context_t *ctx, uint32_t id)
{
    size_t next;
    return period_of(ctx, id, &next) && next != ctx->n_history;
}

/* A periodic class due next, the longest period first (*period): a rarer
 * class is the more specific one (an evaluation every 10 steps over
 * accumulation every 2). */
static cham_class_t *due(cham_context_t *ctx, uint32_t *period)
{
    cham_class_t *d = NULL;
    for (size_t i = 0; i < ctx->n_classes; i++) {
        size_t next, k = period_of(ctx, ctx->classes[i].id, &next);
        if (k > *period && next == ctx->n_history)
            d = &ctx->classes[i], *period = (uint32_t)k;
    }
    return d;
}

/* What most often followed the earlier runs of classes equal to the last
 * ones (*context the run's length). */
static cham_class_t *by_context(cham_context_t *ctx, uint32_t *context)
{
    const uint32_t *h = ctx->history;
    size_t n = ctx->n_history;
    size_t longest = n > CONTEXT_MAX ? CONTEXT_MAX : n ? n - 1 : 0;
    for (size_t len = longest; len >= 1; len--) {
        /* Every earlier run h[end - len + 1 .. end] equal to the last len
         * classes votes for what came after it; the most votes win, the
         * latest on a tie (the newest run is seen first). */
        uint32_t ids[CHAM_CLASS_HISTORY], votes[CHAM_CLASS_HISTORY];
        size_t k = 0;
        for (size_t end = n - 1; end-- >= len;) {
            if (memcmp(h + end + 1 - len, h + n - len, len * sizeof *h) != 0)
                continue;
            size_t i = 0;
            while (i < k && ids[i] != h[end + 1])
                i++;
            if (i == k)
                ids[k++] = h[end + 1], votes[i] = 0;
            votes[i]++;
        }
        size_t best = k;
        uint32_t total = 0;
        for (size_t i = 0; i < k; i++) {
            if (off_beat(ctx, ids[i]))
                continue;
            total += votes[i];
            if (cham_class_by_id(ctx, ids[i]) && (best == k || votes[i] > votes[best]))
                best = i;
        }
        /* A longer run decides only when it has been followed by that class
         * twice, and in most of its occurrences: otherwise the match may be
         * chance, and a shorter run, seen more often, decides. */
        if (best < k && (len == 1 || (votes[best] >= 2 && 2 * votes[best] > total))) {
            *context = (uint32_t)len;
            return cham_class_by_id(ctx, ids[best]);
        }
    }
    return NULL;
}

/* The class seen most often in the history, the latest on a tie. */
static cham_class_t *most_frequent(cham_context_t *ctx)
{
    cham_class_t *best = NULL;
    uint32_t best_n = 0;
    for (size_t i = ctx->n_history; i-- > 0;) {
        uint32_t id = ctx->history[i], n = 0;
        for (size_t j = 0; j < ctx->n_history; j++)
            n += ctx->history[j] == id;
        cham_class_t *c = n > best_n ? cham_class_by_id(ctx, id) : NULL;
        if (c)
            best = c, best_n = n;
    }
    return best;
}

static int hits(uint32_t mask)
{
    int n = 0;
    for (; mask; mask &= mask - 1)
        n++;
    return n;
}

void cham_class_seen(cham_context_t *ctx, cham_class_t *c)
{
    /* Whether the context and the most frequent class would have
     * predicted this step right: cham_class_predict trusts the better. */
    uint32_t context;
    ctx->context_hits = ctx->context_hits << 1 | (by_context(ctx, &context) == c);
    ctx->frequent_hits = ctx->frequent_hits << 1 | (most_frequent(ctx) == c);
    ctx->scored += ctx->scored < SCORED_MIN;
    c->seen++;
    c->last_used = ctx->step;
    if (ctx->n_history == CHAM_CLASS_HISTORY) {     /* keep the newer half */
        size_t half = CHAM_CLASS_HISTORY / 2;
        memmove(ctx->history, ctx->history + half, half * sizeof *ctx->history);
        ctx->n_history = half;
    }
    ctx->history[ctx->n_history++] = c->id;
}

cham_class_t *cham_class_predict(cham_context_t *ctx, uint32_t *context, uint32_t *period)
{
    *context = *period = 0;
    cham_class_t *d = due(ctx, period);
    if (d)
        return d;
    /* Where the classes come at random (layers skipped at random), a run
     * of classes followed alike twice may be chance, and the context
     * predicts worse than the most frequent class would have: over the
     * last 32 steps, the one that would have been right more often (a
     * step with no context counts against it: the loop then takes the
     * class before for a passing change), once SCORED_MIN steps were
     * scored: before, a loop's periods and runs have not been seen yet. */
    if (ctx->scored == SCORED_MIN && hits(ctx->frequent_hits) > hits(ctx->context_hits))
        return most_frequent(ctx);
    return by_context(ctx, context);
}

void cham_classes_free(cham_context_t *ctx)
{
    for (size_t i = 0; i < ctx->n_classes; i++)
        forget(&ctx->classes[i]);
    free(ctx->classes);
    ctx->classes = NULL;
    ctx->n_classes = 0;
}
