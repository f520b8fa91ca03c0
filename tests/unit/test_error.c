/* Unit test of the status codes and thread-local error messages. */
#include "check.h"
#include "internal.h"
#include "mpickpt.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>

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
