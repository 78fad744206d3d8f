/* Names of the runtime's enums. */
#include <string.h>

#include "chameleon/runtime.h"
#include "json/format.h"
#include "policy/registry.h"

const char *cham_stage_name(cham_stage_t stage)
{
    switch (stage) {
    case CHAM_STAGE_WARMUP: return "WarmUp";
    case CHAM_STAGE_GENPOLICY: return "GenPolicy";
    case CHAM_STAGE_STABLE: return "Stable";
    }
    return "?";
}

const char *cham_phase_name(cham_phase_t phase)
{
    switch (phase) {
    case CHAM_PHASE_FORWARD: return "forward";
    case CHAM_PHASE_BACKWARD: return "backward";
    case CHAM_PHASE_OPTIMIZER: return "optimizer";
    case CHAM_PHASE_OTHER: return "other";
    case CHAM_PHASE_EVAL: return "eval";
    }
    return "?";
}

const char *cham_swap_cause_name(cham_swap_cause_t cause)
{
    switch (cause) {
    case CHAM_SWAP_CALLER: return "caller";
    case CHAM_SWAP_PLANNED: return "planned";
    case CHAM_SWAP_PASSIVE: return "passive";
    case CHAM_SWAP_ON_DEMAND: return "on-demand";
    }
    return "?";
}

/* The names are the profile format's (json/format.c); the sizes live below
 * every module (common/dtype.c). */
const char *cham_dtype_name(cham_dtype_t dtype)
{
    return (int)dtype >= 0 && dtype < CHAM_DTYPE_COUNT_ ? cham_json_dtype_names[dtype] : "?";
}

static const char *const allocator_modes[] = {
    [CHAM_ALLOCATOR_AUTO] = "auto",
    [CHAM_ALLOCATOR_CLASSIC] = "classic",
    [CHAM_ALLOCATOR_EXPANDABLE] = "expandable",
};

const char *cham_allocator_mode_name(cham_allocator_mode_t mode)
{
    return (unsigned)mode < sizeof allocator_modes / sizeof allocator_modes[0]
               ? allocator_modes[mode] : "?";
}

cham_status_t cham_allocator_mode_parse(const char *name, cham_allocator_mode_t *out)
{
    for (size_t k = 0; name && k < sizeof allocator_modes / sizeof allocator_modes[0]; k++)
        if (strcmp(name, allocator_modes[k]) == 0) {
            *out = (cham_allocator_mode_t)k;
            return CHAM_OK;
        }
    return CHAM_ERR_INVALID_ARG;
}

/* The planners' names are their rows' (policy/registry.c). */
const char *cham_planner_kind_name(cham_planner_kind_t kind)
{
    const cham_planner_iface_t *p = cham_planner_of(kind);
    return p ? p->name : "?";
}
