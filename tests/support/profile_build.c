#include "support/profile_build.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "chameleon/device.h"
#include "profile/profile-impl.h"

#define MiB (UINT64_C(1) << 20)
#define SEC UINT64_C(1000000000)

cham_profile_t *test_build_profile(const char *ph, const uint64_t *mem, const use_spec_t *uses,
                                   size_t n_uses)
{
    size_t n = strlen(ph);
    cham_profile_t *p = cham_profile_new(1, 0);
    assert_non_null(p);
    const char *names[] = {"op"};
    assert_true(cham_profile_set_tokens(p, names, 1));
    size_t u = 0;
    for (size_t k = 0; k < n; k++) {
        cham_phase_t phase = ph[k] == 'F'   ? CHAM_PHASE_FORWARD
                             : ph[k] == 'B' ? CHAM_PHASE_BACKWARD
                             : ph[k] == 'O' ? CHAM_PHASE_OPTIMIZER
                                            : CHAM_PHASE_OTHER;
        assert_true(cham_profile_begin_op(p, 0, phase, -1, mem[2 * k] * MiB));
        for (; u < n_uses && uses[u].op == (int)k; u++) {
            cham_tensor_use_t x = {.storage = uses[u].storage,
                                   .data_ptr = 0x1000 * uses[u].storage,
                                   .bytes = uses[u].bytes * MiB,
                                   .storage_bytes = uses[u].bytes * MiB,
                                   .dtype = CHAM_DTYPE_F16,
                                   .output = uses[u].output};
            assert_true(cham_profile_add_use(p, &x));
        }
        cham_profile_end_op(p, mem[2 * k + 1] * MiB);
    }
    cham_profile_set_duration(p, n * SEC);
    return p;
}

void test_mark_persistent(cham_profile_t *p, uint64_t storage)
{
    for (size_t u = 0; u < p->n_uses; u++)
        if (p->uses[u].storage == storage)
            p->uses[u].persistent = true;
}

void test_mark_backed(cham_profile_t *p, uint64_t storage)
{
    for (size_t u = 0; u < p->n_uses; u++)
        if (p->uses[u].storage == storage && !p->uses[u].output)
            p->uses[u].host_backed = true;
}

void test_mark_overwrites(cham_profile_t *p, uint64_t storage)
{
    for (size_t u = 0; u < p->n_uses; u++)
        if (p->uses[u].storage == storage && p->uses[u].output)
            p->uses[u].overwrites = true;
}

/* A training step: nf forward ops each writing an activation (1..64 MiB)
 * that a mirrored backward op reads, then an optimizer op per state
 * storage (persistent, read and written: away across the step's end).
 * Op costs 0.1..3 ms; the memory curve holds what is alive. */
cham_profile_t *test_random_step(test_rng_t *r)
{
    int nf = 3 + (int)test_rng_below(r, 28), ns = (int)test_rng_below(r, 4), n = 2 * nf + ns;
    char ph[128];
    uint64_t mem[256], act[64];
    use_spec_t u[256];
    size_t nu = 0;
    for (int k = 0; k < nf; k++)
        act[k] = 1 + test_rng_below(r, 64);
    uint64_t state = 0;
    for (int j = 0; j < ns; j++)
        state += 8 + 8 * (uint64_t)j;
    for (int k = 0; k < n; k++) {
        ph[k] = k < nf ? 'F' : k < 2 * nf ? 'B' : 'O';
        uint64_t live = state;
        for (int a = 0; a < nf; a++)
            live += a <= k && k <= 2 * nf - 1 - a ? act[a] : 0;
        mem[2 * k] = mem[2 * k + 1] = live;
        if (k < nf) {
            if (k > 0)
                u[nu++] = (use_spec_t){.op = k, .storage = (uint64_t)k, .bytes = act[k - 1]};
            u[nu++] = (use_spec_t){.op = k, .storage = (uint64_t)k + 1, .bytes = act[k],
                                   .output = true};
        } else if (k < 2 * nf) {
            int a = 2 * nf - 1 - k;
            u[nu++] = (use_spec_t){.op = k, .storage = (uint64_t)a + 1, .bytes = act[a]};
        } else {
            int j = k - 2 * nf;
            u[nu++] = (use_spec_t){.op = k, .storage = 100 + (uint64_t)j,
                                   .bytes = 8 + 8 * (uint64_t)j, .output = true};
        }
    }
    ph[n] = '\0';
    cham_profile_t *p = test_build_profile(ph, mem, u, nu);
    for (int j = 0; j < ns; j++)
        test_mark_persistent(p, 100 + (uint64_t)j);
    uint64_t total = 0;
    for (int k = 0; k < n; k++) {
        p->ops[k].has_cost = true;
        p->ops[k].cost_ns = 1e5 + (double)test_rng_below(r, 2900000);
        total += (uint64_t)p->ops[k].cost_ns;
    }
    p->duration_ns = total;
    return p;
}

uint64_t test_profile_peak(const cham_profile_t *p)
{
    cham_profile_view_t v;
    cham_profile_get(p, &v);
    uint64_t *act = malloc(2 * v.n_ops * sizeof *act), *curve = malloc(2 * v.n_ops * sizeof *curve);
    assert_non_null(act);
    assert_non_null(curve);
    cham_profile_memory_curve(p, act, curve);
    uint64_t peak = 0;
    for (size_t j = 0; j < 2 * v.n_ops; j++)
        peak = curve[j] > peak ? curve[j] : peak;
    free(act);
    free(curve);
    return peak;
}

cham_profile_t *test_workload_profile(cham_run_config_t c, const char *path, uint64_t *peak)
{
    c.strategy = CHAM_STRATEGY_NATIVE;
    c.steps = 3;
    c.profile_path = path;
    cham_run_result_t r;
    assert_int_equal(cham_run(&c, &r), CHAM_OK);
    assert_int_equal(r.status, CHAM_OK);
    cham_profile_t *p;
    char err[300];
    assert_int_equal(cham_profile_load_json(path, &p, err, sizeof err), CHAM_OK);
    remove(path);
    *peak = r.peak_tensor_bytes;
    return p;
}

cham_planner_config_t test_preset_planner(const char *preset, uint64_t capacity)
{
    const cham_preset_t *d = cham_preset_find(preset);
    assert_non_null(d);
    cham_planner_config_t pc = cham_planner_config_default();
    pc.capacity = capacity;
    pc.reserve = 0;
    pc.h2d_bandwidth = d->h2d_bandwidth;
    pc.d2h_bandwidth = d->d2h_bandwidth;
    return pc;
}
