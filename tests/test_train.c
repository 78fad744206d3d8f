/* The GPT trainer through its library API (examples/gpt/train.h): runs
 * under a budget are bit-exact against an unconstrained copy with no
 * hazards, the loss falls, each dynamic behaviour fires and changes the op
 * sequence, and the native policy fails with the out-of-memory report. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <string.h>

#include "data.h"
#include "train.h"

static gpt_data_t data;

static int setup(void **state)
{
    (void)state;
    return gpt_data_synthetic(&data, 200000, 64, 1);
}

static int teardown(void **state)
{
    (void)state;
    gpt_data_free(&data);
    return 0;
}

typedef struct seen {
    int steps, validations, overflows, skipping_steps;
} seen_t;

static void count(const gpt_step_info_t *i, void *user)
{
    seen_t *s = user;
    if (i->validation) {
        s->validations++;
        return;
    }
    s->steps++;
    s->overflows += i->skipped_update;
    s->skipping_steps += i->layers_skipped > 0;
    if (!i->verified)
        fail_msg("step %d: loss %.9f differs from the unconstrained run's", i->step, i->loss);
}

static void verified_run(double fraction, int steps)
{
    gpt_train_config_t c = gpt_train_config_default();
    c.steps = steps;
    c.budget_fraction = fraction;
    c.verify = true;
    c.validate_every = 20;
    static const uint64_t overflow_at[] = {12, 33};
    c.overflow_at = overflow_at;
    c.n_overflow_at = 2;
    c.drop_prob = 0.05;
    gpt_train_result_t r;
    seen_t s = {0};
    char err[600] = "";
    cham_status_t st = gpt_train(&c, &data, count, &s, &r, err, sizeof err);
    if (st != CHAM_OK)
        fail_msg("%s", err);
    assert_true(r.bit_exact);
    assert_int_equal(r.hazards, 0);
    assert_int_equal(r.oom, 0);
    assert_int_equal(r.steps, steps);
    assert_true(r.peak_device_bytes <= r.budget_bytes);
    assert_true(r.budget_bytes <= (uint64_t)(fraction * (double)r.unconstrained_peak_bytes));
    assert_true(r.swapped_bytes > 0);
    /* Every dynamic behaviour fired, and the runtime saw the sequence change. */
    assert_int_equal(s.overflows, 2);
    assert_int_equal(r.skipped_updates, 2);
    assert_int_equal(s.validations, steps / 20);
    assert_true(s.skipping_steps > 0);
    assert_true(r.stage_changes > 1);
}

static void test_half_budget(void **state)
{
    (void)state;
    verified_run(0.5, 60);
}

static void test_quarter_budget(void **state)
{
    (void)state;
    verified_run(0.25, 40);
}

/* The synthetic language is learnable: the loss falls well below ln(64). */
static void test_loss_falls(void **state)
{
    (void)state;
    gpt_train_config_t c = gpt_train_config_default();
    c.steps = 80;
    c.budget_fraction = 0;          /* unconstrained: this is about learning */
    c.validate_every = 40;
    gpt_train_result_t r;
    char err[600] = "";
    assert_int_equal(gpt_train(&c, &data, NULL, NULL, &r, err, sizeof err), CHAM_OK);
    assert_true(r.first_train_loss > 3.9);                 /* ln 64 = 4.16 */
    assert_true(r.final_train_loss < r.first_train_loss - 1.0);
    assert_true(r.final_val_loss < r.first_train_loss - 1.0);
}

static void test_native_fails_clearly(void **state)
{
    (void)state;
    gpt_train_config_t c = gpt_train_config_default();
    c.steps = 3;
    c.policy = GPT_POLICY_NATIVE;
    gpt_train_result_t r;
    char err[600] = "";
    assert_int_equal(gpt_train(&c, &data, NULL, NULL, &r, err, sizeof err),
                     CHAM_ERR_OUT_OF_MEMORY);
    assert_non_null(strstr(err, "step 0 (training)"));
    assert_non_null(strstr(err, "out of device memory"));
    assert_int_equal(r.oom, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_half_budget),
        cmocka_unit_test(test_quarter_budget),
        cmocka_unit_test(test_loss_falls),
        cmocka_unit_test(test_native_fails_clearly),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
