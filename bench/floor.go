package main

// The floor workload (issue 45): what the system calls a sync round needs
// cost on this machine, so every scenario's server CPU can be stated as a
// multiple of its floor. Each case runs the raw system call in a loop on
// one locked OS thread (no Go netpoller, no scheduler in between) and
// reports its CPU time per call (getrusage of the thread: user + system)
// and its wall time per call:
//
//   - tcp write / tcp read of S bytes: a blocking loopback TCP pair made
//     with socket(2) directly; a batch of writes on one end, then the same
//     number of reads of S bytes on the other, each batch timed apart (a
//     loopback write also runs the receiver's TCP input in the writer's
//     context, as it does for a server's answer);
//   - epoll_wait: one call on an epoll set holding a readable socket
//     (returns one event; what a loaded event loop pays to find work);
//   - pingpong: a blocking read/write round trip between two threads over
//     a loopback pair (the process's CPU per round trip: two writes, two
//     reads, two sleeps and wake-ups), the cost when nothing else is ready;
//   - futex wake+wait: two locked threads handing a token through a Go
//     channel, per hand-over (the process's CPU);
//   - pwrite+fdatasync of S bytes at the end of a file in --data-dir (what
//     a commit's durability asks of the kernel); CPU and wall apart; and a
//     pwrite of 4 KiB alone (a page into the page cache);
//   - sendfile of 1 MiB from a file in the page cache to a loopback
//     socket;
//   - memcpy of S bytes in user space.
//
//	go run ./bench floor [--data-dir DIR] [--runs N]

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"syscall"
	"time"
)

func runFloor(ctx context.Context, cfg *Config, _ string) ([]Result, error) {
	var out []Result
	add := func(name string, iters int, f func(n int) error) error {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		cpu, wall, err := timeOnThread(iters, f)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		r := Result{Workload: "floor", Case: name, Store: "-", Mode: "-"}
		r.add("CPU/call", "µs", cpu.Seconds()*1e6/float64(iters))
		r.add("wall/call", "µs", wall.Seconds()*1e6/float64(iters))
		out = append(out, r)
		return nil
	}
	n, syncs := 20000, 300
	if cfg.Quick {
		n, syncs = 2000, 20
	}
	for _, size := range []int{64, 512, 1400, 4096, 16384, 65536, 1 << 20} {
		w, rd, err := tcpPair()
		if err != nil {
			return out, err
		}
		buf := make([]byte, size)
		batch := max(1, min(8, (1<<20)/size)) // at most 1 MiB in flight (the socket buffers hold 4 MiB)
		iters := n
		if size >= 1<<20 {
			iters = n / 50
		}
		// writes: batches of `batch` writes, each batch drained untimed.
		if err := add(fmt.Sprintf("tcp write %d B", size), iters, func(k int) error {
			return floorWrites(w, rd, buf, k, batch, true)
		}); err != nil {
			return out, err
		}
		if err := add(fmt.Sprintf("tcp read %d B", size), iters, func(k int) error {
			return floorWrites(w, rd, buf, k, batch, false)
		}); err != nil {
			return out, err
		}
		_ = syscall.Close(w)
		_ = syscall.Close(rd)
	}
	if err := floorSendfile(add, cfg.DataDir, 1<<20, n/50); err != nil {
		return out, err
	}
	if err := floorEpoll(add, n*5); err != nil {
		return out, err
	}
	if err := floorPingPong(add, n); err != nil {
		return out, err
	}
	if err := floorFutex(add, n); err != nil {
		return out, err
	}
	for _, size := range []int{4096, 16384} {
		if err := floorFsync(add, cfg.DataDir, size, syncs, true); err != nil {
			return out, err
		}
	}
	if err := floorFsync(add, cfg.DataDir, 4096, n, false); err != nil {
		return out, err
	}
	for _, size := range []int{512, 4096, 65536, 1 << 20} {
		src, dst := make([]byte, size), make([]byte, size)
		iters := 200000
		if size >= 65536 {
			iters = 20000
		}
		if size >= 1<<20 {
			iters = 1000
		}
		if err := add(fmt.Sprintf("memcpy %d B", size), iters, func(k int) error {
			for range k {
				copy(dst, src)
			}
			return nil
		}); err != nil {
			return out, err
		}
	}
	return out, nil
}

// timeOnThread runs f(iters) on a locked OS thread (after a warm-up of
// iters/10) and returns the thread's CPU time (RUSAGE_THREAD) and the
// wall time it took, less what f added to floorExcluded (the untimed
// half of a write/read pair; a case whose CPU is the process's, with two
// threads, adds the other thread's CPU as a negative exclusion).
func timeOnThread(iters int, f func(n int) error) (time.Duration, time.Duration, error) {
	type res struct {
		cpu, wall time.Duration
		err       error
	}
	ch := make(chan res, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		_ = f(iters / 10) // warm-up
		floorExcluded = floorSample{}
		c0, t0 := threadCPU(), time.Now()
		err := f(iters)
		c1, t1 := threadCPU(), time.Now()
		ex := floorExcluded
		ch <- res{cpu: c1 - c0 - ex.cpu, wall: t1.Sub(t0) - ex.wall, err: err}
	}()
	r := <-ch
	return r.cpu, r.wall, r.err
}

// floorSample is time spent in untimed work of a case (the other half of
// a write/read pair), subtracted from its totals.
type floorSample struct{ cpu, wall time.Duration }

var floorExcluded floorSample // written only by the locked thread of the running case

func threadCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(1 /* RUSAGE_THREAD */, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// floorWrites does k writes of buf on w and k reads of len(buf) on r in
// batches; timeWrites says which half counts (the other is added to
// floorExcluded).
func floorWrites(w, r int, buf []byte, k, batch int, timeWrites bool) error {
	for done := 0; done < k; done += batch {
		c0, t0 := threadCPU(), time.Now()
		for range batch {
			if _, err := syscall.Write(w, buf); err != nil {
				return err
			}
		}
		c1, t1 := threadCPU(), time.Now()
		for range batch {
			for got := 0; got < len(buf); {
				m, err := syscall.Read(r, buf[got:])
				if err != nil {
					return err
				}
				got += m
			}
		}
		c2, t2 := threadCPU(), time.Now()
		if timeWrites {
			floorExcluded.cpu += c2 - c1
			floorExcluded.wall += t2.Sub(t1)
		} else {
			floorExcluded.cpu += c1 - c0
			floorExcluded.wall += t1.Sub(t0)
		}
	}
	return nil
}

// tcpPair returns two connected, blocking loopback TCP sockets (Nagle
// off, as net/http's are).
func tcpPair() (int, int, error) {
	ln, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		return 0, 0, err
	}
	defer syscall.Close(ln)
	sa := &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}
	if err := syscall.Bind(ln, sa); err != nil {
		return 0, 0, err
	}
	if err := syscall.Listen(ln, 1); err != nil {
		return 0, 0, err
	}
	name, err := syscall.Getsockname(ln)
	if err != nil {
		return 0, 0, err
	}
	c, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		return 0, 0, err
	}
	if err := syscall.Connect(c, name); err != nil {
		syscall.Close(c)
		return 0, 0, err
	}
	s, _, err := syscall.Accept(ln)
	if err != nil {
		syscall.Close(c)
		return 0, 0, err
	}
	for _, fd := range []int{c, s} {
		_ = syscall.SetsockoptInt(fd, syscall.IPPROTO_TCP, syscall.TCP_NODELAY, 1)
		_ = syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_SNDBUF, 4<<20)
		_ = syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4<<20)
	}
	return c, s, nil
}

func floorEpoll(add func(string, int, func(int) error) error, n int) error {
	w, r, err := tcpPair()
	if err != nil {
		return err
	}
	defer syscall.Close(w)
	defer syscall.Close(r)
	if _, err := syscall.Write(w, []byte{1}); err != nil {
		return err
	}
	ep, err := syscall.EpollCreate1(0)
	if err != nil {
		return err
	}
	defer syscall.Close(ep)
	if err := syscall.EpollCtl(ep, syscall.EPOLL_CTL_ADD, r, &syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: int32(r)}); err != nil {
		return err
	}
	evs := make([]syscall.EpollEvent, 64)
	return add("epoll_wait (1 ready)", n, func(k int) error {
		for range k {
			if m, err := syscall.EpollWait(ep, evs, 0); err != nil || m != 1 {
				return fmt.Errorf("epoll_wait: %d, %v", m, err)
			}
		}
		return nil
	})
}

// floorPingPong measures a blocking 64-byte round trip between two
// threads; its CPU is the process's (both threads), per round trip.
func floorPingPong(add func(string, int, func(int) error) error, n int) error {
	a, b, err := tcpPair()
	if err != nil {
		return err
	}
	defer syscall.Close(a)
	defer syscall.Close(b)
	return add("pingpong 64 B (2 threads, process CPU)", n, func(k int) error {
		done := make(chan error, 1)
		go func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			buf := make([]byte, 64)
			for range k {
				if err := readFull(b, buf); err != nil {
					done <- err
					return
				}
				if _, err := syscall.Write(b, buf); err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}()
		buf := make([]byte, 64)
		p0 := processCPU()
		t0 := threadCPU()
		for range k {
			if _, err := syscall.Write(a, buf); err != nil {
				return err
			}
			if err := readFull(a, buf); err != nil {
				return err
			}
		}
		err := <-done
		// Count the whole process's CPU: replace this thread's share by it.
		floorExcluded.cpu -= (processCPU() - p0) - (threadCPU() - t0)
		return err
	})
}

func readFull(fd int, buf []byte) error {
	for got := 0; got < len(buf); {
		m, err := syscall.Read(fd, buf[got:])
		if err != nil {
			return err
		}
		if m == 0 {
			return fmt.Errorf("EOF")
		}
		got += m
	}
	return nil
}

// floorFutex hands a token between two locked threads through unbuffered
// channels (each hand-over parks one thread on a futex and wakes the
// other); CPU is the process's, per hand-over.
func floorFutex(add func(string, int, func(int) error) error, n int) error {
	return add("futex hand-over (2 threads, process CPU)", n, func(k int) error {
		ping, pong := make(chan struct{}), make(chan struct{})
		done := make(chan struct{})
		go func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			for range k / 2 {
				<-ping
				pong <- struct{}{}
			}
			close(done)
		}()
		p0, t0 := processCPU(), threadCPU()
		for range k / 2 {
			ping <- struct{}{}
			<-pong
		}
		<-done
		floorExcluded.cpu -= (processCPU() - p0) - (threadCPU() - t0)
		return nil
	})
}

func floorFsync(add func(string, int, func(int) error) error, dir string, size, n int, sync bool) error {
	f, err := os.CreateTemp(dir, "synclane-floor-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	fd := int(f.Fd())
	buf := make([]byte, size)
	var off int64
	name := fmt.Sprintf("pwrite %d B", size)
	if sync {
		name += " + fdatasync"
	}
	return add(name, n, func(k int) error {
		for range k {
			if _, err := syscall.Pwrite(fd, buf, off); err != nil {
				return err
			}
			off += int64(size)
			if !sync {
				continue
			}
			if err := syscall.Fdatasync(fd); err != nil {
				return err
			}
		}
		return nil
	})
}

// floorSendfile measures sendfile(2) of size bytes of a file in the page
// cache to a loopback socket (the receiving read untimed): what a
// segment download sent with ReadFrom costs the server.
func floorSendfile(add func(string, int, func(int) error) error, dir string, size, n int) error {
	f, err := os.CreateTemp(dir, "synclane-floor-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	if _, err := f.Write(make([]byte, size)); err != nil {
		return err
	}
	w, r, err := tcpPair()
	if err != nil {
		return err
	}
	defer syscall.Close(w)
	defer syscall.Close(r)
	buf := make([]byte, size)
	fd := int(f.Fd())
	return add(fmt.Sprintf("sendfile %d B (file in page cache)", size), n, func(k int) error {
		for range k {
			var off int64
			for off < int64(size) {
				if _, err := syscall.Sendfile(w, fd, &off, size-int(off)); err != nil {
					return err
				}
			}
			c1, t1 := threadCPU(), time.Now()
			if err := readFull(r, buf); err != nil {
				return err
			}
			floorExcluded.cpu += threadCPU() - c1
			floorExcluded.wall += time.Since(t1)
		}
		return nil
	})
}
