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
#include <stdio.h>
#include <stdlib.h>

/* Referenced from lib.rs so that the linker takes this object (and its constructor) from
 * the archive. */
void crum_static_runtime_linked(void) {}

#if defined(__x86_64__)

#include "elf_patch.h"

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

__attribute__((constructor)) static void crum_redirect_static_runtime(void) {
    struct elf exe;
    if (elf_open(&exe, "/proc/self/exe", ".symtab") != 0) return;
    if (!elf_has_static_runtime(&exe)) goto out;
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
    struct slots slots = {.near = exe_hi};
    for (size_t k = 0; k < exe.nsym; k++) {
        if (ELF64_ST_TYPE(exe.sym[k].st_info) != STT_FUNC || !exe.sym[k].st_value) continue;
        const char *name = elf_sym_name(&exe, k);
        if (!runtime_name(name)) continue;
        void *to = dlsym(crum, name);
        uintptr_t from = exe_bias + exe.sym[k].st_value;
        if (!to || ((uintptr_t)to >= exe_lo && (uintptr_t)to < exe_hi) || from < exe_lo || from >= exe_hi) continue;
        if (patch_jump(from, exe.sym[k].st_size, (uintptr_t)to, &slots)) {
            patched++;
            continue;
        }
        skipped++;
        if (strlen(skipped_names) + strlen(name) + 2 < sizeof skipped_names) {
            strcat(skipped_names, " ");
            strcat(skipped_names, name);
        }
    }
    slots_seal(&slots);
    if (getenv("CRUM_LOG") && (patched || skipped))
        fprintf(stderr, "crum: static CUDA runtime: %d entry points redirected to libcrum.so, %d not:%s\n", patched, skipped,
                skipped_names);
out:
    elf_close(&exe);
}

#endif
