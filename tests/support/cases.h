/* One cmocka case of a test program, by name: CTest runs each case of the
 * slow programs as a test of its own (tests/CMakeLists.txt). */
#ifndef CHAM_TESTS_CASES_H
#define CHAM_TESTS_CASES_H

#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

/* Runs only the case named `name` from now on; false, saying so on
 * stderr, when tests[0..n) has none, so a misspelt or renamed case fails
 * instead of passing with nothing run. */
bool test_pick_case(const struct CMUnitTest *tests, size_t n, const char *name);

#endif
