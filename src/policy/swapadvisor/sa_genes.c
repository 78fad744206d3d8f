/* SwapAdvisor's chromosome and its genetic operators (paper §5.2-5.3): a
 * schedule (crossover keeps one parent's prefix and the other's order for
 * the rest; mutation replays a dataflow scheduler that follows the parent
 * but picks a random ready op with probability P) and a memory pool (the
 * size-class steps and per-class object counts, crossed over at one point,
 * counts averaged per class, mutated by flipping steps and by Gaussian
 * noise, repaired to fit the usable bytes). docs/swapadvisor.md. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/rng.h"
#include "policy/swapadvisor/swapadvisor-impl.h"

/* splitmix64: small, fast and good enough for a search. */
uint64_t sa_rand(sa_rng_t *r)
{
    return cham_splitmix64(&r->s);
}

double sa_rand_unit(sa_rng_t *r)
{
    return cham_unit53(sa_rand(r));
}

static uint32_t below(sa_rng_t *r, uint32_t n)
{
    return n ? (uint32_t)(sa_rand(r) % n) : 0;
}

static double gaussian(sa_rng_t *r)
{
    double u = sa_rand_unit(r), v = sa_rand_unit(r);
    return sqrt(-2.0 * log(1.0 - u)) * cos(6.283185307179586 * v);
}

bool sa_chrom_alloc(const sa_graph_t *g, sa_chrom_t *c)
{
    c->order = malloc((g->n_ops ? g->n_ops : 1) * sizeof *c->order);
    c->step = calloc(g->n_sizes ? g->n_sizes : 1, sizeof *c->step);
    c->cnt = calloc(g->n_sizes ? g->n_sizes : 1, sizeof *c->cnt);
    c->time_ns = INFINITY;
    if (c->order && c->step && c->cnt)
        return true;
    sa_chrom_free(c);
    return false;
}

void sa_chrom_free(sa_chrom_t *c)
{
    free(c->order);
    free(c->step);
    free(c->cnt);
    memset(c, 0, sizeof *c);
}

void sa_chrom_copy(const sa_graph_t *g, sa_chrom_t *dst, const sa_chrom_t *src)
{
    memcpy(dst->order, src->order, g->n_ops * sizeof *dst->order);
    memcpy(dst->step, src->step, g->n_sizes * sizeof *dst->step);
    memcpy(dst->cnt, src->cnt, g->n_sizes * sizeof *dst->cnt);
    dst->time_ns = src->time_ns;
}

uint32_t sa_classes(const sa_graph_t *g, const uint8_t *step, uint32_t *cls)
{
    uint32_t c = 0;
    for (size_t s = 0; s < g->n_sizes; s++) {
        c += s > 0 && step[s];
        cls[s] = c;
    }
    return g->n_sizes ? c + 1 : 0;
}

/* ---- set-up ----------------------------------------------------------------*/

/* Per size, the most of its tensors alive at once in the profile's order:
 * model state and preexisting tensors from the start, the others from
 * their first use to their last. */
static bool demand(sa_genes_t *x)
{
    const sa_graph_t *g = x->g;
    uint32_t *live = calloc(g->n_sizes ? g->n_sizes : 1, sizeof *live);
    uint32_t *seen = calloc(g->n_tensors ? g->n_tensors : 1, sizeof *seen);
    if (!live || !seen) {
        free(live);
        free(seen);
        return false;
    }
    for (size_t t = 0; t < g->n_tensors; t++)
        if (g->persistent[t] || g->preexisting[t])
            live[g->size_of[t]]++;
    memcpy(x->demand, live, g->n_sizes * sizeof *live);
    for (size_t k = 0; k < g->n_ops; k++) {
        for (uint32_t i = g->op_start[k]; i < g->op_start[k + 1]; i++) {
            uint32_t t = g->refs[i].tensor, s = g->size_of[t];
            if (seen[t]++ == 0 && !g->persistent[t] && !g->preexisting[t] &&
                ++live[s] > x->demand[s])
                x->demand[s] = live[s];
        }
        for (uint32_t i = g->op_start[k]; i < g->op_start[k + 1]; i++) {
            uint32_t t = g->refs[i].tensor;
            if (!g->persistent[t] && seen[t] == g->n_uses[t])
                live[g->size_of[t]]--;
        }
    }
    free(live);
    free(seen);
    return true;
}

bool sa_genes_init(sa_genes_t *x, const sa_graph_t *g, double mutation,
                   double schedule_mutation)
{
    memset(x, 0, sizeof *x);
    x->g = g;
    x->mutation = mutation;
    x->schedule_mutation = schedule_mutation;
    x->demand = calloc(g->n_sizes ? g->n_sizes : 1, sizeof *x->demand);
    x->scratch = malloc((4 * g->n_ops + 8 * g->n_sizes + 1) * sizeof *x->scratch);
    x->seen = malloc(g->n_tensors ? g->n_tensors : 1);
    if (x->demand && x->scratch && x->seen && demand(x))
        return true;
    sa_genes_free(x);
    return false;
}

void sa_genes_free(sa_genes_t *x)
{
    free(x->demand);
    free(x->seen);
    free(x->scratch);
    memset(x, 0, sizeof *x);
}

/* ---- schedules -------------------------------------------------------------*/

void sa_schedule_mutate(const sa_graph_t *g, const uint32_t *in, uint32_t *out, double p,
                        sa_rng_t *r, uint32_t *scratch)
{
    size_t n = g->n_ops;
    uint32_t *indeg = scratch, *ready = scratch + n, *pos = scratch + 2 * n;
    size_t n_ready = 0;
    for (size_t i = 0; i < n; i++)
        pos[in[i]] = (uint32_t)i;
    for (size_t k = 0; k < n; k++) {
        indeg[k] = g->pred_start[k + 1] - g->pred_start[k];
        if (indeg[k] == 0)
            ready[n_ready++] = (uint32_t)k;
    }
    for (size_t i = 0; i < n; i++) {
        size_t pick = 0;
        if (p > 0 && sa_rand_unit(r) < p) {
            pick = below(r, (uint32_t)n_ready);
        } else {
            for (size_t j = 1; j < n_ready; j++)
                if (pos[ready[j]] < pos[ready[pick]])
                    pick = j;
        }
        uint32_t op = ready[pick];
        ready[pick] = ready[--n_ready];
        out[i] = op;
        for (uint32_t k = g->succ_start[op]; k < g->succ_start[op + 1]; k++)
            if (--indeg[g->succs[k]] == 0)
                ready[n_ready++] = g->succs[k];
    }
}

/* Child: b's first cr ops, then the rest in a's order (legal: paper §5.2). */
static void cross_schedule(const sa_graph_t *g, const uint32_t *a, const uint32_t *b,
                           size_t cr, uint32_t *out, uint32_t *mark)
{
    memset(mark, 0, g->n_ops * sizeof *mark);
    for (size_t i = 0; i < cr; i++) {
        out[i] = b[i];
        mark[b[i]] = 1;
    }
    size_t m = cr;
    for (size_t i = 0; i < g->n_ops; i++)
        if (!mark[a[i]])
            out[m++] = a[i];
}

/* ---- pools -----------------------------------------------------------------*/

/* Per size, its class's count (the paper's CNT_EXT). */
static void extend(const sa_graph_t *g, const sa_chrom_t *c, uint32_t *cls, uint32_t *ext)
{
    sa_classes(g, c->step, cls);
    for (size_t s = 0; s < g->n_sizes; s++)
        ext[s] = c->cnt[cls[s]];
}

/* c's counts from per-size counts ext: their mean over each class. */
static void counts_from(const sa_graph_t *g, sa_chrom_t *c, const uint32_t *ext, uint32_t *cls)
{
    uint32_t nc = sa_classes(g, c->step, cls);
    for (size_t s = 0, lo = 0; s < g->n_sizes; s++) {
        if (s + 1 < g->n_sizes && cls[s + 1] == cls[s])
            continue;
        double sum = 0;
        for (size_t i = lo; i <= s; i++)
            sum += ext[i];
        c->cnt[cls[s]] = (uint32_t)(sum / (double)(s + 1 - lo) + 0.5);
        lo = s + 1;
    }
    for (size_t k = nc; k < g->n_sizes; k++)
        c->cnt[k] = 0;
}

/* Per class, the fewest objects that run c's schedule (mn): at each
 * position, the objects its op uses plus every preexisting tensor not used
 * yet. Those cannot leave (the evaluation's victims skip them: a swap-out
 * hangs on a use), so a pool with fewer objects finds no victim there
 * whatever else it holds. cls is per size; mn, wait and tmp per class
 * (scratch). */
static void least_counts(sa_genes_t *x, const sa_chrom_t *c, const uint32_t *cls, uint32_t nc,
                         uint32_t *mn, uint32_t *wait, uint32_t *tmp)
{
    const sa_graph_t *g = x->g;
    memset(mn, 0, nc * sizeof *mn);
    memset(wait, 0, nc * sizeof *wait);
    memset(tmp, 0, nc * sizeof *tmp);
    memset(x->seen, 0, g->n_tensors);
    for (size_t s = 0; s < g->n_sizes; s++)
        wait[cls[s]] += g->size_pre[s];    /* all resident at the start */
    memcpy(mn, wait, nc * sizeof *mn);
    for (size_t i = 0; i < g->n_ops; i++) {
        uint32_t op = c->order[i], a = g->op_start[op], b = g->op_start[op + 1];
        for (uint32_t r = a; r < b; r++) {
            uint32_t t = g->refs[r].tensor, k = cls[g->size_of[t]];
            tmp[k]++;
            if (g->preexisting[t] && !x->seen[t])
                wait[k]--;                     /* counted once: as the op's */
            x->seen[t] = 1;
        }
        for (uint32_t r = a; r < b; r++) {
            uint32_t k = cls[g->size_of[g->refs[r].tensor]];
            if (tmp[k] + wait[k] > mn[k])
                mn[k] = tmp[k] + wait[k];
        }
        for (uint32_t r = a; r < b; r++)
            tmp[cls[g->size_of[g->refs[r].tensor]]] = 0;
    }
}

bool sa_genes_repair(sa_genes_t *x, sa_chrom_t *c)
{
    const sa_graph_t *g = x->g;
    size_t ns = g->n_sizes;
    uint32_t *cls = x->scratch, *mn = cls + ns, *tens = mn + ns, *last = tens + ns,
             *tmp = last + ns, *wait = tmp + ns;
    uint32_t nc = sa_classes(g, c->step, cls);
    memset(tens, 0, nc * sizeof *tens);
    for (size_t s = 0; s < ns; s++) {
        tens[cls[s]] += g->size_tensors[s];
        last[cls[s]] = (uint32_t)s;
    }
    least_counts(x, c, cls, nc, mn, wait, tmp);
    double total = 0, least = 0;
    for (uint32_t k = 0; k < nc; k++) {
        double size = (double)g->sizes[last[k]];
        c->cnt[k] = c->cnt[k] < mn[k] ? mn[k] : c->cnt[k] > tens[k] ? tens[k] : c->cnt[k];
        total += size * c->cnt[k];
        least += size * mn[k];
    }
    if (least > (double)g->usable) {
        for (uint32_t k = 0; k < nc; k++)
            c->cnt[k] = mn[k];
        return false;
    }
    /* The paper's repair: each class gives up objects in inverse proportion
     * to its size, that is an equal share of the bytes over the limit. */
    while (total > (double)g->usable) {
        double over = total - (double)g->usable;
        uint32_t n_spare = 0;
        for (uint32_t k = 0; k < nc; k++)
            n_spare += c->cnt[k] > mn[k];
        for (uint32_t k = 0; k < nc; k++) {
            if (c->cnt[k] <= mn[k])
                continue;
            double size = (double)g->sizes[last[k]];
            double cut = ceil(over / n_spare / size);
            uint32_t spare = c->cnt[k] - mn[k];
            uint32_t d = cut >= spare ? spare : (uint32_t)cut;
            c->cnt[k] -= d;
            total -= size * d;
        }
    }
    return true;
}

void sa_genes_random(sa_genes_t *x, sa_chrom_t *c, sa_rng_t *r, double p, bool fine)
{
    const sa_graph_t *g = x->g;
    uint32_t *id = x->scratch + 3 * g->n_ops;   /* past the mutation's scratch */
    for (size_t k = 0; k < g->n_ops; k++)
        id[k] = (uint32_t)k;
    if (p > 0)
        sa_schedule_mutate(g, id, c->order, p, r, x->scratch);
    else
        memcpy(c->order, id, g->n_ops * sizeof *id);
    for (size_t s = 0; s < g->n_sizes; s++)
        c->step[s] = s > 0 && (fine || (sa_rand(r) & 1));
    uint32_t *ext = x->scratch + g->n_sizes;   /* sizes' demand, scaled */
    for (size_t s = 0; s < g->n_sizes; s++) {
        double f = fine ? 1.0 : 0.5 + sa_rand_unit(r);
        ext[s] = (uint32_t)(x->demand[s] * f + 0.5);
    }
    /* A class holds the sum of its sizes' demand. */
    uint32_t *cls = x->scratch;
    sa_classes(g, c->step, cls);
    memset(c->cnt, 0, g->n_sizes * sizeof *c->cnt);
    for (size_t s = 0; s < g->n_sizes; s++)
        c->cnt[cls[s]] += ext[s];
    sa_genes_repair(x, c);
    c->time_ns = INFINITY;
}

void sa_genes_cross(sa_genes_t *x, const sa_chrom_t *a, const sa_chrom_t *b, sa_chrom_t *o1,
                    sa_chrom_t *o2, sa_rng_t *r, bool reorder)
{
    const sa_graph_t *g = x->g;
    size_t n = g->n_ops, ns = g->n_sizes;
    if (reorder && n > 1) {
        size_t cr = 1 + below(r, (uint32_t)(n - 1));
        cross_schedule(g, a->order, b->order, cr, o1->order, x->scratch);
        cross_schedule(g, b->order, a->order, cr, o2->order, x->scratch);
    } else {
        memcpy(o1->order, a->order, n * sizeof *a->order);
        memcpy(o2->order, b->order, n * sizeof *b->order);
    }
    uint32_t *cls_a = x->scratch, *cls_b = cls_a + ns, *ext_a = cls_b + ns,
             *ext_b = ext_a + ns, *ext = ext_b + ns;
    extend(g, a, cls_a, ext_a);
    extend(g, b, cls_b, ext_b);
    size_t cr = ns > 1 ? 1 + below(r, (uint32_t)(ns - 1)) : ns;
    for (int child = 0; child < 2; child++) {
        /* child 0: b's head, a's tail; child 1: a's head, b's tail. */
        const uint32_t *cls_h = child ? cls_a : cls_b, *cls_t = child ? cls_b : cls_a;
        const uint8_t *step_h = child ? a->step : b->step, *step_t = child ? b->step : a->step;
        const uint32_t *ext_h = child ? ext_a : ext_b, *ext_t = child ? ext_b : ext_a;
        sa_chrom_t *o = child ? o2 : o1;
        for (size_t s = 0; s < ns; s++) {
            o->step[s] = s < cr ? step_h[s] : step_t[s];
            ext[s] = s < cr ? ext_h[s] : ext_t[s];
        }
        if (cr < ns) {   /* the junction, repaired: the least increase that is valid */
            int64_t d = (int64_t)cls_t[cr] - (int64_t)cls_h[cr - 1];
            o->step[cr] = d > 0;
        }
        counts_from(g, o, ext, x->scratch + 5 * ns);
        sa_genes_repair(x, o);
        o->time_ns = INFINITY;
    }
}

void sa_genes_mutate(sa_genes_t *x, sa_chrom_t *c, sa_rng_t *r, bool reorder)
{
    const sa_graph_t *g = x->g;
    size_t n = g->n_ops, ns = g->n_sizes;
    double p = x->mutation;
    if (reorder) {
        uint32_t *tmp = x->scratch + 3 * n;
        sa_schedule_mutate(g, c->order, tmp, x->schedule_mutation, r, x->scratch);
        memcpy(c->order, tmp, n * sizeof *tmp);
    }
    uint32_t *cls = x->scratch, *ext = cls + ns;
    extend(g, c, cls, ext);
    bool flipped = false;
    for (size_t s = 1; s < ns; s++)
        if (sa_rand_unit(r) < p) {   /* +1 or -1 on this class and every later one */
            c->step[s] ^= 1;
            flipped = true;
        }
    if (flipped)
        counts_from(g, c, ext, cls + 2 * ns);
    uint32_t nc = sa_classes(g, c->step, cls);
    for (uint32_t k = 0; k < nc; k++)
        if (sa_rand_unit(r) < p) {
            double sd = c->cnt[k] * 0.25 + 1.0;
            double v = c->cnt[k] + sd * gaussian(r);
            c->cnt[k] = v <= 0 ? 0 : v >= 4e9 ? UINT32_C(4000000000) : (uint32_t)(v + 0.5);
        }
    sa_genes_repair(x, c);
    c->time_ns = INFINITY;
}
