/* Orderings for qsort and bsearch shared across the library. */
#ifndef CHAM_COMMON_ORDER_H
#define CHAM_COMMON_ORDER_H

#include <stddef.h>
#include <stdint.h>

/* Ascending uint64_t: a and b point at uint64_t values. */
int cham_order_u64(const void *a, const void *b);
/* Sorts v[0, n) ascending and keeps one of each value at its front;
 * returns how many. */
size_t cham_sort_unique_u64(uint64_t *v, size_t n);

#endif
