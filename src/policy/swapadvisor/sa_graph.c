/* SwapAdvisor's dataflow graph from a detailed profile: per op the tensors
 * it reads and writes, per tensor its size and whether it is model state,
 * and the dependencies any schedule must keep. The profile records ops in
 * the order they ran on one compute stream; two ops may trade places
 * unless one writes a storage the other uses (read after write, write
 * after read, write after write). An op that uses no tensor (a wait, an
 * event, a collective whose tensors the profile did not see) keeps its
 * place between its neighbours. docs/swapadvisor.md, "The graph". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/grow.h"
#include "common/order.h"
#include "policy/plan-impl.h"
#include "policy/swapadvisor/swapadvisor-impl.h"

typedef struct edges {
    uint64_t *v;                 /* a << 32 | b */
    size_t n, cap;
} edges_t;

static bool add_edge(edges_t *e, uint32_t a, uint32_t b)
{
    uint64_t *v = cham_grow(e->v, &e->cap, e->n + 1, sizeof *v, 64);
    if (!v)
        return false;
    e->v = v;
    e->v[e->n++] = (uint64_t)a << 32 | b;
    return true;
}

/* The CSR of the edges by their first (by_b false) or second end. */
static bool csr(const edges_t *e, size_t n_ops, bool by_b, uint32_t **start, uint32_t **list)
{
    *start = calloc(n_ops + 1, sizeof **start);
    *list = malloc((e->n ? e->n : 1) * sizeof **list);
    if (!*start || !*list)
        return false;
    for (size_t i = 0; i < e->n; i++)
        (*start)[(by_b ? (uint32_t)e->v[i] : (uint32_t)(e->v[i] >> 32)) + 1]++;
    for (size_t k = 0; k < n_ops; k++)
        (*start)[k + 1] += (*start)[k];
    uint32_t *fill = malloc((n_ops ? n_ops : 1) * sizeof *fill);
    if (!fill)
        return false;
    memcpy(fill, *start, n_ops * sizeof *fill);
    for (size_t i = 0; i < e->n; i++) {   /* edges are sorted: each list is too */
        uint32_t a = (uint32_t)(e->v[i] >> 32), b = (uint32_t)e->v[i];
        (*list)[fill[by_b ? b : a]++] = by_b ? a : b;
    }
    free(fill);
    return true;
}

/* The dependencies of one storage's uses r[a..b) (in op order). */
static bool storage_edges(const cham_profile_view_t *v, const cham_gen_use_ref_t *r, size_t a,
                          size_t b, edges_t *e, uint32_t *readers)
{
    uint32_t writer = UINT32_MAX;
    size_t n_readers = 0;
    for (size_t i = a; i < b;) {
        size_t j = i;
        bool writes = false;
        for (; j < b && r[j].op == r[i].op; j++)
            writes = writes || v->uses[r[j].use].output;
        uint32_t op = r[i].op;
        if (writer != UINT32_MAX && !add_edge(e, writer, op))
            return false;
        if (writes) {
            for (size_t k = 0; k < n_readers; k++)
                if (readers[k] != writer && !add_edge(e, readers[k], op))
                    return false;
            writer = op;
            n_readers = 0;
        } else {
            readers[n_readers++] = op;
        }
        i = j;
    }
    return true;
}

/* Tensors (storages with bytes), their refs per op, sizes and edges. */
static bool build(const cham_profile_view_t *v, sa_graph_t *g, edges_t *e)
{
    size_t nu = v->n_uses, n = v->n_ops;
    cham_gen_use_ref_t *r = cham_gen_uses_by_storage(v);
    uint32_t *readers = malloc((nu ? nu : 1) * sizeof *readers);
    uint32_t *count = calloc(n + 1, sizeof *count);
    size_t cap_t = nu ? nu : 1;
    g->bytes = malloc(cap_t * sizeof *g->bytes);
    g->storage = malloc(cap_t * sizeof *g->storage);
    g->n_uses = calloc(cap_t, sizeof *g->n_uses);
    g->persistent = calloc(cap_t, sizeof *g->persistent);
    g->preexisting = calloc(cap_t, sizeof *g->preexisting);
    sa_ref_t *tmp = malloc(cap_t * sizeof *tmp);
    uint32_t *tmp_op = malloc(cap_t * sizeof *tmp_op);
    bool ok = r && readers && count && g->bytes && g->storage && g->n_uses && g->persistent &&
              g->preexisting && tmp && tmp_op;
    size_t n_refs = 0;
    for (size_t a = 0; ok && a < nu;) {
        size_t b = a;
        uint64_t bytes = 0;
        bool persistent = false;
        for (; b < nu && r[b].storage == r[a].storage; b++) {
            const cham_tensor_use_t *u = &v->uses[r[b].use];
            bytes = u->storage_bytes > bytes ? u->storage_bytes : bytes;
            persistent = persistent || u->persistent;
        }
        ok = storage_edges(v, r, a, b, e, readers);
        if (ok && bytes > 0) {
            uint32_t t = (uint32_t)g->n_tensors++;
            g->bytes[t] = bytes;
            g->storage[t] = r[a].storage;
            g->persistent[t] = persistent;
            bool first_writes = false;
            for (size_t i = a; i < b;) {   /* one ref per op */
                size_t j = i;
                bool writes = false;
                for (; j < b && r[j].op == r[i].op; j++)
                    writes = writes || v->uses[r[j].use].output;
                if (i == a)
                    first_writes = writes;
                tmp[n_refs] = (sa_ref_t){.tensor = t, .use = r[i].use, .writes = writes,
                                         .backed = cham_gen_backed_at(v, r, i)};
                tmp_op[n_refs++] = r[i].op;
                count[r[i].op + 1]++;
                g->n_uses[t]++;
                i = j;
            }
            g->preexisting[t] = !persistent && !first_writes;
        }
        a = b;
    }
    if (ok) {
        for (size_t k = 0; k < n; k++)
            count[k + 1] += count[k];
        g->op_start = malloc((n + 1) * sizeof *g->op_start);
        g->refs = malloc((n_refs ? n_refs : 1) * sizeof *g->refs);
        ok = g->op_start && g->refs;
        if (ok) {
            memcpy(g->op_start, count, (n + 1) * sizeof *count);
            for (size_t i = 0; i < n_refs; i++)   /* by op, tensors in storage order */
                g->refs[count[tmp_op[i]]++] = tmp[i];
        }
    }
    /* An op with no tensor stays between its neighbours. */
    for (size_t k = 0; ok && k < n; k++)
        if (v->ops[k].n_uses == 0)
            ok = (k == 0 || add_edge(e, (uint32_t)k - 1, (uint32_t)k)) &&
                 (k + 1 == n || add_edge(e, (uint32_t)k, (uint32_t)k + 1));
    free(r);
    free(readers);
    free(count);
    free(tmp);
    free(tmp_op);
    return ok;
}

/* The distinct sizes and, per size, its tensors and preexisting ones. */
static bool build_sizes(sa_graph_t *g)
{
    size_t nt = g->n_tensors;
    g->sizes = malloc((nt ? nt : 1) * sizeof *g->sizes);
    g->size_of = malloc((nt ? nt : 1) * sizeof *g->size_of);
    if (!g->sizes || !g->size_of)
        return false;
    memcpy(g->sizes, g->bytes, nt * sizeof *g->sizes);
    size_t ns = cham_sort_unique_u64(g->sizes, nt);
    g->n_sizes = ns;
    g->size_tensors = calloc(ns ? ns : 1, sizeof *g->size_tensors);
    g->size_pre = calloc(ns ? ns : 1, sizeof *g->size_pre);
    if (!g->size_tensors || !g->size_pre)
        return false;
    for (size_t t = 0; t < nt; t++) {
        size_t lo = 0, hi = ns;
        while (hi - lo > 1) {
            size_t mid = (lo + hi) / 2;
            if (g->sizes[mid] <= g->bytes[t])
                lo = mid;
            else
                hi = mid;
        }
        g->size_of[t] = (uint32_t)lo;
        g->size_tensors[lo]++;
        g->size_pre[lo] += g->preexisting[t];
    }
    return true;
}

bool sa_graph_build(const cham_profile_view_t *v, const double *cost_ns, double h2d_bw,
                    double d2h_bw, uint64_t usable, sa_graph_t *g)
{
    memset(g, 0, sizeof *g);
    size_t n = v->n_ops;
    g->n_ops = n;
    g->h2d = h2d_bw * 1e-9;
    g->d2h = d2h_bw * 1e-9;
    g->usable = usable;
    edges_t e = {0};
    g->cost_ns = malloc((n ? n : 1) * sizeof *g->cost_ns);
    bool ok = g->cost_ns && build(v, g, &e) && build_sizes(g);
    if (ok) {
        if (n)   /* cost_ns may be NULL without ops */
            memcpy(g->cost_ns, cost_ns, n * sizeof *cost_ns);
        e.n = cham_sort_unique_u64(e.v, e.n);   /* e.v is NULL without edges */
        ok = csr(&e, n, true, &g->pred_start, &g->preds) &&
             csr(&e, n, false, &g->succ_start, &g->succs);
    }
    free(e.v);
    if (!ok)
        sa_graph_free(g);
    return ok;
}

void sa_graph_free(sa_graph_t *g)
{
    free(g->cost_ns);
    free(g->op_start);
    free(g->refs);
    free(g->pred_start);
    free(g->preds);
    free(g->succ_start);
    free(g->succs);
    free(g->bytes);
    free(g->storage);
    free(g->size_of);
    free(g->n_uses);
    free(g->persistent);
    free(g->preexisting);
    free(g->sizes);
    free(g->size_tensors);
    free(g->size_pre);
    memset(g, 0, sizeof *g);
}

bool sa_schedule_legal(const sa_graph_t *g, const uint32_t *order, char *why, size_t why_size)
{
    size_t n = g->n_ops;
    uint32_t *pos = malloc((n ? n : 1) * sizeof *pos);
    if (!pos) {
        snprintf(why, why_size, "out of host memory checking a schedule");
        return false;
    }
    for (size_t k = 0; k < n; k++)
        pos[k] = UINT32_MAX;
    bool ok = true;
    for (size_t i = 0; ok && i < n; i++) {
        if (order[i] >= n || pos[order[i]] != UINT32_MAX) {
            snprintf(why, why_size, "position %zu: op %u is %s", i, order[i],
                     order[i] >= n ? "not an op of the graph" : "scheduled twice");
            ok = false;
        } else {
            pos[order[i]] = (uint32_t)i;
        }
    }
    for (size_t b = 0; ok && b < n; b++)
        for (uint32_t k = g->pred_start[b]; ok && k < g->pred_start[b + 1]; k++)
            if (pos[g->preds[k]] > pos[b]) {
                snprintf(why, why_size, "op %u (position %u) runs before op %u (position %u), "
                         "which it depends on", (unsigned)b, pos[b], g->preds[k],
                         pos[g->preds[k]]);
                ok = false;
            }
    free(pos);
    return ok;
}
