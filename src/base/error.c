#include "error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define KC_ERROR_CAP 1024

static _Thread_local char kc_error_text[KC_ERROR_CAP];

const char *kc_last_error(void) { return kc_error_text; }

void kc_error_clear(void) { kc_error_text[0] = '\0'; }

/* Messages are one line: a newline from a hostile file name or string
 * would let the file forge extra output lines. */
static void kc_error_flatten(void)
{
    for (char *p = kc_error_text; *p; p++)
        if (*p == '\n' || *p == '\r' || (unsigned char)*p < 0x20)
            *p = ' ';
}

kc_status kc_fail(kc_status status, const char *fmt, ...)
{
    va_list args;
    va_start(args, fmt);
    vsnprintf(kc_error_text, sizeof kc_error_text, fmt, args);
    va_end(args);
    kc_error_flatten();
    return status;
}

kc_status kc_fail_context(kc_status status, const char *fmt, ...)
{
    char prefix[512];
    va_list args;
    va_start(args, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, args);
    va_end(args);
    size_t plen = strlen(prefix);
    if (strncmp(kc_error_text, prefix, plen) == 0 && kc_error_text[plen] == ':')
        return status;
    /* Build "<prefix>: <old>" truncated to the buffer; a long message
     * loses its tail, never its context. */
    char joined[KC_ERROR_CAP + sizeof prefix + 2];
    size_t olen = strlen(kc_error_text);
    memcpy(joined, prefix, plen);
    memcpy(joined + plen, ": ", 2);
    memcpy(joined + plen + 2, kc_error_text, olen + 1);
    size_t total = plen + 2 + olen;
    if (total >= KC_ERROR_CAP)
        total = KC_ERROR_CAP - 1;
    memcpy(kc_error_text, joined, total);
    kc_error_text[total] = '\0';
    kc_error_flatten();
    return status;
}

const char *kc_status_name(kc_status status)
{
    switch (status) {
    case KC_OK: return "ok";
    case KC_ERR_IO: return "io";
    case KC_ERR_FORMAT: return "format";
    case KC_ERR_UNSUPPORTED: return "unsupported";
    case KC_ERR_REFUSED: return "refused";
    case KC_ERR_SHAPE: return "shape";
    case KC_ERR_LIMIT: return "limit";
    case KC_ERR_NOMEM: return "nomem";
    case KC_ERR_ARG: return "argument";
    case KC_ERR_DEVICE: return "device";
    }
    return "unknown";
}

kc_status kc_format(char *buf, size_t cap, const char *fmt, ...)
{
    va_list args;
    va_start(args, fmt);
    int n = vsnprintf(buf, cap, fmt, args);
    va_end(args);
    if (n < 0 || (size_t)n >= cap)
        return kc_fail(KC_ERR_LIMIT, "path or name longer than %zu bytes", cap);
    return KC_OK;
}
