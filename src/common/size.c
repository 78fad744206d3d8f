/* Byte sizes written by people (size.h). */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/size.h"

static const struct unit {
    const char *name;
    uint64_t bytes;
} units[] = {
    {"B", 1},
    {"KiB", 1ull << 10}, {"MiB", 1ull << 20}, {"GiB", 1ull << 30},
    {"TiB", 1ull << 40}, {"PiB", 1ull << 50}, {"EiB", 1ull << 60},
    {"KB", 1000ull}, {"MB", 1000000ull}, {"GB", 1000000000ull},
    {"TB", 1000000000000ull}, {"PB", 1000000000000000ull}, {"EB", 1000000000000000000ull},
};

static bool same_nocase(const char *a, const char *b)
{
    for (; *a && *b; a++, b++) {
        if (tolower((unsigned char)*a) != tolower((unsigned char)*b))
            return false;
    }
    return *a == *b;
}

bool cham_size_parse(const char *s, uint64_t *out, bool *has_unit, char *why, size_t why_size)
{
    const char *p = s;
    if (*p == '-') {
        snprintf(why, why_size, "a byte size cannot be negative");
        return false;
    }
    if (!isdigit((unsigned char)*p)) {
        snprintf(why, why_size, "expected a byte size such as \"4096\", \"512MiB\" or "
                 "\"1.5GiB\"");
        return false;
    }
    uint64_t whole = 0;
    bool overflow = false;
    for (; isdigit((unsigned char)*p); p++) {
        unsigned d = (unsigned)(*p - '0');
        if (whole > (UINT64_MAX - d) / 10)
            overflow = true;
        else
            whole = whole * 10 + d;
    }
    const char *frac = NULL;
    size_t frac_len = 0;
    if (*p == '.') {
        frac = ++p;
        for (; isdigit((unsigned char)*p); p++)
            frac_len++;
        if (frac_len == 0) {
            snprintf(why, why_size, "expected digits after the decimal point");
            return false;
        }
    }
    while (*p == ' ')
        p++;
    const struct unit *unit = NULL;
    const char *unit_name = *p ? p : "B";
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        if (same_nocase(unit_name, units[i].name))
            unit = &units[i];
    }
    if (!unit) {
        snprintf(why, why_size, "unknown unit \"%.24s%s\" (binary units: B, KiB, MiB, GiB, "
                 "TiB, PiB, EiB; decimal units: KB, MB, GB, TB, PB, EB)", unit_name,
                 strlen(unit_name) > 24 ? "..." : "");
        return false;
    }
    bool has_frac = false;
    for (size_t i = 0; i < frac_len; i++)
        has_frac |= frac[i] != '0';
    if (has_frac && unit->bytes == 1) {
        snprintf(why, why_size, "a byte count must be a whole number");
        return false;
    }
    uint64_t bytes = 0;
    if (!overflow && whole > UINT64_MAX / unit->bytes)
        overflow = true;
    if (!overflow) {
        bytes = whole * unit->bytes;
        if (has_frac) {
            /* 0.xxx as a double (at most 17 digits count), times the unit. */
            char buf[24] = "0.";
            size_t k = frac_len < 17 ? frac_len : 17;
            memcpy(buf + 2, frac, k);
            buf[2 + k] = '\0';
            double part = round(strtod(buf, NULL) * (double)unit->bytes);
            uint64_t extra = (uint64_t)part; /* <= unit->bytes <= 2^60 */
            if (bytes > UINT64_MAX - extra)
                overflow = true;
            else
                bytes += extra;
        }
    }
    if (overflow) {
        snprintf(why, why_size, "too large for 64 bits");
        return false;
    }
    if (has_unit)
        *has_unit = *p != '\0';
    *out = bytes;
    return true;
}

const char *cham_size_format(char *buf, size_t size, uint64_t n)
{
    static const char *const names[] = {"KiB", "MiB", "GiB", "TiB"};
    if (n < 1024) {
        snprintf(buf, size, "%ju B", (uintmax_t)n);
        return buf;
    }
    double v = (double)n / 1024.0;
    int u = 0;
    while (v >= 1023.995 && u < 3) {   /* so 1023.999 MiB prints as 1.00 GiB */
        v /= 1024.0;
        u++;
    }
    snprintf(buf, size, "%.2f %s", v, names[u]);
    return buf;
}
