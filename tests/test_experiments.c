/* The experiments at their reduced size (`chameleon experiment NAME
 * --reduced`), each asserting the paper's qualitative result: Chameleon
 * fits larger sizes than native along every dimension; it beats full
 * recomputation where the link can hide the swaps; Capuchin fails on a
 * changed sequence while Chameleon does not; the custom recordStream
 * reuses blocks sooner than PyTorch's; the policy cache shortens WarmUp.
 * And the result files are written; plot axes stay finite and short for
 * any data range; NaN and infinities become JSON null. */
#include <ctype.h>
#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "support/cases.h"

#include <jansson.h>

#include "experiment.h"
#include "fidelity.h"

static void run_at(const char *name, bool reduced, exp_result_t *r)
{
    const exp_def_t *e = exp_find(name);
    assert_non_null(e);
    exp_config_t c = {.device = e->device, .reduced = reduced};
    char err[1024] = "";
    memset(r, 0, sizeof *r);
    if (e->run(&c, r, err, sizeof err) != CHAM_OK)
        fail_msg("%s: %s", name, err);
}

static void run(const char *name, exp_result_t *r)
{
    run_at(name, true, r);
}

static void test_max_size(void **state)
{
    (void)state;
    exp_result_t r;
    run("max-size", &r);
    const exp_table_t *t = &r.tables[0];
    const char *dims[] = {"batch", "layers", "seq", "hidden"};
    for (size_t d = 0; d < 4; d++) {
        double native = exp_table_get(t, dims[d], "native");
        double cham = exp_table_get(t, dims[d], "chameleon");
        assert_true(native > 0);
        if (!(cham > native))
            fail_msg("%s: chameleon %g, native %g", dims[d], cham, native);
        assert_true(exp_table_get(t, dims[d], "recompute") >= native);
    }
    exp_result_free(&r);
}

/* model-size, reduced, one part (exp_config_t.part: 1-4, one search each,
 * about 30 s of CPU) into *r, so the four are CTest tests of their own. */
static void run_model_size_part(unsigned part, exp_result_t *r)
{
    const exp_def_t *e = exp_find("model-size");
    assert_non_null(e);
    exp_config_t c = {.device = e->device, .reduced = true, .part = part};
    char err[1024] = "";
    memset(r, 0, sizeof *r);
    if (e->run(&c, r, err, sizeof err) != CHAM_OK)
        fail_msg("model-size part %u: %s", part, err);
}

/* Every method that moves model state trains larger models than native;
 * ProTrain's plan at least as large as unplanned offload, and Chameleon
 * (optimizer on the host) at least as large as ProTrain. Part `part` is
 * the one row on `device` along `dim`. */
static void check_model_size_part(unsigned part, const char *device, const char *dim)
{
    exp_result_t r;
    run_model_size_part(part, &r);
    const exp_table_t *t = &r.tables[0];
    assert_int_equal(t->n_rows, 1);
    const exp_cell_t *row = t->cells;
    assert_string_equal(row[0].text, device);
    assert_string_equal(row[1].text, dim);
    double native = row[2].num, zero = row[3].num, protrain = row[4].num, host = row[6].num;
    if (!(native > 0 && zero > native && protrain >= zero && host >= protrain))
        fail_msg("%s %s: native %g, zero-offload %g, protrain %g, chameleon+host %g",
                 row[0].text, row[1].text, native, zero, protrain, host);
    assert_true(row[7].num > 0);                      /* ProTrain's step was measured */
    /* Its points sit where the whole experiment's plot puts this row. */
    assert_int_equal(r.plots[0].n_series, 5);
    for (size_t i = 0; i < r.plots[0].n_series; i++) {
        assert_int_equal(r.plots[0].series[i].n, 1);
        assert_true(r.plots[0].series[i].x[0] == part);
    }
    exp_result_free(&r);
}

static void test_model_size_910b_layers(void **state)
{
    (void)state;
    check_model_size_part(1, "ascend-910b", "layers");
}

static void test_model_size_910b_hidden(void **state)
{
    (void)state;
    check_model_size_part(2, "ascend-910b", "hidden");
}

static void test_model_size_a100_layers(void **state)
{
    (void)state;
    check_model_size_part(3, "a100-80g", "layers");
}

static void test_model_size_a100_hidden(void **state)
{
    (void)state;
    check_model_size_part(4, "a100-80g", "hidden");
}

/* A part model-size does not have is refused, not run as the whole
 * experiment or as nothing (the whole experiment, part 0, is the four
 * parts' rows in this order: the cases above, and `chameleon experiment
 * model-size`, which runs it). */
static void test_model_size_bad_part(void **state)
{
    (void)state;
    const exp_def_t *e = exp_find("model-size");
    assert_non_null(e);
    exp_config_t c = {.device = e->device, .reduced = true, .part = 5};
    char err[1024] = "";
    exp_result_t r = {0};
    assert_int_equal(e->run(&c, &r, err, sizeof err), CHAM_ERR_INVALID_ARG);
    assert_non_null(strstr(err, "not 5"));
    exp_result_free(&r);
}

static void test_scaling(void **state)
{
    (void)state;
    exp_result_t r;
    run("scaling", &r);
    const exp_table_t *t = &r.tables[0];
    /* Where native fits, the swaps hide behind compute: Chameleon is as
     * fast as native and faster than recomputation. */
    const char *points[] = {"batch=1", "seq=512", "hidden=512"};
    for (size_t i = 0; i < 3; i++) {
        double native = exp_table_get(t, points[i], "native s");
        double cham = exp_table_get(t, points[i], "chameleon s");
        double rec = exp_table_get(t, points[i], "recompute s");
        assert_true(native > 0 && cham > 0 && rec > 0);
        assert_true(cham <= native * 1.001);
        assert_true(cham < rec);
    }
    assert_int_equal(r.n_plots, 3);
    exp_result_free(&r);
}

static void test_stability(void **state)
{
    (void)state;
    exp_result_t r;
    run("stability", &r);
    const exp_table_t *t = &r.tables[0];
    assert_true(exp_table_get(t, "chameleon", "steps run") == 450);
    assert_true(isnan(exp_table_get(t, "chameleon", "failed at step")));
    assert_true(exp_table_get(t, "capuchin", "failed at step") == 200);   /* the first validation */
    assert_non_null(strstr(r.summary, "Capuchin failed at the first step"));
    exp_result_free(&r);
}

static void test_record_stream(void **state)
{
    (void)state;
    exp_result_t r;
    /* The full size (under a second): the reduced one's 3 to 6 layers
     * swap a few small blocks, whose copies the policies wait out either
     * way. */
    run_at("record-stream", false, &r);
    const exp_table_t *t = &r.tables[0];
    assert_true(t->n_rows >= 3);
    for (size_t i = 0; i < t->n_rows; i++) {
        double custom = t->cells[i * t->n_cols + 3].num, torch = t->cells[i * t->n_cols + 4].num;
        if (!(custom > 0 && custom < torch))
            fail_msg("row %zu: custom reuse %g, pytorch %g", i, custom, torch);
    }
    exp_result_free(&r);
}

static void test_policy_cache(void **state)
{
    (void)state;
    exp_result_t r;
    run("policy-cache", &r);
    const exp_table_t *t = &r.tables[0];
    /* Validating every 7 steps, Algorithm 1 alone never reaches Stable;
     * with classes nearly every step after the 50th runs Stable (issue 19:
     * 95%). (Whether that is faster depends on how good the kept policies
     * are: docs/experiments.md.) */
    assert_true(exp_table_get(t, "on", "steps in WarmUp") <
                exp_table_get(t, "off", "steps in WarmUp"));
    assert_true(exp_table_get(t, "on", "Stable after step 50 %") >= 95);
    assert_true(exp_table_get(t, "off", "Stable after step 50 %") < 50);
    exp_result_free(&r);
}

static const fid_case_t *fidelity_case(const char *id)
{
    for (size_t i = 0; i < fid_n_cases; i++)
        if (strcmp(fid_cases[i].id, id) == 0)
            return &fid_cases[i];
    fail_msg("fidelity: no case %s", id);
    return NULL;
}

/* How many different texts column col of a fidelity table's rows within
 * `within` percent hold (all rows when within is infinite). */
static size_t fidelity_distinct(const exp_table_t *t, size_t col, double within)
{
    size_t n = 0;
    for (size_t i = 0; i < t->n_rows; i++) {
        const exp_cell_t *row = &t->cells[i * t->n_cols];
        if (!(fabs(row[5].num) <= within))
            continue;
        bool seen = false;
        for (size_t k = 0; k < i; k++) {
            const exp_cell_t *other = &t->cells[k * t->n_cols];
            seen = seen || (fabs(other[5].num) <= within &&
                            strcmp(other[col].text, row[col].text) == 0);
        }
        n += !seen;
    }
    return n;
}

/* fidelity, at full size (native runs only, seconds): a row for every
 * published figure, each naming its source, with the published figure
 * converted as docs/fidelity.md says and ours beside it; the simulated
 * model has the parameter count its source prints. Issue 51's target for
 * time holds: within 15% at eight runs or more, from three sources or
 * more, on two presets or more; and for memory: within 10% at ten runs or
 * more, from three sources or more. */
static void test_fidelity(void **state)
{
    (void)state;
    size_t want_mem = 0, want_time = 0;
    for (size_t i = 0; i < fid_n_cases; i++) {
        want_mem += !isnan(fid_memory_bytes(&fid_cases[i]));
        want_time += !isnan(fid_step_seconds(&fid_cases[i]));
    }
    exp_result_t r;
    run_at("fidelity", false, &r);
    const exp_table_t *mem = &r.tables[0], *time = &r.tables[1];
    assert_int_equal(mem->n_rows, want_mem);
    assert_int_equal(time->n_rows, want_time);
    size_t mem_within = 0, time_within = 0;
    for (int k = 0; k < 2; k++) {
        const exp_table_t *t = k ? time : mem;
        for (size_t i = 0; i < t->n_rows; i++) {
            const exp_cell_t *row = &t->cells[i * t->n_cols];
            double published = row[3].num, ours = row[4].num, error = row[5].num;
            assert_true(isfinite(published) && published > 0);
            assert_true(isfinite(ours) && ours > 0);
            assert_float_equal(error, 100 * (ours / published - 1), 1e-9);
            mem_within += !k && fabs(error) <= 10;
            time_within += k && fabs(error) <= 15;
        }
    }
    assert_true(fidelity_distinct(mem, 1, INFINITY) >= 3);
    assert_true(time_within >= 8);
    assert_true(fidelity_distinct(time, 1, 15) >= 3);     /* sources */
    assert_true(fidelity_distinct(time, 2, 15) >= 2);     /* presets */
    assert_true(mem_within >= 10);
    assert_true(fidelity_distinct(mem, 1, 10) >= 3);      /* sources */
    /* The units: ms per iteration, tokens/s per GPU and of the job, MiB. */
    assert_float_equal(fid_step_seconds(fidelity_case("DP_1x1x1_2_1536x16")), 0.46412, 1e-12);
    assert_float_equal(fid_step_seconds(fidelity_case("mpt-7b s2048 a100")),
                       96.0 * 2048 / (4641.0 * 8), 1e-12);
    assert_float_equal(fid_step_seconds(fidelity_case("gpt3-2.7b 8xa100")), 6.4, 1e-12);
    assert_float_equal(fid_memory_bytes(fidelity_case("MP_1x1x1_8_768x12")), 9810.0 * 1048576,
                       1e-3);
    assert_float_equal(fid_memory_bytes(fidelity_case("llama2-7b s4096 a800")), 57.0 * 1073741824,
                       1e-3);
    cham_model_config_t m = fid_model(fidelity_case("mpt-7b s2048 a100"));
    assert_int_equal(cham_model_parameters(&m), 6658859008ull);
    exp_result_free(&r);
}

/* The experiments whose results the tests above check in detail. */
static const char *const checked_elsewhere[] = {
    "max-size", "scaling", "stability", "record-stream", "policy-cache",
    "profiling-overhead", "parallelism", "budget-sweep", "model-size", "swapadvisor",
    "kv-offload", "zoo", "fidelity",
};

/* Every experiment, reduced, gives a non-empty table, a plot and a
 * summary: the ones above are checked in detail, every other one (today
 * layer-scaling, which reports differences to the paper's figures rather
 * than a direction) is run here, so a new experiment cannot go untested. */
static void test_every_experiment_runs(void **state)
{
    (void)state;
    size_t n_checked = sizeof checked_elsewhere / sizeof checked_elsewhere[0];
    for (size_t k = 0; k < n_checked; k++)
        if (!exp_find(checked_elsewhere[k]))
            fail_msg("%s: listed as checked but not an experiment", checked_elsewhere[k]);
    size_t run_here = 0;
    for (size_t i = 0; i < exp_count(); i++) {
        const char *name = exp_at(i)->name;
        bool checked = false;
        for (size_t k = 0; k < n_checked; k++)
            checked = checked || strcmp(name, checked_elsewhere[k]) == 0;
        if (checked)
            continue;
        exp_result_t r;
        run(name, &r);
        if (!(r.n_tables >= 1 && r.tables[0].n_rows >= 1 && r.n_plots >= 1 &&
              r.plots[0].n_series >= 1 && strlen(r.summary) > 0))
            fail_msg("%s: no table, plot or summary", name);
        exp_result_free(&r);
        run_here++;
    }
    assert_int_equal(run_here + n_checked, exp_count());
    assert_true(run_here >= 1);
    assert_null(exp_find("no-such-experiment"));
}

/* budget-sweep: four set-ups of four budgets each; at every budget the
 * lower bound is below every run of the profiled program's policies
 * (recomputation runs another program); where native fits, Chameleon is
 * native; at the tightest budget something still runs on Llama. */
static void test_budget_sweep(void **state)
{
    (void)state;
    exp_result_t r;
    run("budget-sweep", &r);
    const exp_table_t *t = &r.tables[0];
    assert_int_equal(t->n_rows, 16);
    assert_int_equal(r.n_plots, 4);
    const char *policies[] = {"vdnn s", "capuchin s", "chameleon-swap s", "chameleon s"};
    int bounded = 0;
    for (size_t i = 0; i < t->n_rows; i++) {
        const char *row = t->cells[i * t->n_cols].text;
        double bound = exp_table_get(t, row, "lower bound s");
        double native = exp_table_get(t, row, "native s");
        double cham = exp_table_get(t, row, "chameleon s");
        for (size_t k = 0; k < 4; k++) {
            double v = exp_table_get(t, row, policies[k]);
            if (!isnan(v) && !isnan(bound)) {
                if (v < bound)
                    fail_msg("%s: %s %.6f below the bound %.6f", row, policies[k], v, bound);
                bounded++;
            }
        }
        if (!isnan(native))
            assert_true(fabs(cham - native) <= 1e-9 * native);
    }
    assert_true(bounded >= 30);
    assert_false(isnan(exp_table_get(t, "llama2-7b h100-80g 25%", "chameleon s")));
    exp_result_free(&r);
}

/* zoo, reduced: five jobs at two budgets. Wherever any strategy ran,
 * Chameleon ran too (a run with a hazard fails, so a hazard shows here as
 * Chameleon's missing time; 4-layer Mixtral with ZeRO-3 at 33% on the
 * h100-80g failed until the OOM path's last resort brought a dropped
 * gather back before the op's other 2.9 GB input: dispatch.c,
 * compact_op). No strategy's step is below Chameleon's lower bound (but
 * full recomputation, the caller's other program), a dynamic loop's mean
 * below its loop's bound neither; where native fits, Chameleon is
 * native; a dynamic loop's row has its static loop's step at the same
 * bytes (issue 50's comparison). */
static void test_zoo(void **state)
{
    (void)state;
    exp_result_t r;
    run("zoo", &r);
    const exp_table_t *t = &r.tables[0];
    static const struct {
        const char *row;
        bool dynamic;
    } rows[] = {
        {"gpt2-1.5b L4 b4 s1k a100-80g 60%", false},
        {"gpt2-1.5b L4 b4 s1k a100-80g 33%", false},
        {"llama2-7b L4 z3x8 s1k h100-80g 60%", false},
        {"llama2-7b L4 z3x8 s1k h100-80g 33%", false},
        {"mixtral-8x7b L4 z3x8 s1k h100-80g 60%", false},
        {"mixtral-8x7b L4 z3x8 s1k h100-80g 33%", false},
        {"llama2-7b L4 z3x8 acc2 val5 ascend-910b 60%", true},
        {"llama2-7b L4 z3x8 acc2 val5 ascend-910b 33%", true},
        {"llama3-8b L4 tp2 pp2 s2k a100-80g 60%", false},
        {"llama3-8b L4 tp2 pp2 s2k a100-80g 33%", false},
    };
    size_t n = sizeof rows / sizeof rows[0];
    assert_int_equal(t->n_rows, n);
    assert_int_equal(r.n_plots, n / 2);
    const char *ways[] = {"native s", "chameleon s", "chameleon-swap s", "chameleon host-opt s",
                          "recompute s", "capuchin s", "vdnn s", "protrain s",
                          "hyperoffload s", "swapadvisor s"};
    int bounded = 0;
    for (size_t i = 0; i < n; i++) {
        const char *row = rows[i].row;
        assert_string_equal(t->cells[i * t->n_cols].text, row);
        double bound = exp_table_get(t, row, "lower bound s");
        double cham = exp_table_get(t, row, "chameleon s");
        double native = exp_table_get(t, row, "native s");
        for (size_t k = 0; k < sizeof ways / sizeof ways[0]; k++)
            if (!isnan(exp_table_get(t, row, ways[k])) && isnan(cham))
                fail_msg("%s: %s ran, chameleon did not", row, ways[k]);
        for (size_t k = 0; k < sizeof ways / sizeof ways[0]; k++) {
            double v = exp_table_get(t, row, ways[k]);
            if (isnan(v) || isnan(bound) || strcmp(ways[k], "recompute s") == 0)
                continue;                /* no bound where Chameleon failed */
            if (!(v >= bound))
                fail_msg("%s: %s %.6f below the bound %.6f", row, ways[k], v, bound);
            bounded++;
        }
        if (!isnan(native) && !(fabs(cham - native) <= 1e-9 * native))
            fail_msg("%s: native fits (%.6f s) but chameleon takes %.6f s", row, native, cham);
        /* A dynamic loop has its static loop's step beside it, and the ratio. */
        double stat = exp_table_get(t, row, "chameleon static loop s");
        double ratio = exp_table_get(t, row, "dynamic / static");
        assert_true(rows[i].dynamic ? stat > 0 : isnan(stat));
        if (rows[i].dynamic && !isnan(cham))
            assert_float_equal(ratio, cham / stat, 1e-12);
    }
    assert_true(bounded >= 20);
    assert_true(strlen(r.summary) > 0);
    exp_result_free(&r);
}

/* swapadvisor: two models at two memory ratios; in its own simulation
 * SwapAdvisor never beats the ideal device, does worse with less memory,
 * and its plans run on the sim device; in the dynamic loop it searches
 * again at every change, with no hazard. */
static void test_swapadvisor(void **state)
{
    (void)state;
    exp_result_t r;
    run("swapadvisor", &r);
    const exp_table_t *t = &r.tables[0];
    assert_int_equal(t->n_rows, 4);
    /* gpt2's four reduced layers leave its head's tensors most of the
     * device at 2x: no pool holds them, and no plan is a NAN there. */
    assert_true(isnan(exp_table_get(t, "gpt2-1.5b 2x", "sa reordered % ideal")));
    const char *models[] = {"llama2-7b"};
    for (size_t m = 0; m < 1; m++) {
        char a[64], b[64];
        snprintf(a, sizeof a, "%s 1.5x", models[m]);
        snprintf(b, sizeof b, "%s 2x", models[m]);
        double sim_a = exp_table_get(t, a, "sa caller's order % ideal");
        double sim_b = exp_table_get(t, b, "sa caller's order % ideal");
        assert_true(sim_a > 0 && sim_a <= 100.0 + 1e-9);
        assert_true(sim_b > 0 && sim_b <= sim_a + 1e-9);
        assert_true(exp_table_get(t, a, "sa reordered % ideal") <= 100.0 + 1e-9);
        assert_false(isnan(exp_table_get(t, a, "sa runtime % ideal")));
        assert_false(isnan(exp_table_get(t, a, "chameleon % ideal")));
    }
    const exp_table_t *d = &r.tables[1];
    assert_true(exp_table_get(d, "swapadvisor", "policies made") >= 3);
    assert_true(exp_table_get(d, "swapadvisor", "hazards") == 0);
    assert_true(exp_table_get(d, "chameleon", "hazards") == 0);
    exp_result_free(&r);
}

/* kv-offload: on both devices offloading the caches lowers the peak by
 * at most their size, slows decoding and lengthens the longest context;
 * the planners, which also move weights and the prefill's activations,
 * reach further still. A faster link never makes decoding slower. In
 * training HyperOffload's plan holds fewer bytes than Chameleon's where
 * memory is to spare. */
static void test_kv_offload(void **state)
{
    (void)state;
    exp_result_t r;
    run("kv-offload", &r);
    const exp_table_t *t = &r.tables[0];
    assert_int_equal(t->n_rows, 2);
    const char *devices[] = {"ascend-910b", "h100-80g"};
    for (int i = 0; i < 2; i++) {
        const char *d = devices[i];
        double peak = exp_table_get(t, d, "peak GB");
        double off = exp_table_get(t, d, "peak offloaded GB");
        assert_true(off < peak && peak - off <= exp_table_get(t, d, "KV caches GB") + 1e-9);
        assert_true(exp_table_get(t, d, "decode offloaded ms") > exp_table_get(t, d, "decode ms"));
        double ctx = exp_table_get(t, d, "max context");
        assert_true(ctx > 0);
        assert_true(exp_table_get(t, d, "max context offloaded") > ctx);
        assert_true(exp_table_get(t, d, "max context hyperoffload") > ctx);
        assert_true(exp_table_get(t, d, "max context chameleon") > ctx);
    }
    const exp_table_t *b = &r.tables[1];
    assert_true(b->n_rows >= 4);
    for (size_t k = 1; k < b->n_rows; k++)
        assert_true(b->cells[k * b->n_cols + 2].num <= b->cells[(k - 1) * b->n_cols + 2].num);
    const exp_table_t *tr = &r.tables[2];
    assert_int_equal(tr->n_rows, 4);
    assert_true(exp_table_get(tr, "1.00x", "hyperoffload last-step peak GB") <
                exp_table_get(tr, "1.00x", "chameleon last-step peak GB"));
    assert_false(isnan(exp_table_get(tr, "2.00x", "hyperoffload overhead %")));
    exp_result_free(&r);
}

/* The modes' order in the table holds (a profiler that waits after every
 * op costs far more than one that only records), and the lightweight
 * profiler queues no device work: its simulated step equals the run's
 * without a profiler. */
static void test_profiling_overhead(void **state)
{
    (void)state;
    exp_result_t r;
    run("profiling-overhead", &r);
    const exp_table_t *t = &r.tables[0];
    double none = exp_table_get(t, "no profiler", "simulated ms/step");
    double light = exp_table_get(t, "lightweight", "simulated ms/step");
    double detailed = exp_table_get(t, "detailed", "simulated ms/step");
    double sync = exp_table_get(t, "per-op sync (built-in)", "simulated ms/step");
    assert_true(none > 0);
    assert_true(light == none);
    assert_true(detailed >= light);
    assert_true(sync > 1.01 * detailed);
    assert_true(exp_table_get(t, "per-op sync (built-in)", "extra %") > 1);
    exp_result_free(&r);
}

/* What the profiling-overhead rows compare is real: with the lightweight
 * profiler on, the stage machine sees each step's op sequence and walks
 * WarmUp -> GenPolicy -> Stable; switched off it sees nothing and the
 * stage never changes, on the same simulated time. */
static void test_lightweight_profiler_runs(void **state)
{
    (void)state;
    cham_run_result_t res[2];
    for (int on = 0; on < 2; on++) {
        cham_run_config_t rc = cham_run_config_default();
        rc.model = exp_llama(1024, 4, 1024, 1);
        rc.strategy = CHAM_STRATEGY_NATIVE;
        rc.steps = 12;
        rc.runtime.profiler = on;
        rc.runtime.device.preset = "a100-80g";
        assert_int_equal(cham_run(&rc, &res[on]), CHAM_OK);
        assert_int_equal(res[on].status, CHAM_OK);
    }
    assert_int_equal(res[0].stage_changes, 0);
    assert_true(res[1].stage_changes >= 2);
    assert_true(res[0].mean_step_time_s == res[1].mean_step_time_s);
}

/* Less tensor parallelism with Chameleon is faster than more without it
 * (the paper's first two pairs). */
static void test_parallelism(void **state)
{
    (void)state;
    exp_result_t r;
    run("parallelism", &r);
    const exp_table_t *t = &r.tables[0];
    assert_true(exp_table_get(t, "1", "gain %") > 0);
    assert_true(exp_table_get(t, "2", "gain %") > 0);
    exp_result_free(&r);
}

/* ---- the SVG plots -----------------------------------------------------------------*/

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    return buf;
}

static size_t count(const char *hay, const char *needle)
{
    size_t n = 0;
    for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle))
        n++;
    return n;
}

static void test_svg_plot(void **state)
{
    (void)state;
    char path[] = "/tmp/cham-plot-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    plot_t p;
    plot_init(&p, "t", "Time <&> \"space\"", "x", "y");
    for (int i = 0; i <= 10; i++) {
        assert_true(plot_add(&p, "a", i, 10.0 * i));
        assert_true(plot_add(&p, "b", i, i == 5 ? NAN : 50));  /* a gap */
    }
    assert_true(plot_write_svg(&p, path));
    const char *svg = slurp(path);
    assert_non_null(strstr(svg, "<svg xmlns=\"http://www.w3.org/2000/svg\""));
    assert_non_null(strstr(svg, "</svg>\n"));
    assert_int_equal(count(svg, "<polyline"), 3);           /* a, and b in two runs */
    assert_int_equal(count(svg, "<circle"), 21);            /* 11 + 10 usable points */
    assert_non_null(strstr(svg, "Time &lt;&amp;&gt; &quot;space&quot;"));
    assert_non_null(strstr(svg, ">a</text>"));
    assert_non_null(strstr(svg, ">b</text>"));
    for (int v = 0; v <= 100; v += 20) {                    /* nice ticks of 0..100 */
        char tick[32];
        snprintf(tick, sizeof tick, ">%d</text>", v);
        assert_non_null(strstr(svg, tick));
    }
    plot_free(&p);

    /* A log axis skips x <= 0; powers of two get power-of-two ticks. */
    plot_init(&p, "log", "log", "x", "y");
    p.log_x = true;
    assert_true(plot_add(&p, "s", 0, 1));
    for (int x = 1; x <= 64; x *= 2)
        assert_true(plot_add(&p, "s", x, x));
    assert_true(plot_write_svg(&p, path));
    svg = slurp(path);
    assert_int_equal(count(svg, "<circle"), 7);
    assert_non_null(strstr(svg, ">32</text>"));
    plot_free(&p);

    /* A scatter plot: markers only, even for many points of one series. */
    plot_init(&p, "scatter", "scatter", "x", "y");
    p.scatter = true;
    for (int x = 1; x <= 40; x++)
        assert_true(plot_add(&p, "s", x, x % 7));
    assert_true(plot_write_svg(&p, path));
    svg = slurp(path);
    assert_int_equal(count(svg, "<polyline"), 0);
    assert_int_equal(count(svg, "<circle"), 40);
    plot_free(&p);

    /* Categories: named ticks, markers without lines, no numeric x ticks;
     * a long title is set smaller rather than cut. */
    plot_init(&p, "cat", "A title much longer than the plot is wide at fifteen pixels, "
                         "as the experiments' titles were", "mode", "y");
    const char *modes[] = {"no profiler", "lightweight", "detailed"};
    for (int i = 0; i < 3; i++) {
        assert_true(plot_category(&p, modes[i]));
        assert_true(plot_add(&p, "ours", i + 1, 10.0 * i));
        assert_true(plot_add(&p, "paper", i + 1, 10.0 * i));    /* equal: set apart */
    }
    assert_true(plot_write_svg(&p, path));
    svg = slurp(path);
    assert_int_equal(count(svg, "<polyline"), 0);
    assert_int_equal(count(svg, "<circle"), 6);
    for (int i = 0; i < 3; i++) {
        char tick[40];
        snprintf(tick, sizeof tick, ">%s</text>", modes[i]);
        assert_non_null(strstr(svg, tick));
    }
    assert_null(strstr(svg, ">1.5</text>"));
    assert_null(strstr(svg, "font-size=\"15.0\""));
    plot_free(&p);
    plot_init(&p, "cat", "t", "x", "y");
    for (int i = 0; i < PLOT_MAX_CATEGORIES; i++)
        assert_true(plot_category(&p, "c"));
    assert_false(plot_category(&p, "one too many"));
    plot_free(&p);

    /* One point, only NANs, too many series, a path that cannot be written. */
    plot_init(&p, "edge", "edge", "x", "y");
    assert_true(plot_add(&p, "one", 3, 3));
    assert_true(plot_add(&p, "none", 1, NAN));
    assert_true(plot_write_svg(&p, path));
    for (int i = 2; i < PLOT_MAX_SERIES; i++) {
        char name[8];
        snprintf(name, sizeof name, "s%d", i);
        assert_true(plot_add(&p, name, 1, 1));
    }
    assert_false(plot_add(&p, "one too many", 1, 1));
    /* A name longer than what is stored still finds its series. */
    plot_free(&p);
    const char *long_name = "a series name longer than the forty bytes kept of it";
    assert_true(plot_add(&p, long_name, 1, 1));
    assert_true(plot_add(&p, long_name, 2, 2));
    assert_int_equal(p.n_series, 1);
    assert_int_equal(p.series[0].n, 2);
    assert_false(plot_write_svg(&p, "/proc/no/such/file.svg"));
    plot_free(&p);
    unlink(path);
}

static void test_files_written(void **state)
{
    (void)state;
    exp_result_t r;
    /* The full size (under a second): the reduced one's 3 to 6 layers
     * swap a few small blocks, whose copies the policies wait out either
     * way. */
    run_at("record-stream", false, &r);
    char dir[] = "/tmp/cham-exp-XXXXXX";
    assert_non_null(mkdtemp(dir));
    exp_config_t c = {.device = "ascend-910b", .reduced = true};
    char err[512];
    assert_true(exp_result_write(exp_find("record-stream"), &c, &r, dir, err, sizeof err));
    const char *files[] = {"record-stream.csv", "record-stream.json", "record-stream-time.svg",
                           "record-stream-reuse.svg"};
    char path[600];
    for (size_t i = 0; i < 4; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        FILE *f = fopen(path, "r");
        if (!f)
            fail_msg("%s was not written", path);
        char head[64] = "";
        size_t n = fread(head, 1, sizeof head - 1, f);
        fclose(f);
        assert_true(n > 0);
        if (strstr(files[i], ".csv"))
            assert_non_null(strstr(head, "layers,custom s/step"));
        if (strstr(files[i], ".json"))
            assert_int_equal(head[0], '{');
        if (strstr(files[i], ".svg"))
            assert_non_null(strstr(head, "<svg") ? head : strstr(head, "<?xml"));
        unlink(path);
    }
    rmdir(dir);
    /* A directory that cannot be made. */
    assert_false(exp_result_write(exp_find("record-stream"), &c, &r, "/proc/no/such", err,
                                  sizeof err));
    assert_non_null(strstr(err, "/proc/no/such"));
    exp_result_free(&r);
}

/* ---- axes and non-finite values ----------------------------------------------------*/

/* The ticks of any data range are few, finite and increasing, evenly
 * spaced by 1, 2 or 5 times a power of ten, and cover data of sane size.
 * [1, 1 + ulp] used to give a step under one ulp: the tick loop never
 * ended and `chameleon report` wrote without end. */
static void test_axis_ticks(void **state)
{
    (void)state;
    const double one_up = nextafter(1.0, 2.0);
    static const double huge = DBL_MAX;
    const double cases[][2] = {
        {1, one_up}, {0, 0}, {5, 5}, {-3, -3}, {0, 100}, {0.1, 0.7}, {-2.5, 7},
        {1e15, 1e15 + 1}, {1e-310, 2e-310}, {-1e-320, 1e-320}, {1e300, 1e301},
        {-huge, huge}, {huge, huge}, {-huge, -huge}, {NAN, 1}, {0, INFINITY},
        {-INFINITY, INFINITY}, {3, 1}, {123456789, 123456790}, {-1e-9, 1e-9},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        for (int from_zero = 0; from_zero < 2; from_zero++) {
            double lo = cases[i][0], hi = cases[i][1], t[PLOT_MAX_TICKS];
            size_t n = plot_axis_ticks(lo, hi, from_zero, t);
            if (n < 2 || n > PLOT_MAX_TICKS)
                fail_msg("[%g, %g]: %zu ticks", lo, hi, n);
            for (size_t k = 0; k < n; k++) {
                if (!isfinite(t[k]) || (k > 0 && !(t[k] > t[k - 1])))
                    fail_msg("[%g, %g]: tick %zu is %g after %g", lo, hi, k, t[k],
                             k ? t[k - 1] : NAN);
            }
            /* Even steps of 1, 2 or 5 times a power of ten. */
            double step = t[1] - t[0], p = pow(10, floor(log10(step))), m = step / p;
            if (fabs(m - 1) > 1e-6 && fabs(m - 2) > 1e-6 && fabs(m - 5) > 1e-6)
                fail_msg("[%g, %g]: step %g", lo, hi, step);
            for (size_t k = 1; k < n; k++)
                if (fabs((t[k] - t[k - 1]) / 2 - step / 2) > step * 1e-6)
                    fail_msg("[%g, %g]: uneven ticks at %zu", lo, hi, k);
            /* Values under 1e-300 are drawn as 0; over 1e300, near the end of
             * the doubles, the ends may stay short of them. */
            double mag = fmax(fabs(lo), fabs(hi));
            if (isfinite(lo) && isfinite(hi) && lo <= hi && mag >= 1e-300 && mag < 1e300 &&
                !(t[0] <= lo && t[n - 1] >= hi))
                fail_msg("[%g, %g]: ticks %g .. %g do not cover it", lo, hi, t[0], t[n - 1]);
        }
    }
    double t[PLOT_MAX_TICKS];
    assert_int_equal(plot_axis_ticks(0, 100, false, t), 6);
    for (int k = 0; k < 6; k++)
        assert_true(t[k] == 20.0 * k);
}

static void on_alarm(int sig)
{
    (void)sig;
    static const char msg[] = "a plot took over 30 s: its ticks do not end\n";
    if (write(2, msg, sizeof msg - 1) < 0)
        _exit(2);
    _exit(1);
}

/* Whether w occurs in text not as the end of a longer word ("nan" in
 * "dominant" does not count). */
static bool has_word(const char *text, const char *w)
{
    for (const char *p = strstr(text, w); p; p = strstr(p + 1, w))
        if (p == text || !isalpha((unsigned char)p[-1]))
            return true;
    return false;
}

/* Whole plots of awkward data are written, small, in a moment. */
static void test_svg_awkward_ranges(void **state)
{
    (void)state;
    char path[] = "/tmp/cham-plot-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    signal(SIGALRM, on_alarm);
    alarm(30);
    const double ys[][2] = {{1, nextafter(1.0, 2.0)}, {-DBL_MAX, DBL_MAX}, {0, 1e-320},
                            {1e308, 1.5e308}};
    for (size_t i = 0; i < sizeof ys / sizeof ys[0]; i++) {
        for (int log_x = 0; log_x < 2; log_x++) {
            plot_t p;
            plot_init(&p, "awkward", "awkward", "step", "s");
            p.log_x = log_x;
            assert_true(plot_add(&p, "y", log_x ? 1e-300 : 0, ys[i][0]));
            assert_true(plot_add(&p, "y", log_x ? 1e300 : 1, ys[i][1]));
            assert_true(plot_band(&p, "WarmUp", NAN, 1));
            assert_true(plot_band(&p, "Stable", 0, INFINITY));
            assert_true(plot_write_svg(&p, path));
            plot_free(&p);
            const char *svg = slurp(path);
            assert_non_null(strstr(svg, "</svg>\n"));
            assert_true(count(svg, "<line") <= 2 * PLOT_MAX_TICKS);
            assert_false(has_word(svg, "nan") || has_word(svg, "inf"));
        }
    }
    alarm(0);
    unlink(path);
}

/* JSON has no NaN or infinity: they become null, one cell each, and the
 * rows keep their length (json_real refuses them, and a row used to lose
 * the cell). */
static void test_json_non_finite(void **state)
{
    (void)state;
    json_t *v = plot_json_number(INFINITY);
    assert_true(json_is_null(v));
    json_decref(v);
    v = plot_json_number(NAN);
    assert_true(json_is_null(v));
    json_decref(v);
    v = plot_json_number(-0.5);
    assert_true(json_is_real(v) && json_real_value(v) == -0.5);
    json_decref(v);

    exp_result_t r = {0};
    static const char *const cols[] = {"a", "b", "c", "d"};
    exp_table_t *t = exp_result_table(&r, "t", "t", 4, cols);
    assert_non_null(t);
    long row = exp_table_add_row(t);
    assert_true(row >= 0);
    exp_table_set(t, (size_t)row, 0, 1.5);
    exp_table_set(t, (size_t)row, 1, INFINITY);
    exp_table_set(t, (size_t)row, 2, -INFINITY);        /* column 3 stays NAN */
    char dir[] = "/tmp/cham-exp-json-XXXXXX";
    assert_non_null(mkdtemp(dir));
    exp_config_t c = {.device = "ascend-910b", .reduced = true};
    const exp_def_t *e = exp_find("record-stream");
    char err[512], path[600];
    assert_true(exp_result_write(e, &c, &r, dir, err, sizeof err));
    snprintf(path, sizeof path, "%s/%s.json", dir, e->name);
    json_error_t je;
    json_t *j = json_load_file(path, 0, &je);
    if (!j)
        fail_msg("%s: %s", path, je.text);
    json_t *cells = json_array_get(json_object_get(json_array_get(json_object_get(j, "tables"),
                                                                  0), "rows"), 0);
    assert_int_equal(json_array_size(cells), 4);
    assert_true(json_real_value(json_array_get(cells, 0)) == 1.5);
    for (size_t k = 1; k < 4; k++)
        assert_true(json_is_null(json_array_get(cells, k)));
    json_decref(j);
    unlink(path);
    snprintf(path, sizeof path, "%s/t.csv", dir);
    unlink(path);
    rmdir(dir);
    exp_result_free(&r);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_max_size),
        cmocka_unit_test(test_model_size_910b_layers),
        cmocka_unit_test(test_model_size_910b_hidden),
        cmocka_unit_test(test_model_size_a100_layers),
        cmocka_unit_test(test_model_size_a100_hidden),
        cmocka_unit_test(test_model_size_bad_part),
        cmocka_unit_test(test_scaling),
        cmocka_unit_test(test_stability),
        cmocka_unit_test(test_record_stream),
        cmocka_unit_test(test_policy_cache),
        cmocka_unit_test(test_profiling_overhead),
        cmocka_unit_test(test_lightweight_profiler_runs),
        cmocka_unit_test(test_parallelism),
        cmocka_unit_test(test_budget_sweep),
        cmocka_unit_test(test_zoo),
        cmocka_unit_test(test_swapadvisor),
        cmocka_unit_test(test_kv_offload),
        cmocka_unit_test(test_fidelity),
        cmocka_unit_test(test_every_experiment_runs),
        cmocka_unit_test(test_svg_plot),
        cmocka_unit_test(test_files_written),
        cmocka_unit_test(test_axis_ticks),
        cmocka_unit_test(test_svg_awkward_ranges),
        cmocka_unit_test(test_json_non_finite),
    };
    /* CTest runs one case a test (tests/CMakeLists.txt, CHAM_SPLIT_TESTS). */
    return test_run_cases(tests, argc, argv, NULL, NULL);
}
