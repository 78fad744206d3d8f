/* The executor and the loop around it, on the scripted training workload
 * with real bytes, the hazard detector on, and every step's checksum
 * compared with an unconstrained run of the same script. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "chameleon/chameleon.h"
#include "support/train_script.h"

#define MiB (UINT64_C(1) << 20)
#define MAX_STEPS 64

/* What happened in each step, from the stats and the hooks. */
typedef struct run {
    int steps;
    uint64_t checksum[MAX_STEPS];
    cham_stage_t stage[MAX_STEPS];          /* after the step */
    cham_runtime_stats_t after[MAX_STEPS];  /* cumulative, after the step */
    uint64_t hazards;
    uint64_t alloc_oom_after_stable;
    /* Planned swap-outs per step: label and device address. */
    char out_label[MAX_STEPS][32][16];
    const void *out_ptr[MAX_STEPS][32];
    int n_out[MAX_STEPS];
    int log_lines;
    bool log_cache_hit;
} run_t;

static void on_swap(const cham_swap_event_t *e, void *user)
{
    run_t *r = user;
    if (!e->out || e->cause != CHAM_SWAP_PLANNED || e->step >= MAX_STEPS)
        return;
    int k = r->n_out[e->step]++;
    if (k < 32) {
        snprintf(r->out_label[e->step][k], 16, "%s", e->label);
        r->out_ptr[e->step][k] = e->device_ptr;
    }
}

static void on_log(const char *line, void *user)
{
    run_t *r = user;
    r->log_lines++;
    if (getenv("TEST_LOG"))
        fprintf(stderr, "log: %s\n", line);
    if (strstr(line, "seen before"))
        r->log_cache_hit = true;
}

static cham_config_t config(uint64_t capacity)
{
    cham_config_t c = cham_config_default();
    c.device.preset = "a100-80g";
    c.device.capacity = capacity;
    c.device.data = true;
    c.device.hazard_check = true;
    c.pinned_budget = 512 * MiB;
    return c;
}

/* Runs steps of the script; every step must succeed. */
static void run(const cham_config_t *cfg, const ts_config_t *tc, int steps, run_t *r)
{
    memset(r, 0, sizeof *r);
    cham_context_t *ctx = NULL;
    if (cham_context_new(cfg, &ctx) != CHAM_OK)
        fail_msg("context: %s", cham_context_last_error(NULL));
    cham_context_on_swap(ctx, on_swap, r);
    cham_context_set_log(ctx, on_log, r);
    ts_model_t *m = ts_model_new(ctx, tc);
    if (!m)
        fail_msg("model: %s", cham_context_last_error(ctx));
    r->steps = steps;
    for (int s = 0; s < steps; s++) {
        cham_status_t st = ts_step(m, s, &r->checksum[s]);
        if (st != CHAM_OK)
            fail_msg("step %d: %s", s, cham_context_last_error(ctx));
        r->stage[s] = cham_context_stage(ctx);
        cham_context_get_stats(ctx, &r->after[s]);
    }
    r->hazards = cham_sim_hazard_count(cham_context_device(ctx));
    ts_model_free(m);
    cham_context_free(ctx);
}

static uint64_t delta(const run_t *r, int s, size_t field)
{
    const uint64_t *now = (const uint64_t *)((const char *)&r->after[s] + field);
    const uint64_t *before = (const uint64_t *)((const char *)&r->after[s - 1] + field);
    return *now - *before;
}
#define DELTA(r, s, f) delta(r, s, offsetof(cham_runtime_stats_t, f))

static int first_stable(const run_t *r)
{
    for (int s = 0; s < r->steps; s++)
        if (r->stage[s] == CHAM_STAGE_STABLE)
            return s + 1;                 /* the first step run in Stable */
    fail_msg("the run never reached Stable");
    return -1;
}

static void assert_same_data(const run_t *a, const run_t *b)
{
    assert_int_equal(a->steps, b->steps);
    for (int s = 0; s < a->steps; s++)
        if (a->checksum[s] != b->checksum[s])
            fail_msg("step %d: checksum %016llx, unconstrained run %016llx", s,
                     (unsigned long long)a->checksum[s], (unsigned long long)b->checksum[s]);
}

static run_t ref, got;

/* ---- 1.5x, 2x and 4x the capacity, 50 steps -----------------------------------*/

/* 24 layers: at 4x the capacity the backward's working set (the gradient,
 * a layer's two saved tensors, its outputs and the next layer's prefetch)
 * still fits beside the planner's reserve. */
static ts_config_t deep(void)
{
    ts_config_t tc = ts_config_default();
    tc.layers = 24;
    return tc;
}

/* The unconstrained run of deep(), made once. */
static const run_t *reference(void)
{
    static bool made;
    if (!made) {
        ts_config_t tc = deep();
        cham_config_t big = config(1024 * MiB);
        run(&big, &tc, 50, &ref);
        assert_int_equal(ref.hazards, 0);
        assert_int_equal(ref.after[49].swaps_out, 0);
        made = true;
    }
    return &ref;
}

static void over_capacity(double factor)
{
    ts_config_t tc = deep();
    uint64_t need = ts_peak_bytes(&tc);
    cham_config_t small = config((uint64_t)((double)need / factor));
    run(&small, &tc, 50, &got);

    assert_same_data(&got, reference());
    assert_int_equal(got.hazards, 0);
    /* The first step already needs swaps: passive ones. */
    assert_true(got.after[0].passive_swaps_out > 0);
    /* Once the kept policy runs, nothing is left to chance. */
    int s0 = first_stable(&got);
    assert_true(s0 < 20);
    for (int s = s0; s < 50; s++) {
        if (DELTA(&got, s, passive_swaps_out) || DELTA(&got, s, on_demand_swaps_in))
            fail_msg("x%.1f step %d (Stable from %d): %llu passive, %llu on-demand swaps", factor,
                     s, s0, (unsigned long long)DELTA(&got, s, passive_swaps_out),
                     (unsigned long long)DELTA(&got, s, on_demand_swaps_in));
        assert_int_equal(DELTA(&got, s, items_missed), 0);
        assert_true(DELTA(&got, s, planned_swaps_out) > 0);
        assert_int_equal(DELTA(&got, s, planned_swaps_out), DELTA(&got, s, planned_swaps_in));
    }
    assert_int_equal(got.after[49].policy_failures, 0);
}

static void test_one_and_a_half_times(void **state)
{
    (void)state;
    over_capacity(1.5);
}

static void test_twice(void **state)
{
    (void)state;
    over_capacity(2.0);
}

static void test_four_times(void **state)
{
    (void)state;
    over_capacity(4.0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_one_and_a_half_times),
        cmocka_unit_test(test_twice),
        cmocka_unit_test(test_four_times),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
