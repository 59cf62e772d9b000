/* kc_h5: HDF5 access for the loader, served from a sandboxed snapshot.
 *
 * Opening a file runs libhdf5 in a child process (base/sandbox.h) that
 * writes a snapshot of the whole file (h5_snapshot.h). This process only
 * ever parses the snapshot, with every offset and size checked, so a file
 * that crashes or hangs libhdf5 costs a clean error, never the process. */
#include <cjson/cJSON.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"
#include "base/fdio.h"
#include "base/mem.h"
#include "base/sandbox.h"
#include "base/spill.h"
#include "format/h5.h"
#include "format/h5_snapshot.h"

#define KC_H5_PATH_MAX 4096
#define KC_H5_CHUNKS_MAX 1024
#define KC_H5_PAGE ((uint64_t)4096) /* hole-punching granularity */

typedef struct kc_h5_obj {
    const char *path;
    const cJSON *json;
} kc_h5_obj;

struct kc_h5 {
    char *label;
    unsigned char *map;
    size_t map_len;
    const float *blob;
    uint64_t blob_floats;
    cJSON *index;
    kc_h5_obj *objs;
    int n_objs;
    int borrowed;       /* weights point into map (disk tier): keep it mapped */
    int fd;             /* the snapshot file: datasets are read from it with pread */
    int release;        /* kc_h5_release_on_read: drop each dataset once read */
    unsigned char *punched; /* pages of the snapshot dropped, one bit each */
    /* The source, where the child left a float32 dataset's values in place
     * ("source_offset"): the image (owned: freed at close, its pages
     * dropped as they are read, like the snapshot's) or the file, read
     * with pread. */
    unsigned char *image;
    int source_fd;
    uint64_t source_len;
    unsigned char *image_dropped; /* pages of the image dropped, one bit each */
};

const char *kc_h5_label(const kc_h5 *h5) { return h5 ? h5->label : ""; }

/* --------------------------------------------------------------- open */

typedef struct kc_h5_source {
    const char *path;
    const void *buf;
    size_t len;
    const char *label;
    int kept;           /* the source outlives the open: the parent may read from it */
    int direct;         /* the child leaves float32 datasets there (kc_h5_dump) */
} kc_h5_source;

static kc_status kc_h5_dump_work(void *arg, int fd)
{
    const kc_h5_source *src = arg;
    return kc_h5_dump(src->path, src->buf, src->len, src->label, fd, src->direct);
}

static uint64_t kc_h5_le64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static int kc_h5_obj_cmp(const void *a, const void *b)
{
    return strcmp(((const kc_h5_obj *)a)->path, ((const kc_h5_obj *)b)->path);
}

static kc_status kc_h5_bad_snapshot(const kc_h5 *h5, const char *why)
{
    return kc_fail(KC_ERR_FORMAT, "%s: HDF5 snapshot is malformed (%s)", h5->label, why);
}

static kc_status kc_h5_index(kc_h5 *h5, const char *json, size_t len)
{
    h5->index = cJSON_ParseWithLength(json, len);
    if (!h5->index)
        return kc_h5_bad_snapshot(h5, "index is not JSON");
    const cJSON *objects = cJSON_GetObjectItemCaseSensitive(h5->index, "objects");
    int n = cJSON_GetArraySize(objects);
    if (!cJSON_IsArray(objects) || n < 1)
        return kc_h5_bad_snapshot(h5, "no objects");
    h5->objs = kc_calloc((size_t)n, sizeof *h5->objs);
    if (!h5->objs)
        return KC_ERR_NOMEM;
    for (const cJSON *o = objects->child; o; o = o->next) {
        const cJSON *path = cJSON_GetObjectItemCaseSensitive(o, "path");
        if (!cJSON_IsString(path) || path->valuestring[0] != '/')
            return kc_h5_bad_snapshot(h5, "object without a path");
        h5->objs[h5->n_objs].path = path->valuestring;
        h5->objs[h5->n_objs++].json = o;
    }
    qsort(h5->objs, (size_t)h5->n_objs, sizeof *h5->objs, kc_h5_obj_cmp);
    return KC_OK;
}

static kc_status kc_h5_map_snapshot(kc_h5 *h5, int fd)
{
    struct stat st;
    if (fstat(fd, &st) != 0 || st.st_size < KC_H5_SNAP_HEADER)
        return kc_h5_bad_snapshot(h5, "too short");
    h5->map_len = (size_t)st.st_size;
    void *map = mmap(NULL, h5->map_len, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED)
        return kc_fail(KC_ERR_NOMEM, "%s: cannot map the HDF5 snapshot", h5->label);
    h5->map = map;
    const unsigned char *hdr = h5->map;
    if (memcmp(hdr, KC_H5_SNAP_MAGIC, 8) != 0)
        return kc_h5_bad_snapshot(h5, "bad magic");
    uint64_t blob_off = kc_h5_le64(hdr + 8), blob_len = kc_h5_le64(hdr + 16);
    uint64_t json_off = kc_h5_le64(hdr + 24), json_len = kc_h5_le64(hdr + 32);
    if (blob_off != KC_H5_SNAP_HEADER || blob_len % sizeof(float) != 0 ||
        blob_len > h5->map_len - blob_off || json_off != blob_off + blob_len ||
        json_len > h5->map_len - json_off)
        return kc_h5_bad_snapshot(h5, "offsets out of range");
    h5->blob = (const float *)(h5->map + blob_off);
    h5->blob_floats = blob_len / sizeof(float);
    return kc_h5_index(h5, (const char *)h5->map + json_off, (size_t)json_len);
}

/* CPU time granted to libhdf5: generous for real files (it reads at
 * hundreds of MB/s and walks thousands of groups a second), finite for
 * hostile ones. KC_SANDBOX_TIME_SCALE multiplies it for instrumented runs
 * (valgrind runs the child ~50x slower). */
static unsigned kc_h5_cpu_budget(uint64_t bytes)
{
    unsigned base = 60u + (unsigned)(bytes >> 23);
    const char *fixed = getenv("KC_SANDBOX_CPU_SECONDS"); /* fuzzers: fail fast */
    if (fixed && strtol(fixed, NULL, 10) >= 1 && strtol(fixed, NULL, 10) <= 100000)
        return (unsigned)strtol(fixed, NULL, 10);
    const char *scale = getenv("KC_SANDBOX_TIME_SCALE");
    long k = scale ? strtol(scale, NULL, 10) : 1;
    return base * (unsigned)(k >= 1 && k <= 1000 ? k : 1);
}

/* The file the child parsed is the one source_fd holds: not replaced or
 * rewritten in between (its float32 values are read from source_fd). */
static kc_status kc_h5_same_file(const kc_h5 *h5, const char *path, const struct stat *held)
{
    struct stat now;
    if (stat(path, &now) != 0 || now.st_dev != held->st_dev || now.st_ino != held->st_ino ||
        now.st_size != held->st_size || now.st_mtim.tv_sec != held->st_mtim.tv_sec ||
        now.st_mtim.tv_nsec != held->st_mtim.tv_nsec)
        return kc_fail(KC_ERR_IO, "%s: the file changed while it was being loaded", h5->label);
    return KC_OK;
}

static kc_status kc_h5_open_source(const kc_h5_source *src, uint64_t bytes, kc_h5 **out)
{
    *out = NULL;
    kc_h5 *h5 = kc_calloc(1, sizeof *h5);
    if (!h5)
        return KC_ERR_NOMEM;
    h5->label = kc_strdup(src->label);
    h5->fd = h5->source_fd = -1;
    if (!h5->label) {
        free(h5);
        return KC_ERR_NOMEM;
    }
    kc_h5_source child = *src;
    /* the disk tier borrows weights from the snapshot: every one goes there */
    child.direct = src->kept && !kc_spill_dir();
    struct stat held;
    if (child.direct && src->path) {
        h5->source_fd = open(src->path, O_RDONLY | O_CLOEXEC);
        child.direct = h5->source_fd >= 0 && fstat(h5->source_fd, &held) == 0 &&
                       S_ISREG(held.st_mode);
        h5->source_len = child.direct ? (uint64_t)held.st_size : 0;
    } else if (child.direct)
        h5->source_len = src->len;
    int fd = -1;
    kc_status st = kc_sandbox_run(src->label, "the HDF5 reader (libhdf5)", kc_h5_dump_work,
                                  &child, kc_h5_cpu_budget(bytes), &fd);
    if (st == KC_OK)
        st = kc_h5_map_snapshot(h5, fd);
    if (st == KC_OK && child.direct && src->path)
        st = kc_h5_same_file(h5, src->path, &held);
    kc_mem_trace("HDF5 snapshot mapped");
    h5->fd = fd; /* kept: datasets are read with pread, never through the mapping */
    if (!child.direct)
        h5->source_len = 0; /* nothing in the index may point there */
    if (st != KC_OK) {
        kc_h5_close(h5);
        return st;
    }
    *out = h5;
    return KC_OK;
}

kc_status kc_h5_open_file(const char *path, kc_h5 **out)
{
    struct stat st;
    uint64_t bytes = stat(path, &st) == 0 ? (uint64_t)st.st_size : 0;
    kc_h5_source src = {.path = path, .label = path, .kept = 1};
    return kc_h5_open_source(&src, bytes, out);
}

kc_status kc_h5_open_image(const void *buf, size_t len, const char *label, kc_h5 **out)
{
    /* the caller may free buf on return: every dataset goes to the snapshot */
    kc_h5_source src = {.buf = buf, .len = len, .label = label ? label : "HDF5 image"};
    return kc_h5_open_source(&src, len, out);
}

kc_status kc_h5_open_image_owned(void *buf, size_t len, const char *label, kc_h5 **out)
{
    kc_h5_source src = {.buf = buf, .len = len, .label = label ? label : "HDF5 image",
                        .kept = 1};
    kc_status st = kc_h5_open_source(&src, len, out);
    if (st != KC_OK || !(*out)->source_len) {
        kc_mem_free_pages(buf, len);
        return st;
    }
    (*out)->image = buf;
    return KC_OK;
}

void kc_h5_close(kc_h5 *h5)
{
    if (!h5)
        return;
    /* Borrowed weights live on in the model: the spill session adopts the
     * mapping (or, should that fail, it stays mapped: a leak, never a
     * dangling weight). */
    if (h5->map && h5->borrowed) {
        /* Everything was read from it once (the index is parsed): drop the
         * pages; weights come back from the file when a layer runs. */
        madvise(h5->map, h5->map_len, MADV_DONTNEED);
        (void)kc_spill_adopt(h5->map, h5->map_len);
    }
    else if (h5->map)
        munmap(h5->map, h5->map_len);
    if (h5->image)
        kc_mem_free_pages(h5->image, (size_t)h5->source_len);
    if (h5->source_fd >= 0)
        close(h5->source_fd);
    free(h5->image_dropped);
    if (h5->fd >= 0)
        close(h5->fd);
    free(h5->punched);
    cJSON_Delete(h5->index);
    free(h5->objs);
    free(h5->label);
    free(h5);
}

/* ------------------------------------------------------------- lookup */

/* "/a//b/" -> "/a/b"; "" -> "/". */
static kc_status kc_h5_normalize(const kc_h5 *h5, const char *path, char *out)
{
    size_t o = 0;
    if (path[0] != '/')
        return kc_fail(KC_ERR_ARG, "%s: HDF5 path '%s' is not absolute", h5->label, path);
    if (strlen(path) > KC_H5_PATH_MAX)
        return kc_fail(KC_ERR_LIMIT, "%s: HDF5 path longer than %d bytes", h5->label,
                       KC_H5_PATH_MAX);
    out[o++] = '/';
    for (const char *p = path; *p; p++) {
        if (*p == '/' && out[o - 1] == '/')
            continue;
        out[o++] = *p;
    }
    if (o > 1 && out[o - 1] == '/')
        o--;
    out[o] = '\0';
    return KC_OK;
}

static const cJSON *kc_h5_find(const kc_h5 *h5, const char *path)
{
    char norm[KC_H5_PATH_MAX + 2];
    if (!h5 || kc_h5_normalize(h5, path, norm) != KC_OK)
        return NULL;
    kc_h5_obj key = {.path = norm};
    const kc_h5_obj *hit =
        bsearch(&key, h5->objs, (size_t)h5->n_objs, sizeof *h5->objs, kc_h5_obj_cmp);
    return hit ? hit->json : NULL;
}

static int kc_h5_kind_of(const cJSON *obj)
{
    const cJSON *kind = cJSON_GetObjectItemCaseSensitive(obj, "kind");
    if (!cJSON_IsString(kind))
        return KC_H5_NONE;
    if (strcmp(kind->valuestring, "group") == 0)
        return KC_H5_GROUP;
    if (strcmp(kind->valuestring, "dataset") == 0)
        return KC_H5_DATASET;
    return KC_H5_NONE;
}

/* Why a missing object is missing: a soft or external link on its path is
 * refused, anything else is simply absent. */
static kc_status kc_h5_missing(const kc_h5 *h5, const char *path)
{
    char norm[KC_H5_PATH_MAX + 2], prefix[KC_H5_PATH_MAX + 2] = "/";
    KC_TRY(kc_h5_normalize(h5, path, norm));
    size_t plen = 1;
    for (const char *p = norm + 1; *p;) {
        size_t len = strcspn(p, "/");
        const cJSON *obj = kc_h5_find(h5, prefix);
        const cJSON *refused = cJSON_GetObjectItemCaseSensitive(obj, "refused_links");
        for (const cJSON *r = refused ? refused->child : NULL; r; r = r->next)
            if (cJSON_IsString(r) && strlen(r->valuestring) == len &&
                memcmp(r->valuestring, p, len) == 0)
                return kc_fail(KC_ERR_REFUSED, "%s: HDF5 external/soft link at %.*s refused",
                               h5->label, (int)(p - norm + len), norm);
        if (!obj)
            break;
        if (plen > 1)
            prefix[plen++] = '/';
        memcpy(prefix + plen, p, len);
        plen += len;
        prefix[plen] = '\0';
        p += len;
        if (*p == '/')
            p++;
    }
    return kc_fail(KC_ERR_FORMAT, "%s: HDF5: no object at %s", h5->label, path);
}

int kc_h5_kind(kc_h5 *h5, const char *path) { return kc_h5_kind_of(kc_h5_find(h5, path)); }

/* -------------------------------------------------------------- lists */

static kc_status kc_h5_copy_strings(const cJSON *arr, char ***out, int *n)
{
    int count = cJSON_GetArraySize(arr);
    char **items = kc_calloc((size_t)count + 1, sizeof *items);
    if (!items)
        return KC_ERR_NOMEM;
    int i = 0;
    for (const cJSON *e = arr->child; e; e = e->next, i++) {
        if (!cJSON_IsString(e) || !(items[i] = kc_strdup(e->valuestring))) {
            kc_strv_free(items, i);
            return cJSON_IsString(e) ? KC_ERR_NOMEM
                                     : kc_fail(KC_ERR_FORMAT, "HDF5 snapshot: non-string entry");
        }
    }
    *out = items;
    *n = count;
    return KC_OK;
}

kc_status kc_h5_list(kc_h5 *h5, const char *group_path, char ***names, int *n)
{
    *names = NULL;
    *n = 0;
    const cJSON *obj = kc_h5_find(h5, group_path);
    if (!obj)
        return kc_h5_missing(h5, group_path);
    if (kc_h5_kind_of(obj) != KC_H5_GROUP)
        return kc_fail(KC_ERR_FORMAT, "%s: HDF5: %s is not a group", h5->label, group_path);
    const cJSON *children = cJSON_GetObjectItemCaseSensitive(obj, "children");
    if (!cJSON_IsArray(children))
        return kc_h5_bad_snapshot(h5, "group without children");
    return kc_h5_copy_strings(children, names, n);
}

/* --------------------------------------------------------- attributes */

static const cJSON *kc_h5_attr(const cJSON *obj, const char *attr)
{
    const cJSON *attrs = cJSON_GetObjectItemCaseSensitive(obj, "attrs");
    return attrs ? cJSON_GetObjectItemCaseSensitive(attrs, attr) : NULL;
}

int kc_h5_has_attr(kc_h5 *h5, const char *path, const char *attr)
{
    return kc_h5_attr(kc_h5_find(h5, path), attr) != NULL;
}

/* Append one stored attribute's strings to (items, n). */
static kc_status kc_h5_append_attr(const kc_h5 *h5, const cJSON *a, const char *name,
                                   char ***items, int *n)
{
    const cJSON *strings = cJSON_GetObjectItemCaseSensitive(a, "strings");
    if (!cJSON_IsArray(strings)) {
        const cJSON *err = cJSON_GetObjectItemCaseSensitive(a, "error");
        return kc_fail(KC_ERR_FORMAT, "%s", cJSON_IsString(err) ? err->valuestring
                                                                 : "HDF5 attribute unreadable");
    }
    int add = cJSON_GetArraySize(strings);
    char **grown = kc_realloc_array(*items, (size_t)*n + (size_t)add + 1, sizeof *grown);
    if (!grown)
        return KC_ERR_NOMEM;
    *items = grown;
    for (const cJSON *e = strings->child; e; e = e->next) {
        if (!cJSON_IsString(e))
            return kc_h5_bad_snapshot(h5, name);
        if (!((*items)[*n] = kc_strdup(e->valuestring)))
            return KC_ERR_NOMEM;
        (*n)++;
    }
    return KC_OK;
}

kc_status kc_h5_attr_strings(kc_h5 *h5, const char *path, const char *attr, char ***out, int *n)
{
    *out = NULL;
    *n = -1;
    const cJSON *obj = kc_h5_find(h5, path);
    if (!obj)
        return kc_h5_missing(h5, path);
    char **items = NULL;
    int count = 0;
    kc_status st = KC_OK;
    const cJSON *a = kc_h5_attr(obj, attr);
    if (a) {
        st = kc_h5_append_attr(h5, a, attr, &items, &count);
    } else {
        /* Keras splits long lists into attr0, attr1, ... */
        for (int k = 0; st == KC_OK && k < KC_H5_CHUNKS_MAX; k++) {
            char name[256];
            if (kc_format(name, sizeof name, "%s%d", attr, k) != KC_OK)
                break;
            const cJSON *chunk = kc_h5_attr(obj, name);
            if (!chunk)
                break;
            if (!items && !(items = kc_calloc(1, sizeof *items)))
                st = KC_ERR_NOMEM;
            if (st == KC_OK)
                st = kc_h5_append_attr(h5, chunk, name, &items, &count);
        }
        if (st == KC_OK && !items)
            return KC_OK; /* absent */
    }
    if (st != KC_OK) {
        kc_strv_free(items, count);
        return st;
    }
    if (!items && !(items = kc_calloc(1, sizeof *items)))
        return KC_ERR_NOMEM;
    *out = items;
    *n = count;
    return KC_OK;
}

kc_status kc_h5_attr_string(kc_h5 *h5, const char *path, const char *attr, char **out)
{
    *out = NULL;
    char **items = NULL;
    int n = 0;
    KC_TRY(kc_h5_attr_strings(h5, path, attr, &items, &n));
    if (n == 0) {
        kc_strv_free(items, 0);
        return kc_fail(KC_ERR_FORMAT, "%s: HDF5 attribute %s of %s is empty", h5->label, attr,
                       path);
    }
    if (n > 0) {
        *out = items[0];
        items[0] = NULL;
    }
    kc_strv_free(items, n > 0 ? n : 0);
    return KC_OK;
}

/* ----------------------------------------------------------- datasets */

static kc_dtype kc_h5_dtype_named(const char *name)
{
    for (int d = KC_F16; d <= KC_BOOL; d++)
        if (strcmp(kc_dtype_name((kc_dtype)d), name) == 0)
            return (kc_dtype)d;
    return KC_DTYPE_INVALID;
}

/* Where a dataset's float32 values are: `offset` floats into the
 * snapshot's blob, or (in_source) `offset` bytes into the source. */
typedef struct kc_h5_at {
    int in_source;
    uint64_t offset;
} kc_h5_at;

static kc_status kc_h5_dataset(kc_h5 *h5, const char *path, kc_shape *shape, kc_dtype *dtype,
                               kc_h5_at *at)
{
    const cJSON *obj = kc_h5_find(h5, path);
    if (!obj)
        return kc_h5_missing(h5, path);
    if (kc_h5_kind_of(obj) != KC_H5_DATASET)
        return kc_fail(KC_ERR_FORMAT, "%s: HDF5: %s is not a dataset", h5->label, path);
    const cJSON *refused = cJSON_GetObjectItemCaseSensitive(obj, "refused");
    if (cJSON_IsString(refused)) {
        const cJSON *status = cJSON_GetObjectItemCaseSensitive(obj, "status");
        kc_status st = cJSON_IsNumber(status) && status->valueint > 0 &&
                               status->valueint <= KC_ERR_ARG
                           ? (kc_status)status->valueint
                           : KC_ERR_FORMAT;
        return kc_fail(st, "%s", refused->valuestring);
    }
    const cJSON *dims = cJSON_GetObjectItemCaseSensitive(obj, "shape");
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(obj, "dtype");
    const cJSON *off = cJSON_GetObjectItemCaseSensitive(obj, "offset");
    const cJSON *src_off = cJSON_GetObjectItemCaseSensitive(obj, "source_offset");
    at->in_source = off == NULL && src_off != NULL;
    if (at->in_source)
        off = src_off;
    int rank = cJSON_GetArraySize(dims);
    if (!cJSON_IsArray(dims) || rank > KC_MAX_RANK || !cJSON_IsString(type) ||
        !cJSON_IsNumber(off) || off->valuedouble < 0)
        return kc_h5_bad_snapshot(h5, "dataset entry");
    shape->rank = rank;
    int i = 0;
    for (const cJSON *d = dims->child; d; d = d->next, i++) {
        if (!cJSON_IsNumber(d) || d->valuedouble < 0 || d->valuedouble > 9.0e15)
            return kc_h5_bad_snapshot(h5, "dataset shape");
        shape->dims[i] = (int64_t)d->valuedouble;
    }
    *dtype = kc_h5_dtype_named(type->valuestring);
    if (*dtype == KC_DTYPE_INVALID)
        return kc_h5_bad_snapshot(h5, "dataset dtype");
    int64_t count = kc_shape_count(shape);
    if (count < 0 || off->valuedouble > 9.0e15)
        return kc_h5_bad_snapshot(h5, "dataset entry");
    at->offset = (uint64_t)off->valuedouble;
    if (at->in_source) { /* float32 values as they lie in the file */
        if (*dtype != KC_F32 || at->offset > h5->source_len ||
            (uint64_t)count > (h5->source_len - at->offset) / sizeof(float))
            return kc_h5_bad_snapshot(h5, "dataset outside the source");
    } else if (at->offset > h5->blob_floats || (uint64_t)count > h5->blob_floats - at->offset)
        return kc_h5_bad_snapshot(h5, "dataset outside the blob");
    return KC_OK;
}

kc_status kc_h5_dataset_info(kc_h5 *h5, const char *path, kc_shape *shape, kc_dtype *dtype)
{
    kc_h5_at at;
    return kc_h5_dataset(h5, path, shape, dtype, &at);
}

int kc_h5_dataset_in_source(kc_h5 *h5, const char *path)
{
    kc_shape shape;
    kc_dtype dtype;
    kc_h5_at at;
    return kc_h5_dataset(h5, path, &shape, &dtype, &at) == KC_OK && at.in_source;
}

kc_status kc_h5_borrow_f32(kc_h5 *h5, const char *path, int64_t count, float **out)
{
    kc_shape shape;
    kc_dtype dtype;
    kc_h5_at at;
    *out = NULL;
    KC_TRY(kc_h5_dataset(h5, path, &shape, &dtype, &at));
    if (kc_shape_count(&shape) != count)
        return kc_fail(KC_ERR_SHAPE, "%s: HDF5 dataset %s has %lld elements, %lld requested",
                       h5->label, path, (long long)kc_shape_count(&shape), (long long)count);
    if (h5->release || at.in_source)
        return kc_fail(KC_ERR_ARG, "%s: HDF5 dataset %s is not in a snapshot kept whole; "
                       "nothing to borrow", h5->label, path);
    h5->borrowed = 1;
    *out = (float *)(h5->blob + at.offset); /* read-only mapping: kernels only read weights */
    return KC_OK;
}

void kc_h5_release_on_read(kc_h5 *h5)
{
    size_t pages = (h5->map_len + KC_H5_PAGE - 1) / KC_H5_PAGE;
    size_t image_pages = (h5->source_len + KC_H5_PAGE - 1) / KC_H5_PAGE;
    if (h5->fd < 0 || h5->borrowed || kc_spill_dir() || !(h5->punched = calloc(pages / 8 + 1, 1)))
        return; /* then nothing is dropped early: still correct, only larger */
    if (h5->image && !(h5->image_dropped = calloc(image_pages / 8 + 1, 1))) {
        free(h5->punched);
        h5->punched = NULL;
        return;
    }
    h5->release = 1;
}

/* The whole pages inside bytes [from, to): a dataset's own, shared with
 * no other dataset (each path has its own blob range; in the source, a
 * file whose datasets overlap finds them dropped, kc_h5_dropped). */
static void kc_h5_inner_pages(uint64_t from, uint64_t to, uint64_t *first, uint64_t *end)
{
    *first = (from + KC_H5_PAGE - 1) / KC_H5_PAGE;
    *end = to / KC_H5_PAGE;
}

static void kc_h5_mark(unsigned char *bits, uint64_t first, uint64_t end)
{
    for (uint64_t p = first; p < end; p++)
        bits[p / 8] |= (unsigned char)(1u << (p % 8));
}

/* Whether any page [from, to) touches was dropped (a dataset drops only
 * its inner pages, so a neighbour sharing an edge page never trips this;
 * one overlapping it does). */
static int kc_h5_dropped(const unsigned char *bits, uint64_t from, uint64_t to)
{
    uint64_t first = from / KC_H5_PAGE, end = (to + KC_H5_PAGE - 1) / KC_H5_PAGE;
    for (uint64_t p = first; bits && p < end; p++)
        if (bits[p / 8] & (1u << (p % 8)))
            return 1;
    return 0;
}

/* Give the dataset's own pages of the memory file back to the system once
 * its values are in their final array. */
static void kc_h5_drop(kc_h5 *h5, uint64_t from, uint64_t to)
{
    uint64_t first, end;
    kc_h5_inner_pages(from, to, &first, &end);
    if (first >= end || fallocate(h5->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                                  (off_t)(first * KC_H5_PAGE),
                                  (off_t)((end - first) * KC_H5_PAGE)) != 0)
        return; /* a file system without holes keeps the bytes until close */
    kc_h5_mark(h5->punched, first, end);
}

/* The same for the image's pages (anonymous memory: gone at once). Only
 * in a page-aligned image (kc_alloc_array's, from 2 MiB), whose offsets'
 * pages are its memory's pages. */
static void kc_h5_drop_image(kc_h5 *h5, uint64_t from, uint64_t to)
{
    uint64_t first, end;
    kc_h5_inner_pages(from, to, &first, &end);
    if ((uintptr_t)h5->image % KC_H5_PAGE == 0 && first < end &&
        madvise(h5->image + first * KC_H5_PAGE, (size_t)((end - first) * KC_H5_PAGE),
                MADV_DONTNEED) == 0)
        kc_h5_mark(h5->image_dropped, first, end);
}

/* A float32 dataset the child left in the source: copied from the image
 * (its pages then dropped) or read from the file. */
static kc_status kc_h5_read_source(kc_h5 *h5, const char *path, float *dst, size_t bytes,
                                   uint64_t from)
{
    if (kc_h5_dropped(h5->image_dropped, from, from + bytes))
        return kc_fail(KC_ERR_ARG, "%s: HDF5 dataset %s was already read and released",
                       h5->label, path);
    if (h5->image) {
        memcpy(dst, h5->image + from, bytes);
        if (h5->release)
            kc_h5_drop_image(h5, from, from + bytes);
        return KC_OK;
    }
    if (h5->source_fd < 0 || kc_pread_full(h5->source_fd, dst, bytes, from, h5->label) != KC_OK)
        return kc_fail(KC_ERR_IO, "%s: cannot read HDF5 dataset %s from the file", h5->label,
                       path);
    return KC_OK;
}

kc_status kc_h5_read_f32(kc_h5 *h5, const char *path, float *dst, int64_t count)
{
    kc_shape shape;
    kc_dtype dtype;
    kc_h5_at at;
    KC_TRY(kc_h5_dataset(h5, path, &shape, &dtype, &at));
    if (kc_shape_count(&shape) != count)
        return kc_fail(KC_ERR_SHAPE, "%s: HDF5 dataset %s has %lld elements, %lld requested",
                       h5->label, path, (long long)kc_shape_count(&shape), (long long)count);
    size_t bytes = (size_t)count * sizeof *dst;
    if (at.in_source)
        return kc_h5_read_source(h5, path, dst, bytes, at.offset);
    uint64_t from = KC_H5_SNAP_HEADER + at.offset * sizeof(float);
    if (kc_h5_dropped(h5->punched, from, from + bytes))
        return kc_fail(KC_ERR_ARG, "%s: HDF5 dataset %s was already read and released",
                       h5->label, path);
    /* pread, not the mapping: the snapshot's pages never enter this
     * process's resident set next to the array they are copied into. */
    if (kc_pread_full(h5->fd, dst, bytes, from, h5->label) != KC_OK)
        return kc_fail(KC_ERR_IO, "%s: cannot read HDF5 dataset %s from the snapshot",
                       h5->label, path);
    if (h5->release)
        kc_h5_drop(h5, from, from + bytes);
    return KC_OK;
}
