/* Model descriptions: presets, checks, parameter counts and the activation
 * formula (docs/workloads.md), and the per-step decisions of the variation
 * knobs. The generator (step.c, layer.c) builds tensors whose sizes come
 * from the same shape helpers (workload-impl.h), so counts and the
 * formula describe exactly what it runs. */
#include <stdio.h>
#include <string.h>

#include "common/assert.h"
#include "common/message.h"
#include "common/rng.h"
#include "workload/workload-impl.h"

typedef struct preset {
    const char *name;
    cham_arch_t arch;
    uint32_t layers, hidden, ffn, heads, kv_heads, vocab, experts, topk, seq;
} preset_t;

/* Sizes from the models' published configurations (docs/workloads.md). */
static const preset_t presets[] = {
    {"gpt2-1.5b", CHAM_ARCH_GPT2, 48, 1600, 6400, 25, 25, 50257, 0, 0, 1024},
    {"llama2-7b", CHAM_ARCH_LLAMA, 32, 4096, 11008, 32, 32, 32000, 0, 0, 4096},
    {"llama2-13b", CHAM_ARCH_LLAMA, 40, 5120, 13824, 40, 40, 32000, 0, 0, 4096},
    {"llama3-8b", CHAM_ARCH_LLAMA, 32, 4096, 14336, 32, 8, 128256, 0, 0, 4096},
    {"mixtral-8x7b", CHAM_ARCH_MIXTRAL, 32, 4096, 14336, 32, 8, 32000, 8, 2, 4096},
};
#define N_PRESETS (sizeof presets / sizeof presets[0])

static const struct {
    const char *alias, *preset;
} aliases[] = {
    {"gpt2", "gpt2-1.5b"}, {"llama2", "llama2-7b"}, {"llama3", "llama3-8b"},
    {"mixtral", "mixtral-8x7b"},
};

size_t cham_model_preset_count(void)
{
    return N_PRESETS;
}

const char *cham_model_preset_name(size_t i)
{
    return i < N_PRESETS ? presets[i].name : NULL;
}

const char *cham_arch_name(cham_arch_t arch)
{
    switch (arch) {
    case CHAM_ARCH_GPT2: return "gpt2";
    case CHAM_ARCH_LLAMA: return "llama";
    case CHAM_ARCH_MIXTRAL: return "mixtral";
    }
    return "?";
}

static const char *const precision_names[] = {
    [CHAM_PRECISION_MASTER] = "master",
    [CHAM_PRECISION_MAIN_GRADS] = "main-grads",
    [CHAM_PRECISION_AUTOCAST] = "autocast",
};
#define N_PRECISIONS (sizeof precision_names / sizeof precision_names[0])

const char *cham_precision_name(cham_precision_t p)
{
    return (size_t)p < N_PRECISIONS ? precision_names[p] : "?";
}

cham_status_t cham_precision_parse(const char *name, cham_precision_t *out)
{
    for (size_t i = 0; name && i < N_PRECISIONS; i++)
        if (strcmp(name, precision_names[i]) == 0) {
            *out = (cham_precision_t)i;
            return CHAM_OK;
        }
    return CHAM_ERR_INVALID_ARG;
}

cham_status_t cham_model_preset(const char *name, cham_model_config_t *out)
{
    for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++)
        if (name && strcmp(name, aliases[i].alias) == 0)
            name = aliases[i].preset;
    for (size_t i = 0; i < N_PRESETS; i++) {
        const preset_t *p = &presets[i];
        if (!name || strcmp(name, p->name) != 0)
            continue;
        *out = (cham_model_config_t){
            .arch = p->arch, .layers = p->layers, .hidden = p->hidden, .ffn = p->ffn,
            .heads = p->heads, .kv_heads = p->kv_heads, .vocab = p->vocab,
            .experts = p->experts, .topk = p->topk, .seq = p->seq, .mbs = 1, .gbs = 0,
            .dtype = p->arch == CHAM_ARCH_GPT2 ? CHAM_DTYPE_F16 : CHAM_DTYPE_BF16,
            .flash = true, .tp = 1, .pp = 1, .dp = 1, .seed = 1,
        };
        return CHAM_OK;
    }
    return CHAM_ERR_INVALID_ARG;
}

/* ---- checks ------------------------------------------------------------------*/

/* Bounds on what the simulator takes, checked from the settings before
 * anything runs (docs/workloads.md, "Limits"). */
#define WL_MAX_TENSOR 9.0e15                /* bytes: sizes stay exact in doubles */
#define WL_MAX_PARAMS 0x1p50                /* 1.1e15 parameters */
#define WL_MAX_STEP_OPS (1u << 22)          /* ops per step, as counted by wl_step_ops_bound */

/* Micro-batches per step on this device (gbs is a multiple of mbs x dp). */
static uint64_t micro_batches(const cham_model_config_t *m)
{
    return m->gbs ? m->gbs / ((uint64_t)m->mbs * m->dp) : 1;
}

#define CHECK(cond, ...)                                                                      \
    do {                                                                                      \
        if (!(cond)) {                                                                        \
            cham_set_err(err, err_size, __VA_ARGS__);                                         \
            return CHAM_ERR_INVALID_ARG;                                                      \
        }                                                                                     \
    } while (0)

cham_status_t cham_model_validate(const cham_model_config_t *m, char *err, size_t err_size)
{
    CHECK(m->arch <= CHAM_ARCH_MIXTRAL, "model: unknown architecture %d", (int)m->arch);
    CHECK(m->layers >= 1 && m->layers <= 4096, "model: layers must be 1..4096, got %u",
          m->layers);
    CHECK(m->hidden >= 1 && m->hidden <= (1u << 20), "model: hidden must be 1..1048576, got %u",
          m->hidden);
    CHECK(m->heads >= 1 && m->hidden % m->heads == 0,
          "model: hidden (%u) must be a multiple of heads (%u)", m->hidden, m->heads);
    CHECK(m->kv_heads >= 1 && m->heads % m->kv_heads == 0,
          "model: heads (%u) must be a multiple of kv-heads (%u)", m->heads, m->kv_heads);
    CHECK(m->arch != CHAM_ARCH_GPT2 || m->kv_heads == m->heads,
          "model: gpt2 has no grouped-query attention: kv-heads (%u) must equal heads (%u)",
          m->kv_heads, m->heads);
    CHECK(m->ffn >= 1 && m->ffn <= (1u << 22), "model: ffn must be 1..4194304, got %u", m->ffn);
    CHECK(m->vocab >= 1 && m->vocab <= (1u << 24), "model: vocab must be 1..16777216, got %u",
          m->vocab);
    if (m->arch == CHAM_ARCH_MIXTRAL) {
        CHECK(m->experts >= 1 && m->experts <= 256, "model: experts must be 1..256, got %u",
              m->experts);
        CHECK(m->topk >= 1 && m->topk <= m->experts, "model: topk must be 1..experts (%u), got %u",
              m->experts, m->topk);
    } else {
        CHECK(m->experts == 0 && m->topk == 0,
              "model: experts and topk are for mixtral, got %u and %u for %s", m->experts,
              m->topk, cham_arch_name(m->arch));
    }
    CHECK(m->seq >= 1 && m->seq <= CHAM_MODEL_MAX_SEQ, "model: seq must be 1..%u, got %u",
          CHAM_MODEL_MAX_SEQ, m->seq);
    CHECK(m->mbs >= 1 && m->mbs <= 65536, "model: mbs must be 1..65536, got %u", m->mbs);
    CHECK(m->dtype == CHAM_DTYPE_F16 || m->dtype == CHAM_DTYPE_BF16,
          "model: dtype must be fp16 or bf16, got %s", cham_dtype_name(m->dtype));
    CHECK(m->tp >= 1 && m->pp >= 1 && m->dp >= 1, "model: tp, pp and dp must be >= 1, got %u, "
          "%u, %u", m->tp, m->pp, m->dp);
    CHECK(m->kv_heads % m->tp == 0, "model: kv-heads (%u) must be a multiple of tp (%u)",
          m->kv_heads, m->tp);
    CHECK(m->ffn % m->tp == 0, "model: ffn (%u) must be a multiple of tp (%u)", m->ffn, m->tp);
    CHECK(m->layers % m->pp == 0, "model: layers (%u) must be a multiple of pp (%u)", m->layers,
          m->pp);
    CHECK(m->zero <= 3, "model: zero must be 0..3, got %u", m->zero);
    CHECK((size_t)m->precision < N_PRECISIONS, "model: unknown precision %d", (int)m->precision);
    /* The host's optimizer, ProTrain's chunks and inference keep the
     * master layout; autocast's casts are one per weight (no pipeline's
     * micro-batches in flight) and its data parallelism is DDP's. */
    CHECK(m->precision == CHAM_PRECISION_MASTER ||
              (!m->host_optimizer && !m->protrain && !m->infer),
          "model: precision %s is not for the host's optimizer, protrain or inference",
          cham_precision_name(m->precision));
    CHECK(m->precision != CHAM_PRECISION_AUTOCAST || (m->pp == 1 && m->zero <= 1),
          "model: precision autocast needs pp 1 and zero 0 or 1 (DistributedDataParallel, "
          "with ZeroRedundancyOptimizer at 1), got pp %u, zero %u", m->pp, m->zero);
    if (m->protrain) {
        const cham_protrain_config_t *c = &m->protrain_config;
        uint32_t chunks = m->layers + 2, on_host = chunks - (c->n_persist < chunks ? c->n_persist
                                                                                   : chunks);
        /* The head reads the embedding's weights when they are tied. */
        uint32_t least = !on_host ? 0 : m->arch == CHAM_ARCH_GPT2 && c->n_persist == 0 ? 2 : 1;
        CHECK(m->tp == 1 && m->pp == 1 && m->dp == 1 && (m->gbs == 0 || m->gbs == m->mbs),
              "model: protrain runs one device with one micro-batch a step (tp, pp, dp 1 and "
              "gbs 0 or mbs), got tp %u, pp %u, dp %u, gbs %u", m->tp, m->pp, m->dp, m->gbs);
        CHECK(!m->recompute && !m->host_optimizer, "model: protrain decides recomputation and "
              "where the optimizer runs itself: turn recompute and host_optimizer off");
        CHECK(c->n_persist <= chunks, "model: protrain n_persist %u is more than the %u chunks",
              c->n_persist, chunks);
        CHECK(c->n_buffer >= least && c->n_buffer <= on_host,
              "model: protrain n_buffer must be %u..%u for %u chunks on the host, got %u", least,
              on_host, on_host, c->n_buffer);
        CHECK((uint64_t)c->n_swap + c->n_checkpoint <= m->layers,
              "model: protrain n_swap %u + n_checkpoint %u is more than the %u layers", c->n_swap,
              c->n_checkpoint, m->layers);
        CHECK(c->swap_interval >= 1 || !c->n_swap, "model: protrain swap_interval must be at "
              "least 1 with swap blocks");
    }
    if (m->infer) {
        CHECK(m->tp == 1 && m->pp == 1 && m->dp == 1 && m->gbs == 0 && m->zero == 0,
              "model: inference runs one device (tp, pp, dp 1, zero 0, gbs 0), got tp %u, pp %u, "
              "dp %u, zero %u, gbs %u", m->tp, m->pp, m->dp, m->zero, m->gbs);
        CHECK(!m->recompute && !m->host_optimizer && !m->protrain && m->accumulate <= 1 &&
                  !m->validate_every && !m->overflow_every && m->overflow_prob == 0 &&
                  m->layer_drop == 0,
              "model: inference has no backward or optimizer: recompute, host_optimizer, "
              "protrain, accumulate, validate_every, overflow and layer_drop must be off");
        CHECK(m->generate <= CHAM_MODEL_MAX_GENERATE, "model: generate must be 0..%u, got %u",
              CHAM_MODEL_MAX_GENERATE, m->generate);
        CHECK((uint64_t)m->seq + m->generate <= (UINT64_C(1) << 24),
              "model: the context, seq %u + generate %u tokens, is over 16M", m->seq,
              m->generate);
    }
    CHECK(m->infer || (!m->generate && !m->kv_offload),
          "model: generate and kv_offload are for inference (infer)");
    CHECK(m->accumulate <= 1 || !m->protrain,
          "model: accumulate (%u) is not with protrain, whose chunks are updated in every "
          "step's backward", m->accumulate);
    CHECK(!m->device_groups || m->host_optimizer,
          "model: device_groups (%u) is for the optimizer on the host (host_optimizer)",
          m->device_groups);
    CHECK(m->device_groups == CHAM_DEVICE_GROUPS_AUTO || m->device_groups <= m->layers / m->pp + 2,
          "model: device_groups %u is more than the %u parameter groups (the embedding, %u "
          "layers, the head)", m->device_groups, m->layers / m->pp + 2, m->layers / m->pp);
    CHECK(m->device_groups == 0 || !(wl_sharded(m, 1) && !wl_sharded(m, 3)),
          "model: device_groups needs zero 0 or 3 with the optimizer on the host (zero %u "
          "gathers every rank's updated shard after the host's whole step)", m->zero);
    CHECK(m->gbs % ((uint64_t)m->mbs * m->dp) == 0,
          "model: gbs (%u) must be a multiple of mbs * dp (%u * %u)", m->gbs, m->mbs, m->dp);
    CHECK(m->overflow_every >= 0, "model: overflow_every must be >= 0, got %lld",
          (long long)m->overflow_every);
    CHECK(m->overflow_prob >= 0 && m->overflow_prob <= 1,
          "model: overflow_prob must be in [0, 1], got %g", m->overflow_prob);
    CHECK(m->layer_drop >= 0 && m->layer_drop < 1, "model: layer_drop must be in [0, 1), got %g",
          m->layer_drop);
    CHECK(!m->moe_vary || m->arch == CHAM_ARCH_MIXTRAL,
          "model: moe_vary is for mixtral, not %s", cham_arch_name(m->arch));
    /* Every tensor must have a size the runtime can hold: the largest are
     * the fp32 logits, the unfused scores and the tokens routed to the
     * experts at the MLP's inner width (doubles: the products may not fit
     * 64 bits). */
    double T = (double)wl_tokens(m), routed = T * (m->topk ? m->topk : 1);
    double width = m->hidden > 2.0 * m->ffn ? m->hidden : 2.0 * m->ffn;
    CHECK(T * (double)m->heads * (double)m->seq * 2.0 < WL_MAX_TENSOR &&
              T * (double)m->vocab * 4.0 < WL_MAX_TENSOR && routed * width * 2.0 < WL_MAX_TENSOR,
          "model: seq %u x mbs %u makes tensors too large to simulate (with hidden %u, ffn "
          "%u, heads %u, vocab %u, topk %u; limit %.0e bytes a tensor)",
          m->seq, m->mbs, m->hidden, m->ffn, m->heads, m->vocab, m->topk, WL_MAX_TENSOR);
    /* Counts and byte sizes are 64-bit: bound the parameters (16 bytes of
     * state each) well inside that. */
    wl_layer_params_t lp;
    wl_layer_params(m, 1, &lp);            /* each group's terms fit: < 2^52 */
    double params = (double)wl_layer_total(&lp) * m->layers + (double)wl_embed_params(m, 1) +
                    (double)wl_head_params(m, 1);
    char experts[32] = "";
    if (m->arch == CHAM_ARCH_MIXTRAL)
        snprintf(experts, sizeof experts, " x %u experts", m->experts);
    CHECK(params <= WL_MAX_PARAMS,
          "model: %u layers of hidden %u and ffn %u%s (vocab %u) make %.3g parameters, more "
          "than the %.3g (2^50) the simulator counts", m->layers, m->hidden, m->ffn, experts,
          m->vocab, params, WL_MAX_PARAMS);
    /* Every op of a step is recorded in host memory (the profiles keep
     * several KB per op), so a step's op count is bounded up front. */
    uint64_t ops = wl_step_ops_bound(m);
    CHECK(ops <= WL_MAX_STEP_OPS,
          "model: a step would dispatch up to %llu ops (%u layers on this device, %llu "
          "micro-batch(es) a step, %u experts), more than the %u the simulator takes: every "
          "op of a step is kept in host memory; use fewer layers, micro-batches (gbs / (mbs "
          "x dp)) or experts", (unsigned long long)ops, m->layers / m->pp,
          (unsigned long long)micro_batches(m), m->experts, WL_MAX_STEP_OPS);
    return CHAM_OK;
}

/* ---- model state and step size -----------------------------------------------*/

void wl_group_state(const cham_model_config_t *m, uint64_t params, bool host, wl_state_t *s)
{
    uint64_t p = cham_dtype_size(m->dtype), updated = wl_updated_of(m, params);
    uint64_t pw = cham_dtype_size(wl_weight_dtype(m));
    if (m->infer) {              /* weights only */
        s->weights += params * p;
        return;
    }
    if (host && m->protrain) {   /* ProTrain's chunk: nothing on the device between uses */
        s->host += params * (4 * 3 + p);
        return;
    }
    uint64_t weights = (wl_sharded(m, 3) ? wl_shard_of(m, params) : params) * pw;
    s->weights += weights;
    if (host) {                  /* the host's: the updated shard's gradients too (and
                                    their fp32 sum when accumulating) */
        s->host += updated * (4 * 3 + p + (m->accumulate > 1 ? 4 : 0));
        s->backed += weights;
        return;
    }
    s->grads += wl_grad_bytes_of(m, params) * (wl_ddp_buckets(m) ? 2 : 1);
    s->optim += updated * wl_optim_bytes(m);
}

uint32_t wl_device_groups(const cham_model_config_t *m)
{
    if (m->protrain)
        return m->protrain_config.n_persist;
    return m->host_optimizer ? m->device_groups : UINT32_MAX;
}

void wl_device_state(const cham_model_config_t *m, wl_state_t *s)
{
    wl_layer_params_t lp;
    wl_layer_params(m, m->tp, &lp);
    wl_state_t layer = {0}, off = {0};
    uint64_t n = m->layers / m->pp;
    /* Groups in execution order: embedding, layers, head. */
    uint32_t k = wl_device_groups(m);
    uint64_t kept = k <= 1 ? 0 : k - 1 < n ? k - 1 : n;
    wl_group_state(m, wl_layer_total(&lp), false, &layer);
    wl_group_state(m, wl_layer_total(&lp), true, &off);
    *s = (wl_state_t){layer.weights * kept + off.weights * (n - kept), layer.grads * kept,
                      layer.optim * kept, off.host * (n - kept), off.backed * (n - kept)};
    wl_group_state(m, wl_embed_params(m, m->tp), k == 0, s);
    if (m->pp == 1)              /* the head lives on the last stage */
        wl_group_state(m, wl_head_params(m, m->tp), k <= n + 1, s);
}

uint32_t wl_least_device_groups(const cham_model_config_t *m, uint64_t host)
{
    cham_model_config_t c = *m;
    uint32_t n = m->layers / m->pp + 2;
    for (uint32_t k = 0; k < n; k++) {
        *(c.protrain ? &c.protrain_config.n_persist : &c.device_groups) = k;
        wl_state_t s;
        wl_device_state(&c, &s);
        if (s.host <= host)
            return k;
    }
    return n;
}

uint64_t cham_model_state_bytes(const cham_model_config_t *m)
{
    wl_state_t s;
    wl_device_state(m, &s);
    return s.weights + s.grads + s.optim;
}

/* "12.50 GiB", or TiB from 1 TiB on. */
static const char *human(uint64_t bytes, char *buf, size_t size)
{
    double gib = (double)bytes / (double)(UINT64_C(1) << 30);
    if (gib >= 1024)
        snprintf(buf, size, "%.2f TiB", gib / 1024);
    else
        snprintf(buf, size, "%.2f GiB", gib);
    return buf;
}

bool wl_state_fits(const cham_model_config_t *m, uint64_t capacity, uint64_t host, bool moves,
                   char *err, size_t err_size)
{
    if (m->host_optimizer && m->device_groups == CHAM_DEVICE_GROUPS_AUTO) {
        /* The run keeps at least as many on the device as the host needs. */
        cham_model_config_t c = *m;
        c.device_groups = wl_least_device_groups(m, host);
        return wl_state_fits(&c, capacity, host, moves, err, err_size);
    }
    wl_state_t s;
    wl_device_state(m, &s);
    char experts[32] = "", h[6][32];
    if (s.host > host) {
        cham_set_err(err, err_size, "the state kept on the host (%s: %s) needs %llu bytes (%s) "
                     "of pinned host memory, more than the %s there is (%u layers, hidden %u, "
                     "ffn %u, vocab %u): give more host memory or use fewer layers",
                     m->protrain ? "ProTrain's chunks there" : "the optimizer's",
                     m->protrain ? "weights, fp32 master weights and Adam moments"
                                 : "gradients, fp32 master weights and Adam moments",
                     (unsigned long long)s.host, human(s.host, h[0], sizeof h[0]),
                     human(host, h[1], sizeof h[1]), m->layers, m->hidden, m->ffn, m->vocab);
        return false;
    }
    host = moves ? host - s.host : 0;
    /* An optimizer on the host keeps the weights there too (but with ZeRO
     * 1-2, whose gather writes the others' shards): they leave without
     * taking pinned memory of the runtime's (cham_tensor_set_host_copy). */
    if (moves && !(wl_sharded(m, 1) && !wl_sharded(m, 3)))
        host = host > UINT64_MAX - s.backed ? UINT64_MAX : host + s.backed;
    uint64_t total = s.weights + s.grads + s.optim;
    uint64_t room = capacity > UINT64_MAX - host ? UINT64_MAX : capacity + host;
    if (total <= room)
        return true;
    if (m->arch == CHAM_ARCH_MIXTRAL)
        snprintf(experts, sizeof experts, ", experts %u", m->experts);
    char where[160];
    if (host)
        snprintf(where, sizeof where, "more than its capacity of %llu bytes (%s) and %s of "
                 "pinned host memory together", (unsigned long long)capacity,
                 human(capacity, h[1], sizeof h[1]), human(host, h[5], sizeof h[5]));
    else
        snprintf(where, sizeof where, "more than its capacity of %llu bytes (%s)",
                 (unsigned long long)capacity, human(capacity, h[1], sizeof h[1]));
    cham_set_err(err, err_size,
                 "the model state alone needs %llu bytes (%s) on this device, %s: weights %s, "
                 "gradients %s, %s %s for %llu parameters "
                 "(%u layers, hidden %u, ffn %u, vocab %u%s; tp %u, pp %u, dp %u, zero %u%s). %s",
                 (unsigned long long)total, human(total, h[0], sizeof h[0]), where,
                 human(s.weights, h[2], sizeof h[2]), human(s.grads, h[3], sizeof h[3]),
                 wl_master_weights(m) ? "fp32 master weights and Adam moments" : "Adam moments",
                 human(s.optim, h[4], sizeof h[4]),
                 (unsigned long long)cham_model_device_parameters(m), m->layers, m->hidden,
                 m->ffn, m->vocab, experts, m->tp, m->pp, m->dp, m->zero,
                 m->host_optimizer ? "; the optimizer on the host" : "",
                 host ? "No policy can run this: shard it more (zero with dp, tp, pp), use fewer "
                        "layers or give more host memory"
                      : "This strategy moves activations only and model state stays on the "
                        "device, so no policy can run this: shard it more (zero with dp, tp, "
                        "pp), use fewer layers, or use strategy chameleon");
    return false;
}

/* Ops of one layer and micro-batch, at most (layer.c): the forward's 11
 * (Llama: norm, qkv, rotary, attention, out, add, norm, three MLP ops,
 * add), 2 more unfused, a ZeRO-3 all-gather, two tensor-parallel
 * all-reduces, and with experts the routing's four ops in place of the
 * MLP's three plus 3 per expert: 17 + 3E. The backward: its 11, the same
 * extras, the data-parallel reduction and two more for the routing:
 * 19 + 3E. Full recomputation runs the forward again. */
uint64_t wl_step_ops_bound(const cham_model_config_t *m)
{
    if (m->infer)                /* the layer's ops (infer.c), the embedding and head */
        return (uint64_t)m->layers * (16 + 3 * (uint64_t)m->experts) + 16;
    uint64_t e = m->arch == CHAM_ARCH_MIXTRAL ? m->experts : 0;
    uint64_t fwd = 17 + 3 * e, bwd = 19 + 3 * e, layers = m->layers / m->pp;
    /* Embedding, head and loss, pipeline transfers: at most 32 more. */
    uint64_t per_mb = layers * (fwd * (m->recompute || m->protrain ? 2 : 1) + bwd) + 32;
    /* ProTrain: each chunk fetched at most twice a step. */
    per_mb += m->protrain ? 2 * (layers + 2) : 0;
    /* autocast: a cast per group in the forward and again in the backward
     * (recomputation), two copies per group to DDP's buckets and back. */
    uint64_t casts = m->precision == CHAM_PRECISION_AUTOCAST ? 2 * (layers + 2) : 0;
    per_mb += casts;
    uint64_t eval = m->validate_every ? layers * fwd + 32 + casts : 0;
    /* The optimizer: unscale, AdamW and a ZeRO all-gather per group, the
     * reductions' joins and the loss scale. */
    return micro_batches(m) * per_mb + eval + 4 * (layers + 2) + casts + 8;
}

/* ---- counts ------------------------------------------------------------------*/

uint64_t wl_norm_params(const cham_model_config_t *m)
{
    return (m->arch == CHAM_ARCH_GPT2 ? 2u : 1u) * (uint64_t)m->hidden;
}

/* Parameters of one layer's parameter groups on a device of tensor-parallel
 * degree tp (weights split, norms and the biases after a row-parallel
 * matmul replicated). */
void wl_layer_params(const cham_model_config_t *m, uint32_t tp, wl_layer_params_t *p)
{
    uint64_t h = m->hidden, d = h / m->heads, f = m->ffn / tp;
    uint64_t qkv = (uint64_t)(m->heads + 2 * m->kv_heads) / tp * d;
    bool bias = m->arch == CHAM_ARCH_GPT2;
    p->norm1 = p->norm2 = wl_norm_params(m);
    p->qkv = h * qkv + (bias ? qkv : 0);
    p->out = h / tp * h + (bias ? h : 0);
    switch (m->arch) {
    case CHAM_ARCH_GPT2: p->mlp = h * f + f + f * h + h; break;
    case CHAM_ARCH_LLAMA: p->mlp = 3 * h * f; break;
    case CHAM_ARCH_MIXTRAL: p->mlp = h * m->experts + (uint64_t)m->experts * 3 * h * f; break;
    default: CHAM_ASSERT(!"an architecture cham_model_check lets through"); /* noreturn */
    }
}

uint64_t wl_layer_total(const wl_layer_params_t *p)
{
    return p->norm1 + p->qkv + p->out + p->norm2 + p->mlp;
}

/* Position table rows (GPT-2: learned, at least its 1024). */
static uint64_t positions(const cham_model_config_t *m)
{
    return m->arch == CHAM_ARCH_GPT2 ? (m->seq > 1024 ? m->seq : 1024) : 0;
}

uint64_t wl_embed_params(const cham_model_config_t *m, uint32_t tp)
{
    return wl_vocab_shard(m, tp) * m->hidden + positions(m) * m->hidden;
}

uint64_t wl_head_params(const cham_model_config_t *m, uint32_t tp)
{
    uint64_t head = m->arch == CHAM_ARCH_GPT2 ? 0 : wl_vocab_shard(m, tp) * m->hidden;
    return wl_norm_params(m) + head;   /* the final norm and an untied head */
}

uint64_t cham_model_parameters(const cham_model_config_t *m)
{
    wl_layer_params_t p;
    wl_layer_params(m, 1, &p);
    return wl_embed_params(m, 1) + m->layers * wl_layer_total(&p) + wl_head_params(m, 1);
}

uint64_t cham_model_device_parameters(const cham_model_config_t *m)
{
    wl_layer_params_t p;
    wl_layer_params(m, m->tp, &p);
    uint64_t n = wl_embed_params(m, m->tp) + m->layers / m->pp * wl_layer_total(&p);
    return m->pp == 1 ? n + wl_head_params(m, m->tp) : n;
}

/* The saved tensors of one layer (layer.c keeps exactly these). */
uint64_t cham_model_layer_activation_bytes(const cham_model_config_t *m)
{
    if (m->recompute)
        return wl_hidden_bytes(m);            /* the layer's input only */
    uint64_t T = wl_tokens(m), p = cham_dtype_size(m->dtype);
    uint64_t hid = wl_hidden_bytes(m);
    uint64_t stats = T * wl_stats_bytes(m);
    uint64_t qkv = T * wl_qkv_width(m) * p;
    uint64_t ctx = T * wl_ctx_width(m) * p;
    uint64_t attn = m->flash ? ctx + wl_lse_bytes(m) : wl_scores_bytes(m) + ctx;
    /* x, stats1, n1, qkv, attention, x1, stats2, n2, then the MLP. */
    uint64_t bytes = hid + stats + hid + qkv + attn + hid + stats + hid;
    uint64_t f = m->ffn / m->tp;
    switch (m->arch) {
    case CHAM_ARCH_GPT2: bytes += 2 * T * f * p; break;       /* fc1 out, gelu out */
    case CHAM_ARCH_LLAMA: bytes += 3 * T * f * p; break;      /* gate|up, swiglu out */
    case CHAM_ARCH_MIXTRAL: {
        uint64_t routed = T * m->topk;                       /* token copies sent to experts */
        bytes += routed * (4 + 8)                            /* gate weights, expert ids */
                 + routed * m->hidden * p                    /* permuted inputs */
                 + 3 * routed * f * p                        /* experts' gate|up and swiglu */
                 + routed * m->hidden * p;                   /* experts' outputs */
        break;
    }
    }
    return bytes;
}

/* ---- variation -----------------------------------------------------------------*/

uint64_t wl_hash(uint64_t seed, uint64_t a, uint64_t b)
{
    return cham_mix64(seed ^ (a * CHAM_GOLDEN64) ^ (b * UINT64_C(0xbf58476d1ce4e5b9)));
}

double wl_uniform(uint64_t seed, uint64_t a, uint64_t b)
{
    return cham_unit53(wl_hash(seed, a, b));
}

bool cham_workload_overflows(const cham_model_config_t *m, uint64_t step)
{
    if (m->overflow_every > 0 && (step + 1) % (uint64_t)m->overflow_every == 0)
        return true;
    return m->overflow_prob > 0 && wl_uniform(m->seed, step, WL_SALT_OVERFLOW) < m->overflow_prob;
}

bool cham_workload_validates(const cham_model_config_t *m, uint64_t step)
{
    return m->validate_every > 0 && step > 0 && step % m->validate_every == 0;
}

bool cham_workload_updates(const cham_model_config_t *m, uint64_t step)
{
    return m->accumulate <= 1 || (step + 1) % m->accumulate == 0;
}

bool cham_model_loop_changes(const cham_model_config_t *m)
{
    return m->accumulate > 1 || m->validate_every || m->overflow_every || m->overflow_prob > 0 ||
           m->layer_drop > 0 || m->moe_vary;
}

cham_model_config_t wl_training_steps(const cham_model_config_t *m)
{
    cham_model_config_t c = *m;
    c.overflow_every = 0;
    c.overflow_prob = 0;
    c.validate_every = 0;
    c.layer_drop = 0;
    return c;
}
