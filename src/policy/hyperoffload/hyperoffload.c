/* HyperOffload as a planner (chameleon/hyperoffload.h): cache operators
 * inserted for the idle tensors worth it, then placed by Algorithm 1 (each
 * operator in turn at the feasible position of least cost), then written
 * as a policy the runtime applies. docs/hyperoffload.md. */
#include <stdlib.h>
#include <string.h>

#include "common/message.h"
#include "policy/plan-impl.h"
#include "policy/hyperoffload/hyperoffload-impl.h"
#include "policy/policy-impl.h"

cham_hyperoffload_options_t cham_hyperoffload_options_default(void)
{
    return (cham_hyperoffload_options_t){
        .activations = true, .persistent = true, .refine = true, .positions = 16, .passes = 1};
}

typedef struct planner {
    const cham_profile_view_t *v;
    const cham_hyperoffload_options_t *o;
    cham_gen_layers_t layers;
    cham_gen_tensor_t *t;
    size_t n_t;
    ho_item_t *items;
    size_t n_items;
    uint64_t *op_ns, *curve, *actual;
    uint32_t *cand, *order;      /* positions tried; items in processing order */
    double *value;
    ho_sim_t sim;
    cham_hyperoffload_cost_t cur;   /* the cost of the items as they stand */
    cham_policy_t *pol;
} planner_t;

static void planner_free(planner_t *p)
{
    cham_gen_layers_free(&p->layers);
    free(p->t);
    free(p->items);
    free(p->op_ns);
    free(p->curve);
    free(p->actual);
    free(p->cand);
    free(p->order);
    free(p->value);
    ho_sim_free(&p->sim);
    cham_policy_free(p->pol);
}

/* ---- positions ---------------------------------------------------------- */

/* The latest op q in [lo, hi] whose start is at or before t (starts are
 * non-decreasing); lo if none. */
static uint32_t latest_at(const uint64_t *start, uint32_t lo, uint32_t hi, uint64_t t)
{
    if (start[lo] > t)
        return lo;
    while (lo < hi) {
        uint32_t mid = hi - (hi - lo) / 2;
        if (start[mid] <= t)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

/* The earliest op in [lo, hi] starting at or after t; hi if none. */
static uint32_t earliest_at(const uint64_t *start, uint32_t lo, uint32_t hi, uint64_t t)
{
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (start[mid] >= t)
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

/* Positions to try in [lo, hi]: the current one first, then the
 * just-in-time one and its neighbours, the range's ends and `spread`
 * evenly spaced, without repeats. */
static size_t positions(uint32_t lo, uint32_t hi, uint32_t cur, uint32_t jit, uint32_t spread,
                        uint32_t *out)
{
    size_t n = 0;
    out[n++] = cur;
    uint32_t near[] = {jit, jit > lo ? jit - 1 : lo, jit > lo + 1 ? jit - 2 : lo,
                       jit < hi ? jit + 1 : hi, lo, hi};
    for (size_t i = 0; i < sizeof near / sizeof *near; i++)
        out[n++] = near[i];
    uint64_t span = (uint64_t)hi - lo;
    for (uint32_t i = 1; i <= spread && span > 1; i++)
        out[n++] = lo + (uint32_t)(span * i / (spread + 1));
    qsort(out + 1, n - 1, sizeof *out, cmp_u32);
    size_t m = 1;
    for (size_t i = 1; i < n; i++)
        if (out[i] != cur && out[i] != out[m - 1])
            out[m++] = out[i];
    return m;
}

/* ---- Algorithm 1 over one item ------------------------------------------ */

enum which { PREFETCH, DETACH };

/* The latest Prefetch position from lo on whose copy, started there, is
 * done when the use starts in the current timeline. */
static uint32_t prefetch_jit(const planner_t *p, const ho_item_t *it, uint32_t lo)
{
    const uint64_t *start = p->sim.start;
    uint64_t need = start[it->u] > it->in_ns ? start[it->u] - it->in_ns : 0;
    return latest_at(start, lo, it->u, need);
}

/* Puts item i's Prefetch or Detach at the tried position of least cost;
 * the current position is tried first and only a strictly better one
 * replaces it. Returns whether it moved. */
static bool place(planner_t *p, size_t i, enum which w)
{
    ho_item_t *it = &p->items[i];
    const uint64_t *start = p->sim.start;
    uint32_t n = (uint32_t)p->v->n_ops, lo, hi, jit, *field;
    if (w == PREFETCH) {
        lo = it->wraps ? 0 : it->f + 1;
        hi = it->u;
        jit = prefetch_jit(p, it, lo);
        field = &it->q;
    } else {
        lo = it->s + 1;
        hi = it->wraps ? n : it->q - 1;
        jit = earliest_at(start, lo, hi, p->sim.store_done[i]);
        field = &it->f;
    }
    size_t nc = positions(lo, hi, *field, jit, p->o->positions, p->cand);
    uint32_t was = *field, best = was;
    cham_hyperoffload_cost_t best_cost = p->cur, c;
    for (size_t k = 1; k < nc; k++) {
        *field = p->cand[k];
        ho_eval(&p->sim, &c);
        if (ho_better(&c, &best_cost)) {
            best_cost = c;
            best = p->cand[k];
        }
    }
    *field = best;
    ho_eval(&p->sim, &p->cur);   /* the timeline of what stands */
    return best != was;
}

/* Insertion: item i gets cache operators where the link would just hide
 * them, then its Prefetch and Detach are placed; it keeps them only if
 * that beats leaving it resident. */
static void insert(planner_t *p, size_t i)
{
    ho_item_t *it = &p->items[i];
    const uint64_t *start = p->sim.start;
    uint32_t n = (uint32_t)p->v->n_ops;
    cham_hyperoffload_cost_t resident = p->cur;
    uint64_t stored = start[it->s] + p->op_ns[it->s] + it->out_ns;
    it->f = earliest_at(start, it->s + 1, it->wraps ? n : it->u - 1, stored);
    it->q = prefetch_jit(p, it, it->wraps ? 0 : it->f + 1);
    it->active = true;
    ho_eval(&p->sim, &p->cur);
    place(p, i, PREFETCH);
    place(p, i, DETACH);
    if (!ho_better(&p->cur, &resident)) {
        it->active = false;
        p->cur = resident;
        ho_eval(&p->sim, &p->cur);
    }
}

/* ---- setup ---------------------------------------------------------------*/

static bool items_build(planner_t *p, const cham_planner_config_t *c)
{
    const cham_profile_view_t *v = p->v;
    p->items = calloc(p->n_t ? p->n_t : 1, sizeof *p->items);
    if (!p->items)
        return false;
    for (size_t k = 0; k < p->n_t; k++) {
        const cham_gen_tensor_t *t = &p->t[k];
        bool persistent = v->uses[t->out_use].persistent;
        if (persistent ? !p->o->persistent : !p->o->activations)
            continue;
        if (!t->wraps && t->first_bwd < t->last_fwd + 2)
            continue;   /* no op between the Detach and the Prefetch */
        p->items[p->n_items++] = (ho_item_t){
            .tensor = (uint32_t)k,
            .bytes = t->bytes,
            .out_ns = t->backed ? 0
                                : cham_gen_transfer_ns(t->bytes, c->d2h_bandwidth,
                                                       v->copy_latency_ns),
            .in_ns = cham_gen_transfer_ns(t->bytes, c->h2d_bandwidth, v->copy_latency_ns),
            .s = t->last_fwd,
            .u = t->first_bwd,
            .wraps = t->wraps,
        };
    }
    return true;
}

/* Items in an order: by key, larger first, then index. */
typedef struct keyed {
    double key;
    uint32_t i;
} keyed_t;

static int cmp_keyed(const void *a, const void *b)
{
    const keyed_t *x = a, *y = b;
    if (x->key != y->key)
        return x->key > y->key ? -1 : 1;
    return (x->i > y->i) - (x->i < y->i);
}

/* Fills p->order with the items sorted by key (descending). */
static bool sort_items(planner_t *p, const double *key)
{
    keyed_t *k = malloc((p->n_items ? p->n_items : 1) * sizeof *k);
    if (!k)
        return false;
    for (size_t i = 0; i < p->n_items; i++)
        k[i] = (keyed_t){.key = key[i], .i = (uint32_t)i};
    qsort(k, p->n_items, sizeof *k, cmp_keyed);
    for (size_t i = 0; i < p->n_items; i++)
        p->order[i] = k[i].i;
    free(k);
    return true;
}

/* Insertion in order of bytes x time idle (in the resident timeline,
 * from the op after the last use to the next use), largest first. */
static bool insert_all(planner_t *p)
{
    const uint64_t *start = p->sim.start;
    uint64_t end = start[p->v->n_ops];
    for (size_t i = 0; i < p->n_items; i++) {
        const ho_item_t *it = &p->items[i];
        double gap = it->wraps ? (double)(end - start[it->s + 1]) + (double)start[it->u]
                               : (double)(start[it->u] - start[it->s + 1]);
        p->value[i] = (double)it->bytes * gap;
    }
    if (!sort_items(p, p->value))
        return false;
    for (size_t k = 0; k < p->n_items; k++)
        insert(p, p->order[k]);
    return true;
}

/* Algorithm 1: the operators in the graph's order (by their Store), each
 * Prefetch, then each Detach, at its best position. */
static bool refine(planner_t *p, size_t *moved)
{
    for (size_t i = 0; i < p->n_items; i++)
        p->value[i] = -(double)p->items[i].s;
    if (!sort_items(p, p->value))
        return false;
    for (uint32_t pass = 0; pass < p->o->passes; pass++)
        for (size_t k = 0; k < p->n_items; k++) {
            size_t i = p->order[k];
            if (!p->items[i].active)
                continue;
            *moved += place(p, i, PREFETCH);
            *moved += place(p, i, DETACH);
        }
    return true;
}

/* ---- the policy ----------------------------------------------------------*/

/* The op running when item i's Store completes: the first op from s on
 * ending at or after it, before the Detach that waits for it. */
static uint32_t store_done_op(const planner_t *p, size_t i)
{
    const ho_item_t *it = &p->items[i];
    const uint64_t *start = p->sim.start;
    uint32_t k = it->s, last = it->f - 1;
    while (k < last && start[k] + p->op_ns[k] < p->sim.store_done[i])
        k++;
    return k;
}

static int cmp_item(const void *a, const void *b)
{
    const cham_policy_item_t *x = a, *y = b;
    if (x->swap_out_op != y->swap_out_op)
        return x->swap_out_op < y->swap_out_op ? -1 : 1;
    return (x->storage > y->storage) - (x->storage < y->storage);
}

static bool write_policy(planner_t *p)
{
    const cham_profile_view_t *v = p->v;
    for (size_t i = 0; i < p->n_items; i++) {
        const ho_item_t *it = &p->items[i];
        if (!it->active)
            continue;
        const cham_gen_tensor_t *t = &p->t[it->tensor];
        cham_policy_item_t pi = {
            .storage = t->storage,
            .bytes = t->bytes,
            .out_use = v->uses[t->out_use],
            .in_use = v->uses[t->in_use],
            .swap_out_op = it->s,
            .swap_out_done_op = store_done_op(p, i),
            .free_op = it->f,
            .swap_in_layer = p->layers.layer_of_op[it->q],
            .swap_in_op = it->q,
            .use_op = it->u,
            .wraps = it->wraps,
        };
        if (!cham_policy_add_item(p->pol, &pi))
            return false;
    }
    if (p->pol->n_items)
        qsort(p->pol->items, p->pol->n_items, sizeof *p->pol->items, cmp_item);
    return true;
}

static bool check_options(const cham_hyperoffload_options_t *o, char *err, size_t err_size)
{
    if (o->positions < 1 || o->positions > 4096) {
        cham_set_err(err, err_size, "hyperoffload planner: positions %u is out of range "
                     "(1..4096)", o->positions);
        return false;
    }
    if (o->passes < 1 || o->passes > 100) {
        cham_set_err(err, err_size, "hyperoffload planner: passes %u is out of range (1..100)",
                     o->passes);
        return false;
    }
    return true;
}

cham_status_t cham_plan_hyperoffload(const cham_profile_t *profile,
                                     const cham_planner_config_t *config,
                                     const cham_hyperoffload_options_t *options,
                                     cham_policy_t **out, cham_hyperoffload_result_t *result,
                                     char *err, size_t err_size)
{
    cham_profile_view_t v;
    uint64_t capacity = 0, usable = 0;
    cham_status_t st = cham_gen_start("hyperoffload planner", profile, config, out, &v,
                                      &capacity, &usable, err, err_size);
    if (st != CHAM_OK)
        return st;
    cham_hyperoffload_options_t o = options ? *options : cham_hyperoffload_options_default();
    if (!check_options(&o, err, err_size))
        return CHAM_ERR_INVALID_ARG;

    planner_t p = {.v = &v, .o = &o};
    size_t n = v.n_ops, n1 = n ? n : 1;
    p.pol = cham_policy_new("hyperoffload");
    p.op_ns = malloc(n1 * sizeof *p.op_ns);
    p.curve = malloc(2 * n1 * sizeof *p.curve);
    p.actual = malloc(2 * n1 * sizeof *p.actual);
    p.cand = malloc((o.positions + 8) * sizeof *p.cand);
    if (!p.pol || !p.op_ns || !p.curve || !p.actual || !p.cand ||
        !cham_gen_layers_build(&v, config, &p.layers) ||
        !cham_gen_tensors(&v, &p.layers, config->min_swap_bytes, o.persistent, NULL, 0, &p.t,
                          &p.n_t) ||
        !items_build(&p, config))
        goto host_oom;
    p.order = malloc((p.n_items ? p.n_items : 1) * sizeof *p.order);
    p.value = malloc((p.n_items ? p.n_items : 1) * sizeof *p.value);
    if (!p.order || !p.value)
        goto host_oom;
    cham_profile_memory_curve(profile, p.actual, p.curve);
    for (size_t k = 0; k < n; k++)
        p.op_ns[k] = (uint64_t)(p.layers.op_ns[k] + 0.5);
    if (!ho_sim_init(&p.sim, n, p.op_ns, p.curve, usable, p.items, p.n_items))
        goto host_oom;

    cham_hyperoffload_result_t r = {.candidates = p.n_items};
    ho_eval(&p.sim, &p.cur);
    r.resident_peak = p.cur.peak;
    r.ideal_ns = p.cur.step_ns;
    if (n && !insert_all(&p))
        goto host_oom;
    r.inserted = p.cur;
    if (n && o.refine && !refine(&p, &r.moved))
        goto host_oom;
    r.refined = p.cur;
    r.evaluations = p.sim.evaluations;
    for (size_t i = 0; i < p.n_items; i++)
        if (p.items[i].active) {
            r.offloaded++;
            r.offloaded_bytes += p.items[i].bytes;
        }
    if (!write_policy(&p) ||
        !cham_gen_replay(p.pol, &p.layers, n, config->h2d_bandwidth, config->d2h_bandwidth) ||
        !cham_gen_finish(p.pol, &p.layers, &v, p.curve, capacity, usable))
        goto host_oom;
    if (result)
        *result = r;
    *out = p.pol;
    p.pol = NULL;
    planner_free(&p);
    return CHAM_OK;

host_oom:
    cham_set_err(err, err_size, "hyperoffload planner: out of host memory (%zu ops)", v.n_ops);
    planner_free(&p);
    return CHAM_ERR_HOST_OOM;
}
