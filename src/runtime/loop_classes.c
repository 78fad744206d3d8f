/* The loop in sequence classes (docs/executor.md, "Sequence classes"):
 * for a loop whose op sequence changes every few steps, each recurring
 * sequence (classes.c) gets its own trials and kept policy, and the next
 * step gets the policy of the class predicted for it. The loop turns to
 * classes for good once a second sequence recurs where Algorithm 1 has not
 * settled (cham_loop_class_of_step); loop.c then calls
 * cham_loop_classes_end at each step end. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/grow.h"
#include "common/order.h"
#include "profile/profile-impl.h"
#include "runtime/loop-impl.h"
#include "runtime/runtime-impl.h"

cham_class_t *cham_loop_class_of_step(cham_context_t *ctx)
{
    /* The step's class; a second one that recurs (a one-off, the first
     * step or a rare evaluation, does not) turns the loop to classes for
     * good. */
    cham_class_t *c = ctx->config.policy_cache ? cham_class_of(ctx, ctx->seq, ctx->ops_in_step,
                                                               ctx->canon, ctx->canon_len)
                                               : NULL;
    if (!c)
        return NULL;
    cham_class_seen(ctx, c);
    size_t recurring = 0, kept = 0;
    for (size_t i = 0; i < ctx->n_classes; i++) {
        recurring += ctx->classes[i].seen >= 2;
        kept += ctx->classes[i].kept != NULL;
    }
    /* Where Algorithm 1 keeps finding Stable (a change now and then, a
     * policy kept), it stays: classes are for loops it cannot settle. */
    uint64_t settle = 2 * ((uint64_t)ctx->config.warmup_steps + ctx->config.genpolicy_steps + 2);
    bool unsettled = !kept || ctx->step > ctx->last_stable_step + settle;
    if (recurring >= 2 && unsettled && !ctx->class_mode) {
        ctx->class_mode = true;
        cham_context_log(ctx, "step %llu: a second op sequence recurs (class %u): a policy "
                         "per class from now on", (unsigned long long)ctx->number, c->id);
    }
    return c;
}

void cham_loop_keep(cham_class_t *c, cham_plan_t *plan)
{
    cham_plan_retain(plan);
    cham_plan_release(c->kept);
    c->kept = plan;
    cham_class_drop_trials(c);
    cham_plan_release(c->next_trial);
    c->next_trial = NULL;
    c->applied = c->shorts = 0;
    c->timed_ns = c->timed_work = 0;
    c->timed = 0;
}

/* Adds to ids (*n of them, room for as many more as p has model state)
 * the model state p's step uses that p does not keep away from the step's
 * start. false when the host is out of memory. */
static bool used_not_away(const cham_plan_t *p, uint64_t *ids, size_t *n)
{
    uint64_t *away = malloc((p->view.n_items ? p->view.n_items : 1) * sizeof *away);
    if (!away)
        return false;
    size_t n_away = 0;
    for (size_t i = 0; i < p->view.n_items; i++)
        if (p->view.items[i].wraps)
            away[n_away++] = p->view.items[i].storage;
    qsort(away, n_away, sizeof *away, cham_order_u64);
    for (size_t j = 0; j < p->n_state; j++)
        if (!bsearch(&p->state_ids[j], away, n_away, sizeof *away, cham_order_u64))
            ids[(*n)++] = p->state_ids[j];
    free(away);
    return true;
}

/* The model state class c's plans must leave on the device at the step's
 * end (sorted, *n of them; NULL with none or out of host memory): what a
 * class of another sequence that has followed c uses and its kept plan
 * does not want away; *share: the share of c's steps in the history such
 * a class followed. Away across c's step's end, that state would come
 * back before the next step's first op, the compute stream waiting for
 * the copy (executor.c, cham_exec_send_away): Mixtral's shapes on 2
 * layers (ZeRO-1 over 4, `--precision main-grads`, `--accumulate 2`) on
 * the v100-16g at 90% of its peak planned its update steps as if another
 * update came next, sending L0's main gradients (363 ms of link) out
 * after AdamW; the accumulation step brought them back first thing and
 * the update step sent them out again at its start: 406 and 1708 ms a
 * step (docs/executor.md, "Model state the class after uses stays").
 * Only kept plans ask: asked by each other's trials, two classes narrowed
 * each other's plans before either had settled, and Llama 3's shapes on 6
 * layers of 8k tokens (TP 2, main-grads, accumulating over 2) at 70% ran
 * 0.473 s a step against 0.398 s. */
static uint64_t *resident_at_end(cham_context_t *ctx, const cham_class_t *c, size_t *n,
                                 double *share)
{
    *n = 0;
    const cham_plan_t *after[CHAM_CLASS_HISTORY];
    size_t n_after = 0, room = 0;
    unsigned steps = 0, followed = 0;
    for (size_t i = 0; i + 1 < ctx->n_history; i++) {
        if (ctx->history[i] != c->id)
            continue;
        steps++;
        const cham_class_t *d = ctx->history[i + 1] == c->id
                                    ? NULL
                                    : cham_class_by_id(ctx, ctx->history[i + 1]);
        const cham_plan_t *p = d ? d->kept : NULL;
        if (!p)
            continue;
        followed++;
        bool known = false;
        for (size_t j = 0; j < n_after && !known; j++)
            known = after[j] == p;
        if (!known) {
            after[n_after++] = p;
            room += p->n_state;
        }
    }
    *share = steps ? (double)followed / steps : 0;
    uint64_t *ids = room ? malloc(room * sizeof *ids) : NULL;
    bool ok = ids != NULL;
    for (size_t j = 0; ok && j < n_after; j++)
        ok = used_not_away(after[j], ids, n);
    if (!ok) {
        free(ids);
        *n = 0;
        return NULL;
    }
    *n = cham_sort_unique_u64(ids, *n);
    return ids;
}

/* What plan p's step costs a loop where a share `share` of its steps is
 * followed by a class that wants the n storages of `ids` on the device:
 * its predicted step, with the copies it leaves running, and for each of
 * those storages it keeps away across the step's end the copy back before
 * the next step's first op, waited for (ns). (The copy out again when p
 * applies next is not waited for unless its memory is wanted first.) */
static double cost_with_changes(cham_context_t *ctx, const cham_plan_t *p, const uint64_t *ids,
                                size_t n, double share)
{
    cham_device_info_t info;
    cham_device_get_info(ctx->dev, &info);
    double moved = 0;
    for (size_t i = 0; i < p->view.n_items; i++) {
        const cham_policy_item_t *it = &p->view.items[i];
        if (it->wraps && bsearch(&it->storage, ids, n, sizeof *ids, cham_order_u64))
            moved += (double)it->bytes / info.h2d_bandwidth;
    }
    return (double)(p->view.predicted_step_ns + p->view.predicted_carry_ns) +
           share * moved * 1e9;
}

/* Class c's trial kind k from profile with its release delay *delay (in:
 * asked, out: planned). Where classes that follow it want model state on
 * the device at its step's end (resident_at_end), it is planned both ways
 * and the cheaper kept, what the changes of plan would cost counted: a
 * plan that may not keep that state away across the step's end is slower
 * where the state is large and idle long, and each class can only time
 * its own steps. Mixtral's shapes on 2 layers of 4k tokens (ZeRO-3 over
 * 8, the classic allocator, an evaluation every 3 steps) on the v100-16g
 * at 70% ran 1.136 s a step with every trial so planned, against 0.970 s
 * (the same as before the classes asked; simulated). */
static cham_plan_t *class_generate(cham_context_t *ctx, const cham_class_t *c,
                                   const cham_profile_t *profile, size_t k, uint32_t *delay)
{
    size_t n;
    double share;
    uint64_t *ids = resident_at_end(ctx, c, &n, &share);
    uint32_t asked = *delay;
    cham_plan_t *free_plan = cham_loop_generate(ctx, profile, k, c->reserve, NULL, 0, delay);
    if (!n) {
        free(ids);
        return free_plan;
    }
    uint32_t free_delay = *delay;
    *delay = asked;
    cham_plan_t *kept = cham_loop_generate(ctx, profile, k, c->reserve, ids, n, delay);
    double with = kept ? cost_with_changes(ctx, kept, ids, n, share) : INFINITY;
    double without = free_plan ? cost_with_changes(ctx, free_plan, ids, n, share) : INFINITY;
    bool whole = kept && kept->view.predicted_peak <= kept->view.usable;
    bool free_whole = free_plan && free_plan->view.predicted_peak <= free_plan->view.usable;
    cham_plan_t *plan = kept, *other = free_plan;
    if (free_plan && ((free_whole && !whole) || (free_whole == whole && without <= with))) {
        plan = free_plan;
        other = kept;
        *delay = free_delay;
    }
    cham_context_log(ctx, "step %llu: class %u planned with %zu storages of model state left on "
                     "the device at its step's end (classes after it use them and do not want "
                     "them away): %.3f ms a step, with the changes of plan (%.0f%% of its steps "
                     "followed so), against %.3f ms: %s", (unsigned long long)ctx->number, c->id,
                     n, with / 1e6, 100 * share, without / 1e6,
                     plan == kept ? "left there" : "free to go");
    cham_plan_release(other);
    free(ids);
    return plan;
}

/* cham_loop_cover_heavier: a step that ran short starts (or starts again) a hunt
 * of HUNT_STEPS profiled steps; a class's kept policy is made again at
 * most COVER_MAX times, from among at most COVER_HUNT profiled steps, and
 * each time the one before stays on probation for PROBATION steps. */
enum { HUNT_STEPS = 8, COVER_HUNT = 32, COVER_MAX = 4, PROBATION = 8 };

/* The profile's peak without its swaps (0 out of host memory). */
static uint64_t peak_without_swaps(const cham_profile_t *profile)
{
    cham_profile_view_t v;
    cham_profile_get(profile, &v);
    uint64_t *actual = malloc((2 * v.n_ops + 1) * sizeof *actual);
    uint64_t *curve = malloc((2 * v.n_ops + 1) * sizeof *curve);
    uint64_t peak = 0;
    if (actual && curve) {
        cham_profile_memory_curve(profile, actual, curve);
        for (size_t s = 0; s < 2 * v.n_ops; s++)
            peak = curve[s] > peak ? curve[s] : peak;
    }
    free(actual);
    free(curve);
    return peak;
}

/* Trials are timed per work where a class's steps vary (trials.c), but a
 * trial's plan made from a lighter step than the one it runs on falls
 * short there whatever its kind: the trials compared the luck of the draw.
 * Made from the heaviest step seen, each covers the steps it runs on, and
 * the one kept is the kind that runs fastest. Of steps as heavy, the
 * latest: as in GenPolicy, each trial is made from a step that ran the
 * one before, not all from one that ran short on no policy. */
const cham_profile_t *cham_loop_trial_source(cham_class_t *c, const cham_profile_t *fresh)
{
    if (!c || !c->varies)
        return fresh;
    uint64_t peak = fresh ? peak_without_swaps(fresh) : 0;
    if (peak && peak >= c->heaviest_peak) {
        cham_profile_t *copy = cham_profile_copy(fresh);
        if (copy) {
            cham_profile_free(c->heaviest);
            c->heaviest = copy;
            c->heaviest_peak = peak;
        }
    }
    return fresh && c->heaviest ? c->heaviest : fresh;
}

/* A class's kept policy is made from one of its steps, and applied to
 * every step its class is predicted for. Where those weigh more than that
 * one (layers skipped at random: a class holds steps a few layers apart,
 * and a class never predicted runs the most frequent one's policy), it
 * runs short on them, and each passive swap is a copy the step waits for:
 * a GPT-2 skipping a fifth of its layers at random ran 300-430 ms on such
 * steps against 190-226 ms on the others. After a Stable step that ran
 * short, the next HUNT_STEPS steps it applies to are profiled (each ends
 * synchronized, as a trial does) for one that runs short and weighs more
 * than its profile did (the peak without swaps); the kept policy is made
 * again from that step's profile, as it was made (the same trial kind,
 * release delay and reserve). Lighter steps then leave items unmatched,
 * which costs little; the heavier are covered. Where the steps are
 * all alike (a periodic loop), no profiled step weighs more and the hunt
 * ends. In Algorithm 1's mode too: steps of one canonical sequence
 * (profile/canon.c) stay in Stable under one policy however many layers
 * each skips. */
cham_class_t *cham_loop_cover_heavier(cham_context_t *ctx, cham_stage_t from,
                                      const cham_profile_t *fresh)
{
    cham_plan_t *applied = ctx->exec.plan;
    cham_class_t *p = NULL;
    for (size_t i = 0; applied && from == CHAM_STAGE_STABLE && i < ctx->n_classes; i++)
        if (ctx->classes[i].kept == applied)
            p = &ctx->classes[i];
    if (!p)
        return NULL;
    bool ran_short = ctx->step_passive > 0;
    p->applied++;
    p->shorts += ran_short;
    if (ctx->synced_step_ns && ctx->step_work_ns) {
        p->timed_ns += ctx->synced_step_ns;
        p->timed_work += ctx->step_work_ns;
        p->timed++;
    }
    /* Made from a heavier step, it may still run short more often: where a
     * lighter step's blocks come at other points of the step than its
     * profile's, their copies can come later than the plan has them, and a
     * step as heavy that skips other layers is no lighter. Once its share
     * of short steps over PROBATION steps cannot stay within the one
     * before's, that one comes back, and only a step heavier than the one
     * it was made from is made again from: one that skips fewer layers
     * (GPT-2's shapes on 12 layers, each skipped with probability 0.2: a
     * policy made from a step that skipped one ran short on others that
     * skipped one). */
    bool worse = p->uncovered && (uint64_t)p->shorts * p->uncovered_applied >
                                     (uint64_t)p->uncovered_shorts * PROBATION;
    /* Or, covering more, it runs slower than the one before did with its
     * short steps, per work, by more than 5%: made for a step whose
     * peak it cannot cover either, it swaps more on every step (Mixtral's
     * shapes, 4 layers of 8k tokens, each skipped with probability 0.2,
     * on the A100 at 20% of the peak: 12.5-15 s a step before, 20.2 s
     * after). Timed where both have synchronized steps, per their work. */
    bool slower = p->uncovered && p->applied == PROBATION && p->timed_work &&
                  p->uncovered_work &&
                  (double)p->timed_ns * (double)p->uncovered_work >
                      1.05 * (double)p->uncovered_ns * (double)p->timed_work;
    if (p->uncovered && (worse || slower || p->applied == PROBATION)) {
        cham_plan_t *before = p->uncovered;
        p->uncovered = NULL;
        if (worse || slower) {
            char why[192];
            if (worse)
                snprintf(why, sizeof why, "ran short on %u of %u steps, the one before on %u "
                         "of %u", p->shorts, p->applied, p->uncovered_shorts,
                         p->uncovered_applied);
            else   /* the new one's time at the work of the one before's steps */
                snprintf(why, sizeof why, "takes %.3f ms a step, the one before %.3f ms (%u "
                         "and %u steps timed, at the same work)",
                         (double)p->timed_ns / (double)p->timed_work *
                             (double)p->uncovered_work / p->uncovered_timed / 1e6,
                         (double)p->uncovered_ns / p->uncovered_timed / 1e6, p->timed,
                         p->uncovered_timed);
            cham_context_log(ctx, "step %llu: class %u's policy made again %s: that one back, "
                             "until a step heavier than %.3f GiB without swaps runs short",
                             (unsigned long long)ctx->number, p->id, why,
                             (double)applied->view.peak_without_swaps / (1 << 30));
            p->cover_floor = applied->view.peak_without_swaps;
            cham_loop_keep(p, before);
            p->hunt_left = 0;
        }
        cham_plan_release(before);
        return p;
    }
    if (p->uncovered)
        return p;
    if (p->hunt_left && fresh) {
        p->hunt_left--;
        p->hunted++;
        uint64_t peak = ran_short ? peak_without_swaps(fresh) : 0;
        if (peak > applied->view.peak_without_swaps && peak > p->cover_floor) {
            cham_context_log(ctx, "step %llu: ran short under class %u's kept policy, %.3f GiB "
                             "without swaps against its profile's %.3f GiB: the policy made "
                             "again from this step's profile", (unsigned long long)ctx->number,
                             p->id, (double)peak / (1 << 30),
                             (double)applied->view.peak_without_swaps / (1 << 30));
            uint32_t delay = applied->free_delay;
            cham_plan_t *plan = class_generate(ctx, p, fresh, applied->trial, &delay);
            p->covers++;
            p->hunt_left = 0;
            if (plan) {
                /* The check in Stable compared policies made for the
                 * lighter step (it measures the class's steps in a row,
                 * rare where classes come at random): it ends. */
                cham_check_t *k = &ctx->check;
                if (k->n && !k->done && k->class_id == p->id)
                    cham_check_clear(k);
                p->uncovered = cham_plan_retain(applied);
                p->uncovered_applied = p->applied;
                p->uncovered_shorts = p->shorts;
                p->uncovered_ns = p->timed_ns;
                p->uncovered_work = p->timed_work;
                p->uncovered_timed = p->timed;
                cham_loop_keep(p, plan);
                cham_plan_release(plan);
            }
            return p;
        }
    }
    if (ran_short && p->covers < COVER_MAX && p->hunted < COVER_HUNT) {
        if (!p->hunt_left)
            cham_context_log(ctx, "step %llu: ran short under class %u's kept policy: the next "
                             "%d steps it applies to are profiled for a heavier one",
                             (unsigned long long)ctx->number, p->id, HUNT_STEPS);
        p->hunt_left = HUNT_STEPS;
    }
    if (p->hunted >= COVER_HUNT)
        p->hunt_left = 0;
    return p;
}

bool cham_loop_on_probation(const cham_context_t *ctx)
{
    for (size_t i = 0; ctx->exec.plan && i < ctx->n_classes; i++)
        if (ctx->classes[i].kept == ctx->exec.plan && ctx->classes[i].uncovered)
            return true;
    return false;
}

/* c's next trial, made from source (the class's trial source, NULL: no
 * profile to make it from); false when none was made. */
static bool make_next_trial(cham_context_t *ctx, cham_class_t *c, const cham_profile_t *source)
{
    if (!source)
        return false;
    c->next_delay = cham_loop_trial_delay(c->n_trials);
    c->next_trial = class_generate(ctx, c, source, c->n_trials, &c->next_delay);
    return c->next_trial != NULL;
}

/* Makes c's next trial now and says whether it is worth a step: whether
 * its predicted time (per the first trial's work, with its copies carried
 * in) beats the best clean trial's time by more than 2% once scaled by
 * how far that trial missed its own prediction. A class keeps the best
 * of class_trials, fewer than GenPolicy's n, and the trial kinds it did
 * not reach may be the faster: an accumulating Llama 2 (8 layers, ZeRO-3
 * over 8) at a third of its peak on the 910B kept its first accumulation
 * trial, clean at 1298.7 ms (predicted 1268.7 ms), where the third kind
 * (blocks reused 2 ops later) was predicted at 1148.0 ms and ran 1175.1 ms.
 * A partial plan (passive swaps make up the rest) promises nothing: its
 * prediction leaves them out. Not promising, the trial is let go. */
static bool next_trial_promises(cham_context_t *ctx, cham_class_t *c,
                                const cham_profile_t *source, const cham_trial_t *clean)
{
    if (c->next_trial || !clean->predicted_ns || !make_next_trial(ctx, c, source))
        return false;
    const cham_plan_t *next = c->next_trial;
    double missed = (double)clean->step_ns /
                    (double)(clean->predicted_ns + clean->plan->view.predicted_carry_ns);
    double predicted = (double)(cham_loop_per_work(next->view.predicted_step_ns,
                                                   c->trials[0].plan->work_ns, next->work_ns) +
                                next->view.predicted_carry_ns);
    bool whole = next->view.predicted_peak <= next->view.usable;   /* not partial */
    if (whole && predicted * missed < 0.98 * (double)clean->step_ns)
        return true;
    cham_plan_release(c->next_trial);
    c->next_trial = NULL;
    return false;
}

/* The step that ended was of class c; it ran class trial_class's trial
 * (if any) and, when fresh, was profiled. Measures the trial when the
 * prediction was right, keeps the best of config.class_trials
 * (best_trial's, clean ones first), and makes c's next trial from the
 * profile. */
static void class_learn(cham_context_t *ctx, cham_class_t *c, const cham_profile_t *fresh)
{
    const cham_profile_t *source = cham_loop_trial_source(c, fresh);
    cham_class_t *t = cham_class_by_id(ctx, ctx->trial_class);
    ctx->trial_class = 0;
    if (t && t != c) {
        cham_context_log(ctx, "step %llu: was class %u, not the class %u predicted; its trial "
                         "waits for its next step", (unsigned long long)ctx->number, c->id,
                         t->id);
    } else if (t && t->next_trial && ctx->synced_step_ns) {
        cham_trial_t *v = cham_grow(c->trials, &c->cap_trials, c->n_trials + 1, sizeof *v, 4);
        if (v) {
            c->trials = v;
            cham_trial_t *tr = &c->trials[c->n_trials++];
            *tr = (cham_trial_t){.plan = c->next_trial, .free_delay = c->next_delay};
            c->next_trial = NULL;
            cham_loop_measure_trial(ctx, c->trials, c->n_trials - 1, ctx->synced_step_ns,
                                    &c->reserve);
            /* Clean first: a trial is timed from an idle device, but in
             * the loop what its passive swaps leave on the host comes back
             * on demand in the next step, another class's. So a class
             * with no clean trial yet tries on, as long as GenPolicy
             * would (n), while each trial falls less short than the one
             * before (each is made from a profile its predecessor ran);
             * so does one whose clean trials are all more than 2% (more
             * than noise) slower than one that fell short, for a clean one
             * as fast, and then keeps GenPolicy's choice: the fastest
             * unless a clean one is within 10%. A layer-drop class kept a
             * swap-only plan, clean in a 1492 ms trial, over one 10 swaps
             * short in 379 ms, and ran 480 ms a step; trying on found one
             * 2 swaps short in 380 ms, which runs 358-450 ms. An
             * accumulating Llama 2 kept swap-only plans clean 9% slower
             * than ones 5-20 swaps short; trying on, its mean step fell
             * 3.47 -> 3.20 s. So does one whose clean trials are all more
             * than 2% slower than what one that fell short was predicted to
             * take: it fell short of memory, and the next trial plans with
             * the reserve that raised (measure_trial). An accumulating
             * Llama 2's update class kept a swap-only plan (3.46 s) over a
             * recomputing one predicted at 2.76 s and 20 swaps short. Not
             * in advisor mode, where a trial's time leaves out the
             * caller's moves that made it fall short. And so does one
             * whose clean trials all ran more than 25% over what the
             * fastest-predicted of them was predicted to take (its own
             * copies carried in included), far beyond what a prediction
             * misses by: the next trial waits longer before reusing
             * blocks (trial_delay). An accumulating Llama 2 13B with the
             * optimizer on the host kept a clean trial of 5.90 s predicted
             * at 3.34 s and ran 3.86 s a step; at 4 MB more its third
             * trial ran 3.34 s. Nearer, trying on costs more slow trial
             * steps than it finds (a GPT-2 at 10%: 9% slower). */
            uint64_t short_ns = 0, short_predicted_ns = 0, clean_predicted_ns = 0;
            const cham_trial_t *best_clean = NULL;
            for (size_t i = 0; i < c->n_trials; i++) {
                const cham_trial_t *x = &c->trials[i];
                bool clean = cham_trial_clean(x);
                if (x->step_ns && clean && (!best_clean || x->step_ns < best_clean->step_ns))
                    best_clean = x;
                if (x->step_ns && !clean && (!short_ns || x->step_ns < short_ns))
                    short_ns = x->step_ns;
                uint64_t p = x->predicted_ns;
                if (!clean && p && (!short_predicted_ns || p < short_predicted_ns))
                    short_predicted_ns = p;
                p += x->plan->view.predicted_carry_ns;    /* as step_ns has it */
                if (clean && (!clean_predicted_ns || p < clean_predicted_ns))
                    clean_predicted_ns = p;
            }
            uint64_t clean_ns = best_clean ? best_clean->step_ns : 0;
            const cham_trial_t *before = c->n_trials >= 2 ? tr - 1 : NULL;
            bool falls_less_short = !before || tr->passive + tr->on_demand <
                                                   before->passive + before->on_demand;
            bool advisor = ctx->config.mode == CHAM_MODE_ADVISOR;
            bool clean_slower = !advisor && clean_ns && short_ns &&
                                clean_ns > short_ns + short_ns / 50;
            bool short_promised = !advisor && clean_ns && short_predicted_ns &&
                                  clean_ns > short_predicted_ns + short_predicted_ns / 50;
            bool clean_promised = !advisor && clean_ns && clean_predicted_ns &&
                                  clean_ns > clean_predicted_ns + clean_predicted_ns / 4;
            bool try_on = c->n_trials < ctx->config.genpolicy_steps &&
                          ((!clean_ns && falls_less_short) || clean_slower || short_promised ||
                           clean_promised);
            if (!try_on && !advisor && best_clean && c->n_trials >= ctx->config.class_trials &&
                c->n_trials < ctx->config.genpolicy_steps)
                try_on = next_trial_promises(ctx, c, source, best_clean);
            if (c->n_trials >= ctx->config.class_trials && !try_on) {
                cham_plan_t *best =
                    cham_loop_best_trial(ctx, c->trials, c->n_trials,
                                         cham_loop_keep_for(c, clean_slower
                                                                   ? CHAM_KEEP_CLEAN_CLOSE
                                                                   : CHAM_KEEP_CLEAN_FIRST));
                if (best) {
                    cham_loop_check_start(ctx, c->trials, c->n_trials, best, c);
                    cham_loop_keep(c, best);
                }
            }
        }
    }
    if (!c->kept && !c->next_trial)
        make_next_trial(ctx, c, source);
}

/* For a step of class c that has no policy of its own yet: the kept
 * policy of the class whose sequence is most like c's, or NULL. The items
 * it names that c's step also runs (the same blocks, a block more or less,
 * the forward before another ending) are placed by the clock; the rest
 * match nothing. Run on no policy, a step over the budget leans on passive
 * swaps: a layer-drop loop's new classes ran 1.5-2x their planned time. */
static cham_plan_t *stand_in(const cham_context_t *ctx, const cham_class_t *c)
{
    const cham_class_t *best = NULL;
    double best_cos = 0;
    for (size_t i = 0; c && i < ctx->n_classes; i++) {
        const cham_class_t *k = &ctx->classes[i];
        if (k == c || !k->kept)
            continue;
        double cos = cham_sequence_cosine(c->seq, c->len, k->seq, k->len);
        if (cos > best_cos) {
            best = k;
            best_cos = cos;
        }
    }
    return best ? best->kept : NULL;
}

/* The plan for the next step, from the class predicted for it: its kept
 * policy (the stage becomes Stable), its trial (the step is profiled and
 * timed alone), or the nearest class's kept policy (profiled, to learn
 * the class). */
static cham_plan_t *class_choose(cham_context_t *ctx, const cham_class_t *c,
                                 cham_stage_t *to, bool *sync)
{
    uint32_t context, period;
    cham_class_t *p = cham_class_predict(ctx, &context, &period);
    bool passing = !p && ctx->n_history >= 2;
    if (passing) {
        /* A sequence never followed before is taken for a passing change:
         * the class before it comes back. */
        p = cham_class_by_id(ctx, ctx->history[ctx->n_history - 2]);
    }
    cham_plan_t *next = NULL;
    char what[96];
    if (p && p->kept) {
        next = p->kept;
        p->last_used = ctx->step;
        *to = ctx->stages.stage = CHAM_STAGE_STABLE;
        ctx->stats.policy_cache_hits += next != ctx->exec.plan;
        ctx->profile_requested |= p->hunt_left > 0;
        snprintf(what, sizeof what, "its kept policy%s",
                 p->hunt_left ? ", profiled for a heavier step" : "");
    } else {
        if (*to == CHAM_STAGE_STABLE)
            *to = ctx->stages.stage = CHAM_STAGE_WARMUP;
        ctx->profile_requested = true;
        if (p && p->next_trial) {
            next = p->next_trial;
            ctx->trial_class = p->id;
            *sync = !ctx->synced;     /* the trial is timed from an idle device */
            snprintf(what, sizeof what, "its trial policy %zu, profiled", p->n_trials + 1);
        } else if ((next = stand_in(ctx, p ? p : c)) != NULL) {
            snprintf(what, sizeof what, "no policy yet, profiled under the nearest class's");
        } else {
            snprintf(what, sizeof what, "no policy yet, profiled");
        }
    }
    char who[96];
    if (!p)
        snprintf(who, sizeof who, "none predicted");
    else if (passing)
        snprintf(who, sizeof who, "class %u again (a passing change)", p->id);
    else if (period)
        snprintf(who, sizeof who, "class %u (due: every %u steps)", p->id, period);
    else if (!context)
        snprintf(who, sizeof who, "class %u (the most frequent: the context predicts worse)",
                 p->id);
    else
        snprintf(who, sizeof who, "class %u (%u steps of context)", p->id, context);
    cham_context_log(ctx, "step %llu was class %u (seen %u times); next step: %s: %s",
                     (unsigned long long)ctx->number, c->id, c->seen, who, p ? what : "profiled");
    return next;
}

cham_plan_t *cham_loop_classes_end(cham_context_t *ctx, cham_class_t *c, cham_stage_t from,
                                   const cham_profile_t *fresh, cham_stage_t *to, bool *sync)
{
    cham_loop_cover_heavier(ctx, from, fresh);
    class_learn(ctx, c, fresh);
    return class_choose(ctx, c, to, sync);
}
