// go-redsync (the lock library Go users pick, over go-redis) under the lock
// workloads of bench/driver.py. Same options and the same one-line
// key=value output as bench_lock and bench_handoff, so the driver treats
// every contender alike.
//
//	redsync-bench --port P --mode loop|herd|handoff [--procs N] [--threads T]
//	     [--distinct] [--work] [--seconds S] [--timeout S] [--name NAME]
//	     [--dist PREFIX]
//
// redsync runs with its defaults: an 8 s expiry, 32 tries 50-250 ms apart
// (random); when they run out the worker simply asks again, as an
// application would. A "thread" is a goroutine with a Mutex of its own per
// acquisition (the Mutex keeps the holder's value); the goroutines of a
// process share one go-redis client and one Redsync, as the C workers of a
// process share one dlock client. --procs starts that many processes.
// redsync has no fair lock, semaphore or watchdog (a holder extends by
// hand), so it runs the lock workloads only.
package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	goredislib "github.com/redis/go-redis/v9"
)

var (
	port           = 6379
	mode           = "loop"
	procs, threads = 1, 1
	seconds        = 2.0
	timeout        = 120.0
	name           = "bench:lock"
	dist           = ""
	distinct, work bool
	child          = -1
	ctx            = context.Background()
	start          = time.Now()
	counterKey     = "bench:counter"
)

// now is a monotonic clock in ns, comparable within one process.
func now() int64 { return int64(time.Since(start)) }

type peer struct {
	client *goredislib.Client
	rs     *redsync.Redsync
}

func newPeer() *peer {
	c := goredislib.NewClient(&goredislib.Options{Addr: fmt.Sprintf("127.0.0.1:%d", port)})
	return &peer{client: c, rs: redsync.New(goredis.NewPool(c))}
}

// acquire takes 'n', asking again when the library gives up, until
// 'deadline' (ns); nil when it passed.
func (p *peer) acquire(n string, deadline int64) *redsync.Mutex {
	for now() < deadline {
		m := p.rs.NewMutex(n)
		err := m.Lock()
		if err == nil {
			return m
		}
		var taken *redsync.ErrTaken
		if !errors.Is(err, redsync.ErrFailed) && !errors.As(err, &taken) {
			fmt.Fprintln(os.Stderr, "redsync_bench:", err)
			return nil
		}
	}
	return nil
}

// critical is a non-atomic read-modify-write of the counter.
func (p *peer) critical() {
	v, _ := p.client.Get(ctx, counterKey).Int64()
	p.client.Set(ctx, counterKey, v+1, 0)
}

type result struct {
	acq               []int64
	pair, wait        []int64
	total, errs, done int64
}

func runChild(k int) int {
	p := newPeer()
	if err := p.client.Ping(ctx).Err(); err != nil {
		fmt.Fprintln(os.Stderr, "redsync_bench:", err)
		return 1
	}
	in := bufio.NewReader(os.Stdin)
	fmt.Println("ready")
	if _, err := in.ReadString('\n'); err != nil {
		return 1
	}
	end := now() + int64(seconds*1e9)
	res := &result{acq: make([]int64, threads)}
	var mu sync.Mutex
	var wg, lined sync.WaitGroup
	lined.Add(threads)
	for i := 0; i < threads; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			n := name
			if distinct {
				n = fmt.Sprintf("%s:%d:%d", name, k, i)
			}
			if mode == "herd" {
				lined.Done()
				t := now()
				m := p.acquire(n, t+int64(timeout*1e9))
				if m == nil {
					mu.Lock()
					res.errs++
					mu.Unlock()
					return
				}
				got := now()
				p.critical()
				m.Unlock()
				done := now()
				mu.Lock()
				res.acq[i] = 1
				res.total++
				if done > res.done {
					res.done = done
				}
				res.wait = append(res.wait, got-t)
				res.pair = append(res.pair, done-t)
				mu.Unlock()
				return
			}
			var count, total int64
			var pair, wait []int64
			for t := now(); t < end; {
				m := p.acquire(n, t+30e9)
				if m == nil {
					mu.Lock()
					res.errs++
					mu.Unlock()
					break
				}
				got := now()
				if work {
					p.critical()
				}
				m.Unlock()
				done := now()
				wait = append(wait, got-t)
				pair = append(pair, done-t)
				total++
				if done <= end {
					count++
				}
				t = done
			}
			mu.Lock()
			res.acq[i] = count
			res.total += total
			res.pair = append(res.pair, pair...)
			res.wait = append(res.wait, wait...)
			mu.Unlock()
		}(i)
	}
	if mode == "herd" {
		lined.Wait()
		fmt.Println("waiting")
	}
	wg.Wait()
	dir := os.Getenv("REDSYNC_BENCH_TMP")
	writeInts(fmt.Sprintf("%s/pair.%d", dir, k), res.pair)
	writeInts(fmt.Sprintf("%s/wait.%d", dir, k), res.wait)
	acq := make([]string, len(res.acq))
	for i, a := range res.acq {
		acq[i] = strconv.FormatInt(a, 10)
	}
	fmt.Printf("result total=%d errors=%d done=%d acq=%s\n", res.total, res.errs,
		res.done+start.UnixNano(), strings.Join(acq, ","))
	return 0
}

func writeInts(path string, xs []int64) {
	var b strings.Builder
	for _, x := range xs {
		b.WriteString(strconv.FormatInt(x, 10))
		b.WriteByte('\n')
	}
	os.WriteFile(path, []byte(b.String()), 0o600)
}

func readInts(path string) []int64 {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var out []int64
	for _, s := range strings.Fields(string(data)) {
		v, _ := strconv.ParseInt(s, 10, 64)
		out = append(out, v)
	}
	return out
}

func quantile(sorted []int64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted)-1)*q + 0.5)
	if i > len(sorted)-1 {
		i = len(sorted) - 1
	}
	return float64(sorted[i]) / 1e3
}

func writeDist(sorted []int64, suffix string) {
	if dist == "" || len(sorted) == 0 {
		return
	}
	var b strings.Builder
	for i := 0; i <= 200; i++ {
		fmt.Fprintf(&b, "%.3f %.1f\n", float64(i)/200, quantile(sorted, float64(i)/200))
	}
	os.WriteFile(dist+"."+suffix, []byte(b.String()), 0o644)
}

// Commands the server ran, from INFO commandstats (INFO itself excluded):
// 'all' counts those run inside scripts too; 'wire' those a client sent.
// Those are the calls no script can make (EVAL*, SUBSCRIBE*, PING, ...),
// and here also every SET (redsync's lock and the counter's write: its one
// script, the unlock, runs no SET) and every GET but the one each unlock
// script runs (the others are the counter's reads).
var (
	wireRe = regexp.MustCompile(`^(eval|evalsha|eval_ro|evalsha_ro|fcall|fcall_ro|s?subscribe|s?unsubscribe|p(un)?subscribe|ping|auth|select|hello|quit|reset|client\|.*|script\|.*)$`)
	statRe = regexp.MustCompile(`(?m)^cmdstat_([^:]+):calls=(\d+)`)
)

func cmdstats(c *goredislib.Client) (all, wire int64) {
	text, _ := c.Info(ctx, "commandstats").Result()
	calls := map[string]int64{}
	for _, m := range statRe.FindAllStringSubmatch(text, -1) {
		n, _ := strconv.ParseInt(m[2], 10, 64)
		calls[m[1]] = n
		if m[1] != "info" {
			all += n
		}
		if wireRe.MatchString(m[1]) {
			wire += n
		}
	}
	wire += calls["set"]
	if gets := calls["get"] - calls["eval"] - calls["evalsha"]; gets > 0 {
		wire += gets
	}
	return
}

type kid struct {
	cmd    *exec.Cmd
	out    *bufio.Scanner
	in     *bufio.Writer
	result string
}

func expect(k *kid, what string) error {
	for k.out.Scan() {
		if k.out.Text() == what {
			return nil
		}
	}
	return fmt.Errorf("a worker process ended before saying %s", what)
}

func runParent(args []string) int {
	p := newPeer()
	p.client.Set(ctx, counterKey, 0, 0)
	tmp, err := os.MkdirTemp("", "redsync-bench.")
	if err != nil {
		fmt.Fprintln(os.Stderr, "redsync_bench:", err)
		return 1
	}
	defer os.RemoveAll(tmp)
	self, _ := os.Executable()
	var kids []*kid
	for k := 0; k < procs; k++ {
		c := exec.Command(self, append(append([]string{}, args...), "--child", strconv.Itoa(k))...)
		c.Env = append(os.Environ(), "REDSYNC_BENCH_TMP="+tmp)
		c.Stderr = os.Stderr
		stdin, _ := c.StdinPipe()
		stdout, _ := c.StdoutPipe()
		if err := c.Start(); err != nil {
			fmt.Fprintln(os.Stderr, "redsync_bench:", err)
			return 1
		}
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 1<<24)
		kids = append(kids, &kid{cmd: c, out: sc, in: bufio.NewWriter(stdin)})
	}
	var held *redsync.Mutex
	if mode == "herd" {
		// The parent holds the lock while the workers line up.
		held = p.acquire(name, now()+30e9)
	}
	for _, k := range kids {
		if err := expect(k, "ready"); err != nil {
			fmt.Fprintln(os.Stderr, "redsync_bench:", err)
			return 1
		}
	}
	_, before := cmdstats(p.client)
	allBefore, _ := cmdstats(p.client)
	t0 := time.Now().UnixNano()
	for _, k := range kids {
		k.in.WriteString("go\n")
		k.in.Flush()
	}
	if held != nil {
		for _, k := range kids {
			if err := expect(k, "waiting"); err != nil {
				fmt.Fprintln(os.Stderr, "redsync_bench:", err)
				return 1
			}
		}
		time.Sleep(200 * time.Millisecond) // the last ones make their first attempt
		allBefore, before = cmdstats(p.client)
		t0 = time.Now().UnixNano()
		held.Unlock()
	}
	failed := 0
	for _, k := range kids {
		for k.out.Scan() {
			if line := k.out.Text(); strings.HasPrefix(line, "result ") {
				k.result = line
			}
		}
		if k.cmd.Wait() != nil || k.result == "" {
			failed++
		}
	}
	allAfter, after := cmdstats(p.client)
	counter, _ := p.client.Get(ctx, counterKey).Int64()
	var acq, errs, done, win int64 = 0, int64(failed), 0, 0
	mn, mx := int64(1<<62), int64(0)
	var pair, wait []int64
	for i, k := range kids {
		if k.result == "" {
			continue
		}
		f := map[string]string{}
		for _, kv := range strings.Fields(k.result)[1:] {
			if eq := strings.IndexByte(kv, '='); eq > 0 {
				f[kv[:eq]] = kv[eq+1:]
			}
		}
		n, _ := strconv.ParseInt(f["total"], 10, 64)
		acq += n
		e, _ := strconv.ParseInt(f["errors"], 10, 64)
		errs += e
		d, _ := strconv.ParseInt(f["done"], 10, 64)
		if d > done {
			done = d
		}
		for _, a := range strings.Split(f["acq"], ",") {
			v, _ := strconv.ParseInt(a, 10, 64)
			win += v
			if v < mn {
				mn = v
			}
			if v > mx {
				mx = v
			}
		}
		pair = append(pair, readInts(fmt.Sprintf("%s/pair.%d", tmp, i))...)
		wait = append(wait, readInts(fmt.Sprintf("%s/wait.%d", tmp, i))...)
	}
	sort.Slice(pair, func(a, b int) bool { return pair[a] < pair[b] })
	sort.Slice(wait, func(a, b int) bool { return wait[a] < wait[b] })
	writeDist(pair, "pair")
	writeDist(wait, "wait")
	secs := seconds
	if mode == "herd" {
		secs = float64(done-t0) / 1e9
	}
	checked := work || mode == "herd"
	ok := counter == acq
	cmds := after - before
	if mn == int64(1<<62) {
		mn = 0
	}
	verdict := "-"
	if checked {
		verdict = map[bool]string{true: "ok", false: "bad"}[ok]
	}
	fmt.Printf("acq=%d win=%d seconds=%.3f rate=%.1f pair_p50=%.1f pair_p99=%.1f wait_p50=%.1f "+
		"wait_p99=%.1f min=%d max=%d cmds=%d cmds_all=%d counter=%s errors=%d\n",
		acq, win, secs, float64(win)/secs, quantile(pair, 0.5), quantile(pair, 0.99),
		quantile(wait, 0.5), quantile(wait, 0.99), mn, mx, cmds, allAfter-allBefore, verdict, errs)
	if errs > 0 || (checked && !ok) {
		return 1
	}
	return 0
}

// handoff runs two clients in one process (two connection pools and two
// owner values, as two processes would have), a goroutine each. The holder
// tells the other to wait, holds 5-15 ms, notes the time and releases; the
// waiter notes when its acquisition returns. Roles swap each time.
func handoff() int {
	peers := []*peer{newPeer(), newPeer()}
	inbox := []chan string{make(chan string, 4), make(chan string, 4)}
	released, acquired := make([][]int64, 2), make([][]int64, 2)
	var errs int64
	var mu sync.Mutex
	end := now() + int64(seconds*1e9)
	var wg sync.WaitGroup
	for k := 0; k < 2; k++ {
		wg.Add(1)
		go func(k int) {
			defer wg.Done()
			var m *redsync.Mutex
			if k == 0 {
				m = peers[k].acquire(name, end+30e9)
			}
			for {
				if m != nil {
					over := now() >= end
					if over {
						inbox[1-k] <- "q"
					} else {
						inbox[1-k] <- "w"
					}
					time.Sleep(time.Duration(5+rand.Intn(11)) * time.Millisecond)
					released[k] = append(released[k], now())
					m.Unlock()
					m = nil
					if over {
						return
					}
				} else {
					if <-inbox[k] == "q" {
						return
					}
					m = peers[k].acquire(name, now()+30e9)
					acquired[k] = append(acquired[k], now())
					if m == nil {
						mu.Lock()
						errs++
						mu.Unlock()
						inbox[1-k] <- "q"
						return
					}
				}
			}
		}(k)
	}
	wg.Wait()
	var h []int64
	for k := 0; k < 2; k++ {
		from, to := released[k], acquired[1-k]
		for i := 0; i < len(from) && i < len(to); i++ {
			if to[i] > from[i] {
				h = append(h, to[i]-from[i])
			}
		}
	}
	sort.Slice(h, func(a, b int) bool { return h[a] < h[b] })
	writeDist(h, "handoff")
	fmt.Printf("handoffs=%d p50=%.1f p99=%.1f errors=%d\n", len(h), quantile(h, 0.5), quantile(h, 0.99), errs)
	if errs > 0 || len(h) == 0 {
		return 1
	}
	return 0
}

func main() {
	args := os.Args[1:]
	for i := 0; i < len(args); i++ {
		a := strings.TrimPrefix(args[i], "--")
		switch a {
		case "distinct":
			distinct = true
			continue
		case "work":
			work = true
			continue
		}
		if i+1 >= len(args) {
			fmt.Fprintln(os.Stderr, "redsync_bench: --"+a+" needs a value")
			os.Exit(2)
		}
		v := args[i+1]
		i++
		switch a {
		case "port":
			port, _ = strconv.Atoi(v)
		case "mode":
			mode = v
		case "procs":
			procs, _ = strconv.Atoi(v)
		case "threads":
			threads, _ = strconv.Atoi(v)
		case "seconds":
			seconds, _ = strconv.ParseFloat(v, 64)
		case "timeout":
			timeout, _ = strconv.ParseFloat(v, 64)
		case "name":
			name = v
		case "dist":
			dist = v
		case "child":
			child, _ = strconv.Atoi(v)
		}
	}
	switch {
	case child >= 0:
		os.Exit(runChild(child))
	case mode == "handoff":
		os.Exit(handoff())
	default:
		os.Exit(runParent(os.Args[1:]))
	}
}
