/* Logical layers (paper §5.1): each maximal run of ops of one effective
 * phase is split into equal-size groups, forward runs into about
 * forward_layers groups in all, backward runs likewise, optimizer runs
 * into one group, or, when model state may move (its uses are mostly
 * there), into groups as long as the backward's; every group's time comes
 * from Eq. 1 (or from the caller's per-op cost estimates). docs/policy.md. */
#include <math.h>
#include <stdlib.h>

#include "common/assert.h"
#include "policy/plan-impl.h"

uint32_t cham_gen_default_layers(const cham_profile_view_t *v)
{
    size_t n_fwd = 0;
    int32_t max_tok = -1;
    for (size_t k = 0; k < v->n_ops; k++) {
        if (v->ops[k].phase != CHAM_PHASE_FORWARD)
            continue;
        n_fwd++;
        if (v->ops[k].token > max_tok)
            max_tok = v->ops[k].token;
    }
    if (n_fwd == 0)
        return 1;
    uint32_t fallback = (uint32_t)ceil(sqrt((double)n_fwd));
    if (max_tok < 0)
        return fallback;
    /* occ[t]: occurrences of token t; freq[c]: tokens occurring c times. */
    size_t *occ = calloc((size_t)max_tok + 1, sizeof *occ);
    size_t *freq = calloc(n_fwd + 1, sizeof *freq);
    uint32_t best = 0;
    if (occ && freq) {
        for (size_t k = 0; k < v->n_ops; k++)
            if (v->ops[k].phase == CHAM_PHASE_FORWARD && v->ops[k].token >= 0)
                occ[v->ops[k].token]++;
        for (size_t t = 0; t <= (size_t)max_tok; t++)
            freq[occ[t]]++;
        size_t best_freq = 0;
        /* The most common count >= 2; on a tie the smaller count (fewer,
         * longer layers: Eq. 1's error is small up to the model's depth). */
        for (size_t c = 2; c <= n_fwd; c++)
            if (freq[c] > best_freq) {
                best_freq = freq[c];
                best = (uint32_t)c;
            }
    }
    free(occ);
    free(freq);
    return best ? best : fallback;
}

/* Splits ops [start, start + len) of one phase into k groups of equal size
 * (sizes differ by at most one) and appends them. */
static void split_run(cham_gen_layers_t *l, uint32_t start, uint32_t len, uint32_t k,
                      cham_phase_t phase)
{
    for (uint32_t g = 0; g < k; g++) {
        uint32_t a = (uint32_t)((uint64_t)len * g / k), b = (uint32_t)((uint64_t)len * (g + 1) / k);
        cham_logical_layer_t *ly = &l->v[l->n];
        *ly = (cham_logical_layer_t){.start_op = start + a, .n_ops = b - a, .phase = phase};
        for (uint32_t op = start + a; op < start + b; op++)
            l->layer_of_op[op] = (uint32_t)l->n;
        l->n++;
    }
}

/* Each op's time: the config's costs as weights of the step's duration;
 * else the profile's costs where it has them (with the device's time per
 * kernel beyond them), the other ops sharing what is left of the duration;
 * else equal shares (Eq. 1). Whether the profile has any cost. */
static bool op_times(const cham_profile_view_t *v, const cham_planner_config_t *cfg, double *t)
{
    size_t n = v->n_ops;
    double dur = (double)v->duration_ns, known = 0, total = 0;
    size_t unknown = 0;
    for (size_t k = 0; k < n; k++) {
        total += cfg->op_cost_ns ? cfg->op_cost_ns[k] : 1;
        known += cham_gen_op_ns(v, k, 0);
        unknown += !v->ops[k].has_cost;
    }
    if (cfg->op_cost_ns || unknown == n) {
        for (size_t k = 0; k < n; k++)
            t[k] = total > 0 ? dur * (cfg->op_cost_ns ? cfg->op_cost_ns[k] : 1) / total : 0;
        return unknown < n;
    }
    double share = unknown && dur > known ? (dur - known) / (double)unknown : 0;
    for (size_t k = 0; k < n; k++)
        t[k] = cham_gen_op_ns(v, k, share);
    return true;
}

bool cham_gen_layers_build(const cham_profile_view_t *v, const cham_planner_config_t *cfg,
                           cham_gen_layers_t *out)
{
    size_t n = v->n_ops;
    *out = (cham_gen_layers_t){0};
    out->v = malloc((n ? n : 1) * sizeof *out->v);
    out->layer_of_op = malloc((n ? n : 1) * sizeof *out->layer_of_op);
    out->phase_of_op = malloc((n ? n : 1) * sizeof *out->phase_of_op);
    out->op_ns = malloc((n ? n : 1) * sizeof *out->op_ns);
    if (!out->v || !out->layer_of_op || !out->phase_of_op || !out->op_ns) {
        cham_gen_layers_free(out);
        return false;
    }
    /* Effective phases: "other" joins the op before it (or the first op
     * that is not "other", for leading ones). */
    cham_phase_t first = CHAM_PHASE_OTHER;
    for (size_t k = 0; k < n && first == CHAM_PHASE_OTHER; k++)
        first = v->ops[k].phase;
    size_t n_fwd = 0, n_bwd = 0;
    for (size_t k = 0; k < n; k++) {
        cham_phase_t ph = v->ops[k].phase;
        if (ph == CHAM_PHASE_OTHER)
            ph = k ? out->phase_of_op[k - 1] : first;
        out->phase_of_op[k] = ph;
        n_fwd += ph == CHAM_PHASE_FORWARD || ph == CHAM_PHASE_EVAL;
        n_bwd += ph == CHAM_PHASE_BACKWARD;
    }
    uint32_t want_f = cfg->forward_layers ? cfg->forward_layers : cham_gen_default_layers(v);
    uint32_t want_b = cfg->backward_layers ? cfg->backward_layers : want_f;
    /* Runs: each gets its share of the phase's groups, at least one, at most
     * one per op. */
    for (size_t a = 0; a < n;) {
        size_t b = a;
        while (b < n && out->phase_of_op[b] == out->phase_of_op[a])
            b++;
        cham_phase_t ph = out->phase_of_op[a];
        uint64_t len = b - a, k = 1;
        /* An evaluation's forward splits as a training forward does. */
        bool fwd = ph == CHAM_PHASE_FORWARD || ph == CHAM_PHASE_EVAL;
        bool split = fwd || ph == CHAM_PHASE_BACKWARD ||
                     (ph == CHAM_PHASE_OPTIMIZER && cfg->model_state && n_bwd);
        if (split) {
            uint64_t want = fwd ? want_f : want_b;
            uint64_t tot = fwd ? n_fwd : n_bwd;
            k = (want * len + tot / 2) / tot;
            k = k < 1 ? 1 : k > len ? len : k;
        }
        split_run(out, (uint32_t)a, (uint32_t)len, (uint32_t)k, ph);
        a = b;
    }
    /* Eq. 1: T_group = T_iter / N_iter * N_group; or the config's costs as
     * weights of the same T_iter; or, when recomputation may be planned,
     * the profile's: ops with a cost take it, the others share what is left
     * of T_iter (docs/policy.md, "Inputs and knobs": the choice between swapping
     * and recomputing needs the link's real budget, which a profiled step
     * slowed by passive swaps overstates). The replay (replay.c) takes the
     * ops' own times the same way, the profile's costs whenever there are
     * some: it predicts, where the layers' budgets follow the paper. */
    bool any_cost = op_times(v, cfg, out->op_ns);
    bool all_cost = !cfg->op_cost_ns;
    for (size_t k = 0; k < n && all_cost; k++)
        all_cost = v->ops[k].has_cost;
    out->comm = all_cost ? v->ops : NULL;
    out->copy_latency_ns = v->copy_latency_ns;
    bool eq1 = !cfg->op_cost_ns && !cfg->recompute;
    out->timed = cfg->op_cost_ns || (cfg->recompute && any_cost);
    for (size_t i = 0; i < out->n; i++) {
        cham_logical_layer_t *ly = &out->v[i];
        double sum = 0;
        for (uint32_t k = ly->start_op; k < ly->start_op + ly->n_ops; k++)
            sum += out->op_ns[k];
        if (eq1)
            sum = (double)v->duration_ns * ly->n_ops / (double)n;
        ly->time_ns = sum >= 1.8e19 ? UINT64_MAX : (uint64_t)(sum + 0.5);
        ly->remaining_ns = ly->time_ns;
    }
    return true;
}

void cham_gen_layers_free(cham_gen_layers_t *l)
{
    free(l->v);
    free(l->layer_of_op);
    free(l->phase_of_op);
    free(l->op_ns);
    *l = (cham_gen_layers_t){0};
}
