/* One transformer layer's forward and backward, the embedding and the head,
 * op by op as an eager framework's autograd runs them: each forward op
 * makes its outputs, the tensors its backward needs are kept, everything
 * else is released as soon as its last reader has been dispatched; the
 * backward frees what it consumed. docs/workloads.md lists the ops, their
 * tensors and costs. */
#include <stdlib.h>

#include "workload/workload-impl.h"

#define RUN(w, op, flops, ...)                                                                \
    wl_run((w), (op), (const wl_arg_t[]){__VA_ARGS__},                                        \
           sizeof((const wl_arg_t[]){__VA_ARGS__}) / sizeof(wl_arg_t), (flops), 0)

/* Parts of a layer's weight (or gradient) storage, in parameters. */
typedef enum part { P_NORM1, P_QKV, P_OUT, P_NORM2, P_MLP } part_t;

static uint64_t part_offset(const wl_layer_params_t *lp, part_t part)
{
    uint64_t off = 0;
    const uint64_t sizes[] = {lp->norm1, lp->qkv, lp->out, lp->norm2, lp->mlp};
    for (int i = 0; i < (int)part; i++)
        off += sizes[i];
    return off;
}

static uint64_t part_size(const wl_layer_params_t *lp, part_t part)
{
    const uint64_t sizes[] = {lp->norm1, lp->qkv, lp->out, lp->norm2, lp->mlp};
    return sizes[part];
}

/* A view of params [first, first + count) of a weight or gradient. */
static cham_status_t span(cham_workload_t *w, cham_tensor_t *base, uint64_t first,
                          uint64_t count, cham_tensor_t **out)
{
    uint64_t p = cham_dtype_size(cham_tensor_dtype(base));
    return wl_view(w, base, first * p, count * p, out);
}

static cham_status_t part(cham_workload_t *w, cham_tensor_t *base, part_t pt,
                          cham_tensor_t **out)
{
    return span(w, base, part_offset(&w->lp, pt), part_size(&w->lp, pt), out);
}

/* Expert e's gate|up (which 0) or down (which 1) weights in the MLP part. */
static cham_status_t expert_part(cham_workload_t *w, cham_tensor_t *base, uint32_t e,
                                 int which, cham_tensor_t **out)
{
    uint64_t h = w->m.hidden, f = w->m.ffn / w->m.tp;
    uint64_t first = part_offset(&w->lp, P_MLP) + h * w->m.experts + e * 3 * h * f;
    return which == 0 ? span(w, base, first, 2 * h * f, out)
                      : span(w, base, first + 2 * h * f, h * f, out);
}

static cham_status_t router_part(cham_workload_t *w, cham_tensor_t *base, cham_tensor_t **out)
{
    return span(w, base, part_offset(&w->lp, P_MLP), (uint64_t)w->m.hidden * w->m.experts, out);
}

/* Releases t unless it is kept for the backward. */
static void spent(cham_workload_t *w, cham_tensor_t **t, bool keep)
{
    if (!keep)
        wl_drop(w, t);
}

/* ---- matmul-shaped ops -------------------------------------------------------------*/

/* y = x W for a weight part: forward 2 T in out FLOPs (the weight view's
 * size is in * out parameters). */
static cham_status_t linear(cham_workload_t *w, wl_op_t op, cham_tensor_t *x, cham_tensor_t *wt,
                            cham_tensor_t *y, uint64_t rows)
{
    uint64_t params = cham_tensor_bytes(wt) / cham_dtype_size(w->m.dtype);
    return RUN(w, op, 2.0 * (double)rows * (double)params, R(x), R(wt), W(y));
}

/* dx = dy W^T and dW += x^T dy: twice the forward's FLOPs. */
static cham_status_t linear_bwd(cham_workload_t *w, wl_op_t op, cham_tensor_t *dy,
                                cham_tensor_t *x, cham_tensor_t *wt, cham_tensor_t *gw,
                                cham_tensor_t *dx, uint64_t rows)
{
    uint64_t params = cham_tensor_bytes(wt) / cham_dtype_size(w->m.dtype);
    return RUN(w, op, 4.0 * (double)rows * (double)params, R(dy), R(x), R(wt), RW(gw), W(dx));
}

/* ---- MoE routing -------------------------------------------------------------------*/

/* Tokens per expert for layer l, micro-batch mb: balanced, or (moe_vary)
 * drawn from seeded weights, summing to T * topk either way. */
static void expert_counts(cham_workload_t *w, uint32_t l, uint64_t mb, uint32_t *c)
{
    const cham_model_config_t *m = &w->m;
    uint64_t total = wl_tokens(m) * m->topk, given = 0;
    double wsum = 0, wt[256];
    for (uint32_t e = 0; e < m->experts; e++) {
        wt[e] = m->moe_vary ? 0.25 + 1.5 * wl_uniform(m->seed, w->step * 4096 + l,
                                                     WL_SALT_MOE + mb * 256 + e)
                            : 1.0;
        wsum += wt[e];
    }
    for (uint32_t e = 0; e < m->experts; e++) {
        c[e] = (uint32_t)((double)total * wt[e] / wsum);
        given += c[e];
    }
    for (uint32_t e = 0; given < total; e = (e + 1) % m->experts, given++)
        c[e]++;
    for (uint32_t e = 0; e < m->experts; e++)
        if (c[e] > w->expert_max)
            w->expert_max = c[e];
}

/* ---- the MLP -----------------------------------------------------------------------*/

static cham_status_t mlp_forward(cham_workload_t *w, uint32_t l, uint64_t mb, cham_tensor_t *wt,
                                 bool keep, wl_saved_t *sv, cham_tensor_t **out)
{
    const cham_model_config_t *m = &w->m;
    cham_dtype_t dt = m->dtype;
    uint64_t T = wl_tokens(m), h = m->hidden, f = m->ffn / m->tp, p = cham_dtype_size(dt);
    cham_tensor_t *wp = NULL, *y;
    TRY(wl_new(w, T * h * p, dt, &y, "L%u.mlp_out", l));
    if (m->arch != CHAM_ARCH_MIXTRAL) {
        bool gpt = m->arch == CHAM_ARCH_GPT2;
        uint64_t mid = gpt ? f : 2 * f;
        uint64_t first = part_offset(&w->lp, P_MLP);
        TRY(wl_new(w, T * mid * p, dt, &sv->mid, "L%u.%s", l, gpt ? "fc1_out" : "gate_up_out"));
        TRY(span(w, wt, first, gpt ? h * f + f : 2 * h * f, &wp));
        TRY(linear(w, gpt ? OP_FC1 : OP_GATE_UP, sv->n2, wp, sv->mid, T));
        wl_drop(w, &wp);
        spent(w, &sv->n2, keep);
        TRY(wl_new(w, T * f * p, dt, &sv->act, "L%u.%s", l, gpt ? "gelu_out" : "swiglu_out"));
        TRY(RUN(w, gpt ? OP_GELU : OP_SWIGLU, (gpt ? 8.0 : 4.0) * (double)(T * f), R(sv->mid),
                W(sv->act)));
        spent(w, &sv->mid, keep);
        TRY(span(w, wt, first + (gpt ? h * f + f : 2 * h * f), gpt ? f * h + h : f * h, &wp));
        TRY(linear(w, gpt ? OP_FC2 : OP_DOWN, sv->act, wp, y, T));
        wl_drop(w, &wp);
        spent(w, &sv->act, keep);
        *out = y;
        return CHAM_OK;
    }
    /* Mixtral: route each token to topk experts, run each expert on its
     * rows of the permuted copy, combine with the gate weights. */
    uint64_t E = m->experts, k = m->topk, routed = T * k;
    cham_tensor_t *logits;
    TRY(wl_new(w, T * E * 4, CHAM_DTYPE_F32, &logits, "L%u.router_logits", l));
    TRY(router_part(w, wt, &wp));
    TRY(linear(w, OP_ROUTER, sv->n2, wp, logits, T));
    wl_drop(w, &wp);
    TRY(wl_new(w, routed * 4, CHAM_DTYPE_F32, &sv->gates, "L%u.gates", l));
    TRY(wl_new(w, routed * 8, CHAM_DTYPE_I64, &sv->idx, "L%u.expert_ids", l));
    TRY(RUN(w, OP_ROUTE, 10.0 * (double)(T * E), R(logits), W(sv->gates), W(sv->idx)));
    wl_drop(w, &logits);
    TRY(wl_new(w, routed * h * p, dt, &sv->xp, "L%u.permuted", l));
    TRY(RUN(w, OP_PERMUTE, 0, R(sv->n2), R(sv->idx), W(sv->xp)));
    spent(w, &sv->n2, keep);
    if (!(sv->counts = malloc(E * sizeof *sv->counts)))
        return CHAM_ERR_HOST_OOM;
    expert_counts(w, l, mb, sv->counts);
    TRY(wl_new(w, routed * 2 * f * p, dt, &sv->mid, "L%u.experts_gate_up", l));
    TRY(wl_new(w, routed * f * p, dt, &sv->act, "L%u.experts_swiglu", l));
    TRY(wl_new(w, routed * h * p, dt, &sv->y, "L%u.experts_out", l));
    for (uint64_t e = 0, row = 0; e < E; row += sv->counts[e], e++) {
        uint64_t n = sv->counts[e];
        if (n == 0)
            continue;               /* no token chose this expert: no kernels */
        cham_tensor_t *xe, *ge, *ae, *ye;
        TRY(wl_view(w, sv->xp, row * h * p, n * h * p, &xe));
        TRY(wl_view(w, sv->mid, row * 2 * f * p, n * 2 * f * p, &ge));
        TRY(wl_view(w, sv->act, row * f * p, n * f * p, &ae));
        TRY(wl_view(w, sv->y, row * h * p, n * h * p, &ye));
        TRY(expert_part(w, wt, (uint32_t)e, 0, &wp));
        TRY(linear(w, OP_GATE_UP, xe, wp, ge, n));
        wl_drop(w, &wp);
        TRY(RUN(w, OP_SWIGLU, 4.0 * (double)(n * f), R(ge), W(ae)));
        TRY(expert_part(w, wt, (uint32_t)e, 1, &wp));
        TRY(linear(w, OP_DOWN, ae, wp, ye, n));
        wl_drop(w, &wp);
        wl_drop(w, &xe);
        wl_drop(w, &ge);
        wl_drop(w, &ae);
        wl_drop(w, &ye);
    }
    spent(w, &sv->xp, keep);
    spent(w, &sv->mid, keep);
    spent(w, &sv->act, keep);
    TRY(RUN(w, OP_COMBINE, 2.0 * (double)(routed * h), R(sv->y), R(sv->gates), R(sv->idx),
            W(y)));
    spent(w, &sv->y, keep);
    spent(w, &sv->gates, keep);
    spent(w, &sv->idx, keep);
    *out = y;
    return CHAM_OK;
}

/* The MLP's backward from dy (read only: the residual's gradient is the
 * same tensor); *dn2 receives the gradient of the MLP's input. */
static cham_status_t mlp_backward(cham_workload_t *w, uint32_t l, cham_tensor_t *wt,
                                  cham_tensor_t *gw, wl_saved_t *sv, cham_tensor_t *dy,
                                  cham_tensor_t **dn2)
{
    const cham_model_config_t *m = &w->m;
    cham_dtype_t dt = m->dtype;
    uint64_t T = wl_tokens(m), h = m->hidden, f = m->ffn / m->tp, p = cham_dtype_size(dt);
    cham_tensor_t *wp = NULL, *gp = NULL;
    if (m->arch != CHAM_ARCH_MIXTRAL) {
        bool gpt = m->arch == CHAM_ARCH_GPT2;
        uint64_t mid = gpt ? f : 2 * f, first = part_offset(&w->lp, P_MLP);
        uint64_t in_params = gpt ? h * f + f : 2 * h * f, out_params = gpt ? f * h + h : f * h;
        cham_tensor_t *dact, *dmid;
        TRY(wl_new(w, T * f * p, dt, &dact, "L%u.d_act", l));
        TRY(span(w, wt, first + in_params, out_params, &wp));
        TRY(span(w, gw, first + in_params, out_params, &gp));
        TRY(linear_bwd(w, gpt ? OP_FC2_BWD : OP_DOWN_BWD, dy, sv->act, wp, gp, dact, T));
        wl_drop(w, &wp);
        wl_drop(w, &gp);
        wl_drop(w, &sv->act);
        TRY(wl_new(w, T * mid * p, dt, &dmid, "L%u.d_mid", l));
        TRY(RUN(w, gpt ? OP_GELU_BWD : OP_SWIGLU_BWD, (gpt ? 16.0 : 8.0) * (double)(T * f),
                R(dact), R(sv->mid), W(dmid)));
        wl_drop(w, &dact);
        wl_drop(w, &sv->mid);
        TRY(wl_new(w, T * h * p, dt, dn2, "L%u.d_norm2", l));
        TRY(span(w, wt, first, in_params, &wp));
        TRY(span(w, gw, first, in_params, &gp));
        TRY(linear_bwd(w, gpt ? OP_FC1_BWD : OP_GATE_UP_BWD, dmid, sv->n2, wp, gp, *dn2, T));
        wl_drop(w, &wp);
        wl_drop(w, &gp);
        wl_drop(w, &dmid);
        wl_drop(w, &sv->n2);
        return CHAM_OK;
    }
    uint64_t E = m->experts, k = m->topk, routed = T * k;
    cham_tensor_t *dys, *dgates, *dxp;
    TRY(wl_new(w, routed * h * p, dt, &dys, "L%u.d_experts_out", l));
    TRY(wl_new(w, routed * 4, CHAM_DTYPE_F32, &dgates, "L%u.d_gates", l));
    TRY(RUN(w, OP_COMBINE_BWD, 4.0 * (double)(routed * h), R(dy), R(sv->y), R(sv->gates),
            R(sv->idx), W(dys), W(dgates)));
    wl_drop(w, &sv->y);
    TRY(wl_new(w, routed * h * p, dt, &dxp, "L%u.d_permuted", l));
    uint64_t row = routed;
    for (uint64_t e = E; e-- > 0;) {       /* autograd visits the experts in reverse */
        uint64_t n = sv->counts[e];
        row -= n;
        if (n == 0)
            continue;
        cham_tensor_t *dye, *ae, *ge, *xe, *dxe, *dae, *dge;
        TRY(wl_view(w, dys, row * h * p, n * h * p, &dye));
        TRY(wl_view(w, sv->act, row * f * p, n * f * p, &ae));
        TRY(wl_view(w, sv->mid, row * 2 * f * p, n * 2 * f * p, &ge));
        TRY(wl_view(w, sv->xp, row * h * p, n * h * p, &xe));
        TRY(wl_view(w, dxp, row * h * p, n * h * p, &dxe));
        TRY(wl_new(w, n * f * p, dt, &dae, "L%u.e%llu.d_act", l, (unsigned long long)e));
        TRY(expert_part(w, wt, (uint32_t)e, 1, &wp));
        TRY(expert_part(w, gw, (uint32_t)e, 1, &gp));
        TRY(linear_bwd(w, OP_DOWN_BWD, dye, ae, wp, gp, dae, n));
        wl_drop(w, &wp);
        wl_drop(w, &gp);
        TRY(wl_new(w, n * 2 * f * p, dt, &dge, "L%u.e%llu.d_mid", l, (unsigned long long)e));
        TRY(RUN(w, OP_SWIGLU_BWD, 8.0 * (double)(n * f), R(dae), R(ge), W(dge)));
        wl_drop(w, &dae);
        TRY(expert_part(w, wt, (uint32_t)e, 0, &wp));
        TRY(expert_part(w, gw, (uint32_t)e, 0, &gp));
        TRY(linear_bwd(w, OP_GATE_UP_BWD, dge, xe, wp, gp, dxe, n));
        wl_drop(w, &wp);
        wl_drop(w, &gp);
        wl_drop(w, &dge);
        wl_drop(w, &dye);
        wl_drop(w, &ae);
        wl_drop(w, &ge);
        wl_drop(w, &xe);
        wl_drop(w, &dxe);
    }
    wl_drop(w, &dys);
    wl_drop(w, &sv->act);
    wl_drop(w, &sv->mid);
    wl_drop(w, &sv->xp);
    TRY(wl_new(w, T * h * p, dt, dn2, "L%u.d_norm2", l));
    TRY(RUN(w, OP_PERMUTE_BWD, 0, R(dxp), R(sv->idx), W(*dn2)));
    wl_drop(w, &dxp);
    wl_drop(w, &sv->idx);
    cham_tensor_t *dlogits, *dr;
    TRY(wl_new(w, T * E * 4, CHAM_DTYPE_F32, &dlogits, "L%u.d_router_logits", l));
    TRY(RUN(w, OP_ROUTE_BWD, 10.0 * (double)(T * E), R(dgates), R(sv->gates), W(dlogits)));
    wl_drop(w, &dgates);
    wl_drop(w, &sv->gates);
    TRY(wl_new(w, T * h * p, dt, &dr, "L%u.d_norm2_router", l));
    TRY(router_part(w, wt, &wp));
    TRY(router_part(w, gw, &gp));
    TRY(linear_bwd(w, OP_ROUTER_BWD, dlogits, sv->n2, wp, gp, dr, T));
    wl_drop(w, &wp);
    wl_drop(w, &gp);
    wl_drop(w, &dlogits);
    wl_drop(w, &sv->n2);
    TRY(RUN(w, OP_GRAD_ACC, (double)(T * h), R(dr), RW(*dn2)));
    wl_drop(w, &dr);
    return CHAM_OK;
}

/* ---- the layer -----------------------------------------------------------------------*/

/* QK^T and PV of this device's heads: 4 b heads s^2 hd FLOPs (the fused
 * kernel skips the causal mask's half of it). */
static double attention_flops(const cham_model_config_t *m)
{
    double s = m->seq;
    return 4.0 * m->mbs * (double)(m->heads / m->tp) * s * s * (double)wl_head_dim(m);
}

bool wl_layer_dropped(const cham_workload_t *w, uint32_t l)
{
    return w->m.layer_drop > 0 && !w->evaluating &&
           wl_uniform(w->m.seed, w->step, WL_SALT_DROP + l) < w->m.layer_drop;
}

static cham_status_t norm(cham_workload_t *w, cham_tensor_t *x, cham_tensor_t *wt, part_t pt,
                          cham_tensor_t *y, cham_tensor_t *stats)
{
    cham_tensor_t *wp;
    TRY(part(w, wt, pt, &wp));
    cham_status_t st = RUN(w, OP_NORM, 5.0 * (double)(wl_tokens(&w->m) * w->m.hidden), R(x),
                           R(wp), W(y), W(stats));
    wl_drop(w, &wp);
    return st;
}

static cham_status_t norm_bwd(cham_workload_t *w, cham_tensor_t *dy, cham_tensor_t *x,
                              cham_tensor_t *stats, cham_tensor_t *wt, cham_tensor_t *gw,
                              part_t pt, cham_tensor_t *dx)
{
    cham_tensor_t *wp, *gp;
    TRY(part(w, wt, pt, &wp));
    TRY(part(w, gw, pt, &gp));
    cham_status_t st = RUN(w, OP_NORM_BWD, 10.0 * (double)(wl_tokens(&w->m) * w->m.hidden),
                           R(dy), R(x), R(stats), R(wp), RW(gp), W(dx));
    wl_drop(w, &wp);
    wl_drop(w, &gp);
    return st;
}

static cham_status_t tp_all_reduce(cham_workload_t *w, cham_tensor_t *t)
{
    if (w->m.tp == 1)
        return CHAM_OK;
    wl_arg_t a = RW(t);
    return wl_comm(w, OP_ALL_REDUCE, &a, 1,
                   wl_all_reduce_bytes(cham_tensor_bytes(t), w->m.tp), 0, true);
}

/* The forward proper; sv receives every tensor the backward reads, or none
 * of them (keep false). x is taken over. */
static cham_status_t forward(cham_workload_t *w, uint32_t l, uint64_t mb, cham_tensor_t *x,
                             bool keep, wl_saved_t *sv, cham_tensor_t **out)
{
    const cham_model_config_t *m = &w->m;
    cham_dtype_t dt = m->dtype;
    uint64_t T = wl_tokens(m), h = m->hidden, p = cham_dtype_size(dt);
    uint64_t heads = m->heads / m->tp, s = m->seq;
    cham_tensor_t *wt, *wp, *o, *y, *x2;
    sv->x = x;
    TRY(wl_matmul_weights(w, l, &wt));
    TRY(wl_new(w, T * h * p, dt, &sv->n1, "L%u.norm1_out", l));
    TRY(wl_new(w, T * wl_stats_bytes(m), CHAM_DTYPE_F32, &sv->st1, "L%u.norm1_stats", l));
    TRY(norm(w, sv->x, wt, P_NORM1, sv->n1, sv->st1));
    TRY(wl_new(w, T * wl_qkv_width(m) * p, dt, &sv->qkv, "L%u.qkv", l));
    TRY(part(w, wt, P_QKV, &wp));
    TRY(linear(w, OP_QKV, sv->n1, wp, sv->qkv, T));
    wl_drop(w, &wp);
    spent(w, &sv->n1, keep);
    if (m->arch != CHAM_ARCH_GPT2) {
        cham_tensor_t *r;
        TRY(wl_new(w, T * wl_qkv_width(m) * p, dt, &r, "L%u.qkv_rotary", l));
        TRY(RUN(w, OP_ROPE, 3.0 * (double)(T * wl_qkv_width(m)), R(sv->qkv), W(r)));
        wl_drop(w, &sv->qkv);
        sv->qkv = r;
    }
    double attn_flops = attention_flops(m);
    TRY(wl_new(w, T * wl_ctx_width(m) * p, dt, &sv->ctx, "L%u.attn_out", l));
    if (m->flash) {
        TRY(wl_new(w, wl_lse_bytes(m), CHAM_DTYPE_F32, &sv->lse, "L%u.attn_lse", l));
        TRY(RUN(w, OP_FLASH, attn_flops / 2, R(sv->qkv), W(sv->ctx), W(sv->lse)));
        spent(w, &sv->lse, keep);
    } else {
        cham_tensor_t *scores;
        TRY(wl_new(w, wl_scores_bytes(m), dt, &scores, "L%u.attn_scores", l));
        TRY(RUN(w, OP_SCORES, attn_flops / 2, R(sv->qkv), W(scores)));
        TRY(wl_new(w, wl_scores_bytes(m), dt, &sv->probs, "L%u.attn_probs", l));
        TRY(RUN(w, OP_SOFTMAX, 5.0 * (double)m->mbs * (double)heads * (double)(s * s),
                R(scores), W(sv->probs)));
        wl_drop(w, &scores);
        TRY(RUN(w, OP_CONTEXT, attn_flops / 2, R(sv->probs), R(sv->qkv), W(sv->ctx)));
        spent(w, &sv->probs, keep);
    }
    spent(w, &sv->qkv, keep);
    TRY(wl_new(w, T * h * p, dt, &o, "L%u.attn_proj", l));
    TRY(part(w, wt, P_OUT, &wp));
    TRY(linear(w, OP_OUT, sv->ctx, wp, o, T));
    wl_drop(w, &wp);
    spent(w, &sv->ctx, keep);
    TRY(tp_all_reduce(w, o));
    TRY(wl_new(w, T * h * p, dt, &sv->x1, "L%u.resid1", l));
    TRY(RUN(w, OP_ADD, (double)(T * h), R(sv->x), R(o), W(sv->x1)));
    wl_drop(w, &o);
    spent(w, &sv->x, keep);
    spent(w, &sv->st1, keep);
    TRY(wl_new(w, T * h * p, dt, &sv->n2, "L%u.norm2_out", l));
    TRY(wl_new(w, T * wl_stats_bytes(m), CHAM_DTYPE_F32, &sv->st2, "L%u.norm2_stats", l));
    TRY(norm(w, sv->x1, wt, P_NORM2, sv->n2, sv->st2));
    spent(w, &sv->st2, keep);
    TRY(mlp_forward(w, l, mb, wt, keep, sv, &y));
    wl_drop(w, &wt);
    TRY(tp_all_reduce(w, y));
    TRY(wl_new(w, T * h * p, dt, &x2, "L%u.resid2", l));
    TRY(RUN(w, OP_ADD, (double)(T * h), R(sv->x1), R(y), W(x2)));
    wl_drop(w, &y);
    spent(w, &sv->x1, keep);
    *out = x2;
    return CHAM_OK;
}

static cham_status_t layer_forward(cham_workload_t *w, uint32_t l, uint64_t mb, cham_tensor_t *x,
                                   bool keep, wl_saved_t *sv, cham_tensor_t **out)
{
    if (wl_layer_dropped(w, l)) {          /* stochastic depth: the identity */
        sv->dropped = true;
        w->dropped++;
        *out = x;
        return CHAM_OK;
    }
    if (keep && wl_block_mode(w, l) == CHAM_BLOCK_CHECKPOINT) {   /* keep the input only */
        wl_saved_t tmp = {0};
        TRY(wl_view(w, x, 0, cham_tensor_bytes(x), &sv->x));
        cham_status_t st = forward(w, l, mb, x, false, &tmp, out);
        wl_saved_drop(w, &tmp);
        return st;
    }
    return forward(w, l, mb, x, keep, sv, out);
}

/* The ops of a layer are its block's (cham_set_block), for ProTrain's
 * planner. */
cham_status_t wl_layer_forward(cham_workload_t *w, uint32_t l, uint64_t mb, cham_tensor_t *x,
                               bool keep, wl_saved_t *sv, cham_tensor_t **out)
{
    *sv = (wl_saved_t){0};
    TRY(cham_set_block(w->ctx, (int32_t)l));
    cham_status_t st = layer_forward(w, l, mb, x, keep, sv, out);
    cham_status_t un = cham_set_block(w->ctx, -1);
    return st != CHAM_OK ? st : un;
}

/* Every handle a layer keeps, in one list. */
#define SAVED_HANDLES(sv)                                                                     \
    {&(sv)->x,   &(sv)->st1, &(sv)->n1,  &(sv)->qkv, &(sv)->probs, &(sv)->ctx,                  \
     &(sv)->lse, &(sv)->x1,  &(sv)->st2, &(sv)->n2,  &(sv)->mid,   &(sv)->act,                  \
     &(sv)->gates, &(sv)->idx, &(sv)->xp, &(sv)->y}

void wl_saved_drop(cham_workload_t *w, wl_saved_t *sv)
{
    cham_tensor_t **all[] = SAVED_HANDLES(sv);
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        wl_drop(w, all[i]);
    free(sv->counts);
    sv->counts = NULL;
}

cham_status_t wl_saved_swap(wl_saved_t *sv, bool out)
{
    cham_tensor_t **all[] = SAVED_HANDLES(sv);
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (*all[i])
            TRY(out ? cham_tensor_swap_out(*all[i], false) : cham_tensor_swap_in(*all[i]));
    return CHAM_OK;
}

static cham_status_t layer_backward(cham_workload_t *w, uint32_t l, uint64_t mb, wl_saved_t *sv,
                                    cham_tensor_t *dy, cham_tensor_t **dx)
{
    const cham_model_config_t *m = &w->m;
    if (wl_block_mode(w, l) == CHAM_BLOCK_CHECKPOINT) {   /* re-run the forward, keeping all */
        cham_tensor_t *x = sv->x, *y;
        sv->x = NULL;
        TRY(forward(w, l, mb, x, true, sv, &y));
        wl_drop(w, &y);
    }
    cham_dtype_t dt = m->dtype;
    uint64_t T = wl_tokens(m), h = m->hidden, p = cham_dtype_size(dt);
    uint64_t heads = m->heads / m->tp, s = m->seq;
    cham_tensor_t *wt, *gw, *wp, *gp, *dn2, *dx1, *dctx, *dqkv, *dn1, *dxp;
    TRY(wl_matmul_weights(w, l, &wt));
    TRY(wl_grad(w, l, &gw));
    /* MLP branch; the residual passes dy on unchanged. */
    TRY(mlp_backward(w, l, wt, gw, sv, dy, &dn2));
    TRY(tp_all_reduce(w, dn2));
    TRY(wl_new(w, T * h * p, dt, &dx1, "L%u.d_resid1", l));
    TRY(norm_bwd(w, dn2, sv->x1, sv->st2, wt, gw, P_NORM2, dx1));
    wl_drop(w, &dn2);
    wl_drop(w, &sv->x1);
    wl_drop(w, &sv->st2);
    TRY(RUN(w, OP_GRAD_ACC, (double)(T * h), R(dy), RW(dx1)));
    wl_drop(w, &dy);
    /* Attention branch. */
    TRY(wl_new(w, T * wl_ctx_width(m) * p, dt, &dctx, "L%u.d_attn_out", l));
    TRY(part(w, wt, P_OUT, &wp));
    TRY(part(w, gw, P_OUT, &gp));
    TRY(linear_bwd(w, OP_OUT_BWD, dx1, sv->ctx, wp, gp, dctx, T));
    wl_drop(w, &wp);
    wl_drop(w, &gp);
    double attn_flops = attention_flops(m);
    TRY(wl_new(w, T * wl_qkv_width(m) * p, dt, &dqkv, "L%u.d_qkv", l));
    if (m->flash) {
        /* The fused backward recomputes the scores: 2.5x the forward. */
        TRY(RUN(w, OP_FLASH_BWD, 2.5 * attn_flops / 2, R(dctx), R(sv->qkv), R(sv->ctx),
                R(sv->lse), W(dqkv)));
        wl_drop(w, &sv->lse);
    } else {
        cham_tensor_t *dprobs, *dscores;
        TRY(wl_new(w, wl_scores_bytes(m), dt, &dprobs, "L%u.d_attn_probs", l));
        TRY(RUN(w, OP_CONTEXT_BWD, attn_flops, R(dctx), R(sv->probs), R(sv->qkv), W(dprobs),
                W(dqkv)));
        TRY(wl_new(w, wl_scores_bytes(m), dt, &dscores, "L%u.d_attn_scores", l));
        TRY(RUN(w, OP_SOFTMAX_BWD, 4.0 * (double)m->mbs * (double)heads * (double)(s * s),
                R(dprobs), R(sv->probs), W(dscores)));
        wl_drop(w, &dprobs);
        wl_drop(w, &sv->probs);
        TRY(RUN(w, OP_SCORES_BWD, attn_flops, R(dscores), R(sv->qkv), RW(dqkv)));
        wl_drop(w, &dscores);
    }
    wl_drop(w, &dctx);
    wl_drop(w, &sv->ctx);
    wl_drop(w, &sv->qkv);
    if (m->arch != CHAM_ARCH_GPT2) {
        cham_tensor_t *d0;
        TRY(wl_new(w, T * wl_qkv_width(m) * p, dt, &d0, "L%u.d_qkv_proj", l));
        TRY(RUN(w, OP_ROPE_BWD, 3.0 * (double)(T * wl_qkv_width(m)), R(dqkv), W(d0)));
        wl_drop(w, &dqkv);
        dqkv = d0;
    }
    TRY(wl_new(w, T * h * p, dt, &dn1, "L%u.d_norm1", l));
    TRY(part(w, wt, P_QKV, &wp));
    TRY(part(w, gw, P_QKV, &gp));
    TRY(linear_bwd(w, OP_QKV_BWD, dqkv, sv->n1, wp, gp, dn1, T));
    wl_drop(w, &wp);
    wl_drop(w, &gp);
    wl_drop(w, &dqkv);
    wl_drop(w, &sv->n1);
    TRY(tp_all_reduce(w, dn1));
    TRY(wl_new(w, T * h * p, dt, &dxp, "L%u.d_input", l));
    TRY(norm_bwd(w, dn1, sv->x, sv->st1, wt, gw, P_NORM1, dxp));
    wl_drop(w, &dn1);
    wl_drop(w, &sv->x);
    wl_drop(w, &sv->st1);
    TRY(RUN(w, OP_GRAD_ACC, (double)(T * h), R(dx1), RW(dxp)));
    wl_drop(w, &dx1);
    wl_drop(w, &wt);
    wl_drop(w, &gw);
    TRY(wl_grad_done(w, l, (uint32_t)mb));
    wl_saved_drop(w, sv);
    *dx = dxp;
    return CHAM_OK;
}

cham_status_t wl_layer_backward(cham_workload_t *w, uint32_t l, uint64_t mb, wl_saved_t *sv,
                                cham_tensor_t *dy, cham_tensor_t **dx)
{
    if (sv->dropped) {
        *dx = dy;
        return CHAM_OK;
    }
    TRY(cham_set_block(w->ctx, (int32_t)l));
    cham_status_t st = layer_backward(w, l, mb, sv, dy, dx);
    cham_status_t un = cham_set_block(w->ctx, -1);
    return st != CHAM_OK ? st : un;
}

/* ---- embedding and head ----------------------------------------------------------------*/

cham_status_t wl_embed_forward(cham_workload_t *w, bool keep, cham_tensor_t **ids,
                               cham_tensor_t **x)
{
    const cham_model_config_t *m = &w->m;
    uint64_t T = wl_tokens(m), h = m->hidden, p = cham_dtype_size(m->dtype);
    cham_tensor_t *wt;
    TRY(wl_new(w, T * 8, CHAM_DTYPE_I64, ids, "input_ids"));
    TRY(RUN(w, OP_LOAD, 0, W(*ids)));
    TRY(wl_new(w, T * h * p, m->dtype, x, "embedded"));
    TRY(wl_weights(w, wl_embed_group(w), &wt));
    /* Reads the rows of the batch's tokens (and positions). */
    TRY(wl_run(w, OP_EMBED, (const wl_arg_t[]){R(*ids), R(wt), W(*x)}, 3, (double)(T * h),
               (double)(3 * T * h * p + T * 8)));
    wl_drop(w, &wt);
    spent(w, ids, keep);
    return CHAM_OK;
}

cham_status_t wl_embed_backward(cham_workload_t *w, cham_tensor_t **ids, cham_tensor_t *dx)
{
    const cham_model_config_t *m = &w->m;
    uint64_t T = wl_tokens(m), h = m->hidden, p = cham_dtype_size(m->dtype);
    cham_tensor_t *gw;
    TRY(wl_grad(w, wl_embed_group(w), &gw));
    TRY(wl_run(w, OP_EMBED_BWD, (const wl_arg_t[]){R(dx), R(*ids), RW(gw)}, 3, (double)(T * h),
               (double)(3 * T * h * p + T * 8)));
    wl_drop(w, &gw);
    wl_drop(w, &dx);
    wl_drop(w, ids);
    return CHAM_OK;
}

cham_status_t wl_head(cham_workload_t *w, cham_tensor_t *x, bool keep, cham_tensor_t **dx)
{
    const cham_model_config_t *m = &w->m;
    cham_dtype_t dt = m->dtype;
    uint64_t T = wl_tokens(m), h = m->hidden, p = cham_dtype_size(dt);
    uint64_t V = wl_vocab_shard(m, m->tp), np = wl_norm_params(m);
    bool tied = m->arch == CHAM_ARCH_GPT2;
    uint32_t hg = wl_head_group(w), head_of = tied ? wl_embed_group(w) : hg;
    cham_tensor_t *wn, *wh, *wnp, *whp, *nf, *st, *logits, *lf, *loss;
    TRY(wl_matmul_weights(w, hg, &wn));
    TRY(tied ? wl_matmul_weights(w, head_of, &wh)
             : wl_view(w, wn, 0, cham_tensor_bytes(wn), &wh));
    TRY(span(w, wn, 0, np, &wnp));
    TRY(span(w, wh, tied ? 0 : np, V * h, &whp));
    TRY(wl_new(w, T * h * p, dt, &nf, "final_norm_out"));
    TRY(wl_new(w, T * wl_stats_bytes(m), CHAM_DTYPE_F32, &st, "final_norm_stats"));
    TRY(RUN(w, OP_NORM, 5.0 * (double)(T * h), R(x), R(wnp), W(nf), W(st)));
    TRY(wl_new(w, T * V * p, dt, &logits, "logits"));
    TRY(linear(w, OP_HEAD, nf, whp, logits, T));
    TRY(wl_new(w, T * V * 4, CHAM_DTYPE_F32, &lf, "logits_fp32"));
    TRY(RUN(w, OP_TO_FLOAT, (double)(T * V), R(logits), W(lf)));
    wl_drop(w, &logits);
    TRY(wl_new(w, 4, CHAM_DTYPE_F32, &loss, "loss"));
    TRY(RUN(w, OP_LOSS, 5.0 * (double)(T * V), R(lf), W(loss)));
    wl_autocast_exit(w, keep);
    if (!keep) {
        cham_tensor_t **all[] = {&wn, &wh, &wnp, &whp, &nf, &st, &lf, &loss, &x};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
            wl_drop(w, all[i]);
        return CHAM_OK;
    }
    TRY(cham_phase(w->ctx, CHAM_PHASE_BACKWARD));
    cham_tensor_t *gn, *gh, *gnp, *ghp, *dlf, *dlogits, *dnf;
    TRY(wl_new(w, T * V * 4, CHAM_DTYPE_F32, &dlf, "d_logits_fp32"));
    TRY(RUN(w, OP_LOSS_BWD, 3.0 * (double)(T * V), R(loss), R(lf), W(dlf)));
    wl_drop(w, &loss);
    wl_drop(w, &lf);
    TRY(wl_new(w, T * V * p, dt, &dlogits, "d_logits"));
    TRY(RUN(w, OP_TO_FLOAT_BWD, (double)(T * V), R(dlf), W(dlogits)));
    wl_drop(w, &dlf);
    TRY(wl_grad(w, hg, &gn));
    TRY(tied ? wl_grad(w, head_of, &gh) : wl_view(w, gn, 0, cham_tensor_bytes(gn), &gh));
    TRY(span(w, gn, 0, np, &gnp));
    TRY(span(w, gh, tied ? 0 : np, V * h, &ghp));
    TRY(wl_new(w, T * h * p, dt, &dnf, "d_final_norm"));
    TRY(linear_bwd(w, OP_HEAD_BWD, dlogits, nf, whp, ghp, dnf, T));
    wl_drop(w, &dlogits);
    if (tied && m->precision == CHAM_PRECISION_AUTOCAST)
        wl_uncast(w, head_of);   /* only the head's backward kept the embedding's cast */
    wl_drop(w, &nf);
    TRY(wl_new(w, T * h * p, dt, dx, "d_final"));
    TRY(RUN(w, OP_NORM_BWD, 10.0 * (double)(T * h), R(dnf), R(x), R(st), R(wnp), RW(gnp),
            W(*dx)));
    cham_tensor_t **all[] = {&dnf, &x, &st, &wn, &wh, &wnp, &whp, &gn, &gh, &gnp, &ghp};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        wl_drop(w, all[i]);
    return CHAM_OK;
}
