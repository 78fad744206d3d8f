/* The vocabulary every other public header shares: the opaque handles that
 * pass between modules (context, tensor, profile, policy), op tokens,
 * phases, stages, and dtypes with their sizes. Small on purpose, so that a header needing
 * one of these words does not pull in the runtime's whole API. */
#ifndef CHAMELEON_TYPES_H
#define CHAMELEON_TYPES_H

#include <stddef.h>
#include <stdint.h>

#include "chameleon/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cham_context cham_context_t;   /* runtime.h */
typedef struct cham_tensor cham_tensor_t;     /* runtime.h */
typedef struct cham_profile cham_profile_t;   /* profile.h */
typedef struct cham_policy cham_policy_t;     /* policy.h */

/* An interned operator name: 0, 1, 2, ... in order of first use. */
typedef int32_t cham_op_token_t;

typedef enum cham_phase {
    CHAM_PHASE_FORWARD,
    CHAM_PHASE_BACKWARD,
    CHAM_PHASE_OPTIMIZER,
    CHAM_PHASE_OTHER,
    CHAM_PHASE_EVAL,         /* a forward no backward follows (evaluation,
                                torch.no_grad): its uses match no policy item */
} cham_phase_t;

typedef enum cham_stage {
    CHAM_STAGE_WARMUP,       /* watching the op sequence settle */
    CHAM_STAGE_GENPOLICY,    /* detailed profiling; policies are generated */
    CHAM_STAGE_STABLE,       /* the chosen policy is reused */
} cham_stage_t;

typedef enum cham_dtype {
    CHAM_DTYPE_F32,
    CHAM_DTYPE_F16,
    CHAM_DTYPE_BF16,
    CHAM_DTYPE_F64,
    CHAM_DTYPE_I64,
    CHAM_DTYPE_I32,
    CHAM_DTYPE_I8,
    CHAM_DTYPE_U8,
    CHAM_DTYPE_BOOL,
    CHAM_DTYPE_I16,
    CHAM_DTYPE_C64,          /* complex64: two f32 */
    CHAM_DTYPE_C128,         /* complex128: two f64 */
    CHAM_DTYPE_F8_E4M3,      /* float8_e4m3fn */
    CHAM_DTYPE_F8_E5M2,      /* float8_e5m2 */
    CHAM_DTYPE_COUNT_
} cham_dtype_t;

/* Bytes per element of dtype; 0 for a value outside the enum. */
CHAM_API size_t cham_dtype_size(cham_dtype_t dtype);

#ifdef __cplusplus
}
#endif

#endif
