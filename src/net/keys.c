/* CURVE key files (see keys.h). A secret key on disk is as good as the
 * identity of the machine holding it, so it is written atomically with
 * mode 0600 (a crash never leaves a half-written or world-readable key)
 * and refused on load when group or others could read it, the way ssh
 * treats its identity files. Buffers that held a secret are wiped. */
#include "net/keys.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sodium.h>
#include <zmq.h>

#include "base/fdio.h"
#include "base/mem.h"
#include "format/fileio.h"

/* A key file is two short lines; anything bigger is not one. */
#define KC_KEYS_FILE_MAX 4096
#define KC_KEYS_LIST_FILE_MAX ((size_t)1 << 20)
#define KC_KEYS_PATH_MAX 4096

static const char kc_z85_alphabet[] =
    "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
    ".-:+=^!/*?&<>()[]{}@%$#";

int kc_key_valid(const char *z85)
{
    if (!z85 || strnlen(z85, KC_KEY_Z85_LEN + 1) != KC_KEY_Z85_LEN)
        return 0;
    for (int i = 0; i < KC_KEY_Z85_LEN; i++)
        if (!strchr(kc_z85_alphabet, z85[i]))
            return 0;
    uint8_t raw[32];
    int ok = zmq_z85_decode(raw, z85) != NULL;
    sodium_memzero(raw, sizeof raw);
    return ok;
}

kc_status kc_keypair_generate(kc_keypair *out)
{
    if (!out)
        return kc_fail(KC_ERR_ARG, "keygen: no output");
    memset(out, 0, sizeof *out);
    if (zmq_curve_keypair(out->public_z85, out->secret_z85) != 0)
        return kc_fail(KC_ERR_UNSUPPORTED, "keygen: libzmq cannot make CURVE keys: %s",
                       zmq_strerror(zmq_errno()));
    return KC_OK;
}

/* ------------------------------------------------------------- writing */

static kc_status kc_keys_write_all(int fd, const char *tmp, const char *data, size_t len)
{
    KC_TRY(kc_write_full(fd, data, len, tmp));
    if (fsync(fd) != 0)
        return kc_fail(KC_ERR_IO, "%s: cannot sync: %s", tmp, strerror(errno));
    return KC_OK;
}

/* Move the finished temp file into place. Without force, link() fails
 * atomically if the name is taken, so a concurrent keygen cannot be
 * overwritten either. */
static kc_status kc_keys_publish(const char *tmp, const char *path, int force)
{
    if (force) {
        if (rename(tmp, path) != 0)
            return kc_fail(KC_ERR_IO, "%s: cannot rename into place: %s", path, strerror(errno));
        return KC_OK;
    }
    if (link(tmp, path) != 0) {
        int err = errno;
        if (err == EEXIST)
            return kc_fail(KC_ERR_IO, "%s: already exists (--force replaces it)", path);
        return kc_fail(KC_ERR_IO, "%s: cannot create: %s", path, strerror(err));
    }
    unlink(tmp);
    return KC_OK;
}

/* Write path atomically (temp file in the same directory + rename). */
static kc_status kc_keys_write_file(const char *path, const char *data, size_t len, mode_t mode,
                                    int force)
{
    char tmp[KC_KEYS_PATH_MAX + 16];
    KC_TRY(kc_format(tmp, sizeof tmp, "%s.tmpXXXXXX", path));
    int fd = mkstemp(tmp); /* created 0600: never readable by others, even briefly */
    if (fd < 0)
        return kc_fail(KC_ERR_IO, "%s: cannot create a temporary file: %s", path, strerror(errno));
    kc_status st = KC_OK;
    if (fchmod(fd, mode) != 0)
        st = kc_fail(KC_ERR_IO, "%s: cannot set mode %04o: %s", tmp, (unsigned)mode,
                     strerror(errno));
    if (st == KC_OK)
        st = kc_keys_write_all(fd, tmp, data, len);
    if (close(fd) != 0 && st == KC_OK)
        st = kc_fail(KC_ERR_IO, "%s: cannot close: %s", tmp, strerror(errno));
    if (st == KC_OK)
        st = kc_keys_publish(tmp, path, force);
    if (st != KC_OK)
        unlink(tmp);
    return st;
}

static kc_status kc_keys_refuse_existing(const char *path)
{
    struct stat st;
    if (lstat(path, &st) == 0)
        return kc_fail(KC_ERR_IO, "%s: already exists (--force replaces it)", path);
    return KC_OK;
}

kc_status kc_keypair_save(const kc_keypair *kp, const char *name, int force)
{
    if (!kp || !name || !*name)
        return kc_fail(KC_ERR_ARG, "keygen: no key name given");
    if (!kc_key_valid(kp->public_z85) || !kc_key_valid(kp->secret_z85))
        return kc_fail(KC_ERR_ARG, "keygen: '%s': the key pair is not valid Z85", name);
    char key_path[KC_KEYS_PATH_MAX], pub_path[KC_KEYS_PATH_MAX];
    KC_TRY(kc_format(key_path, sizeof key_path, "%s.key", name));
    KC_TRY(kc_format(pub_path, sizeof pub_path, "%s.pub", name));
    /* Check both first so a refusal leaves no half-written pair behind. */
    if (!force) {
        KC_TRY(kc_keys_refuse_existing(key_path));
        KC_TRY(kc_keys_refuse_existing(pub_path));
    }
    char secret[128];
    int n = snprintf(secret, sizeof secret, "public = %s\nsecret = %s\n", kp->public_z85,
                     kp->secret_z85);
    kc_status st = kc_keys_write_file(key_path, secret, (size_t)n, 0600, force);
    sodium_memzero(secret, sizeof secret);
    KC_TRY(st);
    char pub[64];
    n = snprintf(pub, sizeof pub, "%s\n", kp->public_z85);
    return kc_keys_write_file(pub_path, pub, (size_t)n, 0644, force);
}

/* ------------------------------------------------------------- reading */

/* Next line of data[*off..len) (without "\n" or "\r\n"); 0 at the end. */
static int kc_keys_next_line(const char *data, size_t len, size_t *off, const char **line,
                             size_t *n)
{
    if (*off >= len)
        return 0;
    const char *p = data + *off;
    const char *nl = memchr(p, '\n', len - *off);
    size_t l = nl ? (size_t)(nl - p) : len - *off;
    *off += l + (nl ? 1 : 0);
    if (l > 0 && p[l - 1] == '\r')
        l--;
    *line = p;
    *n = l;
    return 1;
}

static int kc_keys_blank(char c) { return c == ' ' || c == '\t'; }

/* One authorized_keys / .pub line: 1 and the key in out, 0 for a blank or
 * comment line, -1 (error set) for anything else. The key must be followed
 * by the end of the line or a blank, so a 41-character typo is not taken
 * for its 40-character prefix. */
static int kc_keys_parse_key_line(const char *line, size_t n, const char *path, int lineno,
                                  char out[KC_KEY_Z85_LEN + 1])
{
    while (n > 0 && kc_keys_blank(*line)) {
        line++;
        n--;
    }
    if (n == 0 || line[0] == '#')
        return 0;
    if (n >= KC_KEY_Z85_LEN && (n == KC_KEY_Z85_LEN || kc_keys_blank(line[KC_KEY_Z85_LEN]))) {
        memcpy(out, line, KC_KEY_Z85_LEN);
        out[KC_KEY_Z85_LEN] = '\0';
        if (kc_key_valid(out))
            return 1;
    }
    out[0] = '\0';
    kc_fail(KC_ERR_FORMAT,
            "%s line %d: not a Z85 public key (40 characters, then a blank or "
            "the end of the line)",
            path, lineno);
    return -1;
}

/* Read a secret key file, refusing one that group or others can read. */
static kc_status kc_keys_read_secret(const char *path, char *buf, size_t cap, size_t *len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
    if (fd < 0)
        return kc_fail(KC_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    kc_status status = KC_OK;
    if (fstat(fd, &st) != 0)
        status = kc_fail(KC_ERR_IO, "%s: cannot stat: %s", path, strerror(errno));
    else if (!S_ISREG(st.st_mode))
        status = kc_fail(KC_ERR_IO, "%s: not a regular file", path);
    else if (st.st_mode & 077)
        status = kc_fail(KC_ERR_REFUSED, "%s: permissions %04o are too open; chmod 600 %s", path,
                         (unsigned)(st.st_mode & 07777), path);
    size_t got = 0;
    while (status == KC_OK) {
        ssize_t n = read(fd, buf + got, cap - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            status = kc_fail(KC_ERR_IO, "%s: cannot read: %s", path, strerror(errno));
        else if (n == 0)
            break;
        else if ((got += (size_t)n) == cap)
            status =
                kc_fail(KC_ERR_LIMIT, "%s: larger than %zu bytes, not a key file", path, cap - 1);
    }
    close(fd);
    *len = got;
    return status;
}

/* "public = KEY" / "secret = KEY" (spaces optional): which field, or NULL. */
static char *kc_keys_field(kc_keypair *kp, const char *line, size_t n, size_t *value_at)
{
    static const char *const names[2] = {"public", "secret"};
    for (int f = 0; f < 2; f++) {
        size_t k = strlen(names[f]);
        if (n < k || memcmp(line, names[f], k) != 0)
            continue;
        while (k < n && kc_keys_blank(line[k]))
            k++;
        if (k >= n || line[k] != '=')
            return NULL;
        k++;
        while (k < n && kc_keys_blank(line[k]))
            k++;
        *value_at = k;
        return f == 0 ? kp->public_z85 : kp->secret_z85;
    }
    return NULL;
}

static kc_status kc_keys_parse_line_kv(kc_keypair *kp, const char *line, size_t n, const char *path,
                                       int lineno)
{
    size_t at = 0;
    char *field = kc_keys_field(kp, line, n, &at);
    if (!field)
        return kc_fail(KC_ERR_FORMAT, "%s line %d: expected 'public = KEY' or 'secret = KEY'", path,
                       lineno);
    if (field[0])
        return kc_fail(KC_ERR_FORMAT, "%s line %d: the key is given twice", path, lineno);
    size_t end = n;
    while (end > at && kc_keys_blank(line[end - 1]))
        end--;
    if (end - at == KC_KEY_Z85_LEN) {
        memcpy(field, line + at, KC_KEY_Z85_LEN);
        field[KC_KEY_Z85_LEN] = '\0';
        if (kc_key_valid(field))
            return KC_OK;
    }
    field[0] = '\0';
    return kc_fail(KC_ERR_FORMAT, "%s line %d: not a 40-character Z85 key", path, lineno);
}

static kc_status kc_keys_parse_keyfile(const char *data, size_t len, const char *path,
                                       kc_keypair *out)
{
    size_t off = 0, n;
    const char *line;
    for (int lineno = 1; kc_keys_next_line(data, len, &off, &line, &n); lineno++) {
        size_t skip = 0;
        while (skip < n && kc_keys_blank(line[skip]))
            skip++;
        if (skip == n || line[skip] == '#')
            continue;
        KC_TRY(kc_keys_parse_line_kv(out, line + skip, n - skip, path, lineno));
    }
    if (!out->public_z85[0] || !out->secret_z85[0])
        return kc_fail(KC_ERR_FORMAT, "%s: needs both 'public = KEY' and 'secret = KEY' lines",
                       path);
    /* A pair that does not match would fail the CURVE handshake with no
     * useful message; say it here. */
    char derived[KC_KEY_Z85_LEN + 1];
    if (zmq_curve_public(derived, out->secret_z85) != 0 || strcmp(derived, out->public_z85) != 0)
        return kc_fail(KC_ERR_FORMAT, "%s: the public key does not belong to the secret key", path);
    return KC_OK;
}

static int kc_keys_ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

kc_status kc_keypair_load(const char *path, kc_keypair *out)
{
    if (!out)
        return kc_fail(KC_ERR_ARG, "key: no output");
    memset(out, 0, sizeof *out);
    if (!path || !*path)
        return kc_fail(KC_ERR_ARG, "key: empty path");
    char full[KC_KEYS_PATH_MAX];
    KC_TRY(
        kc_format(full, sizeof full, "%s%s", path, kc_keys_ends_with(path, ".key") ? "" : ".key"));
    char buf[KC_KEYS_FILE_MAX + 1];
    size_t len = 0;
    kc_status st = kc_keys_read_secret(full, buf, sizeof buf, &len);
    if (st == KC_OK)
        st = kc_keys_parse_keyfile(buf, len, full, out);
    sodium_memzero(buf, sizeof buf);
    if (st != KC_OK)
        sodium_memzero(out, sizeof *out);
    return st;
}

/* First key of a .pub file. */
static kc_status kc_keys_read_pub(const char *path, char out[KC_KEY_Z85_LEN + 1])
{
    char *data = NULL;
    size_t len = 0;
    KC_TRY(kc_read_file(path, KC_KEYS_FILE_MAX, &data, &len));
    size_t off = 0, n;
    const char *line;
    int found = 0;
    for (int lineno = 1; !found && kc_keys_next_line(data, len, &off, &line, &n); lineno++)
        found = kc_keys_parse_key_line(line, n, path, lineno, out);
    free(data);
    if (found < 0)
        return KC_ERR_FORMAT;
    if (!found)
        return kc_fail(KC_ERR_FORMAT, "%s: no public key in the file", path);
    return KC_OK;
}

kc_status kc_public_key_load(const char *path_or_key, char out[KC_KEY_Z85_LEN + 1])
{
    if (!out)
        return kc_fail(KC_ERR_ARG, "public key: no output");
    out[0] = '\0';
    if (!path_or_key || !*path_or_key)
        return kc_fail(KC_ERR_ARG, "public key: empty argument");
    struct stat st;
    if (stat(path_or_key, &st) == 0)
        return kc_keys_read_pub(path_or_key, out);
    int err = errno;
    if (kc_key_valid(path_or_key)) {
        memcpy(out, path_or_key, KC_KEY_Z85_LEN + 1);
        return KC_OK;
    }
    return kc_fail(KC_ERR_IO, "public key '%s': cannot open: %s (and not a 40-character Z85 key)",
                   path_or_key, strerror(err));
}

/* -------------------------------------------------------- authorized keys */

static kc_status kc_keys_list_add(kc_key_list *list, size_t *cap, const char *key, const char *path)
{
    if (list->n >= KC_KEYS_MAX)
        return kc_fail(KC_ERR_LIMIT, "%s: more than %d keys", path, KC_KEYS_MAX);
    void *items = list->keys;
    KC_TRY(kc_grow(&items, cap, (size_t)list->n + 1, sizeof *list->keys));
    list->keys = items;
    memcpy(list->keys[list->n++], key, KC_KEY_Z85_LEN + 1);
    return KC_OK;
}

static kc_status kc_keys_list_parse(const char *data, size_t len, const char *path,
                                    kc_key_list *out)
{
    size_t off = 0, n, cap = 0;
    const char *line;
    for (int lineno = 1; kc_keys_next_line(data, len, &off, &line, &n); lineno++) {
        char key[KC_KEY_Z85_LEN + 1];
        int r = kc_keys_parse_key_line(line, n, path, lineno, key);
        if (r < 0)
            return KC_ERR_FORMAT;
        if (r > 0)
            KC_TRY(kc_keys_list_add(out, &cap, key, path));
    }
    /* An empty list would make a worker refuse everyone: surely a mistake. */
    if (out->n == 0)
        return kc_fail(KC_ERR_FORMAT, "%s: no keys (one Z85 public key per line)", path);
    return KC_OK;
}

kc_status kc_key_list_load(const char *path, kc_key_list *out)
{
    if (!out)
        return kc_fail(KC_ERR_ARG, "authorized keys: no output");
    memset(out, 0, sizeof *out);
    if (!path || !*path)
        return kc_fail(KC_ERR_ARG, "authorized keys: empty path");
    char *data = NULL;
    size_t len = 0;
    KC_TRY(kc_read_file(path, KC_KEYS_LIST_FILE_MAX, &data, &len));
    kc_status st = kc_keys_list_parse(data, len, path, out);
    free(data);
    if (st != KC_OK)
        kc_key_list_free(out);
    return st;
}

int kc_key_list_contains(const kc_key_list *list, const char *public_z85)
{
    if (!list || !public_z85 || strnlen(public_z85, KC_KEY_Z85_LEN + 1) != KC_KEY_Z85_LEN)
        return 0;
    for (int i = 0; i < list->n; i++)
        if (memcmp(list->keys[i], public_z85, KC_KEY_Z85_LEN) == 0)
            return 1;
    return 0;
}

void kc_key_list_free(kc_key_list *list)
{
    if (!list)
        return;
    free(list->keys);
    list->keys = NULL;
    list->n = 0;
}
