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
 * The audit library runs in a namespace of its own: it uses nothing of libcrum's and only
 * raw ELF reading here. x86-64 only. Built into `crum` (`cli/build.rs`) and written next to
 * crum's `libcuda.so.1` at run time. */
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

struct elf {
    const uint8_t *f;
    size_t size;
    const ElfW(Sym) *sym;
    const char *str;
    size_t nsym, strsize;
};

static void elf_close(struct elf *e) {
    if (e->f) munmap((void *)e->f, e->size);
    e->f = NULL;
}

static const ElfW(Shdr) *section(const struct elf *e, const char *want) {
    const ElfW(Ehdr) *eh = (const void *)e->f;
    if (eh->e_shoff == 0 || eh->e_shentsize != sizeof(ElfW(Shdr)) || eh->e_shstrndx >= eh->e_shnum ||
        eh->e_shoff + (size_t)eh->e_shnum * sizeof(ElfW(Shdr)) > e->size)
        return NULL;
    const ElfW(Shdr) *sh = (const void *)(e->f + eh->e_shoff);
    const ElfW(Shdr) *names = &sh[eh->e_shstrndx];
    if (names->sh_offset + names->sh_size > e->size) return NULL;
    for (int i = 0; i < eh->e_shnum; i++)
        if (sh[i].sh_name < names->sh_size && !strcmp((const char *)e->f + names->sh_offset + sh[i].sh_name, want))
            return &sh[i];
    return NULL;
}

/* Maps `path` and finds its symbol table `table` (".symtab" or ".dynsym"); 0 on success. */
static int elf_open(struct elf *e, const char *path, const char *table) {
    memset(e, 0, sizeof *e);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0) return -1;
    if (fstat(fd, &st) != 0 || st.st_size < (off_t)sizeof(ElfW(Ehdr))) {
        close(fd);
        return -1;
    }
    void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (p == MAP_FAILED) return -1;
    e->f = p;
    e->size = (size_t)st.st_size;
    const ElfW(Ehdr) *eh = p;
    const ElfW(Shdr) *s;
    if (memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0 || !(s = section(e, table))) goto bad;
    const ElfW(Shdr) *sh = (const void *)(e->f + eh->e_shoff);
    if (s->sh_link >= eh->e_shnum || s->sh_offset + s->sh_size > e->size) goto bad;
    const ElfW(Shdr) *strs = &sh[s->sh_link];
    if (strs->sh_offset + strs->sh_size > e->size) goto bad;
    e->sym = (const void *)(e->f + s->sh_offset);
    e->nsym = s->sh_size / sizeof(ElfW(Sym));
    e->str = (const char *)(e->f + strs->sh_offset);
    e->strsize = strs->sh_size;
    return 0;
bad:
    elf_close(e);
    return -1;
}

static const char *sym_name(const struct elf *e, size_t k) {
    return e->sym[k].st_name < e->strsize ? e->str + e->sym[k].st_name : "";
}

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

static int protect(uintptr_t at, size_t n, int prot) {
    long pg = sysconf(_SC_PAGESIZE);
    uintptr_t a = at & ~(uintptr_t)(pg - 1);
    return mprotect((void *)a, (at + n) - a, prot);
}

/* A page of 8-byte jump targets within 2 GiB of `near` (the end of an object's code), for
 * functions shorter than an absolute jump: `jmp *disp32(%rip)` through a slot, 6 bytes. */
static uint64_t *slot_page(uintptr_t near) {
    long pg = sysconf(_SC_PAGESIZE);
    for (uintptr_t hint = (near + (1 << 20)) & ~(uintptr_t)(pg - 1); hint < near + (1u << 30); hint += 1 << 20) {
        void *p = mmap((void *)hint, (size_t)pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
        if (p != MAP_FAILED) return p;
    }
    return NULL;
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

static void redirect(struct link_map *map) {
    struct elf obj;
    if (elf_open(&obj, map->l_name, ".symtab") != 0) return;
    int has_runtime = 0;
    if (section(&obj, ".nv_fatbin"))
        for (size_t k = 0; k < obj.nsym && !has_runtime; k++)
            has_runtime = obj.sym[k].st_shndx != SHN_UNDEF && ELF64_ST_TYPE(obj.sym[k].st_info) == STT_FUNC &&
                          !strcmp(sym_name(&obj, k), "__cudaRegisterFatBinary");
    if (!has_runtime || find_crum(map) != 0) {
        elf_close(&obj);
        return;
    }
    struct elf crum;
    if (elf_open(&crum, crum_path, ".dynsym") != 0) {
        elf_close(&obj);
        return;
    }
    int patched = 0, skipped = 0;
    uint64_t *slots = NULL;
    size_t nslots = 0, slots_cap = (size_t)sysconf(_SC_PAGESIZE) / 8;
    uintptr_t end = image_end(&obj, map->l_addr);
    for (size_t k = 0; k < obj.nsym; k++) {
        const ElfW(Sym) *s = &obj.sym[k];
        if (ELF64_ST_TYPE(s->st_info) != STT_FUNC || s->st_shndx == SHN_UNDEF || !s->st_value) continue;
        const char *name = sym_name(&obj, k);
        if (strncmp(name, "cuda", 4) != 0 && strncmp(name, "__cuda", 6) != 0) continue;
        uintptr_t to = 0;
        for (size_t j = 0; j < crum.nsym && !to; j++)
            if (crum.sym[j].st_shndx != SHN_UNDEF && ELF64_ST_TYPE(crum.sym[j].st_info) == STT_FUNC &&
                !strcmp(sym_name(&crum, j), name))
                to = crum_base + crum.sym[j].st_value;
        if (!to) continue;
        uintptr_t from = map->l_addr + s->st_value;
        uint8_t code[14] = {0xff, 0x25, 0, 0, 0, 0}; /* jmp *0(%rip) + address */
        size_t len = sizeof code;
        memcpy(code + 6, &to, 8);
        if (s->st_size < 14) {
            /* jmp *disp32(%rip) through a slot near the object. */
            if (s->st_size >= 6 && end && !slots) slots = slot_page(end);
            int64_t disp = slots && nslots < slots_cap ? (int64_t)((uintptr_t)&slots[nslots] - (from + 6)) : 0;
            if (s->st_size < 6 || !slots || nslots >= slots_cap || disp != (int32_t)disp) {
                skipped++;
                if (getenv("CRUM_LOG"))
                    fprintf(stderr, "crum: %s: %s (%lu bytes) not redirected\n", map->l_name, name, (unsigned long)s->st_size);
                continue;
            }
            slots[nslots++] = (uint64_t)to;
            int32_t d = (int32_t)disp;
            memcpy(code + 2, &d, 4);
            len = 6;
        }
        if (protect(from, len, PROT_READ | PROT_WRITE | PROT_EXEC) != 0) {
            skipped++;
            continue;
        }
        memcpy((void *)from, code, len);
        protect(from, len, PROT_READ | PROT_EXEC);
        patched++;
    }
    if (slots) mprotect(slots, slots_cap * 8, PROT_READ);
    if (getenv("CRUM_LOG"))
        fprintf(stderr, "crum: static CUDA runtime in %s: %d entry points redirected to libcrum.so, %d not\n", map->l_name,
                patched, skipped);
    elf_close(&crum);
    elf_close(&obj);
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
