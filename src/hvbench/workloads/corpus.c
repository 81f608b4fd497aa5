/* hvbench-corpus: write the cpu apps compressors' corpus, the orders table as CSV lines.
 *
 * usage: hvbench-corpus ROWS PATH
 *
 * Writes ROWS lines to PATH and prints "bytes=N". The lines are, byte for byte, what sqlite3
 * prints for the orders of cpu_apps.orders_sql (the sqlite job's table) formatted as
 * printf('%d,%s,%s,%s,%s,%d,%d.%02d,%s', id, day, customer, city, product, qty, euros, cents,
 * status): the instances made the corpus with sqlite3 before, 2-4 s a sample in a guest under
 * TCG, where this command takes a quarter of a second (0.02 s natively).
 * test_workload_cpu_apps.py compares the two; the constants and word lists below are
 * cpu_apps.py's.
 */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define M (1LL << 31)
#define A 1103515245LL
#define C 12345LL
#define SEED 20240601LL

static const char *first[] = {"Anna", "Ben",   "Chloe", "David", "Emma", "Felix", "Grace", "Hugo",
                              "Ines", "Jonas", "Karin", "Luca",  "Mia",  "Noah",  "Olga",  "Paul"};
static const char *last[] = {"Meyer", "Rossi", "Dubois", "Novak", "Jensen", "Garcia",
                             "Smith", "Kowalski", "Silva", "Horvat", "Nagy", "Berg"};
static const char *city[] = {"Geneva", "Lyon",  "Milano", "Zurich", "Hamburg",
                             "Praha",  "Wien", "Madrid", "Lisboa", "Oslo"};
static const char *product[] = {"cable", "adapter", "battery", "monitor", "keyboard", "mouse",
                                "laptop", "printer", "router", "switch", "camera", "speaker"};

/* date('2020-01-01', '+N days'), as year, month and day */
static void day(int64_t n, int date[3]) {
    static const int length[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    int year = 2020, month = 0;
    for (;;) {
        int days = length[month] + (month == 1 && year % 4 == 0 && (year % 100 || year % 400 == 0));
        if (n < days)
            break;
        n -= days;
        if (++month == 12) {
            month = 0;
            year++;
        }
    }
    date[0] = year;
    date[1] = month + 1;
    date[2] = (int)n + 1;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: hvbench-corpus ROWS PATH\n");
        return 2;
    }
    char *end;
    long long rows = strtoll(argv[1], &end, 10);
    if (*end || rows < 1) {
        fprintf(stderr, "hvbench-corpus: ROWS must be a positive integer, not %s\n", argv[1]);
        return 2;
    }
    FILE *f = fopen(argv[2], "w");
    if (!f) {
        perror(argv[2]);
        return 1;
    }
    const int64_t a2 = A * A % M, c2 = (A * C + C) % M;
    const int64_t a3 = a2 * A % M, c3 = (a2 * C + A * C + C) % M;
    int64_t a = SEED, b = (SEED * A + C) % M, c = (SEED * a2 + c2) % M;
    long long bytes = 0;
    for (long long i = 1; i <= rows; i++) {
        int64_t u = a >> 15, v = b >> 15, w = c >> 15;
        int64_t cents = (u * 65536 + w) % 250000;
        int64_t mod7 = (u + v) % 7;
        int date[3];
        day(u % 1461, date);
        const char *status = mod7 == 0 ? "returned" : mod7 == 1 ? "pending" : "shipped";
        int n = fprintf(f,
                        "%lld,%04d-%02d-%02d,%s %s,%s,%s,"
                        "%" PRId64 ",%" PRId64 ".%02" PRId64 ",%s\n",
                        i, date[0], date[1], date[2], first[v % 16], last[v / 16 % 12],
                        city[v / 192 % 10], product[w % 12], 1 + w / 12 % 9, cents / 100,
                        cents % 100, status);
        if (n < 0)
            break;
        bytes += n;
        a = (c * A + C) % M;
        b = (c * a2 + c2) % M;
        c = (c * a3 + c3) % M;
    }
    if (ferror(f) || fclose(f) != 0) {
        perror(argv[2]);
        return 1;
    }
    printf("bytes=%lld\n", bytes);
    return 0;
}
