/* Dispatching the trainer's operators (ops.h). */
#include <math.h>
#include <string.h>
#include <time.h>

#include "kernels.h"
#include "ops.h"
#include "common/rng.h" /* header-only (src/, private): the public API stays the only link */

static const char *const names[GPT_KINDS] = {
    "load_tokens", "init_params", "zero",
    "embedding", "embedding_backward",
    "layer_norm", "layer_norm_backward",
    "matmul", "matmul_backward",
    "attention", "attention_backward",
    "gelu", "gelu_backward",
    "add", "accumulate",
    "cross_entropy", "cross_entropy_backward", "loss_mean",
    "check_grads", "inject_overflow", "scale", "adamw", "read",
    "grads_to_host", "params_from_host",
    "embedding_at", "kv_write", "attention_decode", "argmax",
    "kv_prefetch", "kv_store"};

uint64_t gpt_cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

cham_status_t gpt_ops_init(gpt_ops_t *o, cham_context_t *ctx)
{
    memset(o, 0, sizeof *o);
    o->ctx = ctx;
    for (int k = 0; k < GPT_KINDS; k++) {
        cham_status_t st = cham_op_token(ctx, names[k], &o->tok[k]);
        if (st != CHAM_OK)
            return st;
    }
    return CHAM_OK;
}

/* Parameter initialisation: uniform values in [-scale, scale] from a hash
 * of (seed, index), or the constant `scale` when seed is 0 (layer-norm
 * weights 1, biases 0). */
static void init_params(gpt_args_t *a)
{
    for (size_t i = 0; i < a->n; i++) {
        if (a->seed == 0) {
            a->f[0][i] = a->scale;
            continue;
        }
        double u = cham_unit53(cham_mix64(a->seed * CHAM_GOLDEN64 + i));   /* [0, 1) */
        a->f[0][i] = (float)((2.0 * u - 1.0) * a->scale);
    }
}

static void run(void *p)
{
    gpt_args_t *a = p;
    float **f = a->f;
    switch (a->kind) {
    case GPT_LOAD_TOKENS:
        memcpy(a->i[0], a->host_tok, a->n * sizeof *a->i[0]);
        break;
    case GPT_INIT_PARAMS:
        init_params(a);
        break;
    case GPT_ZERO:
        memset(f[0], 0, a->n * sizeof *f[0]);
        break;
    case GPT_EMBED:             /* f: wte, wpe, out */
        gpt_embed_forward(f[2], a->i[0], f[0], f[1], a->B, a->T, a->C);
        break;
    case GPT_EMBED_BWD:         /* f: dout, dwte, dwpe */
        gpt_embed_backward(f[1], f[2], f[0], a->i[0], a->B, a->T, a->C);
        break;
    case GPT_LAYERNORM:         /* f: inp, w, b, out, mean, rstd */
        gpt_layernorm_forward(f[3], f[4], f[5], f[0], f[1], f[2], a->N, a->C);
        break;
    case GPT_LAYERNORM_BWD:     /* f: dout, inp, w, mean, rstd, dinp, dw, db */
        gpt_layernorm_backward(f[5], f[6], f[7], f[0], f[1], f[2], f[3], f[4], a->N, a->C);
        break;
    case GPT_MATMUL:            /* f: inp, w, b (or NULL), out */
        gpt_matmul_forward(f[3], f[0], f[1], f[2], a->N, a->C, a->OC);
        break;
    case GPT_MATMUL_BWD:        /* f: dout, inp, w, dinp, dw, db (or NULL) */
        gpt_matmul_backward(f[3], f[4], f[5], f[0], f[1], f[2], a->N, a->C, a->OC);
        break;
    case GPT_ATTENTION:         /* f: qkv, out, att */
        gpt_attention_forward(f[1], f[2], f[0], a->B, a->T, a->C, a->NH);
        break;
    case GPT_ATTENTION_BWD:     /* f: dout, qkv, att, dqkv */
        gpt_attention_backward(f[3], f[0], f[1], f[2], a->B, a->T, a->C, a->NH);
        break;
    case GPT_GELU:              /* f: inp, out */
        gpt_gelu_forward(f[1], f[0], a->n);
        break;
    case GPT_GELU_BWD:          /* f: dout, inp, dinp */
        gpt_gelu_backward(f[2], f[1], f[0], a->n);
        break;
    case GPT_ADD:               /* f: a, b, out */
        gpt_add_forward(f[2], f[0], f[1], a->n);
        break;
    case GPT_ACCUMULATE:        /* f: src, dst */
        gpt_accumulate(f[1], f[0], a->n);
        break;
    case GPT_CROSSENTROPY:      /* f: logits, losses, probs */
        gpt_crossentropy_forward(f[1], f[2], f[0], a->i[0], a->N, a->V);
        break;
    case GPT_CROSSENTROPY_BWD:  /* f: probs, dlogits */
        gpt_crossentropy_backward(f[1], f[0], a->i[0], a->N, a->V, a->scale);
        break;
    case GPT_LOSS_MEAN: {       /* f: losses */
        double s = 0;
        for (size_t i = 0; i < a->n; i++)
            s += f[0][i];
        *a->out_value = s / (double)a->n;
        break;
    }
    case GPT_CHECK_GRADS:       /* f: grads */
        *a->out_flag = gpt_has_nonfinite(f[0], a->n);
        *a->out_value = *a->out_flag ? 0 : gpt_sum_squares(f[0], a->n);
        break;
    case GPT_INJECT_OVERFLOW:   /* f: grads */
        f[0][0] = INFINITY;
        break;
    case GPT_SCALE:             /* f: x */
        gpt_scale(f[0], a->n, a->scale);
        break;
    case GPT_ADAMW:             /* f: grads, params, m, v */
        gpt_adamw(f[1], f[2], f[3], f[0], a->n, a->t, a->lr, a->beta1, a->beta2, a->eps, a->wd);
        break;
    case GPT_READ:              /* f: x */
        memcpy(a->host_dst, f[0], a->n * sizeof *f[0]);
        break;
    case GPT_EMBED_AT:          /* f: wte, wpe, out; i: tokens */
        gpt_embed_at(f[2], a->i[0], f[0], f[1], a->B, a->pos, a->C);
        break;
    case GPT_KV_WRITE:          /* f: qkv, cache */
        gpt_kv_write(f[1], f[0], a->B, a->C, a->pos);
        break;
    case GPT_ATTENTION_DECODE:  /* f: qkv, cache, out */
        gpt_attention_decode(f[2], f[0], f[1], a->B, a->C, a->NH, a->pos);
        break;
    case GPT_ARGMAX:            /* f: logits */
        gpt_argmax(a->host_dst, f[0], a->N, a->V);
        break;
    case GPT_TO_HOST:           /* copies, never run as kernels */
    case GPT_FROM_HOST:
    case GPT_KV_PREFETCH:
    case GPT_KV_STORE:
    case GPT_KINDS:
        break;
    }
}

/* ---- recomputation -------------------------------------------------------------
 * The forward's ops (matmul, layer norm, attention, GELU, add) are pure
 * functions of their inputs: the runtime may drop an output and call
 * rerun() to make it again. The tag packs what run() needs besides the
 * tensors: the kind, whether the matmul has a bias, and the shape. An op
 * whose shape does not fit the tag is not declared (it is only swapped). */
enum { KIND_BITS = 5 };

static bool fits(uint64_t v, int bits)
{
    return v < (UINT64_C(1) << bits);
}

static bool make_tag(const gpt_args_t *a, uint64_t *tag)
{
    uint64_t k = (uint64_t)a->kind, N = (uint64_t)a->N, C = (uint64_t)a->C, OC = (uint64_t)a->OC;
    uint64_t B = (uint64_t)a->B, T = (uint64_t)a->T, NH = (uint64_t)a->NH;
    switch (a->kind) {
    case GPT_GELU:
    case GPT_ADD:
        if (!fits(a->n, 64 - KIND_BITS))
            return false;
        *tag = k | (uint64_t)a->n << KIND_BITS;
        return true;
    case GPT_MATMUL:           /* bias 1, N 18, C 20, OC 20 */
        if (!fits(N, 18) || !fits(C, 20) || !fits(OC, 20))
            return false;
        *tag = k | (uint64_t)(a->null_f >> 2 & 1) << 5 | N << 6 | C << 24 | OC << 44;
        return true;
    case GPT_LAYERNORM:        /* N 29, C 30 */
        if (!fits(N, 29) || !fits(C, 30))
            return false;
        *tag = k | N << 5 | C << 34;
        return true;
    case GPT_ATTENTION:        /* B 12, T 16, C 20, NH 11 */
        if (!fits(B, 12) || !fits(T, 16) || !fits(C, 20) || !fits(NH, 11))
            return false;
        *tag = k | B << 5 | T << 17 | C << 33 | NH << 53;
        return true;
    default:
        return false;
    }
}

/* The kernel's arguments and FLOPs from a tag (as model.c counts them). */
static bool from_tag(uint64_t tag, gpt_args_t *a, double *flops)
{
    *a = (gpt_args_t){.kind = (gpt_kind_t)(tag & ((1u << KIND_BITS) - 1))};
    switch (a->kind) {
    case GPT_GELU:
    case GPT_ADD:
        a->n = (size_t)(tag >> KIND_BITS);
        *flops = (double)a->n;
        return true;
    case GPT_MATMUL:
        a->null_f = (uint32_t)(tag >> 5 & 1) << 2;
        a->N = (int)(tag >> 6 & 0x3ffff);
        a->C = (int)(tag >> 24 & 0xfffff);
        a->OC = (int)(tag >> 44 & 0xfffff);
        *flops = 2.0 * a->N * a->C * a->OC;
        return true;
    case GPT_LAYERNORM:
        a->N = (int)(tag >> 5 & 0x1fffffff);
        a->C = (int)(tag >> 34 & 0x3fffffff);
        *flops = 8.0 * a->N * a->C;
        return true;
    case GPT_ATTENTION:
        a->B = (int)(tag >> 5 & 0xfff);
        a->T = (int)(tag >> 17 & 0xffff);
        a->C = (int)(tag >> 33 & 0xfffff);
        a->NH = (int)(tag >> 53 & 0x7ff);
        *flops = 4.0 * a->B * a->T * a->T * a->C;
        return true;
    default:
        return false;
    }
}

static cham_status_t rerun(cham_context_t *ctx, const cham_recompute_call_t *call, void *user)
{
    (void)ctx;
    gpt_ops_t *o = user;
    gpt_args_t a;
    double flops;
    size_t n = call->n_inputs + call->n_outputs;
    if (!from_tag(call->tag, &a, &flops) || n > 8)
        return CHAM_ERR_INVALID_ARG;
    cham_access_t acc[8];
    double bytes = 0;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        bool out = i >= call->n_inputs;
        void *p = out ? call->outputs[i - call->n_inputs] : call->inputs[i];
        size_t b = out ? call->output_bytes[i - call->n_inputs] : call->input_bytes[i];
        acc[i] = (cham_access_t){p, b, out ? CHAM_ACCESS_WRITE : CHAM_ACCESS_READ};
        bytes += (double)b;
        while (k < 8 && (a.null_f >> k & 1))
            k++;
        a.f[k++] = p;
    }
    cham_kernel_t kern = {.label = names[a.kind], .flops = flops, .bytes = bytes,
                          .accesses = acc, .n_accesses = n, .cpu_fn = run, .arg = &a};
    /* In data mode the sim runs the kernel on the host inside this call,
     * itself inside cham_op_begin: that time is the kernel's, not
     * Chameleon's, and is not counted as its overhead. */
    uint64_t t0 = gpt_cpu_ns();
    cham_status_t st = cham_kernel_launch(call->stream, &kern);
    o->kernel_ns += gpt_cpu_ns() - t0;
    return st;
}

void gpt_ops_enable_recompute(gpt_ops_t *o)
{
    cham_context_on_recompute(o->ctx, rerun, o);
    o->recompute = true;
    cham_device_info_t info;
    cham_device_get_info(cham_context_device(o->ctx), &info);
    o->peak_flops = info.peak_flops * info.flops_efficiency;
    o->hbm_bandwidth = info.hbm_bandwidth * info.hbm_efficiency;
}

cham_status_t gpt_op(gpt_ops_t *o, gpt_args_t *a, cham_tensor_t *const *in, size_t n_in,
                     cham_tensor_t *const *out, size_t n_out, uint32_t rw_mask, double flops,
                     double bytes)
{
    uint64_t t0 = gpt_cpu_ns(), k0 = o->kernel_ns;
    cham_status_t st = cham_op_begin(o->ctx, o->tok[a->kind], in, n_in, out, n_out);
    o->hook_ns += gpt_cpu_ns() - t0 - (o->kernel_ns - k0);   /* re-runs are kernels */
    if (st != CHAM_OK)
        return st;
    cham_access_t acc[10];
    size_t n = 0, k = 0, ki = 0;
    for (size_t i = 0; i < n_in + n_out; i++) {
        cham_tensor_t *t = i < n_in ? in[i] : out[i - n_in];
        bool rw = i >= n_in && (rw_mask >> (i - n_in) & 1);
        void *p = cham_tensor_data(t);
        acc[n++] = (cham_access_t){p, cham_tensor_bytes(t),
                                   i < n_in ? CHAM_ACCESS_READ
                                            : rw ? CHAM_ACCESS_READ_WRITE : CHAM_ACCESS_WRITE};
        if (cham_tensor_dtype(t) == CHAM_DTYPE_I32 && ki < 2)
            a->i[ki++] = p;
        if (cham_tensor_dtype(t) != CHAM_DTYPE_F32)
            continue;
        while (k < 8 && (a->null_f >> k & 1))
            k++;
        if (k < 8)
            a->f[k++] = p;
    }
    cham_kernel_t kern = {.label = names[a->kind], .flops = flops, .bytes = bytes,
                          .accesses = acc, .n_accesses = n, .cpu_fn = run, .arg = a};
    st = cham_kernel_launch(cham_context_compute_stream(o->ctx), &kern);
    uint64_t tag;
    t0 = gpt_cpu_ns();
    if (st == CHAM_OK && o->recompute && !rw_mask && make_tag(a, &tag)) {
        double tf = flops / o->peak_flops, tb = bytes / o->hbm_bandwidth;
        st = cham_op_set_cost(o->ctx, 1e9 * (tf > tb ? tf : tb));
        if (st == CHAM_OK)
            st = cham_op_set_recompute(o->ctx, tag);
    }
    cham_status_t end = cham_op_end(o->ctx);
    o->hook_ns += gpt_cpu_ns() - t0;
    return st != CHAM_OK ? st : end;
}

cham_status_t gpt_op_tensors(gpt_ops_t *o, gpt_args_t *a, cham_tensor_t *const *in, size_t n_in,
                             cham_tensor_t *const *out, size_t n_out, uint32_t rw_mask,
                             double flops)
{
    double bytes = 0;
    for (size_t i = 0; i < n_in; i++)
        bytes += (double)cham_tensor_bytes(in[i]);
    for (size_t i = 0; i < n_out; i++)
        bytes += (double)cham_tensor_bytes(out[i]);
    return gpt_op(o, a, in, n_in, out, n_out, rw_mask, flops, bytes);
}

cham_status_t gpt_launch(cham_stream_t *s, gpt_args_t *a, const cham_access_t *acc, size_t n,
                         double flops, double bytes)
{
    cham_kernel_t kern = {.label = names[a->kind], .flops = flops, .bytes = bytes,
                          .accesses = acc, .n_accesses = n, .cpu_fn = run, .arg = a};
    return cham_kernel_launch(s, &kern);
}

cham_status_t gpt_tensor(gpt_ops_t *o, size_t bytes, cham_dtype_t dtype, const char *label,
                         cham_tensor_t **out)
{
    uint64_t t0 = gpt_cpu_ns();
    cham_status_t st = cham_tensor_new(o->ctx, bytes, dtype, label, out);
    o->hook_ns += gpt_cpu_ns() - t0;
    return st;
}

void gpt_release(gpt_ops_t *o, cham_tensor_t **t)
{
    if (!*t)
        return;
    uint64_t t0 = gpt_cpu_ns();
    cham_tensor_release(*t);
    o->hook_ns += gpt_cpu_ns() - t0;
    *t = NULL;
}
