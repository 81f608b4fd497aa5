/* hvbench-clock: time one command with a monotonic clock, the same way on every platform.
 *
 * usage: hvbench-clock OUTPUT COMMAND [ARG...]
 *
 * Runs COMMAND, waits for it and writes one line to OUTPUT (a file, or - for standard error):
 *
 *   status=S start=T0 end=T1 resolution=R user=U system=Y voluntary=V involuntary=I
 *
 * T0 and T1 are CLOCK_MONOTONIC in seconds with nine decimals, read right before the fork and
 * right after the wait. R is the clock's effective resolution: the larger of what clock_getres
 * says and the smallest step seen between two successive readings (a guest whose clocksource
 * is the jiffies counter reports 1 ns from clock_getres but steps by 4 ms). U and Y are the
 * user and system CPU time of everything the command ran (getrusage of the waited-for
 * children, microseconds), V and I its voluntary and involuntary context switches. S is the
 * command's exit status, or 128 + the signal that ended it. hvbench-clock exits with S.
 *
 * Busybox's shell has no clock finer than /proc/uptime's 10 ms; GNU time's elapsed time is
 * gettimeofday's (not monotonic) printed to 10 ms. This is one static binary, copied into
 * every guest like any tool, so native and guests are timed by the same code.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static long ns_of(const struct timespec *ts)
{
    return ts->tv_sec * 1000000000L + ts->tv_nsec;
}

/* The smallest step of the clock seen over a few changes, bounded to about 50 ms. */
static double resolution(void)
{
    struct timespec res, a, b;
    long smallest = 0, declared;
    int changes = 0;

    clock_getres(CLOCK_MONOTONIC, &res);
    declared = ns_of(&res);
    clock_gettime(CLOCK_MONOTONIC, &a);
    long limit = ns_of(&a) + 50000000L;
    while (changes < 20) {
        clock_gettime(CLOCK_MONOTONIC, &b);
        long step = ns_of(&b) - ns_of(&a);
        if (step > 0) {
            if (smallest == 0 || step < smallest)
                smallest = step;
            changes++;
            a = b;
        }
        if (ns_of(&b) > limit)
            break;
    }
    if (smallest < declared)
        smallest = declared;
    return (double)smallest * 1e-9;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: hvbench-clock OUTPUT COMMAND [ARG...]\n");
        return 2;
    }
    FILE *out = strcmp(argv[1], "-") == 0 ? fdopen(dup(2), "w") : fopen(argv[1], "w");
    if (out == NULL) {
        fprintf(stderr, "hvbench-clock: %s: %s\n", argv[1], strerror(errno));
        return 2;
    }
    double r = resolution();
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "hvbench-clock: fork: %s\n", strerror(errno));
        return 2;
    }
    if (pid == 0) {
        fclose(out);
        execvp(argv[2], argv + 2);
        fprintf(stderr, "hvbench-clock: %s: %s\n", argv[2], strerror(errno));
        _exit(127);
    }
    int wstatus;
    while (waitpid(pid, &wstatus, 0) < 0) {
        if (errno != EINTR) {
            fprintf(stderr, "hvbench-clock: wait: %s\n", strerror(errno));
            return 2;
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    struct rusage ru;
    getrusage(RUSAGE_CHILDREN, &ru);
    int status = WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : 128 + WTERMSIG(wstatus);
    fprintf(out,
            "status=%d start=%ld.%09ld end=%ld.%09ld resolution=%.9f user=%ld.%06ld "
            "system=%ld.%06ld "
            "voluntary=%ld involuntary=%ld\n",
            status, (long)t0.tv_sec, t0.tv_nsec, (long)t1.tv_sec, t1.tv_nsec, r, (long)ru.ru_utime.tv_sec, (long)ru.ru_utime.tv_usec,
            (long)ru.ru_stime.tv_sec, (long)ru.ru_stime.tv_usec, ru.ru_nvcsw, ru.ru_nivcsw);
    if (fclose(out) != 0) {
        fprintf(stderr, "hvbench-clock: %s: %s\n", argv[1], strerror(errno));
        return 2;
    }
    return status;
}
