/* HyperOffload's refinement stops at a fixed point (docs/hyperoffload.md,
 * "Refinement"): an operator moves only to a strictly cheaper position, so
 * a pass that leaves the cost as it was moved nothing, and more passes
 * after that move nothing more. `moved` (the plan's report) counts real
 * improvements, and a plan does not churn between positions of equal cost
 * from one pass count to the next. Accepting a position of equal cost
 * passes the "never slower" property of test_hyperoffload (the cost does
 * not change) but fails this one: the operator hops between the tied
 * positions on every further pass.
 *
 * The steps are random training steps (test_random_step, as
 * test_hyperoffload's), each planned with 1 to 4 passes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "chameleon/chameleon.h"
#include "chameleon/hyperoffload.h"
#include "profile/profile-impl.h"
#include "support/profile_build.h"
#include "support/rng.h"

#define MiB (UINT64_C(1) << 20)

/* Whether two plans put the same tensors' operators at the same ops. */
static bool same_items(const cham_policy_t *a, const cham_policy_t *b)
{
    cham_policy_view_t x, y;
    cham_policy_get(a, &x);
    cham_policy_get(b, &y);
    if (x.n_items != y.n_items)
        return false;
    for (size_t i = 0; i < x.n_items; i++) {
        const cham_policy_item_t *p = &x.items[i], *q = &y.items[i];
        if (p->storage != q->storage || p->swap_out_op != q->swap_out_op ||
            p->swap_out_done_op != q->swap_out_done_op || p->free_op != q->free_op ||
            p->swap_in_op != q->swap_in_op || p->use_op != q->use_op || p->wraps != q->wraps)
            return false;
    }
    return true;
}

/* On 300 random steps, capacities and bandwidths, planned with passes
 * 1..4: a pass count whose refined cost equals the previous one's has
 * moved no more operators and gives the same plan.
 * Not vacuous: some steps converge only after a second pass, and on most
 * the first pass moves something. */
static void test_refinement_stops_at_a_fixed_point(void **state)
{
    (void)state;
    test_rng_t r = {.state = 11};
    int converged = 0, improved_later = 0;
    for (int seed = 0; seed < 300; seed++) {
        cham_profile_t *prof = test_random_step(&r);
        uint64_t peak = test_profile_peak(prof);
        cham_planner_config_t pc = cham_planner_config_default();
        pc.capacity = peak / 2 + test_rng_below(&r, peak);
        pc.reserve = 0;
        pc.h2d_bandwidth = pc.d2h_bandwidth = (5 + (double)test_rng_below(&r, 60)) * 1e9;
        pc.min_swap_bytes = MiB;
        cham_hyperoffload_options_t o = cham_hyperoffload_options_default();
        o.positions = 1 + (uint32_t)test_rng_below(&r, 12);
        cham_policy_t *prev = NULL;
        cham_hyperoffload_result_t before = {0};
        for (uint32_t passes = 1; passes <= 4; passes++) {
            o.passes = passes;
            cham_policy_t *pol;
            cham_hyperoffload_result_t res;
            char err[300];
            if (cham_plan_hyperoffload(prof, &pc, &o, &pol, &res, err, sizeof err) != CHAM_OK)
                fail_msg("seed %d passes %u: %s", seed, passes, err);
            if (prev && memcmp(&res.refined, &before.refined, sizeof res.refined) == 0) {
                if (res.moved != before.moved)
                    fail_msg("seed %d: pass %u left the cost as it was but moved %zu "
                             "operator(s)", seed, passes, res.moved - before.moved);
                if (!same_items(pol, prev))
                    fail_msg("seed %d: pass %u left the cost as it was but changed the plan",
                             seed, passes);
                converged++;
            } else if (prev) {
                improved_later++;
            }
            cham_policy_free(prev);
            prev = pol;
            before = res;
        }
        cham_policy_free(prev);
        cham_profile_free(prof);
    }
    assert_true(converged > 100);
    assert_true(improved_later > 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_refinement_stops_at_a_fixed_point),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
