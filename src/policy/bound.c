/* A lower bound on the step time of any policy that keeps, swaps and
 * recomputes tensors of a profiled step on a given device (docs/policy.md,
 * "The lower bound" has the argument). Per memory sample s whose curve
 * exceeds the capacity by E bytes: the bytes gone at s are swapped (S) or
 * recomputed (R), S + R >= E; with C_b and C_a the ops' time before and
 * after s and Rc the cheapest re-runs of R bytes (fractional),
 *   T >= C_b + C_a + Rc       one compute stream runs everything
 *   T >= S / d2h + C_a + Rc   the copies out end before s, the rest after
 *   T >= C_b + S / h2d        the copies back start after s
 * The smallest max over R is exact: the terms are linear between the
 * re-run list's breakpoints, so it lies at a breakpoint or where two terms
 * cross. The bound is the largest over samples, and at least C_b + C_a.
 * Bytes whose host copy the caller keeps (host_backed) leave without a
 * copy: E is reduced by those that may be away at s, which keeps it a
 * bound (a weaker one: their copies back are not counted either). */
#include <math.h>
#include <stdlib.h>

#include "common/message.h"
#include "policy/generate-impl.h"

/* removable[s]: bytes of storages not used at sample s's op, between two of
 * their uses (or before the first, after the last: a storage that lives
 * across steps may be away then; counting one that does not only weakens
 * the bound); in backed, those whose host copy is kept over the gap (the
 * use before it, around the step's end for the first gap). */
static bool removable_bytes(const cham_profile_view_t *v, int64_t *diff, int64_t *backed)
{
    size_t nu = v->n_uses, ns = 2 * v->n_ops;
    cham_gen_use_ref_t *r = cham_gen_uses_by_storage(v);
    if (!r)
        return false;
    for (size_t a = 0; a < nu;) {
        size_t b = a;
        while (b < nu && r[b].storage == r[a].storage)
            b++;
        int64_t bytes = (int64_t)v->uses[r[a].use].storage_bytes;
        size_t from = 0;           /* the gap starts at this sample */
        for (size_t i = a; i <= b; i++) {
            size_t to = i < b ? 2 * (size_t)r[i].op : ns;   /* ends before the use */
            if (to > from) {
                diff[from] += bytes;
                diff[to] -= bytes;
                if (cham_gen_backed_at(v, r, i > a ? i - 1 : b - 1)) {
                    backed[from] += bytes;
                    backed[to] -= bytes;
                }
            }
            if (i < b)
                from = 2 * ((size_t)r[i].op + 1);
        }
        a = b;
    }
    free(r);
    return true;
}

/* The three terms at R bytes recomputed, Rc their cost. */
static double terms(double cb, double ca, double e, double d2h, double h2d, double r,
                    double rc)
{
    double s = e - r;
    double t1 = cb + ca + rc, t2 = s / d2h + ca + rc, t3 = cb + s / h2d;
    double t = t1 > t2 ? t1 : t2;
    return t > t3 ? t : t3;
}

/* min over R in [0, min(E, re-runnable bytes)] of the max of the terms;
 * bytes[i], cost[i] the re-runs at this sample, cheapest per byte first.
 * Times in ns, bandwidths in bytes per ns. */
static double best_mix(double cb, double ca, double e, double d2h, double h2d,
                       const double *bytes, const double *cost, size_t n)
{
    double best = terms(cb, ca, e, d2h, h2d, 0, 0);
    double r0 = 0, c0 = 0;
    for (size_t i = 0; i < n && r0 < e; i++) {
        double r1 = r0 + bytes[i] < e ? r0 + bytes[i] : e;
        double m = cost[i] / bytes[i];
        /* On [r0, r1]: t1 = cb+ca+c0+m(R-r0), t2 = (e-R)/d2h+ca+c0+m(R-r0),
         * t3 = cb+(e-R)/h2d. Candidates: r1, and where two lines cross. */
        double pts[4] = {r1, e - cb * d2h, 0, 0};
        /* t1 = t3: cb+ca+c0+m(R-r0) = cb+(e-R)/h2d */
        pts[2] = (e / h2d - ca - c0 + m * r0) / (m + 1 / h2d);
        /* t2 = t3: (e-R)/d2h+ca+c0+m(R-r0) = cb+(e-R)/h2d */
        double k = m - 1 / d2h + 1 / h2d;
        pts[3] = k != 0 ? (cb + e / h2d - e / d2h - ca - c0 + m * r0) / k : r0;
        for (int j = 0; j < 4; j++) {
            double r = pts[j];
            if (!(r >= r0 && r <= r1))
                continue;
            double t = terms(cb, ca, e, d2h, h2d, r, c0 + m * (r - r0));
            best = t < best ? t : best;
        }
        c0 += m * (r1 - r0);
        r0 = r1;
    }
    return best;
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
    int64_t *diff = calloc(ns + 1, sizeof *diff), *backed = calloc(ns + 1, sizeof *backed);
    double *prefix = malloc((n + 1) * sizeof *prefix);
    double *rb = NULL, *rcost = NULL;
    cham_gen_layers_t layers = {0};
    cham_gen_tensor_t *t = NULL;
    size_t n_t = 0;
    cham_gen_recomp_list_t rl = {0};
    cham_planner_config_t c = *config;
    c.min_swap_bytes = 1;      /* any policy may move any tensor */
    bool ok = curve && actual && diff && backed && prefix && removable_bytes(&v, diff, backed) &&
              cham_gen_layers_build(&v, &c, &layers) &&
              cham_gen_tensors(&v, &layers, 1, false, &t, &n_t) &&
              (!config->recompute || cham_gen_recompute_list(&v, t, n_t, &rl));
    if (ok) {
        rb = malloc((rl.n ? rl.n : 1) * sizeof *rb);
        rcost = malloc((rl.n ? rl.n : 1) * sizeof *rcost);
        ok = rb && rcost;
    }
    if (ok) {
        cham_profile_memory_curve(profile, actual, curve);
        prefix[0] = 0;
        for (size_t k = 0; k < n; k++)
            prefix[k + 1] = prefix[k] + (v.ops[k].has_cost ? v.ops[k].cost_ns : 0);
        double d2h = config->d2h_bandwidth / 1e9, h2d = config->h2d_bandwidth / 1e9;
        double best = prefix[n];
        int64_t away = 0, free_away = 0;
        for (size_t s = 0; s < ns; s++) {
            away += diff[s];
            free_away += backed[s];
            if (curve[s] <= capacity)
                continue;
            double e = (double)(curve[s] - capacity);
            if ((double)away < e) {
                out->feasible = false;
                out->sample = (uint32_t)s;
                out->excess_bytes = curve[s] - capacity;
                break;
            }
            e -= fmin(e, (double)free_away);
            if (e <= 0)
                continue;
            /* Ops before the sample (through op k for its end sample 2k+1)
             * and after it. */
            size_t k = (s + 1) / 2;
            double cb = prefix[k], ca = prefix[n] - prefix[k];
            size_t m = 0;
            for (size_t i = 0; i < rl.n; i++) {
                const cham_gen_tensor_t *x = &t[rl.v[i].tensor];
                if (2 * ((size_t)x->last_fwd + 1) <= s && s < 2 * (size_t)x->first_bwd) {
                    rb[m] = (double)x->bytes;
                    rcost[m++] = rl.v[i].cost_ns;
                }
            }
            double b = best_mix(cb, ca, e, d2h, h2d, rb, rcost, m);
            if (b > best) {
                best = b;
                out->sample = (uint32_t)s;
                out->excess_bytes = curve[s] - capacity;
            }
        }
        out->compute_ns = (uint64_t)prefix[n];
        out->bound_ns = out->feasible ? (uint64_t)floor(best) : UINT64_MAX;
    }
    free(curve);
    free(actual);
    free(diff);
    free(backed);
    free(prefix);
    free(rb);
    free(rcost);
    free(t);
    cham_gen_layers_free(&layers);
    cham_gen_recompute_list_free(&rl);
    if (!ok) {
        cham_set_err(err, err_size, "bound: out of host memory (%zu ops)", n);
        return CHAM_ERR_HOST_OOM;
    }
    return CHAM_OK;
}
