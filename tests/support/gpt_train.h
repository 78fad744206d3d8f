/* The GPT trainer in tests: its synthetic data as a cmocka group fixture,
 * and the verified run whose dynamic behaviours (validations, overflows,
 * skipped layers) change the op sequence the runtime sees. */
#ifndef CHAM_TEST_GPT_TRAIN_H
#define CHAM_TEST_GPT_TRAIN_H

#include "chameleon/chameleon.h"
#include "data.h"
#include "train.h"

/* The synthetic language (200,000 tokens, vocabulary 64), made by
 * test_data_setup and freed by test_data_teardown. */
extern gpt_data_t test_data;
int test_data_setup(void **state);
int test_data_teardown(void **state);

/* A verified run of `steps` at `fraction` of the unconstrained peak under
 * `strategy`, with a validation every 20 steps, overflows at steps 12 and
 * 33 and each block skipped with probability 0.05. */
gpt_train_config_t test_train_dynamic_config(cham_strategy_t strategy, double fraction,
                                             int steps);

/* Runs c on test_data (progress with user; NULL for none) and fails the
 * test unless it succeeds bit-exact with no hazard. */
gpt_train_result_t test_train_verified(const gpt_train_config_t *c, gpt_progress_fn progress,
                                       void *user);

/* That run at half the memory for 60 steps (40 under a sanitizer): bit-exact, no hazard,
 * something swapped and more than one policy made (the static planners
 * plan again after each change). Fails the test otherwise. */
void test_train_dynamic_bit_exact(cham_strategy_t strategy);

#endif
