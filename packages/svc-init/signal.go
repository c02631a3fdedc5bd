package main

// POST /signal {"id", "signal"}: a signal to the process group of a command that runs under id
// (exec.go names it; it can be signalled from its start until its first process is reaped). svcd names its streamed
// execs, so that a client can interrupt one without leaving its stream (which kills it).

import (
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"syscall"
)

// The signals a client may send: those a program is expected to handle or die of. SIGSTOP and
// SIGCONT are left out (a stopped command holds its exec slot until its timeout, as any other).
var signalsByName = map[string]syscall.Signal{
	"SIGHUP":  syscall.SIGHUP,
	"SIGINT":  syscall.SIGINT,
	"SIGQUIT": syscall.SIGQUIT,
	"SIGKILL": syscall.SIGKILL,
	"SIGUSR1": syscall.SIGUSR1,
	"SIGUSR2": syscall.SIGUSR2,
	"SIGTERM": syscall.SIGTERM,
}

var commandIDPattern = regexp.MustCompile(`^[a-z0-9]{1,64}$`)

func validCommandID(id string) bool { return commandIDPattern.MatchString(id) }

// The ids of commands: reserved when the request comes (0: not started yet), the process group
// once it runs, released when the answer is done. Whether the group's leader still runs is the
// reaper's to say (reaper.signalGroup), not this map's.
func (a *agent) reserve(id string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, taken := a.running[id]; taken {
		return false
	}
	a.running[id] = 0
	return true
}

func (a *agent) started(id string, pgid int) {
	if id == "" {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, reserved := a.running[id]; reserved {
		a.running[id] = pgid
	}
}

func (a *agent) release(id string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.running, id)
}

type signalRequest struct {
	ID     string `json:"id"`
	Signal string `json:"signal"`
}

func (a *agent) serveSignal(w http.ResponseWriter, r *http.Request) {
	var req signalRequest
	if err := json.NewDecoder(io.LimitReader(r.Body, 4096)).Decode(&req); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "the request is not a signal request: " + err.Error()})
		return
	}
	sig, known := signalsByName[req.Signal]
	if !known || !validCommandID(req.ID) {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "an id and one of SIGHUP, SIGINT, SIGQUIT, SIGKILL, SIGUSR1, SIGUSR2, SIGTERM are required"})
		return
	}
	// Under the lock: the id is not released (and its number not taken by a command that
	// follows) between the lookup and the kill.
	a.mu.Lock()
	var err error = syscall.ESRCH
	if pgid := a.running[req.ID]; pgid != 0 {
		err = a.reaper.signalGroup(pgid, sig)
	}
	a.mu.Unlock()
	if err == syscall.ESRCH {
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "no command runs under this id"})
		return
	}
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, map[string]string{"error": "the signal could not be sent: " + err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, map[string]bool{"delivered": true})
}
