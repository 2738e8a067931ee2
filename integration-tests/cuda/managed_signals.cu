// The program's own SIGSEGV and SIGBUS handlers next to managed memory (whose shadow pages
// the library protects and fault-handles), and genuine crashes.
//
// Usage: managed_signals MODE
//   after   SIGSEGV handler installed with sigaction after cudaMallocManaged: faults on a
//           PROT_NONE page the program mapped itself reach it (it mprotects the page and
//           returns), managed faults do not; several rounds of kernels in between
//   before  the same with the handler installed before any CUDA call
//   bus     a SIGBUS handler (access past the end of a truncated file mapping, siglongjmp
//           out of the handler) between kernels on managed memory
//   crash   no handler: a write to NULL after managed memory was protected must kill the
//           program with SIGSEGV
//   freed   no handler: a write into a freed managed allocation must kill it with SIGSEGV
#include "common.h"
#include <csetjmp>
#include <csignal>
#include <cstring>
#include <sys/mman.h>
#include <unistd.h>

__global__ void inc(int *x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += i;
}

static char *own_page;
static volatile sig_atomic_t own_faults, stray_faults;
static void on_segv(int, siginfo_t *si, void *) {
    char *a = (char *)si->si_addr;
    if (a >= own_page && a < own_page + 4096) {
        own_faults = own_faults + 1;
        mprotect(own_page, 4096, PROT_READ | PROT_WRITE);
        return;
    }
    // A fault the program did not expect (e.g. one on managed memory that reached the
    // program instead of the library): say so and die like an unhandled fault.
    stray_faults = stray_faults + 1;
    static const char msg[] = "managed_signals: unexpected SIGSEGV reached the program's handler\n";
    (void)!write(2, msg, sizeof msg - 1);
    signal(SIGSEGV, SIG_DFL);
}
static void install_segv() {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_segv;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    EXPECT(sigaction(SIGSEGV, &sa, nullptr) == 0);
}

static sigjmp_buf bus_jmp;
static volatile sig_atomic_t bus_faults;
static void on_bus(int) {
    bus_faults = bus_faults + 1;
    siglongjmp(bus_jmp, 1);
}

// Kernel rounds on a 3-page managed array with CPU reads and writes; `between` runs after each
// kernel while the managed pages are (with shadow pages) protected.
static void rounds(int *x, int n, int *ref, void (*between)(int)) {
    for (int r = 0; r < 4; r++) {
        inc<<<(n + 255) / 256, 256>>>(x, n);
        CK(cudaDeviceSynchronize());
        for (int i = 0; i < n; i++) ref[i] += i;
        between(r);
        for (int i = 0; i < n; i++) EXPECT(x[i] == ref[i]);
        x[r * 1000] = ref[r * 1000] = r;
    }
}
static void own_fault(int r) {
    EXPECT(mprotect(own_page, 4096, PROT_NONE) == 0);
    own_page[r * 100] = (char)r;  // faults; the handler opens the page; the store retries
    EXPECT(own_page[r * 100] == (char)r);
}
static char *bus_map;
static void bus_fault(int r) {
    if (sigsetjmp(bus_jmp, 1) == 0) {
        volatile char c = bus_map[4096 + r];  // past the end of the 1-byte file: SIGBUS
        (void)c;
        EXPECT(0);
    }
    EXPECT(bus_faults == r + 1);
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "after";
    const int n = 3 * 1024;
    int ref[n];
    if (strcmp(mode, "before") == 0) install_segv();
    own_page = (char *)mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    EXPECT(own_page != MAP_FAILED);
    int *x;
    CK(cudaMallocManaged(&x, n * 4));
    for (int i = 0; i < n; i++) x[i] = ref[i] = i * 2;
    if (strcmp(mode, "after") == 0 || strcmp(mode, "before") == 0) {
        if (strcmp(mode, "after") == 0) install_segv();
        rounds(x, n, ref, own_fault);
        EXPECT(own_faults == 4 && stray_faults == 0);
        printf("own faults %d\n", (int)own_faults);
    } else if (strcmp(mode, "bus") == 0) {
        char path[] = "/tmp/crum-msig-XXXXXX";
        int fd = mkstemp(path);
        EXPECT(fd >= 0);
        unlink(path);
        EXPECT(write(fd, "x", 1) == 1);
        bus_map = (char *)mmap(nullptr, 8192, PROT_READ, MAP_SHARED, fd, 0);
        EXPECT(bus_map != MAP_FAILED);
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_bus;
        sigemptyset(&sa.sa_mask);
        EXPECT(sigaction(SIGBUS, &sa, nullptr) == 0);
        rounds(x, n, ref, bus_fault);
        printf("bus faults %d\n", (int)bus_faults);
    } else if (strcmp(mode, "crash") == 0) {
        inc<<<(n + 255) / 256, 256>>>(x, n);
        CK(cudaDeviceSynchronize());
        printf("crashing\n");
        fflush(stdout);
        *(volatile int *)nullptr = 1;
        printf("still alive\n");
        return 0;
    } else if (strcmp(mode, "freed") == 0) {
        inc<<<(n + 255) / 256, 256>>>(x, n);
        CK(cudaDeviceSynchronize());
        CK(cudaFree(x));
        printf("crashing\n");
        fflush(stdout);
        ((volatile int *)x)[10] = 1;
        printf("still alive\n");
        return 0;
    } else {
        printf("unknown mode %s\n", mode);
        return 2;
    }
    CK(cudaDeviceSynchronize());  // the last round wrote x: a CUDA call before reading it
    long long s = 0;
    for (int i = 0; i < n; i++) s += x[i];
    printf("sum %lld\n", s);
    CK(cudaFree(x));
    printf("PASS\n");
    return 0;
}
