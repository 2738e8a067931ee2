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
 * bytes, so a restarted program runs crum's runtime too. x86-64 only.
 *
 * A stripped executable (no symbol table) has its entry points found by `crum run`, which
 * matches fingerprints of the runtime's code (cli/src/fingerprint.rs) and passes their
 * addresses in `CRUM_STATIC_RUNTIME` (`redirect_by_table`); one whose runtime matches no
 * fingerprint is refused there, naming why. A stripped executable started by something else
 * under `crum run` (a script, an exec of the program) is matched here, with the same
 * fingerprints (`redirect_stripped_exe`), and refused here the same way.
 *
 * The survey's experiment made part of crum; the numbers are in docs/driver-api.md § 4.1. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

/* Referenced from lib.rs so that the linker takes this object (and its constructor) from
 * the archive. */
void crum_static_runtime_linked(void) {}

#if defined(__x86_64__)

#include "elf_patch.h"
#include "fingerprint.h"

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

/* What the redirection did, for the log line. */
struct tally {
    int patched, skipped;
    char skipped_names[512];
};

/* Redirects the executable's runtime function `name` at link-time address `addr`
 * (`size` bytes) to libcrum.so's of the same name, if libcrum.so exports it. */
static void redirect_one(void *crum, const char *name, uintptr_t addr, size_t size, struct slots *slots, struct tally *t) {
    void *to = dlsym(crum, name);
    uintptr_t from = exe_bias + addr;
    if (!to || ((uintptr_t)to >= exe_lo && (uintptr_t)to < exe_hi) || from < exe_lo || from >= exe_hi || size > exe_hi - from)
        return;
    if (patch_jump(from, size, (uintptr_t)to, slots)) {
        t->patched++;
        return;
    }
    t->skipped++;
    if (strlen(t->skipped_names) + strlen(name) + 2 < sizeof t->skipped_names) {
        strcat(t->skipped_names, " ");
        strcat(t->skipped_names, name);
    }
}

/* libcrum.so by its SONAME: its own definitions, not the executable's (which a lookup in the
 * global scope would find first if the executable exports them). */
static void *crum_library(void) {
    void *crum = dlopen("libcudart.so.13", RTLD_NOW | RTLD_NOLOAD);
    if (!crum)
        fprintf(stderr, "crum: a program with the static CUDA runtime, but libcrum.so is not loaded: not redirected\n");
    return crum;
}

static void report(const struct tally *t, const char *how) {
    if (getenv("CRUM_LOG") && (t->patched || t->skipped))
        fprintf(stderr, "crum: static CUDA runtime (%s): %d entry points redirected to libcrum.so, %d not:%s\n", how,
                t->patched, t->skipped, t->skipped_names);
}

/* A stripped executable: `crum run` found its runtime by fingerprint (cli/src/fingerprint.rs)
 * and hands the entry points over in `CRUM_STATIC_RUNTIME`:
 * `DEV:INO:SIZE:MTIME:MTIME_NSEC|name=addr+size,...` (hexadecimal link-time addresses and
 * sizes). The identity is the executable's as `crum run` saw it: a child that executes
 * another program inherits the variable and ignores it. 1 when the table was this
 * executable's (whatever it redirected), 0 when it was not. */
static int redirect_by_table(const char *table) {
    unsigned long long dev, ino, size, mtime, mtime_ns;
    int used = 0;
    if (sscanf(table, "%llu:%llu:%llu:%llu:%llu|%n", &dev, &ino, &size, &mtime, &mtime_ns, &used) != 5 || !used) return 0;
    struct stat st;
    if (stat("/proc/self/exe", &st) != 0 || (unsigned long long)st.st_dev != dev || (unsigned long long)st.st_ino != ino ||
        (unsigned long long)st.st_size != size || (unsigned long long)st.st_mtim.tv_sec != mtime ||
        (unsigned long long)st.st_mtim.tv_nsec != mtime_ns)
        return 0;
    void *crum = crum_library();
    if (!crum) return 1;
    dl_iterate_phdr(find_exe, NULL);
    struct tally t = {0};
    struct slots slots = {.near = exe_hi};
    for (const char *p = table + used; *p;) {
        const char *eq = strchr(p, '='), *end = strchr(p, ',');
        if (!end) end = p + strlen(p);
        char name[128];
        char *rest;
        if (eq && eq < end && (size_t)(eq - p) < sizeof name) {
            memcpy(name, p, (size_t)(eq - p));
            name[eq - p] = 0;
            unsigned long long addr = strtoull(eq + 1, &rest, 16), fsize = 0;
            if (*rest == '+') fsize = strtoull(rest + 1, &rest, 16);
            if (rest == end && runtime_name(name)) redirect_one(crum, name, (uintptr_t)addr, (size_t)fsize, &slots, &t);
        }
        p = *end ? end + 1 : end;
    }
    slots_seal(&slots);
    report(&t, "found by fingerprint");
    return 1;
}

/* A stripped executable `crum run` did not start itself (a script's, or one the program
 * executes): its runtime found here by the fingerprints `crum run` wrote
 * (`CRUM_CUDART_FINGERPRINTS`, `fingerprint.h`). One whose runtime matches none is not run:
 * NVIDIA's runtime would start and fail at its first call (it needs the driver's private
 * tables, docs/driver-api.md), so the process ends here, naming why, as `crum run` refuses
 * such a program it starts. */
static void redirect_stripped_exe(void) {
    struct elf exe;
    if (!getenv("CRUM_CUDART_FINGERPRINTS") || elf_map(&exe, "/proc/self/exe") != 0) return;
    /* No fingerprints to go by (the file gone): nothing is known, nothing refused. */
    if (!elf_section(&exe, ".nv_fatbin") || elf_section(&exe, ".symtab") || !load_fingerprints()) {
        elf_close(&exe);
        return;
    }
    uint64_t found = 0;
    const struct fp *fp = fp_find(&exe, &found);
    if (!fp) {
        char path[4096];
        ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
        path[n > 0 ? n : 0] = 0;
        fprintf(stderr,
                "crum: %s carries kernels and is stripped, and no static CUDA runtime crum knows was found in it: "
                "not run (run it unstripped, or rebuild it with the shared runtime: nvcc -cudart shared ...; "
                "CRUM_CUDART_STATIC=/path/to/libcudart_static.a adds the runtime it was built with)\n",
                path);
        _exit(EXIT_FAILURE);
    }
    void *crum = crum_library();
    if (crum) {
        dl_iterate_phdr(find_exe, NULL);
        struct tally t = {0};
        struct slots slots = {.near = exe_hi};
        for (size_t k = 0; k < fp->n; k++) {
            char name[128];
            fp_name(fp, k, name);
            if (runtime_name(name)) redirect_one(crum, name, (uintptr_t)(found + fp->f[k].off), (size_t)fp->f[k].size, &slots, &t);
        }
        slots_seal(&slots);
        report(&t, "found by fingerprint at load");
    }
    elf_close(&exe);
}

__attribute__((constructor)) static void crum_redirect_static_runtime(void) {
    const char *table = getenv("CRUM_STATIC_RUNTIME");
    if (table && redirect_by_table(table)) return;
    struct elf exe;
    if (elf_open(&exe, "/proc/self/exe", ".symtab") != 0) {
        redirect_stripped_exe();
        return;
    }
    if (!elf_has_static_runtime(&exe)) goto out;
    void *crum = crum_library();
    if (!crum) goto out;
    dl_iterate_phdr(find_exe, NULL);
    struct tally t = {0};
    struct slots slots = {.near = exe_hi};
    for (size_t k = 0; k < exe.nsym; k++) {
        if (ELF64_ST_TYPE(exe.sym[k].st_info) != STT_FUNC || !exe.sym[k].st_value) continue;
        const char *name = elf_sym_name(&exe, k);
        if (runtime_name(name)) redirect_one(crum, name, exe.sym[k].st_value, exe.sym[k].st_size, &slots, &t);
    }
    slots_seal(&slots);
    report(&t, "by symbol");
out:
    elf_close(&exe);
}

#endif
