#include "arena.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>

/* Chunks start small (a save of a few tensors stays small) and double up to a cap, so a large
 * unpack takes a few dozen mallocs instead of millions. */
#define ARENA_FIRST_CHUNK ((size_t)64 << 10)
#define ARENA_MAX_CHUNK ((size_t)64 << 20)

/* From this size on, ckpt__malloc_huge asks for transparent huge pages (arena.h). */
#define ARENA_HUGE_CHUNK ((size_t)4 << 20)

void *ckpt__malloc_huge(size_t n)
{
    void *p = malloc(n ? n : 1);
#ifdef MADV_HUGEPAGE
    uintptr_t lo = ((uintptr_t)p + 4095) & ~(uintptr_t)4095;
    uintptr_t hi = ((uintptr_t)p + n) & ~(uintptr_t)4095;
    if (p && n >= ARENA_HUGE_CHUNK && hi > lo)
        (void)madvise((void *)lo, hi - lo, MADV_HUGEPAGE); /* a refusal costs nothing */
#endif
    return p;
}

typedef struct arena_chunk {
    struct arena_chunk *next;
    size_t used, size;
    max_align_t data[]; /* every allocation is aligned for any type, as malloc's are */
} arena_chunk;

struct ckpt__arena {
    ProtobufCAllocator allocator; /* allocator_data points back at this arena */
    arena_chunk *head;            /* the chunk being filled; older ones follow */
    size_t next_size;
};

static void *arena_alloc(void *data, size_t n)
{
    ckpt__arena *a = data;
    const size_t align = _Alignof(max_align_t);
    if (n > SIZE_MAX / 2)
        return NULL;
    n = n ? (n + align - 1) & ~(align - 1) : align;
    arena_chunk *c = a->head;
    if (!c || c->size - c->used < n) {
        size_t size = n > a->next_size ? n : a->next_size;
        c = ckpt__malloc_huge(sizeof *c + size);
        if (!c)
            return NULL;
        c->next = a->head;
        c->used = 0;
        c->size = size;
        a->head = c;
        if (a->next_size < ARENA_MAX_CHUNK)
            a->next_size *= 2;
    }
    void *p = (unsigned char *)c->data + c->used;
    c->used += n;
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
