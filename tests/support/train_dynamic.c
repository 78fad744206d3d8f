#include "support/train_dynamic.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "train.h"

void test_train_dynamic_bit_exact(const gpt_data_t *data, cham_strategy_t strategy)
{
    gpt_train_config_t c = gpt_train_config_default();
    c.strategy = strategy;
    c.steps = 60;
    c.budget_fraction = 0.5;
    c.verify = true;
    c.validate_every = 20;
    static const uint64_t overflow_at[] = {12, 33};
    c.overflow_at = overflow_at;
    c.n_overflow_at = 2;
    c.drop_prob = 0.05;
    gpt_train_result_t r;
    char err[600] = "";
    if (gpt_train(&c, data, NULL, NULL, &r, err, sizeof err) != CHAM_OK)
        fail_msg("%s", err);
    assert_true(r.bit_exact);
    assert_int_equal(r.hazards, 0);
    assert_int_equal(r.steps, 60);
    assert_true(r.swapped_bytes > 0);
    assert_true(r.policy_regenerations > 1);   /* planned again after changes */
}
