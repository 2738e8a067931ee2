/* ELF reading and code patching shared by the two redirections of a static CUDA runtime to
 * libcrum.so: `static_runtime.c` (the executable, from libcrum_libc.so's constructor) and
 * `audit.c` (shared objects, from the dynamic linker's audit library, which lives in a
 * namespace of its own and so can share no code at run time: hence a header of static
 * functions compiled into each).
 *
 * - `struct elf`: a file mapped read-only with one symbol table found (`elf_open`), every
 *   offset checked against the file's size before it is used.
 * - `elf_has_static_runtime`: the object carries kernels (`.nv_fatbin`) and defines
 *   `__cudaRegisterFatBinary` itself.
 * - `patch_jump`: overwrites a function's first bytes with a jump: `jmp *0(%rip)` + the 8-byte
 *   address (14 bytes) where the function is that long, else `jmp *disp32(%rip)` (6 bytes)
 *   through a slot of a page mapped within 2 GiB of the code (`struct slots`); shorter
 *   functions stay.
 *
 * x86-64 only (the jump encodings); the includer guards with `__x86_64__`. */
#ifndef CRUM_ELF_PATCH_H
#define CRUM_ELF_PATCH_H

#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

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

/* The section of `e` named `want`, or NULL. */
static const ElfW(Shdr) *elf_section(const struct elf *e, const char *want) {
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

/* Maps `path` (an ELF file, its section headers checked when used); 0 on success. */
static int elf_map(struct elf *e, const char *path) {
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
    if (memcmp(((const ElfW(Ehdr) *)p)->e_ident, ELFMAG, SELFMAG) != 0) {
        elf_close(e);
        return -1;
    }
    return 0;
}

/* Maps `path` and finds its symbol table `table` (".symtab" or ".dynsym"); 0 on success. */
static int elf_open(struct elf *e, const char *path, const char *table) {
    if (elf_map(e, path) != 0) return -1;
    const ElfW(Ehdr) *eh = (const void *)e->f;
    const ElfW(Shdr) *s;
    if (!(s = elf_section(e, table))) goto bad;
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

static const char *elf_sym_name(const struct elf *e, size_t k) {
    return e->sym[k].st_name < e->strsize ? e->str + e->sym[k].st_name : "";
}

/* Whether symbol `k` is a function defined in `e`. */
static int elf_defined_func(const struct elf *e, size_t k) {
    return e->sym[k].st_shndx != SHN_UNDEF && ELF64_ST_TYPE(e->sym[k].st_info) == STT_FUNC && e->sym[k].st_value;
}

/* Whether `e` carries NVIDIA's static runtime: kernels, and the registration entry defined. */
static int elf_has_static_runtime(const struct elf *e) {
    if (!elf_section(e, ".nv_fatbin")) return 0;
    for (size_t k = 0; k < e->nsym; k++)
        if (elf_defined_func(e, k) && !strcmp(elf_sym_name(e, k), "__cudaRegisterFatBinary")) return 1;
    return 0;
}

/* Whether `name` is a runtime entry point's (`cuda*`, `__cuda*`). */
static int runtime_name(const char *name) {
    return !strncmp(name, "cuda", 4) || !strncmp(name, "__cuda", 6);
}

static int protect(uintptr_t at, size_t n, int prot) {
    long pg = sysconf(_SC_PAGESIZE);
    uintptr_t a = at & ~(uintptr_t)(pg - 1);
    return mprotect((void *)a, (at + n) - a, prot);
}

/* 8-byte jump targets in a page within 2 GiB of `near` (the end of an object's code),
 * mapped at the first use. */
struct slots {
    uintptr_t near;
    uint64_t *page;
    size_t n, cap;
};

static uint64_t *slot_take(struct slots *s) {
    if (!s->page && s->near) {
        long pg = sysconf(_SC_PAGESIZE);
        for (uintptr_t hint = (s->near + (1 << 20)) & ~(uintptr_t)(pg - 1); hint < s->near + (1u << 30); hint += 1 << 20) {
            void *p = mmap((void *)hint, (size_t)pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE,
                           -1, 0);
            if (p != MAP_FAILED) {
                s->page = p;
                s->cap = (size_t)pg / 8;
                break;
            }
        }
    }
    return s->page && s->n < s->cap ? &s->page[s->n++] : NULL;
}

/* The slots' page read-only once every jump is written. */
static void slots_seal(struct slots *s) {
    if (s->page) mprotect(s->page, s->cap * 8, PROT_READ);
}

/* Overwrites the function at `from` (`fsize` bytes long) with a jump to `to`; 1 when done,
 * 0 when it is too short or its page cannot be written. */
static int patch_jump(uintptr_t from, size_t fsize, uintptr_t to, struct slots *slots) {
    uint8_t code[14] = {0xff, 0x25, 0, 0, 0, 0}; /* jmp *0(%rip) + address */
    size_t len = sizeof code;
    memcpy(code + 6, &to, 8);
    if (fsize < 14) {
        /* jmp *disp32(%rip) through a slot near the code. */
        uint64_t *slot = fsize >= 6 ? slot_take(slots) : NULL;
        int64_t disp = slot ? (int64_t)((uintptr_t)slot - (from + 6)) : 0;
        if (!slot || disp != (int32_t)disp) {
            if (slot) slots->n--;
            return 0;
        }
        *slot = (uint64_t)to;
        int32_t d = (int32_t)disp;
        memcpy(code + 2, &d, 4);
        len = 6;
    }
    if (protect(from, len, PROT_READ | PROT_WRITE | PROT_EXEC) != 0) return 0;
    memcpy((void *)from, code, len);
    protect(from, len, PROT_READ | PROT_EXEC);
    return 1;
}

#endif
