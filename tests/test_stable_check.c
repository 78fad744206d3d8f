/* The kept policy checked in Stable (src/runtime/stable_check.c): which
 * trials it measures, in what order, and which policy it keeps. The
 * loop's use of it runs in test_trials. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "runtime/runtime-impl.h"

#define MS 1000000ull

static cham_plan_t *plan_new(void)
{
    cham_plan_t *p = calloc(1, sizeof *p);
    assert_non_null(p);
    p->refs = 1;
    return p;
}

/* Five trials: 0 and 2 clean, 1 needed passive swaps, 3 clean and
 * slowest, 4 never measured. */
typedef struct fixture {
    cham_plan_t *plan[5];
    cham_trial_t trial[5];
} fixture_t;

static void fixture_init(fixture_t *f, const uint64_t ms[5])
{
    for (int i = 0; i < 5; i++) {
        f->plan[i] = plan_new();
        f->trial[i] = (cham_trial_t){.plan = f->plan[i], .step_ns = ms[i] * MS};
    }
    f->trial[1].passive = 2;
}

static void fixture_free(fixture_t *f)
{
    for (int i = 0; i < 5; i++) {
        assert_int_equal(f->plan[i]->refs, 1);   /* the check let all go */
        cham_plan_release(f->plan[i]);
    }
}

/* Feeds the candidate applied now four Stable steps; returns the verdict
 * of the last. */
static cham_check_verdict_t measure(cham_check_t *k, const uint64_t ms[CHAM_CHECK_STEPS],
                                    cham_plan_t **plan)
{
    cham_check_verdict_t v = CHAM_CHECK_MEASURING;
    for (int i = 0; i < CHAM_CHECK_STEPS; i++) {
        v = cham_check_sample(k, ms[i] * MS, false, plan);
        if (i + 1 < CHAM_CHECK_STEPS)
            assert_int_equal(v, CHAM_CHECK_MEASURING);
    }
    return v;
}

static void test_candidates(void **state)
{
    (void)state;
    fixture_t f;
    fixture_init(&f, (const uint64_t[]){200, 100, 190, 300, 0});
    cham_check_t k = {0};
    /* The kept one first (not the fastest: the loop may prefer a clean
     * one), then the clean measured others, fastest first. */
    cham_check_start(&k, f.trial, 5, f.plan[3], 7);
    assert_int_equal(k.n, 3);
    assert_ptr_equal(k.cand[0].plan, f.plan[3]);
    assert_ptr_equal(k.cand[1].plan, f.plan[2]);
    assert_ptr_equal(k.cand[2].plan, f.plan[0]);
    assert_int_equal(k.cand[1].trial_ns, 190 * MS);
    assert_int_equal(k.class_id, 7);
    assert_int_equal(f.plan[3]->refs, 2);
    cham_check_clear(&k);
    assert_int_equal(k.n, 0);

    /* A clean kept one with no clean other: the one that ran short, in
     * reserve (test_clean_kept_that_runs_out_tries_short_ones). */
    cham_check_start(&k, f.trial, 2, f.plan[0], 0);
    assert_int_equal(k.n, 2);
    assert_ptr_equal(k.cand[1].plan, f.plan[1]);
    assert_true(k.cand[0].clean);
    assert_false(k.cand[1].clean);
    cham_check_clear(&k);

    /* Nothing to compare with, or a kept policy never measured: no check. */
    cham_check_start(&k, f.trial, 1, f.plan[0], 0);
    assert_int_equal(k.n, 0);
    cham_check_start(&k, f.trial, 5, f.plan[4], 0);
    assert_int_equal(k.n, 0);
    fixture_free(&f);
}

/* A kept policy that ran short in its trial is measured against the
 * fastest others whether or not they ran short too: like is compared
 * with like (GPT-2 2 layers on the rtx3090, classic allocator, 70% of the
 * peak: every trial ran short; the kept one took 115.7 ms in its trial and
 * 146.4 ms in Stable, one 134.6 ms in its trial took 105.8 in Stable). */
static void test_kept_short_is_measured_against_short_ones(void **state)
{
    (void)state;
    fixture_t f;
    fixture_init(&f, (const uint64_t[]){200, 100, 190, 300, 0});
    f.trial[3].passive = 1;
    cham_check_t k = {0};
    cham_check_start(&k, f.trial, 5, f.plan[3], 0);
    assert_int_equal(k.n, 3);
    assert_ptr_equal(k.cand[0].plan, f.plan[3]);
    assert_ptr_equal(k.cand[1].plan, f.plan[1]);   /* ran short, fastest */
    assert_ptr_equal(k.cand[2].plan, f.plan[2]);
    cham_check_clear(&k);

    /* Like with like: while the kept one runs out, one that also ran
     * short is tried where its trial is close, if not faster (Llama 3 12
     * layers 4k, TP2, flash off, classic, 910B at 50%: kept 426.6 ms with
     * 2 passive swaps, 443.7 in Stable; the next took 441.2 with 3 and
     * runs 378 ms a step in Stable). */
    fixture_t g;
    fixture_init(&g, (const uint64_t[]){427, 441, 0, 0, 0});
    g.trial[0].passive = 2;
    cham_check_start(&k, g.trial, 5, g.plan[0], 0);
    cham_plan_t *p;
    assert_int_equal(cham_check_sample(&k, 444 * MS, true, &p), CHAM_CHECK_TRY_NEXT);
    assert_ptr_equal(p, g.plan[1]);
    assert_int_equal(measure(&k, (const uint64_t[]){378, 378, 378, 378}, &p), CHAM_CHECK_DONE);
    assert_ptr_equal(p, g.plan[1]);
    cham_check_clear(&k);
    fixture_free(&g);
    fixture_free(&f);
}

static void test_kept_runs_as_its_trial(void **state)
{
    (void)state;
    fixture_t f;
    fixture_init(&f, (const uint64_t[]){200, 100, 201, 300, 0});
    cham_check_t k = {0};
    cham_check_start(&k, f.trial, 5, f.plan[0], 0);
    cham_plan_t *p;
    assert_int_equal(measure(&k, (const uint64_t[]){200, 201, 199, 200}, &p), CHAM_CHECK_DONE);
    assert_ptr_equal(p, f.plan[0]);
    assert_true(k.done);
    assert_int_equal(k.cand[0].stable_ns, 200 * MS);
    cham_check_clear(&k);
    fixture_free(&f);
}

/* One slow step in four counts: a policy is kept by its mean, and the
 * next trial beats it. The next one then measures faster and is kept. */
static void test_slower_in_stable_tries_the_next(void **state)
{
    (void)state;
    fixture_t f;
    fixture_init(&f, (const uint64_t[]){627, 100, 640, 700, 0});
    cham_check_t k = {0};
    cham_check_start(&k, f.trial, 5, f.plan[0], 0);
    cham_plan_t *p;
    assert_int_equal(measure(&k, (const uint64_t[]){630, 747, 628, 630}, &p),
                     CHAM_CHECK_TRY_NEXT);
    assert_ptr_equal(p, f.plan[2]);
    assert_int_equal(measure(&k, (const uint64_t[]){641, 640, 641, 640}, &p), CHAM_CHECK_DONE);
    assert_ptr_equal(p, f.plan[2]);
    cham_check_clear(&k);
    fixture_free(&f);
}

/* The next one is slower in Stable still: back to the best measured, and
 * the third (its trial not faster than that by 1%) is not tried. */
static void test_back_to_the_best_measured(void **state)
{
    (void)state;
    fixture_t f;
    fixture_init(&f, (const uint64_t[]){100, 50, 101, 104, 0});
    cham_check_t k = {0};
    cham_check_start(&k, f.trial, 5, f.plan[0], 0);
    cham_plan_t *p;
    assert_int_equal(measure(&k, (const uint64_t[]){105, 105, 105, 105}, &p),
                     CHAM_CHECK_TRY_NEXT);
    assert_ptr_equal(p, f.plan[2]);
    assert_int_equal(measure(&k, (const uint64_t[]){110, 110, 110, 110}, &p), CHAM_CHECK_DONE);
    assert_ptr_equal(p, f.plan[0]);
    cham_check_clear(&k);
    fixture_free(&f);
}

/* Within 1% of what the best measures, a trial is not worth the steps. */
static void test_noise_is_not_worth_a_try(void **state)
{
    (void)state;
    fixture_t f;
    fixture_init(&f, (const uint64_t[]){1000, 50, 1003, 1100, 0});
    cham_check_t k = {0};
    cham_check_start(&k, f.trial, 5, f.plan[0], 0);
    cham_plan_t *p;
    assert_int_equal(measure(&k, (const uint64_t[]){1010, 1012, 1008, 1010}, &p),
                     CHAM_CHECK_DONE);
    assert_ptr_equal(p, f.plan[0]);
    cham_check_clear(&k);
    fixture_free(&f);
}

/* A Stable step that needed passive swaps ends its candidate's
 * measurement at once: the next trial is applied from the step after
 * (gpt2-1.5b on the H100 at 65%: 132.6 ms in its trial, 194.5 in Stable).
 * A candidate that runs out later than its first timed step is measured by
 * the steps up to that one. While the best so far runs out, the next is
 * tried even where its trial is slower (150 ms against 139 measured), and
 * a clean one within 10% of the fastest is kept over it. */
static void test_passive_swaps_end_the_measurement(void **state)
{
    (void)state;
    fixture_t f;
    fixture_init(&f, (const uint64_t[]){137, 100, 138, 150, 0});
    cham_check_t k = {0};
    cham_check_start(&k, f.trial, 5, f.plan[0], 0);
    cham_plan_t *p;
    assert_int_equal(cham_check_sample(&k, 198 * MS, true, &p), CHAM_CHECK_TRY_NEXT);
    assert_ptr_equal(p, f.plan[2]);
    assert_int_equal(k.cand[0].stable_ns, 198 * MS);
    assert_int_equal(cham_check_sample(&k, 138 * MS, false, &p), CHAM_CHECK_MEASURING);
    assert_int_equal(cham_check_sample(&k, 140 * MS, true, &p), CHAM_CHECK_TRY_NEXT);
    assert_int_equal(k.cand[1].stable_ns, 139 * MS);
    assert_ptr_equal(p, f.plan[3]);
    assert_int_equal(measure(&k, (const uint64_t[]){150, 150, 150, 150}, &p), CHAM_CHECK_DONE);
    assert_ptr_equal(p, f.plan[3]);
    cham_check_clear(&k);
    fixture_free(&f);
}

/* A clean candidate more than 10% slower than one that runs out is no
 * bargain: the faster is kept (two candidates: the kept trial and one
 * other). */
static void test_much_slower_clean_is_not_kept(void **state)
{
    (void)state;
    fixture_t f;
    fixture_init(&f, (const uint64_t[]){137, 0, 138, 0, 0});
    cham_check_t k = {0};
    cham_check_start(&k, f.trial, 5, f.plan[0], 0);
    cham_plan_t *p;
    assert_int_equal(cham_check_sample(&k, 140 * MS, true, &p), CHAM_CHECK_TRY_NEXT);
    assert_int_equal(measure(&k, (const uint64_t[]){160, 160, 160, 160}, &p), CHAM_CHECK_DONE);
    assert_ptr_equal(p, f.plan[0]);
    cham_check_clear(&k);
    fixture_free(&f);
}

/* While the best so far runs out, a next candidate whose trial is more
 * than 10% slower than the best measures is not tried: clean at its
 * trial's time it would not be kept (mixtral-8x7b TP4 PP2 on the A100 at
 * 45% spent 5 Stable steps on a 2056 ms trial against 1680 measured). */
static void test_hopeless_next_is_not_tried(void **state)
{
    (void)state;
    fixture_t f;
    fixture_init(&f, (const uint64_t[]){137, 100, 138, 300, 0});
    cham_check_t k = {0};
    cham_check_start(&k, f.trial, 5, f.plan[0], 0);
    cham_plan_t *p;
    assert_int_equal(cham_check_sample(&k, 198 * MS, true, &p), CHAM_CHECK_TRY_NEXT);
    assert_ptr_equal(p, f.plan[2]);
    assert_int_equal(cham_check_sample(&k, 139 * MS, true, &p), CHAM_CHECK_DONE);
    assert_ptr_equal(p, f.plan[2]);
    cham_check_clear(&k);
    fixture_free(&f);
}

/* A kept policy that covered its trial but runs out in Stable, with no
 * other clean trial: those that ran short in theirs are tried, fastest
 * first, while the best measured runs out, and the best measured is kept
 * (GPT-2 4 layers 2k on the rtx3090, classic allocator, 50% of the peak:
 * the kept one took 277.6 ms in its trial and 362.7 ms in Stable with
 * passive swaps, every step; one whose trial took 281.5 ms with passive
 * swaps then ran 218-234 ms, clean). Beside a kept one that runs clean in
 * Stable, they are not tried, however fast their trials. */
static void test_clean_kept_that_runs_out_tries_short_ones(void **state)
{
    (void)state;
    fixture_t f;
    fixture_init(&f, (const uint64_t[]){278, 268, 282, 0, 0});
    f.trial[2].passive = 4;
    cham_check_t k = {0};
    cham_check_start(&k, f.trial, 5, f.plan[0], 0);
    assert_int_equal(k.n, 3);
    cham_plan_t *p;
    assert_int_equal(cham_check_sample(&k, 363 * MS, true, &p), CHAM_CHECK_TRY_NEXT);
    assert_ptr_equal(p, f.plan[1]);
    assert_int_equal(cham_check_sample(&k, 324 * MS, true, &p), CHAM_CHECK_TRY_NEXT);
    assert_ptr_equal(p, f.plan[2]);
    assert_int_equal(cham_check_sample(&k, 310 * MS, true, &p), CHAM_CHECK_DONE);
    assert_ptr_equal(p, f.plan[2]);
    cham_check_clear(&k);

    cham_check_start(&k, f.trial, 5, f.plan[0], 0);
    assert_int_equal(measure(&k, (const uint64_t[]){300, 300, 300, 300}, &p), CHAM_CHECK_DONE);
    assert_ptr_equal(p, f.plan[0]);
    cham_check_clear(&k);
    fixture_free(&f);
}

/* A check left before it is done (another class's starts) gives the best
 * of what it measured: the kept policy that ran out at 140 ms while the
 * next, tried for it, has no Stable step timed yet; nothing when nothing
 * was measured, or once it is done. */
static void test_abandoned_keeps_the_best_measured(void **state)
{
    (void)state;
    fixture_t f;
    fixture_init(&f, (const uint64_t[]){137, 100, 138, 0, 0});
    cham_check_t k = {0};
    cham_check_start(&k, f.trial, 5, f.plan[0], 7);
    uint32_t id = 0;
    assert_null(cham_check_abandon(&k, &id));
    cham_plan_t *p;
    assert_int_equal(cham_check_sample(&k, 140 * MS, true, &p), CHAM_CHECK_TRY_NEXT);
    assert_ptr_equal(p, f.plan[2]);
    assert_ptr_equal(cham_check_abandon(&k, &id), f.plan[0]);
    assert_int_equal(id, 7);
    assert_int_equal(measure(&k, (const uint64_t[]){139, 139, 139, 139}, &p), CHAM_CHECK_DONE);
    assert_null(cham_check_abandon(&k, &id));
    cham_check_clear(&k);
    fixture_free(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_candidates),
        cmocka_unit_test(test_kept_short_is_measured_against_short_ones),
        cmocka_unit_test(test_kept_runs_as_its_trial),
        cmocka_unit_test(test_slower_in_stable_tries_the_next),
        cmocka_unit_test(test_back_to_the_best_measured),
        cmocka_unit_test(test_noise_is_not_worth_a_try),
        cmocka_unit_test(test_passive_swaps_end_the_measurement),
        cmocka_unit_test(test_much_slower_clean_is_not_kept),
        cmocka_unit_test(test_clean_kept_that_runs_out_tries_short_ones),
        cmocka_unit_test(test_hopeless_next_is_not_tried),
        cmocka_unit_test(test_abandoned_keeps_the_best_measured),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
