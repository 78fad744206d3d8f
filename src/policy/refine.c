/* Refinement of a planned policy against its replay (docs/policy.md,
 * "Refinement"). Algorithm 2 places a swap-in after the last memory entry
 * its tensor covers; where entries run up to the use (model state streamed
 * through an optimizer phase of short ops), the copy cannot be hidden and
 * the replay predicts a stall. Issued earlier, the tensor is back sooner
 * and holds memory from then on: each stalled swap-in is tried at earlier
 * ops (1, 2, 4, ... before, and the earliest the usable memory allows),
 * and the op whose replay stalls least in all is kept. */
#include <stdlib.h>

#include "policy/generate-impl.h"
#include "policy/policy-impl.h"

/* The most work refinement does: replays times (ops + items) each, some
 * 0.1 s on this project's machine (docs/policy.md, "Refinement"). */
#define REFINE_WORK (UINT64_C(1) << 26)

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

/* The most ops before op `at` (down to `lo`) the swap-in of `bytes` may
 * move while the memory stays within usable: the samples it would add to
 * are [2 (at - d), 2 at). */
static uint32_t room_before(const int64_t *mem, uint32_t at, uint32_t lo, uint64_t bytes,
                            uint64_t usable)
{
    uint32_t d = 0;
    while (at - d > lo && mem[2 * (size_t)(at - d) - 1] + (int64_t)bytes <= (int64_t)usable &&
           mem[2 * (size_t)(at - d) - 2] + (int64_t)bytes <= (int64_t)usable)
        d++;
    return d;
}

/* A stalled item: the longest stall first, then item order. */
typedef struct stalled {
    uint64_t stall_ns;
    uint32_t item;
} stalled_t;

static int by_stall(const void *a, const void *b)
{
    const stalled_t *x = a, *y = b;
    if (x->stall_ns != y->stall_ns)
        return x->stall_ns > y->stall_ns ? -1 : 1;
    return (x->item > y->item) - (x->item < y->item);
}

bool cham_gen_refine(cham_policy_t *p, const cham_gen_layers_t *l, const uint64_t *curve,
                     double h2d_bw, double d2h_bw)
{
    /* Eq. 1's even shares are no clock to refine by; a policy that does
     * not fit leaves the rest to passive swaps, which the replay does not
     * see. */
    if (!l->timed || p->predicted_peak > p->usable)
        return true;
    cham_gen_replayer_t r;
    int64_t *mem = malloc((2 * p->n_ops + 1) * sizeof *mem);
    stalled_t *order = malloc((p->n_items ? p->n_items : 1) * sizeof *order);
    if (!mem || !order || !cham_gen_replayer_init(&r, p)) {
        free(mem);
        free(order);
        return false;
    }
    cham_gen_predicted_memory(p, curve, mem);   /* kept as swap-ins move */
    cham_gen_replayer_run(&r, p, l, p->n_ops, h2d_bw, d2h_bw);
    uint64_t best = total_stall(p);
    /* Replays cost ops + items each: at most REFINE_WORK of that in all. */
    uint64_t per_run = p->n_ops + p->n_items + 1, runs_left = REFINE_WORK / per_run;
    bool moved = true;
    for (int pass = 0; pass < 4 && moved && best > 0 && runs_left > 0; pass++) {
        moved = false;
        size_t n = 0;
        for (size_t i = 0; i < p->n_items; i++)
            if (!p->items[i].recompute && p->items[i].stall_ns > 0)
                order[n++] = (stalled_t){p->items[i].stall_ns, (uint32_t)i};
        qsort(order, n, sizeof *order, by_stall);
        for (size_t j = 0; j < n && runs_left > 0; j++) {
            uint32_t i = order[j].item;
            cham_policy_item_t *it = &p->items[i];
            uint32_t orig = it->swap_in_op, at = orig;
            uint32_t lo = it->wraps ? 0 : it->free_op + 1;   /* away over [free_op, swap_in_op) */
            uint32_t most = orig > lo ? room_before(mem, orig, lo, it->bytes, p->usable) : 0;
            for (uint32_t d = 1; d <= most && runs_left > 0;
                 d = d < most && 2 * d > most ? most : 2 * d) {
                it->swap_in_op = orig - d;
                cham_gen_replayer_move_in(&r, i, it->swap_in_op);
                cham_gen_replayer_run(&r, p, l, p->n_ops, h2d_bw, d2h_bw);
                runs_left--;
                uint64_t s = total_stall(p);
                if (s < best) {
                    best = s;
                    at = it->swap_in_op;
                }
            }
            it->swap_in_op = at;
            it->swap_in_layer = layer_of(p, at);
            cham_gen_replayer_move_in(&r, i, at);
            cham_gen_replayer_run(&r, p, l, p->n_ops, h2d_bw, d2h_bw);
            for (size_t s = 2 * (size_t)at; s < 2 * (size_t)orig; s++)
                mem[s] += (int64_t)it->bytes;
            moved = moved || at != orig;
        }
    }
    p->predicted_peak = cham_gen_peak_of(mem, p->n_ops);
    p->predicted_step_ns = cham_gen_predicted_step(p, l);
    cham_gen_replayer_free(&r);
    free(mem);
    free(order);
    return true;
}
