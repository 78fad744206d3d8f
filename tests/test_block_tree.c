/* The allocator's intrusive AVL tree (src/alloc/block_tree.c) against a
 * sorted array: random inserts and removals, lower-bound searches, in-order
 * stepping both ways, per-stream maxima, and the checker after every step. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "support/rng.h"

#include "alloc/block_tree.h"

typedef cham_block_tree_node_t node_t;

static test_rng_t rng_gen;
static uint64_t rng(void)
{
    return test_rng_next(&rng_gen);
}

static int key_cmp(const node_t *a, const node_t *b)
{
    if (a->stream != b->stream)
        return a->stream < b->stream ? -1 : 1;
    if (a->size != b->size)
        return a->size < b->size ? -1 : 1;
    if (a->addr != b->addr)
        return a->addr < b->addr ? -1 : 1;
    return 0;
}

static int ptr_key_cmp(const void *x, const void *y)
{
    return key_cmp(*(node_t *const *)x, *(node_t *const *)y);
}

static void assert_valid(const cham_block_tree_t *t)
{
    char why[256] = "";
    bool ok = cham_block_tree_check(t, why, sizeof why);
    if (!ok)
        print_error("tree check: %s\n", why);
    assert_true(ok);
}

static void test_empty(void **state)
{
    (void)state;
    cham_block_tree_t t;
    cham_block_tree_init(&t);
    assert_null(cham_block_tree_first(&t));
    assert_null(cham_block_tree_last(&t));
    assert_null(cham_block_tree_lower_bound(&t, 0, 0, 0));
    assert_int_equal(cham_block_tree_max_size(&t, 0), 0);
    assert_valid(&t);
}

static void test_order_and_lower_bound(void **state)
{
    (void)state;
    cham_block_tree_t t;
    cham_block_tree_init(&t);
    /* (stream, size, addr) */
    node_t n[6] = {
        {.stream = 1, .size = 1024, .addr = 0x3000},
        {.stream = 0, .size = 4096, .addr = 0x1000},
        {.stream = 1, .size = 1024, .addr = 0x1000},
        {.stream = 0, .size = 512, .addr = 0x9000},
        {.stream = 1, .size = 8192, .addr = 0x0},
        {.stream = 2, .size = 512, .addr = 0x5000},
    };
    for (int i = 0; i < 6; i++) {
        cham_block_tree_insert(&t, &n[i]);
        assert_valid(&t);
    }
    assert_int_equal(t.count, 6);
    /* In order: (0,512) (0,4096) (1,1024,0x1000) (1,1024,0x3000) (1,8192) (2,512). */
    const node_t *want[6] = {&n[3], &n[1], &n[2], &n[0], &n[4], &n[5]};
    node_t *it = cham_block_tree_first(&t);
    for (int i = 0; i < 6; i++, it = cham_block_tree_next(it))
        assert_ptr_equal(it, want[i]);
    assert_null(it);
    it = cham_block_tree_last(&t);
    for (int i = 5; i >= 0; i--, it = cham_block_tree_prev(it))
        assert_ptr_equal(it, want[i]);
    assert_null(it);

    /* Best fit: smallest block of the stream with size >= request, lowest address. */
    assert_ptr_equal(cham_block_tree_lower_bound(&t, 1, 600, 0), &n[2]);
    assert_ptr_equal(cham_block_tree_lower_bound(&t, 1, 1024, 0x1001), &n[0]);
    assert_ptr_equal(cham_block_tree_lower_bound(&t, 1, 2000, 0), &n[4]);
    /* Past stream 1's largest block the search runs into stream 2. */
    assert_ptr_equal(cham_block_tree_lower_bound(&t, 1, 9000, 0), &n[5]);
    assert_null(cham_block_tree_lower_bound(&t, 2, 600, 0));
    assert_ptr_equal(cham_block_tree_find(&t, 0, 4096, 0x1000), &n[1]);
    assert_null(cham_block_tree_find(&t, 0, 4096, 0x1001));

    assert_int_equal(cham_block_tree_max_size(&t, 0), 4096);
    assert_int_equal(cham_block_tree_max_size(&t, 1), 8192);
    assert_int_equal(cham_block_tree_max_size(&t, 2), 512);
    assert_int_equal(cham_block_tree_max_size(&t, 3), 0);

    cham_block_tree_remove(&t, &n[2]);
    assert_valid(&t);
    assert_ptr_equal(cham_block_tree_lower_bound(&t, 1, 600, 0), &n[0]);
    for (int i = 0; i < 6; i++)
        if (i != 2)
            cham_block_tree_remove(&t, &n[i]);
    assert_valid(&t);
    assert_int_equal(t.count, 0);
    assert_null(t.root);
}

/* Sequential keys: the worst case for an unbalanced tree. */
static void test_sequential_stays_balanced(void **state)
{
    (void)state;
    enum { N = 4096 };
    node_t *n = calloc(N, sizeof *n);
    assert_non_null(n);
    cham_block_tree_t t;
    cham_block_tree_init(&t);
    for (int i = 0; i < N; i++) {
        n[i].size = (size_t)(i + 1) * 512;
        cham_block_tree_insert(&t, &n[i]);
    }
    assert_valid(&t);
    /* AVL height bound: < 1.45 log2(n + 2), 18 for 4096 nodes. */
    assert_true(cham_block_tree_height(&t) <= 18);
    assert_true(cham_block_tree_height(&t) >= 13);
    for (int i = 0; i < N; i += 2)
        cham_block_tree_remove(&t, &n[i]);
    assert_valid(&t);
    assert_int_equal(t.count, N / 2);
    free(n);
}

/* Random operations checked against a sorted array of the live nodes. */
static void test_random_against_sorted_array(void **state)
{
    (void)state;
    enum { POOL = 2000, STEPS = 60000 };
    node_t *nodes = calloc(POOL, sizeof *nodes);
    bool *in = calloc(POOL, sizeof *in);
    node_t **sorted = calloc(POOL, sizeof *sorted);
    assert_true(nodes && in && sorted);
    cham_block_tree_t t;
    cham_block_tree_init(&t);
    rng_gen.state = 0x9E3779B97F4A7C15u;
    size_t live = 0;
    for (int step = 0; step < STEPS; step++) {
        int i = (int)(rng() % POOL);
        if (!in[i]) {
            /* Few streams and sizes, so equal (stream, size) pairs are common;
             * the address (the index) keeps keys unique. */
            nodes[i].stream = (int)(rng() % 3);
            nodes[i].size = (size_t)(rng() % 64 + 1) * 512;
            nodes[i].addr = (uintptr_t)i * 4096;
            cham_block_tree_insert(&t, &nodes[i]);
            in[i] = true;
            live++;
        } else {
            cham_block_tree_remove(&t, &nodes[i]);
            in[i] = false;
            live--;
        }
        assert_int_equal(t.count, live);
        if (step % 97 != 0)
            continue;
        assert_valid(&t);
        size_t k = 0;
        for (int j = 0; j < POOL; j++)
            if (in[j])
                sorted[k++] = &nodes[j];
        qsort(sorted, k, sizeof *sorted, ptr_key_cmp);
        /* In-order walk equals the sorted array. */
        node_t *it = cham_block_tree_first(&t);
        for (size_t j = 0; j < k; j++, it = cham_block_tree_next(it))
            assert_ptr_equal(it, sorted[j]);
        assert_null(it);
        /* Lower bounds of random keys. */
        for (int q = 0; q < 20; q++) {
            node_t key = {.stream = (int)(rng() % 4), .size = (size_t)(rng() % 70) * 512,
                          .addr = (uintptr_t)(rng() % POOL) * 4096};
            node_t *want = NULL;
            for (size_t j = 0; j < k; j++) {
                if (key_cmp(sorted[j], &key) >= 0) {
                    want = sorted[j];
                    break;
                }
            }
            assert_ptr_equal(cham_block_tree_lower_bound(&t, key.stream, key.size, key.addr),
                             want);
        }
        for (int s = 0; s < 4; s++) {
            size_t want = 0;
            for (size_t j = 0; j < k; j++)
                if (sorted[j]->stream == s && sorted[j]->size > want)
                    want = sorted[j]->size;
            assert_int_equal(cham_block_tree_max_size(&t, s), want);
        }
    }
    free(nodes);
    free(in);
    free(sorted);
}

/* The checker notices a corrupted tree. */
static void test_checker_catches_damage(void **state)
{
    (void)state;
    node_t n[3] = {{.size = 512}, {.size = 1024}, {.size = 1536}};
    cham_block_tree_t t;
    cham_block_tree_init(&t);
    for (int i = 0; i < 3; i++)
        cham_block_tree_insert(&t, &n[i]);
    assert_valid(&t);
    char why[256];
    n[0].size = 4096;                         /* key changed while in the tree */
    assert_false(cham_block_tree_check(&t, why, sizeof why));
    n[0].size = 512;
    t.count = 4;
    assert_false(cham_block_tree_check(&t, why, sizeof why));
    t.count = 3;
    t.root->balance = 1 - t.root->balance;   /* 0 <-> 1: wrong either way */
    assert_false(cham_block_tree_check(&t, why, sizeof why));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_empty),
        cmocka_unit_test(test_order_and_lower_bound),
        cmocka_unit_test(test_sequential_stays_balanced),
        cmocka_unit_test(test_random_against_sorted_array),
        cmocka_unit_test(test_checker_catches_damage),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
