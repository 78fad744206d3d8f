/* Strategies: the names users pick and the config each stands for. */
#include <string.h>

#include "chameleon/runtime.h"

#define TiB (UINT64_C(1) << 40)

static const char *const names[CHAM_STRATEGY_COUNT] = {
    [CHAM_STRATEGY_CHAMELEON] = "chameleon", [CHAM_STRATEGY_NATIVE] = "native",
    [CHAM_STRATEGY_IDEAL] = "ideal",         [CHAM_STRATEGY_RECOMPUTE] = "recompute",
    [CHAM_STRATEGY_CAPUCHIN] = "capuchin",   [CHAM_STRATEGY_VDNN] = "vdnn",
    [CHAM_STRATEGY_CHAMELEON_SWAP] = "chameleon-swap", [CHAM_STRATEGY_PROTRAIN] = "protrain",
    [CHAM_STRATEGY_ZERO_OFFLOAD] = "zero-offload", [CHAM_STRATEGY_SWAPADVISOR] = "swapadvisor",
    [CHAM_STRATEGY_HYPEROFFLOAD] = "hyperoffload",
};

const char *cham_strategy_name(cham_strategy_t strategy)
{
    return (unsigned)strategy < CHAM_STRATEGY_COUNT ? names[strategy] : "?";
}

cham_status_t cham_strategy_parse(const char *name, cham_strategy_t *out)
{
    for (int i = 0; name && i < CHAM_STRATEGY_COUNT; i++)
        if (strcmp(name, names[i]) == 0) {
            *out = (cham_strategy_t)i;
            return CHAM_OK;
        }
    return CHAM_ERR_INVALID_ARG;
}

cham_status_t cham_strategy_apply(cham_strategy_t s, cham_config_t *c)
{
    if ((unsigned)s >= CHAM_STRATEGY_COUNT || !c)
        return CHAM_ERR_INVALID_ARG;
    bool managed = s == CHAM_STRATEGY_CHAMELEON || s == CHAM_STRATEGY_CAPUCHIN ||
                   s == CHAM_STRATEGY_VDNN || s == CHAM_STRATEGY_CHAMELEON_SWAP ||
                   s == CHAM_STRATEGY_SWAPADVISOR || s == CHAM_STRATEGY_HYPEROFFLOAD;
    c->executor = managed;
    c->oom_handling = managed;
    c->planner = s == CHAM_STRATEGY_CAPUCHIN      ? CHAM_PLANNER_CAPUCHIN
                 : s == CHAM_STRATEGY_VDNN        ? CHAM_PLANNER_VDNN
                 : s == CHAM_STRATEGY_SWAPADVISOR ? CHAM_PLANNER_SWAPADVISOR
                 : s == CHAM_STRATEGY_HYPEROFFLOAD ? CHAM_PLANNER_HYPEROFFLOAD
                                                   : CHAM_PLANNER_CHAMELEON;
    c->recompute = s == CHAM_STRATEGY_CHAMELEON;
    /* ProTrain runs on PyTorch: a swapped-out block returns to the
     * allocator once its copy is done, so nothing waits for a copy. */
    if (s == CHAM_STRATEGY_PROTRAIN || s == CHAM_STRATEGY_ZERO_OFFLOAD)
        c->pytorch_record_stream = true;
    if (s == CHAM_STRATEGY_IDEAL)
        c->device.capacity = 64 * TiB;    /* the config's largest: unlimited here */
    return CHAM_OK;
}
