/* Always-on assertions for internal invariants and programmer errors.
 * Unlike assert(), they stay in release builds: a broken invariant in a
 * memory manager corrupts training silently, which is worse than stopping. */
#ifndef CHAM_COMMON_ASSERT_H
#define CHAM_COMMON_ASSERT_H

#include <stdnoreturn.h>

noreturn void cham_assert_fail(const char *expr, const char *file, int line,
                               const char *func);

#define CHAM_ASSERT(expr) \
    ((expr) ? (void)0 : cham_assert_fail(#expr, __FILE__, __LINE__, __func__))

/* Expensive checks that walk whole structures; compiled in debug and test
 * builds (CHAM_DEBUG_CHECKS=1), away otherwise. */
#ifndef CHAM_DEBUG_CHECKS
#define CHAM_DEBUG_CHECKS 0
#endif

#endif
