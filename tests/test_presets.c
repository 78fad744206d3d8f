/* The sim backend's device presets: names, lookup, the default, figures
 * within physical bounds, and a device opened from each preset reporting the
 * preset's figures (with per-field overrides). Sources: docs/devices.md. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "chameleon/chameleon.h"

#define GiB (UINT64_C(1) << 30)

static void test_names_unique_and_non_empty(void **state)
{
    (void)state;
    size_t n = cham_preset_count();
    assert_true(n >= 5);
    for (size_t i = 0; i < n; i++) {
        const cham_preset_t *p = cham_preset_at(i);
        assert_non_null(p);
        assert_non_null(p->name);
        assert_true(p->name[0] != '\0');
        assert_non_null(p->description);
        assert_true(p->description[0] != '\0');
        for (size_t j = i + 1; j < n; j++)
            assert_string_not_equal(p->name, cham_preset_at(j)->name);
    }
    assert_null(cham_preset_at(n));
    assert_null(cham_preset_at(SIZE_MAX));
}

static void test_required_presets_exist(void **state)
{
    (void)state;
    static const char *const required[] = {
        "ascend-910b", "a100-80g", "h100-80g", "v100-16g", "rtx3090-24g",
    };
    for (size_t i = 0; i < sizeof required / sizeof required[0]; i++) {
        const cham_preset_t *p = cham_preset_find(required[i]);
        assert_non_null(p);
        assert_string_equal(p->name, required[i]);
    }
}

static void test_find(void **state)
{
    (void)state;
    for (size_t i = 0; i < cham_preset_count(); i++) {
        const cham_preset_t *p = cham_preset_at(i);
        assert_ptr_equal(cham_preset_find(p->name), p);
    }
    assert_null(cham_preset_find(NULL));
    assert_null(cham_preset_find(""));
    assert_null(cham_preset_find("nope"));
    assert_null(cham_preset_find("A100-80G"));   /* case-sensitive */
    assert_null(cham_preset_find("a100"));       /* no prefix match */
    assert_null(cham_preset_find("a100-80g "));  /* no trailing junk */
}

static void test_default(void **state)
{
    (void)state;
    const char *name = cham_preset_default_name();
    assert_non_null(name);
    assert_string_equal(name, "a100-80g");
    assert_non_null(cham_preset_find(name));
}

static void test_figures_positive_and_plausible(void **state)
{
    (void)state;
    for (size_t i = 0; i < cham_preset_count(); i++) {
        const cham_preset_t *p = cham_preset_at(i);
        /* memory: whole GiB between 1 GiB and 1 TiB */
        assert_true(p->capacity >= GiB);
        assert_true(p->capacity <= 1024 * GiB);
        assert_int_equal(p->capacity % GiB, 0);
        /* dense 16-bit matrix throughput: 1 TFLOP/s .. 10 PFLOP/s */
        assert_true(p->peak_flops > 1e12);
        assert_true(p->peak_flops < 1e16);
        /* device memory bandwidth: 100 GB/s .. 10 TB/s */
        assert_true(p->hbm_bandwidth > 100e9);
        assert_true(p->hbm_bandwidth < 10e12);
        /* links: positive, at least PCIe 1.0 x16 per direction, and slower
         * than device memory */
        const double links[] = {p->h2d_bandwidth, p->d2h_bandwidth, p->p2p_bandwidth};
        for (size_t k = 0; k < 3; k++) {
            assert_true(links[k] >= 4e9);
            assert_true(links[k] < p->hbm_bandwidth);
        }
        /* a PCIe x16 host link is at most 128 GB/s per direction (Gen7) */
        assert_true(p->h2d_bandwidth <= 128e9);
        assert_true(p->d2h_bandwidth <= 128e9);
        /* the ridge point (FLOP per byte of device memory) of a real
         * accelerator lies between 10 and 1000 */
        double ridge = p->peak_flops / p->hbm_bandwidth;
        assert_true(ridge > 10.0);
        assert_true(ridge < 1000.0);
        /* what kernels reach of the peaks: a fraction, and no preset
         * claims less than a fifth (docs/devices.md, "What kernels
         * achieve") */
        assert_true(p->flops_efficiency >= 0.2 && p->flops_efficiency <= 1);
        assert_true(p->hbm_efficiency >= 0.2 && p->hbm_efficiency <= 1);
    }
}

/* Every figure of every preset, from the data sheets as transcribed in
 * docs/devices.md ("The presets"): dense fp16/bf16 FLOP/s (not the
 * sparse figure), memory bandwidth, host link and device-to-device link
 * per direction. */
static void test_known_figures(void **state)
{
    (void)state;
    static const struct {
        const char *name;
        uint64_t capacity_gib;
        double flops, hbm, h2d, p2p;
    } sheet[] = {
        {"ascend-910b", 64, 313e12, 1.6e12, 32e9, 196e9},     /* HCCS 7 x 28 GB/s */
        {"a100-80g", 80, 312e12, 2039e9, 32e9, 300e9},        /* dense, not 624 */
        {"h100-80g", 80, 989.4e12, 3350e9, 64e9, 450e9},      /* dense, not 1979 */
        {"v100-16g", 16, 125e12, 900e9, 16e9, 150e9},
        {"rtx3090-24g", 24, 71e12, 936e9, 32e9, 56.25e9},     /* fp32 accumulate */
    };
    for (size_t i = 0; i < sizeof sheet / sizeof sheet[0]; i++) {
        const cham_preset_t *p = cham_preset_find(sheet[i].name);
        assert_non_null(p);
        assert_int_equal(p->capacity, sheet[i].capacity_gib * GiB);
        assert_true(p->peak_flops == sheet[i].flops);
        assert_true(p->hbm_bandwidth == sheet[i].hbm);
        assert_true(p->h2d_bandwidth == sheet[i].h2d);
        assert_true(p->d2h_bandwidth == sheet[i].h2d);   /* symmetric links */
        assert_true(p->p2p_bandwidth == sheet[i].p2p);
    }
    /* 64 GiB in bytes, as docs/devices.md writes it. */
    assert_int_equal(cham_preset_find("ascend-910b")->capacity, UINT64_C(68719476736));
}

/* A sim device opened on each preset reports that preset's figures. */
static void test_open_each_preset(void **state)
{
    (void)state;
    for (size_t i = 0; i < cham_preset_count(); i++) {
        const cham_preset_t *p = cham_preset_at(i);
        cham_device_config_t c = cham_device_config_default();
        c.preset = p->name;
        cham_device_t *dev = NULL;
        assert_int_equal(cham_device_open(&c, &dev), CHAM_OK);
        assert_non_null(dev);
        cham_device_info_t info;
        cham_device_get_info(dev, &info);
        assert_string_equal(info.name, p->name);
        assert_int_equal(info.capacity, p->capacity);
        assert_true(info.peak_flops == p->peak_flops);
        assert_true(info.hbm_bandwidth == p->hbm_bandwidth);
        assert_true(info.h2d_bandwidth == p->h2d_bandwidth);
        assert_true(info.d2h_bandwidth == p->d2h_bandwidth);
        assert_true(info.p2p_bandwidth == p->p2p_bandwidth);
        assert_true(info.flops_efficiency == p->flops_efficiency);
        assert_true(info.hbm_efficiency == p->hbm_efficiency);
        cham_device_close(dev);
    }
}

/* A non-zero config field replaces one figure; zero keeps the preset's. */
static void test_override_one_field(void **state)
{
    (void)state;
    const cham_preset_t *p = cham_preset_find("ascend-910b");
    assert_non_null(p);
    cham_device_config_t c = cham_device_config_default();
    c.preset = "ascend-910b";
    c.h2d_bandwidth = 64e9;
    cham_device_t *dev = NULL;
    assert_int_equal(cham_device_open(&c, &dev), CHAM_OK);
    cham_device_info_t info;
    cham_device_get_info(dev, &info);
    assert_true(info.h2d_bandwidth == 64e9);
    assert_true(info.d2h_bandwidth == p->d2h_bandwidth);
    assert_int_equal(info.capacity, p->capacity);
    assert_true(info.peak_flops == p->peak_flops);
    assert_true(info.flops_efficiency == p->flops_efficiency);
    cham_device_close(dev);
    /* A fraction of a peak above 1 is refused with its name. */
    c.flops_efficiency = 1.5;
    assert_int_equal(cham_device_open(&c, &dev), CHAM_ERR_INVALID_ARG);
    assert_non_null(strstr(cham_device_last_error(NULL), "flops_efficiency"));
    c.flops_efficiency = 0.25;
    assert_int_equal(cham_device_open(&c, &dev), CHAM_OK);
    cham_device_get_info(dev, &info);
    assert_true(info.flops_efficiency == 0.25);
    cham_device_close(dev);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names_unique_and_non_empty),
        cmocka_unit_test(test_required_presets_exist),
        cmocka_unit_test(test_find),
        cmocka_unit_test(test_default),
        cmocka_unit_test(test_figures_positive_and_plausible),
        cmocka_unit_test(test_known_figures),
        cmocka_unit_test(test_open_each_preset),
        cmocka_unit_test(test_override_one_field),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
