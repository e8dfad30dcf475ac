// Command tram-load calls the tram-bench unary echo (`/bench.Echo/Say`)
// with the Go client: C calls in flight on one connection for a while,
// then calls/s and latency percentiles. With tram-bench's server:
//
//	tram-bench serve --workload unary --system tram   # prints its port
//	go run ./cmd/tram-load -addr 127.0.0.1:PORT -c 256
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tram-rpc/tram/go/tram"
	"github.com/tram-rpc/tram/go/wire"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:7000", "server address")
	c := flag.Int("c", 256, "calls in flight")
	secs := flag.Float64("secs", 3, "seconds measured")
	payload := flag.Int("payload", 16, "payload bytes")
	flag.Parse()

	conn, err := tram.Dial(context.Background(), *addr)
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	body := make([]byte, *payload)
	// EchoMessage{id = 1 (varint), payload = 2 (bytes)}.
	request := func(id uint64) []byte {
		b := wire.AppendVarint(nil, 1<<3)
		b = wire.AppendVarint(b, id)
		b = wire.AppendVarint(b, 2<<3|2)
		b = wire.AppendVarint(b, uint64(len(body)))
		return append(b, body...)
	}
	var (
		stop  atomic.Bool
		calls atomic.Uint64
		mu    sync.Mutex
		lats  []time.Duration
		wg    sync.WaitGroup
	)
	ctx := context.Background()
	warm := time.Now().Add(500 * time.Millisecond)
	for w := 0; w < *c; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			var mine []time.Duration
			for i := uint64(0); !stop.Load(); i++ {
				start := time.Now()
				if _, err := conn.Unary(ctx, "/bench.Echo/Say", request(i), nil); err != nil {
					log.Fatal(err)
				}
				if start.After(warm) {
					mine = append(mine, time.Since(start))
					calls.Add(1)
				}
			}
			mu.Lock()
			lats = append(lats, mine...)
			mu.Unlock()
		}(w)
	}
	time.Sleep(time.Until(warm))
	t0 := time.Now()
	time.Sleep(time.Duration(*secs * float64(time.Second)))
	n := calls.Load()
	elapsed := time.Since(t0)
	stop.Store(true)
	wg.Wait()
	sort.Slice(lats, func(i, j int) bool { return lats[i] < lats[j] })
	pct := func(p float64) float64 {
		if len(lats) == 0 {
			return 0
		}
		return float64(lats[int(p*float64(len(lats)-1))].Microseconds())
	}
	fmt.Printf("| go client | C=%d | %.0f calls/s | p50 %.0f µs | p99 %.0f µs | p99.9 %.0f µs |\n",
		*c, float64(n)/elapsed.Seconds(), pct(0.5), pct(0.99), pct(0.999))
}
