/* The C library's `syscall()` as the program sees it after a restart: `SYS_getpid`,
 * `SYS_gettid`, `SYS_getppid`, `SYS_getpgid`, `SYS_getsid` and `SYS_getpgrp` answer the
 * pids the program knows (src/pid.rs), and `SYS_kill`, `SYS_tgkill`, `SYS_sched_*`,
 * `SYS_prlimit64`, `SYS_pidfd_open`, `SYS_get_robust_list`, `SYS_wait4`… take them, as the C library's wrappers of the same
 * calls do (CRIU's zdtm library completes its task
 * waiters with `syscall(__NR_gettid)` and waits for `getppid()`: the two parted after a
 * restart and a parent and child waited for each other forever). Calls made from crum's
 * own libraries (libcrum.so, libcrum_libc.so: they ask the kernel its ids on purpose) are
 * told apart by their return address and get the kernel's answer. Every other call is the
 * C library's, its arguments passed on as they came (six register-sized ones, as the C
 * library's own variadic `syscall` reads them). Reached through a naked exported entry
 * point in src/lib.rs; hidden here. Allocates nothing and takes no lock. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>

#define HIDDEN __attribute__((visibility("hidden")))
#define MAX_RANGES 16

extern int crum_pid_to_program(int id); /* src/pid.rs */
extern unsigned long crum_pid_generation(void); /* src/pid.rs */
extern int crum_pid_to_kernel(int id);  /* src/pid.rs */

typedef long (*syscall_fn)(long, long, long, long, long, long, long);
static syscall_fn real_syscall;
static uintptr_t lo[MAX_RANGES], hi[MAX_RANGES];
static int n_ranges;

/* The executable segments of crum's libraries. */
static int collect(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size;
    (void)data;
    if (!info->dlpi_name || !strstr(info->dlpi_name, "libcrum")) return 0;
    for (int i = 0; i < info->dlpi_phnum && n_ranges < MAX_RANGES; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type == PT_LOAD && (ph->p_flags & PF_X)) {
            lo[n_ranges] = info->dlpi_addr + ph->p_vaddr;
            hi[n_ranges] = lo[n_ranges] + ph->p_memsz;
            n_ranges++;
        }
    }
    return 0;
}

/* At load, after every preloaded library is mapped (libcrum.so with it). */
__attribute__((constructor)) static void crum_syscall_init(void) {
    real_syscall = (syscall_fn)dlsym(RTLD_NEXT, "syscall");
    dl_iterate_phdr(collect, NULL);
}

static int from_crum(uintptr_t ra) {
    for (int i = 0; i < n_ranges; i++)
        if (ra >= lo[i] && ra < hi[i]) return 1;
    return 0;
}

/* The code of the program's last `syscall(SYS_exit, code)` (a thread ending without the
 * C library), | 0x100 once there was one: when the last thread of the program ends so,
 * the kernel gives the process that code as its status, and crum's threads, which outlive
 * it, end the process with the same (libcrum.so's agent, through src/lib.rs's
 * `crum_last_exit_code`). */
static int last_exit;

HIDDEN int crum_last_exit_value(void) {
    return __atomic_load_n(&last_exit, __ATOMIC_SEQ_CST);
}

HIDDEN long crum_syscall(long n, long a, long b, long c, long d, long e, long f) {
    uintptr_t ra = (uintptr_t)__builtin_return_address(0);
    if (!real_syscall) real_syscall = (syscall_fn)dlsym(RTLD_NEXT, "syscall");
    int program = !from_crum(ra);
    /* Memory only: a thread under SECCOMP_MODE_STRICT may make no other system call. */
    if (program && n == SYS_exit) __atomic_store_n(&last_exit, (int)(a & 0xff) | 0x100, __ATOMIC_SEQ_CST);
    /* The process's own ids, asked again if a restart came between the call and its
     * translation (see pid.rs, `own_id`). */
    if (program && (n == SYS_getpid || n == SYS_gettid || n == SYS_getppid || n == SYS_getpgrp)) {
        for (;;) {
            unsigned long g = crum_pid_generation();
            long r = real_syscall(n, a, b, c, d, e, f);
            if (r > 0) r = crum_pid_to_program((int)r);
            if (crum_pid_generation() == g) return r;
        }
    }
    if (program) {
        /* The pids it gives, as the C library's wrappers of the same calls take them. */
        switch (n) {
        case SYS_getpriority:
        case SYS_setpriority:
            if (a == 0 /* PRIO_PROCESS */ || a == 1 /* PRIO_PGRP */) b = crum_pid_to_kernel((int)b);
            break;
        case SYS_ioprio_get:
        case SYS_ioprio_set:
            if (a == 1 /* IOPRIO_WHO_PROCESS */ || a == 2 /* IOPRIO_WHO_PGRP */) b = crum_pid_to_kernel((int)b);
            break;
        case SYS_waitid:
            if (a == 1 /* P_PID */ || a == 2 /* P_PGID */) b = crum_pid_to_kernel((int)b);
            break;
        case SYS_ptrace:
        case SYS_perf_event_open:
            b = crum_pid_to_kernel((int)b);
            break;
        case SYS_tgkill:
        case SYS_setpgid:
        case SYS_kcmp:
            b = crum_pid_to_kernel((int)b);
            /* fall through */
        case SYS_kill:
        case SYS_tkill:
        case SYS_rt_sigqueueinfo:
        case SYS_rt_tgsigqueueinfo:
        case SYS_pidfd_open:
        case SYS_getpgid:
        case SYS_getsid:
        case SYS_prlimit64:
        case SYS_sched_setscheduler:
        case SYS_sched_getscheduler:
        case SYS_sched_setparam:
        case SYS_sched_getparam:
        case SYS_sched_setaffinity:
        case SYS_sched_getaffinity:
        case SYS_sched_setattr:
        case SYS_sched_getattr:
        case SYS_sched_rr_get_interval:
        case SYS_get_robust_list:
        case SYS_process_vm_readv:
        case SYS_process_vm_writev:
        case SYS_move_pages:
        case SYS_migrate_pages:
        case SYS_wait4:
            a = crum_pid_to_kernel((int)a);
            break;
        }
    }
    long r = real_syscall(n, a, b, c, d, e, f);
    if (r > 0 && program && (n == SYS_getpid || n == SYS_gettid || n == SYS_getppid || n == SYS_getpgid || n == SYS_getsid || n == SYS_getpgrp || n == SYS_wait4))
        r = crum_pid_to_program((int)r);
    return r;
}
