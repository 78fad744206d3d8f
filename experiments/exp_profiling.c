/* profiling-overhead (paper Table 1): a Llama 2 job that fits, run with no
 * profiler, the lightweight profiler, detailed profiling of every step,
 * and a per-op timing profiler that makes the host wait for the device
 * after every op (how a framework's built-in profiler gets op times).
 * Simulated step time on the preset, and the host time a step of the whole
 * simulation takes on this machine (measured: what our hooks really cost
 * is the difference to the run with no profiler). */
#include <math.h>
#include <stdio.h>
#include <time.h>

#include "experiment.h"

typedef struct mode {
    const char *name;
    bool profiler, detailed, sync_every_op;
} mode_t_;

static const mode_t_ modes[] = {
    {"no profiler", false, false, false},
    {"lightweight", true, false, false},
    {"detailed", true, true, false},
    {"per-op sync (built-in)", true, false, true},
};

/* Host time of the steps after the first (the first builds the state). */
typedef struct wall {
    uint64_t last, sum, ops;
} wall_t;

/* CPU time of this thread: the host work itself, not the waits. */
static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void on_step(const cham_run_step_t *s, void *user)
{
    wall_t *w = user;
    uint64_t t = now_ns();
    if (s->step > 0)
        w->sum += t - w->last;
    w->ops = s->info.ops;
    w->last = now_ns();
}

static cham_status_t run(const exp_config_t *c, exp_result_t *r, char *err, size_t err_size)
{
    const char *cols[] = {"mode", "simulated ms/step", "extra %", "paper extra %",
                          "measured host CPU us/step", "host ns/op over none"};
    exp_table_t *t = exp_result_table(r, "profiling-overhead",
                                      "Profiling overhead (simulated step time; "
                                      "host time measured on this machine)",
                                      6, cols);
    if (!t)
        return CHAM_ERR_HOST_OOM;
    plot_t *pl = exp_result_plot(r, "profiling-overhead",
                                     "Extra step time per profiling mode",
                                     "mode", "extra simulated %");
    if (!pl)
        return CHAM_ERR_HOST_OOM;
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++)
        plot_category(pl, modes[i].name);
    const double paper[] = {NAN, 0.9, 34.6, 219.7};
    enum { N_MODES = sizeof modes / sizeof modes[0] };
    uint64_t steps = c->reduced ? 8 : 200;
    int reps = c->reduced ? 1 : 7;
    double sim_ms[N_MODES], host_us[N_MODES];
    uint64_t ops = 1;
    for (size_t i = 0; i < N_MODES; i++)
        host_us[i] = INFINITY;
    /* Host time: the least of a few rounds, the modes taking turns within
     * a round, so that other processes and warming caches, which only add
     * time, weigh on every mode alike. */
    for (int k = 0; k < reps; k++) {
        for (size_t i = 0; i < N_MODES; i++) {
            cham_run_config_t rc = cham_run_config_default();
            rc.plan_optimizer = false;      /* the optimizer where the row says */
            rc.model = c->reduced ? exp_llama(1024, 4, 1024, 1) : exp_llama(4096, 8, 4096, 1);
            rc.model.sync_every_op = modes[i].sync_every_op;
            rc.strategy = CHAM_STRATEGY_NATIVE;
            rc.steps = steps;
            rc.profile_every_step = modes[i].detailed;
            rc.runtime.profiler = modes[i].profiler;
            rc.runtime.device.preset = c->device;
            rc.on_step = on_step;
            wall_t w = {.last = now_ns()};
            rc.user = &w;
            cham_run_result_t res;
            if (cham_run(&rc, &res) != CHAM_OK || res.status != CHAM_OK) {
                snprintf(err, err_size, "profiling-overhead: %s: %s", modes[i].name,
                         res.error);
                return res.status != CHAM_OK ? res.status : CHAM_ERR_INVALID_ARG;
            }
            double us = (double)w.sum * 1e-3 / (double)(steps - 1);
            host_us[i] = us < host_us[i] ? us : host_us[i];
            sim_ms[i] = res.mean_step_time_s * 1e3;
            ops = w.ops;
        }
    }
    for (size_t i = 0; i < N_MODES; i++) {
        long row = exp_table_add_row(t);
        if (row < 0)
            return CHAM_ERR_HOST_OOM;
        double extra = 100.0 * (sim_ms[i] / sim_ms[0] - 1);
        exp_table_set_text(t, (size_t)row, 0, "%s", modes[i].name);
        exp_table_set(t, (size_t)row, 1, sim_ms[i]);
        exp_table_set(t, (size_t)row, 2, extra);
        exp_table_set(t, (size_t)row, 3, paper[i]);
        exp_table_set(t, (size_t)row, 4, host_us[i]);
        exp_table_set(t, (size_t)row, 5, (host_us[i] - host_us[0]) * 1e3 / (double)ops);
        plot_add(pl, "ours", (double)i + 1, extra);
        if (!isnan(paper[i]))
            plot_add(pl, "paper", (double)i + 1, paper[i]);
    }
    snprintf(r->summary, sizeof r->summary, "Simulated extra step time: lightweight %.2f%%, "
             "detailed %.2f%%, per-op sync %.2f%% (the paper: 0.9%%, 34.6%%, 219.7%%): device "
             "time hides the host's work here (ops of milliseconds), and the paper's built-in "
             "profiler did far more host work per op than waiting. Measured host CPU over no "
             "profiler: %.0f ns/op lightweight, %.0f ns/op detailed; differences under about "
             "30 ns/op are within this measurement's noise (bench_dispatch measures the hooks "
             "alone).", exp_table_get(t, "lightweight", "extra %"),
             exp_table_get(t, "detailed", "extra %"),
             exp_table_get(t, "per-op sync (built-in)", "extra %"),
             exp_table_get(t, "lightweight", "host ns/op over none"),
             exp_table_get(t, "detailed", "host ns/op over none"));
    return CHAM_OK;
}

const exp_def_t exp_profiling = {
    .name = "profiling-overhead",
    .what = "no profiler, lightweight, detailed, per-op sync profiler (Table 1)",
    .device = "ascend-910b",
    .run = run,
};
