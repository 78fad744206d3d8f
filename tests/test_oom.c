/* The OOM path (src/runtime/oom.c) and its victim index (victims.c):
 * on random programs, every passive victim is the one the rule of
 * docs/executor.md names (the smallest resident storage of at least the
 * request that holds data and the op being begun does not use, the newest
 * among equal sizes), computed here from the tensors alone, and the index
 * agrees with the storages after every call; and the loop is bounded when
 * a hook brings the victim back or asks for memory itself (issue 47). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "chameleon/chameleon.h"
#include "common/rng.h"
#include "runtime/runtime-impl.h"

#define KiB (UINT64_C(1) << 10)
#define MiB (UINT64_C(1) << 20)

static cham_config_t config(uint64_t capacity)
{
    cham_config_t c = cham_config_default();
    c.device.preset = "a100-80g";
    c.device.capacity = capacity;
    c.device.hazard_check = true;
    c.pinned_budget = 512 * MiB;
    c.executor = false;           /* passive swaps alone */
    return c;
}

static void ignore_log(const char *line, void *user)
{
    (void)line, (void)user;
}

/* ---- the victim rule on random programs ---------------------------------------*/

#define MAX_STORAGES 4096
#define MAX_HANDLES 4096

/* The test's own picture of each storage, by creation order (= id order). */
typedef struct model_storage {
    char label[16];
    size_t bytes;
    bool data;                    /* an op used it or its address was taken */
    bool pinned;                  /* an operand of the op in flight */
    uint32_t handles;             /* live handles (the base and views) */
    cham_tensor_t *any;           /* one of them */
} model_storage_t;

typedef struct model {
    cham_context_t *ctx;
    model_storage_t st[MAX_STORAGES];
    size_t n_st;
    cham_tensor_t *h[MAX_HANDLES];     /* live handles */
    size_t h_of[MAX_HANDLES];          /* their storage */
    size_t n_h;
    size_t request;               /* bytes of the allocation under way; 0: unknown */
    uint64_t compared, passive;
    uint64_t rng;
} model_t;

static uint64_t rnd(model_t *m, uint64_t n)
{
    return cham_xorshift64(&m->rng) % n;
}

static bool on_device(const model_storage_t *s)
{
    cham_residency_t r = cham_tensor_residency(s->any);
    return r == CHAM_RESIDENT_DEVICE || r == CHAM_RESIDENT_MOVING_IN;
}

/* The rule, from the model: the storage the OOM path must pick for
 * m->request, -1 when none of at least the request may move (then the
 * path evicts a run of blocks, which this test does not predict). The
 * storage `leaving` has just left and counts as still there. */
static long expected_victim(const model_t *m, const char *leaving)
{
    long best = -1;
    for (size_t i = 0; i < m->n_st; i++) {
        const model_storage_t *s = &m->st[i];
        if (!s->handles || !s->data || !s->bytes || s->pinned || s->bytes < m->request)
            continue;
        if (!on_device(s) && strcmp(s->label, leaving) != 0)
            continue;
        /* Ascending creation order: a later one of the same size is newer. */
        if (best < 0 || s->bytes <= m->st[best].bytes)
            best = (long)i;
    }
    return best;
}

static void on_swap_model(const cham_swap_event_t *e, void *user)
{
    model_t *m = user;
    if (!e->out || e->cause != CHAM_SWAP_PASSIVE)
        return;
    m->passive++;
    if (!m->request)
        return;
    long want = expected_victim(m, e->label);
    if (want < 0)
        return;
    if (strcmp(m->st[want].label, e->label) != 0)
        fail_msg("request of %zu bytes: the OOM path moved \"%s\" (%llu bytes), the rule names "
                 "\"%s\" (%zu bytes): the smallest big enough, newest first", m->request,
                 e->label, (unsigned long long)e->bytes, m->st[want].label,
                 m->st[want].bytes);
    m->compared++;
}

static void check_index(const model_t *m)
{
    char why[256];
    if (!cham_victims_valid(m->ctx, why, sizeof why))
        fail_msg("victim index: %s", why);
}

static size_t pick_size(model_t *m)
{
    static const size_t sizes[] = {256 * KiB, 512 * KiB, 512 * KiB, 768 * KiB, 1 * MiB,
                                   1536 * KiB};
    return sizes[rnd(m, sizeof sizes / sizeof sizes[0])];
}

static void add_handle(model_t *m, cham_tensor_t *t, size_t storage)
{
    assert_true(m->n_h < MAX_HANDLES);
    m->h[m->n_h] = t;
    m->h_of[m->n_h++] = storage;
    m->st[storage].handles++;
    m->st[storage].any = t;
}

static void new_tensor(model_t *m)
{
    assert_true(m->n_st < MAX_STORAGES);
    model_storage_t *s = &m->st[m->n_st];
    snprintf(s->label, sizeof s->label, "t%zu", m->n_st);
    s->bytes = pick_size(m);
    m->request = s->bytes;
    cham_tensor_t *t;
    if (cham_tensor_new(m->ctx, s->bytes, CHAM_DTYPE_F32, s->label, &t) != CHAM_OK)
        fail_msg("tensor %s: %s", s->label, cham_context_last_error(m->ctx));
    m->request = 0;
    add_handle(m, t, m->n_st++);
}

static void release_handle(model_t *m, size_t k)
{
    model_storage_t *s = &m->st[m->h_of[k]];
    cham_tensor_t *t = m->h[k];
    m->h[k] = m->h[--m->n_h];
    m->h_of[k] = m->h_of[m->n_h];
    if (--s->handles) {
        for (size_t j = 0; j < m->n_h; j++)
            if (&m->st[m->h_of[j]] == s)
                s->any = m->h[j];
    }
    cham_tensor_release(t);
}

/* An op over up to two inputs and one output among the live handles,
 * sometimes with a workspace made inside it (the request is known then). */
static void run_op(model_t *m, cham_op_token_t token)
{
    if (!m->n_h)
        return;
    cham_tensor_t *in[2], *out = m->h[rnd(m, m->n_h)];
    size_t n_in = rnd(m, 3), idx[3];
    for (size_t i = 0; i < n_in; i++) {
        idx[i] = rnd(m, m->n_h);
        in[i] = m->h[idx[i]];
    }
    for (size_t i = 0; i < m->n_h; i++) {
        bool used = m->h[i] == out;
        for (size_t j = 0; j < n_in; j++)
            used |= i == idx[j];
        if (used)
            m->st[m->h_of[i]].pinned = m->st[m->h_of[i]].data = true;
    }
    if (cham_op_begin(m->ctx, token, in, n_in, &out, 1) != CHAM_OK)
        fail_msg("op: %s", cham_context_last_error(m->ctx));
    if (rnd(m, 4) == 0)
        new_tensor(m);            /* a workspace, while the operands are pinned */
    if (cham_op_end(m->ctx) != CHAM_OK)
        fail_msg("op end: %s", cham_context_last_error(m->ctx));
    for (size_t i = 0; i < m->n_st; i++)
        m->st[i].pinned = false;
}

static void random_action(model_t *m, cham_op_token_t token)
{
    uint64_t a = rnd(m, 100);
    if (a < 25 || m->n_h < 4) {
        new_tensor(m);
    } else if (a < 60) {
        run_op(m, token);
    } else if (a < 72) {
        release_handle(m, rnd(m, m->n_h));
    } else if (a < 78) {
        cham_tensor_t *t = m->h[rnd(m, m->n_h)];
        cham_residency_t r = cham_tensor_residency(t);
        if (r == CHAM_RESIDENT_DEVICE || r == CHAM_RESIDENT_MOVING_IN)
            assert_int_equal(cham_tensor_swap_out(t, false), CHAM_OK);
    } else if (a < 84) {
        size_t k = rnd(m, m->n_h);
        m->request = m->st[m->h_of[k]].bytes;
        if (cham_tensor_swap_in(m->h[k]) != CHAM_OK)
            fail_msg("swap-in: %s", cham_context_last_error(m->ctx));
        m->request = 0;
    } else if (a < 92) {
        size_t k = rnd(m, m->n_h);
        m->request = m->st[m->h_of[k]].bytes;
        /* NULL for a storage swapped out: its bytes are on the host; it
         * holds data from now on either way. */
        void *p = cham_tensor_data(m->h[k]);
        m->request = 0;
        if (!p && on_device(&m->st[m->h_of[k]]))
            fail_msg("tensor data: %s", cham_context_last_error(m->ctx));
        m->st[m->h_of[k]].data = true;
    } else if (a < 97) {
        /* A view that outlives its base. */
        size_t k = rnd(m, m->n_h), storage = m->h_of[k];
        cham_tensor_t *v;
        assert_int_equal(cham_tensor_view(m->h[k], 0, m->st[storage].bytes / 2, CHAM_DTYPE_F32,
                                          "view", &v), CHAM_OK);
        add_handle(m, v, storage);
        release_handle(m, k);
    } else {
        assert_int_equal(cham_step_end(m->ctx), CHAM_OK);
    }
}

static void victim_rule_seed(uint64_t seed, bool classic)
{
    static model_t m;
    memset(&m, 0, sizeof m);
    m.rng = seed * 0x9E3779B97F4A7C15u + 1;
    cham_config_t c = config(8 * MiB);
    if (classic)
        c.allocator = CHAM_ALLOCATOR_CLASSIC;
    assert_int_equal(cham_context_new(&c, &m.ctx), CHAM_OK);
    cham_context_set_log(m.ctx, ignore_log, NULL);
    cham_context_on_swap(m.ctx, on_swap_model, &m);
    cham_op_token_t token;
    assert_int_equal(cham_op_token(m.ctx, "op", &token), CHAM_OK);
    for (int i = 0; i < 1500; i++) {
        random_action(&m, token);
        check_index(&m);
        /* Bound the live set so the device stays over-subscribed, not swamped. */
        while (m.n_h > 48)
            release_handle(&m, rnd(&m, m.n_h));
    }
    while (m.n_h)
        release_handle(&m, m.n_h - 1);
    check_index(&m);
    assert_int_equal(cham_device_hazard_count(cham_context_device(m.ctx)), 0);
    cham_context_free(m.ctx);
    /* The rule was put to the test, not skipped. */
    if (m.compared < 50)
        fail_msg("seed %llu: only %llu of %llu passive swaps compared",
                 (unsigned long long)seed, (unsigned long long)m.compared,
                 (unsigned long long)m.passive);
}

static void test_victim_choice_follows_the_rule(void **state)
{
    (void)state;
    for (uint64_t seed = 1; seed <= 6; seed++)
        victim_rule_seed(seed, seed % 2 == 0);
}

/* Equal sizes: the newest goes first, as the walk of ctx->storages (newest
 * first) that the index replaced chose; written out, not random. Tensors
 * of 2 MiB, each written by an op, are made until memory runs short: the
 * first victim is the one made just before, not the oldest. */
static void record_first_victim(const cham_swap_event_t *e, void *user)
{
    char *first = user;
    if (e->out && e->cause == CHAM_SWAP_PASSIVE && !first[0])
        snprintf(first, 16, "%s", e->label);
}

static void test_newest_of_equal_sizes_goes_first(void **state)
{
    (void)state;
    cham_context_t *ctx;
    cham_config_t c = config(8 * MiB);
    assert_int_equal(cham_context_new(&c, &ctx), CHAM_OK);
    char first[16] = "";
    cham_context_on_swap(ctx, record_first_victim, first);
    cham_op_token_t token;
    assert_int_equal(cham_op_token(ctx, "op", &token), CHAM_OK);
    cham_tensor_t *t[8];
    int n = 0;
    char previous[16] = "";
    while (!first[0]) {
        assert_true(n < 8);
        char label[16];
        snprintf(label, sizeof label, "e%d", n);
        assert_int_equal(cham_tensor_new(ctx, 2 * MiB, CHAM_DTYPE_F32, label, &t[n]), CHAM_OK);
        if (first[0])
            break;
        assert_int_equal(cham_op_begin(ctx, token, NULL, 0, &t[n], 1), CHAM_OK);
        assert_int_equal(cham_op_end(ctx), CHAM_OK);
        snprintf(previous, sizeof previous, "%s", label);
        n++;
    }
    assert_true(n >= 2);          /* there were equals to choose from */
    assert_string_equal(first, previous);
    for (int i = 0; i <= n; i++)
        cham_tensor_release(t[i]);
    cham_context_free(ctx);
}

/* ---- the loop is bounded --------------------------------------------------------*/

/* Two resident tensors of 3 MiB that hold data, on an 8 MiB device: a
 * request of 3 MiB more moves one of them (b, the newer). */
typedef struct pair {
    cham_context_t *ctx;
    cham_op_token_t token;
    cham_tensor_t *a, *b;
    cham_tensor_t *other;         /* on the host, for the nesting test */
    int out_calls;
    cham_status_t hook_status;
    char hook_error[512];
    bool internal;                /* the hook uses the runtime's internals */
} pair_t;

/* With other_bytes, first a tensor `other` of that size, written and then
 * swapped out by the caller. */
static void pair_new(pair_t *p, size_t other_bytes)
{
    memset(p, 0, sizeof *p);
    cham_config_t c = config(8 * MiB);
    assert_int_equal(cham_context_new(&c, &p->ctx), CHAM_OK);
    cham_context_set_log(p->ctx, ignore_log, NULL);
    assert_int_equal(cham_op_token(p->ctx, "fill", &p->token), CHAM_OK);
    if (other_bytes) {
        assert_int_equal(cham_tensor_new(p->ctx, other_bytes, CHAM_DTYPE_F32, "other",
                                         &p->other), CHAM_OK);
        assert_int_equal(cham_op_begin(p->ctx, p->token, NULL, 0, &p->other, 1), CHAM_OK);
        assert_int_equal(cham_op_end(p->ctx), CHAM_OK);
        assert_int_equal(cham_tensor_swap_out(p->other, false), CHAM_OK);
    }
    assert_int_equal(cham_tensor_new(p->ctx, 3 * MiB, CHAM_DTYPE_F32, "a", &p->a), CHAM_OK);
    assert_int_equal(cham_tensor_new(p->ctx, 3 * MiB, CHAM_DTYPE_F32, "b", &p->b), CHAM_OK);
    assert_int_equal(cham_op_begin(p->ctx, p->token, NULL, 0, &p->a, 1), CHAM_OK);
    assert_int_equal(cham_op_end(p->ctx), CHAM_OK);
    assert_int_equal(cham_op_begin(p->ctx, p->token, NULL, 0, &p->b, 1), CHAM_OK);
    assert_int_equal(cham_op_end(p->ctx), CHAM_OK);
}

static void pair_free(pair_t *p)
{
    cham_tensor_release(p->a);
    cham_tensor_release(p->b);
    cham_tensor_release(p->other);
    cham_context_free(p->ctx);
}

static cham_tensor_t *tensor_of(pair_t *p, const char *label)
{
    return strcmp(label, "a") == 0 ? p->a : strcmp(label, "b") == 0 ? p->b : NULL;
}

/* The hook of issue 47: every passive victim is swapped straight back in.
 * Before the bound this never returned; the count stops the test then. */
static void swap_victim_back(const cham_swap_event_t *e, void *user)
{
    pair_t *p = user;
    if (!e->out || e->cause != CHAM_SWAP_PASSIVE)
        return;
    if (++p->out_calls > 50)
        fail_msg("the OOM path moved a victim out %d times for one request", p->out_calls);
    cham_tensor_t *t = tensor_of(p, e->label);
    assert_non_null(t);
    if (p->internal)
        p->hook_status = cham_storage_swap_in(t->storage, CHAM_SWAP_CALLER);
    else
        p->hook_status = cham_tensor_swap_in(t);
    if (p->hook_status != CHAM_OK)
        cham_copy_str(p->hook_error, sizeof p->hook_error, cham_context_last_error(p->ctx));
}

/* The error when the victim came back: CHAM_ERR_OUT_OF_MEMORY naming the
 * request, what was tried and which tensor came back. */
static void assert_stopped_without_progress(pair_t *p, cham_status_t st)
{
    assert_int_equal(st, CHAM_ERR_OUT_OF_MEMORY);
    const char *msg = cham_context_last_error(p->ctx);
    if (!strstr(msg, "tensor \"c\"") || !strstr(msg, "3145728 bytes requested") ||
        !strstr(msg, "1 passive swap-outs (3145728 bytes)") ||
        !strstr(msg, "stopped without progress") || !strstr(msg, "\"b\" (storage") ||
        !strstr(msg, "is back on the device"))
        fail_msg("%s", msg);
    assert_int_equal(p->out_calls, 1);
}

/* Through the public API: the swap-in from the hook is refused (hooks do
 * not call back, status.h), or, if it were not, the loop stops with the
 * error above; either way the request returns. */
static void test_swap_hook_that_swaps_the_victim_back(void **state)
{
    (void)state;
    pair_t p;
    pair_new(&p, 0);
    cham_context_on_swap(p.ctx, swap_victim_back, &p);
    cham_tensor_t *c = NULL;
    cham_status_t st = cham_tensor_new(p.ctx, 3 * MiB, CHAM_DTYPE_F32, "c", &c);
    if (p.hook_status == CHAM_OK) {
        assert_stopped_without_progress(&p, st);
    } else {
        assert_int_equal(p.hook_status, CHAM_ERR_INVALID_ARG);
        assert_int_equal(st, CHAM_OK);
        assert_int_equal(p.out_calls, 1);
        cham_tensor_release(c);
    }
    cham_context_on_swap(p.ctx, NULL, NULL);
    pair_free(&p);
}

/* The bound itself, whatever the public calls refuse: the victim brought
 * back by the runtime's own swap-in, from the hook. */
static void test_oom_loop_stops_when_the_victim_comes_back(void **state)
{
    (void)state;
    pair_t p;
    pair_new(&p, 0);
    p.internal = true;
    cham_context_on_swap(p.ctx, swap_victim_back, &p);
    cham_tensor_t *c = NULL;
    cham_status_t st = cham_tensor_new(p.ctx, 3 * MiB, CHAM_DTYPE_F32, "c", &c);
    assert_int_equal(p.hook_status, CHAM_OK);
    assert_stopped_without_progress(&p, st);
    assert_null(c);
    cham_context_on_swap(p.ctx, NULL, NULL);
    /* The context is usable afterwards: with the hook gone, c fits. */
    assert_int_equal(cham_tensor_new(p.ctx, 3 * MiB, CHAM_DTYPE_F32, "c", &c), CHAM_OK);
    cham_tensor_release(c);
    assert_int_equal(cham_device_hazard_count(cham_context_device(p.ctx)), 0);
    pair_free(&p);
}

/* A hook that needs room itself while the OOM path makes room: its request
 * does not start a second OOM path inside the first. */
static void swap_other_in(const cham_swap_event_t *e, void *user)
{
    pair_t *p = user;
    if (!e->out || e->cause != CHAM_SWAP_PASSIVE || p->out_calls++)
        return;
    p->hook_status = cham_storage_swap_in(p->other->storage, CHAM_SWAP_CALLER);
    cham_copy_str(p->hook_error, sizeof p->hook_error, cham_context_last_error(p->ctx));
}

static void test_oom_path_does_not_nest(void **state)
{
    (void)state;
    pair_t p;
    pair_new(&p, 6 * MiB);        /* more than moving b out frees */
    cham_context_on_swap(p.ctx, swap_other_in, &p);
    cham_tensor_t *c = NULL;
    assert_int_equal(cham_tensor_new(p.ctx, 3 * MiB, CHAM_DTYPE_F32, "c", &c), CHAM_OK);
    assert_int_equal(p.out_calls, 1);
    assert_int_equal(p.hook_status, CHAM_ERR_OUT_OF_MEMORY);
    if (!strstr(p.hook_error, "swap-in of \"other\"") ||
        !strstr(p.hook_error, "makes room for \"c\"") ||
        !strstr(p.hook_error, "does not run inside itself"))
        fail_msg("%s", p.hook_error);
    assert_int_equal(cham_tensor_residency(p.other), CHAM_RESIDENT_HOST);
    cham_context_on_swap(p.ctx, NULL, NULL);
    cham_tensor_release(c);
    pair_free(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_victim_choice_follows_the_rule),
        cmocka_unit_test(test_newest_of_equal_sizes_goes_first),
        cmocka_unit_test(test_swap_hook_that_swaps_the_victim_back),
        cmocka_unit_test(test_oom_loop_stops_when_the_victim_comes_back),
        cmocka_unit_test(test_oom_path_does_not_nest),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
