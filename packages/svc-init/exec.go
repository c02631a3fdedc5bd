package main

// POST /exec: one command, run to its end or its timeout. The same run serves two answers: the
// whole outcome as one JSON object (the spec's exec), or, with "stream": true, a line of JSON per
// piece of output as it comes and a last line with how it ended (svcd's streaming exec).

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// Output held open past the deadline by processes the command left behind is abandoned this long after.
const strayOutputGrace = 5 * time.Second

// A request body is a command line and its stdin, not bulk data (svcd caps stdin lower).
const maxRequestBytes = 2 << 20

// How long a streamed answer may wait for its reader past the command's deadline: a reader that
// stopped reading holds the command's output, and the command blocks on its next write until the
// timeout kills it; then the answer is given up.
const streamWriteGrace = strayOutputGrace + 10*time.Second

type execRequest struct {
	Argv           []string          `json:"argv"`
	WorkDir        string            `json:"work_dir"`
	TimeoutSeconds int               `json:"timeout_seconds"`
	MaxOutputBytes int               `json:"max_output_bytes"`
	Env            map[string]string `json:"env"`
	// Given to the command's stdin, then closed (base64 in JSON, Go's encoding of []byte). Without
	// it stdin is /dev/null, as on the engine path.
	Stdin  []byte `json:"stdin"`
	Stream bool   `json:"stream"`
	// Names the command for POST /signal while it runs (svcd's streamed execs; signal.go).
	ID string `json:"id"`
}

// How a command ended.
type execEnd struct {
	ExitCode   int   `json:"exit_code"`
	Truncated  bool  `json:"truncated"`
	TimedOut   bool  `json:"timed_out"`
	DurationMs int64 `json:"duration_ms"`
}

// Output goes as base64 (Go's encoding of []byte): JSON would escape a byte of output into as
// many as six.
type execResponse struct {
	execEnd
	Stdout []byte `json:"stdout"`
	Stderr []byte `json:"stderr"`
}

// One line of a streamed answer: {"type":"stdout"|"stderr","data":base64}, and last
// {"type":"exit",...execEnd}.
type streamEvent struct {
	Type string `json:"type"`
	Data []byte `json:"data,omitempty"`
	*execEnd
}

// A work_dir the command cannot start in: the caller's error (svcd answers 400, as on the engine path).
type workDirError struct{ dir string }

func (e workDirError) Error() string {
	return "chdir to cwd: " + e.dir + " is not a directory the command can enter"
}

func (a *agent) serveExec(w http.ResponseWriter, r *http.Request) {
	var req execRequest
	if err := json.NewDecoder(io.LimitReader(r.Body, maxRequestBytes)).Decode(&req); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "the request is not an exec request: " + err.Error()})
		return
	}
	if len(req.Argv) == 0 || req.TimeoutSeconds < 1 || req.MaxOutputBytes < 0 || !strings.HasPrefix(req.WorkDir, "/") {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "argv, an absolute work_dir and a timeout are required"})
		return
	}
	if req.ID != "" && !validCommandID(req.ID) {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "id: at most 64 lowercase letters and digits"})
		return
	}
	if req.ID != "" {
		if !a.reserve(req.ID) {
			writeJSON(w, http.StatusConflict, map[string]string{"error": "another command runs under id " + req.ID})
			return
		}
		defer a.release(req.ID)
	}
	for k := range req.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.ContainsRune(req.Env[k], 0) {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": fmt.Sprintf("env: %q is not a variable a process can have", k)})
			return
		}
	}
	if !req.Stream {
		var out execResponse
		end, err := a.run(req, func(stdout bool, data []byte) error {
			if stdout {
				out.Stdout = append(out.Stdout, data...)
			} else {
				out.Stderr = append(out.Stderr, data...)
			}
			return nil
		})
		if err != nil {
			// The engine path's wording ("chdir", "cwd"), so that svcd maps both alike (a 400 of its own).
			writeJSON(w, http.StatusUnprocessableEntity, map[string]string{"error": err.Error()})
			return
		}
		out.execEnd = end
		writeJSON(w, http.StatusOK, out)
		return
	}

	// Streamed: a work_dir it cannot enter is a 422 of its own; once the status is out (at once,
	// so that svcd knows the command runs), whatever happens is said in the stream.
	if !usableDir(req.WorkDir) {
		writeJSON(w, http.StatusUnprocessableEntity, map[string]string{"error": workDirError{req.WorkDir}.Error()})
		return
	}
	conn := connOf(r)
	deadline := time.Now().Add(time.Duration(req.TimeoutSeconds)*time.Second + streamWriteGrace)
	flusher, _ := w.(http.Flusher)
	encoder := json.NewEncoder(w)
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	if flusher != nil {
		flusher.Flush()
	}
	send := func(event streamEvent) error {
		if conn != nil {
			_ = conn.SetWriteDeadline(deadline)
		}
		if err := encoder.Encode(event); err != nil {
			return err
		}
		if flusher != nil {
			flusher.Flush()
		}
		return nil
	}
	end, err := a.run(req, func(stdout bool, data []byte) error {
		kind := "stderr"
		if stdout {
			kind = "stdout"
		}
		return send(streamEvent{Type: kind, Data: data})
	})
	if err != nil {
		// The directory went between the check and the start: as a shell says it.
		_ = send(streamEvent{Type: "stderr", Data: []byte(err.Error() + "\n")})
		end = execEnd{ExitCode: 126}
	}
	_ = send(streamEvent{Type: "exit", execEnd: &end})
}

// usableDir: a directory the command can enter.
func usableDir(dir string) bool {
	st, err := os.Stat(dir)
	return err == nil && st.IsDir() && syscall.Access(dir, 1 /* X_OK */) == nil
}

// A piece of output read from one of the command's pipes; end: that pipe is done (cutOff: at its
// read deadline, not at its end).
type outputPiece struct {
	stdout bool
	data   []byte
	end    bool
	cutOff bool
}

// run starts req's command in its own process group and hands its output to emit as it comes
// (each stream up to req.MaxOutputBytes; the rest is read and dropped), kills the group at the
// timeout, and answers how it ended; a workDirError when it could not start in work_dir. emit is
// called from this goroutine only. When emit fails (its reader went away), the command is killed:
// nobody is left to see what it does.
func (a *agent) run(req execRequest, emit func(stdout bool, data []byte) error) (execEnd, error) {
	if !usableDir(req.WorkDir) {
		return execEnd{}, workDirError{req.WorkDir}
	}
	started := time.Now()
	deadline := started.Add(time.Duration(req.TimeoutSeconds) * time.Second)
	failed := func(err error) (execEnd, error) {
		end := failedStart(err)
		_ = emit(false, []byte(err.Error()+"\n"))
		end.DurationMs = time.Since(started).Milliseconds()
		return end, nil
	}
	var files []*os.File
	closeAll := func() {
		for _, f := range files {
			f.Close()
		}
	}
	pipe := func() (*os.File, *os.File, error) {
		r, w, err := os.Pipe()
		if err == nil {
			files = append(files, r, w)
		}
		return r, w, err
	}
	stdoutR, stdoutW, err := pipe()
	if err != nil {
		return failed(err)
	}
	stderrR, stderrW, err := pipe()
	if err != nil {
		closeAll()
		return failed(err)
	}
	var stdinR, stdinW *os.File
	if req.Stdin != nil {
		if stdinR, stdinW, err = pipe(); err != nil {
			closeAll()
			return failed(err)
		}
	}
	defer closeAll()
	command := func(argv []string) *exec.Cmd {
		cmd := commandOf(argv)
		cmd.Dir = req.WorkDir
		cmd.Stdout = stdoutW
		cmd.Stderr = stderrW
		if stdinR != nil {
			cmd.Stdin = stdinR
		}
		if len(req.Env) > 0 {
			cmd.Env = os.Environ()
			for k, v := range req.Env {
				cmd.Env = append(cmd.Env, k+"="+v)
			}
		}
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
	// The child holds its ends now; ours closed, each pipe ends when its last writer goes.
	stdoutW.Close()
	stderrW.Close()
	if stdinR != nil {
		stdinR.Close()
	}
	if startErr != nil {
		// The directory went (or changed) since it was checked: the child could not enter it.
		if !usableDir(req.WorkDir) {
			return execEnd{}, workDirError{req.WorkDir}
		}
		return failed(startErr)
	}
	pgid := cmd.Process.Pid
	a.started(req.ID, pgid)
	if stdinW != nil {
		// A command that never reads its stdin is not waited for: the write fails once it is gone.
		go func() {
			_, _ = stdinW.Write(req.Stdin)
			stdinW.Close()
		}()
	}

	pieces := make(chan outputPiece)
	go readPipe(stdoutR, true, pieces)
	go readPipe(stderrR, false, pieces)
	killed := make(chan struct{})
	// Set before the kill: the loop below can see the exit and the pipes' ends, and stop, before
	// it reads from killed; the outcome still says the timeout ended it.
	var deadlinePassed atomic.Bool
	killTimer := time.AfterFunc(time.Until(deadline), func() {
		deadlinePassed.Store(true)
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		close(killed)
	})
	defer killTimer.Stop()

	end := execEnd{}
	sent := map[bool]int{}
	var emitErr error
	var giveUp <-chan time.Time
	openPipes, exitSeen := 2, false
	// What the command printed is read to its end, unless processes it left behind hold the pipes
	// open: then for strayOutputGrace past its deadline (or past its kill).
	readUntil := func(t time.Time) {
		_ = stdoutR.SetReadDeadline(t)
		_ = stderrR.SetReadDeadline(t)
	}
	for openPipes > 0 || !exitSeen {
		select {
		case p := <-pieces:
			if p.end {
				openPipes--
				// Output held open past the deadline was given up on: the deadline passed (as the engine path says).
				end.TimedOut = end.TimedOut || p.cutOff
				continue
			}
			data := p.data
			if room := req.MaxOutputBytes - sent[p.stdout]; len(data) > room {
				end.Truncated = true
				data = data[:room]
			}
			if len(data) > 0 && emitErr == nil {
				sent[p.stdout] += len(data)
				if emitErr = emit(p.stdout, data); emitErr != nil {
					_ = syscall.Kill(-pgid, syscall.SIGKILL)
				}
			}
		case code := <-exited:
			end.ExitCode, exitSeen, exited = code, true, nil
			if killTimer.Stop() {
				readUntil(deadline.Add(strayOutputGrace))
			}
		case <-killed:
			// The timer fired before the exit was seen (it is stopped once it is): the timeout
			// killed it, whichever of the two news came first.
			killed = nil
			end.TimedOut = true
			if !exitSeen {
				giveUp = time.After(strayOutputGrace)
			}
			readUntil(time.Now().Add(strayOutputGrace))
		case <-giveUp:
			giveUp = nil
			if !exitSeen {
				// Its exit was not seen (dropped among a flood of others): it was killed all the same.
				a.reaper.forget(pgid)
				end.ExitCode, exitSeen, exited = 128+int(syscall.SIGKILL), true, nil
			}
		}
	}
	end.TimedOut = end.TimedOut || deadlinePassed.Load()
	end.DurationMs = time.Since(started).Milliseconds()
	return end, nil
}

// readPipe passes what r gives on as pieces, then its end.
func readPipe(r *os.File, stdout bool, pieces chan<- outputPiece) {
	buf := make([]byte, 32*1024)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			pieces <- outputPiece{stdout: stdout, data: append([]byte(nil), buf[:n]...)}
		}
		if err != nil {
			pieces <- outputPiece{stdout: stdout, end: true, cutOff: errors.Is(err, os.ErrDeadlineExceeded)}
			return
		}
	}
}

// failedStart answers as a shell would: 127 for a command that does not exist, 126 otherwise.
func failedStart(err error) execEnd {
	code := 126
	if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
		code = 127
	}
	return execEnd{ExitCode: code}
}
