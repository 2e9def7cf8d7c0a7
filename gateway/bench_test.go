package gateway

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// BenchmarkTurns runs the same loads through the Go client and through
// the gateway (a streamed send over HTTP, read to the final event), one
// fleet, one run: "serial" is one session's turns one after another (the
// latency a turn gets without queueing); "distinct" sends every turn to a
// session of its own, 64 at a time; "64sessions" keeps 64 sessions busy,
// each turn after the previous. It reports each turn's p50 latency and the process's CPU per
// turn (worker, NATS server and gateway share the process, so the
// difference between client and http is the gateway's).
func BenchmarkTurns(b *testing.B) {
	bd := setup(b, setupOpts{noTokens: true})
	bd.ctx = context.Background() // the loads take longer than the tests' minute
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 128}}
	viaClient := func(key, text string) error {
		run, err := bd.client.Send(bd.ctx, key, text)
		if err != nil {
			return err
		}
		_, err = run.Wait(bd.ctx)
		return err
	}
	viaHTTP := func(key, text string) error {
		req, _ := http.NewRequestWithContext(bd.ctx, "POST", bd.ts.URL+"/api/sessions/"+key+"/messages",
			strings.NewReader(`{"text":"`+text+`","stream":true}`))
		req.Header.Set("Content-Type", "application/json")
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			if sc.Text() == "event: final" {
				return nil
			}
		}
		return fmt.Errorf("no final event (%d)", resp.StatusCode)
	}
	var round atomic.Int64
	for _, load := range []string{"serial", "distinct", "64sessions"} {
		for _, via := range []struct {
			name string
			turn func(key, text string) error
		}{{"client", viaClient}, {"http", viaHTTP}} {
			b.Run(load+"/"+via.name, func(b *testing.B) {
				r := round.Add(1)
				var mu sync.Mutex
				lat := make([]time.Duration, 0, b.N)
				next := atomic.Int64{}
				cpu0 := cpuTime()
				b.ResetTimer()
				var wg sync.WaitGroup
				workers := 64
				if load == "serial" {
					workers = 1
				}
				for w := range workers {
					wg.Go(func() {
						for {
							i := next.Add(1)
							if i > int64(b.N) {
								return
							}
							key := fmt.Sprintf("bench-%d-%d", r, w)
							if load == "distinct" {
								key = fmt.Sprintf("bench-%d-d%d", r, i)
							}
							start := time.Now()
							if err := via.turn(key, "hello"); err != nil {
								b.Error(err)
								return
							}
							d := time.Since(start)
							mu.Lock()
							lat = append(lat, d)
							mu.Unlock()
						}
					})
				}
				wg.Wait()
				b.StopTimer()
				cpu := cpuTime() - cpu0
				slices.Sort(lat)
				if len(lat) > 0 {
					b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
					b.ReportMetric(float64(cpu.Microseconds())/float64(len(lat)), "cpu-µs/turn")
				}
			})
		}
	}
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
