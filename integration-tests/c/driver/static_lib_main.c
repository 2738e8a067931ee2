/* Uses static_lib.cu's library: linked (built with -DLINKED -l...), or loaded with dlopen
 * (argument "dlopen" PATH); ROUNDS rounds (default 40), one line each, 50 ms apart. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef LINKED
int run_round(int);
#endif
int main(int argc, char **argv) {
    int (*round_fn)(int) = 0;
#ifdef LINKED
    round_fn = run_round;
#endif
    if (argc > 1 && !strcmp(argv[1], "dlopen")) {
        void *h = dlopen(argv[2], RTLD_NOW);
        if (!h) { printf("dlopen: %s\n", dlerror()); return 1; }
        round_fn = (int (*)(int))dlsym(h, "run_round");
    }
    if (!round_fn) { printf("no run_round\n"); return 1; }
    int rounds = argc > 3 ? atoi(argv[3]) : 40;
    setvbuf(stdout, NULL, _IONBF, 0);
    for (int k = 0; k < rounds; k++) {
        if (round_fn(k)) { printf("FAIL round %d\n", k); return 1; }
        printf("round %d ok\n", k);
        struct timespec ts = {0, 50 * 1000000L};
        nanosleep(&ts, NULL);
    }
    printf("PASS\n");
    return 0;
}
