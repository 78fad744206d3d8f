/* bench_simulate: how long one simulated training step of Llama 2 7B takes
 * on this machine (all ops through the runtime, virtual time, no data), and
 * how that grows with the layer count. Two settings per size:
 *   unlimited  the ideal run: dispatch, allocation, the sim's timeline and
 *              hazard detector; no executor
 *   chameleon  the device cut to half of the peak: Stable steps applying a
 *              policy (matching, swaps, custom recordStream)
 * Measured wall clock per step (median over the steps of each kind, the
 * best of three runs: the machine is shared); the GenPolicy steps, which
 * also profile in detail and plan, are shown apart. The growth of the time
 * per op from the smallest to the largest model says whether a step's time
 * is linear in the layers: it stays near x1 when every part of a step
 * costs O(1) or O(log n) per op, and climbs with any O(n) part (as the
 * hazard detector's sorted array was: docs/device.md). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chameleon/chameleon.h"
#include "lib/machine.h"

#define MAX_STEPS 64

typedef struct timing {
    uint64_t last;
    uint64_t ns[MAX_STEPS];
    cham_stage_t stage[MAX_STEPS];
    uint64_t ops;
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
                             uint64_t capacity, uint64_t steps, timing_t *t)
{
    cham_run_config_t c = cham_run_config_default();
    c.plan_optimizer = false;    /* the per-op cost of the run, not of choosing its program */
    c.model = *m;
    c.strategy = strategy;
    c.steps = steps;
    c.runtime.device.preset = "ascend-910b";
    c.runtime.device.capacity = capacity;
    c.on_step = on_step;
    c.user = t;
    cham_run_result_t r;
    t->last = bench_now_ns();
    if (cham_run(&c, &r) != CHAM_OK || r.status != CHAM_OK) {
        fprintf(stderr, "bench_simulate: %u layers, %s: %s\n", m->layers,
                cham_strategy_name(strategy), r.error);
        exit(1);
    }
    return r;
}

/* Medians of the best of RUNS runs (the least disturbed by other work). */
#define RUNS 3

typedef struct row {
    uint64_t ops;
    double unlimited, chameleon, genpolicy;   /* ms per step */
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
        timing_t ideal_t = {0}, cham_t = {0};
        cham_run_result_t ideal = run(&m, CHAM_STRATEGY_IDEAL, 0, 6, &ideal_t);
        run(&m, CHAM_STRATEGY_CHAMELEON, ideal.peak_device_bytes / 2, 16, &cham_t);
        double u = median_ms(&ideal_t, 6, -1);
        double c = median_ms(&cham_t, 16, CHAM_STAGE_STABLE);
        double g = median_ms(&cham_t, 16, CHAM_STAGE_GENPOLICY);
        r.ops = ideal_t.ops;
        r.unlimited = k == 0 || u < r.unlimited ? u : r.unlimited;
        r.chameleon = k == 0 || c < r.chameleon ? c : r.chameleon;
        r.genpolicy = k == 0 || g < r.genpolicy ? g : r.genpolicy;
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
    printf("%7s %6s %13s %15s %15s %11s  %s\n", "layers", "ops", "unlimited ms", "chameleon ms",
           "GenPolicy ms", "us per op", "growth for x2 layers (unlimited, chameleon)");
    const uint32_t sizes[] = {8, 16, 32, 64, 128, 256, 512};
    const size_t n = sizeof sizes / sizeof sizes[0];
    row_t rows[sizeof sizes / sizeof sizes[0]];
    double at32 = 0;
    for (size_t i = 0; i < n; i++) {
        row_t *r = &rows[i];
        *r = measure(sizes[i]);
        printf("%7u %6llu %13.3f %15.3f %15.3f %11.2f", sizes[i], (unsigned long long)r->ops,
               r->unlimited, r->chameleon, r->genpolicy, r->chameleon * 1e3 / (double)r->ops);
        if (i > 0)
            printf("  x%.2f, x%.2f", r->unlimited / rows[i - 1].unlimited,
                   r->chameleon / rows[i - 1].chameleon);
        printf("\n");
        if (sizes[i] == 32)
            at32 = r->chameleon;
    }
    /* Time per op, largest model over smallest: x1 is linear in layers; a
     * log factor (trees of n entries) allows some growth over 64x layers. */
    const double limit = 1.5;
    double per_op[2][2];
    for (int e = 0; e < 2; e++) {
        const row_t *r = e ? &rows[n - 1] : &rows[0];
        per_op[e][0] = r->unlimited / (double)r->ops;
        per_op[e][1] = r->chameleon / (double)r->ops;
    }
    double gu = per_op[1][0] / per_op[0][0], gc = per_op[1][1] / per_op[0][1];
    printf("\ntarget: a 32-layer step (chameleon, Stable) under 50 ms: %.3f ms, %s\n", at32,
           bench_verdict(at32 < 50));
    printf("target: time linear in layers, time per op growing at most x%.1f from %u to %u "
           "layers:\n  unlimited x%.2f, %s; chameleon x%.2f, %s\n", limit, sizes[0],
           sizes[n - 1], gu, bench_verdict(gu <= limit), gc, bench_verdict(gc <= limit));
    return 0;
}
