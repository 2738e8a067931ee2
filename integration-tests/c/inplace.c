/* Files written in place (issue 17, item 4): after a restart they are as they were at the
 * checkpoint, whatever the program wrote into them after it.
 *
 * The program keeps `records.dat` open read-write: 64 records of 64 bytes, record i%64
 * rewritten with the step number at every step (pwrite, in place: the file never grows),
 * and `state.dat` open write-only (not appending): a header rewritten at offset 0 at every
 * step. Every 7 steps it also removes and makes again `journal.tmp`, which it keeps open
 * read-write in between, as a database's rollback journal. At every step it reads the whole
 * of each file back and compares it with what it wrote (kept in memory): a byte written
 * after the checkpoint and found after the restart breaks the comparison. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define RECS 64
#define RECLEN 64

static void nap(long ms) {
    struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}

static char model[RECS * RECLEN], header[32], journal[100];
static int journal_fd = -1;

static int same(int fd, const char *want, size_t n, const char *name, int step) {
    char got[RECS * RECLEN + 1];
    ssize_t k = pread(fd, got, sizeof got, 0);
    int rd = open(name, O_RDONLY); /* write-only fds: read through the path */
    if (k < 0 && rd >= 0) k = pread(rd, got, sizeof got, 0);
    if (rd >= 0) close(rd);
    if (k != (ssize_t)n || memcmp(got, want, n) != 0) {
        printf("FAIL step %d: %s holds %zd bytes, not the %zu written%s\n", step, name, k, n,
               k == (ssize_t)n ? " (different bytes)" : "");
        return 0;
    }
    return 1;
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 60;
    long ms = argc > 2 ? atol(argv[2]) : 40;
    setvbuf(stdout, NULL, _IONBF, 0);
    int rec = open("records.dat", O_RDWR | O_CREAT | O_TRUNC, 0644);
    int st = open("state.dat", O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (rec < 0 || st < 0) { printf("FAIL open\n"); return 1; }
    memset(model, '.', sizeof model);
    if (pwrite(rec, model, sizeof model, 0) != (ssize_t)sizeof model) return 1;
    for (int i = 0; i < n; i++) {
        char *r = model + (i % RECS) * RECLEN;
        int len = snprintf(r, RECLEN, "record %d written at step %d", i % RECS, i);
        memset(r + len, '-', RECLEN - len);
        if (pwrite(rec, r, RECLEN, (i % RECS) * RECLEN) != RECLEN) { printf("FAIL write\n"); return 1; }
        memset(header, ' ', sizeof header);
        snprintf(header, sizeof header, "step %d", i);
        if (pwrite(st, header, sizeof header, 0) != (ssize_t)sizeof header) { printf("FAIL write\n"); return 1; }
        if (i % 7 == 0) {
            if (journal_fd >= 0) close(journal_fd);
            unlink("journal.tmp");
            journal_fd = open("journal.tmp", O_RDWR | O_CREAT | O_EXCL, 0644);
            if (journal_fd < 0) { printf("FAIL journal\n"); return 1; }
        }
        snprintf(journal, sizeof journal, "journal of step %d", i);
        memset(journal + strlen(journal), '#', sizeof journal - strlen(journal));
        if (pwrite(journal_fd, journal, sizeof journal, 0) != (ssize_t)sizeof journal) return 1;
        if (!same(rec, model, sizeof model, "records.dat", i) || !same(st, header, sizeof header, "state.dat", i) ||
            !same(journal_fd, journal, sizeof journal, "journal.tmp", i))
            return 1;
        printf("step %d\n", i);
        nap(ms);
    }
    printf("files ok\n");
    return 0;
}
