/* The vDNN baseline (Rhu et al., 2016, "vDNN_all" with one-layer prefetch)
 * over the policy container: every idle tensor leaves after its last
 * forward use, its block is reusable from the next logical layer and it
 * comes back one logical layer before the one that needs it. Memory is not
 * a goal: the policy is the same whatever the capacity, and its predicted
 * peak says whether it fits. It shares Chameleon's logical layers, idle
 * tensors, input checks and predictions (policy/plan-impl.h).
 * docs/policy.md, "vDNN baseline". */
#include <stdlib.h>

#include "common/message.h"
#include "policy/plan-impl.h"
#include "policy/policy-impl.h"

static uint64_t sat_add(uint64_t a, uint64_t b)
{
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

/* The end of each op in ns from the step's start: the step time spread
 * over the ops evenly or by the config's op costs, as layers.c's Eq. 1. */
static void op_ends(const cham_profile_view_t *v, const cham_planner_config_t *c, uint64_t *end)
{
    double total = (double)v->n_ops, done = 0;
    if (c->op_cost_ns) {
        total = 0;
        for (size_t k = 0; k < v->n_ops; k++)
            total += c->op_cost_ns[k];
    }
    for (size_t k = 0; k < v->n_ops; k++) {
        done += c->op_cost_ns ? c->op_cost_ns[k] : 1.0;
        double t = total > 0 ? (double)v->duration_ns * done / total : 0;
        end[k] = t >= 1.8e19 ? UINT64_MAX : (uint64_t)(t + 0.5);
    }
}

/* The op of layer ly running at time t (ns from the step's start), at or
 * after op f: the first op ending at t or later, or the layer's last op
 * when the copy runs past its end (it then completes in the boundary wait,
 * before the next layer starts). */
static uint32_t op_at(const cham_logical_layer_t *ly, const uint64_t *end, uint32_t f, uint64_t t)
{
    uint32_t lo = f, hi = ly->start_op + ly->n_ops - 1;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (end[mid] >= t)
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

/* Everything one run owns. */
typedef struct vdnn {
    cham_gen_layers_t layers;
    cham_gen_tensor_t *t;
    size_t n_t;
    uint64_t *curve, *actual, *end;
    uint64_t *in_ns;             /* per layer: H2D time of its prefetches */
    size_t *last_in;             /* per layer: its last prefetched item + 1 (0: none) */
    cham_policy_t *pol;
} vdnn_t;

static void vdnn_free(vdnn_t *d)
{
    cham_gen_layers_free(&d->layers);
    free(d->t);
    free(d->curve);
    free(d->actual);
    free(d->end);
    free(d->in_ns);
    free(d->last_in);
    cham_policy_free(d->pol);
}

/* The wait at the end of forward layer k for its offloads (out_ns of D2H
 * time), charged to its last item, the last added. */
static void close_layer(vdnn_t *d, uint32_t k, uint64_t out_ns)
{
    uint64_t time = d->layers.v[k].time_ns;
    if (out_ns > time) {
        cham_policy_item_t *it = &d->pol->items[d->pol->n_items - 1];
        it->stall_ns = sat_add(it->stall_ns, out_ns - time);
    }
}

/* Adds the items, in swap-out order (the tensors come sorted by last
 * forward use), with their swap-out completion and the waits at their
 * forward layers' ends; false when the host is out of memory. */
static bool add_items(vdnn_t *d, const cham_profile_view_t *v, const cham_planner_config_t *c)
{
    const cham_gen_layers_t *l = &d->layers;
    uint32_t cur = UINT32_MAX;       /* the forward layer of the last item */
    uint64_t link = 0, out_ns = 0;   /* its D2H copies: done at, total time */
    for (size_t i = 0; i < d->n_t; i++) {
        const cham_gen_tensor_t *t = &d->t[i];
        uint32_t lf = l->layer_of_op[t->last_fwd], lu = l->layer_of_op[t->first_bwd];
        /* Free from layer lf + 1, back from layer lu - 1: nothing to gain
         * unless lu - 1 comes after lf + 1 (free_op < swap_in_op). */
        if (lu < lf + 3)
            continue;
        if (lf != cur) {
            if (cur != UINT32_MAX)
                close_layer(d, cur, out_ns);
            cur = lf;
            link = out_ns = 0;
        }
        uint64_t t_out = cham_gen_transfer_ns(t->bytes, c->d2h_bandwidth, l->copy_latency_ns);
        uint64_t t_in = cham_gen_transfer_ns(t->bytes, c->h2d_bandwidth, l->copy_latency_ns);
        /* The copies of one layer go one after the other on the link, each
         * from the end of its op f at the earliest. */
        uint64_t f_end = d->end[t->last_fwd];
        link = sat_add(link > f_end ? link : f_end, t_out);
        out_ns = sat_add(out_ns, t_out);
        cham_policy_item_t it = {
            .storage = t->storage,
            .bytes = t->bytes,
            .out_use = v->uses[t->out_use],
            .in_use = v->uses[t->in_use],
            .swap_out_op = t->last_fwd,
            .swap_out_done_op = op_at(&l->v[lf], d->end, t->last_fwd, link),
            .free_op = l->v[lf + 1].start_op,
            .swap_in_layer = lu - 1,
            .swap_in_op = l->v[lu - 1].start_op,
            .use_op = t->first_bwd,
            .score = 0,
            .stall_ns = 0,
        };
        if (!cham_policy_add_item(d->pol, &it))
            return false;
        d->in_ns[lu - 1] = sat_add(d->in_ns[lu - 1], t_in);
        d->last_in[lu - 1] = d->pol->n_items;
    }
    if (cur != UINT32_MAX)
        close_layer(d, cur, out_ns);
    return true;
}

/* Each layer's prefetches run during it: what they take beyond its time is
 * waited for before the next layer (charged to the layer's last prefetched
 * item); remaining_ns reports the H2D time left, as Chameleon's. */
static void prefetch_stalls(vdnn_t *d)
{
    for (size_t k = 0; k < d->layers.n; k++) {
        cham_logical_layer_t *ly = &d->layers.v[k];
        uint64_t need = d->in_ns[k];
        ly->remaining_ns = ly->time_ns > need ? ly->time_ns - need : 0;
        if (d->last_in[k] && need > ly->time_ns) {
            cham_policy_item_t *it = &d->pol->items[d->last_in[k] - 1];
            it->stall_ns = sat_add(it->stall_ns, need - ly->time_ns);
        }
    }
}

cham_status_t cham_plan_vdnn(const cham_profile_t *profile, const cham_planner_config_t *config,
                             cham_policy_t **out, char *err, size_t err_size)
{
    cham_profile_view_t v;
    uint64_t capacity = 0, usable = 0;
    cham_status_t st = cham_gen_start("vdnn planner", profile, config, out, &v, &capacity,
                                      &usable, err, err_size);
    if (st != CHAM_OK)
        return st;

    vdnn_t d = {0};
    size_t ns = 2 * v.n_ops, n1 = v.n_ops ? v.n_ops : 1;
    d.pol = cham_policy_new("vdnn");
    d.curve = malloc((ns ? ns : 1) * sizeof *d.curve);
    d.actual = malloc((ns ? ns : 1) * sizeof *d.actual);
    d.end = malloc(n1 * sizeof *d.end);
    if (!d.pol || !d.curve || !d.actual || !d.end ||
        !cham_gen_layers_build(&v, config, &d.layers))
        goto host_oom;
    d.in_ns = calloc(d.layers.n ? d.layers.n : 1, sizeof *d.in_ns);
    d.last_in = calloc(d.layers.n ? d.layers.n : 1, sizeof *d.last_in);
    if (!d.in_ns || !d.last_in ||
        !cham_gen_tensors(&v, &d.layers, config->min_swap_bytes, false, NULL, 0, &d.t, &d.n_t))
        goto host_oom;
    cham_profile_memory_curve(profile, d.actual, d.curve);
    op_ends(&v, config, d.end);
    if (!add_items(&d, &v, config))
        goto host_oom;
    prefetch_stalls(&d);
    if (!cham_gen_finish(d.pol, &d.layers, &v, d.curve, capacity, usable))
        goto host_oom;
    *out = d.pol;
    d.pol = NULL;
    vdnn_free(&d);
    return CHAM_OK;

host_oom:
    cham_set_err(err, err_size, "vdnn planner: out of host memory (%zu ops)", v.n_ops);
    vdnn_free(&d);
    return CHAM_ERR_HOST_OOM;
}
