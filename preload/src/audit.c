/* `libcrum_audit.so`, the dynamic linker's audit library under `crum run` (`LD_AUDIT`):
 * shared objects that carry their own static CUDA runtime (a library or Python extension
 * built by nvcc's default, `-cudart static`) get their runtime entry points redirected to
 * libcrum.so as they are loaded, before their constructors register their kernels — which a
 * preloaded library's constructor, run after theirs, could not do (the executable's own
 * runtime is redirected there: `static_runtime.c`).
 *
 * `la_objopen` runs for every object of the main namespace once it is mapped, before its
 * relocation and constructors. An object that has `.nv_fatbin` and defines
 * `__cudaRegisterFatBinary` in its symbol table gets each of its `cuda*`/`__cuda*` functions
 * that libcrum.so exports overwritten with a jump there (`jmp *0(%rip)` + address, 14 bytes;
 * shorter functions stay). libcrum.so's addresses come from its own symbol table on disk and
 * its load address in the link map (it is preloaded, so mapped before any such object).
 * A *stripped* object (no `.symtab`) that has `.nv_fatbin` has its runtime found by
 * fingerprint instead: the fingerprints `crum run` knows (cli/src/fingerprint.rs) are in the
 * file `CRUM_CUDART_FINGERPRINTS` names, matched by the same rule (`redirect_by_fingerprint`).
 * The ELF reading and the jumps are `elf_patch.h`'s, shared with `static_runtime.c`.
 * The audit library runs in a namespace of its own: it uses nothing of libcrum's and only
 * raw ELF reading here. x86-64 only. Built into `crum` (`cli/build.rs`) and written next to
 * crum's `libcuda.so.1` at run time. It also fills the hole the kernel's 2 MiB placement of
 * libcrum.so leaves above it (`fill_alignment_hole`), so the program's mappings land where
 * they would without crum. */
#define _GNU_SOURCE
#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

unsigned int la_version(unsigned int version) {
    return version < LAV_CURRENT ? version : LAV_CURRENT;
}

#if defined(__x86_64__)

#include "elf_patch.h"

/* libcrum.so as loaded: its file and load address. */
static char crum_path[4096];
static uintptr_t crum_base;

static int find_crum(struct link_map *from) {
    struct link_map *m = from;
    while (m && m->l_prev) m = m->l_prev;
    for (; m; m = m->l_next) {
        size_t n = strlen(m->l_name);
        if (n >= 10 && !strcmp(m->l_name + n - 10, "libcrum.so") && n < sizeof crum_path) {
            memcpy(crum_path, m->l_name, n + 1);
            crum_base = m->l_addr;
            return 0;
        }
    }
    return -1;
}

/* The end of `obj`'s loaded image (its highest PT_LOAD), at load address `base`. */
static uintptr_t image_end(const struct elf *obj, uintptr_t base) {
    const ElfW(Ehdr) *eh = (const void *)obj->f;
    uintptr_t end = 0;
    if (eh->e_phoff + (size_t)eh->e_phnum * sizeof(ElfW(Phdr)) > obj->size) return 0;
    const ElfW(Phdr) *ph = (const void *)(obj->f + eh->e_phoff);
    for (int i = 0; i < eh->e_phnum; i++)
        if (ph[i].p_type == PT_LOAD && base + ph[i].p_vaddr + ph[i].p_memsz > end) end = base + ph[i].p_vaddr + ph[i].p_memsz;
    return end;
}

/* libcrum.so's address of its export `name`, or 0. */
static uintptr_t crum_export(const struct elf *crum, const char *name) {
    for (size_t j = 0; j < crum->nsym; j++)
        if (elf_defined_func(crum, j) && !strcmp(elf_sym_name(crum, j), name)) return crum_base + crum->sym[j].st_value;
    return 0;
}

/* ---- Stripped objects: the runtime found by fingerprint ----------------------------------
 * The fingerprints `crum run` knows (cli/src/fingerprint.rs, its text form, all versions one
 * after the other) are in the file `CRUM_CUDART_FINGERPRINTS` names. The rule is the Rust
 * one: the anchor's hits in the object's executable segments, at each every entry point's
 * bytes hashed (FNV-1a 64, relocated bytes as zero) at its offset; accepted where all match,
 * at one position only. Names, masks and numbers are read from the mapped file in place. */

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

/* Redirects the entry points of a stripped object's static runtime found by fingerprint:
 * the number redirected, or -1 when no fingerprint matches at exactly one place. */
static int redirect_by_fingerprint(const struct elf *obj, struct link_map *map, const struct elf *crum, const char **version) {
    const ElfW(Ehdr) *eh = (const void *)obj->f;
    if (!load_fingerprints() || eh->e_phoff + (size_t)eh->e_phnum * sizeof(ElfW(Phdr)) > obj->size) return -1;
    const ElfW(Phdr) *ph = (const void *)(obj->f + eh->e_phoff);
    for (size_t v = 0; v < nfps; v++) {
        const struct fp *fp = &fps[v];
        uint64_t found = 0;
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
                    found = ph[i].p_vaddr + (uint64_t)(base - seg);
                    nfound++;
                }
            }
        }
        if (nfound != 1) continue;
        *version = fp->version;
        int patched = 0;
        struct slots slots = {.near = image_end(obj, map->l_addr)};
        for (size_t k = 0; k < fp->n; k++) {
            char name[128];
            memcpy(name, fp->f[k].name, fp->f[k].namelen);
            name[fp->f[k].namelen] = 0;
            uintptr_t to = crum_export(crum, name);
            if (to && patch_jump(map->l_addr + found + fp->f[k].off, fp->f[k].size, to, &slots)) patched++;
        }
        slots_seal(&slots);
        return patched;
    }
    return -1;
}

static void redirect_stripped(struct link_map *map) {
    struct elf obj, crum;
    if (elf_map(&obj, map->l_name) != 0) return;
    if (!elf_section(&obj, ".nv_fatbin") || find_crum(map) != 0 || elf_open(&crum, crum_path, ".dynsym") != 0) {
        elf_close(&obj);
        return;
    }
    const char *version = "";
    int n = redirect_by_fingerprint(&obj, map, &crum, &version);
    if (getenv("CRUM_LOG")) {
        if (n >= 0)
            fprintf(stderr, "crum: static CUDA runtime in %s (stripped; found by fingerprint, CUDA %s): %d entry points redirected to libcrum.so\n",
                    map->l_name, version, n);
        else
            fprintf(stderr, "crum: %s is stripped and has kernels; no static CUDA runtime crum knows was found in it\n", map->l_name);
    }
    elf_close(&crum);
    elf_close(&obj);
}

static void redirect(struct link_map *map) {
    struct elf obj;
    if (elf_open(&obj, map->l_name, ".symtab") != 0) {
        redirect_stripped(map);
        return;
    }
    if (!elf_has_static_runtime(&obj) || find_crum(map) != 0) {
        elf_close(&obj);
        return;
    }
    struct elf crum;
    if (elf_open(&crum, crum_path, ".dynsym") != 0) {
        elf_close(&obj);
        return;
    }
    int patched = 0, skipped = 0;
    struct slots slots = {.near = image_end(&obj, map->l_addr)};
    for (size_t k = 0; k < obj.nsym; k++) {
        if (!elf_defined_func(&obj, k)) continue;
        const char *name = elf_sym_name(&obj, k);
        if (!runtime_name(name)) continue;
        uintptr_t to = crum_export(&crum, name);
        if (!to) continue;
        if (patch_jump(map->l_addr + obj.sym[k].st_value, obj.sym[k].st_size, to, &slots)) {
            patched++;
            continue;
        }
        skipped++;
        if (getenv("CRUM_LOG"))
            fprintf(stderr, "crum: %s: %s (%lu bytes) not redirected\n", map->l_name, name, (unsigned long)obj.sym[k].st_size);
    }
    slots_seal(&slots);
    if (getenv("CRUM_LOG"))
        fprintf(stderr, "crum: static CUDA runtime in %s: %d entry points redirected to libcrum.so, %d not\n", map->l_name,
                patched, skipped);
    elf_close(&crum);
    elf_close(&obj);
}

/* The kernel places a file mapping of 2 MiB or more (libcrum.so) at a 2 MiB boundary
 * (transparent huge pages), which leaves a hole of up to 2 MiB between its end and the object
 * mapped above it. Without crum there is no such hole: the program's first `mmap(NULL)`s go
 * below its libraries, where nothing lies below them. Under crum they went into the hole,
 * right above libcrum.so's data, where a `MAP_GROWSDOWN` mapping cannot grow (the kernel
 * keeps a guard gap of 1 MiB below it free of accessible mappings; zdtm's grow_map died).
 * Before the program's constructors run, the hole is filled with an inaccessible reservation,
 * which the kernel does not count against that gap, so the program's mappings land where
 * they would without crum. Only holes right above libcrum.so (and its zero-fill), smaller
 * than the alignment, are filled. */
static void fill_alignment_hole(void) {
    FILE *f = fopen("/proc/self/maps", "re");
    if (!f) return;
    char line[4352];
    uintptr_t run_end = 0; /* the end of libcrum.so's mappings while they are contiguous */
    int in_run = 0;
    while (fgets(line, sizeof line, f)) {
        unsigned long start, end;
        int path_at = 0;
        if (sscanf(line, "%lx-%lx %*s %*s %*s %*s %n", &start, &end, &path_at) < 2) break;
        const char *path = path_at ? line + path_at : "";
        size_t n = strcspn(path, "\n");
        int is_crum = n >= 11 && !strncmp(path + n - 11, "/libcrum.so", 11);
        if (in_run && start > run_end) {
            size_t gap = start - run_end;
            if (gap < (2ul << 20))
                mmap((void *)run_end, gap, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
            in_run = 0;
        }
        if (is_crum || (in_run && n == 0 && start == run_end)) {
            in_run = 1;
            run_end = end;
        } else {
            in_run = 0;
        }
    }
    fclose(f);
}

/* After the initial objects are loaded and relocated, before their constructors: the
 * dynamic linker has dropped its cache mapping by then (filling at LA_ACT_CONSISTENT left
 * the cache's pages as a hole above the filling). */
void la_preinit(uintptr_t *cookie) {
    (void)cookie;
    fill_alignment_hole();
}

unsigned int la_objopen(struct link_map *map, Lmid_t lmid, uintptr_t *cookie) {
    (void)cookie;
    /* Shared objects of the program's namespace; the executable (no name) is the preload's. */
    if (lmid == LM_ID_BASE && map->l_name && map->l_name[0])
        redirect(map);
    return 0;
}

#else

unsigned int la_objopen(struct link_map *map, Lmid_t lmid, uintptr_t *cookie) {
    (void)map, (void)lmid, (void)cookie;
    return 0;
}

#endif
