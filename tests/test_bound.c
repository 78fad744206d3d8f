/* The lower bound on the step time (cham_plan_bound): a case worked by
 * hand, the infeasible case, and never above a policy's simulated step
 * time over a seeded sweep of models, capacities and strategies. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "support/profile_build.h"
#include "support/rng.h"

#include "chameleon/chameleon.h"
#include "chameleon/policy.h"
#include "chameleon/workload.h"
#include "profile/profile-impl.h"

#define MiB (UINT64_C(1) << 20)
#define GiB (UINT64_C(1) << 30)
#define SEC 1e9

/* test_policy_recompute's profile: 8 ops of 1 s (costs given), A (400 MiB,
 * made by op 0 from X, recomputable at 0.1 s) idle from op 2 to op 6,
 * 100 MiB too many at samples 5 and 6 (capacity 800 MiB). */
static const char PH[] = "FFFFBBBB";
static const uint64_t MEM[] = {100, 500, 500, 500, 500, 900, 900, 500,
                               500, 500, 500, 500, 500, 100, 100, 100};
static const use_spec_t USES[] = {
    {0, 2, 1, false}, {0, 1, 400, true}, {1, 1, 400, false}, {6, 1, 400, false},
    {7, 2, 1, false},
};
/* The same with A made as two outputs of 200 MiB by op 0. */
static const use_spec_t USES_SPLIT[] = {
    {0, 2, 1, false},   {0, 1, 200, true},  {0, 3, 200, true},  {1, 1, 200, false},
    {1, 3, 200, false}, {6, 1, 200, false}, {6, 3, 200, false}, {7, 2, 1, false},
};

static cham_profile_t *profile_of(const use_spec_t *uses, size_t n)
{
    cham_profile_t *p = test_build_profile(PH, MEM, uses, n);
    for (size_t k = 0; k < 8; k++) {
        p->ops[k].has_cost = true;
        p->ops[k].cost_ns = SEC;
    }
    p->ops[0].recomputable = true;
    p->ops[0].cost_ns = 0.1 * SEC;      /* op 0 itself is cheap */
    return p;
}

static cham_profile_t *profile(void)
{
    return profile_of(USES, sizeof USES / sizeof USES[0]);
}

static cham_planner_config_t config(uint64_t cap_mib, double h2d_mib)
{
    cham_planner_config_t c = cham_planner_config_default();
    c.capacity = cap_mib * MiB;
    c.h2d_bandwidth = h2d_mib * (double)MiB;
    c.d2h_bandwidth = 1024.0 * MiB;
    return c;
}

/* Ops cost 7.1 s in all. At samples 5 and 6: 2.1 s of ops before (ops
 * 0-2), 5 s after, E = 100 MiB; with h2d 10 MiB/s, swapping S MiB back
 * takes S/10 s, recomputing R MiB of A costs 0.25 ms/MiB:
 *   T(R) = max(7.1 + 0.00025 R, (100-R)/1024 + 5 + 0.00025 R,
 *              2.1 + (100-R)/10).
 * The first and last cross at 0.10025 R = 5, R = 49.88 MiB: T = 7.11247 s.
 * Swaps only: R = 0, T = max(7.1, 5.1, 12.1) = 12.1 s. */
static void test_worked_case(void **state)
{
    (void)state;
    cham_profile_t *p = profile();
    cham_planner_config_t c = config(800, 10);
    cham_step_bound_t b;
    char err[300];
    assert_int_equal(cham_plan_bound(p, &c, &b, err, sizeof err), CHAM_OK);
    assert_true(b.feasible);
    assert_int_equal(b.compute_ns, (uint64_t)(7.1 * SEC));
    double r = 5.0 / 0.10025;
    double want = 7.1 + 0.00025 * r;
    assert_true(fabs((double)b.bound_ns / SEC - want) < 1e-6);
    assert_true(b.sample == 5 || b.sample == 6);
    assert_int_equal(b.excess_bytes, 100 * MiB);
    /* The mix that reaches it. */
    assert_true(fabs((double)b.recompute_bytes / MiB - r) < 1e-3);
    assert_true(fabs((double)b.swap_bytes / MiB - (100 - r)) < 1e-3);

    /* Two outputs of one op: one re-run makes both, 0.1 s for 400 MiB. */
    cham_profile_t *split = profile_of(USES_SPLIT, sizeof USES_SPLIT / sizeof USES_SPLIT[0]);
    cham_step_bound_t bs;
    assert_int_equal(cham_plan_bound(split, &c, &bs, err, sizeof err), CHAM_OK);
    assert_true(fabs((double)bs.bound_ns / SEC - want) < 1e-6);
    cham_profile_free(split);

    c.recompute = false;
    assert_int_equal(cham_plan_bound(p, &c, &b, err, sizeof err), CHAM_OK);
    assert_true(fabs((double)b.bound_ns / SEC - 12.1) < 1e-6);
    assert_int_equal(b.recompute_bytes, 0);
    assert_int_equal(b.swap_bytes, 100 * MiB);

    /* A fast link: nothing but the ops themselves. */
    c = config(800, 1024);
    assert_int_equal(cham_plan_bound(p, &c, &b, err, sizeof err), CHAM_OK);
    assert_int_equal(b.bound_ns, (uint64_t)(7.1 * SEC));
    cham_profile_free(p);
}

/* The worked case's ops with collectives: op 1 starts one of 3 s the
 * compute stream does not wait for (on the comm stream from 0.1 to 3.1 s),
 * op 2 one of 0.5 s it waits for, queued behind it (3.1 to 3.6 s): op 2
 * ends at 3.6 s, not 2.1, and no step is faster than 8.6 s, whatever the
 * memory. A collective nothing waits for costs nothing. */
static void test_collectives(void **state)
{
    (void)state;
    cham_profile_t *p = profile();
    p->ops[1].comm_ns = 3 * SEC;
    p->ops[2].comm_ns = 0.5 * SEC;
    p->ops[2].comm_waited = true;
    cham_planner_config_t c = config(800, 1024);
    cham_step_bound_t b;
    char err[300];
    assert_int_equal(cham_plan_bound(p, &c, &b, err, sizeof err), CHAM_OK);
    assert_int_equal(b.compute_ns, (uint64_t)(8.6 * SEC));
    assert_int_equal(b.bound_ns, (uint64_t)(8.6 * SEC));
    /* With the slow link the memory's terms still bind: 12.1 s. */
    c = config(800, 10);
    c.recompute = false;
    assert_int_equal(cham_plan_bound(p, &c, &b, err, sizeof err), CHAM_OK);
    assert_true(fabs((double)b.bound_ns / SEC - 12.1) < 1e-6);
    assert_int_equal(b.recompute_bytes, 0);
    assert_int_equal(b.swap_bytes, 100 * MiB);
    p->ops[2].comm_waited = false;
    c = config(800, 1024);
    assert_int_equal(cham_plan_bound(p, &c, &b, err, sizeof err), CHAM_OK);
    assert_int_equal(b.bound_ns, (uint64_t)(7.1 * SEC));
    cham_profile_free(p);
}

/* The worked case on a device that adds 10 ms to every kernel (the
 * profile's kernel_overhead_ns): every op of some cost and every re-run
 * costs that more. Ops 7.18 s, before the samples 2.13 s, after 5.05 s, A's re-run
 * 0.11 s for 400 MiB (0.000275 s/MiB):
 *   T(R) = max(7.18 + 0.000275 R, (100-R)/1024 + 5.05 + 0.000275 R,
 *              2.13 + (100-R)/10),
 * the first and last cross at 0.100275 R = 4.95: T = 7.193575 s. */
static void test_kernel_overhead(void **state)
{
    (void)state;
    cham_profile_t *p = profile();
    p->kernel_overhead_ns = (uint64_t)(0.01 * SEC);
    cham_planner_config_t c = config(800, 10);
    cham_step_bound_t b;
    char err[300];
    assert_int_equal(cham_plan_bound(p, &c, &b, err, sizeof err), CHAM_OK);
    assert_int_equal(b.compute_ns, (uint64_t)(7.18 * SEC));
    double r = 4.95 / 0.100275;
    assert_true(fabs((double)b.bound_ns / SEC - (7.18 + 0.000275 * r)) < 1e-6);
    c = config(800, 1024);
    assert_int_equal(cham_plan_bound(p, &c, &b, err, sizeof err), CHAM_OK);
    assert_int_equal(b.bound_ns, (uint64_t)(7.18 * SEC));
    /* An op of no cost launched no kernel (a copy or a collective on a
     * stream of its own): nothing of it on the compute stream. Op 3 so:
     * 7.18 s less its 1.01 s. */
    p->ops[3].cost_ns = 0;
    assert_int_equal(cham_plan_bound(p, &c, &b, err, sizeof err), CHAM_OK);
    assert_int_equal(b.compute_ns, (uint64_t)(6.17 * SEC));
    cham_profile_free(p);
}

/* At 300 MiB, sample 1 (op 0's end) has 200 MiB too many and no tensor
 * the profile shows is between two uses there: no policy fits. */
static void test_infeasible(void **state)
{
    (void)state;
    cham_profile_t *p = profile();
    cham_planner_config_t c = config(300, 1024);
    cham_step_bound_t b;
    char err[300];
    assert_int_equal(cham_plan_bound(p, &c, &b, err, sizeof err), CHAM_OK);
    assert_false(b.feasible);
    assert_int_equal(b.bound_ns, UINT64_MAX);
    cham_profile_free(p);
}

/* A profile of the op kinds `kinds`, one op a second, whose storage 1 is
 * model state. */
static cham_profile_t *state_profile(const char *kinds, const uint64_t *mem,
                                     const use_spec_t *uses, size_t n_uses)
{
    cham_profile_t *p = test_build_profile(kinds, mem, uses, n_uses);
    test_mark_persistent(p, 1);
    for (size_t k = 0; k < strlen(kinds); k++) {
        p->ops[k].has_cost = true;
        p->ops[k].cost_ns = SEC;
    }
    return p;
}

/* Model state X (400 MiB) used once a step, at op `use` of four ops of
 * 1 s, which updates it where `written`; op `peak` begins 100 MiB over
 * the capacity of 800 MiB. */
static cham_profile_t *wrap_profile(int use, int peak, bool written)
{
    uint64_t mem[8];
    for (int i = 0; i < 8; i++)
        mem[i] = i == 2 * peak ? 900 : 500;
    const use_spec_t uses[] = {{use, 1, 400, written}};
    return state_profile("FFBO", mem, uses, 1);
}

static double wrap_bound(cham_profile_t *p, double d2h_mib, double h2d_mib)
{
    cham_planner_config_t c = config(800, h2d_mib);
    c.d2h_bandwidth = d2h_mib * (double)MiB;
    cham_step_bound_t b;
    char err[300];
    assert_int_equal(cham_plan_bound(p, &c, &b, err, sizeof err), CHAM_OK);
    assert_true(b.feasible);
    return (double)b.bound_ns / SEC;
}

/* Copies of model state may cross the step's end. X updated at op 2 and
 * gone at op 0 leaves during op 3 of the step before, and comes back
 * during op 1: at 100 MiB/s the step is the ops' 4 s (counting only the
 * ops after op 0 as the copy's time would say 5 s, which a policy beats).
 * At 50 MiB/s out it takes 2 s, one more than op 3. Updated at op 1 and
 * gone at op 3, it comes back during op 3 and op 0 of the step after. */
static void test_copies_across_the_steps_end(void **state)
{
    (void)state;
    cham_profile_t *p = wrap_profile(2, 0, true);
    assert_true(fabs(wrap_bound(p, 100, 100) - 4) < 1e-6);
    assert_true(fabs(wrap_bound(p, 50, 100) - 5) < 1e-6);
    cham_profile_free(p);
    p = wrap_profile(1, 3, true);
    assert_true(fabs(wrap_bound(p, 100, 50) - 4) < 1e-6);
    assert_true(fabs(wrap_bound(p, 100, 25) - 6) < 1e-6);
    cham_profile_free(p);
}

/* X only read (frozen, or read in a step that does not update it): the
 * pinned copy it came back from may still hold its bytes when it leaves
 * again, so leaving copies nothing and at 50 MiB/s out the step is the
 * ops' 4 s; the copy back is still counted, 6 s at 25 MiB/s in. */
static void test_unwritten_state_leaves_without_a_copy(void **state)
{
    (void)state;
    cham_profile_t *p = wrap_profile(2, 0, false);
    assert_true(fabs(wrap_bound(p, 50, 100) - 4) < 1e-6);
    assert_true(fabs(wrap_bound(p, 1, 100) - 4) < 1e-6);
    cham_profile_free(p);
    p = wrap_profile(1, 3, false);
    assert_true(fabs(wrap_bound(p, 100, 25) - 6) < 1e-6);
    cham_profile_free(p);
}

/* X (400 MiB) read at ops 1 and 3 and updated at op 4 (a weight: the
 * forward, the backward, the optimizer), five ops of 1 s; op 2 begins
 * 100 MiB over the capacity of 800 MiB. Away there, X may leave without a
 * copy only if the copy made in its gap before op 1 still holds its
 * bytes, and that copy crossed the link after the update in the step
 * before: within ops 0 and 1. At 25 MiB/s out the 100 MiB take 4 s, so
 * the step is 7 s (counting them free said the ops' 5 s, which no policy
 * reaches); at 50 MiB/s they fit: 5 s. Never updated, X leaves free. */
static cham_profile_t *read_twice(bool written)
{
    uint64_t mem[10];
    for (int i = 0; i < 10; i++)
        mem[i] = i == 4 ? 900 : 500;
    const use_spec_t uses[] = {{1, 1, 400, false}, {3, 1, 400, false}, {4, 1, 400, written}};
    return state_profile("FFBBO", mem, uses, 3);
}

static void test_written_state_leaves_after_its_write(void **state)
{
    (void)state;
    cham_profile_t *p = read_twice(true);
    assert_true(fabs(wrap_bound(p, 25, 100) - 7) < 1e-6);
    assert_true(fabs(wrap_bound(p, 50, 100) - 5) < 1e-6);
    cham_profile_free(p);
    p = read_twice(false);
    assert_true(fabs(wrap_bound(p, 1, 100) - 5) < 1e-6);
    cham_profile_free(p);
}

/* Bytes freed after their last use are not in the curve: they cover no
 * excess, least of all as bytes that come back without a copy. Five ops of
 * 1 s; X (600 MiB, model state) used at op 4; Y (400 MiB) made by op 0
 * (writing it whole) and last used at op 1; Z (500 MiB) made by op 2 and
 * last used at op 3. The end of op 2 and the start of op 3 are 100 MiB
 * over 1000 MiB, with X, Z and nothing else there: 100 MiB of X are away
 * and come back after 3 s of ops, at 25 MiB/s, 7 s. Counting Y there as
 * away and free to come back said 5 s, the ops alone. */
static void test_freed_bytes_cover_no_excess(void **state)
{
    (void)state;
    static const uint64_t mem[] = {600, 1000, 1000, 600, 600, 1100, 1100, 600, 600, 600};
    static const use_spec_t uses[] = {
        {0, 2, 400, true}, {1, 2, 400, false}, {2, 3, 500, true}, {3, 3, 500, false},
        {4, 1, 600, false},
    };
    cham_profile_t *p = test_build_profile("FFBBO", mem, uses, sizeof uses / sizeof uses[0]);
    test_mark_persistent(p, 1);
    test_mark_overwrites(p, 2);
    test_mark_overwrites(p, 3);
    for (size_t k = 0; k < 5; k++) {
        p->ops[k].has_cost = true;
        p->ops[k].cost_ns = SEC;
    }
    cham_planner_config_t c = config(1000, 25);
    cham_step_bound_t b;
    char err[300];
    assert_int_equal(cham_plan_bound(p, &c, &b, err, sizeof err), CHAM_OK);
    assert_true(b.feasible);
    assert_true(fabs((double)b.bound_ns / SEC - 7) < 1e-6);
    assert_true(b.sample == 5 || b.sample == 6);

    /* X used at op 3: at its start only Y, gone, is not in use. */
    cham_profile_free(p);
    static const use_spec_t x_at_3[] = {
        {0, 2, 400, true}, {1, 2, 400, false}, {2, 3, 500, true}, {3, 3, 500, false},
        {3, 1, 600, false},
    };
    p = test_build_profile("FFBBO", mem, x_at_3, sizeof x_at_3 / sizeof x_at_3[0]);
    test_mark_persistent(p, 1);
    test_mark_overwrites(p, 2);
    test_mark_overwrites(p, 3);
    assert_int_equal(cham_plan_bound(p, &c, &b, err, sizeof err), CHAM_OK);
    assert_false(b.feasible);
    cham_profile_free(p);
}

/* The re-runs at one sample come before the copies back at a later one.
 * Six ops of 1 s; A (400 MiB) made by op 0 (re-runnable, 1 s) and used at
 * ops 1 and 3; C (200 MiB) made and used by op 2; D (450 MiB) by op 4; Y
 * (300 MiB, model state) used at op 5. At the end of op 2, 200 MiB over
 * 700; at the end of op 4 (after A's last use) 50 MiB over, of Y, which
 * come back at 20 MiB/s after 5 s of ops: 7.5 s. At op 2, re-running R
 * MiB of A costs R/400 s and the rest come back after 3 s of ops:
 * T >= 13 - R/20 and T >= 6 + R/400, alone 6.33 s at R = 133.3. But the
 * re-runs also run before the end of op 4: T >= 7.5 + R/400, so
 * R = 5.5 / 0.0525 = 104.76 MiB and T = 7.7619 s. */
static void test_reruns_before_the_tails_copies(void **state)
{
    (void)state;
    static const uint64_t mem[] = {300, 700, 700, 700, 700, 900, 700, 300, 300, 750, 300, 300};
    static const use_spec_t uses[] = {
        {0, 1, 400, true}, {1, 1, 400, false}, {2, 2, 200, true},
        {3, 1, 400, false}, {4, 3, 450, true}, {5, 4, 300, false},
    };
    cham_profile_t *p = test_build_profile("FFFBBO", mem, uses, sizeof uses / sizeof uses[0]);
    test_mark_persistent(p, 4);
    for (size_t k = 0; k < 6; k++) {
        p->ops[k].has_cost = true;
        p->ops[k].cost_ns = SEC;
    }
    p->ops[0].recomputable = true;
    cham_planner_config_t c = config(700, 20);
    cham_step_bound_t b;
    char err[300];
    assert_int_equal(cham_plan_bound(p, &c, &b, err, sizeof err), CHAM_OK);
    assert_true(b.feasible);
    double r = 5.5 / 0.0525;
    if (fabs((double)b.bound_ns / SEC - (7.5 + r / 400)) > 1e-6)
        fail_msg("bound %.6f s, want %.6f s", (double)b.bound_ns / SEC, 7.5 + r / 400);
    assert_int_equal(b.sample, 5);
    assert_true(fabs((double)b.recompute_bytes / MiB - r) < 1e-3);
    cham_profile_free(p);
}

/* Seeded sweep: small Llama and GPT-2 shapes, capacities from the
 * unconstrained peak down, each planner strategy: every run's median
 * step time is at least the bound its own last profile gives; so is the
 * unconstrained run's, whose gathers the bound counts. */
static void test_never_above_a_policy(void **state)
{
    (void)state;
    static const cham_strategy_t strategies[] = {
        CHAM_STRATEGY_CHAMELEON, CHAM_STRATEGY_CHAMELEON_SWAP, CHAM_STRATEGY_VDNN,
        CHAM_STRATEGY_CAPUCHIN};
    static const char *const models[] = {"llama2-7b", "gpt2-1.5b"};
    test_rng_t rng = {17};
    int checked = 0;
    for (size_t mi = 0; mi < 2; mi++) {
        cham_model_config_t m;
        assert_int_equal(cham_model_preset(models[mi], &m), CHAM_OK);
        m.layers = 4;
        m.seq = 2048;
        m.mbs = 2 + (uint32_t)test_rng_below(&rng, 3);
        m.dp = 8;
        m.zero = 3;           /* the state is small: activations decide */
        cham_run_config_t c = cham_run_config_default();
        c.model = m;
        c.runtime.device.preset = test_rng_below(&rng, 2) ? "h100-80g" : "ascend-910b";
        c.steps = 10;
        c.strategy = CHAM_STRATEGY_IDEAL;
        c.lower_bound = true;
        cham_run_result_t r;
        assert_int_equal(cham_run(&c, &r), CHAM_OK);
        assert_int_equal(r.status, CHAM_OK);
        /* With all the memory it wants the step still waits for ZeRO-3's
         * gathers: the bound counts those waits, never more. */
        assert_true(r.has_bound && r.bound_feasible);
        if (r.step_time_s < r.lower_bound_step_time_s)
            fail_msg("%s unconstrained: step %.6f s below the bound %.6f s", models[mi],
                     r.step_time_s, r.lower_bound_step_time_s);
        uint64_t peak = r.peak_device_bytes;
        for (int f = 0; f < 3; f++) {
            double frac = 0.35 + 0.6 * (double)test_rng_below(&rng, 1000) / 1000;
            c.runtime.device.capacity = (uint64_t)((double)peak * frac) & ~(MiB - 1);
            for (size_t si = 0; si < 4; si++) {
                c.strategy = strategies[si];
                assert_int_equal(cham_run(&c, &r), CHAM_OK);
                if (r.status != CHAM_OK || !r.has_bound)
                    continue;          /* out of memory (vDNN): no step time to compare */
                assert_true(r.bound_feasible);
                if (r.step_time_s < r.lower_bound_step_time_s)
                    fail_msg("%s on %s at %.0f%% (%llu bytes), %s: step %.6f s below the "
                             "bound %.6f s", models[mi], c.runtime.device.preset, 100 * frac,
                             (unsigned long long)c.runtime.device.capacity,
                             cham_strategy_name(c.strategy), r.step_time_s,
                             r.lower_bound_step_time_s);
                checked++;
            }
        }
    }
    assert_true(checked >= 12);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_worked_case),
        cmocka_unit_test(test_infeasible),
        cmocka_unit_test(test_copies_across_the_steps_end),
        cmocka_unit_test(test_unwritten_state_leaves_without_a_copy),
        cmocka_unit_test(test_written_state_leaves_after_its_write),
        cmocka_unit_test(test_freed_bytes_cover_no_excess),
        cmocka_unit_test(test_reruns_before_the_tails_copies),
        cmocka_unit_test(test_collectives),
        cmocka_unit_test(test_kernel_overhead),
        cmocka_unit_test(test_never_above_a_policy),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
