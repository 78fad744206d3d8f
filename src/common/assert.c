/* The failure path of CHAM_ASSERT. */
#include "common/assert.h"

#include <stdlib.h>

#include "common/output.h"

noreturn void cham_assert_fail(const char *expr, const char *file, int line,
                               const char *func)
{
    cham_output("internal error: assertion `%s' failed in %s at %s:%d", expr, func, file, line);
    abort();
}
