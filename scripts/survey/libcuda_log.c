/* A logging libcuda.so.1 for the driver-API survey (issue 13, docs/driver-api.md).
 *
 * A program linked with the static CUDA runtime (`nvcc -cudart static`) dlopens
 * "libcuda.so.1", looks a few entry points up with dlsym, asks cuGetProcAddress for the rest,
 * and asks cuGetExportTable for undocumented tables of functions. This library stands in for
 * the driver and writes one line per event to the file named by CRUM_SURVEY_LOG:
 *
 *   dlsym NAME                      a symbol looked up directly (dlsym on any handle)
 *   proc NAME VERSION FLAGS impl|stub   a cuGetProcAddress[_v2] request and what it got
 *   call NAME impl|stub RESULT      the first call of an entry point handed out
 *   table UUID                      a cuGetExportTable request
 *   slot UUID INDEX RESULT          the first call of a slot of an export table
 *   note TEXT                       a remark (e.g. a stub that returned an error)
 *
 * Entry points come from the fake driver (proxy/src/cuda/fake_libcuda.c, compiled into the
 * same library) or from the small implementations below, which keep "device" memory in host
 * memory (addresses are unified, so copies are memmove) and never run kernels: a program gets
 * as far as its control flow allows, its numbers are wrong. Every entry point handed out is a
 * trampoline that logs its first call; one without an implementation returns
 * CRUM_SURVEY_STUB_RESULT (default 0, CUDA_SUCCESS, so the survey sees what comes next).
 * Export-table slots are trampolines too; the few whose meaning is known from ZLUDA's
 * documentation of the "dark API" (context-local storage, module from fat binary, tools
 * callback buffers) are answered plausibly, the others return CRUM_SURVEY_SLOT_RESULT
 * (default 0). CRUM_SURVEY_REFUSE lists export-table UUIDs to answer CUDA_ERROR_NOT_FOUND.
 *
 * Trampolines take and forward twelve integer arguments: enough for every driver function
 * the survey meets (cuLaunchKernel has eleven); floating-point arguments by value would be
 * lost, none of the entry points implemented here has one.
 *
 * Build: scripts/survey-driver-api.sh (cc -shared -fPIC -Wl,-soname,libcuda.so.1 ...).
 * Not part of crum: a measuring instrument.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

typedef int CUresult;
typedef long A; /* one integer argument register */
#define ARGS A a0, A a1, A a2, A a3, A a4, A a5, A a6, A a7, A a8, A a9, A a10, A a11
#define FWD a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11
typedef A (*fn12)(ARGS);

/* ---- the log ---------------------------------------------------------------------------- */

static int log_fd = -2;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static void logf_(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void logf_(const char *fmt, ...) {
    if (log_fd == -2) {
        const char *p = getenv("CRUM_SURVEY_LOG");
        log_fd = p ? open(p, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644) : 2;
    }
    if (log_fd < 0) return;
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf - 1, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if (n > (int)sizeof buf - 2) n = sizeof buf - 2;
    buf[n++] = '\n';
    ssize_t w = write(log_fd, buf, (size_t)n); /* one write: lines of threads never mix */
    (void)w;
}

/* What entry points without an implementation return (CRUM_SURVEY_STUB_RESULT), and what
 * export-table slots of unknown meaning return (CRUM_SURVEY_SLOT_RESULT); both 0 by default. */
static long env_result(const char *var, long *cache) {
    if (*cache < 0) {
        const char *s = getenv(var);
        *cache = s ? strtol(s, NULL, 10) : 0;
    }
    return *cache;
}
static long stub_result(void) { static long r = -1; return env_result("CRUM_SURVEY_STUB_RESULT", &r); }
static long slot_result(void) { static long r = -1; return env_result("CRUM_SURVEY_SLOT_RESULT", &r); }

/* ---- small implementations over host memory ------------------------------------------ */

enum { OK = 0, INVALID_VALUE = 1, NOT_FOUND = 500 };

/* The driver version reported: 13000 unless CRUM_SURVEY_DRIVER_VERSION says otherwise. */
CUresult log_cuDriverGetVersion(int *v) {
    const char *s = getenv("CRUM_SURVEY_DRIVER_VERSION");
    *v = s ? atoi(s) : 13000;
    return OK;
}
CUresult log_cuGetErrorString(int e, const char **s) { (void)e; *s = "crum survey driver error"; return OK; }
CUresult log_cuGetErrorName(int e, const char **s) { (void)e; *s = "CUDA_ERROR_SURVEY"; return OK; }
CUresult log_cuDeviceGetCount(int *n) { *n = 1; return OK; }
CUresult log_cuModuleGetLoadingMode(int *mode) { *mode = 1; return OK; } /* CU_MODULE_LAZY_LOADING */
CUresult log_cuDeviceComputeCapability(int *ma, int *mi, int d) { (void)d; *ma = 8; *mi = 0; return OK; }

/* Device memory: an anonymous mapping per allocation; its address is the device pointer. */
static void *host_map(size_t n) {
    void *p = mmap(NULL, n ? n : 1, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}
CUresult log_cuMemAlloc(uint64_t *d, size_t n) { void *p = host_map(n); if (!p) return 2; *d = (uint64_t)p; return OK; }
CUresult log_cuMemAllocPitch(uint64_t *d, size_t *pitch, size_t w, size_t h, unsigned e) {
    (void)e;
    *pitch = (w + 255) & ~(size_t)255;
    return log_cuMemAlloc(d, *pitch * h);
}
CUresult log_cuMemFree(uint64_t d) { (void)d; return OK; } /* leaked: size unknown, harmless */
CUresult log_cuMemAllocHost(void **p, size_t n) { *p = host_map(n); return *p ? OK : 2; }
CUresult log_cuMemcpy(uint64_t dst, uint64_t src, size_t n) { memmove((void *)dst, (void *)src, n); return OK; }
CUresult log_cuMemcpyAsync4(uint64_t dst, uint64_t src, size_t n, void *s) { (void)s; return log_cuMemcpy(dst, src, n); }
CUresult log_cuMemsetD8(uint64_t d, unsigned char v, size_t n) { memset((void *)d, v, n); return OK; }
CUresult log_cuMemsetD32(uint64_t d, unsigned v, size_t n) { for (size_t i = 0; i < n; i++) ((unsigned *)d)[i] = v; return OK; }
CUresult log_cuMemsetD32Async(uint64_t d, unsigned v, size_t n, void *s) { (void)s; return log_cuMemsetD32(d, v, n); }
CUresult log_cuMemGetAddressRange(uint64_t *base, size_t *size, uint64_t d) {
    if (base) *base = d;
    if (size) *size = 1;
    return OK;
}
static int ctx_token_log;
CUresult log_cuCtxGetCurrent(void **c) { *c = &ctx_token_log; return OK; }
CUresult log_cuCtxGetDevice(int *d) { *d = 0; return OK; }
CUresult log_cuDevicePrimaryCtxRetain(void **c, int d) { (void)d; *c = &ctx_token_log; return OK; }
CUresult log_cuCtxSetCurrent(void *c) { (void)c; return OK; }
CUresult log_cuDevicePrimaryCtxGetState(int d, unsigned *flags, int *active) { (void)d; *flags = 0; *active = 1; return OK; }
CUresult log_cuStreamCreate(void **s, unsigned f) { (void)f; *s = calloc(1, 64); return OK; }
CUresult log_cuStreamCreateWithPriority(void **s, unsigned f, int p) { (void)f; (void)p; *s = calloc(1, 64); return OK; }
CUresult log_cuEventCreate(void **e, unsigned f) { (void)f; *e = calloc(1, 64); return OK; }
CUresult log_cuDeviceGetPCIBusId(char *s, int n, int d) { (void)d; snprintf(s, (size_t)n, "0000:00:00.0"); return OK; }
CUresult log_cuDeviceGetLuid(char *l, unsigned *m, int d) { (void)d; memset(l, 0, 8); *m = 1; return OK; }

/* Modules: a handle per loaded image; functions are handles naming nothing (launches are
 * logged, not run). */
CUresult log_cuModuleLoadData(void **m, const void *img) { (void)img; *m = calloc(1, 64); return OK; }
CUresult log_cuModuleLoadDataEx(void **m, const void *img, unsigned n, void *o, void *v) {
    (void)n; (void)o; (void)v;
    return log_cuModuleLoadData(m, img);
}
CUresult log_cuModuleGetFunction(void **f, void *m, const char *name) { (void)m; (void)name; *f = calloc(1, 64); return OK; }
CUresult log_cuLibraryLoadData(void **l, const void *code, A a2, A a3, A a4, A a5, A a6, A a7) {
    (void)code; (void)a2; (void)a3; (void)a4; (void)a5; (void)a6; (void)a7;
    *l = calloc(1, 64);
    return OK;
}
CUresult log_cuLibraryGetKernel(void **k, void *l, const char *name) { (void)l; (void)name; *k = calloc(1, 64); return OK; }
CUresult log_cuLibraryGetModule(void **m, void *l) { (void)l; *m = calloc(1, 64); return OK; }
CUresult log_cuKernelGetFunction(void **f, void *k) { (void)k; *f = calloc(1, 64); return OK; }
CUresult log_cuModuleGetGlobal(uint64_t *d, size_t *n, void *m, const char *name) {
    (void)m; (void)name;
    size_t sz = 1 << 20;
    if (d) *d = (uint64_t)host_map(sz);
    if (n) *n = sz;
    return OK;
}
CUresult log_cuLibraryGetGlobal(uint64_t *d, size_t *n, void *l, const char *name) { return log_cuModuleGetGlobal(d, n, l, name); }
CUresult log_cuLibraryGetManaged(uint64_t *d, size_t *n, void *l, const char *name) { return log_cuModuleGetGlobal(d, n, l, name); }
CUresult log_cuLaunchKernel(ARGS) { (void)a0; (void)a1; (void)a2; (void)a3; (void)a4; (void)a5; (void)a6; (void)a7; (void)a8; (void)a9; (void)a10; (void)a11; return OK; }
CUresult log_cuFuncGetAttribute(int *v, int attr, void *f) {
    (void)f;
    *v = attr == 0 ? 1024 : attr == 4 ? 80 : 0; /* max threads per block, PTX version */
    return OK;
}
CUresult log_cuFuncGetParamInfo(void *f, size_t i, size_t *off, size_t *sz) {
    (void)f;
    if (i >= 8) return INVALID_VALUE;
    if (off) *off = i * 8;
    if (sz) *sz = 8;
    return OK;
}
CUresult log_cuFuncGetName(const char **n, void *f) { (void)f; *n = "kernel"; return OK; }
CUresult log_cuPointerGetAttribute(void *data, int attr, uint64_t p) {
    (void)p;
    if (attr == 2) *(int *)data = 2; /* memory type: device */
    else *(uint64_t *)data = 0;
    return OK;
}

struct impl { const char *name; void *fn; };
static const struct impl impls[] = {
#define I(n, f) {n, (void *)f},
    I("cuDriverGetVersion", log_cuDriverGetVersion)
    I("cuGetErrorString", log_cuGetErrorString)
    I("cuGetErrorName", log_cuGetErrorName)
    I("cuDeviceGetCount", log_cuDeviceGetCount)
    I("cuModuleGetLoadingMode", log_cuModuleGetLoadingMode)
    I("cuDeviceComputeCapability", log_cuDeviceComputeCapability)
    I("cuMemAlloc", log_cuMemAlloc)
    I("cuMemAllocPitch", log_cuMemAllocPitch)
    I("cuMemFree", log_cuMemFree)
    I("cuMemAllocHost", log_cuMemAllocHost)
    I("cuMemcpy", log_cuMemcpy)
    I("cuMemcpyHtoD", log_cuMemcpy)
    I("cuMemcpyDtoH", log_cuMemcpy)
    I("cuMemcpyDtoD", log_cuMemcpy)
    I("cuMemcpyHtoDAsync", log_cuMemcpyAsync4)
    I("cuMemcpyDtoHAsync", log_cuMemcpyAsync4)
    I("cuMemcpyDtoDAsync", log_cuMemcpyAsync4)
    I("cuMemsetD8", log_cuMemsetD8)
    I("cuMemsetD32", log_cuMemsetD32)
    I("cuMemsetD32Async", log_cuMemsetD32Async)
    I("cuMemGetAddressRange", log_cuMemGetAddressRange)
    I("cuCtxGetCurrent", log_cuCtxGetCurrent)
    I("cuCtxGetDevice", log_cuCtxGetDevice)
    I("cuDevicePrimaryCtxRetain", log_cuDevicePrimaryCtxRetain)
    I("cuDevicePrimaryCtxGetState", log_cuDevicePrimaryCtxGetState)
    I("cuCtxSetCurrent", log_cuCtxSetCurrent)
    I("cuStreamCreate", log_cuStreamCreate)
    I("cuStreamCreateWithPriority", log_cuStreamCreateWithPriority)
    I("cuEventCreate", log_cuEventCreate)
    I("cuDeviceGetPCIBusId", log_cuDeviceGetPCIBusId)
    I("cuDeviceGetLuid", log_cuDeviceGetLuid)
    I("cuModuleLoadData", log_cuModuleLoadData)
    I("cuModuleLoadDataEx", log_cuModuleLoadDataEx)
    I("cuModuleGetFunction", log_cuModuleGetFunction)
    I("cuModuleGetGlobal", log_cuModuleGetGlobal)
    I("cuLibraryLoadData", log_cuLibraryLoadData)
    I("cuLibraryGetKernel", log_cuLibraryGetKernel)
    I("cuLibraryGetModule", log_cuLibraryGetModule)
    I("cuLibraryGetGlobal", log_cuLibraryGetGlobal)
    I("cuLibraryGetManaged", log_cuLibraryGetManaged)
    I("cuKernelGetFunction", log_cuKernelGetFunction)
    I("cuLaunchKernel", log_cuLaunchKernel)
    I("cuFuncGetAttribute", log_cuFuncGetAttribute)
    I("cuFuncGetParamInfo", log_cuFuncGetParamInfo)
    I("cuFuncGetName", log_cuFuncGetName)
    I("cuPointerGetAttribute", log_cuPointerGetAttribute)
#undef I
};

/* The implementation of NAME: ours above, else the fake driver's (by its exported name,
 * NAME or NAME_v2/_v3 as the headers map it), else none. */
static void *real_dlsym(void *handle, const char *name) {
    static void *(*real)(void *, const char *);
    if (!real) {
        real = (void *(*)(void *, const char *))dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
        if (!real) real = (void *(*)(void *, const char *))dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
    }
    return real(handle, name);
}

static void *find_impl(const char *name) {
    for (size_t i = 0; i < sizeof impls / sizeof impls[0]; i++)
        if (!strcmp(impls[i].name, name)) return impls[i].fn;
    static void *self;
    if (!self) {
        Dl_info info;
        if (dladdr((void *)find_impl, &info)) self = dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD);
    }
    if (!self) return NULL;
    char v[256];
    const char *suffixes[] = {"_v3", "_v2", ""};
    for (int i = 0; i < 3; i++) {
        snprintf(v, sizeof v, "%s%s", name, suffixes[i]);
        void *f = real_dlsym(self, v);
        if (f) return f;
    }
    return NULL;
}

/* ---- entry-point trampolines ------------------------------------------------------------ */

#define NPROC 1000
static const char *proc_name[NPROC];
static void *proc_impl[NPROC];
static int proc_called[NPROC];
static int nproc;

static A proc_dispatch(int k, ARGS) {
    void *f = proc_impl[k];
    A r = f ? ((fn12)f)(FWD) : stub_result();
    if (!__atomic_exchange_n(&proc_called[k], 1, __ATOMIC_SEQ_CST))
        logf_("call %s %s %ld", proc_name[k], f ? "impl" : "stub", (long)(int)r);
    return r;
}

#define L1(m, p) m(p##0) m(p##1) m(p##2) m(p##3) m(p##4) m(p##5) m(p##6) m(p##7) m(p##8) m(p##9)
#define L2(m, p) L1(m, p##0) L1(m, p##1) L1(m, p##2) L1(m, p##3) L1(m, p##4) L1(m, p##5) L1(m, p##6) L1(m, p##7) L1(m, p##8) L1(m, p##9)
#define L3(m, p) L2(m, p##0) L2(m, p##1) L2(m, p##2) L2(m, p##3) L2(m, p##4) L2(m, p##5) L2(m, p##6) L2(m, p##7) L2(m, p##8) L2(m, p##9)

#define PT(n) static A pt_##n(ARGS) { return proc_dispatch(n - 1000, FWD); }
L3(PT, 1)
#define PTE(n) (void *)pt_##n,
static void *const proc_tramp[NPROC] = {L3(PTE, 1)};

/* The trampoline for NAME (made on first request); *has_impl tells whether it leads to an
 * implementation. */
static void *proc_for(const char *name, int *has_impl) {
    pthread_mutex_lock(&lock);
    for (int k = 0; k < nproc; k++) {
        if (!strcmp(proc_name[k], name)) {
            *has_impl = proc_impl[k] != NULL;
            pthread_mutex_unlock(&lock);
            return proc_tramp[k];
        }
    }
    *has_impl = 0;
    if (nproc == NPROC) {
        pthread_mutex_unlock(&lock);
        logf_("note trampolines exhausted at %s", name);
        return NULL;
    }
    int k = nproc;
    proc_name[k] = strdup(name);
    proc_impl[k] = find_impl(name);
    *has_impl = proc_impl[k] != NULL;
    __atomic_store_n(&nproc, k + 1, __ATOMIC_SEQ_CST);
    pthread_mutex_unlock(&lock);
    return proc_tramp[k];
}

CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, unsigned long long flags, int *status) {
    if (!symbol || !pfn) return INVALID_VALUE;
    int has_impl;
    void *t = proc_for(symbol, &has_impl);
    logf_("proc %s %d %llu %s", symbol[0] ? symbol : "\"\"", version, flags, has_impl ? "impl" : "stub");
    *pfn = t;
    if (status) *status = t ? 0 : 1; /* CU_GET_PROC_ADDRESS_SUCCESS / SYMBOL_NOT_FOUND */
    return t ? OK : NOT_FOUND;
}
CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, unsigned long long flags) {
    return cuGetProcAddress_v2(symbol, pfn, version, flags, NULL);
}

/* ---- export tables ---------------------------------------------------------------------- */

#define NTABLE 15
#define NSLOT 64
struct table { unsigned char uuid[16]; char name[40]; void *slots[NSLOT]; int called[NSLOT]; };
static struct table tables[NTABLE];
static int ntable;

static void uuid_str(const unsigned char *u, char *out) {
    /* ZLUDA's notation: the 16 bytes in order, grouped 4-2-2-2-6. */
    sprintf(out, "%02X%02X%02X%02X-%02X%02X-%02X%02X-%02X%02X-%02X%02X%02X%02X%02X%02X",
            u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
}

/* Tables whose slot 0 is their size in bytes (ZLUDA's dark_api documents this for them); in
 * the others slot 0 is a function. */
static int sized_table(const char *name) {
    return strcmp(name, "C693336E-1121-DF11-A8C3-68F355D89593") != 0; /* context-local storage */
}

/* What is known of a few slots (ZLUDA's dark_api crate documents them). */
struct cls { void *ctx, *mgr, *state; };
static struct cls cls_entries[64];
static int ncls;
static unsigned char hooks_buf[2][4096];

static A known_slot(const char *t, int s, ARGS, int *known) {
    *known = 1;
    (void)a3; (void)a4; (void)a5; (void)a6; (void)a7; (void)a8; (void)a9; (void)a10; (void)a11;
    if (!strcmp(t, "C693336E-1121-DF11-A8C3-68F355D89593")) {
        if (s == 0) { /* ctor(ctx, manager, state, dtor callback): remember the state */
            pthread_mutex_lock(&lock);
            if (ncls < 64) cls_entries[ncls++] = (struct cls){(void *)a0, (void *)a1, (void *)a2};
            pthread_mutex_unlock(&lock);
            return OK;
        }
        if (s == 2) { /* get_state(&state, ctx, manager) */
            for (int i = ncls - 1; i >= 0; i--) {
                if (cls_entries[i].ctx == (void *)a1 && cls_entries[i].mgr == (void *)a2) {
                    *(void **)a0 = cls_entries[i].state;
                    return OK;
                }
            }
            return INVALID_VALUE; /* none yet: the runtime creates its state */
        }
        if (s == 1) return OK;
    }
    if (!strcmp(t, "6BD5FB6C-5BF4-E74A-8987-D93912FD9DF9")) {
        if (s == 1 || s == 6) { *(void **)a0 = calloc(1, 64); return OK; } /* module from fat binary */
        if (s == 8) { *(void **)a1 = calloc(1, 64); return OK; }
        if (s == 2) { *(void **)a0 = &ctx_token_log; return OK; }      /* primary context of dev */
    }
    if (!strcmp(t, "A094798C-2E74-2E74-93F2-0800200C0A66") && (s == 2 || s == 6)) {
        *(void **)a0 = hooks_buf[s == 6];
        *(size_t *)a1 = sizeof hooks_buf[0];
        return 0;
    }
    *known = 0;
    return slot_result();
}

static A slot_dispatch(int idx, ARGS) {
    int ti = idx / NSLOT, s = idx % NSLOT;
    struct table *t = &tables[ti];
    int known;
    A r = known_slot(t->name, s, FWD, &known);
    if (!__atomic_exchange_n(&t->called[s], 1, __ATOMIC_SEQ_CST))
        logf_("slot %s %d %ld %s a0=%#lx a1=%#lx a2=%#lx a3=%#lx", t->name, s, (long)(int)r, known ? "known" : "unknown",
              (unsigned long)a0, (unsigned long)a1, (unsigned long)a2, (unsigned long)a3);
    return r;
}

#define DT(n) static A dt_##n(ARGS) { return slot_dispatch(n - 1000, FWD); }
L3(DT, 1)
#define DTE(n) (void *)dt_##n,
static void *const slot_tramp[1000] = {L3(DTE, 1)};

CUresult cuGetExportTable(const void **out, const unsigned char *uuid) {
    if (!out || !uuid) return INVALID_VALUE;
    char name[40];
    uuid_str(uuid, name);
    const char *refuse = getenv("CRUM_SURVEY_REFUSE"); /* UUIDs answered "not found" */
    if (refuse && strstr(refuse, name)) {
        logf_("table %s refused", name);
        return NOT_FOUND;
    }
    logf_("table %s", name);
    pthread_mutex_lock(&lock);
    int i;
    for (i = 0; i < ntable; i++)
        if (!memcmp(tables[i].uuid, uuid, 16)) break;
    if (i == ntable) {
        if (ntable == NTABLE) {
            pthread_mutex_unlock(&lock);
            logf_("note export tables exhausted at %s", name);
            return INVALID_VALUE;
        }
        struct table *t = &tables[ntable];
        memcpy(t->uuid, uuid, 16);
        strcpy(t->name, name);
        for (int s = 0; s < NSLOT; s++) t->slots[s] = slot_tramp[ntable * NSLOT + s];
        if (sized_table(name)) t->slots[0] = (void *)(uintptr_t)(NSLOT * sizeof(void *));
        ntable++;
    }
    *out = tables[i].slots;
    pthread_mutex_unlock(&lock);
    return OK;
}

/* ---- direct look-ups ---------------------------------------------------------------------- */

/* Preloaded, this dlsym sees the runtime's direct look-ups of driver symbols. */
void *dlsym(void *handle, const char *name) {
    if (name[0] == 'c' && name[1] == 'u' && name[2] >= 'A' && name[2] <= 'Z' && handle != RTLD_NEXT) {
        logf_("dlsym %s", name);
        if (strcmp(name, "cuGetProcAddress") && strcmp(name, "cuGetProcAddress_v2") && strcmp(name, "cuGetExportTable")) {
            int has_impl;
            void *t = proc_for(name, &has_impl);
            if (t) return t;
        }
    }
    return real_dlsym(handle, name);
}
