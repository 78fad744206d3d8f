/* The names of phases and dtypes in the library's JSON files. */
#include "chameleon/types.h"
#include "json/format.h"

/* Names in the file. Kept here rather than taken from cham_phase_name and
 * cham_dtype_name (src/runtime/names.c) so that the file format depends on
 * nothing outside this module and cannot change when log names do. Indexed
 * by cham_phase_t and cham_dtype_t. */
const char *const cham_json_phase_names[CHAM_JSON_N_PHASES] = {
    [CHAM_PHASE_FORWARD] = "forward",
    [CHAM_PHASE_BACKWARD] = "backward",
    [CHAM_PHASE_OPTIMIZER] = "optimizer",
    [CHAM_PHASE_OTHER] = "other",
    [CHAM_PHASE_EVAL] = "eval",
};
_Static_assert(CHAM_JSON_N_PHASES == CHAM_PHASE_EVAL + 1, "a name for every phase");

const char *const cham_json_dtype_names[CHAM_JSON_N_DTYPES] = {
    [CHAM_DTYPE_F32] = "f32", [CHAM_DTYPE_F16] = "f16", [CHAM_DTYPE_BF16] = "bf16",
    [CHAM_DTYPE_F64] = "f64", [CHAM_DTYPE_I64] = "i64", [CHAM_DTYPE_I32] = "i32",
    [CHAM_DTYPE_I8] = "i8",   [CHAM_DTYPE_U8] = "u8",   [CHAM_DTYPE_BOOL] = "bool",
    [CHAM_DTYPE_I16] = "i16", [CHAM_DTYPE_C64] = "c64", [CHAM_DTYPE_C128] = "c128",
    [CHAM_DTYPE_F8_E4M3] = "f8e4m3", [CHAM_DTYPE_F8_E5M2] = "f8e5m2",
};
_Static_assert(CHAM_JSON_N_DTYPES == CHAM_DTYPE_COUNT_, "a name for every dtype");
