/* The planners' table (registry.h): each row wraps a planner's entry point
 * into the one signature the runtime calls. */
#include "policy/registry.h"

#include <stdio.h>
#include <string.h>

#include "chameleon/hyperoffload.h"
#include "chameleon/swapadvisor.h"
#include "common/assert.h"

/* Chameleon's generator, and Capuchin's (the same generator; the runtime
 * names its tensors by position). A policy that does not fit with blocks
 * reused late is tried with them reused at once; one that still does not
 * fit is planned as far as it can be (partial: passive swaps do the rest). */
static cham_status_t plan_chameleon(const cham_profile_t *profile, cham_planner_config_t *config,
                                    const void *options, cham_policy_t **out, char *note,
                                    size_t note_size, char *err, size_t err_size)
{
    (void)options;
    (void)note;
    (void)note_size;
    cham_status_t st = cham_plan_chameleon(profile, config, out, err, err_size);
    if (st == CHAM_ERR_OUT_OF_MEMORY && config->free_delay_ops > 0) {
        config->free_delay_ops = 0;
        st = cham_plan_chameleon(profile, config, out, err, err_size);
    }
    if (st == CHAM_ERR_OUT_OF_MEMORY) {
        config->partial = true;
        st = cham_plan_chameleon(profile, config, out, err, err_size);
    }
    return st;
}

static cham_status_t plan_vdnn(const cham_profile_t *profile, cham_planner_config_t *config,
                               const void *options, cham_policy_t **out, char *note,
                               size_t note_size, char *err, size_t err_size)
{
    (void)options;
    (void)note;
    (void)note_size;
    return cham_plan_vdnn(profile, config, out, err, err_size);
}

/* SwapAdvisor's search for the profile's op order: the runtime runs the
 * caller's ops in the caller's order, so reorder is off whatever the
 * options say. */
static cham_status_t plan_swapadvisor(const cham_profile_t *profile,
                                      cham_planner_config_t *config, const void *options,
                                      cham_policy_t **out, char *note, size_t note_size,
                                      char *err, size_t err_size)
{
    cham_swapadvisor_options_t so = options ? *(const cham_swapadvisor_options_t *)options
                                            : cham_swapadvisor_options_default();
    so.reorder = false;
    cham_swapadvisor_result_t r;
    cham_status_t st = cham_plan_swapadvisor(profile, config, &so, out, &r, err, err_size);
    if (st == CHAM_OK)
        snprintf(note, note_size, "swapadvisor searched %u generations, %llu candidates in "
                 "%.2f s: %.3f ms simulated (ops alone %.3f ms)", r.generations,
                 (unsigned long long)r.evaluations, r.search_seconds, (double)r.step_ns / 1e6,
                 (double)r.ideal_ns / 1e6);
    cham_swapadvisor_result_free(&r);
    return st;
}

static cham_status_t plan_hyperoffload(const cham_profile_t *profile,
                                       cham_planner_config_t *config, const void *options,
                                       cham_policy_t **out, char *note, size_t note_size,
                                       char *err, size_t err_size)
{
    cham_hyperoffload_result_t r;
    cham_status_t st = cham_plan_hyperoffload(profile, config, options, out, &r, err, err_size);
    if (st == CHAM_OK)
        snprintf(note, note_size, "hyperoffload offloaded %zu of %zu idle tensors; refinement "
                 "moved %zu operators: %.3f ms simulated (ops alone %.3f ms)", r.offloaded,
                 r.candidates, r.moved, (double)r.refined.step_ns / 1e6,
                 (double)r.ideal_ns / 1e6);
    return st;
}

static void swapadvisor_defaults(void *options)
{
    *(cham_swapadvisor_options_t *)options = cham_swapadvisor_options_default();
}

static void hyperoffload_defaults(void *options)
{
    *(cham_hyperoffload_options_t *)options = cham_hyperoffload_options_default();
}

static bool chameleon_moves_model_state(bool model_state, const void *options)
{
    (void)options;
    return model_state;
}

/* SwapAdvisor swaps every tensor, model state included. */
static bool swapadvisor_moves_model_state(bool model_state, const void *options)
{
    (void)model_state;
    (void)options;
    return true;
}

static bool hyperoffload_moves_model_state(bool model_state, const void *options)
{
    (void)model_state;
    return ((const cham_hyperoffload_options_t *)options)->persistent;
}

#define KEY_OFF(member) offsetof(cham_config_t, member)
#define INT_KEY(key, member, kind, lo, hi, text) \
    {key, #member, CHAM_PLANNER_KEY_##kind, KEY_OFF(member), lo, hi, 0, 0, false, text}
#define BOOL_KEY(key, member) \
    {key, #member, CHAM_PLANNER_KEY_BOOL, KEY_OFF(member), 0, 0, 0, 0, false, NULL}

static const cham_planner_key_t swapadvisor_keys[] = {
    INT_KEY("swapadvisor_seed", swapadvisor.seed, U64, 0, UINT64_MAX, "[0, 2^64)"),
    INT_KEY("swapadvisor_population", swapadvisor.population, U32, 2, 10000, "[2, 10000]"),
    INT_KEY("swapadvisor_generations", swapadvisor.generations, U32, 0, 1000000,
            "[0, 1000000]"),
    {"swapadvisor_search_seconds", "swapadvisor.search_seconds", CHAM_PLANNER_KEY_REAL,
     KEY_OFF(swapadvisor.search_seconds), 0, 0, 0, 1e6, true, "(0, 1e6] seconds"},
    INT_KEY("swapadvisor_threads", swapadvisor.threads, U32, 0, 1024,
            "[0, 1024] (0 = the online CPUs)"),
    BOOL_KEY("swapadvisor_fail_on_change", swapadvisor_fail_on_change),
};

static const cham_planner_key_t hyperoffload_keys[] = {
    BOOL_KEY("hyperoffload_activations", hyperoffload.activations),
    BOOL_KEY("hyperoffload_persistent", hyperoffload.persistent),
    BOOL_KEY("hyperoffload_refine", hyperoffload.refine),
    INT_KEY("hyperoffload_positions", hyperoffload.positions, U32, 1, 4096, "[1, 4096]"),
    INT_KEY("hyperoffload_passes", hyperoffload.passes, U32, 1, 100, "[1, 100]"),
};

static bool swapadvisor_fails_on_change(const cham_config_t *config)
{
    return config->swapadvisor_fail_on_change;
}

#define KEYS(table) .keys = table, .n_keys = sizeof table / sizeof table[0]
#define OPTIONS(field) .options_offset = offsetof(cham_config_t, field), \
                       .options_size = sizeof(((cham_config_t *)0)->field)

/* In the order of cham_planner_kind_t: config's "known:" list follows it. */
const cham_planner_iface_t cham_planners[] = {
    {.kind = CHAM_PLANNER_CHAMELEON, .name = "chameleon",
     .flags = CHAM_PLANNER_FLAG_MODEL_STATE,
     .plan = plan_chameleon, .moves_model_state = chameleon_moves_model_state},
    {.kind = CHAM_PLANNER_VDNN, .name = "vdnn",
     .flags = CHAM_PLANNER_FLAG_STATIC | CHAM_PLANNER_FLAG_NO_PASSIVE,
     .plan = plan_vdnn},
    {.kind = CHAM_PLANNER_CAPUCHIN, .name = "capuchin",
     .flags = CHAM_PLANNER_FLAG_STATIC | CHAM_PLANNER_FLAG_POSITIONAL,
     .plan = plan_chameleon},
    {.kind = CHAM_PLANNER_SWAPADVISOR, .name = "swapadvisor",
     .flags = CHAM_PLANNER_FLAG_STATIC | CHAM_PLANNER_FLAG_REPLANS,
     OPTIONS(swapadvisor), .defaults = swapadvisor_defaults, KEYS(swapadvisor_keys),
     .plan = plan_swapadvisor, .moves_model_state = swapadvisor_moves_model_state,
     .fails_on_change = swapadvisor_fails_on_change},
    {.kind = CHAM_PLANNER_HYPEROFFLOAD, .name = "hyperoffload",
     .flags = CHAM_PLANNER_FLAG_STATIC | CHAM_PLANNER_FLAG_REPLANS,
     OPTIONS(hyperoffload), .defaults = hyperoffload_defaults, KEYS(hyperoffload_keys),
     .plan = plan_hyperoffload, .moves_model_state = hyperoffload_moves_model_state},
};

const size_t cham_n_planners = sizeof cham_planners / sizeof cham_planners[0];
_Static_assert(sizeof cham_planners / sizeof cham_planners[0] == CHAM_PLANNER_COUNT,
               "one row per cham_planner_kind_t value");

const cham_planner_iface_t *cham_planner_of(cham_planner_kind_t kind)
{
    for (size_t i = 0; i < cham_n_planners; i++)
        if (cham_planners[i].kind == kind)
            return &cham_planners[i];
    return NULL;
}

const cham_planner_iface_t *cham_planner_by_name(const char *name)
{
    for (size_t i = 0; name && i < cham_n_planners; i++)
        if (strcmp(name, cham_planners[i].name) == 0)
            return &cham_planners[i];
    return NULL;
}

bool cham_planner_has(cham_planner_kind_t kind, unsigned flags)
{
    const cham_planner_iface_t *p = cham_planner_of(kind);
    return p && (p->flags & flags) == flags;
}

const void *cham_planner_options(const cham_planner_iface_t *p, const cham_config_t *config)
{
    return p->options_size ? (const char *)config + p->options_offset : NULL;
}

void cham_planner_set_defaults(cham_config_t *config)
{
    for (size_t i = 0; i < cham_n_planners; i++) {
        const cham_planner_iface_t *p = &cham_planners[i];
        CHAM_ASSERT(!p->defaults == !p->options_size);
        if (p->defaults)
            p->defaults((char *)config + p->options_offset);
    }
}

void cham_planner_list(char *buf, size_t size)
{
    size_t at = 0;
    if (size)
        buf[0] = '\0';
    for (size_t i = 0; i < cham_n_planners && at < size; i++) {
        int n = snprintf(buf + at, size - at, "%s%s", i ? ", " : "", cham_planners[i].name);
        if (n < 0)
            break;
        at += (size_t)n;
    }
}
