/* bench_simulate: how long one simulated training step of Llama 2 7B takes
 * on this machine (all ops through the runtime, virtual time, no data), and
 * how that grows with the layer count. Per size:
 *   unlimited  the ideal run: dispatch, allocation, the sim's timeline and
 *              hazard detector; no executor
 *   chameleon  the device cut to half of the peak: Stable steps applying a
 *              policy (matching, swaps, custom recordStream)
 *   GenPolicy  the steps that also profile in detail and plan
 *   choice     once a run: measuring the programs the optimizer's place
 *              may choose between (each a few unlimited steps and a lower
 *              bound), the difference of a one-step run with and without
 * Measured wall clock (medians over the steps of each kind, the best of
 * three runs: the machine is shared). The target is O(n log n) in the ops
 * n: the time per op may grow as log n, x log(n_max) / log(n_min) from
 * the smallest to the largest model; an O(n) part per op (a sorted array
 * shifted, every candidate at every sample) makes it grow as n. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chameleon/chameleon.h"
#include "lib/machine.h"

#define MAX_STEPS 64

typedef struct timing {
    uint64_t start, last;
    uint64_t ns[MAX_STEPS];
    cham_stage_t stage[MAX_STEPS];
    uint64_t ops, total_ns;
} timing_t;

static void on_step(const cham_run_step_t *s, void *user)
{
    timing_t *t = user;
    uint64_t now = bench_now_ns();
    t->ns[s->step] = now - t->last;
    t->stage[s->step] = s->stage;
    t->ops = s->info.ops;
    t->last = bench_now_ns();
}

/* Median wall ns of the steps that ended in `stage` (all when stage < 0). */
static double median_ms(const timing_t *t, uint64_t steps, int stage)
{
    uint64_t v[MAX_STEPS];
    size_t n = 0;
    for (uint64_t s = 1; s < steps; s++)          /* step 0 also builds the state */
        if (stage < 0 || (int)t->stage[s] == stage)
            v[n++] = t->ns[s];
    return n ? (double)bench_median_u64(v, n) * 1e-6 : 0;
}

static cham_run_result_t run(const cham_model_config_t *m, cham_strategy_t strategy,
                             uint64_t capacity, uint64_t steps, bool choose, timing_t *t)
{
    cham_run_config_t c = cham_run_config_default();
    c.plan_optimizer = choose;   /* else the steps' cost alone, not the choice's */
    c.model = *m;
    c.strategy = strategy;
    c.steps = steps;
    c.runtime.device.preset = "ascend-910b";
    c.runtime.device.capacity = capacity;
    c.on_step = on_step;
    c.user = t;
    cham_run_result_t r;
    t->last = t->start = bench_now_ns();
    if (cham_run(&c, &r) != CHAM_OK || r.status != CHAM_OK) {
        fprintf(stderr, "bench_simulate: %u layers, %s: %s\n", m->layers,
                cham_strategy_name(strategy), r.error);
        exit(1);
    }
    t->total_ns = bench_now_ns() - t->start;
    return r;
}

/* Medians of the best of RUNS runs (the least disturbed by other work). */
#define RUNS 3

typedef struct row {
    uint64_t ops;
    double unlimited, chameleon, genpolicy;   /* ms per step */
    double choice;                            /* ms per run */
    uint32_t programs;                        /* the choice measured */
} row_t;

static row_t measure(uint32_t layers)
{
    cham_model_config_t m;
    cham_model_preset("llama2-7b", &m);
    m.layers = layers;
    m.mbs = 4;
    m.dp = 8;
    m.zero = 3;
    row_t r = {0};
    for (int k = 0; k < RUNS; k++) {
        timing_t ideal_t = {0}, cham_t = {0}, with_t = {0}, without_t = {0};
        cham_run_result_t ideal = run(&m, CHAM_STRATEGY_IDEAL, 0, 6, false, &ideal_t);
        uint64_t half = ideal.peak_device_bytes / 2;
        run(&m, CHAM_STRATEGY_CHAMELEON, half, 16, false, &cham_t);
        /* One step: too short for the choice's trial runs, which are
         * steps of the kinds above. */
        cham_run_result_t chosen = run(&m, CHAM_STRATEGY_CHAMELEON, half, 1, true, &with_t);
        run(&m, CHAM_STRATEGY_CHAMELEON, half, 1, false, &without_t);
        double u = median_ms(&ideal_t, 6, -1);
        double c = median_ms(&cham_t, 16, CHAM_STAGE_STABLE);
        double g = median_ms(&cham_t, 16, CHAM_STAGE_GENPOLICY);
        double ch = ((double)with_t.total_ns - (double)without_t.total_ns) * 1e-6;
        r.ops = ideal_t.ops;
        r.programs = chosen.optimizer_programs;
        r.unlimited = k == 0 || u < r.unlimited ? u : r.unlimited;
        r.chameleon = k == 0 || c < r.chameleon ? c : r.chameleon;
        r.genpolicy = k == 0 || g < r.genpolicy ? g : r.genpolicy;
        r.choice = k == 0 || ch < r.choice ? ch : r.choice;
    }
    return r;
}

int main(int argc, char **argv)
{
    bench_output_by_line();
    (void)argv;
    if (argc > 1) {
        fprintf(stderr, "usage: bench_simulate\n");
        return 2;
    }
    char cpu[128];
    bench_cpu_model(cpu, sizeof cpu);
    printf("simulating Llama 2 7B steps (seq 4096, micro-batch 4, ZeRO-3 over 8, ascend-910b):\n"
           "wall clock per step on this machine (%s), median, best of %d runs\n\n", cpu, RUNS);
    printf("%7s %6s %13s %15s %15s %11s %10s\n", "layers", "ops", "unlimited ms",
           "chameleon ms", "GenPolicy ms", "choice ms", "programs");
    const uint32_t sizes[] = {8, 16, 32, 64, 128, 256, 512};
    const size_t n = sizeof sizes / sizeof sizes[0];
    row_t rows[sizeof sizes / sizeof sizes[0]];
    double at32 = 0;
    for (size_t i = 0; i < n; i++) {
        row_t *r = &rows[i];
        *r = measure(sizes[i]);
        printf("%7u %6llu %13.3f %15.3f %15.3f %11.1f %10u\n", sizes[i],
               (unsigned long long)r->ops, r->unlimited, r->chameleon, r->genpolicy, r->choice,
               r->programs);
        if (sizes[i] == 32)
            at32 = r->chameleon;
    }
    printf("\ntarget: a 32-layer step (chameleon, Stable) under 50 ms: %.3f ms, %s\n", at32,
           bench_verdict(at32 < 50));
    /* Time per op, largest model over smallest, against what O(n log n)
     * allows. The choice is per run and measures more programs for more
     * layers (one per parameter group, up to a grid): per program. */
    const row_t *lo = &rows[0], *hi = &rows[n - 1];
    double limit = log((double)hi->ops) / log((double)lo->ops);
    printf("target: O(n log n) in the ops n, time per op growing at most x%.2f "
           "(log %llu / log %llu) from %u to %u layers:\n", limit,
           (unsigned long long)hi->ops, (unsigned long long)lo->ops, sizes[0], sizes[n - 1]);
    struct { const char *what; double a, b; } g[] = {
        {"unlimited step", lo->unlimited, hi->unlimited},
        {"chameleon Stable step", lo->chameleon, hi->chameleon},
        {"GenPolicy step", lo->genpolicy, hi->genpolicy},
        {"choice, per program", lo->choice / (lo->programs ? lo->programs : 1),
         hi->choice / (hi->programs ? hi->programs : 1)},
    };
    for (size_t i = 0; i < sizeof g / sizeof g[0]; i++) {
        double growth = (g[i].b / (double)hi->ops) / (g[i].a / (double)lo->ops);
        printf("  %-22s x%.2f, %s\n", g[i].what, growth, bench_verdict(growth <= limit));
    }
    return 0;
}
