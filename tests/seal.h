/* seal.h - a model file of format 2 read and sealed again as docs/FORMATS.md describes it, for
   the tests and the model fuzzer: after an edit, v2_reseal writes every checksum again, so that
   the checks behind the checksums are reached. The hash is the caller's (the library's own). */
#ifndef MFM_TESTS_SEAL_H
#define MFM_TESTS_SEAL_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { SEAL_DIRECTORY_AT = 236, SEAL_FIELDS_BYTES = 244, SEAL_ALIGN = 4096, SEAL_CHUNK = 1 << 20 }; /* the header's u64 directory offset; its checksum */

static uint64_t seal_load_le(const unsigned char *p, int bytes) {
    uint64_t x = 0;
    while (bytes--) x = x << 8 | p[bytes];
    return x;
}

static void seal_store_le(unsigned char *p, uint64_t x, int bytes) {
    int i;
    for (i = 0; i < bytes; i++) p[i] = (unsigned char)(x >> (8 * i));
}

static uint64_t seal_align_up(uint64_t x) { return (x + SEAL_ALIGN - 1) / SEAL_ALIGN * SEAL_ALIGN; }

/* A format-2 file's directory, read as docs/FORMATS.md lays it out. */
typedef struct v2_section {
    uint32_t kind, tensor, stride, flags;
    uint64_t offset, bytes;
} v2_section;

typedef struct v2_layout {
    uint64_t directory, n_sections;
    v2_section s[8];
} v2_layout;

static int v2_read(const unsigned char *b, size_t n, v2_layout *L) {
    uint64_t i;
    memset(L, 0, sizeof *L);
    if (n < SEAL_FIELDS_BYTES + 8 + 16) return 0;
    L->directory = seal_load_le(b + SEAL_DIRECTORY_AT, 8);
    if (L->directory > n - 16) return 0;
    L->n_sections = seal_load_le(b + L->directory, 4);
    if (L->n_sections > 8 || L->directory + 8 + 40 * L->n_sections + 8 != n) return 0;
    for (i = 0; i < L->n_sections; i++) {
        const unsigned char *e = b + L->directory + 8 + 40 * i;
        L->s[i].kind = (uint32_t)seal_load_le(e, 4), L->s[i].tensor = (uint32_t)seal_load_le(e + 4, 4), L->s[i].stride = (uint32_t)seal_load_le(e + 8, 4);
        L->s[i].flags = (uint32_t)seal_load_le(e + 12, 4), L->s[i].offset = seal_load_le(e + 16, 8), L->s[i].bytes = seal_load_le(e + 24, 8);
        if (L->s[i].offset > L->directory || L->s[i].bytes > L->directory - L->s[i].offset ||
            seal_align_up(L->s[i].bytes) > L->directory - L->s[i].offset)
            return 0; /* a section outside the file: nothing to seal */
    }
    return 1;
}

/* Writes every checksum of a format-2 file again after an edit: the header's, each section's
   (the hash of its 1 MB chunks' hashes, padding included), and the one of the header part and
   the directory. Returns 0 when the directory cannot be read. */
static int v2_reseal(unsigned char *b, size_t n, uint64_t (*hash)(const void *, size_t)) {
    v2_layout L;
    uint64_t i, header_end;
    unsigned char *joined;
    if (!v2_read(b, n, &L)) return 0;
    seal_store_le(b + SEAL_FIELDS_BYTES, hash(b, SEAL_FIELDS_BYTES), 8);
    for (i = 0; i < L.n_sections; i++) {
        const uint64_t span = seal_align_up(L.s[i].bytes), chunks = (span + SEAL_CHUNK - 1) / SEAL_CHUNK;
        unsigned char *hashes = (unsigned char *)malloc(8 * chunks);
        uint64_t c;
        for (c = 0; c < chunks; c++)
            seal_store_le(hashes + 8 * c, hash(b + L.s[i].offset + c * SEAL_CHUNK, (size_t)(span - c * SEAL_CHUNK < SEAL_CHUNK ? span - c * SEAL_CHUNK : SEAL_CHUNK)), 8);
        seal_store_le(b + L.directory + 8 + 40 * i + 32, hash(hashes, 8 * chunks), 8);
        free(hashes);
    }
    header_end = L.n_sections ? L.s[0].offset : L.directory;
    joined = (unsigned char *)malloc((size_t)(header_end + (n - 8 - L.directory)));
    memcpy(joined, b, (size_t)header_end);
    memcpy(joined + header_end, b + L.directory, (size_t)(n - 8 - L.directory));
    seal_store_le(b + n - 8, hash(joined, (size_t)(header_end + (n - 8 - L.directory))), 8);
    free(joined);
    return 1;
}

#endif
