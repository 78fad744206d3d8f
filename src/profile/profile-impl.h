/* Building a profile while a step runs (used by the runtime), and the
 * profile's internals shared by profile.c and profile_json.c. */
#ifndef CHAM_PROFILE_IMPL_H
#define CHAM_PROFILE_IMPL_H

#include <stdbool.h>

#include "chameleon/profile.h"

/* Invariants: ops[i].first_use + ops[i].n_uses <= n_uses, and the ops' use
 * ranges are consecutive in op order; swaps are in the order they happened,
 * so their samples do not decrease; every storage id in swaps appears in
 * uses or was live before the step (a swap of a tensor the step never uses
 * is allowed). */
struct cham_profile {
    uint64_t step, duration_ns, capacity;
    uint64_t kernel_overhead_ns, copy_latency_ns;
    cham_profile_op_t *ops;
    size_t n_ops, cap_ops;
    cham_tensor_use_t *uses;
    size_t n_uses, cap_uses;
    cham_profile_swap_t *swaps;
    size_t n_swaps, cap_swaps;
    char **token_names;
    size_t n_tokens;
    bool op_open;            /* an op has been added and not ended */
};

/* A new empty profile; NULL when the host is out of memory. */
cham_profile_t *cham_profile_new(uint64_t step, uint64_t capacity);
/* A copy of a finished profile; NULL when the host is out of memory. */
cham_profile_t *cham_profile_copy(const cham_profile_t *p);

/* Starts op: returns false when the host is out of memory. */
bool cham_profile_begin_op(cham_profile_t *p, cham_op_token_t token, cham_phase_t phase,
                           int32_t block,
                           uint64_t mem_before);
/* Adds a use to the op begun last. */
bool cham_profile_add_use(cham_profile_t *p, const cham_tensor_use_t *use);
void cham_profile_end_op(cham_profile_t *p, uint64_t mem_after);
/* The op begun last was declared recomputable / has this cost / runs this
 * collective. */
void cham_profile_set_recomputable(cham_profile_t *p);
void cham_profile_set_cost(cham_profile_t *p, double cost_ns);
void cham_profile_set_comm(cham_profile_t *p, double comm_ns, bool waited);
/* Whether ns is a time an op may be given (a cost, a collective's), as
 * the API and the file both take it: finite, in [0, 1e18). */
static inline bool cham_profile_time_ok(double ns)
{
    return ns >= 0 && ns < 1e18;
}
bool cham_profile_add_swap(cham_profile_t *p, const cham_profile_swap_t *swap);
/* Copies the names of tokens 0 .. n - 1. */
bool cham_profile_set_tokens(cham_profile_t *p, const char *const *names, size_t n);
void cham_profile_set_duration(cham_profile_t *p, uint64_t duration_ns);
/* At the step's end: a use added as persistent (its storage made before
 * the step) stays so only if alive(storage id, user) says the storage
 * still is. */
void cham_profile_keep_persistent(cham_profile_t *p, bool (*alive)(uint64_t storage, void *user),
                                  void *user);
/* The device's fixed costs: per kernel beyond the op's cost and per copy
 * beyond its bytes over the bandwidth (the view's kernel_overhead_ns and
 * copy_latency_ns). */
void cham_profile_set_fixed_costs(cham_profile_t *p, uint64_t kernel_overhead_ns,
                                  uint64_t copy_latency_ns);

#endif
