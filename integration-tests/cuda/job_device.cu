// A CUDA program meant to be started by a script, a launcher or python's subprocess under
// `crum run` (issue 17): device state that lives across steps, checked against the CPU.
//
// usage: job_device NAME STEPS PACE_MS [fork|forkfirst|threads]
//
// Keeps an array of integers on the device; each step runs a kernel that updates every
// element (a different update per step), synchronizes, and prints `NAME step S` after
// sleeping PACE_MS. At the end the array is copied back and compared with the same updates
// done on the CPU: `NAME PASS checksum C` or `NAME FAIL …` (exit 1). A checkpoint, kill and
// restart anywhere between steps must not change the verdict or the checksum.
//
// With `fork`, after its first CUDA call it forks a child (without exec) that tries CUDA: the
// child must get cudaErrorInitializationError, as under the CUDA runtime (no context after a
// fork); the parent prints `NAME fork child: cudaErrorInitializationError`.
#include "common.h"
#include <cstring>
#include <dirent.h>
#include <pthread.h>
#include <string>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

__global__ void step_kernel(unsigned *x, int n, unsigned s) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = x[i] * 1664525u + 1013904223u + s * (unsigned)(i & 7);
}

static unsigned seed_of(const char *name) {
    unsigned h = 2166136261u;
    for (const char *p = name; *p; p++) h = (h ^ (unsigned char)*p) * 16777619u;
    return h;
}

static pthread_barrier_t barrier;

static void *first_call(void *arg) {
    pthread_barrier_wait(&barrier);
    void *p = nullptr;
    cudaError_t e = cudaMalloc(&p, 64);
    if (e == cudaSuccess) e = cudaFree(p);
    *(cudaError_t *)arg = e;
    return nullptr;
}

// Processes whose command line is `crum proxy … --watch-pid <pid>`.
static int proxies_of(int pid) {
    int n = 0;
    DIR *d = opendir("/proc");
    if (!d) return -1;
    std::string want = std::to_string(pid);
    while (struct dirent *e = readdir(d)) {
        if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
        char path[64];
        snprintf(path, sizeof path, "/proc/%s/cmdline", e->d_name);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        char buf[4096];
        size_t len = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[len] = 0;
        bool proxy = false, watch = false, prev_watch = false;
        for (size_t at = 0; at < len; at += strlen(buf + at) + 1) {
            const char *a = buf + at;
            if (!strcmp(a, "proxy")) proxy = true;
            if (prev_watch && want == a) watch = true;
            prev_watch = !strcmp(a, "--watch-pid");
        }
        if (proxy && watch) n++;
    }
    closedir(d);
    return n;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        printf("usage: job_device NAME STEPS PACE_MS [fork]\n");
        return 2;
    }
    const char *name = argv[1];
    int steps = atoi(argv[2]);
    int pace = atoi(argv[3]);
    bool fork_child = argc > 4 && strcmp(argv[4], "fork") == 0;
    if (argc > 4 && strcmp(argv[4], "forkfirst") == 0) {
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) {
            void *p = nullptr;
            cudaError_t e = cudaMalloc(&p, 16);
            _exit(e == cudaErrorNoDevice ? 0 : 10 + (int)(e % 100));
        }
        int st = 0;
        EXPECT(pid > 0 && waitpid(pid, &st, 0) == pid);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            printf("%s FAIL forkfirst child: status %d (want cudaErrorNoDevice)\n", name, st);
            return 1;
        }
        printf("%s forkfirst child: cudaErrorNoDevice\n", name);
    }
    if (argc > 4 && strcmp(argv[4], "threads") == 0) {
        const int k = 8;
        pthread_t t[k];
        cudaError_t err[k];
        pthread_barrier_init(&barrier, nullptr, k);
        for (int i = 0; i < k; i++) EXPECT(pthread_create(&t[i], nullptr, first_call, &err[i]) == 0);
        for (int i = 0; i < k; i++) {
            pthread_join(t[i], nullptr);
            if (err[i] != cudaSuccess) {
                printf("%s FAIL thread %d: %s\n", name, i, cudaGetErrorName(err[i]));
                return 1;
            }
        }
        int proxies = proxies_of(getpid());
        if (proxies != 1) {
            printf("%s FAIL %d device proxies watch this process (want 1)\n", name, proxies);
            return 1;
        }
        printf("%s threads: %d first calls, one device\n", name, k);
    }
    const int n = 4096;
    std::vector<unsigned> h(n), ref(n);
    unsigned seed = seed_of(name);
    for (int i = 0; i < n; i++) h[i] = ref[i] = seed + (unsigned)i * 2654435761u;
    unsigned *d = nullptr;
    CK(cudaMalloc(&d, n * sizeof(unsigned)));
    CK(cudaMemcpy(d, h.data(), n * sizeof(unsigned), cudaMemcpyHostToDevice));
    if (fork_child) {
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) {
            void *p = nullptr;
            cudaError_t e = cudaMalloc(&p, 16);
            _exit(e == cudaErrorInitializationError ? 0 : 10 + (int)(e % 100));
        }
        int st = 0;
        EXPECT(pid > 0 && waitpid(pid, &st, 0) == pid);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            printf("%s FAIL fork child: status %d (want cudaErrorInitializationError)\n", name, st);
            return 1;
        }
        printf("%s fork child: cudaErrorInitializationError\n", name);
    }
    for (int s = 0; s < steps; s++) {
        step_kernel<<<(n + 255) / 256, 256>>>(d, n, (unsigned)s);
        CK(cudaGetLastError());
        CK(cudaDeviceSynchronize());
        for (int i = 0; i < n; i++) ref[i] = ref[i] * 1664525u + 1013904223u + (unsigned)s * (unsigned)(i & 7);
        printf("%s step %d\n", name, s);
        fflush(stdout);
        if (pace > 0) usleep(pace * 1000);
    }
    CK(cudaMemcpy(h.data(), d, n * sizeof(unsigned), cudaMemcpyDeviceToHost));
    CK(cudaFree(d));
    unsigned sum = 0;
    for (int i = 0; i < n; i++) {
        if (h[i] != ref[i]) {
            printf("%s FAIL element %d: %u, want %u\n", name, i, h[i], ref[i]);
            return 1;
        }
        sum = sum * 31u + h[i];
    }
    printf("%s PASS checksum %u\n", name, sum);
    return 0;
}
