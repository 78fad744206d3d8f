/* Inference on the workload generator (docs/workloads.md, "Inference"):
 * prefill and decode steps, the KV caches' size, HyperOffload's KV offload
 * (the peak falls by about the caches, no hazard, the longest context
 * grows), Chameleon serving decode steps with one policy, bad input, and
 * the longest sequence a model takes. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "support/cases.h"

#include "chameleon/chameleon.h"

#define GiB (UINT64_C(1) << 30)

static cham_run_config_t infer_config(uint32_t prompt, bool offload)
{
    cham_run_config_t c = cham_run_config_default();
    assert_int_equal(cham_model_preset("llama3-8b", &c.model), CHAM_OK);
    c.model.infer = true;
    c.model.seq = prompt;
    c.model.mbs = 2;
    c.model.generate = 12;
    c.model.kv_offload = offload;
    c.strategy = CHAM_STRATEGY_NATIVE;
    c.runtime.device.preset = "h100-80g";
    c.steps = 13;
    return c;
}

static cham_run_result_t run(const cham_run_config_t *c)
{
    cham_run_result_t r;
    assert_int_equal(cham_run(c, &r), CHAM_OK);
    return r;
}

/* The prefill and 12 decode steps run; offloading the caches lowers the
 * peak by about their size, keeps the prefill's time, makes decoding wait
 * for the link, and the hazard detector sees no race in its copies. */
static void test_kv_offload(void **state)
{
    (void)state;
    cham_run_config_t on = infer_config(16384, true), off = infer_config(16384, false);
    uint64_t kv = cham_model_kv_cache_bytes(&off.model);
    /* 32 layers x 2 sequences x (16384 + 12) tokens x 2 x 8 kv heads x 128 x 2 bytes */
    assert_int_equal(kv, UINT64_C(32) * 2 * (16384 + 12) * 2 * 8 * 128 * 2);
    cham_run_result_t a = run(&off), b = run(&on);
    assert_int_equal(a.status, CHAM_OK);
    assert_int_equal(b.status, CHAM_OK);
    assert_int_equal(a.steps, 13);
    assert_int_equal(b.hazards, 0);
    assert_true(a.peak_device_bytes > b.peak_device_bytes);
    uint64_t saved = a.peak_device_bytes - b.peak_device_bytes;
    /* All but the few layers' caches on the device at once (four at most). */
    assert_true(saved >= kv / 2 && saved <= kv + (UINT64_C(64) << 20));
    assert_true(fabs(a.prefill_time_s - b.prefill_time_s) <= 0.05 * a.prefill_time_s);
    assert_true(b.step_time_s > a.step_time_s);
    assert_true(a.prefill_time_s > 10 * a.step_time_s);
}

/* The largest prompt (in 1024-token steps) that runs at capacity. */
static uint32_t longest(bool offload, uint64_t capacity)
{
    uint32_t good = 0;
    for (uint32_t k = 1; k <= 256; k++) {
        cham_run_config_t c = infer_config(k * 1024, offload);
        c.runtime.device.capacity = capacity;
        cham_run_result_t r = run(&c);
        if (r.status != CHAM_OK) {
            /* Out of memory, and the message names the bytes asked for. */
            assert_int_equal(r.status, CHAM_ERR_OUT_OF_MEMORY);
            assert_non_null(strstr(r.error, "requested"));
            break;
        }
        good = k;
    }
    return good * 1024;
}

/* Offloading the caches makes room for a longer context: here at least
 * 1.7 times as long (the target on its own workloads). */
static void test_longer_context(void **state)
{
    (void)state;
    uint64_t cap = 40 * GiB;
    uint32_t off = longest(false, cap), on = longest(true, cap);
    assert_true(off > 0);
    if (on < 1.7 * off)
        fail_msg("longest prompt %u with offload, %u without", on, off);
}

/* Chameleon runs a context native cannot hold, and every decode step is
 * the same op sequence (one policy serves them all). */
static void test_chameleon_serves_decode(void **state)
{
    (void)state;
    cham_run_config_t c = infer_config(65536, false);
    c.model.mbs = 4;
    c.model.generate = 24;
    c.steps = 25;
    c.runtime.device.capacity = 64 * GiB;
    cham_run_result_t native = run(&c);
    assert_int_equal(native.status, CHAM_ERR_OUT_OF_MEMORY);
    c.strategy = CHAM_STRATEGY_CHAMELEON;
    cham_run_result_t r = run(&c);
    if (r.status != CHAM_OK)
        fail_msg("%s", r.error);
    assert_int_equal(r.hazards, 0);
    assert_true(r.policy_regenerations >= 1);
    assert_true(r.peak_device_bytes <= c.runtime.device.capacity);
}

static void test_bad_input(void **state)
{
    (void)state;
    cham_model_config_t m;
    char err[400];
    assert_int_equal(cham_model_preset("llama2-7b", &m), CHAM_OK);
    m.generate = 4;
    assert_int_equal(cham_model_validate(&m, err, sizeof err), CHAM_ERR_INVALID_ARG);
    assert_non_null(strstr(err, "generate and kv_offload are for inference"));
    m.infer = true;
    m.tp = 2;
    assert_int_equal(cham_model_validate(&m, err, sizeof err), CHAM_ERR_INVALID_ARG);
    assert_non_null(strstr(err, "inference runs one device"));
    m.tp = 1;
    m.recompute = true;
    assert_int_equal(cham_model_validate(&m, err, sizeof err), CHAM_ERR_INVALID_ARG);
    assert_non_null(strstr(err, "no backward or optimizer"));
    m.recompute = false;
    assert_int_equal(cham_model_validate(&m, err, sizeof err), CHAM_OK);
    /* More steps than the prefill and the generated tokens. */
    cham_run_config_t c = infer_config(1024, false);
    c.steps = 14;
    cham_run_result_t r = run(&c);
    assert_int_equal(r.status, CHAM_ERR_INVALID_ARG);
    assert_int_equal(r.steps, 13);
    assert_non_null(strstr(r.error, "inference runs 1 + generate (12) steps"));
}

/* cham_model_max_seq is the largest seq cham_model_validate accepts: the
 * validation itself is the oracle, at the answer and one past it. */
static void check_max_seq(const cham_model_config_t *m, uint32_t want)
{
    char err[400];
    uint32_t got = cham_model_max_seq(m);
    assert_int_equal(got, want);
    cham_model_config_t c = *m;
    c.seq = got;
    if (cham_model_validate(&c, err, sizeof err) != CHAM_OK)
        fail_msg("seq %u refused: %s", got, err);
    c.seq = got + 1;
    assert_int_equal(cham_model_validate(&c, err, sizeof err), CHAM_ERR_INVALID_ARG);
}

/* One limit on the sequence, stated once (CHAM_MODEL_MAX_SEQ, 2^20 tokens):
 * the validation takes it and refuses one more, naming the limit; a large
 * batch lowers the longest sequence to what the tensors allow. */
static void test_max_seq(void **state)
{
    (void)state;
    assert_int_equal(CHAM_MODEL_MAX_SEQ, 1048576);
    cham_run_config_t c = infer_config(1024, false);
    check_max_seq(&c.model, CHAM_MODEL_MAX_SEQ);
    char err[400];
    c.model.seq = CHAM_MODEL_MAX_SEQ + 1;
    assert_int_equal(cham_model_validate(&c.model, err, sizeof err), CHAM_ERR_INVALID_ARG);
    assert_non_null(strstr(err, "1..1048576"));
    c.model.infer = false;                 /* training has the same limit */
    c.model.generate = 0;
    check_max_seq(&c.model, CHAM_MODEL_MAX_SEQ);
    /* The generated tokens have theirs. */
    c = infer_config(1024, false);
    c.model.generate = CHAM_MODEL_MAX_GENERATE;
    assert_int_equal(cham_model_validate(&c.model, err, sizeof err), CHAM_OK);
    c.model.generate++;
    assert_int_equal(cham_model_validate(&c.model, err, sizeof err), CHAM_ERR_INVALID_ARG);
    assert_non_null(strstr(err, "0..1000000"));
    /* 64 heads of one channel, batch 65536: a prompt's attention scores
     * (seq x seq x heads x batch, 2 bytes) must stay under 9e15 bytes
     * (docs/workloads.md), so seq^2 x 8388608 < 9e15: seq 32754. */
    cham_model_config_t m = c.model;
    m.generate = 0;
    m.layers = 1;
    m.hidden = 64;
    m.ffn = 64;
    m.heads = 64;
    m.kv_heads = 1;
    m.vocab = 100;
    m.mbs = 65536;
    check_max_seq(&m, 32754);
    /* A fault elsewhere: no seq is accepted. */
    m.heads = 3;
    assert_int_equal(cham_model_max_seq(&m), 0);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kv_offload),
        cmocka_unit_test(test_longer_context),
        cmocka_unit_test(test_chameleon_serves_decode),
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_max_seq),
    };
    /* CTest runs one case a test (tests/CMakeLists.txt, CHAM_SPLIT_TESTS). */
    return test_run_cases(tests, argc, argv, NULL, NULL);
}
