// Pipe ping-pong between two processes; each side touches K distinct pages
// (one cache line each) per round trip. Prints ns per round trip.
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <time.h>
#include <sys/mman.h>
#include <sys/wait.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1e9+t.tv_nsec;}
int main(int argc,char**argv){
  int K=atoi(argv[1]); int N=argc>2?atoi(argv[2]):20000; int stride=argc>3?atoi(argv[3]):4096;
  int a[2],b[2]; pipe(a); pipe(b);
  size_t sz=(size_t)(K+1)*stride+4096;
  pid_t p=fork();
  volatile char*mem=mmap(0,sz,PROT_READ|PROT_WRITE,MAP_PRIVATE|MAP_ANONYMOUS,-1,0);
  for(size_t i=0;i<sz;i+=64)mem[i]=1;
  char c=0; long sum=0;
  if(p==0){ for(int i=0;i<N;i++){ read(a[0],&c,1); for(int k=0;k<K;k++) sum+=mem[(size_t)k*stride]++; write(b[1],&c,1);} _exit(sum&1); }
  double t0=0;
  for(int i=0;i<N;i++){ if(i==N/10)t0=now(); write(a[1],&c,1); read(b[0],&c,1); for(int k=0;k<K;k++) sum+=mem[(size_t)k*stride]++; }
  double t1=now(); wait(0);
  printf("K=%d stride=%d: %.0f ns/rt\n",K,stride,(t1-t0)/(N-N/10));
  return sum==12345;
}
