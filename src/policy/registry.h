/* The planners as a table, as the backends are (chameleon/backend.h): each
 * planner the runtime can run is one row of cham_planners, saying its name,
 * how the runtime's loop treats it (flags) and how to call it (plan). The
 * loop, the config's parser and checks, the names and the OOM path ask the
 * table instead of testing CHAM_PLANNER_* themselves, so adding a planner
 * is its own files, its enum value and its row here (docs/README.md,
 * "Where to start as a contributor"). The table is the seam between the
 * runtime and the planners: it names the runtime's config (the planner
 * kinds and where each planner's options sit in cham_config_t). */
#ifndef CHAM_POLICY_REGISTRY_H
#define CHAM_POLICY_REGISTRY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "chameleon/policy.h"
#include "chameleon/runtime.h"

/* How the runtime's loop treats a planner. */
enum {
    /* Plans once from one step's profile and keeps the policy (a
     * baseline): no GenPolicy trials, no sequence classes. Without it the
     * planner runs Algorithm 1 (the stage machine, trials, classes). */
    CHAM_PLANNER_FLAG_STATIC = 1u << 0,
    /* Static, and plans from a steady step; when a step's op sequence
     * differs from the one planned, the plan is dropped and the next
     * steady step is planned again (SwapAdvisor, HyperOffload). */
    CHAM_PLANNER_FLAG_REPLANS = 1u << 1,
    /* Names tensors by position (op index, i-th tensor of the op), not by
     * features: a step whose ops moved fails with CHAM_ERR_POLICY_MISMATCH. */
    CHAM_PLANNER_FLAG_POSITIONAL = 1u << 2,
    /* No passive swaps once its policy applies: the OOM path gives up
     * where the planned swaps do not make room (vDNN has none). */
    CHAM_PLANNER_FLAG_NO_PASSIVE = 1u << 3,
    /* Plans model state when the config's model_state is on (the other
     * planners ignore that field; see moves_model_state). */
    CHAM_PLANNER_FLAG_MODEL_STATE = 1u << 4,
};

/* One of a planner's config keys, parsed and checked by the config's
 * parser with its own keys: the JSON key, the member's path and offset in
 * cham_config_t, its type, its range (integers in [imin, imax]; reals in
 * [lo, hi], the low end open with lo_open) and the range as messages say
 * it (NULL for a bool). */
typedef enum cham_planner_key_kind {
    CHAM_PLANNER_KEY_BOOL,
    CHAM_PLANNER_KEY_U32,
    CHAM_PLANNER_KEY_U64,
    CHAM_PLANNER_KEY_REAL,
} cham_planner_key_kind_t;

typedef struct cham_planner_key {
    const char *key;
    const char *member;
    cham_planner_key_kind_t kind;
    size_t offset;
    uint64_t imin, imax;
    double lo, hi;
    bool lo_open;
    const char *range;
} cham_planner_key_t;

/* One planner as the runtime runs it. The profile is the step to plan
 * for; config the planner config the loop made from the context (the
 * planner may relax it, and the caller reads back what it planned with:
 * Chameleon's drops free_delay_ops to 0 or turns partial on when the
 * policy does not fit otherwise); options the planner's own options in the
 * context's config (NULL for a planner without any). On success *out is
 * the policy and note, when not empty, a line for the context's log on
 * what the planner did (its search, say); err may still say what is left
 * (a partial policy). On failure err says why. */
typedef cham_status_t (*cham_planner_plan_fn)(const cham_profile_t *profile,
                                              cham_planner_config_t *config,
                                              const void *options, cham_policy_t **out,
                                              char *note, size_t note_size, char *err,
                                              size_t err_size);

typedef struct cham_planner_iface {
    cham_planner_kind_t kind;
    const char *name;            /* as config "planner" and the logs spell it */
    unsigned flags;              /* CHAM_PLANNER_FLAG_* */
    /* Its options inside cham_config_t: offsetof and size (size 0: none),
     * and what sets them to its defaults (NULL with none). */
    size_t options_offset;
    size_t options_size;
    void (*defaults)(void *options);
    cham_planner_plan_fn plan;
    /* Whether, with the config's model_state and its options, it moves
     * persistent tensors off the device; NULL: never. */
    bool (*moves_model_state)(bool model_state, const void *options);
    /* Its config keys (n_keys of them; NULL and 0: none). */
    const cham_planner_key_t *keys;
    size_t n_keys;
    /* A replanning planner: whether config asks for a step whose op
     * sequence changed to fail instead of being planned again (its search
     * is long); NULL: never. The key that says so is named
     * <name>_fail_on_change. */
    bool (*fails_on_change)(const cham_config_t *config);
} cham_planner_iface_t;

/* The planners, in the order of cham_planner_kind_t. */
extern const cham_planner_iface_t cham_planners[];
extern const size_t cham_n_planners;

/* The planner of a kind, NULL when kind is none. */
const cham_planner_iface_t *cham_planner_of(cham_planner_kind_t kind);
/* The planner of that name, NULL when none is (or name is NULL). */
const cham_planner_iface_t *cham_planner_by_name(const char *name);
/* Whether the planner of kind has every flag of `flags` (false when kind
 * is none). */
bool cham_planner_has(cham_planner_kind_t kind, unsigned flags);
/* The planner's options inside config, NULL when it has none. */
const void *cham_planner_options(const cham_planner_iface_t *p, const cham_config_t *config);
/* Sets every planner's options in config to its defaults. */
void cham_planner_set_defaults(cham_config_t *config);
/* The planners' names joined by ", " into buf (truncated to size). */
void cham_planner_list(char *buf, size_t size);

#endif
