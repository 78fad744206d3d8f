/* One cmocka case by name (cases.h). */
#include "support/cases.h"

#include <stdio.h>
#include <string.h>

bool test_pick_case(const struct CMUnitTest *tests, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++) {
        if (strcmp(tests[i].name, name) == 0) {
            cmocka_set_test_filter(name);
            return true;
        }
    }
    fprintf(stderr, "no test case \"%s\" here\n", name);
    return false;
}
