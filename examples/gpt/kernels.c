/* The GPT trainer's kernels (kernels.h): plain C, fixed loop order. */
#include <math.h>
#include <string.h>

#include "kernels.h"

void gpt_embed_forward(float *out, const int32_t *tok, const float *wte, const float *wpe,
                       int B, int T, int C)
{
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            float *o = out + ((size_t)b * T + t) * C;
            const float *e = wte + (size_t)tok[b * T + t] * C, *p = wpe + (size_t)t * C;
            for (int c = 0; c < C; c++)
                o[c] = e[c] + p[c];
        }
}

void gpt_embed_backward(float *dwte, float *dwpe, const float *dout, const int32_t *tok, int B,
                        int T, int C)
{
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            const float *d = dout + ((size_t)b * T + t) * C;
            float *de = dwte + (size_t)tok[b * T + t] * C, *dp = dwpe + (size_t)t * C;
            for (int c = 0; c < C; c++) {
                de[c] += d[c];
                dp[c] += d[c];
            }
        }
}

/* y = (x - mean) * rstd * w + b, rstd = 1 / sqrt(var + eps), var biased. */
void gpt_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                           const float *weight, const float *bias, int N, int C)
{
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        double m = 0, v = 0;
        for (int c = 0; c < C; c++)
            m += x[c];
        m /= C;
        for (int c = 0; c < C; c++)
            v += (x[c] - m) * (x[c] - m);
        v /= C;
        float r = (float)(1.0 / sqrt(v + 1e-5));
        float *y = out + (size_t)n * C;
        for (int c = 0; c < C; c++)
            y[c] = (float)((x[c] - m) * r) * weight[c] + bias[c];
        mean[n] = (float)m;
        rstd[n] = r;
    }
}

/* With xhat = (x - mean) rstd and g = dout * w:
 * dx = rstd (g - mean(g) - xhat mean(g xhat)); dw += dout xhat; db += dout. */
void gpt_layernorm_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                            const float *inp, const float *weight, const float *mean,
                            const float *rstd, int N, int C)
{
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C, *d = dout + (size_t)n * C;
        float m = mean[n], r = rstd[n];
        double sg = 0, sgx = 0;
        for (int c = 0; c < C; c++) {
            float xhat = (x[c] - m) * r;
            float g = d[c] * weight[c];
            sg += g;
            sgx += g * xhat;
            dbias[c] += d[c];
            dweight[c] += d[c] * xhat;
        }
        sg /= C;
        sgx /= C;
        float *dx = dinp + (size_t)n * C;
        for (int c = 0; c < C; c++) {
            float xhat = (x[c] - m) * r;
            dx[c] = (float)((d[c] * weight[c] - sg - xhat * sgx) * r);
        }
    }
}

void gpt_matmul_forward(float *out, const float *inp, const float *weight, const float *bias,
                        int N, int C, int OC)
{
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        float *y = out + (size_t)n * OC;
        for (int o = 0; o < OC; o++) {
            const float *w = weight + (size_t)o * C;
            float s = bias ? bias[o] : 0.0f;
            for (int c = 0; c < C; c++)
                s += x[c] * w[c];
            y[o] = s;
        }
    }
}

/* dinp = dout W; dweight += dout^T inp; dbias += column sums of dout. */
void gpt_matmul_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                         const float *inp, const float *weight, int N, int C, int OC)
{
    if (dinp) {
        for (int n = 0; n < N; n++) {
            const float *d = dout + (size_t)n * OC;
            float *dx = dinp + (size_t)n * C;
            for (int c = 0; c < C; c++)
                dx[c] = 0;
            for (int o = 0; o < OC; o++) {
                const float *w = weight + (size_t)o * C;
                for (int c = 0; c < C; c++)
                    dx[c] += d[o] * w[c];
            }
        }
    }
    for (int o = 0; o < OC; o++) {
        float *dw = dweight + (size_t)o * C;
        float db = 0;
        for (int n = 0; n < N; n++) {
            float d = dout[(size_t)n * OC + o];
            const float *x = inp + (size_t)n * C;
            for (int c = 0; c < C; c++)
                dw[c] += d * x[c];
            db += d;
        }
        if (dbias)
            dbias[o] += db;
    }
}

void gpt_attention_forward(float *out, float *att, const float *qkv, int B, int T, int C,
                           int NH)
{
    int hs = C / NH;
    float scale = (float)(1.0 / sqrt((double)hs));
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const float *q = qkv + ((size_t)b * T + t) * 3 * C + (size_t)h * hs;
                float *a = att + (((size_t)b * NH + h) * T + t) * T;
                float max = -INFINITY;
                for (int t2 = 0; t2 <= t; t2++) {
                    const float *k = qkv + ((size_t)b * T + t2) * 3 * C + C + (size_t)h * hs;
                    float s = 0;
                    for (int i = 0; i < hs; i++)
                        s += q[i] * k[i];
                    a[t2] = s * scale;
                    max = a[t2] > max ? a[t2] : max;
                }
                float sum = 0;
                for (int t2 = 0; t2 <= t; t2++) {
                    a[t2] = expf(a[t2] - max);
                    sum += a[t2];
                }
                for (int t2 = 0; t2 <= t; t2++)
                    a[t2] /= sum;
                for (int t2 = t + 1; t2 < T; t2++)
                    a[t2] = 0;
                float *o = out + ((size_t)b * T + t) * C + (size_t)h * hs;
                for (int i = 0; i < hs; i++)
                    o[i] = 0;
                for (int t2 = 0; t2 <= t; t2++) {
                    const float *v = qkv + ((size_t)b * T + t2) * 3 * C + 2 * C + (size_t)h * hs;
                    for (int i = 0; i < hs; i++)
                        o[i] += a[t2] * v[i];
                }
            }
}

void gpt_embed_at(float *out, const int32_t *tok, const float *wte, const float *wpe, int B,
                  int pos, int C)
{
    for (int b = 0; b < B; b++) {
        float *o = out + (size_t)b * C;
        const float *e = wte + (size_t)tok[b] * C, *p = wpe + (size_t)pos * C;
        for (int c = 0; c < C; c++)
            o[c] = e[c] + p[c];
    }
}

void gpt_kv_write(float *cache, const float *qkv, int B, int C, int pos)
{
    float *row = cache + (size_t)pos * 2 * B * C;
    for (int b = 0; b < B; b++) {
        memcpy(row + (size_t)b * C, qkv + (size_t)b * 3 * C + C, (size_t)C * sizeof *row);
        memcpy(row + ((size_t)B + b) * C, qkv + (size_t)b * 3 * C + 2 * C,
               (size_t)C * sizeof *row);
    }
}

/* The scaled score of query q against the key of row t2 for sequence b. */
static float score(const float *q, const float *cache, int B, int C, int b, int t2, int off,
                   int hs, float scale)
{
    const float *k = cache + ((size_t)t2 * 2 * B + b) * C + off;
    float s = 0;
    for (int i = 0; i < hs; i++)
        s += q[i] * k[i];
    return s * scale;
}

void gpt_attention_decode(float *out, const float *qkv, const float *cache, int B, int C,
                          int NH, int pos)
{
    int hs = C / NH;
    float scale = (float)(1.0 / sqrt((double)hs));
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            int off = h * hs;
            const float *q = qkv + (size_t)b * 3 * C + off;
            float max = -INFINITY, sum = 0;
            for (int t2 = 0; t2 <= pos; t2++) {
                float a = score(q, cache, B, C, b, t2, off, hs, scale);
                max = a > max ? a : max;
            }
            for (int t2 = 0; t2 <= pos; t2++)
                sum += expf(score(q, cache, B, C, b, t2, off, hs, scale) - max);
            float *o = out + (size_t)b * C + off;
            for (int i = 0; i < hs; i++)
                o[i] = 0;
            for (int t2 = 0; t2 <= pos; t2++) {
                float a = expf(score(q, cache, B, C, b, t2, off, hs, scale) - max) / sum;
                const float *v = cache + ((size_t)t2 * 2 * B + B + b) * C + off;
                for (int i = 0; i < hs; i++)
                    o[i] += a * v[i];
            }
        }
}

void gpt_argmax(int32_t *out, const float *logits, int N, int V)
{
    for (int n = 0; n < N; n++) {
        const float *l = logits + (size_t)n * V;
        int best = 0;
        for (int v = 1; v < V; v++)
            best = l[v] > l[best] ? v : best;
        out[n] = best;
    }
}

/* out = att V, att = softmax(scale q K^T): dV += att^T dout; datt = dout V^T;
 * dpre = att (datt - sum(att datt)); dq = scale dpre K; dK += scale dpre^T q. */
void gpt_attention_backward(float *dqkv, const float *dout, const float *qkv, const float *att,
                            int B, int T, int C, int NH)
{
    int hs = C / NH;
    float scale = (float)(1.0 / sqrt((double)hs));
    memset(dqkv, 0, (size_t)B * T * 3 * C * sizeof *dqkv);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const float *a = att + (((size_t)b * NH + h) * T + t) * T;
                const float *d = dout + ((size_t)b * T + t) * C + (size_t)h * hs;
                const float *q = qkv + ((size_t)b * T + t) * 3 * C + (size_t)h * hs;
                float *dq = dqkv + ((size_t)b * T + t) * 3 * C + (size_t)h * hs;
                /* datt[t2] = d . v[t2]; dot = sum a[t2] datt[t2] */
                float dot = 0;
                for (int t2 = 0; t2 <= t; t2++) {
                    const float *v = qkv + ((size_t)b * T + t2) * 3 * C + 2 * C + (size_t)h * hs;
                    float *dv = dqkv + ((size_t)b * T + t2) * 3 * C + 2 * C + (size_t)h * hs;
                    float s = 0;
                    for (int i = 0; i < hs; i++) {
                        s += d[i] * v[i];
                        dv[i] += a[t2] * d[i];
                    }
                    dot += a[t2] * s;
                }
                for (int t2 = 0; t2 <= t; t2++) {
                    const float *v = qkv + ((size_t)b * T + t2) * 3 * C + 2 * C + (size_t)h * hs;
                    const float *k = qkv + ((size_t)b * T + t2) * 3 * C + C + (size_t)h * hs;
                    float *dk = dqkv + ((size_t)b * T + t2) * 3 * C + C + (size_t)h * hs;
                    float s = 0;
                    for (int i = 0; i < hs; i++)
                        s += d[i] * v[i];
                    float dpre = a[t2] * (s - dot) * scale;
                    for (int i = 0; i < hs; i++) {
                        dq[i] += dpre * k[i];
                        dk[i] += dpre * q[i];
                    }
                }
            }
}

#define GELU_K 0.7978845608028654f   /* sqrt(2 / pi) */

void gpt_gelu_forward(float *out, const float *inp, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        out[i] = 0.5f * x * (1.0f + tanhf(GELU_K * (x + 0.044715f * x * x * x)));
    }
}

void gpt_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        float u = GELU_K * (x + 0.044715f * x * x * x);
        float th = tanhf(u);
        float sech2 = 1.0f - th * th;
        float du = GELU_K * (1.0f + 3.0f * 0.044715f * x * x);
        dinp[i] = dout[i] * (0.5f * (1.0f + th) + 0.5f * x * sech2 * du);
    }
}

void gpt_add_forward(float *out, const float *a, const float *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        out[i] = a[i] + b[i];
}

void gpt_accumulate(float *dst, const float *src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] += src[i];
}

void gpt_crossentropy_forward(float *losses, float *probs, const float *logits,
                              const int32_t *target, int N, int V)
{
    for (int n = 0; n < N; n++) {
        const float *z = logits + (size_t)n * V;
        float *p = probs + (size_t)n * V;
        float max = z[0];
        for (int v = 1; v < V; v++)
            max = z[v] > max ? z[v] : max;
        double sum = 0;
        for (int v = 0; v < V; v++) {
            p[v] = expf(z[v] - max);
            sum += p[v];
        }
        for (int v = 0; v < V; v++)
            p[v] = (float)(p[v] / sum);
        losses[n] = -logf(p[target[n]]);
    }
}

void gpt_crossentropy_backward(float *dlogits, const float *probs, const int32_t *target,
                               int N, int V, float scale)
{
    float k = scale / (float)N;
    for (int n = 0; n < N; n++) {
        const float *p = probs + (size_t)n * V;
        float *d = dlogits + (size_t)n * V;
        for (int v = 0; v < V; v++)
            d[v] = (p[v] - (v == target[n] ? 1.0f : 0.0f)) * k;
    }
}

double gpt_sum_squares(const float *x, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += (double)x[i] * x[i];
    return s;
}

bool gpt_has_nonfinite(const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i]))
            return true;
    return false;
}

void gpt_scale(float *x, size_t n, float s)
{
    for (size_t i = 0; i < n; i++)
        x[i] *= s;
}

void gpt_adamw(float *param, float *m, float *v, const float *grad, size_t n, int t, float lr,
               float beta1, float beta2, float eps, float weight_decay)
{
    float c1 = 1.0f - powf(beta1, (float)t), c2 = 1.0f - powf(beta2, (float)t);
    for (size_t i = 0; i < n; i++) {
        float g = grad[i];
        m[i] = beta1 * m[i] + (1.0f - beta1) * g;
        v[i] = beta2 * v[i] + (1.0f - beta2) * g * g;
        float mh = m[i] / c1, vh = v[i] / c2;
        param[i] -= lr * (mh / (sqrtf(vh) + eps) + weight_decay * param[i]);
    }
}
