/* The policy replayed in op order, the way the executor runs it: the ops
 * one after another on the compute stream at their estimated times, each
 * direction of the link a FIFO queue of copies. A swap-out is queued when
 * its op ends and starts when the copies before it are done; the compute
 * stream waits for it when its block comes back (after free_op). A
 * swap-in is queued when swap_in_op begins, after its own swap-out (one
 * issued at its use also after the copies out of the blocks given back
 * there whose room it takes); the first backward use waits for it. A
 * recomputation runs on the compute stream when swap_in_op begins.
 * Collectives run on a stream of their own (cham_gen_run_op), where the
 * ops have their own costs. An item that wraps is swapped in early in the
 * step, its copy out done in the step before, and out late: the step ends
 * when that copy is done when its block is given back in the next step's
 * first op. One given back later
 * in the next step (free_op > n_ops) lets its copy run on into that step:
 * there the copy delays the copies out behind it, and its block's op and
 * its own swap-in wait for it. The replay then runs the step twice, the
 * second time after the first, and predicts the second.
 *
 * The placement model books transfer time per logical layer in the order
 * the candidates are chosen (by score), so a copy chosen late can take
 * link time that, in the queue, belongs to copies issued before it; its
 * predictions are then too hopeful where the link is the bottleneck, which
 * is exactly where recomputation should win. The replay's waits are what
 * the policy predicts (docs/policy.md, "The replay"). */
#include <stdlib.h>

#include "common/assert.h"
#include "policy/plan-impl.h"
#include "policy/policy-impl.h"

typedef cham_gen_replay_event_t event_t;

static int by_op(const void *a, const void *b)
{
    const event_t *x = a, *y = b;
    if (x->op != y->op)
        return x->op < y->op ? -1 : 1;
    return (x->item > y->item) - (x->item < y->item);
}

/* The op fields of an item the replay orders events by. */
typedef enum { AT_SWAP_OUT, AT_FREE, AT_SWAP_IN, AT_USE } event_kind_t;

/* Items keyed by one op field, sorted by (op, item). */
static event_t *events_by(const cham_policy_t *p, event_kind_t which)
{
    event_t *e = malloc((p->n_items ? p->n_items : 1) * sizeof *e);
    if (!e)
        return NULL;
    for (size_t i = 0; i < p->n_items; i++) {
        const cham_policy_item_t *it = &p->items[i];
        uint32_t op = which == AT_SWAP_OUT ? it->swap_out_op : which == AT_FREE ? it->free_op
                    : which == AT_SWAP_IN  ? it->swap_in_op  : it->use_op;
        e[i] = (event_t){.op = op, .item = (uint32_t)i};
    }
    qsort(e, p->n_items, sizeof *e, by_op);
    return e;
}

static uint64_t max_u64(uint64_t a, uint64_t b)
{
    return a > b ? a : b;
}

/* a + b, saturated: a profile's times may be absurd, never undefined. */
static uint64_t add_ns(uint64_t a, double b)
{
    double t = (double)a + b + 0.5;
    return t >= 1.8e19 ? UINT64_MAX : (uint64_t)t;
}

uint64_t cham_gen_run_op(uint64_t now, double op_ns, const cham_profile_op_t *op,
                         uint64_t *comm_end, uint64_t *comm_wait)
{
    uint64_t end = add_ns(now, op_ns);
    if (op && op->comm_ns > 0) {
        *comm_end = add_ns(max_u64(now, *comm_end), op->comm_ns);
        if (op->comm_waited && *comm_end > end) {
            *comm_wait += *comm_end - end;
            end = *comm_end;
        }
    }
    return end;
}

/* Blocks given back before op `before` (r->freed[*b] on): the compute
 * stream waits for each one's copy out, done at done[item]; the clock
 * after. */
static uint64_t wait_freed(cham_gen_replayer_t *r, cham_policy_t *p, size_t *b, uint64_t before,
                           const uint64_t *done, uint64_t now)
{
    for (; *b < r->n && r->freed[*b].op < before; (*b)++) {
        uint32_t i = r->freed[*b].item;
        if (!p->items[i].recompute && done[i] > now) {
            p->items[i].stall_ns += done[i] - now;
            r->out_wait[i] += done[i] - now;
            r->out_waited += done[i] - now;
            now = done[i];
        }
    }
    return now;
}

static int by_done(const void *a, const void *b)
{
    const cham_gen_room_t *x = a, *y = b;
    return (x->done > y->done) - (x->done < y->done);
}

/* The room the blocks given back at one op make for the swap-ins issued
 * at their use there: each takes the bytes of the copies out done
 * first, so its copy starts when enough of them are (the runtime's
 * allocation waits for them, executor.md, "The OOM path"; the memory
 * free besides is not known here, and there is little where a swap-in
 * has to wait for its use). */
typedef struct room_at {
    size_t n, next;              /* blocks, the first not yet taken */
    uint64_t taken, given;       /* bytes asked for, bytes of the blocks taken */
    uint64_t done;               /* when the last block taken is free */
} room_at_t;

static room_at_t room_at(cham_gen_replayer_t *r, const cham_policy_t *p, size_t b, uint32_t k,
                         const uint64_t *done)
{
    room_at_t a = {0};
    for (; b < r->n && r->freed[b].op == k; b++) {
        uint32_t i = r->freed[b].item;
        if (!p->items[i].recompute)
            r->room[a.n++] = (cham_gen_room_t){.done = done[i], .bytes = p->items[i].bytes};
    }
    qsort(r->room, a.n, sizeof *r->room, by_done);
    return a;
}

/* When bytes more of a's room are free. */
static uint64_t room_take(const cham_gen_replayer_t *r, room_at_t *a, uint64_t bytes)
{
    a->taken += bytes;
    for (; a->next < a->n && a->given < a->taken; a->next++) {
        a->given += r->room[a->next].bytes;
        a->done = r->room[a->next].done;
    }
    return a->done;
}

bool cham_gen_replayer_init(cham_gen_replayer_t *r, const cham_policy_t *p)
{
    size_t n = p->n_items;
    *r = (cham_gen_replayer_t){
        .out = events_by(p, AT_SWAP_OUT), .freed = events_by(p, AT_FREE),
        .in = events_by(p, AT_SWAP_IN), .use = events_by(p, AT_USE),
        .out_done = calloc(n ? n : 1, sizeof *r->out_done),
        .in_done = calloc(n ? n : 1, sizeof *r->in_done),
        .before = calloc(n ? n : 1, sizeof *r->before),
        .out_wait = calloc(n ? n : 1, sizeof *r->out_wait),
        .room = malloc((n ? n : 1) * sizeof *r->room), .n = n};
    if (r->out && r->freed && r->in && r->use && r->out_done && r->in_done && r->before &&
        r->out_wait && r->room)
        return true;
    cham_gen_replayer_free(r);
    return false;
}

void cham_gen_replayer_free(cham_gen_replayer_t *r)
{
    free(r->out);
    free(r->freed);
    free(r->in);
    free(r->use);
    free(r->out_done);
    free(r->in_done);
    free(r->before);
    free(r->out_wait);
    free(r->room);
    *r = (cham_gen_replayer_t){0};
}

void cham_gen_replayer_move(cham_gen_replayer_t *r, uint32_t item, uint32_t op, bool free_op)
{
    event_t *e = free_op ? r->freed : r->in;
    size_t i = 0;
    while (e[i].item != item)
        i++;
    event_t moved = {.op = op, .item = item};
    for (; i > 0 && by_op(&moved, &e[i - 1]) < 0; i--)   /* shift down, then up */
        e[i] = e[i - 1];
    for (; i + 1 < r->n && by_op(&e[i + 1], &moved) < 0; i++)
        e[i] = e[i + 1];
    e[i] = moved;
}

/* One step from time 0, the copies out of the step before still running
 * until `carry` and r->before. Returns when the step ends; *tail: when
 * its last copy out is done. */
static uint64_t run_step(cham_gen_replayer_t *r, cham_policy_t *p, const cham_gen_layers_t *l,
                         size_t n_ops, double h2d_bw, double d2h_bw, uint64_t carry,
                         uint64_t *tail)
{
    size_t n = r->n;
    const event_t *out = r->out, *freed = r->freed, *in = r->in, *use = r->use;
    uint64_t *out_done = r->out_done, *in_done = r->in_done;
    for (size_t i = 0; i < n; i++) {
        p->items[i].stall_ns = 0;
        out_done[i] = in_done[i] = r->out_wait[i] = 0;
    }
    uint64_t now = 0, d2h = carry, h2d = 0;   /* compute clock, queues' ends */
    uint64_t comm = 0;                          /* the comm stream's end */
    r->out_waited = 0;
    p->comm_wait_ns = 0;
    size_t a = 0, b = 0, c = 0, d = 0;
    size_t e = 0;               /* frees in the next step: freed[e..] */
    while (e < n && freed[e].op <= n_ops)
        e++;
    for (uint32_t k = 0; k < n_ops; k++) {
        if (r->op_begin)
            r->op_begin[k] = now - r->out_waited;
        if (r->op_at)
            r->op_at[k] = now;
        now = wait_freed(r, p, &b, k, out_done, now);
        now = wait_freed(r, p, &e, n_ops + (uint64_t)k, r->before, now);
        room_at_t room = {.n = SIZE_MAX};          /* built at the first swap-in at its use */
        for (; c < n && in[c].op == k; c++) {
            cham_policy_item_t *it = &p->items[in[c].item];
            if (it->recompute) {
                now = add_ns(now, (double)it->recompute_ns);
                in_done[in[c].item] = now;
            } else if (it->in_use.overwrites && it->swap_in_op == it->use_op) {
                /* the use overwrites it: no copy, a new block there */
                in_done[in[c].item] = now;
            } else {
                uint64_t away = it->wraps ? r->before[in[c].item] : out_done[in[c].item];
                if (it->swap_in_op == it->use_op) {   /* at its use: in the room given back there */
                    if (room.n == SIZE_MAX)
                        room = room_at(r, p, b, k, out_done);
                    away = max_u64(away, room_take(r, &room, it->bytes));
                }
                h2d = add_ns(max_u64(max_u64(now, h2d), away),
                             (double)cham_gen_transfer_ns(it->bytes, h2d_bw, l->copy_latency_ns));
                in_done[in[c].item] = h2d;
            }
        }
        for (; d < n && use[d].op == k; d++) {
            cham_policy_item_t *it = &p->items[use[d].item];
            if (in_done[use[d].item] > now) {
                it->stall_ns += in_done[use[d].item] - now;
                now = in_done[use[d].item];
            }
        }
        now = cham_gen_run_op(now, l->op_ns[k], l->comm ? &l->comm[k] : NULL, &comm,
                              &p->comm_wait_ns);
        for (; a < n && out[a].op == k; a++) {
            const cham_policy_item_t *it = &p->items[out[a].item];
            bool no_copy = it->out_use.host_backed || it->out_kept;
            if (no_copy)                     /* free once op k is done */
                out_done[out[a].item] = now;
            if (it->recompute || no_copy)
                continue;
            d2h = add_ns(max_u64(now, d2h),
                         (double)cham_gen_transfer_ns(it->bytes, d2h_bw, l->copy_latency_ns));
            out_done[out[a].item] = d2h;
        }
    }
    /* Blocks given back at the next step's first op (items that wrap):
     * the step is not over before their copies are. */
    now = wait_freed(r, p, &b, n_ops + 1, out_done, now);
    *tail = d2h;
    return now;
}

uint64_t cham_gen_total_stall(const cham_policy_t *p)
{
    uint64_t s = p->comm_wait_ns;
    for (size_t i = 0; i < p->n_items; i++)
        s += p->items[i].stall_ns;
    return s;
}

void cham_gen_replayer_run(cham_gen_replayer_t *r, cham_policy_t *p,
                           const cham_gen_layers_t *l, size_t n_ops, double h2d_bw,
                           double d2h_bw)
{
    for (size_t i = 0; i < r->n; i++)
        r->before[i] = 0;
    uint64_t tail, end = run_step(r, p, l, n_ops, h2d_bw, d2h_bw, 0, &tail);
    r->end = end;
    r->carry_ns = 0;
    if (r->n == 0 || r->freed[r->n - 1].op <= n_ops)
        return;                  /* no copy runs on into the next step */
    uint64_t alone = cham_gen_total_stall(p);
    for (size_t i = 0; i < r->n; i++)
        r->before[i] = p->items[i].wraps && r->out_done[i] > end ? r->out_done[i] - end : 0;
    r->end = run_step(r, p, l, n_ops, h2d_bw, d2h_bw, tail > end ? tail - end : 0, &tail);
    uint64_t after = cham_gen_total_stall(p);
    r->carry_ns = after > alone ? after - alone : 0;
}

bool cham_gen_replay(cham_policy_t *p, const cham_gen_layers_t *l, size_t n_ops,
                     double h2d_bw, double d2h_bw)
{
    cham_gen_replayer_t r;
    if (!cham_gen_replayer_init(&r, p))
        return false;
    cham_gen_replayer_run(&r, p, l, n_ops, h2d_bw, d2h_bw);
    p->predicted_carry_ns = r.carry_ns;
    cham_gen_replayer_free(&r);
    return true;
}
