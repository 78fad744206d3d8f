/* cham_set_output: the library's messages that no hook takes (a context's
 * log without a log hook, the sim's hazards without a hazard hook) go to
 * the registered output, one escaped line each; without one, and after
 * cham_set_output(NULL, NULL), to stderr as "chameleon: LINE". */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "chameleon/chameleon.h"
#include "runtime/runtime-impl.h"

#define MiB (1024u * 1024u)

typedef struct captured {
    int n;
    char last[1024];
} captured_t;

static void capture(const char *line, void *user)
{
    captured_t *c = user;
    c->n++;
    snprintf(c->last, sizeof c->last, "%s", line);
}

/* What fd 2 received while fn ran. */
static void stderr_of(void (*fn)(void *), void *arg, char *out, size_t size)
{
    char path[] = "/tmp/cham_test_output_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    fflush(stderr);
    int saved = dup(2);
    assert_true(saved >= 0 && dup2(fd, 2) == 2);
    fn(arg);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    ssize_t got = pread(fd, out, size - 1, 0);
    out[got > 0 ? got : 0] = '\0';
    close(fd);
    unlink(path);
}

static cham_context_t *open_ctx(void)
{
    cham_config_t c = cham_config_default();
    c.device.capacity = 64 * MiB;
    cham_context_t *ctx = NULL;
    assert_int_equal(cham_context_new(&c, &ctx), CHAM_OK);
    return ctx;
}

static void log_a_line(void *ctx)
{
    cham_context_log(ctx, "a line with a label \"%s\"", "x\ny");
}

static void test_context_log_without_a_hook(void **state)
{
    (void)state;
    cham_context_t *ctx = open_ctx();
    captured_t c = {0};
    cham_set_output(capture, &c);
    char err[256] = "";
    stderr_of(log_a_line, ctx, err, sizeof err);
    assert_int_equal(c.n, 1);
    /* Escaped, without the prefix or a newline; nothing on stderr. */
    assert_string_equal(c.last, "a line with a label \"x\\ny\"");
    assert_string_equal(err, "");

    /* A context's own hook still comes first. */
    captured_t hooked = {0};
    cham_context_set_log(ctx, capture, &hooked);
    log_a_line(ctx);
    assert_int_equal(hooked.n, 1);
    assert_int_equal(c.n, 1);
    cham_context_set_log(ctx, NULL, NULL);

    /* NULL restores stderr. */
    cham_set_output(NULL, NULL);
    stderr_of(log_a_line, ctx, err, sizeof err);
    assert_int_equal(c.n, 1);
    assert_string_equal(err, "chameleon: a line with a label \"x\\ny\"\n");
    cham_context_free(ctx);
}

/* A swap-out's read of a block and a later write to it on another stream
 * with no event between them: a write-after-read hazard. */
static void race(void *unused)
{
    (void)unused;
    cham_device_config_t c = cham_device_config_default();
    c.capacity = 256 * MiB;
    cham_device_t *dev;
    assert_int_equal(cham_device_open(&c, &dev), CHAM_OK);
    cham_stream_t *compute, *out;
    cham_stream_new(dev, "compute", &compute);
    cham_stream_new(dev, "swap-out", &out);
    void *block, *host;
    assert_int_equal(cham_device_mem_alloc(dev, 32 * MiB, &block), CHAM_OK);
    assert_int_equal(cham_device_host_alloc(dev, 32 * MiB, &host), CHAM_OK);
    cham_copy_async(out, host, block, 32 * MiB, CHAM_COPY_D2H, "swap-out act");
    cham_access_t a = {block, 16 * MiB, CHAM_ACCESS_WRITE};
    cham_kernel_t k = {.label = "produce next", .flops = 1e9, .bytes = 16.0 * MiB,
                       .accesses = &a, .n_accesses = 1};
    assert_int_equal(cham_kernel_launch(compute, &k), CHAM_OK);
    assert_int_equal(cham_device_hazard_count(dev), 1);
    cham_device_synchronize(dev);
    cham_device_mem_free(dev, block);
    cham_device_host_free(dev, host);
    cham_stream_free(compute);
    cham_stream_free(out);
    cham_device_close(dev);
}

static void test_sim_hazard_without_a_hook(void **state)
{
    (void)state;
    captured_t c = {0};
    cham_set_output(capture, &c);
    char err[1024] = "";
    stderr_of(race, NULL, err, sizeof err);
    cham_set_output(NULL, NULL);
    assert_int_equal(c.n, 1);
    assert_non_null(strstr(c.last, "write-after-read"));
    assert_non_null(strstr(c.last, "swap-out act"));
    assert_string_equal(err, "");
}

/* An output may register another (it is called outside the library's lock). */
static void reregister(const char *line, void *user)
{
    (void)line;
    cham_set_output(capture, user);
}

static void test_output_may_set_the_output(void **state)
{
    (void)state;
    cham_context_t *ctx = open_ctx();
    captured_t c = {0};
    cham_set_output(reregister, &c);
    log_a_line(ctx);
    assert_int_equal(c.n, 0);
    log_a_line(ctx);
    assert_int_equal(c.n, 1);
    cham_set_output(NULL, NULL);
    cham_context_free(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_context_log_without_a_hook),
        cmocka_unit_test(test_sim_hazard_without_a_hook),
        cmocka_unit_test(test_output_may_set_the_output),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
