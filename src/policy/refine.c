/* Refinement of a planned policy against its replay (docs/policy.md,
 * "Refinement"). Algorithm 2 places a swap-in after the last memory entry
 * its tensor covers; where entries run up to the use (model state streamed
 * through an optimizer phase of short ops), the copy cannot be hidden and
 * the replay predicts a stall. Issued earlier, the tensor is back sooner
 * and holds memory from then on: each stalled swap-in is tried at earlier
 * ops (1, 2, 4, ... before) while the predicted peak stays within the
 * usable memory, and the op whose replay stalls least in all is kept. */
#include <stdlib.h>
#include <string.h>

#include "policy/generate-impl.h"
#include "policy/policy-impl.h"

static uint64_t total_stall(const cham_policy_t *p)
{
    uint64_t s = 0;
    for (size_t i = 0; i < p->n_items; i++)
        s += p->items[i].stall_ns;
    return s;
}

/* The policy layer holding op k (layers tile the ops in order). */
static uint32_t layer_of(const cham_policy_t *p, uint32_t k)
{
    size_t lo = 0, hi = p->n_layers;
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (p->layers[mid].start_op <= k)
            lo = mid;
        else
            hi = mid;
    }
    return (uint32_t)lo;
}

bool cham_gen_refine(cham_policy_t *p, const cham_gen_layers_t *l, const uint64_t *curve,
                     double h2d_bw, double d2h_bw)
{
    size_t ns = 2 * p->n_ops;
    int64_t *diff = malloc((ns + 1) * sizeof *diff);
    if (!diff || !cham_gen_replay(p, l, p->n_ops, h2d_bw, d2h_bw)) {
        free(diff);
        return false;
    }
    uint64_t best = total_stall(p);
    bool improved = l->timed;    /* Eq. 1's even shares are no clock to refine by */
    for (int pass = 0; pass < 4 && improved && best > 0; pass++) {
        improved = false;
        for (size_t i = 0; i < p->n_items; i++) {
            cham_policy_item_t *it = &p->items[i];
            if (it->recompute || it->stall_ns == 0)
                continue;
            uint32_t orig = it->swap_in_op, at = orig;
            uint32_t lo = it->wraps ? 0 : it->free_op + 1;   /* away over [free_op, swap_in_op) */
            /* The most ops earlier the memory allows (earlier only holds
             * more), by bisection; then 1, 2, 4, ... and that many. */
            uint32_t ok = 0, bad = orig - lo + 1;
            while (bad - ok > 1) {
                uint32_t mid = ok + (bad - ok) / 2;
                it->swap_in_op = orig - mid;
                memset(diff, 0, (ns + 1) * sizeof *diff);
                if (cham_gen_predicted_peak(p, curve, diff) <= p->usable)
                    ok = mid;
                else
                    bad = mid;
            }
            for (uint32_t d = 1; d <= ok; d = d < ok && 2 * d > ok ? ok : 2 * d) {
                it->swap_in_op = orig - d;
                if (!cham_gen_replay(p, l, p->n_ops, h2d_bw, d2h_bw)) {
                    free(diff);
                    return false;
                }
                uint64_t s = total_stall(p);
                if (s < best) {
                    best = s;
                    at = it->swap_in_op;
                }
            }
            improved = improved || at != orig;
            it->swap_in_op = at;
            it->swap_in_layer = layer_of(p, at);
            if (!cham_gen_replay(p, l, p->n_ops, h2d_bw, d2h_bw)) {
                free(diff);
                return false;
            }
        }
    }
    memset(diff, 0, (ns + 1) * sizeof *diff);
    p->predicted_peak = cham_gen_predicted_peak(p, curve, diff);
    p->predicted_step_ns = p->step_ns;
    for (size_t i = 0; i < p->n_items; i++)
        p->predicted_step_ns += p->items[i].stall_ns + p->items[i].recompute_ns;
    free(diff);
    return true;
}
