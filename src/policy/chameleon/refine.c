/* Refinement of a planned policy against its replay (docs/policy.md,
 * "Refinement"). Placement gives a block back where its copy out is
 * predicted done, by the step's end at the latest; model state leaves in
 * the short optimizer phase, and the compute stream waits there for the
 * copies. So the blocks whose reuse waits are given back later, where
 * their copies end, into the next step's forward where the memory has
 * room, all at once (one at a time only moves the wait to the next).
 * And placement puts a swap-in after the last memory entry its tensor
 * covers; where entries run up to the use (model state streamed through
 * an optimizer phase of short ops), the copy cannot be hidden: each
 * stalled swap-in is tried at earlier ops (1, 2, 4, ... before, and the
 * earliest the usable memory allows), and the op whose replay stalls
 * least in all is kept. */
#include <stdlib.h>

#include "policy/chameleon/chameleon-impl.h"
#include "policy/policy-impl.h"

/* The most work refinement does: replays times (ops + items) each, some
 * 0.1 s on this project's machine (docs/policy.md, "Refinement"). */
#define REFINE_WORK (UINT64_C(1) << 26)

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

/* What one refinement works on. */
typedef struct refiner {
    cham_policy_t *p;
    const cham_gen_layers_t *l;
    cham_gen_replayer_t r;       /* r.op_begin: refinement's buffer */
    int64_t *mem;                /* predicted memory, kept as items move */
    uint64_t best, runs_left;    /* the least total stall; replays left */
    double h2d_bw, d2h_bw;
} refiner_t;

/* Holds item i's block over ops [from, to) (from n on, the next step's). */
static void hold(refiner_t *f, uint32_t i, uint32_t from, uint32_t to)
{
    size_t n = f->p->n_ops;
    for (uint32_t k = from; k < to; k++) {
        f->mem[2 * (k % n)] += (int64_t)f->p->items[i].bytes;
        f->mem[2 * (k % n) + 1] += (int64_t)f->p->items[i].bytes;
    }
}

/* A stalled swap-in earlier, as far as the memory allows: tried at 1, 2,
 * 4, ... ops before and the earliest; the op whose replay stalls least in
 * all is kept (the one it had when none beats it). */
static bool move_in(refiner_t *f, uint32_t i)
{
    cham_policy_item_t *it = &f->p->items[i];
    size_t n = f->p->n_ops;
    uint32_t orig = it->swap_in_op, at = orig;
    /* away over [free_op, swap_in_op), or from the step's start */
    uint32_t lo = it->free_op > n ? it->free_op - (uint32_t)n + 1 : it->wraps ? 0 : it->free_op + 1;
    uint32_t most = orig > lo ? room_before(f->mem, orig, lo, it->bytes, f->p->usable) : 0;
    for (uint32_t d = 1; d <= most && f->runs_left > 0;
         d = d < most && 2 * d > most ? most : 2 * d) {
        it->swap_in_op = orig - d;
        cham_gen_replayer_move(&f->r, i, it->swap_in_op, false);
        cham_gen_replayer_run(&f->r, f->p, f->l, n, f->h2d_bw, f->d2h_bw);
        f->runs_left--;
        uint64_t s = cham_gen_total_stall(f->p);
        if (s < f->best) {
            f->best = s;
            at = it->swap_in_op;
        }
    }
    it->swap_in_op = at;
    it->swap_in_layer = layer_of(f->p, at);
    cham_gen_replayer_move(&f->r, i, at, false);
    cham_gen_replayer_run(&f->r, f->p, f->l, n, f->h2d_bw, f->d2h_bw);
    hold(f, i, at, orig);
    return at != orig;
}

/* The most ops after free_op the block of `bytes` may stay while the
 * memory stays within usable, up to `last` (ops from n on are the next
 * step's: its samples are those of this one, from 0). */
static uint32_t room_after(const int64_t *mem, size_t n, uint32_t free_op, uint32_t last,
                           uint64_t bytes, uint64_t usable)
{
    uint32_t d = 0;
    for (; free_op + d < last; d++) {
        size_t k = (free_op + d) % n;
        if (mem[2 * k] + (int64_t)bytes > (int64_t)usable ||
            mem[2 * k + 1] + (int64_t)bytes > (int64_t)usable)
            break;
    }
    return d;
}

/* When op k was reached by the last replay's clock, less its waits for
 * copies out before it when `less_waits` (k from n on: the next step's,
 * run after this one): never decreasing in k. */
static uint64_t clock_of(const refiner_t *f, size_t k, bool less_waits)
{
    size_t n = f->p->n_ops;
    if (k >= n)
        return f->r.end - (less_waits ? f->r.out_waited : 0) + clock_of(f, k - n, less_waits);
    return less_waits ? f->r.op_begin[k] : f->r.op_at[k];
}

/* The first op from `lo` on reached at t or later by that clock; 2 n when
 * none is. A block whose copy ends at t is given back without a wait
 * after the op before it (the replay waits for it before op free_op + 1). */
static size_t first_reached(const refiner_t *f, bool less_waits, size_t lo, uint64_t t)
{
    size_t hi = 2 * f->p->n_ops;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (clock_of(f, mid, less_waits) >= t)
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

/* Every free back where `was` had it, the memory and the replay with them. */
static void undo_frees(refiner_t *f, const uint64_t *curve, const uint32_t *was)
{
    cham_policy_t *p = f->p;
    for (size_t i = 0; i < p->n_items; i++)
        if (p->items[i].free_op != was[i]) {
            p->items[i].free_op = was[i];
            cham_gen_replayer_move(&f->r, (uint32_t)i, was[i], true);
        }
    cham_gen_predicted_memory(p, curve, f->mem);
    cham_gen_replayer_run(&f->r, p, f->l, p->n_ops, f->h2d_bw, f->d2h_bw);
    f->runs_left--;
}

/* Blocks whose reuse waits for their copies out are given back where the
 * copies end instead, later, as far as the memory allows: up to the
 * swap-in, of model state into the next step. One at a time would not do:
 * the copies queue, and with one block given back later the compute
 * stream only reaches the next one sooner and waits there. So all move at
 * once, again as long as the replay stalls less; the moves that stall more
 * are undone (docs/policy.md, "Refinement"). */
static bool move_frees(refiner_t *f, const uint64_t *curve, uint32_t *was)
{
    cham_policy_t *p = f->p;
    size_t n = p->n_ops;
    bool any = false;
    for (int round = 0; round < 8 && f->runs_left > 0; round++) {
        bool moved = false;
        for (size_t i = 0; i < p->n_items; i++) {
            cham_policy_item_t *it = &p->items[i];
            was[i] = it->free_op;
            if (it->recompute || f->r.out_wait[i] == 0)
                continue;
            uint32_t last = it->wraps ? (uint32_t)n + it->swap_in_op : it->swap_in_op;
            uint32_t want = (uint32_t)(first_reached(f, true, 1, f->r.out_done[i]) - 1);
            uint32_t room = room_after(f->mem, n, it->free_op, last, it->bytes, p->usable);
            uint32_t to = want < it->free_op + room ? want : it->free_op + room;
            if (to <= it->free_op)
                continue;
            hold(f, (uint32_t)i, it->free_op, to);
            it->free_op = to;
            cham_gen_replayer_move(&f->r, (uint32_t)i, to, true);
            moved = true;
        }
        if (!moved)
            break;
        cham_gen_replayer_run(&f->r, p, f->l, n, f->h2d_bw, f->d2h_bw);
        f->runs_left--;
        uint64_t s = cham_gen_total_stall(p);
        if (s < f->best) {
            f->best = s;
            any = true;
            continue;
        }
        undo_frees(f, curve, was);
        break;
    }
    return any;
}

/* Blocks held past where their copies end, by the last replay's clock,
 * given back there (never before placement gave them back): the memory
 * they held is free for the next moves. Undone if the replay stalls more
 * (the next step's clock is this one's, an estimate). */
static void pull_frees(refiner_t *f, const uint64_t *curve, const uint32_t *placed,
                       uint32_t *was)
{
    cham_policy_t *p = f->p;
    size_t n = p->n_ops;
    bool any = false;
    for (size_t i = 0; i < p->n_items; i++) {
        cham_policy_item_t *it = &p->items[i];
        was[i] = it->free_op;
        if (it->recompute || f->r.out_wait[i] > 0)
            continue;
        size_t lo = first_reached(f, false, placed[i] + 1, f->r.out_done[i]);
        if (lo - 1 >= it->free_op || lo - 1 == n)   /* n: waited for at the step's end */
            continue;
        it->free_op = (uint32_t)(lo - 1);
        cham_gen_replayer_move(&f->r, (uint32_t)i, it->free_op, true);
        any = true;
    }
    if (!any)
        return;
    cham_gen_replayer_run(&f->r, p, f->l, n, f->h2d_bw, f->d2h_bw);
    f->runs_left--;
    uint64_t s = cham_gen_total_stall(p);
    if (s > f->best) {
        undo_frees(f, curve, was);
        return;
    }
    f->best = s;
    cham_gen_predicted_memory(p, curve, f->mem);
}

bool cham_gen_refine(cham_policy_t *p, const cham_gen_layers_t *l, const uint64_t *curve,
                     double h2d_bw, double d2h_bw)
{
    /* Eq. 1's even shares are no clock to refine by; a policy that does
     * not fit leaves the rest to passive swaps, which the replay does not
     * see. */
    if (!l->timed || p->predicted_peak > p->usable || p->n_ops == 0)
        return true;
    refiner_t f = {.p = p, .l = l, .h2d_bw = h2d_bw, .d2h_bw = d2h_bw,
                   .mem = malloc((2 * p->n_ops + 1) * sizeof *f.mem)};
    uint64_t *op_begin = malloc(p->n_ops * sizeof *op_begin);
    uint64_t *op_at = malloc(p->n_ops * sizeof *op_at);
    stalled_t *order = malloc((p->n_items ? p->n_items : 1) * sizeof *order);
    uint32_t *was = malloc((p->n_items ? p->n_items : 1) * sizeof *was);
    uint32_t *placed = malloc((p->n_items ? p->n_items : 1) * sizeof *placed);
    bool ok = f.mem && op_begin && op_at && placed && order && was &&
              cham_gen_replayer_init(&f.r, p);
    if (ok) {
        f.r.op_begin = op_begin;
        f.r.op_at = op_at;
        for (size_t i = 0; i < p->n_items; i++)
            placed[i] = p->items[i].free_op;
        cham_gen_predicted_memory(p, curve, f.mem);
        cham_gen_replayer_run(&f.r, p, l, p->n_ops, h2d_bw, d2h_bw);
        f.best = cham_gen_total_stall(p);
        /* Replays cost ops + items each: at most REFINE_WORK of that in all. */
        f.runs_left = REFINE_WORK / (p->n_ops + p->n_items + 1);
    }
    /* Passes repeat while the last two gained at least a thousandth of
     * the step (a pass that gains nothing may give back blocks the next
     * one moves into): where model state streams through the optimizer
     * phase, each moves every stalled swap-in a little earlier and the
     * total stall falls for tens of passes (a Mixtral step, 2,485 ops:
     * 702 ms after the first pass, 621 ms after the fourth, where passes
     * used to stop, 409 ms after the 16th; docs/policy.md). */
    uint64_t min_gain = p->step_ns / 1000 + 1, before[2] = {UINT64_MAX, UINT64_MAX};
    bool moved = ok;
    while (moved && f.best > 0 && f.runs_left > 0 &&
           (before[0] == UINT64_MAX || before[0] - f.best >= min_gain)) {
        before[0] = before[1];
        before[1] = f.best;
        moved = move_frees(&f, curve, was);
        if (f.runs_left > 0)
            pull_frees(&f, curve, placed, was);
        size_t n = 0;
        for (size_t i = 0; i < p->n_items; i++)
            if (!p->items[i].recompute && p->items[i].stall_ns > 0)
                order[n++] = (stalled_t){p->items[i].stall_ns, (uint32_t)i};
        qsort(order, n, sizeof *order, by_stall);
        for (size_t j = 0; j < n && f.runs_left > 0; j++)
            if (p->items[order[j].item].stall_ns > 0)
                moved = move_in(&f, order[j].item) || moved;
    }
    if (ok) {
        p->predicted_peak = cham_gen_peak_of(f.mem, p->n_ops);
        p->predicted_step_ns = cham_gen_predicted_step(p, l);
        p->predicted_carry_ns = f.r.carry_ns;
    }
    cham_gen_replayer_free(&f.r);
    free(f.mem);
    free(op_begin);
    free(op_at);
    free(order);
    free(was);
    free(placed);
    return ok;
}
