#include "arena.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

/* Chunks start small (a save of a few tensors stays small) and double up to a cap, so a large
 * unpack takes a few dozen mallocs instead of millions. */
#define ARENA_FIRST_CHUNK ((size_t)64 << 10)
#define ARENA_MAX_CHUNK ((size_t)64 << 20)

typedef struct arena_chunk {
    struct arena_chunk *next;
    size_t used, size;
    max_align_t data[]; /* aligned for any type; allocations inside as arena_alloc says */
} arena_chunk;

struct ckpt__arena {
    ProtobufCAllocator allocator; /* allocator_data points back at this arena */
    arena_chunk *head;            /* the chunk being filled; older ones follow */
    size_t next_size;
};

/*
 * An object of n bytes is aligned to the largest power of two that divides n, at most 8: the
 * alignment of any type divides its size, so an object (or array) of a type with that size is
 * aligned for it, and protobuf-c allocates nothing that needs more than 8 (its widest scalars are
 * int64, double and pointers). Strings thus pack byte to byte instead of every allocation
 * taking a multiple of 16: about 7% less memory for an unpacked index (30-35 bytes per piece).
 */
static void *arena_alloc(void *data, size_t n)
{
    ckpt__arena *a = data;
    if (n > SIZE_MAX / 2)
        return NULL;
    size_t align = n ? n & -n : 1;
    if (align > 8)
        align = 8;
    n = n ? n : 1; /* distinct objects get distinct addresses */
    arena_chunk *c = a->head;
    size_t pad = c ? (align - c->used % align) % align : 0;
    if (!c || c->size - c->used < n + pad) {
        pad = 0; /* a chunk's data is aligned for any type */
        size_t size = n > a->next_size ? n : a->next_size;
        c = malloc(sizeof *c + size);
        if (!c)
            return NULL;
        c->next = a->head;
        c->used = 0;
        c->size = size;
        a->head = c;
        if (a->next_size < ARENA_MAX_CHUNK)
            a->next_size *= 2;
    }
    void *p = (unsigned char *)c->data + c->used + pad;
    c->used += pad + n;
    return p;
}

static void arena_free_one(void *data, void *p)
{
    (void)data; /* released with the whole arena */
    (void)p;
}

ckpt__arena *ckpt__arena_new(void)
{
    ckpt__arena *a = malloc(sizeof *a);
    if (!a)
        return NULL;
    a->allocator.alloc = arena_alloc;
    a->allocator.free = arena_free_one;
    a->allocator.allocator_data = a;
    a->head = NULL;
    a->next_size = ARENA_FIRST_CHUNK;
    return a;
}

ProtobufCAllocator *ckpt__arena_allocator(ckpt__arena *a)
{
    return &a->allocator;
}

void ckpt__arena_free(ckpt__arena *a)
{
    if (!a)
        return;
    while (a->head) {
        arena_chunk *c = a->head;
        a->head = c->next;
        free(c);
    }
    free(a);
}
