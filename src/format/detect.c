#include "format/detect.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "base/error.h"
#include "format/fileio.h"

static const unsigned char kc_hdf5_magic[8] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};

/* HDF5 allows a user block of 512, 1024, 2048, ... bytes before the
 * superblock; look at the first few candidates. */
static int kc_is_hdf5(FILE *f)
{
    unsigned char buf[8];
    for (long off = 0; off <= 65536; off = off ? off * 2 : 512) {
        if (fseek(f, off, SEEK_SET) != 0 || fread(buf, 1, 8, f) != 8)
            return 0;
        if (memcmp(buf, kc_hdf5_magic, 8) == 0)
            return 1;
    }
    return 0;
}

kc_status kc_detect_file(const char *path, kc_file_kind *kind)
{
    struct stat st;
    *kind = KC_FILE_UNKNOWN;
    if (stat(path, &st) != 0)
        return kc_fail(KC_ERR_IO, "%s: %s", path, strerror(errno));
    if (S_ISDIR(st.st_mode)) {
        *kind = KC_FILE_DIRECTORY;
        return KC_OK;
    }
    FILE *f = fopen(path, "rb");
    if (!f)
        return kc_fail(KC_ERR_IO, "%s: %s", path, strerror(errno));
    char head[512];
    size_t n = fread(head, 1, sizeof head, f);
    if (n >= 4 && memcmp(head, "PK\x03\x04", 4) == 0) {
        /* An .npz is also a zip; model loading tells them apart by members. */
        *kind = KC_FILE_ZIP;
    } else if (n >= 8 && kc_is_hdf5(f)) {
        *kind = KC_FILE_HDF5;
    } else if (kc_jswrap_detect(head, n)) {
        *kind = KC_FILE_JSWRAP;
    } else {
        size_t i = 0;
        while (i < n && (head[i] == ' ' || head[i] == '\t' || head[i] == '\r' || head[i] == '\n'))
            i++;
        if (i + 3 <= n && (unsigned char)head[i] == 0xEF && (unsigned char)head[i + 1] == 0xBB)
            i += 3; /* UTF-8 byte order mark */
        if (i < n && head[i] == '{')
            *kind = KC_FILE_JSON;
    }
    fclose(f);
    if (*kind == KC_FILE_UNKNOWN)
        return kc_fail(KC_ERR_FORMAT, "%s: not a Keras model (no zip, HDF5, JSON or tfjs "
                       "signature)", path);
    return KC_OK;
}

const char *kc_file_kind_name(kc_file_kind kind)
{
    switch (kind) {
    case KC_FILE_ZIP: return "zip";
    case KC_FILE_HDF5: return "hdf5";
    case KC_FILE_JSON: return "json";
    case KC_FILE_JSWRAP: return "js-wrapped json";
    case KC_FILE_DIRECTORY: return "directory";
    case KC_FILE_NPZ_PICKLE: return "npz";
    case KC_FILE_UNKNOWN: break;
    }
    return "unknown";
}
