#include "jsonstr.h"

#include <stdint.h>

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
            size_t n = ckpt__utf8_seq_len(p, SIZE_MAX);
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
