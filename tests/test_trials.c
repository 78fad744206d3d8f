/* GenPolicy's trials are timed as their policies run: the time a trial
 * is kept by is a step time its policy gives in Stable (Stable's steps
 * differ by a few percent where the allocator moves memory in some steps
 * and not in others: docs/allocator.md, "Waiting for the frees, not the
 * stream"; the kept time lies within 1% of their range). What the
 * policy before left away, and what the new one sends away before its
 * first step, move between the steps, not in the trial (docs/executor.md,
 * "What the plan before left away comes back between the steps"). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "support/cases.h"

#include "chameleon/chameleon.h"
#include "chameleon/workload.h"

/* The log's "kept policy K of N (...): T ns a step" line (the last one),
 * and the last steps' stages and passive swaps. */
#define LAST 4
typedef struct kept {
    int policy, of;
    unsigned long long ns;
    int trials_timed, timed_before;
    cham_stage_t stage[LAST];
    uint64_t passive[LAST];
    uint64_t stable_min_ns, stable_max_ns;   /* over the Stable steps that needed
                                                no passive or on-demand swap */
    uint64_t last_ns;             /* the last step's time */
    int switches;                 /* the check in Stable applied another trial's policy */
    double first_stable_ms;       /* what it measured the kept policy at */
    double final_stable_ms;       /* ... and the one it kept for good at (0: none) */
} kept_t;

static void on_step(const cham_run_step_t *s, void *user)
{
    kept_t *k = user;
    memmove(k->stage, k->stage + 1, (LAST - 1) * sizeof *k->stage);
    memmove(k->passive, k->passive + 1, (LAST - 1) * sizeof *k->passive);
    k->stage[LAST - 1] = s->stage;
    k->passive[LAST - 1] = s->passive;
    k->last_ns = s->time_ns;
    if (s->stage == CHAM_STAGE_STABLE && !s->passive && !s->on_demand) {
        if (!k->stable_min_ns || s->time_ns < k->stable_min_ns)
            k->stable_min_ns = s->time_ns;
        if (s->time_ns > k->stable_max_ns)
            k->stable_max_ns = s->time_ns;
    }
}

static void on_log(const char *line, void *user)
{
    kept_t *k = user;
    const char *p = strstr(line, "kept policy ");
    if (p) {
        const char *t = strstr(p, "): ");
        if (sscanf(p, "kept policy %d of %d", &k->policy, &k->of) != 2 || !t ||
            sscanf(t, "): %llu ns a step", &k->ns) != 1)
            fail_msg("unexpected log line: %s", line);
        k->timed_before = k->trials_timed;   /* this GenPolicy's */
        k->trials_timed = 0;
    }
    if (strstr(line, " took ") && strstr(line, "policy "))
        k->trials_timed++;
    /* The check in Stable: its trial's time is the one to compare with. */
    double stable_ms, trial_ms;
    if ((p = strstr(line, "the policy applied takes "))) {
        if (sscanf(p, "the policy applied takes %lf ms a step in Stable", &stable_ms) != 1)
            fail_msg("unexpected log line: %s", line);
        if (!k->switches++)
            k->first_stable_ms = stable_ms;
    }
    if ((p = strstr(line, "kept for good: "))) {
        if (sscanf(p, "kept for good: the policy that takes %lf ms a step in Stable (its trial "
                      "%lf ms)", &stable_ms, &trial_ms) != 2)
            fail_msg("unexpected log line: %s", line);
        k->final_stable_ms = stable_ms;
        k->ns = (unsigned long long)(trial_ms * 1e6);
    }
}

/* Runs model at frac of its unconstrained peak on preset; the kept trial's
 * time must be the Stable steps' within 1% (simulated time: exact up to
 * the steps' own differences). */
static kept_t kept_time_is_stable_time(const char *model, uint32_t mbs, uint32_t seq,
                                       uint32_t dp, uint32_t zero, const char *preset,
                                       double frac, uint64_t steps)
{
    cham_run_config_t c = cham_run_config_default();
    c.plan_optimizer = false;    /* the runtime's trials of one program */
    assert_int_equal(cham_model_preset(model, &c.model), CHAM_OK);
    c.model.mbs = mbs;
    c.model.seq = seq;
    c.model.dp = dp;
    c.model.zero = zero;
    c.runtime.device.preset = preset;
    c.steps = 16;
    c.strategy = CHAM_STRATEGY_IDEAL;
    cham_run_result_t r;
    assert_int_equal(cham_run(&c, &r), CHAM_OK);
    assert_int_equal(r.status, CHAM_OK);
    c.runtime.device.capacity = (uint64_t)((double)r.peak_device_bytes * frac);
    c.strategy = CHAM_STRATEGY_CHAMELEON;
    c.steps = steps;
    kept_t k = {0};
    c.log = on_log;
    c.on_step = on_step;
    c.user = &k;
    assert_int_equal(cham_run(&c, &r), CHAM_OK);
    assert_int_equal(r.status, CHAM_OK);
    assert_int_equal(r.hazards, 0);
    assert_true(k.timed_before >= 2);
    assert_true(k.policy >= 1 && k.of == k.timed_before);
    /* In the end Stable needs no passive swap. */
    for (int i = 0; i < LAST; i++) {
        assert_int_equal(k.stage[i], CHAM_STAGE_STABLE);
        if (k.passive[i])
            fail_msg("%s on %s at %.0f%%: %llu passive swaps in Stable, %d steps from the end",
                     model, preset, 100 * frac, (unsigned long long)k.passive[i], LAST - i);
    }
    assert_true(k.stable_min_ns > 0);
    double kept_s = (double)k.ns / 1e9, lo = (double)k.stable_min_ns / 1e9,
           hi = (double)k.stable_max_ns / 1e9;
    if (kept_s < 0.99 * lo || kept_s > 1.01 * hi)
        fail_msg("%s on %s at %.0f%%: policy %d of %d kept at %.6f s a step, Stable runs it in "
                 "%.6f to %.6f s (median %.6f s)", model, preset, 100 * frac, k.policy, k.of,
                 kept_s, lo, hi, r.step_time_s);
    return k;
}

/* GPT-2 1.5B where the swap-only trials move model state and the ones
 * after them found it on the host. */
static void test_gpt2(void **state)
{
    (void)state;
    kept_time_is_stable_time("gpt2-1.5b", 8, 1024, 1, 0, "ascend-910b", 0.67, 16);
    kept_time_is_stable_time("gpt2-1.5b", 8, 1024, 1, 0, "h100-80g", 0.60, 16);
}

/* Llama 2 7B with ZeRO-3: activations decide. */
static void test_llama2(void **state)
{
    (void)state;
    kept_time_is_stable_time("llama2-7b", 4, 4096, 8, 3, "ascend-910b", 0.50, 16);
}

/* GPT-2 1.5B at half its peak: AdamW's moments leave after their update
 * and their blocks come free in the next step's forward, their copies
 * running on into it. A trial starts from an idle device, so the replay's
 * cost of those copies is added to it. On the H100 the first Stable steps
 * meet fragmentation the trial had not (passive swaps at the logits in 4
 * steps), then none. */
static void test_gpt2_state_runs_on(void **state)
{
    (void)state;
    kept_time_is_stable_time("gpt2-1.5b", 8, 1024, 1, 0, "ascend-910b", 0.50, 16);
    kept_time_is_stable_time("gpt2-1.5b", 8, 1024, 1, 0, "h100-80g", 0.50, 24);
}

/* GPT-2 1.5B at 69% of its peak on the A100: the trial kept needs
 * passive swaps in Stable (about a quarter slower than its trial), where
 * the next trial's policy does not (simulated). The check applies that
 * one after one timed step and keeps it. (If a change to the planner or
 * the device model moves this point, find another where the log reads
 * "from now on"; `chameleon simulate --model gpt2-1.5b --mbs 8 --seq 1024
 * --optimizer device --capacity P% --steps 24 --log` shows them, its P%
 * a little off this test's fraction.) */
static void test_check_in_stable_switches(void **state)
{
    (void)state;
    kept_t k = kept_time_is_stable_time("gpt2-1.5b", 8, 1024, 1, 0, "a100-80g", 0.69, 24);
    assert_int_equal(k.switches, 1);
    assert_true(k.final_stable_ms > 0 && k.final_stable_ms < k.first_stable_ms);
    assert_true((double)k.last_ns < k.first_stable_ms * 1e6);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gpt2),
        cmocka_unit_test(test_llama2),
        cmocka_unit_test(test_gpt2_state_runs_on),
        cmocka_unit_test(test_check_in_stable_switches),
    };
    /* CTest runs one case a test (tests/CMakeLists.txt, CHAM_SPLIT_TESTS). */
    return test_run_cases(tests, argc, argv, NULL, NULL);
}
