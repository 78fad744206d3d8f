/* The HyperOffload planner's cost model: one placement of the cache
 * operators run on three in-order streams. The compute stream runs the
 * ops back to back at their estimated times, an op starting only once the
 * Prefetches it uses are done and, at a Detach, the Store it waits for.
 * Stores start when their op ends, Prefetches when their op is reached,
 * each direction one copy after another. Memory is the profile's curve
 * less each offloaded tensor over its samples away. Integer nanoseconds
 * keep the comparisons exact: a placement evaluated twice costs the same,
 * which is what makes refinement monotone. docs/hyperoffload.md. */
#include <stdlib.h>

#include "policy/hyperoffload/hyperoffload-impl.h"

enum { AT_Q, AT_U, AT_S, AT_F, KINDS };

#define NONE UINT32_MAX

bool ho_sim_init(ho_sim_t *s, size_t n_ops, const uint64_t *op_ns, const uint64_t *curve,
                 uint64_t usable, ho_item_t *items, size_t n_items)
{
    *s = (ho_sim_t){.n_ops = n_ops, .op_ns = op_ns, .curve = curve, .usable = usable,
                    .items = items, .n_items = n_items};
    size_t m = n_items ? n_items : 1;
    s->start = calloc(n_ops + 1, sizeof *s->start);
    s->store_done = calloc(m, sizeof *s->store_done);
    s->in_done = calloc(m, sizeof *s->in_done);
    s->head = malloc(KINDS * (n_ops + 1) * sizeof *s->head);
    s->next = malloc(KINDS * m * sizeof *s->next);
    s->delta = malloc((2 * n_ops + 1) * sizeof *s->delta);
    if (s->start && s->store_done && s->in_done && s->head && s->next && s->delta)
        return true;
    ho_sim_free(s);
    return false;
}

void ho_sim_free(ho_sim_t *s)
{
    free(s->start);
    free(s->store_done);
    free(s->in_done);
    free(s->head);
    free(s->next);
    free(s->delta);
    s->start = s->store_done = s->in_done = NULL;
    s->head = s->next = NULL;
    s->delta = NULL;
}

/* Bucket lists: per kind and op, the active items there, in item order
 * (built from the back, so each list runs forwards). */
static void buckets(ho_sim_t *s)
{
    size_t n = s->n_ops + 1;
    for (size_t i = 0; i < KINDS * n; i++)
        s->head[i] = NONE;
    for (size_t i = s->n_items; i-- > 0;) {
        const ho_item_t *it = &s->items[i];
        if (!it->active)
            continue;
        uint32_t at[KINDS] = {[AT_Q] = it->q, [AT_U] = it->u, [AT_S] = it->s, [AT_F] = it->f};
        for (int k = 0; k < KINDS; k++) {
            s->next[k * s->n_items + i] = s->head[k * n + at[k]];
            s->head[k * n + at[k]] = (uint32_t)i;
        }
    }
}

#define EACH(s, kind, op, i)                                                           \
    for (uint32_t i = (s)->head[(kind) * ((s)->n_ops + 1) + (op)]; i != NONE;          \
         i = (s)->next[(kind) * (s)->n_items + i])

static uint64_t max64(uint64_t a, uint64_t b)
{
    return a > b ? a : b;
}

/* The peak of the curve less each active item over its samples away. */
static uint64_t peak(ho_sim_t *s)
{
    size_t ns = 2 * s->n_ops;
    for (size_t j = 0; j <= ns; j++)
        s->delta[j] = 0;
    for (size_t i = 0; i < s->n_items; i++) {
        const ho_item_t *it = &s->items[i];
        if (!it->active)
            continue;
        int64_t b = (int64_t)it->bytes;
        s->delta[2 * it->f] -= b;      /* away from the Detach ... */
        if (it->wraps)
            s->delta[0] -= b;          /* ... to the step's end, and from its start ... */
        s->delta[2 * it->q] += b;      /* ... to the Prefetch */
    }
    uint64_t top = 0;
    int64_t away = 0;
    for (size_t j = 0; j < ns; j++) {
        away += s->delta[j];
        int64_t m = (int64_t)s->curve[j] + away;
        top = max64(top, m > 0 ? (uint64_t)m : 0);
    }
    return top;
}

void ho_eval(ho_sim_t *s, cham_hyperoffload_cost_t *cost)
{
    s->evaluations++;
    buckets(s);
    uint64_t t = 0, h2d = 0, d2h = 0;
    for (size_t k = 0; k < s->n_ops; k++) {
        uint64_t begin = t;
        EACH(s, AT_Q, k, i) {
            h2d = max64(t, h2d) + s->items[i].in_ns;
            s->in_done[i] = h2d;
        }
        EACH(s, AT_U, k, i)
            begin = max64(begin, s->in_done[i]);
        EACH(s, AT_F, k, i)
            begin = max64(begin, s->store_done[i]);
        s->start[k] = begin;
        t = begin + s->op_ns[k];
        EACH(s, AT_S, k, i) {
            d2h = max64(t, d2h) + s->items[i].out_ns;
            s->store_done[i] = d2h;
        }
    }
    EACH(s, AT_F, s->n_ops, i)
        t = max64(t, s->store_done[i]);
    s->start[s->n_ops] = t;

    double away = 0;
    for (size_t i = 0; i < s->n_items; i++) {
        const ho_item_t *it = &s->items[i];
        if (!it->active)
            continue;
        double gone = it->wraps ? (double)(t - s->start[it->f]) + (double)s->start[it->q]
                                : (double)(s->start[it->q] - s->start[it->f]);
        away += (double)it->bytes * gone * 1e-9;
    }
    uint64_t top = peak(s);
    *cost = (cham_hyperoffload_cost_t){.over_bytes = top > s->usable ? top - s->usable : 0,
                                       .step_ns = t, .peak = top, .away_byte_s = away};
}

bool ho_better(const cham_hyperoffload_cost_t *a, const cham_hyperoffload_cost_t *b)
{
    if (a->over_bytes != b->over_bytes)
        return a->over_bytes < b->over_bytes;
    if (a->step_ns != b->step_ns)
        return a->step_ns < b->step_ns;
    if (a->peak != b->peak)
        return a->peak < b->peak;
    return a->away_byte_s > b->away_byte_s;
}
