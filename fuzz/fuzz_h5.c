/* libFuzzer target for the hardened HDF5 layer (src/format/h5.c).
 *
 * The input is opened as an in-memory image, the way the .keras loader
 * opens a STORED model.weights.h5, and then read the way the loaders read
 * it: the legacy root attributes, (chunked) layer_names / weight_names,
 * the /model_weights and /layers trees, and every dataset as float32.
 *
 * libhdf5 is not instrumented, so coverage comes only from kerasc's code;
 * memory errors inside libhdf5 show up when they crash or when they pass
 * through an ASan interceptor (memcpy, strdup).
 *
 *   clang -g -fsanitize=fuzzer,address,undefined -Iinclude -Isrc \
 *     -I/usr/include/hdf5/serial fuzz/fuzz_h5.c src/format/h5.c \
 *     src/base/tensor.c src/base/error.c src/base/mem.c \
 *     -L/usr/lib/x86_64-linux-gnu/hdf5/serial -lhdf5 -lm -o fuzz_h5
 *   ./fuzz_h5 -rss_limit_mb=2048 -timeout=20 NEW_DIR fuzz/corpus/h5
 *
 * (NEW_DIR first: libFuzzer writes new inputs into the first directory.)
 * Add -fork=N -ignore_crashes=1 to keep going past the libhdf5 bugs below.
 *
 * Known libhdf5 1.10.8 bugs this target reaches that cannot be screened
 * out before calling libhdf5 (they sit in object-header messages, which
 * have no magic to scan for). Reproducers, written by
 * tools/make_h5_fixtures.py, in tests/data/h5/libhdf5_bugs/:
 *  - linfo_undef_btree_segv.h5: SIGSEGV, NULL memcpy in H5F__accum_read
 *    (H5Literate -> H5G__obj_get_linfo -> H5B2_open at HADDR_UNDEF);
 *  - enum_base_size_overread.h5: 2 KiB heap over-read decoding an enum
 *    datatype (H5Oopen -> H5D_open -> H5O_msg_read, H5Odtype.c);
 *  - attr_data_overread.h5: heap over-read (or use-after-free) in the
 *    attribute decoder (H5Aexists -> H5O__attr_exists, H5Oattr.c).
 * Four it did find that can be screened are refused by the pre-checks of
 * the libhdf5 layer: global heaps that hang the parser, local heaps
 * without a final NUL (strdup over-read), chunked scalar datasets
 * (H5Dread loops, allocating without bound), and unfiltered chunks that
 * store less than a chunk (H5Dread copies a whole chunk out of the shorter
 * buffer: a heap over-read; tests/data/h5/short_raw_chunks.h5).
 *
 * With the sandbox on, an ASan error inside the child still writes a
 * crash-* file (the sanitizer's death callback is libFuzzer's, inherited
 * through fork) while the run goes on: KC_SANDBOX_STDERR=1 shows the
 * child's report, and KC_SANDBOX=0 reproduces it in-process.
 *
 * If h5.c runs libhdf5 in a sandboxed child, set KC_SANDBOX=0 to fuzz
 * libhdf5 and the raw layer in-process; with the sandbox on, this fuzzes
 * the snapshot round trip instead. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/mem.h"
#include "format/h5.h"

#define FUZZ_MAX_DEPTH 8
#define FUZZ_MAX_OBJECTS 512
#define FUZZ_MAX_READ ((int64_t)1 << 20) /* elements per dataset */
#define FUZZ_MAX_TOTAL ((int64_t)1 << 22) /* elements per input */

/* libhdf5 sizes metadata buffers from the file and simply fails when
 * malloc does: let ASan return NULL there (as a real malloc of petabytes
 * does) instead of reporting, and keep single allocations under libFuzzer's
 * -malloc_limit_mb (default = -rss_limit_mb = 2048) so the NULL path is
 * what runs. libhdf5 has no frame pointers: the slow unwinder is needed for
 * the leak suppressions below to see its frames. */
const char *__asan_default_options(void);
const char *__asan_default_options(void)
{
    return "allocator_may_return_null=1:max_allocation_size_mb=2000:fast_unwind_on_malloc=0";
}

/* Leaks inside libhdf5 on its own error paths, found by this target and
 * not reachable from kerasc's side: an object header that fails to load
 * leaks a 56-byte free-list block (H5O_protect -> H5C_protect, seen from
 * H5Fopen and H5Oopen), and a dataset whose messages fail to decode leaks
 * what H5D_open had decoded so far (datatype, layout, external list). */
const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void) { return "leak:H5O_protect\nleak:H5D_open\n"; }

typedef struct fuzz_walk {
    kc_h5 *h5;
    int objects;
    int64_t elements;
} fuzz_walk;

static void fuzz_strings(kc_h5 *h5, const char *path, const char *attr)
{
    char **strings = NULL;
    int n = 0;
    if (kc_h5_attr_strings(h5, path, attr, &strings, &n) == KC_OK && n > 0) {
        /* touch every byte so ASan sees any bad length */
        size_t total = 0;
        for (int i = 0; i < n; i++)
            total += strlen(strings[i]);
        (void)total;
    }
    kc_strv_free(strings, n);
}

static void fuzz_dataset(fuzz_walk *w, const char *path)
{
    kc_shape shape;
    kc_dtype dtype;
    if (kc_h5_dataset_info(w->h5, path, &shape, &dtype) != KC_OK)
        return;
    int64_t count = kc_shape_count(&shape);
    if (count < 0 || count > FUZZ_MAX_READ || w->elements + count > FUZZ_MAX_TOTAL)
        return;
    w->elements += count;
    float *dst = malloc((size_t)(count ? count : 1) * sizeof *dst);
    if (!dst)
        return;
    if (kc_h5_read_f32(w->h5, path, dst, count) == KC_OK) {
        volatile float sink = 0;
        for (int64_t i = 0; i < count; i++)
            sink += dst[i];
        (void)sink;
    }
    free(dst);
}

static void fuzz_group(fuzz_walk *w, const char *path, int depth)
{
    if (depth > FUZZ_MAX_DEPTH)
        return;
    fuzz_strings(w->h5, path, "weight_names");
    fuzz_strings(w->h5, path, "name");
    char **names = NULL;
    int n = 0;
    if (kc_h5_list(w->h5, path, &names, &n) != KC_OK)
        return;
    for (int i = 0; i < n && w->objects < FUZZ_MAX_OBJECTS; i++) {
        w->objects++;
        size_t len = strlen(path) + strlen(names[i]) + 2;
        char *child = malloc(len);
        if (!child)
            break;
        snprintf(child, len, "%s%s%s", path, strcmp(path, "/") ? "/" : "", names[i]);
        int kind = kc_h5_kind(w->h5, child);
        if (kind == KC_H5_GROUP)
            fuzz_group(w, child, depth + 1);
        else if (kind == KC_H5_DATASET)
            fuzz_dataset(w, child);
        free(child);
    }
    kc_strv_free(names, n);
}

/* A hang inside the sandboxed libhdf5 child should cost seconds, not
 * the minute a real file may take (and trip libFuzzer's -timeout). */
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    setenv("KC_SANDBOX_CPU_SECONDS", "5", 0);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    kc_h5 *h5 = NULL;
    /* As the .keras loader does: the image handed over, float32 datasets
     * read from it (offsets the child found, checked here), each dropped
     * once read; an odd-sized input goes through the snapshot alone. */
    kc_status st;
    if (size % 2) {
        st = kc_h5_open_image(data, size, "fuzz.h5", &h5);
    } else {
        unsigned char *owned = kc_alloc_array(size ? size : 1, 1);
        if (!owned)
            return 0;
        memcpy(owned, data, size);
        st = kc_h5_open_image_owned(owned, size, "fuzz.h5", &h5);
        if (st == KC_OK)
            kc_h5_release_on_read(h5);
    }
    if (st != KC_OK)
        return 0;
    char *s = NULL;
    const char *root_attrs[] = {"model_config", "keras_version", "backend", "training_config"};
    for (size_t i = 0; i < sizeof root_attrs / sizeof root_attrs[0]; i++) {
        kc_h5_attr_string(h5, "/", root_attrs[i], &s);
        free(s);
        s = NULL;
    }
    fuzz_strings(h5, "/", "layer_names");
    fuzz_strings(h5, "/model_weights", "layer_names");
    kc_h5_has_attr(h5, "/model_weights", "keras_version");
    fuzz_walk w = {.h5 = h5};
    fuzz_group(&w, "/model_weights", 0);
    fuzz_group(&w, "/layers", 0);
    /* whatever else is at the root (vars, optimizer, custom names) */
    fuzz_group(&w, "/", 0);
    kc_h5_close(h5);
    return 0;
}
