/* Every strategy of cham_run over the LLM workload generator: each
 * runs a small job to completion with no hazards, or fails the way it
 * should (native out of memory over capacity, capuchin at the first step
 * whose op sequence changed); and Chameleon trains Llama 2 7B at twice the
 * device's memory for 200 steps with validation and loss-scale skips. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "support/cases.h"

#include "chameleon/chameleon.h"

#define GiB (UINT64_C(1) << 30)

/* Llama 2 7B's shape, 4 layers, micro-batches of 4 sequences of 2048, on
 * one device of a ZeRO-3 group of 8: activations fill the memory. */
static cham_model_config_t small_model(void)
{
    cham_model_config_t m;
    assert_int_equal(cham_model_preset("llama2-7b", &m), CHAM_OK);
    m.layers = 4;
    m.seq = 2048;
    m.mbs = 4;
    m.dp = 8;
    m.zero = 3;
    return m;
}

static cham_run_result_t run(const cham_model_config_t *m, cham_strategy_t strategy,
                             uint64_t capacity, uint64_t steps)
{
    cham_run_config_t c = cham_run_config_default();
    c.model = *m;
    c.strategy = strategy;
    c.steps = steps;
    c.runtime.device.preset = "a100-80g";
    c.runtime.device.capacity = capacity;
    cham_run_result_t r;
    assert_int_equal(cham_run(&c, &r), CHAM_OK);
    return r;
}

static void expect_ok(const cham_run_result_t *r, const char *what)
{
    if (r->status != CHAM_OK || r->hazards != 0)
        fail_msg("%s: %s after %llu steps, %llu hazards: %s", what,
                 cham_status_string(r->status), (unsigned long long)r->steps,
                 (unsigned long long)r->hazards, r->error);
}

/* Each name reads back as its strategy, and each strategy sets the config
 * as docs/baselines.md's table says. */
static void test_strategy_names_and_settings(void **state)
{
    (void)state;
    for (int k = 0; k < CHAM_STRATEGY_COUNT; k++) {
        cham_strategy_t s;
        assert_int_equal(cham_strategy_parse(cham_strategy_name((cham_strategy_t)k), &s), CHAM_OK);
        assert_int_equal(s, k);
        cham_config_t c = cham_config_default();
        c.device.capacity = 1u << 30;
        assert_int_equal(cham_strategy_apply(s, &c), CHAM_OK);
        bool managed = s == CHAM_STRATEGY_CHAMELEON || s == CHAM_STRATEGY_CAPUCHIN ||
                       s == CHAM_STRATEGY_VDNN || s == CHAM_STRATEGY_CHAMELEON_SWAP ||
                       s == CHAM_STRATEGY_SWAPADVISOR || s == CHAM_STRATEGY_HYPEROFFLOAD;
        assert_int_equal(c.executor, managed);
        assert_int_equal(c.recompute, s == CHAM_STRATEGY_CHAMELEON);
        assert_int_equal(c.oom_handling, managed);
        cham_planner_kind_t want = s == CHAM_STRATEGY_CAPUCHIN       ? CHAM_PLANNER_CAPUCHIN
                                   : s == CHAM_STRATEGY_VDNN         ? CHAM_PLANNER_VDNN
                                   : s == CHAM_STRATEGY_SWAPADVISOR  ? CHAM_PLANNER_SWAPADVISOR
                                   : s == CHAM_STRATEGY_HYPEROFFLOAD ? CHAM_PLANNER_HYPEROFFLOAD
                                                                     : CHAM_PLANNER_CHAMELEON;
        assert_int_equal(c.planner, want);
        assert_int_equal(c.device.capacity, s == CHAM_STRATEGY_IDEAL ? 64ull << 40 : 1u << 30);
        assert_int_equal(cham_config_validate(&c, NULL, 0), CHAM_OK);
    }
    cham_strategy_t s = CHAM_STRATEGY_VDNN;
    assert_int_equal(cham_strategy_parse("policy", &s), CHAM_ERR_INVALID_ARG);
    assert_int_equal(cham_strategy_parse(NULL, &s), CHAM_ERR_INVALID_ARG);
    assert_int_equal(s, CHAM_STRATEGY_VDNN);
    cham_config_t c = cham_config_default();
    assert_int_equal(cham_strategy_apply(CHAM_STRATEGY_COUNT, &c), CHAM_ERR_INVALID_ARG);
    assert_string_equal(cham_strategy_name(CHAM_STRATEGY_COUNT), "?");
}

/* A capacity holding `percent` of the unconstrained peak. */
static uint64_t tight(const cham_model_config_t *m, uint64_t percent)
{
    cham_run_result_t ideal = run(m, CHAM_STRATEGY_IDEAL, 0, 3);
    expect_ok(&ideal, "ideal");
    return ideal.peak_device_bytes / 100 * percent;
}

static void test_every_strategy_runs(void **state)
{
    (void)state;
    cham_model_config_t m = small_model();
    uint64_t cap = tight(&m, 50);
    cham_run_result_t ideal = run(&m, CHAM_STRATEGY_IDEAL, 0, 14);
    expect_ok(&ideal, "ideal");

    cham_run_result_t native = run(&m, CHAM_STRATEGY_NATIVE, cap, 14);
    assert_int_equal(native.status, CHAM_ERR_OUT_OF_MEMORY);
    assert_true(native.oom);
    assert_int_equal(native.fail_step, 0);
    assert_non_null(strstr(native.error, "out of device memory"));
    cham_run_result_t roomy = run(&m, CHAM_STRATEGY_NATIVE, 0, 14);
    expect_ok(&roomy, "native with the whole device");
    assert_true(roomy.step_time_s == ideal.step_time_s);

    const cham_strategy_t managed[] = {CHAM_STRATEGY_RECOMPUTE, CHAM_STRATEGY_CHAMELEON,
                                         CHAM_STRATEGY_CAPUCHIN, CHAM_STRATEGY_VDNN};
    for (size_t i = 0; i < sizeof managed / sizeof managed[0]; i++) {
        /* Neither recomputation nor vDNN swaps passively, so the
         * allocator's fragmentation (gigabyte tensors in a few gigabytes)
         * needs room: they get 60%. */
        bool strict = managed[i] == CHAM_STRATEGY_RECOMPUTE || managed[i] == CHAM_STRATEGY_VDNN;
        uint64_t c = strict ? cap / 5 * 6 : cap;
        cham_run_result_t r = run(&m, managed[i], c, 14);
        expect_ok(&r, cham_strategy_name(managed[i]));
        assert_int_equal(r.steps, 14);
        assert_true(r.peak_device_bytes <= c);
        assert_true(r.step_time_s > ideal.step_time_s);      /* memory costs time */
        if (managed[i] != CHAM_STRATEGY_RECOMPUTE)
            assert_true(r.swapped_bytes_per_step > 0);
        else
            assert_true(r.swapped_bytes_per_step == 0);
        /* Chameleon tries several policies in GenPolicy; the baselines make one. */
        assert_int_equal(r.policy_regenerations > 1, managed[i] == CHAM_STRATEGY_CHAMELEON);
    }
    /* vDNN at half: swapping every activation is not enough, and it has no
     * passive swaps to fall back on. */
    cham_run_result_t v = run(&m, CHAM_STRATEGY_VDNN, cap, 14);
    assert_int_equal(v.status, CHAM_ERR_OUT_OF_MEMORY);
    assert_int_equal(v.hazards, 0);
}

static void test_capuchin_fails_on_a_changed_sequence(void **state)
{
    (void)state;
    cham_model_config_t m = small_model();
    uint64_t cap = tight(&m, 50);
    m.validate_every = 8;                /* step 8 opens with an evaluation */
    cham_run_result_t cap_r = run(&m, CHAM_STRATEGY_CAPUCHIN, cap, 12);
    assert_int_equal(cap_r.status, CHAM_ERR_POLICY_MISMATCH);
    assert_int_equal(cap_r.fail_step, 8);
    assert_int_equal(cap_r.steps, 8);
    assert_non_null(strstr(cap_r.error, "the op sequence changed"));
    assert_int_equal(cap_r.hazards, 0);

    cham_run_result_t cham = run(&m, CHAM_STRATEGY_CHAMELEON, cap, 12);
    expect_ok(&cham, "chameleon with a validation step");

    /* Skipped updates only shorten the step's end: Capuchin's positions hold. */
    m.validate_every = 0;
    m.overflow_every = 4;
    cap_r = run(&m, CHAM_STRATEGY_CAPUCHIN, cap, 12);
    expect_ok(&cap_r, "capuchin with loss-scale skips");
}

/* Llama 2 7B (32 layers) on one device of a ZeRO-3 data-parallel group of
 * 8, micro-batches of 4 sequences of 4096: the device gets half of what
 * the job needs. 200 steps, validation every 50, an overflow every 20. */
static void test_llama2_7b_at_twice_capacity(void **state)
{
    (void)state;
    cham_model_config_t m;
    assert_int_equal(cham_model_preset("llama2-7b", &m), CHAM_OK);
    m.mbs = 4;
    m.dp = 8;
    m.zero = 3;
    cham_run_config_t c = cham_run_config_default();
    c.model = m;
    c.strategy = CHAM_STRATEGY_IDEAL;
    c.steps = 2;
    c.runtime.device.preset = "ascend-910b";
    cham_run_result_t ideal;
    assert_int_equal(cham_run(&c, &ideal), CHAM_OK);
    expect_ok(&ideal, "ideal");

    c.model.validate_every = 50;
    c.model.overflow_every = 20;
    c.strategy = CHAM_STRATEGY_CHAMELEON;
    c.steps = 200;
    c.runtime.device.capacity = ideal.peak_device_bytes / 2;
    cham_run_result_t r;
    assert_int_equal(cham_run(&c, &r), CHAM_OK);
    expect_ok(&r, "chameleon, llama2-7b at twice the capacity");
    assert_int_equal(r.steps, 200);
    assert_true(r.peak_device_bytes <= c.runtime.device.capacity);
    assert_true(r.policy_regenerations > 0);
    printf("llama2-7b at %.1f GiB (half of %.1f GiB): %.3f s a step vs %.3f s ideal, "
           "%.1f GiB swapped a step, %llu stage changes, %llu on-demand swap-ins\n",
           (double)c.runtime.device.capacity / GiB, (double)ideal.peak_device_bytes / GiB,
           r.step_time_s, ideal.step_time_s, r.swapped_bytes_per_step / GiB,
           (unsigned long long)r.stage_changes, (unsigned long long)r.on_demand_swapins);
}

static void test_bad_run_config(void **state)
{
    (void)state;
    cham_run_config_t c = cham_run_config_default();
    c.model = small_model();
    c.model.heads = 7;
    cham_run_result_t r;
    assert_int_equal(cham_run(&c, &r), CHAM_ERR_INVALID_ARG);
    assert_non_null(strstr(r.error, "hidden (4096) must be a multiple of heads (7)"));
    c.model = small_model();
    c.runtime.device.preset = "nope";
    assert_int_equal(cham_run(&c, &r), CHAM_ERR_INVALID_ARG);
    assert_non_null(strstr(r.error, "nope"));
    cham_strategy_t p;
    assert_int_equal(cham_strategy_parse("vdnn", &p), CHAM_OK);
    assert_int_equal(p, CHAM_STRATEGY_VDNN);
    assert_int_equal(cham_strategy_parse("magic", &p), CHAM_ERR_INVALID_ARG);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_strategy_names_and_settings),
        cmocka_unit_test(test_every_strategy_runs),
        cmocka_unit_test(test_capuchin_fails_on_a_changed_sequence),
        cmocka_unit_test(test_llama2_7b_at_twice_capacity),
        cmocka_unit_test(test_bad_run_config),
    };
    /* CTest runs one case a test (tests/CMakeLists.txt, CHAM_SPLIT_TESTS). */
    return test_run_cases(tests, argc, argv, NULL, NULL);
}
