package main

// GET /terminal: an interactive terminal (svcd's WebSocket terminal, GET
// /v1/environments/{id}/terminal). The request upgrades the connection (Upgrade: svc-terminal);
// from then on it carries frames both ways, each a type byte, a big-endian uint32 length and the
// payload:
//
//   svcd -> agent   0 input (bytes for the terminal)   1 resize (uint16 cols, uint16 rows)
//   agent -> svcd   0 output (bytes from the terminal)  2 exit (int32 exit code), then it closes
//
// The command (argv in the query, default a login shell) runs in a new session on a
// pseudo-terminal, in work_dir, with TERM set. The connection closing hangs it up: SIGHUP to its
// process group, SIGKILL a moment later, as a terminal emulator closing does.

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"
	"unsafe"
)

const (
	frameInput  = 0
	frameResize = 1
	frameExit   = 2
	// Frames svcd sends are keystrokes and pastes; a larger one is not svcd's.
	maxFrameBytes = 64 << 10
	// After the hang-up, the command gets this long to go before it is killed.
	hangupGrace = 2 * time.Second
	// svcd not taking output (or the terminal not taking input) for this long is a terminal gone.
	stalledFor = 60 * time.Second
)

// Linux's pseudo-terminal ioctls (asm-generic/ioctls.h); the syscall package has no names for them.
const (
	ioctlTIOCGPTN   = 0x80045430
	ioctlTIOCSPTLCK = 0x40045431
	ioctlTIOCSWINSZ = 0x5414
)

type winsize struct{ rows, cols, x, y uint16 }

func serveTerminal(w http.ResponseWriter, r *http.Request, reaper *reaper) {
	if r.Header.Get("Upgrade") != "svc-terminal" {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "a terminal is an upgrade to svc-terminal"})
		return
	}
	query := r.URL.Query()
	argv := query["arg"]
	workDir := query.Get("work_dir")
	cols, errC := strconv.ParseUint(query.Get("cols"), 10, 16)
	rows, errR := strconv.ParseUint(query.Get("rows"), 10, 16)
	if errC != nil || errR != nil || cols == 0 || rows == 0 || workDir == "" || workDir[0] != '/' {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "cols, rows and an absolute work_dir are required"})
		return
	}
	if !usableDir(workDir) {
		writeJSON(w, http.StatusUnprocessableEntity, map[string]string{"error": workDirError{workDir}.Error()})
		return
	}
	if len(argv) == 0 {
		argv = []string{loginShell(), "-l"}
	}
	master, slave, err := openPTY()
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, map[string]string{"error": "no pseudo-terminal: " + err.Error()})
		return
	}
	defer master.Close()
	_ = resize(master, uint16(cols), uint16(rows))

	cmd := commandOf(argv)
	cmd.Dir = workDir
	cmd.Env = append(os.Environ(), "TERM=xterm-256color")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	// A session of its own with the terminal as its controlling one: job control, ^C and the
	// hang-up reach its process group.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	exited, err := reaper.start(cmd)
	slave.Close()
	if err != nil {
		writeJSON(w, http.StatusUnprocessableEntity, map[string]string{"error": fmt.Sprintf("cannot run %q: %v", argv[0], err)})
		return
	}
	pgid := cmd.Process.Pid

	hijacker, ok := w.(http.Hijacker)
	if !ok {
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		return
	}
	conn, buffered, err := hijacker.Hijack()
	if err != nil {
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		return
	}
	defer conn.Close()
	// Whatever deadlines the server set apply no more: a terminal is open as long as it is used.
	_ = conn.SetDeadline(time.Time{})
	_, _ = conn.Write([]byte("HTTP/1.1 101 Switching Protocols\r\nUpgrade: svc-terminal\r\nConnection: Upgrade\r\n\r\n"))

	var writeMu sync.Mutex
	send := func(kind byte, payload []byte) error {
		writeMu.Lock()
		defer writeMu.Unlock()
		header := make([]byte, 5)
		header[0] = kind
		binary.BigEndian.PutUint32(header[1:], uint32(len(payload)))
		_ = conn.SetWriteDeadline(time.Now().Add(stalledFor))
		if _, err := conn.Write(append(header, payload...)); err != nil {
			return err
		}
		return nil
	}

	// Input: frames from svcd to the terminal, until the connection ends (then the hang-up).
	gone := make(chan struct{})
	go func() {
		defer close(gone)
		readFrames(buffered.Reader, func(kind byte, payload []byte) error {
			switch kind {
			case frameInput:
				// A program that does not read its input for this long with the terminal's buffer
				// full: the terminal is given up (the hang-up below), not held.
				_ = master.SetWriteDeadline(time.Now().Add(stalledFor))
				_, err := master.Write(payload)
				return err
			case frameResize:
				if len(payload) == 4 {
					_ = resize(master, binary.BigEndian.Uint16(payload), binary.BigEndian.Uint16(payload[2:]))
				}
			}
			return nil
		})
	}()
	// Output: what the terminal prints, until it has no process left (EIO on Linux).
	printed := make(chan struct{})
	go func() {
		defer close(printed)
		buf := make([]byte, 32<<10)
		for {
			n, err := master.Read(buf)
			if n > 0 && send(frameOutput, buf[:n]) != nil {
				return
			}
			if err != nil {
				return
			}
		}
	}()

	var code int
	ended := false
	select {
	case code = <-exited:
		ended = true
	case <-printed:
		// The output ended: the terminal has no process left (its exit follows at once), or
		// svcd stopped taking output (a failed write: gone).
		select {
		case code = <-exited:
			ended = true
		case <-time.After(time.Second):
		}
	case <-gone:
	}
	if !ended {
		// svcd (the user) went: hang up, as closing a terminal window does.
		_ = syscall.Kill(-pgid, syscall.SIGHUP)
		select {
		case <-exited:
		case <-time.After(hangupGrace):
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
		}
		return
	}
	// The command ended: what it printed last is read (briefly: a process it left behind may hold the terminal).
	_ = master.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	<-printed
	exit := make([]byte, 4)
	binary.BigEndian.PutUint32(exit, uint32(int32(code)))
	_ = send(frameExit, exit)
}

// The frame type of output (agent -> svcd); input shares its number in the other direction.
const frameOutput = 0

// readFrames hands each frame of r to handle until r ends, a frame is malformed, or handle fails.
func readFrames(r *bufio.Reader, handle func(kind byte, payload []byte) error) {
	header := make([]byte, 5)
	for {
		if _, err := io.ReadFull(r, header); err != nil {
			return
		}
		size := binary.BigEndian.Uint32(header[1:])
		if size > maxFrameBytes {
			return
		}
		payload := make([]byte, size)
		if _, err := io.ReadFull(r, payload); err != nil {
			return
		}
		if handle(header[0], payload) != nil {
			return
		}
	}
}

// loginShell is bash where the image has it, sh otherwise.
func loginShell() string {
	if _, err := os.Stat("/bin/bash"); err == nil {
		return "/bin/bash"
	}
	return "/bin/sh"
}

// openPTY opens a new pseudo-terminal pair: the master for the agent, the slave for the command.
func openPTY() (*os.File, *os.File, error) {
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, nil, err
	}
	var number uint32
	unlock := int32(0)
	if err := ioctl(master, ioctlTIOCSPTLCK, uintptr(unsafe.Pointer(&unlock))); err != nil {
		master.Close()
		return nil, nil, err
	}
	if err := ioctl(master, ioctlTIOCGPTN, uintptr(unsafe.Pointer(&number))); err != nil {
		master.Close()
		return nil, nil, err
	}
	slave, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", number), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		master.Close()
		return nil, nil, err
	}
	return master, slave, nil
}

func resize(master *os.File, cols, rows uint16) error {
	size := winsize{rows: rows, cols: cols}
	return ioctl(master, ioctlTIOCSWINSZ, uintptr(unsafe.Pointer(&size)))
}

// ioctl on f without taking it out of the runtime's poller (File.Fd would make it blocking, and
// its reads would then ignore deadlines).
func ioctl(f *os.File, request, arg uintptr) error {
	raw, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var errno syscall.Errno
	if err := raw.Control(func(fd uintptr) {
		_, _, errno = syscall.Syscall(syscall.SYS_IOCTL, fd, request, arg)
	}); err != nil {
		return err
	}
	if errno != 0 {
		return errno
	}
	return nil
}
