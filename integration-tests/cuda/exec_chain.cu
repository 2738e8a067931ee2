// A CUDA program that executes programs in its own process (integration-tests/tests/
// cuda_exec.rs): under `crum run` an exec without fork keeps the device. Stage k does CUDA
// work (allocate, run a kernel, copy back, check) and then executes this program again at
// stage k+1 through the k-th of execl, execlp, execle, execv, execvp, execve, execvpe,
// fexecve, execveat, then through execv up to stage 40 (more images than the channel has
// lanes: an exec'd image's lanes must come back). Each stage leaves 64 MiB of device memory
// allocated when it executes the next; free device memory must be the same at every stage
// (the old image's state is dropped). Stage 0 first forks a child that executes this program too: the child
// must hold no crum channel (one CUDA process per `crum run`). The last stage prints
// "ready", waits for the file GO (the test checkpoints, kills and restarts it there), does
// CUDA work, executes the stage "after" (execv, from the restarted process), which does
// CUDA work and prints PASS. Every stage checks that crum's descriptors are all above 63 and
// close-on-exec and that fd 3 is free.
//
//   exec_chain STAGE GO
#include "common.h"
#include <cerrno>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

__global__ void fill(int *p, int v) { p[threadIdx.x] = v * 1000 + (int)threadIdx.x; }

// Free device memory must be what stage 0 saw (EXEC_CHAIN_FREE): nothing of an image that
// executed the next one is left. Then leave 64 MiB allocated.
static void same_free_memory_then_leak() {
    size_t free_b, total_b;
    CK(cudaMemGetInfo(&free_b, &total_b));
    const char *seen = getenv("EXEC_CHAIN_FREE");
    if (seen) {
        if (strtoull(seen, nullptr, 10) != free_b) {
            printf("FAIL free device memory %zu, %s at stage 0\n", free_b, seen);
            exit(1);
        }
    } else {
        char b[32];
        snprintf(b, sizeof b, "%zu", free_b);
        setenv("EXEC_CHAIN_FREE", b, 1);
    }
    void *leak;
    CK(cudaMalloc(&leak, 64 << 20));
}

static void cuda_work(int v) {
    int *d;
    int h[64];
    CK(cudaMalloc(&d, sizeof h));
    fill<<<1, 64>>>(d, v);
    CK(cudaGetLastError());
    CK(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost));
    for (int i = 0; i < 64; i++) EXPECT(h[i] == v * 1000 + i);
    CK(cudaFree(d));
}

// Whether a crum channel memfd is open here; every descriptor of crum's (above 63) must be
// close-on-exec, and fd 3 free.
static bool channel_open(const char *who) {
    bool found = false;
    DIR *dir = opendir("/proc/self/fd");
    EXPECT(dir != nullptr);
    int dfd = dirfd(dir);
    while (struct dirent *e = readdir(dir)) {
        int fd = atoi(e->d_name);
        if (e->d_name[0] == '.' || fd == dfd || fd < 3) continue;
        char link[64], target[256] = "";
        snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
        ssize_t n = readlink(link, target, sizeof target - 1);
        if (n > 0) target[n] = 0;
        if (fd < 64) { printf("FAIL %s: fd %d is open (%s)\n", who, fd, target); exit(1); }
        if (!(fcntl(fd, F_GETFD) & FD_CLOEXEC)) {
            printf("FAIL %s: fd %d (%s) is not close-on-exec\n", who, fd, target);
            exit(1);
        }
        if (strncmp(target, "/memfd:crum-channel", 19) == 0) found = true;
    }
    closedir(dir);
    return found;
}

int main(int argc, char **argv) {
    if (argc != 3) { fprintf(stderr, "usage: exec_chain STAGE GO\n"); return 2; }
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    EXPECT(n > 0);
    self[n] = 0;
    const char *go = argv[2];
    if (strcmp(argv[1], "child") == 0) {
        EXPECT(!channel_open("child"));
        printf("child: no channel\n");
        return 0;
    }
    if (strcmp(argv[1], "after") == 0) {
        EXPECT(channel_open("after"));
        cuda_work(99);
        printf("after: ok\nPASS\n");
        return 0;
    }
    int stage = atoi(argv[1]);
    EXPECT(channel_open(argv[1]) || stage == 0);
    same_free_memory_then_leak();
    cuda_work(stage);
    printf("stage %d: ok\n", stage);
    fflush(stdout);
    if (stage == 0) {
        pid_t c = fork();
        EXPECT(c >= 0);
        if (c == 0) {
            execl(self, self, "child", go, (char *)nullptr);
            _exit(127);
        }
        int st;
        EXPECT(waitpid(c, &st, 0) == c);
        EXPECT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
    char next[16];
    snprintf(next, sizeof next, "%d", stage + 1);
    char *args[] = {self, next, (char *)go, nullptr};
    switch (stage) {
    case 0: execl(self, self, next, go, (char *)nullptr); break;
    case 1: execlp(self, self, next, go, (char *)nullptr); break;
    case 2: execle(self, self, next, go, (char *)nullptr, environ); break;
    case 3: execv(self, args); break;
    case 4: execvp(self, args); break;
    case 5: execve(self, args, environ); break;
    case 6: execvpe(self, args, environ); break;
    case 7: {
        int fd = open(self, O_RDONLY | O_CLOEXEC);
        EXPECT(fd >= 0);
        fexecve(fd, args, environ);
        break;
    }
    case 8: execveat(AT_FDCWD, self, args, environ, 0); break;
    default: {
        if (stage < 40) {
            execv(self, args);
            break;
        }
        printf("ready\n");
        fflush(stdout);
        while (access(go, F_OK) != 0) usleep(2000);
        cuda_work(stage + 1);
        char *after[] = {self, (char *)"after", (char *)go, nullptr};
        execv(self, after);
    }
    }
    printf("FAIL exec at stage %d: %s\n", stage, strerror(errno));
    return 1;
}
