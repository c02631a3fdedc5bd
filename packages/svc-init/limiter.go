package main

import (
	"fmt"
	"sync"
	"time"
)

// limiter holds a container's output to a number of lines and of bytes a second, with two
// seconds' worth of each as a burst (a start-up's messages pass whole). Lines over the rate are
// dropped, not held: holding them would block the tenant's process on its next write, in the
// middle of whatever it was serving. How many were dropped is said once output passes again, at
// most once a second (a flood at the rate would otherwise be half notices).
type limiter struct {
	mu                     sync.Mutex
	now                    func() time.Time
	linesRate, bytesRate   float64
	lines, bytes           float64
	linesBurst, bytesBurst float64
	last                   time.Time
	dropped                int
	// When the last notice was written (zero: never, so the first one is not held back).
	lastNotice time.Time
}

// noticeEvery is how often at most a notice of dropped lines is written.
const noticeEvery = time.Second

func newLimiter(linesPerSecond, bytesPerSecond int, now func() time.Time) *limiter {
	l := &limiter{
		now:        now,
		linesRate:  float64(linesPerSecond),
		bytesRate:  float64(bytesPerSecond),
		linesBurst: 2 * float64(linesPerSecond),
		bytesBurst: 2 * float64(bytesPerSecond),
		last:       now(),
	}
	l.lines, l.bytes = l.linesBurst, l.bytesBurst
	return l
}

// admit takes one line of n bytes: whether it passes, and the notice of the lines dropped before
// it when it is the first to pass after some were ("" otherwise). The notice is charged too.
func (l *limiter) admit(n int) (bool, string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.refill()
	if l.lines < 1 || l.bytes < float64(n) {
		l.dropped++
		return false, ""
	}
	l.lines--
	l.bytes -= float64(n)
	notice := ""
	if l.dropped > 0 && l.now().Sub(l.lastNotice) >= noticeEvery {
		notice = l.noticeLocked()
		l.lines--
		l.bytes -= float64(len(notice))
	}
	return true, notice
}

// pendingNotice is the notice of lines dropped since the last one, whatever the rate ("" for none).
func (l *limiter) pendingNotice() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.dropped == 0 {
		return ""
	}
	return l.noticeLocked()
}

func (l *limiter) noticeLocked() string {
	notice := fmt.Sprintf("[svc] %d lines of output dropped: over this container's log limit of %.0f lines and %.0f KiB a second\n",
		l.dropped, l.linesRate, l.bytesRate/1024)
	l.dropped = 0
	l.lastNotice = l.now()
	return notice
}

func (l *limiter) refill() {
	now := l.now()
	elapsed := now.Sub(l.last).Seconds()
	l.last = now
	if elapsed <= 0 {
		return
	}
	l.lines = minFloat(l.linesBurst, l.lines+elapsed*l.linesRate)
	l.bytes = minFloat(l.bytesBurst, l.bytes+elapsed*l.bytesRate)
}

func minFloat(a, b float64) float64 {
	if a < b {
		return a
	}
	return b
}
