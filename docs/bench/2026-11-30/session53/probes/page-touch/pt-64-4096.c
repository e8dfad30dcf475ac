
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
#define K 64
#define PAGE 4096
__attribute__((noinline,aligned(4096))) static unsigned f0(unsigned x){return x*3u+0u;}
__attribute__((noinline,aligned(4096))) static unsigned f1(unsigned x){return x*5u+1u;}
__attribute__((noinline,aligned(4096))) static unsigned f2(unsigned x){return x*7u+2u;}
__attribute__((noinline,aligned(4096))) static unsigned f3(unsigned x){return x*9u+3u;}
__attribute__((noinline,aligned(4096))) static unsigned f4(unsigned x){return x*11u+4u;}
__attribute__((noinline,aligned(4096))) static unsigned f5(unsigned x){return x*13u+5u;}
__attribute__((noinline,aligned(4096))) static unsigned f6(unsigned x){return x*15u+6u;}
__attribute__((noinline,aligned(4096))) static unsigned f7(unsigned x){return x*17u+7u;}
__attribute__((noinline,aligned(4096))) static unsigned f8(unsigned x){return x*19u+8u;}
__attribute__((noinline,aligned(4096))) static unsigned f9(unsigned x){return x*21u+9u;}
__attribute__((noinline,aligned(4096))) static unsigned f10(unsigned x){return x*23u+10u;}
__attribute__((noinline,aligned(4096))) static unsigned f11(unsigned x){return x*25u+11u;}
__attribute__((noinline,aligned(4096))) static unsigned f12(unsigned x){return x*27u+12u;}
__attribute__((noinline,aligned(4096))) static unsigned f13(unsigned x){return x*29u+13u;}
__attribute__((noinline,aligned(4096))) static unsigned f14(unsigned x){return x*31u+14u;}
__attribute__((noinline,aligned(4096))) static unsigned f15(unsigned x){return x*33u+15u;}
__attribute__((noinline,aligned(4096))) static unsigned f16(unsigned x){return x*35u+16u;}
__attribute__((noinline,aligned(4096))) static unsigned f17(unsigned x){return x*37u+17u;}
__attribute__((noinline,aligned(4096))) static unsigned f18(unsigned x){return x*39u+18u;}
__attribute__((noinline,aligned(4096))) static unsigned f19(unsigned x){return x*41u+19u;}
__attribute__((noinline,aligned(4096))) static unsigned f20(unsigned x){return x*43u+20u;}
__attribute__((noinline,aligned(4096))) static unsigned f21(unsigned x){return x*45u+21u;}
__attribute__((noinline,aligned(4096))) static unsigned f22(unsigned x){return x*47u+22u;}
__attribute__((noinline,aligned(4096))) static unsigned f23(unsigned x){return x*49u+23u;}
__attribute__((noinline,aligned(4096))) static unsigned f24(unsigned x){return x*51u+24u;}
__attribute__((noinline,aligned(4096))) static unsigned f25(unsigned x){return x*53u+25u;}
__attribute__((noinline,aligned(4096))) static unsigned f26(unsigned x){return x*55u+26u;}
__attribute__((noinline,aligned(4096))) static unsigned f27(unsigned x){return x*57u+27u;}
__attribute__((noinline,aligned(4096))) static unsigned f28(unsigned x){return x*59u+28u;}
__attribute__((noinline,aligned(4096))) static unsigned f29(unsigned x){return x*61u+29u;}
__attribute__((noinline,aligned(4096))) static unsigned f30(unsigned x){return x*63u+30u;}
__attribute__((noinline,aligned(4096))) static unsigned f31(unsigned x){return x*65u+31u;}
__attribute__((noinline,aligned(4096))) static unsigned f32(unsigned x){return x*67u+32u;}
__attribute__((noinline,aligned(4096))) static unsigned f33(unsigned x){return x*69u+33u;}
__attribute__((noinline,aligned(4096))) static unsigned f34(unsigned x){return x*71u+34u;}
__attribute__((noinline,aligned(4096))) static unsigned f35(unsigned x){return x*73u+35u;}
__attribute__((noinline,aligned(4096))) static unsigned f36(unsigned x){return x*75u+36u;}
__attribute__((noinline,aligned(4096))) static unsigned f37(unsigned x){return x*77u+37u;}
__attribute__((noinline,aligned(4096))) static unsigned f38(unsigned x){return x*79u+38u;}
__attribute__((noinline,aligned(4096))) static unsigned f39(unsigned x){return x*81u+39u;}
__attribute__((noinline,aligned(4096))) static unsigned f40(unsigned x){return x*83u+40u;}
__attribute__((noinline,aligned(4096))) static unsigned f41(unsigned x){return x*85u+41u;}
__attribute__((noinline,aligned(4096))) static unsigned f42(unsigned x){return x*87u+42u;}
__attribute__((noinline,aligned(4096))) static unsigned f43(unsigned x){return x*89u+43u;}
__attribute__((noinline,aligned(4096))) static unsigned f44(unsigned x){return x*91u+44u;}
__attribute__((noinline,aligned(4096))) static unsigned f45(unsigned x){return x*93u+45u;}
__attribute__((noinline,aligned(4096))) static unsigned f46(unsigned x){return x*95u+46u;}
__attribute__((noinline,aligned(4096))) static unsigned f47(unsigned x){return x*97u+47u;}
__attribute__((noinline,aligned(4096))) static unsigned f48(unsigned x){return x*99u+48u;}
__attribute__((noinline,aligned(4096))) static unsigned f49(unsigned x){return x*101u+49u;}
__attribute__((noinline,aligned(4096))) static unsigned f50(unsigned x){return x*103u+50u;}
__attribute__((noinline,aligned(4096))) static unsigned f51(unsigned x){return x*105u+51u;}
__attribute__((noinline,aligned(4096))) static unsigned f52(unsigned x){return x*107u+52u;}
__attribute__((noinline,aligned(4096))) static unsigned f53(unsigned x){return x*109u+53u;}
__attribute__((noinline,aligned(4096))) static unsigned f54(unsigned x){return x*111u+54u;}
__attribute__((noinline,aligned(4096))) static unsigned f55(unsigned x){return x*113u+55u;}
__attribute__((noinline,aligned(4096))) static unsigned f56(unsigned x){return x*115u+56u;}
__attribute__((noinline,aligned(4096))) static unsigned f57(unsigned x){return x*117u+57u;}
__attribute__((noinline,aligned(4096))) static unsigned f58(unsigned x){return x*119u+58u;}
__attribute__((noinline,aligned(4096))) static unsigned f59(unsigned x){return x*121u+59u;}
__attribute__((noinline,aligned(4096))) static unsigned f60(unsigned x){return x*123u+60u;}
__attribute__((noinline,aligned(4096))) static unsigned f61(unsigned x){return x*125u+61u;}
__attribute__((noinline,aligned(4096))) static unsigned f62(unsigned x){return x*127u+62u;}
__attribute__((noinline,aligned(4096))) static unsigned f63(unsigned x){return x*129u+63u;}
typedef unsigned (*fn)(unsigned);
static fn table[K] = {f0,f1,f2,f3,f4,f5,f6,f7,f8,f9,f10,f11,f12,f13,f14,f15,f16,f17,f18,f19,f20,f21,f22,f23,f24,f25,f26,f27,f28,f29,f30,f31,f32,f33,f34,f35,f36,f37,f38,f39,f40,f41,f42,f43,f44,f45,f46,f47,f48,f49,f50,f51,f52,f53,f54,f55,f56,f57,f58,f59,f60,f61,f62,f63};
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
