package main

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func rawCall(t *testing.T, base, token, method, path string, body io.Reader) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(method, base+path, body)
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { res.Body.Close() })
	return res
}

type event struct {
	Type     string `json:"type"`
	Data     []byte `json:"data"`
	ExitCode *int   `json:"exit_code"`
	TimedOut bool   `json:"timed_out"`
}

func TestAgentStreamsOutputAsItComes(t *testing.T) {
	base, _ := startAgent(t, "tok")
	req := execOf([]string{"sh", "-c", "echo first; sleep 1; echo second >&2; exit 4"}, 5, 1000)
	req["stream"] = true
	body, _ := json.Marshal(req)
	started := time.Now()
	res := rawCall(t, base, "tok", "POST", "/exec", bytes.NewReader(body))
	if res.StatusCode != 200 || res.Header.Get("Content-Type") != "application/x-ndjson" {
		t.Fatalf("status %d, %s", res.StatusCode, res.Header.Get("Content-Type"))
	}
	lines := bufio.NewScanner(res.Body)
	var events []event
	var firstAt time.Duration
	for lines.Scan() {
		var e event
		if err := json.Unmarshal(lines.Bytes(), &e); err != nil {
			t.Fatalf("not a JSON line: %q", lines.Text())
		}
		if len(events) == 0 {
			firstAt = time.Since(started)
		}
		events = append(events, e)
	}
	if len(events) != 3 || events[0].Type != "stdout" || string(events[0].Data) != "first\n" || events[1].Type != "stderr" || string(events[1].Data) != "second\n" || events[2].Type != "exit" || events[2].ExitCode == nil || *events[2].ExitCode != 4 {
		t.Fatalf("events: %+v", events)
	}
	// The first line came before the command ended (it sleeps a second after it).
	if firstAt > 800*time.Millisecond {
		t.Fatalf("the first line came after %v: not streamed", firstAt)
	}
	// A work_dir it cannot enter is refused before anything is streamed.
	req["work_dir"] = "/nonexistent"
	body, _ = json.Marshal(req)
	if res := rawCall(t, base, "tok", "POST", "/exec", bytes.NewReader(body)); res.StatusCode != 422 {
		t.Fatalf("a work_dir that is not there: %d, want 422", res.StatusCode)
	}
}

func TestAgentStreamedCommandIsKilledWhenItsReaderGoes(t *testing.T) {
	base, _ := startAgent(t, "tok")
	marker := filepath.Join(t.TempDir(), "alive")
	req := execOf([]string{"sh", "-c", "while :; do echo tick; touch " + marker + "; sleep 0.1; done"}, 60, 1<<20)
	req["stream"] = true
	body, _ := json.Marshal(req)
	res := rawCall(t, base, "tok", "POST", "/exec", bytes.NewReader(body))
	_, _ = bufio.NewReader(res.Body).ReadString('\n')
	res.Body.Close()
	// The next write after the connection closed fails, and the group is killed: the marker stops moving.
	time.Sleep(1 * time.Second)
	st1, err := os.Stat(marker)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(700 * time.Millisecond)
	st2, _ := os.Stat(marker)
	if !st2.ModTime().Equal(st1.ModTime()) {
		t.Fatal("the command still runs after its reader went")
	}
}

func TestAgentExecTakesEnvAndStdin(t *testing.T) {
	base, _ := startAgent(t, "tok")
	req := execOf([]string{"sh", "-c", `echo "$GREETING"; cat`}, 5, 1000)
	req["env"] = map[string]string{"GREETING": "hello"}
	req["stdin"] = []byte("from stdin\n")
	_, out := call(t, base, "tok", "POST", "/exec", req)
	if out["stdout"] != "hello\nfrom stdin\n" {
		t.Fatalf("env and stdin: %v", out)
	}
	// Without stdin, a command that reads it ends at once (/dev/null), as on the engine path.
	_, out = call(t, base, "tok", "POST", "/exec", execOf([]string{"cat"}, 5, 1000))
	if out["exit_code"] != 0.0 || out["timed_out"] != false {
		t.Fatalf("no stdin: %v", out)
	}
	bad := execOf([]string{"true"}, 5, 100)
	bad["env"] = map[string]string{"A=B": "x"}
	if code, _ := call(t, base, "tok", "POST", "/exec", bad); code != 400 {
		t.Fatalf("a variable name with =: %d, want 400", code)
	}
}

func q(path string, extra ...string) string {
	v := url.Values{"path": {path}}
	for i := 0; i+1 < len(extra); i += 2 {
		v.Set(extra[i], extra[i+1])
	}
	return v.Encode()
}

func TestAgentFiles(t *testing.T) {
	base, _ := startAgent(t, "tok")
	dir := t.TempDir()
	target := filepath.Join(dir, "sub", "hello.txt")

	// Written whole, parents created, with the mode asked for.
	res := rawCall(t, base, "tok", "PUT", "/files/content?"+q(target, "mode", "0640", "max_bytes", "100"), strings.NewReader("hello files\n"))
	var info fileInfo
	_ = json.NewDecoder(res.Body).Decode(&info)
	if res.StatusCode != 200 || info.Size != 12 || info.Type != "file" || info.Mode != "0640" {
		t.Fatalf("write: %d %+v", res.StatusCode, info)
	}
	res = rawCall(t, base, "tok", "GET", "/files/content?"+q(target, "max_bytes", "100"), nil)
	got, _ := io.ReadAll(res.Body)
	if res.StatusCode != 200 || string(got) != "hello files\n" {
		t.Fatalf("read: %d %q", res.StatusCode, got)
	}
	// Past the cap, both ways: refused, and the file as it was.
	res = rawCall(t, base, "tok", "PUT", "/files/content?"+q(target, "mode", "0644", "max_bytes", "5"), strings.NewReader("too long for five"))
	if res.StatusCode != 413 {
		t.Fatalf("an upload past the cap: %d, want 413", res.StatusCode)
	}
	if b, _ := os.ReadFile(target); string(b) != "hello files\n" {
		t.Fatalf("the file after a refused upload: %q", b)
	}
	if entries, _ := os.ReadDir(filepath.Dir(target)); len(entries) != 1 {
		t.Fatalf("a refused upload left %d entries, want the file alone", len(entries))
	}
	if res := rawCall(t, base, "tok", "GET", "/files/content?"+q(target, "max_bytes", "5"), nil); res.StatusCode != 413 {
		t.Fatalf("a read past the cap: %d, want 413", res.StatusCode)
	}

	// Stat and list.
	res = rawCall(t, base, "tok", "GET", "/files/stat?"+q(filepath.Join(dir, "sub")), nil)
	_ = json.NewDecoder(res.Body).Decode(&info)
	if info.Type != "directory" || info.Name != "sub" {
		t.Fatalf("stat: %+v", info)
	}
	_ = os.WriteFile(filepath.Join(dir, "sub", "a.txt"), []byte("a"), 0o644)
	_ = os.Symlink("hello.txt", filepath.Join(dir, "sub", "link"))
	res = rawCall(t, base, "tok", "GET", "/files/list?"+q(filepath.Join(dir, "sub")), nil)
	var list fileList
	_ = json.NewDecoder(res.Body).Decode(&list)
	if len(list.Entries) != 3 || list.Entries[0].Name != "a.txt" || list.Entries[1].Name != "hello.txt" || list.Entries[2].Type != "symlink" || list.Entries[2].LinkTarget != "hello.txt" {
		t.Fatalf("list: %+v", list)
	}

	// What is not a regular file is not read: a FIFO would never answer.
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	if res := rawCall(t, base, "tok", "GET", "/files/content?"+q(fifo, "max_bytes", "100"), nil); res.StatusCode != 400 {
		t.Fatalf("a FIFO: %d, want 400", res.StatusCode)
	}
	// Listing a FIFO is not waited on either (it would wait for a writer).
	started := time.Now()
	if res := rawCall(t, base, "tok", "GET", "/files/list?"+q(fifo), nil); res.StatusCode != 400 || time.Since(started) > 2*time.Second {
		t.Fatalf("listing a FIFO: %d after %v, want 400 at once", res.StatusCode, time.Since(started))
	}
	// /proc is not read: the agent's own environment (its token) is there. A link to it neither.
	_ = os.Symlink("/proc/self/environ", filepath.Join(dir, "environ"))
	for _, p := range []string{"/proc/self/environ", "/proc/1/environ", filepath.Join(dir, "environ")} {
		if res := rawCall(t, base, "tok", "GET", "/files/content?"+q(p, "max_bytes", "100000"), nil); res.StatusCode != 403 {
			t.Fatalf("%s: %d, want 403", p, res.StatusCode)
		}
	}
	// A time before 1970 is said as 0 (the API's times are unsigned).
	old := filepath.Join(dir, "old")
	_ = os.WriteFile(old, nil, 0o644)
	_ = os.Chtimes(old, time.Unix(-315619200, 0), time.Unix(-315619200, 0))
	res = rawCall(t, base, "tok", "GET", "/files/stat?"+q(old), nil)
	_ = json.NewDecoder(res.Body).Decode(&info)
	if info.ModifiedAt != 0 {
		t.Fatalf("a file of 1960: modified_at %d, want 0", info.ModifiedAt)
	}
	if res := rawCall(t, base, "tok", "GET", "/files/content?"+q(filepath.Join(dir, "missing"), "max_bytes", "100"), nil); res.StatusCode != 404 {
		t.Fatalf("a missing file: %d, want 404", res.StatusCode)
	}
	if res := rawCall(t, base, "tok", "GET", "/files/stat?path=relative/path", nil); res.StatusCode != 400 {
		t.Fatalf("a relative path: %d, want 400", res.StatusCode)
	}
	if res := rawCall(t, base, "tok", "GET", "/files/stat?"+q(dir+"/sub/../sub"), nil); res.StatusCode != 400 {
		t.Fatalf("a path that is not clean: %d, want 400", res.StatusCode)
	}

	// Remove: a directory with entries only when asked to.
	if res := rawCall(t, base, "tok", "DELETE", "/files?"+q(filepath.Join(dir, "sub")), nil); res.StatusCode != 409 {
		t.Fatalf("a directory with entries: %d, want 409", res.StatusCode)
	}
	if res := rawCall(t, base, "tok", "DELETE", "/files?"+q(filepath.Join(dir, "sub"), "recursive", "true"), nil); res.StatusCode != 204 {
		t.Fatalf("recursive: %d, want 204", res.StatusCode)
	}
	if _, err := os.Stat(filepath.Join(dir, "sub")); !os.IsNotExist(err) {
		t.Fatal("the directory is still there")
	}
	if res := rawCall(t, base, "tok", "DELETE", "/files?"+q("/"), nil); res.StatusCode != 400 {
		t.Fatalf("/: %d, want 400", res.StatusCode)
	}
	// And nothing without the token.
	if res := rawCall(t, base, "wrong", "GET", "/files/stat?"+q(dir), nil); res.StatusCode != 401 {
		t.Fatalf("no token: %d, want 401", res.StatusCode)
	}
}

func TestAgentListStopsAtItsByteBudget(t *testing.T) {
	base, _ := startAgent(t, "tok")
	dir := t.TempDir()
	// 4,000 entries with 250-byte names, twice over (name and path): past the 2 MiB budget.
	for i := 0; i < 4000; i++ {
		_ = os.WriteFile(filepath.Join(dir, fmt.Sprintf("%04d-%s", i, strings.Repeat("n", 245))), nil, 0o644)
	}
	res := rawCall(t, base, "tok", "GET", "/files/list?"+q(dir), nil)
	body, _ := io.ReadAll(res.Body)
	var list fileList
	_ = json.Unmarshal(body, &list)
	if !list.Truncated || len(list.Entries) == 0 || len(list.Entries) >= 4000 || len(body) > maxListBytes {
		t.Fatalf("%d entries, truncated %v, %d bytes", len(list.Entries), list.Truncated, len(body))
	}
}

func TestAgentTerminal(t *testing.T) {
	base, _ := startAgent(t, "tok")
	conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	dir := t.TempDir()
	fmt.Fprintf(conn, "GET /terminal?arg=/bin/sh&cols=80&rows=24&work_dir=%s HTTP/1.1\r\nHost: agent\r\nAuthorization: Bearer tok\r\nConnection: Upgrade\r\nUpgrade: svc-terminal\r\n\r\n", url.QueryEscape(dir))
	r := bufio.NewReader(conn)
	status, _ := r.ReadString('\n')
	if !strings.Contains(status, "101") {
		t.Fatalf("status line %q", status)
	}
	for {
		line, err := r.ReadString('\n')
		if err != nil || line == "\r\n" {
			break
		}
	}
	frame := func(kind byte, payload []byte) {
		header := make([]byte, 5)
		header[0] = kind
		binary.BigEndian.PutUint32(header[1:], uint32(len(payload)))
		_, _ = conn.Write(append(header, payload...))
	}
	size := make([]byte, 4)
	binary.BigEndian.PutUint16(size, 100)
	binary.BigEndian.PutUint16(size[2:], 30)
	frame(1, size)
	frame(0, []byte("echo hi-$((1+1)); stty size; tty; pwd; exit 3\n"))
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	var out bytes.Buffer
	code := -1
	readFrames(r, func(kind byte, payload []byte) error {
		if kind == 0 {
			out.Write(payload)
			return nil
		}
		code = int(int32(binary.BigEndian.Uint32(payload)))
		return io.EOF
	})
	text := out.String()
	if code != 3 || !strings.Contains(text, "hi-2") || !strings.Contains(text, "30 100") || !strings.Contains(text, "/dev/pts/") || !strings.Contains(text, dir) {
		t.Fatalf("exit %d, output %q", code, text)
	}
}

func TestAgentTerminalHangsUpWhenTheConnectionGoes(t *testing.T) {
	base, _ := startAgent(t, "tok")
	conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	marker := filepath.Join(t.TempDir(), "alive")
	fmt.Fprintf(conn, "GET /terminal?arg=/bin/sh&arg=-c&arg=%s&cols=80&rows=24&work_dir=/ HTTP/1.1\r\nHost: agent\r\nAuthorization: Bearer tok\r\nConnection: Upgrade\r\nUpgrade: svc-terminal\r\n\r\n",
		url.QueryEscape("trap '' HUP; while :; do touch "+marker+"; sleep 0.1; done"))
	status, _ := bufio.NewReader(conn).ReadString('\n')
	if !strings.Contains(status, "101") {
		t.Fatalf("status line %q", status)
	}
	time.Sleep(300 * time.Millisecond)
	conn.Close()
	// It ignores the hang-up: killed after the grace.
	time.Sleep(hangupGrace + 1500*time.Millisecond)
	st1, err := os.Stat(marker)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	if st2, _ := os.Stat(marker); !st2.ModTime().Equal(st1.ModTime()) {
		t.Fatal("the command outlived its terminal")
	}
}
