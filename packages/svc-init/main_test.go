package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The test binary runs as svc-init itself when asked to (the tests below start it as a program).
func TestMain(m *testing.M) {
	if os.Getenv("SVC_INIT_TEST_AS_INIT") == "1" {
		var commandStarted func()
		// A test's stand-in for a slow runtime (gVisor): the moment between the command's start
		// and the signals asked for after it, widened so that a signal always falls in it.
		if pause, err := time.ParseDuration(os.Getenv("SVC_INIT_TEST_PAUSE_AFTER_START")); err == nil {
			commandStarted = func() { time.Sleep(pause) }
		}
		os.Exit(run(os.Args[1:], commandStarted))
	}
	os.Exit(m.Run())
}

func startInit(t *testing.T, args ...string) (*exec.Cmd, *lockedBuffer, *lockedBuffer) {
	t.Helper()
	return startInitAs(t, nil, args...)
}

// startInitAs starts svc-init behind a launcher command (nil: none).
func startInitAs(t *testing.T, launcher []string, args ...string) (*exec.Cmd, *lockedBuffer, *lockedBuffer) {
	t.Helper()
	argv := append(append(append([]string{}, launcher...), os.Args[0]), args...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), "SVC_INIT_TEST_AS_INIT=1")
	var stdout, stderr lockedBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	// A group of its own, so that a test that fails midway leaves no command of it running.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	return cmd, &stdout, &stderr
}

func exitCode(t *testing.T, cmd *exec.Cmd) int {
	t.Helper()
	err := cmd.Wait()
	if err == nil {
		return 0
	}
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	t.Fatal(err)
	return -1
}

func TestPassesOutputUnderTheLimitAndTheExitCode(t *testing.T) {
	cmd, stdout, stderr := startInit(t, "--", "sh", "-c", `echo one; echo two >&2; printf 'no newline'; exit 7`)
	if code := exitCode(t, cmd); code != 7 {
		t.Fatalf("exit code %d, want 7", code)
	}
	if stdout.String() != "one\nno newline" || stderr.String() != "two\n" {
		t.Fatalf("stdout %q stderr %q", stdout.String(), stderr.String())
	}
}

func TestDropsOutputOverTheLimitAndSaysHowMuch(t *testing.T) {
	// 10,000 lines at once against 100 a second with a burst of 200: about 200 pass.
	cmd, stdout, stderr := startInit(t, "--lines-per-second", "100", "--", "sh", "-c", `i=0; while [ $i -lt 10000 ]; do echo line $i; i=$((i+1)); done`)
	if code := exitCode(t, cmd); code != 0 {
		t.Fatalf("exit code %d, stderr %q", code, stderr.String())
	}
	passed := strings.Count(stdout.String(), "\n")
	if passed < 150 || passed > 400 {
		t.Fatalf("%d lines passed, want about 200", passed)
	}
	if !strings.HasPrefix(stdout.String(), "line 0\nline 1\n") {
		t.Fatalf("the burst should pass the first lines whole: %q", stdout.String()[:40])
	}
	if !strings.Contains(stderr.String(), "lines of output dropped: over this container's log limit of 100 lines") {
		t.Fatalf("no notice of what was dropped: %q", stderr.String())
	}
}

func TestUnlimitedByBytesWhenLinesAreShortButLimitedWhenLong(t *testing.T) {
	// 100 lines of 10 KiB against 64 KiB a second (burst 128 KiB): about 12 pass.
	cmd, stdout, _ := startInit(t, "--bytes-per-second", "65536", "--", "sh", "-c", `i=0; line=$(head -c 10239 /dev/zero | tr '\0' x); while [ $i -lt 100 ]; do echo "$line"; i=$((i+1)); done`)
	if code := exitCode(t, cmd); code != 0 {
		t.Fatalf("exit code %d", code)
	}
	if passed := strings.Count(stdout.String(), "\n"); passed < 8 || passed > 30 {
		t.Fatalf("%d long lines passed, want about 12", passed)
	}
}

func TestForwardsSignalsAndReportsTheSignalThatEndedTheChild(t *testing.T) {
	cmd, stdout, _ := startInit(t, "--", "sh", "-c", `trap 'echo got TERM; exit 0' TERM; echo ready; while true; do sleep 0.05; done`)
	waitFor(t, func() bool { return strings.Contains(stdout.String(), "ready") })
	_ = cmd.Process.Signal(syscall.SIGTERM)
	if code := exitCode(t, cmd); code != 0 || !strings.Contains(stdout.String(), "got TERM") {
		t.Fatalf("exit %d, stdout %q", code, stdout.String())
	}

	cmd, stdout, _ = startInit(t, "--", "sh", "-c", `echo ready; exec sleep 30`)
	waitFor(t, func() bool { return strings.Contains(stdout.String(), "ready") })
	_ = cmd.Process.Signal(syscall.SIGTERM)
	if code := exitCode(t, cmd); code != 128+int(syscall.SIGTERM) {
		t.Fatalf("exit %d, want 143", code)
	}
}

func TestForwardsTheStandardSignalsAProgramHandles(t *testing.T) {
	// A stop sends the image's STOPSIGNAL, whichever it is (nginx: QUIT, Apache: WINCH).
	// SEGV and SYS sent with kill: Go would end svc-init with a stack dump for one it was not asked for.
	names := []string{"HUP", "INT", "QUIT", "USR1", "USR2", "ALRM", "WINCH", "SEGV", "SYS", "TERM"}
	traps := ""
	for _, n := range names {
		traps += fmt.Sprintf("trap 'echo got %s' %s; ", n, n)
	}
	// The last one ends the command, and with it svc-init: nothing is left running.
	cmd, stdout, _ := startInit(t, "--", "sh", "-c", traps+`trap 'echo got TERM; exit 0' TERM; echo ready; while true; do sleep 0.05; done`)
	waitFor(t, func() bool { return strings.Contains(stdout.String(), "ready") })
	signals := map[string]syscall.Signal{"HUP": syscall.SIGHUP, "INT": syscall.SIGINT, "QUIT": syscall.SIGQUIT, "USR1": syscall.SIGUSR1, "USR2": syscall.SIGUSR2, "ALRM": syscall.SIGALRM, "WINCH": syscall.SIGWINCH, "SEGV": syscall.SIGSEGV, "SYS": syscall.SIGSYS, "TERM": syscall.SIGTERM}
	for _, n := range names {
		_ = cmd.Process.Signal(signals[n])
		waitFor(t, func() bool { return strings.Contains(stdout.String(), "got "+n) })
	}
	if code := exitCode(t, cmd); code != 0 {
		t.Fatalf("exit %d, want the command's 0", code)
	}
}

// The command signals its parent the moment it runs and waits 2 s for the signal to come back
// (exit 0), then gives up (exit 3). svc-init pauses between the command's start and the signals
// it asks Go for after it (SVC_INIT_TEST_PAUSE_AFTER_START), so the signal always comes first.
func signalParentAtStart(sig string) string {
	return fmt.Sprintf(`trap 'echo got %[1]s; exit 0' %[1]s; kill -%[1]s $PPID; i=0; while [ $i -lt 40 ]; do sleep 0.05; i=$((i+1)); done; exit 3`, sig)
}

func TestAStopAsTheCommandStartsReachesIt(t *testing.T) {
	// A stop the moment the command runs: svc-init asked for SIGTERM before it started the
	// command, and forwards it. Go's default would end svc-init, and the container with it,
	// without a word to the command.
	t.Setenv("SVC_INIT_TEST_PAUSE_AFTER_START", "300ms")
	cmd, stdout, _ := startInit(t, "--", "sh", "-c", signalParentAtStart("TERM"))
	if code := exitCode(t, cmd); code != 0 || !strings.Contains(stdout.String(), "got TERM") {
		t.Fatalf("exit %d, stdout %q", code, stdout.String())
	}
}

func TestAJobControlSignalAtTheStartIsForwarded(t *testing.T) {
	// SIGTSTP the moment the command runs: asked for before the command starts, it is forwarded.
	// Left to the kernel's default it would stop svc-init itself (gVisor does not keep that from
	// PID 1; here svc-init is no PID 1 either), and the command's end would never be collected.
	t.Setenv("SVC_INIT_TEST_PAUSE_AFTER_START", "300ms")
	cmd, stdout, _ := startInit(t, "--", "sh", "-c", signalParentAtStart("TSTP"))
	ended := make(chan error, 1)
	go func() { ended <- cmd.Wait() }()
	select {
	case err := <-ended:
		if err != nil || !strings.Contains(stdout.String(), "got TSTP") {
			t.Fatalf("%v, stdout %q", err, stdout.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("svc-init did not end within 10 s (stopped by the signal?), stdout %q", stdout.String())
	}
}

func TestAStopSignalNamedToItIsAskedForBeforeTheCommand(t *testing.T) {
	// haproxy's STOPSIGNAL, SIGUSR1, is one svc-init asks Go for only once the command runs.
	// Named with --forward-signal (svcd reads it from the image), it is asked for before, and a
	// stop the moment the command runs reaches it.
	t.Setenv("SVC_INIT_TEST_PAUSE_AFTER_START", "300ms")
	cmd, stdout, _ := startInit(t, "--forward-signal", "10", "--", "sh", "-c", signalParentAtStart("USR1"))
	if code := exitCode(t, cmd); code != 0 || !strings.Contains(stdout.String(), "got USR1") {
		t.Fatalf("named: exit %d, stdout %q", code, stdout.String())
	}
	// Not named, it comes before svc-init asked for it, and Go drops it: the command gives up.
	cmd, stdout, _ = startInit(t, "--", "sh", "-c", signalParentAtStart("USR1"))
	if code := exitCode(t, cmd); code != 3 || strings.Contains(stdout.String(), "got USR1") {
		t.Fatalf("not named: exit %d, stdout %q, want the command's 3", code, stdout.String())
	}
}

func TestEverySignalIsAskedForOnceAndAStopsBeforeTheCommand(t *testing.T) {
	// The two lists split one set: none forgotten, none asked twice; and asked for before the
	// command starts, the signals a stop sends (the images' usual STOPSIGNALs), those Go's
	// default would end svc-init with (a fault, SIGABRT, SIGSYS: Go's stack dump), and the
	// job-control ones (under gVisor the kernel's default would stop PID 1).
	catchable := []syscall.Signal{
		syscall.SIGHUP, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGILL, syscall.SIGTRAP, syscall.SIGABRT,
		syscall.SIGBUS, syscall.SIGFPE, syscall.SIGUSR1, syscall.SIGSEGV, syscall.SIGUSR2, syscall.SIGALRM,
		syscall.SIGTERM, syscall.SIGSTKFLT, syscall.SIGCONT, syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU,
		syscall.SIGXCPU, syscall.SIGXFSZ, syscall.SIGVTALRM, syscall.SIGWINCH, syscall.SIGIO, syscall.SIGPWR,
		syscall.SIGSYS,
	}
	asked := map[os.Signal]int{}
	for _, s := range append(append([]os.Signal{}, stopSignals...), laterSignals...) {
		asked[s]++
	}
	for _, s := range catchable {
		if asked[s] != 1 {
			t.Errorf("%v asked for %d times, want once", s, asked[s])
		}
	}
	if len(asked) != len(catchable) {
		t.Errorf("%d signals asked for, want the %d standard ones a program can catch", len(asked), len(catchable))
	}
	before := map[os.Signal]bool{}
	for _, s := range stopSignals {
		before[s] = true
	}
	for _, s := range []syscall.Signal{
		syscall.SIGTERM, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGHUP, syscall.SIGWINCH,
		syscall.SIGABRT, syscall.SIGILL, syscall.SIGTRAP, syscall.SIGBUS, syscall.SIGFPE, syscall.SIGSEGV, syscall.SIGSTKFLT, syscall.SIGSYS,
		syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU,
	} {
		if !before[s] {
			t.Errorf("%v is asked for only once the command runs", s)
		}
	}
}

func TestForwardsTheRealTimeSignalItIsAskedTo(t *testing.T) {
	// An image whose STOPSIGNAL is SIGRTMIN+6 (40): svcd passes it, and a stop reaches the command.
	cmd, stdout, _ := startInit(t, "--forward-signal", "40", "--", "sh", "-c", `trap 'echo got 40; exit 0' 40; echo ready; while true; do sleep 0.05; done`)
	waitFor(t, func() bool { return strings.Contains(stdout.String(), "ready") })
	_ = cmd.Process.Signal(syscall.Signal(40))
	waitFor(t, func() bool { return strings.Contains(stdout.String(), "got 40") })
	if code := exitCode(t, cmd); code != 0 {
		t.Fatalf("exit %d, want the command's 0", code)
	}
	// Only a signal svc-init forwards: KILL and STOP cannot be caught, CHLD, PIPE, URG and PROF
	// are not forwarded, and Go delivers no 32 to 34; anything else is a mistake of the caller's.
	for _, n := range []string{"9", "13", "17", "19", "23", "27", "32", "33", "34", "65"} {
		cmd, _, stderr := startInit(t, "--forward-signal", n, "--", "true")
		if code := exitCode(t, cmd); code != 2 || !strings.Contains(stderr.String(), "--forward-signal takes") {
			t.Fatalf("--forward-signal %s: exit %d, stderr %q", n, code, stderr.String())
		}
	}
}

func TestALogWhoseReaderWentAwayDoesNotKillIt(t *testing.T) {
	// The container's log, as the engine's shim holds it, gone: svc-init's writes fail (SIGPIPE
	// asked for), and it still waits for the command and exits with its code.
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	_ = r.Close()
	cmd := exec.Command(os.Args[0], "--", "sh", "-c", `echo one; echo two >&2; sleep 0.2; echo three; exit 3`)
	cmd.Env = append(os.Environ(), "SVC_INIT_TEST_AS_INIT=1")
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	_ = w.Close()
	if code := exitCode(t, cmd); code != 3 {
		t.Fatalf("exit %d (%v), want the command's 3", code, cmd.ProcessState)
	}
}

func TestReapsOrphans(t *testing.T) {
	// The child leaves an orphan behind (its parent, a subshell, exits at once) that exits
	// later: it comes to svc-init and must not stay a zombie.
	cmd, stdout, _ := startInit(t, "--", "sh", "-c", `(sleep 0.2 &); echo started; sleep 1`)
	waitFor(t, func() bool { return strings.Contains(stdout.String(), "started") })
	time.Sleep(600 * time.Millisecond)
	zombies, err := exec.Command("ps", "-o", "stat=", "--ppid", strconv.Itoa(cmd.Process.Pid)).Output()
	if err != nil && len(zombies) == 0 {
		// ps exits 1 when it lists nothing: no child left at all is fine too.
		zombies = nil
	}
	if strings.Contains(string(zombies), "Z") {
		t.Fatalf("a zombie is left under svc-init: %q", zombies)
	}
	// And the probe can see children: the shell still sleeping is one.
	if !strings.Contains(string(zombies), "S") {
		t.Fatalf("ps saw no child of svc-init at all: %q", zombies)
	}
	if code := exitCode(t, cmd); code != 0 {
		t.Fatalf("exit %d", code)
	}
}

func TestExitsWithTheChildWhateverItLeftHoldingTheOutput(t *testing.T) {
	// A daemon of the child keeps the pipes open: svc-init still exits with the child, at once.
	started := time.Now()
	cmd, _, _ := startInit(t, "--", "sh", "-c", `sleep 30 & exit 3`)
	if code := exitCode(t, cmd); code != 3 {
		t.Fatalf("exit %d, want 3", code)
	}
	if took := time.Since(started); took > 2*time.Second {
		t.Fatalf("took %v to exit", took)
	}
}

func TestCommandNotFoundAndNoCommand(t *testing.T) {
	cmd, _, stderr := startInit(t, "--", "/no/such/program")
	if code := exitCode(t, cmd); code != 127 || !strings.Contains(stderr.String(), "cannot run") {
		t.Fatalf("exit %d, stderr %q", code, stderr.String())
	}
	cmd, _, stderr = startInit(t)
	if code := exitCode(t, cmd); code != 127 || !strings.Contains(stderr.String(), "neither an ENTRYPOINT nor a CMD") {
		t.Fatalf("exit %d, stderr %q", code, stderr.String())
	}
}

func TestNotDumpable(t *testing.T) {
	// What keeps the tenant's processes from writing to /proc/1/fd/1 past the limit. In a
	// container they have no capabilities; root here would have CAP_SYS_PTRACE, which passes.
	var launcher []string
	if os.Geteuid() == 0 {
		launcher = []string{"setpriv", "--bounding-set=-all", "--inh-caps=-all", "--"}
	}
	cmd, stdout, stderr := startInitAs(t, launcher, "--", "sh", "-c", `echo "parent $PPID"; if echo sneaked > /proc/$PPID/fd/1; then echo wrote; else echo refused; fi; echo mine > /proc/self/fd/1 && echo own-ok`)
	if code := exitCode(t, cmd); code != 0 {
		t.Fatalf("exit %d: %q", code, stderr.String())
	}
	out := stdout.String()
	if strings.Contains(out, "sneaked") || !strings.Contains(out, "refused") {
		t.Fatalf("the child wrote past svc-init: %q", out)
	}
	// The same probe on its own descriptors works: it is the parent's that are closed to it.
	if !strings.Contains(out, "own-ok") {
		t.Fatalf("the probe itself is broken: %q", out)
	}
}

// skipUnlessNoNewPrivsUnset skips a test of the no_new_privs flag when the test itself runs with
// it: the flag is read from the command's own /proc, and the same probe of the test's process must
// show it unset, or the probe could not tell.
func skipUnlessNoNewPrivsUnset(t *testing.T) {
	t.Helper()
	own, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(own), "NoNewPrivs:\t0") {
		t.Skip("the test itself runs with no_new_privs set: nothing to tell apart")
	}
}

func TestNoNewPrivilegesForTheCommand(t *testing.T) {
	skipUnlessNoNewPrivsUnset(t)
	cmd, stdout, stderr := startInit(t, "--", "grep", "NoNewPrivs", "/proc/self/status")
	if code := exitCode(t, cmd); code != 0 {
		t.Fatalf("exit %d: %q", code, stderr.String())
	}
	if strings.TrimSpace(stdout.String()) != "NoNewPrivs:\t1" {
		t.Fatalf("the command runs without no_new_privs: %q", stdout.String())
	}
}

// Started with the flag set already (as an engine asked for no-new-privileges starts it), svc-init
// does not set it again: the command has it all the same, and so do children started later (the
// agent's commands, from other threads of svc-init).
func TestNoNewPrivilegesSetAlreadyStaysSet(t *testing.T) {
	skipUnlessNoNewPrivsUnset(t)
	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Skip("setpriv (util-linux) is not installed")
	}
	cmd, stdout, stderr := startInitAs(t, []string{"setpriv", "--no-new-privs"}, "--", "grep", "NoNewPrivs", "/proc/self/status")
	if code := exitCode(t, cmd); code != 0 {
		t.Fatalf("exit %d: %q", code, stderr.String())
	}
	if strings.TrimSpace(stdout.String()) != "NoNewPrivs:\t1" {
		t.Fatalf("the command runs without no_new_privs: %q", stdout.String())
	}
}

func TestExecBecomesTheCommandWithNoNewPrivileges(t *testing.T) {
	skipUnlessNoNewPrivsUnset(t)
	// The command is svc-init's own process (its pid is the one the test started), with the flag.
	cmd, stdout, stderr := startInit(t, "--exec", "--", "sh", "-c", `echo "pid $$"; grep NoNewPrivs /proc/self/status`)
	if code := exitCode(t, cmd); code != 0 {
		t.Fatalf("exit %d: %q", code, stderr.String())
	}
	want := fmt.Sprintf("pid %d\nNoNewPrivs:\t1\n", cmd.Process.Pid)
	if stdout.String() != want {
		t.Fatalf("got %q, want %q", stdout.String(), want)
	}
	// A command that is not there: 127, said on stderr.
	cmd, _, stderr = startInit(t, "--exec", "--", "no-such-command-here")
	if code := exitCode(t, cmd); code != 127 || !strings.Contains(stderr.String(), "no-such-command-here") {
		t.Fatalf("exit %d: %q", code, stderr.String())
	}
}

func TestLimiterRefillsWithTime(t *testing.T) {
	now := time.Unix(0, 0)
	l := newLimiter(10, 1<<20, func() time.Time { return now })
	passed := 0
	for i := 0; i < 100; i++ {
		if ok, _ := l.admit(10); ok {
			passed++
		}
	}
	if passed != 20 {
		t.Fatalf("burst of %d, want 20", passed)
	}
	now = now.Add(time.Second)
	ok, notice := l.admit(10)
	if !ok || !strings.Contains(notice, "80 lines of output dropped") {
		t.Fatalf("after a second: %v %q", ok, notice)
	}
	if l.pendingNotice() != "" {
		t.Fatal("the notice is said once")
	}
	// Within the next second, drops are counted but not said until a second has passed.
	for i := 0; i < 20; i++ {
		l.admit(10)
	}
	now = now.Add(500 * time.Millisecond)
	if ok, notice := l.admit(10); !ok || notice != "" {
		t.Fatalf("half a second later: %v %q", ok, notice)
	}
	now = now.Add(600 * time.Millisecond)
	if ok, notice := l.admit(10); !ok || !strings.Contains(notice, "lines of output dropped") {
		t.Fatalf("a second after the last notice: %v %q", ok, notice)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatal("timed out")
}

// lockedBuffer is read by the test while the process's output is copied into it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
