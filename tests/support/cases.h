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

/* main()'s return for a program CTest runs case by case: with a case name
 * in argv[1], that case alone (2 when tests has none of that name), else
 * every case. tests is the array itself, as for cmocka_run_group_tests. */
#define test_run_cases(tests, argc, argv, setup, teardown)                                 \
    ((argc) > 1 && !test_pick_case((tests), sizeof(tests) / sizeof((tests)[0]), (argv)[1]) \
         ? 2                                                                               \
         : cmocka_run_group_tests(tests, setup, teardown))

#endif
