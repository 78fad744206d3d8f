#include "common/order.h"

#include <stdint.h>
#include <stdlib.h>

int cham_order_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

size_t cham_sort_unique_u64(uint64_t *v, size_t n)
{
    if (n > 1)
        qsort(v, n, sizeof *v, cham_order_u64);
    size_t u = 0;
    for (size_t i = 0; i < n; i++)
        if (u == 0 || v[u - 1] != v[i])
            v[u++] = v[i];
    return u;
}
