/* Tests of the memory helpers (src/base/mem.c, huge.c): arrays written
 * whole (kc_alloc_array) come 2 MiB-aligned and advised onto transparent
 * huge pages; packed weights (kc_calloc_weights, zeroed) from 64 KiB on
 * lie side by side in the weights heap's huge-page chunks; whole-page
 * buffers (kc_huge_alloc: the arena) and the threads' large workspaces
 * are on huge pages of their own; small arrays and kc_calloc's are not;
 * KC_HUGEPAGES=0 turns the advice off, and kc_mem_free_pages and
 * kc_free_weights take it back. The advice is read
 * from the kernel's own record of the mapping (/proc/self/smaps VmFlags:
 * "hg" for MADV_HUGEPAGE, "nh" for MADV_NOHUGEPAGE). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/huge.h"
#include "base/mem.h"
#include "kernels/dnnl_common.h"
#include "kernels/kernel.h"

#define MIB ((size_t)1 << 20)

/* The VmFlags line of the mapping holding p, into flags; 0 if none. */
static int vm_flags_of(const void *p, char *flags, size_t cap)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f)
        return 0;
    char line[512];
    int inside = 0, found = 0;
    while (!found && fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' '))
            inside = (uintptr_t)p >= lo && (uintptr_t)p < hi;
        else if (inside && !strncmp(line, "VmFlags:", 8)) {
            size_t n = strnlen(line + 8, cap - 1);
            memcpy(flags, line + 8, n);
            flags[n] = 0;
            found = 1;
        }
    }
    fclose(f);
    return found;
}

static int has_flag(const void *p, const char *flag)
{
    char flags[256], padded[8];
    assert_true(vm_flags_of(p, flags, sizeof flags));
    snprintf(padded, sizeof padded, " %s", flag);
    return strstr(flags, padded) != NULL;
}

static int thp_available(void)
{
    return access("/sys/kernel/mm/transparent_hugepage/enabled", R_OK) == 0;
}

static void test_large_array_on_huge_pages(void **state)
{
    (void)state;
    if (!thp_available())
        skip();
    size_t bytes = 8 * MIB + 4096;
    char *a = kc_alloc_array(bytes, 1);
    assert_non_null(a);
    assert_int_equal((uintptr_t)a % (2 * MIB), 0);
    assert_true(has_flag(a, "hg"));
    memset(a, 1, bytes); /* writable end to end */
    kc_mem_free_pages(a, bytes);
}

static void test_small_and_zeroed_stay_small(void **state)
{
    (void)state;
    if (!thp_available())
        skip();
    char *small = kc_alloc_array(MIB, 1);
    float *zeroed = kc_calloc(2 * MIB, sizeof(float)); /* 8 MiB, zeros */
    assert_non_null(small);
    assert_non_null(zeroed);
    assert_false(has_flag(small, "hg"));
    assert_false(has_flag(zeroed + MIB, "hg"));
    for (size_t i = 0; i < 2 * MIB; i += 4096)
        assert_true(zeroed[i] == 0.0f);
    free(small);
    free(zeroed);
}

/* Packed weights and kernels' vector arrays of every size come on a
 * cache line's start, zeroed even where the heap held something before:
 * calloc's 16-byte alignment had made each 64-byte load of a 1x1
 * kernel's panel span two lines (ResNet50 at batch 1 1.5% slower). */
static void test_weights_on_cache_lines(void **state)
{
    (void)state;
    static const size_t sizes[] = {4, 100, 4000, 16 << 10, (64 << 10) + 4, 300 << 10,
                                   (3 * MIB) / 2, 3 * MIB};
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        size_t bytes = sizes[i];
        for (int weights = 0; weights < 2; weights++) {
            /* a dirty block of the same size first, for the array to reuse */
            char *dirty = malloc(bytes + 48);
            assert_non_null(dirty);
            memset(dirty, 0x5a, bytes + 48);
            __asm__ volatile("" : : "r"(dirty) : "memory");
            free(dirty);
            unsigned char *p = weights ? kc_calloc_weights(bytes, 1) : kc_calloc_aligned(bytes, 1);
            assert_non_null(p);
            if ((uintptr_t)p % 64)
                fail_msg("%s(%zu) at %p, not on a cache line's start",
                         weights ? "kc_calloc_weights" : "kc_calloc_aligned", bytes, (void *)p);
            for (size_t b = 0; b < bytes; b++)
                if (p[b])
                    fail_msg("byte %zu of %zu is %d, not zero", b, bytes, p[b]);
            if (weights)
                kc_free_weights(p);
            else
                free(p);
        }
    }
    /* a kernel's scratch (not zeroed) too: many live at once, so that
     * the heap's 16-byte steps would show */
    float *scratch[64];
    for (int i = 0; i < 64; i++) {
        scratch[i] = kc_scratch(i + 1 + (i % 8 == 7 ? 100000 : 0));
        assert_non_null(scratch[i]);
        if ((uintptr_t)scratch[i] % 64)
            fail_msg("kc_scratch(%d floats) at %p, not on a cache line's start", i + 1,
                     (void *)scratch[i]);
    }
    for (int i = 0; i < 64; i++)
        free(scratch[i]);
}

/* Packed weights from 2 MiB on: 2 MiB aligned, advised, zeroed even
 * where the heap held something before; small ones plain;
 * kc_free_weights takes the advice back as kc_mem_free_pages does. */
static void test_weights_on_huge_pages(void **state)
{
    (void)state;
    if (!thp_available() || !kc_huge_maps_on())
        skip();
    size_t floats = 3 * MIB + 100; /* 12 MiB and a bit */
    /* a freed mapped block raises glibc's mmap threshold to its size, so
     * the next blocks come from the heap, and this dirty one is handed
     * out again */
    char *mapped = malloc(24 * MIB);
    assert_non_null(mapped);
    __asm__ volatile("" : : "r"(mapped) : "memory"); /* kept: not elided with its free */
    free(mapped);
    char *dirty = malloc(floats * sizeof(float) + 4 * MIB);
    assert_non_null(dirty);
    memset(dirty, 0x5a, floats * sizeof(float) + 4 * MIB);
    __asm__ volatile("" : : "r"(dirty) : "memory");
    free(dirty);
    float *w = kc_calloc_weights(floats, sizeof(float));
    assert_non_null(w);
    assert_int_equal((uintptr_t)w % (2 * MIB), 0);
    assert_true(has_flag(w + MIB, "hg"));
    for (size_t i = 0; i < floats; i += 1021)
        if (w[i] != 0.0f)
            fail_msg("element %zu is %g, not zero", i, w[i]);
    assert_true(w[floats - 1] == 0.0f);
    float *small = kc_calloc_weights(1000, sizeof(float));
    assert_non_null(small);
    assert_false(has_flag(small, "hg"));
    kc_free_weights(small);
    char *inner = (char *)w + 2 * MIB;
    kc_free_weights(w);
    char flags[256];
    if (vm_flags_of(inner, flags, sizeof flags))
        assert_null(strstr(flags, " hg"));
    kc_free_weights(NULL);
}

/* The weights heap: packed arrays from KC_WHEAP_MIN to 2 MiB side by
 * side in one chunk, each on huge pages without a page of its own; an
 * array freed in the middle leaves a hole the next one fills, zeroed;
 * one larger than a chunk in a chunk of its own; a chunk unmapped with
 * its last array; a pointer it did not give left to the old path. */
static void test_weights_heap_side_by_side(void **state)
{
    (void)state;
    if (!thp_available() || !kc_huge_maps_on())
        skip();
    int chunks = kc_wheap_chunks();
    size_t sizes[3] = {MIB, MIB + 4, MIB + MIB / 2};
    unsigned char *a[3];
    for (int i = 0; i < 3; i++) {
        a[i] = kc_calloc_weights(sizes[i], 1);
        assert_non_null(a[i]);
        assert_int_equal((uintptr_t)a[i] % 64, 0);
        assert_true(has_flag(a[i], "hg"));
        for (size_t j = 0; j < sizes[i]; j += 509)
            assert_int_equal(a[i][j], 0);
        memset(a[i], 0x10 + i, sizes[i]); /* writable end to end */
    }
    /* one after the other, a header apart, in one chunk */
    assert_true(a[1] >= a[0] + sizes[0] && a[1] - a[0] < (ptrdiff_t)(sizes[0] + 4096));
    assert_true(a[2] >= a[1] + sizes[1] && a[2] - a[1] < (ptrdiff_t)(sizes[1] + 4096));
    assert_int_equal(kc_wheap_chunks(), chunks + 1);
    /* the middle one freed: its neighbours keep their bytes, and a
     * smaller array takes its place, zeroed */
    kc_free_weights(a[1]);
    assert_int_equal(a[0][sizes[0] - 1], 0x10);
    assert_int_equal(a[2][0], 0x12);
    assert_int_equal(kc_wheap_chunks(), chunks + 1);
    unsigned char *again = kc_calloc_weights(MIB, 1);
    assert_ptr_equal(again, a[1]);
    for (size_t j = 0; j < MIB; j += 61)
        assert_int_equal(again[j], 0);
    kc_free_weights(again);
    /* larger than a chunk: one of its own */
    unsigned char *big = kc_wheap_alloc(70 * MIB);
    assert_non_null(big);
    assert_int_equal(kc_wheap_chunks(), chunks + 2);
    big[70 * MIB - 1] = 1;
    assert_int_equal(kc_wheap_free(big), 1);
    assert_int_equal(kc_wheap_chunks(), chunks + 1);
    kc_free_weights(a[0]);
    kc_free_weights(a[2]);
    assert_int_equal(kc_wheap_chunks(), chunks);
    /* below KC_WHEAP_MIN: the heap's, freed the old way */
    float *small = kc_calloc_weights(1000, sizeof(float));
    assert_non_null(small);
    assert_int_equal(kc_wheap_free(small), 0);
    kc_free_weights(small);
}

/* kc_huge_alloc: whole huge pages of its own, aligned, advised, zeroed;
 * kc_huge_free unmaps them. */
static void test_huge_alloc(void **state)
{
    (void)state;
    if (!thp_available() || !kc_huge_maps_on())
        skip();
    size_t bytes = 3 * MIB;
    unsigned char *p = kc_huge_alloc(bytes);
    assert_non_null(p);
    assert_int_equal((uintptr_t)p % (2 * MIB), 0);
    assert_true(has_flag(p, "hg"));
    for (size_t j = 0; j < 4 * MIB; j += 4093) /* the rest of the last page too */
        assert_int_equal(p[j], 0);
    memset(p, 3, 4 * MIB);
    kc_huge_free(p, bytes);
    char flags[256];
    assert_false(vm_flags_of(p, flags, sizeof flags) && strstr(flags, " hg"));
    assert_null(kc_huge_alloc(SIZE_MAX - MIB));
}

/* A thread's workspace from 2 MiB on: a mapping of its own, its whole
 * huge pages advised, kept while large enough; below, the heap's. */
static void test_workspace_on_huge_pages(void **state)
{
    (void)state;
    if (!thp_available() || !kc_huge_maps_on())
        skip();
    char *big = kc_dnnl_workspace(KC_DNNL_SLOT_SRC, 3 * MIB);
    assert_non_null(big);
    assert_int_equal((uintptr_t)big % (2 * MIB), 0);
    assert_true(has_flag(big, "hg"));
    memset(big, 1, 3 * MIB);
    assert_ptr_equal(kc_dnnl_workspace(KC_DNNL_SLOT_SRC, 2 * MIB), big);
    char *grown = kc_dnnl_workspace(KC_DNNL_SLOT_SRC, 5 * MIB);
    assert_non_null(grown);
    assert_true(has_flag(grown + 2 * MIB, "hg"));
    memset(grown, 2, 5 * MIB);
    char *small = kc_dnnl_workspace(KC_DNNL_SLOT_DST, MIB);
    assert_non_null(small);
    assert_false(has_flag(small, "hg"));
}

static void test_free_pages_takes_the_advice_back(void **state)
{
    (void)state;
    if (!thp_available())
        skip();
    /* carved from the heap when glibc's mmap threshold is above it */
    size_t bytes = 6 * MIB;
    char *a = kc_alloc_array(bytes, 1);
    assert_non_null(a);
    memset(a, 2, bytes);
    char *inner = a + 2 * MIB;
    assert_true(has_flag(inner, "hg"));
    /* Past free, look only when the range is still mapped (heap): the
     * advice must be gone, not left to the next small blocks there. */
    kc_mem_free_pages(a, bytes);
    char flags[256];
    if (vm_flags_of(inner, flags, sizeof flags))
        assert_null(strstr(flags, " hg"));
}

static void test_overflow_refused(void **state)
{
    (void)state;
    assert_null(kc_alloc_array(SIZE_MAX / 2, 4));
}

/* KC_HUGEPAGES is read once per process: checked in a fresh one (this
 * binary again, as "env-off-child"). */
static int env_off_child(void)
{
    char *a = kc_alloc_array(8 * MIB, 1);
    float *w = kc_calloc_weights(2 * MIB, sizeof(float));
    char flags[256], wflags[256];
    /* still whole pages: an owned HDF5 image drops them once read */
    int ok = a && (uintptr_t)a % 4096 == 0 && vm_flags_of(a, flags, sizeof flags) &&
             !strstr(flags, " hg") && w && vm_flags_of(w + MIB, wflags, sizeof wflags) &&
             !strstr(wflags, " hg") && w[MIB] == 0.0f;
    /* small packed weights on a cache line's start without the heap too */
    float *small = kc_calloc_weights(300 << 10, 1);
    ok = ok && small && (uintptr_t)small % 64 == 0;
    kc_free_weights(small);
    /* the arena's and the workspaces' huge pages: not advised either */
    char *h = kc_huge_alloc(3 * MIB), hflags[256];
    ok = ok && h && vm_flags_of(h, hflags, sizeof hflags) && !strstr(hflags, " hg");
    kc_huge_free(h, 3 * MIB);
    free(a); /* LeakSanitizer checks this process's exit too */
    kc_free_weights(w);
    return ok ? 0 : 1;
}

static void test_env_turns_it_off(void **state)
{
    (void)state;
    if (!thp_available())
        skip();
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        setenv("KC_HUGEPAGES", "0", 1);
        execl("/proc/self/exe", "test_mem", "env-off-child", (char *)NULL);
        _exit(2);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}

int main(int argc, char **argv)
{
    if (argc == 2 && !strcmp(argv[1], "env-off-child"))
        return env_off_child();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_large_array_on_huge_pages),
        cmocka_unit_test(test_weights_on_huge_pages),
        cmocka_unit_test(test_weights_on_cache_lines),
        cmocka_unit_test(test_weights_heap_side_by_side),
        cmocka_unit_test(test_huge_alloc),
        cmocka_unit_test(test_workspace_on_huge_pages),
        cmocka_unit_test(test_small_and_zeroed_stay_small),
        cmocka_unit_test(test_free_pages_takes_the_advice_back),
        cmocka_unit_test(test_overflow_refused),
        cmocka_unit_test(test_env_turns_it_off),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
