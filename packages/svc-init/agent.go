package main

// The agent: svcd's way into an environment without the engine's exec API. An engine exec starts
// a runtime process per command (under gVisor, tens of milliseconds before the command runs);
// here svc-init, already PID 1 of the environment, starts the command itself, as E2B's envd and
// Daytona's daemon do. It listens on the container's own address, where svcd reaches it, and
// answers only a request that carries the environment's token (svcd keeps it sealed; other
// containers of the tenant, on the same network, do not have it).
//
// POST /exec {argv, work_dir, timeout_seconds, max_output_bytes} runs argv as given (no shell) in
// its own process group, kills the group at the timeout (exit code 137, timed_out), keeps at most
// max_output_bytes of each stream (truncated), and answers {exit_code, stdout, stderr, truncated,
// timed_out, duration_ms}: the engine path's contract (environments.ts). GET /health answers 200.

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The variable svcd passes the token in; it is taken out of the environment before anything starts.
const agentTokenEnv = "SVC_AGENT_TOKEN"

// Output held open past the deadline by processes the command left behind is abandoned this long after.
const strayOutputGrace = 5 * time.Second

// A request body is a command line, not data.
const maxRequestBytes = 1 << 20

type execRequest struct {
	Argv           []string `json:"argv"`
	WorkDir        string   `json:"work_dir"`
	TimeoutSeconds int      `json:"timeout_seconds"`
	MaxOutputBytes int      `json:"max_output_bytes"`
}

// Output goes as base64 (Go's encoding of []byte): JSON would escape a byte of output into as
// many as six, and the answer is held whole on both sides.
type execResponse struct {
	ExitCode   int    `json:"exit_code"`
	Stdout     []byte `json:"stdout"`
	Stderr     []byte `json:"stderr"`
	Truncated  bool   `json:"truncated"`
	TimedOut   bool   `json:"timed_out"`
	DurationMs int64  `json:"duration_ms"`
}

// A work_dir the command cannot start in: the caller's error (svcd answers 400, as on the engine path).
type workDirError struct{ dir string }

func (e workDirError) Error() string {
	return "chdir to cwd: " + e.dir + " is not a directory the command can enter"
}

// Connections served at once: svcd's execs of one environment are few (the tenant's exec slots),
// and anything else on the tenant's network gets no more than this.
const maxAgentConnections = 32

type agent struct {
	token  []byte
	reaper *reaper
}

// listenAgent takes the agent's port on every address of the container, before the image's
// command starts (so that nothing of the tenant's can take it first).
func listenAgent(port int) (net.Listener, error) {
	ln, err := net.Listen("tcp", fmt.Sprintf(":%d", port))
	if err != nil {
		return nil, err
	}
	return &limitedListener{Listener: ln, slots: make(chan struct{}, maxAgentConnections)}, nil
}

// serveAgent answers on ln from now on.
func serveAgent(ln net.Listener, token string, r *reaper) {
	a := &agent{token: []byte(token), reaper: r}
	server := &http.Server{
		Handler:           a,
		ReadHeaderTimeout: 10 * time.Second,
		// A request is a command line; a connection left idle (keep-alive) goes.
		ReadTimeout:    30 * time.Second,
		IdleTimeout:    30 * time.Second,
		MaxHeaderBytes: 16 << 10,
	}
	go func() { _ = server.Serve(ln) }()
}

// limitedListener accepts at most cap(slots) connections at once; the next waits for one to close.
type limitedListener struct {
	net.Listener
	slots chan struct{}
}

func (l *limitedListener) Accept() (net.Conn, error) {
	l.slots <- struct{}{}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.slots
		return nil, err
	}
	return &slotConn{Conn: c, release: func() { <-l.slots }}, nil
}

type slotConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *slotConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

func (a *agent) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	given := []byte(strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "))
	if len(a.token) == 0 || subtle.ConstantTimeCompare(given, a.token) != 1 {
		writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "unauthorized"})
		return
	}
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/health":
		writeJSON(w, http.StatusOK, map[string]bool{"ok": true})
	case r.Method == http.MethodPost && r.URL.Path == "/exec":
		var req execRequest
		if err := json.NewDecoder(io.LimitReader(r.Body, maxRequestBytes)).Decode(&req); err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "the request is not an exec request: " + err.Error()})
			return
		}
		if len(req.Argv) == 0 || req.TimeoutSeconds < 1 || req.MaxOutputBytes < 0 || !strings.HasPrefix(req.WorkDir, "/") {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "argv, an absolute work_dir and a timeout are required"})
			return
		}
		out, err := a.exec(req)
		if err != nil {
			// The engine path's wording ("chdir", "cwd"), so that svcd maps both alike (a 400 of its own).
			writeJSON(w, http.StatusUnprocessableEntity, map[string]string{"error": err.Error()})
			return
		}
		writeJSON(w, http.StatusOK, out)
	default:
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "not found"})
	}
}

func writeJSON(w http.ResponseWriter, status int, body interface{}) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
}

// usableDir: a directory the command can enter.
func usableDir(dir string) bool {
	st, err := os.Stat(dir)
	return err == nil && st.IsDir() && syscall.Access(dir, 1 /* X_OK */) == nil
}

// exec runs one command to its end (or its timeout) and answers what it printed; a workDirError
// when it could not start in work_dir.
func (a *agent) exec(req execRequest) (execResponse, error) {
	if !usableDir(req.WorkDir) {
		return execResponse{}, workDirError{req.WorkDir}
	}
	started := time.Now()
	deadline := started.Add(time.Duration(req.TimeoutSeconds) * time.Second)
	stdoutR, stdoutW, err := os.Pipe()
	if err != nil {
		return failedStart(started, err), nil
	}
	stderrR, stderrW, err := os.Pipe()
	if err != nil {
		stdoutR.Close()
		stdoutW.Close()
		return failedStart(started, err), nil
	}
	command := func(argv []string) *exec.Cmd {
		cmd := commandOf(argv)
		cmd.Dir = req.WorkDir
		cmd.Stdout = stdoutW
		cmd.Stderr = stderrW
		// Its own process group: the timeout kills the command and what it started, as coreutils'
		// timeout does on the engine path.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		return cmd
	}
	cmd := command(req.Argv)
	exited, startErr := a.reaper.start(cmd)
	if errors.Is(startErr, syscall.ENOEXEC) {
		// A script without a #! line: run by /bin/sh, as execvp (the engine path's timeout) does.
		cmd = command(append([]string{"/bin/sh", cmd.Path}, req.Argv[1:]...))
		exited, startErr = a.reaper.start(cmd)
	}
	stdoutW.Close()
	stderrW.Close()
	if startErr != nil {
		stdoutR.Close()
		stderrR.Close()
		// The directory went (or changed) since it was checked: the child could not enter it.
		if !usableDir(req.WorkDir) {
			return execResponse{}, workDirError{req.WorkDir}
		}
		return failedStart(started, startErr), nil
	}

	out := capture(stdoutR, req.MaxOutputBytes)
	errOut := capture(stderrR, req.MaxOutputBytes)
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	timedOut := false
	var code int
	select {
	case code = <-exited:
	case <-timer.C:
		timedOut = true
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		select {
		case code = <-exited:
		case <-time.After(strayOutputGrace):
			// Its exit was not seen (dropped among a flood of others): it was killed all the same.
			a.reaper.forget(cmd.Process.Pid)
			code = 128 + int(syscall.SIGKILL)
		}
	}
	// What it printed is read to its end, unless processes it left behind hold the pipes open.
	grace := deadline.Add(strayOutputGrace)
	if timedOut {
		grace = time.Now().Add(strayOutputGrace)
	}
	_ = stdoutR.SetReadDeadline(grace)
	_ = stderrR.SetReadDeadline(grace)
	o, e := <-out, <-errOut
	stdoutR.Close()
	stderrR.Close()
	return execResponse{
		ExitCode:  code,
		Stdout:    o.data,
		Stderr:    e.data,
		Truncated: o.truncated || e.truncated,
		// Output held open past the deadline was given up on: the deadline passed (as the engine path says).
		TimedOut:   timedOut || o.cutOff || e.cutOff,
		DurationMs: time.Since(started).Milliseconds(),
	}, nil
}

// failedStart answers as a shell would: 127 for a command that does not exist, 126 otherwise.
func failedStart(started time.Time, err error) execResponse {
	code := 126
	if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
		code = 127
	}
	return execResponse{ExitCode: code, Stderr: []byte(err.Error() + "\n"), DurationMs: time.Since(started).Milliseconds()}
}

type captured struct {
	data      []byte
	truncated bool
	// Reading ended at the read deadline, not at the end of the output.
	cutOff bool
}

// capture reads r to its end (or its read deadline), keeping at most max bytes.
func capture(r io.Reader, max int) <-chan captured {
	done := make(chan captured, 1)
	go func() {
		var c captured
		buf := make([]byte, 32*1024)
		for {
			n, err := r.Read(buf)
			if n > 0 {
				room := max - len(c.data)
				if n > room {
					c.truncated = true
					n = room
				}
				if n > 0 {
					c.data = append(c.data, buf[:n]...)
				}
			}
			if err != nil {
				c.cutOff = errors.Is(err, os.ErrDeadlineExceeded)
				done <- c
				return
			}
		}
	}()
	return done
}

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
