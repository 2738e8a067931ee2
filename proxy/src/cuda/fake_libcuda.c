/* A stand-in for libcuda.so, for testing the cuda backend's plumbing on machines without a
 * GPU (proxy/tests/conformance.rs, test `gpu_backend_plumbing_against_a_fake_driver`).
 *
 * It implements, on the CPU, the driver entry points the backend uses for memory, copies,
 * streams, events and host functions, following the CUDA Driver API's contracts where the
 * backend depends on them: cuMemAddressReserve treats the address as a hint and places the
 * range elsewhere when it is taken; cuMemMap maps physical memory (a memfd) into a reserved
 * range; cuMemUnmap leaves the range reserved; copies take unified addresses. Work is done
 * at once when it is queued, so every stream is trivially in order and host functions run
 * inside cuLaunchHostFunc. Kernels are the conformance suite's, written in C (below).
 *
 * Build: cc -shared -fPIC -o libcuda.so fake_libcuda.c
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

typedef int CUresult;
typedef int CUdevice;
typedef uint64_t CUdeviceptr;
typedef void *CUcontext, *CUstream, *CUmodule, *CUfunction;
typedef void (*CUhostFn)(void *);

enum { OK = 0, INVALID_VALUE = 1, OUT_OF_MEMORY = 2, NOT_SUPPORTED = 801, NOT_FOUND = 500 };

static int ctx_token;

CUresult cuInit(unsigned flags) { return flags ? INVALID_VALUE : OK; }
CUresult cuDriverGetVersion(int *v) { *v = 12080; return OK; }
CUresult cuDeviceGetCount(int *n) { *n = 1; return OK; }
CUresult cuDeviceGet(CUdevice *d, int ordinal) { if (ordinal != 0) return 101; *d = 0; return OK; }
CUresult cuDeviceGetName(char *name, int len, CUdevice d) {
    (void)d;
    strncpy(name, "crum fake driver", (size_t)len);
    return OK;
}
CUresult cuDeviceGetAttribute(int *v, int attr, CUdevice d) {
    (void)d;
    switch (attr) {
    case 1: case 2: case 3: *v = 1024; break; /* max threads per block, block dims x, y */
    case 4: *v = 64; break;                   /* block dim z */
    case 5: *v = 0x7fffffff; break;           /* grid dim x */
    case 6: case 7: *v = 65535; break;        /* grid dims y, z */
    case 8: *v = 48 << 10; break;             /* shared memory per block */
    case 9: *v = 64 << 10; break;             /* constant memory */
    case 10: *v = 32; break;                  /* warp size */
    case 12: case 82: *v = 65536; break;      /* registers per block / per SM */
    case 16: *v = 4; break;                   /* multiprocessors */
    case 38: *v = 4 << 20; break;             /* L2 cache size */
    case 39: *v = 2048; break;                /* threads per SM */
    case 75: *v = 8; break;                   /* compute capability major */
    case 76: *v = 0; break;
    case 81: *v = 164 << 10; break;           /* shared memory per SM */
    case 97: *v = 163 << 10; break;           /* shared memory per block, opt-in */
    case 106: *v = 32; break;                 /* blocks per SM */
    case 108: *v = 3 << 20; break;            /* max persisting L2 */
    case 109: *v = 4 << 20; break;            /* max access policy window */
    default: *v = 1; break;                   /* every feature flag, including VMM (102) */
    }
    return OK;
}
CUresult cuDeviceTotalMem_v2(size_t *b, CUdevice d) { (void)d; *b = (size_t)16 << 30; return OK; }
CUresult cuDeviceGetUuid(unsigned char *u, CUdevice d) { (void)d; memset(u, 7, 16); return OK; }
CUresult cuDeviceGetUuid_v2(unsigned char *u, CUdevice d) { return cuDeviceGetUuid(u, d); }
CUresult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d) { (void)d; *c = &ctx_token; return OK; }
CUresult cuCtxSetCurrent(CUcontext c) { return c == &ctx_token ? OK : 201; }
CUresult cuCtxSynchronize(void) { return OK; }
CUresult cuMemGetInfo_v2(size_t *f, size_t *t) { *f = (size_t)15 << 30; *t = (size_t)16 << 30; return OK; }

#define GRANULE ((size_t)2 << 20)
/* The minimum granularity (option 0) is what mappings need; the recommended one (1) is
 * larger here, as it may be on a GPU. */
CUresult cuMemGetAllocationGranularity(size_t *g, const void *prop, int option) {
    (void)prop;
    *g = option == 1 ? 4 * GRANULE : GRANULE;
    return OK;
}

CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t align, CUdeviceptr addr, unsigned long long flags) {
    (void)align;
    if (flags || size % GRANULE || addr % GRANULE) return INVALID_VALUE;
    int f = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;
    void *p = mmap((void *)addr, size, PROT_NONE, addr ? f | MAP_FIXED_NOREPLACE : f, -1, 0);
    if (p == MAP_FAILED) p = mmap(NULL, size, PROT_NONE, f, -1, 0); /* the hint was taken */
    if (p == MAP_FAILED) return OUT_OF_MEMORY;
    *ptr = (CUdeviceptr)p;
    return OK;
}
CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) { return munmap((void *)ptr, size) ? INVALID_VALUE : OK; }
CUresult cuMemCreate(unsigned long long *handle, size_t size, const void *prop, unsigned long long flags) {
    (void)prop;
    if (flags || size % GRANULE) return INVALID_VALUE;
    int fd = memfd_create("fake-vram", MFD_CLOEXEC);
    if (fd < 0 || ftruncate(fd, (off_t)size)) return OUT_OF_MEMORY;
    *handle = (unsigned long long)fd;
    return OK;
}
CUresult cuMemRelease(unsigned long long handle) { return close((int)handle) ? INVALID_VALUE : OK; }
CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, unsigned long long handle, unsigned long long flags) {
    if (flags || size % GRANULE || ptr % GRANULE) return INVALID_VALUE;
    /* Real mappings start inaccessible until cuMemSetAccess. */
    void *p = mmap((void *)ptr, size, PROT_NONE, MAP_SHARED | MAP_FIXED, (int)handle, (off_t)offset);
    return p == MAP_FAILED ? INVALID_VALUE : OK;
}
CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const void *desc, size_t count) {
    if (count != 1 || !desc) return INVALID_VALUE;
    /* CUmemAccessDesc: location (type, id), then flags: 1 read, 3 read and write. */
    int flags = ((const int *)desc)[2];
    int prot = flags == 3 ? PROT_READ | PROT_WRITE : flags == 1 ? PROT_READ : PROT_NONE;
    return mprotect((void *)ptr, size, prot) ? INVALID_VALUE : OK;
}
CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
    void *p = mmap((void *)ptr, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
    return p == MAP_FAILED ? INVALID_VALUE : OK;
}

static struct { void *p; size_t n; } managed[4096];
CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t size, unsigned flags) {
    (void)flags;
    for (int i = 0; i < 4096; i++) {
        if (!managed[i].p) {
            void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (p == MAP_FAILED) return OUT_OF_MEMORY;
            managed[i].p = p;
            managed[i].n = size;
            *dptr = (CUdeviceptr)p;
            return OK;
        }
    }
    return OUT_OF_MEMORY;
}
CUresult cuMemFree_v2(CUdeviceptr d) {
    for (int i = 0; i < 4096; i++) {
        if (managed[i].p == (void *)d) {
            munmap(managed[i].p, managed[i].n);
            managed[i].p = NULL;
            return OK;
        }
    }
    return INVALID_VALUE;
}
CUresult cuMemHostRegister_v2(void *p, size_t n, unsigned flags) { (void)flags; return p && n ? OK : INVALID_VALUE; }
CUresult cuMemHostUnregister(void *p) { return p ? OK : INVALID_VALUE; }
CUresult cuMemHostAlloc(void **pp, size_t n, unsigned flags) {
    (void)flags;
    *pp = aligned_alloc(4096, (n + 4095) / 4096 * 4096);
    return *pp ? OK : OUT_OF_MEMORY;
}
CUresult cuMemFreeHost(void *p) { free(p); return OK; }

/* Modules: any image loads; its kernels are the conformance suite's (tests/data/kernels.cu),
 * implemented here on the CPU, with their parameter layouts as cuFuncGetParamInfo reports
 * them, so the launch path (layout, packing, kernelParams) is checked end to end. */
struct func { const char *name; int nparams; size_t off[9], size[9]; };
static struct func funcs[] = {
    {"kinds", 9, {0, 8, 10, 12, 16, 24, 32, 40, 64}, {8, 1, 2, 4, 8, 4, 8, 24, 16}},
    {"fill", 3, {0, 8, 12}, {8, 4, 4}},
    {"reverse_shared", 1, {0}, {8}},
    {"bump", 0, {0}, {0}},
    {"scale_table", 1, {0}, {4}},
    {"incr", 2, {0, 8}, {8, 4}},
    {"bump_managed", 0, {0}, {0}},
    {"heap_keep", 2, {0, 8}, {8, 4}},
};
/* Each loaded module has its own module variables, as on a GPU. */
struct module { int counter; float table[4]; int mcount; };
/* A kernel handle: the kernel and the module it came from. */
struct kernel { struct func *fn; struct module *mod; };

/* Modules take the lowest free slot of a fixed table: as a driver in a process without
 * address randomization does, the same loads in the same order place module variables at the
 * same addresses (what a restart needs). */
static struct module module_slots[64];
static int module_used[64];
static pthread_mutex_t module_lock = PTHREAD_MUTEX_INITIALIZER;
CUresult cuModuleLoadData(CUmodule *m, const void *image) {
    if (!image) return INVALID_VALUE;
    pthread_mutex_lock(&module_lock);
    int i = 0;
    while (i < 64 && module_used[i]) i++;
    if (i < 64) module_used[i] = 1;
    pthread_mutex_unlock(&module_lock);
    if (i == 64) return OUT_OF_MEMORY;
    struct module *mod = &module_slots[i];
    memset(mod, 0, sizeof *mod);
    for (int k = 0; k < 4; k++) mod->table[k] = (float)(k + 1);
    mod->mcount = 5;
    *m = mod;
    return OK;
}
CUresult cuModuleUnload(CUmodule m) {
    pthread_mutex_lock(&module_lock);
    module_used[(struct module *)m - module_slots] = 0;
    pthread_mutex_unlock(&module_lock);
    return OK;
}
CUresult cuModuleGetFunction(CUfunction *f, CUmodule m, const char *n) {
    for (size_t i = 0; i < sizeof funcs / sizeof funcs[0]; i++) {
        if (!strcmp(funcs[i].name, n)) {
            struct kernel *k = malloc(sizeof *k); /* lives as long as the process, as a handle may */
            k->fn = &funcs[i];
            k->mod = m;
            *f = k;
            return OK;
        }
    }
    return NOT_FOUND;
}
CUresult cuModuleGetFunctionCount(unsigned *n, CUmodule m) {
    if (!n || !m) return INVALID_VALUE;
    *n = sizeof funcs / sizeof funcs[0];
    return OK;
}
CUresult cuModuleEnumerateFunctions(CUfunction *out, unsigned n, CUmodule m) {
    if (!out || !m || n != sizeof funcs / sizeof funcs[0]) return INVALID_VALUE;
    for (unsigned i = 0; i < n; i++) {
        struct kernel *k = malloc(sizeof *k);
        k->fn = &funcs[i];
        k->mod = m;
        out[i] = k;
    }
    return OK;
}
CUresult cuFuncGetName(const char **name, CUfunction f) {
    if (!name || !f) return INVALID_VALUE;
    *name = ((struct kernel *)f)->fn->name;
    return OK;
}
CUresult cuModuleGetGlobal_v2(CUdeviceptr *p, size_t *b, CUmodule m, const char *n) {
    struct module *mod = m;
    if (!strcmp(n, "counter")) { *p = (CUdeviceptr)&mod->counter; *b = sizeof mod->counter; return OK; }
    if (!strcmp(n, "table")) { *p = (CUdeviceptr)mod->table; *b = sizeof mod->table; return OK; }
    if (!strcmp(n, "mcount")) { *p = (CUdeviceptr)&mod->mcount; *b = sizeof mod->mcount; return OK; }
    return NOT_FOUND;
}
/* Built with -DNO_PARAM_INFO it stands for a driver older than 12.4 (PTX fallback). */
#ifndef NO_PARAM_INFO
CUresult cuFuncGetParamInfo(CUfunction f, size_t i, size_t *off, size_t *size) {
    struct func *fn = ((struct kernel *)f)->fn;
    if (i >= (size_t)fn->nparams) return INVALID_VALUE;
    *off = fn->off[i];
    if (size) *size = fn->size[i];
    return OK;
}
#endif
CUresult cuFuncGetAttribute(int *v, int attr, CUfunction f) {
    (void)f;
    *v = attr == 0 ? 1024 : attr == 5 || attr == 6 ? 80 : 0;
    return OK;
}
CUresult cuFuncSetAttribute(CUfunction f, int attr, int v) { (void)f; (void)attr; return v < 0 ? INVALID_VALUE : OK; }

#define ARG(type, i) (*(type *)kp[i])
static uint64_t bits32(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static uint64_t bits64(double d) { uint64_t u; memcpy(&u, &d, 8); return u; }
struct mixed { char c; double d; int i; };

CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned shared, CUstream s, void **kp, void **extra) {
    (void)s;
    struct func *fn = ((struct kernel *)f)->fn;
    struct module *mod = ((struct kernel *)f)->mod;
    if (extra || !gx || !gy || !gz || !bx || !by || !bz || bx * by * bz > 1024) return INVALID_VALUE;
    if (fn->nparams && !kp) return INVALID_VALUE;
    size_t threads = (size_t)gx * bx;
    if (!strcmp(fn->name, "kinds")) {
        uint64_t *out = ARG(uint64_t *, 0);
        struct mixed m;
        float v[4];
        memcpy(&m, kp[7], sizeof m);
        memcpy(v, kp[8], sizeof v);
        out[0] = (uint64_t)(int64_t)ARG(signed char, 1);
        out[1] = (uint64_t)(int64_t)ARG(short, 2);
        out[2] = (uint64_t)(int64_t)ARG(int, 3);
        out[3] = (uint64_t)ARG(long long, 4);
        out[4] = bits32(ARG(float, 5));
        out[5] = bits64(ARG(double, 6));
        out[6] = (uint64_t)(int64_t)m.c;
        out[7] = bits64(m.d);
        out[8] = (uint64_t)(int64_t)m.i;
        out[9] = bits32(v[0]) | bits32(v[3]) << 32;
    } else if (!strcmp(fn->name, "fill")) {
        float *p = ARG(float *, 0);
        int n = ARG(int, 1);
        for (size_t i = 0; i < threads; i++) if ((int)i < n) p[i] = ARG(float, 2) + (float)i;
    } else if (!strcmp(fn->name, "reverse_shared")) {
        if (shared < bx * sizeof(int)) return 700; /* out of bounds shared access */
        int *out = ARG(int *, 0);
        for (unsigned t = 0; t < bx; t++) out[t] = (int)(bx - 1 - t);
    } else if (!strcmp(fn->name, "bump")) {
        mod->counter += (int)threads;
    } else if (!strcmp(fn->name, "bump_managed")) {
        mod->mcount += (int)(threads * by * bz * gy * gz);
    } else if (!strcmp(fn->name, "scale_table")) {
        for (unsigned t = 0; t < bx && t < 4; t++) mod->table[t] *= ARG(float, 0);
    } else if (!strcmp(fn->name, "incr")) {
        int *p = ARG(int *, 0);
        int n = ARG(int, 1);
        for (size_t i = 0; i < threads; i++) if ((int)i < n) p[i] += 1;
    } else if (!strcmp(fn->name, "heap_keep")) {
        /* The driver's device heap: out of the backend's reach, as on a GPU. */
        int *b = malloc(sizeof(int));
        if (b) *b = ARG(int, 1);
        *ARG(int **, 0) = b;
    } else {
        return 400;
    }
    return OK;
}
CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                   unsigned bz, unsigned shared, CUstream s, void **kp) {
    return cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shared, s, kp, NULL);
}

struct stream { int live; };
CUresult cuStreamCreateWithPriority(CUstream *s, unsigned flags, int prio) {
    (void)flags; (void)prio;
    struct stream *st = calloc(1, sizeof *st);
    st->live = 1;
    *s = st;
    return OK;
}
CUresult cuStreamDestroy_v2(CUstream s) { if (!s) return INVALID_VALUE; free(s); return OK; }
CUresult cuStreamQuery(CUstream s) { (void)s; return OK; }
CUresult cuStreamSynchronize(CUstream s) { (void)s; return OK; }
/* Stream attributes (hints): the window (id 1) is checked against attribute 109 as the driver
 * does; synchronization policy (3) and memory sync domain map/domain (9, 10) are taken. */
struct access_window { void *base; size_t bytes; float hit_ratio; int hit, miss; };
static size_t persisting_limit;
CUresult cuStreamSetAttribute(CUstream s, int attr, const void *value) {
    (void)s;
    if (attr == 1) {
        const struct access_window *w = value;
        if (w->bytes > (size_t)(4 << 20) || w->hit_ratio < 0 || w->hit_ratio > 1) return INVALID_VALUE;
        return OK;
    }
    return attr == 3 || attr == 9 || attr == 10 ? OK : INVALID_VALUE;
}
CUresult cuCtxResetPersistingL2Cache(void) { return OK; }
CUresult cuCtxSetLimit(int limit, size_t value) {
    if (limit != 6) return NOT_SUPPORTED;
    persisting_limit = value;
    return OK;
}

struct event { int recorded; double t; };
static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}
CUresult cuEventCreate(void **e, unsigned flags) { (void)flags; *e = calloc(1, sizeof(struct event)); return OK; }
CUresult cuEventDestroy_v2(void *e) { free(e); return OK; }
CUresult cuEventRecord(void *e, CUstream s) {
    (void)s;
    struct event *ev = e;
    ev->recorded = 1;
    ev->t = now_ms();
    return OK;
}
CUresult cuEventQuery(void *e) { (void)e; return OK; }
CUresult cuEventSynchronize(void *e) { (void)e; return OK; }
CUresult cuEventElapsedTime(float *ms, void *a, void *b) {
    *ms = (float)(((struct event *)b)->t - ((struct event *)a)->t);
    return OK;
}
CUresult cuStreamWaitEvent(CUstream s, void *e, unsigned flags) { (void)s; return e && !flags ? OK : INVALID_VALUE; }
CUresult cuLaunchHostFunc(CUstream s, CUhostFn fn, void *data) { (void)s; fn(data); return OK; }

CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
    (void)s;
    memmove((void *)dst, (const void *)src, n);
    return OK;
}
typedef struct {
    size_t srcXInBytes, srcY;
    int srcMemoryType;
    const void *srcHost;
    CUdeviceptr srcDevice;
    void *srcArray;
    size_t srcPitch;
    size_t dstXInBytes, dstY;
    int dstMemoryType;
    void *dstHost;
    CUdeviceptr dstDevice;
    void *dstArray;
    size_t dstPitch;
    size_t WidthInBytes, Height;
} CUDA_MEMCPY2D;
CUresult cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D *c, CUstream s) {
    (void)s;
    if (c->srcMemoryType != 4 || c->dstMemoryType != 4) return NOT_SUPPORTED; /* unified only */
    if (c->srcPitch < c->WidthInBytes || c->dstPitch < c->WidthInBytes) return INVALID_VALUE;
    for (size_t r = 0; r < c->Height; r++) {
        memmove((char *)(c->dstDevice + (c->dstY + r) * c->dstPitch + c->dstXInBytes),
                (const char *)(c->srcDevice + (c->srcY + r) * c->srcPitch + c->srcXInBytes), c->WidthInBytes);
    }
    return OK;
}
CUresult cuMemsetD8Async(CUdeviceptr d, unsigned char v, size_t n, CUstream s) { (void)s; memset((void *)d, v, n); return OK; }
CUresult cuMemsetD2D8Async(CUdeviceptr d, size_t pitch, unsigned char v, size_t w, size_t h, CUstream s) {
    (void)s;
    for (size_t r = 0; r < h; r++) memset((char *)(d + r * pitch), v, w);
    return OK;
}
