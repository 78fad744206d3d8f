/* The detailed profile (src/profile/profile.c, profile_json.c): building
 * one through the builder, the memory curve without swaps on hand-computed
 * examples (paper Fig. 3), a save/load round trip compared field by field
 * (64-bit values above 2^53 included), and one test per malformed file,
 * each checked for the position its message names. Files go to a mkdtemp
 * directory that is removed at the end. */
#define _GNU_SOURCE       /* memfd_create */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "support/files.h"
#include "support/rng.h"

#include "chameleon/profile.h"
#include "profile/profile-impl.h"

static char tmpdir[512];

static int group_setup(void **state)
{
    (void)state;
    return test_tmpdir_make(tmpdir, sizeof tmpdir, "cham-test-profile");
}

static int group_teardown(void **state)
{
    (void)state;
    return test_tmpdir_remove(tmpdir);
}

/* ---- a sample profile ------------------------------------------------------*/

#define BIG_PTR UINT64_C(0xFFFFFFFFFFFFF000)           /* above 2^63 */
#define ODD_PTR ((UINT64_C(1) << 53) + 1)             /* not a double */
#define HISTORY UINT64_C(0x8000000000000001)

static const char *const sample_tokens[] = {"matmul", "add", "relu \"fused\" \xC3\xA9"};

/* Three ops (the last with no uses), four uses, four swaps (one carried), the last at
 * sample 2 * n_ops (after the last op, before the step ended). */
static cham_profile_t *make_sample(void)
{
    cham_profile_t *p = cham_profile_new(7, UINT64_C(1) << 34);
    assert_non_null(p);
    cham_profile_set_duration(p, 123456789);
    cham_profile_set_fixed_costs(p, 2000, 5000);

    assert_true(cham_profile_begin_op(p, 0, CHAM_PHASE_FORWARD, -1, 1000));
    cham_tensor_use_t u0 = {.storage = 1, .data_ptr = BIG_PTR, .bytes = 256,
                            .storage_bytes = 512, .dtype = CHAM_DTYPE_F16, .use_count = 0,
                            .history = 0, .output = false, .host_backed = true};
    cham_tensor_use_t u1 = {.storage = 2, .data_ptr = ODD_PTR, .bytes = 512,
                            .storage_bytes = 512, .dtype = CHAM_DTYPE_F32, .use_count = 3,
                            .history = HISTORY, .output = true, .persistent = true};
    assert_true(cham_profile_add_use(p, &u0));
    assert_true(cham_profile_add_use(p, &u1));
    cham_profile_set_cost(p, 2500.5);           /* a blocking collective */
    cham_profile_set_comm(p, 2500.5, true);
    cham_profile_end_op(p, 1500);
    cham_profile_swap_t s0 = {.kind = CHAM_SWAP_OUT, .storage = 1, .bytes = 512, .sample = 1,
                              .passive = false};
    assert_true(cham_profile_add_swap(p, &s0));

    assert_true(cham_profile_begin_op(p, 1, CHAM_PHASE_BACKWARD, -1, 988));
    cham_tensor_use_t u2 = {.storage = 3, .data_ptr = 0, .bytes = 0, .storage_bytes = 0,
                            .dtype = CHAM_DTYPE_BOOL, .use_count = UINT32_MAX,
                            .history = UINT64_MAX, .output = false};
    cham_tensor_use_t u3 = {.storage = (UINT64_C(1) << 53) - 1, .data_ptr = 1, .bytes = 8,
                            .storage_bytes = 16, .dtype = CHAM_DTYPE_BF16, .use_count = 1,
                            .history = 0x0102, .output = true};
    assert_true(cham_profile_add_use(p, &u2));
    assert_true(cham_profile_add_use(p, &u3));
    cham_profile_set_comm(p, 700, false);       /* one the compute stream goes on from */
    cham_profile_end_op(p, 1200);
    cham_profile_swap_t s1 = {.kind = CHAM_SWAP_IN, .storage = 1, .bytes = 512, .sample = 4,
                              .passive = true};
    cham_profile_swap_t s1c = {.kind = CHAM_SWAP_IN, .storage = 5, .bytes = 0, .sample = 4,
                               .carried = true};
    assert_true(cham_profile_add_swap(p, &s1));
    assert_true(cham_profile_add_swap(p, &s1c));

    assert_true(cham_profile_begin_op(p, 2, CHAM_PHASE_OPTIMIZER, -1, 1712));
    cham_profile_end_op(p, 1712);
    cham_profile_swap_t s2 = {.kind = CHAM_SWAP_OUT, .storage = 2, .bytes = 512, .sample = 6,
                              .passive = false};
    assert_true(cham_profile_add_swap(p, &s2));

    assert_true(cham_profile_set_tokens(p, sample_tokens, 3));
    return p;
}

static void test_builder(void **state)
{
    (void)state;
    cham_profile_t *p = make_sample();
    cham_profile_view_t v;
    cham_profile_get(p, &v);
    assert_int_equal(v.step, 7);
    assert_int_equal(v.capacity, UINT64_C(1) << 34);
    assert_int_equal(v.duration_ns, 123456789);
    assert_int_equal(v.n_ops, 3);
    assert_int_equal(v.n_uses, 4);
    assert_int_equal(v.n_swaps, 4);
    assert_true(v.swaps[2].carried && v.uses[1].persistent);
    assert_true(v.uses[0].host_backed && !v.uses[1].host_backed);
    assert_int_equal(v.n_tokens, 3);
    assert_string_equal(v.token_names[2], sample_tokens[2]);
    assert_int_equal(v.ops[0].first_use, 0);
    assert_int_equal(v.ops[0].n_uses, 2);
    assert_int_equal(v.ops[1].first_use, 2);
    assert_int_equal(v.ops[1].n_uses, 2);
    assert_int_equal(v.ops[2].first_use, 4);
    assert_int_equal(v.ops[2].n_uses, 0);
    assert_int_equal(v.ops[1].phase, CHAM_PHASE_BACKWARD);
    assert_int_equal(v.ops[1].mem_before, 988);
    assert_int_equal(v.ops[1].mem_after, 1200);
    assert_true(v.uses[1].data_ptr == ODD_PTR);
    assert_true(v.uses[2].history == UINT64_MAX);
    assert_int_equal(v.swaps[1].kind, CHAM_SWAP_IN);
    assert_true(v.swaps[1].passive);

    /* Token names are copied, and replaced by a second call. */
    const char *names[] = {"a", "b", "c", "d"};
    assert_true(cham_profile_set_tokens(p, names, 4));
    cham_profile_get(p, &v);
    assert_int_equal(v.n_tokens, 4);
    assert_string_equal(v.token_names[3], "d");
    assert_true(v.token_names[3] != names[3]);
    cham_profile_free(p);

    cham_profile_t *empty = cham_profile_new(0, 0);
    assert_non_null(empty);
    cham_profile_get(empty, &v);
    assert_int_equal(v.n_ops, 0);
    assert_int_equal(v.n_tokens, 0);
    cham_profile_memory_curve(empty, NULL, NULL);
    cham_profile_free(empty);
    cham_profile_free(NULL);
}

/* Runs fn in a child and expects it to stop on a CHAM_ASSERT (abort). */
static void expect_abort(void (*fn)(void))
{
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        signal(SIGABRT, SIG_DFL);
        if (!freopen("/dev/null", "w", stderr))
            _exit(2);
        fn();
        _exit(0);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFSIGNALED(status));
    assert_int_equal(WTERMSIG(status), SIGABRT);
}

static void begin_twice(void)
{
    cham_profile_t *p = cham_profile_new(0, 0);
    if (p && cham_profile_begin_op(p, 0, CHAM_PHASE_FORWARD, -1, 0))
        cham_profile_begin_op(p, 0, CHAM_PHASE_FORWARD, -1, 0);
}

static void end_without_begin(void)
{
    cham_profile_t *p = cham_profile_new(0, 0);
    if (p)
        cham_profile_end_op(p, 0);
}

static void swaps_out_of_order(void)
{
    cham_profile_t *p = cham_profile_new(0, 0);
    cham_profile_swap_t s = {.kind = CHAM_SWAP_OUT, .bytes = 1, .sample = 5};
    if (p && cham_profile_add_swap(p, &s)) {
        s.sample = 4;
        cham_profile_add_swap(p, &s);
    }
}

static void test_builder_misuse_asserts(void **state)
{
    (void)state;
    expect_abort(begin_twice);
    expect_abort(end_without_begin);
    expect_abort(swaps_out_of_order);
}

/* ---- the memory curve ------------------------------------------------------------*/

static void add_op(cham_profile_t *p, uint64_t before, uint64_t after)
{
    assert_true(cham_profile_begin_op(p, 0, CHAM_PHASE_FORWARD, -1, before));
    cham_profile_end_op(p, after);
}

static void add_swap(cham_profile_t *p, cham_swap_kind_t kind, uint64_t bytes,
                     uint32_t sample)
{
    cham_profile_swap_t s = {.kind = kind, .storage = 9, .bytes = bytes, .sample = sample};
    assert_true(cham_profile_add_swap(p, &s));
}

/* Fig. 3 in miniature: a tensor of 200 bytes goes out after op 1 and comes
 * back before op 3, so the measured curve stays low where the curve
 * without swaps is 200 higher. Also: two swaps at one sample, and one at
 * sample 2 * n_ops that changes nothing. */
static void test_memory_curve(void **state)
{
    (void)state;
    cham_profile_t *p = cham_profile_new(1, 450);
    assert_non_null(p);
    add_op(p, 100, 300);                     /* samples 0, 1 */
    add_op(p, 300, 300);                     /* 2, 3: 500 without the swap-out */
    add_swap(p, CHAM_SWAP_OUT, 200, 3);
    add_op(p, 300, 400);                     /* 4, 5 */
    add_swap(p, CHAM_SWAP_OUT, 50, 6);
    add_swap(p, CHAM_SWAP_IN, 200, 6);
    add_op(p, 550, 200);                     /* 6, 7 */
    add_swap(p, CHAM_SWAP_IN, 50, 7);
    add_swap(p, CHAM_SWAP_OUT, 1000, 8);     /* after the last op */

    static const uint64_t want_actual[8] = {100, 300, 300, 300, 300, 400, 550, 200};
    /* s: out(<=s) - in(<=s) = 0 0 0 200 200 200 50 0 */
    static const uint64_t want_without[8] = {100, 300, 300, 500, 500, 600, 600, 200};
    uint64_t actual[8], without[8];
    cham_profile_memory_curve(p, actual, without);
    for (int s = 0; s < 8; s++) {
        assert_int_equal(actual[s], want_actual[s]);
        assert_int_equal(without[s], want_without[s]);
    }
    cham_profile_free(p);

    /* No swaps: the two curves agree. */
    p = cham_profile_new(1, 0);
    add_op(p, 5, 7);
    cham_profile_memory_curve(p, actual, without);
    assert_int_equal(actual[0], 5);
    assert_int_equal(without[1], 7);
    cham_profile_free(p);

    /* A swap-in the step did not swap out, marked carried (model state
     * that left in the step before): without swaps it would have been on
     * the device from the start, so it counts before its swap-in. */
    p = cham_profile_new(1, 0);
    add_op(p, 100, 100);                     /* 0, 1: 160 without swaps */
    cham_profile_swap_t carried = {.kind = CHAM_SWAP_IN, .storage = 4, .bytes = 60,
                                   .sample = 2, .carried = true};
    assert_true(cham_profile_add_swap(p, &carried));
    add_op(p, 160, 160);                     /* 2, 3 */
    cham_profile_memory_curve(p, actual, without);
    for (int s = 0; s < 4; s++)
        assert_int_equal(without[s], 160);
    cham_profile_free(p);

    /* Unmarked, as in files from before the mark: subtracted; a
     * profile inconsistent enough to go below zero is clamped at 0. */
    p = cham_profile_new(1, 0);
    add_swap(p, CHAM_SWAP_IN, 60, 0);
    add_op(p, 100, 40);
    cham_profile_memory_curve(p, actual, without);
    assert_int_equal(without[0], 40);
    assert_int_equal(without[1], 0);
    cham_profile_free(p);

    /* The sample profile: out 512 at 1, in 512 at 4, out at 6 = 2 * 3. */
    p = make_sample();
    uint64_t a6[6], w6[6];
    static const uint64_t sample_without[6] = {1000, 2012, 1500, 1712, 1712, 1712};
    cham_profile_memory_curve(p, a6, w6);
    assert_int_equal(a6[1], 1500);
    assert_int_equal(a6[4], 1712);
    for (int s = 0; s < 6; s++)
        assert_int_equal(w6[s], sample_without[s]);
    cham_profile_free(p);
}

/* ---- save and load ----------------------------------------------------------------*/

static void assert_same_profile(const cham_profile_t *a, const cham_profile_t *b)
{
    cham_profile_view_t x, y;
    cham_profile_get(a, &x);
    cham_profile_get(b, &y);
    assert_true(x.step == y.step);
    assert_true(x.duration_ns == y.duration_ns);
    assert_true(x.capacity == y.capacity);
    assert_true(x.kernel_overhead_ns == y.kernel_overhead_ns);
    assert_true(x.copy_latency_ns == y.copy_latency_ns);
    assert_int_equal(x.n_tokens, y.n_tokens);
    for (size_t t = 0; t < x.n_tokens; t++)
        assert_string_equal(x.token_names[t], y.token_names[t]);
    assert_int_equal(x.n_ops, y.n_ops);
    for (size_t i = 0; i < x.n_ops; i++) {
        assert_int_equal(x.ops[i].token, y.ops[i].token);
        assert_int_equal(x.ops[i].phase, y.ops[i].phase);
        assert_int_equal(x.ops[i].first_use, y.ops[i].first_use);
        assert_int_equal(x.ops[i].n_uses, y.ops[i].n_uses);
        assert_true(x.ops[i].mem_before == y.ops[i].mem_before);
        assert_true(x.ops[i].mem_after == y.ops[i].mem_after);
        assert_int_equal(x.ops[i].has_cost, y.ops[i].has_cost);
        assert_true(x.ops[i].cost_ns == y.ops[i].cost_ns);
        assert_true(x.ops[i].comm_ns == y.ops[i].comm_ns);
        assert_int_equal(x.ops[i].comm_waited, y.ops[i].comm_waited);
    }
    assert_int_equal(x.n_uses, y.n_uses);
    for (size_t j = 0; j < x.n_uses; j++) {
        const cham_tensor_use_t *u = &x.uses[j], *w = &y.uses[j];
        assert_true(u->storage == w->storage);
        assert_true(u->data_ptr == w->data_ptr);
        assert_true(u->bytes == w->bytes);
        assert_true(u->storage_bytes == w->storage_bytes);
        assert_int_equal(u->dtype, w->dtype);
        assert_int_equal(u->use_count, w->use_count);
        assert_true(u->history == w->history);
        assert_int_equal(u->output, w->output);
        assert_int_equal(u->persistent, w->persistent);
        assert_int_equal(u->host_backed, w->host_backed);
    }
    assert_int_equal(x.n_swaps, y.n_swaps);
    for (size_t k = 0; k < x.n_swaps; k++) {
        assert_int_equal(x.swaps[k].kind, y.swaps[k].kind);
        assert_true(x.swaps[k].storage == y.swaps[k].storage);
        assert_true(x.swaps[k].bytes == y.swaps[k].bytes);
        assert_int_equal(x.swaps[k].sample, y.swaps[k].sample);
        assert_int_equal(x.swaps[k].passive, y.swaps[k].passive);
        assert_int_equal(x.swaps[k].recompute, y.swaps[k].recompute);
        assert_int_equal(x.swaps[k].carried, y.swaps[k].carried);
    }
}

static void test_round_trip(void **state)
{
    (void)state;
    char path[1024], err[512];
    test_path(path, sizeof path, tmpdir, "round.json");
    cham_profile_t *p = make_sample();
    assert_int_equal(cham_profile_save_json(p, path, err, sizeof err), CHAM_OK);
    assert_string_equal(err, "");

    cham_profile_t *q = NULL;
    cham_status_t st = cham_profile_load_json(path, &q, err, sizeof err);
    if (st != CHAM_OK)
        print_error("%s\n", err);
    assert_int_equal(st, CHAM_OK);
    assert_non_null(q);
    assert_same_profile(p, q);

    /* Exactly the bits: the big values are hex strings in the file. */
    cham_profile_view_t v;
    cham_profile_get(q, &v);
    assert_true(v.uses[0].data_ptr == BIG_PTR);
    assert_true(v.uses[1].data_ptr == ODD_PTR);
    assert_true(v.uses[1].history == HISTORY);
    assert_true(v.uses[2].history == UINT64_MAX);
    assert_true(v.uses[3].storage == (UINT64_C(1) << 53) - 1);
    char *text = test_read_text(path);
    test_assert_contains(text, "\"format\": \"chameleon-profile\"");
    test_assert_contains(text, "\"kernel_overhead_ns\": 2000,");
    test_assert_contains(text, "\"copy_latency_ns\": 5000,");
    test_assert_contains(text, "\"data_ptr\":\"0xfffffffffffff000\"");
    test_assert_contains(text, "\"history\":\"0x8000000000000001\"");
    test_assert_contains(text, "\"relu \\\"fused\\\" \xC3\xA9\"");   /* UTF-8 as is */
    test_assert_contains(text, "{\"kind\":\"in\",\"storage\":1,\"bytes\":512,\"sample\":4,"
                          "\"passive\":true}");

    /* Saving what was loaded gives the same file. */
    char path2[1024];
    test_path(path2, sizeof path2, tmpdir, "round2.json");
    assert_int_equal(cham_profile_save_json(q, path2, err, sizeof err), CHAM_OK);
    char *text2 = test_read_text(path2);
    assert_string_equal(text, text2);
    free(text);
    free(text2);
    cham_profile_free(q);
    cham_profile_free(p);

    /* An empty profile round-trips too. */
    p = cham_profile_new(0, 0);
    assert_int_equal(cham_profile_save_json(p, path, err, sizeof err), CHAM_OK);
    assert_int_equal(cham_profile_load_json(path, &q, err, sizeof err), CHAM_OK);
    assert_same_profile(p, q);
    cham_profile_free(q);
    cham_profile_free(p);

    /* Empty lists inside: a first op that uses no tensor (its uses[] grew
     * by 0 on load and was taken for an allocation failure), one in the
     * middle and one last, and a step without swaps or tokens. */
    p = cham_profile_new(3, 1024);
    add_op(p, 0, 0);
    assert_true(cham_profile_begin_op(p, 1, CHAM_PHASE_FORWARD, -1, 0));
    cham_tensor_use_t u = {.storage = 1, .bytes = 8, .storage_bytes = 8,
                           .dtype = CHAM_DTYPE_F32, .output = true};
    assert_true(cham_profile_add_use(p, &u));
    cham_profile_end_op(p, 8);
    add_op(p, 8, 8);
    add_op(p, 8, 8);
    assert_true(cham_profile_set_tokens(p, sample_tokens, 2));
    assert_int_equal(cham_profile_save_json(p, path, err, sizeof err), CHAM_OK);
    st = cham_profile_load_json(path, &q, err, sizeof err);
    if (st != CHAM_OK)
        print_error("%s\n", err);
    assert_int_equal(st, CHAM_OK);
    assert_same_profile(p, q);
    cham_profile_free(q);
    cham_profile_free(p);
    unlink(path);
    unlink(path2);
}

/* A path whose directory takes no new files but whose file takes writes
 * (/proc/self/fd/N of a memfd, as the fuzz targets use) is written in
 * place: the save works and loads back. */
static void test_save_in_place(void **state)
{
    (void)state;
    int fd = memfd_create("profile", 0);
    assert_true(fd >= 0);
    char path[64], err[512];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    cham_profile_t *p = make_sample(), *q = NULL;
    cham_status_t st = cham_profile_save_json(p, path, err, sizeof err);
    if (st != CHAM_OK)
        print_error("%s\n", err);
    assert_int_equal(st, CHAM_OK);
    assert_int_equal(cham_profile_load_json(path, &q, err, sizeof err), CHAM_OK);
    assert_same_profile(p, q);
    cham_profile_free(q);
    cham_profile_free(p);
    close(fd);
}

static void test_save_refuses(void **state)
{
    (void)state;
    char path[1024], err[512];
    test_path(path, sizeof path, tmpdir, "refused.json");

    /* A token with no name: the file would not load, so it is not written. */
    cham_profile_t *p = cham_profile_new(0, 0);
    add_op(p, 0, 0);
    assert_int_equal(cham_profile_save_json(p, path, err, sizeof err), CHAM_ERR_INVALID_ARG);
    test_assert_contains(err, "refused.json: cannot save: ops[0].token: 0 is out of range");
    assert_int_equal(access(path, F_OK), -1);

    /* A size the format cannot hold exactly. */
    const char *names[] = {"x"};
    assert_true(cham_profile_set_tokens(p, names, 1));
    add_swap(p, CHAM_SWAP_OUT, UINT64_C(1) << 53, 1);
    assert_int_equal(cham_profile_save_json(p, path, err, sizeof err), CHAM_ERR_INVALID_ARG);
    test_assert_contains(err, "swaps[0].bytes: above 2^53 - 1");
    cham_profile_free(p);

    /* A directory that does not exist. */
    char missing[1024];
    test_path(missing, sizeof missing, tmpdir, "no/such/dir.json");
    p = make_sample();
    assert_int_equal(cham_profile_save_json(p, missing, err, sizeof err), CHAM_ERR_NOT_FOUND);
    test_assert_contains(err, "dir.json: cannot create: ");
    test_assert_contains(err, strerror(ENOENT));
    cham_profile_free(p);
}

static void test_missing_file(void **state)
{
    (void)state;
    char path[1024], err[512];
    test_path(path, sizeof path, tmpdir, "missing.json");
    cham_profile_t *q = (cham_profile_t *)&q;    /* must come back NULL */
    assert_int_equal(cham_profile_load_json(path, &q, err, sizeof err), CHAM_ERR_NOT_FOUND);
    assert_null(q);
    test_assert_contains(err, path);
    test_assert_contains(err, strerror(ENOENT));
    /* No room for a message is allowed. */
    assert_int_equal(cham_profile_load_json(path, &q, NULL, 0), CHAM_ERR_NOT_FOUND);
}

/* jansson's allocations fail after a countdown: every failure point of
 * saving and loading is taken in turn. Nothing may crash or leak (the
 * sanitizer build checks leaks), and the result is CHAM_OK or an error,
 * never a wrong profile. */
static long alloc_countdown;
static void *failing_malloc(size_t n)
{
    if (alloc_countdown > 0 && --alloc_countdown == 0)
        return NULL;
    return malloc(n);
}

static void test_out_of_memory(void **state)
{
    (void)state;
    char path[1024], good[1024], err[512];
    test_path(path, sizeof path, tmpdir, "oom.json");
    test_path(good, sizeof good, tmpdir, "oom_good.json");
    cham_profile_t *p = make_sample();
    assert_int_equal(cham_profile_save_json(p, good, err, sizeof err), CHAM_OK);
    json_set_alloc_funcs(failing_malloc, free);
    bool saved = false, loaded = false;
    for (long k = 1; !(saved && loaded) && k < 100000; k++) {
        if (!saved) {
            alloc_countdown = k;
            cham_status_t st = cham_profile_save_json(p, path, err, sizeof err);
            saved = alloc_countdown > 0;
            assert_int_equal(st, saved ? CHAM_OK : CHAM_ERR_HOST_OOM);
            if (!saved)
                assert_int_equal(access(path, F_OK), -1);
        }
        if (!loaded) {
            cham_profile_t *q = (cham_profile_t *)&q;
            alloc_countdown = k;
            cham_status_t st = cham_profile_load_json(good, &q, err, sizeof err);
            loaded = alloc_countdown > 0;
            /* jansson reports some failed allocations of its lexer as
             * syntax errors, so a failed load may say either. */
            if (loaded)
                assert_int_equal(st, CHAM_OK);
            else
                assert_true(st == CHAM_ERR_HOST_OOM || st == CHAM_ERR_INVALID_ARG);
            if (loaded)
                assert_same_profile(p, q);
            else
                assert_null(q);
            cham_profile_free(q == (cham_profile_t *)&q ? NULL : q);
        }
    }
    alloc_countdown = 0;
    json_set_alloc_funcs(malloc, free);
    assert_true(saved && loaded);
    cham_profile_free(p);
    unlink(path);
    unlink(good);
}

/* ---- malformed files --------------------------------------------------------------*/

#define HEAD "{\"format\": \"chameleon-profile\", \"version\": 1, \"step\": 3,\n" \
             " \"duration_ns\": 1000, \"capacity\": 4096,\n"
#define TOKENS " \"tokens\": [\"matmul\", \"add\"],\n"
#define OPS \
    " \"ops\": [\n" \
    "  {\"token\": 0, \"phase\": \"forward\", \"mem_before\": 0, \"mem_after\": 64, \"uses\": [\n" \
    "    {\"storage\": 1, \"data_ptr\": \"0x1000\", \"bytes\": 64, \"storage_bytes\": 64,\n" \
    "     \"dtype\": \"f32\", \"use_count\": 0, \"history\": \"0x0\", \"output\": true}]},\n" \
    "  {\"token\": 1, \"phase\": \"backward\", \"mem_before\": 16, \"mem_after\": 128, \"uses\": [\n" \
    "    {\"storage\": 2, \"data_ptr\": \"0x2000\", \"bytes\": 32, \"storage_bytes\": 48,\n" \
    "     \"dtype\": \"f16\", \"use_count\": 1, \"history\": \"0xFF\", \"output\": false},\n" \
    "    {\"storage\": 1, \"data_ptr\": \"0x1000\", \"bytes\": 64, \"storage_bytes\": 64,\n" \
    "     \"dtype\": \"bf16\", \"use_count\": 1, \"history\": \"0x00\", \"output\": false}]}\n" \
    " ],\n"
#define SWAPS " \"swaps\": [{\"kind\": \"out\", \"storage\": 1, \"bytes\": 64, \"sample\": 3, " \
              "\"passive\": false}]\n"
#define BASE HEAD TOKENS OPS SWAPS "}\n"

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
    {"syntax_error", NULL, "[\"matmul\", \"add\"]", "[\"matmul\" \"add\"]", 0,
     CHAM_ERR_INVALID_ARG, {"bad_syntax_error.json:3:26: syntax error: ", "']' expected"}},
    {"truncated", NULL, NULL, NULL, sizeof(BASE) / 2, CHAM_ERR_INVALID_ARG,
     {"bad_truncated.json:", "unexpected end of file (truncated?)"}},
    {"empty", "", NULL, NULL, 0, CHAM_ERR_INVALID_ARG,
     {"bad_empty.json: empty file (expected a chameleon profile"}},
    {"blank", " \n\t\n", NULL, NULL, 0, CHAM_ERR_INVALID_ARG, {"bad_blank.json: empty file"}},
    {"wrong_format", NULL, "\"chameleon-profile\"", "\"chameleon-trace\"", 0,
     CHAM_ERR_INVALID_ARG,
     {"bad_wrong_format.json: not a chameleon profile: \"format\" is \"chameleon-trace\", "
      "expected \"chameleon-profile\""}},
    {"no_format", "{\"ops\": []}", NULL, NULL, 0, CHAM_ERR_INVALID_ARG,
     {"bad_no_format.json: not a chameleon profile: no \"format\" key"}},
    {"future_version", NULL, "\"version\": 1", "\"version\": 2", 0, CHAM_ERR_UNSUPPORTED,
     {"bad_future_version.json: profile format version 2 is newer than this library reads "
      "(version 1)"}},
    {"bad_version", NULL, "\"version\": 1", "\"version\": \"1\"", 0, CHAM_ERR_INVALID_ARG,
     {"bad_bad_version.json: version: expected a positive integer, got \"1\""}},
    {"missing_ops", HEAD TOKENS SWAPS "}\n", NULL, NULL, 0, CHAM_ERR_INVALID_ARG,
     {"bad_missing_ops.json: missing key \"ops\""}},
    {"deep_type", NULL, "\"bytes\": 32", "\"bytes\": \"x\"", 0, CHAM_ERR_INVALID_ARG,
     {"bad_deep_type.json: ops[1].uses[0].bytes: expected a non-negative integer, "
      "got \"x\""}},
    {"unknown_phase", NULL, "\"backward\"", "\"bwd\"", 0, CHAM_ERR_INVALID_ARG,
     {"bad_unknown_phase.json: ops[1].phase: unknown phase \"bwd\" (expected forward, "
      "backward, optimizer, other or eval)"}},
    {"unknown_dtype", NULL, "\"bf16\"", "\"fp8\"", 0, CHAM_ERR_INVALID_ARG,
     {"ops[1].uses[1].dtype: unknown dtype \"fp8\"", "f32, f16, bf16"}},
    {"token_out_of_range", NULL, "\"token\": 1", "\"token\": 2", 0, CHAM_ERR_INVALID_ARG,
     {"bad_token_out_of_range.json: ops[1].token: 2 is out of range: \"tokens\" names "
      "tokens 0 .. 1"}},
    {"sample_out_of_range", NULL, "\"sample\": 3", "\"sample\": 5", 0, CHAM_ERR_INVALID_ARG,
     {"bad_sample_out_of_range.json: swaps[0].sample: 5 is beyond the last sample, "
      "2 * 2 ops = 4"}},
    {"unknown_key", NULL, "\"use_count\": 0,", "\"use_count\": 0, \"label\": \"w\",", 0,
     CHAM_ERR_INVALID_ARG,
     {"bad_unknown_key.json: ops[0].uses[0]: unknown key \"label\" (the keys are: storage, "
      "data_ptr, bytes"}},
    {"unknown_top_key", NULL, "\"step\": 3,", "\"step\": 3, \"stage\": 1,", 0,
     CHAM_ERR_INVALID_ARG, {"bad_unknown_top_key.json: unknown key \"stage\""}},
    {"misspelt_key", NULL, "\"output\": true", "\"outptu\": true", 0, CHAM_ERR_INVALID_ARG,
     {"ops[0].uses[0]: unknown key \"outptu\""}},
    {"missing_use_key", NULL, ", \"output\": true", "", 0, CHAM_ERR_INVALID_ARG,
     {"bad_missing_use_key.json: ops[0].uses[0]: missing key \"output\""}},
    {"negative_mem", NULL, "\"mem_before\": 16", "\"mem_before\": -16", 0,
     CHAM_ERR_INVALID_ARG,
     {"ops[1].mem_before: expected a non-negative integer, got -16"}},
    {"real_mem", NULL, "\"mem_after\": 128", "\"mem_after\": 128.0", 0, CHAM_ERR_INVALID_ARG,
     {"ops[1].mem_after: expected a non-negative integer, got 128"}},
    {"use_count_too_big", NULL, "\"use_count\": 0", "\"use_count\": 4294967296", 0,
     CHAM_ERR_INVALID_ARG,
     {"ops[0].uses[0].use_count: 4294967296 is too large (at most 4294967295)"}},
    {"above_2_53", NULL, "\"capacity\": 4096", "\"capacity\": 9007199254740992", 0,
     CHAM_ERR_INVALID_ARG, {"bad_above_2_53.json: capacity: 9007199254740992 is above 2^53 - 1"}},
    {"negative_overhead", NULL, "\"capacity\": 4096", "\"capacity\": 4096, \"kernel_overhead_ns\": -5",
     0, CHAM_ERR_INVALID_ARG, {"bad_negative_overhead.json:", "kernel_overhead_ns"}},
    {"fractional_latency", NULL, "\"capacity\": 4096", "\"capacity\": 4096, \"copy_latency_ns\": 2.5",
     0, CHAM_ERR_INVALID_ARG, {"bad_fractional_latency.json:", "copy_latency_ns"}},
    {"huge_integer", NULL, "\"capacity\": 4096", "\"capacity\": 99999999999999999999", 0,
     CHAM_ERR_INVALID_ARG, {"bad_huge_integer.json:2:", "too big"}},
    {"data_ptr_number", NULL, "\"data_ptr\": \"0x2000\"", "\"data_ptr\": 8192", 0,
     CHAM_ERR_INVALID_ARG,
     {"ops[1].uses[0].data_ptr: expected a hex string \"0x\" + 1 to 16 hex digits, got 8192"}},
    {"history_too_long", NULL, "\"0xFF\"", "\"0x1FFFFFFFFFFFFFFFF\"", 0, CHAM_ERR_INVALID_ARG,
     {"ops[1].uses[0].history: expected a hex string"}},
    {"view_larger_than_storage", NULL, "\"storage_bytes\": 48", "\"storage_bytes\": 16", 0,
     CHAM_ERR_INVALID_ARG,
     {"ops[1].uses[0].bytes: 32 is more than storage_bytes 16"}},
    {"repeated_token", NULL, "[\"matmul\", \"add\"]", "[\"matmul\", \"matmul\"]", 0,
     CHAM_ERR_INVALID_ARG, {"tokens[1]: \"matmul\" repeats tokens[0]"}},
    {"token_not_string", NULL, "[\"matmul\", \"add\"]", "[\"matmul\", null]", 0,
     CHAM_ERR_INVALID_ARG, {"tokens[1]: expected an op name (a string), got null"}},
    {"swaps_out_of_order", HEAD TOKENS OPS
     " \"swaps\": [{\"kind\": \"out\", \"storage\": 1, \"bytes\": 64, \"sample\": 3, "
     "\"passive\": false},\n {\"kind\": \"in\", \"storage\": 1, \"bytes\": 64, \"sample\": 2, "
     "\"passive\": false}]}\n", NULL, NULL, 0, CHAM_ERR_INVALID_ARG,
     {"swaps[1].sample: 2 is before swaps[0]'s 3"}},
    {"negative_comm", NULL, "\"phase\": \"forward\",", "\"phase\": \"forward\", \"comm_ns\": -1,",
     0, CHAM_ERR_INVALID_ARG, {"ops[0].comm_ns: -1 is not a time in ns"}},
    {"waited_without_comm", NULL, "\"phase\": \"forward\",",
     "\"phase\": \"forward\", \"comm_waited\": true,", 0, CHAM_ERR_INVALID_ARG,
     {"ops[0].comm_waited: true, but the op has no comm_ns > 0 to wait for"}},
    {"carried_out", NULL, "\"kind\": \"out\"", "\"kind\": \"out\", \"carried\": true", 0,
     CHAM_ERR_INVALID_ARG,
     {"swaps[0].carried: only a swap-in (\"in\") comes back from before the step"}},
    {"bad_swap_kind", NULL, "\"kind\": \"out\"", "\"kind\": \"evict\"", 0, CHAM_ERR_INVALID_ARG,
     {"swaps[0].kind: unknown swap kind \"evict\" (expected out or in)"}},
    {"ops_not_array", HEAD TOKENS " \"ops\": {},\n" SWAPS "}", NULL, NULL, 0,
     CHAM_ERR_INVALID_ARG, {"bad_ops_not_array.json: ops: expected an array, got an object"}},
    {"op_not_object", HEAD TOKENS " \"ops\": [7],\n \"swaps\": []}", NULL, NULL, 0,
     CHAM_ERR_INVALID_ARG, {"ops[0]: expected an op (an object), got 7"}},
    {"top_level_array", "[]", NULL, NULL, 0, CHAM_ERR_INVALID_ARG,
     {"bad_top_level_array.json: expected a JSON object at the top level, got an array"}},
    {"duplicate_key", NULL, "\"step\": 3,", "\"step\": 3, \"step\": 4,", 0,
     CHAM_ERR_INVALID_ARG, {"bad_duplicate_key.json:1:", "duplicate object key"}},
    {"trailing_garbage", BASE "x", NULL, NULL, 0, CHAM_ERR_INVALID_ARG,
     {"bad_trailing_garbage.json:16:1: syntax error: end of file expected"}},
};
#define N_BAD (sizeof bad_cases / sizeof bad_cases[0])

/* The base file is valid: each case fails because of its own change. */
static void test_base_loads(void **state)
{
    (void)state;
    char path[1024], err[512];
    test_path(path, sizeof path, tmpdir, "base.json");
    test_write_file(path, BASE, strlen(BASE));
    cham_profile_t *p = NULL;
    cham_status_t st = cham_profile_load_json(path, &p, err, sizeof err);
    if (st != CHAM_OK)
        print_error("%s\n", err);
    assert_int_equal(st, CHAM_OK);
    cham_profile_view_t v;
    cham_profile_get(p, &v);
    assert_int_equal(v.n_ops, 2);
    assert_int_equal(v.n_uses, 3);
    assert_true(v.uses[1].history == 0xFF);
    assert_int_equal(v.uses[2].dtype, CHAM_DTYPE_BF16);
    cham_profile_free(p);
    unlink(path);
}

static void test_bad_file(void **state)
{
    const bad_case_t *c = *state;
    char path[1024], name[128], err[512];
    snprintf(name, sizeof name, "bad_%s.json", c->name);
    test_path(path, sizeof path, tmpdir, name);

    const char *base = c->text ? c->text : BASE;
    char text[4096];
    assert_true(strlen(base) + 128 < sizeof text);
    if (c->find) {
        const char *at = strstr(base, c->find);
        assert_non_null(at);
        snprintf(text, sizeof text, "%.*s%s%s", (int)(at - base), base, c->replace,
                 at + strlen(c->find));
    } else {
        snprintf(text, sizeof text, "%s", base);
    }
    size_t len = c->cut ? c->cut : strlen(text);
    test_write_file(path, text, len);

    cham_profile_t *p = (cham_profile_t *)&p;    /* must come back NULL */
    cham_status_t st = cham_profile_load_json(path, &p, err, sizeof err);
    print_message("    %s\n", err);
    assert_null(p);
    assert_int_equal(st, c->status);
    for (size_t i = 0; i < 3 && c->want[i]; i++)
        test_assert_contains(err, c->want[i]);
    unlink(path);
}

/* Random damage to the base file: a few bytes changed, inserted or cut.
 * Every load fails cleanly or gives a profile that saves and reloads to
 * itself; under the sanitizers nothing is read out of bounds or leaked. */
static void test_damaged_files(void **state)
{
    (void)state;
    static const char alphabet[] = "{}[]\",:0123456789-.xeE \n\\tfalsenul";
    char path[1024], again[1024], err[512], text[4096];
    test_path(path, sizeof path, tmpdir, "damaged.json");
    test_path(again, sizeof again, tmpdir, "damaged_again.json");
    test_rng_t rng = {.state = 0x9E3779B97F4A7C15u};
    size_t base_len = strlen(BASE);
    int loaded = 0;
    for (int iter = 0; iter < 3000; iter++) {
        memcpy(text, BASE, base_len + 1);
        size_t len = base_len;
        int edits = 1 + (int)test_rng_below(&rng, 3);
        for (int e = 0; e < edits && len > 0; e++) {
            size_t at = (size_t)test_rng_below(&rng, len);
            char c = alphabet[test_rng_below(&rng, sizeof alphabet - 1)];
            switch (test_rng_below(&rng, 4)) {
            case 0: text[at] = c; break;                                  /* change */
            case 1:                                                       /* insert */
                memmove(text + at + 1, text + at, len - at + 1);
                text[at] = c;
                len++;
                break;
            case 2:                                                       /* delete */
                memmove(text + at, text + at + 1, len - at);
                len--;
                break;
            default: len = at; text[len] = '\0'; break;                  /* cut */
            }
        }
        test_write_file(path, text, len);
        cham_profile_t *p = (cham_profile_t *)&p;
        cham_status_t st = cham_profile_load_json(path, &p, err, sizeof err);
        if (st != CHAM_OK) {
            assert_null(p);
            assert_true(strncmp(err, path, strlen(path)) == 0);
            continue;
        }
        loaded++;
        cham_profile_t *q = NULL;
        assert_int_equal(cham_profile_save_json(p, again, err, sizeof err), CHAM_OK);
        assert_int_equal(cham_profile_load_json(again, &q, err, sizeof err), CHAM_OK);
        assert_same_profile(p, q);
        cham_profile_free(q);
        cham_profile_free(p);
    }
    /* Some edits (a digit for a digit) keep the file valid. */
    assert_true(loaded > 0);
    unlink(path);
    unlink(again);
}

int main(void)
{
    struct CMUnitTest tests[9 + N_BAD] = {
        cmocka_unit_test(test_builder),
        cmocka_unit_test(test_builder_misuse_asserts),
        cmocka_unit_test(test_memory_curve),
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_save_in_place),
        cmocka_unit_test(test_save_refuses),
        cmocka_unit_test(test_missing_file),
        cmocka_unit_test(test_out_of_memory),
        cmocka_unit_test(test_base_loads),
        cmocka_unit_test(test_damaged_files),
    };
    size_t n = 9;
    char names[N_BAD][64];
    for (size_t i = 0; i < N_BAD; i++) {
        snprintf(names[i], sizeof names[i], "test_bad_file/%s", bad_cases[i].name);
        tests[n++] = (struct CMUnitTest){.name = names[i],
                                         .test_func = test_bad_file,
                                         .initial_state = (void *)&bad_cases[i]};
    }
    return _cmocka_run_group_tests("test_profile", tests, n, group_setup, group_teardown);
}
