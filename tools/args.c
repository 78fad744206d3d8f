/* Argument parsing shared by the commands (args.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"

/* "123", "64GiB", "512 MiB": false when not a size or above 2^64 - 1. */
bool tool_parse_size(const char *s, uint64_t *out)
{
    static const struct {
        const char *unit;
        unsigned shift;
    } units[] = {{"", 0}, {"B", 0}, {"KiB", 10}, {"MiB", 20}, {"GiB", 30}, {"TiB", 40}};
    if (*s < '0' || *s > '9')
        return false;
    errno = 0;
    char *end;
    unsigned long long n = strtoull(s, &end, 10);
    if (errno)
        return false;
    while (*end == ' ')
        end++;
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        if (strcmp(end, units[i].unit) == 0) {
            if (n > (UINT64_MAX >> units[i].shift))
                return false;
            *out = (uint64_t)n << units[i].shift;
            return true;
        }
    }
    return false;
}
