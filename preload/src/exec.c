/* The variadic exec functions of libcrum_libc.so (stable Rust cannot define a C-variadic
 * function): each gathers its arguments into an array, as the C library's own does, and
 * calls the array form, whose wrapper (src/lib.rs) keeps crum's proxy channel open across
 * an exec of the process holding it. Reached through the naked exported entry points in
 * src/lib.rs; hidden here. */
#include <stdarg.h>
#include <stddef.h>
#include <unistd.h>

#define HIDDEN __attribute__((visibility("hidden")))

/* Count the arguments after `arg` up to the terminating NULL. */
#define COUNT(n, arg)                                                                    \
    do {                                                                                 \
        va_list ap;                                                                      \
        va_start(ap, arg);                                                               \
        n = 1;                                                                           \
        while (va_arg(ap, char *) != NULL) n++;                                          \
        va_end(ap);                                                                      \
    } while (0)

HIDDEN int crum_execl(const char *path, const char *arg, ...) {
    size_t n;
    COUNT(n, arg);
    char *argv[n + 1];
    va_list ap;
    va_start(ap, arg);
    argv[0] = (char *)arg;
    for (size_t i = 1; i <= n; i++) argv[i] = va_arg(ap, char *);
    va_end(ap);
    return execv(path, argv);
}

HIDDEN int crum_execlp(const char *file, const char *arg, ...) {
    size_t n;
    COUNT(n, arg);
    char *argv[n + 1];
    va_list ap;
    va_start(ap, arg);
    argv[0] = (char *)arg;
    for (size_t i = 1; i <= n; i++) argv[i] = va_arg(ap, char *);
    va_end(ap);
    return execvp(file, argv);
}

HIDDEN int crum_execle(const char *path, const char *arg, ...) {
    size_t n;
    COUNT(n, arg);
    char *argv[n + 1];
    va_list ap;
    va_start(ap, arg);
    argv[0] = (char *)arg;
    for (size_t i = 1; i <= n; i++) argv[i] = va_arg(ap, char *);
    char *const *envp = va_arg(ap, char *const *);
    va_end(ap);
    return execve(path, argv, envp);
}
