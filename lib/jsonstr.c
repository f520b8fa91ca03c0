#include "jsonstr.h"

static int is_cont(unsigned char c)
{
    return (c & 0xc0) == 0x80;
}

size_t ckpt__utf8_seq_len(const unsigned char *p)
{
    unsigned char c = p[0];
    /* The second byte's range depends on the first (this is what rules out overlong forms,
     * surrogates and code points above U+10FFFF); later bytes are plain continuation bytes. */
    unsigned char lo = 0x80, hi = 0xbf;
    size_t n;
    if (c >= 0xc2 && c <= 0xdf) {
        n = 2;
    } else if (c >= 0xe0 && c <= 0xef) {
        n = 3;
        if (c == 0xe0)
            lo = 0xa0; /* below: overlong */
        else if (c == 0xed)
            hi = 0x9f; /* above: UTF-16 surrogates */
    } else if (c >= 0xf0 && c <= 0xf4) {
        n = 4;
        if (c == 0xf0)
            lo = 0x90; /* below: overlong */
        else if (c == 0xf4)
            hi = 0x8f; /* above: beyond U+10FFFF */
    } else {
        return 0;
    }
    if (p[1] < lo || p[1] > hi)
        return 0;
    for (size_t i = 2; i < n; i++)
        if (!is_cont(p[i]))
            return 0;
    return n;
}

void ckpt__json_write_string(FILE *out, const char *s)
{
    static const char hex[] = "0123456789abcdef";
    fputc('"', out);
    for (const unsigned char *p = (const unsigned char *)s; *p;) {
        if (*p == '"' || *p == '\\') {
            fputc('\\', out);
            fputc(*p++, out);
        } else if (*p < 0x20) {
            fputs("\\u00", out);
            fputc(hex[*p >> 4], out);
            fputc(hex[*p & 0xf], out);
            p++;
        } else if (*p < 0x80) {
            fputc(*p++, out);
        } else {
            size_t n = ckpt__utf8_seq_len(p);
            if (n == 0) {
                /* One replacement per byte: the next byte may start a good sequence. */
                fputs("\\ufffd", out);
                p++;
            } else {
                fwrite(p, 1, n, out);
                p += n;
            }
        }
    }
    fputc('"', out);
}
