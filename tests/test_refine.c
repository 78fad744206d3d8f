/* Refinement of the kept policy against its replay (docs/policy.md,
 * "Refinement"), on the profiles of real workload steps: each planned
 * with and without it; then planned again with less memory too ("Less
 * memory"), which never predicts slower. The refined policy has the same items, moves only
 * swap-ins that stalled and only earlier, stays within the usable memory
 * and never predicts a slower step; where model state streams through the
 * optimizer (GPT-2 1.5B below its model state) it predicts a faster one,
 * and where that phase is long (Mixtral) its passes go on while they gain. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "chameleon/chameleon.h"
#include "chameleon/policy.h"
#include "chameleon/workload.h"
#include "support/profile_build.h"

#define GiB (UINT64_C(1) << 30)

typedef struct seen {
    const char *preset;
    uint64_t capacity;
    bool planned;
    uint64_t before_ns, after_ns;   /* predicted steps without and with */
    uint64_t less_ns;               /* with refinement and less memory too */
} seen_t;

static cham_policy_t *plan(const cham_profile_t *prof, const seen_t *s, bool refine,
                           bool less_memory)
{
    cham_planner_config_t c = test_preset_planner(s->preset, s->capacity);
    c.reserve = cham_planner_default_reserve(s->capacity, true);   /* the runtime's */
    c.refine = refine;
    c.less_memory = less_memory;
    c.cover_tails = less_memory;   /* another plan, not the same one refined */
    cham_policy_t *p = NULL;
    char err[400];
    cham_status_t st = cham_plan_chameleon(prof, &c, &p, err, sizeof err);
    if (st != CHAM_OK)
        fail_msg("%s at %llu bytes: %s", s->preset, (unsigned long long)s->capacity, err);
    return p;
}

static void on_finish(const cham_profile_t *prof, const cham_policy_t *applied, void *user)
{
    (void)applied;
    seen_t *s = user;
    if (!prof)
        return;
    /* The same policy, refined or not. */
    cham_policy_t *a = plan(prof, s, false, false), *b = plan(prof, s, true, false);
    cham_policy_view_t x, y;
    cham_policy_get(a, &x);
    cham_policy_get(b, &y);
    assert_int_equal(x.n_items, y.n_items);
    for (size_t i = 0; i < x.n_items; i++) {
        const cham_policy_item_t *u = &x.items[i], *w = &y.items[i];
        assert_int_equal(u->storage, w->storage);
        assert_int_equal(u->swap_out_op, w->swap_out_op);
        assert_int_equal(u->use_op, w->use_op);
        assert_int_equal(u->recompute, w->recompute);
        /* A swap-in only moves earlier and a free only later (an item
         * that did not stall may, once others moved and it does). */
        assert_true(w->swap_in_op <= u->swap_in_op);
        assert_true(w->free_op >= u->free_op);
        /* The block comes free before the swap-in: model state's may in
         * the next step's part (ops from n_ops on). */
        if (w->wraps && w->free_op > y.n_ops)
            assert_true(w->free_op - y.n_ops <= w->swap_in_op);
        else if (!w->wraps)
            assert_true(w->free_op <= w->swap_in_op);
        assert_true(w->swap_in_layer < y.n_layers);
        assert_true(y.layers[w->swap_in_layer].start_op <= w->swap_in_op);
        assert_true(w->swap_in_op < y.layers[w->swap_in_layer].start_op +
                                        y.layers[w->swap_in_layer].n_ops);
    }
    if (x.predicted_peak <= x.usable)
        assert_true(y.predicted_peak <= y.usable);
    assert_true(y.predicted_step_ns <= x.predicted_step_ns);
    s->planned = true;
    s->before_ns = x.predicted_step_ns;
    s->after_ns = y.predicted_step_ns;
    /* Planned again with less memory, the best of the three: never a
     * slower prediction, and within the memory it was planned for. */
    cham_policy_t *m = plan(prof, s, true, true);
    cham_policy_view_t z;
    cham_policy_get(m, &z);
    assert_true(z.predicted_step_ns <= y.predicted_step_ns);
    assert_true(z.usable <= y.usable);
    if (y.predicted_peak <= y.usable)
        assert_true(z.predicted_peak <= z.usable);
    s->less_ns = z.predicted_step_ns;
    cham_policy_free(m);
    cham_policy_free(a);
    cham_policy_free(b);
}

/* Runs c for 4 steps; its last step's profile planned as on_finish does. */
static seen_t run_config(cham_run_config_t c)
{
    c.steps = 4;
    seen_t s = {.preset = c.runtime.device.preset, .capacity = c.runtime.device.capacity};
    c.on_finish = on_finish;
    c.user = &s;
    cham_run_result_t r;
    assert_int_equal(cham_run(&c, &r), CHAM_OK);
    assert_int_equal(r.status, CHAM_OK);
    assert_true(s.planned);
    return s;
}

static seen_t run(const char *model, const char *preset, double capacity_gib)
{
    cham_run_config_t c = cham_run_config_default();
    assert_int_equal(cham_model_preset(model, &c.model), CHAM_OK);
    if (strcmp(model, "gpt2-1.5b") == 0) {
        c.model.mbs = 8;
        c.model.seq = 1024;
    } else {
        c.model.mbs = 4;
        c.model.dp = 8;
        c.model.zero = 3;
    }
    c.runtime.device.preset = preset;
    c.runtime.device.capacity = (uint64_t)(capacity_gib * (double)GiB);
    return run_config(c);
}

static void test_refined_never_worse(void **state)
{
    (void)state;
    static const struct {
        const char *model, *preset;
        double gib;
    } cases[] = {
        {"gpt2-1.5b", "ascend-910b", 19.50}, {"gpt2-1.5b", "h100-80g", 18.37},
        {"gpt2-1.5b", "ascend-910b", 30.61}, {"llama2-7b", "h100-80g", 47.07},
        {"gpt2-1.5b", "ascend-910b", 15.31},
    };
    int faster = 0, less_faster = 0, much_faster = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        seen_t s = run(cases[i].model, cases[i].preset, cases[i].gib);
        print_message("%s on %s at %.2f GiB: predicted %.3f ms, refined %.3f ms, with less "
                      "memory too %.3f ms\n", cases[i].model, cases[i].preset, cases[i].gib,
                      (double)s.before_ns / 1e6, (double)s.after_ns / 1e6,
                      (double)s.less_ns / 1e6);
        faster += s.after_ns < s.before_ns;
        less_faster += s.less_ns < s.after_ns;
        much_faster += (double)s.after_ns < 0.9 * (double)s.before_ns;
    }
    /* Planning with less memory too (docs/policy.md, "Less memory") never
     * predicts slower (asserted above). Its gain depends on where
     * refinement settles: before the device model reached the fractions
     * of the peaks kernels do (issue 51), GPT-2 1.5B at 50% on the 910B
     * gained 12% by it; since, none of these cases (nor 39 GPT-2 and 24
     * Llama 2 capacities tried) gains, so only how often is printed. */
    print_message("with less memory faster in %d of the cases\n", less_faster);
    /* GPT-2 1.5B at 50% and 40% of its peak: model state streams. */
    assert_true(faster >= 2);
    /* By over 10% at 50%, 40% and 33% of the peak: with the blocks of
     * model state held only until their copies end, the memory they held
     * in the forward lets the next moves take more (without that, only at
     * 50%: 8% on the H100 at 40%, 9% at 33% on the 910B). */
    assert_true(much_faster >= 3);
}

/* Mixtral 8x7B under ZeRO-3 over 8 on an H100 cut to 40.95 GiB (33% of
 * its peak), the first 16 of its 34 parameter groups updated on the
 * device: their master weights and moments stream in through the
 * optimizer phase of a 2,485-op step, and each pass of refinement moves
 * every stalled swap-in a little earlier. Stopped after four passes, refinement
 * took the prediction 7% under the unrefined one (1877 -> 1743 ms);
 * passes repeat while they gain (docs/policy.md, "Refinement"): 16%
 * (1576 ms). */
static void test_refines_while_passes_gain(void **state)
{
    (void)state;
    cham_run_config_t c = cham_run_config_default();
    assert_int_equal(cham_model_preset("mixtral-8x7b", &c.model), CHAM_OK);
    c.model.dp = 8;
    c.model.zero = 3;
    c.model.host_optimizer = true;
    c.model.device_groups = 16;
    c.plan_optimizer = false;
    c.runtime.device.preset = "h100-80g";
    c.runtime.device.capacity = (uint64_t)(40.9501953125 * (double)GiB);
    seen_t s = run_config(c);
    print_message("predicted %.3f ms, refined %.3f ms\n", (double)s.before_ns / 1e6,
                  (double)s.after_ns / 1e6);
    assert_true((double)s.after_ns < 0.88 * (double)s.before_ns);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_refined_never_worse),
        cmocka_unit_test(test_refines_while_passes_gain),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
