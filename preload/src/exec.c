/* The variadic exec functions of libcrum_libc.so (stable Rust cannot define a C-variadic
 * function): each gathers its arguments into an array, as the C library's own does, and
 * calls the array form, whose wrapper (src/lib.rs) keeps crum's proxy channel open across
 * an exec of the process holding it. Reached through the naked exported entry points in
 * src/lib.rs; hidden here. */
#include <stdarg.h>
#include <stddef.h>
#include <unistd.h>

#define HIDDEN __attribute__((visibility("hidden")))

/* Declare `char *argv[]` holding `arg` and the arguments after it up to the terminating
 * NULL (included), and leave `ap` after that NULL, started (the caller ends it). */
#define GATHER(argv, arg, ap)                                                            \
    size_t n_ = 1;                                                                       \
    va_start(ap, arg);                                                                   \
    while (va_arg(ap, char *) != NULL) n_++;                                             \
    va_end(ap);                                                                          \
    char *argv[n_ + 1];                                                                  \
    va_start(ap, arg);                                                                   \
    argv[0] = (char *)arg;                                                               \
    for (size_t i_ = 1; i_ <= n_; i_++) argv[i_] = va_arg(ap, char *)

HIDDEN int crum_execl(const char *path, const char *arg, ...) {
    va_list ap;
    GATHER(argv, arg, ap);
    va_end(ap);
    return execv(path, argv);
}

HIDDEN int crum_execlp(const char *file, const char *arg, ...) {
    va_list ap;
    GATHER(argv, arg, ap);
    va_end(ap);
    return execvp(file, argv);
}

HIDDEN int crum_execle(const char *path, const char *arg, ...) {
    va_list ap;
    GATHER(argv, arg, ap);
    char *const *envp = va_arg(ap, char *const *);
    va_end(ap);
    return execve(path, argv, envp);
}
