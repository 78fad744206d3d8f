/* A lower bound on the step time of any policy that keeps, swaps and
 * recomputes tensors of a profiled step on a given device, in the steady
 * state where every step runs alike (docs/policy.md, "The lower bound" has
 * the argument). Per memory sample s whose curve exceeds the capacity by E
 * bytes: the bytes gone at s are swapped (S) or recomputed (R), S + R >= E;
 * with C_b and C_a the ops' time before and after s and Rc the cheapest
 * re-runs of R bytes (fractional, an op's cost shared by its outputs),
 *   T >= C_b + C_a + Rc           one compute stream runs everything
 *   T >= C_a + Rc + F_out(S)      the copies out end before s
 *   T >= C_b + F_in(S)            the copies back start after s
 *   T >= H + Rc, T >= L + Rc      the re-runs run after a sample before
 *                                 every candidate leaves and before one
 *                                 after every candidate's use
 * where H is the largest second term with nothing re-run over the first
 * kind of sample (the head), L the largest third over the second (the
 * tail).
 * F(S) is S over the bandwidth, less what the gaps around the step's end
 * add: model state last used in the step before may have left during that
 * step's last ops, and model state next used in the step after may come
 * back during its first ops. Per such extension e (the bytes with more
 * taken first, as any policy would), F(S) >= (S - B_e) / bw - e where B_e
 * are the bytes whose extension is larger. The smallest max over R is
 * exact: the terms are linear between the breakpoints of Rc and F, so it
 * lies at one or where two terms cross. The bound is the largest over
 * samples, and at least C_b + C_a. Bytes whose host copy the caller keeps
 * (host_backed) leave without a copy: E is reduced by those that may be
 * away at s (a weaker bound: their copies back are not counted either).
 * Bytes the use after their gap overwrites (overwrites) come back without
 * a copy: of the S bytes away at s, the O such ones there are the ones no
 * copy back is needed for, T >= C_b + F_in(max(0, S - O)). Model state
 * the step never writes may have left in any step before (the runtime
 * keeps the pinned copy of a storage swapped back in until its bytes
 * change): of the S bytes, the Q such ones need no copy out, T >= C_a +
 * Rc + F_out(max(0, S - Q)). Others not written since an earlier gap of
 * theirs may leave without a copy too, but that gap's copy was made after
 * their last write: in the step before, for model state the optimizer
 * updates, an extension as a head gap's from the write. A storage the
 * step made is past its last use either freed or still in the curve
 * (dead): only the curve less the bytes known live there may be dead. */
#include <math.h>
#include <stdlib.h>

#include "common/assert.h"
#include "common/message.h"
#include "policy/plan-impl.h"

/* A gap across the step's end, model state's: at its samples [from, to)
 * its bytes may be away and their copy may take `ext` ns more than the
 * ops between it and the sample allow: out (a head gap, before the first
 * use: the copy started after the last use in the step before) or in (a
 * tail gap, after the last use: it ends before the first use in the step
 * after). */
typedef struct wrap_gap {
    size_t from, to;
    double bytes, ext;
    bool out;
} wrap_gap_t;

/* Difference arrays over the samples of bytes that may be away (any), of
 * those whose host copy is kept (backed), of the others that the use
 * after their gap overwrites (free_in) and of the others that may leave
 * without a copy (free_out: unwritten since an earlier gap). */
typedef struct away_bytes {
    int64_t *any, *backed, *free_in, *free_out;
} away_bytes_t;

/* What may be away where: bytes of storages in a gap (idle), of storages
 * past their last use in a step that made them (dead: freed there or
 * later, so only those still in the curve may count, at most the curve
 * less the live bytes), the live bytes (in use, or model state), and the
 * gaps across the step's end that extend a copy's time. */
typedef struct removable {
    away_bytes_t idle, dead;
    int64_t *live;
    wrap_gap_t *gaps;
    size_t n_gaps;
} removable_t;

static bool away_bytes_alloc(away_bytes_t *a, size_t n)
{
    a->any = calloc(n, sizeof *a->any);
    a->backed = calloc(n, sizeof *a->backed);
    a->free_in = calloc(n, sizeof *a->free_in);
    a->free_out = calloc(n, sizeof *a->free_out);
    return a->any && a->backed && a->free_in && a->free_out;
}

static void away_bytes_free(away_bytes_t *a)
{
    free(a->any);
    free(a->backed);
    free(a->free_in);
    free(a->free_out);
}

static void add_span(int64_t *diff, size_t from, size_t to, int64_t bytes)
{
    diff[from] += bytes;
    diff[to] -= bytes;
}

/* How much longer than the ops after a sample a copy out of bytes last
 * touched at op k of the step before may take: the ops after k and what
 * re-runs can cost after it. */
static double ext_after(const double *prefix, const double *rerun_after, size_t n, uint32_t k)
{
    return prefix[n] - prefix[k + 1] + rerun_after[k];
}

/* The last write among the uses r[a, b) of one storage, b when none. */
static size_t last_write(const cham_profile_view_t *v, const cham_gen_use_ref_t *r, size_t a,
                         size_t b)
{
    size_t w = b;
    for (size_t k = a; k < b; k++)
        if (v->uses[r[k].use].output)
            w = k;
    return w;
}

/* Whether the uses r[a, b) of one storage leave it, at the step's start,
 * with a gap since its last write w (b: none; in the step before, for
 * model state: the gap across the step's end is not counted, it is the
 * one to come), in which its bytes may have gone out and kept a host
 * copy. */
static bool copied_at_start(const cham_gen_use_ref_t *r, size_t w, size_t b)
{
    if (w == b)
        return false;
    for (size_t k = w + 1; k < b; k++)   /* a gap between two uses after it */
        if (2 * (size_t)r[k].op > 2 * ((size_t)r[k - 1].op + 1))
            return true;
    return false;
}

/* Bytes of storages not used at sample s's op, between two of their uses,
 * before the first (model state, or a storage that existed before the
 * step) or after the last (model state: idle; others: dead); backed, those
 * whose host copy is kept over the gap (the use before it, around the
 * step's end for the first gap). Live: model state at every sample, any
 * other storage from its first use's end (the step's start if it existed
 * before) to its last use's start, at its smallest size: a lower estimate
 * of what the curve holds that is not dead. prefix: the ops' cumulative
 * time; rerun_after[k]: the most re-runs can cost after op k. */
static bool removable_bytes(const cham_profile_view_t *v, const double *prefix,
                            const double *rerun_after, removable_t *rm)
{
    size_t nu = v->n_uses, ns = 2 * v->n_ops, n = v->n_ops;
    cham_gen_use_ref_t *r = cham_gen_uses_by_storage(v);
    rm->gaps = malloc((3 * nu + 1) * sizeof *rm->gaps);   /* a gap a use, two a tail */
    if (!r || !rm->gaps) {
        free(r);
        return false;
    }
    for (size_t a = 0; a < nu;) {
        size_t b = a;
        bool persistent = false;
        int64_t bytes = (int64_t)v->uses[r[a].use].storage_bytes, least = bytes;
        for (; b < nu && r[b].storage == r[a].storage; b++) {
            int64_t at = (int64_t)v->uses[r[b].use].storage_bytes;
            persistent = persistent || v->uses[r[b].use].persistent;
            least = at < least ? at : least;
        }
        uint32_t first = r[a].op, last = r[b - 1].op;
        bool exists_before = persistent || !v->uses[r[a].use].output;
        size_t live_from = exists_before ? 0 : 2 * (size_t)first + 1;
        size_t live_to = persistent ? ns : 2 * (size_t)last + 1;
        if (live_to > live_from)
            add_span(rm->live, live_from, live_to, least);
        /* Model state the step never writes may have been copied out in
         * any step before: it leaves free. Bytes not written since an
         * earlier gap of theirs may leave without a copy too, but only
         * because that gap's copy was made: after their last write and
         * before the sample. Written in this step, that is within the
         * sample's own window; written in the step before (model state
         * the optimizer updates), the copy's window reaches back to the
         * write, an extension as a head gap's (docs/policy.md). */
        size_t w = persistent ? last_write(v, r, a, b) : b;
        bool never_written = persistent && w == b;
        double ext_write = w < b ? ext_after(prefix, rerun_after, n, r[w].op) : 0;
        bool copied = copied_at_start(r, w, b);
        bool written = false;      /* by a use of this step before the gap */
        size_t from = 0;           /* the gap starts at this sample */
        for (size_t i = a; i <= b; i++) {
            size_t to = i < b ? 2 * (size_t)r[i].op : ns;   /* ends before the use */
            bool head = i == a, tail = i == b;
            bool backed = cham_gen_backed_at(v, r, i > a ? i - 1 : b - 1);
            bool free_in = !backed && cham_gen_overwritten_at(v, r, i < b ? i : a);
            bool free_out = !backed && never_written;
            if (to > from && (!head || exists_before)) {
                away_bytes_t *kind = tail && !persistent ? &rm->dead : &rm->idle;
                add_span(kind->any, from, to, bytes);
                if (backed || free_in)
                    add_span(backed ? kind->backed : kind->free_in, from, to, bytes);
                if (free_out)
                    add_span(kind->free_out, from, to, bytes);
                double out_ext = 0, in_ext = persistent && tail ? prefix[first] : 0;
                if (persistent && copied && !written)
                    out_ext = ext_write;
                else if (persistent && head)
                    out_ext = ext_after(prefix, rerun_after, n, last);
                copied = true;
                if (out_ext > 0 && !backed && !free_out)   /* copies they extend */
                    rm->gaps[rm->n_gaps++] = (wrap_gap_t){
                        .from = from, .to = to, .bytes = (double)bytes, .ext = out_ext,
                        .out = true};
                if (in_ext > 0 && !backed && !free_in)
                    rm->gaps[rm->n_gaps++] = (wrap_gap_t){
                        .from = from, .to = to, .bytes = (double)bytes, .ext = in_ext,
                        .out = false};
            }
            if (i < b) {
                from = 2 * ((size_t)r[i].op + 1);
                bool writes = v->uses[r[i].use].output;
                copied = copied && !writes;
                written = written || writes;
            }
        }
        a = b;
    }
    free(r);
    return true;
}

/* F(S) = S / bw - min over the levels j with B_j <= S of (B_j / bw + e_j):
 * levels by extension, largest first, B_j the bytes before level j, and a
 * last level of extension 0 after all of them. */
typedef struct copy_time {
    double *b, *pm;              /* B_j and the running min of B_j / bw + e_j */
    size_t n;                    /* levels, the last one's included */
    double bw;
} copy_time_t;

static int by_ext_desc(const void *x, const void *y)
{
    double a = ((const wrap_gap_t *)x)->ext, b = ((const wrap_gap_t *)y)->ext;
    return (a < b) - (a > b);
}

/* The levels of sample s for one direction; scratch holds n_gaps gaps. */
static void copy_time_at(copy_time_t *f, const removable_t *rm, size_t s, bool out,
                         wrap_gap_t *scratch, double bw)
{
    size_t m = 0;
    for (size_t i = 0; i < rm->n_gaps; i++)
        if (rm->gaps[i].out == out && rm->gaps[i].from <= s && s < rm->gaps[i].to)
            scratch[m++] = rm->gaps[i];
    qsort(scratch, m, sizeof *scratch, by_ext_desc);
    double before = 0, best = INFINITY;
    for (size_t j = 0; j <= m; j++) {
        double e = j < m ? scratch[j].ext : 0;
        best = fmin(best, before / bw + e);
        f->b[j] = before;
        f->pm[j] = best;
        before += j < m ? scratch[j].bytes : 0;
    }
    f->n = m + 1;
    f->bw = bw;
}

/* The last index with sorted[i] <= x (sorted[0] <= x assumed). */
static size_t last_at_most(const double *sorted, size_t n, double x)
{
    size_t lo = 0, hi = n;
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (sorted[mid] <= x)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

static double copy_time_of(const copy_time_t *f, double s)
{
    return s / f->bw - f->pm[last_at_most(f->b, f->n, s)];
}

/* The re-runs at a sample, cheapest per byte first: cumulative bytes and
 * cost at each one's end (index 0: none). */
typedef struct reruns {
    double *bytes, *cost;
    size_t n;
} reruns_t;

static double rerun_cost(const reruns_t *rr, double r)
{
    size_t i = last_at_most(rr->bytes, rr->n + 1, r);
    if (i == rr->n)
        return rr->cost[i];
    double w = rr->bytes[i + 1] - rr->bytes[i];
    return rr->cost[i] + (rr->cost[i + 1] - rr->cost[i]) * (r - rr->bytes[i]) / w;
}

/* The other samples' copies a sample's re-runs add to (edges, below). */
typedef struct edges {
    double before, after;
} edges_t;

typedef struct sample_terms {
    double cb, ca, e;
    double o;                    /* bytes away here that come back with no copy */
    double q;                    /* bytes away here that left with no copy */
    const reruns_t *rr;
    const copy_time_t *out, *in;
    edges_t edges;
} sample_terms_t;

enum { N_TERMS = 5 };

static void terms(const sample_terms_t *x, double r, double t[N_TERMS])
{
    double rc = rerun_cost(x->rr, r), s = x->e - r;
    t[0] = x->cb + x->ca + rc;
    t[1] = x->ca + rc + copy_time_of(x->out, fmax(0, s - x->q));
    t[2] = x->cb + copy_time_of(x->in, fmax(0, s - x->o));
    t[3] = x->edges.before + rc;
    t[4] = x->edges.after + rc;
}

static double max_term(const double t[N_TERMS])
{
    double m = t[0];
    for (int k = 1; k < N_TERMS; k++)
        m = fmax(m, t[k]);
    return m;
}

static int cmp_double(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

/* min over R in [0, min(E, re-runnable bytes)] of the largest term, and
 * the R that reaches it in *r_best; pts has room for rr->n + out->n +
 * in->n + 3 points. */
static double best_mix(const sample_terms_t *x, double *pts, double *r_best)
{
    double rmax = fmin(x->e, x->rr->bytes[x->rr->n]);
    size_t np = 0;
    pts[np++] = 0;
    pts[np++] = rmax;
    for (size_t i = 1; i < x->rr->n; i++)
        if (x->rr->bytes[i] < rmax)
            pts[np++] = x->rr->bytes[i];
    const copy_time_t *f[2] = {x->out, x->in};
    for (int d = 0; d < 2; d++)           /* where a copy time has a kink */
        for (size_t j = 0; j < f[d]->n; j++) {
            double at = x->e - (d ? x->o : x->q) - f[d]->b[j];
            if (at > 0 && at < rmax)
                pts[np++] = at;
        }
    qsort(pts, np, sizeof *pts, cmp_double);
    double ta[N_TERMS], tb[N_TERMS];
    terms(x, pts[0], ta);
    double best = max_term(ta);
    *r_best = pts[0];
    for (size_t i = 1; i < np; i++) {
        double a = pts[i - 1], b = pts[i];
        terms(x, b, tb);
        double m = max_term(tb);
        if (m < best) {
            best = m;
            *r_best = b;
        }
        /* Linear on [a, b]: the max is least at an end or where two cross. */
        for (int p = 0; b > a && p < N_TERMS; p++)
            for (int q = p + 1; q < N_TERMS; q++) {
                double da = ta[p] - ta[q], db = tb[p] - tb[q];
                if ((da < 0 && db > 0) || (da > 0 && db < 0)) {
                    double w = da / (da - db), t[N_TERMS];
                    for (int k = 0; k < N_TERMS; k++)
                        t[k] = ta[k] + w * (tb[k] - ta[k]);
                    double mt = max_term(t);
                    if (mt < best) {
                        best = mt;
                        *r_best = a + w * (b - a);
                    }
                }
            }
        for (int k = 0; k < N_TERMS; k++)
            ta[k] = tb[k];
    }
    return best;
}

/* The screen: an upper estimate of each sample's best mix, cheap enough to
 * take at every sample, so that only samples whose estimate reaches the
 * largest mix found so far are solved exactly (best_mix takes time linear
 * in the candidates away there; all of them at every sample made the bound
 * quadratic in the ops). The candidates away at the sample sit in a
 * Fenwick tree by price rank; re-running r bytes costs at most the
 * cheapest prefix holding r bytes, whole; the copies take at most their
 * bytes over the bandwidth (the gaps across the step's end only shorten
 * them). Any r gives an upper estimate; a ternary search looks for a low
 * one. */
typedef struct away_reruns {
    double *bytes, *cost;        /* Fenwick sums over price ranks, 1-based */
    double *c_at;                /* each rank's own cost while it is away */
    size_t n, top;               /* top: the largest power of two <= n */
    double total_bytes;
} away_reruns_t;

static void away_add(away_reruns_t *a, size_t rank, double bytes, double cost)
{
    a->c_at[rank] += cost;
    a->total_bytes += bytes;
    for (size_t k = rank + 1; k <= a->n; k += k & (~k + 1)) {
        a->bytes[k] += bytes;
        a->cost[k] += cost;
    }
}

/* The cost of the cheapest prefix of away candidates holding r bytes. */
static double away_cost_of(const away_reruns_t *a, double r)
{
    if (r <= 0)
        return 0;
    size_t pos = 0;
    double b = 0, c = 0;
    for (size_t step = a->top; step; step >>= 1)
        if (pos + step <= a->n && b + a->bytes[pos + step] < r) {
            pos += step;
            b += a->bytes[pos];
            c += a->cost[pos];
        }
    return pos < a->n ? c + a->c_at[pos] : c;
}

typedef struct screen_terms {
    double cb, ca, e, o, q, d2h, h2d;
    edges_t edges;
} screen_terms_t;

static double screen_at(const away_reruns_t *a, const screen_terms_t *x, double r)
{
    double rc = away_cost_of(a, r), s = x->e - r;
    double edge = fmax(x->edges.before, x->edges.after) + rc;
    return fmax(fmax(x->cb + x->ca + rc, edge),
                fmax(x->ca + rc + fmax(0, s - x->q) / x->d2h,
                     x->cb + fmax(0, s - x->o) / x->h2d));
}

static double screen(const away_reruns_t *a, const screen_terms_t *x)
{
    double lo = 0, hi = fmin(x->e, a->total_bytes);
    double best = fmin(screen_at(a, x, lo), screen_at(a, x, hi));
    for (int it = 0; it < 40 && hi - lo > 1; it++) {
        double m1 = lo + (hi - lo) / 3, m2 = hi - (hi - lo) / 3;
        double f1 = screen_at(a, x, m1), f2 = screen_at(a, x, m2);
        best = fmin(best, fmin(f1, f2));
        if (f1 <= f2)
            hi = m2;
        else
            lo = m1;
    }
    /* Rounding in the tree's sums (added and taken away) stays far below
     * this margin. */
    return best * (1 + 1e-9) + 1e3;
}

typedef struct screened {
    double upper, e, o, q;
    size_t s;
} screened_t;

static int by_upper_desc(const void *x, const void *y)
{
    const screened_t *a = x, *b = y;
    if (a->upper != b->upper)
        return a->upper < b->upper ? 1 : -1;
    return (a->s > b->s) - (a->s < b->s);
}

/* Candidates by cost per byte, an op's cost shared by its outputs in
 * proportion to their bytes: dropping several outputs of one op re-runs
 * it once, and dropping one of them costs at least its share. */
typedef struct priced {
    uint32_t tensor;
    double bytes, cost;
} priced_t;

static int by_price(const void *x, const void *y)
{
    const priced_t *a = x, *b = y;
    double pa = a->cost / a->bytes, pb = b->cost / b->bytes;
    if (pa != pb)
        return pa < pb ? -1 : 1;
    return (a->tensor > b->tensor) - (a->tensor < b->tensor);
}

static priced_t *price(const cham_gen_recomp_list_t *rl, size_t n_ops)
{
    priced_t *pr = malloc((rl->n ? rl->n : 1) * sizeof *pr);
    double *op_bytes = calloc(n_ops ? n_ops : 1, sizeof *op_bytes);
    if (pr && op_bytes) {
        for (size_t i = 0; i < rl->n; i++)
            op_bytes[rl->v[i].op] += (double)rl->v[i].bytes;
        for (size_t i = 0; i < rl->n; i++) {
            double b = (double)rl->v[i].bytes;
            pr[i] = (priced_t){.tensor = rl->v[i].tensor, .bytes = b,
                               .cost = rl->v[i].cost_ns * b / op_bytes[rl->v[i].op]};
        }
        qsort(pr, rl->n, sizeof *pr, by_price);
    }
    free(op_bytes);
    if (!op_bytes) {
        free(pr);
        return NULL;
    }
    return pr;
}

/* What one sample's exact mix needs, and the scratch it works in. */
typedef struct mix_at {
    const cham_gen_tensor_t *t;
    const priced_t *pr;
    size_t n_cand;
    const removable_t *rm;
    const double *prefix;
    size_t n;                    /* ops */
    double d2h, h2d;             /* bytes per ns */
    reruns_t *rr;
    copy_time_t *out, *in;
    wrap_gap_t *scratch;
    double *pts;
    edges_t edges;
    double best;                 /* the largest mix so far */
} mix_at_t;

/* Ops before sample s (through op k for its end sample 2k+1) and after it. */
static sample_terms_t terms_at(const mix_at_t *m, size_t s, double e, double o, double q)
{
    size_t k = (s + 1) / 2;
    return (sample_terms_t){.cb = m->prefix[k], .ca = m->prefix[m->n] - m->prefix[k], .e = e,
                            .o = o, .q = q, .rr = m->rr, .out = m->out, .in = m->in,
                            .edges = m->edges};
}

/* The samples [*from, *to) where candidate x may be away: after its last
 * forward use, before its first backward one. */
static void away_span(const cham_gen_tensor_t *x, size_t *from, size_t *to)
{
    *from = 2 * ((size_t)x->last_fwd + 1);
    *to = 2 * (size_t)x->first_bwd;
}

static bool away_at(const cham_gen_tensor_t *x, size_t s)
{
    size_t from, to;
    away_span(x, &from, &to);
    return from <= s && s < to;
}

/* The best mix at sample s with e bytes to take away, o of those that may
 * be away there coming back without a copy and q leaving without one,
 * exactly. */
static double exact_mix(mix_at_t *m, size_t s, double e, double o, double q, double *r)
{
    reruns_t *rr = m->rr;
    rr->n = 0;
    rr->bytes[0] = rr->cost[0] = 0;
    for (size_t i = 0; i < m->n_cand; i++)
        if (away_at(&m->t[m->pr[i].tensor], s)) {
            rr->bytes[rr->n + 1] = rr->bytes[rr->n] + m->pr[i].bytes;
            rr->cost[rr->n + 1] = rr->cost[rr->n] + m->pr[i].cost;
            rr->n++;
        }
    copy_time_at(m->out, m->rm, s, true, m->scratch, m->d2h);
    copy_time_at(m->in, m->rm, s, false, m->scratch, m->h2d);
    sample_terms_t x = terms_at(m, s, e, o, q);
    return best_mix(&x, m->pts, r);
}

/* A re-run candidate's ranks by the sample it goes away at (sign +1) and
 * comes back at (-1). */
typedef struct away_event {
    size_t s;
    size_t rank;
    int sign;
} away_event_t;

static int by_sample(const void *x, const void *y)
{
    const away_event_t *a = x, *b = y;
    return (a->s > b->s) - (a->s < b->s);
}

/* Of the bytes that may be away at a sample, those that come back (in)
 * and those that leave (out) without a copy. */
typedef struct free_copies {
    double in, out;
} free_copies_t;

/* Each sample's excess left to copy out or re-run once the bytes that
 * leave without a copy are away (e_at, 0 where none) and how much of what
 * may be away there moves without a copy (o_at). false, with the sample,
 * where the bytes that may be away do not cover the excess. */
static bool sample_excess(const removable_t *rm, const uint64_t *curve, uint64_t capacity,
                          size_t ns, double *e_at, free_copies_t *o_at, size_t *infeasible_at)
{
    /* any, backed, free_in, free_out */
    int64_t idle[4] = {0}, dead[4] = {0}, live = 0;
    const away_bytes_t *kind[2] = {&rm->idle, &rm->dead};
    int64_t *sum[2] = {idle, dead};
    for (size_t s = 0; s < ns; s++) {
        for (int j = 0; j < 2; j++) {
            sum[j][0] += kind[j]->any[s];
            sum[j][1] += kind[j]->backed[s];
            sum[j][2] += kind[j]->free_in[s];
            sum[j][3] += kind[j]->free_out[s];
        }
        live += rm->live[s];
        e_at[s] = 0;
        o_at[s] = (free_copies_t){0};
        if (curve[s] <= capacity)
            continue;
        /* The dead bytes still in the curve, the kinds that cost least
         * first: backed, then free to come back. */
        double room = fmax(0, (double)curve[s] - (double)live);
        double dead_backed = fmin((double)dead[1], room);
        double e = (double)(curve[s] - capacity);
        if ((double)idle[0] + fmin((double)dead[0], room) < e) {
            *infeasible_at = s;
            return false;
        }
        e_at[s] = fmax(0, e - (double)idle[1] - dead_backed);
        o_at[s].in = (double)idle[2] + fmin((double)dead[2], room - dead_backed);
        o_at[s].out = (double)idle[3] + fmin((double)dead[3], room - dead_backed);
    }
    return true;
}

typedef struct edge_sample {
    double upper;
    size_t s;
} edge_sample_t;

static int by_edge_upper_desc(const void *x, const void *y)
{
    double a = ((const edge_sample_t *)x)->upper, b = ((const edge_sample_t *)y)->upper;
    return (a < b) - (a > b);
}

/* The largest over the samples in es (n) of the copies out and the ops
 * after (out) or the ops before and the copies back (in), with nothing
 * re-run: exactly, from the highest estimate down (bytes over the full
 * bandwidth) until an estimate falls below the largest found. */
static double largest_copies(mix_at_t *m, edge_sample_t *es, size_t n, const double *e_at,
                             const free_copies_t *o_at, bool out)
{
    for (size_t i = 0; i < n; i++) {
        size_t s = es[i].s, k = (s + 1) / 2;
        double away = fmax(0, e_at[s] - (out ? o_at[s].out : o_at[s].in));
        es[i].upper = out ? m->prefix[m->n] - m->prefix[k] + away / m->d2h
                          : m->prefix[k] + away / m->h2d;
    }
    qsort(es, n, sizeof *es, by_edge_upper_desc);
    double best = 0;
    for (size_t i = 0; i < n && es[i].upper > best; i++) {
        size_t s = es[i].s, k = (s + 1) / 2;
        copy_time_t *f = out ? m->out : m->in;
        copy_time_at(f, m->rm, s, out, m->scratch, out ? m->d2h : m->h2d);
        double away = fmax(0, e_at[s] - (out ? o_at[s].out : o_at[s].in));
        double t = out ? m->prefix[m->n] - m->prefix[k] + copy_time_of(f, away)
                       : m->prefix[k] + copy_time_of(f, away);
        best = fmax(best, t);
    }
    return best;
}

/* The edges of the re-runs: at a sample before every candidate may leave
 * (the head) nothing is re-run, and every re-run comes after it, so the
 * copies out there and the ops after it (term 2 at no re-run) run before
 * the end with any sample's re-runs besides; at one after every
 * candidate's use (the tail) the re-runs came before it, and the ops
 * before it and the copies back (term 3) with them. */
static bool edge_terms(mix_at_t *m, size_t ns, const double *e_at, const free_copies_t *o_at)
{
    m->edges = (edges_t){0};
    if (m->n_cand == 0)
        return true;            /* nothing is re-run: no term to add to */
    size_t head_end = ns, tail_from = 0;
    for (size_t i = 0; i < m->n_cand; i++) {
        size_t from, to;
        away_span(&m->t[m->pr[i].tensor], &from, &to);
        if (from < to) {
            head_end = from < head_end ? from : head_end;
            tail_from = to > tail_from ? to : tail_from;
        }
    }
    edge_sample_t *es = malloc((ns + 1) * sizeof *es);
    if (!es)
        return false;
    size_t n = 0;
    for (size_t s = 0; s < head_end && s < ns; s++)
        if (e_at[s] > 0)
            es[n++] = (edge_sample_t){.s = s};
    m->edges.before = largest_copies(m, es, n, e_at, o_at, true);
    n = 0;
    for (size_t s = tail_from; s < ns; s++)
        if (e_at[s] > 0)
            es[n++] = (edge_sample_t){.s = s};
    m->edges.after = largest_copies(m, es, n, e_at, o_at, false);
    free(es);
    return true;
}

/* The largest over samples of the best mix (m->best, from `floor`), with
 * the sample that reaches it first in *out, or the first sample where the
 * bytes that may be away do not cover the excess. Screens every sample,
 * then solves those whose screen reaches the largest so far, highest
 * screen first: the same answer as solving every one. */
static bool largest_mix(mix_at_t *m, const uint64_t *curve, uint64_t capacity, double floor,
                        cham_step_bound_t *out)
{
    size_t ns = 2 * m->n, nc = m->n_cand, n_ev = 0, n_scr = 0, top = 1;
    while (2 * top <= nc)
        top *= 2;
    away_reruns_t a = {.bytes = calloc(nc + 1, sizeof(double)),
                       .cost = calloc(nc + 1, sizeof(double)),
                       .c_at = calloc(nc + 1, sizeof(double)), .n = nc, .top = top};
    away_event_t *ev = malloc((2 * nc + 1) * sizeof *ev);
    screened_t *scr = malloc((ns + 1) * sizeof *scr);
    double *e_at = malloc((ns + 1) * sizeof *e_at);
    free_copies_t *o_at = malloc((ns + 1) * sizeof *o_at);
    bool ok = a.bytes && a.cost && a.c_at && ev && scr && e_at && o_at;
    size_t infeasible_at = 0;
    if (ok && !sample_excess(m->rm, curve, capacity, ns, e_at, o_at, &infeasible_at)) {
        out->feasible = false;
        out->sample = (uint32_t)infeasible_at;
        out->excess_bytes = curve[infeasible_at] - capacity;
    }
    ok = ok && (!out->feasible || edge_terms(m, ns, e_at, o_at));
    if (ok && out->feasible) {
        for (size_t i = 0; i < nc; i++) {
            size_t from, to;
            away_span(&m->t[m->pr[i].tensor], &from, &to);
            if (from < to) {
                ev[n_ev++] = (away_event_t){.s = from, .rank = i, .sign = 1};
                ev[n_ev++] = (away_event_t){.s = to, .rank = i, .sign = -1};
            }
        }
        qsort(ev, n_ev, sizeof *ev, by_sample);
        size_t next = 0;
        for (size_t s = 0; s < ns; s++) {
            for (; next < n_ev && ev[next].s == s; next++)
                away_add(&a, ev[next].rank, ev[next].sign * m->pr[ev[next].rank].bytes,
                         ev[next].sign * m->pr[ev[next].rank].cost);
            if (e_at[s] <= 0)
                continue;
            sample_terms_t x = terms_at(m, s, e_at[s], o_at[s].in, o_at[s].out);
            screen_terms_t sx = {.cb = x.cb, .ca = x.ca, .e = x.e, .o = x.o, .q = x.q,
                                 .d2h = m->d2h, .h2d = m->h2d, .edges = m->edges};
            scr[n_scr++] = (screened_t){
                .upper = screen(&a, &sx), .e = x.e, .o = x.o, .q = x.q, .s = s};
        }
        qsort(scr, n_scr, sizeof *scr, by_upper_desc);
    }
    m->best = floor;
    bool found = false;
    for (size_t i = 0; ok && i < n_scr && scr[i].upper >= m->best; i++) {
        double r, b = exact_mix(m, scr[i].s, scr[i].e, scr[i].o, scr[i].q, &r);
        if (b > m->best || (b == m->best && found && scr[i].s < out->sample)) {
            m->best = b;
            found = true;
            out->sample = (uint32_t)scr[i].s;
            out->excess_bytes = curve[scr[i].s] - capacity;
            out->recompute_bytes = (uint64_t)r;
            out->swap_bytes = (uint64_t)(scr[i].e - r);
        }
    }
#if CHAM_DEBUG_CHECKS
    /* The screen is an upper estimate wherever it is taken. */
    for (size_t i = 0; ok && i < n_scr; i++) {
        double r;
        CHAM_ASSERT(exact_mix(m, scr[i].s, scr[i].e, scr[i].o, scr[i].q, &r) <= scr[i].upper);
    }
#endif
    free(a.bytes);
    free(a.cost);
    free(a.c_at);
    free(ev);
    free(scr);
    free(e_at);
    free(o_at);
    return ok;
}

cham_status_t cham_plan_bound(const cham_profile_t *profile, const cham_planner_config_t *config,
                              cham_step_bound_t *out, char *err, size_t err_size)
{
    cham_profile_view_t v;
    uint64_t capacity = 0, usable = 0;
    cham_policy_t *unused = NULL;
    cham_status_t st = cham_gen_start("bound", profile, config, &unused, &v, &capacity,
                                      &usable, err, err_size);
    if (st != CHAM_OK)
        return st;
    *out = (cham_step_bound_t){.feasible = true};
    size_t n = v.n_ops, ns = 2 * n;
    uint64_t *curve = malloc((ns ? ns : 1) * sizeof *curve);
    uint64_t *actual = malloc((ns ? ns : 1) * sizeof *actual);
    removable_t rm = {.live = calloc(ns + 1, sizeof *rm.live)};
    double *prefix = malloc((n + 1) * sizeof *prefix);
    double *rerun_after = calloc(n + 1, sizeof *rerun_after);
    cham_gen_layers_t layers = {0};
    cham_gen_tensor_t *t = NULL;
    size_t n_t = 0;
    cham_gen_recomp_list_t rl = {0};
    priced_t *pr = NULL;
    reruns_t rr = {0};
    copy_time_t f_out = {0}, f_in = {0};
    wrap_gap_t *scratch = NULL;
    double *pts = NULL;
    uint64_t floor_ns = 0, comm_end = 0, comm_wait = 0;
    cham_planner_config_t c = *config;
    c.min_swap_bytes = 1;      /* any policy may move any tensor */
    bool ok = curve && actual && away_bytes_alloc(&rm.idle, ns + 1) &&
              away_bytes_alloc(&rm.dead, ns + 1) && rm.live && prefix && rerun_after &&
              cham_gen_layers_build(&v, &c, &layers) &&
              cham_gen_tensors(&v, &layers, 1, false, NULL, 0, &t, &n_t) &&
              (!config->recompute || cham_gen_recompute_list(&v, t, n_t, config->through_freed, &rl)) &&
              (pr = price(&rl, n)) != NULL;
    if (ok) {
        /* No step is faster than its ops with their collectives, run with
         * all the memory they want (floor_ns). */
        prefix[0] = 0;
        for (size_t k = 0; k < n; k++) {
            double cost = cham_gen_op_ns(&v, k, 0);
            prefix[k + 1] = prefix[k] + cost;
            floor_ns = cham_gen_run_op(floor_ns, cost, &v.ops[k], &comm_end, &comm_wait);
        }
        /* A re-run comes before its tensor's use: after op k only those
         * used after k (each at its whole cost: an upper bound). */
        for (size_t i = 0; i < rl.n; i++)
            rerun_after[t[rl.v[i].tensor].first_bwd] += rl.v[i].cost_ns;
        double later = 0;      /* at the op, then: those after it */
        for (size_t k = n + 1; k-- > 0;) {
            double at = rerun_after[k];
            rerun_after[k] = later;
            later += at;
        }
        ok = removable_bytes(&v, prefix, rerun_after, &rm);
    }
    if (ok) {
        size_t g = rm.n_gaps + 1;
        rr.bytes = malloc((rl.n + 1) * sizeof *rr.bytes);
        rr.cost = malloc((rl.n + 1) * sizeof *rr.cost);
        f_out.b = malloc(g * sizeof(double));
        f_out.pm = malloc(g * sizeof(double));
        f_in.b = malloc(g * sizeof(double));
        f_in.pm = malloc(g * sizeof(double));
        scratch = malloc(g * sizeof *scratch);
        pts = malloc((rl.n + 2 * g + 3) * sizeof *pts);
        ok = rr.bytes && rr.cost && f_out.b && f_out.pm && f_in.b && f_in.pm && scratch && pts;
    }
    if (ok) {
        cham_profile_memory_curve(profile, actual, curve);
        mix_at_t m = {.t = t, .pr = pr, .n_cand = rl.n, .rm = &rm, .prefix = prefix, .n = n,
                      .d2h = config->d2h_bandwidth / 1e9, .h2d = config->h2d_bandwidth / 1e9,
                      .rr = &rr, .out = &f_out, .in = &f_in, .scratch = scratch, .pts = pts};
        ok = largest_mix(&m, curve, capacity, (double)floor_ns, out);
        out->compute_ns = floor_ns;
        out->bound_ns = out->feasible ? (uint64_t)floor(m.best) : UINT64_MAX;
    }
    free(curve);
    free(actual);
    away_bytes_free(&rm.idle);
    away_bytes_free(&rm.dead);
    free(rm.live);
    free(rm.gaps);
    free(prefix);
    free(rerun_after);
    free(pr);
    free(rr.bytes);
    free(rr.cost);
    free(f_out.b);
    free(f_out.pm);
    free(f_in.b);
    free(f_in.pm);
    free(scratch);
    free(pts);
    free(t);
    cham_gen_layers_free(&layers);
    cham_gen_recompute_list_free(&rl);
    if (!ok) {
        cham_set_err(err, err_size, "bound: out of host memory (%zu ops)", n);
        return CHAM_ERR_HOST_OOM;
    }
    return CHAM_OK;
}
