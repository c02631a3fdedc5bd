package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// startAgent runs svc-init (the test binary as init) with its agent on a free port, idling.
func startAgent(t *testing.T, token string) (string, *exec.Cmd) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	cmd := exec.Command(os.Args[0], fmt.Sprintf("--agent-port=%d", port), "--", "sleep", "60")
	cmd.Env = append(os.Environ(), "SVC_INIT_TEST_AS_INIT=1", agentTokenEnv+"="+token)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	})
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	for i := 0; i < 100; i++ {
		if c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err == nil {
			c.Close()
			return base, cmd
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("the agent never listened")
	return "", nil
}

func call(t *testing.T, base, token, method, path string, body interface{}) (int, map[string]interface{}) {
	t.Helper()
	var buf bytes.Buffer
	if body != nil {
		_ = json.NewEncoder(&buf).Encode(body)
	}
	req, _ := http.NewRequest(method, base+path, &buf)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var out map[string]interface{}
	_ = json.NewDecoder(res.Body).Decode(&out)
	// Output comes as base64 (bytes, not JSON text).
	for _, k := range []string{"stdout", "stderr"} {
		if v, ok := out[k].(string); ok {
			b, err := base64.StdEncoding.DecodeString(v)
			if err != nil {
				t.Fatalf("%s is not base64: %v", k, err)
			}
			out[k] = string(b)
		}
	}
	return res.StatusCode, out
}

func execOf(argv []string, timeout, max int) map[string]interface{} {
	return map[string]interface{}{"argv": argv, "work_dir": "/", "timeout_seconds": timeout, "max_output_bytes": max}
}

func TestAgentAnswersOnlyWithItsToken(t *testing.T) {
	base, _ := startAgent(t, "s3cret-token")
	if code, _ := call(t, base, "", "GET", "/health", nil); code != 401 {
		t.Fatalf("no token: %d, want 401", code)
	}
	if code, _ := call(t, base, "s3cret-tokeX", "GET", "/health", nil); code != 401 {
		t.Fatalf("a wrong token: %d, want 401", code)
	}
	if code, _ := call(t, base, "s3cret-token", "POST", "/exec", execOf([]string{"true"}, 5, 100)); code != 200 {
		t.Fatalf("the token: %d, want 200", code)
	}
	if code, _ := call(t, base, "", "POST", "/exec", execOf([]string{"true"}, 5, 100)); code != 401 {
		t.Fatalf("exec without the token: %d, want 401", code)
	}
}

func TestAgentExecRunsArgvAsGiven(t *testing.T) {
	base, _ := startAgent(t, "tok")
	code, out := call(t, base, "tok", "POST", "/exec", execOf([]string{"sh", "-c", `echo out; echo err >&2; echo "token:${SVC_AGENT_TOKEN:-none}"; exit 3`}, 5, 1000))
	if code != 200 || out["exit_code"] != 3.0 || out["stdout"] != "out\ntoken:none\n" || out["stderr"] != "err\n" || out["timed_out"] != false || out["truncated"] != false {
		t.Fatalf("got %d %v", code, out)
	}
	_, out = call(t, base, "tok", "POST", "/exec", execOf([]string{"no-such-command-here"}, 5, 1000))
	if out["exit_code"] != 127.0 {
		t.Fatalf("a missing command: %v, want 127", out)
	}
	code, out = call(t, base, "tok", "POST", "/exec", map[string]interface{}{"argv": []string{"true"}, "work_dir": "/no/such/dir", "timeout_seconds": 5, "max_output_bytes": 10})
	if code != 422 || !strings.Contains(fmt.Sprint(out["error"]), "chdir") {
		t.Fatalf("a missing work_dir: %d %v", code, out)
	}
	_, out = call(t, base, "tok", "POST", "/exec", map[string]interface{}{"argv": []string{"pwd"}, "work_dir": "/tmp", "timeout_seconds": 5, "max_output_bytes": 100})
	if out["stdout"] != "/tmp\n" {
		t.Fatalf("work_dir: %v", out)
	}
	// A script without a #! line runs under /bin/sh, as execvp runs it on the engine path.
	dir := t.TempDir()
	script := dir + "/plain-script"
	if err := os.WriteFile(script, []byte("echo from-script\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	_, out = call(t, base, "tok", "POST", "/exec", execOf([]string{script}, 5, 100))
	if out["exit_code"] != 0.0 || out["stdout"] != "from-script\n" {
		t.Fatalf("a script without #!: %v", out)
	}
	// Bytes that are not text come back as they were.
	_, out = call(t, base, "tok", "POST", "/exec", execOf([]string{"printf", "\\377<&>"}, 5, 100))
	if out["stdout"] != "\xff<&>" {
		t.Fatalf("raw bytes: %q", out["stdout"])
	}
}

func TestAgentExecCapsOutputAndKillsTheGroupAtTheTimeout(t *testing.T) {
	base, _ := startAgent(t, "tok")
	_, out := call(t, base, "tok", "POST", "/exec", execOf([]string{"sh", "-c", "head -c 5000 /dev/zero; echo x >&2"}, 5, 1000))
	if len(fmt.Sprint(out["stdout"])) != 1000 || out["truncated"] != true || out["stderr"] != "x\n" {
		t.Fatalf("the cap: %d bytes, %v", len(fmt.Sprint(out["stdout"])), out["truncated"])
	}
	started := time.Now()
	// A child in the background holds the output open: the whole group goes at the timeout.
	_, out = call(t, base, "tok", "POST", "/exec", execOf([]string{"sh", "-c", "echo begun; sleep 30 & sleep 30"}, 1, 1000))
	if out["timed_out"] != true || out["exit_code"] != 137.0 || out["stdout"] != "begun\n" {
		t.Fatalf("the timeout: %v", out)
	}
	if took := time.Since(started); took > 4*time.Second {
		t.Fatalf("the timeout took %v: the group was not killed", took)
	}
	// A child that left its own group holds the output open past the deadline: given up on 5 s
	// after it, and reported as past the deadline.
	started = time.Now()
	_, out = call(t, base, "tok", "POST", "/exec", execOf([]string{"sh", "-c", "setsid sleep 30 & echo started"}, 1, 1000))
	if out["exit_code"] != 0.0 || out["timed_out"] != true || out["stdout"] != "started\n" {
		t.Fatalf("output held open: %v", out)
	}
	if took := time.Since(started); took < 5*time.Second || took > 9*time.Second {
		t.Fatalf("output held open was given up on after %v, want the deadline and 5 s", took)
	}
}

func TestAgentSignalsACommandByItsID(t *testing.T) {
	base, _ := startAgent(t, "tok")
	// The command traps SIGINT and says so: the signal reached its process group. It says when
	// its trap is set: a SIGINT before that would end the shell with 130.
	trapped := filepath.Join(t.TempDir(), "trapped")
	running := execOf([]string{"sh", "-c", `trap 'echo got-int; exit 3' INT; touch ` + trapped + `; echo ready; while :; do sleep 0.1; done`}, 30, 1000)
	running["id"] = "abc123"
	type result struct {
		code int
		out  map[string]interface{}
	}
	done := make(chan result, 1)
	// Before it runs, its id is unknown (404).
	if code, _ := call(t, base, "tok", "POST", "/signal", map[string]string{"id": "abc123", "signal": "SIGINT"}); code != 404 {
		t.Fatalf("signal before the start: %d, want 404", code)
	}
	go func() {
		code, out := call(t, base, "tok", "POST", "/exec", running)
		done <- result{code, out}
	}()
	waitForFile(t, trapped)
	if code, _ := call(t, base, "tok", "POST", "/signal", map[string]string{"id": "abc123", "signal": "SIGINT"}); code != 200 {
		t.Fatalf("signal while it runs: %d, want 200", code)
	}
	select {
	case r := <-done:
		if r.code != 200 || r.out["exit_code"] != 3.0 || !strings.Contains(fmt.Sprint(r.out["stdout"]), "got-int") || r.out["timed_out"] != false {
			t.Fatalf("the signalled command: %d %v", r.code, r.out)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the command did not end on SIGINT")
	}
	// Ended: its id names nothing any more.
	if code, _ := call(t, base, "tok", "POST", "/signal", map[string]string{"id": "abc123", "signal": "SIGKILL"}); code != 404 {
		t.Fatalf("a finished command's id: %d, want 404", code)
	}
	// Signals outside the list, ids that are not ids, and no token are refused.
	for _, body := range []map[string]string{{"id": "abc123", "signal": "SIGSTOP"}, {"id": "abc123", "signal": "9"}, {"id": "../x", "signal": "SIGTERM"}, {"signal": "SIGTERM"}} {
		if code, _ := call(t, base, "tok", "POST", "/signal", body); code != 400 {
			t.Fatalf("%v: %d, want 400", body, code)
		}
	}
	if code, _ := call(t, base, "", "POST", "/signal", map[string]string{"id": "abc123", "signal": "SIGTERM"}); code != 401 {
		t.Fatalf("without the token: %d, want 401", code)
	}
	bad := execOf([]string{"true"}, 5, 10)
	bad["id"] = "Not An Id"
	if code, _ := call(t, base, "tok", "POST", "/exec", bad); code != 400 {
		t.Fatalf("an exec with a bad id: %d, want 400", code)
	}
}

func TestAgentRefusesASecondCommandUnderARunningID(t *testing.T) {
	base, _ := startAgent(t, "tok")
	// The first command ignores SIGUSR1 (an ignored signal stays ignored across exec), so that a
	// delivered SIGUSR1 tells the test it runs without ending it. It says when its trap is set:
	// a SIGUSR1 before that would end the shell.
	ready := filepath.Join(t.TempDir(), "trapped")
	first := execOf([]string{"sh", "-c", "trap '' USR1; touch " + ready + "; sleep 3"}, 10, 10)
	first["id"] = "same"
	done := make(chan map[string]interface{}, 1)
	go func() {
		_, out := call(t, base, "tok", "POST", "/exec", first)
		done <- out
	}()
	waitForFile(t, ready)
	if code, _ := call(t, base, "tok", "POST", "/signal", map[string]string{"id": "same", "signal": "SIGUSR1"}); code != 200 {
		t.Fatalf("the first command is not signalable while it runs: %d", code)
	}
	second := execOf([]string{"true"}, 10, 100)
	second["id"] = "same"
	code, out := call(t, base, "tok", "POST", "/exec", second)
	if code != 409 || !strings.Contains(fmt.Sprint(out["error"]), "another command runs under id same") {
		t.Fatalf("a second command under a running id: %d %v", code, out)
	}
	if out := <-done; out["exit_code"] != 0.0 {
		t.Fatalf("the first command: %v", out)
	}
	// Once it ended, the id is free again.
	if code, out := call(t, base, "tok", "POST", "/exec", second); code != 200 || out["exit_code"] != 0.0 {
		t.Fatalf("the id after the first ended: %d %v", code, out)
	}
}

// waitForFile waits up to 5 s for a command to make the file (it says so when it is ready).
func waitForFile(t *testing.T, path string) {
	t.Helper()
	for i := 0; i < 500; i++ {
		if _, err := os.Stat(path); err == nil {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("%s was never made", path)
}
