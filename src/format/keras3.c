/* Reading a Keras 3 archive with libzip. Members are normally STORED but
 * DEFLATE and ZIP64 are accepted (users re-zip archives). Every declared
 * size is capped before allocation and libzip verifies the CRC, so a
 * forged size or a zip bomb fails cleanly. */
#include "format/keras3.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zip.h>

#include "base/error.h"
#include "base/mem.h"
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
    char *buf = kc_calloc((size_t)st.size + 1, 1);
    if (!buf)
        return KC_ERR_NOMEM;
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
    if (st == KC_OK)
        st = kc_zip_read_member(zip, path, "model.weights.h5", KC_MAX_WEIGHTS_BYTES, &weights,
                                &wlen);
    zip_discard(zip);
    if (st != KC_OK)
        return st;
    if (!weights)
        return kc_fail(KC_ERR_FORMAT, "%s: zip has no model.weights.h5", path);
    a->weights_image = weights;
    a->weights_len = wlen;
    return kc_h5_open_image(weights, wlen, path, &a->weights);
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
    free(a->weights_image);
    free(a->config_json);
    free(a->metadata_json);
    memset(a, 0, sizeof *a);
}
