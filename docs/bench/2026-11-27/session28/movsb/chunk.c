#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
int main(int argc,char**argv){
  size_t len=16384; size_t ch=argc>1?atoi(argv[1]):2048;
  char *src=aligned_alloc(4096,1<<22), *dst=aligned_alloc(4096,1<<22);
  memset(src,1,1<<22); memset(dst,2,1<<22);
  long ds[]={0,8,16,31,32,100,2048,-8};
  for(unsigned i=0;i<sizeof ds/sizeof *ds;i++){
    long o=ds[i]; const char*s=src+4096*4+100; char*d=dst+4096*8+100+o;
    int N=20000; double t0=now(); for(int k=0;k<N;k++){ for(size_t p=0;p<len;p+=ch) memcpy(d+p,s+p,ch); asm volatile(""::"r"(d):"memory");} double t=now()-t0;
    printf("chunk %zu dst-src=%ld: %.3f us\n",ch,o,t/N*1e6);
  }
}
