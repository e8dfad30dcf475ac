// Command bench puts the Go tram client and server next to grpc-go: the
// same unary echo (16-byte payload by default) on each, server and client
// in separate processes with GOMAXPROCS=2 each, C calls in flight on one
// connection, systems interleaved in every round, medians over rounds.
//
//	cd go/bench && go run . -c 1,32,256 -rounds 3
//
// It is a module of its own so that go/ itself needs nothing outside the
// standard library.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/exec"
	"runtime"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/tram-rpc/tram/go/tram"
	"github.com/tram-rpc/tram/go/wire"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

const (
	path       = "/bench.Echo/Say"
	streamPath = "/bench.Echo/Stream"
)

// rawCodec passes messages through as bytes, as tram does: neither side
// decodes the echo.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *(v.(*[]byte)), nil }
func (rawCodec) Unmarshal(data []byte, v any) error {
	*(v.(*[]byte)) = append([]byte(nil), data...)
	return nil
}
func (rawCodec) Name() string { return "proto" }

func serve(system string) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("PORT %d\n", l.Addr().(*net.TCPAddr).Port)
	// TRAM_GOBENCH_PROFILE=<dir>: a CPU profile of this server.
	stopProfile := profile("server-" + system)
	// The parent closes stdin to stop this server.
	go func() {
		_, _ = bufio.NewReader(os.Stdin).ReadByte()
		stopProfile()
		os.Exit(0)
	}()
	switch system {
	case "go-tram":
		srv := tram.NewServer()
		srv.HandleUnary(path, func(ctx context.Context, req []byte, md wire.Metadata) ([]byte, error) {
			return req, nil
		})
		srv.HandleStream(streamPath, tram.ServerStreaming, func(ctx context.Context, call *tram.ServerCall) error {
			if _, err := call.Recv(); err != nil {
				return err
			}
			msg := []byte{0x08, 0x2a} // an int32 field
			for {
				if err := call.Send(msg); err != nil {
					return nil
				}
			}
		})
		log.Fatal(srv.Serve(l))
	case "grpc-go":
		//lint:ignore SA1019 the raw codec keeps the comparison to framing and transport
		s := grpc.NewServer(grpc.ForceServerCodec(rawCodec{}))
		s.RegisterService(&grpc.ServiceDesc{
			ServiceName: "bench.Echo",
			HandlerType: (*any)(nil),
			Methods: []grpc.MethodDesc{{
				MethodName: "Say",
				Handler: func(_ any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
					var b []byte
					if err := dec(&b); err != nil {
						return nil, err
					}
					return &b, nil
				},
			}},
			Streams: []grpc.StreamDesc{{
				StreamName:    "Stream",
				ServerStreams: true,
				Handler: func(_ any, stream grpc.ServerStream) error {
					var req []byte
					if err := stream.RecvMsg(&req); err != nil {
						return err
					}
					msg := []byte{0x08, 0x2a}
					for {
						if err := stream.SendMsg(&msg); err != nil {
							return nil
						}
					}
				},
			}},
		}, struct{}{})
		log.Fatal(s.Serve(l))
	default:
		log.Fatalf("unknown system %q", system)
	}
}

type server struct {
	cmd  *exec.Cmd
	addr string
	stop func()
}

func start(system string) server {
	self, err := os.Executable()
	if err != nil {
		log.Fatal(err)
	}
	cmd := exec.Command(self, "-serve", system)
	cmd.Env = append(os.Environ(), "GOMAXPROCS=2")
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		log.Fatal(err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		log.Fatal(err)
	}
	port := strings.TrimSpace(strings.TrimPrefix(line, "PORT "))
	return server{cmd: cmd, addr: "127.0.0.1:" + port, stop: func() { stdin.Close(); _ = cmd.Wait() }}
}

// cpu is a process's user+system CPU time so far.
func cpu(pid int) time.Duration {
	if pid == 0 {
		var ru syscall.Rusage
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond // USER_HZ = 100
}

type sample struct {
	System     string  `json:"system"`
	C          int     `json:"concurrency"`
	CallsPerS  float64 `json:"calls_per_s"`
	P50us      float64 `json:"p50_us"`
	P99us      float64 `json:"p99_us"`
	P999us     float64 `json:"p999_us"`
	ClientCPUu float64 `json:"client_cpu_us_per_call"`
	ServerCPUu float64 `json:"server_cpu_us_per_call"`
}

func measure(system string, srv server, c int, payload []byte, warm, secs time.Duration) sample {
	var call func(context.Context, []byte) error
	var closer func()
	switch system {
	case "go-tram":
		conn, err := tram.Dial(context.Background(), srv.addr)
		if err != nil {
			log.Fatal(err)
		}
		call = func(ctx context.Context, req []byte) error {
			_, err := conn.Unary(ctx, path, req, nil)
			return err
		}
		closer = func() { conn.Close() }
	default:
		//lint:ignore SA1019 as the server
		cc, err := grpc.NewClient("passthrough:///"+srv.addr,
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultCallOptions(grpc.ForceCodec(rawCodec{})))
		if err != nil {
			log.Fatal(err)
		}
		call = func(ctx context.Context, req []byte) error {
			var resp []byte
			return cc.Invoke(ctx, path, &req, &resp)
		}
		closer = func() { cc.Close() }
	}
	defer closer()
	var (
		measuring atomic.Bool
		stop      atomic.Bool
		calls     atomic.Uint64
		mu        sync.Mutex
		lats      []time.Duration
		wg        sync.WaitGroup
	)
	for w := 0; w < c; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []time.Duration
			for !stop.Load() {
				t0 := time.Now()
				if err := call(context.Background(), payload); err != nil {
					log.Fatalf("%s: %v", system, err)
				}
				if measuring.Load() {
					mine = append(mine, time.Since(t0))
					calls.Add(1)
				}
			}
			mu.Lock()
			lats = append(lats, mine...)
			mu.Unlock()
		}()
	}
	time.Sleep(warm)
	cpuC0, cpuS0 := cpu(0), cpu(srv.cmd.Process.Pid)
	t0 := time.Now()
	measuring.Store(true)
	time.Sleep(secs)
	measuring.Store(false)
	n := calls.Load()
	elapsed := time.Since(t0)
	cpuC, cpuS := cpu(0)-cpuC0, cpu(srv.cmd.Process.Pid)-cpuS0
	stop.Store(true)
	wg.Wait()
	sort.Slice(lats, func(i, j int) bool { return lats[i] < lats[j] })
	pct := func(p float64) float64 {
		if len(lats) == 0 {
			return 0
		}
		return float64(lats[int(p*float64(len(lats)-1))]) / 1e3
	}
	per := func(d time.Duration) float64 { return float64(d) / 1e3 / float64(max(n, 1)) }
	return sample{system, c, float64(n) / elapsed.Seconds(), pct(0.5), pct(0.99), pct(0.999), per(cpuC), per(cpuS)}
}

// profile starts a CPU profile into $TRAM_GOBENCH_PROFILE/<name>.pprof, if
// set; the returned func stops it.
func profile(name string) func() {
	dir := os.Getenv("TRAM_GOBENCH_PROFILE")
	if dir == "" {
		return func() {}
	}
	f, err := os.Create(fmt.Sprintf("%s/%s.pprof", dir, name))
	if err != nil {
		log.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		log.Fatal(err)
	}
	return func() { pprof.StopCPUProfile(); f.Close() }
}

// measureStream reads a server stream of 2-byte messages (an int32 field)
// for secs: messages per second on one connection.
func measureStream(system string, srv server, warm, secs time.Duration) float64 {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var recv func() error
	switch system {
	case "go-tram":
		conn, err := tram.Dial(ctx, srv.addr)
		if err != nil {
			log.Fatal(err)
		}
		defer conn.Close()
		st, err := conn.ServerStream(ctx, streamPath, nil, nil)
		if err != nil {
			log.Fatal(err)
		}
		recv = func() error { _, err := st.Recv(); return err }
	default:
		cc, err := grpc.NewClient("passthrough:///"+srv.addr,
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultCallOptions(grpc.ForceCodec(rawCodec{})))
		if err != nil {
			log.Fatal(err)
		}
		defer cc.Close()
		st, err := cc.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, streamPath)
		if err != nil {
			log.Fatal(err)
		}
		req := []byte{}
		if err := st.SendMsg(&req); err != nil {
			log.Fatal(err)
		}
		_ = st.CloseSend()
		recv = func() error { var m []byte; return st.RecvMsg(&m) }
	}
	end := time.Now().Add(warm)
	for time.Now().Before(end) {
		if err := recv(); err != nil {
			log.Fatal(err)
		}
	}
	n := 0
	start := time.Now()
	end = start.Add(secs)
	for {
		for i := 0; i < 1024; i++ {
			if err := recv(); err != nil {
				log.Fatal(err)
			}
		}
		n += 1024
		if !time.Now().Before(end) {
			break
		}
	}
	return float64(n) / time.Since(start).Seconds()
}

func median(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return s[len(s)/2]
}

func main() {
	serveFlag := flag.String("serve", "", "(internal) serve this system's echo")
	cs := flag.String("c", "1,32,256", "calls in flight, comma-separated")
	rounds := flag.Int("rounds", 3, "rounds (each system once per round)")
	secs := flag.Float64("secs", 2, "seconds measured per system per round")
	size := flag.Int("payload", 16, "payload bytes")
	out := flag.String("json", "", "write the samples here")
	stream := flag.Bool("stream", false, "also measure a server stream's messages/s")
	flag.Parse()
	if *serveFlag != "" {
		serve(*serveFlag)
		return
	}
	runtime.GOMAXPROCS(2)
	defer profile("client")()
	// EchoMessage{id = 1, payload = 2}, as tram-bench's echo.
	payload := wire.AppendVarint(nil, 1<<3)
	payload = wire.AppendVarint(payload, 1)
	payload = wire.AppendVarint(payload, 2<<3|2)
	payload = wire.AppendVarint(payload, uint64(*size))
	payload = append(payload, make([]byte, *size)...)
	systems := []string{"go-tram", "grpc-go"}
	servers := map[string]server{}
	for _, s := range systems {
		servers[s] = start(s)
		defer servers[s].stop()
	}
	fmt.Printf("unary echo, Go: %d rounds x %gs per system, GOMAXPROCS=2 per process, systems interleaved\n", *rounds, *secs)
	var all []sample
	for _, cstr := range strings.Split(*cs, ",") {
		c, err := strconv.Atoi(cstr)
		if err != nil {
			log.Fatal(err)
		}
		by := map[string][]sample{}
		for r := 0; r < *rounds; r++ {
			for _, s := range systems {
				x := measure(s, servers[s], c, payload, 500*time.Millisecond, time.Duration(*secs*float64(time.Second)))
				by[s] = append(by[s], x)
				all = append(all, x)
			}
		}
		fmt.Printf("\n%d calls in flight:\n\n| system | calls/s (median) | range | p50 µs | p99 µs | p99.9 µs | client CPU µs/call | server CPU µs/call |\n|---|---|---|---|---|---|---|---|\n", c)
		for _, s := range systems {
			var rates []float64
			for _, x := range by[s] {
				rates = append(rates, x.CallsPerS)
			}
			m := median(rates)
			mid := by[s][0]
			for _, x := range by[s] {
				if x.CallsPerS == m {
					mid = x
				}
			}
			sort.Float64s(rates)
			fmt.Printf("| %s | %.0fk | %.0fk–%.0fk | %.1f | %.1f | %.1f | %.2f | %.2f |\n", s, m/1e3, rates[0]/1e3, rates[len(rates)-1]/1e3, mid.P50us, mid.P99us, mid.P999us, mid.ClientCPUu, mid.ServerCPUu)
		}
		var ratios []float64
		for r := range by["go-tram"] {
			ratios = append(ratios, by["go-tram"][r].CallsPerS/by["grpc-go"][r].CallsPerS)
		}
		m := median(ratios)
		sort.Float64s(ratios)
		fmt.Printf("\ngo-tram / grpc-go: %.2fx (%.2f–%.2fx per round)\n", m, ratios[0], ratios[len(ratios)-1])
	}
	if *stream {
		fmt.Printf("\nserver stream of 2-byte messages, one connection (messages/s):\n\n| system | median | range |\n|---|---|---|\n")
		for _, s := range systems {
			var rates []float64
			for r := 0; r < *rounds; r++ {
				rates = append(rates, measureStream(s, servers[s], 500*time.Millisecond, time.Duration(*secs*float64(time.Second))))
			}
			m := median(rates)
			sort.Float64s(rates)
			fmt.Printf("| %s | %.2fM | %.2fM–%.2fM |\n", s, m/1e6, rates[0]/1e6, rates[len(rates)-1]/1e6)
			all = append(all, sample{System: s + "-stream", CallsPerS: m})
		}
	}
	if *out != "" {
		b, _ := json.MarshalIndent(all, "", " ")
		if err := os.WriteFile(*out, b, 0o644); err != nil {
			log.Fatal(err)
		}
	}
}
