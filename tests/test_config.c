/* The runtime configuration (src/runtime/config.c, docs/config.md): the
 * defaults, a full JSON file read field by field, absent keys keeping their
 * values, byte-size strings, one message per kind of bad file (naming the
 * file, the key and the value), unreadable files, devices and pipes, a
 * file that loads but would break a rule between fields (refused: what
 * loads validates), cham_config_validate on configs built in code, and
 * random damage to a valid file never crashing.
 * Files are written into a fresh mkdtemp directory, removed afterwards. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "chameleon/runtime.h"
#include "policy/registry.h"
#include "support/files.h"
#include "support/rng.h"

#define KiB (UINT64_C(1) << 10)
#define MiB (UINT64_C(1) << 20)
#define GiB (UINT64_C(1) << 30)
#define TiB (UINT64_C(1) << 40)
#define EiB (UINT64_C(1) << 60)

/* ---- a temporary directory per test -------------------------------------------*/

typedef struct fixture {
    char dir[128];
    char path[256];          /* the last file written */
} fixture_t;

static int setup(void **state)
{
    fixture_t *fx = calloc(1, sizeof *fx);
    if (!fx)
        return -1;
    if (test_tmpdir_make(fx->dir, sizeof fx->dir, "cham-config") != 0) {
        free(fx);
        return -1;
    }
    *state = fx;
    return 0;
}

/* Removes the files and directories the test made (one level deep). */
static int teardown(void **state)
{
    fixture_t *fx = *state;
    int rc = test_tmpdir_remove(fx->dir);
    free(fx);
    return rc;
}

/* Writes len bytes of text to dir/name; returns the path (in fx->path). */
static const char *write_bytes(fixture_t *fx, const char *name, const char *text, size_t len)
{
    test_path(fx->path, sizeof fx->path, fx->dir, name);
    test_write_file(fx->path, text, len);
    return fx->path;
}

static const char *write_file(fixture_t *fx, const char *name, const char *text)
{
    return write_bytes(fx, name, text, strlen(text));
}

static void assert_configs_equal(const cham_config_t *a, const cham_config_t *b)
{
    assert_ptr_equal(a->device.backend, b->device.backend);
    assert_ptr_equal(a->device.preset, b->device.preset);
    assert_int_equal(a->device.ordinal, b->device.ordinal);
    assert_int_equal(a->device.capacity, b->device.capacity);
    assert_true(a->device.peak_flops == b->device.peak_flops);
    assert_true(a->device.hbm_bandwidth == b->device.hbm_bandwidth);
    assert_true(a->device.h2d_bandwidth == b->device.h2d_bandwidth);
    assert_true(a->device.d2h_bandwidth == b->device.d2h_bandwidth);
    assert_true(a->device.p2p_bandwidth == b->device.p2p_bandwidth);
    assert_int_equal(a->device.launch_ns, b->device.launch_ns);
    assert_int_equal(a->device.kernel_overhead_ns, b->device.kernel_overhead_ns);
    assert_int_equal(a->device.copy_latency_ns, b->device.copy_latency_ns);
    assert_int_equal(a->device.event_query_ns, b->device.event_query_ns);
    assert_int_equal(a->device.queue_depth, b->device.queue_depth);
    assert_int_equal(a->device.data, b->device.data);
    assert_int_equal(a->device.hazard_check, b->device.hazard_check);
    assert_int_equal(a->mode, b->mode);
    assert_int_equal(a->pinned_budget, b->pinned_budget);
    assert_int_equal(a->warmup_steps, b->warmup_steps);
    assert_int_equal(a->genpolicy_steps, b->genpolicy_steps);
    assert_true(a->length_tolerance == b->length_tolerance);
    assert_true(a->cosine_threshold == b->cosine_threshold);
    assert_true(a->score_c == b->score_c);
    assert_int_equal(a->min_swap_bytes, b->min_swap_bytes);
    assert_int_equal(a->executor, b->executor);
    assert_int_equal(a->memory_budget, b->memory_budget);
    assert_int_equal(a->oom_handling, b->oom_handling);
    assert_int_equal(a->pytorch_record_stream, b->pytorch_record_stream);
    assert_int_equal(a->policy_cache, b->policy_cache);
    assert_int_equal(a->planner, b->planner);
    assert_int_equal(a->profiler, b->profiler);
}

/* ---- defaults -------------------------------------------------------------------*/

static void test_defaults(void **state)
{
    (void)state;
    /* The documented values (docs/config.md): a device field left 0 or
     * NULL means the preset's or the sim's default, which the opened
     * device must then show. */
    cham_config_t c = cham_config_default();
    assert_string_equal(c.device.backend, "sim");
    assert_null(c.device.preset);
    assert_int_equal(c.device.ordinal, 0);
    assert_int_equal(c.device.capacity, 0);
    assert_true(c.device.peak_flops == 0 && c.device.hbm_bandwidth == 0 &&
                c.device.h2d_bandwidth == 0 && c.device.d2h_bandwidth == 0 &&
                c.device.p2p_bandwidth == 0);
    assert_int_equal(c.device.launch_ns, 0);
    assert_int_equal(c.device.queue_depth, 0);
    assert_int_equal(c.device.vm_granularity, 0);
    assert_false(c.device.data);
    assert_true(c.device.hazard_check);
    assert_int_equal(c.allocator, CHAM_ALLOCATOR_AUTO);
    assert_int_equal(c.allocator_shift, CHAM_ALLOCATOR_SHIFT_AUTO);
    cham_device_t *dev;
    assert_int_equal(cham_device_open(&c.device, &dev), CHAM_OK);
    cham_device_info_t info;
    cham_device_get_info(dev, &info);
    assert_string_equal(info.name, cham_preset_default_name());
    assert_int_equal(info.capacity, cham_preset_find(cham_preset_default_name())->capacity);
    assert_false(info.data);
    assert_int_equal(cham_vm_granularity(dev), 2 * MiB);
    assert_true(cham_device_checks_hazards(dev));
    cham_device_close(dev);
    assert_int_equal(c.mode, CHAM_MODE_MANAGED);
    assert_int_equal(c.pinned_budget, 16 * GiB);
    assert_int_equal(c.warmup_steps, 2);
    assert_int_equal(c.genpolicy_steps, 5);
    assert_true(c.length_tolerance == 0.05);
    assert_true(c.cosine_threshold == 0.95);
    assert_true(c.score_c == 1.0);
    assert_int_equal(c.min_swap_bytes, 0);
    assert_true(c.executor);
    assert_int_equal(c.memory_budget, 0);
    assert_true(c.oom_handling);
    assert_false(c.pytorch_record_stream);
    assert_int_equal(c.policy_cache, 8);
    assert_int_equal(c.class_trials, 2);

    char err[256] = "junk";
    assert_int_equal(cham_config_validate(&c, err, sizeof err), CHAM_OK);
    assert_string_equal(err, "");
    assert_int_equal(cham_config_validate(&c, NULL, 0), CHAM_OK);
}

/* ---- a full file ------------------------------------------------------------------*/

static const char full_file[] =
    "{\n"
    "  \"backend\": \"cuda\",\n"
    "  \"preset\": \"v100-16g\",\n"
    "  \"ordinal\": 3,\n"
    "  \"capacity\": \"12GiB\",\n"
    "  \"peak_flops\": 1.25e14,\n"
    "  \"hbm_bandwidth\": 9e11,\n"
    "  \"h2d_bandwidth\": 12000000000,\n"
    "  \"d2h_bandwidth\": 1.1e10,\n"
    "  \"p2p_bandwidth\": 5e10,\n"
    "  \"launch_ns\": 7000,\n"
    "  \"kernel_overhead_ns\": 1500,\n"
    "  \"copy_latency_ns\": 4000,\n"
    "  \"event_query_ns\": 800,\n"
    "  \"queue_depth\": 256,\n"
    "  \"data\": true,\n"
    "  \"hazard_check\": false,\n"
    "  \"mode\": \"advisor\",\n"
    "  \"pinned_budget\": \"1.5GiB\",\n"
    "  \"warmup_steps\": 3,\n"
    "  \"genpolicy_steps\": 7,\n"
    "  \"length_tolerance\": 0.1,\n"
    "  \"cosine_threshold\": 0.9,\n"
    "  \"score_c\": 2.5,\n"
    "  \"min_swap_bytes\": 65536,\n"
    "  \"executor\": false,\n"
    "  \"memory_budget\": \"10GiB\",\n"
    "  \"oom_handling\": false,\n"
    "  \"pytorch_record_stream\": true,\n"
    "  \"policy_cache\": 0,\n"
    "  \"planner\": \"capuchin\",\n"
    "  \"profiler\": false\n"
    "}\n";

static void test_full_file(void **state)
{
    fixture_t *fx = *state;
    const char *path = write_file(fx, "full.json", full_file);
    cham_config_t c = cham_config_default();
    char err[512] = "junk";
    assert_int_equal(cham_config_load_json(path, &c, err, sizeof err), CHAM_OK);
    assert_string_equal(err, "");

    assert_string_equal(c.device.backend, "cuda");
    /* The preset table's own name: no string storage is needed. */
    assert_ptr_equal(c.device.preset, cham_preset_find("v100-16g")->name);
    assert_int_equal(c.device.ordinal, 3);
    assert_int_equal(c.device.capacity, 12 * GiB);
    assert_true(c.device.peak_flops == 1.25e14);
    assert_true(c.device.hbm_bandwidth == 9e11);
    assert_true(c.device.h2d_bandwidth == 12e9);
    assert_true(c.device.d2h_bandwidth == 1.1e10);
    assert_true(c.device.p2p_bandwidth == 5e10);
    assert_int_equal(c.device.launch_ns, 7000);
    assert_int_equal(c.device.kernel_overhead_ns, 1500);
    assert_int_equal(c.device.copy_latency_ns, 4000);
    assert_int_equal(c.device.event_query_ns, 800);
    assert_int_equal(c.device.queue_depth, 256);
    assert_true(c.device.data);
    assert_false(c.device.hazard_check);
    assert_int_equal(c.mode, CHAM_MODE_ADVISOR);
    assert_int_equal(c.pinned_budget, 3 * GiB / 2);
    assert_int_equal(c.warmup_steps, 3);
    assert_int_equal(c.genpolicy_steps, 7);
    assert_true(c.length_tolerance == 0.1);
    assert_true(c.cosine_threshold == 0.9);
    assert_true(c.score_c == 2.5);
    assert_int_equal(c.min_swap_bytes, 64 * KiB);
    assert_false(c.executor);
    assert_int_equal(c.memory_budget, 10 * GiB);
    assert_false(c.oom_handling);
    assert_true(c.pytorch_record_stream);
    assert_int_equal(c.policy_cache, 0);
    assert_int_equal(c.planner, CHAM_PLANNER_CAPUCHIN);
    assert_false(c.profiler);
    assert_int_equal(cham_config_validate(&c, err, sizeof err), CHAM_OK);
    /* The executor acts on what the profiler sees. */
    c.executor = true;
    assert_int_equal(cham_config_validate(&c, err, sizeof err), CHAM_ERR_INVALID_ARG);
    assert_non_null(strstr(err, "profiler: false needs executor: false"));
    c.executor = false;

    /* Loading the same file again changes nothing. */
    cham_config_t again = c;
    assert_int_equal(cham_config_load_json(path, &again, err, sizeof err), CHAM_OK);
    assert_configs_equal(&again, &c);
}

static void test_absent_keys_keep_values(void **state)
{
    fixture_t *fx = *state;
    cham_config_t start = cham_config_default();
    start.device.preset = "h100-80g"; /* a caller's own string stays as it is */
    start.device.capacity = 3 * GiB;
    start.device.queue_depth = 64;
    start.warmup_steps = 9;
    start.score_c = 0.5;
    start.min_swap_bytes = 123;

    char err[512];
    cham_config_t c = start;
    assert_int_equal(cham_config_load_json(write_file(fx, "empty-object.json", "{ }\n"), &c,
                                           err, sizeof err), CHAM_OK);
    assert_configs_equal(&c, &start);

    c = start;
    assert_int_equal(cham_config_load_json(write_file(fx, "two.json",
                                                      "{\"mode\": \"advisor\", "
                                                      "\"genpolicy_steps\": 1}"),
                                           &c, err, sizeof err), CHAM_OK);
    cham_config_t want = start;
    want.mode = CHAM_MODE_ADVISOR;
    want.genpolicy_steps = 1;
    assert_configs_equal(&c, &want);

    /* null resets the preset to the default one. */
    c = start;
    assert_int_equal(cham_config_load_json(write_file(fx, "null.json", "{\"preset\": null}"),
                                           &c, err, sizeof err), CHAM_OK);
    assert_null(c.device.preset);

    /* A failed load leaves the config as it was, even keys read before the
     * bad one. */
    c = start;
    assert_int_equal(cham_config_load_json(write_file(fx, "half.json",
                                                      "{\"mode\": \"advisor\", "
                                                      "\"warmup_steps\": \"two\"}"),
                                           &c, err, sizeof err), CHAM_ERR_INVALID_ARG);
    assert_configs_equal(&c, &start);

    /* A UTF-8 byte order mark is skipped. */
    c = start;
    assert_int_equal(cham_config_load_json(write_file(fx, "bom.json",
                                                      "\xEF\xBB\xBF{\"score_c\": 3}"),
                                           &c, err, sizeof err), CHAM_OK);
    assert_true(c.score_c == 3.0);
}

/* ---- byte sizes --------------------------------------------------------------------*/

/* A language binding's keywords, as JSON text in memory: the same keys,
 * checks and messages as a file, naming the caller's origin instead. */
static void test_text_in_memory(void **state)
{
    (void)state;
    char err[512];
    cham_config_t c = cham_config_default();
    const char *ok = "{\"warmup_steps\": 4, \"memory_budget\": \"3MiB\"}";
    assert_int_equal(cham_config_parse_json(ok, strlen(ok), "Offload", &c, err, sizeof err),
                     CHAM_OK);
    assert_int_equal(c.warmup_steps, 4);
    assert_int_equal(c.memory_budget, 3 * MiB);
    const char *shift = "{\"allocator_shift\": \"auto\"}";
    c.allocator_shift = 3;
    assert_int_equal(cham_config_parse_json(shift, strlen(shift), "Offload", &c, err, sizeof err),
                     CHAM_OK);
    assert_int_equal(c.allocator_shift, CHAM_ALLOCATOR_SHIFT_AUTO);
    const char *fine = "{\"allocator_shift\": \"fine\"}";
    assert_int_equal(cham_config_parse_json(fine, strlen(fine), "Offload", &c, err, sizeof err),
                     CHAM_ERR_INVALID_ARG);
    test_assert_contains(err, "key \"allocator_shift\": expected \"auto\" or an integer, got "
                              "\"fine\"");
    const char *typo = "{\"warmup_step\": 4}";
    assert_int_equal(cham_config_parse_json(typo, strlen(typo), "Offload", &c, err, sizeof err),
                     CHAM_ERR_INVALID_ARG);
    test_assert_contains(err, "Offload: unknown key \"warmup_step\" (did you mean "
                              "\"warmup_steps\"?)");
    assert_int_equal(c.warmup_steps, 4);                 /* unchanged */
    /* Not NUL-terminated: only len bytes are read. */
    const char buf[] = {'{', '}', 'x'};
    assert_int_equal(cham_config_parse_json(buf, 2, "Offload", &c, err, sizeof err), CHAM_OK);
    assert_int_equal(cham_config_parse_json(buf, 3, "Offload", &c, err, sizeof err),
                     CHAM_ERR_INVALID_ARG);
    test_assert_contains(err, "Offload:1:");
}

static void test_size_strings(void **state)
{
    fixture_t *fx = *state;
    static const struct {
        const char *json;    /* the value as written in the file */
        uint64_t bytes;
    } good[] = {
        {"\"4096\"", 4096},
        {"4096", 4096},
        {"0", 0},
        {"\"0\"", 0},
        {"\"64GiB\"", 64 * GiB},
        {"\"512MiB\"", 512 * MiB},
        {"\"1.5GiB\"", 3 * GiB / 2},
        {"\"1 KiB\"", KiB},
        {"\"0.5KiB\"", 512},
        {"\"0.1KiB\"", 102},           /* 102.4 rounds to the nearest byte */
        {"\"2.000B\"", 2},
        {"\"7B\"", 7},
        {"\"3gib\"", 3 * GiB},
        {"\"2TiB\"", 2 * TiB},
        {"\"1PiB\"", 1024 * TiB},
        {"\"15EiB\"", 15 * EiB},
        {"\"64GB\"", UINT64_C(64000000000)},      /* decimal units: powers of 1000 */
        {"\"1.5kb\"", 1500},
        {"\"6.85MiB\"", 7182746},                 /* 7182745.6 rounds up */
        {"\"18446744073709551615\"", UINT64_MAX},
        {"1e9", 1000000000},
        {"9223372036854775807", UINT64_C(9223372036854775807)},
    };
    char err[512], text[128];
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        snprintf(text, sizeof text, "{\"min_swap_bytes\": %s}", good[i].json);
        cham_config_t c = cham_config_default();
        cham_status_t st = cham_config_load_json(write_file(fx, "size.json", text), &c, err,
                                                 sizeof err);
        if (st != CHAM_OK)
            fail_msg("%s: %s", good[i].json, err);
        if (c.min_swap_bytes != good[i].bytes)
            fail_msg("%s: got %llu, want %llu", good[i].json,
                     (unsigned long long)c.min_swap_bytes, (unsigned long long)good[i].bytes);
    }

    static const struct {
        const char *json;
        const char *why;     /* expected in the message, after the value */
    } bad[] = {
        {"\"12XB\"", "unknown unit \"XB\""},
        {"\"-1GiB\"", "cannot be negative"},
        {"\"1e400\"", "unknown unit \"e400\""},
        {"\"\"", "expected a byte size such as"},
        {"\"GiB\"", "expected a byte size such as"},
        {"\"+1GiB\"", "expected a byte size such as"},
        {"\" 1GiB\"", "expected a byte size such as"},
        {"\".5GiB\"", "expected a byte size such as"},
        {"\"1.GiB\"", "expected digits after the decimal point"},
        {"\"1.5\"", "whole number"},
        {"\"1.5B\"", "whole number"},
        {"\"64GiBs\"", "unknown unit \"GiBs\""},
        {"\"64 G\"", "unknown unit \"G\""},
        {"\"16EiB\"", "too large"},
        {"\"18446744073709551616\"", "too large"},
        {"\"99999999999999999999999999GiB\"", "too large"},
        {"-1", "-1 is out of range"},
        {"1.5", "expected a byte size"},
        {"true", "expected a byte size"},
        {"[4096]", "expected a byte size (an integer or a string such as \"64GiB\"), "
                   "got an array"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(text, sizeof text, "{\"min_swap_bytes\": %s}", bad[i].json);
        cham_config_t c = cham_config_default();
        cham_status_t st = cham_config_load_json(write_file(fx, "badsize.json", text), &c, err,
                                                 sizeof err);
        if (st != CHAM_ERR_INVALID_ARG)
            fail_msg("%s was accepted (%llu)", bad[i].json,
                     (unsigned long long)c.min_swap_bytes);
        test_assert_contains(err, "badsize.json: key \"min_swap_bytes\": ");
        if (bad[i].json[0] == '"')
            test_assert_contains(err, bad[i].json);
        test_assert_contains(err, bad[i].why);
        assert_int_equal(c.min_swap_bytes, 0);   /* unchanged: the default */
    }

    /* A number too large for JSON's integers or doubles is a syntax error. */
    cham_config_t c = cham_config_default();
    assert_int_equal(cham_config_load_json(write_file(fx, "huge.json",
                                                      "{\"capacity\": 1e400}"),
                                           &c, err, sizeof err), CHAM_ERR_INVALID_ARG);
    test_assert_contains(err, "huge.json:1:");
    test_assert_contains(err, "syntax error");
    assert_int_equal(cham_config_load_json(write_file(fx, "huge2.json",
                                                      "{\"capacity\": 99999999999999999999}"),
                                           &c, err, sizeof err), CHAM_ERR_INVALID_ARG);
    test_assert_contains(err, "huge2.json:1:");
}

/* ---- bad files, one message each ---------------------------------------------------*/

typedef struct bad_file {
    const char *name;
    const char *text;
    const char *want[3];     /* substrings of the message after "<dir>/<name>" */
} bad_file_t;

static const bad_file_t bad_files[] = {
    {"planner.json", "{\"planner\": \"magic\"}",
     {": key \"planner\": unknown planner \"magic\" (known: chameleon, vdnn, capuchin, "
      "swapadvisor, hyperoffload)"}},
    {"search.json", "{\"swapadvisor_search_seconds\": 0}",
     {": key \"swapadvisor_search_seconds\": 0 is out of range (0, 1e6] seconds"}},
    {"cosine.json", "{\"cosine_threshold\": 1.5}",
     {": key \"cosine_threshold\": 1.5 is out of range (0, 1]"}},
    {"cosine0.json", "{\"cosine_threshold\": 0}",
     {": key \"cosine_threshold\": 0 is out of range (0, 1]"}},
    {"typo.json", "{\"cosine_treshold\": 0.9}",
     {": unknown key \"cosine_treshold\"", "did you mean \"cosine_threshold\"?"}},
    {"typo2.json", "{\"warmup-steps\": 2}",
     {": unknown key \"warmup-steps\" (did you mean \"warmup_steps\"?)"}},
    {"unknown.json", "{\"frobnicate\": 1}",
     {": unknown key \"frobnicate\" (docs/config.md lists the keys)"}},
    {"nested.json", "{\"device\": {\"preset\": \"a100-80g\"}}",
     {": unknown key \"device\"", "keys are flat"}},
    {"preset.json", "{\"preset\": \"a100\"}",
     {": key \"preset\": unknown device preset \"a100\" (known: ascend-910b, a100-80g, ",
      "rtx3090-24g)"}},
    {"preset-type.json", "{\"preset\": 100}",
     {": key \"preset\": expected a string (a device preset name) or null, got 100"}},
    {"warmup.json", "{\"warmup_steps\": \"two\"}",
     {": key \"warmup_steps\": expected a non-negative integer, got \"two\""}},
    {"warmup-frac.json", "{\"warmup_steps\": 2.5}",
     {": key \"warmup_steps\": expected a non-negative integer, got 2.5"}},
    {"genpolicy.json", "{\"genpolicy_steps\": -3}",
     {": key \"genpolicy_steps\": -3 is out of range [1, 1000000]"}},
    {"genpolicy-big.json", "{\"genpolicy_steps\": 1000001}",
     {": key \"genpolicy_steps\": 1000001 is out of range [1, 1000000]"}},
    /* No step to try a policy in: Stable would never get one. */
    {"genpolicy-0.json", "{\"warmup_steps\": 0, \"genpolicy_steps\": 0}",
     {": key \"genpolicy_steps\": 0 is out of range [1, 1000000]"}},
    {"syntax.json", "{\n  \"mode\": \"managed\",\n  \"score_c\": 1.0,,\n}\n",
     {":3:", ": syntax error: "}},
    {"unterminated.json", "{\n  \"mode\": \"managed\"\n", {":3:", ": syntax error: "}},
    {"trailing.json", "{} x", {":1:", ": syntax error: "}},
    {"nan.json", "{\"score_c\": NaN}", {":1:", ": syntax error: "}},
    {"duplicate.json", "{\"mode\": \"managed\",\n \"mode\": \"advisor\"}",
     {":2:", ": syntax error: ", "duplicate"}},
    {"nul.json", "{\"backend\": \"si\\u0000m\"}", {":1:", ": syntax error: "}},
    {"array.json", "[1, 2]", {": expected a JSON object at the top level, got an array"}},
    {"scalar.json", "\"hello\"", {": expected a JSON object at the top level, got \"hello\""}},
    {"empty.json", "", {": empty file (expected a JSON object)"}},
    {"blank.json", " \n\t\r\n", {": empty file (expected a JSON object)"}},
    {"backend.json", "{\"backend\": \"tpu\"}",
     {": key \"backend\": unknown backend \"tpu\" (known: sim, cuda)"}},
    {"backend-type.json", "{\"backend\": null}",
     {": key \"backend\": expected a string (\"sim\" or \"cuda\"), got null"}},
    {"mode.json", "{\"mode\": \"auto\"}",
     {": key \"mode\": unknown mode \"auto\" (known: managed, advisor)"}},
    {"mode-type.json", "{\"mode\": 1}", {": key \"mode\": expected a string", "got 1"}},
    {"tolerance.json", "{\"length_tolerance\": 1}",
     {": key \"length_tolerance\": 1 is out of range [0, 1)"}},
    {"tolerance-neg.json", "{\"length_tolerance\": -0.01}",
     {": key \"length_tolerance\": -0.01 is out of range [0, 1)"}},
    {"score.json", "{\"score_c\": -1}", {": key \"score_c\": -1 is out of range [0, 1e6]"}},
    {"score-type.json", "{\"score_c\": \"1.0\"}",
     {": key \"score_c\": expected a number, got \"1.0\""}},
    {"data.json", "{\"data\": 1}", {": key \"data\": expected true or false, got 1"}},
    {"hazard.json", "{\"hazard_check\": \"yes\"}",
     {": key \"hazard_check\": expected true or false, got \"yes\""}},
    {"capacity.json", "{\"capacity\": \"12XB\"}",
     {": key \"capacity\": invalid byte size \"12XB\": unknown unit \"XB\""}},
    {"capacity-big.json", "{\"capacity\": \"100TiB\"}",
     {": key \"capacity\": \"100TiB\" is out of range [0, 64TiB]"}},
    {"budget.json", "{\"pinned_budget\": \"-1GiB\"}",
     {": key \"pinned_budget\": invalid byte size \"-1GiB\": a byte size cannot be negative"}},
    {"budget0.json", "{\"pinned_budget\": 0}",
     {": key \"pinned_budget\": 0 is out of range (0, 16EiB) bytes"}},
    {"flops.json", "{\"peak_flops\": -3e14}",
     {": key \"peak_flops\": -3e+14 is out of range 0 (the preset's) or [1e6, 1e18]"}},
    {"bandwidth.json", "{\"h2d_bandwidth\": \"32GB/s\"}",
     {": key \"h2d_bandwidth\": expected a number, got \"32GB/s\""}},
    {"bandwidth-small.json", "{\"d2h_bandwidth\": 1}",
     {": key \"d2h_bandwidth\": 1 is out of range 0 (the preset's) or [1e3, 1e15] bytes/s"}},
    {"ordinal.json", "{\"ordinal\": 5000000000}",
     {": key \"ordinal\": 5000000000 is out of range [0, 1023]"}},
    {"queue.json", "{\"queue_depth\": 2000000}",
     {": key \"queue_depth\": 2000000 is out of range [0, 1000000]"}},
    {"launch.json", "{\"launch_ns\": {}}",
     {": key \"launch_ns\": expected a non-negative integer, got an object"}},
    {"latency.json", "{\"copy_latency_ns\": 2e12}",
     {": key \"copy_latency_ns\": 2e+12 is out of range [0, 1e12] ns"}},
};

static void test_bad_files(void **state)
{
    fixture_t *fx = *state;
    for (size_t i = 0; i < sizeof bad_files / sizeof bad_files[0]; i++) {
        const bad_file_t *b = &bad_files[i];
        const char *path = write_file(fx, b->name, b->text);
        cham_config_t c = cham_config_default();
        const cham_config_t before = c;
        char err[512] = "";
        cham_status_t st = cham_config_load_json(path, &c, err, sizeof err);
        if (st != CHAM_ERR_INVALID_ARG)
            fail_msg("%s: status %d (%s)", b->name, (int)st, err);
        /* Every message starts with the path as given. */
        if (strncmp(err, path, strlen(path)) != 0)
            fail_msg("%s: message \"%s\" does not start with the path", b->name, err);
        for (size_t k = 0; k < 3 && b->want[k]; k++)
            test_assert_contains(err, b->want[k]);
        assert_configs_equal(&c, &before);
    }
    assert_true(sizeof bad_files / sizeof bad_files[0] >= 12);
}

static void test_syntax_error_position(void **state)
{
    fixture_t *fx = *state;
    /* Line 3, column 18: the second comma (columns count from 1). */
    const char *path = write_file(fx, "cfg.json",
                                  "{\n  \"mode\": \"managed\",\n  \"score_c\": 1.0,,\n}\n");
    cham_config_t c = cham_config_default();
    char err[512];
    assert_int_equal(cham_config_load_json(path, &c, err, sizeof err), CHAM_ERR_INVALID_ARG);
    char want[300];
    snprintf(want, sizeof want, "%s:3:18: syntax error: ", path);
    test_assert_contains(err, want);
}

static void test_long_values_are_cut(void **state)
{
    fixture_t *fx = *state;
    char text[4096];
    char key[1500];
    memset(key, 'k', sizeof key - 1);
    key[sizeof key - 1] = '\0';
    snprintf(text, sizeof text, "{\"%s\": 1}", key);
    cham_config_t c = cham_config_default();
    char err[512];
    assert_int_equal(cham_config_load_json(write_file(fx, "longkey.json", text), &c, err,
                                           sizeof err), CHAM_ERR_INVALID_ARG);
    test_assert_contains(err, ": unknown key \"kkkk");
    test_assert_contains(err, "...\"");
    assert_true(strlen(err) < 200 + strlen(fx->path));

    /* Multi-byte characters are not cut in the middle. */
    char value[600] = "";
    for (int i = 0; i < 100; i++)
        strcat(value, "\xC3\xA9"); /* é */
    snprintf(text, sizeof text, "{\"preset\": \"%s\"}", value);
    assert_int_equal(cham_config_load_json(write_file(fx, "longvalue.json", text), &c, err,
                                           sizeof err), CHAM_ERR_INVALID_ARG);
    test_assert_contains(err, "unknown device preset \"\xC3\xA9");
    test_assert_contains(err, "\xC3\xA9...\" (known: ");

    /* A tiny or absent buffer is never overrun. */
    char tiny[8];
    memset(tiny, 'x', sizeof tiny);
    assert_int_equal(cham_config_load_json(write_file(fx, "t.json", "[]"), &c, tiny,
                                           sizeof tiny), CHAM_ERR_INVALID_ARG);
    assert_int_equal(strlen(tiny), sizeof tiny - 1);
    assert_int_equal(cham_config_load_json(fx->path, &c, NULL, 0), CHAM_ERR_INVALID_ARG);
}

/* ---- files that cannot be read --------------------------------------------------------*/

static void test_unreadable(void **state)
{
    fixture_t *fx = *state;
    char path[300], err[512];
    cham_config_t c = cham_config_default();

    test_path(path, sizeof path, fx->dir, "missing.json");
    assert_int_equal(cham_config_load_json(path, &c, err, sizeof err), CHAM_ERR_NOT_FOUND);
    test_assert_contains(err, path);
    test_assert_contains(err, strerror(ENOENT));

    test_path(path, sizeof path, fx->dir, "missing-dir/cfg.json");
    assert_int_equal(cham_config_load_json(path, &c, err, sizeof err), CHAM_ERR_NOT_FOUND);
    test_assert_contains(err, "missing-dir/cfg.json: cannot open: ");

    /* A directory opens but cannot be read. */
    test_path(path, sizeof path, fx->dir, "a-directory.json");
    assert_int_equal(mkdir(path, 0700), 0);
    assert_int_equal(cham_config_load_json(path, &c, err, sizeof err), CHAM_ERR_INVALID_ARG);
    test_assert_contains(err, "a-directory.json: cannot ");
    test_assert_contains(err, strerror(EISDIR));

    /* Without read permission (root reads anything, so only as a user). */
    if (geteuid() != 0) {
        const char *p = write_file(fx, "secret.json", "{}");
        assert_int_equal(chmod(p, 0), 0);
        assert_int_equal(cham_config_load_json(p, &c, err, sizeof err), CHAM_ERR_INVALID_ARG);
        test_assert_contains(err, "secret.json: cannot open: ");
        test_assert_contains(err, strerror(EACCES));
    }

    /* Over the size limit. */
    size_t big = (1u << 20) + 10;
    char *text = malloc(big);
    assert_non_null(text);
    memset(text, ' ', big);
    text[0] = '{';
    text[big - 1] = '}';
    assert_int_equal(cham_config_load_json(write_bytes(fx, "big.json", text, big), &c, err,
                                           sizeof err), CHAM_ERR_INVALID_ARG);
    free(text);
    test_assert_contains(err, "big.json: file too large: 1048586 bytes, over the limit of "
                              "1048576 bytes (1 MiB) for a config file");

    /* A NUL byte outside a string. */
    assert_int_equal(cham_config_load_json(write_bytes(fx, "nul.json", "{\0}", 3), &c, err,
                                           sizeof err), CHAM_ERR_INVALID_ARG);
    test_assert_contains(err, "nul.json:1:");
}

/* Devices and pipes: a device is refused at once (/dev/zero would never
 * end), a pipe is read up to the limit and named as what it is. */
static void test_special_files(void **state)
{
    fixture_t *fx = *state;
    char err[512];
    cham_config_t c = cham_config_default();
    assert_int_equal(cham_config_load_json("/dev/zero", &c, err, sizeof err),
                     CHAM_ERR_INVALID_ARG);
    test_assert_contains(err, "/dev/zero: cannot read: it is a character device, not a regular "
                              "file");

    char fifo[300];
    test_path(fifo, sizeof fifo, fx->dir, "pipe.json");
    assert_int_equal(mkfifo(fifo, 0600), 0);
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) {                  /* writes 2 MiB of spaces, more than the limit */
        signal(SIGPIPE, SIG_DFL);
        int fd = open(fifo, O_WRONLY);
        static char spaces[65536];
        memset(spaces, ' ', sizeof spaces);
        for (int i = 0; fd >= 0 && i < 32; i++)
            if (write(fd, spaces, sizeof spaces) < 0)
                break;
        _exit(0);
    }
    cham_status_t st = cham_config_load_json(fifo, &c, err, sizeof err);
    int status;
    waitpid(child, &status, 0);
    assert_int_equal(st, CHAM_ERR_INVALID_ARG);
    test_assert_contains(err, "pipe.json: a FIFO, not a regular file, gave more than 1048576 "
                              "bytes (1 MiB), the limit for a config file");
}

/* What loads validates: a rule between two fields holds for a file too.
 * {"profiler": false} over the defaults (executor on) is refused with the
 * rule, and the config is left as it was; with the executor off, in the
 * file or in the config it is read over, it loads. */
static void test_load_validates(void **state)
{
    fixture_t *fx = *state;
    char err[512];
    cham_config_t c = cham_config_default();
    const cham_config_t before = c;
    assert_int_equal(cham_config_load_json(write_file(fx, "p.json", "{\"profiler\": false}"),
                                           &c, err, sizeof err), CHAM_ERR_INVALID_ARG);
    test_assert_contains(err, "p.json: the resulting config is not valid: profiler: false "
                              "needs executor: false");
    assert_configs_equal(&c, &before);

    assert_int_equal(cham_config_load_json(write_file(fx, "pe.json", "{\"profiler\": false, "
                                                      "\"executor\": false}"),
                                           &c, err, sizeof err), CHAM_OK);
    assert_false(c.profiler);
    assert_int_equal(cham_config_validate(&c, err, sizeof err), CHAM_OK);

    c = cham_config_default();
    c.executor = false;
    assert_int_equal(cham_config_load_json(write_file(fx, "p2.json", "{\"profiler\": false}"),
                                           &c, err, sizeof err), CHAM_OK);
    assert_int_equal(cham_config_validate(&c, err, sizeof err), CHAM_OK);

    /* Turning the executor back on under a config without the profiler. */
    assert_int_equal(cham_config_load_json(write_file(fx, "e.json", "{\"executor\": true}"),
                                           &c, err, sizeof err), CHAM_ERR_INVALID_ARG);
    test_assert_contains(err, "profiler: false needs executor: false");
}

/* ---- validate ---------------------------------------------------------------------------*/

typedef struct bad_config {
    void (*spoil)(cham_config_t *c);
    const char *want;
} bad_config_t;

#define SPOIL(fn, stmt) static void fn(cham_config_t *c) { stmt; }
SPOIL(cosine_high, c->cosine_threshold = 1.5)
SPOIL(cosine_zero, c->cosine_threshold = 0)
SPOIL(cosine_nan, c->cosine_threshold = NAN)
SPOIL(tolerance_one, c->length_tolerance = 1.0)
SPOIL(tolerance_neg, c->length_tolerance = -0.5)
SPOIL(score_inf, c->score_c = INFINITY)
SPOIL(score_neg, c->score_c = -2)
SPOIL(warmup_big, c->warmup_steps = 2000000)
SPOIL(genpolicy_max, c->genpolicy_steps = UINT32_MAX)
SPOIL(budget_zero, c->pinned_budget = 0)
SPOIL(capacity_big, c->device.capacity = 65 * TiB)
SPOIL(flops_neg, c->device.peak_flops = -1)
SPOIL(hbm_nan, c->device.hbm_bandwidth = NAN)
SPOIL(h2d_big, c->device.h2d_bandwidth = 1e20)
SPOIL(p2p_inf, c->device.p2p_bandwidth = -INFINITY)
SPOIL(ordinal_neg, c->device.ordinal = -1)
SPOIL(queue_big, c->device.queue_depth = 5000000)
SPOIL(launch_big, c->device.launch_ns = UINT64_C(10000000000000))
SPOIL(preset_bad, c->device.preset = "b200")
SPOIL(backend_bad, c->device.backend = "tpu")
SPOIL(mode_bad, c->mode = (cham_mode_t)7)

static const bad_config_t bad_configs[] = {
    {cosine_high, "cosine_threshold: 1.5 is out of range (0, 1]"},
    {cosine_zero, "cosine_threshold: 0 is out of range (0, 1]"},
    {cosine_nan, "cosine_threshold: nan is out of range (0, 1]"},
    {tolerance_one, "length_tolerance: 1 is out of range [0, 1)"},
    {tolerance_neg, "length_tolerance: -0.5 is out of range [0, 1)"},
    {score_inf, "score_c: inf is out of range [0, 1e6]"},
    {score_neg, "score_c: -2 is out of range [0, 1e6]"},
    {warmup_big, "warmup_steps: 2000000 is out of range [0, 1000000]"},
    {genpolicy_max, "genpolicy_steps: 4294967295 is out of range [1, 1000000]"},
    {budget_zero, "pinned_budget: 0 is out of range (0, 16EiB) bytes"},
    {capacity_big, "device.capacity: 71468255805440 is out of range [0, 64TiB]"},
    {flops_neg, "device.peak_flops: -1 is out of range 0 (the preset's) or [1e6, 1e18]"},
    {hbm_nan, "device.hbm_bandwidth: nan is out of range"},
    {h2d_big, "device.h2d_bandwidth: 1e+20 is out of range"},
    {p2p_inf, "device.p2p_bandwidth: -inf is out of range"},
    {ordinal_neg, "device.ordinal: -1 is out of range [0, 1023]"},
    {queue_big, "device.queue_depth: 5000000 is out of range [0, 1000000]"},
    {launch_big, "device.launch_ns: 10000000000000 is out of range [0, 1e12] ns"},
    {preset_bad, "device.preset: unknown device preset \"b200\" (known: ascend-910b"},
    {backend_bad, "device.backend: unknown backend \"tpu\" (known: sim, cuda)"},
    {mode_bad, "mode: 7 is not a mode"},
};

static void test_validate(void **state)
{
    (void)state;
    char err[512];
    for (size_t i = 0; i < sizeof bad_configs / sizeof bad_configs[0]; i++) {
        cham_config_t c = cham_config_default();
        bad_configs[i].spoil(&c);
        err[0] = '\0';
        assert_int_equal(cham_config_validate(&c, err, sizeof err), CHAM_ERR_INVALID_ARG);
        test_assert_contains(err, bad_configs[i].want);
        assert_int_equal(cham_config_validate(&c, NULL, 0), CHAM_ERR_INVALID_ARG);
    }

    /* The ends of the ranges that are in, and the zeros that mean "default". */
    cham_config_t c = cham_config_default();
    c.device.backend = NULL;           /* NULL is the sim, as for cham_device_open */
    c.device.preset = "rtx3090-24g";   /* any string naming a preset */
    c.device.capacity = 64 * TiB;
    c.device.peak_flops = 0;
    c.device.hbm_bandwidth = 1e15;
    c.device.h2d_bandwidth = 1e3;
    c.device.ordinal = 1023;
    c.device.launch_ns = UINT64_C(1000000000000);
    c.device.queue_depth = 1000000;
    c.cosine_threshold = 1.0;
    c.length_tolerance = 0;
    c.score_c = 0;
    c.warmup_steps = 0;
    c.genpolicy_steps = 1000000;
    c.pinned_budget = 1;
    c.min_swap_bytes = UINT64_MAX;
    assert_int_equal(cham_config_validate(&c, err, sizeof err), CHAM_OK);
}

/* ---- random damage -------------------------------------------------------------------------*/

/* Flips, deletes and inserts bytes of the full file: every load returns a
 * status with a message naming the file, and whatever loads validates. */
static void test_random_damage(void **state)
{
    fixture_t *fx = *state;
    static const char alphabet[] = "{}[]\":,.-+eE0123456789 \n\\uGiBtruefalsnl\x80\xC3\xFF";
    test_rng_t rng = {.state = 0x9E3779B97F4A7C15u};
    size_t len = sizeof full_file - 1;
    char text[sizeof full_file + 64];
    int loaded = 0;
    for (int iter = 0; iter < 3000; iter++) {
        memcpy(text, full_file, len);
        size_t n = len;
        int edits = 1 + (int)test_rng_below(&rng, 4);
        for (int e = 0; e < edits; e++) {
            size_t at = (size_t)test_rng_below(&rng, n);
            char ch = alphabet[test_rng_below(&rng, sizeof alphabet - 1)];
            switch (test_rng_below(&rng, 3)) {
            case 0: text[at] = ch; break;
            case 1: memmove(text + at, text + at + 1, n - at - 1); n--; break;
            default:
                if (n < sizeof text) {
                    memmove(text + at + 1, text + at, n - at);
                    text[at] = ch;
                    n++;
                }
            }
        }
        const char *path = write_bytes(fx, "damaged.json", text, n);
        cham_config_t c = cham_config_default();
        char err[512] = "junk";
        cham_status_t st = cham_config_load_json(path, &c, err, sizeof err);
        if (st == CHAM_OK) {
            loaded++;
            assert_string_equal(err, "");
            if (cham_config_validate(&c, err, sizeof err) != CHAM_OK)
                fail_msg("loaded but invalid: %s\n%.*s", err, (int)n, text);
        } else {
            assert_int_equal(st, CHAM_ERR_INVALID_ARG);
            test_assert_contains(err, path);
        }
    }
    assert_true(loaded > 0);
}

/* A planner's keys (its registry row) are config keys like the others:
 * each is <name>_..., reads into its member, and a value outside its range
 * is an error naming the key and the range. */
static void check_planner_keys(const cham_planner_iface_t *p)
{
    for (size_t k = 0; k < p->n_keys; k++) {
        const cham_planner_key_t *key = &p->keys[k];
        size_t n = strlen(p->name);
        assert_true(strncmp(key->key, p->name, n) == 0 && key->key[n] == '_');
        char json[160], err[512] = "";
        cham_config_t c = cham_config_default();
        const char *at = (const char *)&c + key->offset;
        switch (key->kind) {
        case CHAM_PLANNER_KEY_BOOL: {
            bool was = *(const bool *)at;
            snprintf(json, sizeof json, "{\"%s\": %s}", key->key, was ? "false" : "true");
            assert_int_equal(cham_config_parse_json(json, strlen(json), "t", &c, err, sizeof err),
                             CHAM_OK);
            assert_int_equal(*(const bool *)at, !was);
            continue;
        }
        case CHAM_PLANNER_KEY_U32:
        case CHAM_PLANNER_KEY_U64: {
            snprintf(json, sizeof json, "{\"%s\": %llu}", key->key,
                     (unsigned long long)key->imin);
            assert_int_equal(cham_config_parse_json(json, strlen(json), "t", &c, err, sizeof err),
                             CHAM_OK);
            uint64_t got = key->kind == CHAM_PLANNER_KEY_U32 ? *(const uint32_t *)at
                                                              : *(const uint64_t *)at;
            assert_int_equal(got, key->imin);
            if (key->imax == UINT64_MAX)
                continue;
            snprintf(json, sizeof json, "{\"%s\": %llu}", key->key,
                     (unsigned long long)key->imax + 1);
            break;
        }
        case CHAM_PLANNER_KEY_REAL:
            snprintf(json, sizeof json, "{\"%s\": %.17g}", key->key, key->hi * 2 + 1);
            break;
        }
        assert_int_equal(cham_config_parse_json(json, strlen(json), "t", &c, err, sizeof err),
                         CHAM_ERR_INVALID_ARG);
        assert_non_null(strstr(err, key->key));
        assert_non_null(strstr(err, key->range));
    }
}

/* The planners' table (src/policy/registry.h) is what the loop, the
 * parser and the names read: a row out of its enum's order, or a name the
 * config does not parse back, is a planner the runtime mistakes for another. */
static void test_planner_table(void **state)
{
    (void)state;
    assert_true(cham_n_planners > 0);
    for (size_t i = 0; i < cham_n_planners; i++) {
        const cham_planner_iface_t *p = &cham_planners[i];
        assert_int_equal(p->kind, (int)i);
        assert_ptr_equal(cham_planner_of(p->kind), p);
        assert_ptr_equal(cham_planner_by_name(p->name), p);
        assert_string_equal(cham_planner_kind_name(p->kind), p->name);
        assert_non_null(p->plan);
        assert_true(!p->defaults == !p->options_size);
        /* REPLANS is a kind of static planner. */
        if (p->flags & CHAM_PLANNER_FLAG_REPLANS)
            assert_true(p->flags & CHAM_PLANNER_FLAG_STATIC);
        char json[128], err[256] = "";
        snprintf(json, sizeof json, "{\"planner\": \"%s\"}", p->name);
        cham_config_t c = cham_config_default();
        assert_int_equal(cham_config_parse_json(json, strlen(json), "t", &c, err, sizeof err),
                         CHAM_OK);
        assert_int_equal(c.planner, p->kind);
        check_planner_keys(p);
    }
    assert_null(cham_planner_by_name("chameleo"));
    assert_null(cham_planner_by_name(NULL));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_planner_table),
        cmocka_unit_test(test_defaults),
        cmocka_unit_test_setup_teardown(test_full_file, setup, teardown),
        cmocka_unit_test_setup_teardown(test_absent_keys_keep_values, setup, teardown),
        cmocka_unit_test(test_text_in_memory),
        cmocka_unit_test_setup_teardown(test_size_strings, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_files, setup, teardown),
        cmocka_unit_test_setup_teardown(test_syntax_error_position, setup, teardown),
        cmocka_unit_test_setup_teardown(test_long_values_are_cut, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unreadable, setup, teardown),
        cmocka_unit_test_setup_teardown(test_special_files, setup, teardown),
        cmocka_unit_test_setup_teardown(test_load_validates, setup, teardown),
        cmocka_unit_test(test_validate),
        cmocka_unit_test_setup_teardown(test_random_damage, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
