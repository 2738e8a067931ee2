/* Programs linked with the static CUDA runtime (`nvcc -cudart static`, CMake's default):
 * their executable carries NVIDIA's runtime, whose entry points crum's libcrum.so cannot
 * interpose by symbol, and which would open the real driver. At load, before the executable's
 * constructors register its kernels, every runtime entry point of the executable
 * (`cuda*`, `__cuda*` functions of its symbol table) that libcrum.so exports is overwritten
 * with a jump to libcrum.so's: the program runs on crum's runtime and NVIDIA's never starts
 * (docs/driver-api.md § 4.1, measured there on the whole corpus).
 *
 * Only an executable that carries kernels (`.nv_fatbin`) and defines
 * `__cudaRegisterFatBinary` itself is touched; any other returns after reading its section
 * headers. A jump is `jmp *0(%rip)` + the 8-byte address (14 bytes) where the function is that
 * long, else `jmp *disp32(%rip)` (6 bytes) through a slot in a page mapped within 2 GiB of
 * the code; shorter functions stay (the runtime's `__cudaGetProcAddress` is `return 0`).
 * The patched code pages are private memory from then on: a checkpoint saves them with their
 * bytes, so a restarted program runs crum's runtime too. `crum run` refuses a stripped
 * executable (no symbol table) beforehand, naming it. x86-64 only.
 *
 * The survey's experiment made part of crum; the numbers are in docs/driver-api.md § 4.1. */
#define _GNU_SOURCE
#include <dlfcn.h>
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

/* Referenced from lib.rs so that the linker takes this object (and its constructor) from
 * the archive. */
void crum_static_runtime_linked(void) {}

#if defined(__x86_64__)

static uintptr_t exe_bias, exe_lo, exe_hi;

static int find_exe(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size;
    (void)data;
    /* The first object is the executable. */
    exe_bias = info->dlpi_addr;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD) continue;
        uintptr_t lo = exe_bias + ph->p_vaddr, hi = lo + ph->p_memsz;
        if (!exe_lo || lo < exe_lo) exe_lo = lo;
        if (hi > exe_hi) exe_hi = hi;
    }
    return 1;
}

static int protect(uintptr_t at, size_t n, int prot) {
    long pg = sysconf(_SC_PAGESIZE);
    uintptr_t a = at & ~(uintptr_t)(pg - 1);
    return mprotect((void *)a, (at + n) - a, prot);
}

/* 8-byte jump targets within 2 GiB of the executable's code. */
static uint64_t *slots;
static size_t nslots, slots_cap;

static uint64_t *near_slot(void) {
    if (!slots) {
        long pg = sysconf(_SC_PAGESIZE);
        for (uintptr_t hint = (exe_hi + (1 << 20)) & ~(uintptr_t)(pg - 1); hint < exe_hi + (1u << 30); hint += 1 << 20) {
            void *p = mmap((void *)hint, 4 * pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
            if (p != MAP_FAILED) {
                slots = p;
                slots_cap = 4 * pg / 8;
                break;
            }
        }
        if (!slots) return NULL;
    }
    return nslots < slots_cap ? &slots[nslots++] : NULL;
}

/* Whether the ELF image `f` of `size` bytes has a section named `want`. */
static const ElfW(Shdr) *section(const uint8_t *f, size_t size, const char *want) {
    const ElfW(Ehdr) *eh = (const void *)f;
    if (eh->e_shoff == 0 || eh->e_shentsize != sizeof(ElfW(Shdr)) || eh->e_shstrndx >= eh->e_shnum ||
        eh->e_shoff + (size_t)eh->e_shnum * sizeof(ElfW(Shdr)) > size)
        return NULL;
    const ElfW(Shdr) *sh = (const void *)(f + eh->e_shoff);
    const ElfW(Shdr) *names = &sh[eh->e_shstrndx];
    if (names->sh_offset + names->sh_size > size) return NULL;
    for (int i = 0; i < eh->e_shnum; i++)
        if (sh[i].sh_name < names->sh_size && !strcmp((const char *)f + names->sh_offset + sh[i].sh_name, want))
            return &sh[i];
    return NULL;
}

__attribute__((constructor)) static void crum_redirect_static_runtime(void) {
    int fd = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0) return;
    if (fstat(fd, &st) != 0 || st.st_size < (off_t)sizeof(ElfW(Ehdr))) {
        close(fd);
        return;
    }
    const uint8_t *f = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (f == MAP_FAILED) return;
    size_t size = (size_t)st.st_size;
    const ElfW(Ehdr) *eh = (const void *)f;
    const ElfW(Shdr) *symtab = NULL;
    if (memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0 || !section(f, size, ".nv_fatbin") || !(symtab = section(f, size, ".symtab")))
        goto out;
    const ElfW(Shdr) *sh = (const void *)(f + eh->e_shoff);
    if (symtab->sh_link >= eh->e_shnum || symtab->sh_offset + symtab->sh_size > size) goto out;
    const ElfW(Shdr) *strs = &sh[symtab->sh_link];
    if (strs->sh_offset + strs->sh_size > size) goto out;
    const ElfW(Sym) *sym = (const void *)(f + symtab->sh_offset);
    const char *str = (const char *)(f + strs->sh_offset);
    size_t n = symtab->sh_size / sizeof *sym;
    /* The static runtime is in this executable only if it defines the registration entry. */
    int has_runtime = 0;
    for (size_t k = 0; k < n && !has_runtime; k++)
        has_runtime = sym[k].st_name < strs->sh_size && sym[k].st_shndx != SHN_UNDEF &&
                      ELF64_ST_TYPE(sym[k].st_info) == STT_FUNC && !strcmp(str + sym[k].st_name, "__cudaRegisterFatBinary");
    if (!has_runtime) goto out;
    /* libcrum.so by its SONAME: its own definitions, not the executable's (which a lookup
     * in the global scope would find first if the executable exports them). */
    void *crum = dlopen("libcudart.so.13", RTLD_NOW | RTLD_NOLOAD);
    if (!crum) {
        fprintf(stderr, "crum: a program with the static CUDA runtime, but libcrum.so is not loaded: not redirected\n");
        goto out;
    }
    dl_iterate_phdr(find_exe, NULL);
    int patched = 0, skipped = 0;
    char skipped_names[512] = "";
    for (size_t k = 0; k < n; k++) {
        if (ELF64_ST_TYPE(sym[k].st_info) != STT_FUNC || !sym[k].st_value || sym[k].st_name >= strs->sh_size) continue;
        const char *name = str + sym[k].st_name;
        if (strncmp(name, "cuda", 4) != 0 && strncmp(name, "__cuda", 6) != 0) continue;
        void *to = dlsym(crum, name);
        uintptr_t from = exe_bias + sym[k].st_value;
        if (!to || ((uintptr_t)to >= exe_lo && (uintptr_t)to < exe_hi) || from < exe_lo || from >= exe_hi) continue;
        size_t fsize = sym[k].st_size;
        uint8_t code[14];
        size_t len;
        if (fsize >= 14) {
            code[0] = 0xff, code[1] = 0x25; /* jmp *0(%rip) */
            memset(code + 2, 0, 4);
            memcpy(code + 6, &to, 8);
            len = 14;
        } else {
            uint64_t *slot = fsize >= 6 ? near_slot() : NULL;
            int64_t disp = slot ? (int64_t)((uintptr_t)slot - (from + 6)) : 0;
            if (!slot || disp != (int32_t)disp) {
                skipped++;
                if (strlen(skipped_names) + strlen(name) + 2 < sizeof skipped_names) {
                    strcat(skipped_names, " ");
                    strcat(skipped_names, name);
                }
                continue;
            }
            *slot = (uint64_t)(uintptr_t)to;
            int32_t d = (int32_t)disp;
            code[0] = 0xff, code[1] = 0x25; /* jmp *disp32(%rip) */
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
    if (getenv("CRUM_LOG") && (patched || skipped))
        fprintf(stderr, "crum: static CUDA runtime: %d entry points redirected to libcrum.so, %d not:%s\n", patched, skipped,
                skipped_names);
out:
    munmap((void *)f, size);
}

#endif
