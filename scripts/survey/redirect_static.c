/* An experiment for docs/driver-api.md § 4.1, not part of crum: preloaded into a program
 * linked with the static CUDA runtime, it redirects the runtime's entry points inside the
 * executable to the functions of the same name that a preloaded libcrum.so exports, so the
 * program runs on crum's runtime and NVIDIA's never starts (never opens libcuda.so.1, never
 * runs its driver validity check).
 *
 * At load (preloaded libraries are initialized before the executable's constructors, which
 * register the program's kernels), it reads the executable's .symtab from /proc/self/exe,
 * and for every function symbol whose name starts with "cuda" or "__cuda" and that dlsym
 * finds outside the executable, it overwrites the function's first bytes with a jump there:
 * `jmp *0(%rip)` + the 8-byte address (14 bytes) where the function is that long, else
 * `jmp *disp32(%rip)` (6 bytes) through a slot in a page mapped within 2 GiB of the code.
 * It writes one line to stderr: how many functions it redirected and which it could not.
 *
 * Build: cc -shared -fPIC -o libredirect_static.so redirect_static.c -ldl
 */
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

static uintptr_t exe_bias, exe_lo, exe_hi;

static int find_exe(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size; (void)data;
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

static int make_writable(uintptr_t at, size_t n, int prot) {
    long pg = sysconf(_SC_PAGESIZE);
    uintptr_t a = at & ~(uintptr_t)(pg - 1);
    return mprotect((void *)a, (at + n) - a, prot);
}

/* A page for 8-byte jump targets within 2 GiB of the executable's code. */
static uint64_t *slots;
static size_t nslots, slots_cap;
static uint64_t *near_slot(void) {
    if (!slots) {
        long pg = sysconf(_SC_PAGESIZE);
        for (uintptr_t hint = (exe_hi + (1 << 20)) & ~(uintptr_t)(pg - 1); hint < exe_hi + (1u << 30); hint += 1 << 20) {
            void *p = mmap((void *)hint, 4 * pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
            if (p != MAP_FAILED) { slots = p; slots_cap = 4 * pg / 8; break; }
        }
        if (!slots) return NULL;
    }
    return nslots < slots_cap ? &slots[nslots++] : NULL;
}

__attribute__((constructor)) static void redirect(void) {
    dl_iterate_phdr(find_exe, NULL);
    int fd = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) return;
    const uint8_t *f = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (f == MAP_FAILED) return;
    const ElfW(Ehdr) *eh = (const void *)f;
    if (memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0) return;
    const ElfW(Shdr) *sh = (const void *)(f + eh->e_shoff);
    int patched = 0, skipped = 0;
    char skipped_names[1024] = "";
    int have_symtab = 0;
    for (int i = 0; i < eh->e_shnum; i++) {
        if (sh[i].sh_type != SHT_SYMTAB) continue;
        have_symtab = 1;
        const ElfW(Sym) *sym = (const void *)(f + sh[i].sh_offset);
        const char *str = (const char *)(f + sh[sh[i].sh_link].sh_offset);
        size_t n = sh[i].sh_size / sizeof *sym;
        for (size_t k = 0; k < n; k++) {
            if (ELF64_ST_TYPE(sym[k].st_info) != STT_FUNC || !sym[k].st_value) continue;
            const char *name = str + sym[k].st_name;
            if (strncmp(name, "cuda", 4) != 0 && strncmp(name, "__cuda", 6) != 0) continue;
            void *to = dlsym(RTLD_DEFAULT, name);
            uintptr_t from = exe_bias + sym[k].st_value;
            if (!to || ((uintptr_t)to >= exe_lo && (uintptr_t)to < exe_hi)) continue;
            size_t size = sym[k].st_size;
            uint8_t code[14];
            size_t len;
            if (size >= 14) {
                code[0] = 0xff; code[1] = 0x25; memset(code + 2, 0, 4); /* jmp *0(%rip) */
                memcpy(code + 6, &to, 8);
                len = 14;
            } else {
                uint64_t *slot = size >= 6 ? near_slot() : NULL;
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
                code[0] = 0xff; code[1] = 0x25; memcpy(code + 2, &d, 4); /* jmp *disp32(%rip) */
                len = 6;
            }
            if (make_writable(from, len, PROT_READ | PROT_WRITE | PROT_EXEC) != 0) { skipped++; continue; }
            memcpy((void *)from, code, len);
            make_writable(from, len, PROT_READ | PROT_EXEC);
            patched++;
        }
    }
    if (slots) mprotect(slots, slots_cap * 8, PROT_READ);
    munmap((void *)f, (size_t)st.st_size);
    if (!have_symtab) {
        fprintf(stderr, "redirect_static: no .symtab in the executable (stripped)\n");
        return;
    }
    if (patched || skipped)
        fprintf(stderr, "redirect_static: %d runtime functions redirected, %d not:%s\n", patched, skipped, skipped_names);
}
