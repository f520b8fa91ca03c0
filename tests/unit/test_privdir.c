/* lib/privdir.h and lib/identity.h (docs/security.md "Node-local caches"): the walk that opens a
 * node cache directory, against what another user (uid 65534, made the owner with chown: this
 * test runs as root; without root the cases that need another owner are skipped) plants on the
 * way, and a checkpoint directory's identity file.
 *
 *   test_privdir OUTDIR
 *
 * Cases: a fresh path made 0700; the last component a link (refused, even this user's); a link
 * of this user's on the way followed, its target walked step by step (a target below another
 * user's directory refused, a target inside the avoided directory refused before anything is made
 * in it); a link another user owns refused; ancestors of another user, writable by others without
 * the sticky bit (refused), sticky (accepted); the directory itself another user's or writable by
 * others (refused, naming owner and mode); "." and ".." in the path; relative paths;
 * ckpt__dir_within; the identity made once, read back, refused when damaged or a FIFO (without
 * blocking), a new one for a copied directory. */
#include "check.h"

#include "identity.h"
#include "privdir.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define OTHER 65534

static char g_out[2048];
static int g_root;

static const char *P(const char *fmt, const char *a)
{
    static char buf[8][4096];
    static int i;
    char *b = buf[i++ % 8];
    snprintf(b, sizeof buf[0], "%s/", g_out);
    snprintf(b + strlen(b), sizeof buf[0] - strlen(b), fmt, a);
    return b;
}

static const char *msg(void)
{
    const ckpt_error *e = ckpt_error_last();
    return e && e->message ? e->message : "";
}

static int mode_of(const char *p)
{
    struct stat st;
    return lstat(p, &st) == 0 ? (int)(st.st_mode & 07777) : -1;
}

static int entries(const char *dir)
{
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "test $(ls -A '%s' | wc -l) -eq 0", dir);
    return system(cmd) == 0 ? 0 : 1;
}

/* opens `path`: the status, and (when it opened) the descriptor closed */
static int try_open(const char *path, const struct stat *avoid)
{
    int fd = -1;
    int rc = ckpt__private_dir_open(&fd, path, avoid, "the avoided directory");
    if (rc == CKPT_OK)
        close(fd);
    else
        CHECK_MSG(fd == -1, "%s: a descriptor on failure", path);
    return rc;
}

static void test_plain(void)
{
    const char *p = P("%s", "a/b/c");
    CHECK_OK(try_open(p, NULL));
    CHECK_EQ_INT(mode_of(p), 0700);
    CHECK_EQ_INT(mode_of(P("%s", "a/b")), 0700);
    CHECK_OK(try_open(p, NULL)); /* existing: the same */
    CHECK_OK(try_open(P("%s", "a/./b//c/"), NULL));
    CHECK_OK(try_open(P("%s", "a/b/../b/c"), NULL));
    /* relative to the working directory */
    char cwd[4096];
    CHECK(getcwd(cwd, sizeof cwd) != NULL);
    CHECK(chdir(g_out) == 0);
    CHECK_OK(try_open("rel/x", NULL));
    CHECK_OK(try_open("./rel/x", NULL));
    CHECK(symlink("rel", "rel-link") == 0);
    CHECK_RC(try_open("rel-link", NULL), CKPT_EINVAL);
    CHECK_MSG(strstr(msg(), "rel-link: it is a symbolic link") != NULL, "message: %s", msg());
    CHECK(chdir(cwd) == 0);
    CHECK_RC(try_open("", NULL), CKPT_EINVAL);
    CHECK_RC(try_open("/", NULL), CKPT_EINVAL);
}

static void test_links(void)
{
    /* the last component: never, even this user's own */
    CHECK(mkdir(P("%s", "target"), 0700) == 0);
    CHECK(symlink(P("%s", "target"), P("%s", "last-link")) == 0);
    CHECK_RC(try_open(P("%s", "last-link"), NULL), CKPT_EINVAL);
    CHECK_MSG(strstr(msg(), "symbolic link") != NULL, "message: %s", msg());
    /* on the way, this user's link is followed, relative and absolute */
    CHECK(symlink("target", P("%s", "rel-way")) == 0);
    CHECK(symlink(P("%s", "target"), P("%s", "abs-way")) == 0);
    CHECK_OK(try_open(P("%s", "rel-way/sub"), NULL));
    CHECK_OK(try_open(P("%s", "abs-way/sub2"), NULL));
    struct stat st;
    CHECK(stat(P("%s", "target/sub"), &st) == 0 && S_ISDIR(st.st_mode));
    CHECK(stat(P("%s", "target/sub2"), &st) == 0 && S_ISDIR(st.st_mode));
    /* a loop of links ends */
    CHECK(symlink("loop-b", P("%s", "loop-a")) == 0);
    CHECK(symlink("loop-a", P("%s", "loop-b")) == 0);
    CHECK_RC(try_open(P("%s", "loop-a/x"), NULL), CKPT_EINVAL);
    /* a link into the avoided directory: refused before anything is made inside it */
    CHECK(mkdir(P("%s", "persistent"), 0755) == 0);
    CHECK(symlink(P("%s", "persistent"), P("%s", "into")) == 0);
    struct stat avoid;
    CHECK(stat(P("%s", "persistent"), &avoid) == 0);
    CHECK_RC(try_open(P("%s", "into/cache/0"), &avoid), CKPT_EINVAL);
    CHECK_MSG(strstr(msg(), "inside the persistent directory") != NULL, "message: %s", msg());
    CHECK_MSG(entries(P("%s", "persistent")) == 0, "something was made in the avoided directory");
    CHECK_RC(try_open(P("%s", "persistent"), &avoid), CKPT_EINVAL);
    CHECK_MSG(strstr(msg(), "the same as") != NULL, "message: %s", msg());
    CHECK_OK(try_open(P("%s", "beside/0"), &avoid));
    if (!g_root)
        return;
    /* a link another user made is not followed */
    CHECK(symlink(P("%s", "target"), P("%s", "their-link")) == 0);
    CHECK(lchown(P("%s", "their-link"), OTHER, OTHER) == 0);
    CHECK_RC(try_open(P("%s", "their-link/x"), NULL), CKPT_EINVAL);
    CHECK_MSG(strstr(msg(), "uid 65534 made") != NULL, "message: %s", msg());
    /* this user's link whose target lies below another user's directory: the target is walked
     * like any path, so that directory is refused */
    CHECK(mkdir(P("%s", "theirs"), 0755) == 0 && chown(P("%s", "theirs"), OTHER, OTHER) == 0);
    CHECK(mkdir(P("%s", "theirs/y"), 0700) == 0);
    CHECK(symlink(P("%s", "theirs/y"), P("%s", "via")) == 0);
    CHECK_RC(try_open(P("%s", "via/x"), NULL), CKPT_EINVAL);
    CHECK_MSG(strstr(msg(), "belongs to uid 65534") != NULL, "message: %s", msg());
}

static void test_owners(void)
{
    if (!g_root) {
        printf("SKIP owners: needs root to stand for another user\n");
        return;
    }
    /* ancestors */
    CHECK(mkdir(P("%s", "open"), 0777) == 0 && chmod(P("%s", "open"), 0777) == 0);
    CHECK_RC(try_open(P("%s", "open/c"), NULL), CKPT_EINVAL);
    CHECK_MSG(strstr(msg(), "without the sticky bit") != NULL, "message: %s", msg());
    CHECK(chmod(P("%s", "open"), 01777) == 0);
    CHECK_OK(try_open(P("%s", "open/c"), NULL));
    CHECK(mkdir(P("%s", "other"), 0755) == 0 && chown(P("%s", "other"), OTHER, OTHER) == 0);
    CHECK(mkdir(P("%s", "other/c"), 0700) == 0);
    CHECK_RC(try_open(P("%s", "other/c"), NULL), CKPT_EINVAL);
    CHECK_MSG(strstr(msg(), "belongs to uid 65534") != NULL, "message: %s", msg());
    /* the directory itself */
    CHECK(mkdir(P("%s", "open/theirs"), 0700) == 0 &&
          chown(P("%s", "open/theirs"), OTHER, OTHER) == 0);
    CHECK_RC(try_open(P("%s", "open/theirs"), NULL), CKPT_EINVAL);
    CHECK_MSG(strstr(msg(), "uid 65534") != NULL && strstr(msg(), "mode 0700") != NULL,
              "message: %s", msg());
    CHECK(mkdir(P("%s", "open/wide"), 0777) == 0 && chmod(P("%s", "open/wide"), 0777) == 0);
    CHECK_RC(try_open(P("%s", "open/wide"), NULL), CKPT_EINVAL);
    CHECK_MSG(strstr(msg(), "other users can write it") != NULL &&
                  strstr(msg(), "mode 0777") != NULL,
              "message: %s", msg());
    CHECK(chmod(P("%s", "open/wide"), 0755) == 0); /* readable is this user's choice */
    CHECK_OK(try_open(P("%s", "open/wide"), NULL));
    /* a subdirectory likewise */
    int fd = -1;
    CHECK_OK(ckpt__private_dir_open(&fd, P("%s", "open/c"), NULL, ""));
    int sub = -1;
    CHECK_OK(ckpt__private_subdir_open(&sub, fd, "mine", P("%s", "open/c")));
    CHECK_EQ_INT(mode_of(P("%s", "open/c/mine")), 0700);
    close(sub);
    CHECK(mkdir(P("%s", "open/c/theirs"), 0700) == 0 &&
          chown(P("%s", "open/c/theirs"), OTHER, OTHER) == 0);
    CHECK_RC(ckpt__private_subdir_open(&sub, fd, "theirs", P("%s", "open/c")), CKPT_EINVAL);
    CHECK(symlink("mine", P("%s", "open/c/link")) == 0);
    CHECK_RC(ckpt__private_subdir_open(&sub, fd, "link", P("%s", "open/c")), CKPT_EINVAL);
    CHECK(mkfifo(P("%s", "open/c/fifo"), 0600) == 0);
    CHECK_RC(ckpt__private_subdir_open(&sub, fd, "fifo", P("%s", "open/c")), CKPT_EINVAL);
    close(fd);
}

static void test_within(void)
{
    int a = -1, b = -1;
    CHECK_OK(ckpt__private_dir_open(&a, P("%s", "w/x/y"), NULL, ""));
    CHECK_OK(ckpt__private_dir_open(&b, P("%s", "w"), NULL, ""));
    struct stat sa, sb;
    CHECK(fstat(a, &sa) == 0 && fstat(b, &sb) == 0);
    CHECK_EQ_INT(ckpt__dir_within(a, &sb), 1);
    CHECK_EQ_INT(ckpt__dir_within(a, &sa), 1);
    CHECK_EQ_INT(ckpt__dir_within(b, &sa), 0);
    close(a);
    close(b);
}

static void test_identity(void)
{
    const char *d = P("%s", "ident");
    CHECK(mkdir(d, 0755) == 0);
    int fd = open(d, O_RDONLY | O_DIRECTORY);
    char id[CKPT__IDENTITY_HEX + 1], again[CKPT__IDENTITY_HEX + 1];
    CHECK_RC(ckpt__identity_get(id, fd, d, 0), CKPT_ENOTFOUND);
    CHECK_OK(ckpt__identity_get(id, fd, d, 1));
    CHECK_EQ_INT((int)strlen(id), CKPT__IDENTITY_HEX);
    CHECK_OK(ckpt__identity_get(again, fd, d, 1));
    CHECK_MSG(strcmp(id, again) == 0, "identity changed: %s, %s", id, again);
    char sub[64];
    snprintf(sub, sizeof sub, "mpickpt-%s", id);
    CHECK(ckpt__is_cache_subdir(sub));
    CHECK(!ckpt__is_cache_subdir("mpickpt-xyz"));
    /* a copy of the directory (another inode): a new identity, the old one not adopted */
    const char *copy = P("%s", "ident-copy");
    CHECK(mkdir(copy, 0755) == 0);
    char cmd[8400];
    snprintf(cmd, sizeof cmd, "cp -p '%s/identity' '%s/identity'", d, copy);
    CHECK(system(cmd) == 0);
    int cfd = open(copy, O_RDONLY | O_DIRECTORY);
    CHECK_OK(ckpt__identity_get(again, cfd, copy, 1));
    CHECK_MSG(strcmp(id, again) != 0, "the copy kept the identity %s", id);
    CHECK_OK(ckpt__identity_get(sub, cfd, copy, 0));
    CHECK_MSG(strcmp(sub, again) == 0, "the copy's new identity was not kept");
    close(cfd);
    /* damaged: a clear error, nothing replaced */
    char p[4200];
    snprintf(p, sizeof p, "%s/identity", d);
    FILE *f = fopen(p, "w");
    CHECK(f && fputs("mpickpt-identity not-hex\n", f) >= 0);
    if (f)
        fclose(f);
    CHECK_RC(ckpt__identity_get(id, fd, d, 1), CKPT_ECORRUPT);
    CHECK_MSG(strstr(msg(), "identity") != NULL, "message: %s", msg());
    CHECK(unlink(p) == 0 && mkfifo(p, 0600) == 0);
    CHECK_RC(ckpt__identity_get(id, fd, d, 1), CKPT_ECORRUPT); /* and it did not block */
    CHECK(unlink(p) == 0 && symlink("/etc/passwd", p) == 0);
    CHECK_RC(ckpt__identity_get(id, fd, d, 1), CKPT_ECORRUPT);
    close(fd);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: test_privdir OUTDIR\n");
        return 2;
    }
    snprintf(g_out, sizeof g_out, "%s", argv[1]);
    mkdir(g_out, 0755);
    g_root = geteuid() == 0;
    test_plain();
    test_links();
    test_owners();
    test_within();
    test_identity();
    return CHECK_DONE();
}
