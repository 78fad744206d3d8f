/* budget-sweep (issue 17): step time against the memory budget, from the
 * unconstrained peak down to a quarter of it, for every strategy and the
 * lower bound (cham_plan_bound), on llama2-7b (mbs 4, ZeRO-3 over 8) and
 * gpt2-1.5b (mbs 8, seq 1024), each on the ascend-910b and the h100-80g:
 * where Chameleon stands against recomputation, swapping alone and the
 * bound. */
#include <math.h>
#include <stdio.h>

#include "experiment.h"

/* Budgets as fractions of the unconstrained peak: 1.25x, 1.5x, 2x, 3x and
 * 4x oversubscription among them. */
static const double fractions[] = {1.0, 0.9, 0.8, 2.0 / 3, 0.6, 0.5, 0.45, 0.4, 1.0 / 3, 0.25};
static const double fractions_reduced[] = {1.0, 2.0 / 3, 0.5, 0.25};

static const cham_strategy_t strategies[] = {
    CHAM_STRATEGY_NATIVE, CHAM_STRATEGY_RECOMPUTE, CHAM_STRATEGY_VDNN,
    CHAM_STRATEGY_CAPUCHIN, CHAM_STRATEGY_CHAMELEON_SWAP, CHAM_STRATEGY_CHAMELEON};
#define N_STRATEGIES (sizeof strategies / sizeof strategies[0])
#define CHAMELEON (N_STRATEGIES - 1)

typedef exp_setup_t setup_t;

static void setups(bool reduced, setup_t *s)
{
    exp_training_setups(s);
    if (reduced) {               /* the same shapes, a few layers */
        s[0].m.layers = 4;
        s[0].m.seq = 2048;
        s[1].m.layers = 4;
        s[1].m.dp = 8;
        s[1].m.zero = 3;
    }
}

typedef struct tally {
    int points, not_behind;      /* points where every strategy ran; chameleon <= best + 0.5% */
    double worst_vs_bound;       /* the largest chameleon / bound */
} tally_t;

/* One budget: every strategy, the bound, one table row and the plot. */
static cham_status_t one_point(const exp_config_t *c, const setup_t *s, const char *device,
                               double frac, uint64_t peak, double ideal_s, exp_table_t *t,
                               plot_t *pl, tally_t *ty, char *err, size_t err_size)
{
    uint64_t cap = (uint64_t)((double)peak * frac) & ~((UINT64_C(1) << 20) - 1);
    long row = exp_table_add_row(t);
    if (row < 0)
        return CHAM_ERR_HOST_OOM;
    size_t rw = (size_t)row;
    exp_table_set_text(t, rw, 0, "%s %s %.0f%%", s->label, device, 100 * frac);
    exp_table_set(t, rw, 1, (double)cap / (double)(UINT64_C(1) << 30));
    double time[N_STRATEGIES], bound = NAN, device_bound = NAN;
    char optimizer[32] = "";
    for (size_t k = 0; k < N_STRATEGIES; k++) {
        cham_run_config_t rc = cham_run_config_default();
        rc.model = s->m;
        rc.strategy = strategies[k];
        /* Twice the steps that reach Stable: where blocks come free in
         * the next step (policy.md, "Refinement") the first Stable steps
         * may meet fragmentation their trials did not, for a few steps
         * (GPT-2 on the H100 at 50%: passive swaps in 4, then none); the
         * median is the steady state's. */
        rc.steps = 2 * EXP_STABLE_STEPS;
        rc.runtime.device.preset = device;
        rc.runtime.device.capacity = cap;
        rc.lower_bound = strategies[k] == CHAM_STRATEGY_CHAMELEON ||
                         strategies[k] == CHAM_STRATEGY_CHAMELEON_SWAP;
        cham_run_result_t r;
        cham_status_t st = cham_run(&rc, &r);
        if (st != CHAM_OK) {
            snprintf(err, err_size, "%s", r.error);
            return st;
        }
        if (c->progress)
            fprintf(stderr, "  %-14s %-10s %-12s %4.0f%%  %s\n", cham_strategy_name(strategies[k]),
                    s->label, device, 100 * frac,
                    r.status == CHAM_OK ? "ok" : cham_status_string(r.status));
        time[k] = r.status == CHAM_OK ? r.step_time_s : NAN;
        /* Chameleon's bound covers every program it chooses between (the
         * optimizer on the device or the host); chameleon-swap's, the
         * device's program that the other strategies run. */
        double b = r.status == CHAM_OK && r.has_bound
                       ? r.bound_feasible ? r.lower_bound_step_time_s : INFINITY : NAN;
        if (strategies[k] == CHAM_STRATEGY_CHAMELEON) {
            bound = b;
            if (r.status == CHAM_OK)
                exp_optimizer_name(&r, optimizer, sizeof optimizer);
        } else if (strategies[k] == CHAM_STRATEGY_CHAMELEON_SWAP) {
            device_bound = b;
        }
        exp_table_set(t, rw, 2 + k, time[k]);
        plot_add(pl, cham_strategy_name(strategies[k]), 100 * frac, time[k]);
    }
    /* No policy beats the unconstrained run of the same program; the
     * profile's bound counts the ops' costs and the waits for their
     * collectives, not what the device adds (docs/policy.md). Chameleon's
     * stays as cham_run gives it: with the optimizer on the host a policy
     * may beat its program's unconstrained step (the host's work overlaps
     * the moved ops otherwise: workload/optimizer_place.c, `optimistic`),
     * so the smallest over programs cannot be raised to their ideal. */
    if (isfinite(device_bound) && ideal_s > device_bound)
        device_bound = ideal_s;
    bool bound_known = isfinite(bound);
    exp_table_set(t, rw, 2 + N_STRATEGIES, bound_known ? bound : NAN);
    exp_table_set(t, rw, 6 + N_STRATEGIES, isfinite(device_bound) ? device_bound : NAN);
    exp_table_set_text(t, rw, 7 + N_STRATEGIES, "%s", optimizer);
    plot_add(pl, "lower bound", 100 * frac, bound_known ? bound : NAN);
    /* Chameleon against the best other way, and against the bound. */
    double best = INFINITY;
    for (size_t k = 1; k < CHAMELEON; k++)          /* not native: it only fits or not */
        if (!isnan(time[k]) && time[k] < best)
            best = time[k];
    double ch = time[CHAMELEON];
    if (!isnan(ch) && isfinite(best)) {
        exp_table_set(t, rw, 3 + N_STRATEGIES, 100.0 * (best / ch - 1));
        ty->points++;
        ty->not_behind += ch <= best * 1.005;
    }
    if (!isnan(ch) && bound_known && bound > 0) {
        exp_table_set(t, rw, 4 + N_STRATEGIES, ch / bound);
        ty->worst_vs_bound = ch / bound > ty->worst_vs_bound ? ch / bound : ty->worst_vs_bound;
    }
    if (!isnan(ch) && ideal_s > 0)
        exp_table_set(t, rw, 5 + N_STRATEGIES, 100.0 * (ch / ideal_s - 1));
    return CHAM_OK;
}

static cham_status_t run(const exp_config_t *c, exp_result_t *r, char *err, size_t err_size)
{
    const char *devices[] = {"ascend-910b", "h100-80g"};
    setup_t s[2];
    setups(c->reduced, s);
    const double *fr = c->reduced ? fractions_reduced : fractions;
    size_t n_fr = c->reduced ? sizeof fractions_reduced / sizeof fractions_reduced[0]
                             : sizeof fractions / sizeof fractions[0];
    const char *cols[] = {"point", "budget GiB", "native s", "recompute s", "vdnn s",
                          "capuchin s", "chameleon-swap s", "chameleon s", "lower bound s",
                          "chameleon vs best other %", "chameleon / bound",
                          "chameleon vs ideal %", "lower bound, optimizer on the device s",
                          "chameleon's optimizer"};
    exp_table_t *t = exp_result_table(r, "budget-sweep", "Step time against the memory budget "
                                      "(simulated s/step; budget as % of the unconstrained "
                                      "peak)", sizeof cols / sizeof cols[0], cols);
    if (!t)
        return CHAM_ERR_HOST_OOM;
    tally_t ty = {0};
    for (size_t mi = 0; mi < 2; mi++)
        for (size_t di = 0; di < 2; di++) {
            char name[64], title[128];
            snprintf(name, sizeof name, "budget-sweep-%s-%s", s[mi].label, devices[di]);
            snprintf(title, sizeof title, "%s on %s", s[mi].label, devices[di]);
            plot_t *pl = exp_result_plot(r, name, title, "budget, % of the unconstrained peak",
                                         "simulated s/step");
            if (!pl)
                return CHAM_ERR_HOST_OOM;
            cham_run_config_t rc = cham_run_config_default();
            rc.model = s[mi].m;
            rc.strategy = CHAM_STRATEGY_IDEAL;
            rc.steps = EXP_STABLE_STEPS;
            rc.runtime.device.preset = devices[di];
            cham_run_result_t ideal;
            cham_status_t st = cham_run(&rc, &ideal);
            if (st != CHAM_OK || ideal.status != CHAM_OK) {
                snprintf(err, err_size, "budget-sweep: %s on %s with unlimited memory: %s",
                         s[mi].label, devices[di], ideal.error);
                return st != CHAM_OK ? st : ideal.status;
            }
            for (size_t f = 0; f < n_fr; f++) {
                st = one_point(c, &s[mi], devices[di], fr[f], ideal.peak_device_bytes,
                               ideal.step_time_s, t, pl, &ty, err, err_size);
                if (st != CHAM_OK)
                    return st;
            }
        }
    snprintf(r->summary, sizeof r->summary,
             "Chameleon within 0.5%% of the best of recompute, vdnn, capuchin and "
             "chameleon-swap (or ahead) at %d of %d points where it and another ran; at most "
             "%.2fx the lower bound (over every program Chameleon chooses between: the "
             "optimizer on the device or the host).", ty.not_behind, ty.points,
             ty.worst_vs_bound);
    return CHAM_OK;
}

const exp_def_t exp_budget_sweep = {
    .name = "budget-sweep",
    .what = "step time against the memory budget: every strategy and the lower bound, "
            "llama2-7b and gpt2-1.5b on ascend-910b and h100-80g (issue 17)",
    .device = "ascend-910b",
    .run = run,
};
