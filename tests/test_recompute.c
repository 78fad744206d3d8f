/* Recomputation in the runtime: a tensor dropped instead of swapped out
 * comes back bit-exact when the op that made it runs again, whatever
 * happened to its inputs meanwhile (released, swapped out, dropped
 * themselves, about to be overwritten); what cannot be recomputed is
 * refused with a clear error, never lost. Real bytes, the hazard detector
 * on. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "chameleon/chameleon.h"

#define KiB (UINT64_C(1) << 10)
#define MiB (UINT64_C(1) << 20)
#define N (64 * KiB)

enum { TAG_AFFINE = 1, TAG_SUM = 2, TAG_PAIR = 3 };

typedef struct kernel_arg {
    const unsigned char *in[2];
    unsigned char *out, *out2;   /* out2: TAG_PAIR's second output */
    size_t bytes;
    uint64_t tag;
} kernel_arg_t;

static void run_kernel(void *p)
{
    const kernel_arg_t *a = p;
    for (size_t i = 0; i < a->bytes; i++) {
        a->out[i] = a->tag != TAG_SUM ? (unsigned char)(a->in[0][i] * 3 + 1)
                                      : (unsigned char)(a->in[0][i] + a->in[1][i]);
        if (a->out2)
            a->out2[i] = (unsigned char)(a->out[i] + 1);
    }
}

/* What the caller's framework does: launch the op's kernel with these
 * addresses. Counts its calls; fails while `refuse` is set. */
typedef struct hook_state {
    int calls;
    size_t last_which;
    bool refuse;
} hook_state_t;

static cham_status_t launch(cham_stream_t *stream, uint64_t tag, void *const *in,
                            size_t n_in, void *out, void *out2, size_t bytes)
{
    kernel_arg_t a = {.out = out, .out2 = out2, .bytes = bytes, .tag = tag};
    cham_access_t acc[4];
    size_t n = 0;
    for (size_t i = 0; i < n_in; i++) {
        a.in[i] = in[i];
        acc[n++] = (cham_access_t){in[i], bytes, CHAM_ACCESS_READ};
    }
    acc[n++] = (cham_access_t){out, bytes, CHAM_ACCESS_WRITE};
    if (out2)
        acc[n++] = (cham_access_t){out2, bytes, CHAM_ACCESS_WRITE};
    cham_kernel_t k = {.label = tag == TAG_SUM ? "sum" : "affine", .bytes = 2.0 * bytes,
                       .accesses = acc, .n_accesses = n, .cpu_fn = run_kernel, .arg = &a};
    return cham_kernel_launch(stream, &k);
}

static cham_status_t hook(cham_context_t *ctx, const cham_recompute_call_t *call, void *user)
{
    (void)ctx;
    hook_state_t *h = user;
    h->calls++;
    if (h->refuse)
        return CHAM_ERR_BACKEND;
    assert_int_equal(call->n_inputs, call->tag == TAG_SUM ? 2 : 1);
    assert_int_equal(call->n_outputs, call->tag == TAG_PAIR ? 2 : 1);
    for (size_t i = 0; i < call->n_inputs; i++)
        assert_int_equal(call->input_bytes[i], call->output_bytes[0]);
    h->last_which = call->which;
    return launch(call->stream, call->tag, call->inputs, call->n_inputs, call->outputs[0],
                  call->n_outputs > 1 ? call->outputs[1] : NULL, call->output_bytes[0]);
}

typedef struct fixture {
    cham_context_t *ctx;
    cham_op_token_t op;
    hook_state_t hook;
} fixture_t;

static int setup(void **state)
{
    fixture_t *f = calloc(1, sizeof *f);
    cham_config_t c = cham_config_default();
    c.device.capacity = 64 * MiB;
    c.device.data = true;
    c.device.hazard_check = true;
    c.pinned_budget = 64 * MiB;
    if (!f || cham_context_new(&c, &f->ctx) != CHAM_OK)
        return -1;
    cham_context_on_recompute(f->ctx, hook, &f->hook);
    if (cham_op_token(f->ctx, "op", &f->op) != CHAM_OK)
        return -1;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture_t *f = *state;
    assert_int_equal(cham_device_hazard_count(cham_context_device(f->ctx)), 0);
    cham_context_free(f->ctx);
    free(f);
    return 0;
}

static cham_tensor_t *new_tensor(fixture_t *f, const char *label)
{
    cham_tensor_t *t = NULL;
    assert_int_equal(cham_tensor_new(f->ctx, N, CHAM_DTYPE_U8, label, &t), CHAM_OK);
    return t;
}

/* x = bytes 0, 1, 2, ... + seed, written by an op (not recomputable). */
static void fill(fixture_t *f, cham_tensor_t *x, unsigned seed)
{
    assert_int_equal(cham_op_begin(f->ctx, f->op, NULL, 0, &x, 1), CHAM_OK);
    unsigned char *p = cham_tensor_data(x);
    cham_device_synchronize(cham_context_device(f->ctx));
    for (size_t i = 0; i < N; i++)
        p[i] = (unsigned char)(i * 7 + seed);
    assert_int_equal(cham_op_end(f->ctx), CHAM_OK);
}

/* out = op(ins), declared recomputable. */
static void compute(fixture_t *f, uint64_t tag, cham_tensor_t **ins, size_t n,
                    cham_tensor_t *out)
{
    assert_int_equal(cham_op_begin(f->ctx, f->op, ins, n, &out, 1), CHAM_OK);
    void *in[2];
    for (size_t i = 0; i < n; i++)
        in[i] = cham_tensor_data(ins[i]);
    assert_int_equal(launch(cham_context_compute_stream(f->ctx), tag, in, n,
                            cham_tensor_data(out), NULL, N),
                     CHAM_OK);
    assert_int_equal(cham_op_set_cost(f->ctx, 0), CHAM_OK);
    assert_int_equal(cham_op_set_recompute(f->ctx, tag), CHAM_OK);
    assert_int_equal(cham_op_end(f->ctx), CHAM_OK);
}

/* Reads t in an op and copies its bytes out. */
static void read_back(fixture_t *f, cham_tensor_t *t, unsigned char *buf)
{
    assert_int_equal(cham_op_begin(f->ctx, f->op, &t, 1, NULL, 0), CHAM_OK);
    cham_device_synchronize(cham_context_device(f->ctx));
    memcpy(buf, cham_tensor_data(t), N);
    assert_int_equal(cham_op_end(f->ctx), CHAM_OK);
}

static void expect_affine(const unsigned char *got, unsigned seed)
{
    for (size_t i = 0; i < N; i++)
        if (got[i] != (unsigned char)((unsigned char)(i * 7 + seed) * 3 + 1))
            fail_msg("byte %zu: %u", i, got[i]);
}

static cham_runtime_stats_t stats(fixture_t *f)
{
    cham_runtime_stats_t s;
    cham_context_get_stats(f->ctx, &s);
    return s;
}

/* Dropped, then needed: the op runs again and the bytes are the same;
 * meanwhile the input was released by the caller and swapped out. */
static void test_dropped_tensor_comes_back(void **state)
{
    fixture_t *f = *state;
    cham_tensor_t *x = new_tensor(f, "x"), *y = new_tensor(f, "y");
    fill(f, x, 5);
    compute(f, TAG_AFFINE, &x, 1, y);
    uint64_t before = stats(f).mem_in_use;
    assert_int_equal(cham_tensor_drop(y), CHAM_OK);
    assert_int_equal(cham_tensor_residency(y), CHAM_RESIDENT_DROPPED);
    assert_int_equal(stats(f).mem_in_use, before - N);
    assert_int_equal(cham_tensor_swap_out(x, false), CHAM_OK);
    cham_tensor_release(x);              /* the dropped y keeps it */
    unsigned char buf[N];
    read_back(f, y, buf);
    expect_affine(buf, 5);
    cham_runtime_stats_t s = stats(f);
    assert_int_equal(s.drops, 1);
    assert_int_equal(s.recomputes, 1);
    assert_int_equal(s.on_demand_recomputes, 1);
    assert_int_equal(f->hook.calls, 1);
    assert_int_equal(s.mem_in_use, N);  /* x went with the recomputation */
    cham_tensor_release(y);
}

/* A chain: z = y + x, y = affine(x); z and y both dropped; z needs y
 * made again first. */
static void test_chain(void **state)
{
    fixture_t *f = *state;
    cham_tensor_t *x = new_tensor(f, "x"), *y = new_tensor(f, "y"), *z = new_tensor(f, "z");
    fill(f, x, 9);
    compute(f, TAG_AFFINE, &x, 1, y);
    cham_tensor_t *ins[2] = {y, x};
    compute(f, TAG_SUM, ins, 2, z);
    assert_int_equal(cham_tensor_drop(z), CHAM_OK);
    assert_int_equal(cham_tensor_drop(y), CHAM_OK);
    cham_tensor_release(y);
    unsigned char buf[N];
    read_back(f, z, buf);
    for (size_t i = 0; i < N; i++) {
        unsigned char xv = (unsigned char)(i * 7 + 9);
        assert_int_equal(buf[i], (unsigned char)((unsigned char)(xv * 3 + 1) + xv));
    }
    assert_int_equal(stats(f).recomputes, 2);
    assert_int_equal(f->hook.calls, 2);
    cham_tensor_release(z);
    cham_tensor_release(x);
    assert_int_equal(stats(f).mem_in_use, 0);
}

/* b = affine(a), a = affine(x), seed x's. */
static void expect_affine_twice(const unsigned char *got, unsigned seed)
{
    for (size_t i = 0; i < N; i++) {
        unsigned char a = (unsigned char)((unsigned char)(i * 7 + seed) * 3 + 1);
        if (got[i] != (unsigned char)(a * 3 + 1))
            fail_msg("byte %zu: %u", i, got[i]);
    }
}

/* a = affine(x), b = affine(a), b dropped: the caller releases a (as the
 * attention's scores, freed once softmax made the probabilities, which
 * the plan drops; there the record keeps ghosts before the drop). a is
 * kept as a ghost: its memory goes at once, and b is made again through
 * it, a first, bit-exact. When x is about to be overwritten, a is made
 * again from the old x first and stays until b's record goes; then the
 * ghost goes too. */
static void test_ghost(void **state)
{
    fixture_t *f = *state;
    cham_tensor_t *x = new_tensor(f, "x"), *a = new_tensor(f, "a"), *b = new_tensor(f, "b");
    fill(f, x, 4);
    compute(f, TAG_AFFINE, &x, 1, a);
    compute(f, TAG_AFFINE, &a, 1, b);
    assert_int_equal(cham_tensor_drop(b), CHAM_OK);
    assert_int_equal(stats(f).mem_in_use, 2 * N);
    cham_tensor_release(a);
    assert_int_equal(stats(f).mem_in_use, N);
    unsigned char buf[N];
    read_back(f, b, buf);
    expect_affine_twice(buf, 4);
    assert_int_equal(stats(f).recomputes, 2);
    assert_int_equal(f->hook.calls, 2);
    assert_int_equal(stats(f).mem_in_use, 2 * N);   /* x and b: a went again */

    assert_int_equal(cham_tensor_drop(b), CHAM_OK);
    fill(f, x, 5);                                   /* a from the old x first */
    assert_int_equal(stats(f).mem_in_use, 2 * N);   /* x and a */
    read_back(f, b, buf);
    expect_affine_twice(buf, 4);
    assert_int_equal(f->hook.calls, 4);
    cham_tensor_release(b);                          /* and with it the ghost */
    assert_int_equal(stats(f).mem_in_use, N);
    cham_tensor_release(x);
    assert_int_equal(stats(f).mem_in_use, 0);
}

/* An op about to overwrite the input of a dropped tensor recomputes the
 * tensor first: its bytes are those of the old input. */
static void test_input_overwritten(void **state)
{
    fixture_t *f = *state;
    cham_tensor_t *x = new_tensor(f, "x"), *y = new_tensor(f, "y");
    fill(f, x, 1);
    compute(f, TAG_AFFINE, &x, 1, y);
    assert_int_equal(cham_tensor_drop(y), CHAM_OK);
    fill(f, x, 2);
    assert_int_equal(cham_tensor_residency(y), CHAM_RESIDENT_DEVICE);
    assert_int_equal(stats(f).on_demand_recomputes, 1);
    unsigned char buf[N];
    read_back(f, y, buf);
    expect_affine(buf, 1);
    /* Now y no longer follows from x: it is only ever swapped. */
    assert_int_equal(cham_tensor_drop(y), CHAM_ERR_INVALID_ARG);
    assert_non_null(strstr(cham_context_last_error(f->ctx), "not made by a recomputable op"));
    cham_tensor_release(y);
    cham_tensor_release(x);
}

/* The host writes x's next bytes into its own buffer (an optimizer on the
 * host), then says they are queued. */
static void host_update(fixture_t *f, cham_tensor_t *x, void *host, unsigned seed)
{
    assert_int_equal(cham_tensor_host_update(x, host), CHAM_OK);
    for (size_t i = 0; i < N; i++)
        ((unsigned char *)host)[i] = (unsigned char)(i * 7 + seed);
    assert_int_equal(cham_tensor_host_ready(x, cham_context_compute_stream(f->ctx)), CHAM_OK);
}

/* An update on the host is a write to the input of a recomputable op, as
 * an op's is: y dropped before it is made from the old bytes first; a y
 * still on the device is no longer recomputable after it (a drop by the
 * caller is refused, and so none by the out-of-memory path can happen);
 * the same for bytes written through cham_tensor_data outside an op. */
static void test_host_write_of_an_input(void **state)
{
    fixture_t *f = *state;
    cham_device_t *dev = cham_context_device(f->ctx);
    void *host;
    assert_int_equal(cham_device_host_alloc(dev, N, &host), CHAM_OK);
    cham_tensor_t *x = new_tensor(f, "x"), *y = new_tensor(f, "y");
    unsigned char buf[N];

    /* Dropped before the update. */
    fill(f, x, 1);
    compute(f, TAG_AFFINE, &x, 1, y);
    assert_int_equal(cham_tensor_drop(y), CHAM_OK);
    host_update(f, x, host, 2);
    assert_int_equal(cham_tensor_residency(y), CHAM_RESIDENT_DEVICE);
    read_back(f, y, buf);
    expect_affine(buf, 1);
    read_back(f, x, buf);
    assert_int_equal(buf[1], (unsigned char)(7 + 2));

    /* Dropped after it. */
    fill(f, x, 3);
    compute(f, TAG_AFFINE, &x, 1, y);
    host_update(f, x, host, 4);
    assert_int_equal(cham_tensor_drop(y), CHAM_ERR_INVALID_ARG);
    assert_non_null(strstr(cham_context_last_error(f->ctx), "written since"));
    read_back(f, y, buf);
    expect_affine(buf, 3);

    /* Written through its address outside an op. */
    fill(f, x, 5);
    compute(f, TAG_AFFINE, &x, 1, y);
    assert_int_equal(cham_tensor_drop(y), CHAM_OK);
    unsigned char *p = cham_tensor_data(x);
    assert_non_null(p);
    assert_int_equal(cham_tensor_residency(y), CHAM_RESIDENT_DEVICE);
    cham_device_synchronize(dev);
    memset(p, 0xee, N);
    read_back(f, y, buf);
    expect_affine(buf, 5);
    assert_int_equal(cham_tensor_drop(y), CHAM_ERR_INVALID_ARG);

    cham_tensor_release(y);
    cham_tensor_release(x);
    cham_device_host_free(dev, host);
}

/* What cannot be recomputed is refused, each with its reason. */
static void test_refusals(void **state)
{
    fixture_t *f = *state;
    cham_tensor_t *x = new_tensor(f, "x"), *y = new_tensor(f, "y");
    fill(f, x, 3);

    assert_int_equal(cham_op_set_recompute(f->ctx, 1), CHAM_ERR_INVALID_ARG);
    assert_non_null(strstr(cham_context_last_error(f->ctx), "no op is being dispatched"));

    cham_tensor_t *outs[2] = {y, y};
    assert_int_equal(cham_op_begin(f->ctx, f->op, &x, 1, outs, 2), CHAM_OK);
    assert_int_equal(cham_op_set_recompute(f->ctx, 1), CHAM_ERR_INVALID_ARG);
    assert_non_null(strstr(cham_context_last_error(f->ctx), "writes one storage twice"));
    assert_int_equal(cham_op_end(f->ctx), CHAM_OK);

    assert_int_equal(cham_op_begin(f->ctx, f->op, &x, 1, NULL, 0), CHAM_OK);
    assert_int_equal(cham_op_set_recompute(f->ctx, 1), CHAM_ERR_INVALID_ARG);
    assert_non_null(strstr(cham_context_last_error(f->ctx), "writes no tensor"));
    assert_int_equal(cham_op_end(f->ctx), CHAM_OK);

    assert_int_equal(cham_op_begin(f->ctx, f->op, &x, 1, &x, 1), CHAM_OK);
    assert_int_equal(cham_op_set_recompute(f->ctx, 1), CHAM_ERR_INVALID_ARG);
    assert_non_null(strstr(cham_context_last_error(f->ctx), "reads a tensor it writes"));
    assert_int_equal(cham_op_end(f->ctx), CHAM_OK);

    cham_tensor_t *half = NULL;
    assert_int_equal(cham_tensor_view(y, 0, N / 2, CHAM_DTYPE_U8, "half", &half), CHAM_OK);
    assert_int_equal(cham_op_begin(f->ctx, f->op, &x, 1, &half, 1), CHAM_OK);
    assert_int_equal(cham_op_set_recompute(f->ctx, 1), CHAM_ERR_INVALID_ARG);
    assert_non_null(strstr(cham_context_last_error(f->ctx), "part of a storage"));
    assert_int_equal(cham_op_set_cost(f->ctx, -1), CHAM_ERR_INVALID_ARG);
    assert_int_equal(cham_op_set_comm(f->ctx, -1, false), CHAM_ERR_INVALID_ARG);
    assert_non_null(strstr(cham_context_last_error(f->ctx), "-1 is not the time of a collective"));
    assert_int_equal(cham_op_set_comm(f->ctx, 0, true), CHAM_ERR_INVALID_ARG);
    assert_non_null(strstr(cham_context_last_error(f->ctx), "0 is not the time of a waited"));
    assert_int_equal(cham_op_set_comm(f->ctx, 1e3, true), CHAM_OK);
    assert_int_equal(cham_op_end(f->ctx), CHAM_OK);
    assert_int_equal(cham_op_set_comm(f->ctx, 1e3, false), CHAM_ERR_INVALID_ARG);
    assert_non_null(strstr(cham_context_last_error(f->ctx), "no op is being dispatched"));
    cham_tensor_release(half);

    assert_int_equal(cham_tensor_drop(x), CHAM_ERR_INVALID_ARG);
    assert_non_null(strstr(cham_context_last_error(f->ctx), "drop of \"x\""));

    cham_context_on_recompute(f->ctx, NULL, NULL);
    assert_int_equal(cham_op_begin(f->ctx, f->op, &x, 1, &y, 1), CHAM_OK);
    assert_int_equal(cham_op_set_recompute(f->ctx, 1), CHAM_ERR_INVALID_ARG);
    assert_non_null(strstr(cham_context_last_error(f->ctx), "no recompute hook"));
    assert_int_equal(cham_op_end(f->ctx), CHAM_OK);
    cham_context_on_recompute(f->ctx, hook, &f->hook);

    /* An input freed while the output is on the device: no longer
     * recomputable. */
    compute(f, TAG_AFFINE, &x, 1, y);
    cham_tensor_release(x);
    assert_int_equal(cham_tensor_drop(y), CHAM_ERR_INVALID_ARG);
    cham_tensor_release(y);
}

/* A failing hook fails the op that needed the tensor; the tensor stays
 * dropped and comes back once the hook works. */
static void test_hook_failure(void **state)
{
    fixture_t *f = *state;
    cham_tensor_t *x = new_tensor(f, "x"), *y = new_tensor(f, "y");
    fill(f, x, 4);
    compute(f, TAG_AFFINE, &x, 1, y);
    assert_int_equal(cham_tensor_drop(y), CHAM_OK);
    f->hook.refuse = true;
    assert_int_not_equal(cham_op_begin(f->ctx, f->op, &y, 1, NULL, 0), CHAM_OK);
    assert_non_null(strstr(cham_context_last_error(f->ctx), "recompute hook failed"));
    assert_int_equal(cham_tensor_residency(y), CHAM_RESIDENT_DROPPED);
    f->hook.refuse = false;
    unsigned char buf[N];
    read_back(f, y, buf);
    expect_affine(buf, 4);
    cham_tensor_release(x);
    cham_tensor_release(y);
}

/* A dropped tensor released unused: its held inputs go too. */
static void test_release_dropped(void **state)
{
    fixture_t *f = *state;
    cham_tensor_t *x = new_tensor(f, "x"), *y = new_tensor(f, "y");
    fill(f, x, 6);
    compute(f, TAG_AFFINE, &x, 1, y);
    assert_int_equal(cham_tensor_drop(y), CHAM_OK);
    cham_tensor_release(x);
    assert_int_equal(stats(f).mem_in_use, N);   /* x, held */
    cham_tensor_release(y);
    assert_int_equal(stats(f).mem_in_use, 0);
    assert_int_equal(f->hook.calls, 0);
}

/* A weight gathered from persistent state (W = affine(P), P from an earlier
 * step) read by a dropped Y = W + X: when the caller releases W its memory
 * goes too (W is kept, dropped), and Y's re-run makes W first. When P is
 * about to be overwritten while W is kept, W is made from the old P first,
 * so Y still comes back as it was. */
static void test_kept_input(void **state)
{
    fixture_t *f = *state;
    cham_tensor_t *p = new_tensor(f, "P");
    fill(f, p, 11);
    assert_int_equal(cham_step_end(f->ctx), CHAM_OK);

    cham_tensor_t *w = new_tensor(f, "W"), *x = new_tensor(f, "X"), *y = new_tensor(f, "Y");
    compute(f, TAG_AFFINE, &p, 1, w);
    fill(f, x, 3);
    cham_tensor_t *ins[2] = {w, x};
    compute(f, TAG_SUM, ins, 2, y);
    assert_int_equal(cham_tensor_drop(y), CHAM_OK);
    uint64_t before = stats(f).mem_in_use;
    cham_tensor_release(w);                       /* kept, and its memory goes */
    assert_int_equal(stats(f).mem_in_use, before - N);
    unsigned char buf[N];
    read_back(f, y, buf);
    for (size_t i = 0; i < N; i++) {
        unsigned char pv = (unsigned char)(i * 7 + 11), xv = (unsigned char)(i * 7 + 3);
        assert_int_equal(buf[i], (unsigned char)((unsigned char)(pv * 3 + 1) + xv));
    }
    cham_runtime_stats_t st = stats(f);
    assert_int_equal(st.recomputes, 2);            /* W, then Y */
    assert_int_equal(st.on_demand_recomputes, 1);  /* W is Y's cost */
    assert_int_equal(st.mem_in_use, before);       /* P, X, Y: W went again */

    /* Again, and P is overwritten while W is kept: W is made from the old P
     * first and then stays (it no longer follows from P) until Y needs it. */
    cham_tensor_release(y);
    w = new_tensor(f, "W2");
    y = new_tensor(f, "Y2");
    compute(f, TAG_AFFINE, &p, 1, w);
    ins[0] = w;
    compute(f, TAG_SUM, ins, 2, y);
    assert_int_equal(cham_tensor_drop(y), CHAM_OK);
    cham_tensor_release(w);
    before = stats(f).mem_in_use;
    fill(f, p, 12);
    assert_int_equal(stats(f).mem_in_use, before + N);
    read_back(f, y, buf);
    for (size_t i = 0; i < N; i++) {
        unsigned char pv = (unsigned char)(i * 7 + 11), xv = (unsigned char)(i * 7 + 3);
        assert_int_equal(buf[i], (unsigned char)((unsigned char)(pv * 3 + 1) + xv));
    }
    cham_tensor_release(y);
    cham_tensor_release(x);
    cham_tensor_release(p);
    assert_int_equal(stats(f).mem_in_use, 0);
}

/* An op with two outputs (y = affine(x), z = y + 1): dropping y alone
 * re-runs the op with scratch for z, whose bytes stay as they are; with
 * both dropped each comes back on its own use, the other's slot scratch. */
static void test_two_outputs(void **state)
{
    fixture_t *f = *state;
    cham_tensor_t *x = new_tensor(f, "x"), *y = new_tensor(f, "y"), *z = new_tensor(f, "z");
    fill(f, x, 2);
    cham_tensor_t *outs[2] = {y, z};
    assert_int_equal(cham_op_begin(f->ctx, f->op, &x, 1, outs, 2), CHAM_OK);
    void *in = cham_tensor_data(x);
    assert_int_equal(launch(cham_context_compute_stream(f->ctx), TAG_PAIR, &in, 1,
                            cham_tensor_data(y), cham_tensor_data(z), N),
                     CHAM_OK);
    assert_int_equal(cham_op_set_recompute(f->ctx, TAG_PAIR), CHAM_OK);
    assert_int_equal(cham_op_end(f->ctx), CHAM_OK);
    uint64_t before = stats(f).mem_in_use;
    assert_int_equal(cham_tensor_drop(y), CHAM_OK);
    unsigned char buf[N];
    read_back(f, y, buf);
    expect_affine(buf, 2);
    assert_int_equal(f->hook.last_which, 0);
    assert_int_equal(stats(f).mem_in_use, before);     /* the scratch went */
    assert_int_equal(cham_tensor_drop(y), CHAM_OK);
    assert_int_equal(cham_tensor_drop(z), CHAM_OK);
    read_back(f, z, buf);
    assert_int_equal(f->hook.last_which, 1);
    for (size_t i = 0; i < N; i++)
        assert_int_equal(buf[i], (unsigned char)((unsigned char)((unsigned char)(i * 7 + 2) * 3 + 1) + 1));
    assert_int_equal(cham_tensor_residency(y), CHAM_RESIDENT_DROPPED);
    read_back(f, y, buf);
    expect_affine(buf, 2);
    assert_int_equal(stats(f).recomputes, 3);
    cham_tensor_release(x);                       /* held until y and z are back */
    cham_tensor_release(y);
    cham_tensor_release(z);
    assert_int_equal(stats(f).mem_in_use, 0);
}

/* Out of memory with a recomputable tensor that costs less to run again
 * than to copy out and back: the out-of-memory path drops it instead of a
 * passive swap-out, and it comes back bit-exact. */
static void test_oom_drops(void **state)
{
    (void)state;
    cham_config_t c = cham_config_default();
    c.device.capacity = 3 * N + N / 2;     /* x, y and one more */
    c.device.data = true;
    c.device.hazard_check = true;
    c.allocator_shift = 10;
    c.pinned_budget = 64 * MiB;
    fixture_t f = {0};
    assert_int_equal(cham_context_new(&c, &f.ctx), CHAM_OK);
    cham_context_on_recompute(f.ctx, hook, &f.hook);
    assert_int_equal(cham_op_token(f.ctx, "op", &f.op), CHAM_OK);
    cham_tensor_t *x = new_tensor(&f, "x"), *a = new_tensor(&f, "a"), *y = new_tensor(&f, "y");
    fill(&f, x, 8);
    fill(&f, a, 9);
    compute(&f, TAG_AFFINE, &x, 1, y);       /* cost 0: cheaper than any copy */
    /* A fourth block: the victim is the newest storage of the size, y. */
    cham_tensor_t *z = NULL;
    assert_int_equal(cham_tensor_new(f.ctx, N, CHAM_DTYPE_U8, "z", &z), CHAM_OK);
    cham_runtime_stats_t st = stats(&f);
    assert_int_equal(st.passive_drops, 1);
    assert_int_equal(st.passive_swaps_out, 0);
    assert_int_equal(cham_tensor_residency(y), CHAM_RESIDENT_DROPPED);
    cham_tensor_release(z);
    unsigned char buf[N];
    read_back(&f, y, buf);
    expect_affine(buf, 8);
    cham_tensor_release(a);
    cham_tensor_release(y);
    cham_tensor_release(x);
    assert_int_equal(cham_device_hazard_count(cham_context_device(f.ctx)), 0);
    cham_context_free(f.ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_dropped_tensor_comes_back, setup, teardown),
        cmocka_unit_test_setup_teardown(test_chain, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ghost, setup, teardown),
        cmocka_unit_test_setup_teardown(test_input_overwritten, setup, teardown),
        cmocka_unit_test_setup_teardown(test_host_write_of_an_input, setup, teardown),
        cmocka_unit_test_setup_teardown(test_refusals, setup, teardown),
        cmocka_unit_test_setup_teardown(test_hook_failure, setup, teardown),
        cmocka_unit_test_setup_teardown(test_release_dropped, setup, teardown),
        cmocka_unit_test_setup_teardown(test_kept_input, setup, teardown),
        cmocka_unit_test(test_oom_drops),
        cmocka_unit_test_setup_teardown(test_two_outputs, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
