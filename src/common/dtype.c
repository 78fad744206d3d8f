/* Bytes per element of each dtype (chameleon/types.h). Here, below every
 * module, because the runtime, the workload generator and the planners all
 * size tensors from it and none of them should need another for that. */
#include "chameleon/types.h"

static const size_t dtype_sizes[CHAM_DTYPE_COUNT_] = {
    [CHAM_DTYPE_F32] = 4, [CHAM_DTYPE_F16] = 2,  [CHAM_DTYPE_BF16] = 2,    [CHAM_DTYPE_F64] = 8,
    [CHAM_DTYPE_I64] = 8, [CHAM_DTYPE_I32] = 4,  [CHAM_DTYPE_I8] = 1,      [CHAM_DTYPE_U8] = 1,
    [CHAM_DTYPE_BOOL] = 1, [CHAM_DTYPE_I16] = 2, [CHAM_DTYPE_C64] = 8,     [CHAM_DTYPE_C128] = 16,
    [CHAM_DTYPE_F8_E4M3] = 1, [CHAM_DTYPE_F8_E5M2] = 1,
};

size_t cham_dtype_size(cham_dtype_t dtype)
{
    return (int)dtype >= 0 && dtype < CHAM_DTYPE_COUNT_ ? dtype_sizes[dtype] : 0;
}
