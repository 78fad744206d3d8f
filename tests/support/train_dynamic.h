/* The GPT trainer under a strategy at half its memory, with validations,
 * skipped layers and overflows changing the op sequence (the static
 * planners' test that they plan again and stay bit-exact). */
#ifndef CHAM_TEST_TRAIN_DYNAMIC_H
#define CHAM_TEST_TRAIN_DYNAMIC_H

#include "chameleon/chameleon.h"
#include "data.h"

/* 60 steps, verified: bit-exact, no hazard, something swapped and more
 * than one policy made. Fails the test otherwise. */
void test_train_dynamic_bit_exact(const gpt_data_t *data, cham_strategy_t strategy);

#endif
