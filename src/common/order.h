/* Orderings for qsort and bsearch shared across the library. */
#ifndef CHAM_COMMON_ORDER_H
#define CHAM_COMMON_ORDER_H

/* Ascending uint64_t: a and b point at uint64_t values. */
int cham_order_u64(const void *a, const void *b);

#endif
