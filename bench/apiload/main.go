// Command apiload measures a member's management API under hostile load: it starts a
// shardhost member, deploys the counter example, and for a while keeps N connections
// open to its API, half of them (by default) slowloris connections that never finish
// their headers and the others sending well-formed asks. It prints the asks' latency
// (p50, p90, p99) and the member's resident memory before and at its peak (bench/README.md,
// "The API under load").
//
//	go build -o bin/shardhost ./cmd/shardhost && make examples
//	go run ./bench/apiload -conns 2000 -duration 60s
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/shardhost/shardhost/internal/apiload"
)

func main() {
	bin := flag.String("shardhost", "bin/shardhost", "the shardhost binary")
	module := flag.String("module", "bin/wasm/counter.wasm", "the counter module")
	conns := flag.Int("conns", 2000, "connections to the API in all")
	slowFraction := flag.Float64("slow-fraction", 0.5, "the fraction of them that are slowloris")
	duration := flag.Duration("duration", 60*time.Second, "how long the load lasts")
	think := flag.Duration("think", 100*time.Millisecond, "the most an asking connection waits between asks")
	drip := flag.Duration("drip", time.Second, "how often a slowloris connection sends a byte")
	entities := flag.Int("entities", 1000, "counters the asks spread over")
	extra := flag.String("member-flags", "", "more flags for shardhost start, space-separated")
	flag.Parse()
	if err := run(*bin, *module, *conns, *slowFraction, *duration, *think, *drip, *entities, *extra); err != nil {
		fmt.Fprintln(os.Stderr, "apiload:", err)
		os.Exit(1)
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func run(bin, module string, conns int, slowFraction float64, duration, think, drip time.Duration, entities int, extra string) error {
	var lim syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim) == nil && lim.Cur < lim.Max {
		lim.Cur = lim.Max
		syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
	}
	wasm, err := os.ReadFile(module)
	if err != nil {
		return fmt.Errorf("%v (build it with make examples)", err)
	}
	dir, err := os.MkdirTemp("", "apiload-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	var ports [3]int
	for i := range ports {
		if ports[i], err = freePort(); err != nil {
			return err
		}
	}
	api := fmt.Sprintf("127.0.0.1:%d", ports[2])
	args := []string{"start", "--bind", fmt.Sprintf("127.0.0.1:%d", ports[0]), "--transport", fmt.Sprintf("127.0.0.1:%d", ports[1]),
		"--api", api, "--data-dir", dir, "--gossip-profile", "local", "--log-level", "warn"}
	if extra != "" {
		args = append(args, strings.Fields(extra)...)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return err
	}
	defer func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
	}()
	deadline := time.Now().Add(60 * time.Second)
	for {
		if resp, err := http.Get("http://" + api + "/ready"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the member at %s is not ready", api)
		}
		time.Sleep(50 * time.Millisecond)
	}
	resp, err := http.Post("http://"+api+"/v1/types/counter", "application/wasm", bytes.NewReader(wasm))
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("deploy: %s", resp.Status)
	}
	// Every counter is active before the load: the asks measure the API, not activations.
	warm, err := apiload.Run(context.Background(), apiload.Config{API: api, Type: "counter", Entities: entities, Asking: 32,
		Duration: 5 * time.Second, PID: cmd.Process.Pid})
	if err != nil {
		return err
	}
	slow := int(float64(conns) * slowFraction)
	cfg := apiload.Config{API: api, Type: "counter", Entities: entities, Asking: conns - slow, Think: think,
		Slow: slow, Drip: drip, Duration: duration, PID: cmd.Process.Pid}
	// The same asks without the slowloris connections, for comparison.
	quiet := cfg
	quiet.Slow, quiet.Duration = 0, duration/3
	base, err := apiload.Run(context.Background(), quiet)
	if err != nil {
		return err
	}
	res, err := apiload.Run(context.Background(), cfg)
	if err != nil {
		return err
	}
	fmt.Printf("member: %s, %d counters warmed (%d asks), RSS %.1f MiB\n", api, entities, warm.Asks, float64(warm.PeakRSS)/(1<<20))
	fmt.Printf("%d asking connections alone, %v:\n  %v\n", cfg.Asking, quiet.Duration, base)
	fmt.Printf("%d asking + %d slowloris connections (a byte every %v), %v:\n  %v\n", cfg.Asking, slow, drip, duration, res)
	return nil
}
