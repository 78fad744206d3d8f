/* An op starts only with every tensor it uses on the device, and a tensor
 * that may hold data is never given back without a copy: the out-of-memory
 * path that makes room for one input must not take another's block, and a
 * tensor the caller filled outside any op keeps its bytes. Real bytes, the
 * hazard detector on. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "chameleon/chameleon.h"

#define MiB (UINT64_C(1) << 20)

static cham_context_t *open_ctx(uint64_t capacity)
{
    cham_config_t c = cham_config_default();
    c.device.capacity = capacity;
    c.device.data = true;
    c.device.hazard_check = true;
    c.allocator_shift = 10;        /* segments of KiB, so the device fills exactly */
    c.pinned_budget = 64 * MiB;
    c.min_swap_bytes = 1;
    cham_context_t *ctx = NULL;
    if (cham_context_new(&c, &ctx) != CHAM_OK)
        fail_msg("context: %s", cham_context_last_error(NULL));
    return ctx;
}

/* What a kernel saw of each of its tensors. */
typedef struct seen {
    int n;
    const unsigned char *ptr[4];
    size_t bytes[4];
    unsigned char first[4], last[4];
} seen_t;

static void look(void *arg)
{
    seen_t *s = arg;
    for (int i = 0; i < s->n; i++) {
        if (!s->ptr[i])
            continue;
        s->first[i] = s->ptr[i][0];
        s->last[i] = s->ptr[i][s->bytes[i] - 1];
    }
}

typedef struct fill {
    void *ptr;
    size_t bytes;
    unsigned char value;
} fill_t;

static void do_fill(void *arg)
{
    fill_t *f = arg;
    memset(f->ptr, f->value, f->bytes);
}

/* Fills t with byte v on the device, as an op. */
static void fill_op(cham_context_t *ctx, cham_op_token_t tok, cham_tensor_t *t, unsigned char v)
{
    assert_int_equal(cham_op_begin(ctx, tok, NULL, 0, &t, 1), CHAM_OK);
    fill_t f = {cham_tensor_data(t), cham_tensor_bytes(t), v};
    cham_access_t acc = {f.ptr, f.bytes, CHAM_ACCESS_WRITE};
    cham_kernel_t k = {.label = "fill", .bytes = (double)f.bytes, .accesses = &acc,
                       .n_accesses = 1, .cpu_fn = do_fill, .arg = &f};
    assert_int_equal(cham_kernel_launch(cham_context_compute_stream(ctx), &k), CHAM_OK);
    assert_int_equal(cham_op_end(ctx), CHAM_OK);
}

/* The case: A filled by the caller outside any op (a parameter),
 * or never touched, B written and swapped out, C and D filling the device;
 * then an op reads A and B. Bringing B back must not take A's block. */
static void inputs_stay(bool fill_a)
{
    cham_context_t *ctx = open_ctx(3 * MiB);
    cham_op_token_t fill, read;
    assert_int_equal(cham_op_token(ctx, "fill", &fill), CHAM_OK);
    assert_int_equal(cham_op_token(ctx, "read", &read), CHAM_OK);
    cham_tensor_t *a, *b, *c, *d;
    assert_int_equal(cham_tensor_new(ctx, MiB, CHAM_DTYPE_F32, "A", &a), CHAM_OK);
    if (fill_a) {
        assert_int_equal(cham_device_synchronize(cham_context_device(ctx)), CHAM_OK);
        memset(cham_tensor_data(a), 0xA1, MiB);     /* outside any op */
    }
    assert_int_equal(cham_tensor_new(ctx, MiB, CHAM_DTYPE_F32, "B", &b), CHAM_OK);
    fill_op(ctx, fill, b, 0xB2);
    assert_int_equal(cham_tensor_swap_out(b, false), CHAM_OK);
    assert_int_equal(cham_tensor_new(ctx, MiB, CHAM_DTYPE_F32, "C", &c), CHAM_OK);
    fill_op(ctx, fill, c, 0xC3);
    assert_int_equal(cham_tensor_new(ctx, MiB, CHAM_DTYPE_F32, "D", &d), CHAM_OK);
    fill_op(ctx, fill, d, 0xD4);
    assert_int_equal(cham_tensor_residency(a), CHAM_RESIDENT_DEVICE);

    cham_tensor_t *in[2] = {a, b};
    assert_int_equal(cham_op_begin(ctx, read, in, 2, NULL, 0), CHAM_OK);
    seen_t s = {.n = 2};
    cham_access_t acc[2];
    for (int i = 0; i < 2; i++) {
        s.ptr[i] = cham_tensor_data(in[i]);
        s.bytes[i] = MiB;
        assert_non_null(s.ptr[i]);
        acc[i] = (cham_access_t){cham_tensor_data(in[i]), MiB, CHAM_ACCESS_READ};
    }
    cham_kernel_t k = {.label = "read", .bytes = 2.0 * MiB, .accesses = acc, .n_accesses = 2,
                       .cpu_fn = look, .arg = &s};
    assert_int_equal(cham_kernel_launch(cham_context_compute_stream(ctx), &k), CHAM_OK);
    assert_int_equal(cham_op_end(ctx), CHAM_OK);
    assert_int_equal(cham_device_synchronize(cham_context_device(ctx)), CHAM_OK);
    if (fill_a) {
        assert_int_equal(s.first[0], 0xA1);
        assert_int_equal(s.last[0], 0xA1);
    }
    assert_int_equal(s.first[1], 0xB2);
    assert_int_equal(s.last[1], 0xB2);
    /* Room was made by moving C or D (with a copy), not by dropping A. */
    cham_runtime_stats_t st;
    cham_context_get_stats(ctx, &st);
    assert_true(st.passive_swaps_out >= 1);
    assert_int_equal(cham_device_hazard_count(cham_context_device(ctx)), 0);
    cham_tensor_release(a);
    cham_tensor_release(b);
    cham_tensor_release(c);
    cham_tensor_release(d);
    cham_context_free(ctx);
}

static void test_filled_input_stays_while_another_comes_back(void **state)
{
    (void)state;
    inputs_stay(true);
}

/* An input no one has written holds no data, but the op still starts with
 * it at an address. */
static void test_untouched_input_stays_while_another_comes_back(void **state)
{
    (void)state;
    inputs_stay(false);
}

/* A tensor the caller filled outside any op, not used by the op that runs
 * out of memory, moves out with a copy and comes back with its bytes. */
static void test_host_filled_tensor_keeps_its_bytes(void **state)
{
    (void)state;
    cham_context_t *ctx = open_ctx(3 * MiB);
    cham_op_token_t fill, read;
    assert_int_equal(cham_op_token(ctx, "fill", &fill), CHAM_OK);
    assert_int_equal(cham_op_token(ctx, "read", &read), CHAM_OK);
    cham_tensor_t *p, *x, *y;
    assert_int_equal(cham_tensor_new(ctx, MiB, CHAM_DTYPE_F32, "param", &p), CHAM_OK);
    assert_int_equal(cham_device_synchronize(cham_context_device(ctx)), CHAM_OK);
    memset(cham_tensor_data(p), 0x5E, MiB);
    assert_int_equal(cham_tensor_new(ctx, MiB, CHAM_DTYPE_F32, "x", &x), CHAM_OK);
    fill_op(ctx, fill, x, 1);
    /* y needs the param's megabyte. */
    assert_int_equal(cham_tensor_new(ctx, 3 * MiB / 2, CHAM_DTYPE_F32, "y", &y), CHAM_OK);
    fill_op(ctx, fill, y, 2);
    cham_tensor_release(y);
    assert_int_equal(cham_op_begin(ctx, read, &p, 1, NULL, 0), CHAM_OK);
    seen_t s = {.n = 1, .ptr = {cham_tensor_data(p)}, .bytes = {MiB}};
    assert_non_null(s.ptr[0]);
    cham_access_t acc = {cham_tensor_data(p), MiB, CHAM_ACCESS_READ};
    cham_kernel_t k = {.label = "read", .bytes = MiB, .accesses = &acc, .n_accesses = 1,
                       .cpu_fn = look, .arg = &s};
    assert_int_equal(cham_kernel_launch(cham_context_compute_stream(ctx), &k), CHAM_OK);
    assert_int_equal(cham_op_end(ctx), CHAM_OK);
    assert_int_equal(cham_device_synchronize(cham_context_device(ctx)), CHAM_OK);
    assert_int_equal(s.first[0], 0x5E);
    assert_int_equal(s.last[0], 0x5E);
    assert_int_equal(cham_device_hazard_count(cham_context_device(ctx)), 0);
    cham_tensor_release(p);
    cham_tensor_release(x);
    cham_context_free(ctx);
}

/* Before the first op, tensors the caller made and filled can still move
 * out to make room for another (none of them is the op's: there is none). */
static void test_tensors_move_before_the_first_op(void **state)
{
    (void)state;
    cham_context_t *ctx = open_ctx(8 * MiB);
    cham_tensor_t *t[3];
    for (int i = 0; i < 3; i++) {
        char label[8];
        snprintf(label, sizeof label, "p%d", i);
        assert_int_equal(cham_tensor_new(ctx, 3 * MiB, CHAM_DTYPE_F32, label, &t[i]), CHAM_OK);
        assert_int_equal(cham_device_synchronize(cham_context_device(ctx)), CHAM_OK);
        memset(cham_tensor_data(t[i]), 0x70 + i, 3 * MiB);
    }
    cham_runtime_stats_t st;
    cham_context_get_stats(ctx, &st);
    assert_int_equal(st.passive_swaps_out, 1);
    assert_int_equal(cham_tensor_residency(t[2]), CHAM_RESIDENT_DEVICE);
    assert_true((cham_tensor_residency(t[0]) == CHAM_RESIDENT_DEVICE) !=
                (cham_tensor_residency(t[1]) == CHAM_RESIDENT_DEVICE));
    for (int i = 0; i < 3; i++)
        cham_tensor_release(t[i]);
    cham_context_free(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_filled_input_stays_while_another_comes_back),
        cmocka_unit_test(test_untouched_input_stays_while_another_comes_back),
        cmocka_unit_test(test_host_filled_tensor_keeps_its_bytes),
        cmocka_unit_test(test_tensors_move_before_the_first_op),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
