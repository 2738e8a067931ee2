// Managed-memory costs under `crum run --managed <mode>` (scripts/bench-managed.sh), timed
// with clock_gettime inside the program and printed as `name value unit` lines:
//
//   read_fault        after a kernel wrote them, the first read of one byte in each of 1024
//                     pages 64 pages apart (read-ahead cannot help): us per fault
//   write_fault       then a write of one byte in each of those (already read) pages: us
//   write_first_fault after a kernel, a write of one byte in each of 1024 other pages 64 apart
//                     that were not read since: us
//   seq_read          a sequential read (8-byte loads) of a 256 MiB managed array that a kernel
//                     wrote (one int per page): GB/s
//   flush             cudaDeviceSynchronize with 4096 dirty pages, less one with none, per
//                     dirty page (median of 5): us
//   sync_clean        cudaDeviceSynchronize with no dirty page (median of 21): us
//
// and, measured in the same run on memory crum does not manage, the baselines:
//   base_touch_fault  first write to a fresh anonymous page (the kernel's own fault): us
//   base_sigsegv      a SIGSEGV caught by a handler that mprotects the page and returns: us
//   base_seq_read     the same sequential read over malloc'd, already touched memory: GB/s
//   base_copy_page    memcpy of one 4 KiB page (cache-cold source): us
//
// Usage: bench_managed [SEQ_MIB=256]. Ends with PASS when the data read back was right.
#include "common.h"
#include <algorithm>
#include <csignal>
#include <cstring>
#include <ctime>
#include <sys/mman.h>
#include <vector>

static double now_us() {
    timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}
static double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

__global__ void touch_pages(unsigned char *x, size_t stride, int n, int v) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[(size_t)i * stride + (i % 61)] = (unsigned char)(v + i);
}

static const size_t PAGE = 4096;
static char *seg_page;
static void on_segv(int, siginfo_t *, void *) { mprotect(seg_page, PAGE, PROT_READ | PROT_WRITE); }

static unsigned long long seq_sum(const unsigned long long *p, size_t n) {
    unsigned long long s = 0;
    for (size_t i = 0; i < n; i++) s += p[i];
    return s;
}

int main(int argc, char **argv) {
    const size_t seq_bytes = (argc > 1 ? (size_t)atol(argv[1]) : 256) << 20;
    const int nf = 1024;              // pages per fault measurement
    const size_t apart = 64 * PAGE;   // distance between them

    // Baselines first, before any CUDA call (the library's own handlers are not in place).
    {
        char *a = (char *)mmap(nullptr, nf * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        EXPECT(a != MAP_FAILED);
        double t0 = now_us();
        for (int i = 0; i < nf; i++) ((volatile char *)a)[i * PAGE] = 1;
        printf("base_touch_fault %.3f us\n", (now_us() - t0) / nf);
        munmap(a, nf * PAGE);

        seg_page = (char *)mmap(nullptr, PAGE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        struct sigaction sa, old;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = on_segv;
        sa.sa_flags = SA_SIGINFO;
        sigemptyset(&sa.sa_mask);
        EXPECT(sigaction(SIGSEGV, &sa, &old) == 0);
        t0 = now_us();
        for (int i = 0; i < nf; i++) {
            mprotect(seg_page, PAGE, PROT_NONE);
            ((volatile char *)seg_page)[i % PAGE] = 1;
        }
        printf("base_sigsegv %.3f us\n", (now_us() - t0) / nf);
        EXPECT(sigaction(SIGSEGV, &old, nullptr) == 0);
        munmap(seg_page, PAGE);

        size_t n = seq_bytes / 8;
        unsigned long long *h = (unsigned long long *)malloc(seq_bytes);
        for (size_t i = 0; i < n; i++) h[i] = i;
        t0 = now_us();
        unsigned long long s = seq_sum(h, n);
        double dt = now_us() - t0;
        EXPECT(s == (unsigned long long)n * (n - 1) / 2);
        printf("base_seq_read %.3f GB/s\n", seq_bytes / dt / 1e3);

        // memcpy of 4096 pages spread over the buffer (cache-cold sources).
        static char dst[PAGE];
        unsigned sink = 0;
        t0 = now_us();
        for (int i = 0; i < 4096; i++) {
            memcpy(dst, (char *)h + ((size_t)i * 16 * PAGE) % seq_bytes, PAGE);
            sink += ((volatile char *)dst)[i % PAGE];
        }
        printf("base_copy_page %.3f us\n", (now_us() - t0) / 4096);
        static volatile unsigned keep;
        keep = sink;  // the copies are not optimized away
        free(h);
    }

    // Fault costs: region R (read then write faults), region W (write-first faults).
    unsigned char *r, *w;
    CK(cudaMallocManaged(&r, nf * apart));
    CK(cudaMallocManaged(&w, nf * apart));
    touch_pages<<<nf / 256, 256>>>(r, apart, nf, 1);
    touch_pages<<<nf / 256, 256>>>(w, apart, nf, 2);
    CK(cudaDeviceSynchronize());
    double t0 = now_us();
    unsigned sum = 0;
    for (int i = 0; i < nf; i++) sum += ((volatile unsigned char *)r)[(size_t)i * apart + (i % 61)];
    printf("read_fault %.3f us\n", (now_us() - t0) / nf);
    unsigned want = 0;
    for (int i = 0; i < nf; i++) want += (unsigned char)(1 + i);
    EXPECT(sum == want);
    t0 = now_us();
    for (int i = 0; i < nf; i++) ((volatile unsigned char *)r)[(size_t)i * apart + 100] = 7;
    printf("write_fault %.3f us\n", (now_us() - t0) / nf);
    t0 = now_us();
    for (int i = 0; i < nf; i++) ((volatile unsigned char *)w)[(size_t)i * apart + 100] = 9;
    printf("write_first_fault %.3f us\n", (now_us() - t0) / nf);

    // Sequential read bandwidth of a managed array a kernel wrote.
    unsigned long long *q;
    size_t n = seq_bytes / 8;
    CK(cudaMallocManaged(&q, seq_bytes));
    for (size_t i = 0; i < n; i++) q[i] = i;
    int pages = (int)(seq_bytes / PAGE);
    touch_pages<<<(pages + 255) / 256, 256>>>((unsigned char *)q, PAGE, pages, 0);
    CK(cudaDeviceSynchronize());
    unsigned long long expect = 0;
    {
        // What the kernel changed: byte (i % 61) of page i set to (unsigned char)i.
        expect = (unsigned long long)n * (n - 1) / 2;
        for (int i = 0; i < pages; i++) {
            size_t off = (size_t)i * PAGE + (i % 61), word = off / 8, shift = (off % 8) * 8;
            unsigned long long old = (unsigned long long)word, nw = (old & ~(0xffULL << shift)) | ((unsigned long long)(unsigned char)i << shift);
            expect += nw - old;
        }
    }
    t0 = now_us();
    unsigned long long s = seq_sum(q, n);
    double dt = now_us() - t0;
    EXPECT(s == expect);
    printf("seq_read %.3f GB/s\n", seq_bytes / dt / 1e3);

    // Flush cost: 4096 dirty pages (written after being read, so the write itself does not
    // fetch), against a synchronization with nothing dirty.
    const int nd = 4096;
    unsigned char *d;
    CK(cudaMallocManaged(&d, nd * PAGE));
    std::vector<double> clean, dirty;
    for (int k = 0; k < 21; k++) {
        t0 = now_us();
        CK(cudaDeviceSynchronize());
        clean.push_back(now_us() - t0);
    }
    for (int k = 0; k < 5; k++) {
        touch_pages<<<nd / 256, 256>>>(d, PAGE, nd, k);
        CK(cudaDeviceSynchronize());
        unsigned x = 0;
        for (int i = 0; i < nd; i++) x += ((volatile unsigned char *)d)[(size_t)i * PAGE];
        for (int i = 0; i < nd; i++) ((volatile unsigned char *)d)[(size_t)i * PAGE + 8] = (unsigned char)(x + i);
        t0 = now_us();
        CK(cudaDeviceSynchronize());
        dirty.push_back(now_us() - t0);
    }
    double c = median(clean);
    printf("sync_clean %.3f us\n", c);
    printf("flush %.3f us\n", (median(dirty) - c) / nd);
    CK(cudaFree(d));
    CK(cudaFree(q));
    CK(cudaFree(r));
    CK(cudaFree(w));
    printf("PASS\n");
    return 0;
}
