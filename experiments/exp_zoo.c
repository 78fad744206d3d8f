/* zoo (issue 50): a menagerie of training jobs chosen to find where
 * Chameleon is weak, not to show where it is strong. Dense, GQA and MoE
 * models; one device, ZeRO over 8 and TP+PP; sequences from 1k to 32k;
 * static loops and loops with gradient accumulation, evaluations, layer
 * drop, overflows and varying expert loads; three device presets. Each job
 * at 80% down to 25% of its unconstrained peak under every strategy, with
 * Chameleon's lower bound, one table row per budget and one plot per job. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "experiment.h"

static const double fractions[] = {0.8, 0.6, 0.45, 0.33, 0.25};
static const double fractions_reduced[] = {0.6, 0.33};
#define MAX_FRACTIONS (sizeof fractions / sizeof fractions[0])

/* The strategy columns. "chameleon" chooses where the optimizer runs
 * itself; "chameleon host-opt" has it on the host with ProTrain's cost
 * model picking the groups kept on the device. */
enum { NATIVE, CHAMELEON, CHAMELEON_SWAP, HOST_OPT, RECOMPUTE, CAPUCHIN, VDNN, PROTRAIN,
       HYPEROFFLOAD, SWAPADVISOR, N_WAYS };
static const struct way {
    const char *name;
    cham_strategy_t strategy;
} ways[N_WAYS] = {
    {"native", CHAM_STRATEGY_NATIVE},
    {"chameleon", CHAM_STRATEGY_CHAMELEON},
    {"chameleon-swap", CHAM_STRATEGY_CHAMELEON_SWAP},
    {"chameleon host-opt", CHAM_STRATEGY_CHAMELEON},
    {"recompute", CHAM_STRATEGY_RECOMPUTE},
    {"capuchin", CHAM_STRATEGY_CAPUCHIN},
    {"vdnn", CHAM_STRATEGY_VDNN},
    {"protrain", CHAM_STRATEGY_PROTRAIN},
    {"hyperoffload", CHAM_STRATEGY_HYPEROFFLOAD},
    {"swapadvisor", CHAM_STRATEGY_SWAPADVISOR},
};

/* Columns after the strategies'. */
enum { COL_WAYS = 2, COL_BOUND = COL_WAYS + N_WAYS, COL_OPTIMIZER, COL_VS_BEST, COL_VS_BOUND,
       COL_STATIC, COL_VS_STATIC, COL_VS_STATIC_WORK, N_COLS };

/* A job: a preset with the fields that differ (0: the preset's). */
typedef struct job {
    const char *label;           /* short: the rows' and the plot's name */
    const char *preset, *device;
    uint32_t layers, seq, mbs, tp, pp, dp, zero;
    uint32_t accumulate, validate_every;
    int64_t overflow_every;
    double layer_drop;
    bool moe_vary, no_flash;
} job_t;

/* Full size. Each row is there for a suspected weakness: the model state
 * larger than the device (the optimizer's place matters), MoE's wide
 * layers, accumulation and evaluations that change the step every few
 * steps, random layer drop (a new op sequence nearly every step), 32k
 * tokens whose activations dwarf the weights, attention scores without
 * flash, tensor and pipeline parallel stages. One Mixtral is cut to 8
 * layers (its label says "L8") to keep its dynamic loop affordable. */
static const job_t jobs[] = {
    {"gpt2-1.5b b4 s2k", "gpt2-1.5b", "a100-80g", .seq = 2048, .mbs = 4},
    {"gpt2-1.5b b8 s1k noflash", "gpt2-1.5b", "h100-80g", .seq = 1024, .mbs = 8,
     .no_flash = true},
    {"gpt2-1.5b b8 ovf7", "gpt2-1.5b", "ascend-910b", .seq = 1024, .mbs = 8,
     .overflow_every = 7},
    {"llama3-8b s8k", "llama3-8b", "h100-80g", .seq = 8192},
    {"llama2-7b z3x8 acc2 val5", "llama2-7b", "ascend-910b", .dp = 8, .zero = 3,
     .accumulate = 2, .validate_every = 5},
    {"llama2-7b z3x8 drop.1", "llama2-7b", "h100-80g", .dp = 8, .zero = 3, .layer_drop = 0.1},
    {"llama2-13b z1x8 b2 acc4", "llama2-13b", "a100-80g", .mbs = 2, .dp = 8, .zero = 1,
     .accumulate = 4},
    {"llama3-8b z2x8 s16k", "llama3-8b", "ascend-910b", .seq = 16384, .dp = 8, .zero = 2},
    {"llama3-8b tp4 s32k", "llama3-8b", "h100-80g", .seq = 32768, .tp = 4},
    {"llama2-13b tp4 pp2 b2", "llama2-13b", "ascend-910b", .mbs = 2, .tp = 4, .pp = 2},
    {"mixtral-8x7b z3x8", "mixtral-8x7b", "h100-80g", .dp = 8, .zero = 3},
    {"mixtral-8x7b L8 z3x8 vary val4", "mixtral-8x7b", "ascend-910b", .layers = 8, .dp = 8,
     .zero = 3, .moe_vary = true, .validate_every = 4},
    {"mixtral-8x7b tp4 pp2 s8k", "mixtral-8x7b", "a100-80g", .seq = 8192, .tp = 4, .pp = 2},
    {"llama3-8b z3x8 b2 ovf5 val3", "llama3-8b", "a100-80g", .mbs = 2, .dp = 8, .zero = 3,
     .overflow_every = 5, .validate_every = 3},
};

/* The tests' size: the same kinds (dense on one device, ZeRO-3, MoE, a
 * dynamic loop, TP+PP) in 4 layers and short sequences. */
static const job_t jobs_reduced[] = {
    {"gpt2-1.5b L4 b4 s1k", "gpt2-1.5b", "a100-80g", .layers = 4, .seq = 1024, .mbs = 4},
    {"llama2-7b L4 z3x8 s1k", "llama2-7b", "h100-80g", .layers = 4, .seq = 1024, .dp = 8,
     .zero = 3},
    {"mixtral-8x7b L4 z3x8 s1k", "mixtral-8x7b", "h100-80g", .layers = 4, .seq = 1024,
     .dp = 8, .zero = 3},
    {"llama2-7b L4 z3x8 acc2 val5", "llama2-7b", "ascend-910b", .layers = 4, .seq = 1024,
     .dp = 8, .zero = 3, .accumulate = 2, .validate_every = 5},
    {"llama3-8b L4 tp2 pp2 s2k", "llama3-8b", "a100-80g", .layers = 4, .seq = 2048, .tp = 2,
     .pp = 2},
};

static cham_model_config_t model_of(const job_t *j)
{
    cham_model_config_t m;
    cham_model_preset(j->preset, &m);
#define SET(f) if (j->f) m.f = j->f
    SET(layers); SET(seq); SET(mbs); SET(tp); SET(pp); SET(dp); SET(zero);
    SET(accumulate); SET(validate_every); SET(overflow_every); SET(layer_drop); SET(moe_vary);
#undef SET
    m.flash = !j->no_flash;
    return m;
}

/* A dynamic loop runs long enough for the classes to settle (the
 * accumulate-2, evaluate-every-5 job's last class change is near step 40)
 * and is timed by the mean over the last half: every class in its share,
 * not the median of the most frequent one. */
#define DYNAMIC_STEPS 80

/* What one budget gave: a step time per strategy (NAN: did not run), the
 * bound and what Chameleon chose. */
typedef struct point {
    double frac, time[N_WAYS], bound;
    double static_s;             /* a dynamic loop: Chameleon on the same job's
                                    static loop at the same bytes (else NAN) */
    double work;                 /* a dynamic loop: its mean step over its static
                                    loop's, both with unlimited memory: what the
                                    loop's own work adds (else NAN) */
    char optimizer[16];
} point_t;

/* One strategy at one budget into p. Where it does not apply (ProTrain,
 * and the host optimizer with its groups chosen by ProTrain's cost model:
 * one device, no accumulation) and where the run fails, NAN; only a
 * configuration cham_run refuses is an error (the zoo's). */
static cham_status_t run_way(const exp_config_t *c, const job_t *j, size_t k, uint64_t cap,
                             point_t *p, char *err, size_t err_size)
{
    cham_run_config_t rc = cham_run_config_default();
    rc.model = model_of(j);
    rc.strategy = ways[k].strategy;
    bool dyn = cham_model_loop_changes(&rc.model);
    rc.steps = dyn ? DYNAMIC_STEPS : 2 * EXP_STABLE_STEPS;
    rc.runtime.device.preset = j->device;
    rc.runtime.device.capacity = cap;
    /* SwapAdvisor's search ends after its generations, not a wall-clock
     * limit, so the table does not depend on the machine; 10 of its 100
     * keeps the searches again at each change of a dynamic loop short. */
    rc.runtime.swapadvisor.generations = 10;
    rc.runtime.swapadvisor.search_seconds = 1e6;
    rc.plan_optimizer = k == CHAMELEON;
    rc.lower_bound = k == CHAMELEON;
    if (k == HOST_OPT) {
        rc.model.host_optimizer = true;
        rc.model.device_groups = CHAM_DEVICE_GROUPS_AUTO;
    }
    if ((k == HOST_OPT || k == PROTRAIN) &&
        cham_run_check(&rc, err, err_size) == CHAM_ERR_INVALID_ARG)
        return CHAM_OK;                     /* not applicable here */
    cham_run_result_t r;
    cham_status_t st = cham_run(&rc, &r);
    if (st != CHAM_OK) {
        snprintf(err, err_size, "zoo: %s under %s: %s", j->label, ways[k].name, r.error);
        return st;
    }
    if (c->progress)
        fprintf(stderr, "  %-18s %-30s %-11s %3.0f%%  %s\n", ways[k].name, j->label, j->device,
                100 * p->frac, r.status == CHAM_OK ? "ok" : cham_status_string(r.status));
    if (r.status != CHAM_OK)                /* hazards fail the run too */
        return CHAM_OK;
    p->time[k] = dyn ? r.late_mean_step_time_s : r.step_time_s;
    if (k == CHAMELEON) {
        /* A dynamic loop's is over the steps its mean is of. */
        p->bound = r.has_bound && r.bound_feasible ? r.lower_bound_step_time_s : NAN;
        exp_optimizer_name(&r, p->optimizer, sizeof p->optimizer);
    }
    return CHAM_OK;
}

/* The job with its loop's variation off (no accumulation, evaluation,
 * overflow, layer drop or varying expert loads): issue 50 asks a dynamic
 * loop's mean step to be within 5% of that loop's step at the same bytes. */
static cham_model_config_t static_of(const job_t *j)
{
    cham_model_config_t m = model_of(j);
    m.accumulate = 0;
    m.validate_every = 0;
    m.overflow_every = 0;
    m.layer_drop = 0;
    m.moe_vary = false;
    return m;
}

/* Chameleon (choosing the optimizer's place) on the job's static loop at
 * cap into p->static_s; NAN where it fails. */
static cham_status_t run_static(const exp_config_t *c, const job_t *j, uint64_t cap, point_t *p,
                                char *err, size_t err_size)
{
    cham_run_config_t rc = cham_run_config_default();
    rc.model = static_of(j);
    rc.strategy = CHAM_STRATEGY_CHAMELEON;
    rc.steps = 2 * EXP_STABLE_STEPS;
    rc.runtime.device.preset = j->device;
    rc.runtime.device.capacity = cap;
    cham_run_result_t r;
    cham_status_t st = cham_run(&rc, &r);
    if (st != CHAM_OK) {
        snprintf(err, err_size, "zoo: %s's static loop: %s", j->label, r.error);
        return st;
    }
    if (c->progress)
        fprintf(stderr, "  %-18s %-30s %-11s %3.0f%%  %s\n", "chameleon static", j->label,
                j->device, 100 * p->frac,
                r.status == CHAM_OK ? "ok" : cham_status_string(r.status));
    p->static_s = r.status == CHAM_OK ? r.step_time_s : NAN;
    return CHAM_OK;
}

typedef struct tally {
    int points, not_behind;      /* chameleon and another ran; chameleon <= best + 0.5% */
    int bounded, near_bound;     /* chameleon and the bound known; <= 1.05x */
    int missing;                 /* another ran, chameleon did not */
    int dynamic, near_static;    /* dynamic loops with both times; <= 1.05x */
    int near_static_work;        /* ... and divided by their work; <= 1.05x */
    double worst_vs_best, worst_vs_bound, worst_vs_static, worst_vs_static_work;
    char worst_vs_best_at[48], worst_vs_bound_at[48], worst_vs_static_at[48],
        worst_vs_static_work_at[48];
} tally_t;

/* The row of one budget, and its share of the summary. */
static cham_status_t add_row(exp_table_t *t, const job_t *j, uint64_t cap, const point_t *p,
                             tally_t *ty)
{
    cham_model_config_t m = model_of(j);
    bool dyn = cham_model_loop_changes(&m);
    long row = exp_table_add_row(t);
    if (row < 0)
        return CHAM_ERR_HOST_OOM;
    size_t rw = (size_t)row;
    char name[48];
    snprintf(name, sizeof name, "%s %s %.0f%%", j->label, j->device, 100 * p->frac);
    exp_table_set_text(t, rw, 0, "%s", name);
    exp_table_set(t, rw, 1, (double)cap / (double)(UINT64_C(1) << 30));
    double best = INFINITY;
    for (size_t k = 0; k < N_WAYS; k++) {
        exp_table_set(t, rw, COL_WAYS + k, p->time[k]);
        if (k != NATIVE && k != CHAMELEON && p->time[k] < best)   /* native: fits or not */
            best = p->time[k];
    }
    exp_table_set(t, rw, COL_BOUND, p->bound);
    exp_table_set_text(t, rw, COL_OPTIMIZER, "%s", p->optimizer);
    double ch = p->time[CHAMELEON];
    exp_table_set(t, rw, COL_STATIC, p->static_s);
    if (dyn && isfinite(ch) && p->static_s > 0) {
        double vs = ch / p->static_s;
        exp_table_set(t, rw, COL_VS_STATIC, vs);
        ty->dynamic++;
        ty->near_static += vs <= 1.05;
        if (vs > ty->worst_vs_static) {
            ty->worst_vs_static = vs;
            snprintf(ty->worst_vs_static_at, sizeof ty->worst_vs_static_at, "%s", name);
        }
        double vw = vs / p->work;
        exp_table_set(t, rw, COL_VS_STATIC_WORK, vw);
        ty->near_static_work += vw <= 1.05;
        if (vw > ty->worst_vs_static_work) {
            ty->worst_vs_static_work = vw;
            snprintf(ty->worst_vs_static_work_at, sizeof ty->worst_vs_static_work_at, "%s",
                     name);
        }
    }
    if (isnan(ch)) {
        ty->missing += isfinite(best) || !isnan(p->time[NATIVE]);
        return CHAM_OK;
    }
    if (isfinite(best)) {
        double vs = 100.0 * (best / ch - 1);
        exp_table_set(t, rw, COL_VS_BEST, vs);
        ty->points++;
        ty->not_behind += ch <= best * 1.005;
        if (vs < ty->worst_vs_best) {
            ty->worst_vs_best = vs;
            snprintf(ty->worst_vs_best_at, sizeof ty->worst_vs_best_at, "%s", name);
        }
    }
    if (p->bound > 0) {
        double vb = ch / p->bound;
        exp_table_set(t, rw, COL_VS_BOUND, vb);
        ty->bounded++;
        ty->near_bound += vb <= 1.05;
        if (vb > ty->worst_vs_bound) {
            ty->worst_vs_bound = vb;
            snprintf(ty->worst_vs_bound_at, sizeof ty->worst_vs_bound_at, "%s", name);
        }
    }
    return CHAM_OK;
}

/* The job's plot: Chameleon, the bound and the other strategies that ran,
 * at most six of them (a plot has eight colours): those that ran at the
 * most budgets first. Native is left out (where it fits, Chameleon is
 * native); the title names the others left out. The table has them all. */
static cham_status_t plot_job(exp_result_t *r, const job_t *j, const point_t *pts, size_t n)
{
    int ran[N_WAYS] = {0};
    for (size_t f = 0; f < n; f++)
        for (size_t k = 0; k < N_WAYS; k++)
            ran[k] += !isnan(pts[f].time[k]);
    bool shown[N_WAYS] = {[CHAMELEON] = true};
    char left_out[96] = "";
    for (int shown_others = 0, most = (int)n; most > 0; most--)
        for (size_t k = 0; k < N_WAYS; k++) {
            if (k == NATIVE || k == CHAMELEON || ran[k] != most)
                continue;
            if (shown_others < 6) {
                shown[k] = true;
                shown_others++;
            } else {
                size_t len = strlen(left_out);
                snprintf(left_out + len, sizeof left_out - len, "%s%s", len ? ", " : "",
                         ways[k].name);
            }
        }
    char name[48], title[160];
    snprintf(name, sizeof name, "zoo-%s-%s", j->label, j->device);
    for (char *s = name; *s; s++)
        *s = *s == ' ' ? '-' : *s;
    snprintf(title, sizeof title, "%s on %s%s%s%s", j->label, j->device,
             *left_out ? " (not plotted: " : "", left_out, *left_out ? ")" : "");
    plot_t *pl = exp_result_plot(r, name, title,
                                 "budget, % of the tensors' unconstrained peak",
                                 "simulated s/step");
    if (!pl)
        return CHAM_ERR_HOST_OOM;
    for (size_t f = 0; f < n; f++) {
        for (size_t k = 0; k < N_WAYS; k++)
            if (shown[k])
                plot_add(pl, ways[k].name, 100 * pts[f].frac, pts[f].time[k]);
        plot_add(pl, "lower bound", 100 * pts[f].frac, pts[f].bound);
    }
    return CHAM_OK;
}

/* One job: its unconstrained peak, then every budget. The peak is the
 * most bytes its tensors held in a step with unlimited memory, as
 * `chameleon simulate --capacity P%` takes it, not the allocator's
 * segments (budget-sweep's): with unlimited memory the allocator keeps
 * what ZeRO-3's gathers free, 1.5x to 3.3x the tensors' peak in these
 * jobs, and a share of that is a budget native fits in. */
static cham_status_t run_job(const exp_config_t *c, const job_t *j, exp_result_t *r,
                             exp_table_t *t, tally_t *ty, char *err, size_t err_size)
{
    cham_run_config_t rc = cham_run_config_default();
    rc.model = model_of(j);
    rc.strategy = CHAM_STRATEGY_IDEAL;
    rc.steps = cham_model_loop_changes(&rc.model) ? DYNAMIC_STEPS : EXP_STABLE_STEPS;
    rc.runtime.device.preset = j->device;
    cham_run_result_t ideal;
    cham_status_t st = cham_run(&rc, &ideal);
    if (st != CHAM_OK || ideal.status != CHAM_OK) {
        snprintf(err, err_size, "zoo: %s on %s with unlimited memory: %s", j->label, j->device,
                 ideal.error);
        return st != CHAM_OK ? st : ideal.status;
    }
    /* A dynamic loop's own work against its static loop's: an evaluation
     * adds a forward, layer drop skips layers, whatever the memory. */
    double work = NAN;
    if (cham_model_loop_changes(&rc.model)) {
        cham_run_config_t sc = rc;
        sc.model = static_of(j);
        sc.steps = EXP_STABLE_STEPS;
        cham_run_result_t is;
        st = cham_run(&sc, &is);
        if (st != CHAM_OK || is.status != CHAM_OK) {
            snprintf(err, err_size, "zoo: %s's static loop on %s with unlimited memory: %s",
                     j->label, j->device, is.error);
            return st != CHAM_OK ? st : is.status;
        }
        work = ideal.late_mean_step_time_s / is.step_time_s;
    }
    const double *fr = c->reduced ? fractions_reduced : fractions;
    size_t n = c->reduced ? sizeof fractions_reduced / sizeof fractions_reduced[0]
                          : MAX_FRACTIONS;
    point_t pts[MAX_FRACTIONS];
    for (size_t f = 0; f < n; f++) {
        point_t *p = &pts[f];
        *p = (point_t){.frac = fr[f], .bound = NAN, .static_s = NAN, .work = work};
        for (size_t k = 0; k < N_WAYS; k++)
            p->time[k] = NAN;
        uint64_t cap = (uint64_t)((double)ideal.peak_tensor_bytes * fr[f]) &
                       ~((UINT64_C(1) << 20) - 1);
        for (size_t k = 0; k < N_WAYS; k++)
            if ((st = run_way(c, j, k, cap, p, err, err_size)) != CHAM_OK)
                return st;
        if (cham_model_loop_changes(&rc.model) &&
            (st = run_static(c, j, cap, p, err, err_size)) != CHAM_OK)
            return st;
        if ((st = add_row(t, j, cap, p, ty)) != CHAM_OK)
            return st;
    }
    return plot_job(r, j, pts, n);
}

static cham_status_t run(const exp_config_t *c, exp_result_t *r, char *err, size_t err_size)
{
    const job_t *js = c->reduced ? jobs_reduced : jobs;
    size_t n_jobs = c->reduced ? sizeof jobs_reduced / sizeof jobs_reduced[0]
                               : sizeof jobs / sizeof jobs[0];
    const char *cols[N_COLS] = {"point", "budget GiB"};
    char way_cols[N_WAYS][40];
    for (size_t k = 0; k < N_WAYS; k++) {
        snprintf(way_cols[k], sizeof way_cols[k], "%s s", ways[k].name);
        cols[COL_WAYS + k] = way_cols[k];
    }
    cols[COL_BOUND] = "lower bound s";
    cols[COL_OPTIMIZER] = "chameleon's optimizer";
    cols[COL_VS_BEST] = "chameleon vs best other %";
    cols[COL_VS_BOUND] = "chameleon / bound";
    cols[COL_STATIC] = "chameleon static loop s";
    cols[COL_VS_STATIC] = "dynamic / static";
    cols[COL_VS_STATIC_WORK] = "dynamic / static per work";
    exp_table_t *t = exp_result_table(r, "zoo", "Training jobs chosen to find weaknesses "
                                      "(simulated s/step; budget as % of the tensors' "
                                      "unconstrained peak; dynamic loops: mean of the last "
                                      "half)", N_COLS,
                                      cols);
    if (!t)
        return CHAM_ERR_HOST_OOM;
    tally_t ty = {.worst_vs_best = INFINITY};   /* the others' worst start at 0 */
    for (size_t i = 0; i < n_jobs; i++) {
        cham_status_t st = run_job(c, &js[i], r, t, &ty, err, err_size);
        if (st != CHAM_OK)
            return st;
    }
    snprintf(r->summary, sizeof r->summary,
             "Chameleon within 0.5%% of the best other strategy (or ahead) at %d of %d points "
             "where another ran, the worst %+.1f%% (%s); within 1.05x of the lower bound at %d "
             "of %d, the worst %.2fx (%s); %d points where another "
             "strategy ran and Chameleon did not; dynamic loops within 1.05x of the same job's "
             "static loop at the same bytes at %d of %d, the worst %.2fx (%s); and so once "
             "divided by what the loop's own work adds (the same ratio with unlimited memory) "
             "at %d of %d, the worst %.2fx (%s).", ty.not_behind,
             ty.points, ty.points ? ty.worst_vs_best : 0, ty.worst_vs_best_at, ty.near_bound,
             ty.bounded, ty.worst_vs_bound, ty.worst_vs_bound_at, ty.missing, ty.near_static,
             ty.dynamic, ty.worst_vs_static, ty.worst_vs_static_at, ty.near_static_work,
             ty.dynamic, ty.worst_vs_static_work, ty.worst_vs_static_work_at);
    return CHAM_OK;
}

const exp_def_t exp_zoo = {
    .name = "zoo",
    .what = "training jobs chosen to find weaknesses: dense, GQA, MoE; one device, ZeRO, "
            "TP+PP; 1k-32k; dynamic loops; every strategy and the bound at 80-25% (issue 50; "
            "each job has its own device)",
    .device = "h100-80g",
    .run = run,
};
