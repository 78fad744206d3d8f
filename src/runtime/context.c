/* The runtime context: one device with its compute and swap streams, the
 * caching allocators for device and pinned memory (managed mode), the op
 * token table, the stage machine, hooks, the log and counters. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chameleon/profile.h"
#include "common/assert.h"
#include "common/message.h"
#include "common/output.h"
#include "runtime/runtime-impl.h"

static _Thread_local char new_error[512];

/* Errors and log lines quote the caller's labels and names: escaped
 * (cham_escape_line), a newline in one cannot forge a line. */
void cham_context_error(cham_context_t *ctx, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    cham_format_line(ctx ? ctx->error : new_error, sizeof new_error, fmt, ap);
    va_end(ap);
}

void cham_context_log(cham_context_t *ctx, const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    cham_format_line(line, sizeof line, fmt, ap);
    va_end(ap);
    if (ctx->log_hook) {
        const char *outer = cham_hook_enter(ctx, "the log hook");
        ctx->log_hook(line, ctx->log_hook_user);
        ctx->hook = outer;
    } else {
        cham_output_line(line);
    }
}

cham_status_t cham_hook_refuse(cham_context_t *ctx, const char *call)
{
    if (!ctx->hook)
        return CHAM_OK;
    cham_context_error(ctx, "%s called from %s: hooks observe and launch kernels, they do not "
                       "call back into the runtime (do it after the hook returns)", call,
                       ctx->hook);
    return CHAM_ERR_INVALID_ARG;
}

void cham_hook_forbid(const cham_context_t *ctx, const char *call)
{
    if (!ctx->hook)
        return;
    cham_output("%s called from %s: hooks do not call back into the runtime", call, ctx->hook);
    CHAM_ASSERT(!ctx->hook && "no runtime call from a hook");
}

const char *cham_context_last_error(const cham_context_t *ctx)
{
    return ctx ? ctx->error : new_error;
}

/* Streams and allocators; on failure the context's error says which. */
/* Whether the device allocator uses expandable segments: when asked (a
 * device without virtual memory then refuses, naming why), and on AUTO
 * where the device has virtual memory and PyTorch's sizes apply; a device
 * without (the cuda backend without a driver) keeps classic segments. */
static bool expandable(const cham_context_t *ctx)
{
    if (ctx->config.allocator == CHAM_ALLOCATOR_EXPANDABLE)
        return true;
    return ctx->config.allocator == CHAM_ALLOCATOR_AUTO && ctx->config.allocator_shift == 0 &&
           cham_vm_granularity(ctx->dev) > 0;
}

static cham_status_t open_parts(cham_context_t *ctx)
{
    cham_status_t st;
    const char *what = "creating streams";
    if ((st = cham_stream_new(ctx->dev, "compute", &ctx->compute)) != CHAM_OK ||
        (st = cham_stream_new(ctx->dev, "swap-out", &ctx->swap_out)) != CHAM_OK ||
        (st = cham_stream_new(ctx->dev, "swap-in", &ctx->swap_in)) != CHAM_OK)
        goto fail;
    if (ctx->config.mode == CHAM_MODE_MANAGED) {
        what = "creating allocators";
        ctx->memory_moves = expandable(ctx);
        cham_allocator_config_t dc = {.kind = CHAM_MEM_DEVICE,
                                      .granularity_shift = ctx->config.allocator_shift,
                                      .expandable = ctx->memory_moves};
        cham_allocator_config_t hc = {.kind = CHAM_MEM_HOST_PINNED,
                                      .limit = ctx->config.pinned_budget,
                                      .granularity_shift = ctx->config.allocator_shift};
        if ((st = cham_allocator_new(ctx->dev, &dc, &ctx->mem)) != CHAM_OK ||
            (st = cham_allocator_new(ctx->dev, &hc, &ctx->pinned)) != CHAM_OK)
            goto fail;
    }
    return CHAM_OK;
fail:
    cham_context_error(NULL, "%s: %s: %s", what, cham_status_string(st),
                       cham_device_last_error(ctx->dev));
    return st;
}

uint32_t cham_allocator_shift_for(uint64_t capacity)
{
    uint32_t shift = 0;
    while (shift < 10 && (UINT64_C(20) << 20 >> shift) * 16 > capacity)
        shift++;
    return shift;
}

/* The capacity the device will have: the config's, else its preset's. */
static uint64_t planned_capacity(const cham_device_config_t *d)
{
    if (d->capacity)
        return d->capacity;
    if (strcmp(d->backend ? d->backend : "sim", "sim") != 0)
        return 0;                 /* a real device: known once open (and large) */
    const cham_preset_t *p = cham_preset_find(d->preset ? d->preset : cham_preset_default_name());
    return p ? p->capacity : 0;
}

cham_status_t cham_context_new(const cham_config_t *config, cham_context_t **out)
{
    CHAM_ASSERT(config && out);
    *out = NULL;
    char why[400];
    cham_status_t st = cham_config_validate(config, why, sizeof why);
    if (st != CHAM_OK) {
        cham_context_error(NULL, "invalid config: %s", why);
        return st;
    }
    cham_context_t *ctx = calloc(1, sizeof *ctx);
    if (!ctx) {
        cham_context_error(NULL, "out of host memory");
        return CHAM_ERR_HOST_OOM;
    }
    ctx->config = *config;
    ctx->pin = 1;                 /* a new storage's stamp (0) names no op */
    cham_intern_init(&ctx->tokens);
    cham_stage_machine_init(&ctx->stages, config->warmup_steps, config->genpolicy_steps,
                            config->length_tolerance, config->cosine_threshold);
    if (ctx->config.allocator_shift == CHAM_ALLOCATOR_SHIFT_AUTO) {
        uint64_t capacity = planned_capacity(&ctx->config.device);
        ctx->config.allocator_shift = capacity ? cham_allocator_shift_for(capacity) : 0;
    }
    /* The sim's granules as fine as the allocator's segments: a device of
     * a few MiB (allocator_shift > 0) would waste most of 2 MiB granules. */
    if (!ctx->config.device.vm_granularity && ctx->config.allocator_shift) {
        uint64_t g = (UINT64_C(2) << 20) >> ctx->config.allocator_shift;
        ctx->config.device.vm_granularity = g < 4096 ? 4096 : g;
    }
    st = cham_device_open(&ctx->config.device, &ctx->dev);
    if (st != CHAM_OK) {
        cham_context_error(NULL, "opening the device: %s", cham_device_last_error(NULL));
        cham_context_free(ctx);
        return st;
    }
    if ((st = open_parts(ctx)) != CHAM_OK) {
        cham_context_free(ctx);
        return st;
    }
    ctx->phase = CHAM_PHASE_FORWARD;
    ctx->block = -1;
    ctx->step_start_ns = cham_device_host_time(ctx->dev);
    if (cham_loop_static(ctx))
        cham_dispatch_start_profile(ctx);   /* the baselines plan from the first step */
    *out = ctx;
    return CHAM_OK;
}

void cham_context_idle(cham_context_t *ctx)
{
    /* Not the whole device in managed mode: a host stream of the caller's
     * (a CPU-Adam worker, workload.h) may run on into the next step, and
     * a trial or a class change does not wait for it. */
    if (ctx->config.mode == CHAM_MODE_ADVISOR) {
        cham_device_synchronize(ctx->dev);
    } else {
        cham_stream_synchronize(ctx->compute);
        cham_stream_synchronize(ctx->swap_out);
        cham_stream_synchronize(ctx->swap_in);
    }
    ctx->last_sync_ns = cham_device_host_time(ctx->dev);
}

void cham_context_free(cham_context_t *ctx)
{
    if (!ctx)
        return;
    cham_hook_forbid(ctx, "cham_context_free");
    cham_recompute_sweep_ghosts(ctx);
    CHAM_ASSERT(ctx->live_storages == 0 && "release every tensor before freeing the context");
    if (ctx->dev)
        cham_device_synchronize(ctx->dev);
    cham_loop_free(ctx);
    cham_allocator_free(ctx->mem);
    cham_allocator_free(ctx->pinned);
    cham_stream_free(ctx->compute);
    cham_stream_free(ctx->swap_out);
    cham_stream_free(ctx->swap_in);
    cham_device_close(ctx->dev);
    cham_profile_free(ctx->building);
    cham_profile_free(ctx->last_profile);
    cham_stage_machine_free(&ctx->stages);
    cham_intern_free(&ctx->tokens);
    free(ctx->seq);
    free(ctx->seq_blocks);
    free(ctx->canon);
    free(ctx->op_tensors);
    free(ctx->ghosts);
    free(ctx);
}

cham_device_t *cham_context_device(const cham_context_t *ctx)
{
    CHAM_ASSERT(ctx);
    return ctx->dev;
}

const cham_config_t *cham_context_config(const cham_context_t *ctx)
{
    CHAM_ASSERT(ctx);
    return &ctx->config;
}

uint64_t cham_context_budget(const cham_context_t *ctx)
{
    CHAM_ASSERT(ctx);
    cham_device_info_t info;
    cham_device_get_info(ctx->dev, &info);
    return cham_config_budget(&ctx->config, info.capacity);
}

uint64_t cham_context_min_swap(const cham_context_t *ctx)
{
    CHAM_ASSERT(ctx);
    if (ctx->config.min_swap_bytes)
        return ctx->config.min_swap_bytes;
    uint64_t m = cham_context_budget(ctx) / 1024;
    return m < (UINT64_C(4) << 10) ? UINT64_C(4) << 10 : m > (UINT64_C(1) << 20) ? UINT64_C(1) << 20 : m;
}

cham_status_t cham_context_set_memory_budget(cham_context_t *ctx, uint64_t bytes)
{
    CHAM_ASSERT(ctx);
    if (cham_hook_refuse(ctx, "cham_context_set_memory_budget") != CHAM_OK)
        return CHAM_ERR_INVALID_ARG;
    if (ctx->stats.policies_generated || ctx->stats.policy_failures) {
        cham_context_error(ctx, "memory budget: a policy was already planned for %llu bytes; "
                           "the budget changes only before the first (make a new context)",
                           (unsigned long long)cham_context_budget(ctx));
        return CHAM_ERR_INVALID_ARG;
    }
    ctx->config.memory_budget = bytes;
    return CHAM_OK;
}

cham_stream_t *cham_context_compute_stream(const cham_context_t *ctx)
{
    CHAM_ASSERT(ctx);
    return ctx->compute;
}

const struct cham_policy *cham_context_policy(const cham_context_t *ctx)
{
    CHAM_ASSERT(ctx);
    return ctx->exec.plan ? ctx->exec.plan->policy : NULL;
}

void cham_context_on_step(cham_context_t *ctx, cham_step_hook_t hook, void *user)
{
    CHAM_ASSERT(ctx);
    ctx->step_hook = hook;
    ctx->step_hook_user = user;
}

void cham_context_on_recompute(cham_context_t *ctx, cham_recompute_hook_t hook, void *user)
{
    CHAM_ASSERT(ctx);
    ctx->recompute_hook = hook;
    ctx->recompute_hook_user = user;
}

void cham_context_on_swap(cham_context_t *ctx, cham_swap_hook_t hook, void *user)
{
    CHAM_ASSERT(ctx);
    ctx->swap_hook = hook;
    ctx->swap_hook_user = user;
}

void cham_context_set_log(cham_context_t *ctx, cham_log_hook_t hook, void *user)
{
    CHAM_ASSERT(ctx);
    ctx->log_hook = hook;
    ctx->log_hook_user = user;
}

void cham_context_get_stats(const cham_context_t *ctx, cham_runtime_stats_t *stats)
{
    CHAM_ASSERT(ctx && stats);
    *stats = ctx->stats;
}

void cham_context_reset_peak(cham_context_t *ctx)
{
    CHAM_ASSERT(ctx);
    ctx->stats.mem_peak = ctx->stats.mem_in_use;
}

cham_status_t cham_context_alloc_stats(const cham_context_t *ctx, cham_alloc_stats_t *stats)
{
    CHAM_ASSERT(ctx && stats);
    if (!ctx->mem)
        return CHAM_ERR_INVALID_ARG;
    cham_allocator_get_stats(ctx->mem, stats);
    return CHAM_OK;
}

cham_stage_t cham_context_stage(const cham_context_t *ctx)
{
    CHAM_ASSERT(ctx);
    return ctx->stages.stage;
}

uint64_t cham_context_step(const cham_context_t *ctx)
{
    CHAM_ASSERT(ctx);
    return ctx->number;
}

void cham_step_set_number(cham_context_t *ctx, uint64_t number)
{
    CHAM_ASSERT(ctx);
    ctx->number = number;
}

void cham_context_request_profile(cham_context_t *ctx)
{
    CHAM_ASSERT(ctx);
    /* Before the step's first op the step itself can still be profiled. */
    if (ctx->ops_in_step == 0)
        cham_dispatch_start_profile(ctx);
    else
        ctx->profile_requested = true;
}

const cham_profile_t *cham_context_last_profile(const cham_context_t *ctx)
{
    CHAM_ASSERT(ctx);
    return ctx->last_profile;
}

/* ---- op tokens ------------------------------------------------------------*/

cham_status_t cham_op_token(cham_context_t *ctx, const char *name, cham_op_token_t *out)
{
    CHAM_ASSERT(ctx && out);
    if (!name || !*name) {
        cham_context_error(ctx, "op token: the operator name is empty");
        return CHAM_ERR_INVALID_ARG;
    }
    uint32_t i = cham_intern_add(&ctx->tokens, name);
    if (i == UINT32_MAX || i > INT32_MAX) {
        cham_context_error(ctx, "op token: out of host memory interning \"%s\"", name);
        return CHAM_ERR_HOST_OOM;
    }
    *out = (cham_op_token_t)i;
    return CHAM_OK;
}

const char *cham_op_name(const cham_context_t *ctx, cham_op_token_t token)
{
    CHAM_ASSERT(ctx);
    return token < 0 ? NULL : cham_intern_name(&ctx->tokens, (uint32_t)token);
}
