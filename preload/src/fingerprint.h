/* Fingerprints of the static CUDA runtime, shared by the audit library (`audit.c`: stripped
 * shared objects) and `libcrum_libc.so` (`static_runtime.c`: a stripped executable that
 * `crum run` did not start itself, e.g. one a script executes). The fingerprints `crum run`
 * knows (cli/src/fingerprint.rs, its text form, all versions one after the other) are in the
 * file `CRUM_CUDART_FINGERPRINTS` names. The rule is the Rust one: the anchor's hits in the
 * object's executable segments, at each every entry point's bytes hashed (FNV-1a 64,
 * relocated bytes as zero) at its offset; accepted where all match, at one position only.
 * Names, masks and numbers are read from the mapped file in place. Include after
 * `elf_patch.h`. */
#ifndef CRUM_FINGERPRINT_H
#define CRUM_FINGERPRINT_H

#include <stdlib.h>

#define FP_ANCHOR 48

struct fp_func {
    const char *name, *mask; /* in the file: "name ", "start+len,...|-" */
    size_t namelen;
    uint64_t off, size, hash;
};

struct fp {
    char version[64];
    uint64_t text_len, anchor_off;
    uint8_t anchor[FP_ANCHOR];
    struct fp_func *f;
    size_t n, cap;
};

static struct fp *fps;
static size_t nfps;

static int hexval(char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* Reads the fingerprint file once; 0 when there is none usable. */
static size_t load_fingerprints(void) {
    static int loaded;
    if (loaded) return nfps;
    loaded = 1;
    const char *path = getenv("CRUM_CUDART_FINGERPRINTS");
    if (!path) return 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0) return 0;
    if (fstat(fd, &st) != 0 || st.st_size <= 0) {
        close(fd);
        return 0;
    }
    void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (p == MAP_FAILED) return 0;
    /* The file ends with a newline; every field below stops at a space or newline. */
    const char *t = p, *end = t + st.st_size;
    struct fp *cur = NULL;
    while (t < end) {
        const char *nl = memchr(t, '\n', (size_t)(end - t));
        if (!nl) break;
        if (!strncmp(t, "crum-cudart-fingerprint ", 24)) {
            struct fp *grown = realloc(fps, (nfps + 1) * sizeof *fps);
            if (!grown) break;
            fps = grown;
            cur = &fps[nfps++];
            memset(cur, 0, sizeof *cur);
        } else if (cur && !strncmp(t, "version ", 8)) {
            size_t n = (size_t)(nl - t - 8);
            if (n >= sizeof cur->version) n = sizeof cur->version - 1;
            memcpy(cur->version, t + 8, n);
        } else if (cur && !strncmp(t, "text ", 5)) {
            cur->text_len = strtoull(t + 5, NULL, 16);
        } else if (cur && !strncmp(t, "anchor ", 7)) {
            char *q;
            cur->anchor_off = strtoull(t + 7, &q, 16);
            if (*q == ' ' && nl - q > 2 * FP_ANCHOR)
                for (int i = 0; i < FP_ANCHOR; i++) {
                    int hi = hexval(q[1 + 2 * i]), lo = hexval(q[2 + 2 * i]);
                    if (hi < 0 || lo < 0) break;
                    cur->anchor[i] = (uint8_t)(hi << 4 | lo);
                }
        } else if (cur && !strncmp(t, "f ", 2)) {
            struct fp_func fn = {.name = t + 2};
            const char *sp = memchr(fn.name, ' ', (size_t)(nl - fn.name));
            char *q;
            if (sp) {
                fn.namelen = (size_t)(sp - fn.name);
                fn.off = strtoull(sp + 1, &q, 16);
                fn.size = strtoull(q, &q, 16);
                fn.hash = strtoull(q, &q, 16);
                fn.mask = q + 1;
                if (*q == ' ' && fn.namelen < 128 && cur->n < 100000) {
                    if (cur->n == cur->cap) {
                        size_t cap = cur->cap ? 2 * cur->cap : 512;
                        struct fp_func *g = realloc(cur->f, cap * sizeof *g);
                        if (!g) break;
                        cur->f = g;
                        cur->cap = cap;
                    }
                    cur->f[cur->n++] = fn;
                }
            }
        }
        t = nl + 1;
    }
    return nfps;
}

/* The next masked range of `*m` ("start+len," ... ending at a space or newline, "-" for none)
 * as [*lo, *hi); *lo = UINT64_MAX when there is none. */
static void next_mask(const char **m, uint64_t *lo, uint64_t *hi) {
    char *q;
    if (!**m || **m == '-' || **m == ' ' || **m == '\n') {
        *lo = *hi = UINT64_MAX;
        return;
    }
    *lo = strtoull(*m, &q, 16);
    *hi = *q == '+' ? *lo + strtoull(q + 1, &q, 16) : *lo;
    *m = *q == ',' ? q + 1 : q;
}

/* Whether entry point `f` is at `b` (`n` bytes there at most). */
static int fp_matches(const struct fp_func *f, const uint8_t *b, uint64_t n) {
    if (f->size > n) return 0;
    const char *m = f->mask;
    uint64_t lo, hi, h = 0xcbf29ce484222325ULL;
    next_mask(&m, &lo, &hi);
    for (uint64_t i = 0; i < f->size; i++) {
        while (lo != UINT64_MAX && i >= hi) next_mask(&m, &lo, &hi);
        uint8_t v = lo != UINT64_MAX && i >= lo ? 0 : b[i];
        h = (h ^ v) * 0x100000001b3ULL;
    }
    return h == f->hash;
}

/* The fingerprint that matches `obj` (a mapped ELF file) at exactly one place, with that
 * place's link-time address in `*found`; NULL when none does (or none is known). */
static const struct fp *fp_find(const struct elf *obj, uint64_t *found) {
    const ElfW(Ehdr) *eh = (const void *)obj->f;
    if (!load_fingerprints() || eh->e_phoff + (size_t)eh->e_phnum * sizeof(ElfW(Phdr)) > obj->size) return NULL;
    const ElfW(Phdr) *ph = (const void *)(obj->f + eh->e_phoff);
    for (size_t v = 0; v < nfps; v++) {
        const struct fp *fp = &fps[v];
        int nfound = 0;
        for (int i = 0; i < eh->e_phnum; i++) {
            if (ph[i].p_type != PT_LOAD || !(ph[i].p_flags & PF_X) || ph[i].p_offset + ph[i].p_filesz > obj->size) continue;
            const uint8_t *seg = obj->f + ph[i].p_offset, *at = seg, *send = seg + ph[i].p_filesz;
            while (at < send && (at = memmem(at, (size_t)(send - at), fp->anchor, FP_ANCHOR))) {
                const uint8_t *base = at - fp->anchor_off;
                at++;
                if (at - 1 < seg + fp->anchor_off || fp->text_len > (uint64_t)(send - base)) continue;
                size_t k = 0;
                while (k < fp->n && fp_matches(&fp->f[k], base + fp->f[k].off, (uint64_t)(send - base) - fp->f[k].off)) k++;
                if (k == fp->n && fp->n) {
                    *found = ph[i].p_vaddr + (uint64_t)(base - seg);
                    nfound++;
                }
            }
        }
        if (nfound == 1) return fp;
    }
    return NULL;
}

/* Entry point `k` of `fp`'s name, NUL-terminated in `name` (128 bytes). */
static void fp_name(const struct fp *fp, size_t k, char name[128]) {
    memcpy(name, fp->f[k].name, fp->f[k].namelen);
    name[fp->f[k].namelen] = 0;
}

#endif
