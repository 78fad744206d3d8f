/* The placement model (the paper's "simulator", §5.4): per logical layer the transfer time still
 * free in each link direction, the swap-out completion search (forward from
 * the layer of the last forward use, §5.4.2), the swap-in pre-trigger search
 * (backward from the layer before the first backward use, §5.4.1) with its
 * fallback, and the commit that takes a placement's time and bytes off the
 * layers and the memory reduction list. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/assert.h"
#include "policy/chameleon/chameleon-impl.h"

static void fw_add(cham_budget_t *b, size_t i, uint64_t delta)
{
    /* delta may be a negative number in two's complement: sums stay exact. */
    for (size_t x = i + 1; x <= b->n; x += x & (~x + 1))
        b->fw[x] += delta;
}

/* Sum of layers [0, i). */
static uint64_t fw_prefix(const cham_budget_t *b, size_t i)
{
    uint64_t s = 0;
    for (size_t x = i; x > 0; x -= x & (~x + 1))
        s += b->fw[x];
    return s;
}

/* The largest p in [0, n] with fw_prefix(p) <= lim. */
static size_t fw_upto(const cham_budget_t *b, uint64_t lim)
{
    size_t pos = 0, step = 1;
    while (step * 2 <= b->n)
        step *= 2;
    for (; step; step /= 2)
        if (pos + step <= b->n && b->fw[pos + step] <= lim) {
            pos += step;
            lim -= b->fw[pos];
        }
    return pos;
}

static bool budget_init(cham_budget_t *b, const cham_gen_layers_t *l)
{
    b->n = l->n;
    b->size = 1;
    while (b->size < l->n)
        b->size *= 2;
    b->t = calloc(2 * b->size, sizeof *b->t);
    b->fw = calloc(l->n + 1, sizeof *b->fw);
    if (!b->t || !b->fw)
        return false;
    for (size_t i = 0; i < l->n; i++) {
        b->t[b->size + i] = l->v[i].time_ns;
        fw_add(b, i, l->v[i].time_ns);
    }
    for (size_t x = b->size - 1; x >= 1; x--)
        b->t[x] = b->t[2 * x] > b->t[2 * x + 1] ? b->t[2 * x] : b->t[2 * x + 1];
    return true;
}

static uint64_t budget_get(const cham_budget_t *b, size_t i)
{
    return b->t[b->size + i];
}

static void budget_set(cham_budget_t *b, size_t i, uint64_t val)
{
    size_t x = b->size + i;
    fw_add(b, i, val - b->t[x]);
    b->t[x] = val;
    for (x /= 2; x >= 1; x /= 2)
        b->t[x] = b->t[2 * x] > b->t[2 * x + 1] ? b->t[2 * x] : b->t[2 * x + 1];
}

/* Empties the layers in [a, z] under node x (covering leaves [l, r]) but
 * `skip`, visiting only subtrees with time left, and returns the time taken
 * (saturated). */
static uint64_t budget_empty(cham_budget_t *b, size_t x, size_t l, size_t r, size_t a, size_t z,
                             size_t skip)
{
    if (r < a || l > z || b->t[x] == 0)
        return 0;
    if (l == r) {
        if (l == skip)
            return 0;
        uint64_t v = b->t[x];
        fw_add(b, l, ~v + 1);
        b->t[x] = 0;
        return v;
    }
    size_t m = (l + r) / 2;
    uint64_t s1 = budget_empty(b, 2 * x, l, m, a, z, skip);
    uint64_t s2 = budget_empty(b, 2 * x + 1, m + 1, r, a, z, skip);
    b->t[x] = b->t[2 * x] > b->t[2 * x + 1] ? b->t[2 * x] : b->t[2 * x + 1];
    return s1 > UINT64_MAX - s2 ? UINT64_MAX : s1 + s2;
}

/* Takes need from layers [a, z]: all of each but the one at `partial`,
 * which gives what is left (the run was chosen so that it suffices).
 * Layers already empty are skipped through the tree, so each layer is
 * emptied once over a whole run of the generator. */
static void budget_take(cham_budget_t *b, size_t a, size_t z, size_t partial, uint64_t need)
{
    /* partial is a or z: the others are a range, often empty. */
    size_t lo = partial == a ? a + 1 : a, hi = partial == z ? z : z + 1;
    uint64_t got = lo < hi ? budget_empty(b, 1, 0, b->size - 1, lo, hi - 1, partial) : 0;
    uint64_t rest = need > got ? need - got : 0;
    uint64_t r = budget_get(b, partial);
    budget_set(b, partial, r > rest ? r - rest : 0);
}

/* The last (right) or first (!right) layer in [lo, hi] with at least need
 * free; -1 when there is none. Node x covers leaves [l, r]. */
static long budget_find(const cham_budget_t *b, size_t x, size_t l, size_t r, size_t lo,
                        size_t hi, uint64_t need, bool right)
{
    if (r < lo || l > hi || b->t[x] < need)
        return -1;
    if (l == r)
        return (long)l;
    size_t m = (l + r) / 2;
    long got;
    if (right) {
        got = budget_find(b, 2 * x + 1, m + 1, r, lo, hi, need, right);
        return got >= 0 ? got : budget_find(b, 2 * x, l, m, lo, hi, need, right);
    }
    got = budget_find(b, 2 * x, l, m, lo, hi, need, right);
    return got >= 0 ? got : budget_find(b, 2 * x + 1, m + 1, r, lo, hi, need, right);
}

bool cham_gen_sim_init(cham_gen_sim_t *s, cham_gen_layers_t *l, double h2d_bw, double d2h_bw)
{
    *s = (cham_gen_sim_t){.layers = l, .h2d_bw = h2d_bw, .d2h_bw = d2h_bw};
    if (l->n == 0)
        return true;
    if (!budget_init(&s->h2d, l) || !budget_init(&s->d2h, l)) {
        cham_gen_sim_free(s);
        return false;
    }
    return true;
}

void cham_gen_sim_free(cham_gen_sim_t *s)
{
    free(s->h2d.t);
    free(s->h2d.fw);
    free(s->d2h.t);
    free(s->d2h.fw);
    free(s->op_end);
    free(s->out.q);
    free(s->out.slack);
    free(s->in.q);
    free(s->in.slack);
    s->h2d = s->d2h = (cham_budget_t){0};
    s->op_end = NULL;
    s->out = s->in = (cham_gen_queue_t){0};
}

bool cham_gen_sim_queue(cham_gen_sim_t *s, size_t n_ops)
{
    s->op_end = malloc((n_ops ? n_ops : 1) * sizeof *s->op_end);
    if (!s->op_end)
        return false;
    double t = 0;
    for (size_t k = 0; k < n_ops; k++) {
        t += s->layers->op_ns[k];
        s->op_end[k] = t >= 1.8e19 ? UINT64_MAX : (uint64_t)(t + 0.5);
    }
    s->n_ops = n_ops;
    return true;
}

static uint64_t max_u64(uint64_t a, uint64_t b)
{
    return a > b ? a : b;
}

/* When op k begins, ops back to back. */
static uint64_t op_start(const cham_gen_sim_t *s, uint32_t k)
{
    return k ? s->op_end[k - 1] : 0;
}

/* The position after every copy issued at op `at` or earlier. */
static size_t queue_after(const cham_gen_queue_t *q, uint32_t at)
{
    size_t lo = 0, hi = q->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (q->q[mid].at <= at)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* The done time of the copy before position j (0 for the first). */
static uint64_t done_before(const cham_gen_queue_t *q, size_t j)
{
    return j ? q->q[j - 1].done : 0;
}

static uint64_t add_sat(uint64_t a, uint64_t b)
{
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

/* Runs the queue on from position j, the copy before it now done at d,
 * keeping the new times; returns the first position whose copy kept its
 * time (n when none did). (Adding a copy only delays the ones after it: a
 * copy that keeps its time ends the run.) */
static size_t queue_follow(cham_gen_queue_t *q, size_t j, uint64_t d)
{
    for (; j < q->n; j++) {
        uint64_t dj = max_u64(q->q[j].ready, d) + q->q[j].t;
        if (dj == q->q[j].done)
            return j;
        CHAM_ASSERT(dj <= q->q[j].deadline && "queue_try checked every deadline");
        q->q[j].done = dj;
        d = dj;
    }
    return q->n;
}

/* slack[j]: a delay of q[j]'s predecessor reaches q[j] less the idle gap
 * g before q[j] (done = max(ready, before) + t), so q[j] absorbs
 * min(g + its own room to its deadline, g + what the ones after absorb). */
static uint64_t slack_at(const cham_gen_queue_t *q, size_t j)
{
    const cham_gen_copy_t *c = &q->q[j];
    uint64_t before = done_before(q, j);
    uint64_t gap = c->ready > before ? c->ready - before : 0;
    uint64_t own = add_sat(gap, c->deadline - c->done);
    uint64_t rest = add_sat(gap, q->slack[j + 1]);
    return own < rest ? own : rest;
}

/* When a copy issued at `at`, able to start at `ready`, taking t, would be
 * done, behind the ones before it (at *pos). */
static uint64_t queue_done(const cham_gen_queue_t *q, uint32_t at, uint64_t ready, uint64_t t,
                           size_t *pos)
{
    *pos = queue_after(q, at);
    return max_u64(ready, *pos ? q->q[*pos - 1].done : 0) + t;
}

#if CHAM_DEBUG_CHECKS
/* The slack's answer the long way: runs the queue on from j, the copy
 * before it done at d, and says whether every copy keeps its deadline. */
static bool queue_keeps_deadlines(const cham_gen_queue_t *q, size_t j, uint64_t d)
{
    for (; j < q->n; j++) {
        uint64_t dj = max_u64(q->q[j].ready, d) + q->q[j].t;
        if (dj == q->q[j].done)
            return true;
        if (dj > q->q[j].deadline)
            return false;
        d = dj;
    }
    return true;
}
#endif

/* queue_done; false when the copy would push a later one past its deadline. */
static bool queue_try(const cham_gen_queue_t *q, uint32_t at, uint64_t ready, uint64_t t,
                      size_t *pos, uint64_t *done)
{
    *done = queue_done(q, at, ready, t, pos);
    bool fits = q->n == 0 || *done - done_before(q, *pos) <= q->slack[*pos];
#if CHAM_DEBUG_CHECKS
    CHAM_ASSERT(fits == queue_keeps_deadlines(q, *pos, *done));
#endif
    return fits;
}

/* Inserts the copy queue_try placed; false when the host is out of memory. */
static bool queue_insert(cham_gen_queue_t *q, size_t pos, cham_gen_copy_t c)
{
    if (q->n == q->cap) {
        size_t cap = q->cap ? 2 * q->cap : 64;
        cham_gen_copy_t *v = realloc(q->q, cap * sizeof *v);
        if (!v)
            return false;
        q->q = v;
        uint64_t *sl = realloc(q->slack, (cap + 1) * sizeof *sl);
        if (!sl)
            return false;
        if (!q->slack)
            sl[0] = UINT64_MAX;          /* slack[n]: nothing after the last */
        q->slack = sl;
        q->cap = cap;
    }
    memmove(&q->q[pos + 1], &q->q[pos], (q->n - pos) * sizeof *q->q);
    memmove(&q->slack[pos + 1], &q->slack[pos], (q->n + 1 - pos) * sizeof *q->slack);
    q->n++;
    q->q[pos] = c;
    /* From the first copy that kept its time on, nothing changed but the
     * gap before it; below pos only the slacks, up to the first that
     * comes out as it was. */
    for (size_t j = queue_follow(q, pos + 1, c.done) + 1; j-- > 0;) {
        uint64_t sj = j < q->n ? slack_at(q, j) : UINT64_MAX;
        if (j < pos && sj == q->slack[j])
            break;
        q->slack[j] = sj;
    }
    return true;
}

/* Takes the copy at position j out of the queue's time (its t becomes 0):
 * the copies after it are done as early as they now can be, which only
 * moves them closer to their deadlines, and the slacks are worked out
 * again from the last copy that moved, down to the first that comes out
 * as it was. */
static void queue_refund(cham_gen_queue_t *q, size_t j)
{
    q->q[j].t = 0;
    size_t last = j;
    for (uint64_t d = done_before(q, j); last < q->n; last++) {
        uint64_t dl = max_u64(q->q[last].ready, d) + q->q[last].t;
        if (dl == q->q[last].done)
            break;
        q->q[last].done = dl;
        d = dl;
    }
    for (size_t k = (last < q->n ? last : q->n - 1) + 1; k-- > 0;) {
        uint64_t sk = slack_at(q, k);
        if (k < j && sk == q->slack[k])
            break;
        q->slack[k] = sk;
    }
}

/* The queue's way (§5.4.2 made exact): the swap-out issued after op f goes
 * behind every chosen one issued no later, and must not push any issued
 * after it past its deadline. It completes in the op whose end first
 * reaches its done time, at most `last_op`. With stall its block comes back
 * after f whatever the copy's progress, the compute stream waiting. */
static bool place_out_queued(cham_gen_sim_t *s, uint32_t f, uint32_t last_op, bool stall,
                             cham_gen_place_t *pl)
{
    uint64_t done;
    if (!queue_try(&s->out, f, s->op_end[f], pl->t_out, &pl->q_out, &done))
        return false;
    uint32_t k = f;
    if (!stall) {
        size_t a = f, b = s->n_ops;   /* the first op ending at or after done */
        while (a < b) {
            size_t mid = a + (b - a) / 2;
            if (s->op_end[mid] < done)
                a = mid + 1;
            else
                b = mid;
        }
        if (a > last_op)
            return false;
        k = (uint32_t)a;
    } else {
        pl->stall_out_ns = done - s->op_end[f];
    }
    pl->done_ns = done;
    pl->done_op = k;
    pl->out_first = s->layers->layer_of_op[f];
    pl->out_layer = s->layers->layer_of_op[k];
    return true;
}

/* When a swap-in issued at op i may start: when i begins, its swap-out done
 * (in the step before, when it wraps: done by the step's end). */
static uint64_t in_ready(const cham_gen_sim_t *s, uint32_t i, const cham_gen_place_t *pl)
{
    return pl->wraps ? op_start(s, i) : max_u64(op_start(s, i), pl->done_ns);
}

/* Does the swap-in issued at op i keep every queued copy's deadline? */
static bool in_fits(const cham_gen_sim_t *s, uint32_t i, const cham_gen_place_t *pl)
{
    size_t pos;
    uint64_t done;
    return queue_try(&s->in, i, in_ready(s, i, pl), pl->t_in, &pos, &done);
}

/* The latest issue op in [first, end) (with early_in the earliest) whose
 * swap-in keeps every queued copy's deadline; end when none does. Between
 * two queued copies' issue ops the swap-in's place in the queue stays and
 * its done time grows with i, so the ops that fit there are a first part
 * of that run: a run is decided by its first op and, from the latest
 * side, bisected. O(runs log n), not an op at a time. */
static uint32_t fitting_in(const cham_gen_sim_t *s, uint32_t first, uint32_t end,
                           const cham_gen_place_t *pl)
{
    const cham_gen_queue_t *q = &s->in;
    if (s->early_in) {
        for (uint32_t i = first; i < end;) {
            if (in_fits(s, i, pl))
                return i;
            size_t pos = queue_after(q, i);            /* the run ends at q[pos]'s op */
            if (pos == q->n)
                break;
            i = q->q[pos].at;
        }
        return end;
    }
    for (uint32_t hi = end; hi > first;) {             /* the runs from the latest down */
        size_t pos = queue_after(q, hi - 1);
        uint32_t lo = pos && q->q[pos - 1].at > first ? q->q[pos - 1].at : first;
        if (in_fits(s, lo, pl)) {
            while (lo + 1 < hi) {                      /* lo fits, hi does not */
                uint32_t mid = lo + (hi - lo) / 2;
                if (in_fits(s, mid, pl))
                    lo = mid;
                else
                    hi = mid;
            }
            return lo;
        }
        hi = lo;
    }
    return end;
}

/* §5.4.1 with the queue: the swap-in issued when op i begins, i in
 * [first, use - 1], goes behind every chosen one issued no later and after
 * its own swap-out; the latest i whose copy is done when the use begins
 * (with early_in the earliest), without pushing a later one past its
 * deadline. With allow_stall and none such, the earliest i, the use
 * waiting for what is left. */
static bool place_in_queued(cham_gen_sim_t *s, uint32_t first, uint32_t use, bool allow_stall,
                            cham_gen_place_t *pl)
{
    uint64_t need = op_start(s, use);
    /* done(i) grows with i: the latest i done in time, by bisection. */
    uint32_t lo = first, hi = use;    /* answer in [first, use - 1], or none */
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        size_t pos;
        if (queue_done(&s->in, mid, in_ready(s, mid, pl), pl->t_in, &pos) <= need)
            lo = mid + 1;
        else
            hi = mid;
    }
    uint32_t i = fitting_in(s, first, lo, pl);
    uint64_t done;
    if (i < lo && queue_try(&s->in, i, in_ready(s, i, pl), pl->t_in, &pl->q_in, &done)) {
        pl->in_op = i;
        pl->in_done_ns = done;
        return true;
    }
    if (!allow_stall)
        return false;
    if (!queue_try(&s->in, first, in_ready(s, first, pl), pl->t_in, &pl->q_in, &done))
        return false;
    pl->in_op = first;
    pl->in_done_ns = done;
    pl->stall_in_ns = done > need ? done - need : 0;
    return true;
}

/* §5.4.2: the swap-out starts after op f; it completes in the first layer
 * from f's, up to `last`, with enough free device-to-host time, else at the
 * end of the shortest run of layers from f's whose free time adds up to
 * it. With stall (the fallback) it completes in f's layer instead, and the
 * block's reuse waits for what that layer's free time does not cover. */
static bool place_out(cham_gen_sim_t *s, uint32_t lf, uint32_t last, bool stall,
                      cham_gen_place_t *pl)
{
    cham_budget_t *b = &s->d2h;
    if (stall)
        goto stall;
    long j = budget_find(b, 1, 0, b->size - 1, lf, last, pl->t_out, false);
    if (j >= 0) {
        pl->out_first = pl->out_layer = (uint32_t)j;
        return true;
    }
    uint64_t base = fw_prefix(b, lf);
    if (fw_prefix(b, (size_t)last + 1) - base >= pl->t_out) {
        /* First j with sum(lf..j) >= t_out: prefix(j + 1) >= base + t_out. */
        size_t q = fw_upto(b, base + pl->t_out - 1);
        pl->out_first = lf;
        pl->out_layer = (uint32_t)q;
        return true;
    }
    return false;
stall:;
    uint64_t rem = budget_get(b, lf);
    pl->out_first = pl->out_layer = lf;
    pl->stall_out_ns = pl->t_out > rem ? pl->t_out - rem : 0;
    return true;
}

/* §5.4.1: the swap-in goes into the nearest layer in [lo, last] with enough
 * free host-to-device time, else starts at the latest layer from which the
 * free time up to `last` adds up to it, else (allow_stall) into `last` with
 * a wait before the use. */
static bool place_in(cham_gen_sim_t *s, uint32_t lo, uint32_t last, bool allow_stall,
                     cham_gen_place_t *pl)
{
    cham_budget_t *b = &s->h2d;
    long i = budget_find(b, 1, 0, b->size - 1, lo, last, pl->t_in, true);
    if (i >= 0) {
        pl->in_layer = pl->in_last = (uint32_t)i;
        return true;
    }
    uint64_t top = fw_prefix(b, (size_t)last + 1);
    if (top - fw_prefix(b, lo) >= pl->t_in) {
        /* Latest i with sum(i..last) >= t_in: prefix(i) <= top - t_in. */
        size_t q = fw_upto(b, top - pl->t_in);
        CHAM_ASSERT(q >= lo && q <= last);
        pl->in_layer = (uint32_t)q;
        pl->in_last = last;
        return true;
    }
    if (!allow_stall)
        return false;
    uint64_t rem = budget_get(b, last);
    pl->in_layer = pl->in_last = last;
    pl->stall_in_ns = pl->t_in > rem ? pl->t_in - rem : 0;
    return true;
}

/* cham_gen_place for one choice of the entries to cover: up to m_last,
 * which (head) is in the next step's part for a swap across the step's
 * end, else after t's last use in this step. */
static bool place_covering(cham_gen_sim_t *s, cham_mrl_t *mrl, const cham_gen_tensor_t *t,
                           bool allow_stall, bool head, size_t m_last, cham_gen_place_t *pl)
{
    const cham_gen_layers_t *l = s->layers;
    uint32_t lf = l->layer_of_op[t->last_fwd], lu = l->layer_of_op[t->first_bwd];
    uint32_t last_in = lu ? lu - 1 : 0;   /* with at_use, the use's layer may follow */
    size_t ns = mrl->samples;
    *pl = (cham_gen_place_t){
        .t_out = t->backed || t->out_kept ? 0
                                          : cham_gen_transfer_ns(t->bytes, s->d2h_bw,
                                                                 l->copy_latency_ns),
        .t_in = cham_gen_transfer_ns(t->bytes, s->h2d_bw, l->copy_latency_ns),
        .wraps = t->wraps,
    };
    /* A copy out across the step's end completes in this step. */
    uint32_t out_last = t->wraps ? (uint32_t)l->n - 1 : last_in > lf ? last_in : lf;
    /* The swap must cover an entry: the last one it can reach bounds the
     * backward search ("until the peak memory usage time"). A swap-out that
     * completes too late for that is retried, when stalls are allowed, as
     * one waited for in f's layer. */
    bool covers = false;
    for (int stall = 0; stall <= 1 && !covers; stall++) {
        if (stall && !allow_stall)
            break;
        if (t->backed || t->out_kept) {   /* nothing to copy: the block is free after f */
            pl->out_first = pl->out_layer = lf;
            pl->done_op = t->last_fwd;
            pl->done_ns = s->op_end ? s->op_end[t->last_fwd] : 0;
        } else if (s->op_end) {
            const cham_logical_layer_t *il = &l->v[out_last];
            if (!place_out_queued(s, t->last_fwd, il->start_op + il->n_ops - 1, stall, pl))
                continue;
        } else {
            if (!place_out(s, lf, out_last, stall, pl))
                continue;
            const cham_logical_layer_t *ol = &l->v[pl->out_layer];
            pl->done_op = ol->start_op + ol->n_ops - 1;
        }
        pl->free_op = pl->done_op + 1 + s->free_delay;
        if (t->wraps && 2 * (size_t)pl->free_op > ns)
            pl->free_op = (uint32_t)(ns / 2);   /* given back in the next step's first op */
        /* m_last is also the last entry in [2 free_op, hi) if there is one
         * (a head entry is covered from the step's end on). */
        covers = head || m_last >= 2 * (size_t)pl->free_op;
        /* Queue: a copy that frees its block only ops after f leaves the
         * entries in between uncovered; the block given back right after f,
         * the compute stream waiting for the copy, covers them. That is a
         * stall: the fallback pass's to choose, when no other candidate
         * has covered them by then. */
        size_t early = 2 * ((size_t)t->last_fwd + 1 + s->free_delay);
        if (covers && s->op_end && !stall && early < 2 * (size_t)pl->free_op &&
            cham_mrl_count(mrl, early, 2 * (size_t)pl->free_op) > 0)
            covers = false;
    }
    if (!covers)
        return false;
    if (t->overwritten) {        /* nothing comes back: a new block at the use */
        pl->in_op = t->first_bwd;
        pl->in_layer = pl->in_last = l->layer_of_op[t->first_bwd];
        pl->in_done_ns = s->op_end ? op_start(s, t->first_bwd) : 0;
        return true;
    }
    /* The swap-in must begin at op k or later. */
    size_t k = t->wraps && !head ? 0 : m_last / 2 + 1;
    if (s->op_end) {
        if (!place_in_queued(s, (uint32_t)k, t->first_bwd, allow_stall, pl))
            return false;
        pl->in_layer = pl->in_last = l->layer_of_op[pl->in_op];
        return true;
    }
    uint32_t lo = l->layer_of_op[k];
    if (l->v[lo].start_op < k)
        lo++;
    if (lu == 0 || lo > last_in) {   /* at_use: no layer before the use is left */
        CHAM_ASSERT(s->at_use);
        if (!allow_stall)
            return false;
        pl->in_layer = pl->in_last = lu;
        pl->in_op = t->first_bwd;
        pl->stall_in_ns = pl->t_in;
        return true;
    }
    if (!place_in(s, lo, last_in, allow_stall, pl))
        return false;
    pl->in_op = l->v[pl->in_layer].start_op;
    return true;
}

bool cham_gen_place(cham_gen_sim_t *s, cham_mrl_t *mrl, const cham_gen_tensor_t *t,
                    bool allow_stall, cham_gen_place_t *pl)
{
    const cham_gen_layers_t *l = s->layers;
    uint32_t lf = l->layer_of_op[t->last_fwd], lu = l->layer_of_op[t->first_bwd];
    if (!s->at_use && (lu == 0 || (!t->wraps && lu - 1 < lf)))
        return false;
    size_t lo, hi, m_last = 0, ns = mrl->samples;
    cham_gen_window(l, t, s->at_use, &lo, &hi);
    if (!t->wraps && hi <= lo)
        return false;
    size_t after = lo;
    /* free_op > f: without an entry after f's end there is none later (the
     * usual case late in a pass, and cheaper than the searches below).
     * Across the step's end the last entry is in the next step's part
     * (head) if it has one. */
    bool head = t->wraps && cham_mrl_last(mrl, 0, hi, &m_last);
    if (!head)
        return cham_mrl_last(mrl, after, t->wraps ? ns : hi, &m_last) &&
               place_covering(s, mrl, t, allow_stall, false, m_last, pl);
    if (place_covering(s, mrl, t, allow_stall, true, m_last, pl))
        return true;
    /* Covering the next step's entries up to the last before the use
     * leaves the copy back only the ops after that entry, often too few
     * to hide it: an optimizer's state, used once at the step's end where
     * the entries run up to each update, would come back one update before
     * its own with the compute stream waiting. Covering this step's tail
     * alone, it may come back from the next step's start on, and the head's
     * entries are left to others (weights that a host copy backs, say). */
    return s->cover_tails && !allow_stall && cham_mrl_last(mrl, after, ns, &m_last) &&
           place_covering(s, mrl, t, false, false, m_last, pl);
}

bool cham_gen_commit(cham_gen_sim_t *s, cham_mrl_t *mrl, const cham_gen_tensor_t *t,
                     const cham_gen_place_t *pl)
{
    if (s->op_end) {
        uint64_t out_deadline = pl->stall_out_ns ? pl->done_ns : s->op_end[pl->done_op];
        uint64_t need = op_start(s, t->first_bwd);
        if ((!t->backed && !t->out_kept &&
             !queue_insert(&s->out, pl->q_out,
                           (cham_gen_copy_t){.at = t->last_fwd, .ready = s->op_end[t->last_fwd],
                                             .t = pl->t_out, .done = pl->done_ns,
                                             .deadline = out_deadline})) ||
            (!t->overwritten &&
             !queue_insert(&s->in, pl->q_in,
                          (cham_gen_copy_t){.at = pl->in_op,
                                            .ready = in_ready(s, pl->in_op, pl),
                                            .t = pl->t_in, .done = pl->in_done_ns,
                                            .deadline = max_u64(need, pl->in_done_ns)})))
            return false;
    } else {
        budget_take(&s->d2h, pl->out_first, pl->out_layer, pl->out_layer, pl->t_out);
        if (!t->overwritten)
            budget_take(&s->h2d, pl->in_layer, pl->in_last, pl->in_layer, pl->t_in);
    }
    cham_mrl_subtract_span(mrl, 2 * (size_t)pl->free_op, 2 * (size_t)pl->in_op, t->wraps,
                           t->bytes);
    return true;
}

void cham_gen_refund_out(cham_gen_sim_t *s, const cham_gen_tensor_t *t)
{
    if (!s->op_end)
        return;
    uint64_t t_out = cham_gen_transfer_ns(t->bytes, s->d2h_bw, s->layers->copy_latency_ns);
    /* Copies issued at f that are alike are interchangeable: any one. */
    for (size_t j = queue_after(&s->out, t->last_fwd); j-- > 0 && s->out.q[j].at == t->last_fwd;)
        if (s->out.q[j].t == t_out && s->out.q[j].ready == s->op_end[t->last_fwd]) {
            queue_refund(&s->out, j);
            return;
        }
}

void cham_gen_sim_report(cham_gen_sim_t *s)
{
    for (size_t i = 0; i < s->h2d.n; i++)
        s->layers->v[i].remaining_ns = budget_get(&s->h2d, i);
}
