#include "support/profile_build.h"

#include <setjmp.h>
#include <stdarg.h>
#include <string.h>

#include <cmocka.h>

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
