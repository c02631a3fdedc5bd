package main

import (
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// reaper is the one waiter of the process: PID 1 reaps every process that ends (orphans come to
// it), and hands the exit code of the ones it was asked about to whoever asked. A process may end
// before it is asked about: its code waits for a while.
type reaper struct {
	mu       sync.Mutex
	waiting  map[int]chan int
	early    map[int]earlyExit
	prunedAt time.Time
}

type earlyExit struct {
	code int
	at   time.Time
}

// An exit nobody asked about (an orphan's) is forgotten after this long, and at most this many
// are kept: a command that forks without pause costs the agent a bounded map.
const (
	unclaimedExitKept = 10 * time.Second
	unclaimedExitsMax = 4096
)

func newReaper() *reaper {
	return &reaper{waiting: map[int]chan int{}, early: map[int]earlyExit{}}
}

// start starts cmd and answers its exit code to come. The reaper cannot hand the exit on before
// the pid is registered (it takes the lock to), and an exit kept for an earlier process of the
// same pid is not this one's.
func (r *reaper) start(cmd *exec.Cmd) (<-chan int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	pid := cmd.Process.Pid
	delete(r.early, pid)
	ch := make(chan int, 1)
	r.waiting[pid] = ch
	return ch, nil
}

// signalGroup sends sig to the process group pid leads, while pid is a process this reaper
// started and has not reaped: once reaped, its number may be given to another process, so no
// signal goes there by it (syscall.ESRCH). The check and the kill hold the lock the loop takes
// to hand an exit on, right after Wait4 returns it.
func (r *reaper) signalGroup(pid int, sig syscall.Signal) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, running := r.waiting[pid]; !running || pid <= 1 {
		return syscall.ESRCH
	}
	return syscall.Kill(-pid, sig)
}

// forget drops a wait given up on.
func (r *reaper) forget(pid int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.waiting, pid)
}

// wait answers the exit code of pid (128 + the signal when a signal ended it, as a shell says).
func (r *reaper) wait(pid int) <-chan int {
	ch := make(chan int, 1)
	r.mu.Lock()
	defer r.mu.Unlock()
	if e, ok := r.early[pid]; ok {
		delete(r.early, pid)
		ch <- e.code
		return ch
	}
	r.waiting[pid] = ch
	return ch
}

// keepUnclaimed keeps an exit for a wait that may come (held: r.mu); the old ones go once a second.
func (r *reaper) keepUnclaimed(pid, code int) {
	now := time.Now()
	if now.Sub(r.prunedAt) > time.Second || len(r.early) >= unclaimedExitsMax {
		r.prunedAt = now
		for p, e := range r.early {
			if now.Sub(e.at) > unclaimedExitKept || len(r.early) >= unclaimedExitsMax {
				delete(r.early, p)
			}
		}
	}
	r.early[pid] = earlyExit{code: code, at: now}
}

// loop waits for every process that ends, until none is left (the main child's exit ends svc-init first).
func (r *reaper) loop() {
	for {
		var status syscall.WaitStatus
		got, err := syscall.Wait4(-1, &status, 0, nil)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return
		}
		var code int
		switch {
		case status.Exited():
			code = status.ExitStatus()
		case status.Signaled():
			code = 128 + int(status.Signal())
		default:
			continue
		}
		r.mu.Lock()
		if ch, ok := r.waiting[got]; ok {
			delete(r.waiting, got)
			ch <- code
		} else {
			r.keepUnclaimed(got, code)
		}
		r.mu.Unlock()
	}
}
