/* The eager-mode runtime API: what a framework or a C training loop calls.
 *
 * A context per device. The caller interns operator names as op tokens,
 * makes tensor handles, brackets every operator dispatch with
 * cham_op_begin / cham_op_end, marks phases and the end of each step.
 * Chameleon watches the op sequence (the profiler and its stage machine,
 * docs/profiler.md) and, in managed mode, owns the device memory of tensors
 * and can move it between device and host. */
#ifndef CHAMELEON_RUNTIME_H
#define CHAMELEON_RUNTIME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "chameleon/alloc.h"
#include "chameleon/device.h"
#include "chameleon/status.h"
#include "chameleon/hyperoffload.h"
#include "chameleon/swapadvisor.h"
#include "chameleon/types.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum cham_mode {
    CHAM_MODE_MANAGED,       /* Chameleon allocates tensors' device memory */
    CHAM_MODE_ADVISOR,       /* the caller owns memory and reports it */
} cham_mode_t;

typedef enum cham_residency {
    CHAM_RESIDENT_DEVICE,    /* data on the device */
    CHAM_RESIDENT_MOVING_OUT,/* a swap-out is in flight; the device copy is still valid */
    CHAM_RESIDENT_HOST,      /* data only on the host */
    CHAM_RESIDENT_MOVING_IN, /* a swap-in is in flight */
    CHAM_RESIDENT_DROPPED,   /* nowhere: the op that made it is run again
                                before its next use (cham_op_set_recompute) */
} cham_residency_t;

/* ---- configuration --------------------------------------------------------*/

/* Which planner makes policies, and how they are applied (docs/baselines.md).
 * Chameleon's own: regenerated when the op sequence changes, matched by
 * features. The baselines: one policy from the detailed profile of the
 * first step, applied to every later step and never regenerated:
 *   VDNN      every idle activation out, one-layer prefetch; matched by
 *             features; no passive swaps once it applies (vDNN has none)
 *   CAPUCHIN  Chameleon's planner, tensors named by (op index, i-th tensor of
 *             the op): a step whose ops moved fails with CHAM_ERR_POLICY_MISMATCH;
 *             passive swaps stay (Capuchin evicts on demand)
 *   SWAPADVISOR  SwapAdvisor's genetic search over memory pools, Belady's
 *             swaps (chameleon/swapadvisor.h), for the caller's op order;
 *             matched by features. It plans one static sequence: a step
 *             whose op sequence differs from the one searched makes it
 *             search again from that step's profile, or, with
 *             swapadvisor_fail_on_change, fails cham_step_end with
 *             CHAM_ERR_POLICY_MISMATCH naming the first op that differs
 *   HYPEROFFLOAD  HyperOffload's cache operators placed by its
 *             execution-order refinement (chameleon/hyperoffload.h);
 *             matched by features. Static as SWAPADVISOR: planned from a
 *             steady step (the second training step, or for inference a
 *             step whose op sequence repeats the one before) and planned
 *             again when the sequence changes */
typedef enum cham_planner_kind {
    CHAM_PLANNER_CHAMELEON,
    CHAM_PLANNER_VDNN,
    CHAM_PLANNER_CAPUCHIN,
    CHAM_PLANNER_SWAPADVISOR,
    CHAM_PLANNER_HYPEROFFLOAD,
    CHAM_PLANNER_COUNT /* how many there are; not a planner */
} cham_planner_kind_t;
CHAM_API const char *cham_planner_kind_name(cham_planner_kind_t kind);

/* How the device allocator obtains memory (docs/allocator.md).
 *   CLASSIC     PyTorch's segments, one per request that finds no free block
 *   EXPANDABLE  one reservation per stream and pool grown through the
 *               device's virtual memory: no memory stranded between blocks
 *   AUTO        expandable where the device has virtual memory and its
 *               segments are of PyTorch's sizes (allocator_shift 0); classic
 *               on the sim's scaled-down devices of a few MiB, where a map
 *               call costs as much as a kernel */
typedef enum cham_allocator_mode {
    CHAM_ALLOCATOR_AUTO,
    CHAM_ALLOCATOR_CLASSIC,
    CHAM_ALLOCATOR_EXPANDABLE,
} cham_allocator_mode_t;
CHAM_API const char *cham_allocator_mode_name(cham_allocator_mode_t mode);
/* CHAM_ERR_INVALID_ARG for a name that is not a mode. */
CHAM_API cham_status_t cham_allocator_mode_parse(const char *name, cham_allocator_mode_t *out);

typedef struct cham_config {
    cham_device_config_t device; /* backend, preset, capacity, sim knobs */
    cham_mode_t mode;
    uint32_t advise_ahead;       /* advisor mode: planned swap-ins and re-runs are
                                    advised this many ops before the op they are
                                    for (0; 1 for a caller that carries out an
                                    op's actions after running it) */
    uint64_t pinned_budget;      /* bytes of pinned host memory for swaps */
    uint32_t allocator_shift;    /* the allocators' granularity_shift, 0..10, or
                                    CHAM_ALLOCATOR_SHIFT_AUTO (the default): from
                                    the capacity, cham_allocator_shift_for */
    cham_allocator_mode_t allocator; /* CHAM_ALLOCATOR_AUTO */
    /* Stage machine (paper Algorithm 1). */
    uint32_t warmup_steps;       /* m: stable steps before GenPolicy (2) */
    uint32_t genpolicy_steps;    /* n: stable steps before Stable (5) */
    double length_tolerance;     /* relative length change still stable (0.05) */
    double cosine_threshold;     /* cosine similarity still stable (0.95) */
    /* Policy generation (paper §5). */
    double score_c;              /* C in Score = N_MRE + C * S (1.0) */
    uint64_t min_swap_bytes;     /* smallest tensor worth swapping (0: from the
                                    budget, cham_context_min_swap) */
    /* Acting (paper §6, docs/executor.md). */
    bool executor;               /* generate and apply policies (true) */
    uint64_t memory_budget;      /* device bytes policies plan for (0 = the
                                    device's capacity; a smaller one leaves
                                    room for memory Chameleon does not see) */
    bool oom_handling;           /* passive swaps when memory runs out (true) */
    bool pytorch_record_stream;  /* hand swapped-out blocks back PyTorch's way,
                                    by host event queries (false: after the
                                    op the policy names, no polling) */
    uint32_t policy_cache;       /* sequence classes kept, each with its policy
                                    (8; 0 = off: Algorithm 1 alone) */
    uint32_t class_trials;       /* a class keeps the fastest of this many trials,
                                    or the fastest clean one (no passive or
                                    on-demand swap) within 10% of it, unless
                                    its rules to try on say more (2;
                                    docs/executor.md, "Trials per class") */
    cham_planner_kind_t planner; /* CHAM_PLANNER_CHAMELEON */
    bool profiler;               /* the lightweight profiler: each step's op sequence
                                    and the stage machine (true; false needs the
                                    executor off: for measuring what it costs) */
    bool recompute;              /* Chameleon's planner may drop tensors of
                                    recomputable ops and run the ops again
                                    (true; false: swaps only) */
    bool model_state;            /* Chameleon's planner may move persistent
                                    tensors (parameters, gradients, optimizer
                                    states) between their uses and across
                                    the step's end (true; false: activations
                                    only, as the paper) */
    cham_swapadvisor_options_t swapadvisor; /* planner swapadvisor's search
                                    (its defaults; reorder is not used: the
                                    runtime follows the caller's op order) */
    bool swapadvisor_fail_on_change; /* planner swapadvisor: a changed op
                                    sequence fails the step instead of
                                    searching again (false) */
    cham_hyperoffload_options_t hyperoffload; /* planner hyperoffload (its
                                    defaults) */
} cham_config_t;

/* allocator_shift chosen from the device's capacity when the context opens. */
#define CHAM_ALLOCATOR_SHIFT_AUTO UINT32_MAX
/* The shift for a device of `capacity` bytes: the smallest (0: PyTorch's
 * sizes) whose 20 MiB large segments, made finer, fit 16 times into it;
 * at most 10. A device of tens of GiB gets 0, one of a few MiB ~5. */
CHAM_API uint32_t cham_allocator_shift_for(uint64_t capacity);

/* The defaults: the sim device's defaults, managed mode, a 16 GiB pinned
 * budget, the paper's knobs, the executor and OOM handling on. */
CHAM_API cham_config_t cham_config_default(void);

/* Reads a JSON object of config fields (docs/config.md) over *config, which
 * should hold the defaults. Unknown keys, wrong types and out-of-range
 * values are errors; err receives a message naming the file, the key and
 * the value (or the line and column of a syntax error). */
CHAM_API cham_status_t cham_config_load_json(const char *path, cham_config_t *config, char *err,
                                             size_t err_size);

/* The same from JSON text in memory (len bytes, no NUL needed); `origin`
 * stands for the file name in messages (a language binding's call, say). */
CHAM_API cham_status_t cham_config_parse_json(const char *text, size_t len, const char *origin,
                                              cham_config_t *config, char *err, size_t err_size);

/* The device bytes policies plan for under config on a device of
 * `capacity` bytes: memory_budget, or capacity when that is 0 or larger. */
CHAM_API uint64_t cham_config_budget(const cham_config_t *config, uint64_t capacity);

/* Checks every field; on failure err names the field and the value. */
CHAM_API cham_status_t cham_config_validate(const cham_config_t *config, char *err,
                                            size_t err_size);

/* Whether a context of this config may move model state off the device
 * (Chameleon's planner applied, model_state on, the OOM path on): then
 * model state larger than the device is not by itself a failure. */
CHAM_API bool cham_config_moves_model_state(const cham_config_t *config);

/* ---- strategies ---------------------------------------------------------*/

/* How device memory is managed in a run, as a user picks it (`--strategy`
 * on the command line, docs/baselines.md). A strategy is a preset over the
 * config: cham_strategy_apply sets the fields it decides. A "policy" is
 * something else: the swap plan a planner makes for one op sequence
 * (chameleon/policy.h). */
typedef enum cham_strategy {
    CHAM_STRATEGY_CHAMELEON,     /* this project: the executor and the OOM path */
    CHAM_STRATEGY_NATIVE,        /* nothing: out of memory is a failure */
    CHAM_STRATEGY_IDEAL,         /* native with unlimited device memory */
    CHAM_STRATEGY_RECOMPUTE,     /* native; the caller recomputes every activation */
    CHAM_STRATEGY_CAPUCHIN,      /* one static policy, tensors named by position */
    CHAM_STRATEGY_VDNN,          /* every activation out, one-layer prefetch */
    CHAM_STRATEGY_CHAMELEON_SWAP,/* CHAMELEON, swapping only (recompute off) */
    CHAM_STRATEGY_PROTRAIN,      /* ProTrain's runtime with its searched plan
                                    (chameleon/protrain.h); the runtime's
                                    management off, as native */
    CHAM_STRATEGY_ZERO_OFFLOAD,  /* ProTrain's runtime with every chunk on the host
                                    and every block checkpointed, unplanned
                                    (ZeRO-3 offload with full checkpointing) */
    CHAM_STRATEGY_SWAPADVISOR,   /* SwapAdvisor's searched static plan, applied
                                    by the executor in the caller's op order */
    CHAM_STRATEGY_HYPEROFFLOAD,  /* HyperOffload's cache operators, planned once
                                    per op sequence, applied by the executor */
} cham_strategy_t;
#define CHAM_STRATEGY_COUNT 11

CHAM_API const char *cham_strategy_name(cham_strategy_t strategy);
/* CHAM_ERR_INVALID_ARG for a name that is not a strategy. */
CHAM_API cham_status_t cham_strategy_parse(const char *name, cham_strategy_t *out);
/* Sets executor, oom_handling, planner and recompute as the strategy has them, and
 * for IDEAL the capacity (the largest the config allows). RECOMPUTE is
 * the caller's work: the runtime cannot re-run the caller's ops, so it only
 * turns the runtime's management off. */
CHAM_API cham_status_t cham_strategy_apply(cham_strategy_t strategy, cham_config_t *config);

/* ---- context ------------------------------------------------------------*/

/* Opens the device and sets up allocators, streams and the profiler. On
 * failure *out is NULL and cham_context_last_error(NULL) says why. */
CHAM_API cham_status_t cham_context_new(const cham_config_t *config, cham_context_t **out);
/* Frees the context. Tensors still alive are a programmer error. */
CHAM_API void cham_context_free(cham_context_t *ctx);
/* The message of the last failure (ctx NULL: of the last failed creation). */
CHAM_API const char *cham_context_last_error(const cham_context_t *ctx);

CHAM_API cham_device_t *cham_context_device(const cham_context_t *ctx);
/* The config the context was made with (validated). */
CHAM_API const cham_config_t *cham_context_config(const cham_context_t *ctx);
/* cham_config_budget of the context's config and device. */
CHAM_API uint64_t cham_context_budget(const cham_context_t *ctx);
/* The smallest tensor the planner swaps: min_swap_bytes, or when that is
 * 0 a 1024th of the budget within [4 KiB, 1 MiB] (1 MiB from a 1 GiB
 * budget up: a copy's fixed cost is not worth paying for less; a device
 * of a few MiB still has candidates). */
CHAM_API uint64_t cham_context_min_swap(const cham_context_t *ctx);
/* Sets memory_budget (0: the device's capacity), as a budget given as a
 * share of the peak of a first, unconstrained step needs. Only before the
 * first policy is planned (CHAM_ERR_INVALID_ARG after: make a new context). */
CHAM_API cham_status_t cham_context_set_memory_budget(cham_context_t *ctx, uint64_t bytes);
/* The stream operators run on; kernels are launched there by the caller. */
CHAM_API cham_stream_t *cham_context_compute_stream(const cham_context_t *ctx);

/* ---- op tokens ------------------------------------------------------------*/

/* The token of name, interned on first use; stable for the context's life. */
CHAM_API cham_status_t cham_op_token(cham_context_t *ctx, const char *name, cham_op_token_t *out);
/* The name of a token, or NULL if unknown. */
CHAM_API const char *cham_op_name(const cham_context_t *ctx, cham_op_token_t token);

/* ---- tensors --------------------------------------------------------------
 * A tensor handle is a view of a storage: an offset and a length into it.
 * Residency, swapping and freeing work on the storage, so all views of a
 * swapped storage follow it. Handles are reference counted; a new handle
 * holds one reference; the storage is freed when its last view goes. */

/* Tensors of no bytes are tensors like any other (a framework's empty
 * tensors): tracked, never moved; a managed one still has an address.
 *
 * Managed mode: a new storage of bytes on the device, and a view of all of
 * it. CHAM_ERR_OUT_OF_MEMORY when it does not fit (message in
 * cham_context_last_error). */
CHAM_API cham_status_t cham_tensor_new(cham_context_t *ctx, size_t bytes, cham_dtype_t dtype,
                                       const char *label, cham_tensor_t **out);
/* Advisor mode: the caller allocated bytes at device pointer ptr (NULL
 * only for 0 bytes); Chameleon tracks it. Releasing the last view reports the free. */
CHAM_API cham_status_t cham_tensor_wrap(cham_context_t *ctx, void *ptr, size_t bytes,
                                        cham_dtype_t dtype, const char *label, cham_tensor_t **out);
/* A new view of base's storage: [offset, offset + bytes) of base's view. */
CHAM_API cham_status_t cham_tensor_view(cham_tensor_t *base, size_t offset, size_t bytes,
                                        cham_dtype_t dtype, const char *label, cham_tensor_t **out);
/* A strided view, as a framework describes one (a transpose, a slice with a
 * step, an expand): `offset` elements of dtype into base's view, then ndim
 * sizes and strides in elements (strides >= 0; 0 repeats an element). The
 * view covers the bytes from its first element to its last: residency is
 * the storage's, so a view needs only where it starts and ends. A size of
 * 0 makes a view of no bytes. Making a view is no op: it neither moves data
 * nor costs time. */
CHAM_API cham_status_t cham_tensor_view_strided(cham_tensor_t *base, size_t offset, size_t ndim,
                                                const int64_t *sizes, const int64_t *strides,
                                                cham_dtype_t dtype, const char *label,
                                                cham_tensor_t **out);

CHAM_API cham_tensor_t *cham_tensor_retain(cham_tensor_t *t);
CHAM_API void cham_tensor_release(cham_tensor_t *t);

/* The view's device address, valid for the op being dispatched (it may
 * change when the storage is swapped out and back). NULL while the storage
 * is swapped out. Taken outside an op (to fill a new tensor), it marks the
 * storage as holding data: it is then never dropped, only swapped out with
 * a copy. A storage that held nothing may have had its block given back
 * by the OOM path (managed mode); it gets one again here, NULL only when
 * none can be made (cham_context_last_error says why). */
CHAM_API void *cham_tensor_data(const cham_tensor_t *t);
CHAM_API size_t cham_tensor_bytes(const cham_tensor_t *t);
/* Bytes of the storage the view belongs to (>= cham_tensor_bytes). */
CHAM_API size_t cham_tensor_storage_bytes(const cham_tensor_t *t);
CHAM_API cham_dtype_t cham_tensor_dtype(const cham_tensor_t *t);
CHAM_API const char *cham_tensor_label(const cham_tensor_t *t);
CHAM_API cham_residency_t cham_tensor_residency(const cham_tensor_t *t);
/* The caller's own pointer on this handle (a framework's tensor, say),
 * NULL until set; Chameleon never reads it. Views made from a handle do
 * not inherit it. */
CHAM_API void cham_tensor_set_user(cham_tensor_t *t, void *user);
CHAM_API void *cham_tensor_user(const cham_tensor_t *t);
/* True if a and b are views of one storage. */
CHAM_API bool cham_tensor_same_storage(const cham_tensor_t *a, const cham_tensor_t *b);

/* Managed mode: moves the storage to pinned host memory (planned, or
 * passive when an allocation failed), and back. The executor calls these
 * itself when it applies a policy; a caller may too. Swap-out copies on the
 * swap-out stream after the work queued so far on the compute stream; the
 * device block is reused once that copy is done. Swap-in copies on the
 * swap-in stream and makes the compute stream wait before the next use.
 * A storage that is used by an op while on the host is brought back on
 * demand (counted). Both are logged for the profiler. */
CHAM_API cham_status_t cham_tensor_swap_out(cham_tensor_t *t, bool passive);
CHAM_API cham_status_t cham_tensor_swap_in(cham_tensor_t *t);

/* Managed mode: `host`, pinned memory of at least the storage's bytes
 * (cham_device_host_alloc), holds the same bytes as t's storage from now
 * until an op writes the storage or the caller calls this again. While it
 * does, sending the storage away copies nothing and takes none of the
 * runtime's pinned memory, and bringing it back copies from `host`, after
 * the work of the caller's stream recorded on it (cham_tensor_record_stream).
 * An optimizer on the host that keeps the weights there is the use: the
 * device's weights need no copy of their own. NULL: `host` is about to
 * change; a storage away on it comes back first, and the call waits for
 * that copy. CHAM_ERR_INVALID_ARG in advisor mode or for a dropped storage. */
CHAM_API cham_status_t cham_tensor_set_host_copy(cham_tensor_t *t, void *host);
/* Managed mode: the caller is about to write t's next contents into
 * `host` (pinned, at least the storage's bytes): an optimizer on the host
 * that updates the weights in place while the backward goes on. The
 * device's bytes are stale from now on and are released without a copy;
 * `host` becomes t's host copy, and it comes back from there once the
 * caller says where the update is queued (cham_tensor_host_ready). Until
 * then the runtime does not bring it back (a planned swap-in waits for the
 * use), and a use is an error (CHAM_ERR_INVALID_ARG, naming the tensor),
 * never stale bytes. A swap-in still reading the old bytes is waited for
 * first. Like a swap-out by the caller, it is counted and profiled.
 * CHAM_ERR_INVALID_ARG in advisor mode or for a dropped storage. */
CHAM_API cham_status_t cham_tensor_host_update(cham_tensor_t *t, void *host);
/* Managed mode: the next op that uses t's storage writes every byte of it
 * without reading any (an optimizer's new weights, a buffer filled anew):
 * its bytes now are dead. Away on the host, it comes back at that op into
 * a new block with no copy and its host copy is freed; on the device, the
 * runtime may give its block back without a copy until it is written
 * (through an op, or through cham_tensor_data). An op that reads it before
 * that fails (CHAM_ERR_INVALID_ARG, naming it), never reads stale bytes.
 * The profile marks the write, so planners may send the storage away
 * before it and bring nothing back. Tensors dropped to be recomputed from
 * its bytes are made first. A hint where it cannot help: a storage dropped
 * to be recomputed, or whose update on the host is pending, keeps its
 * bytes. CHAM_ERR_INVALID_ARG in advisor mode, for a view that does not
 * cover its whole storage, or inside the bracket of an op that uses it. */
CHAM_API cham_status_t cham_tensor_discard(cham_tensor_t *t);
/* The update announced by cham_tensor_host_update is queued on `stream`
 * (a host stream, cham_stream_new_host): t comes back after that stream's
 * work so far. Likewise for the host copy given to cham_tensor_set_host_copy
 * when that stream's work so far writes it (the device's bytes, made again
 * on the host): sending t away copies nothing at once, and bringing it
 * back waits for that work. Unlike cham_tensor_record_stream, the stream
 * never touches t's device memory, so the block's reuse does not wait for
 * it. CHAM_ERR_INVALID_ARG when neither was done. */
CHAM_API cham_status_t cham_tensor_host_ready(cham_tensor_t *t, cham_stream_t *stream);

/* Work queued on `stream` so far (a stream the caller made, for example
 * for communication) uses t, as PyTorch's Tensor.record_stream says: its
 * swap-outs wait for that work, and its device block is not reused before
 * it is done. Call it after queuing the work, from within the op that
 * dispatched it. One foreign stream per storage is remembered (the last). */
CHAM_API cham_status_t cham_tensor_record_stream(cham_tensor_t *t, cham_stream_t *stream);

/* ---- dispatch -------------------------------------------------------------*/

/* Brackets one operator: its token, the tensors it reads and writes. Every
 * input and output must be on the device or movable there; begin makes the
 * compute stream wait for swap-ins in flight (managed mode) or advises the
 * caller what to move (advisor mode). Launch the op's kernels on the
 * compute stream between begin and end. */
CHAM_API cham_status_t cham_op_begin(cham_context_t *ctx, cham_op_token_t token,
                                     cham_tensor_t *const *inputs, size_t n_inputs,
                                     cham_tensor_t *const *outputs, size_t n_outputs);
CHAM_API cham_status_t cham_op_end(cham_context_t *ctx);

/* ---- recomputation ---------------------------------------------------------
 * Instead of swapping a tensor out, a policy may drop it after its last
 * forward use and run the op that made it again before its next use. The
 * caller says which ops may be run again, and how:
 *
 * cham_op_set_recompute, between cham_op_begin and cham_op_end, declares
 * the op being dispatched recomputable: a pure function of its inputs that
 * writes each of its outputs whole (all of its storage) and no input.
 * `tag` is the caller's (it says which kernels to launch; it must stay
 * meaningful as long as the output is alive). The planner prices a re-run
 * at the op's cost (cham_op_set_cost), else at the step's mean op time.
 * In advisor mode the caller runs the op again itself when an action says
 * so (CHAM_ACTION_RECOMPUTE below); no hook is needed there.
 *
 * The recompute hook (cham_context_on_recompute) is called when a dropped
 * tensor is needed: its block is new, the op's inputs are on the device
 * (brought back or recomputed first), the op's other outputs get scratch
 * blocks (theirs are left alone), and the hook launches the op's kernels
 * on `stream` (the compute stream) with these addresses. It must not
 * dispatch ops. An error it returns fails the op that needed the
 * tensor; the tensor stays dropped.
 *
 * Never lost: a dropped tensor holds its inputs alive (the caller may
 * release them; their memory waits for the recomputation), and an op that
 * is about to write one of those inputs recomputes the tensor first. A
 * recomputable output that is written again, or one of whose inputs is
 * written or freed while it is still on the device, is no longer
 * recomputable and is only ever swapped. In advisor mode the caller owns
 * the inputs' memory and keeps them: an input released while a tensor made
 * from it is dropped makes that tensor's next use fail, naming both. */
typedef struct cham_recompute_call {
    uint64_t tag;                /* as given to cham_op_set_recompute */
    cham_stream_t *stream;       /* launch here */
    void *const *inputs;         /* device addresses of the op's inputs, in */
    const size_t *input_bytes;   /*   the order given to cham_op_begin */
    size_t n_inputs;
    void *const *outputs;        /* where to write each output, in the op's */
    const size_t *output_bytes;  /*   order: the dropped one's new block, and */
    size_t n_outputs;            /*   scratch for the others (their data stays) */
    size_t which;                /* the output being made again */
} cham_recompute_call_t;
typedef cham_status_t (*cham_recompute_hook_t)(cham_context_t *ctx,
                                               const cham_recompute_call_t *call, void *user);
/* One hook per context; NULL removes it (recomputable ops are then refused). */
CHAM_API void cham_context_on_recompute(cham_context_t *ctx, cham_recompute_hook_t hook,
                                        void *user);
CHAM_API cham_status_t cham_op_set_recompute(cham_context_t *ctx, uint64_t tag);
/* Managed mode: drops a recomputable tensor's storage now (its block is
 * reused in stream order); it is recomputed at its next use. A policy does
 * this itself; callers may too. CHAM_ERR_INVALID_ARG, saying why, when the
 * storage cannot be recomputed (not declared, written since, not on the
 * device, an input gone). */
CHAM_API cham_status_t cham_tensor_drop(cham_tensor_t *t);

/* Between cham_op_begin and cham_op_end: the caller's estimate of the op's
 * time on the compute stream, in ns (a roofline, a measurement). Planners
 * take the ops with a cost at their word and share what is left of the
 * measured step time among the others; without any, Eq. 1 spreads the
 * measured step time evenly (docs/policy.md, "Inputs and knobs"). */
CHAM_API cham_status_t cham_op_set_cost(cham_context_t *ctx, double ns);

/* Between cham_op_begin and cham_op_end: the op runs a collective of `ns`
 * on a communication stream, which starts once the compute stream's work
 * issued before it and the stream's earlier collectives are done. `waited`:
 * the compute stream waits for it before the next op (a blocking
 * collective, whose cham_op_set_cost is the collective's time). The planner
 * runs a recomputation due right after waited collectives before them,
 * where it overlaps the collectives still queued (docs/policy.md,
 * "Recomputation"). */
CHAM_API cham_status_t cham_op_set_comm(cham_context_t *ctx, double ns, bool waited);

/* Ops dispatched since the context was made: the numbering free_after_op
 * of an action uses (the op being dispatched has number cham_context_ops
 * until its cham_op_end). */
CHAM_API uint64_t cham_context_ops(const cham_context_t *ctx);

/* ---- advisor mode: actions ------------------------------------------------
 * In advisor mode Chameleon moves nothing; it says what to move, and the
 * caller reports what it moved. After cham_op_begin, cham_op_actions lists
 * what to do around the op just begun, in order (with the config's
 * advise_ahead n, also the swap-ins and re-runs planned for the next n ops,
 * as prefetches):
 *   CHAM_ACTION_SWAP_IN   the storage of `tensor` is on the host: copy it
 *                         back and report cham_tensor_swapped_in. With
 *                         `needed` this op reads it: its kernels must wait
 *                         for the copy. Without, it is a planned prefetch.
 *   CHAM_ACTION_SWAP_OUT  after this op's kernels, copy the storage of
 *                         `tensor` to the host and report
 *                         cham_tensor_swapped_out; its device memory may be
 *                         reused once op number free_after_op has begun,
 *                         the copy being ordered before that reuse.
 *   CHAM_ACTION_DROP      after this op's kernels, the storage of `tensor`
 *                         (made by an op declared recomputable) is not
 *                         needed until it is made again: free its device
 *                         memory in stream order and report
 *                         cham_tensor_dropped. Keep a view of each input
 *                         of its op (cham_tensor_recompute_inputs) until
 *                         it is made again: they are what it is made from.
 *   CHAM_ACTION_RECOMPUTE before this op's kernels, make the storage of
 *                         `tensor` again: run the op declared with `tag`
 *                         on its inputs (on the device by then: actions
 *                         earlier in the list bring them back or make them
 *                         again), writing its output number `which` into
 *                         new memory (scratch for the op's other outputs),
 *                         and report cham_tensor_recomputed. With `needed`
 *                         this op uses it; without, it is planned ahead.
 * `tensor` is a view the caller already holds (valid while it is alive).
 * The list is valid until the next cham_op_begin. */
typedef enum cham_action_kind {
    CHAM_ACTION_SWAP_OUT,
    CHAM_ACTION_SWAP_IN,
    CHAM_ACTION_DROP,
    CHAM_ACTION_RECOMPUTE,
} cham_action_kind_t;

typedef struct cham_action {
    cham_action_kind_t kind;
    cham_tensor_t *tensor;
    bool needed;                 /* SWAP_IN, RECOMPUTE: this op uses it */
    uint64_t free_after_op;      /* SWAP_OUT: see above */
    uint64_t tag;                /* RECOMPUTE: as given to cham_op_set_recompute */
    size_t which;                /* RECOMPUTE: its place among the op's outputs */
} cham_action_t;

/* The actions of the op begun last; their number (0 in managed mode). */
CHAM_API size_t cham_op_actions(const cham_context_t *ctx, const cham_action_t **actions);

/* Advisor mode: the caller moved the storage of t to its host memory (the
 * device copy is no longer used) / back to the device at device_ptr. A
 * move no action advised is counted as the caller's own: a passive
 * swap-out (it made room the policy did not) / an on-demand swap-in; a
 * trial that needed them ranks below one that did not, as in managed
 * mode. */
CHAM_API cham_status_t cham_tensor_swapped_out(cham_tensor_t *t);
CHAM_API cham_status_t cham_tensor_swapped_in(cham_tensor_t *t, void *device_ptr);
/* Advisor mode: the caller freed the device memory of t's storage, which
 * an op declared recomputable made (CHAM_ACTION_DROP) / made it again at
 * device_ptr (CHAM_ACTION_RECOMPUTE). CHAM_ERR_INVALID_ARG, saying why, for
 * a storage no recomputable op made, one written since, or one not in the
 * state the report implies. */
CHAM_API cham_status_t cham_tensor_dropped(cham_tensor_t *t);
CHAM_API cham_status_t cham_tensor_recomputed(cham_tensor_t *t, void *device_ptr);
/* The inputs of the op that made t's storage, in the order given to
 * cham_op_begin: views the caller holds (NULL for an input it holds no view
 * of any more); up to max of them; returns their number, 0 when no
 * recomputable op made it. */
CHAM_API size_t cham_tensor_recompute_inputs(const cham_tensor_t *t, cham_tensor_t **inputs,
                                             size_t max);

/* Marks the phase of the ops that follow (forward at the start of a step). */
CHAM_API cham_status_t cham_phase(cham_context_t *ctx, cham_phase_t phase);

/* Marks the transformer block (0, 1, ... in the forward's order) the ops
 * that follow belong to, or -1 for none (the default, and again at each
 * step's start): what a module hook around each block would say. The
 * detailed profile records it per op; ProTrain's planner
 * (chameleon/protrain.h) manages memory per block and needs it. */
CHAM_API cham_status_t cham_set_block(cham_context_t *ctx, int32_t block);

/* Ends the step: runs the stage machine on the step's op sequence. */
CHAM_API cham_status_t cham_step_end(cham_context_t *ctx);

/* Numbers the step being run as the caller's loop does, so that log lines,
 * the step hook, profiles and traces say "step 57" where the caller's own
 * output does. Steps the caller does not number count on from the last one
 * (the first step is 0). Numbers need not be unique: a validation pass run
 * after training step 49 may be numbered 49 too. The runtime's own
 * bookkeeping never depends on them. */
CHAM_API void cham_step_set_number(cham_context_t *ctx, uint64_t number);

CHAM_API cham_stage_t cham_context_stage(const cham_context_t *ctx);
/* The number of the step being run (see cham_step_set_number). */
CHAM_API uint64_t cham_context_step(const cham_context_t *ctx);
CHAM_API const char *cham_stage_name(cham_stage_t stage);
CHAM_API const char *cham_phase_name(cham_phase_t phase);
CHAM_API const char *cham_dtype_name(cham_dtype_t dtype);
/* cham_dtype_size: chameleon/types.h. */

/* What the step hook learns when a step ends. */
typedef struct cham_step_ended {
    uint64_t number;                 /* the step's number (cham_context_step during it) */
    cham_stage_t from, to;           /* the stage during the step / for the next one */
    bool backward;                   /* the step had a backward phase */
    uint64_t policies_generated;     /* so far in the run */
    uint64_t peak_bytes;             /* the most device memory tensors held in it */
    uint64_t over_budget_bytes;      /* how far peak_bytes went past the budget
                                        (cham_context_budget; advisor mode, where
                                        the caller allocates; else 0) */
} cham_step_ended_t;

/* Called at the end of every step, after the runtime decided what the next
 * step runs. One hook per context: cham_trace_open takes it. */
typedef void (*cham_step_hook_t)(cham_context_t *ctx, const cham_step_ended_t *step, void *user);
CHAM_API void cham_context_on_step(cham_context_t *ctx, cham_step_hook_t hook, void *user);

/* Log lines (stage changes, on-demand swaps, errors). By default lines go
 * to the library's output (cham_set_output: stderr unless one is
 * registered); a hook takes them instead, NULL restores the default. */
typedef void (*cham_log_hook_t)(const char *line, void *user);
CHAM_API void cham_context_set_log(cham_context_t *ctx, cham_log_hook_t hook, void *user);

/* Why a storage moved. */
typedef enum cham_swap_cause {
    CHAM_SWAP_CALLER,        /* cham_tensor_swap_out / cham_tensor_swap_in */
    CHAM_SWAP_PLANNED,       /* the applied policy */
    CHAM_SWAP_PASSIVE,       /* an allocation failed (out only) */
    CHAM_SWAP_ON_DEMAND,     /* an op needed it while on the host (in only) */
} cham_swap_cause_t;

/* One swap issued (the copy is queued, not done). */
typedef struct cham_swap_event {
    bool out;                /* device -> host; else host -> device */
    cham_swap_cause_t cause;
    const char *label;       /* of the storage's first view */
    uint64_t storage;        /* storage id, as in profiles */
    uint64_t bytes;
    const void *device_ptr;  /* the device block copied from or to */
    uint64_t step;           /* the number of the step it happened in */
    uint32_t op;             /* ops begun in this step so far */
} cham_swap_event_t;
typedef void (*cham_swap_hook_t)(const cham_swap_event_t *swap, void *user);
/* Called for every swap; NULL removes the hook. */
CHAM_API void cham_context_on_swap(cham_context_t *ctx, cham_swap_hook_t hook, void *user);
CHAM_API const char *cham_swap_cause_name(cham_swap_cause_t cause);

/* ---- profiling ------------------------------------------------------------*/

/* Profile the next step in detail even outside GenPolicy. */
CHAM_API void cham_context_request_profile(cham_context_t *ctx);
/* The last detailed profile completed (owned by the context, valid until
 * the next one completes or the context is freed), or NULL. */
CHAM_API const cham_profile_t *cham_context_last_profile(const cham_context_t *ctx);

/* The swap policy applied now (the executor's), or NULL: owned by the
 * context, valid until the next cham_step_end. chameleon/policy.h reads it. */
CHAM_API const cham_policy_t *cham_context_policy(const cham_context_t *ctx);

/* Counters a caller may watch. */
typedef struct cham_runtime_stats {
    uint64_t ops;                /* ops dispatched */
    uint64_t swaps_out, swaps_in;    /* all of them */
    uint64_t on_demand_swaps_in; /* storages used while on the host */
    uint64_t passive_swaps_out;  /* forced by allocation failures */
    uint64_t defrag_evictions;   /* of those, runs of neighbouring blocks
                                    moved out together to join free space */
    uint64_t planned_swaps_out, planned_swaps_in;  /* issued by a policy */
    uint64_t bytes_out, bytes_in;
    uint64_t stage_changes;
    uint64_t mem_in_use;         /* device bytes held by tensors now */
    uint64_t mem_peak;           /* the most mem_in_use has been */
    uint64_t items_matched;      /* policy items found in a step */
    uint64_t items_missed;       /* policy items a step never matched */
    uint64_t matched_loose;      /* of items_matched, by the loose key */
    uint64_t policies_generated; /* plans made in GenPolicy */
    uint64_t policy_failures;    /* plans that could not be made */
    uint64_t policy_cache_hits;  /* steps that got a kept policy back */
    uint64_t stable_switches;    /* kept policies replaced by one that measured
                                    faster in Stable (docs/executor.md) */
    uint64_t static_researches;  /* planner swapadvisor: plans dropped because
                                    the op sequence changed (each searched
                                    again) */
    uint64_t steps_with_policy;  /* steps run with a policy applied */
    uint64_t drops;              /* tensors dropped to be recomputed */
    uint64_t recomputes;         /* ops run again for them (chains count each) */
    uint64_t on_demand_recomputes; /* of those, before no planned point: an op
                                    needed the tensor, or was about to write
                                    one of its inputs */
    uint64_t bytes_dropped;
    uint64_t passive_drops;      /* of drops, made by the out-of-memory path
                                    instead of a passive swap-out */
    uint64_t over_budget_steps;  /* advisor mode: steps whose peak went past the
                                    budget (the advice was not enough, or not
                                    all taken) */
    uint64_t over_budget_bytes;  /* the most any step went past it */
} cham_runtime_stats_t;
CHAM_API void cham_context_get_stats(const cham_context_t *ctx, cham_runtime_stats_t *stats);
/* Starts mem_peak again from the memory in use now (for per-step peaks). */
CHAM_API void cham_context_reset_peak(cham_context_t *ctx);
/* Managed mode: the device allocator's counters (chameleon/alloc.h), among
 * them the memory block reuse interval. CHAM_ERR_INVALID_ARG in advisor
 * mode, where the caller owns memory. */
CHAM_API cham_status_t cham_context_alloc_stats(const cham_context_t *ctx,
                                                cham_alloc_stats_t *stats);

#ifdef __cplusplus
}
#endif

#endif
