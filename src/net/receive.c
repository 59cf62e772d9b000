/* Receiving model files (see receive.h). */
#include "net/receive.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/fdio.h"

int kc_receive_name_valid(const char *name)
{
    size_t n = name ? strlen(name) : 0;
    if (!n || n > 200 || !strcmp(name, ".") || !strcmp(name, ".."))
        return 0;
    for (const char *c = name; *c; c++)
        if (*c == '/' || (unsigned char)*c < 0x20 || (unsigned char)*c >= 0x7f)
            return 0;
    return 1;
}

/* A store entry: "<64 hex>-<name>" (complete) or "<64 hex>.part". */
static int kc_store_entry(const char *name, int *is_part)
{
    if (strlen(name) < 66)
        return 0;
    char hex[KC_SHA256_HEX];
    memcpy(hex, name, 64);
    hex[64] = '\0';
    if (!kc_sha256_hex_valid(hex))
        return 0;
    *is_part = !strcmp(name + 64, ".part");
    return *is_part || name[64] == '-';
}

/* Remove leftover pieces (when `parts`), then the least recently used
 * complete files until `need` more bytes fit under keep_bytes. */
static void kc_receiver_sweep(kc_receiver *r, uint64_t need, int parts)
{
    for (;;) {
        DIR *d = opendir(r->dir);
        if (!d)
            return;
        uint64_t total = 0;
        char oldest[300] = "";
        struct timespec oldest_at = {0, 0};
        for (struct dirent *e; (e = readdir(d));) {
            int is_part = 0;
            if (!kc_store_entry(e->d_name, &is_part))
                continue;
            char path[3400];
            snprintf(path, sizeof path, "%s/%s", r->dir, e->d_name);
            struct stat st;
            if (lstat(path, &st) != 0 || !S_ISREG(st.st_mode))
                continue;
            if (is_part) {
                if (parts)
                    unlink(path);
                continue;
            }
            total += (uint64_t)st.st_size;
            /* the access time is set on every use (kc_receiver_find) */
            if (!oldest[0] || st.st_atim.tv_sec < oldest_at.tv_sec ||
                (st.st_atim.tv_sec == oldest_at.tv_sec && st.st_atim.tv_nsec < oldest_at.tv_nsec)) {
                snprintf(oldest, sizeof oldest, "%s", e->d_name);
                oldest_at = st.st_atim;
            }
        }
        closedir(d);
        if (!oldest[0] || total + need <= r->keep_bytes)
            return;
        char path[3400];
        snprintf(path, sizeof path, "%s/%s", r->dir, oldest);
        if (unlink(path) != 0)
            return;
    }
}

kc_status kc_receiver_init(kc_receiver *r, const char *dir, uint64_t max_bytes)
{
    memset(r, 0, sizeof *r);
    r->fd = -1;
    if (!dir || !dir[0] || !max_bytes)
        return KC_OK;
    if (snprintf(r->dir, sizeof r->dir, "%s", dir) >= (int)sizeof r->dir)
        return kc_fail(KC_ERR_ARG, "--cache-dir: path too long");
    if (mkdir(dir, 0700) != 0 && errno != EEXIST)
        return kc_fail(KC_ERR_IO, "--cache-dir %s: %s", dir, strerror(errno));
    /* Files in it are run: it must be this user's own, private directory
     * (not a link someone else planted, e.g. under a shared /tmp). */
    struct stat st;
    if (lstat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return kc_fail(KC_ERR_IO, "--cache-dir %s: not a directory", dir);
    if (st.st_uid != geteuid() || (st.st_mode & 077))
        return kc_fail(KC_ERR_IO, "--cache-dir %s: must belong to this user with mode 0700",
                       dir);
    r->max_bytes = max_bytes;
    r->keep_bytes = max_bytes * KC_RECEIVE_KEEP_FILES;
    kc_receiver_sweep(r, 0, 1);
    return KC_OK;
}

static void kc_receiver_abandon(kc_receiver *r)
{
    if (r->fd >= 0) {
        close(r->fd);
        char part[3200];
        snprintf(part, sizeof part, "%s/%s.part", r->dir, r->sha);
        unlink(part);
    }
    r->fd = -1;
    r->offset = r->total = 0;
}

void kc_receiver_free(kc_receiver *r) { kc_receiver_abandon(r); }

int kc_receiver_count(const kc_receiver *r)
{
    DIR *d = r->max_bytes ? opendir(r->dir) : NULL;
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));) {
        int is_part = 0;
        n += kc_store_entry(e->d_name, &is_part) && !is_part;
    }
    if (d)
        closedir(d);
    return n;
}

kc_status kc_receiver_find(const kc_receiver *r, const char *sha, const char *name, char *path,
                           size_t size)
{
    if (!r->max_bytes || !kc_sha256_hex_valid(sha) || !kc_receive_name_valid(name))
        return KC_ERR_IO;
    if (snprintf(path, size, "%s/%s-%s", r->dir, sha, name) >= (int)size)
        return KC_ERR_IO;
    struct stat st;
    if (lstat(path, &st) != 0 || !S_ISREG(st.st_mode))
        return KC_ERR_IO;
    /* Recently used: evicted last. The access time is set explicitly
     * (mounts often keep no atime); the mtime stays, so the file's digest
     * memo (kc_sha256_file_cached) stays valid. */
    struct timespec times[2] = {{0, UTIME_NOW}, {0, UTIME_OMIT}};
    utimensat(AT_FDCWD, path, times, 0);
    return KC_OK;
}

/* The piece's header: {"sha256","name","offset","total","chunk_sha256"}. */
typedef struct kc_piece {
    const char *sha, *name, *chunk_sha;
    uint64_t offset, total;
} kc_piece;

static kc_status kc_piece_parse(const cJSON *j, kc_piece *p)
{
    const cJSON *sha = cJSON_GetObjectItemCaseSensitive(j, "sha256");
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(j, "name");
    const cJSON *off = cJSON_GetObjectItemCaseSensitive(j, "offset");
    const cJSON *total = cJSON_GetObjectItemCaseSensitive(j, "total");
    const cJSON *chunk = cJSON_GetObjectItemCaseSensitive(j, "chunk_sha256");
    if (!cJSON_IsString(sha) || !kc_sha256_hex_valid(sha->valuestring) ||
        !cJSON_IsString(chunk) || !kc_sha256_hex_valid(chunk->valuestring))
        return kc_fail(KC_ERR_FORMAT, "model piece: sha256 and chunk_sha256 must be 64 hex digits");
    if (!cJSON_IsString(name) || !kc_receive_name_valid(name->valuestring))
        return kc_fail(KC_ERR_FORMAT, "model piece: 'name' must be a plain file name");
    if (!cJSON_IsNumber(off) || !cJSON_IsNumber(total) || off->valuedouble < 0 ||
        total->valuedouble < 1 || off->valuedouble > 9e15 || total->valuedouble > 9e15)
        return kc_fail(KC_ERR_FORMAT, "model piece: bad offset or total");
    *p = (kc_piece){sha->valuestring, name->valuestring, chunk->valuestring,
                    (uint64_t)off->valuedouble, (uint64_t)total->valuedouble};
    return KC_OK;
}

static kc_status kc_receiver_start(kc_receiver *r, const kc_piece *p)
{
    kc_receiver_abandon(r);
    kc_receiver_sweep(r, p->total, 0);
    char part[3200];
    snprintf(part, sizeof part, "%s/%s.part", r->dir, p->sha);
    r->fd = open(part, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (r->fd < 0)
        return kc_fail(KC_ERR_IO, "%s: %s", part, strerror(errno));
    snprintf(r->sha, sizeof r->sha, "%s", p->sha);
    snprintf(r->name, sizeof r->name, "%s", p->name);
    r->offset = 0;
    r->total = p->total;
    kc_sha256_begin(&r->hash);
    return KC_OK;
}

/* The last piece arrived: check the whole, then give it its final name. */
static kc_status kc_receiver_finish(kc_receiver *r)
{
    char hex[KC_SHA256_HEX], part[3200], path[3600];
    kc_sha256_end(&r->hash, hex);
    snprintf(part, sizeof part, "%s/%s.part", r->dir, r->sha);
    snprintf(path, sizeof path, "%s/%s-%s", r->dir, r->sha, r->name);
    int synced = fsync(r->fd) == 0;
    close(r->fd);
    r->fd = -1;
    if (strcmp(hex, r->sha)) {
        unlink(part);
        return kc_fail(KC_ERR_REFUSED, "the received model has SHA-256 %.12s..., not the "
                       "promised %.12s...: discarded", hex, r->sha);
    }
    if (!synced || rename(part, path) != 0) {
        unlink(part);
        return kc_fail(KC_ERR_IO, "storing the received model as %s: %s", path, strerror(errno));
    }
    return KC_OK;
}

static kc_status kc_receiver_piece(kc_receiver *r, const kc_piece *p, const kc_wire_msg *m,
                                   uint64_t *offset, int *complete)
{
    const kc_wire_tensor *t = &m->tensors[0];
    if (p->total > r->max_bytes)
        return kc_fail(KC_ERR_LIMIT, "the model is %llu bytes; this worker takes at most %llu "
                       "(--max-model-mb)", (unsigned long long)p->total,
                       (unsigned long long)r->max_bytes);
    if (m->n_tensors != 1 || t->dtype != KC_U8 || t->shape.rank != 1 || !t->bytes ||
        t->bytes > KC_RECEIVE_MAX_PIECE || p->offset + t->bytes > p->total)
        return kc_fail(KC_ERR_FORMAT, "model piece: one u8 vector of 1 byte to 16 MiB inside "
                       "the file expected");
    char hex[KC_SHA256_HEX];
    kc_sha256_mem(t->data, t->bytes, hex);
    if (strcmp(hex, p->chunk_sha))
        return kc_fail(KC_ERR_FORMAT, "model piece at offset %llu: checksum mismatch",
                       (unsigned long long)p->offset);
    if (p->offset == 0)
        KC_TRY(kc_receiver_start(r, p));
    else if (r->fd < 0 || strcmp(r->sha, p->sha) || p->offset != r->offset ||
             p->total != r->total)
        return kc_fail(KC_ERR_FORMAT, "model piece at offset %llu: expected offset %llu of "
                       "the file in progress", (unsigned long long)p->offset,
                       (unsigned long long)r->offset);
    KC_TRY(kc_write_full(r->fd, t->data, t->bytes, "a received model"));
    kc_sha256_add(&r->hash, t->data, t->bytes);
    r->offset += t->bytes;
    *offset = r->offset;
    if (r->offset == r->total) {
        KC_TRY(kc_receiver_finish(r));
        *complete = 1;
    }
    return KC_OK;
}

kc_status kc_receiver_put(kc_receiver *r, const kc_wire_msg *m, uint64_t *offset, int *complete)
{
    *offset = 0;
    *complete = 0;
    if (!r->max_bytes)
        return kc_fail(KC_ERR_REFUSED, "this worker does not take streamed models "
                       "(--max-model-mb 0)");
    cJSON *j = cJSON_ParseWithLength(m->text, m->text_len);
    if (!j)
        return kc_fail(KC_ERR_FORMAT, "model piece: header is not JSON");
    kc_piece p = {0};
    kc_status s = kc_piece_parse(j, &p);
    if (s == KC_OK)
        s = kc_receiver_piece(r, &p, m, offset, complete);
    if (s != KC_OK && !(*complete))
        kc_receiver_abandon(r);
    cJSON_Delete(j);
    return s;
}
