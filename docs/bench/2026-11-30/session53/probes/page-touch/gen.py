"""Writes pt-K-ALIGN.c: the page-touch probe with K data pages and K
functions, each function aligned to ALIGN bytes (4096: a page of its own;
64: a cache line, the K functions contiguous).

    python3 gen.py 64 4096 && gcc -O2 -o pt-64-4096 pt-64-4096.c -lpthread
    ./pt-64-4096 20000          # after a blocking loopback round trip
    ./pt-64-4096 20000 200000   # after a spin of 200,000 TSC cycles instead
"""
import sys

K = int(sys.argv[1])
A = int(sys.argv[2])
fns = "\n".join(
    f"__attribute__((noinline,aligned({A}))) static unsigned f{i}(unsigned x){{return x*{2*i+3}u+{i}u;}}"
    for i in range(K)
)
tbl = ",".join(f"f{i}" for i in range(K))
src = r'''
// One thread answers a byte over loopback TCP, the other sends a byte,
// blocks for the answer, then times touching K data pages and calling
// K functions that sit on pages of their own, first right after the
// wake-up and then once more. The difference between the two passes is
// what the first touch of a page costs after a sleep and a wake-up.
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <unistd.h>
#include <time.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <x86intrin.h>
#define K @K@
#define PAGE 4096
@FNS@
typedef unsigned (*fn)(unsigned);
static fn table[K] = {@TBL@};
static int lfd, port;
static void *echo(void *arg) {
    int fd = accept(lfd, 0, 0); int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    char b;
    while (read(fd, &b, 1) == 1) if (write(fd, &b, 1) != 1) break;
    return 0;
}
static int cmp(const void *a, const void *b) { unsigned long long x=*(unsigned long long*)a, y=*(unsigned long long*)b; return x<y?-1:x>y; }
static double tsc_ns(void) {
    struct timespec a, b; clock_gettime(CLOCK_MONOTONIC, &a); unsigned long long t0 = __rdtsc();
    usleep(200000); clock_gettime(CLOCK_MONOTONIC, &b); unsigned long long t1 = __rdtsc();
    double ns = (b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec); return ns / (t1 - t0);
}
int main(int argc, char **argv) {
    int iters = argc > 1 ? atoi(argv[1]) : 20000;
    // With a second argument, spin that many TSC cycles in place of the round trip: the control.
    unsigned long long spin = argc > 2 ? strtoull(argv[2], 0, 10) : 0;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof sa; lfd = socket(AF_INET, SOCK_STREAM, 0);
    bind(lfd, (void*)&sa, sizeof sa); listen(lfd, 1); getsockname(lfd, (void*)&sa, &sl);
    pthread_t t; pthread_create(&t, 0, echo, 0);
    int fd = socket(AF_INET, SOCK_STREAM, 0); connect(fd, (void*)&sa, sizeof sa);
    int one = 1; setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    volatile unsigned char *data = aligned_alloc(PAGE, (size_t)K * PAGE);
    memset((void*)data, 1, (size_t)K * PAGE);
    unsigned long long *d1 = malloc(8 * iters), *d2 = malloc(8 * iters), *c1 = malloc(8 * iters), *c2 = malloc(8 * iters), *rt = malloc(8 * iters);
    unsigned acc = 0; char b = 'x';
    for (int i = 0; i < iters; i++) {
        unsigned long long s = __rdtsc();
        if (spin) { while (__rdtsc() - s < spin) ; }
        else if (write(fd, &b, 1) != 1 || read(fd, &b, 1) != 1) return 1;
        unsigned long long t0 = __rdtsc();
        for (int k = 0; k < K; k++) acc += data[k * PAGE + 0];
        unsigned long long t1 = __rdtsc();
        for (int k = 0; k < K; k++) acc += data[k * PAGE + 8];
        unsigned long long t2 = __rdtsc();
        for (int k = 0; k < K; k++) acc = table[k](acc);
        unsigned long long t3 = __rdtsc();
        for (int k = 0; k < K; k++) acc = table[k](acc);
        unsigned long long t4 = __rdtsc();
        rt[i] = t0 - s; d1[i] = t1 - t0; d2[i] = t2 - t1; c1[i] = t3 - t2; c2[i] = t4 - t3;
    }
    double ns = tsc_ns();
    unsigned long long *arrs[] = {rt, d1, d2, c1, c2};
    const char *names[] = {"round trip", "data pages, first touch", "data pages, again", "functions, first call", "functions, again"};
    printf("iterations %d (acc %u)\n", iters, acc);
    for (int a = 0; a < 5; a++) {
        qsort(arrs[a], iters, 8, cmp);
        printf("%-28s p50 %8.1f ns  p90 %8.1f ns\n", names[a], arrs[a][iters / 2] * ns, arrs[a][iters * 9 / 10] * ns);
    }
    return 0;
}
'''
open(f"pt-{K}-{A}.c", "w").write(src.replace("@FNS@", fns).replace("@TBL@", tbl).replace("@K@", str(K)))
