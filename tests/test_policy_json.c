/* Policies as JSON (src/policy/policy_json.c, docs/policy-format.md): a
 * policy built with the container functions is saved, loaded and compared
 * field by field (64-bit hex values above 2^63 and a score that is not a
 * short decimal included), and saved again byte for byte; a policy that
 * breaks an invariant is not saved; one test per malformed file, each
 * checked for the position its message names; a missing file. Files go to
 * a mkdtemp directory that is removed at the end. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "support/files.h"

#include "chameleon/policy.h"
#include "policy/policy-impl.h"

static char tmpdir[512];

static int group_setup(void **state)
{
    (void)state;
    return test_tmpdir_make(tmpdir, sizeof tmpdir, "cham-test-policy");
}

static int group_teardown(void **state)
{
    (void)state;
    return test_tmpdir_remove(tmpdir);
}

/* ---- a sample policy ------------------------------------------------------*/

#define BIG_PTR UINT64_C(0xFFFFFFFFFFFFF000)           /* above 2^63 */
#define ODD_PTR ((UINT64_C(1) << 53) + 1)             /* not a double */
#define HISTORY UINT64_C(0x8000000000000001)
#define MAX_EXACT ((UINT64_C(1) << 53) - 1)

static cham_tensor_use_t use(uint64_t storage, uint64_t ptr, uint64_t bytes, cham_dtype_t dtype,
                             uint32_t count, uint64_t history, bool output)
{
    return (cham_tensor_use_t){.storage = storage, .data_ptr = ptr, .bytes = bytes,
                               .storage_bytes = bytes + 16, .dtype = dtype,
                               .use_count = count, .history = history, .output = output};
}

/* 10 ops in 3 layers, 3 items. */
static cham_policy_t *sample_policy(void)
{
    cham_policy_t *p = cham_policy_new("chameleon");
    assert_non_null(p);
    p->capacity = UINT64_C(80) << 30;
    p->usable = (UINT64_C(80) << 30) - (UINT64_C(1) << 30);
    p->peak_without_swaps = UINT64_C(96) << 30;
    p->predicted_peak = UINT64_C(79) << 30;
    p->step_ns = 123456789;
    p->predicted_step_ns = MAX_EXACT;
    p->n_ops = 10;
    const cham_logical_layer_t layers[] = {
        {.start_op = 0, .n_ops = 4, .phase = CHAM_PHASE_FORWARD, .time_ns = 40, .remaining_ns = 0},
        {.start_op = 4, .n_ops = 5, .phase = CHAM_PHASE_BACKWARD, .time_ns = 50,
         .remaining_ns = 7},
        {.start_op = 9, .n_ops = 1, .phase = CHAM_PHASE_OPTIMIZER, .time_ns = MAX_EXACT,
         .remaining_ns = MAX_EXACT},
    };
    for (size_t k = 0; k < 3; k++)
        assert_true(cham_policy_add_layer(p, &layers[k]));
    const cham_policy_item_t items[] = {
        {.storage = 1, .bytes = 64 << 20,
         .out_use = use(1, BIG_PTR, 64 << 20, CHAM_DTYPE_F16, 1, HISTORY, false),
         .in_use = use(1, ODD_PTR, 64 << 20, CHAM_DTYPE_F16, 2, UINT64_MAX, false),
         .swap_out_op = 1, .swap_out_done_op = 2, .free_op = 2, .swap_in_layer = 1,
         .swap_in_op = 6, .use_op = 8, .score = 0.1, .stall_ns = 0},
        {.storage = MAX_EXACT, .bytes = MAX_EXACT,
         .out_use = use(MAX_EXACT, 0, 0, CHAM_DTYPE_BOOL, UINT32_MAX, 0, true),
         .in_use = use(MAX_EXACT, 1, MAX_EXACT - 16, CHAM_DTYPE_I8, 0, 1, false),
         .swap_out_op = 1, .swap_out_done_op = 1, .free_op = 3, .swap_in_layer = 1,
         .swap_in_op = 3, .use_op = 7, .score = -1e300, .stall_ns = 5},
        {.storage = 9, .bytes = 1,
         .out_use = use(9, 0x10, 1, CHAM_DTYPE_BF16, 3, 0x30201, true),
         .in_use = use(9, 0x20, 1, CHAM_DTYPE_F64, 4, 0x3020105, false),
         .swap_out_op = 2, .swap_out_done_op = 9, .free_op = 9, .swap_in_layer = 2,
         .swap_in_op = 9, .use_op = 9, .score = 1.0 / 3.0, .stall_ns = MAX_EXACT},
        /* Model state away across the step's end: back before op 0 of the
         * next step, its block given back at that step's first op; its
         * bytes unchanged since they came back, it leaves free. */
        {.storage = 10, .bytes = 4096,
         .out_use = use(10, 0x40, 4096, CHAM_DTYPE_F32, 0, 0, true),
         .in_use = use(10, 0x40, 4096, CHAM_DTYPE_F32, 0, 0, false),
         .swap_out_op = 9, .swap_out_done_op = 9, .free_op = 10, .swap_in_layer = 0,
         .swap_in_op = 0, .use_op = 0, .score = 2, .stall_ns = 3, .wraps = true,
         .out_kept = true},
        /* One whose copy runs on into the next step: done at its op 1,
         * the block given back at its op 2 (n_ops + 2), back before op 3. */
        {.storage = 11, .bytes = 8192,
         .out_use = use(11, 0x80, 8192, CHAM_DTYPE_F32, 0, 0, true),
         .in_use = use(11, 0x80, 8192, CHAM_DTYPE_F32, 0, 0, false),
         .swap_out_op = 9, .swap_out_done_op = 11, .free_op = 12, .swap_in_layer = 0,
         .swap_in_op = 3, .use_op = 5, .score = 2, .stall_ns = 0, .wraps = true},
    };
    for (size_t i = 0; i < 5; i++)
        assert_true(cham_policy_add_item(p, &items[i]));
    return p;
}

static void assert_same_use(const cham_tensor_use_t *a, const cham_tensor_use_t *b)
{
    assert_true(a->storage == b->storage);
    assert_true(a->data_ptr == b->data_ptr);
    assert_true(a->bytes == b->bytes);
    assert_true(a->storage_bytes == b->storage_bytes);
    assert_int_equal(a->dtype, b->dtype);
    assert_int_equal(a->use_count, b->use_count);
    assert_true(a->history == b->history);
    assert_int_equal(a->output, b->output);
}

static void assert_same_policy(const cham_policy_t *x, const cham_policy_t *y)
{
    cham_policy_view_t a, b;
    cham_policy_get(x, &a);
    cham_policy_get(y, &b);
    assert_string_equal(a.planner, b.planner);
    assert_true(a.capacity == b.capacity);
    assert_true(a.usable == b.usable);
    assert_true(a.peak_without_swaps == b.peak_without_swaps);
    assert_true(a.predicted_peak == b.predicted_peak);
    assert_true(a.step_ns == b.step_ns);
    assert_true(a.predicted_step_ns == b.predicted_step_ns);
    assert_int_equal(a.n_ops, b.n_ops);
    assert_int_equal(a.n_layers, b.n_layers);
    for (size_t k = 0; k < a.n_layers; k++) {
        const cham_logical_layer_t *l = &a.layers[k], *m = &b.layers[k];
        assert_int_equal(l->start_op, m->start_op);
        assert_int_equal(l->n_ops, m->n_ops);
        assert_int_equal(l->phase, m->phase);
        assert_true(l->time_ns == m->time_ns);
        assert_true(l->remaining_ns == m->remaining_ns);
    }
    assert_int_equal(a.n_items, b.n_items);
    for (size_t i = 0; i < a.n_items; i++) {
        const cham_policy_item_t *s = &a.items[i], *t = &b.items[i];
        assert_true(s->storage == t->storage);
        assert_true(s->bytes == t->bytes);
        assert_same_use(&s->out_use, &t->out_use);
        assert_same_use(&s->in_use, &t->in_use);
        assert_int_equal(s->swap_out_op, t->swap_out_op);
        assert_int_equal(s->swap_out_done_op, t->swap_out_done_op);
        assert_int_equal(s->free_op, t->free_op);
        assert_int_equal(s->swap_in_layer, t->swap_in_layer);
        assert_int_equal(s->swap_in_op, t->swap_in_op);
        assert_int_equal(s->use_op, t->use_op);
        assert_memory_equal(&s->score, &t->score, sizeof s->score);   /* bit for bit */
        assert_true(s->stall_ns == t->stall_ns);
        assert_int_equal(s->wraps, t->wraps);
        assert_int_equal(s->out_kept, t->out_kept);
    }
}

static void test_round_trip(void **state)
{
    (void)state;
    char path[1024], path2[1024], err[512];
    cham_policy_t *p = sample_policy();
    test_path(path, sizeof path, tmpdir, "round.json");
    cham_status_t st = cham_policy_save_json(p, path, err, sizeof err);
    if (st != CHAM_OK)
        print_error("%s\n", err);
    assert_int_equal(st, CHAM_OK);

    cham_policy_t *q = NULL;
    st = cham_policy_load_json(path, &q, err, sizeof err);
    if (st != CHAM_OK)
        print_error("%s\n", err);
    assert_int_equal(st, CHAM_OK);
    assert_non_null(q);
    assert_same_policy(p, q);
    /* The bit patterns are hex strings, all 16 digits. */
    cham_policy_view_t v;
    cham_policy_get(q, &v);
    assert_true(v.items[0].out_use.data_ptr == BIG_PTR);
    assert_true(v.items[0].in_use.data_ptr == ODD_PTR);
    assert_true(v.items[0].out_use.history == HISTORY);
    assert_true(v.items[0].in_use.history == UINT64_MAX);

    char *text = test_read_text(path);
    test_assert_contains(text, "\"format\": \"chameleon-policy\"");
    test_assert_contains(text, "\"data_ptr\":\"0xfffffffffffff000\"");
    test_assert_contains(text, "\"data_ptr\":\"0x0020000000000001\"");
    test_assert_contains(text, "\"history\":\"0x8000000000000001\"");
    test_assert_contains(text, "\"history\":\"0xffffffffffffffff\"");
    test_assert_contains(text, "\"predicted_step_ns\": 9007199254740991");

    /* Saving what was loaded gives the same bytes. */
    test_path(path2, sizeof path2, tmpdir, "round2.json");
    assert_int_equal(cham_policy_save_json(q, path2, err, sizeof err), CHAM_OK);
    char *text2 = test_read_text(path2);
    assert_string_equal(text, text2);
    free(text);
    free(text2);
    cham_policy_free(q);
    cham_policy_free(p);
    unlink(path);
    unlink(path2);
}

/* An empty policy (no ops, no layers, no items) also round-trips. */
static void test_empty_policy(void **state)
{
    (void)state;
    char path[1024], err[512];
    test_path(path, sizeof path, tmpdir, "empty_policy.json");
    cham_policy_t *p = cham_policy_new("none");
    assert_non_null(p);
    assert_int_equal(cham_policy_save_json(p, path, err, sizeof err), CHAM_OK);
    cham_policy_t *q = NULL;
    assert_int_equal(cham_policy_load_json(path, &q, err, sizeof err), CHAM_OK);
    assert_same_policy(p, q);
    cham_policy_free(q);
    cham_policy_free(p);
    unlink(path);
}

/* A policy that breaks an invariant is not written (no file is left). */
static void test_save_refuses(void **state)
{
    (void)state;
    char path[1024], err[512];
    test_path(path, sizeof path, tmpdir, "refused.json");
    const struct {
        size_t item;
        size_t offset;          /* of a uint32_t field */
        uint32_t value;
        const char *want;
    } cases[] = {
        {2, offsetof(cham_policy_item_t, use_op), 10,
         "refused.json: cannot save: items[2].use_op: op 10 is out of range"},
        {0, offsetof(cham_policy_item_t, free_op), 1,
         "refused.json: cannot save: items[0].free_op: 1 is not after swap_out_op 1"},
        {1, offsetof(cham_policy_item_t, swap_in_layer), 3,
         "refused.json: cannot save: items[1].swap_in_layer: layer 3 is out of range"},
        {1, offsetof(cham_policy_item_t, swap_out_op), 0,
         "refused.json: cannot save: items[1].swap_out_op: 0 is before items[0]'s 1"},
        {4, offsetof(cham_policy_item_t, free_op), 14,
         "refused.json: cannot save: items[4].free_op: 14 is op 4 of the next step, after its "
         "swap_in_op 3 there"},
        {4, offsetof(cham_policy_item_t, swap_out_done_op), 12,
         "refused.json: cannot save: items[4].swap_out_done_op: 12 is in the next step, not "
         "before free_op 12"},
        {4, offsetof(cham_policy_item_t, free_op), 20,
         "refused.json: cannot save: items[4].free_op: op 20 is out of range: the policy plans "
         "10 ops (0 .. 19, from n_ops on the next step's)"},
        {2, offsetof(cham_policy_item_t, free_op), 10,
         "refused.json: cannot save: items[2].free_op: op 10 is out of range: the policy plans "
         "10 ops (0 .. 9)"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        cham_policy_t *p = sample_policy();
        uint32_t *field = (uint32_t *)((char *)&p->items[cases[c].item] + cases[c].offset);
        *field = cases[c].value;
        assert_int_equal(cham_policy_save_json(p, path, err, sizeof err), CHAM_ERR_INVALID_ARG);
        test_assert_contains(err, cases[c].want);
        assert_int_equal(access(path, F_OK), -1);
        cham_policy_free(p);
    }
    cham_policy_t *p = sample_policy();
    p->layers[1].start_op = 5;
    assert_int_equal(cham_policy_save_json(p, path, err, sizeof err), CHAM_ERR_INVALID_ARG);
    test_assert_contains(err, "cannot save: layers[1].start_op: 5, expected 4");
    p->layers[1].start_op = 4;
    p->peak_without_swaps = MAX_EXACT + 1;
    assert_int_equal(cham_policy_save_json(p, path, err, sizeof err), CHAM_ERR_INVALID_ARG);
    test_assert_contains(err, "cannot save: peak_without_swaps: 9007199254740992 is above 2^53 - 1");
    p->peak_without_swaps = 0;
    p->items[0].out_use.storage_bytes = 1;
    assert_int_equal(cham_policy_save_json(p, path, err, sizeof err), CHAM_ERR_INVALID_ARG);
    test_assert_contains(err, "items[0].out_use.bytes: 67108864 is more than storage_bytes 1");
    p->items[0].out_use.storage_bytes = 64 << 20;
    char missing[1024];
    test_path(missing, sizeof missing, tmpdir, "no/such/dir.json");
    assert_int_equal(cham_policy_save_json(p, missing, err, sizeof err), CHAM_ERR_NOT_FOUND);
    test_assert_contains(err, "dir.json: cannot create: ");
    assert_int_equal(access(path, F_OK), -1);
    cham_policy_free(p);
}

static void test_missing_file(void **state)
{
    (void)state;
    char path[1024], err[512];
    test_path(path, sizeof path, tmpdir, "missing.json");
    cham_policy_t *q = (cham_policy_t *)&q;
    assert_int_equal(cham_policy_load_json(path, &q, err, sizeof err), CHAM_ERR_NOT_FOUND);
    assert_null(q);
    test_assert_contains(err, "missing.json: cannot open: No such file or directory");
    assert_int_equal(cham_policy_load_json(path, &q, NULL, 0), CHAM_ERR_NOT_FOUND);
}

/* ---- malformed files ------------------------------------------------------*/

/* A valid file: 6 ops in two layers, two items. Each case changes one
 * thing (the find strings are unique in it). */
#define HEAD "{\n" \
    " \"format\": \"chameleon-policy\",\n" \
    " \"version\": 1,\n" \
    " \"planner\": \"chameleon\",\n" \
    " \"capacity\": 4096, \"usable\": 4000,\n" \
    " \"peak_without_swaps\": 5000, \"predicted_peak\": 3900,\n" \
    " \"step_ns\": 600, \"predicted_step_ns\": 650,\n" \
    " \"n_ops\": 6,\n"
#define LAYERS " \"layers\": [\n" \
    "  {\"start_op\": 0, \"n_ops\": 3, \"phase\": \"forward\", \"time_ns\": 300, " \
    "\"remaining_ns\": 300},\n" \
    "  {\"start_op\": 3, \"n_ops\": 3, \"phase\": \"backward\", \"time_ns\": 300, " \
    "\"remaining_ns\": 250}\n" \
    " ],\n"
#define USE1 "{\"storage\": 1, \"data_ptr\": \"0x1000\", \"bytes\": 512, \"storage_bytes\": 512, " \
    "\"dtype\": \"f32\", \"use_count\": 1, \"history\": \"0x00\", \"output\": false}"
#define USE2_OUT "{\"storage\": 2, \"data_ptr\": \"0x2000\", \"bytes\": 1024, " \
    "\"storage_bytes\": 2048, \"dtype\": \"f16\", \"use_count\": 0, \"history\": \"0xFF\", " \
    "\"output\": true}"
#define USE2_IN "{\"storage\": 2, \"data_ptr\": \"0x2400\", \"bytes\": 2048, " \
    "\"storage_bytes\": 2048, \"dtype\": \"f16\", \"use_count\": 2, \"history\": \"0x0102\", " \
    "\"output\": false}"
#define ITEMS " \"items\": [\n" \
    "  {\"storage\": 1, \"bytes\": 512, \"out_use\": " USE1 ", \"in_use\": " USE1 ",\n" \
    "   \"swap_out_op\": 0, \"swap_out_done_op\": 1, \"free_op\": 1, \"swap_in_layer\": 1,\n" \
    "   \"swap_in_op\": 4, \"use_op\": 5, \"score\": 2.5, \"stall_ns\": 0},\n" \
    "  {\"storage\": 2, \"bytes\": 2048, \"out_use\": " USE2_OUT ", \"in_use\": " USE2_IN ",\n" \
    "   \"swap_out_op\": 1, \"swap_out_done_op\": 2, \"free_op\": 2, \"swap_in_layer\": 0,\n" \
    "   \"swap_in_op\": 2, \"use_op\": 3, \"score\": 7, \"stall_ns\": 10}\n" \
    " ]\n"
#define BASE HEAD LAYERS ITEMS "}\n"

/* A malformed file: text (BASE when NULL) with find replaced by replace, or
 * cut to cut bytes; the status and the parts its message must contain. */
typedef struct bad_case {
    const char *name;
    const char *text;
    const char *find, *replace;
    size_t cut;
    cham_status_t status;
    const char *want[3];
} bad_case_t;

static const bad_case_t bad_cases[] = {
    {"syntax_error", NULL, "\"n_ops\": 6,", "\"n_ops\": 6", 0, CHAM_ERR_INVALID_ARG,
     {"bad_syntax_error.json:9:9: syntax error: ", "'}' expected near '\"layers\"'"}},
    {"truncated", NULL, NULL, NULL, sizeof(BASE) / 2, CHAM_ERR_INVALID_ARG,
     {"bad_truncated.json:", "unexpected end of file (truncated?)"}},
    {"empty", "", NULL, NULL, 0, CHAM_ERR_INVALID_ARG,
     {"bad_empty.json: empty file (expected a chameleon policy: a JSON object)"}},
    {"wrong_format", NULL, "\"chameleon-policy\"", "\"chameleon-profile\"", 0,
     CHAM_ERR_INVALID_ARG,
     {"bad_wrong_format.json: not a chameleon policy: \"format\" is \"chameleon-profile\", "
      "expected \"chameleon-policy\""}},
    {"no_format", "{\"items\": []}", NULL, NULL, 0, CHAM_ERR_INVALID_ARG,
     {"bad_no_format.json: not a chameleon policy: no \"format\" key"}},
    {"future_version", NULL, "\"version\": 1", "\"version\": 2", 0, CHAM_ERR_UNSUPPORTED,
     {"bad_future_version.json: policy format version 2 is newer than this library reads "
      "(version 1)"}},
    {"missing_key", NULL, " \"n_ops\": 6,\n", "", 0, CHAM_ERR_INVALID_ARG,
     {"bad_missing_key.json: missing key \"n_ops\""}},
    {"deep_type", NULL, "\"bytes\": 1024", "\"bytes\": \"1024\"", 0, CHAM_ERR_INVALID_ARG,
     {"bad_deep_type.json: items[1].out_use.bytes: expected a non-negative integer, "
      "got \"1024\""}},
    {"op_beyond_n_ops", NULL, "\"use_op\": 5", "\"use_op\": 6", 0, CHAM_ERR_INVALID_ARG,
     {"bad_op_beyond_n_ops.json: items[0].use_op: op 6 is out of range: the policy plans "
      "6 ops"}},
    {"layer_beyond_layers", NULL, "\"swap_in_layer\": 0", "\"swap_in_layer\": 2", 0,
     CHAM_ERR_INVALID_ARG,
     {"bad_layer_beyond_layers.json: items[1].swap_in_layer: layer 2 is out of range: "
      "\"layers\" has 2"}},
    {"free_before_out", NULL, "\"free_op\": 1", "\"free_op\": 0", 0, CHAM_ERR_INVALID_ARG,
     {"bad_free_before_out.json: items[0].free_op: 0 is not after swap_out_op 0",
      "(swap_out_op < free_op <= swap_in_op <= use_op)"}},
    {"wrap_order", NULL, "\"stall_ns\": 10}", "\"stall_ns\": 10, \"wraps\": true}", 0,
     CHAM_ERR_INVALID_ARG,
     {"bad_wrap_order.json: items[1]: ops 1, 2, 2, 3 out of order for an item that wraps",
      "in the next step swap_in_op <= use_op <= swap_out_op"}},
    {"wrap_free_late", NULL, "\"stall_ns\": 0}", "\"stall_ns\": 0, \"wraps\": true}", 0,
     CHAM_ERR_INVALID_ARG, {"items[0]: ops 0, 1, 4, 5 out of order for an item that wraps"}},
    {"swap_in_after_use", NULL, "\"use_op\": 3", "\"use_op\": 1", 0, CHAM_ERR_INVALID_ARG,
     {"bad_swap_in_after_use.json: items[1].use_op: 1 is before swap_in_op 2"}},
    {"done_before_out", NULL, "\"swap_out_done_op\": 2", "\"swap_out_done_op\": 0", 0,
     CHAM_ERR_INVALID_ARG, {"items[1].swap_out_done_op: 0 is before swap_out_op 1"}},
    {"items_misordered", NULL,
     "\"swap_out_op\": 0, \"swap_out_done_op\": 1, \"free_op\": 1, \"swap_in_layer\": 1,\n"
     "   \"swap_in_op\": 4",
     "\"swap_out_op\": 2, \"swap_out_done_op\": 2, \"free_op\": 3, \"swap_in_layer\": 1,\n"
     "   \"swap_in_op\": 4", 0, CHAM_ERR_INVALID_ARG,
     {"items[1].swap_out_op: 1 is before items[0]'s 2 (items are in swap-out order)"}},
    {"unknown_key", NULL, "\"stall_ns\": 10", "\"stall_ns\": 10, \"reason\": \"x\"", 0,
     CHAM_ERR_INVALID_ARG,
     {"bad_unknown_key.json: items[1]: unknown key \"reason\" (the keys are: storage, bytes, "
      "out_use"}},
    {"unknown_use_key", NULL, "\"history\": \"0xFF\",", "\"history\": \"0xFF\", \"y\": 1,", 0,
     CHAM_ERR_INVALID_ARG, {"items[1].out_use: unknown key \"y\""}},
    {"layers_gap", NULL, "\"start_op\": 3", "\"start_op\": 4", 0, CHAM_ERR_INVALID_ARG,
     {"bad_layers_gap.json: layers[1].start_op: 4, expected 3 (layers tile the ops "
      "[0, n_ops) in order)"}},
    {"layers_short", NULL, "\"n_ops\": 6,", "\"n_ops\": 7,", 0, CHAM_ERR_INVALID_ARG,
     {"bad_layers_short.json: layers: the layers cover ops [0, 6), not [0, n_ops) = [0, 7)"}},
    {"layers_past_end", NULL, "\"n_ops\": 6,", "\"n_ops\": 5,", 0, CHAM_ERR_INVALID_ARG,
     {"layers[1].n_ops: 3 ops from op 3 go past n_ops"}},
    {"layer_phase", NULL, "\"backward\"", "\"bwd\"", 0, CHAM_ERR_INVALID_ARG,
     {"layers[1].phase: unknown phase \"bwd\" (expected forward, backward, optimizer, "
      "other or eval)"}},
    {"hex_number", NULL, "\"data_ptr\": \"0x2000\"", "\"data_ptr\": 8192", 0,
     CHAM_ERR_INVALID_ARG,
     {"items[1].out_use.data_ptr: expected a hex string \"0x\" + 1 to 16 hex digits, got 8192"}},
    {"score_string", NULL, "\"score\": 7", "\"score\": \"7\"", 0, CHAM_ERR_INVALID_ARG,
     {"items[1].score: expected a number, got \"7\""}},
    {"above_2_53", NULL, "\"capacity\": 4096", "\"capacity\": 9007199254740992", 0,
     CHAM_ERR_INVALID_ARG, {"bad_above_2_53.json: capacity: 9007199254740992 is above 2^53 - 1"}},
    {"planner_too_long", NULL, "\"chameleon\"", "\"a-planner-name-longer-than-31-bytes\"", 0,
     CHAM_ERR_INVALID_ARG, {"planner: expected a planner name (a string of at most 31 bytes)"}},
    {"items_not_array", HEAD LAYERS " \"items\": {}\n}", NULL, NULL, 0, CHAM_ERR_INVALID_ARG,
     {"bad_items_not_array.json: items: expected an array, got an object"}},
    {"top_level_array", "[]", NULL, NULL, 0, CHAM_ERR_INVALID_ARG,
     {"expected a JSON object at the top level, got an array"}},
};
#define N_BAD (sizeof bad_cases / sizeof bad_cases[0])

/* The base file is valid: each case fails because of its own change. */
static void test_base_loads(void **state)
{
    (void)state;
    char path[1024], err[512];
    test_path(path, sizeof path, tmpdir, "base.json");
    test_write_file(path, BASE, strlen(BASE));
    cham_policy_t *p = NULL;
    cham_status_t st = cham_policy_load_json(path, &p, err, sizeof err);
    if (st != CHAM_OK)
        print_error("%s\n", err);
    assert_int_equal(st, CHAM_OK);
    cham_policy_view_t v;
    cham_policy_get(p, &v);
    assert_string_equal(v.planner, "chameleon");
    assert_int_equal(v.n_ops, 6);
    assert_int_equal(v.n_layers, 2);
    assert_int_equal(v.n_items, 2);
    assert_true(v.items[1].out_use.history == 0xFF);
    assert_true(v.items[1].score == 7.0);
    assert_int_equal(v.layers[1].phase, CHAM_PHASE_BACKWARD);
    cham_policy_free(p);
    unlink(path);
}

static void test_bad_file(void **state)
{
    const bad_case_t *c = *state;
    char path[1024], name[128], err[512];
    snprintf(name, sizeof name, "bad_%s.json", c->name);
    test_path(path, sizeof path, tmpdir, name);

    const char *base = c->text ? c->text : BASE;
    char text[8192];
    assert_true(strlen(base) + 128 < sizeof text);
    if (c->find) {
        const char *at = strstr(base, c->find);
        assert_non_null(at);
        assert_null(strstr(at + 1, c->find));      /* the change is unambiguous */
        snprintf(text, sizeof text, "%.*s%s%s", (int)(at - base), base, c->replace,
                 at + strlen(c->find));
    } else {
        snprintf(text, sizeof text, "%s", base);
    }
    size_t len = c->cut ? c->cut : strlen(text);
    test_write_file(path, text, len);

    cham_policy_t *p = (cham_policy_t *)&p;    /* must come back NULL */
    cham_status_t st = cham_policy_load_json(path, &p, err, sizeof err);
    print_message("    %s\n", err);
    assert_null(p);
    assert_int_equal(st, c->status);
    for (size_t i = 0; i < 3 && c->want[i]; i++)
        test_assert_contains(err, c->want[i]);
    unlink(path);
}

int main(void)
{
    struct CMUnitTest tests[5 + N_BAD] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_empty_policy),
        cmocka_unit_test(test_save_refuses),
        cmocka_unit_test(test_missing_file),
        cmocka_unit_test(test_base_loads),
    };
    size_t n = 5;
    char names[N_BAD][64];
    for (size_t i = 0; i < N_BAD; i++) {
        snprintf(names[i], sizeof names[i], "test_bad_file/%s", bad_cases[i].name);
        tests[n++] = (struct CMUnitTest){.name = names[i],
                                         .test_func = test_bad_file,
                                         .initial_state = (void *)&bad_cases[i]};
    }
    return _cmocka_run_group_tests("test_policy_json", tests, n, group_setup, group_teardown);
}
