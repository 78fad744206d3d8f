/* Internals of the workload generator, shared by its files:
 *   model.c   presets, checks, parameter counts, the activation formula
 *   ops.c     op tokens, the held-tensor set, dispatching one op
 *   layer.c   a transformer layer's forward and backward, embedding, head
 *   step.c    model state, the micro-batch schedule, the optimizer step
 * docs/workloads.md describes the model. */
#ifndef CHAM_WORKLOAD_IMPL_H
#define CHAM_WORKLOAD_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "chameleon/chameleon.h"
#include "common/message.h"

/* ---- shapes (model.c and the generator use the same ones) -----------------------*/

static inline uint64_t wl_tokens(const cham_model_config_t *m)
{
    return (uint64_t)m->seq * m->mbs;
}
static inline uint64_t wl_hidden_bytes(const cham_model_config_t *m)
{
    return wl_tokens(m) * m->hidden * cham_dtype_size(m->dtype);
}
/* fp32 statistics a norm keeps per token: mean and 1/std, or 1/rms. */
static inline uint64_t wl_stats_bytes(const cham_model_config_t *m)
{
    return m->arch == CHAM_ARCH_GPT2 ? 8 : 4;
}
static inline uint64_t wl_head_dim(const cham_model_config_t *m)
{
    return m->hidden / m->heads;
}
/* Columns of this device's q, k and v together. */
static inline uint64_t wl_qkv_width(const cham_model_config_t *m)
{
    return (uint64_t)(m->heads + 2 * m->kv_heads) / m->tp * wl_head_dim(m);
}
static inline uint64_t wl_ctx_width(const cham_model_config_t *m)
{
    return (uint64_t)m->heads / m->tp * wl_head_dim(m);
}
/* Fused attention's fp32 log-sum-exp per head and query. */
static inline uint64_t wl_lse_bytes(const cham_model_config_t *m)
{
    return (uint64_t)m->mbs * (m->heads / m->tp) * m->seq * 4;
}
/* Unfused attention's s x s probabilities per head. */
static inline uint64_t wl_scores_bytes(const cham_model_config_t *m)
{
    return (uint64_t)m->mbs * (m->heads / m->tp) * m->seq * m->seq * cham_dtype_size(m->dtype);
}
static inline uint64_t wl_vocab_shard(const cham_model_config_t *m, uint32_t tp)
{
    return ((uint64_t)m->vocab + tp - 1) / tp;
}

/* Parameters of a layer's groups, in the order of its weight storage. */
typedef struct wl_layer_params {
    uint64_t norm1, qkv, out, norm2, mlp;
} wl_layer_params_t;
void wl_layer_params(const cham_model_config_t *m, uint32_t tp, wl_layer_params_t *p);
uint64_t wl_layer_total(const wl_layer_params_t *p);
uint64_t wl_norm_params(const cham_model_config_t *m);
uint64_t wl_embed_params(const cham_model_config_t *m, uint32_t tp);
uint64_t wl_head_params(const cham_model_config_t *m, uint32_t tp);

/* ZeRO over the data-parallel group: whether stage `stage` shards (1 the
 * optimizer states, 2 also the gradients, 3 also the weights), and this
 * rank's share of a group of params. */
static inline bool wl_sharded(const cham_model_config_t *m, uint32_t stage)
{
    return m->dp > 1 && m->zero >= stage;
}
static inline uint64_t wl_shard_of(const cham_model_config_t *m, uint64_t params)
{
    return (params + m->dp - 1) / m->dp;
}
/* Of a group of params, those the optimizer here updates (and keeps master
 * weights and moments for): this rank's shard with ZeRO >= 1. */
static inline uint64_t wl_updated_of(const cham_model_config_t *m, uint64_t params)
{
    return wl_sharded(m, 1) ? wl_shard_of(m, params) : params;
}
/* The types of the weights and gradients the precision keeps, whether it
 * keeps fp32 master weights (not beside fp32 weights), the bytes of
 * optimizer state per updated parameter (master weights if any, two
 * moments), and whether DDP's gradient buckets sit beside the gradients
 * (autocast's data parallelism). */
static inline cham_dtype_t wl_weight_dtype(const cham_model_config_t *m)
{
    return m->precision == CHAM_PRECISION_AUTOCAST ? CHAM_DTYPE_F32 : m->dtype;
}
static inline cham_dtype_t wl_grad_dtype(const cham_model_config_t *m)
{
    return m->precision == CHAM_PRECISION_MASTER ? m->dtype : CHAM_DTYPE_F32;
}
static inline bool wl_master_weights(const cham_model_config_t *m)
{
    return m->precision != CHAM_PRECISION_AUTOCAST;
}
static inline uint64_t wl_optim_bytes(const cham_model_config_t *m)
{
    return 4 * (wl_master_weights(m) ? 3 : 2);
}
static inline bool wl_ddp_buckets(const cham_model_config_t *m)
{
    return m->precision == CHAM_PRECISION_AUTOCAST && m->dp > 1;
}
/* Bytes of the gradient of a group of params as the optimizer reads it:
 * this rank's shard with ZeRO >= 2, in the gradients' type. */
static inline uint64_t wl_grad_bytes_of(const cham_model_config_t *m, uint64_t params)
{
    return (wl_sharded(m, 2) ? wl_shard_of(m, params) : params) *
           cham_dtype_size(wl_grad_dtype(m));
}

/* Model state bytes on this device: weights and gradients in the types
 * the precision keeps them in (DDP's buckets count with the gradients),
 * the optimizer's fp32 states (optim), each whole or this rank's shard.
 * make_state (step.c) sizes its tensors with wl_group_state, so the check
 * before it and the tensors agree. */
typedef struct wl_state {
    uint64_t weights, grads, optim;
    uint64_t host;               /* host_optimizer: the host's pinned bytes (master
                                    weights, moments, the gradients it receives and,
                                    accumulating, their fp32 sum) */
    uint64_t backed;             /* weights the host keeps a copy of (of those) */
} wl_state_t;
/* Adds a group of params to *s, updated on the host (host_optimizer's, or
 * ProTrain's chunk there) or on the device. */
void wl_group_state(const cham_model_config_t *m, uint64_t params, bool host, wl_state_t *s);
/* How many groups in execution order (the embedding, the layers, the head)
 * keep their whole state on the device: ProTrain's n_persist,
 * host_optimizer's device_groups, else all (UINT32_MAX). */
uint32_t wl_device_groups(const cham_model_config_t *m);
/* The whole device: its layers, the embedding and (one stage) the head. */
void wl_device_state(const cham_model_config_t *m, wl_state_t *s);
/* The fewest groups on the device (device_groups, or with protrain
 * n_persist) whose host state fits `host` bytes (every group when none
 * does). */
uint32_t wl_least_device_groups(const cham_model_config_t *m, uint64_t host);
/* False when the state kept on the host (the host's optimizer, ProTrain's
 * chunks) exceeds the pinned host memory `host`, or the device's model
 * state exceeds capacity, or, where it may move (`moves`), capacity and
 * the rest of the host's memory together; err then names the sizes and
 * the settings that drive them. The model must be valid. */
bool wl_state_fits(const cham_model_config_t *m, uint64_t capacity, uint64_t host, bool moves,
                   char *err, size_t err_size);
/* Where the run puts the optimizer (optimizer_place.c). A program: the
 * optimizer on the host with device_groups groups updated on the device,
 * or on the device; with, from a step of it with unlimited memory, that
 * step's time, its profile's lower bound at the run's budget, the host's
 * busy time in it (the host's work: no policy lessens it) and the bound
 * of the host's chain (docs/workloads.md, "The host's chain"). */
typedef struct wl_program {
    bool host;
    uint32_t device_groups;
    double ideal_s, bound_s, host_s;
    double chain_s;              /* the host's chain (wl_chain_t), 0: none */
    double loop_s;               /* a changing loop's bound (wl_loop_bound), 0: none */
} wl_program_t;
/* A lower bound on the program's step under any policy at the budget:
 * a changing loop's where it has one; else its step's. */
double wl_program_bound(const wl_program_t *p);
/* The bound of the program's measured step: the profile's bound, the
 * host's work or its chain, the largest. */
double wl_program_step_bound(const wl_program_t *p);
typedef struct wl_optimizer_choice {
    wl_program_t bound;          /* the smallest wl_program_bound: a lower
                                    bound on every program */
    wl_program_t chosen;
    uint32_t programs;           /* measured */
    uint32_t trials;             /* run to choose (0: the device's, no trial) */
} wl_optimizer_choice_t;
/* How the choice runs trials: trial gives p's Stable step time from a
 * short run of it (INFINITY when it fails), hint another model's choice
 * of groups on the device (UINT32_MAX: none), each called with user. */
typedef struct wl_place_hooks {
    double (*trial)(const wl_program_t *p, void *user);
    uint32_t (*hint)(void *user);
    void *user;
} wl_place_hooks_t;
/* The programs tried so far, the fastest of them (best, best_s) and the
 * fastest host one (best_host, best_host_s; best_host_s INFINITY: none):
 * at most WL_MAX_TRIALS, four finalists and then the fastest host
 * program's neighbours. Initialise best_s and best_host_s to INFINITY. */
#define WL_MAX_TRIALS 10
typedef struct wl_trials {
    const wl_place_hooks_t *hooks;
    wl_program_t tried[WL_MAX_TRIALS];
    uint32_t n, best, best_host;
    double best_s, best_host_s;
} wl_trials_t;
/* Tries p unless it was tried (or WL_MAX_TRIALS were); whether it ran
 * faster than every program of its kind (host or device) before it. */
bool wl_try_program(wl_trials_t *t, const wl_program_t *p);
/* From the fastest host program tried, its neighbours among the host
 * programs [first, groups) on the device: a 25th of the groups apart
 * while faster and on past one slower, then at half that step, a
 * quarter, down to one. Also where the device's program leads: the
 * finalists are guesses, and a neighbour of one may beat it. */
void wl_walk_groups(wl_trials_t *t, uint32_t first, uint32_t groups);
/* Measures every program m's job can run at the budget of rc on the
 * device described by info and chooses: the device's program unless a
 * host one's guessed step is clearly below its; then the fastest of
 * trials of the best by two guesses, the hint's, the device's and the
 * neighbours of the fastest (without hooks: the device's). With
 * loop_steps, a changing loop's programs have their loop's bound over a
 * run of that many steps (wl_loop_bound; it does not change the choice).
 * False when the job has no choice (the host cannot run its optimizer:
 * out is not set). */
bool wl_place_optimizer(const cham_config_t *rc, const cham_device_info_t *info,
                        const cham_model_config_t *m, uint64_t loop_steps,
                        const wl_place_hooks_t *hooks, wl_optimizer_choice_t *out);
/* Measures program m into p's figures at rc's budget (its host and
 * device_groups are the caller's to set; without with_bound, bound_s is
 * left as it is and no profile is made); false when it cannot run or
 * fit. */
bool wl_program_measure(const cham_config_t *rc, const cham_device_info_t *info,
                        const cham_model_config_t *m, bool with_bound, wl_program_t *p);
/* The bound of a loop whose steps change (docs/workloads.md, "The bound
 * of a changing loop"), for program m over a run of `steps` steps, over
 * the last half of them as the run's late mean step: the larger of the
 * mean of those steps' profile bounds at rc's budget (their ops' time
 * alone where the profile's bound finds no fit), the host's mean work a
 * step and the host's chain, from a run with unlimited memory. False when
 * m cannot run or the host is out of memory. */
bool wl_loop_bound(const cham_config_t *rc, const cham_device_info_t *info,
                   const cham_model_config_t *m, uint64_t steps, double *bound_s);
/* The host's chain (docs/workloads.md, "The host's chain"), recorded
 * while program_measure.c measures a host program: which gradient copy
 * each of the host's tasks waits for and which op waits for it. step.c
 * tells it that: the host's stream now waits for the gradient copy of
 * `bytes` queued as op (its tasks queued from now on do too); the host's
 * tasks queued next are group g's; g's update is queued (g's tasks so far
 * come before it), and `bytes_back` of its weights are copied to the
 * device after it; the compute stream waits from op on (w->ops, the op it
 * dispatches next) for g's last update and those weights. */
typedef struct wl_chain wl_chain_t;
void wl_chain_copy(wl_chain_t *c, uint64_t op, uint64_t bytes);
void wl_chain_work(wl_chain_t *c, uint32_t g);
void wl_chain_update(wl_chain_t *c, uint32_t g, uint64_t bytes_back);
void wl_chain_wait(wl_chain_t *c, uint32_t g, uint64_t op);
/* A log hook that drops every line (runs made to measure, not to show). */
void wl_silent_log(const char *line, void *user);
/* m with its training steps all alike: no overflows, evaluations or
 * layer drop (the steps a profile of the job's program is taken from). */
cham_model_config_t wl_training_steps(const cham_model_config_t *m);
/* The host's figures (FLOP/s, memory bandwidth) of rc's device: the
 * config's, else its sim preset's; 0 where neither has them. */
void wl_host_figures(const cham_config_t *rc, double *flops, double *bandwidth);
/* The lower bound of profile at rc's budget on the device info describes
 * (chameleon/policy.h, cham_plan_bound; INFINITY where no policy fits)
 * and, unless floor_s is NULL, its ops' and collectives' time alone;
 * false without host memory. */
bool wl_bound_of(const cham_config_t *rc, const cham_device_info_t *info,
                 const cham_profile_t *profile, bool *feasible, double *bound_s,
                 double *floor_s);
/* At least as many ops as one step of the model dispatches (the op list
 * of docs/workloads.md, counted generously), from the settings alone. */
uint64_t wl_step_ops_bound(const cham_model_config_t *m);

/* Seeded decisions: a hash of (seed, a, b) and a uniform double from it. */
enum { WL_SALT_OVERFLOW = 1u << 30, WL_SALT_DROP, WL_SALT_MOE };
uint64_t wl_hash(uint64_t seed, uint64_t a, uint64_t b);
double wl_uniform(uint64_t seed, uint64_t a, uint64_t b);

/* ---- ops (ops.c) ------------------------------------------------------------------*/

typedef enum wl_op {
    OP_LOAD, OP_EMBED, OP_NORM, OP_QKV, OP_ROPE, OP_FLASH, OP_SCORES, OP_SOFTMAX, OP_CONTEXT,
    OP_OUT, OP_ADD, OP_FC1, OP_GELU, OP_FC2, OP_GATE_UP, OP_SWIGLU, OP_DOWN, OP_ROUTER,
    OP_ROUTE, OP_PERMUTE, OP_COMBINE, OP_HEAD, OP_TO_FLOAT, OP_LOSS,
    OP_LOSS_BWD, OP_TO_FLOAT_BWD, OP_HEAD_BWD, OP_NORM_BWD, OP_QKV_BWD, OP_ROPE_BWD,
    OP_FLASH_BWD, OP_SCORES_BWD, OP_SOFTMAX_BWD, OP_CONTEXT_BWD, OP_OUT_BWD, OP_FC1_BWD,
    OP_GELU_BWD, OP_FC2_BWD, OP_GATE_UP_BWD, OP_SWIGLU_BWD, OP_DOWN_BWD, OP_ROUTER_BWD,
    OP_ROUTE_BWD, OP_PERMUTE_BWD, OP_COMBINE_BWD, OP_EMBED_BWD, OP_GRAD_ACC,
    OP_ALL_REDUCE, OP_REDUCE_SCATTER, OP_ALL_GATHER, OP_SEND, OP_RECV, OP_PIPELINE_WAIT,
    OP_UNSCALE, OP_UPDATE_SCALE, OP_ADAM, OP_GRAD_TO_HOST, OP_PARAM_FROM_HOST,
    OP_KV_WRITE, OP_KV_PREFETCH, OP_KV_STORE, OP_SAMPLE, OP_CAST, OP_BUCKET_COPY,
    WL_N_OPS
} wl_op_t;

/* Returns the status of a failed call (the generator's files share it). */
#define TRY(expr)                                                                             \
    do {                                                                                      \
        cham_status_t st_ = (expr);                                                           \
        if (st_ != CHAM_OK)                                                                   \
            return st_;                                                                       \
    } while (0)

/* An op's arguments: read, written, both. */
#define R(t) {(t), CHAM_ACCESS_READ}
#define W(t) {(t), CHAM_ACCESS_WRITE}
#define RW(t) {(t), CHAM_ACCESS_READ_WRITE}

/* One tensor an op touches and how. Reads are the op's inputs; writes and
 * read-writes (accumulation, in-place collectives) its outputs. */
typedef struct wl_arg {
    cham_tensor_t *t;
    cham_access_mode_t mode;
} wl_arg_t;

#define WL_MAX_ARGS 8

struct cham_workload {
    cham_context_t *ctx;
    cham_device_t *dev;
    cham_device_info_t info;
    cham_model_config_t m;
    cham_op_token_t tok[WL_N_OPS];
    cham_stream_t *compute, *comm;
    cham_event_t *ev_compute, *ev_comm;
    /* The held-tensor set: every handle the generator owns (open
     * addressing on the pointer; tombstones are (void *)1). */
    cham_tensor_t **held;
    size_t held_cap, held_n, held_used;
    /* Model state this device holds: per layer of its stage, then the
     * embedding (index layers) and the final norm and head (layers + 1). */
    uint32_t n_layers;           /* layers of this stage */
    uint32_t n_groups;           /* n_layers + 2 */
    uint64_t *group_params;      /* parameters per group on this device */
    cham_tensor_t **weights;     /* per group: fp16/bf16 (the shard with ZeRO-3) */
    cham_tensor_t **grads;       /* per group: full, or the shard with ZeRO >= 2 */
    cham_tensor_t **master, **adam_m, **adam_v;  /* fp32, the shard with ZeRO >= 1 */
    cham_tensor_t **grad_temp;   /* per group, ZeRO >= 2: the full gradient
                                    being accumulated before its reduce-scatter */
    cham_tensor_t **bucket;      /* per group, wl_ddp_buckets: DDP's bucket */
    cham_tensor_t **cast;        /* per group, autocast: its weights in the compute
                                    type, from the forward's first matmul until
                                    the group's backward is done */
    cham_tensor_t *scale, *found_inf;
    /* host_optimizer: per group the host's pinned buffers (the gradients
     * it receives, then the weights it sends back; master weights and
     * moments; with accumulate > 1 the fp32 sum of the steps' gradients),
     * the copy stream and the host stream. */
    void **host_grad, **host_optim, **host_sum;
    cham_stream_t *offload, *host;
    cham_event_t *ev_offload, *ev_host;
    /* host_optimizer, protrain: weights from the host on their own stream,
     * and per group the end of its last update on the host (recorded at
     * the start, so that a first wait waits for nothing). protrain
     * (chunks.c): per group the event of its last fetch and its use in the
     * chunk buffers (an LRU clock; 0: not on the device). */
    cham_stream_t *fetch;
    cham_event_t **ev_update, **ev_fetch;
    uint64_t *chunk_used, chunk_clock;
    uint64_t chunk_buffer;       /* bytes of a buffer: the largest such chunk's */
    uint32_t chunks_resident;
    /* host_optimizer updating in the backward: the groups whose gradient
     * the host has and whose update is not queued yet (the host's worker
     * takes the one needed first whenever it is free), and an event at
     * the host stream's tail. */
    uint32_t *pending;
    size_t n_pending;
    cham_event_t *ev_tail;
    bool backward;               /* the step's backward is running */
    bool skip_update;            /* this step's gradients overflow */
    bool update;                 /* this step ends with the optimizer (accumulate) */
    wl_layer_params_t lp;        /* a layer's groups on this device */
    uint32_t n_micro;            /* micro-batches per step on this device */
    /* Per step. */
    uint64_t step;
    uint64_t ops;                /* ops dispatched so far */
    bool timing;                 /* adding kernel times to fwd_ns */
    double fwd_ns;               /* roofline time of one micro-batch's forward */
    uint64_t expert_max;         /* MoE: the busiest expert's tokens this step */
    uint32_t dropped;            /* layers skipped this step */
    bool evaluating;             /* the step's evaluation forward is running */
    /* Inference (infer.c): per layer its KV cache on the device (with
     * kv_offload only while its layer runs) and in pinned host memory with
     * the event of its last store (kv_offload); the tokens the last step
     * chose, which the next step embeds. */
    cham_tensor_t **kv;
    void **host_kv;
    cham_event_t **ev_kv;
    cham_tensor_t *next_ids;
    wl_chain_t *chain;           /* being measured (program_measure.c), or NULL */
    char label[64];
    char error[256];             /* the generator's own failures */
};

/* Group indices of the embedding and of the final norm and head. */
static inline uint32_t wl_embed_group(const cham_workload_t *w)
{
    return w->n_layers;
}
static inline uint32_t wl_head_group(const cham_workload_t *w)
{
    return w->n_layers + 1;
}
/* The gradient a backward op of group g accumulates into (created when
 * ZeRO >= 2 keeps only a shard), and the end of group g's backward for
 * micro-batch mb: the data-parallel reduction it starts. */
cham_status_t wl_grad(cham_workload_t *w, uint32_t g, cham_tensor_t **out);
cham_status_t wl_grad_done(cham_workload_t *w, uint32_t g, uint32_t mb);
/* The host's optimizer (host_optimizer, ProTrain's chunks on the host):
 * group g's complete gradient to the host's buffer on the offload stream,
 * then released; the host unscales and checks it while the backward goes
 * on. */
cham_status_t wl_grads_to_host(cham_workload_t *w, uint32_t g);
/* AdamW on group g's state in the host's buffers, on the host stream; the
 * weights in the compute type replace the gradient there. */
cham_status_t wl_host_adamw(cham_workload_t *w, uint32_t g);
/* Without an update (an overflow, an accumulating step), the weights in
 * the compute type cast again from the fp32 master weights into that
 * buffer, on the host stream: the gradient took their place. */
cham_status_t wl_host_restore(cham_workload_t *w, uint32_t g);
/* The weights of group g as the forward or backward reads them: a new
 * handle (ZeRO-3 gathers the full weights first). */
cham_status_t wl_weights(cham_workload_t *w, uint32_t g, cham_tensor_t **out);
/* The same for a matmul: with autocast, the weights cast to the compute
 * type (made at the first use after the last wl_uncast). */
cham_status_t wl_matmul_weights(cham_workload_t *w, uint32_t g, cham_tensor_t **out);
/* autocast: drops group g's cast (its backward is done). */
void wl_uncast(cham_workload_t *w, uint32_t g);
/* autocast: leaving the autocast region after the loss drops the casts no
 * backward keeps: every one after an evaluation, a checkpointed layer's
 * after a training forward (its recomputation casts again). */
void wl_autocast_exit(cham_workload_t *w, bool training);

bool wl_ops_init(cham_workload_t *w, char *err, size_t err_size);
/* A new tensor in the held set, labelled with a printf format. */
cham_status_t wl_new(cham_workload_t *w, uint64_t bytes, cham_dtype_t dtype,
                     cham_tensor_t **out, const char *fmt, ...) CHAM_PRINTF(5, 6);
/* A view [offset, offset + bytes) of base in the held set. */
cham_status_t wl_view(cham_workload_t *w, cham_tensor_t *base, uint64_t offset, uint64_t bytes,
                      cham_tensor_t **out);
/* Releases a held handle and clears *t (NULL is fine). */
void wl_drop(cham_workload_t *w, cham_tensor_t **t);
/* Releases every held handle (teardown). */
void wl_drop_all(cham_workload_t *w);
/* An event per parameter group in *out (NULL on host OOM). */
cham_status_t wl_events_new(cham_workload_t *w, cham_event_t ***out);
/* Frees them (NULL is fine) and clears *ev. */
void wl_events_free(cham_workload_t *w, cham_event_t ***ev);

/* Dispatches op on the compute stream: begin, one kernel touching the args
 * (bytes: their sizes, read-writes twice, unless bytes > 0), end. */
cham_status_t wl_run(cham_workload_t *w, wl_op_t op, const wl_arg_t *args, size_t n,
                     double flops, double bytes);
/* A collective or point-to-point transfer on the communication stream,
 * after the compute stream's work so far; link_bytes cross the link. With
 * `blocking` the compute stream waits for it (tensor parallelism); without,
 * only wl_comm_join does (gradient reduction overlapping the backward). */
cham_status_t wl_comm(cham_workload_t *w, wl_op_t op, const wl_arg_t *args, size_t n,
                      double link_bytes, double wait_ns, bool blocking);
cham_status_t wl_comm_join(cham_workload_t *w);
/* The copy of tensor t to a pinned host buffer or from it, on stream s
 * inside op, after the compute stream's work so far and (to_host) the
 * comm stream's or (from the host) event `after`; the compute stream does
 * not wait. */
cham_status_t wl_offload(cham_workload_t *w, wl_op_t op, cham_tensor_t *t, void *host,
                         bool to_host, cham_stream_t *s, cham_event_t *after);
/* The same, without holding t's block for s: the caller makes the compute
 * stream wait for s before t is released, so the block returns to the
 * compute stream's pool in stream order (a held block waits for the host
 * to see the copy done, and a host running ahead of the device allocates
 * anew meanwhile). */
cham_status_t wl_offload_ordered(cham_workload_t *w, wl_op_t op, cham_tensor_t *t, void *host,
                                 bool to_host, cham_stream_t *s, cham_event_t *after);
/* Work on the host stream over pinned host memory (host figures time it). */
cham_status_t wl_host_run(cham_workload_t *w, const char *label, const cham_access_t *acc,
                          size_t n, double flops);
/* The compute stream waits for stream s's work so far (ev: s's event). */
cham_status_t wl_join(cham_workload_t *w, cham_stream_t *s, cham_event_t *ev);
/* The roofline time of a kernel on this device, ns. */
double wl_kernel_ns(const cham_workload_t *w, double flops, double bytes);
/* The recompute hook (chameleon/runtime.h): launches the op of a dropped
 * tensor again, from the tag wl_run gave it. */
cham_status_t wl_recompute(cham_context_t *ctx, const cham_recompute_call_t *call, void *user);

/* Ring collectives: bytes each device sends for `bytes` of data over n. */
static inline double wl_all_reduce_bytes(uint64_t bytes, uint32_t n)
{
    return n > 1 ? 2.0 * (double)(n - 1) / n * (double)bytes : 0;
}
static inline double wl_gather_bytes(uint64_t bytes, uint32_t n)
{
    return n > 1 ? (double)(n - 1) / n * (double)bytes : 0;
}

/* ---- ProTrain's runtime (chunks.c) ----------------------------------------------*/

/* Whether the host updates group g (not one of the first
 * wl_device_groups in execution order: embedding, layers, head). */
bool wl_host_updates(const cham_workload_t *w, uint32_t g);
/* Group g's place in execution order: the embedding 0, the layers, the
 * head n_layers + 1. */
uint32_t wl_exec_index(const cham_workload_t *w, uint32_t g);
/* Whether group g is ProTrain's chunk on the host (fetched when used). */
bool wl_on_host(const cham_workload_t *w, uint32_t g);
/* The group whose weights the step reads after group g's: forward in
 * execution order, from the head into the backward, then backward down to
 * the first layer (the embedding's backward reads no weights), past the
 * layers this step skips. UINT32_MAX: none. */
uint32_t wl_next_group(const cham_workload_t *w, uint32_t g);
/* Layer l's activations: kept, checkpointed (the model's recompute, or
 * ProTrain's layout) or swapped. */
cham_block_mode_t wl_block_mode(const cham_workload_t *w, uint32_t l);
cham_status_t wl_chunks_new(cham_workload_t *w);
void wl_chunks_free(cham_workload_t *w);
/* Group g's weights are about to be read: on the device, the compute
 * stream waiting for their fetch; the next chunk's fetch started when a
 * buffer allows. */
cham_status_t wl_chunk_use(cham_workload_t *w, uint32_t g);
/* Group g's gradient is complete: to the host, which checks it and
 * (unless the step overflows) updates the chunk; its buffer is free. */
cham_status_t wl_chunk_done(cham_workload_t *w, uint32_t g);

/* ---- inference (infer.c) --------------------------------------------------------*/

/* One token's keys and values in one layer, all sequences. */
uint64_t wl_kv_token_bytes(const cham_model_config_t *m);
/* The KV caches (on the device, or with kv_offload pinned host buffers
 * and their events); wl_infer_free releases what is not in the held set. */
cham_status_t wl_infer_new(cham_workload_t *w);
void wl_infer_free(cham_workload_t *w);
/* Step 0: the prefill; step k: the k-th generated token. */
cham_status_t wl_infer_step(cham_workload_t *w, uint64_t step);

/* ---- layers (layer.c) -----------------------------------------------------------*/

/* What one layer's forward keeps for its backward (one micro-batch). */
typedef struct wl_saved {
    cham_tensor_t *x, *st1, *n1, *qkv, *probs, *ctx, *lse, *x1, *st2, *n2;
    cham_tensor_t *mid, *act;            /* fc1|gate-up out, gelu|swiglu out */
    cham_tensor_t *gates, *idx, *xp, *y; /* MoE: routing and the experts' rows */
    uint32_t *counts;                    /* MoE: tokens per expert (owned) */
    bool dropped;                        /* the layer was skipped */
} wl_saved_t;

/* Layer l's forward on x (the reference is taken over); *out receives the
 * layer's output. With keep, sv holds what the backward needs (with the
 * model's recomputation: the input only); without, nothing is kept. */
cham_status_t wl_layer_forward(cham_workload_t *w, uint32_t l, uint64_t mb, cham_tensor_t *x,
                               bool keep, wl_saved_t *sv, cham_tensor_t **out);
/* Layer l's backward: dy (taken over) is the gradient of its output; *dx
 * receives that of its input. Releases sv. */
cham_status_t wl_layer_backward(cham_workload_t *w, uint32_t l, uint64_t mb, wl_saved_t *sv,
                                cham_tensor_t *dy, cham_tensor_t **dx);
void wl_saved_drop(cham_workload_t *w, wl_saved_t *sv);
/* Whether this step's training forward and backward skip layer l
 * (layer_drop; an evaluation runs every layer). */
bool wl_layer_dropped(const cham_workload_t *w, uint32_t l);
/* Sends what a layer keeps to the host (out) or brings it back. */
cham_status_t wl_saved_swap(wl_saved_t *sv, bool out);

/* The embedding of a micro-batch: *ids receives the token ids (kept for
 * the backward when keep), *x the hidden states. */
cham_status_t wl_embed_forward(cham_workload_t *w, bool keep, cham_tensor_t **ids,
                               cham_tensor_t **x);
cham_status_t wl_embed_backward(cham_workload_t *w, cham_tensor_t **ids, cham_tensor_t *dx);
/* Final norm, head and loss on x (taken over); with keep, *dx receives the
 * gradient of x from the loss's backward right away (what the backward
 * starts from), else the loss is only computed (evaluation). */
cham_status_t wl_head(cham_workload_t *w, cham_tensor_t *x, bool keep, cham_tensor_t **dx);

#endif
