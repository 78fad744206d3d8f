/* GenPolicy's trials are timed as their policies run: the time a trial
 * is kept by is a step time its policy gives in Stable (Stable's steps
 * differ by a few percent where the allocator moves memory in some steps
 * and not in others: docs/allocator.md, "Waiting for the frees, not the
 * stream"; the kept time lies within 1% of their range). What the
 * policy before left away, and what the new one sends away before its
 * first step, move between the steps, not in the trial (docs/executor.md,
 * "What the plan before left away comes back between the steps"). A
 * class's kept policy that runs short on the heavier steps of a loop that
 * skips layers is made again from one of them, and goes back where that
 * runs short more often (executor.md, "Sequence classes"). */
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

/* Runs c with unlimited memory for ideal_steps, then under Chameleon for
 * steps at frac of that run's peak (of the tensors, as `simulate
 * --capacity P%` takes it, with tensor_peak; else of the device), with
 * the hooks: the run ends with no hazard. */
static cham_run_result_t run_at(cham_run_config_t *c, uint64_t ideal_steps, bool tensor_peak,
                                double frac, uint64_t steps, cham_log_hook_t log,
                                void (*step_hook)(const cham_run_step_t *, void *), void *user)
{
    c->steps = ideal_steps;
    c->strategy = CHAM_STRATEGY_IDEAL;
    cham_run_result_t r;
    assert_int_equal(cham_run(c, &r), CHAM_OK);
    assert_int_equal(r.status, CHAM_OK);
    uint64_t peak = tensor_peak ? r.peak_tensor_bytes : r.peak_device_bytes;
    c->runtime.device.capacity = (uint64_t)((double)peak * frac);
    c->strategy = CHAM_STRATEGY_CHAMELEON;
    c->steps = steps;
    c->log = log;
    c->on_step = step_hook;
    c->user = user;
    assert_int_equal(cham_run(c, &r), CHAM_OK);
    assert_int_equal(r.status, CHAM_OK);
    assert_int_equal(r.hazards, 0);
    return r;
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
    kept_t k = {0};
    cham_run_result_t r = run_at(&c, 16, false, frac, steps, on_log, on_step, &k);
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
    kept_time_is_stable_time("gpt2-1.5b", 8, 1024, 1, 0, "ascend-910b", 0.50, 24);
    kept_time_is_stable_time("gpt2-1.5b", 8, 1024, 1, 0, "h100-80g", 0.50, 32);
}

/* GPT-2 1.5B at 62% of its peak on the A100: the trial kept runs slower
 * in Stable than in its trial, and slower than the next trial's policy
 * does there (simulated). The check applies that one after one timed
 * step and keeps it. (If a change to the planner or
 * the device model moves this point, find another where the log reads
 * "from now on"; `chameleon simulate --model gpt2-1.5b --mbs 8 --seq 1024
 * --optimizer device --capacity P% --steps 24 --log` shows them, its P%
 * a little off this test's fraction.) */
static void test_check_in_stable_switches(void **state)
{
    (void)state;
    kept_t k = kept_time_is_stable_time("gpt2-1.5b", 8, 1024, 1, 0, "a100-80g", 0.62, 24);
    assert_int_equal(k.switches, 1);
    assert_true(k.final_stable_ms > 0 && k.final_stable_ms < k.first_stable_ms);
    assert_true((double)k.last_ns < k.first_stable_ms * 1e6);
}

/* A run that skips layers at random: each step's passive swaps and
 * stage, the kept policies made again from a heavier step, and whether
 * the loop turned to sequence classes. */
enum { DROP_STEPS = 80 };
typedef struct dropped {
    uint64_t passive[DROP_STEPS];
    uint64_t time_ns[DROP_STEPS];
    cham_stage_t stage[DROP_STEPS];
    int covers;
    int backs;                    /* policies made again sent back */
    int slower_backs;             /* ... for running slower */
    double floor_gib;             /* the last one sent back was made from a step this heavy */
    int per_work;                 /* trials timed at another step's work */
    int restarts;                 /* GenPolicy begun again from a heavier step */
    bool classes;
} dropped_t;

static void on_drop_step(const cham_run_step_t *s, void *user)
{
    dropped_t *d = user;
    if (s->step < DROP_STEPS) {
        d->passive[s->step] = s->passive;
        d->time_ns[s->step] = s->time_ns;
        d->stage[s->step] = s->stage;
    }
}

static void on_drop_log(const char *line, void *user)
{
    dropped_t *d = user;
    double heavier, before;
    d->classes |= strstr(line, "a policy per class from now on") != NULL;
    d->per_work += strstr(line, "at the first trial's work") != NULL;
    const char *back = strstr(line, "that one back, until a step heavier than ");
    if (back) {
        if (sscanf(back, "that one back, until a step heavier than %lf GiB", &d->floor_gib) != 1)
            fail_msg("unexpected log line: %s", line);
        d->backs++;
        d->slower_backs += strstr(line, "steps timed, at the same work") != NULL;
    }
    if (strstr(line, "GenPolicy starts again")) {
        if (sscanf(line, "step %*d: heavier than the step the trials so far were made from "
                         "(%lf against %lf GiB", &heavier, &before) != 2)
            fail_msg("unexpected log line: %s", line);
        assert_true(heavier > before);
        d->restarts++;
    }
    if (!strstr(line, "the policy made again from this step's profile"))
        return;
    if (sscanf(line, "step %*d: ran short under class %*u's kept policy, %lf GiB without swaps "
                     "against its profile's %lf GiB", &heavier, &before) != 2)
        fail_msg("unexpected log line: %s", line);
    assert_true(heavier > before);
    assert_true(heavier > d->floor_gib);   /* never again from a step as light */
    d->covers++;
}

/* GPT-2 1.5B's shapes with `layers` layers of `hidden` (mbs 4, seq seq),
 * each skipped with probability `drop` (drawn from `seed`), on the H100
 * (the device's optimizer program). */
static cham_run_config_t dropping(uint32_t layers, uint32_t hidden, uint32_t seq, double drop,
                                  uint64_t seed)
{
    cham_run_config_t c = cham_run_config_default();
    c.plan_optimizer = false;
    assert_int_equal(cham_model_preset("gpt2-1.5b", &c.model), CHAM_OK);
    c.model.layers = layers;
    c.model.hidden = hidden;
    c.model.ffn = 4 * hidden;
    c.model.heads = c.model.kv_heads = hidden / 64;
    c.model.mbs = 4;
    c.model.seq = seq;
    c.model.layer_drop = drop;
    c.model.seed = seed;
    c.runtime.device.preset = "h100-80g";
    return c;
}

/* Runs c at share of its peak for `steps` steps (at most DROP_STEPS), with
 * no hazard. */
static dropped_t run_dropping_at(cham_run_config_t c, double share, uint64_t steps)
{
    assert_true(steps <= DROP_STEPS);
    dropped_t d = {0};
    run_at(&c, steps, true, share, steps, on_drop_log, on_drop_step, &d);
    return d;
}

/* dropping()'s job at 60% of its peak for DROP_STEPS steps. */
static dropped_t run_dropping(uint32_t layers, uint32_t hidden, uint32_t seq, double drop,
                              uint64_t seed)
{
    return run_dropping_at(dropping(layers, hidden, seq, drop, seed), 0.6, DROP_STEPS);
}

static int short_steps(const dropped_t *d, int from)
{
    int n = 0;
    for (int s = from; s < DROP_STEPS; s++)
        n += d->passive[s] > 0;
    return n;
}

/* GPT-2 1.5B (48 layers of 1600) skipping a fifth of its layers: every
 * step has another op sequence but the same canonical one (profile/
 * canon.c), so the loop stays in Algorithm 1's stages, with no change
 * after GenPolicy and no sequence classes. Its trials are made from the
 * heaviest step seen and timed per work; a step heavier than the one the
 * first trial was made from begins GenPolicy again (twice here, when
 * written), and the kept policy covers the steps: Stable from step 20
 * on, and from step 40 at most one in ten runs short (passive swaps; 2
 * of 40 when written). Taken for different sequences, as before, the
 * steps turned the loop to sequence classes at step 3. */
static void test_layer_drop_is_one_loop(void **state)
{
    (void)state;
    dropped_t d = run_dropping(48, 1600, 2048, 0.2, 1);
    assert_false(d.classes);
    assert_true(d.per_work >= 1);
    assert_true(d.restarts >= 1);
    for (int s = 20; s < DROP_STEPS; s++)
        assert_int_equal(d.stage[s], CHAM_STAGE_STABLE);
    int n = short_steps(&d, 40);
    if (n > 4)
        fail_msg("%d of steps 40-79 ran short", n);
}

/* 24 layers of 1600, a fifth skipped (seed 18): the kept policy runs short
 * on a heavier step than any its trials saw and is made again from it;
 * made again, it runs short on more of its first steps than the one
 * before, which comes back; a policy is made again after that only from
 * a step heavier than the one the policy sent back was made from
 * (on_drop_log asserts it). When written: made again at step 26 from
 * 18.081 GiB, back at step 28 (short on 2 of 2 steps, the one before on
 * 4 of 18), made again at step 50 from 18.277 GiB. Seed 1 did this until
 * the Stable check also tried the trials that ran short (its loop now
 * keeps another policy, whose policy made again is not sent back). */
static void test_policy_made_again_goes_back(void **state)
{
    (void)state;
    dropped_t d = run_dropping(24, 1600, 1024, 0.2, 18);
    assert_true(d.covers >= 1);
    assert_true(d.backs >= 1);
}

/* A step as heavy as the one a policy was made again from may skip other
 * layers, and that policy runs short on it as the one before did on the
 * heavier steps; only a step heavier still covers both. GPT-2's shapes on
 * 12 layers (2048 tokens, torch.autocast), a fifth skipped (seed 5), at
 * 70% of the peak: the kept policy, made from a step that skipped two,
 * ran short on those that skipped fewer; made again from one that skipped
 * one, it ran short on others that skipped one and went back, for good
 * until session 63, and a third of steps 40-59 ran short (3-5 passive
 * swaps, 150-200 ms against 65-85 ms). Now the next short step heavier
 * than that (one that skipped none) is made again from: none of steps
 * 40-59 runs short. */
static void test_made_again_from_a_heavier_step_after_going_back(void **state)
{
    (void)state;
    cham_run_config_t c = dropping(12, 1600, 2048, 0.2, 5);
    c.model.precision = CHAM_PRECISION_AUTOCAST;
    dropped_t d = run_dropping_at(c, 0.7, 60);
    assert_true(d.backs >= 1);
    assert_true(d.covers >= 2);
    int n = 0;
    for (int s = 40; s < 60; s++)
        n += d.passive[s] > 0;
    if (n > 1)
        fail_msg("%d of steps 40-59 ran short", n);
}

/* A policy made again from a heavier step that it cannot cover either
 * runs short no more often but slower on every step: it goes back.
 * Mixtral's shapes, 4 layers of 8k tokens (mbs 2, torch.autocast), each
 * skipped with probability 0.2 (seed 1), on the A100 at 20% of the peak:
 * the kept policy took 12.5-15 s a step with a few short; made again from
 * a step 6% heavier, partial there too, 20.2 s on every step, kept for
 * good until session 64 (steps 30-59: 19.79 s a step on average). Now it
 * goes back after its probation, timed: 13.30 s (simulated). */
static void test_made_again_and_slower_goes_back(void **state)
{
    (void)state;
    cham_run_config_t c = cham_run_config_default();
    c.plan_optimizer = false;
    assert_int_equal(cham_model_preset("mixtral-8x7b", &c.model), CHAM_OK);
    c.model.layers = 4;
    c.model.seq = 8192;
    c.model.mbs = 2;
    c.model.precision = CHAM_PRECISION_AUTOCAST;
    c.model.layer_drop = 0.2;
    c.model.seed = 1;
    c.runtime.device.preset = "a100-80g";
    dropped_t d = run_dropping_at(c, 0.2, 60);
    assert_true(d.slower_backs >= 1);
    uint64_t sum = 0;
    for (int s = 30; s < 60; s++)
        sum += d.time_ns[s];
    if (sum / 30 > 16000000000ull)
        fail_msg("steps 30-59 took %.3f s on average", (double)sum / 30 / 1e9);
}

/* The kept policy, made from a heavier step, covers the lighter ones.
 * 24 layers of 1024, a quarter skipped: the clock stands at the profiled
 * step's edges of the blocks, so the loss and the head's backward of a
 * step that skipped more layers run where the profile's did, not a few
 * blocks' swap-ins later; before, every step lighter than the profiled
 * one ran short at the loss (4 passive swaps, 67 ms against 47 ms; 35 of
 * steps 40-79). 12 layers of 1600, a tenth skipped (seed 2): the weights
 * of the layers a step skipped stand in for those of the last layers the
 * plan sends away; before, 27 of steps 40-79 ran short at the loss,
 * their skipped layers' weights on the device. */
static void test_lighter_steps_run_clean(void **state)
{
    (void)state;
    const struct {
        uint32_t layers, hidden;
        double drop;
        uint64_t seed;
    } runs[] = {{24, 1024, 0.25, 1}, {12, 1600, 0.1, 2}};
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        dropped_t d = run_dropping(runs[i].layers, runs[i].hidden, 1024, runs[i].drop,
                                   runs[i].seed);
        int n = short_steps(&d, 40);
        if (n > 2)
            fail_msg("%u layers of %u: %d of steps 40-79 ran short", runs[i].layers,
                     runs[i].hidden, n);
    }
}

/* A trial's first steps may pin host memory that later steps of its
 * policy find in the pool: each such step is timed again on the next,
 * while it was clean and faster than the step before. Records the
 * pinned step's time and the policy's time in the end. */
typedef struct retimed {
    int policy;                   /* the policy timed again (0: none yet) */
    double pinned_ms, took_ms;
} retimed_t;

static void on_retime_log(const char *line, void *user)
{
    retimed_t *r = user;
    int k;
    double ms;
    const char *p = strstr(line, "policy ");
    if (!p)
        return;
    if (strstr(line, "pinned new host memory")) {
        if (sscanf(p, "policy %d's step (%lf ms)", &k, &ms) != 2)
            fail_msg("unexpected log line: %s", line);
        if (!r->policy || r->policy == k) {
            r->policy = k;
            r->pinned_ms = ms;    /* the last time it pinned */
        }
    } else if (r->policy && !r->took_ms && sscanf(p, "policy %d took %lf ms", &k, &ms) == 2) {
        assert_int_equal(k, r->policy);   /* the policy timed again, not the next */
        r->took_ms = ms;
    }
}

/* GPT-2 1.5B's shapes with 16 layers (mbs 4, 1024 tokens) at half its
 * peak on the H100, the optimizer on the device: its first trial pins
 * host memory in its first step (169.5 ms when written) and is timed at
 * 103.8 ms, the time its steps take once the pool holds what they need. */
static void test_trial_timed_again_after_pinning(void **state)
{
    (void)state;
    cham_run_config_t c = cham_run_config_default();
    c.plan_optimizer = false;
    assert_int_equal(cham_model_preset("gpt2-1.5b", &c.model), CHAM_OK);
    c.model.layers = 16;
    c.model.mbs = 4;
    c.model.seq = 1024;
    c.runtime.device.preset = "h100-80g";
    retimed_t r = {0};
    run_at(&c, 4, true, 0.5, 14, on_retime_log, NULL, &r);
    assert_true(r.policy >= 1);
    assert_true(r.took_ms > 0 && r.took_ms < r.pinned_ms);
}

/* Passive swaps per step, for the test below. */
static void on_short_step(const cham_run_step_t *s, void *user)
{
    uint64_t *passive = user;
    if (s->step < 24)
        passive[s->step] = s->passive;
}

/* A kept policy that ran clean in its trial and short in every Stable
 * step, where no other trial had run clean (GPT-2's shapes on 4 layers,
 * 2048 tokens, mbs 2, the rtx3090 with the classic allocator at half its
 * peak): the check in Stable tries the trials that ran short, and one of
 * them runs clean in Stable. Before, nothing was compared and the steps
 * to the end needed 2-4 passive swaps each (0.3786 s a step against
 * 0.2413 s now, when written). */
static void test_clean_kept_that_runs_short_is_replaced(void **state)
{
    (void)state;
    cham_run_config_t c = cham_run_config_default();
    assert_int_equal(cham_model_preset("gpt2", &c.model), CHAM_OK);
    c.model.layers = 4;
    c.model.seq = 2048;
    c.model.mbs = 2;
    c.model.seed = 4;
    c.runtime.device.preset = "rtx3090-24g";
    c.runtime.allocator = CHAM_ALLOCATOR_CLASSIC;
    uint64_t passive[24] = {0};
    run_at(&c, 24, true, 0.5, 24, NULL, on_short_step, passive);
    for (int s = 18; s < 24; s++)
        if (passive[s])
            fail_msg("step %d needed %llu passive swaps", s, (unsigned long long)passive[s]);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gpt2),
        cmocka_unit_test(test_llama2),
        cmocka_unit_test(test_gpt2_state_runs_on),
        cmocka_unit_test(test_check_in_stable_switches),
        cmocka_unit_test(test_clean_kept_that_runs_short_is_replaced),
        cmocka_unit_test(test_layer_drop_is_one_loop),
        cmocka_unit_test(test_policy_made_again_goes_back),
        cmocka_unit_test(test_made_again_from_a_heavier_step_after_going_back),
        cmocka_unit_test(test_made_again_and_slower_goes_back),
        cmocka_unit_test(test_lighter_steps_run_clean),
        cmocka_unit_test(test_trial_timed_again_after_pinning),
    };
    /* CTest runs one case a test (tests/CMakeLists.txt, CHAM_SPLIT_TESTS). */
    return test_run_cases(tests, argc, argv, NULL, NULL);
}
