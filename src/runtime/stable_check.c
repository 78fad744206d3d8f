/* The kept policy measured in Stable (docs/executor.md, "The kept policy
 * checked in Stable"). A trial is timed alone, from an idle device, after
 * a step of another policy; in Stable the same policy runs step after
 * step, its blocks placed where its own step before left room. Where that
 * makes it slower than its trial said, the next trial by time may be the
 * faster policy in the loop: it is applied in turn, and the policy whose
 * Stable steps measure least is kept. */
#include <stdint.h>

#include "common/assert.h"
#include "runtime/runtime-impl.h"

void cham_check_start(cham_check_t *k, const cham_trial_t *trials, size_t n, cham_plan_t *kept,
                      uint32_t class_id)
{
    cham_check_clear(k);
    uint64_t kept_ns = 0;
    bool kept_clean = true;
    for (size_t i = 0; i < n; i++)
        if (trials[i].plan == kept) {
            kept_ns = trials[i].step_ns;
            kept_clean = cham_trial_clean(&trials[i]);
        }
    if (!kept || !kept_ns)
        return;
    k->cand[k->n++] = (cham_check_candidate_t){.plan = cham_plan_retain(kept),
                                               .trial_ns = kept_ns, .clean = kept_clean};
    /* The others that covered their step, fastest first; where the kept
     * one did not, any others: like is measured against like, and one
     * that ran short in its trial may run better in Stable, its passive
     * swaps placed where its own step before left room. The places left
     * go to the others that ran short, fastest first: they are tried only
     * where the best measured runs out in Stable too. */
    for (int pass = 0; pass < 2; pass++)
        while (k->n < CHAM_CHECK_CANDIDATES) {
            const cham_trial_t *next = NULL;
            for (size_t i = 0; i < n; i++) {
                const cham_trial_t *t = &trials[i];
                bool taken = false;
                for (size_t j = 0; j < k->n; j++)
                    taken |= k->cand[j].plan == t->plan;
                if (!taken && t->step_ns && (cham_trial_clean(t) || !kept_clean || pass) &&
                    (!next || t->step_ns < next->step_ns))
                    next = t;
            }
            if (!next)
                break;
            k->cand[k->n++] = (cham_check_candidate_t){
                .plan = cham_plan_retain(next->plan), .trial_ns = next->step_ns,
                .clean = cham_trial_clean(next)};
        }
    if (k->n < 2) {
        cham_check_clear(k);   /* nothing to compare the kept policy with */
    } else {
        k->class_id = class_id;
        k->work_ref = trials[0].plan->work_ns;    /* as the trials' times are */
    }
}

/* Of the candidates measured so far, the fastest that ran clean in
 * Stable when it is close to the fastest (cham_clean_is_close), else the
 * fastest; SIZE_MAX when none is measured. */
static size_t best_measured(const cham_check_t *k)
{
    size_t best = SIZE_MAX, clean = SIZE_MAX;
    for (size_t i = 0; i <= k->at; i++) {
        if (!k->cand[i].stable_ns)
            continue;
        if (best == SIZE_MAX || k->cand[i].stable_ns < k->cand[best].stable_ns)
            best = i;
        if (!k->cand[i].ran_out &&
            (clean == SIZE_MAX || k->cand[i].stable_ns < k->cand[clean].stable_ns))
            clean = i;
    }
    return clean != SIZE_MAX && cham_clean_is_close(k->cand[clean].stable_ns,
                                                    k->cand[best].stable_ns) ? clean : best;
}

cham_plan_t *cham_check_abandon(const cham_check_t *k, uint32_t *class_id)
{
    *class_id = k->class_id;
    size_t best = k->n && !k->done ? best_measured(k) : SIZE_MAX;
    return best == SIZE_MAX ? NULL : k->cand[best].plan;
}

cham_check_verdict_t cham_check_sample(cham_check_t *k, uint64_t step_ns, bool passive,
                                       cham_plan_t **plan)
{
    CHAM_ASSERT(k->n > 0 && k->at < k->n);
    *plan = k->cand[k->at].plan;
    k->sum_ns += step_ns;
    /* A policy that ran out of memory in Stable runs out again, where its
     * trial had not: the steps already timed say what it takes, and the
     * next candidate need not wait for more of them. */
    k->cand[k->at].ran_out |= passive;
    if (++k->n_samples < CHAM_CHECK_STEPS && !passive)
        return CHAM_CHECK_MEASURING;
    k->cand[k->at].stable_ns = k->sum_ns / k->n_samples;
    k->sum_ns = 0;
    k->n_samples = 0;
    size_t best = best_measured(k);
    /* The next one is tried where its trial beats what the best so far
     * measures by more than noise (each try costs its Stable steps), or
     * where the best so far runs out of memory in Stable and the next,
     * clean, would be kept over it if it ran as its trial did: one slower
     * than that cannot win, and its try only costs steps. One that ran
     * short in its trial, beside a kept one that did not, only where the
     * best so far runs out and its trial beats it: a clean policy is not
     * given up for one that needed passive swaps unless the clean one
     * needs them too (llama2-7b ZeRO-3 on the H100 at 28 GiB, swaps only,
     * classic: a kept policy that ran 2.391 s with a few passive swaps
     * tried, for closeness alone, one whose trial took 2.414 s with some,
     * and went back to it two steps later). */
    uint64_t m = k->cand[best].stable_ns;
    bool out = k->cand[best].ran_out;
    for (size_t j = k->at + 1; j < k->n; j++) {
        const cham_check_candidate_t *c = &k->cand[j];
        bool like = c->clean || !k->cand[0].clean;    /* not one in reserve */
        if (!like && !out)
            continue;
        if (c->trial_ns < m - m / 100 || (out && like && cham_clean_is_close(c->trial_ns, m))) {
            k->at = j;
            *plan = c->plan;
            return CHAM_CHECK_TRY_NEXT;
        }
    }
    k->at = best;
    k->done = true;
    *plan = k->cand[best].plan;
    return CHAM_CHECK_DONE;
}

void cham_check_clear(cham_check_t *k)
{
    for (size_t i = 0; i < k->n; i++)
        cham_plan_release(k->cand[i].plan);
    *k = (cham_check_t){0};
}
