/* Strategies: the names users pick and the config each stands for, one
 * row each. */
#include <stdbool.h>
#include <string.h>

#include "chameleon/runtime.h"

#define TiB (UINT64_C(1) << 40)

typedef struct strategy {
    const char *name;
    bool managed;                /* the executor and the OOM path on */
    cham_planner_kind_t planner; /* the config's planner */
    bool recompute;              /* Chameleon's planner may recompute */
    /* ProTrain runs on PyTorch: a swapped-out block returns to the
     * allocator once its copy is done, so nothing waits for a copy. */
    bool record_stream;
    bool unlimited;              /* the config's largest capacity */
} strategy_t;

/* Unset fields are false, and the planner chameleon's. */
static const strategy_t strategies[] = {
    [CHAM_STRATEGY_CHAMELEON] = {.name = "chameleon", .managed = true, .recompute = true},
    [CHAM_STRATEGY_NATIVE] = {.name = "native"},
    [CHAM_STRATEGY_IDEAL] = {.name = "ideal", .unlimited = true},
    [CHAM_STRATEGY_RECOMPUTE] = {.name = "recompute"},
    [CHAM_STRATEGY_CAPUCHIN] = {.name = "capuchin", .managed = true,
                                .planner = CHAM_PLANNER_CAPUCHIN},
    [CHAM_STRATEGY_VDNN] = {.name = "vdnn", .managed = true, .planner = CHAM_PLANNER_VDNN},
    [CHAM_STRATEGY_CHAMELEON_SWAP] = {.name = "chameleon-swap", .managed = true},
    [CHAM_STRATEGY_PROTRAIN] = {.name = "protrain", .record_stream = true},
    [CHAM_STRATEGY_ZERO_OFFLOAD] = {.name = "zero-offload", .record_stream = true},
    [CHAM_STRATEGY_SWAPADVISOR] = {.name = "swapadvisor", .managed = true,
                                   .planner = CHAM_PLANNER_SWAPADVISOR},
    [CHAM_STRATEGY_HYPEROFFLOAD] = {.name = "hyperoffload", .managed = true,
                                    .planner = CHAM_PLANNER_HYPEROFFLOAD},
};

_Static_assert(sizeof strategies / sizeof strategies[0] == CHAM_STRATEGY_COUNT,
               "CHAM_STRATEGY_COUNT counts the rows; a row per cham_strategy_t value");

const char *cham_strategy_name(cham_strategy_t strategy)
{
    return (unsigned)strategy < CHAM_STRATEGY_COUNT ? strategies[strategy].name : "?";
}

cham_status_t cham_strategy_parse(const char *name, cham_strategy_t *out)
{
    for (int i = 0; name && i < CHAM_STRATEGY_COUNT; i++)
        if (strcmp(name, strategies[i].name) == 0) {
            *out = (cham_strategy_t)i;
            return CHAM_OK;
        }
    return CHAM_ERR_INVALID_ARG;
}

cham_status_t cham_strategy_apply(cham_strategy_t s, cham_config_t *c)
{
    if ((unsigned)s >= CHAM_STRATEGY_COUNT || !c)
        return CHAM_ERR_INVALID_ARG;
    const strategy_t *t = &strategies[s];
    c->executor = t->managed;
    c->oom_handling = t->managed;
    c->planner = t->planner;
    c->recompute = t->recompute;
    if (t->record_stream)
        c->pytorch_record_stream = true;
    if (t->unlimited)
        c->device.capacity = 64 * TiB;    /* the config's largest: unlimited here */
    return CHAM_OK;
}
