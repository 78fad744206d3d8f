/* The published runs the fidelity experiment compares with (fidelity.h).
 * Each figure is as its source prints it; the configuration fields are the
 * source's, and docs/fidelity.md says, source by source, what was read
 * where and what the source leaves unstated. A run across nodes keeps its
 * memory figure (a device's memory does not depend on where its peers
 * are) but not its time: the presets model one server's links only. */
#include <math.h>

#include "fidelity.h"

#define GPT CHAM_ARCH_GPT2
#define F16 CHAM_DTYPE_F16
#define BF16 CHAM_DTYPE_BF16

/* OneFlow DLPerf, Megatron-LM on DGX-1 V100 16GB: GPT, vocabulary 51,200,
 * sequence 2048, fp16, --checkpoint-activations, no fused attention.
 * Fields: id, layers, hidden, heads, mbs, gbs, tp, pp, dp, ms per
 * iteration (0: across nodes), MiB. */
#define DLPERF(name, l, h, a, mbs_, gbs_, tp_, pp_, dp_, ms, mib)                            \
    {.id = name, .source = "dlperf", .device = "v100-16g", .arch = GPT, .layers = l,         \
     .hidden = h, .heads = a, .vocab = 51200, .seq = 2048, .mbs = mbs_, .gbs = gbs_,         \
     .tp = tp_, .pp = pp_, .dp = dp_, .dtype = F16, .flash = false, .recompute = true,       \
     .time = ms, .time_unit = (ms) > 0 ? FID_MS_PER_STEP : FID_NO_TIME, .memory = mib,       \
     .memory_unit = FID_MIB}

/* MosaicML LLM Foundry's MPT benchmarks: GPT-style, vocabulary 50,368,
 * bf16, flash attention, FSDP FULL_SHARD over 8 GPUs of one node (ZeRO-3).
 * Fields: id, preset, layers, hidden, heads, sequence, mbs, gbs,
 * activation checkpointing, tokens/s per GPU. */
#define MPT(name, dev, l, h, a, s, mbs_, gbs_, ac, tps)                                      \
    {.id = name, .source = "llm-foundry", .device = dev, .arch = GPT, .layers = l,           \
     .hidden = h, .heads = a, .vocab = 50368, .seq = s, .mbs = mbs_, .gbs = gbs_, .tp = 1,   \
     .pp = 1, .dp = 8, .zero = 3, .dtype = BF16, .flash = true, .recompute = ac,             \
     .time = tps, .time_unit = FID_TOKENS_S_DEVICE}

/* Lambda's FlashAttention-2 runs of GPT3-2.7B (32 layers, hidden 2560, 32
 * heads), sequence 1024, micro-batch 4, global batch 512, fp16 under
 * Lightning's AMP (torch.autocast), ZeRO-1 data parallel (DDP with
 * ZeroRedundancyOptimizer), no recomputation. Fields: id, preset, dp, tokens/s (per
 * device with one, of the job with eight), GB per device. */
#define LAMBDA(name, dev, dp_, tps, gb)                                                      \
    {.id = name, .source = "lambda-fa2", .device = dev, .arch = GPT, .layers = 32,           \
     .hidden = 2560, .heads = 32, .vocab = 50264, .seq = 1024, .mbs = 4, .gbs = 512,         \
     .tp = 1, .pp = 1, .dp = dp_, .zero = 1, .dtype = F16,                                   \
     .precision = CHAM_PRECISION_AUTOCAST, .flash = true, .time = tps,                       \
     .time_unit = (dp_) == 1 ? FID_TOKENS_S_DEVICE : FID_TOKENS_S_JOB, .memory = gb,         \
     .memory_unit = FID_GB_AS_GIB}

/* Fields: id, layers, hidden, heads, mbs, dp, ZeRO stage, precision, MiB
 * allocated. */
#define COLOSSAL(name, l, h, a, mbs_, dp_, zero_, prec, mib)                                 \
    {.id = name, .source = "colossal-lightning", .device = "a100-80g", .capacity_gib = 40,   \
     .arch = GPT, .layers = l, .hidden = h, .heads = a, .vocab = 50257, .seq = 1024,         \
     .mbs = mbs_, .tp = 1, .pp = 1, .dp = dp_, .zero = zero_, .dtype = F16,                  \
     .precision = CHAM_PRECISION_##prec, .flash = false,                                     \
     .recompute = true, .memory = mib, .memory_unit = FID_MIB,                               \
     .memory_kind = FID_ALLOCATED}

/* BAAI's FlagPerf: Llama 2 7B (Hugging Face's, vocabulary 32,000) under
 * DeepSpeed 0.11.1 ZeRO-3 over the 8 GPUs of one server, bf16, flash
 * attention 2, no recomputation. Fields: id, preset, sequence, mbs, gbs,
 * tokens/s per GPU, GiB per GPU (nvidia-smi, whole GiB). */
#define FLAGPERF_DS(name, dev, s, mbs_, gbs_, tps, gib)                                      \
    {.id = name, .source = "flagperf", .device = dev, .arch = CHAM_ARCH_LLAMA, .layers = 32, \
     .hidden = 4096, .ffn = 11008, .heads = 32, .vocab = 32000, .seq = s, .mbs = mbs_,       \
     .gbs = gbs_, .tp = 1, .pp = 1, .dp = 8, .zero = 3, .dtype = BF16, .flash = true,        \
     .time = tps, .time_unit = FID_TOKENS_S_DEVICE, .memory = gib,                           \
     .memory_unit = FID_GIB}

/* FlagPerf: Aquila2 7B (Llama-shaped, vocabulary 100,008 padded as
 * Megatron pads it: to a multiple of 128 x tp) under FlagScale, a
 * Megatron-LM fork, on the 8 GPUs of one server: sequence 2048, bf16,
 * flash attention, no recomputation, the distributed optimizer (ZeRO-1),
 * fp32 gradients (Megatron's with bf16), 9 micro-batches a step. Memory
 * only: this FlagScale does not overlap communication with computation,
 * which the generator always does. Fields: id, vocabulary, mbs, tp, pp,
 * dp, GiB per GPU (nvidia-smi). */
#define FLAGPERF_FS(name, v, mbs_, tp_, pp_, dp_, gib)                                       \
    {.id = name, .source = "flagperf", .device = "a100-80g", .arch = CHAM_ARCH_LLAMA,        \
     .layers = 32, .hidden = 4096, .ffn = 11008, .heads = 32, .vocab = v, .seq = 2048,       \
     .mbs = mbs_, .gbs = (mbs_) * 9 * (dp_), .tp = tp_, .pp = pp_, .dp = dp_, .zero = 1,     \
     .dtype = BF16, .precision = CHAM_PRECISION_MAIN_GRADS, .flash = true, .memory = gib,    \
     .memory_unit = FID_GIB}

/* The Languini Kitchen's throughput sweep on its reference GPU, an RTX
 * 3090: GPT-2-shaped models (vocabulary 16,384, sequence 512, an fp32
 * model under torch.autocast with Adam and a GradScaler: one optimizer
 * step per micro-batch, no fused attention, torch.compile), the batch
 * that gave each shape its most tokens per second. Fields: id, layers,
 * hidden, heads, batch, ms per step. */
#define LANGUINI(name, l, h, a, mbs_, ms)                                                    \
    {.id = name, .source = "languini", .device = "rtx3090-24g", .arch = GPT, .layers = l,    \
     .hidden = h, .heads = a, .vocab = 16384, .seq = 512, .mbs = mbs_, .tp = 1, .pp = 1,     \
     .dp = 1, .dtype = F16, .precision = CHAM_PRECISION_AUTOCAST, .flash = false,            \
     .time = ms, .time_unit = FID_MS_PER_STEP}

const fid_case_t fid_cases[] = {
    DLPERF("DP_1x1x1_2_1536x16", 16, 1536, 16, 2, 2, 1, 1, 1, 464.12, 14362),
    DLPERF("DP_8x1x1_16_1536x16", 16, 1536, 16, 2, 16, 1, 1, 8, 480.96, 14938),
    DLPERF("DP_16x1x1_32_1536x16", 16, 1536, 16, 2, 32, 1, 1, 16, 0, 14508),
    DLPERF("DP_32x1x1_64_1536x16", 16, 1536, 16, 2, 64, 1, 1, 32, 0, 14508),
    DLPERF("MP_1x1x1_8_768x12", 12, 768, 12, 8, 8, 1, 1, 1, 611.2, 9810),
    DLPERF("MP_1x8x1_16_1536x16", 16, 1536, 16, 16, 16, 8, 1, 1, 692.44, 12684),
    DLPERF("MP_1x16x1_16_3072x16", 16, 3072, 32, 16, 16, 16, 1, 1, 0, 12150),
    DLPERF("MP_1x32x1_16_3072x32", 32, 3072, 32, 16, 16, 32, 1, 1, 0, 8834),
    DLPERF("2D_2x4x1_16_1536x16", 16, 1536, 16, 8, 16, 4, 1, 2, 576.48, 9104),
    DLPERF("2D_4x2x1_16_1536x16", 16, 1536, 16, 4, 16, 2, 1, 4, 593.68, 9642),
    DLPERF("2D_2x8x1_16_2304x24", 24, 2304, 24, 8, 16, 8, 1, 2, 0, 14928),
    DLPERF("2D_4x8x1_32_2304x24", 24, 2304, 24, 8, 32, 8, 1, 4, 0, 15004),
    DLPERF("DP_PP_8x1x4_512_1536x16", 16, 1536, 16, 2, 512, 1, 4, 8, 0, 7130),
    DLPERF("MP_PP_1x8x4_512_2304x24", 24, 2304, 24, 16, 512, 8, 4, 1, 0, 14204),
    DLPERF("2D_PP_2x4x4_512_2304x24", 24, 2304, 24, 8, 512, 4, 4, 2, 0, 10018),
    DLPERF("2D_PP_2x8x2_512_2304x24", 24, 2304, 24, 8, 512, 8, 2, 2, 0, 10554),

    MPT("mpt-1b s2048 a100", "a100-80g", 24, 2048, 16, 2048, 14, 448, false, 20513),
    MPT("mpt-7b s2048 a100", "a100-80g", 32, 4096, 32, 2048, 6, 96, false, 4641),
    MPT("mpt-7b s4096 ac a100", "a100-80g", 32, 4096, 32, 4096, 16, 256, true, 3684),
    MPT("mpt-7b s8192 ac a100", "a100-80g", 32, 4096, 32, 8192, 8, 128, true, 3206),
    MPT("mpt-13b s2048 a100", "a100-80g", 40, 5120, 40, 2048, 2, 48, false, 2262),
    MPT("mpt-13b s4096 ac a100", "a100-80g", 40, 5120, 40, 4096, 10, 240, true, 2060),
    MPT("mpt-1b s2048 h100", "h100-80g", 24, 2048, 16, 2048, 14, 112, false, 45455),
    MPT("mpt-7b s1024 ac h100", "h100-80g", 32, 4096, 32, 1024, 64, 1024, true, 10203),
    MPT("mpt-7b s2048 h100", "h100-80g", 32, 4096, 32, 2048, 6, 48, false, 10643),
    MPT("mpt-7b s4096 ac h100", "h100-80g", 32, 4096, 32, 4096, 16, 256, true, 8611),
    MPT("mpt-13b s2048 h100", "h100-80g", 40, 5120, 40, 2048, 2, 16, false, 4792),
    MPT("mpt-13b s4096 ac h100", "h100-80g", 40, 5120, 40, 4096, 10, 240, true, 4717),

    /* FlashAttention's training README (owt/base.yaml): GPT-2 small, 8 A100s,
     * 368 ms per global step of 512 sequences of 1024, micro-batch 64. */
    {.id = "gpt2-small owt", .source = "flash-attention", .device = "a100-80g", .arch = GPT,
     .layers = 12, .hidden = 768, .heads = 12, .vocab = 50264, .seq = 1024, .mbs = 64,
     .gbs = 512, .tp = 1, .pp = 1, .dp = 8, .dtype = F16, .flash = true, .time = 368,
     .time_unit = FID_MS_PER_STEP},

    LAMBDA("gpt3-2.7b 1xa100", "a100-80g", 1, 10649.6, 73),
    LAMBDA("gpt3-2.7b 1xh100", "h100-80g", 1, 22282.24, 73),
    LAMBDA("gpt3-2.7b 8xa100", "a100-80g", 8, 81920, 56),
    LAMBDA("gpt3-2.7b 8xh100", "h100-80g", 8, 174981.12, 56),

    /* HPC-AI Tech's ColossalAI-Pytorch-lightning GPT benchmark: HF GPT-2
     * (vocabulary 50,257, sequence 1024, activation checkpointing on, no
     * fused attention) on A100 40GB, fp16 under Lightning; the figure is
     * torch.cuda.max_memory_allocated on rank 0, in MiB. GPT2-XL (48
     * layers, hidden 1600, 25 heads) with DDP and AMP, micro-batch 6 on 4
     * GPUs; with DeepSpeed ZeRO-3, micro-batch 40; a 12B GPT-2 shape (60
     * layers, hidden 4096, 16 heads) with ZeRO-3 on 8, micro-batch 1. */
    COLOSSAL("gpt2-xl ddp amp", 48, 1600, 25, 6, 4, 0, AUTOCAST, 37905.422),
    COLOSSAL("gpt2-xl zero3", 48, 1600, 25, 40, 4, 3, MASTER, 25360.968),
    COLOSSAL("gpt2-12b zero3", 60, 4096, 16, 1, 8, 3, MASTER, 29751.203),

    FLAGPERF_DS("llama2-7b s4096 a800", "a100-80g", 4096, 1, 8, 3564, 57),
    FLAGPERF_DS("llama2-7b s2048 mbs3 a800", "a100-80g", 2048, 3, 24, 3917, 70),
    FLAGPERF_DS("llama2-7b s2048 mbs3 gas64 a800", "a100-80g", 2048, 3, 1536, 4062, 70),
    FLAGPERF_DS("llama2-7b s4096 h800", "h100-80g", 4096, 1, 8, 7151, 59),
    FLAGPERF_FS("aquila2-7b TP1PP1DP8", 100096, 1, 1, 1, 8, 74),
    FLAGPERF_FS("aquila2-7b TP8PP1DP1", 100352, 8, 8, 1, 1, 55),
    FLAGPERF_FS("aquila2-7b TP1PP8DP1", 100096, 4, 1, 8, 1, 57),
    FLAGPERF_FS("aquila2-7b TP2PP2DP2", 100096, 4, 2, 2, 2, 52),

    LANGUINI("languini mini b97", 4, 512, 8, 97, 208.04351806640625),
    LANGUINI("languini tiny b76", 4, 768, 12, 76, 274.29055568150113),
    LANGUINI("languini small b34", 12, 768, 12, 34, 314.13142830984935),
    LANGUINI("languini medium b10", 24, 1024, 16, 10, 308.1049150739397),
    LANGUINI("languini large b4", 24, 1536, 16, 4, 290.1550859723772),

    /* MindSpore MindFormers' model table: Llama 2 7B on an Atlas 800T A2
     * (8 Ascend 910B), sequence 4096, bf16, flash attention, no
     * recomputation, data parallel 8 with the optimizer sharded ("parallel
     * optimizer", ZeRO-1); micro-batch 1 and 8 accumulated a step
     * (pretrain_llama2_7b_bf16.yaml's runner_config). 4160 tokens/s per NPU. */
    {.id = "llama2-7b s4096 910b", .source = "mindformers", .device = "ascend-910b",
     .arch = CHAM_ARCH_LLAMA, .layers = 32, .hidden = 4096, .ffn = 11008, .heads = 32,
     .vocab = 32000, .seq = 4096, .mbs = 1, .gbs = 64, .tp = 1, .pp = 1, .dp = 8, .zero = 1,
     .dtype = BF16, .flash = true, .time = 4160, .time_unit = FID_TOKENS_S_DEVICE},
};

const size_t fid_n_cases = sizeof fid_cases / sizeof fid_cases[0];

cham_model_config_t fid_model(const fid_case_t *c)
{
    cham_model_config_t m;
    cham_model_preset(c->arch == CHAM_ARCH_GPT2 ? "gpt2" : "llama2", &m);
    m.layers = c->layers;
    m.hidden = c->hidden;
    m.ffn = c->ffn ? c->ffn : 4 * c->hidden;
    m.heads = c->heads;
    m.kv_heads = c->kv_heads ? c->kv_heads : c->heads;
    m.vocab = c->vocab;
    m.seq = c->seq;
    m.mbs = c->mbs;
    m.gbs = c->gbs;
    m.tp = c->tp;
    m.pp = c->pp;
    m.dp = c->dp;
    m.zero = c->zero;
    m.dtype = c->dtype;
    m.flash = c->flash;
    m.recompute = c->recompute;
    m.precision = c->precision;
    return m;
}

double fid_step_seconds(const fid_case_t *c)
{
    /* A rate per device is the job's shared by all its devices. */
    double job_tokens = (double)(c->gbs ? c->gbs : c->mbs * c->dp) * c->seq;
    double devices = (double)c->tp * c->pp * c->dp;
    switch (c->time_unit) {
    case FID_MS_PER_STEP: return c->time / 1e3;
    case FID_TOKENS_S_DEVICE: return job_tokens / (c->time * devices);
    case FID_TOKENS_S_JOB: return job_tokens / c->time;
    case FID_NO_TIME: break;
    }
    return NAN;
}

double fid_memory_bytes(const fid_case_t *c)
{
    switch (c->memory_unit) {
    case FID_MIB: return c->memory * 1048576.0;
    case FID_GIB:
    case FID_GB_AS_GIB: return c->memory * 1073741824.0;
    case FID_NO_MEMORY: break;
    }
    return NAN;
}
