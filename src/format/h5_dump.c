/* The child side of the HDF5 sandbox: walk a file through libhdf5 (the
 * hardened raw layer) and write its snapshot (h5_snapshot.h). */
#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"
#include "base/fdio.h"
#include "base/mem.h"
#include "format/h5_raw.h"
#include "format/h5_snapshot.h"

#define KC_DUMP_MAX_DEPTH 64
#define KC_DUMP_MAX_OBJECTS 1000000

typedef struct kc_dump {
    kc_h5raw *h5;
    int fd;
    uint64_t blob_floats; /* floats written so far */
    uint64_t budget_floats; /* most floats the snapshot may hold */
    int direct;             /* float32 datasets stay in the source (kc_h5_dump) */
    cJSON *objects;
    int n_objects;
} kc_dump;

static cJSON *kc_dump_strings(char **items, int n)
{
    cJSON *arr = cJSON_CreateArray();
    for (int i = 0; arr && i < n; i++)
        cJSON_AddItemToArray(arr, cJSON_CreateString(items[i]));
    return arr;
}

static kc_status kc_dump_attrs(kc_dump *d, const char *path, cJSON *obj)
{
    char **names = NULL;
    int n = 0;
    KC_TRY(kc_h5raw_attr_names(d->h5, path, &names, &n));
    cJSON *attrs = cJSON_AddObjectToObject(obj, "attrs");
    for (int i = 0; attrs && i < n; i++) {
        char **values = NULL;
        int nv = 0;
        cJSON *a = cJSON_CreateObject();
        kc_status st = kc_h5raw_attr_strings(d->h5, path, names[i], &values, &nv);
        if (st == KC_OK)
            cJSON_AddItemToObject(a, "strings", kc_dump_strings(values, nv > 0 ? nv : 0));
        else
            cJSON_AddStringToObject(a, "error", kc_last_error());
        kc_strv_free(values, nv);
        cJSON_AddItemToObject(attrs, names[i], a);
    }
    kc_strv_free(names, n);
    return attrs ? KC_OK : kc_fail(KC_ERR_NOMEM, "out of memory");
}

static void kc_dump_dataset_entry(cJSON *obj, const kc_shape *shape, kc_dtype dtype)
{
    cJSON *dims = cJSON_AddArrayToObject(obj, "shape");
    for (int i = 0; dims && i < shape->rank; i++)
        cJSON_AddItemToArray(dims, cJSON_CreateNumber((double)shape->dims[i]));
    cJSON_AddStringToObject(obj, "dtype", kc_dtype_name(dtype));
}

static kc_status kc_dump_dataset(kc_dump *d, const char *path, cJSON *obj)
{
    kc_shape shape;
    kc_dtype dtype;
    kc_status st = kc_h5raw_dataset_info(d->h5, path, &shape, &dtype);
    int64_t count = st == KC_OK ? kc_shape_count(&shape) : -1;
    if (st == KC_OK && count < 0)
        st = KC_ERR_LIMIT;
    /* Weights are stored, so a real file holds at least 1 byte per value
     * (int8) and float32 costs at most 4x that: a dataset far larger than
     * the file is fill value or compression tricks, a memory bomb here. */
    if (st == KC_OK && (uint64_t)count > d->budget_floats - d->blob_floats)
        st = kc_fail(KC_ERR_LIMIT, "%s: HDF5 dataset %s declares %lld values, more than a "
                     "file of this size can store", kc_h5raw_label(d->h5), path,
                     (long long)count);
    uint64_t source_offset = 0;
    if (st == KC_OK && d->direct && dtype == KC_F32 &&
        kc_h5raw_f32_offset(d->h5, path, &source_offset)) {
        /* the parent reads these bytes from the file or image itself */
        kc_dump_dataset_entry(obj, &shape, dtype);
        cJSON_AddNumberToObject(obj, "source_offset", (double)source_offset);
        return KC_OK;
    }
    float *data = NULL;
    if (st == KC_OK && !(data = kc_alloc_array((size_t)(count ? count : 1), sizeof *data)))
        st = KC_ERR_NOMEM;
    if (st == KC_OK)
        st = kc_h5raw_read_f32(d->h5, path, data, count);
    if (st == KC_OK)
        st = kc_write_full(d->fd, data, (size_t)count * sizeof *data, "HDF5 snapshot");
    free(data);
    if (st == KC_ERR_IO || st == KC_ERR_NOMEM)
        return st;
    if (st != KC_OK) {
        /* Recorded, not fatal: the loader fails only if it needs it. */
        cJSON_AddStringToObject(obj, "refused", kc_last_error());
        cJSON_AddNumberToObject(obj, "status", st);
        return KC_OK;
    }
    kc_dump_dataset_entry(obj, &shape, dtype);
    cJSON_AddNumberToObject(obj, "offset", (double)d->blob_floats);
    d->blob_floats += (uint64_t)count;
    return KC_OK;
}

static int kc_dump_skip(const char *path)
{
    /* Training state: never needed for inference, often larger than the
     * model itself (Adam keeps two slots per weight). */
    return strcmp(path, "/optimizer_weights") == 0 || strcmp(path, "/optimizer") == 0;
}

static kc_status kc_dump_object(kc_dump *d, const char *path, int depth)
{
    if (depth > KC_DUMP_MAX_DEPTH)
        return kc_fail(KC_ERR_LIMIT, "%s: HDF5 groups nested deeper than %d",
                       kc_h5raw_label(d->h5), KC_DUMP_MAX_DEPTH);
    if (++d->n_objects > KC_DUMP_MAX_OBJECTS)
        return kc_fail(KC_ERR_LIMIT, "%s: more than %d HDF5 objects", kc_h5raw_label(d->h5),
                       KC_DUMP_MAX_OBJECTS);
    int kind = kc_h5raw_kind(d->h5, path);
    cJSON *obj = cJSON_CreateObject();
    if (!obj)
        return kc_fail(KC_ERR_NOMEM, "out of memory");
    cJSON_AddItemToArray(d->objects, obj);
    cJSON_AddStringToObject(obj, "path", path);
    cJSON_AddStringToObject(obj, "kind", kind == KC_H5_GROUP ? "group"
                                         : kind == KC_H5_DATASET ? "dataset" : "other");
    if (kind != KC_H5_NONE)
        KC_TRY(kc_dump_attrs(d, path, obj));
    if (kind == KC_H5_DATASET)
        return kc_dump_dataset(d, path, obj);
    if (kind != KC_H5_GROUP)
        return KC_OK;
    char **names = NULL, **refused = NULL;
    int n = 0, nr = 0;
    KC_TRY(kc_h5raw_list(d->h5, path, &names, &n));
    kc_status st = kc_h5raw_list_refused(d->h5, path, &refused, &nr);
    cJSON_AddItemToObject(obj, "children", kc_dump_strings(names, n));
    cJSON_AddItemToObject(obj, "refused_links", kc_dump_strings(refused, nr > 0 ? nr : 0));
    for (int i = 0; st == KC_OK && i < n; i++) {
        size_t len = strlen(path) + strlen(names[i]) + 2;
        char *child = kc_calloc(len, 1);
        if (!child) {
            st = KC_ERR_NOMEM;
            break;
        }
        snprintf(child, len, "%s%s%s", path, strcmp(path, "/") == 0 ? "" : "/", names[i]);
        if (!kc_dump_skip(child))
            st = kc_dump_object(d, child, depth + 1);
        free(child);
    }
    kc_strv_free(names, n);
    kc_strv_free(refused, nr);
    return st;
}

static void kc_dump_le64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

kc_status kc_h5_dump(const char *path, const void *buf, size_t len, const char *label, int fd,
                     int direct)
{
    kc_dump d = {.fd = fd, .direct = direct};
    uint64_t source_bytes = (uint64_t)len;
    if (path) {
        struct stat sb;
        source_bytes = stat(path, &sb) == 0 ? (uint64_t)sb.st_size : 0;
    }
    d.budget_floats = ((uint64_t)16 << 20) + 4 * source_bytes;
    kc_status st = path ? kc_h5raw_open_file(path, &d.h5)
                        : kc_h5raw_open_image(buf, len, label, &d.h5);
    if (st != KC_OK)
        return st;
    unsigned char header[KC_H5_SNAP_HEADER] = {0};
    cJSON *root = cJSON_CreateObject();
    d.objects = root ? cJSON_AddArrayToObject(root, "objects") : NULL;
    if (!d.objects)
        st = kc_fail(KC_ERR_NOMEM, "out of memory");
    if (st == KC_OK)
        st = kc_write_full(fd, header, sizeof header, "HDF5 snapshot");
    if (st == KC_OK)
        st = kc_dump_object(&d, "/", 0);
    kc_h5raw_close(d.h5);
    char *json = st == KC_OK ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    if (st == KC_OK && !json)
        st = kc_fail(KC_ERR_NOMEM, "out of memory writing the snapshot index");
    if (st == KC_OK) {
        uint64_t blob_bytes = d.blob_floats * sizeof(float);
        memcpy(header, KC_H5_SNAP_MAGIC, 8);
        kc_dump_le64(header + 8, KC_H5_SNAP_HEADER);
        kc_dump_le64(header + 16, blob_bytes);
        kc_dump_le64(header + 24, KC_H5_SNAP_HEADER + blob_bytes);
        kc_dump_le64(header + 32, strlen(json));
        st = kc_write_full(fd, json, strlen(json), "HDF5 snapshot");
        if (st == KC_OK && pwrite(fd, header, sizeof header, 0) != (ssize_t)sizeof header)
            st = kc_fail(KC_ERR_IO, "snapshot header write failed");
    }
    free(json);
    return st;
}
