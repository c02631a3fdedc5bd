package main

// The agent: svcd's way into an environment without the engine's exec API. An engine exec starts
// a runtime process per command (under gVisor, tens of milliseconds before the command runs);
// here svc-init, already PID 1 of the environment, starts the command itself, as E2B's envd and
// Daytona's daemon do. It listens on the container's own address, where svcd reaches it (on a
// swarm: at the port the environment's node publishes it on), and answers only a request that
// carries the environment's token (svcd keeps it sealed; other containers of the tenant, on the
// same network, do not have it). On a swarm the proxy reaches previews through it (preview.go).
//
//   GET /health                 200 once it serves
//   POST /exec                  a command (exec.go): its whole outcome, or its output streamed
//   POST /signal                a signal to a running command's process group, by the id svcd gave it
//   GET /files/stat?path=       one file's metadata (files.go)
//   GET /files/list?path=       a directory's entries
//   GET /files/content?path=    a regular file's bytes
//   PUT /files/content?path=    a file written whole (atomically: a temporary file renamed over it)
//   DELETE /files?path=         a file, or a directory (recursive=true for one with entries)
//   GET /terminal               an interactive terminal on a pseudo-terminal (terminal.go)
//   any request with X-Svc-Preview-Port: forwarded to that port of the environment (preview.go)
//
// svcd sets the caps (output, file sizes) in each request; the agent holds them.

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// The variable svcd passes the token in; it is taken out of the environment before anything starts.
const agentTokenEnv = "SVC_AGENT_TOKEN"

// Connections served at once: svcd's execs of one environment are few (the tenant's exec slots),
// and anything else on the tenant's network gets no more than this. Previews' connections count
// apart once their first request is read (preview.go).
const maxAgentConnections = 32

type agent struct {
	token   []byte
	reaper  *reaper
	preview *previewProxy
	// Commands asked for with an id (svcd's streamed execs), by id: their process groups while
	// their first process runs, else 0 (signal.go).
	mu      sync.Mutex
	running map[string]int
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
	port := 0
	if addr, ok := ln.Addr().(*net.TCPAddr); ok {
		port = addr.Port
	}
	a := &agent{token: []byte(token), reaper: r, preview: newPreviewProxy([]byte(token), port), running: map[string]int{}}
	server := &http.Server{
		Handler: a,
		// A request without the token is answered once its headers are in, and its connection
		// closed: whatever has no token holds a connection for this long at most. A body (an
		// upload) has a deadline of its own (files.go); a connection left idle (keep-alive) goes.
		ReadHeaderTimeout: 10 * time.Second,
		// Longer than a proxy keeps an idle upstream connection (Caddy: 2 minutes), so that a
		// preview's request is not sent on one the agent is closing (which a POST cannot retry).
		IdleTimeout:    150 * time.Second,
		MaxHeaderBytes: 16 << 10,
		// The handlers reach their connection for its deadlines (Go 1.19 has no ResponseController).
		ConnContext: func(ctx context.Context, c net.Conn) context.Context { return context.WithValue(ctx, connKey{}, c) },
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
	return &slotConn{Conn: c, release: func() { <-l.slots }, pool: l.slots}, nil
}

type slotConn struct {
	net.Conn
	mu       sync.Mutex
	released bool
	release  func()
	// The pool it counts in now: the listener's, or another it moved to (moveTo).
	pool chan struct{}
}

func (c *slotConn) Close() error {
	err := c.Conn.Close()
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.released {
		c.released = true
		c.release()
	}
	return err
}

// moveTo counts the connection in another pool of slots from now on, freeing its listener's
// slot: false, and it stays where it was, when that pool is full. Moved already: true.
func (c *slotConn) moveTo(pool chan struct{}) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pool == pool || c.released {
		return !c.released
	}
	select {
	case pool <- struct{}{}:
	default:
		return false
	}
	c.release()
	c.pool = pool
	c.release = func() { <-pool }
	return true
}

func (a *agent) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// A preview (preview.go), with a token of its own: its Authorization header is the preview's.
	if r.Header.Get(previewPortHeader) != "" && len(a.token) > 0 {
		a.preview.serve(w, r)
		return
	}
	given := []byte(strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "))
	if len(a.token) == 0 || subtle.ConstantTimeCompare(given, a.token) != 1 {
		// Closed with its answer: a connection without the token holds none of the slots past it.
		w.Header().Set("Connection", "close")
		writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "unauthorized"})
		return
	}
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/health":
		writeJSON(w, http.StatusOK, map[string]bool{"ok": true})
	case r.Method == http.MethodPost && r.URL.Path == "/exec":
		a.serveExec(w, r)
	case r.Method == http.MethodPost && r.URL.Path == "/signal":
		a.serveSignal(w, r)
	case r.Method == http.MethodGet && r.URL.Path == "/terminal":
		serveTerminal(w, r, a.reaper)
	case strings.HasPrefix(r.URL.Path, "/files"):
		serveFiles(w, r)
	default:
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "not found"})
	}
}

type connKey struct{}

// connOf is the connection r came on (nil in a test that calls a handler directly).
func connOf(r *http.Request) net.Conn {
	c, _ := r.Context().Value(connKey{}).(net.Conn)
	return c
}

func writeJSON(w http.ResponseWriter, status int, body interface{}) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
}
