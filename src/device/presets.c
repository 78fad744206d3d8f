/* Built-in device presets of the sim backend: real accelerators described by
 * the figures of their public data sheets.
 *
 * Conventions (docs/devices.md gives every figure's source):
 *   capacity        bytes, the marketed size read as GiB (80 GB -> 80 GiB,
 *                   as nvidia-smi reports 81920 MiB for an A100 80GB);
 *   peak_flops      dense fp16/bf16 matrix (tensor core / cube) FLOP/s with
 *                   fp32 accumulation, never the 2:4 sparsity figure;
 *   hbm_bandwidth   device memory bytes/s, decimal (1 GB/s = 1e9 B/s);
 *   h2d/d2h         host link per direction: PCIe x16 nominal rate, half the
 *                   bidirectional figure data sheets print (Gen3 16 GB/s,
 *                   Gen4 32 GB/s, Gen5 64 GB/s);
 *   p2p_bandwidth   aggregate device-to-device link bandwidth of one device,
 *                   per direction (NVLink, NVLink bridge or HCCS);
 *   host_flops,     this device's share of its reference server's host:
 *   host_mem_bandwidth  peak fp32 vector FLOP/s and DRAM bytes/s of all
 *                   sockets divided by the accelerators per server (0: the
 *                   preset names no server);
 *   flops_efficiency,  the fractions of peak_flops and hbm_bandwidth that
 *   hbm_efficiency  training's kernels reach, set by the fit to published
 *                   runs of docs/fidelity.md (devices.md, "What kernels
 *                   achieve"). */
#include "chameleon/device.h"

#include <string.h>

#define GIB (UINT64_C(1) << 30)

static const cham_preset_t presets[] = {
    {
        /* Ascend 910B3 (of the 910B1..B4 bins, see docs/devices.md):
         * 64 GB HBM2e, 313 TFLOPS fp16; HCCS full mesh of 8 NPUs, 7 peers x
         * 28 GB/s per direction; host link assumed PCIe 4.0 x16. */
        .name = "ascend-910b",
        .description = "Huawei Ascend 910B3 64GB",
        .capacity = 64 * GIB,
        .peak_flops = 313e12,
        .hbm_bandwidth = 1.6e12,
        .h2d_bandwidth = 32e9,
        .d2h_bandwidth = 32e9,
        .p2p_bandwidth = 196e9,
        /* Atlas 800T A2: 4 Kunpeng 920 (48 cores, 2.6 GHz, 16 fp32
         * FLOP/cycle; 8 x DDR4-2933 each) for 8 NPUs (assumed, docs). */
        .host_flops = 1.0e12,
        .host_mem_bandwidth = 93.9e9,
        /* Fit to MindFormers' Llama 2 7B on 8 910Bs, the one published
         * run with its configuration; bandwidth as the A100's (assumed). */
        .flops_efficiency = 0.60,
        .hbm_efficiency = 0.70,
    },
    {
        /* A100 SXM4 80GB: 312 TFLOPS, 2,039 GB/s HBM2e, PCIe Gen4 64 GB/s
         * and NVLink 600 GB/s, both bidirectional. */
        .name = "a100-80g",
        .description = "NVIDIA A100 SXM4 80GB",
        .capacity = 80 * GIB,
        .peak_flops = 312e12,
        .hbm_bandwidth = 2039e9,
        .h2d_bandwidth = 32e9,
        .d2h_bandwidth = 32e9,
        .p2p_bandwidth = 300e9,
        /* DGX A100: 2 EPYC 7742 (64 cores, 2.25 GHz, 32 fp32
         * FLOP/cycle; 8 x DDR4-3200 each) for 8 GPUs. */
        .host_flops = 1.152e12,
        .host_mem_bandwidth = 51.2e9,
        /* Fit to 9 published runs (MPT, FlashAttention's GPT-2, Lambda's
         * GPT3-2.7B): each within 15%. */
        .flops_efficiency = 0.68,
        .hbm_efficiency = 0.70,
    },
    {
        /* H100 SXM5 80GB: 1,979 TFLOPS with sparsity -> 989.4 dense,
         * 3.35 TB/s HBM3, PCIe Gen5 128 GB/s and NVLink 900 GB/s, both
         * bidirectional. */
        .name = "h100-80g",
        .description = "NVIDIA H100 SXM5 80GB",
        .capacity = 80 * GIB,
        .peak_flops = 989.4e12,
        .hbm_bandwidth = 3350e9,
        .h2d_bandwidth = 64e9,
        .d2h_bandwidth = 64e9,
        .p2p_bandwidth = 450e9,
        /* DGX H100: 2 Xeon 8480C (56 cores, 2.0 GHz, 64 fp32
         * FLOP/cycle; 8 x DDR5-4800 each) for 8 GPUs. */
        .host_flops = 1.792e12,
        .host_mem_bandwidth = 76.8e9,
        /* Fit to 8 published runs (MPT, Lambda's GPT3-2.7B): 6 within 15%,
         * MPT-7B at sequence 1024 +24%. */
        .flops_efficiency = 0.50,
        .hbm_efficiency = 0.50,
    },
    {
        /* V100 SXM2 16GB: 125 TFLOPS tensor, 900 GB/s HBM2, PCIe Gen3
         * 32 GB/s and NVLink 300 GB/s, both bidirectional. */
        .name = "v100-16g",
        .description = "NVIDIA V100 SXM2 16GB",
        .capacity = 16 * GIB,
        .peak_flops = 125e12,
        .hbm_bandwidth = 900e9,
        .h2d_bandwidth = 16e9,
        .d2h_bandwidth = 16e9,
        .p2p_bandwidth = 150e9,
        /* DGX-1: 2 Xeon E5-2698 v4 (20 cores, 2.2 GHz, 32 fp32
         * FLOP/cycle; 4 x DDR4-2400 each) for 8 GPUs. */
        .host_flops = 0.352e12,
        .host_mem_bandwidth = 19.2e9,
        /* Fit to 6 Megatron-LM runs on one DGX-1 (DLPerf): each within 15%. */
        .flops_efficiency = 0.40,
        .hbm_efficiency = 0.70,
    },
    {
        /* GeForce RTX 3090: 71 TFLOPS fp16 with fp32 accumulate (and bf16;
         * 142 with fp16 accumulate), 936 GB/s GDDR6X, PCIe 4.0 x16, NVLink
         * bridge 56.25 GB/s per direction. */
        .name = "rtx3090-24g",
        .description = "NVIDIA GeForce RTX 3090 24GB",
        .capacity = 24 * GIB,
        .peak_flops = 71e12,
        .hbm_bandwidth = 936e9,
        .h2d_bandwidth = 32e9,
        .d2h_bandwidth = 32e9,
        .p2p_bandwidth = 56.25e9,
        /* Assumed as the A100's (Ampere too): no published training run
         * with its configuration found. */
        .flops_efficiency = 0.68,
        .hbm_efficiency = 0.70,
    },
};

#define N_PRESETS (sizeof presets / sizeof presets[0])

size_t cham_preset_count(void)
{
    return N_PRESETS;
}

const cham_preset_t *cham_preset_at(size_t i)
{
    return i < N_PRESETS ? &presets[i] : NULL;
}

const cham_preset_t *cham_preset_find(const char *name)
{
    if (!name)
        return NULL;
    for (size_t i = 0; i < N_PRESETS; i++) {
        if (strcmp(presets[i].name, name) == 0)
            return &presets[i];
    }
    return NULL;
}

const char *cham_preset_default_name(void)
{
    return "a100-80g";
}
