#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
static void movsb(void*d,const void*s,size_t n){asm volatile("rep movsb":"+D"(d),"+S"(s),"+c"(n)::"memory");}
int main(int argc,char**argv){ long A=argc>2?atol(argv[2]):100;
  size_t len=argc>1?atoi(argv[1]):16384;
  char *src=aligned_alloc(4096,1<<22), *dst=aligned_alloc(4096,1<<22);
  memset(src,1,1<<22); memset(dst,2,1<<22);
  long ds[]={1,2,4,7,8,12,16,20,24,28,31,32,33,40,63,64,65,96,-1,-8,-16,-31,-32,-64, 4096+8, 8192+16, 65536+8, 4096*3+24};
  for(unsigned i=0;i<sizeof ds/sizeof *ds;i++){
    long o=ds[i]; const char*s=src+4096*4+A; char*d=dst+4096*8+A+o;
    int N=20000; double t0=now(); for(int k=0;k<N;k++) movsb(d,s,len); double t=now()-t0;
    printf("dst-src(mod 4096)=%6ld: %.3f us\n",o,t/N*1e6);
  }
}
