package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// previewBackend serves, on the loopback the agent shares with the test (at host, "127.0.0.1"
// or "::1"), what a preview reaches: the headers it was given, and an upgrade that echoes.
func previewBackend(t *testing.T, host string) int {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatal(err)
	}
	server := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") == "echo" {
			conn, buf, err := w.(http.Hijacker).Hijack()
			if err != nil {
				return
			}
			defer conn.Close()
			_, _ = buf.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n")
			_ = buf.Flush()
			line, _ := buf.ReadString('\n')
			_, _ = conn.Write([]byte("echo: " + line))
			return
		}
		fmt.Fprintf(w, "host=%s auth=%s token=%q port=%q path=%s", r.Host, r.Header.Get("Authorization"), r.Header.Get(previewTokenHeader), r.Header.Get(previewPortHeader), r.URL.RequestURI())
	})}
	go func() { _ = server.Serve(ln) }()
	t.Cleanup(func() { _ = server.Close() })
	return ln.Addr().(*net.TCPAddr).Port
}

func previewGet(t *testing.T, client *http.Client, base string, port int, token string, auth string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", base+"/some/page?q=1", nil)
	req.Host = "site-abc.example.test"
	req.Header.Set(previewPortHeader, fmt.Sprint(port))
	if token != "" {
		req.Header.Set(previewTokenHeader, token)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	res, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(body)
}

func TestPreviewForwardsToTheEnvironmentsPortOnlyWithThePreviewToken(t *testing.T) {
	base, _ := startAgent(t, "agent-token")
	backend := previewBackend(t, "127.0.0.1")
	good := string(previewTokenOf([]byte("agent-token"), backend))
	// The same derivation as svcd's previewToken (agent.ts, whose unit test holds the same value):
	// HMAC-SHA256 of "svc-preview:<port>", base64url.
	if fixed := string(previewTokenOf([]byte("agent-token"), 8000)); fixed != "1j0vxd4icJrLJj2rKpndZhOytjXDbF6C3ogWiN9ohzw" {
		t.Fatalf("the preview token of port 8000 is %s", fixed)
	}
	code, body := previewGet(t, http.DefaultClient, base, backend, good, "Basic the-apps-own")
	if code != 200 || body != `host=site-abc.example.test auth=Basic the-apps-own token="" port="" path=/some/page?q=1` {
		t.Fatalf("with the preview token: %d %s", code, body)
	}
	for _, c := range []struct{ why, token, auth string }{
		{"no token", "", ""},
		{"a wrong token", good[:len(good)-1] + "X", ""},
		// The agent's own token is not the preview's, in either header; another port's is not this one's.
		{"the agent's token", "agent-token", ""},
		{"another port's token", string(previewTokenOf([]byte("agent-token"), backend+1)), ""},
		{"the agent's token as a bearer", "", "Bearer agent-token"},
	} {
		if code, body := previewGet(t, http.DefaultClient, base, backend, c.token, c.auth); code != 401 || strings.Contains(body, "host=") {
			t.Fatalf("%s: %d %s, want 401", c.why, code, body)
		}
	}
	agentPort := strings.TrimPrefix(base, "http://127.0.0.1:")
	for _, port := range []string{"0", "70000", "x", agentPort} {
		n, _ := strconv.Atoi(port)
		req, _ := http.NewRequest("GET", base+"/", nil)
		req.Header.Set(previewPortHeader, port)
		req.Header.Set(previewTokenHeader, string(previewTokenOf([]byte("agent-token"), n)))
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != 400 {
			t.Fatalf("port %s: %d, want 400", port, res.StatusCode)
		}
	}
	// Nothing on the port: the agent says so.
	free, _ := net.Listen("tcp", "127.0.0.1:0")
	closed := free.Addr().(*net.TCPAddr).Port
	free.Close()
	if code, body := previewGet(t, http.DefaultClient, base, closed, string(previewTokenOf([]byte("agent-token"), closed)), ""); code != 502 || !strings.Contains(body, "did not answer") {
		t.Fatalf("a closed port: %d %s", code, body)
	}
	// A server on the IPv6 loopback only (a dev server on "localhost" may take ::1 alone) is reached too.
	if six, err := net.Listen("tcp", "[::1]:0"); err == nil {
		six.Close()
		v6 := previewBackend(t, "::1")
		if code, body := previewGet(t, http.DefaultClient, base, v6, string(previewTokenOf([]byte("agent-token"), v6)), ""); code != 200 || !strings.HasPrefix(body, "host=") {
			t.Fatalf("a server on ::1: %d %s", code, body)
		}
	} else {
		t.Logf("no IPv6 loopback here: %v", err)
	}
}

func TestPreviewCarriesAnUpgrade(t *testing.T) {
	base, _ := startAgent(t, "agent-token")
	backend := previewBackend(t, "127.0.0.1")
	conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(conn, "GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: echo\r\n%s: %d\r\n%s: %s\r\n\r\n", previewPortHeader, backend, previewTokenHeader, previewTokenOf([]byte("agent-token"), backend))
	r := bufio.NewReader(conn)
	status, _ := r.ReadString('\n')
	if !strings.Contains(status, "101") {
		t.Fatalf("the upgrade: %q", status)
	}
	for {
		line, err := r.ReadString('\n')
		if err != nil || line == "\r\n" {
			break
		}
	}
	fmt.Fprint(conn, "hello\n")
	if line, _ := r.ReadString('\n'); line != "echo: hello\n" {
		t.Fatalf("through the upgraded connection: %q", line)
	}
}

// Previews hold connections of their own: all of theirs kept open, and more refused (each
// closed after its 503), leave svcd's requests answered.
func TestPreviewConnectionsLeaveTheAgentsSlotsFree(t *testing.T) {
	base, _ := startAgent(t, "agent-token")
	backend := previewBackend(t, "127.0.0.1")
	good := string(previewTokenOf([]byte("agent-token"), backend))
	var kept []*http.Client
	defer func() {
		for _, c := range kept {
			c.CloseIdleConnections()
		}
	}()
	for i := 0; i < maxPreviewConnections+maxAgentConnections+8; i++ {
		// A client of its own per connection, which keeps it open (keep-alive) once answered.
		client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}, Timeout: 5 * time.Second}
		code, _ := previewGet(t, client, base, backend, good, "")
		if i < maxPreviewConnections && code != 200 || i >= maxPreviewConnections && code != 503 {
			t.Fatalf("preview connection %d: %d", i, code)
		}
		kept = append(kept, client)
	}
	done := make(chan int, 1)
	go func() {
		code, _ := call(t, base, "agent-token", "GET", "/health", nil)
		done <- code
	}()
	select {
	case code := <-done:
		if code != 200 {
			t.Fatalf("health: %d", code)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("the agent took no request while previews held connections")
	}
}

// A request without a token (the agent's, or a preview's) is answered and its connection closed:
// none keeps a slot of the agent's by keeping its connection alive.
func TestRefusedConnectionsAreClosed(t *testing.T) {
	base, _ := startAgent(t, "agent-token")
	for _, extra := range []string{"", previewPortHeader + ": 8000\r\n" + previewTokenHeader + ": wrong\r\n"} {
		conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprintf(conn, "GET /health HTTP/1.1\r\nHost: x\r\n%s\r\n", extra)
		answer, err := io.ReadAll(conn)
		conn.Close()
		if err != nil || !strings.HasPrefix(string(answer), "HTTP/1.1 401") {
			t.Fatalf("%q: %q %v (the connection was kept open, or not answered 401)", extra, answer, err)
		}
	}
}
