// svc-init is PID 1 of the containers that run a tenant's own code (services, environments).
//
// It starts the image's command as its one child, forwards the signals the engine sends (a stop's
// SIGTERM above all) to it, reaps every orphan as an init must, exits with the child's code, and
// holds the child's output to a rate before it reaches the container's log.
//
// Why a program inside the container: the engine copies everything a container prints into its
// log, and that copy runs in the engine and its shim, outside every tenant's CPU group and at the
// host's weight. One service printing without pause at its 0.4 cores made dockerd and the shim
// spend 0.72 of a core (README, Resource safety), and Docker has no rate limit on a container's
// log. Read here, the flood is read inside the tenant's own limits (under gVisor, inside its
// sandbox); what passes the limit is all the engine ever sees, and what does not is dropped with a
// line that says how much (as hosted platforms do with a log rate limit).
//
// Go's standard library only (no modules can be fetched here), built static (CGO_ENABLED=0) so
// that it runs in any image, glibc, musl or none; svcd mounts it read-only into the container.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"sync"
	"syscall"
	"time"
)

// Once the child has exited, output still in the pipes is read for this long: a grandchild that
// kept them open (a daemon) must not hold up the container's exit.
const drainAfterExit = 200 * time.Millisecond

// prctl's PR_SET_DUMPABLE, PR_SET_CHILD_SUBREAPER, PR_SET_NO_NEW_PRIVS and PR_GET_NO_NEW_PRIVS
// (linux/prctl.h); the syscall package has no names for them.
const (
	prSetDumpable       = 4
	prSetChildSubreaper = 36
	prSetNoNewPrivs     = 38
	prGetNoNewPrivs     = 39
)

func main() {
	os.Exit(run(os.Args[1:], nil))
}

// run is svc-init; commandStarted, when not nil, is called once the command has started, before
// the signals asked for after it are (the tests widen that moment with it).
func run(args []string, commandStarted func()) int {
	flags := flag.NewFlagSet("svc-init", flag.ContinueOnError)
	linesPerSecond := flags.Int("lines-per-second", 500, "lines of output the container's log takes a second (both streams together)")
	bytesPerSecond := flags.Int("bytes-per-second", 512*1024, "bytes of output the container's log takes a second (both streams together)")
	agentPort := flags.Int("agent-port", 0, "serve the agent (agent.go) on this port, with the token in $"+agentTokenEnv+" (0: no agent)")
	forwardSignal := flags.Int("forward-signal", 0, fmt.Sprintf("the image's STOPSIGNAL by number, asked for before the command starts; a real-time one (%d-%d) is forwarded only when named here (0: none)", firstForwardableRealTime, lastRealTime))
	execOnly := flags.Bool("exec", false, "set no-new-privileges and become the command (for an image whose own init must be PID 1: no rate, no reaping of ours)")
	if err := flags.Parse(args); err != nil {
		return 2
	}
	if *linesPerSecond < 1 || *bytesPerSecond < 1 {
		fmt.Fprintln(os.Stderr, "svc-init: the rates must be at least 1")
		return 2
	}
	if *forwardSignal != 0 && !forwardable(syscall.Signal(*forwardSignal)) {
		fmt.Fprintf(os.Stderr, "svc-init: --forward-signal takes a signal svc-init forwards: a standard one a program can catch (not KILL, STOP, CHLD, PIPE, URG or PROF) or a real-time one from %d to %d\n", firstForwardableRealTime, lastRealTime)
		return 2
	}
	argv := flags.Args()
	if len(argv) == 0 {
		fmt.Fprintln(os.Stderr, "svc-init: no command to run: the image names neither an ENTRYPOINT nor a CMD")
		return 127
	}

	// Not dumpable: the tenant's processes run as the same user without capabilities, so they
	// cannot open /proc/1/fd/1 (the container's log) and write past the limit. The child is
	// dumpable again once it execs.
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, prSetDumpable, 0, 0); errno != 0 {
		fmt.Fprintf(os.Stderr, "svc-init: prctl(PR_SET_DUMPABLE): %v\n", errno)
		return 126
	}
	// As PID 1 orphans come to us anyway; elsewhere (a test) they come to us with this.
	_, _, _ = syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0)
	// No new privileges for anything the tenant's command runs (setuid and file capabilities do
	// not raise them), set here for the whole tree: one engine's driver asks its engine for it
	// too, but a Swarm service spec cannot (Engine 20.10), and there this is what sets it. It
	// cannot be unset, and every child and exec inherits it. It is a thread's, not the process's:
	// set on every thread of ours (a child is forked from whichever thread Go picks; threads made
	// later are cloned from these), which Go does only without cgo (this binary is built without).
	// Already set (an engine asked for no-new-privileges, as svcd's own Docker driver does): every
	// thread has it from the one the runtime started, and it cannot be unset, so the call on all
	// threads (a stop of each in turn, 1-2 ms of every start under gVisor) is not made.
	if alreadySet, _, _ := syscall.RawSyscall(syscall.SYS_PRCTL, prGetNoNewPrivs, 0, 0); alreadySet != 1 {
		if _, _, errno := syscall.AllThreadsSyscall(syscall.SYS_PRCTL, prSetNoNewPrivs, 1, 0); errno != 0 {
			fmt.Fprintf(os.Stderr, "svc-init: prctl(PR_SET_NO_NEW_PRIVS): %v\n", errno)
			return 126
		}
	}
	if *execOnly {
		// The image's init (s6-overlay's /init, systemd) runs only as PID 1: it takes our place,
		// with the flag (execve keeps it) and without svcd's agent token.
		_ = os.Unsetenv(agentTokenEnv)
		path, err := exec.LookPath(argv[0])
		if err == nil {
			err = syscall.Exec(path, argv, os.Environ())
		}
		fmt.Fprintf(os.Stderr, "svc-init: %v\n", err)
		return 127
	}

	// The signals a stop, the engine or an operator may send are forwarded (stopSignals and
	// laterSignals, and the image's STOPSIGNAL when svcd names it: a real-time one only so).
	// SIGPIPE is asked for too, only so that a write to a log whose reader went away fails instead
	// of killing us (supervise drops it). Those a stop sends (the image's, whichever it is), those
	// Go's default would end us with and the job-control ones are asked for before the command
	// starts; the rest once it has (below).
	signals := make(chan os.Signal, 64)
	signal.Notify(signals, stopSignals...)
	if *forwardSignal != 0 {
		signal.Notify(signals, syscall.Signal(*forwardSignal))
	}
	signal.Notify(signals, syscall.SIGPIPE)

	limiter := newLimiter(*linesPerSecond, *bytesPerSecond, time.Now)
	out := newOutput(os.Stdout, os.Stderr, limiter)
	stdoutR, stdoutW, err := os.Pipe()
	if err != nil {
		fmt.Fprintf(os.Stderr, "svc-init: %v\n", err)
		return 126
	}
	stderrR, stderrW, err := os.Pipe()
	if err != nil {
		fmt.Fprintf(os.Stderr, "svc-init: %v\n", err)
		return 126
	}

	// The agent's token is svcd's, not the command's: out of the environment before anything starts.
	agentToken := os.Getenv(agentTokenEnv)
	_ = os.Unsetenv(agentTokenEnv)
	// Its port is taken before the command starts, so that nothing of the tenant's holds it; an
	// agent that cannot listen is a container that does not start (svcd says why).
	var agentListener net.Listener
	if *agentPort > 0 && agentToken != "" {
		ln, err := listenAgent(*agentPort)
		if err != nil {
			fmt.Fprintf(os.Stderr, "svc-init: the agent cannot listen: %v\n", err)
			return 126
		}
		agentListener = ln
	}

	child := commandOf(argv)
	child.Stdin = os.Stdin
	child.Stdout = stdoutW
	child.Stderr = stderrW
	if err := child.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "svc-init: cannot run %q: %v\n", argv[0], err)
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			return 127
		}
		return 126
	}
	// The child holds the write ends now; ours closed, the pipes end when its last writer goes.
	stdoutW.Close()
	stderrW.Close()
	if commandStarted != nil {
		commandStarted()
	}
	// While the command starts (Start returned once its exec succeeded): each signal asked for is
	// a round trip to a thread of Go's, and under gVisor these nine took about 3 ms before the
	// command began (README, Performance).
	signal.Notify(signals, laterSignals...)

	copied := make(chan struct{}, 2)
	go func() { out.copy(stdoutR, false); copied <- struct{}{} }()
	go func() { out.copy(stderrR, true); copied <- struct{}{} }()

	reaper := newReaper()
	exited := reaper.wait(child.Process.Pid)
	go reaper.loop()
	if agentListener != nil {
		serveAgent(agentListener, agentToken, reaper)
	}
	code := supervise(child.Process.Pid, signals, exited)

	// Whatever the child printed last is still in the pipes: read it, for a moment at most.
	deadline := time.Now().Add(drainAfterExit)
	_ = stdoutR.SetReadDeadline(deadline)
	_ = stderrR.SetReadDeadline(deadline)
	for i := 0; i < 2; i++ {
		<-copied
	}
	out.flushNotice()
	return code
}

// The standard signals a program can catch, passed on to the command: the image's STOPSIGNAL
// (SIGTERM unless it names another: nginx's SIGQUIT, Apache's SIGWINCH) and what an operator or
// the engine sends. Not SIGCHLD (reaping is a loop of its own, since a full channel drops signals
// and a tenant can send many), SIGPIPE (ours) or SIGURG (Go's own preemption, many a second);
// SIGPROF is Go's profiler's whatever a program asks. The faults (SIGSEGV and the like) are asked
// for too: Go takes a real fault of its own code for itself anyway, and one sent with kill would
// otherwise end svc-init with a stack dump. Not the real-time signals: asking Go for a signal it
// delivers on its own (the 25 here, and the 30 real-time ones from 35) is a round trip to a thread
// of its own, and under gVisor, within a service's CPU quota, those 30 more cost each start about
// 20 ms of CPU and some 40 ms before the command listened (README, Resource safety). A real-time
// one a stop sends is asked for alone (--forward-signal, from the image's STOPSIGNAL).
//
// stopSignals are asked for before the command starts: the engine's default stop (SIGTERM), what
// an operator sends to end a program, those Go's default would end svc-init with (the faults,
// SIGABRT, SIGSYS), and the job-control ones, which Go leaves to the kernel and gVisor's does not
// keep from PID 1 (a Linux kernel sends PID 1 none it has no handler for). laterSignals once the
// command has started: until one is asked for Go ignores it, so one that comes first, in the
// command's first milliseconds, is dropped, as any is from svc-init's own start to its first
// request to Go; an image whose STOPSIGNAL is one of them (haproxy's SIGUSR1) has it asked for
// before the command starts too (--forward-signal), so that no stop is lost.
var stopSignals = []os.Signal{
	syscall.SIGTERM, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGHUP, syscall.SIGWINCH, syscall.SIGABRT,
	syscall.SIGILL, syscall.SIGTRAP, syscall.SIGBUS, syscall.SIGFPE, syscall.SIGSEGV, syscall.SIGSTKFLT,
	syscall.SIGSYS, syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU,
}

var laterSignals = []os.Signal{
	syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGALRM, syscall.SIGCONT, syscall.SIGXCPU, syscall.SIGXFSZ,
	syscall.SIGVTALRM, syscall.SIGIO, syscall.SIGPWR,
}

// forwardable is whether svc-init forwards sig: one of the standard signals above, or a real-time
// one Go delivers.
func forwardable(sig syscall.Signal) bool {
	if sig >= firstForwardableRealTime && sig <= lastRealTime {
		return true
	}
	for _, s := range append(append([]os.Signal{}, stopSignals...), laterSignals...) {
		if s == sig {
			return true
		}
	}
	return false
}

// The real-time signals --forward-signal takes, besides the standard ones above: SIGRTMIN+1 (35)
// to SIGRTMAX (64). Go installs no handler for 32 and 34 in a program without cgo (the C
// library's own, once), so it can deliver neither, and 33 is how it runs a syscall on all its
// threads (svc-init's no-new-privileges).
const (
	firstForwardableRealTime = 35
	lastRealTime             = 64
)

// commandOf is argv to run as given; one found through a relative entry of PATH ("." or empty)
// runs too, as the engine's runtime would run it.
func commandOf(argv []string) *exec.Cmd {
	cmd := exec.Command(argv[0], argv[1:]...)
	if errors.Is(cmd.Err, exec.ErrDot) {
		cmd.Err = nil
	}
	return cmd
}

// supervise forwards signals to the child until it has exited, and answers its exit code.
func supervise(pid int, signals <-chan os.Signal, exited <-chan int) int {
	for {
		select {
		case code := <-exited:
			return code
		case sig := <-signals:
			s, ok := sig.(syscall.Signal)
			if !ok {
				continue
			}
			// SIGPIPE: the log's reader went away, and our write reports it.
			if s != syscall.SIGPIPE {
				_ = syscall.Kill(pid, s)
			}
		}
	}
}

// output writes what the limiter admits to the container's two streams, and the notice of what
// it dropped to stderr.
type output struct {
	stdout, stderr io.Writer
	limiter        *limiter
	// Both copies write to stderr (the notice), and a notice must not land inside a line.
	stderrMu sync.Mutex
}

func newOutput(stdout, stderr io.Writer, l *limiter) *output {
	return &output{stdout: stdout, stderr: stderr, limiter: l}
}

// copy reads one stream of the child until it ends (or the drain deadline passes).
func (o *output) copy(r io.Reader, isStderr bool) {
	buf := make([]byte, 32*1024)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			o.write(buf[:n], isStderr)
		}
		if err != nil {
			return
		}
	}
}

// write passes the lines of one read that the limiter admits, in one write to their stream. A
// read's last piece without a newline counts as a line of its own: output is passed as soon as it
// is read, never held back waiting for the rest of a line.
func (o *output) write(chunk []byte, isStderr bool) {
	kept := make([]byte, 0, len(chunk))
	for len(chunk) > 0 {
		end := len(chunk)
		for i, b := range chunk {
			if b == '\n' {
				end = i + 1
				break
			}
		}
		line := chunk[:end]
		chunk = chunk[end:]
		admitted, notice := o.limiter.admit(len(line))
		if notice != "" {
			o.writeTo(kept, isStderr)
			kept = kept[:0]
			o.writeTo([]byte(notice), true)
		}
		if admitted {
			kept = append(kept, line...)
		}
	}
	o.writeTo(kept, isStderr)
}

func (o *output) writeTo(b []byte, isStderr bool) {
	if len(b) == 0 {
		return
	}
	if isStderr {
		o.stderrMu.Lock()
		defer o.stderrMu.Unlock()
		_, _ = o.stderr.Write(b)
		return
	}
	_, _ = o.stdout.Write(b)
}

// flushNotice says what was dropped since the last notice, at the end.
func (o *output) flushNotice() {
	if notice := o.limiter.pendingNotice(); notice != "" {
		o.writeTo([]byte(notice), true)
	}
}
