// loopback TCP: sender writes msgs of SIZE bytes from buf+SOFF; receiver reads into buf+ROFF.
// usage: snd SIZE SOFF ROFF SCPU RCPU SECS
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <pthread.h>
#include <sched.h>
#include <time.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/resource.h>
#include <arpa/inet.h>
static int size, soff, roff, scpu, rcpu; static double secs; static volatile int stop;
static int lfd, port;
static void pin(int c){ if(c<0) return; cpu_set_t s; CPU_ZERO(&s); CPU_SET(c,&s); sched_setaffinity(0,sizeof s,&s);}
static double now(){struct timespec t; clock_gettime(CLOCK_MONOTONIC,&t); return t.tv_sec+t.tv_nsec*1e-9;}
static double cpu(){struct timespec t; clock_gettime(CLOCK_THREAD_CPUTIME_ID,&t); return t.tv_sec+t.tv_nsec*1e-9;}
static long rbytes; static double rcpu_s;
void* rx(void*a){ pin(rcpu); int fd=accept(lfd,0,0); char*b=aligned_alloc(4096,1<<20); double c0=cpu();
  while(!stop){ ssize_t n=read(fd,b+roff,256*1024); if(n<=0)break; rbytes+=n;} rcpu_s=cpu()-c0; return 0;}
int main(int argc,char**argv){ size=atoi(argv[1]); soff=atoi(argv[2]); roff=atoi(argv[3]); scpu=atoi(argv[4]); rcpu=atoi(argv[5]); secs=atof(argv[6]);
  lfd=socket(AF_INET,SOCK_STREAM,0); struct sockaddr_in a={.sin_family=AF_INET,.sin_addr.s_addr=htonl(0x7f000001)}; bind(lfd,(void*)&a,sizeof a); listen(lfd,1);
  socklen_t l=sizeof a; getsockname(lfd,(void*)&a,&l);
  pthread_t t; pthread_create(&t,0,rx,0); pin(scpu);
  int fd=socket(AF_INET,SOCK_STREAM,0); connect(fd,(void*)&a,sizeof a); int one=1; setsockopt(fd,IPPROTO_TCP,TCP_NODELAY,&one,4);
  char*b=aligned_alloc(4096,1<<20); memset(b,1,1<<20); long sent=0; double t0=now(), c0=cpu();
  while(now()-t0<secs){ ssize_t n=write(fd,b+soff,size); if(n<=0)break; sent+=n; }
  double sc=cpu()-c0, el=now()-t0; stop=1; shutdown(fd,SHUT_WR); pthread_join(t,0);
  printf("size %d soff %d roff %d cpus %d/%d: %.2f GB/s, send %.2f us/16KiB cpu, recv %.2f us/16KiB cpu\n",size,soff,roff,scpu,rcpu, sent/el/1e9, sc/(sent/16384.0)*1e6, rcpu_s/(sent/16384.0)*1e6);
}
