/* The dispatch bracket and the profilers.
 *
 * Lightweight mode, always on: cham_op_begin appends the op's token to the
 * step's sequence and updates each tensor's integer features (use count,
 * op-index history); cham_step_end hands the sequence to the stage machine.
 * Detailed mode, in GenPolicy or on request: every op, every tensor use
 * with its features, memory before and after each op, and the swaps, into
 * a cham_profile_t. docs/profiler.md says what and why. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chameleon/profile.h"
#include "common/assert.h"
#include "common/grow.h"
#include "profile/profile-impl.h"
#include "runtime/runtime-impl.h"

uint32_t cham_dispatch_sample(const cham_context_t *ctx)
{
    return ctx->in_op ? 2 * (ctx->ops_in_step - 1) + 1 : 2 * ctx->ops_in_step;
}

/* A failure while building the profile drops it (the step runs on). */
static void profile_failed(cham_context_t *ctx)
{
    if (!ctx->profile_failed)
        cham_context_log(ctx, "step %llu: out of host memory; the detailed profile of this "
                         "step is dropped", (unsigned long long)ctx->number);
    ctx->profile_failed = true;
}

void cham_dispatch_note_swap(cham_context_t *ctx, cham_swap_kind_t kind, cham_storage_t *s,
                             bool passive, bool recompute)
{
    bool carried = kind == CHAM_SWAP_IN && s->away_step < ctx->step;
    if (kind == CHAM_SWAP_OUT)
        s->away_step = ctx->step;
    if (!ctx->building || ctx->profile_failed)
        return;
    cham_profile_swap_t sw = {.kind = kind, .storage = s->id, .bytes = s->bytes,
                              .sample = cham_dispatch_sample(ctx), .passive = passive,
                              .recompute = recompute, .carried = carried};
    if (!cham_profile_add_swap(ctx->building, &sw))
        profile_failed(ctx);
}

/* overwrites: the op writes the storage whose bytes were dead (never
 * written, or discarded): nothing had to come back for it. */
static void record_use(cham_context_t *ctx, const cham_tensor_t *t, bool output,
                       bool overwrites)
{
    const cham_storage_t *s = t->storage;
    cham_tensor_use_t u = {
        .storage = s->id,
        .data_ptr = (uint64_t)(uintptr_t)cham_tensor_data(t),
        .bytes = t->bytes,
        .storage_bytes = s->bytes,
        .dtype = t->dtype,
        .use_count = s->feat.use_count,
        .history = s->feat.history,
        .output = output,
        .persistent = s->born_step < ctx->step,   /* and alive at the end: finish_profile */
        .host_backed = s->host_copy && s->host_valid && !output,
        .overwrites = overwrites,
    };
    if (!cham_profile_add_use(ctx->building, &u))
        profile_failed(ctx);
}

/* A use: features count from the step's start; as they were before this
 * use they go into the detailed profile, then they move on and the
 * executor matches them against the applied policy. */
static void use(cham_context_t *ctx, cham_tensor_t *t, bool output,
                cham_op_token_t token, uint32_t pos)
{
    cham_storage_t *s = t->storage;
    if (s->feat_step != ctx->step) {
        s->feat = (cham_features_t){.bytes = s->bytes};
        s->feat_step = ctx->step;
    }
    s->feat.dtype = (uint32_t)t->dtype;
    bool overwrites = output && !s->holds_data;
    s->holds_data = true;
    s->discarded = false;
    cham_victims_update(s);
    if (ctx->building && !ctx->profile_failed)
        record_use(ctx, t, output, overwrites);
    cham_match_t *m = ctx->exec.plan ? &ctx->exec.plan->match : NULL;
    cham_features_advance(&s->feat, token, m ? cham_match_tag_bit(m, token) : 0);
    if (m)
        cham_exec_use(ctx, t, token, pos);
}

/* Marks the storages the op uses: making room for one of them must not
 * move another, nor give back an input's block. */
static void pin(cham_context_t *ctx, cham_tensor_t *const *ts, size_t n, bool inputs)
{
    for (size_t i = 0; i < n; i++) {
        CHAM_ASSERT(ts[i] && ts[i]->refs > 0);
        CHAM_ASSERT(ts[i]->storage->ctx == ctx && "tensor of another context");
        ts[i]->storage->pin = ctx->pin;
        if (inputs)
            ts[i]->storage->input_pin = ctx->pin;
    }
}

/* The rule the op starts under: every storage it uses is on the device,
 * at an address, with the compute stream ordered after any copy into it. */
static void assert_resident(const cham_context_t *ctx, cham_tensor_t *const *ts, size_t n)
{
    if (ctx->config.mode != CHAM_MODE_MANAGED)
        return;
    for (size_t i = 0; i < n; i++)
        CHAM_ASSERT(ts[i]->storage->block &&
                    ts[i]->storage->residency == CHAM_RESIDENT_DEVICE);
}

/* Brings each tensor's storage to the device if needed. */
static cham_status_t prepare(cham_tensor_t *const *ts, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        cham_storage_t *s = ts[i]->storage;
        if (s->residency != CHAM_RESIDENT_DEVICE) {
            cham_status_t st = cham_storage_prepare(s);
            if (st != CHAM_OK)
                return st;
        }
    }
    return CHAM_OK;
}

/* Dropped storages first (a re-run needs room for its inputs beside its
 * output, a swap-in its own bytes only), then the largest first. */
static int by_need_desc(const void *a, const void *b)
{
    const cham_storage_t *x = *(cham_storage_t *const *)a, *y = *(cham_storage_t *const *)b;
    bool dx = x->residency == CHAM_RESIDENT_DROPPED, dy = y->residency == CHAM_RESIDENT_DROPPED;
    if (dx != dy)
        return dx ? -1 : 1;
    return (x->bytes < y->bytes) - (x->bytes > y->bytes);
}

/* The OOM path's last resort, when the op's own tensors, wherever they
 * landed, split the free memory so that the one still missing finds no
 * place: all of them leave the device (their blocks free at once, behind
 * event waits) and come back, the dropped ones first, then largest first,
 * each into the best fit. */
static cham_status_t compact_op(cham_context_t *ctx, cham_tensor_t *const *inputs,
                                size_t n_inputs, cham_tensor_t *const *outputs,
                                size_t n_outputs)
{
    size_t n = n_inputs + n_outputs, k = 0;
    cham_storage_t **v = malloc((n ? n : 1) * sizeof *v);
    if (!v)
        return CHAM_ERR_HOST_OOM;
    for (size_t i = 0; i < n; i++) {
        cham_storage_t *s = (i < n_inputs ? inputs[i] : outputs[i - n_inputs])->storage;
        bool seen = false;
        for (size_t j = 0; j < k && !seen; j++)
            seen = v[j] == s;
        if (!seen)
            v[k++] = s;
    }
    cham_status_t st = CHAM_OK;
    uint64_t now = ctx->ops_total ? ctx->ops_total - 1 : 0;
    for (size_t i = 0; i < k && st == CHAM_OK; i++) {
        if (!v[i]->block)
            continue;
        if (!v[i]->holds_data && v[i]->residency == CHAM_RESIDENT_DEVICE)
            cham_storage_dematerialize(v[i]);
        else
            st = cham_storage_swap_out(v[i], CHAM_SWAP_PASSIVE, now);
    }
    qsort(v, k, sizeof *v, by_need_desc);
    ctx->preparing_outputs = true;     /* none of the op's own may be given back */
    for (size_t i = 0; i < k && st == CHAM_OK; i++)
        if (v[i]->residency != CHAM_RESIDENT_DEVICE)
            st = cham_storage_prepare(v[i]);
    ctx->preparing_outputs = false;
    free(v);
    return st;
}

cham_status_t cham_op_begin(cham_context_t *ctx, cham_op_token_t token,
                            cham_tensor_t *const *inputs, size_t n_inputs,
                            cham_tensor_t *const *outputs, size_t n_outputs)
{
    CHAM_ASSERT(ctx);
    CHAM_ASSERT((inputs || !n_inputs) && (outputs || !n_outputs));
    if (ctx->in_op) {
        cham_context_error(ctx, "op \"%s\" begun inside op %u: end the previous op first",
                           cham_op_name(ctx, token), ctx->ops_in_step - 1);
        return CHAM_ERR_INVALID_ARG;
    }
    if (cham_hook_refuse(ctx, "cham_op_begin") != CHAM_OK)
        return CHAM_ERR_INVALID_ARG;
    if (token < 0 || (uint32_t)token >= ctx->tokens.n) {
        cham_context_error(ctx, "op begin: unknown op token %d", (int)token);
        return CHAM_ERR_INVALID_ARG;
    }
    if (ctx->ops_in_step == UINT32_MAX / 2) {
        cham_context_error(ctx, "op begin: more than %u ops in one step", UINT32_MAX / 2);
        return CHAM_ERR_INVALID_ARG;
    }
    if (ctx->config.profiler) {
        cham_op_token_t *seq = cham_grow(ctx->seq, &ctx->seq_cap, ctx->ops_in_step + 1,
                                         sizeof *seq, 1024);
        if (!seq) {
            cham_context_error(ctx, "op begin: out of host memory for the op sequence");
            return CHAM_ERR_HOST_OOM;
        }
        ctx->seq = seq;
        int32_t *blocks = cham_grow(ctx->seq_blocks, &ctx->seq_blocks_cap, ctx->ops_in_step + 1,
                                    sizeof *blocks, 1024);
        if (!blocks) {
            cham_context_error(ctx, "op begin: out of host memory for the op sequence");
            return CHAM_ERR_HOST_OOM;
        }
        ctx->seq_blocks = blocks;
    }
    for (size_t i = 0; i < n_inputs; i++)
        if (inputs[i]->storage->discarded) {
            cham_context_error(ctx, "op \"%s\" reads \"%s\", whose bytes were discarded "
                               "(cham_tensor_discard) and not written since",
                               cham_op_name(ctx, token), inputs[i]->label);
            return CHAM_ERR_INVALID_ARG;
        }
    cham_tensor_t **ts = cham_grow(ctx->op_tensors, &ctx->cap_op_tensors,
                                   n_inputs + n_outputs + 1, sizeof *ts, 8);
    if (!ts) {
        cham_context_error(ctx, "op begin: out of host memory");
        return CHAM_ERR_HOST_OOM;
    }
    ctx->op_tensors = ts;
    ctx->n_actions = 0;
    if (ctx->exec.plan && ctx->exec.plan->positions) {
        cham_status_t st = cham_exec_check_positions(ctx, token, inputs, n_inputs, outputs,
                                                     n_outputs);
        if (st != CHAM_OK)
            return st;
    }
    /* Planned swap-ins of this op, then the storages the op needs: swaps
     * made here change the op's "before" memory sample. On failure the op
     * has not begun. */
    ctx->pin++;
    pin(ctx, inputs, n_inputs, true);
    pin(ctx, outputs, n_outputs, false);
    ctx->in_begin = true;
    cham_status_t st = ctx->exec.plan || ctx->exec.n_carried ? cham_exec_op_begin(ctx) : CHAM_OK;
    /* Tensors dropped to be recomputed from what this op writes are made
     * again first. */
    for (size_t i = 0; i < n_outputs && st == CHAM_OK; i++)
        st = cham_recompute_before_write(outputs[i]->storage);
    if (st == CHAM_OK)
        st = prepare(inputs, n_inputs);
    if (st == CHAM_OK) {
        ctx->preparing_outputs = true;
        st = prepare(outputs, n_outputs);
        ctx->preparing_outputs = false;
    }
    if (st == CHAM_ERR_OUT_OF_MEMORY && cham_oom_passive(ctx)) {
        char first[sizeof ctx->error];
        snprintf(first, sizeof first, "%s", ctx->error);
        st = compact_op(ctx, inputs, n_inputs, outputs, n_outputs);
        if (st == CHAM_ERR_OUT_OF_MEMORY)
            cham_context_error(ctx, "%s; moving the op's own tensors out and back largest "
                               "first did not help either", first);
    }
    ctx->in_begin = false;
    if (st != CHAM_OK)
        return st;
    assert_resident(ctx, inputs, n_inputs);
    assert_resident(ctx, outputs, n_outputs);
    for (size_t i = 0; i < n_outputs; i++) {
        cham_recompute_written(outputs[i]->storage);    /* its data changes now */
        outputs[i]->storage->host_valid = false;        /* its host copy is stale */
        cham_storage_forget_kept(outputs[i]->storage);  /* and so is a kept one */
    }
    for (size_t i = 0; i < n_inputs + n_outputs; i++)
        ctx->op_tensors[i] = i < n_inputs ? inputs[i] : outputs[i - n_inputs];
    ctx->op_inputs = n_inputs;
    ctx->op_outputs = n_outputs;
    ctx->op_recomputable = false;
    ctx->op_cost_ns = -1;
    if (ctx->config.profiler) {
        ctx->seq[ctx->ops_in_step] = token;
        ctx->seq_blocks[ctx->ops_in_step] = ctx->block;
    }
    ctx->ops_in_step++;
    ctx->in_op = true;
    if (ctx->building && !ctx->profile_failed &&
        !cham_profile_begin_op(ctx->building, token, ctx->phase, ctx->block,
                               ctx->stats.mem_in_use))
        profile_failed(ctx);
    for (size_t i = 0; i < n_inputs; i++)
        use(ctx, inputs[i], false, token, (uint32_t)i);
    for (size_t i = 0; i < n_outputs; i++)
        use(ctx, outputs[i], true, token, (uint32_t)(n_inputs + i));
    return CHAM_OK;
}

cham_status_t cham_op_end(cham_context_t *ctx)
{
    CHAM_ASSERT(ctx);
    if (cham_hook_refuse(ctx, "cham_op_end") != CHAM_OK)
        return CHAM_ERR_INVALID_ARG;
    if (!ctx->in_op) {
        cham_context_error(ctx, "op end without op begin (after op %u of step %llu)",
                           ctx->ops_in_step, (unsigned long long)ctx->number);
        return CHAM_ERR_INVALID_ARG;
    }
    ctx->in_op = false;
    ctx->pin++;                   /* the op's storages may move again */
    if (ctx->op_cost_ns >= 0)
        ctx->step_cost_ns += ctx->op_cost_ns;
    else
        ctx->step_uncosted = true;
    if (ctx->building && !ctx->profile_failed)
        cham_profile_end_op(ctx->building, ctx->stats.mem_in_use);
    ctx->stats.ops++;
    cham_recompute_sweep_ghosts(ctx);
    cham_status_t st = ctx->exec.plan ? cham_exec_op_end(ctx) : CHAM_OK;
    if (ctx->mem && st == CHAM_OK)
        st = cham_allocator_op_dispatched(ctx->mem, ctx->ops_total);
    ctx->ops_total++;
    return st;
}

/* Whether an op is being dispatched; if not, the error names `who`. */
static bool dispatching(cham_context_t *ctx, const char *who)
{
    if (cham_hook_refuse(ctx, who) != CHAM_OK)
        return false;
    if (!ctx->in_op)
        cham_context_error(ctx, "%s: no op is being dispatched (call it between cham_op_begin "
                                "and cham_op_end)", who);
    return ctx->in_op;
}

cham_status_t cham_op_set_cost(cham_context_t *ctx, double ns)
{
    CHAM_ASSERT(ctx);
    if (!dispatching(ctx, "cham_op_set_cost"))
        return CHAM_ERR_INVALID_ARG;
    if (!cham_profile_time_ok(ns)) {
        cham_context_error(ctx, "cham_op_set_cost: the cost is not a time in ns");
        return CHAM_ERR_INVALID_ARG;
    }
    if (ctx->building && !ctx->profile_failed)
        cham_profile_set_cost(ctx->building, ns);
    ctx->op_cost_ns = ns;
    if (ctx->op_recomputable && ctx->op_tensors[ctx->op_inputs]->storage->recompute)
        ctx->op_tensors[ctx->op_inputs]->storage->recompute->cost_ns = ns;
    return CHAM_OK;
}

cham_status_t cham_op_set_comm(cham_context_t *ctx, double ns, bool waited)
{
    CHAM_ASSERT(ctx);
    if (!dispatching(ctx, "cham_op_set_comm"))
        return CHAM_ERR_INVALID_ARG;
    if (!cham_profile_time_ok(ns) || (waited && ns == 0)) {
        cham_context_error(ctx, "cham_op_set_comm: %g is not the time of a %scollective in ns",
                           ns, waited ? "waited " : "");
        return CHAM_ERR_INVALID_ARG;
    }
    if (ctx->building && !ctx->profile_failed)
        cham_profile_set_comm(ctx->building, ns, waited);
    return CHAM_OK;
}

size_t cham_op_actions(const cham_context_t *ctx, const cham_action_t **actions)
{
    CHAM_ASSERT(ctx && actions);
    *actions = ctx->actions;
    return ctx->n_actions;
}

uint64_t cham_context_ops(const cham_context_t *ctx)
{
    CHAM_ASSERT(ctx);
    return ctx->ops_total;
}

cham_status_t cham_phase(cham_context_t *ctx, cham_phase_t phase)
{
    CHAM_ASSERT(ctx);
    if (cham_hook_refuse(ctx, "cham_phase") != CHAM_OK)
        return CHAM_ERR_INVALID_ARG;
    if ((int)phase < 0 || phase > CHAM_PHASE_EVAL) {
        cham_context_error(ctx, "unknown phase %d", (int)phase);
        return CHAM_ERR_INVALID_ARG;
    }
    ctx->phase = phase;
    ctx->backward = ctx->backward || phase == CHAM_PHASE_BACKWARD;
    return CHAM_OK;
}

cham_status_t cham_set_block(cham_context_t *ctx, int32_t block)
{
    CHAM_ASSERT(ctx);
    if (cham_hook_refuse(ctx, "cham_set_block") != CHAM_OK)
        return CHAM_ERR_INVALID_ARG;
    if (block < -1) {
        cham_context_error(ctx, "cham_set_block: %d is not a block (0, 1, ... or -1 for none)",
                           (int)block);
        return CHAM_ERR_INVALID_ARG;
    }
    ctx->block = block;
    return CHAM_OK;
}

typedef struct storages_alive {
    cham_storage_t **by_id;
    size_t n;
} storages_alive_t;

static bool storage_alive(uint64_t storage, void *user)
{
    const storages_alive_t *a = user;
    return cham_storage_find(a->by_id, a->n, storage) != NULL;
}

/* A use is persistent when its storage was made before the step (marked
 * as it happens) and is still alive now; false when the host is out of
 * memory. */
static bool mark_persistent(cham_context_t *ctx, cham_profile_t *p)
{
    storages_alive_t a;
    a.by_id = cham_storages_by_id(ctx, &a.n);
    if (!a.by_id)
        return false;
    cham_profile_keep_persistent(p, storage_alive, &a);
    free(a.by_id);
    return true;
}

/* Finishes the detailed profile of the step that ends. */
static void finish_profile(cham_context_t *ctx, uint64_t now)
{
    cham_profile_t *p = ctx->building;
    ctx->building = NULL;
    if (!ctx->profile_failed && !mark_persistent(ctx, p))
        profile_failed(ctx);
    if (!ctx->profile_failed) {
        const char **names = malloc((ctx->tokens.n ? ctx->tokens.n : 1) * sizeof *names);
        if (names) {
            for (size_t i = 0; i < ctx->tokens.n; i++)
                names[i] = ctx->tokens.names[i];
        }
        if (names && cham_profile_set_tokens(p, names, ctx->tokens.n)) {
            cham_profile_set_duration(p, now - ctx->step_start_ns);
            cham_profile_free(ctx->last_profile);
            ctx->last_profile = p;
            ctx->last_profile_step = ctx->step;
            p = NULL;
        } else {
            profile_failed(ctx);
        }
        free(names);
    }
    cham_profile_free(p);
}

/* Segments the pinned pool has taken so far: each costs host time (page
 * pinning, milliseconds per hundred MiB) where it is taken. */
static uint64_t pinned_segments(const cham_context_t *ctx)
{
    if (!ctx->pinned)
        return 0;
    cham_alloc_stats_t st;
    cham_allocator_get_stats(ctx->pinned, &st);
    return st.n_segment_allocs;
}

/* Advisor mode: how far the step's peak went past the budget, counted and
 * logged (the caller allocates; nothing here can move its
 * memory, so this is the one signal that the advice fell short). */
static uint64_t over_budget(cham_context_t *ctx)
{
    if (ctx->config.mode != CHAM_MODE_ADVISOR)
        return 0;
    uint64_t budget = cham_context_budget(ctx);
    if (ctx->step_mem_peak <= budget)
        return 0;
    uint64_t over = ctx->step_mem_peak - budget;
    ctx->stats.over_budget_steps++;
    if (over > ctx->stats.over_budget_bytes)
        ctx->stats.over_budget_bytes = over;
    cham_context_log(ctx, "step %llu: the caller's tensors reached %llu bytes, %llu past the "
                     "budget of %llu (advisor mode moves nothing itself: advised swap-outs "
                     "were missing, late, or not enough)", (unsigned long long)ctx->number,
                     (unsigned long long)ctx->step_mem_peak, (unsigned long long)over,
                     (unsigned long long)budget);
    return over;
}

/* The step's work (cham_work_ns); 0 when an op had no cost. */
static uint64_t step_work(const cham_context_t *ctx)
{
    if (ctx->step_uncosted)
        return 0;
    cham_device_info_t info;
    cham_device_get_info(ctx->dev, &info);
    return cham_work_ns(info.kernel_overhead_ns, ctx->ops_in_step, ctx->step_cost_ns);
}

cham_status_t cham_step_end(cham_context_t *ctx)
{
    CHAM_ASSERT(ctx);
    if (cham_hook_refuse(ctx, "cham_step_end") != CHAM_OK)
        return CHAM_ERR_INVALID_ARG;
    if (ctx->in_op) {
        cham_context_error(ctx, "step end inside op %u: end the op first", ctx->ops_in_step - 1);
        return CHAM_ERR_INVALID_ARG;
    }
    cham_stage_t from = ctx->stages.stage;
    bool ok = true;
    ctx->canon_len = 0;
    if (ctx->config.profiler && ctx->ops_in_step) {
        cham_op_token_t *c = cham_grow(ctx->canon, &ctx->canon_cap, ctx->ops_in_step,
                                       sizeof *c, 1024);
        if (c) {
            ctx->canon = c;
            ctx->canon_len = cham_sequence_canonical(ctx->seq, ctx->seq_blocks,
                                                     ctx->ops_in_step, c);
        }
        ok = c != NULL;
    }
    cham_stage_t to = ctx->config.profiler && ok
                          ? cham_stage_machine_step(&ctx->stages, ctx->seq, ctx->ops_in_step,
                                                    ctx->canon, ctx->canon_len, &ok)
                          : from;
    /* A profiled step, and the one before GenPolicy's first, are timed to
     * their end on the device: a profile's duration is then the device's
     * time for the step (the host runs ahead of the device), and
     * GenPolicy's trials are timed alike. In managed mode that end is the
     * compute stream's, as a loop that runs step after step sees it:
     * copies out that run on past it overlap the next step's first ops.
     * Stable steps that measure the kept policy (loop.c), or one made
     * again on probation (loop_classes.c), end alike.
     * The caller's kernels in advisor mode may run on streams of its own:
     * there the whole device. The device is idle before the next step
     * (below). */
    bool sync = ctx->building || to == CHAM_STAGE_GENPOLICY ||
                (from == CHAM_STAGE_STABLE &&
                 (cham_loop_checking(ctx) || cham_loop_on_probation(ctx)));
    if (sync && ctx->config.mode == CHAM_MODE_ADVISOR)
        cham_device_synchronize(ctx->dev);
    else if (sync)
        cham_stream_synchronize(ctx->compute);
    uint64_t now = cham_device_host_time(ctx->dev);
    ctx->synced_step_ns = sync && ctx->synced ? now - ctx->last_sync_ns : 0;
    /* In advisor mode the caller's kernels may run where the device's
     * clock does not see them (a sim device the caller launches nothing
     * on): trials are then told apart by what their policies predict. */
    if (ctx->config.mode == CHAM_MODE_ADVISOR && sync && ctx->synced && !ctx->synced_step_ns)
        ctx->synced_step_ns = ctx->exec.plan && ctx->exec.plan->view.predicted_step_ns
                                  ? ctx->exec.plan->view.predicted_step_ns : 1;
    ctx->synced = sync;
    if (sync)
        ctx->last_sync_ns = now;
    if (ctx->building)
        finish_profile(ctx, now);
    cham_context_forget_kept(ctx);
    ctx->step++;
    /* Until the step's number moves on below, log lines and the loop speak
     * of the step that ended. */
    if (!ok)
        cham_context_log(ctx, "step %llu: out of host memory keeping the op sequence; the "
                         "stage stays %s", (unsigned long long)ctx->number, cham_stage_name(to));
    ctx->step_over_budget = over_budget(ctx);
    ctx->step_pinned = pinned_segments(ctx) != ctx->pinned_segments;
    ctx->step_work_ns = step_work(ctx);
    cham_exec_carry(ctx);
    ctx->static_changed = false;
    cham_loop_step_end(ctx, from, &to);
    if (sync && (from == CHAM_STAGE_GENPOLICY || to == CHAM_STAGE_GENPOLICY)) {
        /* A trial starts with the device idle: a new policy's pinned
         * memory and the copies that change plans (executor.c,
         * cham_exec_send_away) are the loop's, not the next step's. */
        cham_context_idle(ctx);
    }
    ctx->pinned_segments = pinned_segments(ctx);
    if (to != from) {
        ctx->stats.stage_changes++;
        cham_context_log(ctx, "step %llu: stage %s -> %s (%u ops, length change %.1f%%, "
                         "cosine %.4f)", (unsigned long long)ctx->number, cham_stage_name(from),
                         cham_stage_name(to), ctx->ops_in_step,
                         100.0 * ctx->stages.last_length_change, ctx->stages.last_cosine);
    }
    if (ctx->step_hook) {
        cham_step_ended_t e = {.number = ctx->number, .from = from, .to = to,
                               .backward = ctx->backward,
                               .policies_generated = ctx->stats.policies_generated,
                               .peak_bytes = ctx->step_mem_peak,
                               .over_budget_bytes = ctx->step_over_budget};
        const char *outer = cham_hook_enter(ctx, "the step hook");
        ctx->step_hook(ctx, &e, ctx->step_hook_user);
        ctx->hook = outer;
    }
    ctx->step_mem_peak = ctx->stats.mem_in_use;
    ctx->number++;
    ctx->backward = false;
    /* The next step: detailed in GenPolicy or when asked for. */
    ctx->ops_in_step = 0;
    ctx->step_cost_ns = 0;
    ctx->step_uncosted = false;
    ctx->phase = CHAM_PHASE_FORWARD;
    ctx->block = -1;
    ctx->step_start_ns = cham_device_host_time(ctx->dev);   /* after any sync */
    ctx->profile_failed = false;
    ctx->step_passive = ctx->step_on_demand = 0;
    cham_exec_step_start(ctx);
    if ((to == CHAM_STAGE_GENPOLICY && !cham_loop_static(ctx)) || ctx->profile_requested)
        cham_dispatch_start_profile(ctx);
    return ctx->static_changed ? CHAM_ERR_POLICY_MISMATCH : CHAM_OK;
}

void cham_dispatch_start_profile(cham_context_t *ctx)
{
    ctx->profile_requested = false;
    if (ctx->building)
        return;
    cham_device_info_t info;
    cham_device_get_info(ctx->dev, &info);
    ctx->building = cham_profile_new(ctx->number, info.capacity);
    if (!ctx->building)
        profile_failed(ctx);
    else
        cham_profile_set_fixed_costs(ctx->building, info.kernel_overhead_ns,
                                     info.copy_latency_ns);
}
