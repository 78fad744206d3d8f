/* Dispatching the trainer's operators through the runtime, as an eager
 * framework does: each op is bracketed by cham_op_begin / cham_op_end with
 * the tensors it reads and writes, and launches one kernel on the compute
 * stream with a cost (FLOPs and bytes, for the sim's roofline timeline) and
 * a CPU function (the real work, run by the sim in data mode).
 *
 * The time the host spends inside Chameleon's calls is counted here, so the
 * trainer can report Chameleon's share of its CPU time. */
#ifndef CHAM_GPT_OPS_H
#define CHAM_GPT_OPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "chameleon/chameleon.h"

typedef enum gpt_kind {
    GPT_LOAD_TOKENS, GPT_INIT_PARAMS, GPT_ZERO,
    GPT_EMBED, GPT_EMBED_BWD,
    GPT_LAYERNORM, GPT_LAYERNORM_BWD,
    GPT_MATMUL, GPT_MATMUL_BWD,
    GPT_ATTENTION, GPT_ATTENTION_BWD,
    GPT_GELU, GPT_GELU_BWD,
    GPT_ADD, GPT_ACCUMULATE,
    GPT_CROSSENTROPY, GPT_CROSSENTROPY_BWD, GPT_LOSS_MEAN,
    GPT_CHECK_GRADS, GPT_INJECT_OVERFLOW, GPT_SCALE, GPT_ADAMW, GPT_READ,
    GPT_TO_HOST, GPT_FROM_HOST,  /* the host optimizer's copies (host_adam.h) */
    GPT_EMBED_AT, GPT_KV_WRITE, GPT_ATTENTION_DECODE, GPT_ARGMAX,   /* decoding (decode.h) */
    GPT_KV_PREFETCH, GPT_KV_STORE,  /* its KV offload's copies */
    GPT_KINDS
} gpt_kind_t;

/* Everything a kernel needs; which fields matter depends on the kind. The
 * f[] pointers are filled from the op's float tensors, inputs first, then
 * outputs, skipping the slots whose bit is set in null_f (an absent bias);
 * i[] likewise from its int32 tensors. */
typedef struct gpt_args {
    gpt_kind_t kind;
    float *f[8];
    uint32_t null_f;
    int32_t *i[2];               /* the op's int32 tensors, in the same order */
    const int32_t *host_tok;     /* LOAD_TOKENS: host data */
    int B, T, C, NH, V, N, OC;
    int pos;                     /* decoding: the position */
    size_t n;
    float scale;
    uint64_t seed;
    /* AdamW */
    int t;
    float lr, beta1, beta2, eps, wd;
    /* Host results (as by a synchronising .item()). */
    double *out_value;
    bool *out_flag;
    void *host_dst;              /* READ: copy n floats of f[0] here; ARGMAX:
                                    the N tokens */
} gpt_args_t;

/* Op tokens and the host time spent in Chameleon's calls. */
typedef struct gpt_ops {
    cham_context_t *ctx;
    cham_op_token_t tok[GPT_KINDS];
    uint64_t hook_ns;            /* CPU time inside cham_* calls, less kernel_ns */
    uint64_t kernel_ns;          /* of which: re-run kernels (data mode runs them
                                    on the host, inside cham_op_begin) */
    bool recompute;              /* the forward's ops (matmul, layer norm, attention,
                                    GELU, add) are declared
                                    recomputable (gpt_ops_enable_recompute) */
    double peak_flops, hbm_bandwidth;   /* what the device's kernels reach, for the ops' costs */
} gpt_ops_t;

cham_status_t gpt_ops_init(gpt_ops_t *o, cham_context_t *ctx);
/* Declares the forward's single-output ops recomputable (with their
 * roofline costs), so policies may drop their outputs and run them again. */
void gpt_ops_enable_recompute(gpt_ops_t *o);

/* One op: begin with the tensors, one kernel of (flops, bytes) whose CPU
 * function is the kernel of a->kind over the tensors' data, end. Outputs
 * in rw are read and written (accumulated gradients, updated parameters),
 * others only written. */
cham_status_t gpt_op(gpt_ops_t *o, gpt_args_t *a, cham_tensor_t *const *in, size_t n_in,
                     cham_tensor_t *const *out, size_t n_out, uint32_t rw_mask, double flops,
                     double bytes);

/* gpt_op with the bytes of its tensors, each read or written once. */
cham_status_t gpt_op_tensors(gpt_ops_t *o, gpt_args_t *a, cham_tensor_t *const *in, size_t n_in,
                             cham_tensor_t *const *out, size_t n_out, uint32_t rw_mask,
                             double flops);
/* One kernel of a->kind on stream s outside any op: a->f and a->i are
 * filled by the caller, acc lists the memory it touches. The host
 * optimizer's work on its host stream (host_adam.h). */
cham_status_t gpt_launch(cham_stream_t *s, gpt_args_t *a, const cham_access_t *acc, size_t n,
                         double flops, double bytes);

/* Tensors made and released through here are counted in hook_ns too. */
cham_status_t gpt_tensor(gpt_ops_t *o, size_t bytes, cham_dtype_t dtype, const char *label,
                         cham_tensor_t **out);
void gpt_release(gpt_ops_t *o, cham_tensor_t **t);

/* Thread CPU time in ns. */
uint64_t gpt_cpu_ns(void);

#endif
