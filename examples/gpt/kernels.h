/* The GPT trainer's kernels: plain C on float32, run by the sim backend's
 * data mode as the CPU functions of kernel launches.
 *
 * Every kernel is deterministic: loops run in a fixed order and every sum
 * is accumulated in that order (no threads, no reassociation; the build
 * uses -ffp-contract=off), so two runs give the same bytes.
 *
 * Shapes: B batch, T sequence, C channels (hidden), NH heads (C % NH == 0),
 * V vocabulary, OC output channels. Activations are row-major [B*T, C]
 * unless said otherwise. Weights of a linear layer are [OC, C] (each output
 * channel's row of C inputs), as in out = inp W^T + bias.
 *
 * Backward kernels ACCUMULATE (+=) into parameter gradients and into
 * activation gradients marked "+=" below; gradients marked "=" are
 * overwritten. Each function says which. */
#ifndef CHAM_GPT_KERNELS_H
#define CHAM_GPT_KERNELS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* out[b,t,:] = wte[tok[b,t],:] + wpe[t,:]. */
void gpt_embed_forward(float *out, const int32_t *tok, const float *wte, const float *wpe,
                       int B, int T, int C);
/* dwte[tok[b,t],:] += dout[b,t,:]; dwpe[t,:] += dout[b,t,:] (in b, t order). */
void gpt_embed_backward(float *dwte, float *dwpe, const float *dout, const int32_t *tok, int B,
                        int T, int C);

/* Layer norm over C with eps 1e-5: out = (x - mean) * rstd * weight + bias;
 * mean and rstd ([N]) are saved for the backward. N = B*T. */
void gpt_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                           const float *weight, const float *bias, int N, int C);
/* dinp = (overwritten); dweight, dbias +=. */
void gpt_layernorm_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                            const float *inp, const float *weight, const float *mean,
                            const float *rstd, int N, int C);

/* out[n, o] = bias[o] + sum_c inp[n, c] * weight[o, c]; bias may be NULL. */
void gpt_matmul_forward(float *out, const float *inp, const float *weight, const float *bias,
                        int N, int C, int OC);
/* dinp = (overwritten; may be NULL to skip); dweight, dbias += (dbias may
 * be NULL). */
void gpt_matmul_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                         const float *inp, const float *weight, int N, int C, int OC);

/* Causal multi-head self-attention. qkv is [B, T, 3C]: q, k, v each C wide,
 * head h owning channels [h*hs, (h+1)*hs), hs = C / NH. att is [B, NH, T, T]:
 * the softmax of q.k / sqrt(hs) over keys t2 <= t (entries t2 > t are 0),
 * saved for the backward. out is [B, T, C]. */
void gpt_attention_forward(float *out, float *att, const float *qkv, int B, int T, int C,
                           int NH);
/* dqkv = (overwritten). */
void gpt_attention_backward(float *dqkv, const float *dout, const float *qkv, const float *att,
                            int B, int T, int C, int NH);

/* Decoding one position of B sequences with a KV cache laid out
 * [rows, 2, B, C]: row t holds the keys of position t for every sequence,
 * then their values, so a position is one contiguous block.
 * out[b,:] = wte[tok[b],:] + wpe[pos,:]. */
void gpt_embed_at(float *out, const int32_t *tok, const float *wte, const float *wpe, int B,
                  int pos, int C);
/* Row pos of the cache gets the keys and values of qkv ([B, 3C]). */
void gpt_kv_write(float *cache, const float *qkv, int B, int C, int pos);
/* out ([B, C]) = the attention of qkv's queries over cache rows 0..pos,
 * computed as gpt_attention_forward computes position pos (same
 * operations in the same order: the same floats). */
void gpt_attention_decode(float *out, const float *qkv, const float *cache, int B, int C,
                          int NH, int pos);
/* out[n] = the first index of the largest of logits[n, 0..V). */
void gpt_argmax(int32_t *out, const float *logits, int N, int V);
/* GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). */
void gpt_gelu_forward(float *out, const float *inp, size_t n);
/* dinp = (overwritten). */
void gpt_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n);

/* out = a + b. */
void gpt_add_forward(float *out, const float *a, const float *b, size_t n);
/* dst += src. */
void gpt_accumulate(float *dst, const float *src, size_t n);

/* Softmax over V of logits [N, V] into probs, and the cross-entropy losses
 * [N] = -log probs[n, target[n]]. Returns nothing; the mean loss is the
 * caller's (a fixed-order sum of losses / N). */
void gpt_crossentropy_forward(float *losses, float *probs, const float *logits,
                              const int32_t *target, int N, int V);
/* dlogits = (overwritten) (probs - onehot(target)) * scale / N: the
 * gradient of scale * mean loss. */
void gpt_crossentropy_backward(float *dlogits, const float *probs, const int32_t *target,
                               int N, int V, float scale);

/* Sum of squares of x in index order, in double: for the gradient norm. */
double gpt_sum_squares(const float *x, size_t n);
/* True if any value is inf or NaN. */
bool gpt_has_nonfinite(const float *x, size_t n);
/* x *= s. */
void gpt_scale(float *x, size_t n, float s);

/* One AdamW step for n parameters at step t (1-based), gradients already
 * unscaled and clipped: m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
 * p -= lr (m_hat / (sqrt(v_hat) + eps) + wd p), with bias-corrected m_hat
 * and v_hat. */
void gpt_adamw(float *param, float *m, float *v, const float *grad, size_t n, int t, float lr,
               float beta1, float beta2, float eps, float weight_decay);

#endif
