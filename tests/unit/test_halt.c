/*
 * test_halt: the halt request file (lib/halt.h, `mpickpt halt`): parsing of good and malformed
 * text, formatting read back, the due time, and the file inside a hostile directory: a link
 * (never followed, its target untouched), a FIFO (never blocked on: the alarm catches a hang), a
 * huge file, garbage, a directory; the chief/ choice (a chief link refused); --clear removing a
 * planted link without following it; gc keeping the request and removing a stale temp file.
 *   test_halt OUTDIR
 */
#include "fsutil.h"
#include "halt.h"
#include "index.h"
#include "paths.h"

#include "mpickpt/state.h"

#include "check.h"

#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int parse(ckpt__halt *h, const char *text)
{
    return ckpt__halt_parse(h, (const uint8_t *)text, strlen(text), "test");
}

static void write_text(const char *path, const char *text, size_t len)
{
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (f) {
        CHECK_EQ_INT(fwrite(text, 1, len, f), len);
        fclose(f);
    }
}

static int exists(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0;
}

static void test_parse(void)
{
    ckpt__halt h;
    CHECK_OK(parse(&h, "mpickpt halt request v1\nafter=100\nrequested=90\n"));
    CHECK_EQ_INT(h.after, 100);
    CHECK_EQ_INT(h.requested, 90);
    CHECK_OK(parse(&h, "mpickpt halt request v1\nafter=7")); /* no final newline */
    CHECK_EQ_INT(h.after, 7);
    CHECK_EQ_INT(h.requested, -1);
    CHECK_OK(parse(&h, "mpickpt halt request v1\n\nafter=0\n\n"));
    CHECK_EQ_INT(h.after, 0);
    CHECK_OK(parse(&h, "mpickpt halt request v1\nafter=1000000000000\n")); /* the limit */
    CHECK_EQ_INT(h.after, INT64_C(1000000000000));

    static const char *const bad[] = {
        "",
        "\n",
        "mpickpt halt request v1\n",                       /* no after */
        "mpickpt halt request v2\nafter=1\n",              /* another version */
        "MPICKPT HALT REQUEST V1\nafter=1\n",
        "mpickpt halt request v1 \nafter=1\n",             /* trailing space */
        "mpickpt halt request v1\nafter=\n",
        "mpickpt halt request v1\nafter=-1\n",
        "mpickpt halt request v1\nafter=+1\n",
        "mpickpt halt request v1\nafter=1x\n",
        "mpickpt halt request v1\nafter=1000000000001\n",  /* over 10^12 */
        "mpickpt halt request v1\nafter=99999999999999999999999\n",
        "mpickpt halt request v1\nafter=1\nafter=2\n",     /* repeated */
        "mpickpt halt request v1\nafter=1\nreason=x\n",    /* unknown key */
        "mpickpt halt request v1\nafter 1\n",
        "mpickpt halt request v1\nafter=1\r\n",
        "#!/bin/sh\nrm -rf /\n",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        h.after = 42;
        CHECK_MSG(parse(&h, bad[i]) == CKPT_ECORRUPT, "accepted bad halt text %zu: '%s'", i,
                  bad[i]);
        CHECK(ckpt_error_last() && strstr(ckpt_error_last()->message, "halt request test"));
    }
    /* a NUL byte inside */
    static const uint8_t nul[] = "mpickpt halt request v1\nafter=1\0\n";
    CHECK_RC(ckpt__halt_parse(&h, nul, sizeof nul - 1, "test"), CKPT_ECORRUPT);

    /* formatting, read back */
    char text[256];
    size_t len = 0;
    ckpt__halt w = { 1795526167, 1795526100 };
    CHECK_OK(ckpt__halt_format(text, sizeof text, &len, &w));
    CHECK_EQ_INT(len, strlen(text));
    CHECK_OK(ckpt__halt_parse(&h, (const uint8_t *)text, len, "formatted"));
    CHECK_EQ_INT(h.after, w.after);
    CHECK_EQ_INT(h.requested, w.requested);
    ckpt__halt neg = { -5, -1 };
    CHECK_RC(ckpt__halt_format(text, sizeof text, &len, &neg), CKPT_EINVAL);
    CHECK_RC(ckpt__halt_format(text, 8, &len, &w), CKPT_EINVAL);

    /* due */
    CHECK(ckpt__halt_due(&w, 1795526167.0));
    CHECK(ckpt__halt_due(&w, 1795526168.5));
    CHECK(!ckpt__halt_due(&w, 1795526166.9));
}

static void test_files(const char *out)
{
    char dir[4096], path[4200], victim[4200], buf[8192];
    snprintf(dir, sizeof dir, "%s/mgr", out);
    CHECK_OK(ckpt__mkdir_p(dir, 0755));
    snprintf(path, sizeof path, "%s/" CKPT__HALT_FILE, dir);
    snprintf(victim, sizeof victim, "%s/victim", out);
    write_text(victim, "mpickpt halt request v1\nafter=1\n", 32);

    ckpt__halt h = { 5, 6 }, r;
    CHECK_RC(ckpt__halt_read(&r, dir), CKPT_ENOTFOUND);
    CHECK_OK(ckpt__halt_write(dir, &h));
    CHECK_OK(ckpt__halt_read(&r, dir));
    CHECK_EQ_INT(r.after, 5);
    CHECK_EQ_INT(r.requested, 6);
    ckpt__halt h2 = { 9, -1 };
    CHECK_OK(ckpt__halt_write(dir, &h2)); /* replaces */
    CHECK_OK(ckpt__halt_read(&r, dir));
    CHECK_EQ_INT(r.after, 9);
    CHECK_EQ_INT(r.requested, -1);

    /* gc keeps the request and removes the temp file of an interrupted write */
    char tmp[4300];
    snprintf(tmp, sizeof tmp, "%s/" CKPT__HALT_FILE ".tmp-0123456789abcdef", dir);
    write_text(tmp, "x", 1);
    ckpt_state *st = NULL;
    CHECK_OK(ckpt_state_new(&st));
    CHECK_OK(ckpt__state_write(st, dir)); /* a checkpoint directory: gc acts */
    ckpt_state_free(st);
    size_t removed = 0;
    CHECK_OK(ckpt_gc(dir, 0, NULL, NULL, &removed));
    CHECK_EQ_INT(removed, 1);
    CHECK(!exists(tmp));
    CHECK(exists(path));

    /* clear, then clear again */
    int gone = 0;
    CHECK_OK(ckpt__halt_clear(dir, &gone));
    CHECK_EQ_INT(gone, 1);
    CHECK(!exists(path));
    CHECK_OK(ckpt__halt_clear(dir, &gone));
    CHECK_EQ_INT(gone, 0);

    /* a planted link to a valid request elsewhere: refused, not followed; clear removes the
     * link, not its target; a write replaces the link, never writes through it */
    CHECK(symlink(victim, path) == 0);
    CHECK_RC(ckpt__halt_read(&r, dir), CKPT_ECORRUPT);
    CHECK_OK(ckpt__halt_write(dir, &h));
    struct stat sb;
    CHECK(lstat(path, &sb) == 0 && S_ISREG(sb.st_mode));
    FILE *f = fopen(victim, "rb");
    size_t n = f ? fread(buf, 1, sizeof buf, f) : 0;
    if (f)
        fclose(f);
    CHECK_EQ_INT(n, 32); /* the victim is unchanged */
    CHECK(unlink(path) == 0 && symlink(victim, path) == 0);
    CHECK_OK(ckpt__halt_clear(dir, &gone));
    CHECK_EQ_INT(gone, 1);
    CHECK(!exists(path) && exists(victim));

    /* a FIFO: refused at once (a reader that opened it would block until the alarm) */
    CHECK(mkfifo(path, 0644) == 0);
    CHECK_RC(ckpt__halt_read(&r, dir), CKPT_ECORRUPT);
    CHECK(ckpt_error_last() && strstr(ckpt_error_last()->message, "FIFO"));
    CHECK_OK(ckpt__halt_clear(dir, &gone));
    CHECK_EQ_INT(gone, 1);

    /* huge: refused by its size */
    memset(buf, 'a', sizeof buf);
    memcpy(buf, "mpickpt halt request v1\nafter=1\n", 32);
    write_text(path, buf, sizeof buf);
    CHECK_RC(ckpt__halt_read(&r, dir), CKPT_ECORRUPT);
    CHECK(ckpt_error_last() && strstr(ckpt_error_last()->message, "more than"));
    /* garbage */
    write_text(path, "\x89HDF\r\n\x1a\n garbage", 17);
    CHECK_RC(ckpt__halt_read(&r, dir), CKPT_ECORRUPT);
    CHECK(unlink(path) == 0);
    /* a directory under the name: refused, and clear leaves it alone with an error */
    CHECK(mkdir(path, 0755) == 0);
    CHECK_RC(ckpt__halt_read(&r, dir), CKPT_ECORRUPT);
    CHECK_RC(ckpt__halt_clear(dir, &gone), CKPT_ECORRUPT);
    CHECK(exists(path));
    CHECK(rmdir(path) == 0);

    /* which directory: DIR itself, DIR/chief when it exists, a chief link refused, a missing
     * DIR (a job not started yet) is DIR, not an error */
    char sd[4200], work[4096], chief[4200];
    int ex = -1;
    CHECK_OK(ckpt__halt_dir(sd, sizeof sd, dir, &ex));
    CHECK(!strcmp(sd, dir) && ex == 1);
    snprintf(work, sizeof work, "%s/train", out);
    snprintf(chief, sizeof chief, "%s/chief", work);
    CHECK_OK(ckpt__mkdir_p(chief, 0755));
    CHECK_OK(ckpt__halt_dir(sd, sizeof sd, work, &ex));
    CHECK(!strcmp(sd, chief) && ex == 1);
    CHECK_OK(ckpt__halt_write(sd, &h)); /* through DIR/chief's rules */
    CHECK_OK(ckpt__halt_read(&r, chief));
    CHECK_EQ_INT(r.after, 5);
    /* find: DIR/chief's first, else DIR's own (made before chief/ existed), with where */
    char where[4200] = "";
    CHECK_OK(ckpt__halt_find(&r, where, sizeof where, work));
    CHECK(!strcmp(where, chief) && r.after == 5);
    CHECK_OK(ckpt__halt_clear(chief, &gone));
    CHECK_RC(ckpt__halt_find(&r, where, sizeof where, work), CKPT_ENOTFOUND);
    CHECK_OK(ckpt__halt_write(work, &h2));
    CHECK_OK(ckpt__halt_find(&r, where, sizeof where, work));
    CHECK(!strcmp(where, work) && r.after == 9);
    CHECK_OK(ckpt__halt_write(chief, &h));
    CHECK_OK(ckpt__halt_find(&r, where, sizeof where, work)); /* chief/'s counts first */
    CHECK(!strcmp(where, chief) && r.after == 5);
        char linked[4096], lchief[4200];
    snprintf(linked, sizeof linked, "%s/linked", out);
    snprintf(lchief, sizeof lchief, "%s/chief", linked);
    CHECK_OK(ckpt__mkdir_p(linked, 0755));
    CHECK(symlink(dir, lchief) == 0);
    CHECK_RC(ckpt__halt_dir(sd, sizeof sd, linked, &ex), CKPT_ECORRUPT);
    CHECK_RC(ckpt__halt_read(&r, lchief), CKPT_ECORRUPT); /* a chief link is never opened */
    char missing[4200];
    snprintf(missing, sizeof missing, "%s/not-yet", out);
    CHECK_OK(ckpt__halt_dir(sd, sizeof sd, missing, &ex));
    CHECK(!strcmp(sd, missing) && ex == 0);
    CHECK_RC(ckpt__halt_find(&r, NULL, 0, missing), CKPT_ENOTFOUND);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: test_halt OUTDIR\n");
        return 2;
    }
    alarm(60); /* a read blocked on the FIFO ends the test */
    test_parse();
    test_files(argv[1]);
    return CHECK_DONE();
}
