/* LLM training workloads without data: a generator that drives the public
 * runtime API exactly as an eager framework would for one device of a
 * (possibly parallel) training job, one step after another, in virtual time
 * on the sim backend. Every activation saved for backward, every
 * temporary, gradient and optimizer state is a tensor with its real size;
 * every op is a kernel with FLOPs and bytes from its shapes.
 * docs/workloads.md gives the memory and cost model with its formulas. */
#ifndef CHAMELEON_WORKLOAD_H
#define CHAMELEON_WORKLOAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "chameleon/protrain.h"
#include "chameleon/runtime.h"
#include "chameleon/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum cham_arch {
    CHAM_ARCH_GPT2,              /* LayerNorm, learned positions, GELU MLP, tied head */
    CHAM_ARCH_LLAMA,             /* RMSNorm, RoPE, SwiGLU MLP, GQA, untied head */
    CHAM_ARCH_MIXTRAL,           /* Llama with a top-k routed mixture of SwiGLU experts */
} cham_arch_t;

/* How mixed precision keeps the model state (docs/workloads.md, "Model
 * state"): bytes a parameter in parentheses, before ZeRO's sharding. */
typedef enum cham_precision {
    CHAM_PRECISION_MASTER,       /* weights and gradients in the compute type, fp32
                                    master weights and two Adam moments, as
                                    DeepSpeed, Apex's O2 and FSDP's mixed
                                    precision keep them (16) */
    CHAM_PRECISION_MAIN_GRADS,   /* the same with fp32 gradients, as Megatron-LM
                                    accumulates and reduces them (main_grad; its
                                    default with bf16) (18) */
    CHAM_PRECISION_AUTOCAST,     /* torch.autocast: fp32 weights, gradients and
                                    moments, no master copy (16); the forward
                                    casts each weight to the compute type where a
                                    matmul uses it, and with dp > 1
                                    DistributedDataParallel keeps its gradient
                                    buckets beside the gradients (20) */
} cham_precision_t;
CHAM_API const char *cham_precision_name(cham_precision_t p);
/* "master", "main-grads", "autocast"; CHAM_ERR_INVALID_ARG for others. */
CHAM_API cham_status_t cham_precision_parse(const char *name, cham_precision_t *out);

/* model.device_groups: cham_run chooses with ProTrain's cost model (at
 * least as many as the pinned host memory needs; docs/workloads.md). */
#define CHAM_DEVICE_GROUPS_AUTO UINT32_MAX

typedef struct cham_model_config {
    cham_arch_t arch;
    /* Model. */
    uint32_t layers, hidden, ffn, heads, kv_heads, vocab;
    uint32_t experts, topk;      /* Mixtral: experts per layer, experts per token */
    /* Training set-up. */
    uint32_t seq;                /* tokens per sequence */
    uint32_t mbs;                /* micro-batch: sequences per forward */
    uint32_t gbs;                /* global batch: sequences per optimizer step
                                    (0 = mbs * dp: no gradient accumulation) */
    cham_dtype_t dtype;          /* F16 or BF16 compute */
    cham_precision_t precision;  /* how the model state is kept (MASTER) */
    bool flash;                  /* fused attention: no s x s scores kept */
    bool recompute;              /* full recomputation: a layer keeps only its
                                    input and re-runs its forward in backward */
    bool host_optimizer;         /* ZeRO-Offload: master weights and Adam moments in
                                    pinned host memory, gradients copied there as the
                                    backward makes them, AdamW on the host (the
                                    device preset needs host figures) */
    uint32_t device_groups;      /* host_optimizer: the first this many parameter
                                    groups in execution order (the embedding, the
                                    layers, the head) keep gradients, master
                                    weights and moments on the device and are
                                    updated there, as ProTrain's persistent
                                    chunks (0: every group on the host);
                                    CHAM_DEVICE_GROUPS_AUTO: cham_run chooses */
    bool protrain;               /* ProTrain's runtime (chameleon/protrain.h) with
                                    protrain_config, the chunks in execution order:
                                    the embedding, the layers, the final norm and
                                    head; one device, one micro-batch a step (tp,
                                    pp, dp 1, gbs 0 or mbs), not with recompute or
                                    host_optimizer (it decides both); the device
                                    preset needs host figures */
    cham_protrain_config_t protrain_config;
    /* Inference (docs/workloads.md, "Inference"): step 0 is the prefill of
     * seq prompt tokens for each of mbs sequences, steps 1 .. generate each
     * decode one token per sequence. Weights only (no gradients or
     * optimizer); each layer keeps a KV cache sized for seq + generate
     * tokens. One device (tp, pp, dp 1), none of the training options. */
    bool infer;
    uint32_t generate;           /* decode steps after the prefill */
    bool kv_offload;             /* the KV caches live in pinned host memory:
                                    each layer's is prefetched to the device
                                    before its attention (one layer ahead),
                                    dropped after it, and the new tokens'
                                    keys and values stored back (HyperOffload's
                                    cache operators, docs/workloads.md) */
    /* Parallelism, as it changes this device's work. */
    uint32_t tp;                 /* tensor parallel degree */
    uint32_t pp;                 /* pipeline stages (this device: the first) */
    uint32_t dp;                 /* data parallel degree */
    uint32_t zero;               /* ZeRO stage 0-3 over the dp group */
    /* Dynamic variation, each off by its zero. */
    int64_t overflow_every;      /* a loss-scale overflow at steps k*n - 1 */
    double overflow_prob;        /* or with this probability per step (seeded) */
    uint32_t validate_every;     /* a forward-only evaluation opens steps k*n (k > 0) */
    uint32_t accumulate;         /* gradient accumulation across steps: the optimizer
                                    runs every accumulate-th step only, the others
                                    add to the gradients (0, 1: every step; with
                                    host_optimizer the host adds them up; not with
                                    protrain) */
    double layer_drop;           /* probability that a layer is skipped (seeded) */
    bool moe_vary;               /* per-expert token counts change every step */
    uint64_t seed;
    /* What a per-op timing profiler (a framework's built-in one) does: the
     * host waits for the device after every op. */
    bool sync_every_op;
    /* Collectives the compute stream waits for (tensor parallelism's
     * all-reduces, ZeRO-3's gathers) stash their tensors until the compute
     * stream joins, which it does right after, as PyTorch's NCCL process
     * group does from 2.7 on (pytorch#148590): nothing is held beyond the
     * tensors. Off (the default), they mark their tensors with record_stream
     * on the communication stream, as PyTorch did before: the allocator
     * keeps each such block until the collective is done on the device,
     * behind a host that runs ahead (what the published runs of
     * docs/fidelity.md measured). Collectives the compute stream does not
     * wait for (data-parallel reduction, pipeline sends) record the stream
     * either way. */
    bool comm_stash;
} cham_model_config_t;

/* Presets: "gpt2-1.5b", "llama2-7b", "llama2-13b", "llama3-8b",
 * "mixtral-8x7b", or an architecture name alone ("gpt2", "llama2",
 * "llama3", "mixtral") for its first preset's sizes. The training set-up
 * defaults to sequence 4096 (1024 for GPT-2), micro-batch 1, global batch 0
 * (= mbs * dp), bf16 (fp16 for GPT-2), flash attention, no recomputation,
 * no parallelism, no variation. CHAM_ERR_INVALID_ARG for an unknown name. */
CHAM_API cham_status_t cham_model_preset(const char *name, cham_model_config_t *out);
CHAM_API size_t cham_model_preset_count(void);
CHAM_API const char *cham_model_preset_name(size_t i);
CHAM_API const char *cham_arch_name(cham_arch_t arch);

/* Checks every field and their combinations (heads divisible by kv_heads
 * and by tp, layers by pp, gbs by mbs * dp, ...); err names the field and
 * the value. */
CHAM_API cham_status_t cham_model_validate(const cham_model_config_t *m, char *err,
                                           size_t err_size);

/* The most tokens per sequence (seq: training's sequence, inference's
 * prompt) cham_model_validate accepts, and the most tokens inference
 * generates after the prompt (generate). */
#define CHAM_MODEL_MAX_SEQ (UINT32_C(1) << 20)
#define CHAM_MODEL_MAX_GENERATE UINT32_C(1000000)
/* The largest seq cham_model_validate accepts for m with its other fields
 * as they are: CHAM_MODEL_MAX_SEQ, or less when a longer sequence would
 * make a tensor too large to simulate (a large batch) or too many
 * parameters (GPT-2's positions); every shorter seq is accepted too. 0
 * when even seq 1 is refused (the fault is in another field). */
CHAM_API uint32_t cham_model_max_seq(const cham_model_config_t *m);

/* Parameters of the whole model (every stage, unsharded). */
CHAM_API uint64_t cham_model_parameters(const cham_model_config_t *m);
/* Parameters this device holds (its pipeline stage, its tensor shard),
 * before ZeRO sharding. */
CHAM_API uint64_t cham_model_device_parameters(const cham_model_config_t *m);
/* Bytes of model state this device holds for the whole run: weights,
 * gradients and optimizer states as m->precision keeps them (16 bytes a
 * parameter for the default, CHAM_PRECISION_MASTER), for its parameters
 * (cham_model_device_parameters) with ZeRO's sharding over dp
 * (docs/workloads.md); with host_optimizer the weights only (the
 * gradients live during the backward, the rest on the host). A job whose
 * model state exceeds the device's capacity runs only where Chameleon
 * moves model state. */
CHAM_API uint64_t cham_model_state_bytes(const cham_model_config_t *m);
/* Inference: the bytes of every layer's KV cache for the whole context
 * (seq + generate tokens, mbs sequences); 0 when not inferring. */
CHAM_API uint64_t cham_model_kv_cache_bytes(const cham_model_config_t *m);
/* Whether m's op sequence changes from step to step: accumulation,
 * evaluations, overflows, layer drop or expert loads that vary. Such a
 * loop is timed by cham_run_result_t's late_mean_step_time_s. */
CHAM_API bool cham_model_loop_changes(const cham_model_config_t *m);
/* Device bytes one transformer layer keeps for its backward per
 * micro-batch, by the formula of docs/workloads.md (the generator's saved
 * tensors sum to it; a Mixtral layer with its routing's balanced counts). */
CHAM_API uint64_t cham_model_layer_activation_bytes(const cham_model_config_t *m);

/* ---- the generator --------------------------------------------------------*/

typedef struct cham_workload cham_workload_t;

/* Creates the model state on ctx's device (weights, gradients, optimizer
 * states as this device holds them) and the communication stream. ctx must
 * be a managed-mode context. On failure *out is NULL and err says why:
 * CHAM_ERR_OUT_OF_MEMORY, before anything is created, when the model state
 * alone exceeds the device's capacity (err names the sizes and the
 * settings). */
CHAM_API cham_status_t cham_workload_new(cham_context_t *ctx, const cham_model_config_t *m,
                                         cham_workload_t **out, char *err, size_t err_size);
CHAM_API void cham_workload_free(cham_workload_t *w);

/* What one step did. */
typedef struct cham_step_info {
    uint64_t ops;                /* ops dispatched */
    bool validated;              /* an evaluation ran first */
    bool overflow;               /* the optimizer step was skipped */
    bool accumulated;            /* no optimizer: the gradients add up (accumulate) */
    uint32_t layers_dropped;     /* layers skipped in this step */
    uint64_t tokens_per_expert_max;   /* MoE: the busiest expert's tokens */
} cham_step_info_t;

/* Runs step number `step` (0, 1, ...: steps must come in order) and ends it
 * with cham_step_end. Failures (out of memory, a policy that does not fit)
 * return the runtime's status; cham_workload_last_error says why. After a
 * failure only cham_workload_free is allowed. */
CHAM_API cham_status_t cham_workload_step(cham_workload_t *w, uint64_t step,
                                          cham_step_info_t *info);
CHAM_API const char *cham_workload_last_error(const cham_workload_t *w);
/* Waits until the device has done the step's own work: every stream the
 * workload issues to (compute, communication, offload, the host's). Two
 * kinds of work may run on into the next step, as they do in a loop that
 * runs step after step: the runtime's swap copies, and the host
 * optimizer's updates when it updates in the backward (ZeRO 0 or 3),
 * whose weights the next forward waits for group by group;
 * cham_device_synchronize and cham_workload_free wait for them too. The
 * first failure is returned. */
CHAM_API cham_status_t cham_workload_wait(cham_workload_t *w);

/* The op sequence's variation knobs decide per step; these say what they
 * decided (for tests and progress lines) without running anything. */
CHAM_API bool cham_workload_overflows(const cham_model_config_t *m, uint64_t step);
CHAM_API bool cham_workload_validates(const cham_model_config_t *m, uint64_t step);
/* Whether step updates the weights (accumulate: every accumulate-th). */
CHAM_API bool cham_workload_updates(const cham_model_config_t *m, uint64_t step);

/* ---- running a workload under a strategy ---------------------------------*/

/* One step of a run, as the progress hook sees it. */
typedef struct cham_run_step {
    uint64_t step;
    cham_stage_t stage;          /* after the step */
    uint64_t time_ns;            /* simulated: end of the previous step to the
                                    end of this one, its own work done
                                    (cham_workload_wait) */
    uint64_t peak_bytes;         /* the most tensor bytes on the device */
    uint64_t swapped_bytes;      /* moved out and in during the step */
    uint64_t on_demand, passive; /* swaps no plan foresaw */
    cham_step_info_t info;
} cham_run_step_t;

typedef struct cham_run_config {
    cham_model_config_t model;
    cham_config_t runtime;       /* device and knobs; the strategy sets what it
                                    decides (cham_strategy_apply) */
    cham_strategy_t strategy;    /* CHAM_STRATEGY_CHAMELEON */
    uint64_t steps;
    bool profile_every_step;     /* detailed profiling of every step */
    const char *trace_path;      /* a timeline trace (chameleon/trace.h), or NULL */
    const char *profile_path;    /* the last step's detailed profile as JSON
                                    (docs/profile-format.md), or NULL */
    const char *policy_path;     /* the policy applied at the end, as JSON
                                    (docs/policy-format.md; none: not written) */
    void (*on_step)(const cham_run_step_t *step, void *user);
    cham_log_hook_t log;         /* the runtime's log; NULL = silent */
    void *user;
    /* Called once (with user) when the run ends, before its context is
     * freed (NULL: never), with the last step's detailed profile (NULL
     * when the run failed or none was made) and the policy applied at the
     * end (NULL: none); both are valid during the call only. Setting it
     * profiles the last step, as profile_path does: the caller reads both
     * in memory. Last in the struct, so that the fields before it keep
     * their places. */
    void (*on_finish)(const cham_profile_t *last_profile, const cham_policy_t *policy,
                      void *user);
    /* Work out the lower bound on the step time (chameleon/policy.h,
     * cham_plan_bound) from the last step's detailed profile: profiles the
     * last step, as on_finish does. */
    bool lower_bound;
    /* With strategy chameleon: the run chooses where the optimizer runs
     * (on the device, or on the host with the first N groups on the
     * device) before its first step, from each program's unlimited step
     * and lower bound at this capacity and short trial runs of the
     * finalists (docs/workloads.md, "Where the optimizer runs"); the
     * model's host_optimizer and device_groups are then ignored. Other
     * strategies run the model's. */
    bool plan_optimizer;
} cham_run_config_t;

/* 50 steps, Chameleon choosing where the optimizer runs, the runtime's
 * defaults with 2 TiB of pinned host memory and the sim's hazard detector
 * on; the model must be set. */
CHAM_API cham_run_config_t cham_run_config_default(void);

typedef struct cham_run_result {
    cham_status_t status;        /* of the training: CHAM_OK if every step ran */
    char error[1024];            /* why not */
    bool oom;                    /* status is CHAM_ERR_OUT_OF_MEMORY */
    uint64_t fail_step;          /* the step that failed */
    uint64_t fail_op;            /* ops of that step dispatched before the failure */
    uint64_t steps;              /* steps completed */
    uint64_t capacity_bytes;
    uint64_t peak_device_bytes;  /* the allocator's peak of reserved segments */
    double step_time_s;          /* median over Stable steps (over all completed
                                    steps when none was Stable); inference:
                                    over the decode steps, the time per
                                    generated token */
    uint64_t stable_steps;       /* of those step_time_s is the median of, the
                                    steps that ran Stable (0: none did) */
    double prefill_time_s;       /* inference: step 0, the prompt's */
    double mean_step_time_s;     /* over all completed steps */
    double late_mean_step_time_s; /* over the last half of them: a loop that
                                    changes, every class in its share once
                                    the classes have settled */
    double swapped_bytes_per_step;
    uint64_t hazards;
    uint64_t stage_changes;
    uint64_t policy_regenerations;
    uint64_t on_demand_swapins;
    uint64_t passive_swapouts;
    uint64_t ops_per_step;       /* of the last completed step */
    /* Memory block reuse interval: ops dispatched between a swapped-out
     * block's free and its return to the pool (chameleon/alloc.h). */
    double reuse_interval_mean;
    uint64_t reuse_interval_max;
    /* Recomputation (chameleon/runtime.h): tensors dropped and ops run
     * again for them over the run, and the bytes dropped per step. */
    uint64_t drops, recomputes;
    double dropped_bytes_per_step;
    /* With config.lower_bound and a step profiled: no policy's step at this
     * capacity is faster than lower_bound_step_time_s; bound_feasible
     * false when no policy could fit at all (the bound is then infinite). */
    bool has_bound, bound_feasible;
    double lower_bound_step_time_s;
    /* The most bytes tensors held on the device in any step (the
     * allocator's segments, peak_device_bytes, hold more). */
    uint64_t peak_tensor_bytes;
    /* protrain, zero-offload: the configuration run; with protrain the
     * search's estimates for it (from the profile of one step) and the
     * configurations it estimated and pruned. */
    bool has_protrain;
    cham_protrain_config_t protrain;
    double predicted_step_time_s;
    uint64_t predicted_peak_bytes;
    uint64_t protrain_evaluated, protrain_pruned;
    /* host_optimizer: the groups updated on the device (the model's
     * device_groups, or what auto chose). */
    uint32_t device_groups;
    /* The program run: the optimizer on the host (with device_groups) or
     * on the device; optimizer_planned when the run chose it
     * (plan_optimizer), after estimating optimizer_programs programs and
     * a short trial run of optimizer_trials of them. */
    bool host_optimizer, optimizer_planned;
    uint32_t optimizer_programs, optimizer_trials;
    /* With the bound: the program it is the bound of. Planned, the bound
     * is the smallest over every program the run could choose, and its
     * program may differ from the one run (the bounds choose the
     * finalists, trials the program). */
    bool bound_host_optimizer;
    uint32_t bound_device_groups;
} cham_run_result_t;

/* Runs the workload under the strategy on the sim backend. CHAM_OK when the
 * run could be set up (r->status says how the training went: a model state
 * larger than the device is CHAM_ERR_OUT_OF_MEMORY at step 0 before any
 * op); CHAM_ERR_INVALID_ARG with r->error for a bad configuration. */
CHAM_API cham_status_t cham_run(const cham_run_config_t *config, cham_run_result_t *r);

/* What cham_run would refuse before its first op, from the settings alone
 * (no device is opened): CHAM_ERR_INVALID_ARG for a bad configuration,
 * CHAM_ERR_OUT_OF_MEMORY when the model state exceeds the capacity the
 * strategy runs with; err says why. CHAM_OK otherwise (the run may still
 * fail later, out of memory for activations). */
CHAM_API cham_status_t cham_run_check(const cham_run_config_t *config, char *err, size_t err_size);

#ifdef __cplusplus
}
#endif

#endif
