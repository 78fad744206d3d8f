/* Calls the runtime must refuse because it is in the middle of something:
 * moving or invalidating a tensor the op being dispatched uses (its write
 * would be lost), and calling back into the runtime from a hook (the swap,
 * step, recompute and log hooks observe and launch kernels). Refusals are
 * errors naming the call; calls that return nothing stop the program with
 * that message. Real bytes, the hazard detector on (issue 47, items 2 and
 * 5). */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "chameleon/chameleon.h"

#define KiB (UINT64_C(1) << 10)
#define MiB (UINT64_C(1) << 20)
#define N (64 * KiB)

static void ignore_line(const char *line, void *user)
{
    (void)line;
    (void)user;
}

static cham_context_t *open_ctx(cham_mode_t mode, uint64_t capacity)
{
    cham_config_t c = cham_config_default();
    c.mode = mode;
    c.device.capacity = capacity;
    c.device.data = mode == CHAM_MODE_MANAGED;
    c.device.hazard_check = true;
    c.pinned_budget = 64 * MiB;
    cham_context_t *ctx = NULL;
    if (cham_context_new(&c, &ctx) != CHAM_OK)
        fail_msg("context: %s", cham_context_last_error(NULL));
    cham_context_set_log(ctx, ignore_line, NULL);
    return ctx;
}

static cham_op_token_t token(cham_context_t *ctx, const char *name)
{
    cham_op_token_t t;
    assert_int_equal(cham_op_token(ctx, name, &t), CHAM_OK);
    return t;
}

static cham_tensor_t *new_tensor(cham_context_t *ctx, const char *label)
{
    cham_tensor_t *t = NULL;
    assert_int_equal(cham_tensor_new(ctx, N, CHAM_DTYPE_U8, label, &t), CHAM_OK);
    return t;
}

typedef struct fill_arg {
    unsigned char *out;
    const unsigned char *in;
    unsigned seed;
} fill_arg_t;

static void fill_fn(void *p)
{
    const fill_arg_t *a = p;
    for (size_t i = 0; i < N; i++)
        a->out[i] = (unsigned char)((a->in ? a->in[i] * 3 : i * 7) + a->seed);
}

/* Queues the kernel out = pattern(seed), or out = 3 * in + seed, on the
 * compute stream of the op being dispatched. */
static void launch(cham_context_t *ctx, void *out, const void *in, unsigned seed)
{
    static fill_arg_t arg;      /* read by the kernel when it runs, in launch order */
    arg = (fill_arg_t){.out = out, .in = in, .seed = seed};
    cham_access_t acc[2] = {{out, N, CHAM_ACCESS_WRITE}, {in, N, CHAM_ACCESS_READ}};
    cham_kernel_t k = {.label = "fill", .bytes = 2.0 * N, .accesses = acc,
                       .n_accesses = in ? 2 : 1, .cpu_fn = fill_fn, .arg = &arg};
    assert_int_equal(cham_kernel_launch(cham_context_compute_stream(ctx), &k), CHAM_OK);
    cham_device_synchronize(cham_context_device(ctx));
}

static void expect_pattern(cham_context_t *ctx, cham_op_token_t op, cham_tensor_t *t,
                           unsigned seed)
{
    assert_int_equal(cham_op_begin(ctx, op, &t, 1, NULL, 0), CHAM_OK);
    cham_device_synchronize(cham_context_device(ctx));
    const unsigned char *p = cham_tensor_data(t);
    for (size_t i = 0; i < N; i++)
        if (p[i] != (unsigned char)(i * 7 + seed))
            fail_msg("byte %zu: %u, expected %u", i, p[i], (unsigned char)(i * 7 + seed));
    assert_int_equal(cham_op_end(ctx), CHAM_OK);
}

static void expect_error(cham_context_t *ctx, cham_status_t st, const char *text)
{
    assert_int_equal(st, CHAM_ERR_INVALID_ARG);
    if (!strstr(cham_context_last_error(ctx), text))
        fail_msg("error \"%s\" does not say \"%s\"", cham_context_last_error(ctx), text);
}

/* Managed mode: between cham_op_begin and cham_op_end, the op's tensors
 * stay where they are, whatever the caller asks; others may still move.
 * After the op its write is there. */
static void test_operands_stay_during_their_op(void **state)
{
    (void)state;
    cham_context_t *ctx = open_ctx(CHAM_MODE_MANAGED, 16 * MiB);
    cham_device_t *dev = cham_context_device(ctx);
    cham_op_token_t op = token(ctx, "op");
    cham_tensor_t *t = new_tensor(ctx, "t"), *other = new_tensor(ctx, "other");
    void *host;
    assert_int_equal(cham_device_host_alloc(dev, N, &host), CHAM_OK);

    assert_int_equal(cham_op_begin(ctx, op, NULL, 0, &t, 1), CHAM_OK);
    launch(ctx, cham_tensor_data(t), NULL, 3);
    const char *in_flight = "the op being dispatched uses it";
    expect_error(ctx, cham_tensor_swap_out(t, false), in_flight);
    expect_error(ctx, cham_tensor_host_update(t, host), in_flight);
    expect_error(ctx, cham_tensor_set_host_copy(t, host), in_flight);
    expect_error(ctx, cham_tensor_discard(t), in_flight);
    assert_int_equal(cham_tensor_swap_out(other, false), CHAM_OK);   /* not the op's */
    /* A workspace the op takes may not land where t was. */
    cham_tensor_t *ws = new_tensor(ctx, "workspace");
    launch(ctx, cham_tensor_data(ws), NULL, 99);
    cham_tensor_release(ws);
    assert_int_equal(cham_op_end(ctx), CHAM_OK);
    assert_int_equal(cham_tensor_residency(t), CHAM_RESIDENT_DEVICE);

    /* After the op, the same calls work, and the op's bytes came along. */
    assert_int_equal(cham_tensor_swap_out(t, false), CHAM_OK);
    expect_pattern(ctx, op, t, 3);
    assert_int_equal(cham_device_hazard_count(dev), 0);
    cham_tensor_release(other);
    cham_tensor_release(t);
    cham_device_host_free(dev, host);
    cham_context_free(ctx);
}

/* Advisor mode: a move the caller reports of a tensor the op uses is
 * refused unless the op advised it (swap-outs and drops are carried out
 * after the op's kernels, inside its bracket). */
static void test_advisor_reports_during_the_op(void **state)
{
    (void)state;
    cham_context_t *ctx = open_ctx(CHAM_MODE_ADVISOR, 16 * MiB);
    cham_op_token_t op = token(ctx, "op");
    static unsigned char mem[2][N];
    cham_tensor_t *t, *u;
    assert_int_equal(cham_tensor_wrap(ctx, mem[0], N, CHAM_DTYPE_U8, "t", &t), CHAM_OK);
    assert_int_equal(cham_tensor_wrap(ctx, mem[1], N, CHAM_DTYPE_U8, "u", &u), CHAM_OK);
    assert_int_equal(cham_op_begin(ctx, op, NULL, 0, &t, 1), CHAM_OK);
    expect_error(ctx, cham_tensor_swapped_out(t), "the op being dispatched uses it");
    assert_int_equal(cham_tensor_swapped_out(u), CHAM_OK);
    assert_int_equal(cham_op_end(ctx), CHAM_OK);
    assert_int_equal(cham_tensor_swapped_out(t), CHAM_OK);
    assert_int_equal(cham_tensor_residency(t), CHAM_RESIDENT_HOST);
    cham_tensor_release(u);
    cham_tensor_release(t);
    cham_context_free(ctx);
}

/* ---- hooks -------------------------------------------------------------------*/

typedef struct hook_calls {
    cham_context_t *ctx;
    cham_tensor_t *held[4];     /* the swap hook brings these straight back */
    cham_op_token_t op;
    int swaps, step_ends;
    cham_status_t swap_in, step_end, op_begin, tensor_new;
    char error[512];
} hook_calls_t;

static void swap_back(const cham_swap_event_t *e, void *user)
{
    hook_calls_t *h = user;
    h->swaps++;
    for (size_t i = 0; e->out && i < 4; i++) {
        if (h->held[i] && strcmp(cham_tensor_label(h->held[i]), e->label) == 0) {
            h->swap_in = cham_tensor_swap_in(h->held[i]);
            snprintf(h->error, sizeof h->error, "%s", cham_context_last_error(h->ctx));
        }
    }
}

static void step_again(cham_context_t *ctx, const cham_step_ended_t *e, void *user)
{
    (void)e;
    hook_calls_t *h = user;
    h->step_ends++;
    h->step_end = cham_step_end(ctx);
    h->op_begin = cham_op_begin(ctx, h->op, NULL, 0, NULL, 0);
    cham_tensor_t *t = NULL;
    h->tensor_new = cham_tensor_new(ctx, N, CHAM_DTYPE_U8, "from the hook", &t);
    assert_null(t);
    snprintf(h->error, sizeof h->error, "%s", cham_context_last_error(ctx));
}

/* The swap hook swaps the victim of a passive swap straight back in: the
 * call is refused (else the out-of-memory path would loop), the op runs,
 * and the bytes are right. The step hook ends the step again, begins an
 * op, makes a tensor: each refused, naming the hook. */
static void test_hooks_do_not_call_back(void **state)
{
    (void)state;
    cham_context_t *ctx = open_ctx(CHAM_MODE_MANAGED, 16 * MiB);
    hook_calls_t h = {.ctx = ctx, .op = token(ctx, "op")};
    cham_context_on_swap(ctx, swap_back, &h);
    cham_tensor_t *a = new_tensor(ctx, "a"), *b = new_tensor(ctx, "b"), *big = NULL;
    assert_int_equal(cham_tensor_new(ctx, 8 * MiB, CHAM_DTYPE_U8, "big", &big), CHAM_OK);
    cham_tensor_t *written[3] = {a, b, big};
    for (unsigned i = 0; i < 3; i++) {
        assert_int_equal(cham_op_begin(ctx, h.op, NULL, 0, &written[i], 1), CHAM_OK);
        launch(ctx, cham_tensor_data(written[i]), NULL, i + 1);
        assert_int_equal(cham_op_end(ctx), CHAM_OK);
        h.held[i] = written[i];
    }
    /* A second 8 MiB does not fit beside the rest: the out-of-memory path
     * moves one out, which the hook asks back at once. */
    cham_tensor_t *big2 = NULL;
    assert_int_equal(cham_tensor_new(ctx, 8 * MiB, CHAM_DTYPE_U8, "big2", &big2), CHAM_OK);
    assert_true(h.swaps > 0);
    expect_error(ctx, h.swap_in, "called from the swap hook");
    assert_non_null(strstr(h.error, "cham_tensor_swap_in"));
    memset(h.held, 0, sizeof h.held);
    cham_tensor_release(big2);
    expect_pattern(ctx, h.op, a, 1);
    expect_pattern(ctx, h.op, b, 2);
    cham_tensor_release(big);

    cham_context_on_step(ctx, step_again, &h);
    assert_int_equal(cham_step_end(ctx), CHAM_OK);
    assert_int_equal(h.step_ends, 1);
    assert_int_equal(h.step_end, CHAM_ERR_INVALID_ARG);
    assert_int_equal(h.op_begin, CHAM_ERR_INVALID_ARG);
    assert_int_equal(h.tensor_new, CHAM_ERR_INVALID_ARG);
    assert_non_null(strstr(h.error, "cham_tensor_new called from the step hook"));
    /* The step that ended is over, and the next runs as usual. */
    cham_context_on_step(ctx, NULL, NULL);
    expect_pattern(ctx, h.op, a, 1);
    assert_int_equal(cham_step_end(ctx), CHAM_OK);
    assert_int_equal(cham_device_hazard_count(cham_context_device(ctx)), 0);
    cham_tensor_release(b);
    cham_tensor_release(a);
    cham_context_free(ctx);
}

/* ---- the recompute hook --------------------------------------------------------*/

typedef struct rerun {
    cham_tensor_t *release;     /* released from the hook, if set */
    bool free_ctx;              /* the step hook frees the context */
    cham_status_t step_end;
    int calls;
} rerun_t;

static cham_status_t rerun_hook(cham_context_t *ctx, const cham_recompute_call_t *call,
                                void *user)
{
    rerun_t *r = user;
    r->calls++;
    r->step_end = cham_step_end(ctx);
    if (r->release)
        cham_tensor_release(r->release);
    launch(ctx, call->outputs[0], call->inputs[0], 5);
    return CHAM_OK;
}

/* x, then y = 3x + 5 declared recomputable and dropped; reading y makes it
 * again through the hook. */
static cham_context_t *dropped_pair(rerun_t *r, cham_tensor_t **x, cham_tensor_t **y,
                                    cham_op_token_t *op)
{
    cham_context_t *ctx = open_ctx(CHAM_MODE_MANAGED, 16 * MiB);
    cham_context_on_recompute(ctx, rerun_hook, r);
    *op = token(ctx, "op");
    *x = new_tensor(ctx, "x");
    *y = new_tensor(ctx, "y");
    assert_int_equal(cham_op_begin(ctx, *op, NULL, 0, x, 1), CHAM_OK);
    launch(ctx, cham_tensor_data(*x), NULL, 1);
    assert_int_equal(cham_op_end(ctx), CHAM_OK);
    assert_int_equal(cham_op_begin(ctx, *op, x, 1, y, 1), CHAM_OK);
    launch(ctx, cham_tensor_data(*y), cham_tensor_data(*x), 5);
    assert_int_equal(cham_op_set_recompute(ctx, 1), CHAM_OK);
    assert_int_equal(cham_op_end(ctx), CHAM_OK);
    assert_int_equal(cham_tensor_drop(*y), CHAM_OK);
    return ctx;
}

/* cham_step_end from the recompute hook is refused; the recomputation
 * goes on and the bytes are right. */
static void test_recompute_hook_ends_no_step(void **state)
{
    (void)state;
    rerun_t r = {0};
    cham_tensor_t *x, *y;
    cham_op_token_t op;
    cham_context_t *ctx = dropped_pair(&r, &x, &y, &op);
    assert_int_equal(cham_tensor_swap_in(y), CHAM_OK);
    assert_int_equal(r.calls, 1);
    assert_int_equal(r.step_end, CHAM_ERR_INVALID_ARG);
    assert_non_null(strstr(cham_context_last_error(ctx), "called from the recompute hook"));
    assert_int_equal(cham_context_step(ctx), 0);
    assert_int_equal(cham_op_begin(ctx, op, &y, 1, NULL, 0), CHAM_OK);
    cham_device_synchronize(cham_context_device(ctx));
    const unsigned char *p = cham_tensor_data(y);
    for (size_t i = 0; i < N; i++)
        assert_int_equal(p[i], (unsigned char)((unsigned char)(i * 7 + 1) * 3 + 5));
    assert_int_equal(cham_op_end(ctx), CHAM_OK);
    assert_int_equal(cham_device_hazard_count(cham_context_device(ctx)), 0);
    cham_tensor_release(y);
    cham_tensor_release(x);
    cham_context_free(ctx);
}

/* Runs fn in a child; expects it to stop (abort) with a message on stderr
 * that contains `text`. */
static void expect_stop(void (*fn)(void), const char *text)
{
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        signal(SIGABRT, SIG_DFL);
        close(fds[0]);
        if (dup2(fds[1], 2) < 0)
            _exit(2);
        fn();
        _exit(0);
    }
    close(fds[1]);
    char out[8192];
    size_t n = 0;
    ssize_t k;
    while (n < sizeof out - 1 && (k = read(fds[0], out + n, sizeof out - 1 - n)) > 0)
        n += (size_t)k;
    out[n] = '\0';
    close(fds[0]);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFSIGNALED(status));
    assert_int_equal(WTERMSIG(status), SIGABRT);
    if (!strstr(out, text))
        fail_msg("stderr \"%s\" does not say \"%s\"", out, text);
}

static void release_from_recompute_hook(void)
{
    rerun_t r = {0};
    cham_tensor_t *x, *y;
    cham_op_token_t op;
    dropped_pair(&r, &x, &y, &op);
    r.release = y;              /* the caller's last view of what is being made */
    cham_tensor_swap_in(y);
}

static void free_context(cham_context_t *ctx, const cham_step_ended_t *e, void *user)
{
    (void)e;
    (void)user;
    cham_context_free(ctx);
}

static void free_from_step_hook(void)
{
    cham_context_t *ctx = open_ctx(CHAM_MODE_MANAGED, 16 * MiB);
    cham_context_on_step(ctx, free_context, NULL);
    cham_step_end(ctx);
}

/* Calls that return nothing stop the program with a message naming the
 * call and the hook, where they would free what the runtime is using. */
static void test_hooks_that_free_stop(void **state)
{
    (void)state;
    expect_stop(release_from_recompute_hook,
                "cham_tensor_release called from the recompute hook");
    expect_stop(free_from_step_hook, "cham_context_free called from the step hook");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_operands_stay_during_their_op),
        cmocka_unit_test(test_advisor_reports_during_the_op),
        cmocka_unit_test(test_hooks_do_not_call_back),
        cmocka_unit_test(test_recompute_hook_ends_no_step),
        cmocka_unit_test(test_hooks_that_free_stop),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
