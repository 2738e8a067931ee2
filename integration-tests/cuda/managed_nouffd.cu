// A launcher that forbids userfaultfd(2) (a seccomp filter answering EPERM, as a container
// or vm.unprivileged_userfaultfd=0 would) and then runs `PROG ARGS...` in the same process
// with exec, so that `crum run --managed uffd -- managed_nouffd PROG` shows the fallback to
// mprotect. No CUDA calls here.
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: managed_nouffd PROG [ARGS...]\n");
        return 2;
    }
    struct sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_userfaultfd, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {(unsigned short)(sizeof f / sizeof f[0]), f};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0) {
        perror("managed_nouffd: seccomp");
        return 3;
    }
    if (syscall(__NR_userfaultfd, 0) != -1 || errno != EPERM) {
        fprintf(stderr, "managed_nouffd: userfaultfd is still allowed\n");
        return 3;
    }
    execv(argv[1], argv + 1);
    perror("managed_nouffd: exec");
    return 127;
}
