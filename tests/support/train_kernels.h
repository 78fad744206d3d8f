/* The scripted workload's kernels (train_script.c): integer work on real
 * bytes of the simulated device, deterministic, so runs compare bit for
 * bit. Their own file so that sanitizer builds can leave them
 * uninstrumented (tests/CMakeLists.txt). */
#ifndef CHAM_TESTS_TRAIN_KERNELS_H
#define CHAM_TESTS_TRAIN_KERNELS_H

#include <stddef.h>
#include <stdint.h>

typedef enum ts_op_kind {
    EMBED, LN, MATMUL, ATTN, ADD, GELU, PROBE, LOSS, SUM, SGD,
    LN_BWD, MATMUL_BWD, ATTN_BWD, ADD_BWD, GELU_BWD, ACC, ADAMW, N_KINDS
} ts_op_kind_t;

/* One op's operands, in 32-bit words. */
typedef struct ts_kargs {
    ts_op_kind_t kind;
    const uint32_t *in[3];
    size_t n_in[3];
    uint32_t *out[4];
    size_t n_out[4];
    uint64_t seed;
    uint64_t *sum;               /* folded by LOSS and SUM */
} ts_kargs_t;

/* A cham_kernel_t cpu_fn; arg is a ts_kargs_t. */
void ts_run_kernel(void *arg);

#endif
