/* One candidate's score: Belady's swap planning run inside SwapAdvisor's
 * dataflow simulation (paper §4.2, §3). The pool's objects are fungible
 * within a size class. Walking the schedule, each op's tensors must be
 * resident; one that is not takes a free object of its class or, when
 * none is free, the object of the resident tensor of its class used
 * farthest in the future (among those whose copy out and the copy in
 * would both be done by now, if any: the paper's threshold). Three
 * streams run at once: compute in schedule order, swap-outs and swap-ins
 * each in the order the planner decided them. A swap-out starts when the
 * victim's last use ends, a swap-in as soon as its object is free (the
 * paper's "as early as possible"), an op when the op before it ended and
 * its inputs and output objects are ready.
 *
 * Model state follows the paper's double pass: the first pass starts with
 * none of it on the device; what is resident at its end is the next
 * pass's initial set, dropping (again) whatever is not resident at the end
 * until start and end agree, so every step can run the same plan. Model
 * state resident at the end but not at the start leaves after its last
 * use. docs/swapadvisor.md, "The score". */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/assert.h"
#include "common/grow.h"
#include "common/order.h"
#include "policy/swapadvisor/swapadvisor-impl.h"

enum { NONE, RES, AWAY, DEAD };

struct sa_work {
    const sa_graph_t *g;
    uint32_t *use_start;         /* n_tensors + 1: CSR of use_pos */
    uint32_t *use_pos;           /* per tensor, its uses' positions */
    uint32_t *cursor;            /* per tensor: uses passed */
    uint8_t *state;
    uint32_t *pin;               /* position + 1 while the op there runs */
    uint32_t *res_idx;           /* index in its class's resident list */
    double *last_end;            /* end of its latest use */
    double *host_ready;          /* its host copy complete */
    uint32_t *last_pos, *last_ref;
    uint8_t *in_r, *best_r;      /* model state resident at the start */
    uint64_t *keys;              /* n_tensors: sorting the end's swap-outs */
    uint32_t *cls;               /* n_sizes */
    uint32_t *seg;               /* per class: start of its segment */
    uint32_t *res, *res_n;       /* resident lists in the segments */
    double *free_t;              /* free objects' times, a ring per segment */
    uint32_t *free_head, *free_n;
    double *start, *end;         /* n_ops, per position */
};

sa_work_t *sa_work_new(const sa_graph_t *g)
{
    sa_work_t *w = calloc(1, sizeof *w);
    if (!w)
        return NULL;
    size_t nt = g->n_tensors ? g->n_tensors : 1, ns = g->n_sizes ? g->n_sizes : 1;
    size_t no = g->n_ops ? g->n_ops : 1, nr = g->op_start[g->n_ops];
    w->g = g;
    w->use_start = malloc((nt + 1) * sizeof *w->use_start);
    w->use_pos = malloc((nr ? nr : 1) * sizeof *w->use_pos);
    w->cursor = malloc(nt * sizeof *w->cursor);
    w->state = malloc(nt);
    w->pin = malloc(nt * sizeof *w->pin);
    w->res_idx = malloc(nt * sizeof *w->res_idx);
    w->last_end = malloc(nt * sizeof *w->last_end);
    w->host_ready = malloc(nt * sizeof *w->host_ready);
    w->last_pos = malloc(nt * sizeof *w->last_pos);
    w->last_ref = malloc(nt * sizeof *w->last_ref);
    w->in_r = malloc(nt);
    w->best_r = malloc(nt);
    w->keys = malloc(nt * sizeof *w->keys);
    w->cls = malloc(ns * sizeof *w->cls);
    w->seg = malloc(ns * sizeof *w->seg);
    w->res = malloc(nt * sizeof *w->res);
    w->res_n = malloc(ns * sizeof *w->res_n);
    w->free_t = malloc(nt * sizeof *w->free_t);
    w->free_head = malloc(ns * sizeof *w->free_head);
    w->free_n = malloc(ns * sizeof *w->free_n);
    w->start = malloc(no * sizeof *w->start);
    w->end = malloc(no * sizeof *w->end);
    if (!w->use_start || !w->use_pos || !w->cursor || !w->state || !w->pin || !w->res_idx ||
        !w->last_end || !w->host_ready || !w->last_pos || !w->last_ref || !w->in_r ||
        !w->best_r || !w->keys || !w->cls || !w->seg || !w->res || !w->res_n || !w->free_t ||
        !w->free_head || !w->free_n || !w->start || !w->end) {
        sa_work_free(w);
        return NULL;
    }
    w->use_start[0] = 0;
    for (size_t t = 0; t < g->n_tensors; t++)
        w->use_start[t + 1] = w->use_start[t] + g->n_uses[t];
    return w;
}

void sa_work_free(sa_work_t *w)
{
    if (!w)
        return;
    free(w->use_start);
    free(w->use_pos);
    free(w->cursor);
    free(w->state);
    free(w->pin);
    free(w->res_idx);
    free(w->last_end);
    free(w->host_ready);
    free(w->last_pos);
    free(w->last_ref);
    free(w->in_r);
    free(w->best_r);
    free(w->keys);
    free(w->cls);
    free(w->seg);
    free(w->res);
    free(w->res_n);
    free(w->free_t);
    free(w->free_head);
    free(w->free_n);
    free(w->start);
    free(w->end);
    free(w);
}

/* ---- the pool ------------------------------------------------------------ */

typedef struct pass {
    const sa_graph_t *g;
    const sa_chrom_t *c;
    sa_work_t *w;
    double in_free, out_free;    /* when each copy stream is idle */
    sa_eval_result_t res;
    sa_event_t **events;         /* NULL: not recording */
    size_t *n_events, cap_events;
    bool host_oom;
    bool dropped;                /* model state left before its first use */
} pass_t;

static void res_add(sa_work_t *w, uint32_t k, uint32_t t)
{
    w->res_idx[t] = w->res_n[k];
    w->res[w->seg[k] + w->res_n[k]++] = t;
    w->state[t] = RES;
}

static void res_remove(sa_work_t *w, uint32_t k, uint32_t t, uint8_t state)
{
    uint32_t *list = w->res + w->seg[k], i = w->res_idx[t], last = list[--w->res_n[k]];
    list[i] = last;
    w->res_idx[last] = i;
    w->state[t] = state;
}

/* Takes a free object of class k: the time it became free. */
static double take_free(pass_t *p, uint32_t k)
{
    sa_work_t *w = p->w;
    uint32_t cnt = p->c->cnt[k];
    double t = w->free_t[w->seg[k] + w->free_head[k]];
    w->free_head[k] = (w->free_head[k] + 1) % cnt;
    w->free_n[k]--;
    return t;
}

static void give_free(pass_t *p, uint32_t k, double t)
{
    sa_work_t *w = p->w;
    uint32_t cnt = p->c->cnt[k];
    w->free_t[w->seg[k] + (w->free_head[k] + w->free_n[k]) % cnt] = t;
    w->free_n[k]++;
}

static void record(pass_t *p, sa_event_kind_t kind, uint32_t t, uint32_t at, uint32_t last,
                   uint32_t from, double start, double end)
{
    if (!p->events || p->host_oom)
        return;
    sa_event_t *v = cham_grow(*p->events, &p->cap_events, *p->n_events + 1, sizeof *v, 64);
    if (!v) {
        p->host_oom = true;
        return;
    }
    *p->events = v;
    v[(*p->n_events)++] = (sa_event_t){.kind = kind, .tensor = t, .at = at, .last = last,
                                       .from = from, .start = start, .end = end};
}

/* The tensor of class k to leave for t at position i (now: when the op
 * before ended), or UINT32_MAX when every resident one is in use. */
static uint32_t victim(const pass_t *p, uint32_t k, uint32_t i, double now, uint32_t t)
{
    const sa_graph_t *g = p->g;
    const sa_work_t *w = p->w;
    double need_in = w->state[t] == AWAY ? (double)g->bytes[t] / g->h2d : 0;
    uint32_t best_old = UINT32_MAX, best_any = UINT32_MAX;
    uint32_t next_old = 0, next_any = 0;
    const uint32_t *list = w->res + w->seg[k];
    for (uint32_t j = 0; j < w->res_n[k]; j++) {
        uint32_t v = list[j];
        /* A preexisting tensor stays until its first use: a swap-out hangs
         * on a use. */
        if (w->pin[v] == i + 1 || (w->last_pos[v] == UINT32_MAX && !g->persistent[v]))
            continue;
        uint32_t next = w->cursor[v] < g->n_uses[v] ? w->use_pos[w->use_start[v] + w->cursor[v]]
                                                    : UINT32_MAX;
        bool better_any = best_any == UINT32_MAX || next > next_any ||
                          (next == next_any && v < best_any);
        if (better_any) {
            best_any = v;
            next_any = next;
        }
        bool old = w->last_end[v] + (double)g->bytes[v] / g->d2h + need_in <= now;
        if (old && (best_old == UINT32_MAX || next > next_old ||
                    (next == next_old && v < best_old))) {
            best_old = v;
            next_old = next;
        }
    }
    return best_old != UINT32_MAX ? best_old : best_any;
}

/* Sends v away: the time its object is free. */
static double evict(pass_t *p, uint32_t k, uint32_t v, uint32_t at)
{
    const sa_graph_t *g = p->g;
    sa_work_t *w = p->w;
    if (w->last_pos[v] == UINT32_MAX) {
        /* Model state not used yet in the step: it need not have been on the
         * device at the start (paper: removed from the initial residents);
         * the pass is inconsistent and the next starts without it. */
        w->in_r[v] = 0;
        p->dropped = true;
        res_remove(w, k, v, AWAY);
        return 0;
    }
    bool backed = g->refs[w->last_ref[v]].backed;
    double start = w->last_end[v], end = start;
    if (!backed) {   /* the caller's host copy holds it: nothing to copy */
        start = start > p->out_free ? start : p->out_free;
        end = start + (double)g->bytes[v] / g->d2h;
        p->out_free = end;
        p->res.n_out++;
        p->res.out_bytes += g->bytes[v];
    }
    w->host_ready[v] = end;
    res_remove(w, k, v, AWAY);
    record(p, SA_OUT, v, at, w->last_pos[v], 0, start, end);
    return end;
}

/* Initial residents: preexisting tensors (false if one finds no object)
 * and model state in in_r, in the order of first use (what does not fit
 * starts away and leaves in_r). */
static bool place_initial(pass_t *p)
{
    const sa_graph_t *g = p->g;
    sa_work_t *w = p->w;
    const uint32_t *order = p->c->order;
    for (size_t t = 0; t < g->n_tensors; t++)
        w->state[t] = g->persistent[t] ? AWAY : NONE;
    /* Preexisting tensors first: they must all be there, model state
     * only may be, and must not take their objects. */
    for (int model_state = 0; model_state < 2; model_state++)
        for (size_t i = 0; i < g->n_ops; i++)
            for (uint32_t r = g->op_start[order[i]]; r < g->op_start[order[i] + 1]; r++) {
                uint32_t t = g->refs[r].tensor, k = w->cls[g->size_of[t]];
                bool pre = !model_state && g->preexisting[t] && w->state[t] == NONE;
                bool kept = model_state && g->persistent[t] && w->in_r[t] &&
                            w->state[t] == AWAY;
                if (!pre && !kept)
                    continue;
                if (w->free_n[k] == 0) {
                    if (pre)
                        return false;
                    w->in_r[t] = 0;
                    continue;
                }
                take_free(p, k);
                res_add(w, k, t);
            }
    return true;
}

/* Model state resident at the end but not at the start leaves after its
 * last use, in the order of those uses. */
static void leave_at_end(pass_t *p)
{
    const sa_graph_t *g = p->g;
    sa_work_t *w = p->w;
    size_t m = 0;
    for (size_t t = 0; t < g->n_tensors; t++)
        if (g->persistent[t] && w->state[t] == RES && !w->in_r[t])
            w->keys[m++] = (uint64_t)w->last_pos[t] << 32 | t;
    if (m > 1)
        qsort(w->keys, m, sizeof *w->keys, cham_order_u64);
    for (size_t i = 0; i < m; i++) {
        uint32_t t = (uint32_t)w->keys[i];
        bool backed = g->refs[w->last_ref[t]].backed;
        double start = w->last_end[t], end = start;
        if (!backed) {
            start = start > p->out_free ? start : p->out_free;
            end = start + (double)g->bytes[t] / g->d2h;
            p->out_free = end;
            p->res.n_out++;
            p->res.out_bytes += g->bytes[t];
        }
        record(p, SA_OUT_END, t, (uint32_t)g->n_ops, w->last_pos[t], 0, start, end);
    }
}

/* One pass with the initial model state in w->in_r (cleared for what does
 * not fit). Returns whether it is consistent: all of in_r resident at the
 * end. p->res.time_ns is INFINITY when the pool cannot run the schedule. */
static bool run_pass(pass_t *p)
{
    const sa_graph_t *g = p->g;
    const sa_chrom_t *c = p->c;
    sa_work_t *w = p->w;
    size_t n = g->n_ops;
    p->in_free = p->out_free = 0;
    p->dropped = false;
    p->res = (sa_eval_result_t){.time_ns = INFINITY};
    uint32_t nc = sa_classes(g, c->step, w->cls);
    double pool = 0;
    for (size_t s = 0; s < g->n_sizes; s++)   /* a class's objects are its largest size */
        if (s + 1 == g->n_sizes || w->cls[s + 1] != w->cls[s])
            pool += (double)g->sizes[s] * c->cnt[w->cls[s]];
    if (pool > (double)g->usable)
        return true;    /* a repair that could not fit the pool: infeasible */
    for (uint32_t k = 0, at = 0; k < nc; k++) {
        w->seg[k] = at;
        at += c->cnt[k];
        w->res_n[k] = 0;
        w->free_head[k] = 0;
        w->free_n[k] = c->cnt[k];
        for (uint32_t j = 0; j < c->cnt[k]; j++)
            w->free_t[w->seg[k] + j] = 0;
    }
    for (size_t t = 0; t < g->n_tensors; t++) {
        w->cursor[t] = w->pin[t] = 0;
        w->last_end[t] = w->host_ready[t] = 0;
        w->last_pos[t] = w->last_ref[t] = UINT32_MAX;
    }
    if (!place_initial(p))
        return true;
    double now = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t op = c->order[i], a = g->op_start[op], b = g->op_start[op + 1];
        double ready = now;
        for (uint32_t r = a; r < b; r++)
            w->pin[g->refs[r].tensor] = (uint32_t)i + 1;
        for (uint32_t r = a; r < b; r++) {
            uint32_t t = g->refs[r].tensor, k = w->cls[g->size_of[t]];
            if (w->state[t] == RES)
                continue;
            double obj;
            uint32_t from = UINT32_MAX;
            if (w->free_n[k]) {
                obj = take_free(p, k);
            } else {
                uint32_t v = victim(p, k, (uint32_t)i, now, t);
                if (v == UINT32_MAX)
                    return true;    /* infeasible: the repair keeps this from happening */
                size_t before = p->events ? *p->n_events : 0;
                obj = evict(p, k, v, (uint32_t)i);
                if (p->events && *p->n_events > before)
                    from = (uint32_t)*p->n_events - 1;
            }
            bool in = w->state[t] == AWAY;
            res_add(w, k, t);
            if (in) {
                double s = obj > p->in_free ? obj : p->in_free;
                s = s > w->host_ready[t] ? s : w->host_ready[t];
                double e = s + (double)g->bytes[t] / g->h2d;
                p->in_free = e;
                p->res.n_in++;
                p->res.in_bytes += g->bytes[t];
                record(p, SA_IN, t, (uint32_t)i, 0, from, s, e);
                obj = e;
            }
            ready = ready > obj ? ready : obj;
        }
        w->start[i] = ready;
        now = w->end[i] = ready + g->cost_ns[op];
        for (uint32_t r = a; r < b; r++) {
            uint32_t t = g->refs[r].tensor;
            w->last_end[t] = now;
            w->last_pos[t] = (uint32_t)i;
            w->last_ref[t] = r;
            if (++w->cursor[t] == g->n_uses[t] && !g->persistent[t]) {
                uint32_t k = w->cls[g->size_of[t]];
                res_remove(w, k, t, DEAD);
                give_free(p, k, now);
            }
        }
    }
    bool consistent = !p->dropped;
    for (size_t t = 0; t < g->n_tensors; t++)
        if (w->in_r[t] && w->state[t] != RES) {
            consistent = false;
            w->in_r[t] = 0;   /* the next pass's set */
        }
    leave_at_end(p);
    p->res.time_ns = now > p->out_free ? now : p->out_free;
    return consistent;
}

/* The positions of each tensor's uses in c's schedule. */
static void use_positions(const sa_graph_t *g, const sa_chrom_t *c, sa_work_t *w)
{
    uint32_t *fill = w->cursor;
    memset(fill, 0, g->n_tensors * sizeof *fill);
    for (size_t i = 0; i < g->n_ops; i++) {
        uint32_t op = c->order[i];
        CHAM_ASSERT(op < g->n_ops);   /* a schedule: a permutation of the ops */
        for (uint32_t r = g->op_start[op]; r < g->op_start[op + 1]; r++) {
            uint32_t t = g->refs[r].tensor;
            w->use_pos[w->use_start[t] + fill[t]++] = (uint32_t)i;
        }
    }
}

bool sa_eval(const sa_graph_t *g, const sa_chrom_t *c, sa_work_t *w, sa_eval_result_t *res,
             sa_event_t **events, size_t *n_events, double *start_ns, double *end_ns)
{
    size_t nt = g->n_tensors;
    use_positions(g, c, w);
    pass_t p = {.g = g, .c = c, .w = w};
    /* First pass: no model state on the device at the start. */
    memset(w->in_r, 0, nt);
    run_pass(&p);
    sa_eval_result_t best = p.res;
    memset(w->best_r, 0, nt);
    if (isfinite(best.time_ns)) {
        /* Then what the first pass ended with, shrunk until consistent. */
        for (size_t t = 0; t < nt; t++)
            w->in_r[t] = g->persistent[t] && w->state[t] == RES;
        for (int attempt = 0; attempt < 4; attempt++) {
            bool any = false;
            for (size_t t = 0; t < nt && !any; t++)
                any = w->in_r[t];
            if (!any)
                break;
            if (run_pass(&p)) {
                if (p.res.time_ns < best.time_ns) {
                    best = p.res;
                    memcpy(w->best_r, w->in_r, nt);
                }
                break;
            }
        }
    }
    *res = best;
    if (!events)
        return true;
    *n_events = 0;
    p.events = events;
    p.n_events = n_events;
    memcpy(w->in_r, w->best_r, nt);
    run_pass(&p);
    for (size_t i = 0; i < g->n_ops; i++) {
        start_ns[i] = w->start[i];
        end_ns[i] = w->end[i];
    }
    return !p.host_oom;
}
