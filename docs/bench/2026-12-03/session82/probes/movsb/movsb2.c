#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
static void movsb(void*d,const void*s,size_t n){ asm volatile("rep movsb":"+D"(d),"+S"(s),"+c"(n)::"memory"); }
static double now(){struct timespec t; clock_gettime(CLOCK_MONOTONIC,&t); return t.tv_sec+t.tv_nsec*1e-9;}
int main(int argc,char**argv){
  size_t LEN=16384; int so=atoi(argv[1]); char*src=aligned_alloc(4096,LEN+65536); char*dst=aligned_alloc(4096,LEN+65536);
  memset(src,1,LEN+65536); memset(dst,0,LEN+65536);
  for(int d=-8;d<=40;d++){ double best=1e9;
    for(int t=0;t<3;t++){double a=now(); for(int i=0;i<100;i++) movsb(dst+8192+so+d,src+8192+so,LEN); double e=now()-a; if(e<best)best=e;}
    printf("%d:%.0f ",d,best/100*1e9);}
  printf("\n");
}
