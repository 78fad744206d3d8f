/* Recomputable ops: what the caller declared (cham_op_set_recompute), a
 * storage dropped instead of swapped out, and the op run again when the
 * storage is needed.
 *
 * Nothing is lost: a record exists only while its output's data is what
 * the op made from its inputs as they are now. So a record goes when its
 * output is written again, or when one of its inputs is written or freed
 * while the output is on the device. Once the output is dropped, the
 * record holds a view of each input (they stay alive whatever the caller
 * releases), and an op about to write one of them first recomputes the
 * output.
 *
 * A held input the caller has released keeps its storage alive; if it can
 * itself be made again from state older than the step (rebuildable: a
 * ZeRO-3 weight gathered from its shard), it keeps no memory either: it is
 * dropped, and made again when a record that reads it runs.
 *
 * In managed mode an input the caller releases while its reader's output
 * is still on the device (attention's scores, once softmax made the
 * probabilities) is kept as a ghost when its own op can make it again:
 * dropped at once, its record holding its inputs, so the reader's output
 * can still be dropped and made again through it. docs/executor.md,
 * "Recomputation". */
#include <stdlib.h>

#include "common/assert.h"
#include "common/grow.h"
#include "profile/profile-impl.h"
#include "runtime/runtime-impl.h"

/* Recursion bound: a chain longer than this is a cycle (cannot happen:
 * an op never reads its own output) or a pathological program. */
#define MAX_CHAIN 64

/* A chain of dropped tensors deeper than MAX_CHAIN: an error naming s. */
static cham_status_t too_deep(cham_storage_t *s, int depth)
{
    if (depth <= MAX_CHAIN)
        return CHAM_OK;
    cham_context_error(s->ctx, "recomputing \"%s\": a chain of more than %d dropped tensors",
                       s->label, MAX_CHAIN);
    return CHAM_ERR_INVALID_ARG;
}

static void unlink_input(cham_recompute_input_t *in)
{
    if (in->prev)
        in->prev->next = in->next;
    else
        in->storage->dependents = in->next;
    if (in->next)
        in->next->prev = in->prev;
}

/* Can s be made again without holding memory of this step? Its op is
 * recorded, and each of the op's inputs existed before this step began;
 * as a ghost, whose record holds its inputs, each is there and no ghost
 * itself (no chains of them). */
static bool rebuildable(const cham_storage_t *s, bool as_ghost)
{
    const cham_recompute_t *r = s->recompute;
    if (!r || r->dead)
        return false;
    for (size_t i = 0; i < r->n_inputs; i++) {
        const cham_storage_t *in = r->in[i].storage;
        if (in == s || in->freeing || (as_ghost ? in->ghost != NULL
                                                : in->born_step >= s->ctx->step))
            return false;
    }
    return true;
}

/* Forgets a record: none of its outputs is dropped. While its held views
 * are being released (release_held) it is only marked. */
static void forget(cham_recompute_t *r)
{
    if (r->dead)
        return;
    for (size_t i = 0; i < r->n_inputs; i++) {
        CHAM_ASSERT(r->releasing || !r->in[i].held);
        unlink_input(&r->in[i]);
    }
    /* Managed mode holds the inputs while an output is dropped, so only an
     * advisor's caller can take one away then: the output is lost. */
    for (size_t j = 0; j < r->n_outputs; j++) {
        if (!r->out[j])
            continue;
        CHAM_ASSERT(r->releasing || r->out[j]->residency != CHAM_RESIDENT_DROPPED ||
                    r->out[j]->ctx->config.mode == CHAM_MODE_ADVISOR);
        r->out[j]->lost = r->out[j]->residency == CHAM_RESIDENT_DROPPED && !r->releasing;
        r->out[j]->recompute = NULL;
    }
    r->dead = true;
    if (!r->releasing)
        free(r);
}

/* s is no longer one of its record's outputs (written again, or freed);
 * whether any output is left. */
static bool detach(cham_storage_t *s)
{
    cham_recompute_t *r = s->recompute;
    bool left = false;
    for (size_t j = 0; j < r->n_outputs; j++) {
        if (r->out[j] == s)
            r->out[j] = NULL;
        left = left || r->out[j];
    }
    s->recompute = NULL;
    return left;
}

/* Releases the views a dropped record held. One of them may be the last
 * of an input, whose going forgets this very record: it is then freed
 * here, after the loop. Whether the record is still there. */
static bool release_held(cham_recompute_t *r)
{
    r->releasing = true;
    for (size_t i = 0; i < r->n_inputs; i++) {
        cham_tensor_t *held = r->in[i].held;
        r->in[i].held = NULL;
        cham_view_release(held);
    }
    r->releasing = false;
    if (!r->dead)
        return true;
    free(r);
    return false;
}

/* Holds a view of each input; false (none held) when the host is out of
 * memory. */
static bool hold_inputs(cham_recompute_t *r)
{
    for (size_t i = 0; i < r->n_inputs; i++) {
        if (!(r->in[i].held = cham_storage_new_view(r->in[i].storage))) {
            for (size_t j = 0; j < i; j++) {
                cham_view_release(r->in[j].held);
                r->in[j].held = NULL;
            }
            return false;
        }
    }
    return true;
}

/* A kept or dropped storage holds no memory. */
static void give_back(cham_storage_t *s)
{
    cham_storage_give_back(s);
    s->residency = CHAM_RESIDENT_DROPPED;
}

void cham_recompute_unviewed(cham_storage_t *s)
{
    /* An op's own tensors have the caller's views, so are never taken. */
    if (s->views == 0 || s->views != s->internal_views ||
        s->residency == CHAM_RESIDENT_DROPPED || !rebuildable(s, s->ghost != NULL))
        return;
    cham_recompute_t *r = s->recompute;
    if (r->n_dropped == 0 && !hold_inputs(r))
        return;                /* host OOM: it stays where it is */
    r->n_dropped++;
    give_back(s);
}

/* Does a record whose output is dropped, or that the plan drops, read s? */
static bool read_for_a_drop(const cham_storage_t *s)
{
    for (const cham_recompute_input_t *in = s->dependents; in; in = in->next)
        if ((in->rec->keeps_ghosts || in->rec->n_dropped) && !in->rec->dead)
            return true;
    return false;
}

bool cham_recompute_ghost(cham_storage_t *s, cham_tensor_t *t)
{
    cham_context_t *ctx = s->ctx;
    if (ctx->config.mode != CHAM_MODE_MANAGED || s->freeing || s->ghost ||
        s->residency != CHAM_RESIDENT_DEVICE || s->views != s->internal_views + 1 ||
        !read_for_a_drop(s) || !rebuildable(s, true))
        return false;
    cham_storage_t **g = cham_grow(ctx->ghosts, &ctx->cap_ghosts, ctx->n_ghosts + 1, sizeof *g, 16);
    if (!g)
        return false;          /* host OOM: it goes as the caller asked */
    ctx->ghosts = g;
    ctx->ghosts[ctx->n_ghosts++] = s;
    s->ghost = t;
    t->refs = 1;
    t->internal = true;
    s->internal_views++;
    cham_exec_forget(ctx, s);      /* to the plan it is freed: no item's any more */
    cham_recompute_unviewed(s);    /* dropped, unless the host is out of memory */
    return true;
}

void cham_recompute_sweep_ghosts(cham_context_t *ctx)
{
    /* A ghost released may end a record another ghost's only reader
     * held: again until a pass releases none. */
    for (bool again = true; again;) {
        again = false;
        for (size_t i = 0; i < ctx->n_ghosts;) {
            cham_storage_t *s = ctx->ghosts[i];
            if (s->dependents) {
                i++;
                continue;
            }
            ctx->ghosts[i] = ctx->ghosts[--ctx->n_ghosts];
            cham_tensor_t *t = s->ghost;
            s->ghost = NULL;
            cham_view_release(t);
            again = true;
        }
    }
}

cham_status_t cham_op_set_recompute(cham_context_t *ctx, uint64_t tag)
{
    CHAM_ASSERT(ctx);
    const char *why = NULL;
    cham_tensor_t **ts = ctx->op_tensors;
    size_t n_in = ctx->op_inputs;
    if (cham_hook_refuse(ctx, "cham_op_set_recompute") != CHAM_OK)
        return CHAM_ERR_INVALID_ARG;
    if (!ctx->in_op)
        why = "no op is being dispatched (call it between cham_op_begin and cham_op_end)";
    else if (ctx->config.mode == CHAM_MODE_MANAGED && !ctx->recompute_hook)
        why = "no recompute hook (cham_context_on_recompute)";
    else if (ctx->op_recomputable)
        why = "the op was declared recomputable already";
    else if (ctx->op_outputs == 0)
        why = "the op writes no tensor";
    if (why) {
        cham_context_error(ctx, "cham_op_set_recompute (step %llu, op %u): %s",
                           (unsigned long long)ctx->number,
                           ctx->ops_in_step ? ctx->ops_in_step - 1 : 0, why);
        return CHAM_ERR_INVALID_ARG;
    }
    size_t n_out = ctx->op_outputs;
    cham_tensor_t *const *outs = ts + n_in;
    const cham_tensor_t *bad = NULL;
    for (size_t j = 0; j < n_out && !why; j++) {
        cham_storage_t *o = outs[j]->storage;
        bad = outs[j];
        if (outs[j]->offset != 0 || outs[j]->bytes != o->bytes)
            why = "an output is a view of part of a storage; the rest would be lost";
        for (size_t i = 0; i < n_in && !why; i++)
            if (ts[i]->storage == o)
                why = "it reads a tensor it writes";
        for (size_t k = 0; k < j && !why; k++)
            if (outs[k]->storage == o)
                why = "it writes one storage twice";
    }
    if (why) {
        cham_context_error(ctx, "cham_op_set_recompute (step %llu, op %u, output \"%s\"): %s",
                           (unsigned long long)ctx->number, ctx->ops_in_step - 1, bad->label,
                           why);
        return CHAM_ERR_INVALID_ARG;
    }
    /* Each input as passed (the hook gets them in order), then the
     * outputs' storages and sizes. */
    cham_recompute_t *r = malloc(sizeof *r + n_in * sizeof r->in[0] +
                                 n_out * (sizeof *r->out + sizeof *r->out_bytes));
    if (!r) {
        cham_context_error(ctx, "cham_op_set_recompute: out of host memory");
        return CHAM_ERR_HOST_OOM;
    }
    *r = (cham_recompute_t){.tag = tag, .cost_ns = ctx->op_cost_ns, .n_outputs = n_out,
                            .n_inputs = n_in};
    r->out = (cham_storage_t **)(void *)&r->in[n_in];
    r->out_bytes = (size_t *)(void *)&r->out[n_out];
    for (size_t i = 0; i < n_in; i++) {
        cham_recompute_input_t *in = &r->in[i];
        *in = (cham_recompute_input_t){.rec = r, .storage = ts[i]->storage,
                                       .offset = ts[i]->offset, .bytes = ts[i]->bytes};
        in->next = in->storage->dependents;
        if (in->next)
            in->next->prev = in;
        in->storage->dependents = in;
    }
    for (size_t j = 0; j < n_out; j++) {
        cham_storage_t *o = outs[j]->storage;
        CHAM_ASSERT(!o->recompute);    /* written by this op: its record went */
        r->out[j] = o;
        r->out_bytes[j] = o->bytes;
        o->recompute = r;
    }
    ctx->op_recomputable = true;
    if (ctx->building && !ctx->profile_failed)
        cham_profile_set_recomputable(ctx->building);
    return CHAM_OK;
}

void cham_recompute_storage_gone(cham_storage_t *s)
{
    /* A record with a dropped output holds a view of s, so none is. */
    while (s->dependents)
        forget(s->dependents->rec);
    cham_recompute_t *r = s->recompute;
    if (!r)
        return;
    if (s->residency == CHAM_RESIDENT_DROPPED) {   /* never needed again */
        s->residency = CHAM_RESIDENT_HOST;
        r->n_dropped--;
    }
    bool left = detach(s);
    /* With no output dropped any more, the inputs it held may go. */
    if (r->n_dropped == 0 && r->n_inputs && r->in[0].held && !release_held(r))
        return;                /* released, it was forgotten on the way */
    if (!left)
        forget(r);
}

/* Advisor mode: a view of s the caller holds, as the op saw it if there
 * is one (same offset and length), else any; NULL when it holds none. */
static cham_tensor_t *caller_view(cham_storage_t *s, size_t offset, size_t bytes)
{
    cham_tensor_t *any = NULL;
    for (cham_tensor_t *v = s->view_list; v; v = v->next_view) {
        if (v->internal)
            continue;
        if (v->offset == offset && v->bytes == bytes)
            return v;
        any = any ? any : v;
    }
    return any;
}

static cham_status_t advise(cham_storage_t *s, bool needed, int depth)
{
    cham_context_t *ctx = s->ctx;
    cham_recompute_t *r = s->recompute;
    if (s->advice_pin == ctx->pin) {   /* already in this op's list */
        cham_exec_advise(ctx, CHAM_ACTION_RECOMPUTE, s->view_list, needed, 0);
        return CHAM_OK;
    }
    if (!r) {
        cham_context_error(ctx, "step %llu, op %u: \"%s\" was dropped, and an input of the op "
                           "that made it was released before it was made again: it cannot "
                           "be (advisor mode: keep the inputs of a dropped tensor, "
                           "cham_tensor_recompute_inputs)", (unsigned long long)ctx->number,
                           ctx->ops_in_step ? ctx->ops_in_step - 1 : 0, s->label);
        return CHAM_ERR_INVALID_ARG;
    }
    if (too_deep(s, depth) != CHAM_OK)
        return CHAM_ERR_INVALID_ARG;
    /* Inputs first, as the caller will carry the actions out in order. */
    for (size_t i = 0; i < r->n_inputs; i++) {
        cham_storage_t *in = r->in[i].storage;
        cham_status_t st = in->residency == CHAM_RESIDENT_DROPPED ? advise(in, true, depth + 1)
                                                                  : cham_storage_prepare(in);
        if (st != CHAM_OK)
            return st;
    }
    size_t which = 0;
    while (r->out[which] != s)
        which++;
    if (cham_exec_advise(ctx, CHAM_ACTION_RECOMPUTE, s->view_list, needed, 0)) {
        ctx->actions[ctx->n_actions - 1].tag = r->tag;
        ctx->actions[ctx->n_actions - 1].which = which;
    }
    return CHAM_OK;
}

cham_status_t cham_recompute_advise(cham_storage_t *s, bool needed)
{
    CHAM_ASSERT(s->ctx->config.mode == CHAM_MODE_ADVISOR && s->residency == CHAM_RESIDENT_DROPPED);
    return advise(s, needed, 0);
}

static cham_status_t advisor_report(cham_tensor_t *t, const char *what, const char **why)
{
    cham_storage_t *s = t->storage;
    if (cham_hook_refuse(s->ctx, what) != CHAM_OK)
        return CHAM_ERR_INVALID_ARG;
    if (s->ctx->config.mode != CHAM_MODE_ADVISOR)
        *why = "only in advisor mode; in managed mode Chameleon drops and recomputes itself";
    else if (s->lost)
        *why = "it was dropped and an input of its op was released: it cannot be made again";
    else if (!s->recompute)
        *why = "no op declared recomputable (cham_op_set_recompute) made it, or it was "
               "written since";
    else if (s->recompute->stale && s->residency == CHAM_RESIDENT_DEVICE)
        *why = "an input of its op was written since: it can only be swapped";
    if (!*why)
        return CHAM_OK;
    cham_context_error(s->ctx, "%s \"%s\": %s", what, t->label, *why);
    return CHAM_ERR_INVALID_ARG;
}

cham_status_t cham_tensor_dropped(cham_tensor_t *t)
{
    CHAM_ASSERT(t);
    const char *why = NULL;
    cham_status_t st = advisor_report(t, "cham_tensor_dropped of", &why);
    if (st != CHAM_OK)
        return st;
    cham_storage_t *s = t->storage;
    cham_context_t *ctx = s->ctx;
    why = s->residency != CHAM_RESIDENT_DEVICE ? "it is not on the device"
          : cham_storage_in_flight(s) && !cham_storage_advised_now(s, CHAM_ACTION_DROP)
              ? CHAM_IN_FLIGHT
              : NULL;
    if (why) {
        cham_context_error(ctx, "cham_tensor_dropped of \"%s\": %s", t->label, why);
        return CHAM_ERR_INVALID_ARG;
    }
    s->advised = false;
    s->ptr = NULL;
    s->residency = CHAM_RESIDENT_DROPPED;
    s->recompute->n_dropped++;
    cham_context_mem_add(ctx, -(int64_t)s->bytes);
    ctx->stats.drops++;
    ctx->stats.bytes_dropped += s->bytes;
    cham_dispatch_note_swap(ctx, CHAM_SWAP_OUT, s, false, true);
    return CHAM_OK;
}

cham_status_t cham_tensor_recomputed(cham_tensor_t *t, void *device_ptr)
{
    CHAM_ASSERT(t);
    const char *why = NULL;
    cham_status_t st = advisor_report(t, "cham_tensor_recomputed of", &why);
    if (st != CHAM_OK)
        return st;
    cham_storage_t *s = t->storage;
    cham_context_t *ctx = s->ctx;
    if (s->residency != CHAM_RESIDENT_DROPPED || !device_ptr) {
        cham_context_error(ctx, "cham_tensor_recomputed of \"%s\": %s", t->label,
                           device_ptr ? "it was not dropped (cham_tensor_dropped)"
                                      : "device_ptr is NULL");
        return CHAM_ERR_INVALID_ARG;
    }
    cham_recompute_t *r = s->recompute;
    s->ptr = device_ptr;
    s->residency = CHAM_RESIDENT_DEVICE;
    cham_context_mem_add(ctx, (int64_t)s->bytes);
    ctx->stats.recomputes++;
    /* Advised ahead of its use (advice_pin of an earlier op) or for this
     * op's use: the action said which; the planned ones are not needed. */
    bool planned = s->advised;
    s->advised = false;
    if (!planned) {
        ctx->stats.on_demand_recomputes++;
        ctx->step_on_demand++;
    }
    cham_dispatch_note_swap(ctx, CHAM_SWAP_IN, s, false, true);
    if (--r->n_dropped == 0 && r->stale)
        forget(r);
    return CHAM_OK;
}

size_t cham_tensor_recompute_inputs(const cham_tensor_t *t, cham_tensor_t **inputs, size_t max)
{
    CHAM_ASSERT(t && (inputs || max == 0));
    const cham_recompute_t *r = t->storage->recompute;
    if (!r)
        return 0;
    for (size_t i = 0; i < r->n_inputs && i < max; i++)
        inputs[i] = caller_view(r->in[i].storage, r->in[i].offset, r->in[i].bytes);
    return r->n_inputs;
}

cham_status_t cham_recompute_before_write(cham_storage_t *s)
{
    if (s->ctx->config.mode == CHAM_MODE_ADVISOR) {
        /* The caller makes them again before this op's kernels; each
         * record goes once nothing of it is dropped any more. */
        for (cham_recompute_input_t *in = s->dependents; in;) {
            cham_recompute_t *r = in->rec;
            for (size_t j = 0; j < r->n_outputs; j++) {
                if (!r->out[j] || r->out[j]->residency != CHAM_RESIDENT_DROPPED)
                    continue;
                cham_status_t st = advise(r->out[j], true, 0);
                if (st != CHAM_OK)
                    return st;
            }
            r->stale = true;
            if (r->n_dropped > 0) {
                in = in->next;
                continue;
            }
            forget(r);         /* may unlink more than `in`: from the top */
            in = s->dependents;
        }
        return CHAM_OK;
    }
    /* Each round recomputes a dropped dependent (it needs s as it is now)
     * or forgets one that is on the device; a recomputation may forget
     * others on the way (an input freed), so the list is read afresh. */
    while (s->dependents) {
        cham_recompute_t *r = s->dependents->rec;
        if (r->n_dropped == 0) {
            forget(r);
            continue;
        }
        size_t j = 0;
        while (!r->out[j] || r->out[j]->residency != CHAM_RESIDENT_DROPPED)
            j++;               /* n_dropped > 0: one is */
        cham_storage_t *o = r->out[j];
        cham_status_t st = cham_storage_recompute(o, CHAM_SWAP_ON_DEMAND);
        if (st != CHAM_OK)
            return st;
        /* Kept through the op being begun: making room for the next one
         * must not drop it again. r may be gone: the list is read again. */
        o->pin = s->ctx->pin;
    }
    return CHAM_OK;
}

double cham_recompute_cost(const cham_storage_t *s)
{
    const cham_recompute_t *r = s->recompute;
    return r && !r->dead ? r->cost_ns : -1;
}

void cham_recompute_written(cham_storage_t *s)
{
    cham_recompute_t *r = s->recompute;
    if (r && !detach(s) && r->n_dropped == 0)
        forget(r);
}

cham_status_t cham_storage_drop(cham_storage_t *s)
{
    cham_context_t *ctx = s->ctx;
    cham_recompute_t *r = s->recompute;
    const char *why = !r                                      ? "it was not made by a "
                                                                "recomputable op, or was "
                                                                "written since"
                      : s->residency != CHAM_RESIDENT_DEVICE  ? "it is not on the device"
                      : cham_storage_in_flight(s)             ? CHAM_IN_FLIGHT
                                                              : NULL;
    if (why) {
        cham_context_error(ctx, "drop of \"%s\": %s", s->label, why);
        return CHAM_ERR_INVALID_ARG;
    }
    if (r->n_dropped == 0 && !hold_inputs(r)) {
        cham_context_error(ctx, "drop of \"%s\": out of host memory", s->label);
        return CHAM_ERR_HOST_OOM;
    }
    r->n_dropped++;
    /* The block's readers so far are on the compute stream, where its next
     * user will be too, and on the caller's stream if it recorded one. */
    give_back(s);
    ctx->stats.drops++;
    ctx->stats.bytes_dropped += s->bytes;
    cham_dispatch_note_swap(ctx, CHAM_SWAP_OUT, s, false, true);
    return CHAM_OK;
}

cham_status_t cham_tensor_drop(cham_tensor_t *t)
{
    CHAM_ASSERT(t);
    cham_storage_t *s = t->storage;
    if (cham_hook_refuse(s->ctx, "cham_tensor_drop") != CHAM_OK)
        return CHAM_ERR_INVALID_ARG;
    if (s->ctx->config.mode != CHAM_MODE_MANAGED) {
        cham_context_error(s->ctx, "drop of \"%s\": managed mode only", s->label);
        return CHAM_ERR_INVALID_ARG;
    }
    return cham_storage_drop(s);
}

static cham_status_t recompute(cham_storage_t *s, cham_swap_cause_t cause, int depth,
                               cham_recompute_t **release);

/* Runs s's op again with s and the op's inputs pinned (the out-of-memory
 * path moves none of them) for the time it takes, and only that: pins the
 * op being begun did not set are taken back after. */
static cham_status_t recompute_pinned(cham_storage_t *s, cham_swap_cause_t cause, int depth)
{
    cham_context_t *ctx = s->ctx;
    cham_recompute_t *r = s->recompute;
    size_t n = r->n_inputs + 1;
    uint64_t saved[2 * 17], *old = n <= 17 ? saved : malloc(2 * n * sizeof *old);
    if (!old) {
        cham_context_error(ctx, "recomputing \"%s\": out of host memory", s->label);
        return CHAM_ERR_HOST_OOM;
    }
    cham_storage_t *pinned[17], **who = n <= 17 ? pinned : malloc(n * sizeof *who);
    if (!who) {
        if (old != saved)
            free(old);
        cham_context_error(ctx, "recomputing \"%s\": out of host memory", s->label);
        return CHAM_ERR_HOST_OOM;
    }
    who[0] = s;
    for (size_t i = 0; i < r->n_inputs; i++)
        who[i + 1] = r->in[i].storage;
    for (size_t i = 0; i < n; i++) {
        old[2 * i] = who[i]->pin;
        old[2 * i + 1] = who[i]->input_pin;
        who[i]->pin = ctx->pin;
        if (i > 0)
            who[i]->input_pin = ctx->pin;
    }
    cham_recompute_t *release = NULL;
    cham_status_t st = recompute(s, cause, depth, &release);
    for (size_t i = n; i-- > 0;) {     /* the same storage twice: the first's */
        who[i]->pin = old[2 * i];
        who[i]->input_pin = old[2 * i + 1];
    }
    /* Only now may the inputs go (releasing the last view frees one): the
     * kernels reading them are queued on the compute stream, ahead of any
     * reuse of their blocks. */
    if (release)
        release_held(release);
    if (old != saved)
        free(old);
    if (who != pinned)
        free(who);
    return st;
}

/* *release: the record whose held views may go once the pins are back
 * (no output of it dropped any more), or NULL. */
static cham_status_t recompute(cham_storage_t *s, cham_swap_cause_t cause, int depth,
                               cham_recompute_t **release)
{
    cham_context_t *ctx = s->ctx;
    cham_recompute_t *r = s->recompute;
    CHAM_ASSERT(r && s->residency == CHAM_RESIDENT_DROPPED);
    if (too_deep(s, depth) != CHAM_OK)
        return CHAM_ERR_INVALID_ARG;
    /* Inputs first, each kept where it is while the others come
     * (recompute_pinned pinned them). */
    for (size_t i = 0; i < r->n_inputs; i++) {
        cham_storage_t *in = r->in[i].storage;
        cham_status_t st = in->residency == CHAM_RESIDENT_DROPPED
                               ? recompute_pinned(in, cause, depth + 1)
                               : cham_storage_prepare(in);
        if (st != CHAM_OK)
            return st;
    }
    cham_status_t st = cham_runtime_alloc(ctx, s, "recomputation of", &s->block);
    if (st != CHAM_OK)
        return st;
    /* Addresses: the inputs, then each output: s's new block, scratch for
     * the others (their own data, wherever it is, stays as it is). */
    size_t n = r->n_inputs + r->n_outputs;
    void *ptrs[32], **addr = n <= 32 ? ptrs : malloc(n * sizeof *addr);
    size_t sizes[32], *bytes = n <= 32 ? sizes : malloc(n * sizeof *bytes);
    cham_tensor_t *made_here[16];
    cham_tensor_t **scratch = r->n_outputs <= 16 ? made_here
                                                 : malloc(r->n_outputs * sizeof *scratch);
    size_t which = 0, made = 0;
    if (!addr || !bytes || !scratch) {
        st = CHAM_ERR_HOST_OOM;
        cham_context_error(ctx, "recomputing \"%s\": out of host memory", s->label);
    }
    for (size_t i = 0; st == CHAM_OK && i < r->n_inputs; i++) {
        addr[i] = (char *)cham_block_ptr(r->in[i].storage->block) + r->in[i].offset;
        bytes[i] = r->in[i].bytes;
    }
    for (size_t j = 0; st == CHAM_OK && j < r->n_outputs; j++) {
        void **a = &addr[r->n_inputs + j];
        bytes[r->n_inputs + j] = r->out_bytes[j];
        if (r->out[j] == s) {
            which = j;
            *a = cham_block_ptr(s->block);
            continue;
        }
        st = cham_tensor_new(ctx, r->out_bytes[j], CHAM_DTYPE_U8, "recompute scratch",
                             &scratch[made]);
        if (st == CHAM_OK)
            *a = cham_tensor_data(scratch[made++]);
    }
    if (st == CHAM_OK) {
        cham_recompute_call_t call = {.tag = r->tag, .stream = ctx->compute, .inputs = addr,
                                      .input_bytes = bytes, .n_inputs = r->n_inputs,
                                      .outputs = addr + r->n_inputs,
                                      .output_bytes = bytes + r->n_inputs,
                                      .n_outputs = r->n_outputs, .which = which};
        const char *outer = cham_hook_enter(ctx, "the recompute hook");
        st = ctx->recompute_hook(ctx, &call, ctx->recompute_hook_user);
        ctx->hook = outer;
        if (st != CHAM_OK && st != CHAM_ERR_HOST_OOM)
            cham_context_error(ctx, "recomputing \"%s\": the recompute hook failed (%s)",
                               s->label, cham_status_string(st));
    }
    /* Scratch goes in stream order, after the kernels that wrote it. */
    for (size_t k = 0; k < made; k++)
        cham_view_release(scratch[k]);
    if (addr != ptrs)
        free(addr);
    if (bytes != sizes)
        free(bytes);
    if (scratch != made_here)
        free(scratch);
    if (st != CHAM_OK) {
        cham_block_free(ctx->mem, s->block);
        s->block = NULL;
        return st;
    }
    s->residency = CHAM_RESIDENT_DEVICE;
    cham_victims_update(s);
    cham_context_mem_add(ctx, (int64_t)s->bytes);
    ctx->stats.recomputes++;
    /* A kept input made again for a reader is the reader's cost, not an
     * event of its own (the caller released it: no profile sees it). */
    bool kept = s->views == s->internal_views;
    if (cause != CHAM_SWAP_PLANNED && !kept) {
        ctx->stats.on_demand_recomputes++;
        ctx->step_on_demand++;
    }
    if (!kept)
        cham_dispatch_note_swap(ctx, CHAM_SWAP_IN, s, false, true);
    if (--r->n_dropped == 0)
        *release = r;          /* no output dropped any more */
    return CHAM_OK;
}

cham_status_t cham_storage_recompute(cham_storage_t *s, cham_swap_cause_t cause)
{
    return recompute_pinned(s, cause, 0);
}
