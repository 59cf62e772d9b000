/* A worker's store of streamed model files (net/receive.c): a file sent in
 * order with correct checksums lands under "<sha256>-<name>"; a corrupted
 * piece, a piece out of order, a whole file whose digest is not the
 * promised one, an oversized file, a hostile name or a missing tensor are
 * each refused with a one-line error, and nothing appears under a final
 * name. The cache directory must be private to this user. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"
#include "base/tensor.h"
#include "net/digest.h"
#include "net/msg.h"
#include "net/receive.h"

#define DIR_ KC_TEST_TMP "/receive_test"

static unsigned char g_file[10000];

static void fresh_dir(void)
{
    assert_int_equal(system("rm -rf " DIR_), 0);
}

/* A PUT_MODEL message for bytes [off, off+len) of g_file. */
static kc_status put(kc_receiver *r, const char *sha, const char *name, size_t off, size_t len,
                     size_t total, int corrupt, uint64_t *offset, int *complete)
{
    int64_t dims[1] = {(int64_t)len};
    kc_tensor *t = NULL;
    assert_int_equal(kc_tensor_new(KC_U8, 1, dims, &t), KC_OK);
    memcpy(kc_tensor_data(t), g_file + off, len);
    char chunk[KC_SHA256_HEX], header[512];
    kc_sha256_mem(g_file + off, len, chunk);
    if (corrupt)
        ((unsigned char *)kc_tensor_data(t))[0] ^= 1;
    snprintf(header, sizeof header,
             "{\"sha256\":\"%s\",\"name\":\"%s\",\"offset\":%zu,\"total\":%zu,\"chunk_sha256\":\"%s\"}",
             sha, name, off, total, chunk);
    kc_wire_msg m;
    kc_msg_tensors(&m, KC_WIRE_PUT_MODEL, 1, 0, &t, 1);
    m.text = header;
    m.text_len = strlen(header);
    kc_status s = kc_receiver_put(r, &m, offset, complete);
    kc_tensor_free(t);
    return s;
}

static void one_line(const char *want)
{
    const char *e = kc_last_error();
    if (!e[0] || strchr(e, '\n') || !strstr(e, want))
        fail_msg("error '%s' lacks '%s'", e, want);
}

static int count_files(void)
{
    FILE *p = popen("ls " DIR_ " | wc -l", "r");
    int n = -1;
    assert_int_equal(fscanf(p, "%d", &n), 1);
    pclose(p);
    return n;
}

static void test_receive_whole_file(void **state)
{
    (void)state;
    fresh_dir();
    for (size_t i = 0; i < sizeof g_file; i++)
        g_file[i] = (unsigned char)(i * 7 + 3);
    char sha[KC_SHA256_HEX], path[4096];
    kc_sha256_mem(g_file, sizeof g_file, sha);
    kc_receiver r;
    assert_int_equal(kc_receiver_init(&r, DIR_, 1 << 20), KC_OK);
    assert_int_not_equal(kc_receiver_find(&r, sha, "m.keras", path, sizeof path), KC_OK);
    uint64_t off = 0;
    int done = 0;
    assert_int_equal(put(&r, sha, "m.keras", 0, 4000, sizeof g_file, 0, &off, &done), KC_OK);
    assert_int_equal(off, 4000);
    assert_false(done);
    assert_int_not_equal(kc_receiver_find(&r, sha, "m.keras", path, sizeof path), KC_OK);
    assert_int_equal(put(&r, sha, "m.keras", 4000, 6000, sizeof g_file, 0, &off, &done), KC_OK);
    assert_true(done);
    assert_int_equal(kc_receiver_find(&r, sha, "m.keras", path, sizeof path), KC_OK);
    char got[KC_SHA256_HEX];
    assert_int_equal(kc_sha256_file(path, got), KC_OK);
    assert_string_equal(got, sha);
    struct stat st;
    assert_int_equal(stat(DIR_, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0700);
    assert_int_equal(count_files(), 1); /* no .part left behind */
    kc_receiver_free(&r);
}

static void test_receive_refusals(void **state)
{
    (void)state;
    fresh_dir();
    char sha[KC_SHA256_HEX], wrong[KC_SHA256_HEX], path[4096];
    kc_sha256_mem(g_file, sizeof g_file, sha);
    kc_sha256_mem(g_file, 10, wrong);
    kc_receiver r;
    assert_int_equal(kc_receiver_init(&r, DIR_, 8000), KC_OK);
    uint64_t off;
    int done;
    /* bigger than --max-model-mb allows */
    assert_int_equal(put(&r, sha, "m.keras", 0, 100, sizeof g_file, 0, &off, &done), KC_ERR_LIMIT);
    one_line("at most");
    kc_receiver_free(&r);
    assert_int_equal(kc_receiver_init(&r, DIR_, 1 << 20), KC_OK);
    /* a piece whose bytes changed on the way */
    assert_int_equal(put(&r, sha, "m.keras", 0, 100, sizeof g_file, 1, &off, &done), KC_ERR_FORMAT);
    one_line("checksum mismatch");
    /* a piece out of order */
    assert_int_equal(put(&r, sha, "m.keras", 0, 100, sizeof g_file, 0, &off, &done), KC_OK);
    assert_int_equal(put(&r, sha, "m.keras", 300, 100, sizeof g_file, 0, &off, &done), KC_ERR_FORMAT);
    one_line("expected offset 100");
    /* names that leave the directory */
    assert_int_equal(put(&r, sha, "../evil", 0, 100, sizeof g_file, 0, &off, &done), KC_ERR_FORMAT);
    one_line("plain file name");
    assert_int_equal(put(&r, sha, "..", 0, 100, sizeof g_file, 0, &off, &done), KC_ERR_FORMAT);
    /* a whole file that is not the promised one: discarded */
    assert_int_equal(put(&r, wrong, "m.keras", 0, sizeof g_file, sizeof g_file, 0, &off, &done),
                     KC_ERR_REFUSED);
    one_line("not the promised");
    assert_int_not_equal(kc_receiver_find(&r, wrong, "m.keras", path, sizeof path), KC_OK);
    assert_int_equal(count_files(), 0);
    /* no tensor, or not JSON */
    kc_wire_msg m;
    kc_msg_text(&m, KC_WIRE_PUT_MODEL, 1, 0, "{\"sha256\":1}");
    assert_int_not_equal(kc_receiver_put(&r, &m, &off, &done), KC_OK);
    kc_msg_text(&m, KC_WIRE_PUT_MODEL, 1, 0, "not json");
    assert_int_equal(kc_receiver_put(&r, &m, &off, &done), KC_ERR_FORMAT);
    kc_receiver_free(&r);
    /* receiving off */
    assert_int_equal(kc_receiver_init(&r, DIR_, 0), KC_OK);
    assert_int_equal(put(&r, sha, "m.keras", 0, 100, sizeof g_file, 0, &off, &done), KC_ERR_REFUSED);
    one_line("does not take streamed models");
    kc_receiver_free(&r);
}

static void test_receive_dir_must_be_private(void **state)
{
    (void)state;
    fresh_dir();
    assert_int_equal(mkdir(DIR_, 0755), 0);
    kc_receiver r;
    assert_int_equal(kc_receiver_init(&r, DIR_, 1 << 20), KC_ERR_IO);
    one_line("mode 0700");
    assert_int_equal(rmdir(DIR_), 0);
    assert_int_equal(symlink("/tmp", DIR_), 0);
    assert_int_equal(kc_receiver_init(&r, DIR_, 1 << 20), KC_ERR_IO);
    one_line("not a directory");
    assert_int_equal(unlink(DIR_), 0);
}

/* The store keeps at most KC_RECEIVE_KEEP_FILES files of the largest
 * size: a fifth evicts the least recently used; pieces left by a crash are
 * removed when a worker starts. */
static void test_receive_store_is_bounded(void **state)
{
    (void)state;
    fresh_dir();
    kc_receiver r;
    assert_int_equal(kc_receiver_init(&r, DIR_, sizeof g_file), KC_OK);
    char sha[6][KC_SHA256_HEX], path[4096];
    for (int f = 0; f < 5; f++) {
        g_file[0] = (unsigned char)f;
        kc_sha256_mem(g_file, sizeof g_file, sha[f]);
        uint64_t off;
        int done = 0;
        assert_int_equal(put(&r, sha[f], "m.keras", 0, sizeof g_file, sizeof g_file, 0, &off,
                             &done), KC_OK);
        assert_true(done);
        if (f == 3) /* file 0 used again: file 1 becomes the oldest */
            assert_int_equal(kc_receiver_find(&r, sha[0], "m.keras", path, sizeof path), KC_OK);
        usleep(20000);
    }
    assert_int_equal(count_files(), KC_RECEIVE_KEEP_FILES);
    assert_int_not_equal(kc_receiver_find(&r, sha[1], "m.keras", path, sizeof path), KC_OK);
    assert_int_equal(kc_receiver_find(&r, sha[0], "m.keras", path, sizeof path), KC_OK);
    assert_int_equal(kc_receiver_find(&r, sha[4], "m.keras", path, sizeof path), KC_OK);
    kc_receiver_free(&r);
    /* a piece left behind by a crash */
    snprintf(path, sizeof path, DIR_ "/%s.part", sha[1]);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fclose(f);
    assert_int_equal(kc_receiver_init(&r, DIR_, sizeof g_file), KC_OK);
    assert_int_equal(count_files(), KC_RECEIVE_KEEP_FILES);
    kc_receiver_free(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_receive_whole_file),
        cmocka_unit_test(test_receive_refusals),
        cmocka_unit_test(test_receive_dir_must_be_private),
        cmocka_unit_test(test_receive_store_is_bounded),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
