/* Reading a Keras 3 archive with libzip. Members are normally STORED but
 * DEFLATE and ZIP64 are accepted (users re-zip archives). Every declared
 * size is capped before allocation and libzip verifies the CRC, so a
 * forged size or a zip bomb fails cleanly. */
#include "format/keras3.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zip.h>

#include "base/error.h"
#include "base/mem.h"
#include "base/spill.h"
#include "format/fileio.h"

#define KC_MAX_CONFIG_BYTES ((zip_uint64_t)256 << 20)
#define KC_MAX_WEIGHTS_BYTES ((zip_uint64_t)64 << 30)

static kc_status kc_zip_read_member(zip_t *zip, const char *path, const char *member,
                                    zip_uint64_t cap, char **data, size_t *len)
{
    *data = NULL;
    *len = 0;
    zip_int64_t index = zip_name_locate(zip, member, 0);
    if (index < 0)
        return KC_OK; /* absent: caller decides */
    zip_stat_t st;
    zip_stat_init(&st);
    if (zip_stat_index(zip, (zip_uint64_t)index, 0, &st) != 0 || !(st.valid & ZIP_STAT_SIZE))
        return kc_fail(KC_ERR_FORMAT, "%s: zip member %s: cannot read its header", path, member);
    if (st.size > cap)
        return kc_fail(KC_ERR_LIMIT, "%s: zip member %s declares %llu bytes (limit %llu)", path,
                       member, (unsigned long long)st.size, (unsigned long long)cap);
    char *buf = kc_alloc_array((size_t)st.size + 1, 1); /* read whole below, or freed */
    if (!buf)
        return KC_ERR_NOMEM;
    buf[st.size] = '\0';
    zip_file_t *zf = zip_fopen_index(zip, (zip_uint64_t)index, 0);
    if (!zf) {
        free(buf);
        return kc_fail(KC_ERR_FORMAT, "%s: zip member %s: %s", path, member,
                       zip_strerror(zip));
    }
    zip_uint64_t got = 0;
    while (got < st.size) {
        zip_int64_t n = zip_fread(zf, buf + got, st.size - got);
        if (n <= 0)
            break;
        got += (zip_uint64_t)n;
    }
    char probe;
    int extra = got == st.size && zip_fread(zf, &probe, 1) > 0;
    const char *why = zip_file_strerror(zf);
    int bad = got != st.size || extra || zip_fclose(zf) != 0;
    if (bad) {
        free(buf);
        return kc_fail(KC_ERR_FORMAT, "%s: zip member %s is corrupt or truncated (%s)", path,
                       member, why ? why : "size mismatch");
    }
    *data = buf;
    *len = (size_t)st.size;
    return KC_OK;
}

/* The disk tier: copy the weights member to an unlinked spill file in
 * 1 MiB pieces (never the whole member in memory); returns its fd. */
static kc_status kc_zip_member_to_spill(zip_t *zip, const char *path, const char *member, int *fd,
                                        char *spill_path, size_t spill_path_size)
{
    *fd = -1;
    zip_int64_t index = zip_name_locate(zip, member, 0);
    if (index < 0)
        return kc_fail(KC_ERR_FORMAT, "%s: zip has no %s", path, member);
    zip_stat_t st;
    zip_stat_init(&st);
    if (zip_stat_index(zip, (zip_uint64_t)index, 0, &st) != 0 || !(st.valid & ZIP_STAT_SIZE) ||
        st.size > KC_MAX_WEIGHTS_BYTES)
        return kc_fail(KC_ERR_FORMAT, "%s: zip member %s: bad or oversized header", path, member);
    int out = kc_spill_named_tmpfile(kc_spill_dir(), spill_path, spill_path_size);
    if (out < 0)
        return kc_fail(KC_ERR_IO, "%s: cannot create a spill file in %s", path, kc_spill_dir());
    zip_file_t *zf = zip_fopen_index(zip, (zip_uint64_t)index, 0);
    char *buf = kc_calloc(1, 1 << 20);
    zip_uint64_t got = 0;
    kc_status status = zf && buf ? KC_OK : kc_fail(KC_ERR_NOMEM, "%s: %s", path, member);
    while (status == KC_OK) {
        zip_int64_t n = zip_fread(zf, buf, 1 << 20);
        if (n < 0)
            status = kc_fail(KC_ERR_FORMAT, "%s: zip member %s is corrupt", path, member);
        if (n <= 0)
            break;
        got += (zip_uint64_t)n;
        if (got > st.size || write(out, buf, (size_t)n) != n)
            status = kc_fail(KC_ERR_IO, "%s: zip member %s: size mismatch or spill write failed",
                             path, member);
    }
    if (zf && zip_fclose(zf) != 0 && status == KC_OK)
        status = kc_fail(KC_ERR_FORMAT, "%s: zip member %s is corrupt", path, member);
    if (status == KC_OK && got != st.size)
        status = kc_fail(KC_ERR_FORMAT, "%s: zip member %s is truncated", path, member);
    free(buf);
    if (status != KC_OK) {
        close(out);
        unlink(spill_path);
        return status;
    }
    *fd = out;
    return KC_OK;
}

static kc_status kc_keras3_open_zip(const char *path, kc_keras3_archive *a)
{
    int err = 0;
    zip_t *zip = zip_open(path, ZIP_RDONLY | ZIP_CHECKCONS, &err);
    if (!zip) {
        zip_error_t ze;
        zip_error_init_with_code(&ze, err);
        kc_status st = kc_fail(KC_ERR_FORMAT, "%s: not a readable zip archive (%s)", path,
                               zip_error_strerror(&ze));
        zip_error_fini(&ze);
        return st;
    }
    kc_status st = KC_OK;
    if (zip_name_locate(zip, "model.weights.npz", 0) >= 0)
        st = kc_fail(KC_ERR_REFUSED, "%s: weights are in model.weights.npz (pickled Python "
                     "objects); kerasc never unpickles", path);
    if (st == KC_OK)
        st = kc_zip_read_member(zip, path, "config.json", KC_MAX_CONFIG_BYTES, &a->config_json,
                                &a->config_len);
    if (st == KC_OK && !a->config_json)
        st = kc_fail(KC_ERR_FORMAT, "%s: zip has no config.json (not a Keras archive)", path);
    if (st == KC_OK)
        st = kc_zip_read_member(zip, path, "metadata.json", KC_MAX_CONFIG_BYTES,
                                &a->metadata_json, &a->metadata_len);
    char *weights = NULL;
    size_t wlen = 0;
    if (st == KC_OK && kc_spill_dir()) {
        int fd = -1;
        char member[4096];
        st = kc_zip_member_to_spill(zip, path, "model.weights.h5", &fd, member, sizeof member);
        zip_discard(zip);
        if (st != KC_OK)
            return st;
        st = kc_h5_open_file(member, &a->weights); /* libhdf5 opens by name */
        unlink(member);
        close(fd);
        if (st != KC_OK) /* name the archive, not the spill file */
            return kc_fail_context(st, "%s", path);
        return KC_OK;
    }
    if (st == KC_OK)
        st = kc_zip_read_member(zip, path, "model.weights.h5", KC_MAX_WEIGHTS_BYTES, &weights,
                                &wlen);
    zip_discard(zip);
    if (st != KC_OK)
        return st;
    if (!weights)
        return kc_fail(KC_ERR_FORMAT, "%s: zip has no model.weights.h5", path);
    kc_mem_trace("zip member extracted");
    /* The member's float32 weights are read from it, each one's pages
     * dropped once copied, so it and the weight arrays are never both
     * whole in memory; it goes at the latest when the archive closes. */
    return kc_h5_open_image_owned(weights, wlen, path, &a->weights);
}

static kc_status kc_keras3_open_dir(const char *path, kc_keras3_archive *a)
{
    char member[4096];
    snprintf(member, sizeof member, "%s/model.weights.npz", path);
    FILE *npz = fopen(member, "rb");
    if (npz) {
        fclose(npz);
        return kc_fail(KC_ERR_REFUSED, "%s: weights are in model.weights.npz (pickled Python "
                       "objects); kerasc never unpickles", path);
    }
    snprintf(member, sizeof member, "%s/config.json", path);
    KC_TRY(kc_read_file(member, (size_t)KC_MAX_CONFIG_BYTES, &a->config_json, &a->config_len));
    snprintf(member, sizeof member, "%s/metadata.json", path);
    FILE *meta = fopen(member, "rb");
    if (meta) {
        fclose(meta);
        KC_TRY(kc_read_file(member, (size_t)KC_MAX_CONFIG_BYTES, &a->metadata_json,
                            &a->metadata_len));
    }
    snprintf(member, sizeof member, "%s/model.weights.h5", path);
    return kc_h5_open_file(member, &a->weights);
}

kc_status kc_keras3_open(const char *path, int is_dir, kc_keras3_archive *out)
{
    memset(out, 0, sizeof *out);
    kc_status st = is_dir ? kc_keras3_open_dir(path, out) : kc_keras3_open_zip(path, out);
    if (st != KC_OK)
        kc_keras3_close(out);
    return st;
}

void kc_keras3_close(kc_keras3_archive *a)
{
    if (a->weights)
        kc_h5_close(a->weights);
    free(a->config_json);
    free(a->metadata_json);
    memset(a, 0, sizeof *a);
}
