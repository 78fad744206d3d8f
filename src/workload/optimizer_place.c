/* Where the optimizer runs, chosen by the run (docs/workloads.md, "Where
 * the optimizer runs"): on the device, or on the host with the first N
 * parameter groups updated on the device. The choice changes the program
 * the policy plans for, so it is made before the first step, per run
 * (its budget and its loop). Every program is measured with unlimited
 * memory (program_measure.c); two guesses from its step's figures pick
 * the finalists and short trial runs of them choose. The smallest of the
 * programs' lower bounds is one on every program the run could have
 * chosen. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/assert.h"
#include "workload/workload-impl.h"

/* Host programs are tried only where the device's program runs slower
 * than the best one's first guess by more than this: the device's program
 * is worth leaving for pinned memory and host cores only where a host
 * program may save time, not a rounding's worth. */
#define HOST_MARGIN 0.02
/* Guesses within this fraction of the best one are level: the guesses
 * see the budget only through the bounds, so of level programs the one
 * with the fewest groups on the device (the most room for the rest) is
 * the finalist. */
#define LEVEL 0.005
/* Host programs measured on a grid first where there are more (each is
 * steps of the job and a bound: measuring all would cost layers squared). */
#define MAX_MEASURED 64

void wl_host_figures(const cham_config_t *rc, double *flops, double *bandwidth)
{
    const cham_preset_t *p = cham_preset_find(rc->device.preset ? rc->device.preset
                                                                 : cham_preset_default_name());
    *flops = rc->device.host_flops > 0 ? rc->device.host_flops : p ? p->host_flops : 0;
    *bandwidth = rc->device.host_mem_bandwidth > 0 ? rc->device.host_mem_bandwidth
                                                   : p ? p->host_mem_bandwidth : 0;
}

/* Whether the host can run this job's optimizer: a training job, by the
 * run's own runtime (not ProTrain's), with master weights, on a device
 * with the host's figures. */
static bool host_can_run(const cham_config_t *rc, const cham_model_config_t *m)
{
    if (m->infer || m->protrain || m->precision != CHAM_PRECISION_MASTER)
        return false;
    double flops, bw;
    wl_host_figures(rc, &flops, &bw);
    return flops > 0 && bw > 0;
}

/* Measures the program (host, n) of job m into *p; false when it
 * cannot run or fit. */
static bool measure(const cham_config_t *rc, const cham_device_info_t *info,
                    const cham_model_config_t *m, uint64_t loop_steps, bool host, uint32_t n,
                    wl_program_t *p)
{
    cham_model_config_t c = *m;
    c.host_optimizer = host;
    c.device_groups = host ? n : 0;
    *p = (wl_program_t){.host = host, .device_groups = c.device_groups};
    if (!wl_program_measure(rc, info, &c, true, p))
        return false;
    if (loop_steps && cham_model_loop_changes(m) &&
        !wl_loop_bound(rc, info, &c, loop_steps, &p->loop_s))
        p->loop_s = 0;         /* out of host memory: the step's bound */
    return true;
}

/* A program's two guesses at its step: the larger of its ideal step and
 * its bound (the profile's bound leaves out the host's work, which the
 * ideal step has), which holds where waiting for the host and for the
 * link overlap; and, where they do not, its ideal step plus what the
 * bound adds to the device's program's ideal step (compute). Guesses, not
 * bounds: with a host whose work sets the pace, a policy that moves the
 * device's ops may keep the host busier than the unlimited run does
 * (llama2-13b on the a100-80g, 15 of 42 groups on the device: 5.32 s a
 * step against 5.45 s unlimited, simulated before session 41, when the
 * host's updates waited for the next forward). */
static double optimistic(const wl_program_t *p)
{
    return fmax(p->ideal_s, p->bound_s);
}

static double pessimistic(const wl_program_t *p, double compute_s)
{
    return p->ideal_s + fmax(0, p->bound_s - compute_s);
}

static double guess(const wl_program_t *p, double compute_s, bool pes)
{
    return pes ? pessimistic(p, compute_s) : optimistic(p);
}

bool wl_try_program(wl_trials_t *t, const wl_program_t *p)
{
    for (uint32_t i = 0; i < t->n; i++)
        if (t->tried[i].host == p->host && t->tried[i].device_groups == p->device_groups)
            return false;
    if (t->n == WL_MAX_TRIALS)
        return false;
    double s = t->hooks->trial(p, t->hooks->user);
    t->tried[t->n++] = *p;
    if (s < t->best_s) {
        t->best_s = s;
        t->best = t->n - 1;
    }
    if (!p->host)
        return s < INFINITY;     /* the only one of its kind */
    if (!(s < t->best_host_s))
        return false;
    t->best_host_s = s;
    t->best_host = t->n - 1;
    return true;
}

void wl_walk_groups(wl_trials_t *t, uint32_t first, uint32_t groups)
{
    /* The walk goes on past one slower neighbour: the kept plans are not
     * smooth in the groups. Mixtral (8 layers, varying expert loads) at
     * 45% on the 910B: host:6 ran 1.06 s, host:5 slower, host:4 0.75 s and
     * host:3 0.74 s. */
    uint32_t d = groups / 25 ? groups / 25 : 1;
    bool any = t->best_host_s < INFINITY;
    for (int dir = -1; dir <= 1 && any; dir += 2) {
        int64_t at = t->tried[t->best_host].device_groups;
        for (int misses = 0; misses < 2;) {
            at += dir * (int64_t)d;
            if (at < first || at >= groups)
                break;
            wl_program_t q = {.host = true, .device_groups = (uint32_t)at};
            misses = wl_try_program(t, &q) ? 0 : misses + 1;
        }
    }
    /* Then around the fastest at half the walk's step, a quarter, ...:
     * the walk leaves programs between its steps (GPT-2 1.5B, 50 groups,
     * mbs 4, 2048 tokens, on the a100-80g at 25%: host:20 and host:22
     * tried, host:21 faster than both). */
    for (uint32_t half = d / 2; half >= 1 && any; half /= 2) {
        int64_t at = t->tried[t->best_host].device_groups;
        for (int dir = -1; dir <= 1; dir += 2) {
            int64_t q = at + dir * (int64_t)half;
            if (q >= first && q < groups)
                wl_try_program(t, &(wl_program_t){.host = true, .device_groups = (uint32_t)q});
        }
    }
}

/* The host programs measured so far and the best of them by each guess
 * and by their step's bound (a changing loop's bound does not steer the
 * search: the run measures the same programs whether it asks for it). */
typedef struct scan {
    const cham_config_t *rc;
    const cham_device_info_t *info;
    const cham_model_config_t *m;
    uint64_t loop_steps;
    wl_optimizer_choice_t *out;
    bool *measured;              /* by groups on the device */
    wl_program_t *ran;           /* those measured that run, by groups (else .ideal_s 0) */
    double compute_s;
    wl_program_t best_opt, best_pes, best_bound;
} scan_t;

/* Measures the host program with n groups on the device unless it was. */
static void scan(scan_t *sc, uint32_t n)
{
    wl_program_t p;
    if (sc->measured[n])
        return;
    sc->measured[n] = true;
    sc->out->programs++;
    if (!measure(sc->rc, sc->info, sc->m, sc->loop_steps, true, n, &p))
        return;
    sc->ran[n] = p;
    if (optimistic(&p) < optimistic(&sc->best_opt))
        sc->best_opt = p;
    if (pessimistic(&p, sc->compute_s) < pessimistic(&sc->best_pes, sc->compute_s))
        sc->best_pes = p;
    if (wl_program_step_bound(&p) < wl_program_step_bound(&sc->best_bound))
        sc->best_bound = p;
    if (wl_program_bound(&p) < wl_program_bound(&sc->out->bound))
        sc->out->bound = p;
}

/* The host program with the fewest groups on the device whose guess is
 * level with the best one's (LEVEL). */
static wl_program_t fewest_level(const scan_t *sc, uint32_t groups, bool pes)
{
    double best = INFINITY;
    for (uint32_t n = 0; n < groups; n++)
        if (sc->ran[n].ideal_s > 0)
            best = fmin(best, guess(&sc->ran[n], sc->compute_s, pes));
    for (uint32_t n = 0; n < groups; n++)
        if (sc->ran[n].ideal_s > 0 && guess(&sc->ran[n], sc->compute_s, pes) <= best * (1 + LEVEL))
            return sc->ran[n];
    return pes ? sc->best_pes : sc->best_opt;
}

bool wl_place_optimizer(const cham_config_t *rc, const cham_device_info_t *info,
                        const cham_model_config_t *m, uint64_t loop_steps,
                        const wl_place_hooks_t *hooks, wl_optimizer_choice_t *out)
{
    *out = (wl_optimizer_choice_t){.programs = 1};
    if (!host_can_run(rc, m))
        return false;
    wl_program_t device;
    if (!measure(rc, info, m, loop_steps, false, 0, &device)) {
        /* It cannot run at this budget; the run says why. */
        device.ideal_s = device.bound_s = INFINITY;
    }
    out->bound = out->chosen = device;
    /* host:groups updates every group on the device: the device's
     * program with pinned buffers it does not use. */
    cham_model_config_t h = *m;
    h.host_optimizer = true;
    uint32_t first = wl_least_device_groups(&h, rc->pinned_budget);
    uint32_t groups = m->layers / m->pp + 2;
    scan_t sc = {.rc = rc, .info = info, .m = m, .loop_steps = loop_steps, .out = out,
                 .measured = calloc(groups, sizeof *sc.measured),
                 .ran = calloc(groups, sizeof *sc.ran),
                 .compute_s = isfinite(device.ideal_s) ? device.ideal_s : 0,
                 .best_opt = {.ideal_s = INFINITY}, .best_pes = {.ideal_s = INFINITY},
                 .best_bound = {.bound_s = INFINITY}};
    if (!sc.measured || !sc.ran) {
        free(sc.measured);
        free(sc.ran);
        return true;             /* no host memory to choose with: the device's */
    }
    /* Past MAX_MEASURED host programs, 16 on a grid, then a quarter of
     * the spacing around each best, down to every program: the guesses
     * and bounds change smoothly with the groups (each group adds its
     * state and its host work), so the best are near the grid's best. */
    uint32_t range = groups - first;
    uint32_t stride = range > MAX_MEASURED ? (range + 15) / 16 : 1;
    for (uint32_t n = first; n < groups; n += stride)
        scan(&sc, n);
    scan(&sc, groups - 1);
    while (stride > 1) {
        uint32_t finer = stride / 4 ? stride / 4 : 1;
        uint32_t around[] = {sc.best_opt.device_groups, sc.best_pes.device_groups,
                             sc.best_bound.device_groups};
        for (size_t i = 0; i < 3; i++)
            for (uint32_t n = around[i] > first + stride ? around[i] - stride : first;
                 n <= around[i] + stride && n < groups; n += finer)
                scan(&sc, n);
        stride = finer;
    }
    if (isfinite(optimistic(&sc.best_opt))) {
        sc.best_opt = fewest_level(&sc, groups, false);
        sc.best_pes = fewest_level(&sc, groups, true);
    }
    free(sc.measured);
    free(sc.ran);
    if (!isfinite(optimistic(&sc.best_opt)) || !hooks)
        return true;
    /* The device's program first: where it runs within the margin of the
     * best host program's first guess (which holds where host and link
     * overlap, the best a host program can do), no host program is worth
     * trying. Its own guess cannot tell, even where it is the smallest of
     * all: under memory pressure its plan may run far from its bound
     * (Mixtral with ZeRO-3 on the h100-80g at 80%: 1.07 s against a
     * bound of 0.97 s; GPT-2 with overflows on the 910B at 60%: 0.391 s
     * against 0.314 s). Then which guess holds, whether the
     * hint's program is faster, only running them tells; then the fastest
     * host program's neighbours, a step of a 25th of the groups, while
     * they are faster (a program's kept plan is not a smooth function of
     * its groups: neighbours differ by a few percent). Not where the loop
     * changes: there the guesses are one step's (an evaluation, or one
     * that drops more layers than most) and the trial is the mean of its
     * late steps, so the margin compares unlike figures; the finalists
     * run (Llama 2 7B, ZeRO-3 over 8, layer drop 0.1, on the h100-80g at
     * 60%: the device's program, kept, ran 0.4563 s a step; host:3 runs
     * 0.4445 s, simulated). */
    wl_trials_t t = {.hooks = hooks, .best_s = INFINITY, .best_host_s = INFINITY};
    wl_try_program(&t, &device);
    if (!cham_model_loop_changes(m) && t.best_s <= optimistic(&sc.best_opt) * (1 + HOST_MARGIN)) {
        out->trials = t.n;
        return true;
    }
    wl_try_program(&t, &sc.best_pes);
    wl_try_program(&t, &sc.best_opt);
    uint32_t hint = hooks->hint(hooks->user);
    if (hint >= first && hint < groups)
        wl_try_program(&t, &(wl_program_t){.host = true, .device_groups = hint});
    wl_walk_groups(&t, first, groups);
    if (isfinite(t.best_s))      /* none ran: the device's, whose run says why */
        out->chosen = t.tried[t.best];
    out->trials = t.n;
    return true;
}
