/* Unit test of the status codes and thread-local error messages. */
#include "check.h"
#include "fsutil.h"
#include "internal.h"
#include "mpickpt.h"
#include "restart.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

/* issue 30: ckpt_error.sys_errno */
static void test_sys_errno(void)
{
    /* the errno whose strerror() the message shows after ": " */
    errno = EROFS;
    ckpt__error(CKPT_EIO, "mkdir %s: %s", "/x", strerror(EROFS));
    CHECK_EQ_INT(ckpt_error_last()->sys_errno, EROFS);
    CHECK_EQ_INT(errno, EROFS); /* left as it was */
    /* a stale errno the message does not show is not taken */
    errno = EACCES;
    ckpt__error(CKPT_EIO, "short read of %s", "/x");
    CHECK_EQ_INT(ckpt_error_last()->sys_errno, 0);
    errno = EACCES;
    ckpt__error(CKPT_EIO, "name %s", strerror(EACCES)); /* not after ": " */
    CHECK_EQ_INT(ckpt_error_last()->sys_errno, 0);
    /* explicit, for a saved errno; only for the current error's code */
    errno = 0;
    ckpt__error(CKPT_EIO, "open %s: %s", "/x", strerror(EPERM));
    CHECK_EQ_INT(ckpt_error_last()->sys_errno, 0);
    CHECK_EQ_INT(ckpt__error_set_errno(CKPT_EIO, EPERM), CKPT_EIO);
    CHECK_EQ_INT(ckpt_error_last()->sys_errno, EPERM);
    ckpt__error_set_errno(CKPT_ENOSPC, EIO); /* another code: no change */
    CHECK_EQ_INT(ckpt_error_last()->sys_errno, EPERM);
    /* a wrap keeps it; a new error and a clear reset it */
    ckpt__error_wrap(CKPT_EIO, "rank %d", 3);
    CHECK_EQ_INT(ckpt_error_last()->sys_errno, EPERM);
    CHECK(strncmp(ckpt_error_last()->message, "rank 3: open /x: ", 17) == 0);
    errno = 0;
    ckpt__error(CKPT_ENOSPC, "no space left for %s", "/x"); /* ENOSPC at least */
    CHECK_EQ_INT(ckpt_error_last()->sys_errno, ENOSPC);
    errno = EDQUOT;
    ckpt__error(CKPT_ENOSPC, "write %s: %s", "/x", strerror(EDQUOT));
    CHECK_EQ_INT(ckpt_error_last()->sys_errno, EDQUOT);
    ckpt_error_clear();
    CHECK(ckpt_error_last() == NULL);
    ckpt__error(CKPT_EINVAL, "bad");
    CHECK_EQ_INT(ckpt_error_last()->sys_errno, 0);
    ckpt_error_clear();
}

/* issue 31: ckpt_error.reason */
static void test_reason(void)
{
    ckpt__error(CKPT_ENOTFOUND, "no tensor '%s'", "x");
    CHECK_EQ_INT(ckpt_error_last()->reason, CKPT_REASON_NONE); /* none unless given */
    CHECK_EQ_INT(ckpt__error_set_reason(CKPT_ENOTFOUND, CKPT_REASON_NO_TENSOR), CKPT_ENOTFOUND);
    CHECK_EQ_INT(ckpt_error_last()->reason, CKPT_REASON_NO_TENSOR);
    CHECK_EQ_INT(ckpt__error_reason(CKPT_ENOTFOUND), CKPT_REASON_NO_TENSOR);
    CHECK_EQ_INT(ckpt__error_reason(CKPT_EIO), CKPT_REASON_NONE); /* another code */
    ckpt__error_set_reason(CKPT_EIO, CKPT_REASON_PINNED);            /* another code: no change */
    CHECK_EQ_INT(ckpt_error_last()->reason, CKPT_REASON_NO_TENSOR);
    ckpt__error_wrap(CKPT_ENOTFOUND, "rank %d", 1); /* a wrap keeps it */
    CHECK_EQ_INT(ckpt_error_last()->reason, CKPT_REASON_NO_TENSOR);
    ckpt__error(CKPT_ENOTFOUND, "again"); /* a new error resets it */
    CHECK_EQ_INT(ckpt_error_last()->reason, CKPT_REASON_NONE);
    ckpt__error_set_reason(CKPT_ENOTFOUND, CKPT_REASON_PINNED);
    ckpt_error_clear();
    ckpt__error(CKPT_ENOTFOUND, "after a clear");
    CHECK_EQ_INT(ckpt_error_last()->reason, CKPT_REASON_NONE);
    CHECK(strcmp(ckpt_reason_name(CKPT_REASON_NO_CHECKPOINT), "no checkpoint") == 0);
    CHECK(strcmp(ckpt_reason_name(CKPT_REASON_PINNED), "pinned") == 0);
    ckpt_error_clear();
}

/* issue 31: a helper that answers yes/no, or takes a missing file for an empty answer, leaves the
 * caller's pending error as it was (they used to clear it); with none pending, none is left. */
static void test_pending_survives(void)
{
    const char *tmp = getenv("MPICKPT_TEST_DIR") ? getenv("MPICKPT_TEST_DIR") : "/tmp";
    char missing[4200], deep[4300];
    snprintf(missing, sizeof missing, "%s/no-such-dir-%d", tmp, (int)getpid());
    snprintf(deep, sizeof deep, "%s/a/b", missing);
    errno = EACCES;
    ckpt__error(CKPT_EIO, "write %s: %s", "/x/part", strerror(EACCES));
    ckpt__error_set_reason(CKPT_EIO, CKPT_REASON_NONE);
    CHECK_EQ_INT(ckpt__is_data_file(AT_FDCWD, missing), 0);  /* yes/no: no */
    CHECK_EQ_INT(ckpt__has_magic(AT_FDCWD, missing, "x", 1), 0);
    CHECK_EQ_INT(ckpt__rmtree(deep), CKPT_OK); /* no parent: nothing to remove */
    ckpt__restart c;
    CHECK_EQ_INT(ckpt__restart_read(&c, missing), CKPT_OK); /* no directory: no control */
    ckpt__restart_clear(&c);
    const ckpt_error *e = ckpt_error_last();
    CHECK(e != NULL);
    if (e) {
        CHECK_EQ_INT(e->code, CKPT_EIO);
        CHECK(strcmp(e->message, "write /x/part: Permission denied") == 0);
        CHECK_EQ_INT(e->sys_errno, EACCES);
    }
    ckpt_error_clear();
    CHECK_EQ_INT(ckpt__is_data_file(AT_FDCWD, missing), 0);
    CHECK_EQ_INT(ckpt__rmtree(deep), CKPT_OK);
    CHECK(ckpt_error_last() == NULL);
}

static void *other_thread(void *arg)
{
    (void)arg;
    /* A fresh thread starts with no error and its own message slot. */
    int ok = ckpt_error_last() == NULL;
    ckpt__error(CKPT_EIO, "thread error");
    return ok ? (void *)1 : NULL;
}

int main(void)
{
    CHECK(strcmp(ckpt_version(), CKPT_VERSION_STRING) == 0);
    test_sys_errno();
    test_reason();
    test_pending_survives();
    CHECK(strcmp(ckpt_strerror(CKPT_OK), "success") == 0);
    CHECK(strcmp(ckpt_strerror(CKPT_ECORRUPT), "corrupt data") == 0);
    CHECK(strcmp(ckpt_strerror(12345), "unknown error") == 0);
    for (int c = CKPT_OK; c >= CKPT_EBUSY; c--)
        CHECK_MSG(strcmp(ckpt_strerror(c), "unknown error") != 0, "code %d has no text", c);

    ckpt_error_clear();
    CHECK(ckpt_error_last() == NULL);
    CHECK_EQ_INT(ckpt__error(CKPT_ECORRUPT, "bad %s at %d", "file.h5", 7), CKPT_ECORRUPT);
    const ckpt_error *e = ckpt_error_last();
    CHECK(e != NULL && e->code == CKPT_ECORRUPT);
    CHECK(e != NULL && strcmp(e->message, "bad file.h5 at 7") == 0);

    CHECK_EQ_INT(ckpt__error_wrap(CKPT_ECORRUPT, "tensor %s", "w"), CKPT_ECORRUPT);
    e = ckpt_error_last();
    CHECK(e != NULL && strcmp(e->message, "tensor w: bad file.h5 at 7") == 0);

    pthread_t t;
    void *res = NULL;
    CHECK(pthread_create(&t, NULL, other_thread, NULL) == 0);
    CHECK(pthread_join(t, &res) == 0);
    CHECK(res == (void *)1);
    e = ckpt_error_last();
    CHECK(e != NULL && e->code == CKPT_ECORRUPT); /* untouched by the other thread */

    /* a held directory is named in messages by its name, not by /proc/self/fd/<n> */
    ckpt__error_alias("/proc/self/fd/12", "/dev/shm/u/ckpt/0/mpickpt-ab");
    ckpt__error(CKPT_EIO, "open /proc/self/fd/12/x and /proc/self/fd/123/y, /proc/self/fd/12");
    e = ckpt_error_last();
    CHECK_MSG(e && strcmp(e->message, "open /dev/shm/u/ckpt/0/mpickpt-ab/x and "
                                      "/proc/self/fd/123/y, /dev/shm/u/ckpt/0/mpickpt-ab") == 0,
              "message: %s", e ? e->message : "");
    ckpt__error_alias("/proc/self/fd/12", NULL);
    ckpt__error(CKPT_EIO, "open /proc/self/fd/12/x");
    e = ckpt_error_last();
    CHECK(e && strcmp(e->message, "open /proc/self/fd/12/x") == 0);

    size_t s;
    CHECK(ckpt__mul_size(&s, SIZE_MAX / 2, 3) == -1);
    CHECK(ckpt__mul_size(&s, 1000, 1000) == 0 && s == 1000000);
    CHECK(ckpt__add_size(&s, SIZE_MAX, 1) == -1);
    return CHECK_DONE();
}
