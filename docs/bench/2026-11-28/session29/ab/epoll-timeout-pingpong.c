// TCP loopback ping-pong between two processes, each blocking in epoll_wait
// with timeout T ms (-1: none). Prints round-trip median-ish (mean) and CPU per round trip.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <time.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <fcntl.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
static double cpu(){struct rusage r;getrusage(RUSAGE_SELF,&r);return r.ru_utime.tv_sec+r.ru_stime.tv_sec+(r.ru_utime.tv_usec+r.ru_stime.tv_usec)*1e-6;}
static void loop(int fd,int T,int n,int first){
  int ep=epoll_create1(0);struct epoll_event ev={.events=EPOLLIN|EPOLLET,.data.fd=fd};epoll_ctl(ep,EPOLL_CTL_ADD,fd,&ev);
  fcntl(fd,F_SETFL,O_NONBLOCK);char b[64];
  if(first) send(fd,b,16,0);
  for(int i=0;i<n;i++){
    for(;;){ssize_t r=recv(fd,b,sizeof b,0); if(r>0)break; struct epoll_event e; epoll_wait(ep,&e,1,T);}
    send(fd,b,16,0);
  }
}
int main(int argc,char**argv){
  int T=atoi(argv[1]); int n=atoi(argv[2]);
  int ls=socket(AF_INET,SOCK_STREAM,0);struct sockaddr_in a={.sin_family=AF_INET,.sin_addr.s_addr=htonl(INADDR_LOOPBACK)};
  bind(ls,(void*)&a,sizeof a);listen(ls,1);socklen_t l=sizeof a;getsockname(ls,(void*)&a,&l);
  pid_t p=fork();
  if(p==0){int c=socket(AF_INET,SOCK_STREAM,0);connect(c,(void*)&a,sizeof a);int one=1;setsockopt(c,IPPROTO_TCP,TCP_NODELAY,&one,4);loop(c,T,n,0);_exit(0);}
  int s=accept(ls,0,0);int one=1;setsockopt(s,IPPROTO_TCP,TCP_NODELAY,&one,4);
  double t0=now(),c0=cpu(); loop(s,T,n,1); double t1=now(),c1=cpu();
  int st; struct rusage cr; wait4(p,&st,0,&cr); double cc=cr.ru_utime.tv_sec+cr.ru_stime.tv_sec+(cr.ru_utime.tv_usec+cr.ru_stime.tv_usec)*1e-6;
  printf("T=%d rtt %.2f us, cpu/rt parent %.2f child %.2f us\n",T,(t1-t0)/n*1e6,(c1-c0)/n*1e6,cc/n*1e6);
}
