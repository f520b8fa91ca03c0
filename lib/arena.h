/* Internal: a bump allocator for protobuf-c's unpack of many small messages. */
#ifndef MPICKPT_ARENA_H
#define MPICKPT_ARENA_H

#include <protobuf-c/protobuf-c.h>

#pragma GCC visibility push(default)

/*
 * protobuf-c's unpack makes one malloc per message, string and repeated field: about ten per
 * index piece, half of the chief's unpack time at 1M pieces. An arena hands out memory from a few
 * large chunks and frees them all at once. Everything unpacked with ckpt__arena_allocator(a) is
 * released by ckpt__arena_free(a) and by nothing else (its per-object free does nothing, so
 * *__free_unpacked() on such a message is harmless but frees nothing). Not thread-safe.
 */
typedef struct ckpt__arena ckpt__arena;

/* NULL when out of memory. */
ckpt__arena *ckpt__arena_new(void);

/* The allocator to pass to *__unpack(); valid until ckpt__arena_free(a). */
ProtobufCAllocator *ckpt__arena_allocator(ckpt__arena *a);

/* Frees every chunk; NULL is a no-op. */
void ckpt__arena_free(ckpt__arena *a);

#pragma GCC visibility pop

#endif
