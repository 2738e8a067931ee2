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
#include "fingerprint.h"

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

/* Redirects the entry points of a stripped object's static runtime found by fingerprint
 * (`fingerprint.h`): the number redirected, or -1 when no fingerprint matches at exactly one
 * place. */
static int redirect_by_fingerprint(const struct elf *obj, struct link_map *map, const struct elf *crum, const char **version) {
    uint64_t found = 0;
    const struct fp *fp = fp_find(obj, &found);
    if (!fp) return -1;
    *version = fp->version;
    int patched = 0;
    struct slots slots = {.near = image_end(obj, map->l_addr)};
    for (size_t k = 0; k < fp->n; k++) {
        char name[128];
        fp_name(fp, k, name);
        uintptr_t to = crum_export(crum, name);
        if (to && patch_jump(map->l_addr + found + fp->f[k].off, fp->f[k].size, to, &slots)) patched++;
    }
    slots_seal(&slots);
    return patched;
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
