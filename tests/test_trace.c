/* Timeline traces (chameleon/trace.h): the file is Chrome trace-event JSON
 * that follows the format's schema, and a known small run gives exactly
 * the slices it should. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "chameleon/chameleon.h"

#define MiB (UINT64_C(1) << 20)

static char path[] = "/tmp/cham-trace-XXXXXX";

static json_t *load(void)
{
    json_error_t e;
    json_t *j = json_load_file(path, 0, &e);
    if (!j)
        fail_msg("%s:%d: %s", path, e.line, e.text);
    return j;
}

/* Every event has the fields its phase needs (the format's schema). */
static void check_schema(json_t *root)
{
    assert_true(json_is_object(root));
    json_t *events = json_object_get(root, "traceEvents");
    assert_true(json_is_array(events) && json_array_size(events) > 0);
    size_t i;
    json_t *e;
    json_array_foreach(events, i, e) {
        const char *ph = json_string_value(json_object_get(e, "ph"));
        assert_non_null(ph);
        assert_true(json_is_integer(json_object_get(e, "pid")));
        assert_true(json_is_string(json_object_get(e, "name")));
        if (strcmp(ph, "X") == 0) {
            assert_true(json_is_integer(json_object_get(e, "tid")));
            assert_true(json_number_value(json_object_get(e, "ts")) >= 0);
            assert_true(json_number_value(json_object_get(e, "dur")) >= 0);
            assert_true(json_is_string(json_object_get(e, "cat")));
        } else if (strcmp(ph, "C") == 0) {
            json_t *args = json_object_get(e, "args");
            assert_true(json_number_value(json_object_get(args, "in use")) <=
                        json_number_value(json_object_get(args, "capacity")));
        } else if (strcmp(ph, "i") == 0) {
            assert_string_equal(json_string_value(json_object_get(e, "s")), "g");
        } else {
            assert_string_equal(ph, "M");
            assert_true(json_is_object(json_object_get(e, "args")));
        }
    }
}

static size_t count(json_t *root, const char *ph, const char *name_part)
{
    size_t n = 0, i;
    json_t *e;
    json_array_foreach(json_object_get(root, "traceEvents"), i, e) {
        const char *name = json_string_value(json_object_get(e, "name"));
        if (strcmp(json_string_value(json_object_get(e, "ph")), ph) == 0 &&
            (!name_part || strstr(name, name_part)))
            n++;
    }
    return n;
}

/* One tensor written by an op, then swapped out: a kernel slice on the
 * compute track and a copy of its bytes on the swap-out track. */
static void test_known_slices(void **state)
{
    (void)state;
    cham_config_t c = cham_config_default();
    c.device.preset = "a100-80g";
    c.executor = false;
    cham_context_t *ctx;
    assert_int_equal(cham_context_new(&c, &ctx), CHAM_OK);
    cham_trace_t *t;
    char err[256];
    assert_int_equal(cham_trace_open(ctx, path, &t, err, sizeof err), CHAM_OK);
    cham_tensor_t *a;
    assert_int_equal(cham_tensor_new(ctx, 64 * MiB, CHAM_DTYPE_F32, "activation", &a), CHAM_OK);
    cham_op_token_t tok;
    assert_int_equal(cham_op_token(ctx, "fill", &tok), CHAM_OK);
    assert_int_equal(cham_op_begin(ctx, tok, NULL, 0, &a, 1), CHAM_OK);
    cham_access_t acc = {cham_tensor_data(a), 64 * MiB, CHAM_ACCESS_WRITE};
    cham_kernel_t k = {.label = "fill", .flops = 1e12, .bytes = 64.0 * MiB, .accesses = &acc,
                       .n_accesses = 1};
    assert_int_equal(cham_kernel_launch(cham_context_compute_stream(ctx), &k), CHAM_OK);
    assert_int_equal(cham_op_end(ctx), CHAM_OK);
    assert_int_equal(cham_tensor_swap_out(a, false), CHAM_OK);
    assert_int_equal(cham_step_end(ctx), CHAM_OK);
    cham_device_synchronize(cham_context_device(ctx));
    assert_int_equal(cham_trace_close(t, err, sizeof err), CHAM_OK);
    cham_tensor_release(a);
    cham_context_free(ctx);

    json_t *root = load();
    check_schema(root);
    size_t i;
    json_t *e;
    int kernels = 0, copies = 0;
    json_array_foreach(json_object_get(root, "traceEvents"), i, e) {
        if (strcmp(json_string_value(json_object_get(e, "ph")), "X") != 0)
            continue;
        const char *cat = json_string_value(json_object_get(e, "cat"));
        const char *name = json_string_value(json_object_get(e, "name"));
        double dur = json_number_value(json_object_get(e, "dur"));
        if (strcmp(cat, "kernel") == 0) {
            kernels++;
            assert_string_equal(name, "fill");
            assert_int_equal(json_integer_value(json_object_get(e, "tid")), 1);   /* compute */
            /* 1e12 FLOPs at the 68% of 312 TFLOP/s the A100 preset's
             * kernels reach: 4713423.8 ns, rounded up to 4713424 (its 64
             * MiB at 70% of 2039 GB/s take only 47 us), plus the sim's 2 us
             * per kernel (docs/device.md): 4715.424 us, printed to the
             * nanosecond. */
            assert_true(fabs(dur - 4715.424) < 0.0005);
        } else if (strcmp(cat, "d2h") == 0) {
            copies++;
            assert_string_equal(name, "activation");
            assert_int_equal(json_integer_value(json_object_get(json_object_get(e, "args"),
                                                                "bytes")), 64 * MiB);
            /* 67108864 B at the preset's 32 GB/s: 2097152 ns, plus the
             * sim's 5 us per copy: 2102.152 us. */
            assert_true(fabs(dur - 2102.152) < 0.0005);
        }
    }
    assert_int_equal(kernels, 1);
    assert_int_equal(copies, 1);
    assert_int_equal(count(root, "i", "step 0 ends (forward only)"), 1);
    assert_true(count(root, "C", "device memory") >= 1);
    json_decref(root);
}

/* The number of the first step after which the stage was GenPolicy. */
static void first_genpolicy(const cham_run_step_t *s, void *user)
{
    int64_t *first = user;
    if (*first < 0 && s->stage == CHAM_STAGE_GENPOLICY)
        *first = (int64_t)s->step;
}

/* A whole run under Chameleon: every track, the stage changes and the
 * policies as instants, numbered as the run's own steps. */
static void test_run_trace(void **state)
{
    (void)state;
    cham_run_config_t c = cham_run_config_default();
    int64_t first = -1;
    c.on_step = first_genpolicy;
    c.user = &first;
    assert_int_equal(cham_model_preset("llama2-7b", &c.model), CHAM_OK);
    c.model.layers = 4;
    c.model.seq = 1024;
    c.model.mbs = 4;
    c.model.dp = 8;
    c.model.zero = 3;
    c.steps = 12;
    c.runtime.device.preset = "a100-80g";
    c.runtime.device.capacity = 3ull << 30;
    c.trace_path = path;
    cham_run_result_t r;
    assert_int_equal(cham_run(&c, &r), CHAM_OK);
    if (r.status != CHAM_OK)
        fail_msg("%s", r.error);
    json_t *root = load();
    check_schema(root);
    const char *tracks[] = {"compute", "swap-out", "swap-in", "comm", "host"};
    for (size_t i = 0; i < 5; i++) {
        size_t n = 0, k;
        json_t *e;
        json_array_foreach(json_object_get(root, "traceEvents"), k, e) {
            json_t *args = json_object_get(e, "args");
            const char *name = json_string_value(json_object_get(args, "name"));
            n += name && strcmp(name, tracks[i]) == 0;
        }
        if (n != 1)
            fail_msg("track %s named %zu times", tracks[i], n);
    }
    assert_int_equal(count(root, "i", "WarmUp -> GenPolicy"), 1);
    assert_true(first >= 0);
    char name[64];
    snprintf(name, sizeof name, "step %lld: WarmUp -> GenPolicy", (long long)first);
    assert_int_equal(count(root, "i", name), 1);
    assert_true(count(root, "i", "policy") >= 1);
    assert_true(count(root, "X", "all_gather") > 0);
    assert_int_equal(count(root, "i", "ends"), 12);
    for (int s = 0; s < 12; s++) {
        snprintf(name, sizeof name, "step %d ends", s);
        assert_int_equal(count(root, "i", name), 1);
    }
    json_decref(root);

    /* A trace that cannot be written fails the run clearly. */
    c.trace_path = "/proc/no/such/trace.json";
    assert_int_equal(cham_run(&c, &r), CHAM_OK);
    assert_int_not_equal(r.status, CHAM_OK);
    assert_non_null(strstr(r.error, "trace: /proc/no/such/trace.json: cannot create: No such "
                                    "file or directory"));
}

static void no_log(const char *line, void *user)
{
    (void)line;
    (void)user;
}

static void collect_log(const char *line, void *user)
{
    char *all = user;
    size_t n = strlen(all);
    snprintf(all + n, 8192 - n, "%s\n", line);
}

/* Issue 47, item 11: a label is the caller's string. One with a newline, a
 * quote, a backslash and bytes that are not UTF-8 still gives valid JSON in
 * the trace (the label as it was, the bad bytes as U+FFFD), and no log
 * line of its own: in the log the newline is "\n". */
static void test_hostile_label(void **state)
{
    (void)state;
    static const char label[] = "act\nchameleon: forged \"line\" \\ \xff\xc3(";
    cham_config_t c = cham_config_default();
    c.device.preset = "a100-80g";
    c.executor = false;
    cham_context_t *ctx;
    assert_int_equal(cham_context_new(&c, &ctx), CHAM_OK);
    static char log[8192];
    log[0] = '\0';
    cham_context_set_log(ctx, collect_log, log);
    cham_trace_t *t;
    char err[256];
    assert_int_equal(cham_trace_open(ctx, path, &t, err, sizeof err), CHAM_OK);
    cham_tensor_t *a, *b;
    assert_int_equal(cham_tensor_new(ctx, MiB, CHAM_DTYPE_F32, label, &a), CHAM_OK);
    assert_int_equal(cham_tensor_new(ctx, MiB, CHAM_DTYPE_F32, "out", &b), CHAM_OK);
    cham_op_token_t fill, use;
    assert_int_equal(cham_op_token(ctx, "fill", &fill), CHAM_OK);
    assert_int_equal(cham_op_token(ctx, "use", &use), CHAM_OK);
    assert_int_equal(cham_op_begin(ctx, fill, NULL, 0, &a, 1), CHAM_OK);
    assert_int_equal(cham_op_end(ctx), CHAM_OK);
    assert_int_equal(cham_tensor_swap_out(a, false), CHAM_OK);
    /* Its next use brings it back on demand, which the log says by label. */
    assert_int_equal(cham_op_begin(ctx, use, &a, 1, &b, 1), CHAM_OK);
    assert_int_equal(cham_op_end(ctx), CHAM_OK);
    assert_int_equal(cham_step_end(ctx), CHAM_OK);
    cham_device_synchronize(cham_context_device(ctx));
    assert_int_equal(cham_trace_close(t, err, sizeof err), CHAM_OK);
    cham_tensor_release(a);
    cham_tensor_release(b);
    cham_context_free(ctx);

    if (!strstr(log, "act\\nchameleon: forged"))
        fail_msg("no escaped label in the log:\n%s", log);
    for (const char *line = log; *line; line = strchr(line, '\n') + 1)
        assert_false(strncmp(line, "chameleon: forged", 17) == 0);
    json_t *root = load();
    check_schema(root);
    size_t i, found = 0;
    json_t *e;
    json_array_foreach(json_object_get(root, "traceEvents"), i, e) {
        const char *name = json_string_value(json_object_get(e, "name"));
        found += strcmp(name, "act\nchameleon: forged \"line\" \\ \xef\xbf\xbd\xef\xbf\xbd(") == 0;
    }
    assert_true(found >= 2);         /* the copy out and the copy back */
    json_decref(root);
}

/* A step of one op that writes a. */
static void one_step(cham_context_t *ctx, cham_op_token_t tok, cham_tensor_t *a)
{
    assert_int_equal(cham_op_begin(ctx, tok, NULL, 0, &a, 1), CHAM_OK);
    assert_int_equal(cham_op_end(ctx), CHAM_OK);
    assert_int_equal(cham_step_end(ctx), CHAM_OK);
}

/* Issue 47, items 7 and 8: the trace is written under a temporary name
 * beside the final one and renamed when closed, so the final name never
 * holds a partial trace (an earlier file stays as it was until then); a
 * write that fails is reported at close with the path and the errno. */
static void test_trace_whole_or_not(void **state)
{
    (void)state;
    cham_config_t c = cham_config_default();
    c.device.preset = "a100-80g";
    cham_context_t *ctx;
    assert_int_equal(cham_context_new(&c, &ctx), CHAM_OK);
    cham_context_set_log(ctx, no_log, NULL);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("earlier", f);
    assert_int_equal(fclose(f), 0);
    cham_trace_t *t;
    char err[256];
    assert_int_equal(cham_trace_open(ctx, path, &t, err, sizeof err), CHAM_OK);
    cham_tensor_t *a;
    assert_int_equal(cham_tensor_new(ctx, MiB, CHAM_DTYPE_F32, "a", &a), CHAM_OK);
    cham_op_token_t fill;
    assert_int_equal(cham_op_token(ctx, "fill", &fill), CHAM_OK);
    one_step(ctx, fill, a);
    char buf[16] = "";
    f = fopen(path, "r");
    assert_non_null(f);
    assert_non_null(fgets(buf, sizeof buf, f));
    fclose(f);
    assert_string_equal(buf, "earlier");     /* not yet replaced */
    cham_device_synchronize(cham_context_device(ctx));
    assert_int_equal(cham_trace_close(t, err, sizeof err), CHAM_OK);
    json_decref(load());                      /* now the whole trace */

    /* A full disk: the error names the file and why. */
    if (access("/dev/full", W_OK) == 0) {
        assert_int_equal(cham_trace_open(ctx, "/dev/full", &t, err, sizeof err), CHAM_OK);
        for (int k = 0; k < 2000; k++)
            one_step(ctx, fill, a);
        assert_int_equal(cham_trace_close(t, err, sizeof err), CHAM_ERR_INVALID_ARG);
        assert_string_equal(err, "trace: /dev/full: cannot write: No space left on device");
    }
    cham_tensor_release(a);
    cham_context_free(ctx);
}

static int setup(void **state)
{
    (void)state;
    int fd = mkstemp(path);
    if (fd < 0)
        return -1;
    close(fd);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    unlink(path);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_known_slices),
        cmocka_unit_test(test_run_trace),
        cmocka_unit_test(test_hostile_label),
        cmocka_unit_test(test_trace_whole_or_not),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
