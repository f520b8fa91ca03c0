/*
 * The saver's borrowers (mpi/saver.c; not installed): the one saver internal the manager still
 * calls (mpi/manager_internal.h includes this header, not mpi_internal.h). A borrower is told when
 * the saver it uses is freed, and withdraws its commit hook when it goes away first.
 */
#ifndef MPICKPT_SAVER_BORROW_H
#define MPICKPT_SAVER_BORROW_H

struct ckpt_saver;

/* A borrower of the saver (a manager): `gone(payload)` is called when the saver is freed, so the
 * borrower never touches it afterwards. */
int ckpt__saver_attach(struct ckpt_saver *s, void (*gone)(void *payload), void *payload);

/* The borrower `payload` is going away: a save in flight whose commit hook calls it is waited for
 * (ckpt_saver_wait: its failure kept for the next save, sync or close). Returns 1, having
 * withdrawn nothing, when the saver was closed with that save still running and its hook may
 * still call the borrower (the borrower must then stay allocated); else 0, detached. */
int ckpt__saver_detach(struct ckpt_saver *s, void *payload);

#endif
