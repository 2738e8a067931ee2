/* Process attributes outside memory: oom_score_adj, the child-subreaper flag, the dumpable
 * flag, no_new_privs, the THP disable flag, the personality, the supplementary groups (when
 * the program may set them: as root), and per thread the nice value, scheduling policy and
 * timer slack (a worker thread at SCHED_BATCH, nice 7, slack 654321 ns; the main thread nice
 * 3, slack 123456 ns, parent-death signal SIGURG), and the membarrier registration for private
 * expedited barriers (without it such a barrier fails with EPERM), and the audit login uid
 * (when the program may set it: as root, where it is not yet immutable), and the capability sets
 * (as root: CAP_SYS_BOOT out of the bounding set, CAP_MKNOD out of the permitted and effective
 * sets, CAP_SYS_PACCT out of the effective one only, CAP_NET_BIND_SERVICE inheritable and
 * ambient; a restart as root gave every capability back: CRIU's caps00, caps01). At every
 * step each thread checks them from inside; a restart must bring all back. */
#define _GNU_SOURCE
#include <errno.h>
#include <grp.h>
#include <signal.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/membarrier.h>
#include <sys/personality.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static volatile int worker_ok = 1, worker_checks = 0;

static int oom_adj(void) {
    FILE *f = fopen("/proc/self/oom_score_adj", "r");
    int v = -9999;
    if (f) { if (fscanf(f, "%d", &v) != 1) v = -9999; fclose(f); }
    return v;
}

/* The audit login uid, -2 when unreadable. */
static long loginuid(void) {
    FILE *f = fopen("/proc/self/loginuid", "r");
    long v = -2;
    if (f) { if (fscanf(f, "%ld", &v) != 1) v = -2; fclose(f); }
    return v;
}

/* A capability mask line of /proc/self/status (the main thread's). */
static unsigned long long cap_mask(const char *key) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    unsigned long long v = ~0ULL;
    size_t k = strlen(key);
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, key, k)) { v = strtoull(line + k, NULL, 16); break; }
    if (f) fclose(f);
    return v;
}

struct caps { unsigned long long inh, prm, eff, bnd, amb; };

static struct caps caps_now(void) {
    struct caps c = { cap_mask("CapInh:"), cap_mask("CapPrm:"), cap_mask("CapEff:"), cap_mask("CapBnd:"), cap_mask("CapAmb:") };
    return c;
}

/* capget/capset, version 3, this thread. */
static int caps_change(void) {
    unsigned int hdr[2] = { 0x20080522, 0 };
    unsigned int d[6];
    if (syscall(SYS_capget, hdr, d)) return 0;
    d[0] &= ~((1u << 27) | (1u << 20)); /* effective: no CAP_MKNOD, no CAP_SYS_PACCT */
    d[1] &= ~(1u << 27);                /* permitted: no CAP_MKNOD */
    d[2] |= 1u << 10;                   /* inheritable: CAP_NET_BIND_SERVICE */
    if (syscall(SYS_capset, hdr, d)) return 0;
    return prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, 10, 0, 0) == 0;
}

static int check_thread(const char *who, int want_policy, int want_nice, long want_slack) {
    long slack = prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0);
    if (slack != want_slack) { printf("FAIL: %s timer slack %ld, not %ld\n", who, slack, want_slack); return 0; }
    int policy = sched_getscheduler(0);
    errno = 0;
    int nice = getpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid));
    if (policy != want_policy) { printf("FAIL: %s policy %d, not %d\n", who, policy, want_policy); return 0; }
    if (nice != want_nice) { printf("FAIL: %s nice %d, not %d\n", who, nice, want_nice); return 0; }
    return 1;
}

static void *worker(void *arg) {
    (void)arg;
    struct sched_param p = { 0 };
    if (sched_setscheduler(0, SCHED_BATCH, &p) != 0 || setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 7) != 0 ||
        prctl(PR_SET_TIMERSLACK, 654321, 0, 0, 0) != 0) {
        printf("FAIL: worker setup\n");
        worker_ok = 0;
        return NULL;
    }
    for (;;) {
        if (!check_thread("worker", SCHED_BATCH, 7, 654321)) { worker_ok = 0; return NULL; }
        worker_checks++;
        struct timespec ts = { 0, 5 * 1000000L };
        nanosleep(&ts, NULL);
    }
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 40;
    long ms = argc > 2 ? atol(argv[2]) : 20;
    setvbuf(stdout, NULL, _IONBF, 0);
    FILE *f = fopen("/proc/self/oom_score_adj", "w");
    if (!f || fprintf(f, "%d\n", 345) < 0 || fclose(f) != 0) { printf("FAIL: set oom_score_adj\n"); return 1; }
    if (prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) || prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) ||
        prctl(PR_SET_THP_DISABLE, 1, 0, 0, 0) || personality(ADDR_NO_RANDOMIZE) < 0 ||
        setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 3) != 0) {
        printf("FAIL: setup\n");
        return 1;
    }
    if (prctl(PR_SET_TIMERSLACK, 123456, 0, 0, 0) || prctl(PR_SET_PDEATHSIG, SIGURG, 0, 0, 0)) { printf("FAIL: slack/pdeathsig\n"); return 1; }
    /* Only where the kernel has it (queried), as a program would. */
    int mb = syscall(SYS_membarrier, MEMBARRIER_CMD_QUERY, 0, 0) > 0 &&
             (syscall(SYS_membarrier, MEMBARRIER_CMD_QUERY, 0, 0) & MEMBARRIER_CMD_PRIVATE_EXPEDITED);
    if (mb) {
        if (syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) != -1 || errno != EPERM) { printf("FAIL: barrier before registration\n"); return 1; }
        if (syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0)) { printf("FAIL: membarrier registration\n"); return 1; }
    }
    /* The global expedited registration, checked where the kernel tells registrations
     * (MEMBARRIER_CMD_GET_REGISTRATIONS, Linux 6.3). */
    int mbg = syscall(SYS_membarrier, 1 << 9, 0, 0) >= 0 &&
              (syscall(SYS_membarrier, MEMBARRIER_CMD_QUERY, 0, 0) & MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED);
    if (mbg && syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED, 0, 0)) { printf("FAIL: global membarrier registration\n"); return 1; }
    /* The login uid, where we may set it. */
    int set_loginuid = 0;
    FILE *lf = fopen("/proc/self/loginuid", "w");
    if (lf) {
        set_loginuid = fprintf(lf, "%u", 4321u) > 0;
        set_loginuid = fclose(lf) == 0 && set_loginuid && loginuid() == 4321;
    }
    gid_t want_groups[3] = { 4242, 4343, 4444 };
    int set_groups = setgroups(3, want_groups) == 0;
    /* Capabilities, where we may change them (CAP_SETPCAP: as root). */
    struct caps want_caps = { 0 };
    int set_caps = prctl(PR_CAPBSET_DROP, 22, 0, 0, 0) == 0 && caps_change();
    if (set_caps) {
        want_caps = caps_now();
        if (want_caps.bnd & (1ULL << 22) || want_caps.prm & (1ULL << 27) || !(want_caps.prm & (1ULL << 20)) ||
            want_caps.eff & (1ULL << 20) || !(want_caps.amb & (1ULL << 10))) {
            printf("FAIL: capability setup\n");
            return 1;
        }
    }
    /* Last: no_new_privs is inherited by the threads created after it. */
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)) { printf("FAIL: no_new_privs\n"); return 1; }
    pthread_t t;
    pthread_create(&t, NULL, worker, NULL);
    for (int s = 0; s < n; s++) {
        int sub = -1;
        prctl(PR_GET_CHILD_SUBREAPER, &sub, 0, 0, 0);
        int oom = oom_adj(), dump = prctl(PR_GET_DUMPABLE, 0, 0, 0, 0), nnp = prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0);
        int thp = prctl(PR_GET_THP_DISABLE, 0, 0, 0, 0), pers = personality(0xffffffff);
        if (oom != 345 || sub != 1 || dump != 0 || nnp != 1 || thp != 1 || pers != ADDR_NO_RANDOMIZE) {
            printf("FAIL: oom_score_adj %d subreaper %d dumpable %d no_new_privs %d thp_disable %d personality %#x\n",
                   oom, sub, dump, nnp, thp, pers);
            return 1;
        }
        if (!check_thread("main", SCHED_OTHER, 3, 123456)) return 1;
        int pd = -1;
        if (prctl(PR_GET_PDEATHSIG, &pd, 0, 0, 0) || pd != SIGURG) { printf("FAIL: parent-death signal %d\n", pd); return 1; }
        if (set_groups) {
            gid_t g[8];
            int k = getgroups(8, g);
            if (k != 3 || g[0] != 4242 || g[1] != 4343 || g[2] != 4444) { printf("FAIL: supplementary groups (%d)\n", k); return 1; }
        }
        if (set_caps) {
            struct caps c = caps_now();
            if (memcmp(&c, &want_caps, sizeof c)) {
                printf("FAIL: capabilities inh %llx prm %llx eff %llx bnd %llx amb %llx, not %llx %llx %llx %llx %llx\n", c.inh, c.prm,
                       c.eff, c.bnd, c.amb, want_caps.inh, want_caps.prm, want_caps.eff, want_caps.bnd, want_caps.amb);
                return 1;
            }
        }
        if (set_loginuid && loginuid() != 4321) { printf("FAIL: audit login uid %ld, not 4321\n", loginuid()); return 1; }
        if (mbg && !(syscall(SYS_membarrier, 1 << 9, 0, 0) & MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED)) {
            printf("FAIL: global expedited membarrier registration gone: %ld\n", syscall(SYS_membarrier, 1 << 9, 0, 0));
            return 1;
        }
        if (mb && syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0)) { printf("FAIL: private expedited membarrier: errno %d\n", errno); return 1; }
        if (!worker_ok) return 1;
        printf("step %d\n", s);
        struct timespec ts = { 0, ms * 1000000L };
        nanosleep(&ts, NULL);
    }
    printf("done\n");
    return 0;
}
