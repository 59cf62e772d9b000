/* Class labels for `kerasc predict`: built-in sets, label files, finding
 * kerasc's data directory, and top-k selection. */
#include "image/image.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/error.h"
#include "base/mem.h"
#include "format/fileio.h"

/* nsfwjs's NSFW_CLASSES (dist/cjs/nsfw_classes.js, nsfwjs 4.4.0): the
 * output order of all three of its models. */
static const char *const kc_img_nsfwjs_names[] = {"Drawing", "Hentai", "Neutral", "Porn", "Sexy"};

void kc_img_labels_free(kc_img_labels *labels)
{
    if (!labels)
        return;
    for (int i = 0; i < labels->count; i++)
        free(labels->names[i]);
    free(labels->names);
    labels->names = NULL;
    labels->count = 0;
}

static kc_status kc_img_labels_from_array(const char *const *names, int count, kc_img_labels *out)
{
    out->names = kc_calloc((size_t)count, sizeof *out->names);
    if (!out->names)
        return KC_ERR_NOMEM;
    for (int i = 0; i < count; i++) {
        out->names[i] = kc_strdup(names[i]);
        if (!out->names[i]) {
            kc_img_labels_free(out);
            return KC_ERR_NOMEM;
        }
        out->count = i + 1;
    }
    return KC_OK;
}

static size_t kc_img_count_lines(const char *text, size_t len)
{
    size_t lines = 0;
    for (size_t i = 0; i < len; i++)
        if (text[i] == '\n')
            lines++;
    return len && text[len - 1] != '\n' ? lines + 1 : lines;
}

/* One label; control characters become '?' so that a label file cannot
 * send terminal escape sequences through predict's output. */
static char *kc_img_label_dup(const char *line, size_t n)
{
    if (n && line[n - 1] == '\r')
        n--;
    char *s = kc_strndup(line, n);
    for (size_t i = 0; s && i < n; i++)
        if (((unsigned char)s[i] < 0x20 && s[i] != '\t') || s[i] == 0x7f)
            s[i] = '?';
    return s;
}

static kc_status kc_img_labels_split(const char *text, size_t len, const char *name,
                                     kc_img_labels *out)
{
    size_t start = 0;
    for (int i = 0; start < len; i++) {
        const char *nl = memchr(text + start, '\n', len - start);
        size_t end = nl ? (size_t)(nl - text) : len;
        size_t n = end - start;
        if (n == 0 || (n == 1 && text[start] == '\r'))
            return kc_fail(KC_ERR_FORMAT, "%s: line %d is empty (one label per line, in class "
                                          "index order)", name, i + 1);
        out->names[i] = kc_img_label_dup(text + start, n);
        if (!out->names[i])
            return KC_ERR_NOMEM;
        out->count = i + 1;
        start = end + 1;
    }
    return KC_OK;
}

kc_status kc_img_labels_parse(const char *text, size_t len, const char *name,
                              kc_img_labels *out)
{
    memset(out, 0, sizeof *out);
    if (!name)
        name = "<labels>";
    if (len >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0) {
        text += 3;
        len -= 3;
    }
    if (len == 0)
        return kc_fail(KC_ERR_FORMAT, "%s: labels file is empty", name);
    if (memchr(text, '\0', len))
        return kc_fail(KC_ERR_FORMAT, "%s: labels file holds a NUL byte (not a text file)", name);
    size_t lines = kc_img_count_lines(text, len);
    if (lines > KC_IMG_LABELS_MAX_COUNT)
        return kc_fail(KC_ERR_LIMIT, "%s: more than %d labels", name, KC_IMG_LABELS_MAX_COUNT);
    out->names = kc_calloc(lines, sizeof *out->names);
    if (!out->names)
        return KC_ERR_NOMEM;
    kc_status st = kc_img_labels_split(text, len, name, out);
    if (st != KC_OK)
        kc_img_labels_free(out);
    return st;
}

kc_status kc_img_labels_load(const char *path, kc_img_labels *out)
{
    memset(out, 0, sizeof *out);
    char *text = NULL;
    size_t len = 0;
    KC_TRY(kc_read_file(path, KC_IMG_LABELS_MAX_BYTES, &text, &len));
    kc_status st = kc_img_labels_parse(text, len, path, out);
    free(text);
    return st;
}

kc_status kc_img_labels_open(const char *spec, kc_img_labels *out)
{
    memset(out, 0, sizeof *out);
    if (!spec || !*spec)
        return kc_fail(KC_ERR_ARG, "no label set given");
    if (strcmp(spec, "nsfwjs") == 0)
        return kc_img_labels_from_array(kc_img_nsfwjs_names, 5, out);
    if (strcmp(spec, "imagenet") == 0) {
        char path[4096];
        KC_TRY(kc_img_data_path("labels/imagenet.txt", path, sizeof path));
        return kc_img_labels_load(path, out);
    }
    return kc_img_labels_load(spec, out);
}

/* ------------------------------------------------------------ data dir */

/* Directory of the running executable, from /proc/self/exe. */
static int kc_img_exe_dir(char *dir, size_t cap)
{
    ssize_t n = readlink("/proc/self/exe", dir, cap - 1);
    if (n <= 0 || (size_t)n >= cap - 1)
        return 0;
    dir[n] = '\0';
    char *slash = strrchr(dir, '/');
    if (!slash)
        return 0;
    *slash = '\0';
    return 1;
}

static int kc_img_try_path(const char *base, const char *sub, const char *relative, char *path,
                           size_t cap)
{
    if (kc_format(path, cap, "%s%s/%s", base, sub, relative) != KC_OK)
        return 0;
    return access(path, R_OK) == 0;
}

kc_status kc_img_data_path(const char *relative, char *path, size_t cap)
{
    const char *env = getenv("KERASC_DATA");
    if (env && *env && kc_img_try_path(env, "", relative, path, cap))
        return KC_OK;
    char exe[4096];
    int have_exe = kc_img_exe_dir(exe, sizeof exe);
    if (have_exe && (kc_img_try_path(exe, "/../data", relative, path, cap) ||
                     kc_img_try_path(exe, "/data", relative, path, cap)))
        return KC_OK;
    kc_error_clear();
    return kc_fail(KC_ERR_IO,
                   "kerasc data file '%s' not found (looked in $KERASC_DATA%s%s%s%s); set "
                   "KERASC_DATA to the data/ directory of kerasc's source tree",
                   relative, env && *env ? "=" : " (unset)", env && *env ? env : "",
                   have_exe ? ", <executable dir>/../data and <executable dir>/data, with the "
                              "executable in " : "",
                   have_exe ? exe : "");
}

/* ---------------------------------------------------------------- top-k */

typedef struct kc_img_scored {
    float score;
    int index;
} kc_img_scored;

/* Higher score first, NaN last, then lower index: a total order, so the
 * result does not depend on qsort's (unstable) algorithm. */
static int kc_img_scored_cmp(const void *pa, const void *pb)
{
    const kc_img_scored *a = pa, *b = pb;
    int na = isnan(a->score), nb = isnan(b->score);
    if (na != nb)
        return na ? 1 : -1;
    if (!na && a->score != b->score)
        return a->score > b->score ? -1 : 1;
    return (a->index > b->index) - (a->index < b->index);
}

kc_status kc_img_topk(const float *scores, int n, int k, int *idx)
{
    if (n < 0 || k < 0 || k > n || (n && !scores) || (k && !idx))
        return kc_fail(KC_ERR_ARG, "top-k: k = %d outside 0..%d", k, n);
    if (k == 0)
        return KC_OK;
    kc_img_scored *all = kc_calloc((size_t)n, sizeof *all);
    if (!all)
        return KC_ERR_NOMEM;
    for (int i = 0; i < n; i++) {
        all[i].score = scores[i];
        all[i].index = i;
    }
    qsort(all, (size_t)n, sizeof *all, kc_img_scored_cmp);
    for (int i = 0; i < k; i++)
        idx[i] = all[i].index;
    free(all);
    return KC_OK;
}
