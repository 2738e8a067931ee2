/* Holds a netlink socket open (something crum cannot restore) while counting: a restart
 * must fail naming the descriptor, before anything of the program runs. */
#include <stdio.h>
#include <stdlib.h>
#include <linux/netlink.h>
#include <sys/socket.h>
#include <time.h>

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 40;
    long ms = argc > 2 ? atol(argv[2]) : 20;
    setvbuf(stdout, NULL, _IONBF, 0);
    int s = socket(AF_NETLINK, SOCK_RAW, NETLINK_ROUTE);
    for (int i = 0; i < n; i++) {
        printf("step %d socket %d\n", i, s >= 0);
        struct timespec ts = { 0, ms * 1000000L };
        nanosleep(&ts, NULL);
    }
    printf("done\n");
    return 0;
}
