/* The detailed profile of one step: the builder the runtime fills while the
 * step runs, the read-only view planners use, and the memory curve as if no
 * swap had happened (paper §4 "Detailed Mode" and Fig. 3). The JSON file
 * format lives in profile_json.c (docs/profile-format.md). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "chameleon/profile.h"
#include "common/assert.h"
#include "common/grow.h"
#include "profile/profile-impl.h"

/* Samples are uint32 (2 * op + 0/1), so a profile holds at most this many
 * ops; ops index their uses with uint32, so at most UINT32_MAX uses. */
#define MAX_OPS (UINT32_MAX / 2)
#define MAX_USES UINT32_MAX

cham_profile_t *cham_profile_new(uint64_t step, uint64_t capacity)
{
    cham_profile_t *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->step = step;
    p->capacity = capacity;
    return p;
}

/* A copy of n elements of size each (NULL for none). */
static void *dup_array(const void *a, size_t n, size_t size, bool *ok)
{
    if (!n)
        return NULL;
    void *d = malloc(n * size);
    if (d)
        memcpy(d, a, n * size);
    *ok &= d != NULL;
    return d;
}

cham_profile_t *cham_profile_copy(const cham_profile_t *p)
{
    CHAM_ASSERT(p && !p->op_open);
    cham_profile_t *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    *c = *p;
    bool ok = true;
    c->ops = dup_array(p->ops, p->n_ops, sizeof *p->ops, &ok);
    c->uses = dup_array(p->uses, p->n_uses, sizeof *p->uses, &ok);
    c->swaps = dup_array(p->swaps, p->n_swaps, sizeof *p->swaps, &ok);
    c->cap_ops = c->ops ? p->n_ops : 0;
    c->cap_uses = c->uses ? p->n_uses : 0;
    c->cap_swaps = c->swaps ? p->n_swaps : 0;
    c->token_names = p->n_tokens ? calloc(p->n_tokens, sizeof *c->token_names) : NULL;
    c->n_tokens = c->token_names ? p->n_tokens : 0;
    ok &= c->token_names || !p->n_tokens;
    for (size_t i = 0; i < c->n_tokens; i++)
        ok &= (c->token_names[i] = strdup(p->token_names[i])) != NULL;
    if (!ok) {
        cham_profile_free(c);
        return NULL;
    }
    return c;
}

void cham_profile_free(cham_profile_t *p)
{
    if (!p)
        return;
    for (size_t i = 0; i < p->n_tokens; i++)
        free(p->token_names[i]);
    free(p->token_names);
    free(p->ops);
    free(p->uses);
    free(p->swaps);
    free(p);
}

bool cham_profile_begin_op(cham_profile_t *p, cham_op_token_t token, cham_phase_t phase,
                           int32_t block,
                           uint64_t mem_before)
{
    CHAM_ASSERT(p);
    CHAM_ASSERT(!p->op_open && "begin_op while an op is open: end it first");
    CHAM_ASSERT(token >= 0);
    CHAM_ASSERT((int)phase >= 0 && phase <= CHAM_PHASE_EVAL);
    CHAM_ASSERT(p->n_ops < MAX_OPS && "more ops than samples can number");
    cham_profile_op_t *ops = cham_grow(p->ops, &p->cap_ops, p->n_ops + 1, sizeof *ops, 256);
    if (!ops)
        return false;
    p->ops = ops;
    ops[p->n_ops++] = (cham_profile_op_t){
        .token = token,
        .phase = phase,
        .block = block,
        .first_use = (uint32_t)p->n_uses,
        .n_uses = 0,
        .mem_before = mem_before,
        .mem_after = mem_before,   /* until end_op says otherwise */
    };
    p->op_open = true;
    return true;
}

bool cham_profile_add_use(cham_profile_t *p, const cham_tensor_use_t *use)
{
    CHAM_ASSERT(p && use);
    CHAM_ASSERT(p->op_open && "add_use outside begin_op / end_op");
    CHAM_ASSERT((int)use->dtype >= 0 && use->dtype < CHAM_DTYPE_COUNT_);
    /* first_use and n_uses are uint32: a profile this large cannot be
     * indexed, which the caller handles like running out of host memory. */
    if (p->n_uses >= MAX_USES)
        return false;
    cham_tensor_use_t *uses = cham_grow(p->uses, &p->cap_uses, p->n_uses + 1, sizeof *uses,
                                        1024);
    if (!uses)
        return false;
    p->uses = uses;
    uses[p->n_uses++] = *use;
    p->ops[p->n_ops - 1].n_uses++;
    return true;
}

void cham_profile_end_op(cham_profile_t *p, uint64_t mem_after)
{
    CHAM_ASSERT(p);
    CHAM_ASSERT(p->op_open && "end_op without begin_op");
    p->ops[p->n_ops - 1].mem_after = mem_after;
    p->op_open = false;
}

void cham_profile_set_recomputable(cham_profile_t *p)
{
    CHAM_ASSERT(p && p->op_open);
    p->ops[p->n_ops - 1].recomputable = true;
}

void cham_profile_set_cost(cham_profile_t *p, double cost_ns)
{
    CHAM_ASSERT(p && p->op_open);
    p->ops[p->n_ops - 1].has_cost = true;
    p->ops[p->n_ops - 1].cost_ns = cost_ns;
}

void cham_profile_set_comm(cham_profile_t *p, double comm_ns, bool waited)
{
    CHAM_ASSERT(p && p->op_open);
    p->ops[p->n_ops - 1].comm_ns = comm_ns;
    p->ops[p->n_ops - 1].comm_waited = waited;
}

bool cham_profile_add_swap(cham_profile_t *p, const cham_profile_swap_t *swap)
{
    CHAM_ASSERT(p && swap);
    CHAM_ASSERT(swap->kind == CHAM_SWAP_OUT || swap->kind == CHAM_SWAP_IN);
    /* Swaps are logged as they happen, so samples never go back. A sample
     * may lie past the ops added so far (2 * n_ops: before the next op). */
    CHAM_ASSERT((p->n_swaps == 0 || p->swaps[p->n_swaps - 1].sample <= swap->sample) &&
                "swaps must be added in the order of their samples");
    cham_profile_swap_t *swaps = cham_grow(p->swaps, &p->cap_swaps, p->n_swaps + 1,
                                           sizeof *swaps, 64);
    if (!swaps)
        return false;
    p->swaps = swaps;
    swaps[p->n_swaps++] = *swap;
    return true;
}

bool cham_profile_set_tokens(cham_profile_t *p, const char *const *names, size_t n)
{
    CHAM_ASSERT(p && (names || n == 0));
    CHAM_ASSERT(n <= INT32_MAX && "op tokens are int32");
    char **copy = calloc(n ? n : 1, sizeof *copy);
    if (!copy)
        return false;
    for (size_t i = 0; i < n; i++) {
        CHAM_ASSERT(names[i]);
        size_t len = strlen(names[i]) + 1;
        copy[i] = malloc(len);
        if (!copy[i]) {
            for (size_t j = 0; j < i; j++)
                free(copy[j]);
            free(copy);
            return false;
        }
        memcpy(copy[i], names[i], len);
    }
    for (size_t i = 0; i < p->n_tokens; i++)
        free(p->token_names[i]);
    free(p->token_names);
    p->token_names = copy;
    p->n_tokens = n;
    return true;
}

void cham_profile_keep_persistent(cham_profile_t *p, bool (*alive)(uint64_t storage, void *user),
                                  void *user)
{
    for (size_t u = 0; u < p->n_uses; u++)
        if (p->uses[u].persistent)
            p->uses[u].persistent = alive(p->uses[u].storage, user);
}

void cham_profile_set_duration(cham_profile_t *p, uint64_t duration_ns)
{
    CHAM_ASSERT(p);
    p->duration_ns = duration_ns;
}

void cham_profile_set_fixed_costs(cham_profile_t *p, uint64_t kernel_overhead_ns,
                                  uint64_t copy_latency_ns)
{
    CHAM_ASSERT(p);
    p->kernel_overhead_ns = kernel_overhead_ns;
    p->copy_latency_ns = copy_latency_ns;
}

void cham_profile_get(const cham_profile_t *p, cham_profile_view_t *view)
{
    CHAM_ASSERT(p && view);
    *view = (cham_profile_view_t){
        .step = p->step,
        .duration_ns = p->duration_ns,
        .capacity = p->capacity,
        .kernel_overhead_ns = p->kernel_overhead_ns,
        .copy_latency_ns = p->copy_latency_ns,
        .n_ops = p->n_ops,
        .ops = p->ops,
        .n_uses = p->n_uses,
        .uses = p->uses,
        .n_swaps = p->n_swaps,
        .swaps = p->swaps,
        .n_tokens = p->n_tokens,
        .token_names = (const char *const *)p->token_names,
    };
}

/* Sample s of the reconstruction (Fig. 3): what was measured, plus the
 * bytes swapped out at samples <= s (they would still be on the device)
 * and those away since before the step and not yet back (carried swap-ins
 * after s: model state that left in the previous step would have stayed),
 * minus the bytes swapped in at samples <= s (without the swap-out they
 * were there already and are counted in the sums above). The running sums
 * are kept apart so no step goes below zero; a profile whose swap-ins
 * exceed what was measured plus swapped out (not one a step can produce)
 * is clamped at 0, and sums saturate at UINT64_MAX. */
static uint64_t add_sat(uint64_t a, uint64_t b)
{
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

void cham_profile_memory_curve(const cham_profile_t *p, uint64_t *actual,
                               uint64_t *without_swaps)
{
    CHAM_ASSERT(p);
    CHAM_ASSERT(!p->op_open && "memory curve of a profile with an op still open");
    if (p->n_ops == 0)
        return;
    CHAM_ASSERT(actual && without_swaps);
    size_t n_samples = 2 * p->n_ops;
    uint64_t out_sum = 0, in_sum = 0;
    for (size_t i = 0; i < p->n_swaps; i++)
        if (p->swaps[i].kind == CHAM_SWAP_IN && p->swaps[i].carried)
            out_sum = add_sat(out_sum, p->swaps[i].bytes);
    size_t k = 0;
    for (size_t s = 0; s < n_samples; s++) {
        const cham_profile_op_t *op = &p->ops[s / 2];
        uint64_t measured = s % 2 == 0 ? op->mem_before : op->mem_after;
        for (; k < p->n_swaps && p->swaps[k].sample <= s; k++) {
            uint64_t *sum = p->swaps[k].kind == CHAM_SWAP_OUT ? &out_sum : &in_sum;
            *sum = add_sat(*sum, p->swaps[k].bytes);
        }
        actual[s] = measured;
        uint64_t up = add_sat(measured, out_sum);
        without_swaps[s] = up > in_sum ? up - in_sum : 0;
    }
    /* Swaps left over are at sample 2 * n_ops (after the last op, before
     * the step ended): they change no sample. Anything later breaks the
     * profile's invariants. */
    for (; k < p->n_swaps; k++)
        CHAM_ASSERT(p->swaps[k].sample <= n_samples);
}
