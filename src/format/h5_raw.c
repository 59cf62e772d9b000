/* Hardened HDF5 access through libhdf5 (see h5_raw.h; runs only inside the sandbox child).
 *
 * libhdf5 trusts the file it reads; this layer does not. Everything a
 * hostile file could use to reach outside itself (soft and external links,
 * external raw storage, virtual datasets, filter plugins) is refused, and
 * every count or size taken from the file is capped before memory is
 * allocated for it. libhdf5's own failures become one-line kc_fail messages
 * prefixed with the file's label. */
#include "format/h5_raw.h"

#include <errno.h>
#include <fcntl.h>
#include <hdf5.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"
#include "base/mem.h"

/* Limits. Real Keras files are far below all of them. */
#define KC_H5_PATH_MAX 4096
#define KC_H5_LIST_MAX 1000000
#define KC_H5_ATTR_ELEMS_MAX 1000000
#define KC_H5_ATTR_BYTES_MAX ((size_t)64 << 20)
/* Keras's chunked attributes hold 64 KiB each; 64 MiB of them is 1024. */
#define KC_H5_ATTR_CHUNKS_MAX 1024
/* Keras's plausibility rule: a dataset may declare more than 4 GiB only if
 * that is at most 1000x the bytes actually stored (the file size). */
#define KC_H5_BIG_BYTES ((int64_t)4 << 30)
#define KC_H5_BIG_RATIO 1000
/* libhdf5 allocates one whole chunk per read; h5py's chunks are <= 1 MiB. */
#define KC_H5_CHUNK_BYTES_MAX ((int64_t)1 << 30)

static const unsigned char kc_h5raw_signature[8] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};

/* The application buffer behind an in-memory image. libhdf5's core driver
 * asks for it through callbacks; handing back the same pointer every time
 * is what makes the image zero-copy. The counters only check pairing. */
typedef struct kc_h5raw_image {
    const void *buf;
    size_t len;
    int refs;
} kc_h5raw_image;

struct kc_h5raw {
    hid_t file;
    char *label;
    int64_t file_bytes; /* stored bytes, for the plausibility rule */
    kc_h5raw_image image;
    /* Unique per open image: libhdf5 treats two core files with the same
     * name as one file, so a shared name would alias different images. */
    char image_name[64];
};

/* ------------------------------------------------------------ init, errors */

static pthread_once_t kc_h5raw_once = PTHREAD_ONCE_INIT;
static int kc_h5raw_init_ok;
/* libhdf5's error-printing setting is per thread in a thread-safe build, so
 * each thread silences its own stack once. */
static _Thread_local int kc_h5raw_thread_quiet;

static void kc_h5raw_init_once(void)
{
    kc_h5raw_init_ok = H5open() >= 0;
    /* A file naming an unknown filter would make libhdf5 dlopen() a plugin
     * from HDF5_PLUGIN_PATH: loading code because of file contents. */
    if (kc_h5raw_init_ok)
        H5PLset_loading_state(0);
}

static kc_status kc_h5raw_init(void)
{
    pthread_once(&kc_h5raw_once, kc_h5raw_init_once);
    if (!kc_h5raw_init_ok)
        return kc_fail(KC_ERR_IO, "HDF5: library initialisation failed");
    if (!kc_h5raw_thread_quiet) {
        H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
        kc_h5raw_thread_quiet = 1;
    }
    return KC_OK;
}

static herr_t kc_h5raw_walk_first(unsigned n, const H5E_error2_t *err, void *data)
{
    char *buf = data;
    (void)n;
    if (buf[0] == '\0' && err->desc && err->desc[0])
        snprintf(buf, 256, "%s", err->desc);
    return 0;
}

/* "label: HDF5: <what> (<libhdf5's innermost reason>)". Must run right after
 * the failing call: the next libhdf5 API call clears its error stack. */
static kc_status kc_h5raw_fail(const kc_h5raw *h5, kc_status status, const char *fmt, ...)
    KC_PRINTF(3, 4);
static kc_status kc_h5raw_fail(const kc_h5raw *h5, kc_status status, const char *fmt, ...)
{
    char what[KC_H5_PATH_MAX + 128];
    char detail[256] = "";
    va_list args;
    va_start(args, fmt);
    vsnprintf(what, sizeof what, fmt, args);
    va_end(args);
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, kc_h5raw_walk_first, detail);
    if (detail[0])
        return kc_fail(status, "%s: HDF5: %s (%s)", h5->label, what, detail);
    return kc_fail(status, "%s: HDF5: %s", h5->label, what);
}

static void kc_h5raw_close_id(hid_t id)
{
    if (id < 0)
        return;
    switch (H5Iget_type(id)) {
    case H5I_GROUP: H5Gclose(id); break;
    case H5I_DATASET: H5Dclose(id); break;
    case H5I_DATATYPE: H5Tclose(id); break;
    case H5I_DATASPACE: H5Sclose(id); break;
    case H5I_ATTR: H5Aclose(id); break;
    case H5I_GENPROP_LST: H5Pclose(id); break;
    default: H5Oclose(id); break;
    }
}

/* ------------------------------------------------------------- open/close */

static kc_h5raw *kc_h5raw_new(const char *label)
{
    kc_h5raw *h5 = kc_calloc(1, sizeof *h5);
    if (!h5)
        return NULL;
    h5->file = H5I_INVALID_HID;
    h5->label = kc_strdup(label ? label : "(hdf5)");
    if (!h5->label) {
        free(h5);
        return NULL;
    }
    return h5;
}

void kc_h5raw_close(kc_h5raw *h5)
{
    if (!h5)
        return;
    if (h5->file >= 0)
        H5Fclose(h5->file);
    free(h5->label);
    free(h5);
}

const char *kc_h5raw_label(const kc_h5raw *h5) { return h5 ? h5->label : ""; }

/* ----------------------------------------------------------- pre-checks */

/* libhdf5 looks for the superblock at 0, 512, 1024, 2048, ... (the space
 * before it is a user block). Returns the offset, or -1: checking here
 * turns "not HDF5 at all" into a clear message. */
static int64_t kc_h5raw_find_signature(const unsigned char *buf, size_t len)
{
    for (size_t off = 0; off + sizeof kc_h5raw_signature <= len; off = off ? off * 2 : 512)
        if (memcmp(buf + off, kc_h5raw_signature, sizeof kc_h5raw_signature) == 0)
            return (int64_t)off;
    return -1;
}

/* "Size of offsets" and "size of lengths" from the superblock (bytes 13
 * and 14 in versions 0/1, 9 and 10 in 2/3); 0 if the superblock is too
 * short or of an unknown version. */
static int kc_h5raw_superblock_sizes(const unsigned char *buf, size_t len, size_t base, int *osize,
                                  int *lsize)
{
    if (len < 15 || base > len - 15 || buf[base + 8] > 3)
        return 0;
    size_t at = buf[base + 8] <= 1 ? 13 : 9;
    *osize = buf[base + at];
    *lsize = buf[base + at + 1];
    return 1;
}

static uint64_t kc_h5raw_le(const unsigned char *p, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

#define KC_H5_ALIGN8(x) (((x) + 7) & ~(uint64_t)7)

/* Replays libhdf5 1.10's global heap parse (H5HG__cache_heap_deserialize)
 * on a collection at g. That loop advances by each object's declared size:
 * a free-space object of size 0 makes it spin forever, and an object that
 * runs past the collection is later memcpy'd out of bounds by H5HG_read.
 * Returns 0 for such a collection. Collections libhdf5 would refuse to
 * load anyway (bad version, past the end of the file) count as fine. */
static int kc_h5raw_gheap_ok(const unsigned char *g, size_t avail, int lsize)
{
    uint64_t hdr = KC_H5_ALIGN8(8 + (uint64_t)lsize);
    uint64_t objhdr = 8 + (uint64_t)lsize;
    if (avail < hdr || g[4] != 1)
        return 1;
    uint64_t size = kc_h5raw_le(g + 8, lsize);
    if (size > avail)
        return 1;
    for (uint64_t p = hdr; p < size;) {
        if (p + objhdr > size)
            break; /* a tail too small for a header is free space */
        unsigned idx = (unsigned)kc_h5raw_le(g + p, 2);
        uint64_t osize = kc_h5raw_le(g + p + 8, lsize);
        if (osize > size)
            return 0;
        uint64_t need = idx > 0 ? objhdr + KC_H5_ALIGN8(osize) : osize;
        if (need == 0 || need > size - p)
            return 0;
        p += need;
    }
    return 1;
}

/* A local heap ("HEAP") holds the link names of an old-style group, each
 * NUL-terminated; libhdf5 1.10 strdup()s a name at any offset below the
 * data segment's size (H5G__ent_to_link) without checking that a NUL
 * follows, reading past its buffer. libhdf5 always ends the segment with a
 * NUL (name padding, or the high byte of the free block's size), so
 * requiring that last byte to be 0 bounds every such strdup. */
static int kc_h5raw_lheap_ok(const unsigned char *buf, size_t len, size_t at, size_t base,
                          int osize, int lsize)
{
    size_t need = 8 + 2 * (size_t)lsize + (size_t)osize;
    if (len - at < need || buf[at + 4] != 0)
        return 1; /* libhdf5 cannot load it */
    uint64_t dsize = kc_h5raw_le(buf + at + 8, lsize);
    uint64_t daddr = kc_h5raw_le(buf + at + 8 + 2 * lsize, osize);
    if (dsize == 0 || daddr > len || base > len - daddr || dsize > len - base - daddr)
        return 1; /* undefined or past the end: the read fails */
    return buf[base + daddr + dsize - 1] == 0;
}

static int kc_h5raw_heap_magic(const unsigned char *p)
{
    return !memcmp(p, "GCOL", 4) || !memcmp(p, "HEAP", 4);
}

/* Where the next "GCOL" (a global heap collection) or "HEAP" (a local
 * heap) magic starts at or after buf + from, or len. libhdf5 recognises
 * both only by their magic, so checking every occurrence covers every
 * heap it could load. One pass for both, eight bytes at a time: the bytes
 * 'G' and 'H' are looked for in a word (the SWAR zero-byte test) and only
 * a word holding one is looked at closely. Two memmem passes took 0.15 s
 * of a 100 MB model's load. */
static size_t kc_h5raw_next_heap(const unsigned char *buf, size_t len, size_t from)
{
    const uint64_t ones = 0x0101010101010101ull, highs = 0x8080808080808080ull;
    const uint64_t gs = ones * 'G', hs = ones * 'H';
    size_t i = from;
    while (i + 4 <= len) {
        if (i + 8 <= len) {
            uint64_t w;
            memcpy(&w, buf + i, 8);
            uint64_t xg = w ^ gs, xh = w ^ hs;
            if (!(((xg - ones) & ~xg & highs) | ((xh - ones) & ~xh & highs))) {
                i += 8; /* no byte of this word is 'G' or 'H' */
                continue;
            }
        }
        for (size_t end = i + 8; i < end && i + 4 <= len; i++)
            if (kc_h5raw_heap_magic(buf + i))
                return i;
    }
    return len;
}

static kc_status kc_h5raw_check_heaps(const char *label, const unsigned char *buf, size_t len,
                                      size_t base, int osize, int lsize)
{
    for (size_t at = kc_h5raw_next_heap(buf, len, 0); at < len;
         at = kc_h5raw_next_heap(buf, len, at + 1)) {
        if (buf[at] == 'G' && !kc_h5raw_gheap_ok(buf + at, len - at, lsize))
            return kc_fail(KC_ERR_FORMAT, "%s: HDF5 global heap at offset %zu is malformed",
                           label, at);
        if (buf[at] == 'H' && !kc_h5raw_lheap_ok(buf, len, at, base, osize, lsize))
            return kc_fail(KC_ERR_FORMAT, "%s: HDF5 local heap at offset %zu is malformed",
                           label, at);
    }
    return KC_OK;
}

/* Checks on the raw bytes before libhdf5 sees them: the signature, and
 * structures libhdf5 1.10 is known to mishandle (see kc_h5raw_gheap_ok). */
static kc_status kc_h5raw_precheck(const char *label, const unsigned char *buf, size_t len)
{
    int64_t base = kc_h5raw_find_signature(buf, len);
    if (base < 0)
        return kc_fail(KC_ERR_FORMAT, "%s: not an HDF5 file (no signature)", label);
    int osize = 0, lsize = 0;
    if (!kc_h5raw_superblock_sizes(buf, len, (size_t)base, &osize, &lsize))
        return kc_fail(KC_ERR_FORMAT, "%s: HDF5 superblock truncated or of unknown version",
                       label);
    /* h5py always writes 8; libhdf5 would also accept 16 and 32, which no
     * writer uses and which its 64-bit address decoding cannot hold. */
    if ((osize != 2 && osize != 4 && osize != 8) || (lsize != 2 && lsize != 4 && lsize != 8))
        return kc_fail(KC_ERR_UNSUPPORTED, "%s: HDF5 superblock with %d-byte offsets, %d-byte lengths",
                       label, osize, lsize);
    /* Addresses count from the superblock (libhdf5 moves the base address
     * there when they differ, as with a user block). */
    return kc_h5raw_check_heaps(label, buf, len, (size_t)base, osize, lsize);
}

/* Only regular files: opening a FIFO would block and a device could be
 * endless. The bytes are mapped for the pre-checks; the size is kept for
 * the plausibility rule. */
static kc_status kc_h5raw_precheck_file(const char *path, int64_t *size)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return kc_fail(KC_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    kc_status status = KC_OK;
    if (fstat(fd, &st) != 0) {
        status = kc_fail(KC_ERR_IO, "%s: cannot stat: %s", path, strerror(errno));
    } else if (!S_ISREG(st.st_mode)) {
        status = kc_fail(KC_ERR_IO, "%s: not a regular file", path);
    } else if (st.st_size == 0) {
        status = kc_fail(KC_ERR_FORMAT, "%s: not an HDF5 file (empty)", path);
    } else {
        void *map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (map == MAP_FAILED) {
            status = kc_fail(KC_ERR_IO, "%s: cannot map: %s", path, strerror(errno));
        } else {
            status = kc_h5raw_precheck(path, map, (size_t)st.st_size);
            munmap(map, (size_t)st.st_size);
        }
        *size = (int64_t)st.st_size;
    }
    close(fd);
    return status;
}

kc_status kc_h5raw_open_file(const char *path, kc_h5raw **out)
{
    if (!out)
        return kc_fail(KC_ERR_ARG, "kc_h5raw_open_file: out is NULL");
    *out = NULL;
    if (!path)
        return kc_fail(KC_ERR_ARG, "kc_h5raw_open_file: path is NULL");
    KC_TRY(kc_h5raw_init());
    int64_t size = 0;
    KC_TRY(kc_h5raw_precheck_file(path, &size));
    kc_h5raw *h5 = kc_h5raw_new(path);
    if (!h5)
        return KC_ERR_NOMEM;
    h5->file_bytes = size;
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
#if H5_VERSION_GE(1, 10, 7)
    /* Lock when the filesystem can, but do not fail where it cannot (NFS). */
    if (fapl >= 0)
        H5Pset_file_locking(fapl, 1, 1);
#endif
    h5->file = fapl < 0 ? H5I_INVALID_HID : H5Fopen(path, H5F_ACC_RDONLY, fapl);
    if (h5->file < 0) {
        kc_status status = kc_h5raw_fail(h5, KC_ERR_FORMAT, "cannot open file");
        kc_h5raw_close_id(fapl);
        kc_h5raw_close(h5);
        return status;
    }
    kc_h5raw_close_id(fapl);
    *out = h5;
    return KC_OK;
}

/* Core-driver callbacks for a zero-copy, never-released image. libhdf5 asks
 * for a buffer (image_malloc) and then copies into it (image_memcpy); giving
 * back the application buffer itself and skipping the copy means nothing is
 * duplicated. Read-only access never resizes or writes it. */
static void *kc_h5raw_image_malloc(size_t size, H5FD_file_image_op_t op, void *udata)
{
    kc_h5raw_image *image = udata;
    if (size != image->len)
        return NULL;
    switch (op) {
    case H5FD_FILE_IMAGE_OP_PROPERTY_LIST_SET:
    case H5FD_FILE_IMAGE_OP_PROPERTY_LIST_COPY:
    case H5FD_FILE_IMAGE_OP_FILE_OPEN:
        image->refs++;
        return (void *)(uintptr_t)image->buf; /* never written: opened read-only */
    default:
        return NULL; /* H5Pget_file_image copies out, resizing writes: neither allowed */
    }
}

static void *kc_h5raw_image_memcpy(void *dest, const void *src, size_t size,
                                H5FD_file_image_op_t op, void *udata)
{
    kc_h5raw_image *image = udata;
    (void)op;
    if (dest != image->buf || src != image->buf || size != image->len)
        return NULL;
    return dest;
}

static void *kc_h5raw_image_realloc(void *ptr, size_t size, H5FD_file_image_op_t op, void *udata)
{
    (void)ptr, (void)size, (void)op, (void)udata;
    return NULL;
}

static herr_t kc_h5raw_image_free(void *ptr, H5FD_file_image_op_t op, void *udata)
{
    kc_h5raw_image *image = udata;
    (void)op;
    if (ptr != image->buf || image->refs <= 0)
        return -1;
    image->refs--;
    return 0;
}

/* The udata lives in the kc_h5raw handle, which outlives the file: no copies,
 * nothing to free. */
static void *kc_h5raw_image_udata_copy(void *udata) { return udata; }
static herr_t kc_h5raw_image_udata_free(void *udata)
{
    (void)udata;
    return 0;
}

static hid_t kc_h5raw_image_fapl(kc_h5raw *h5)
{
    H5FD_file_image_callbacks_t callbacks = {
        kc_h5raw_image_malloc,     kc_h5raw_image_memcpy,     kc_h5raw_image_realloc, kc_h5raw_image_free,
        kc_h5raw_image_udata_copy, kc_h5raw_image_udata_free, &h5->image,
    };
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    if (fapl < 0)
        return fapl;
    /* STRONG: H5Fclose really closes the file, so the core driver is done
     * with the application buffer when kc_h5raw_close returns. */
    if (H5Pset_fapl_core(fapl, 1 << 16, 0) < 0 ||
        H5Pset_fclose_degree(fapl, H5F_CLOSE_STRONG) < 0 ||
        H5Pset_file_image_callbacks(fapl, &callbacks) < 0 ||
        H5Pset_file_image(fapl, (void *)(uintptr_t)h5->image.buf, h5->image.len) < 0) {
        H5Pclose(fapl);
        return H5I_INVALID_HID;
    }
    return fapl;
}

kc_status kc_h5raw_open_image(const void *buf, size_t len, const char *label, kc_h5raw **out)
{
    if (!out)
        return kc_fail(KC_ERR_ARG, "kc_h5raw_open_image: out is NULL");
    *out = NULL;
    if (!buf || len == 0)
        return kc_fail(KC_ERR_FORMAT, "%s: empty HDF5 image", label ? label : "(hdf5)");
    if (len > (size_t)INT64_MAX)
        return kc_fail(KC_ERR_LIMIT, "%s: HDF5 image too large", label ? label : "(hdf5)");
    KC_TRY(kc_h5raw_init());
    KC_TRY(kc_h5raw_precheck(label ? label : "(hdf5)", buf, len));
    kc_h5raw *h5 = kc_h5raw_new(label);
    if (!h5)
        return KC_ERR_NOMEM;
    h5->file_bytes = (int64_t)len;
    h5->image.buf = buf;
    h5->image.len = len;
    /* The core driver also open()s this name to refuse clobbering a real
     * file; a path under /dev/null can never exist. */
    snprintf(h5->image_name, sizeof h5->image_name, "/dev/null/kc_h5raw_image_%p", (void *)h5);
    hid_t fapl = kc_h5raw_image_fapl(h5);
    h5->file = fapl < 0 ? H5I_INVALID_HID : H5Fopen(h5->image_name, H5F_ACC_RDONLY, fapl);
    if (h5->file < 0) {
        kc_status status = kc_h5raw_fail(h5, KC_ERR_FORMAT, "cannot open file image");
        kc_h5raw_close_id(fapl);
        kc_h5raw_close(h5);
        return status;
    }
    kc_h5raw_close_id(fapl);
    *out = h5;
    return KC_OK;
}

/* ------------------------------------------------------------- path walk */

/* Copies the next component of *p (skipping slashes) into comp. Returns the
 * component length, 0 at the end. */
static size_t kc_h5raw_next_component(const char **p, char *comp)
{
    const char *s = *p;
    while (*s == '/')
        s++;
    size_t n = strcspn(s, "/");
    memcpy(comp, s, n);
    comp[n] = '\0';
    *p = s + n;
    return n;
}

/* Opens the child `comp` of group `cur` if it is reached through a hard
 * link. *refused is set for any other link kind. */
static hid_t kc_h5raw_open_child(kc_h5raw *h5, hid_t cur, const char *comp, const char *shown,
                              int report, int *refused)
{
    htri_t exists = H5Lexists(cur, comp, H5P_DEFAULT);
    if (exists <= 0) {
        if (report && exists < 0)
            kc_h5raw_fail(h5, KC_ERR_FORMAT, "cannot look up %s", shown);
        else if (report)
            kc_fail(KC_ERR_FORMAT, "%s: HDF5: no object at %s", h5->label, shown);
        return H5I_INVALID_HID;
    }
    H5L_info_t info;
    if (H5Lget_info(cur, comp, &info, H5P_DEFAULT) < 0) {
        if (report)
            kc_h5raw_fail(h5, KC_ERR_FORMAT, "cannot read link %s", shown);
        return H5I_INVALID_HID;
    }
    if (info.type != H5L_TYPE_HARD) {
        *refused = 1;
        if (report)
            kc_fail(KC_ERR_REFUSED, "%s: HDF5 external/soft link at %s refused", h5->label, shown);
        return H5I_INVALID_HID;
    }
    hid_t next = H5Oopen(cur, comp, H5P_DEFAULT);
    if (next < 0 && report)
        kc_h5raw_fail(h5, KC_ERR_FORMAT, "cannot open object %s", shown);
    return next;
}

static kc_status kc_h5raw_check_path(const kc_h5raw *h5, const char *path, int report)
{
    if (!path || path[0] != '/') {
        if (report)
            kc_fail(KC_ERR_ARG, "%s: HDF5 path '%s' is not absolute", h5->label,
                    path ? path : "(null)");
        return KC_ERR_ARG;
    }
    if (strlen(path) > KC_H5_PATH_MAX) {
        if (report)
            kc_fail(KC_ERR_LIMIT, "%s: HDF5 path longer than %d characters", h5->label,
                    KC_H5_PATH_MAX);
        return KC_ERR_LIMIT;
    }
    return KC_OK;
}

/* Opens the object at an absolute path, following only hard links, one
 * component at a time so no link is ever resolved by libhdf5 on its own.
 * With report = 0 no error message is set (for the kind/has probes). */
static kc_status kc_h5raw_open_path(kc_h5raw *h5, const char *path, hid_t *out, int report)
{
    *out = H5I_INVALID_HID;
    KC_TRY(kc_h5raw_check_path(h5, path, report));
    char comp[KC_H5_PATH_MAX + 1];
    char shown[KC_H5_PATH_MAX + 1];
    size_t shown_len = 0;
    hid_t cur = H5Oopen(h5->file, "/", H5P_DEFAULT);
    if (cur < 0)
        return report ? kc_h5raw_fail(h5, KC_ERR_FORMAT, "cannot open root group") : KC_ERR_FORMAT;
    const char *p = path;
    kc_status status = KC_OK;
    while (status == KC_OK && kc_h5raw_next_component(&p, comp) > 0) {
        /* shown = the path up to this component, for messages; never longer
         * than path itself, which has the same components and slashes */
        int w = snprintf(shown + shown_len, sizeof shown - shown_len, "/%s", comp);
        shown_len = w < 0 ? shown_len : shown_len + (size_t)w;
        if (shown_len >= sizeof shown)
            shown_len = sizeof shown - 1;
        hid_t next = H5I_INVALID_HID;
        if (strcmp(comp, ".") == 0) {
            status = KC_ERR_ARG;
            if (report)
                kc_fail(status, "%s: HDF5 path %s has a '.' component", h5->label, path);
        } else if (H5Iget_type(cur) != H5I_GROUP) {
            status = KC_ERR_FORMAT;
            if (report)
                kc_fail(status, "%s: HDF5: no object at %s (parent is not a group)", h5->label,
                        shown);
        } else {
            int refused = 0;
            next = kc_h5raw_open_child(h5, cur, comp, shown, report, &refused);
            if (next < 0)
                status = refused ? KC_ERR_REFUSED : KC_ERR_FORMAT;
        }
        kc_h5raw_close_id(cur);
        cur = next;
    }
    if (status != KC_OK)
        return status;
    *out = cur;
    return KC_OK;
}

int kc_h5raw_kind(kc_h5raw *h5, const char *path)
{
    if (!h5 || kc_h5raw_init() != KC_OK)
        return KC_H5_NONE;
    hid_t obj;
    if (kc_h5raw_open_path(h5, path, &obj, 0) != KC_OK)
        return KC_H5_NONE;
    H5I_type_t type = H5Iget_type(obj);
    kc_h5raw_close_id(obj);
    return type == H5I_GROUP ? KC_H5_GROUP : type == H5I_DATASET ? KC_H5_DATASET : KC_H5_NONE;
}

/* ------------------------------------------------------------------ lists */

void kc_strv_free(char **strings, int n)
{
    if (!strings)
        return;
    for (int i = 0; i < n; i++)
        free(strings[i]);
    free(strings);
}

typedef struct kc_h5raw_strv {
    char **items;
    size_t n;
    size_t cap;
    size_t bytes; /* total string bytes, against KC_H5_ATTR_BYTES_MAX */
    size_t max_items;
    kc_status status;
} kc_h5raw_strv;

static kc_status kc_h5raw_strv_push(kc_h5raw_strv *v, const char *s, size_t len)
{
    if (v->n >= v->max_items)
        return kc_fail(KC_ERR_LIMIT, "more than %zu names", v->max_items);
    if (len > KC_H5_ATTR_BYTES_MAX - v->bytes)
        return kc_fail(KC_ERR_LIMIT, "strings larger than %zu bytes in total",
                       KC_H5_ATTR_BYTES_MAX);
    KC_TRY(kc_grow((void **)&v->items, &v->cap, v->n + 1, sizeof *v->items));
    char *copy = kc_strndup(s, len);
    if (!copy)
        return KC_ERR_NOMEM;
    v->items[v->n++] = copy;
    v->bytes += len;
    return KC_OK;
}

static void kc_h5raw_strv_take(kc_h5raw_strv *v, char ***out, int *n)
{
    if (!v->items) /* an empty list is still a list: callers free it */
        v->items = kc_calloc(1, sizeof *v->items);
    *out = v->items;
    *n = v->items ? (int)v->n : 0;
    v->items = NULL;
}

static herr_t kc_h5raw_list_cb(hid_t group, const char *name, const H5L_info_t *info, void *data)
{
    kc_h5raw_strv *v = data;
    (void)group;
    if (info->type != H5L_TYPE_HARD) /* soft/external links are not children */
        return 0;
    v->status = kc_h5raw_strv_push(v, name, strlen(name));
    return v->status == KC_OK ? 0 : -1;
}

kc_status kc_h5raw_list(kc_h5raw *h5, const char *group_path, char ***names, int *n)
{
    if (!h5 || !names || !n)
        return kc_fail(KC_ERR_ARG, "kc_h5raw_list: NULL argument");
    *names = NULL;
    *n = 0;
    KC_TRY(kc_h5raw_init());
    hid_t group;
    KC_TRY(kc_h5raw_open_path(h5, group_path, &group, 1));
    kc_status status = KC_OK;
    kc_h5raw_strv v = {.max_items = KC_H5_LIST_MAX};
    if (H5Iget_type(group) != H5I_GROUP) {
        status = kc_fail(KC_ERR_FORMAT, "%s: HDF5: %s is not a group", h5->label, group_path);
    } else {
        hsize_t idx = 0;
        herr_t rc = H5Literate(group, H5_INDEX_NAME, H5_ITER_INC, &idx, kc_h5raw_list_cb, &v);
        if (v.status != KC_OK)
            status = kc_fail_context(v.status, "%s: HDF5 group %s", h5->label, group_path);
        else if (rc < 0)
            status = kc_h5raw_fail(h5, KC_ERR_FORMAT, "cannot list group %s", group_path);
    }
    kc_h5raw_close_id(group);
    if (status == KC_OK)
        kc_h5raw_strv_take(&v, names, n);
    kc_strv_free(v.items, (int)v.n);
    if (status == KC_OK && !*names)
        return KC_ERR_NOMEM;
    return status;
}

/* ------------------------------------------------------------- attributes */

int kc_h5raw_has_attr(kc_h5raw *h5, const char *path, const char *attr)
{
    if (!h5 || !attr || !attr[0] || kc_h5raw_init() != KC_OK)
        return 0;
    hid_t obj;
    if (kc_h5raw_open_path(h5, path, &obj, 0) != KC_OK)
        return 0;
    htri_t has = H5Aexists(obj, attr);
    kc_h5raw_close_id(obj);
    return has > 0;
}

/* Number of elements of a string attribute's dataspace: scalar 1, 1-D its
 * length, null 0; anything else is not a Keras string attribute. */
static kc_status kc_h5raw_attr_count(kc_h5raw *h5, hid_t space, const char *name, size_t *count)
{
    H5S_class_t cls = H5Sget_simple_extent_type(space);
    if (cls == H5S_SCALAR) {
        *count = 1;
        return KC_OK;
    }
    if (cls == H5S_NULL) {
        *count = 0;
        return KC_OK;
    }
    int rank = cls == H5S_SIMPLE ? H5Sget_simple_extent_ndims(space) : -1;
    hsize_t dim = 0;
    if (rank != 1 || H5Sget_simple_extent_dims(space, &dim, NULL) != 1)
        return kc_fail(KC_ERR_FORMAT, "%s: HDF5 attribute %s is not a scalar or 1-D array",
                       h5->label, name);
    if (dim > KC_H5_ATTR_ELEMS_MAX)
        return kc_fail(KC_ERR_LIMIT, "%s: HDF5 attribute %s has %llu elements (limit %d)",
                       h5->label, name, (unsigned long long)dim, KC_H5_ATTR_ELEMS_MAX);
    *count = (size_t)dim;
    return KC_OK;
}

/* Length of one fixed-length element: up to the first NUL whatever the pad
 * (C strings cannot hold one), then trailing spaces for space padding. */
static size_t kc_h5raw_fixed_len(const char *s, size_t size, H5T_str_t pad)
{
    const char *nul = memchr(s, '\0', size);
    size_t len = nul ? (size_t)(nul - s) : size;
    if (pad == H5T_STR_SPACEPAD)
        while (len > 0 && s[len - 1] == ' ')
            len--;
    return len;
}

static kc_status kc_h5raw_read_fixed(kc_h5raw *h5, hid_t attr, hid_t ftype, size_t count,
                                  const char *name, kc_h5raw_strv *v)
{
    size_t size = H5Tget_size(ftype);
    if (size == 0)
        return kc_h5raw_fail(h5, KC_ERR_FORMAT, "bad string size in attribute %s", name);
    if (size > KC_H5_ATTR_BYTES_MAX / count)
        return kc_fail(KC_ERR_LIMIT, "%s: HDF5 attribute %s is larger than %zu bytes", h5->label,
                       name, KC_H5_ATTR_BYTES_MAX);
    H5T_str_t pad = H5Tget_strpad(ftype);
    /* Memory type = the file's string type (same size, pad, charset): no
     * conversion, the bytes come back as stored. */
    hid_t mtype = H5Tcopy(H5T_C_S1);
    char *buf = kc_calloc(count, size);
    kc_status status = KC_OK;
    if (!buf) {
        status = KC_ERR_NOMEM;
    } else if (mtype < 0 || H5Tset_size(mtype, size) < 0 || H5Tset_strpad(mtype, pad) < 0 ||
               H5Tset_cset(mtype, H5Tget_cset(ftype)) < 0 || H5Aread(attr, mtype, buf) < 0) {
        status = kc_h5raw_fail(h5, KC_ERR_FORMAT, "cannot read attribute %s", name);
    } else {
        for (size_t i = 0; i < count && status == KC_OK; i++) {
            const char *s = buf + i * size;
            status = kc_h5raw_strv_push(v, s, kc_h5raw_fixed_len(s, size, pad));
        }
    }
    free(buf);
    kc_h5raw_close_id(mtype);
    return status;
}

static herr_t kc_h5raw_reclaim(hid_t mtype, hid_t space, void *buf)
{
#if H5_VERSION_GE(1, 12, 0) /* declared by 1.10.8's headers, not exported */
    return H5Treclaim(mtype, space, H5P_DEFAULT, buf);
#else
    return H5Dvlen_reclaim(mtype, space, H5P_DEFAULT, buf);
#endif
}

static kc_status kc_h5raw_read_vlen(kc_h5raw *h5, hid_t attr, hid_t ftype, hid_t space,
                                 size_t count, const char *name, kc_h5raw_strv *v)
{
    hid_t mtype = H5Tcopy(H5T_C_S1);
    char **ptrs = kc_calloc(count, sizeof *ptrs);
    kc_status status = KC_OK;
    if (!ptrs) {
        status = KC_ERR_NOMEM;
    } else if (mtype < 0 || H5Tset_size(mtype, H5T_VARIABLE) < 0 ||
               H5Tset_cset(mtype, H5Tget_cset(ftype)) < 0 || H5Aread(attr, mtype, ptrs) < 0) {
        /* No reclaim: after a failed conversion the pointers are not known
         * to be consistent, and a leak beats a double free. */
        status = kc_h5raw_fail(h5, KC_ERR_FORMAT, "cannot read attribute %s", name);
    } else {
        for (size_t i = 0; i < count && status == KC_OK; i++) {
            const char *s = ptrs[i] ? ptrs[i] : "";
            status = kc_h5raw_strv_push(v, s, strlen(s));
        }
        kc_h5raw_reclaim(mtype, space, ptrs);
    }
    free(ptrs);
    kc_h5raw_close_id(mtype);
    return status;
}

/* Appends the strings of one attribute (scalar or 1-D) to v. */
static kc_status kc_h5raw_read_attr(kc_h5raw *h5, hid_t obj, const char *name, kc_h5raw_strv *v)
{
    hid_t attr = H5Aopen(obj, name, H5P_DEFAULT);
    hid_t ftype = attr < 0 ? H5I_INVALID_HID : H5Aget_type(attr);
    hid_t space = attr < 0 ? H5I_INVALID_HID : H5Aget_space(attr);
    kc_status status = KC_OK;
    size_t count = 0;
    if (attr < 0 || ftype < 0 || space < 0)
        status = kc_h5raw_fail(h5, KC_ERR_FORMAT, "cannot open attribute %s", name);
    else
        status = kc_h5raw_attr_count(h5, space, name, &count);
    /* Keras writes a weightless layer's weight_names as np.array([]), an
     * empty float64 array: empty is an empty list whatever the type. */
    if (status == KC_OK && count > 0 && H5Tget_class(ftype) != H5T_STRING)
        status = kc_fail(KC_ERR_FORMAT, "%s: HDF5 attribute %s is not a string", h5->label, name);
    if (status == KC_OK && count > 0) {
        htri_t var = H5Tis_variable_str(ftype);
        if (var < 0)
            status = kc_h5raw_fail(h5, KC_ERR_FORMAT, "bad string type in attribute %s", name);
        else if (var)
            status = kc_h5raw_read_vlen(h5, attr, ftype, space, count, name, v);
        else
            status = kc_h5raw_read_fixed(h5, attr, ftype, count, name, v);
    }
    kc_h5raw_close_id(space);
    kc_h5raw_close_id(ftype);
    kc_h5raw_close_id(attr);
    return status;
}

/* Keras's chunked form: attr0, attr1, ... concatenated. found = chunks read. */
static kc_status kc_h5raw_read_chunked(kc_h5raw *h5, hid_t obj, const char *attr, kc_h5raw_strv *v,
                                    int *found)
{
    char name[512];
    *found = 0;
    for (int i = 0;; i++) {
        if ((size_t)snprintf(name, sizeof name, "%s%d", attr, i) >= sizeof name)
            return kc_fail(KC_ERR_LIMIT, "%s: HDF5 attribute name %s too long", h5->label, attr);
        htri_t has = H5Aexists(obj, name);
        if (has < 0)
            return kc_h5raw_fail(h5, KC_ERR_FORMAT, "cannot look up attribute %s", name);
        if (!has)
            return KC_OK;
        if (i >= KC_H5_ATTR_CHUNKS_MAX)
            return kc_fail(KC_ERR_LIMIT, "%s: HDF5 attribute %s has more than %d chunks",
                           h5->label, attr, KC_H5_ATTR_CHUNKS_MAX);
        KC_TRY(kc_h5raw_read_attr(h5, obj, name, v));
        *found = i + 1;
    }
}

static kc_status kc_h5raw_attr_strings_obj(kc_h5raw *h5, hid_t obj, const char *attr, kc_h5raw_strv *v,
                                        int *found)
{
    htri_t has = H5Aexists(obj, attr);
    if (has < 0)
        return kc_h5raw_fail(h5, KC_ERR_FORMAT, "cannot look up attribute %s", attr);
    if (has) {
        *found = 1;
        return kc_h5raw_read_attr(h5, obj, attr, v);
    }
    return kc_h5raw_read_chunked(h5, obj, attr, v, found);
}

kc_status kc_h5raw_attr_strings(kc_h5raw *h5, const char *path, const char *attr, char ***out, int *n)
{
    if (!h5 || !attr || !attr[0] || !out || !n)
        return kc_fail(KC_ERR_ARG, "kc_h5raw_attr_strings: NULL argument");
    *out = NULL;
    *n = -1;
    KC_TRY(kc_h5raw_init());
    hid_t obj;
    KC_TRY(kc_h5raw_open_path(h5, path, &obj, 1));
    kc_h5raw_strv v = {.max_items = KC_H5_ATTR_ELEMS_MAX};
    int found = 0;
    kc_status status = kc_h5raw_attr_strings_obj(h5, obj, attr, &v, &found);
    kc_h5raw_close_id(obj);
    if (status == KC_OK && found) {
        kc_h5raw_strv_take(&v, out, n);
        if (!*out)
            status = KC_ERR_NOMEM;
    }
    if (status != KC_OK)
        status = kc_fail_context(status, "%s", h5->label);
    kc_strv_free(v.items, (int)v.n);
    if (status != KC_OK)
        *n = -1;
    return status;
}

kc_status kc_h5raw_attr_string(kc_h5raw *h5, const char *path, const char *attr, char **out)
{
    if (!out)
        return kc_fail(KC_ERR_ARG, "kc_h5raw_attr_string: NULL argument");
    *out = NULL;
    char **strings;
    int n;
    KC_TRY(kc_h5raw_attr_strings(h5, path, attr, &strings, &n));
    if (n < 0)
        return KC_OK;
    if (n == 0) {
        kc_strv_free(strings, n);
        return kc_fail(KC_ERR_FORMAT, "%s: HDF5 attribute %s of %s is empty", h5->label, attr,
                       path);
    }
    *out = strings[0];
    strings[0] = NULL;
    kc_strv_free(strings, n);
    return KC_OK;
}

/* --------------------------------------------------------------- datasets */

/* An open dataset that passed the safety checks. */
typedef struct kc_h5raw_ds {
    hid_t id;
    hid_t ftype;
    kc_shape shape;
    int64_t count;
    kc_dtype dtype;
    const char *path;
} kc_h5raw_ds;

static void kc_h5raw_ds_close(kc_h5raw_ds *ds)
{
    kc_h5raw_close_id(ds->ftype);
    kc_h5raw_close_id(ds->id);
    ds->ftype = ds->id = H5I_INVALID_HID;
}

/* Chunks stored unfiltered must hold a whole chunk each. libhdf5 1.10
 * reads an unfiltered chunk's stored bytes into a buffer of that size and
 * then copies a whole chunk out of it: a chunk recorded shorter is a heap
 * over-read that fills the values with whatever follows (fuzz_h5 found it:
 * a gzip dataset whose filter pipeline message was made unknown, so its
 * 24-27 byte compressed chunks of 40 bytes read as raw ones). Each chunk is
 * checked against the index up to KC_H5_CHUNKS_CHECKED chunks (libhdf5
 * 1.10 finds the i-th chunk by walking the index: quadratic), beyond them
 * the chunks' total. Filtered chunks are libhdf5's to decode. */
#define KC_H5_CHUNKS_CHECKED 4096

/* The dataset's `chunks` chunks in file space `space`, its pipeline of
 * `filters` filters (see kc_h5raw_check_raw_chunks). */
static kc_status kc_h5raw_check_each_chunk(kc_h5raw *h5, const kc_h5raw_ds *ds, hid_t space,
                                           int filters, hsize_t chunks, int64_t chunk_bytes)
{
    /* the chunk's filter mask skips every filter (none: 0 == 0) */
    unsigned all = filters >= 32 ? ~0u : (1u << filters) - 1;
    if (chunks > KC_H5_CHUNKS_CHECKED) {
        hsize_t stored = H5Dget_storage_size(ds->id);
        hsize_t whole = (hsize_t)chunk_bytes;
        if (filters == 0 && (stored % whole || stored / whole != chunks))
            return kc_fail(KC_ERR_FORMAT, "%s: HDF5 dataset %s stores %llu bytes in %llu chunks "
                           "of %lld bytes", h5->label, ds->path, (unsigned long long)stored,
                           (unsigned long long)chunks, (long long)chunk_bytes);
        return KC_OK;
    }
    for (hsize_t i = 0; i < chunks; i++) {
        hsize_t at[H5S_MAX_RANK], size = 0;
        unsigned mask = 0;
        haddr_t addr = HADDR_UNDEF;
        if (H5Dget_chunk_info(ds->id, space, i, at, &mask, &addr, &size) < 0)
            return kc_h5raw_fail(h5, KC_ERR_FORMAT, "cannot read chunk %llu of dataset %s",
                                 (unsigned long long)i, ds->path);
        if ((mask & all) == all && size != (hsize_t)chunk_bytes)
            return kc_fail(KC_ERR_FORMAT, "%s: HDF5 dataset %s: unfiltered chunk %llu stores %llu "
                           "bytes, not %lld", h5->label, ds->path, (unsigned long long)i,
                           (unsigned long long)size, (long long)chunk_bytes);
    }
    return KC_OK;
}

/* Those of dataset ds (dcpl: its creation properties): each chunk a
 * filter did not touch holds chunk_bytes. */
static kc_status kc_h5raw_check_raw_chunks(kc_h5raw *h5, const kc_h5raw_ds *ds, hid_t dcpl,
                                           int64_t chunk_bytes)
{
    int filters = H5Pget_nfilters(dcpl);
    hsize_t chunks = 0;
    /* libhdf5 1.10 takes no H5S_ALL here: the whole file space */
    hid_t space = H5Dget_space(ds->id);
    if (filters < 0 || space < 0 || H5Dget_num_chunks(ds->id, space, &chunks) < 0) {
        kc_h5raw_close_id(space);
        return kc_h5raw_fail(h5, KC_ERR_FORMAT, "cannot read the chunks of dataset %s", ds->path);
    }
    kc_status status = kc_h5raw_check_each_chunk(h5, ds, space, filters, chunks, chunk_bytes);
    kc_h5raw_close_id(space);
    return status;
}

/* Chunks must match the dataspace: libhdf5 1.10 spins in H5Dread on a
 * scalar dataset with a chunked layout (a fuzzer find; libhdf5 refuses to
 * create one). They are also capped, because libhdf5 allocates a whole
 * chunk to read any part of it. */
static kc_status kc_h5raw_check_chunks(kc_h5raw *h5, const kc_h5raw_ds *ds, hid_t dcpl, size_t elem_size)
{
    hsize_t cdims[H5S_MAX_RANK];
    int crank = H5Pget_chunk(dcpl, H5S_MAX_RANK, cdims);
    if (crank < 0)
        return kc_h5raw_fail(h5, KC_ERR_FORMAT, "bad chunking of dataset %s", ds->path);
    if (crank != ds->shape.rank || crank == 0)
        return kc_fail(KC_ERR_FORMAT, "%s: HDF5 dataset %s has rank %d but rank-%d chunks",
                       h5->label, ds->path, ds->shape.rank, crank);
    int64_t bytes = (int64_t)elem_size;
    for (int i = 0; i < crank; i++) {
        if (cdims[i] == 0)
            return kc_fail(KC_ERR_FORMAT, "%s: HDF5 dataset %s has an empty chunk dimension",
                           h5->label, ds->path);
        if (cdims[i] > (hsize_t)INT64_MAX || kc_mul_overflows(bytes, (int64_t)cdims[i], &bytes))
            bytes = INT64_MAX;
    }
    if (bytes > KC_H5_CHUNK_BYTES_MAX)
        return kc_fail(KC_ERR_LIMIT, "%s: HDF5 dataset %s has chunks over %lld bytes", h5->label,
                       ds->path, (long long)KC_H5_CHUNK_BYTES_MAX);
    return kc_h5raw_check_raw_chunks(h5, ds, dcpl, bytes);
}

/* External raw storage reads other files named by this one; virtual
 * datasets map other files in. Keras refuses both, so do we. */
static kc_status kc_h5raw_check_storage(kc_h5raw *h5, kc_h5raw_ds *ds, size_t elem_size)
{
    hid_t dcpl = H5Dget_create_plist(ds->id);
    if (dcpl < 0)
        return kc_h5raw_fail(h5, KC_ERR_FORMAT, "cannot read layout of dataset %s", ds->path);
    kc_status status = KC_OK;
    H5D_layout_t layout = H5Pget_layout(dcpl);
    int external = H5Pget_external_count(dcpl);
    if (layout < 0 || external < 0)
        status = kc_h5raw_fail(h5, KC_ERR_FORMAT, "cannot read layout of dataset %s", ds->path);
    else if (layout == H5D_VIRTUAL)
        status = kc_fail(KC_ERR_REFUSED, "%s: HDF5 virtual dataset %s refused", h5->label,
                         ds->path);
    else if (external > 0)
        status = kc_fail(KC_ERR_REFUSED, "%s: HDF5 dataset %s with external storage refused",
                         h5->label, ds->path);
    else if (layout == H5D_CHUNKED)
        status = kc_h5raw_check_chunks(h5, ds, dcpl, elem_size);
    H5Pclose(dcpl);
    return status;
}

static kc_status kc_h5raw_read_shape(kc_h5raw *h5, kc_h5raw_ds *ds)
{
    hid_t space = H5Dget_space(ds->id);
    if (space < 0)
        return kc_h5raw_fail(h5, KC_ERR_FORMAT, "cannot read shape of dataset %s", ds->path);
    kc_status status = KC_OK;
    H5S_class_t cls = H5Sget_simple_extent_type(space);
    int rank = cls == H5S_SCALAR ? 0 : cls == H5S_SIMPLE ? H5Sget_simple_extent_ndims(space) : -1;
    hsize_t dims[H5S_MAX_RANK];
    if (cls == H5S_NULL) {
        status = kc_fail(KC_ERR_UNSUPPORTED, "%s: HDF5 dataset %s has a null dataspace",
                         h5->label, ds->path);
    } else if (rank < 0) {
        status = kc_h5raw_fail(h5, KC_ERR_FORMAT, "bad dataspace of dataset %s", ds->path);
    } else if (rank > KC_MAX_RANK) {
        status = kc_fail(KC_ERR_LIMIT, "%s: HDF5 dataset %s has rank %d (limit %d)", h5->label,
                         ds->path, rank, KC_MAX_RANK);
    } else if (rank > 0 && H5Sget_simple_extent_dims(space, dims, NULL) != rank) {
        status = kc_h5raw_fail(h5, KC_ERR_FORMAT, "bad dataspace of dataset %s", ds->path);
    } else {
        memset(&ds->shape, 0, sizeof ds->shape);
        ds->shape.rank = rank;
        for (int i = 0; i < rank; i++)
            ds->shape.dims[i] = dims[i] > (hsize_t)INT64_MAX ? -2 : (int64_t)dims[i];
        ds->count = kc_shape_count(&ds->shape);
        if (ds->count < 0)
            status = kc_fail_context(KC_ERR_LIMIT, "%s: HDF5 dataset %s", h5->label, ds->path);
    }
    H5Sclose(space);
    return status;
}

/* Keras's rule: more than 4 GiB declared needs at most 1000x the stored
 * bytes. Stops a tiny file from making the caller allocate terabytes. */
static kc_status kc_h5raw_check_plausible(kc_h5raw *h5, const kc_h5raw_ds *ds, size_t elem_size)
{
    int64_t bytes;
    int64_t budget;
    if (kc_mul_overflows(ds->count, (int64_t)elem_size, &bytes))
        bytes = INT64_MAX;
    if (kc_mul_overflows(h5->file_bytes, KC_H5_BIG_RATIO, &budget))
        budget = INT64_MAX;
    if (bytes > KC_H5_BIG_BYTES && bytes > budget)
        return kc_fail(KC_ERR_LIMIT,
                       "%s: HDF5 dataset %s declares %lld bytes, implausible for a %lld-byte file",
                       h5->label, ds->path, (long long)bytes, (long long)h5->file_bytes);
    return KC_OK;
}

static int kc_h5raw_is_le_or_be(hid_t type)
{
    H5T_order_t order = H5Tget_order(type);
    return order == H5T_ORDER_LE || order == H5T_ORDER_BE;
}

/* Integers HDF5 converts without surprises: whole bytes, no padding bits. */
static kc_dtype kc_h5raw_int_dtype(hid_t type)
{
    size_t size = H5Tget_size(type);
    if (!kc_h5raw_is_le_or_be(type) || H5Tget_precision(type) != size * 8 || H5Tget_offset(type) != 0)
        return KC_DTYPE_INVALID;
    int is_signed = H5Tget_sign(type) == H5T_SGN_2;
    switch (size) {
    case 1: return is_signed ? KC_I8 : KC_U8;
    case 2: return is_signed ? KC_I16 : KC_U16;
    case 4: return is_signed ? KC_I32 : KC_U32;
    case 8: return is_signed ? KC_I64 : KC_U64;
    default: return KC_DTYPE_INVALID;
    }
}

/* Only exact IEEE binary16/32/64 layouts: libhdf5's generic float
 * conversion accepts any bit layout a file declares, and the half path
 * below assumes IEEE. */
static kc_dtype kc_h5raw_float_dtype(hid_t type)
{
    static const struct {
        size_t size, spos, epos, esize, mpos, msize, ebias;
        kc_dtype dtype;
    } ieee[] = {
        {2, 15, 10, 5, 0, 10, 15, KC_F16},
        {4, 31, 23, 8, 0, 23, 127, KC_F32},
        {8, 63, 52, 11, 0, 52, 1023, KC_F64},
    };
    size_t size = H5Tget_size(type), spos, epos, esize, mpos, msize;
    if (!kc_h5raw_is_le_or_be(type) || H5Tget_precision(type) != size * 8 || H5Tget_offset(type) != 0 ||
        H5Tget_fields(type, &spos, &epos, &esize, &mpos, &msize) < 0 ||
        H5Tget_norm(type) != H5T_NORM_IMPLIED)
        return KC_DTYPE_INVALID;
    for (size_t i = 0; i < sizeof ieee / sizeof ieee[0]; i++)
        if (size == ieee[i].size && spos == ieee[i].spos && epos == ieee[i].epos &&
            esize == ieee[i].esize && mpos == ieee[i].mpos && msize == ieee[i].msize &&
            H5Tget_ebias(type) == ieee[i].ebias)
            return ieee[i].dtype;
    return KC_DTYPE_INVALID;
}

/* h5py writes numpy bool as an enum {FALSE = 0, TRUE = 1} over int8. */
static kc_dtype kc_h5raw_enum_dtype(hid_t type)
{
    hid_t base = H5Tget_super(type);
    if (base < 0)
        return KC_DTYPE_INVALID;
    kc_dtype dtype = H5Tget_class(base) == H5T_INTEGER ? kc_h5raw_int_dtype(base) : KC_DTYPE_INVALID;
    H5Tclose(base);
    if (dtype == KC_DTYPE_INVALID || H5Tget_nmembers(type) != 2)
        return dtype;
    char *a = H5Tget_member_name(type, 0);
    char *b = H5Tget_member_name(type, 1);
    if (a && b && strcmp(a, "FALSE") == 0 && strcmp(b, "TRUE") == 0)
        dtype = KC_BOOL;
    H5free_memory(a);
    H5free_memory(b);
    return dtype;
}

/* Keras marks bfloat16 (2-byte opaque) with a dtype="bfloat16" attribute. */
static kc_dtype kc_h5raw_opaque_dtype(kc_h5raw *h5, const kc_h5raw_ds *ds)
{
    if (H5Tget_size(ds->ftype) != 2 || H5Aexists(ds->id, "dtype") <= 0)
        return KC_DTYPE_INVALID;
    kc_h5raw_strv v = {.max_items = 1};
    kc_dtype dtype = KC_DTYPE_INVALID;
    if (kc_h5raw_read_attr(h5, ds->id, "dtype", &v) == KC_OK && v.n == 1 &&
        strcmp(v.items[0], "bfloat16") == 0)
        dtype = KC_BF16;
    kc_strv_free(v.items, (int)v.n);
    return dtype;
}

static const char *kc_h5raw_class_name(H5T_class_t cls)
{
    switch (cls) {
    case H5T_INTEGER: return "integer";
    case H5T_FLOAT: return "float";
    case H5T_TIME: return "time";
    case H5T_STRING: return "string";
    case H5T_BITFIELD: return "bitfield";
    case H5T_OPAQUE: return "opaque";
    case H5T_COMPOUND: return "compound";
    case H5T_REFERENCE: return "reference";
    case H5T_ENUM: return "enum";
    case H5T_VLEN: return "variable-length";
    case H5T_ARRAY: return "array";
    default: return "unknown";
    }
}

static kc_status kc_h5raw_classify(kc_h5raw *h5, kc_h5raw_ds *ds)
{
    H5T_class_t cls = H5Tget_class(ds->ftype);
    switch (cls) {
    case H5T_INTEGER: ds->dtype = kc_h5raw_int_dtype(ds->ftype); break;
    case H5T_FLOAT: ds->dtype = kc_h5raw_float_dtype(ds->ftype); break;
    case H5T_ENUM: ds->dtype = kc_h5raw_enum_dtype(ds->ftype); break;
    case H5T_OPAQUE: ds->dtype = kc_h5raw_opaque_dtype(h5, ds); break;
    default: ds->dtype = KC_DTYPE_INVALID; break;
    }
    if (ds->dtype == KC_DTYPE_INVALID)
        return kc_fail(KC_ERR_UNSUPPORTED,
                       "%s: HDF5 dataset %s has an unsupported element type (%s, %zu bytes)",
                       h5->label, ds->path, kc_h5raw_class_name(cls), H5Tget_size(ds->ftype));
    return KC_OK;
}

/* Opens path as a dataset and runs every check; on success the caller
 * closes ds. */
static kc_status kc_h5raw_open_dataset(kc_h5raw *h5, const char *path, kc_h5raw_ds *ds)
{
    memset(ds, 0, sizeof *ds);
    ds->id = ds->ftype = H5I_INVALID_HID;
    ds->path = path;
    KC_TRY(kc_h5raw_open_path(h5, path, &ds->id, 1));
    kc_status status = KC_OK;
    if (H5Iget_type(ds->id) != H5I_DATASET)
        status = kc_fail(KC_ERR_FORMAT, "%s: HDF5: %s is not a dataset", h5->label, path);
    else if ((ds->ftype = H5Dget_type(ds->id)) < 0)
        status = kc_h5raw_fail(h5, KC_ERR_FORMAT, "cannot read type of dataset %s", path);
    size_t elem_size = status == KC_OK ? H5Tget_size(ds->ftype) : 0;
    if (status == KC_OK && elem_size == 0)
        status = kc_h5raw_fail(h5, KC_ERR_FORMAT, "bad element size in dataset %s", path);
    if (status == KC_OK)
        status = kc_h5raw_read_shape(h5, ds);
    if (status == KC_OK)
        status = kc_h5raw_check_storage(h5, ds, elem_size);
    if (status == KC_OK)
        status = kc_h5raw_check_plausible(h5, ds, elem_size);
    if (status == KC_OK)
        status = kc_h5raw_classify(h5, ds);
    if (status != KC_OK)
        kc_h5raw_ds_close(ds);
    return status;
}

kc_status kc_h5raw_dataset_info(kc_h5raw *h5, const char *path, kc_shape *shape, kc_dtype *dtype)
{
    if (!h5 || !shape || !dtype)
        return kc_fail(KC_ERR_ARG, "kc_h5raw_dataset_info: NULL argument");
    KC_TRY(kc_h5raw_init());
    kc_h5raw_ds ds;
    KC_TRY(kc_h5raw_open_dataset(h5, path, &ds));
    *shape = ds.shape;
    *dtype = ds.dtype;
    kc_h5raw_ds_close(&ds);
    return KC_OK;
}

/* 16-bit values were read into the front of dst; widen in place from the
 * back, where a float never overwrites a value not yet converted. */
static void kc_h5raw_widen16(float *dst, int64_t count, kc_dtype dtype)
{
    const unsigned char *raw = (const unsigned char *)dst;
    for (int64_t i = count - 1; i >= 0; i--) {
        uint16_t h = (uint16_t)(raw[2 * i] | (raw[2 * i + 1] << 8));
        dst[i] = dtype == KC_F16 ? kc_half_to_float(h) : kc_bf16_to_float(h);
    }
}

/* float16 (no native type in HDF5 1.10) and bfloat16 are read as their
 * little-endian bytes and converted here. */
static kc_status kc_h5raw_read_16(kc_h5raw *h5, const kc_h5raw_ds *ds, float *dst)
{
    hid_t mtype = H5Tcopy(ds->ftype);
    /* Opaque bfloat16 has no byte order: ml_dtypes writes host (LE) bytes. */
    int ok = mtype >= 0 && (ds->dtype != KC_F16 || H5Tset_order(mtype, H5T_ORDER_LE) >= 0) &&
             H5Dread(ds->id, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, dst) >= 0;
    kc_status status =
        ok ? KC_OK : kc_h5raw_fail(h5, KC_ERR_FORMAT, "cannot read dataset %s", ds->path);
    kc_h5raw_close_id(mtype);
    if (ok)
        kc_h5raw_widen16(dst, ds->count, ds->dtype);
    return status;
}

static double kc_h5raw_decode_int(const unsigned char *p, size_t size, int big, int is_signed)
{
    uint64_t u = 0;
    for (size_t i = 0; i < size; i++)
        u = (u << 8) | p[big ? i : size - 1 - i];
    if (is_signed && size < 8 && (u >> (size * 8 - 1)))
        u |= ~(uint64_t)0 << (size * 8);
    return is_signed ? (double)(int64_t)u : (double)u;
}

/* Enums (bool) have no conversion to float in libhdf5, and enum-to-enum
 * conversion maps unknown values to garbage: read the stored integers
 * unconverted and widen them here. */
static kc_status kc_h5raw_read_enum(kc_h5raw *h5, const kc_h5raw_ds *ds, float *dst)
{
    hid_t base = H5Tget_super(ds->ftype);
    size_t size = base >= 0 ? H5Tget_size(base) : 0;
    int big = base >= 0 && H5Tget_order(base) == H5T_ORDER_BE;
    int is_signed = base >= 0 && H5Tget_sign(base) == H5T_SGN_2;
    kc_h5raw_close_id(base);
    unsigned char *raw = size ? kc_calloc((size_t)ds->count, size) : NULL;
    if (!raw)
        return size ? KC_ERR_NOMEM : kc_h5raw_fail(h5, KC_ERR_FORMAT, "bad enum in %s", ds->path);
    hid_t mtype = H5Tcopy(ds->ftype);
    int ok = mtype >= 0 && H5Dread(ds->id, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, raw) >= 0;
    kc_status status =
        ok ? KC_OK : kc_h5raw_fail(h5, KC_ERR_FORMAT, "cannot read dataset %s", ds->path);
    kc_h5raw_close_id(mtype);
    for (int64_t i = 0; ok && i < ds->count; i++)
        dst[i] = (float)kc_h5raw_decode_int(raw + (size_t)i * size, size, big, is_signed);
    free(raw);
    return status;
}

int kc_h5raw_f32_offset(kc_h5raw *h5, const char *path, uint64_t *offset)
{
    if (!h5 || !offset || kc_h5raw_init() != KC_OK)
        return 0;
    kc_h5raw_ds ds;
    if (kc_h5raw_open_dataset(h5, path, &ds) != KC_OK) {
        kc_error_clear(); /* then read through libhdf5, which reports it */
        return 0;
    }
    int direct = 0;
    hid_t dcpl = H5Dget_create_plist(ds.id);
    if (dcpl >= 0 && ds.count > 0 && H5Pget_layout(dcpl) == H5D_CONTIGUOUS &&
        H5Pget_external_count(dcpl) == 0 && H5Tequal(ds.ftype, H5T_IEEE_F32LE) > 0) {
        haddr_t at = H5Dget_offset(ds.id); /* from the file's start, user block included */
        uint64_t bytes = (uint64_t)ds.count * sizeof(float);
        direct = at != HADDR_UNDEF && H5Dget_storage_size(ds.id) == bytes &&
                 (uint64_t)h5->file_bytes >= bytes && at <= (uint64_t)h5->file_bytes - bytes;
        *offset = direct ? (uint64_t)at : 0;
    }
    if (dcpl >= 0)
        H5Pclose(dcpl);
    kc_h5raw_ds_close(&ds);
    return direct;
}

kc_status kc_h5raw_read_f32(kc_h5raw *h5, const char *path, float *dst, int64_t count)
{
    if (!h5 || (!dst && count > 0))
        return kc_fail(KC_ERR_ARG, "kc_h5raw_read_f32: NULL argument");
    KC_TRY(kc_h5raw_init());
    kc_h5raw_ds ds;
    KC_TRY(kc_h5raw_open_dataset(h5, path, &ds));
    kc_status status = KC_OK;
    if (count != ds.count) {
        status = kc_fail(KC_ERR_SHAPE, "%s: HDF5 dataset %s has %lld elements, expected %lld",
                         h5->label, path, (long long)ds.count, (long long)count);
    } else if (count == 0) {
        status = KC_OK;
    } else if (ds.dtype == KC_F16 || ds.dtype == KC_BF16) {
        status = kc_h5raw_read_16(h5, &ds, dst);
    } else if (H5Tget_class(ds.ftype) == H5T_ENUM) {
        status = kc_h5raw_read_enum(h5, &ds, dst);
    } else if (H5Dread(ds.id, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, dst) < 0) {
        /* ints, float32/64: libhdf5's own conversion */
        status = kc_h5raw_fail(h5, KC_ERR_FORMAT, "cannot read dataset %s", path);
    }
    kc_h5raw_ds_close(&ds);
    return status;
}

/* --------------------------------------------- enumeration for the dumper */

static herr_t kc_h5raw_attr_name_cb(hid_t obj, const char *name, const H5A_info_t *info,
                                    void *data)
{
    (void)obj;
    (void)info;
    /* kc_h5raw_strv_push enforces v->max_items */
    return kc_h5raw_strv_push(data, name, strlen(name)) == KC_OK ? 0 : -1;
}

kc_status kc_h5raw_attr_names(kc_h5raw *h5, const char *path, char ***names, int *n)
{
    *names = NULL;
    *n = 0;
    KC_TRY(kc_h5raw_init());
    hid_t obj;
    KC_TRY(kc_h5raw_open_path(h5, path, &obj, 1));
    kc_h5raw_strv v = {.max_items = KC_H5_LIST_MAX};
    hsize_t idx = 0;
    herr_t r = H5Aiterate2(obj, H5_INDEX_NAME, H5_ITER_INC, &idx, kc_h5raw_attr_name_cb, &v);
    kc_h5raw_close_id(obj);
    if (r < 0) {
        kc_strv_free(v.items, (int)v.n);
        return kc_h5raw_fail(h5, KC_ERR_FORMAT, "cannot list the attributes of %s", path);
    }
    kc_h5raw_strv_take(&v, names, n);
    return KC_OK;
}

static herr_t kc_h5raw_refused_cb(hid_t group, const char *name, const H5L_info_t *info,
                                  void *data)
{
    (void)group;
    kc_h5raw_strv *v = data;
    if (info->type == H5L_TYPE_HARD)
        return 0;
    return kc_h5raw_strv_push(v, name, strlen(name)) == KC_OK ? 0 : -1;
}

kc_status kc_h5raw_list_refused(kc_h5raw *h5, const char *group_path, char ***names, int *n)
{
    *names = NULL;
    *n = 0;
    KC_TRY(kc_h5raw_init());
    hid_t obj;
    KC_TRY(kc_h5raw_open_path(h5, group_path, &obj, 1));
    kc_h5raw_strv v = {.max_items = KC_H5_LIST_MAX};
    hsize_t idx = 0;
    herr_t r = H5Literate(obj, H5_INDEX_NAME, H5_ITER_INC, &idx, kc_h5raw_refused_cb, &v);
    kc_h5raw_close_id(obj);
    if (r < 0) {
        kc_strv_free(v.items, (int)v.n);
        return kc_h5raw_fail(h5, KC_ERR_FORMAT, "cannot list the links of %s", group_path);
    }
    kc_h5raw_strv_take(&v, names, n);
    return KC_OK;
}
