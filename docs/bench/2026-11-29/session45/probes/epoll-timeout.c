// Ping-pong between two threads over a socketpair, each waiting in
// epoll_wait with timeout T (ms; -1 = none). Reports round trips/s and CPU.
#include <stdio.h>
#include <stdlib.h>
#include <pthread.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/resource.h>
#include <unistd.h>
#include <time.h>
static int T; static long N;
static void *side(void *arg) {
  int fd = (int)(long)arg; int ep = epoll_create1(0);
  struct epoll_event ev = {.events = EPOLLIN}; epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
  char b[64];
  for (long i = 0; i < N; i++) {
    struct epoll_event out; while (epoll_wait(ep, &out, 1, T) < 1) {}
    if (read(fd, b, 64) <= 0) exit(1); if (write(fd, b, 16) != 16) exit(1);
  }
  return 0;
}
int main(int argc, char **argv) {
  T = atoi(argv[1]); N = atol(argv[2]);
  int sv[2]; socketpair(AF_UNIX, SOCK_STREAM, 0, sv);
  pthread_t a, b; struct timespec t0, t1; clock_gettime(CLOCK_MONOTONIC, &t0);
  pthread_create(&a, 0, side, (void*)(long)sv[0]); pthread_create(&b, 0, side, (void*)(long)sv[1]);
  write(sv[0], "x", 1); // start: side b reads first
  pthread_join(a, 0); pthread_join(b, 0);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double s = (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
  struct rusage ru; getrusage(RUSAGE_SELF, &ru);
  double cpu = ru.ru_utime.tv_sec + ru.ru_stime.tv_sec + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
  printf("timeout %6d: %.0f round trips/s, %.2f us/rt, cpu %.2f us/rt\n", T, N / s, s / N * 1e6, cpu / N * 1e6);
}
