/* hvbench-dirty: dirty guest memory at a set rate and tick, for the migration workload.
 *
 * usage: hvbench-dirty RATE_MIB_S BUFFER_MIB TICK_US
 *
 * Touches every page of a BUFFER_MIB buffer once (so a migration has all of it to copy), then
 * writes one byte to RATE_MIB_S MiB worth of 4 KiB pages a second, cycling over the buffer: a
 * page written is a page the VMM must copy again. A second thread ticks every TICK_US
 * microseconds and keeps the largest gap between two ticks by the guest's own clock
 * (CLOCK_MONOTONIC), and how many ticks it saw.
 *
 * SIGUSR1 opens the measured window (counters restart), SIGUSR2 closes it: the program checks
 * that every page holds what it wrote there last (a migration that lost a dirtied page shows up
 * as a wrong page), prints one line "pages=N seconds=S max_gap_us=G ticks=T late_ticks=L
 * wrong_pages=W" about the window and exits.
 * Rates come from the counts, never from the setting: behind schedule (a slow guest), the
 * printed rate is what was achieved.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define PAGE 4096L
#define STEP_NS 1000000L /* the dirtier catches up with its schedule every millisecond */

static atomic_int window_open, window_closed;
static atomic_long ticks, late_ticks, max_gap_ns;
static long tick_ns;

static long now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000L + ts.tv_nsec;
}

static void sleep_until(long t)
{
    struct timespec ts = {t / 1000000000L, t % 1000000000L};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) != 0) {
    }
}

static void on_signal(int sig)
{
    if (sig == SIGUSR1)
        atomic_store(&window_open, 1);
    else
        atomic_store(&window_closed, 1);
}

static void *ticker(void *arg)
{
    (void)arg;
    long last = now_ns(), next = last + tick_ns;
    for (;;) {
        sleep_until(next);
        long now = now_ns(), gap = now - last;
        last = now;
        next += tick_ns;
        if (next < now)
            next = now + tick_ns; /* after a pause, tick on from now, not in a burst */
        atomic_fetch_add(&ticks, 1);
        if (gap > 2 * tick_ns)
            atomic_fetch_add(&late_ticks, 1);
        if (gap > atomic_load(&max_gap_ns))
            atomic_store(&max_gap_ns, gap);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: %s RATE_MIB_S BUFFER_MIB TICK_US\n", argv[0]);
        return 2;
    }
    double rate = atof(argv[1]);
    long pages = atol(argv[2]) * (1L << 20) / PAGE;
    tick_ns = atol(argv[3]) * 1000L;
    if (rate < 0 || pages <= 0 || tick_ns <= 0) {
        fprintf(stderr, "%s: rate, buffer and tick must be positive\n", argv[0]);
        return 2;
    }
    char *buf = mmap(NULL, pages * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                     -1, 0);
    if (buf == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    memset(buf, 1, pages * PAGE);
    struct sigaction sa = {0};
    sa.sa_handler = on_signal;
    sigaction(SIGUSR1, &sa, NULL);
    sigaction(SIGUSR2, &sa, NULL);
    pthread_t tid;
    if (pthread_create(&tid, NULL, ticker, NULL) != 0) {
        perror("pthread_create");
        return 1;
    }
    printf("ready\n");
    fflush(stdout);

    double pages_per_ns = rate * (1L << 20) / PAGE / 1e9;
    long start = now_ns(), done = 0, cursor = 0, window_start = start, window_pages = 0;
    int counting = 0;
    while (!atomic_load(&window_closed)) {
        if (!counting && atomic_load(&window_open)) {
            counting = 1;
            window_start = now_ns();
            window_pages = 0;
            atomic_store(&ticks, 0);
            atomic_store(&late_ticks, 0);
            atomic_store(&max_gap_ns, 0);
        }
        long due = (long)((now_ns() - start) * pages_per_ns);
        for (; done < due; done++) {
            buf[cursor * PAGE] += 1;
            cursor = cursor + 1 == pages ? 0 : cursor + 1;
            window_pages += counting;
        }
        sleep_until(now_ns() + STEP_NS);
    }
    double seconds = (now_ns() - window_start) / 1e9;
    long wrong = 0;
    for (long i = 0; i < pages; i++) {
        /* memset wrote 1, then page i was incremented once per full cycle it was passed */
        long writes = done / pages + (i < done % pages ? 1 : 0);
        if ((unsigned char)buf[i * PAGE] != (unsigned char)(1 + writes))
            wrong++;
    }
    printf("pages=%ld seconds=%.6f max_gap_us=%ld ticks=%ld late_ticks=%ld wrong_pages=%ld\n",
           window_pages, seconds, atomic_load(&max_gap_ns) / 1000, atomic_load(&ticks),
           atomic_load(&late_ticks), wrong);
    return 0;
}
