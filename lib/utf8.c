/* Strict UTF-8 validation for tensor names (data that ends up in messages, HDF5 attributes and
 * JSON output, so it must be text every consumer can decode). */
#include "internal.h"

#include <stdint.h>
#include <string.h>

/*
 * The well-formed byte sequences of the Unicode standard (chapter 3, table 3-7; RFC 3629): the
 * second byte's range depends on the lead byte, which is what excludes overlong forms (C0, C1,
 * E0 80..9F, F0 80..8F), UTF-16 surrogates (ED A0..BF) and code points above U+10FFFF (F4 90..,
 * F5..FF). Bytes are examined in order and the first that does not fit ends the look, so a NUL
 * terminator is never read past.
 */
size_t ckpt__utf8_seq_len(const unsigned char *p, size_t avail)
{
    unsigned c = p[0];
    size_t n;                      /* bytes of the sequence */
    unsigned lo = 0x80, hi = 0xBF; /* range of the first continuation byte */
    if (c >= 0xC2 && c <= 0xDF) {
        n = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
        n = 3;
        if (c == 0xE0)
            lo = 0xA0; /* below: overlong */
        else if (c == 0xED)
            hi = 0x9F; /* above: surrogates D800..DFFF */
    } else if (c >= 0xF0 && c <= 0xF4) {
        n = 4;
        if (c == 0xF0)
            lo = 0x90; /* below: overlong */
        else if (c == 0xF4)
            hi = 0x8F; /* above: past U+10FFFF */
    } else {
        return 0; /* ASCII, a lone continuation byte, C0/C1 (overlong) or F5..FF */
    }
    if (avail < n || p[1] < lo || p[1] > hi)
        return 0;
    for (size_t i = 2; i < n; i++)
        if ((p[i] & 0xC0) != 0x80)
            return 0;
    return n;
}

int ckpt__utf8_valid(const char *s, size_t len)
{
    const unsigned char *p = (const unsigned char *)s, *end = p + len;
    while (p < end) {
        /* Names are mostly ASCII: skip it eight bytes at a time. */
        while (end - p >= 8) {
            uint64_t w;
            memcpy(&w, p, 8);
            if (w & 0x8080808080808080u)
                break;
            p += 8;
        }
        if (p == end)
            break;
        if (*p < 0x80) {
            p++;
            continue;
        }
        size_t n = ckpt__utf8_seq_len(p, (size_t)(end - p));
        if (n == 0)
            return 0;
        p += n;
    }
    return 1;
}

/* Writes the `len` bytes of `s` into buf (size >= 8) for a message: printable ASCII as is, every
 * other byte and the backslash as \xNN; cut with "..." when it does not fit. */
const char *ckpt__escape_bytes(char *buf, size_t size, const char *s, size_t len)
{
    static const char hex[] = "0123456789abcdef";
    size_t o = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (o + 8 > size) { /* room for one escape, "..." and the NUL */
            memcpy(buf + o, "...", 4);
            return buf;
        }
        if (c >= 0x20 && c < 0x7f && c != '\\') {
            buf[o++] = (char)c;
        } else {
            buf[o++] = '\\';
            buf[o++] = 'x';
            buf[o++] = hex[c >> 4];
            buf[o++] = hex[c & 15];
        }
    }
    buf[o] = '\0';
    return buf;
}
