/* SwapAdvisor's best candidate, in the profile's op order, as a policy the
 * runtime applies: each swap-out the planner made pairs with the tensor's
 * next swap-in, one item per pair. Times become ops through the simulated
 * timeline: a copy is done at the op running when it ends; a block is
 * reusable from the op after that, but no later than the op that needed
 * the room (there the simulated op waited for the copy, and the runtime's
 * allocator waits the same way); a swap-in is issued before the first op
 * starting at or after its simulated start, never before its block is
 * free. Model state away when the step ends wraps into the next step, as
 * Chameleon's own items do. docs/swapadvisor.md, "The policy". */
#include <math.h>
#include <stdlib.h>

#include "common/message.h"
#include "policy/plan-impl.h"
#include "policy/policy-impl.h"
#include "policy/swapadvisor/swapadvisor-impl.h"

typedef struct build {
    const sa_graph_t *g;
    const cham_profile_view_t *v;
    sa_event_t *ev;
    size_t n_ev;
    double *start, *end;
    uint32_t *free_of;           /* per OUT event: its item's free_op */
    uint32_t *done_of;
    uint32_t *by_tensor;         /* event indices grouped by tensor */
    uint32_t *first_of;          /* n_tensors + 1 */
    cham_gen_layers_t layers;
    cham_policy_t *pol;
} build_t;

static void build_free(build_t *b)
{
    free(b->ev);
    free(b->start);
    free(b->end);
    free(b->free_of);
    free(b->done_of);
    free(b->by_tensor);
    free(b->first_of);
    cham_gen_layers_free(&b->layers);
    cham_policy_free(b->pol);
}

/* The first op from `from` on whose time in `at` (the ops' starts or
 * ends, non-decreasing) is t or later; the last op if none. */
static uint32_t first_at(const build_t *b, const double *at, uint32_t from, double t)
{
    uint32_t lo = from, hi = (uint32_t)b->g->n_ops - 1;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (at[mid] >= t)
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

/* The profile's use of tensor t by op k. */
static uint32_t use_at(const sa_graph_t *g, uint32_t k, uint32_t t)
{
    for (uint32_t r = g->op_start[k]; r < g->op_start[k + 1]; r++)
        if (g->refs[r].tensor == t)
            return g->refs[r].use;
    return UINT32_MAX;   /* not reached: events name uses of their tensor */
}

/* Each OUT's copy-done op and the op its block is reusable from. */
static void out_ops(build_t *b)
{
    uint32_t n = (uint32_t)b->g->n_ops;
    for (size_t i = 0; i < b->n_ev; i++) {
        const sa_event_t *e = &b->ev[i];
        if (e->kind == SA_IN)
            continue;
        uint32_t done = first_at(b, b->end, e->last, e->end), free_op = done + 1;
        if (e->kind == SA_OUT) {
            free_op = free_op < e->at ? free_op : e->at;
            free_op = free_op > e->last + 1 ? free_op : e->last + 1;
        } else {
            free_op = free_op < n ? free_op : n;
        }
        b->done_of[i] = done;
        b->free_of[i] = free_op;
    }
}

static bool add_item(build_t *b, uint32_t t, uint32_t out, uint32_t in, bool wraps)
{
    const sa_graph_t *g = b->g;
    const sa_event_t *o = &b->ev[out], *e = &b->ev[in];
    uint32_t use = e->at, swap_in = first_at(b, b->start, 0, e->start);
    if (e->from != UINT32_MAX && swap_in < b->free_of[e->from])
        swap_in = b->free_of[e->from];          /* never before its block is free */
    if (!wraps && swap_in < b->free_of[out])
        swap_in = b->free_of[out];
    swap_in = swap_in < use ? swap_in : use;
    cham_policy_item_t it = {
        .storage = g->storage[t],
        .bytes = g->bytes[t],
        .out_use = b->v->uses[use_at(g, o->last, t)],
        .in_use = b->v->uses[use_at(g, use, t)],
        .swap_out_op = o->last,
        .swap_out_done_op = b->done_of[out],
        .free_op = b->free_of[out],
        .swap_in_layer = b->layers.layer_of_op[swap_in],
        .swap_in_op = swap_in,
        .use_op = use,
        .wraps = wraps,
    };
    return cham_policy_add_item(b->pol, &it);
}

/* One tensor's events in order: OUT (or OUT_END) pairs with the next IN;
 * model state that starts away (its first event an IN) pairs its last OUT
 * with that first IN across the step's end. */
static bool tensor_items(build_t *b, uint32_t t)
{
    const uint32_t *e = b->by_tensor + b->first_of[t];
    uint32_t n = b->first_of[t + 1] - b->first_of[t];
    if (n == 0)
        return true;
    bool starts_away = b->ev[e[0]].kind == SA_IN;
    for (uint32_t i = starts_away; i < n; i += 2) {
        if (i + 1 < n) {
            if (!add_item(b, t, e[i], e[i + 1], false))
                return false;
        } else if (starts_away && !add_item(b, t, e[i], e[0], true)) {
            return false;
        }
    }
    return true;
}

static int cmp_item(const void *a, const void *b)
{
    const cham_policy_item_t *x = a, *y = b;
    if (x->swap_out_op != y->swap_out_op)
        return x->swap_out_op < y->swap_out_op ? -1 : 1;
    return (x->storage > y->storage) - (x->storage < y->storage);
}

static bool group(build_t *b)
{
    size_t nt = b->g->n_tensors;
    b->first_of = calloc(nt + 1, sizeof *b->first_of);
    b->by_tensor = malloc((b->n_ev ? b->n_ev : 1) * sizeof *b->by_tensor);
    b->free_of = malloc((b->n_ev ? b->n_ev : 1) * sizeof *b->free_of);
    b->done_of = malloc((b->n_ev ? b->n_ev : 1) * sizeof *b->done_of);
    if (!b->first_of || !b->by_tensor || !b->free_of || !b->done_of)
        return false;
    for (size_t i = 0; i < b->n_ev; i++)
        b->first_of[b->ev[i].tensor + 1]++;
    for (size_t t = 0; t < nt; t++)
        b->first_of[t + 1] += b->first_of[t];
    uint32_t *fill = malloc((nt ? nt : 1) * sizeof *fill);
    if (!fill)
        return false;
    for (size_t t = 0; t < nt; t++)
        fill[t] = b->first_of[t];
    for (size_t i = 0; i < b->n_ev; i++)   /* recorded in decision order: in time */
        b->by_tensor[fill[b->ev[i].tensor]++] = (uint32_t)i;
    free(fill);
    return true;
}

cham_status_t sa_policy(const cham_profile_t *profile, const cham_planner_config_t *config,
                        const sa_graph_t *g, const sa_chrom_t *c, sa_work_t *w,
                        uint64_t capacity, cham_policy_t **out, char *err, size_t err_size)
{
    cham_profile_view_t v;
    cham_profile_get(profile, &v);
    build_t b = {.g = g, .v = &v};
    size_t n = g->n_ops ? g->n_ops : 1;
    uint64_t *curve = malloc(2 * n * sizeof *curve), *actual = malloc(2 * n * sizeof *actual);
    b.start = malloc(n * sizeof *b.start);
    b.end = malloc(n * sizeof *b.end);
    b.pol = cham_policy_new("swapadvisor");
    sa_eval_result_t r;
    bool ok = curve && actual && b.start && b.end && b.pol &&
              cham_gen_layers_build(&v, config, &b.layers) &&
              sa_eval(g, c, w, &r, &b.ev, &b.n_ev, b.start, b.end) && group(&b);
    if (ok && g->n_ops) {
        out_ops(&b);
        for (size_t t = 0; ok && t < g->n_tensors; t++)
            ok = tensor_items(&b, (uint32_t)t);
    }
    if (ok) {
        if (b.pol->n_items > 1)   /* items is NULL when nothing is planned */
            qsort(b.pol->items, b.pol->n_items, sizeof *b.pol->items, cmp_item);
        cham_profile_memory_curve(profile, actual, curve);
        ok = cham_gen_replay(b.pol, &b.layers, v.n_ops, config->h2d_bandwidth,
                             config->d2h_bandwidth) &&
             cham_gen_finish(b.pol, &b.layers, &v, curve, capacity, g->usable);
    }
    free(curve);
    free(actual);
    if (!ok) {
        build_free(&b);
        cham_set_err(err, err_size, "swapadvisor planner: out of host memory writing the "
                     "policy (%zu ops)", v.n_ops);
        return CHAM_ERR_HOST_OOM;
    }
    *out = b.pol;
    b.pol = NULL;
    build_free(&b);
    return CHAM_OK;
}
