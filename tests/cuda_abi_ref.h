/* A named number, as test_cuda_abi.c compares them: each value the cuda
 * backend declares by hand in src/device/cuda_api.h, and the same value
 * read from the CUDA toolkit's headers in cuda_abi_ref.c. */
#ifndef CHAM_TEST_CUDA_ABI_REF_H
#define CHAM_TEST_CUDA_ABI_REF_H

#include <stddef.h>

typedef struct cham_abi_value {
    const char *name;
    long long value;
} cham_abi_value_t;

/* From the toolkit's headers; defined only when CMake found the toolkit. */
extern const cham_abi_value_t cham_abi_ref[];
extern const size_t cham_abi_ref_count;

#endif
