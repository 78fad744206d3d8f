/* What every planner's run shares: the default configuration and reserve,
 * the checks of the profile and configuration (cham_gen_start), the
 * capacity rule, the predicted memory and step time written into a policy
 * (cham_gen_finish), and the time of one copy. docs/policy.md. */
#include <math.h>
#include <stdlib.h>

#include "common/message.h"
#include "policy/plan-impl.h"
#include "policy/policy-impl.h"

#define MiB (UINT64_C(1) << 20)

cham_planner_config_t cham_planner_config_default(void)
{
    return (cham_planner_config_t){
        .capacity = 0,
        .reserve = UINT64_MAX,
        .h2d_bandwidth = 0,
        .d2h_bandwidth = 0,
        .forward_layers = 0,
        .backward_layers = 0,
        .score_c = 1.0,
        .min_swap_bytes = MiB,
        .recompute = true,
        .through_freed = true,
        .model_state = true,
        .refine = true,
        .less_memory = true,
        .cover_tails = true,
        .swaps_alone = true,
        .swap_in_at_use = true,
        .overwrites = true,
        .op_cost_ns = NULL,
        .n_op_costs = 0,
        .resident_at_end = NULL,
        .n_resident_at_end = 0,
    };
}

uint64_t cham_planner_default_reserve(uint64_t capacity, bool memory_moves)
{
    uint64_t r = memory_moves ? capacity / 50 : capacity / 20;
    if (r < 256 * MiB)
        r = 256 * MiB;
    if (r > capacity / 5)
        r = capacity / 5;
    return r;
}

static bool good_bw(double bw)
{
    return isfinite(bw) && bw > 0;
}

static cham_status_t check_config(const cham_profile_view_t *v, const cham_planner_config_t *c,
                                  char *err, size_t err_size)
{
    if (!good_bw(c->h2d_bandwidth) || !good_bw(c->d2h_bandwidth)) {
        cham_set_err(err, err_size, "planner: h2d_bandwidth and d2h_bandwidth must be "
                     "positive (bytes/s), got %g and %g", c->h2d_bandwidth, c->d2h_bandwidth);
        return CHAM_ERR_INVALID_ARG;
    }
    if (!isfinite(c->score_c) || c->score_c < 0) {
        cham_set_err(err, err_size, "planner: score_c must be >= 0, got %g", c->score_c);
        return CHAM_ERR_INVALID_ARG;
    }
    if (v->n_ops > UINT32_MAX / 2) {
        cham_set_err(err, err_size, "planner: %zu ops is too many", v->n_ops);
        return CHAM_ERR_INVALID_ARG;
    }
    if (c->op_cost_ns) {
        if (c->n_op_costs != v->n_ops) {
            cham_set_err(err, err_size, "planner: %zu op costs for a profile of %zu ops",
                         c->n_op_costs, v->n_ops);
            return CHAM_ERR_INVALID_ARG;
        }
        double sum = 0;
        for (size_t k = 0; k < v->n_ops; k++) {
            if (!isfinite(c->op_cost_ns[k]) || c->op_cost_ns[k] < 0) {
                cham_set_err(err, err_size, "planner: op_cost_ns[%zu] = %g is not a time", k,
                             c->op_cost_ns[k]);
                return CHAM_ERR_INVALID_ARG;
            }
            sum += c->op_cost_ns[k];
        }
        if (v->n_ops && !(sum > 0)) {
            cham_set_err(err, err_size, "planner: op costs sum to 0");
            return CHAM_ERR_INVALID_ARG;
        }
    }
    return CHAM_OK;
}

cham_status_t cham_gen_capacity(const cham_profile_view_t *v, const cham_planner_config_t *c,
                                uint64_t *capacity, uint64_t *usable, char *err, size_t err_size)
{
    uint64_t cap = c->capacity ? c->capacity : v->capacity;
    uint64_t reserve = c->reserve == UINT64_MAX ? cham_planner_default_reserve(cap, false) : c->reserve;
    if (cap == 0 || reserve >= cap) {
        cham_set_err(err, err_size,
                     "planner: capacity %llu bytes leaves nothing usable after a reserve of "
                     "%llu", (unsigned long long)cap, (unsigned long long)reserve);
        return CHAM_ERR_INVALID_ARG;
    }
    *capacity = cap;
    *usable = cap - reserve;
    return CHAM_OK;
}

cham_status_t cham_gen_start(const char *who, const cham_profile_t *profile,
                             const cham_planner_config_t *config, cham_policy_t **out,
                             cham_profile_view_t *v, uint64_t *capacity, uint64_t *usable,
                             char *err, size_t err_size)
{
    if (!profile || !config || !out) {
        cham_set_err(err, err_size, "%s: NULL profile, config or out", who);
        return CHAM_ERR_INVALID_ARG;
    }
    *out = NULL;
    cham_profile_get(profile, v);
    cham_status_t st = check_config(v, config, err, err_size);
    return st != CHAM_OK ? st : cham_gen_capacity(v, config, capacity, usable, err, err_size);
}

void cham_gen_predicted_memory(const cham_policy_t *p, const uint64_t *curve, int64_t *mem)
{
    size_t ns = 2 * p->n_ops;
    for (size_t s = 0; s <= ns; s++)
        mem[s] = 0;
    for (size_t i = 0; i < p->n_items; i++) {   /* what leaves and comes back where */
        const cham_policy_item_t *it = &p->items[i];
        if (it->free_op > p->n_ops) {   /* given back in the next step's part */
            mem[2 * (size_t)(it->free_op - p->n_ops)] -= (int64_t)it->bytes;
        } else {
            mem[2 * (size_t)it->free_op] -= (int64_t)it->bytes;
            if (it->wraps)      /* away from the step's start, too */
                mem[0] -= (int64_t)it->bytes;
        }
        mem[2 * (size_t)it->swap_in_op] += (int64_t)it->bytes;
    }
    int64_t away = 0;
    for (size_t s = 0; s < ns; s++) {
        away += mem[s];
        mem[s] = (int64_t)curve[s] + away;
    }
}

uint64_t cham_gen_peak_of(const int64_t *mem, size_t n_ops)
{
    int64_t peak = 0;
    for (size_t s = 0; s < 2 * n_ops; s++)
        peak = mem[s] > peak ? mem[s] : peak;
    return (uint64_t)peak;
}

bool cham_gen_finish(cham_policy_t *p, const cham_gen_layers_t *l, const cham_profile_view_t *v,
                     const uint64_t *curve, uint64_t capacity, uint64_t usable)
{
    size_t ns = 2 * v->n_ops;
    for (size_t i = 0; i < l->n; i++)
        if (!cham_policy_add_layer(p, &l->v[i]))
            return false;
    int64_t *mem = malloc((ns + 1) * sizeof *mem);
    if (!mem)
        return false;
    p->n_ops = v->n_ops;
    cham_gen_predicted_memory(p, curve, mem);
    p->predicted_peak = cham_gen_peak_of(mem, p->n_ops);
    free(mem);
    p->capacity = capacity;
    p->usable = usable;
    p->peak_without_swaps = 0;
    for (size_t s = 0; s < ns; s++)
        p->peak_without_swaps = curve[s] > p->peak_without_swaps ? curve[s]
                                                                 : p->peak_without_swaps;
    p->step_ns = v->duration_ns;
    p->predicted_step_ns = cham_gen_predicted_step(p, l);
    return true;
}

uint64_t cham_gen_predicted_step(const cham_policy_t *p, const cham_gen_layers_t *l)
{
    double ops = 0;
    for (size_t k = 0; k < p->n_ops; k++)
        ops += l->op_ns[k];
    uint64_t t = (uint64_t)(ops + 0.5);
    for (size_t i = 0; i < p->n_items; i++)
        t += p->items[i].recompute_ns;
    return t + cham_gen_total_stall(p);
}

uint64_t cham_gen_transfer_ns(uint64_t bytes, double bw, uint64_t latency_ns)
{
    double t = ceil((double)bytes / bw * 1e9) + (double)latency_ns;
    return t >= 1.8e19 ? UINT64_MAX : (uint64_t)t;
}
