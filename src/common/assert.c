/* The failure path of CHAM_ASSERT. */
#include "common/assert.h"

#include <stdio.h>
#include <stdlib.h>

noreturn void cham_assert_fail(const char *expr, const char *file, int line,
                               const char *func)
{
    fprintf(stderr, "chameleon: internal error: assertion `%s' failed in %s at %s:%d\n",
            expr, func, file, line);
    fflush(stderr);
    abort();
}
