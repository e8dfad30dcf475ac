// Loopback TCP: sender writes 16 KiB messages from a buffer at phase SP,
// receiver reads them into a buffer at phase RP. Time per message, and
// the system time of each side.
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <pthread.h>
#include <sched.h>
#include <time.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <sys/resource.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
static int MSG=16384, N=40000, SP=0, RP=0, port;
static void pin(int c){cpu_set_t s;CPU_ZERO(&s);CPU_SET(c,&s);sched_setaffinity(0,sizeof s,&s);}
static double tsys(){struct rusage r;getrusage(RUSAGE_THREAD,&r);return r.ru_stime.tv_sec+r.ru_stime.tv_usec*1e-6;}
static double rsys;
void* rx(void*a){ pin(1); int l=socket(AF_INET,SOCK_STREAM,0); int one=1; setsockopt(l,SOL_SOCKET,SO_REUSEADDR,&one,4);
 struct sockaddr_in ad={.sin_family=AF_INET,.sin_port=htons(port),.sin_addr.s_addr=htonl(0x7f000001)}; bind(l,(void*)&ad,sizeof ad); listen(l,1);
 int c=accept(l,0,0); char*buf=aligned_alloc(4096,1<<20); memset(buf,0,1<<20); char*d=buf+RP; long tot=0,want=(long)MSG*N; double s0=tsys();
 long span=getenv("SPAN")?atol(getenv("SPAN")):0; char*big=span?aligned_alloc(4096,span+65536):0; if(big)memset(big,0,span+65536); long pos=0; while(tot<want){ char*dd=d; if(big){dd=big+RP+pos; pos=(pos+MSG)%span;} long n=read(c,dd,MSG); if(n<=0)break; tot+=n; } rsys=tsys()-s0; close(c); close(l); return 0;}
int main(int argc,char**argv){ SP=atoi(argv[1]); RP=atoi(argv[2]); port=20000+rand()%1000+SP+RP;
 pthread_t t; pthread_create(&t,0,rx,0); usleep(100000); pin(0);
 int s=socket(AF_INET,SOCK_STREAM,0); int one=1; setsockopt(s,IPPROTO_TCP,TCP_NODELAY,&one,4);
 struct sockaddr_in ad={.sin_family=AF_INET,.sin_port=htons(port),.sin_addr.s_addr=htonl(0x7f000001)}; if(connect(s,(void*)&ad,sizeof ad)){perror("c");return 1;}
 char*buf=aligned_alloc(4096,1<<20); memset(buf,1,1<<20); char*src=buf+SP; double t0=now(), s0=tsys();
 for(int i=0;i<N;i++){ long off=0; while(off<MSG){ long n=write(s,src+off,MSG-off); if(n<=0){perror("w");return 1;} off+=n; } }
 double ssys=tsys()-s0; pthread_join(t,0); double el=now()-t0;
 printf("SP=%4d RP=%4d: %.2f us/msg, send sys %.2f us/msg, recv sys %.2f us/msg\n",SP,RP,el/N*1e6,ssys/N*1e6,rsys/N*1e6);
}
